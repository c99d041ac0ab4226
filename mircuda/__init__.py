"""mircuda: a Python gateway to NVIDIA CUDA with explicit devices, contexts, streams, memory pools,
NVRTC modules and typed kernel launches.

Importing mircuda never touches the driver; :meth:`Driver.initialize` does.
"""

from .compile import (CompileCacheStats, CompiledProgram, CompileOptions, Compiler, CudaSource, Module,
                      compile_program, cuda_kernel, nvrtc_version)
from .compile import CompilerConfig, OfflineCompiler, cuda_kernel_file, cuda_kernel_files
from .compile import LinkedSource, cuda_link, link_program
from .dtypes import bf16, bool_, e2m1, e4m3, f16, f32, f64, i8, i16, i32, i64, u8, u16, u32, u64
from .errors import (CaptureError, ClosedResourceError, CompileError, CompileWarning, ContractError, CudaError,
                     GraphStreamError, LaunchConfigError, LinkError, MircudaError, NvrtcError, UnsupportedPlatform,
                     UseAfterFree)
from .graph import Graph, KernelNode
from .launch import (ArgumentPacker, FunctionAttributes, In, InOut, KernelContract, LaunchConfig, Out,
                     TypedKernel, cuda_export)
from .launch import VECTOR_TYPES as _VECTOR_TYPES
from .launch import StructType, struct
from .matmul import CutlassError, CutlassNotFound, DenseMatmulPlan, DenseMatmulSpec, DenseVectorPlan, DenseVectorSpec
from .matmul import BlockwiseFp8Plan, BlockwiseFp8Quantizer, BlockwiseFp8Unavailable, BlockwiseFp8VectorPlan
from .matmul import BlockScaledFp4Plan, BlockScaledFp4VectorPlan, Fp4Quantizer, Fp4ScaleConverter
from .matmul import (GroupedFp4Operands, IndexedGroupedFp4Plan, IndexedGroupedFp4Spec, PairedVariableGroupedFp4Plan,
                     VariableGroupedFp4Plan, VariableGroupedFp4Spec, DecodeTuning)
from .memory import DeviceBuffer, MemoryPool, PinnedBuffer
from .memory import ArrayView, BorrowedDeviceBuffer, as_array_view, from_cuda_array_interface, from_dlpack
from .runtime import Context, Device, DeviceInfo, Driver, Event, ProfilerRange, Stream

__version__ = "0.1.0"

__all__ = [
    "ArgumentPacker", "CaptureError", "ClosedResourceError", "CompileCacheStats", "CompileError", "CompileWarning",
    "CompileOptions", "CompiledProgram", "Compiler", "Context", "ContractError", "CudaError", "CudaSource",
    "CutlassError", "CutlassNotFound", "DenseMatmulPlan", "DenseMatmulSpec", "DenseVectorPlan", "DenseVectorSpec",
    "Device", "DeviceBuffer", "DeviceInfo", "Driver", "Event", "FunctionAttributes", "Graph", "GraphStreamError", "In",
    "InOut", "KernelContract", "KernelNode", "LaunchConfig", "LaunchConfigError", "MemoryPool", "MircudaError", "Module",
    "NvrtcError", "Out", "PinnedBuffer", "ProfilerRange", "Stream", "TypedKernel", "UnsupportedPlatform",
    "UseAfterFree", "bf16", "bool_", "compile_program", "cuda_export", "cuda_kernel", "e2m1", "e4m3", "f16",
    "f32", "f64", "i8", "i16", "i32", "i64", "nvrtc_version", "u8", "u16", "u32", "u64",
]
__all__ += ["BlockwiseFp8Plan", "BlockwiseFp8Quantizer", "BlockwiseFp8Unavailable", "BlockwiseFp8VectorPlan"]
__all__ += ["CompilerConfig", "OfflineCompiler", "cuda_kernel_file", "cuda_kernel_files"]
__all__ += ["BlockScaledFp4Plan", "BlockScaledFp4VectorPlan", "Fp4Quantizer", "Fp4ScaleConverter"]
__all__ += ["GroupedFp4Operands", "IndexedGroupedFp4Plan", "IndexedGroupedFp4Spec", "PairedVariableGroupedFp4Plan",
            "VariableGroupedFp4Plan", "VariableGroupedFp4Spec", "DecodeTuning"]
__all__ += ["StructType", "struct"]
__all__ += ["LinkError", "LinkedSource", "cuda_link", "link_program"]

# CUDA's vector types as by-value parameter types: mc.float2, mc.float4, mc.int4, mc.half2, mc.bfloat162 ...
globals().update(_VECTOR_TYPES)
__all__ += sorted(_VECTOR_TYPES)
__all__ += ["ArrayView", "BorrowedDeviceBuffer", "as_array_view", "from_cuda_array_interface", "from_dlpack"]


def __getattr__(name: str) -> object:
    # `mc.numba_ext` imports numba and numba-cuda on first use; `import mircuda` alone does not.
    if name == "numba_ext":
        import importlib

        return importlib.import_module(".numba_ext", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
