"""DenseMatmulPlan's decode kernel for M <= 32: a batched GEMV in CUDA C (``cuda_src/batched_gemv.cu``)
compiled by NVRTC for the context's device, one module per M and weight-row tiling (``-D MIRCUDA_GEMV_M``,
``-D MIRCUDA_GEMV_ROW_TILES``). The selection rules take it for M <= 16; the measured table
(``mircuda/matmul/tuned``) also for 16 < M <= 32 where it was faster than every CUTLASS kernel."""

from __future__ import annotations

import functools
from collections.abc import Callable
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
    static_weights_note,
    vector_contract,
)

if TYPE_CHECKING:
    from ..dtypes import DTypeInfo
    from ..launch import TypedKernel
    from ..runtime import Context, Stream
    from ._spec import DenseMatmulSpec

__all__ = ["BatchedGemv", "batched_gemv_source", "choose_gemv", "choose_launch", "gemv_kernels", "gemv_options", "gemv_symbol",
           "unroll_candidates", "GEMV_FAMILY", "MAX_M", "RULE_MAX_M", "ROWS_PER_BLOCK", "ROW_TILES", "STEP", "CHUNK"]

GEMV_FAMILY = "batched_gemv"
MAX_M = 32
"""Largest M the kernel takes (four n8 tiles of the mma; ``kM`` in ``batched_gemv.cu``). Measured on an H200
on 2026-12-01 (bf16, cold weights, the four shapes of ``matmul-profile``, every unroll, warp count and row
tiling): at M = 48 and 64 its best was 0.57-0.82x cuBLAS and slower than the CUTLASS kernels, at M = 24
and 32 0.85-1.09x and faster than every CUTLASS kernel then built on 4096x4096 and 6144x4096 (since the 64x32
swapped ping-pong kernel launched with programmatic dependent launch, the measured table names that kernel on
4096x4096 at both M: ``benchmarks/results/matmul_sweep_zeroing.json``)."""
RULE_MAX_M = 16
"""Largest M for which the selection rules (no measured table entry) take the batched GEMV."""
ROWS_PER_BLOCK = 16
"""Weight rows per 16-row tile: the mma's M (one tile per block unless ``row_tiles`` = 2)."""
ROW_TILES = (1, 2)
"""16-row weight tiles per warp (``MIRCUDA_GEMV_ROW_TILES``): two share each activation fragment between
32 weight rows, halving the activation reads, which outnumber the weight loads at M > 16 (measured at M =
32 on 14336x4096: 36.1 µs against 41.1 with one tile)."""
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


def gemv_options(m: int, unroll: int = 4, row_tiles: int = 1, static_weights: bool = False) -> CompileOptions:
    """The NVRTC options of the module for ``m`` rows of A (1..32), ``unroll`` 32-column steps per
    pipeline chunk (``MIRCUDA_GEMV_UNROLL``) and ``row_tiles`` 16-row weight tiles per warp
    (``MIRCUDA_GEMV_ROW_TILES``; 1 is the kernel's default and adds no define); ``static_weights`` adds
    ``MIRCUDA_PRELOAD_WEIGHTS=1`` (DenseMatmulPlan's ``static_weights``)."""
    defines = {"MIRCUDA_GEMV_M": m, "MIRCUDA_GEMV_UNROLL": unroll}
    if row_tiles != 1:
        defines["MIRCUDA_GEMV_ROW_TILES"] = row_tiles
    if static_weights:
        defines["MIRCUDA_PRELOAD_WEIGHTS"] = 1
    return CompileOptions(defines=defines)


