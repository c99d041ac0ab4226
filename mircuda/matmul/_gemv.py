"""DenseMatmulPlan's decode kernel for M <= 16: a batched GEMV in CUDA C (``cuda_src/batched_gemv.cu``)
compiled by NVRTC for the context's device, one module per M (``-D MIRCUDA_GEMV_M``)."""

from __future__ import annotations

import functools
from importlib import resources
from typing import TYPE_CHECKING, Any

from ..compile import Compiler, CompileOptions, CudaSource
from ..dtypes import f32, i32
from ..launch import In, InOut, LaunchConfig, cuda_export
from ..memory import DeviceBuffer
from ._library import KernelInfo
from ._vector import blocks_per_sm, choose_vector_warps, kernel_executor, shared_compiler

if TYPE_CHECKING:
    from ..dtypes import DTypeInfo
    from ..launch import TypedKernel
    from ..runtime import Context, Stream
    from ._spec import DenseMatmulSpec

__all__ = ["BatchedGemv", "batched_gemv_source", "gemv_kernels", "gemv_symbol", "GEMV_FAMILY", "MAX_M",
           "ROWS_PER_BLOCK", "CHUNK"]

GEMV_FAMILY = "batched_gemv"
MAX_M = 16
"""Largest M the kernel takes (two n8 tiles of the mma; ``kM`` in ``batched_gemv.cu``)."""
ROWS_PER_BLOCK = 16
"""Weight rows per block: the mma's M (``kRows``)."""
CHUNK = 128
"""Columns one warp reads per pipeline step in the 16-byte variant: four 32-column mma steps (``kChunk``)."""
PAIRS = (("bf16", "bf16"), ("bf16", "f32"), ("f16", "f16"), ("f16", "f32"))


@functools.lru_cache(maxsize=1)
def batched_gemv_source() -> CudaSource:
    """``cuda_src/batched_gemv.cu`` as a :class:`CudaSource` (from the installed package)."""
    text = resources.files("mircuda").joinpath("cuda_src", "batched_gemv.cu").read_text()
    return CudaSource(text, "batched_gemv.cu")


def gemv_options(m: int) -> CompileOptions:
    """The NVRTC options of the module for ``m`` rows of A (1..16)."""
    return CompileOptions(defines={"MIRCUDA_GEMV_M": m})


def gemv_symbol(input: str, output: str, vector: bool) -> str:
    """``batched_gemv_<in>_<out>_v16`` (16-byte loads: K % 8 == 0, 16-byte aligned A and B) or ``_any``."""
    return f"batched_gemv_{input}_{output}_{'v16' if vector else 'any'}"


@functools.lru_cache(maxsize=1)
def gemv_kernels() -> tuple[KernelInfo, ...]:
    """The kernel-table entries of the batched GEMV, one per type pair (index -1: not the library's).

    ``tile`` is (weight rows per block, largest M, K columns per step); ``alignment_bytes`` is the
    least the family needs (2: the element-load variant); the plan requires 16 for the 16-byte one.
    """
    return tuple(KernelInfo(-1, f"{GEMV_FAMILY}_{i}_{o}", GEMV_FAMILY, i, o, (ROWS_PER_BLOCK, MAX_M, CHUNK), (1, 1),
                            0, 2, False, (), "nvrtc") for i, o in PAIRS)


class BatchedGemv:
    """The compiled kernel of one DenseMatmulPlan shape and its launch (the plan checks operands).

    Raises:
        CompileError: NVRTC rejected the kernel (a bug; the log is attached).
    """

    def __init__(self, context: Context, spec: DenseMatmulSpec, input: DTypeInfo, output: DTypeInfo,
                 compiler: Compiler | None = None) -> None:
        if compiler is None:
            compiler = shared_compiler(context)
        self.vector = spec.k % 8 == 0
        self.alignment = 16 if self.vector else 2
        self.symbol = gemv_symbol(input.name, output.name, self.vector)
        contract = cuda_export(self.symbol, c=InOut[DeviceBuffer[output.scalar_type]],
                               a=In[DeviceBuffer[input.scalar_type]], w=In[DeviceBuffer[input.scalar_type]],
                               alpha=f32, beta=f32, n=i32, k=i32)
        module = compiler.compile(batched_gemv_source(), gemv_options(spec.m))
        self.kernel: TypedKernel = module.kernel(contract)
        info = context.device_info()
        self.warps = choose_vector_warps(spec.n, spec.k, info.multiprocessor_count,
                                         lambda w: blocks_per_sm(context, self.kernel, w), rows=ROWS_PER_BLOCK,
                                         chunk=CHUNK)
        self.config = LaunchConfig((-(-spec.n // ROWS_PER_BLOCK),), (32 * self.warps,))
        self.config.check(info, self.kernel.attributes.max_threads_per_block)
        self._launch = self.kernel.launch
        self._spec = spec

    def launch(self, stream: Stream, a: DeviceBuffer[Any], b: DeviceBuffer[Any], c: DeviceBuffer[Any], alpha: float,
               beta: float) -> None:
        self._launch(stream, self.config, c, a, b, alpha, beta, self._spec.n, self._spec.k)

    def numba_executor(self) -> Any:
        """``execute(stream, a, b, c, alpha, beta) -> CUresult`` (see :func:`kernel_executor`)."""
        return kernel_executor(self.kernel.handle, self.config.grid[0], self.config.block[0], self._spec.n,
                               self._spec.k, self.alignment, swap=False)

    def describe(self) -> str:
        s = self._spec
        loads = ("16-byte loads (K % 8 == 0; A and B 16-byte aligned)" if self.vector
                 else f"element loads (K = {s.k} is not a multiple of 8)")
        return (f"kernel {self.symbol} (NVRTC, -D MIRCUDA_GEMV_M={s.m}; {self.config.grid[0]} blocks of "
                f"{ROWS_PER_BLOCK} weight rows x {self.warps} warp(s) splitting K; {loads}; mma.sync m16n8k16, "
                "FP32 accumulation)")
