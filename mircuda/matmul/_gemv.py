"""DenseMatmulPlan's decode kernel for M <= 16: a batched GEMV in CUDA C (``cuda_src/batched_gemv.cu``)
compiled by NVRTC for the context's device, one module per M (``-D MIRCUDA_GEMV_M``)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from ..compile import CompileOptions, Compiler, CudaSource
from ..launch import LaunchConfig
from ..memory import DeviceBuffer
from ._library import KernelInfo
from ._spec import Operand
from ._vector import (
    blocks_per_sm,
    choose_vector_warps,
    kernel_executor,
    package_source,
    shared_compiler,
    vector_contract,
)

if TYPE_CHECKING:
    from ..dtypes import DTypeInfo
    from ..launch import TypedKernel
    from ..runtime import Context, Stream
    from ._spec import DenseMatmulSpec

__all__ = ["BatchedGemv", "batched_gemv_source", "choose_gemv", "gemv_kernels", "gemv_options", "gemv_symbol",
           "unroll_candidates", "GEMV_FAMILY", "MAX_M", "ROWS_PER_BLOCK", "STEP", "CHUNK"]

GEMV_FAMILY = "batched_gemv"
MAX_M = 16
"""Largest M the kernel takes (two n8 tiles of the mma; ``kM`` in ``batched_gemv.cu``)."""
ROWS_PER_BLOCK = 16
"""Weight rows per block: the mma's M (``kRows``)."""
STEP = 32
"""Columns of one pair of mmas: four lanes x eight (``kStep``)."""
CHUNK = 128
"""Columns one warp reads per pipeline step in the 16-byte variant at the default unroll of four steps
(``kChunk``)."""
PAIRS = (("bf16", "bf16"), ("bf16", "f32"), ("f16", "f16"), ("f16", "f32"))


@functools.lru_cache(maxsize=1)
def batched_gemv_source() -> CudaSource:
    """``cuda_src/batched_gemv.cu`` as a :class:`CudaSource` (see :func:`package_source`)."""
    return package_source("batched_gemv.cu")


def gemv_options(m: int, unroll: int = 4) -> CompileOptions:
    """The NVRTC options of the module for ``m`` rows of A (1..16) and ``unroll`` 32-column steps per
    pipeline chunk (``MIRCUDA_GEMV_UNROLL``)."""
    return CompileOptions(defines={"MIRCUDA_GEMV_M": m, "MIRCUDA_GEMV_UNROLL": unroll})


def unroll_candidates(m: int) -> tuple[int, ...]:
    """Steps per chunk worth trying for ``m`` rows of A: four; for M > 8 also two. Two n8 tiles of
    activations double the registers of the activation buffers (162 registers at M = 16 and four
    steps on sm_90, 98 at two), and more resident warps can outweigh the shorter chunks."""
    return (4,) if m <= 8 else (4, 2)


def choose_gemv(candidates: list[tuple[int, int]]) -> tuple[int, int]:
    """The (unroll, warps) with the most weight bytes in flight per block (warps x unroll), then the
    most warps. Every candidate's warps come from :func:`choose_vector_warps`, so its grid fits in one
    wave wherever a split of K does (for large N each takes one warp per block and several waves). Measured on an H200 on 2026-11-29 (bf16,
    M = 12 and 16, N x K of 4096 x 4096, 14336 x 4096, 4096 x 14336, 6144 x 4096, every unroll and
    warp count): the rule picks the fastest of the two candidates on seven of the eight, and at
    M = 12, 14336 x 4096 (two steps, two warps: 37.6 µs) the other is 34.8 µs."""
    return max(candidates, key=lambda c: (c[0] * c[1], c[1]))


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
        self.input, self.output = input, output
        self.vector = spec.k % 8 == 0
        self.alignment = 16 if self.vector else 2
        self.symbol = gemv_symbol(input.name, output.name, self.vector)
        contract = vector_contract(self.symbol, output, input, ("c", "a", "w"))
        info = context.device_info()
        built: dict[int, tuple[TypedKernel, int]] = {}
        for unroll in unroll_candidates(spec.m):
            kernel = compiler.compile(batched_gemv_source(), gemv_options(spec.m, unroll)).kernel(contract)
            warps = choose_vector_warps(spec.n, spec.k, info.multiprocessor_count,
                                        functools.partial(blocks_per_sm, context, kernel), rows=ROWS_PER_BLOCK,
                                        chunk=STEP * unroll)
            built[unroll] = (kernel, warps)
        self.unroll, self.warps = choose_gemv([(u, w) for u, (_, w) in built.items()])
        self.kernel: TypedKernel = built[self.unroll][0]
        self.config = LaunchConfig((-(-spec.n // ROWS_PER_BLOCK),), (32 * self.warps,),
                                   programmatic_stream_serialization=info.supports_programmatic_launch)
        self.config.check(info, self.kernel.attributes.max_threads_per_block)
        self._launch = self.kernel.launch
        self._spec = spec

    def launch(self, stream: Stream, a: DeviceBuffer[Any], b: DeviceBuffer[Any], c: DeviceBuffer[Any], alpha: float,
               beta: float) -> None:
        self._launch(stream, self.config, c, a, b, alpha, beta, self._spec.n, self._spec.k)

    def operands(self) -> tuple[Operand, Operand, Operand]:
        """DenseMatmulPlan's checks of ``a`` ``[M, K]``, ``b`` ``[N, K]`` and ``c`` ``[M, N]`` for this
        kernel: A and B aligned for its loads (16 bytes for ``_v16``, the element size for ``_any``),
        C to its element size (scalar stores)."""
        m, n, k = self._spec.m, self._spec.n, self._spec.k
        loads = (f"kernel {self.symbol}: 16-byte loads of rows of {k} elements" if self.vector
                 else f"kernel {self.symbol}: element loads")
        align = max(self.alignment, self.input.itemsize)
        return (Operand("a", self.input, m * k, f"[M, K] = [{m}, {k}]", align, loads),
                Operand("b", self.input, n * k, f"[N, K] = [{n}, {k}]", align, loads),
                Operand("c", self.output, m * n, f"[M, N] = [{m}, {n}]", self.output.itemsize,
                        f"kernel {self.symbol}: {self.output.itemsize}-byte {self.output.name} stores"))

    def numba_executor(self, stream: int) -> Any:
        """``execute(stream, a, b, c, alpha, beta) -> CUresult`` for the plan's stream handle ``stream``
        (see :func:`kernel_executor`)."""
        return kernel_executor(self.kernel.handle, self.config.grid[0], self.config.block[0], self._spec.n,
                               self._spec.k, self.alignment, swap=False, stream=stream,
                               out_alignment=self.output.itemsize)

    def describe(self) -> str:
        s = self._spec
        loads = ("16-byte loads (K % 8 == 0; A and B 16-byte aligned)" if self.vector
                 else f"element loads (K = {s.k} is not a multiple of 8)")
        return (f"kernel {self.symbol} (NVRTC, -D MIRCUDA_GEMV_M={s.m} -D MIRCUDA_GEMV_UNROLL={self.unroll}: "
                f"{STEP * self.unroll}-column chunks; {self.config.grid[0]} blocks of "
                f"{ROWS_PER_BLOCK} weight rows x {self.warps} warp(s) splitting K; {loads}; mma.sync m16n8k16, "
                "FP32 accumulation"
                + ("; programmatic dependent launch" if self.config.programmatic_stream_serialization else "") + ")")