def unroll_candidates(m: int, row_tiles: int = 1) -> tuple[int, ...]:
    """Steps per chunk worth trying for ``m`` rows of A: four; for M > 8 also two; for M > 16 also one.
    Two row tiles: four, two and one up to M = 16, two and one above. More n8 tiles of activations multiply
    the registers of the activation buffers (sm_90: 162 registers at M = 16 and four steps, 98 at two; 234
    at M = 32 and four, 78 at one; two row tiles at M = 16: 236 at four, 150 at two, 86 at one, none
    spilled), and more resident warps can outweigh the shorter chunks.

    Two row tiles with four steps at M = 16 were the fastest configuration of
    ``benchmarks/batched_gemv_knobs.py`` on the large shapes (H200, 2026-12-02, bf16, cold weights,
    ``benchmarks/results/batched_gemv_m8_16_row_tiles.json``): 28672x4096 59.12 µs (two warps) against 63.03
    for the best single tile, 14336x4096 32.22 against 33.73, 4096x14336 31.58 (eight warps) against 32.79;
    on 6144x4096 and 4096x4096 a single tile stayed faster (15.38 against 17.81, 11.62 against 12.14). Each
    block then reads each activation fragment once for 32 weight rows instead of 16: at M = 16 the
    activations of a step are as many bytes as its weights. The measured table decides which tiling a shape
    runs (``matmul-profile --sweep`` times both)."""
    if row_tiles == 2:
        return (4, 2, 1) if m <= RULE_MAX_M else (2, 1)
    return (4,) if m <= 8 else (4, 2) if m <= RULE_MAX_M else (4, 2, 1)


def choose_gemv(candidates: list[tuple[int, int, bool]]) -> tuple[int, int]:
    """The (unroll, warps) of ``(unroll, warps, one_wave)`` candidates: first those whose grid is resident in one
    wave (``one_wave``: ``ceil(N / rows)`` blocks fit in ``multiprocessors * blocks_per_sm(warps)``), then the most
    weight bytes in flight per block (warps x unroll), then the most warps. Every candidate's warps come from
    :func:`choose_vector_warps`, so its grid fits in one wave wherever a split of K does (for large N each takes one
    warp per block and several waves).

    Measured on an H200 on 2026-11-29 (bf16, M = 12 and 16, N x K of 4096 x 4096, 14336 x 4096, 4096 x 14336,
    6144 x 4096, every unroll and warp count; each of these grids fits in one wave): the bytes-in-flight order
    picks the fastest of the two candidates on seven of the eight, and at M = 12, 14336 x 4096 (two steps, two
    warps: 37.6 µs) the other is 34.8 µs. The one-wave preference: at M = 16 on 28672 x 4096 (the decoder layer's
    gate_up projection) four steps take 162 registers on sm_90 (12 resident one-warp blocks per SM), so the
    1792 blocks span 1.13 waves and the second wave runs 208 blocks on a nearly idle GPU; that projection took
    75.1 µs (3.13 TB/s) against 56.5 µs at M = 8, whose 124-register kernel holds the same grid in one wave
    (``decoder-layer-profile``, H200, 2026-12-01). Two steps (98 registers, 16 per SM: four sub-partitions of
    four 3328-register warps) hold it in 0.85 waves, the bytes in flight per SM of the 14336 x 4096 grid that took
    33.6 µs. No shape of the measured table changes (every table grid fits in one wave). On the H200 that
    projection now takes the table's M = 16 entry of the nearest shape, 14336x4096, which names two row tiles
    (:func:`unroll_candidates`): 60.46 µs in ``decoder-layer-profile`` (2026-12-02,
    ``benchmarks/results/decoder_layer_profile.json``), against 69.07 with one tile in that file's previous run
    (2026-12-01, commit 7a39d2d), and 66.58 with one tile and two steps earlier on 2026-12-02
    (``benchmarks/results/l2_bulk_prefetch_experiment.json``, its prefetch-off decoder-layer run)."""
    return max(candidates, key=lambda c: (c[2], c[0] * c[1], c[1]))[:2]


