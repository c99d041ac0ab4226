"""Compile: CUDA C sources (inline, files, fragments), NVRTC options, the compilers and their caches."""

from ._compiler import Compiler, Module, OfflineCompiler
from ._config import CompileCacheStats, CompilerConfig
from ._files import cuda_kernel_file, cuda_kernel_files
from ._link import LinkedSource, cuda_link, link_program, nvjitlink_version
from ._nvrtc import CompiledProgram, nvrtc_version, supported_archs
from ._options import ALLOWED_EXTRA_FLAGS, CompileOptions
from ._resources import KernelResources, parse_ptxas_report
from ._source import CudaSource, ModuleSource, compile_program, cuda_kernel

__all__ = ["ALLOWED_EXTRA_FLAGS", "CompileCacheStats", "CompileOptions", "CompiledProgram", "Compiler",
           "CompilerConfig", "CudaSource", "KernelResources", "LinkedSource", "Module", "ModuleSource", "OfflineCompiler", "compile_program",
           "cuda_kernel", "cuda_kernel_file", "cuda_kernel_files", "cuda_link", "link_program", "nvjitlink_version",
           "nvrtc_version", "parse_ptxas_report",
           "supported_archs"]
