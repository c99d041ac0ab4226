"""Compile: CUDA C sources, NVRTC options, the compiler and its module cache."""

from ._compiler import CompileCacheStats, Compiler, Module
from ._nvrtc import CompiledProgram, compile_program, nvrtc_version, supported_archs
from ._options import ALLOWED_EXTRA_FLAGS, CompileOptions
from ._source import CudaSource, ModuleSource, cuda_kernel

__all__ = ["ALLOWED_EXTRA_FLAGS", "CompileCacheStats", "CompileOptions", "CompiledProgram", "Compiler",
           "CudaSource", "Module", "ModuleSource", "compile_program", "cuda_kernel", "nvrtc_version", "supported_archs"]