def choose_launch(spec: DenseMatmulSpec, row_tiles: int, multiprocessors: int,
                  resident: Callable[[int, int], int]) -> tuple[int, int]:
    """The (unroll, warps) the batched GEMV runs ``spec`` with: for each of :func:`unroll_candidates`, the warps of
    :func:`choose_vector_warps` and whether its grid of ``ceil(N / rows)`` blocks is resident in one wave, then
    :func:`choose_gemv`. ``resident(unroll, warps)``: resident blocks per SM of that module's kernel at
    ``32 * warps`` threads (the occupancy query; a model of it in the CPU tests)."""
    rows = ROWS_PER_BLOCK * row_tiles
    blocks = -(-spec.n // rows)
    candidates = []
    for unroll in unroll_candidates(spec.m, row_tiles):
        per_sm = functools.partial(resident, unroll)
        warps = choose_vector_warps(spec.n, spec.k, multiprocessors, per_sm, rows=rows, chunk=STEP * unroll)
        candidates.append((unroll, warps, blocks <= multiprocessors * per_sm(warps)))
    return choose_gemv(candidates)


def gemv_name(input: str, output: str, row_tiles: int = 1) -> str:
    """The kernel-table name: ``batched_gemv_<in>_<out>`` (16 weight rows per block) or
    ``batched_gemv_rows32_<in>_<out>`` (two 16-row tiles per warp)."""
    return f"{GEMV_FAMILY}_{'rows32_' if row_tiles == 2 else ''}{input}_{output}"


def gemv_symbol(input: str, output: str, vector: bool) -> str:
    """``batched_gemv_<in>_<out>_v16`` (16-byte loads: K % 8 == 0, 16-byte aligned A and B) or ``_any``."""
    return f"batched_gemv_{input}_{output}_{'v16' if vector else 'any'}"


@functools.lru_cache(maxsize=1)
def gemv_kernels() -> tuple[KernelInfo, ...]:
    """The kernel-table entries of the batched GEMV, two per type pair (16 and 32 weight rows per block;
    index -1: not the library's). The selection rules take the first of a pair.

    ``tile`` is (weight rows per block, largest M, K columns per step); ``alignment_bytes`` is the
    least the family needs (2: the element-load variant); the plan requires 16 for the 16-byte one.
    """
    return tuple(KernelInfo(-1, gemv_name(i, o, r), GEMV_FAMILY, i, o, (ROWS_PER_BLOCK * r, MAX_M, CHUNK), (1, 1),
                            0, 2, False, (), "nvrtc") for r in ROW_TILES for i, o in PAIRS)


class BatchedGemv:
    """The compiled kernel of one DenseMatmulPlan shape and its launch (the plan checks operands).

    Raises:
        CompileError: NVRTC rejected the kernel (a bug; the log is attached).
    """

    def __init__(self, context: Context, spec: DenseMatmulSpec, input: DTypeInfo, output: DTypeInfo,
                 compiler: Compiler | None = None, row_tiles: int = 1, static_weights: bool = False) -> None:
        if row_tiles not in ROW_TILES:
            raise ValueError(f"row_tiles: expected one of {ROW_TILES}, received {row_tiles!r}")  # internal: the table's
        if compiler is None:
            compiler = shared_compiler(context)
        self.input, self.output = input, output
        self.vector = spec.k % 8 == 0
        self.alignment = 16 if self.vector else 2
        self.symbol = gemv_symbol(input.name, output.name, self.vector)
        contract = vector_contract(self.symbol, output, input, ("c", "a", "w"))
        info = context.device_info()
        self.row_tiles = row_tiles
        rows = ROWS_PER_BLOCK * row_tiles
        self.static_weights = static_weights
        built = {unroll: compiler.compile(batched_gemv_source(),
                                          gemv_options(spec.m, unroll, row_tiles, static_weights)).kernel(contract)
                 for unroll in unroll_candidates(spec.m, row_tiles)}
        self.unroll, self.warps = choose_launch(spec, row_tiles, info.multiprocessor_count,
                                                lambda unroll, warps: blocks_per_sm(context, built[unroll], warps))
        self.kernel: TypedKernel = built[self.unroll]
        self.config = LaunchConfig((-(-spec.n // rows),), (32 * self.warps,),
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
        tiles = f" -D MIRCUDA_GEMV_ROW_TILES={self.row_tiles}" if self.row_tiles != 1 else ""
        tiles += " -D MIRCUDA_PRELOAD_WEIGHTS=1" if self.static_weights else ""
        pdl = self.config.programmatic_stream_serialization
        return (f"kernel {self.symbol} (NVRTC, -D MIRCUDA_GEMV_M={s.m} -D MIRCUDA_GEMV_UNROLL={self.unroll}{tiles}: "
                f"{STEP * self.unroll}-column chunks; {self.config.grid[0]} blocks of "
                f"{ROWS_PER_BLOCK * self.row_tiles} weight rows x {self.warps} warp(s) splitting K; {loads}; "
                "mma.sync m16n8k16, "
                "FP32 accumulation"
                + ("; programmatic dependent launch" if pdl else "")
                + static_weights_note(self.static_weights, pdl, self.vector, s.k, STEP * self.unroll, "chunk") + ")")
