"""mircuda: a Python gateway to NVIDIA CUDA with explicit devices, contexts, streams, memory pools,
NVRTC modules and typed kernel launches.

Importing mircuda never touches the driver; :meth:`Driver.initialize` does.
"""

from .compile import (CompileCacheStats, CompiledProgram, CompileOptions, Compiler, CudaSource, Module,
                      compile_program, cuda_kernel, nvrtc_version)
from .dtypes import bf16, bool_, e2m1, e4m3, f16, f32, f64, i8, i16, i32, i64, u8, u16, u32, u64
from .errors import (CaptureError, ClosedResourceError, CompileError, ContractError, CudaError,
                     GraphStreamError, LaunchConfigError, MircudaError, NvrtcError, UnsupportedPlatform,
                     UseAfterFree)
from .launch import (ArgumentPacker, FunctionAttributes, In, InOut, KernelContract, LaunchConfig, Out,
                     TypedKernel, cuda_export)
from .matmul import CutlassError, CutlassNotFound, DenseMatmulPlan, DenseMatmulSpec, DenseVectorPlan, DenseVectorSpec
from .memory import DeviceBuffer, MemoryPool, PinnedBuffer
from .runtime import Context, Device, DeviceInfo, Driver, Event, ProfilerRange, Stream

__version__ = "0.1.0"

__all__ = [
    "ArgumentPacker", "CaptureError", "ClosedResourceError", "CompileCacheStats", "CompileError",
    "CompileOptions", "CompiledProgram", "Compiler", "Context", "ContractError", "CudaError", "CudaSource",
    "CutlassError", "CutlassNotFound", "DenseMatmulPlan", "DenseMatmulSpec", "DenseVectorPlan", "DenseVectorSpec",
    "Device", "DeviceBuffer", "DeviceInfo", "Driver", "Event", "FunctionAttributes", "GraphStreamError", "In",
    "InOut", "KernelContract", "LaunchConfig", "LaunchConfigError", "MemoryPool", "MircudaError", "Module",
    "NvrtcError", "Out", "PinnedBuffer", "ProfilerRange", "Stream", "TypedKernel", "UnsupportedPlatform",
    "UseAfterFree", "bf16", "bool_", "compile_program", "cuda_export", "cuda_kernel", "e2m1", "e4m3", "f16",
    "f32", "f64", "i8", "i16", "i32", "i64", "nvrtc_version", "u8", "u16", "u32", "u64",
]
