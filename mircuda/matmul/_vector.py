"""DenseVectorPlan: the M = 1 matrix-vector product as a native CUDA kernel compiled by NVRTC."""

from __future__ import annotations

import functools
import re
import weakref
from collections.abc import Callable
from importlib import resources
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import numpy as np

from .. import _cuda
from .._repr import Description
from ..compile import CompileOptions, Compiler, CudaSource
from ..dtypes import bf16, dtype_info, f32, i32
from ..errors import ContractError, UnsupportedPlatform
from ..launch import KernelContract, LaunchConfig, Param
from ..memory import DeviceBuffer
from ._library import KernelInfo
from ._spec import (
    DenseVectorSpec,
    EngineViews,
    Operand,
    PlanBase,
    check_disjoint,
    check_operand,
    check_scalar,
    int_knob,
    plan_stream,
    resolve_dtypes,
)

if TYPE_CHECKING:
    from ..dtypes import DTypeInfo
    from ..launch import TypedKernel
    from ..runtime import Context, Stream

__all__ = ["DenseVectorPlan", "VectorKernel", "choose_dense_vector", "choose_vector_warps", "dense_vector_rows", "dense_vector_source",
           "blocks_per_sm", "kernel_executor", "package_source", "plan_compiler", "shared_compiler", "vector_kernels", "vector_options",
           "takes_two_chunks", "ROW_CHOICES", "MAX_WARPS", "VECTOR_FAMILY"]

T = TypeVar("T")

VECTOR_FAMILY = "dense_vector"
"""The kernel-table family of the dense vector kernel (DenseMatmulPlan's kernel for M = 1)."""
ROW_CHOICES = (16, 8)
"""Output rows per block (and per warp) the kernel compiles for (``DENSE_VECTOR_ROWS``), in the order
:func:`choose_dense_vector` tries them."""
MAX_WARPS = 8
"""Most warps per block splitting K (``kMaxWarps``)."""
CHUNK = 256
"""Columns one warp reads per step in the vector variant: 32 lanes x 8 elements."""
TARGET_WARPS_PER_SM = 16
"""Resident warps per SM the split of K aims at: enough 16-byte loads in flight to saturate HBM."""
WIDE_MIN_WARPS = 4
"""Least split of K for which 16 rows per block beat 8 (see :func:`choose_dense_vector`)."""
WIDE_MIN_SM_SHARE = 0.75
"""Least share of the SMs that 16-row blocks must cover: halving the blocks of a small N leaves SMs
idle (see :func:`choose_dense_vector`)."""
TWO_CHUNK_WARPS = 4
"""Warps per block of the two-chunk form (see :func:`takes_two_chunks`)."""
TWO_CHUNK_BLOCKS = (3.5, 6.0)
"""The range of 8-row blocks per SM, ``ceil(N / 8) / multiprocessors``, where :func:`takes_two_chunks`
takes the two-chunk form: the measured shapes (N = 4096 and 6144 on 132 SMs: 3.9 and 5.8) with a margin,
not N = 14336 (13.6), where it measured no faster."""


def _takes_16_rows(n: int, warps: int, multiprocessors: int, blocks_per_sm: Callable[[int, int], int]) -> bool:
    """The rule of :func:`choose_dense_vector` for a given split of K: at least ``WIDE_MIN_WARPS``
    warps, the ``ceil(N / 16)`` blocks resident in one wave and covering ``WIDE_MIN_SM_SHARE`` of the SMs."""
    groups = -(-n // 16)
    return (warps >= WIDE_MIN_WARPS and groups >= WIDE_MIN_SM_SHARE * multiprocessors
            and groups <= multiprocessors * blocks_per_sm(16, warps))


_LOCAL_INCLUDE = re.compile(r'^#include "([A-Za-z0-9_]+\.cuh)"$', re.MULTILINE)


def package_source(filename: str) -> CudaSource:
    """``mircuda/cuda_src/<filename>`` (from the installed package) as one translation unit: each
    ``#include "x.cuh"`` of that folder is replaced by the header's text (NVRTC has no include path
    to the package; nvcc finds the headers beside the file)."""
    folder = resources.files("mircuda").joinpath("cuda_src")
    text = _LOCAL_INCLUDE.sub(lambda m: folder.joinpath(m.group(1)).read_text(), folder.joinpath(filename).read_text())
    return CudaSource(text, filename)


@functools.lru_cache(maxsize=1)
def dense_vector_source() -> CudaSource:
    """``cuda_src/dense_vector.cu`` as a :class:`CudaSource` (see :func:`package_source`)."""
    return package_source("dense_vector.cu")


def kernel_symbol(input_name: str, output_name: str, vector: bool) -> str:
    """The kernel for one dtype pair: ``dense_vector_<in>_<out>_v16`` (16-byte loads) or ``_any``."""
    return f"dense_vector_{input_name}_{output_name}_{'v16' if vector else 'any'}"


def vector_options(rows: int, static_weights: bool = False, unroll: int = 1) -> CompileOptions:
    """The NVRTC options of the kernel module for ``rows`` output rows per block (8 or 16); with
    ``static_weights`` also ``MIRCUDA_PRELOAD_WEIGHTS=1`` (:class:`DenseVectorPlan`'s ``static_weights``);
    ``unroll=2``: the two-chunk form of :func:`takes_two_chunks` (``DENSE_VECTOR_UNROLL=2``,
    ``DENSE_VECTOR_MIN_BLOCKS=1``, ``MIRCUDA_PDL_TRIGGER_LATE=0``)."""
    defines = {"DENSE_VECTOR_ROWS": rows}
    if unroll == 2:
        defines.update(DENSE_VECTOR_UNROLL=2, DENSE_VECTOR_MIN_BLOCKS=1, MIRCUDA_PDL_TRIGGER_LATE=0)
    if static_weights:
        defines["MIRCUDA_PRELOAD_WEIGHTS"] = 1
    return CompileOptions(defines=defines)


def check_static_weights(value: Any) -> bool:
    """``static_weights`` checked: ``True`` or ``False``, or a ``numpy.bool_`` (what a comparison of CuPy or
    NumPy values gives), returned as a Python bool.

    Raises:
        ContractError: naming ``static_weights``, for anything else (1, None, a string: no truthiness).
    """
    if isinstance(value, np.bool_):
        return bool(value)
    if not isinstance(value, bool):
        raise ContractError("static_weights", "True or False (a bool or numpy.bool_)", repr(value))
    return value


def choose_dense_vector(n: int, k: int, multiprocessors: int, blocks_per_sm: Callable[[int, int], int]) -> tuple[int, int]:
    """DenseVectorPlan's (rows per block, warps per block): 16 rows when their grid still fits one wave
    with at least ``WIDE_MIN_WARPS`` warps per block splitting K and its ``ceil(N / 16)`` blocks cover
    at least ``WIDE_MIN_SM_SHARE`` of the SMs, else 8 rows; the warps are :func:`choose_vector_warps`'s
    for that row count.

    Args:
        blocks_per_sm: resident blocks per SM of the ``rows``-row kernel at ``warps`` warps per block,
            called as ``blocks_per_sm(rows, warps)`` (the occupancy query; 16 rows take 238 registers
            on sm_90, so half the warps of 8 rows fit).

    Measured on an H200 on 2026-11-29 (bf16, cold weights, back to back, every rows/warps/trigger
    combination): the rule's pick was the fastest or within 2 % of it on all seven shapes tried:
    4096 x 4096 (16 rows, 4 warps: 10.1 µs, 3.3 TB/s), 2048 x 8192 (16, 8: 10.1), 4096 x 14336
    (16, 4: 28.0), 8192 x 8192 (8, 2: 31.8), 6144 x 4096 (8, 2: 14.1), 14336 x 4096 (8, 1: 28.2) and
    28672 x 4096 (8, 1: 55.2). For small N (8 warps either way) 16 rows were slower up to N = 1024,
    where their 64 blocks leave half of the 132 SMs idle (K = 14336: 12.2 instead of 10.1 µs; N = 64:
    10.5 instead of 7.0), and faster from N = 2048 (128 blocks; K = 4096: 6.6 instead of 7.0). That sweep had
    one chunk per step only: on cc 9.x DenseVectorPlan's default is :func:`takes_two_chunks`'s form where that
    applies (on the H200 4096 x 4096, 6144 x 4096 and 4096 x 14336 above), and this rule elsewhere.
    """
    wide = choose_vector_warps(n, k, multiprocessors, lambda w: blocks_per_sm(16, w), rows=16)
    if _takes_16_rows(n, wide, multiprocessors, blocks_per_sm):
        return 16, wide
    return 8, choose_vector_warps(n, k, multiprocessors, lambda w: blocks_per_sm(8, w), rows=8)


def takes_two_chunks(n: int, k: int, multiprocessors: int, compute_capability: tuple[int, int], vector: bool) -> bool:
    """Whether DenseVectorPlan's default is the two-chunk form of the kernel: 8 rows per block,
    ``TWO_CHUNK_WARPS`` warps, two 256-column chunks per pipeline step (``DENSE_VECTOR_UNROLL=2``: twice the
    16-byte loads in flight per lane), one block's worth of registers (``DENSE_VECTOR_MIN_BLOCKS=1``: 254 on
    sm_90, no spills) and the early trigger of programmatic dependent launch (``MIRCUDA_PDL_TRIGGER_LATE=0``).

    Rule: compute capability 9.x, 16-byte loads (K % 8 == 0), K of at least two steps per warp
    (``2 * TWO_CHUNK_WARPS * 2 * CHUNK`` = 4096 columns), and ``ceil(N / 8)`` blocks between
    ``TWO_CHUNK_BLOCKS`` times the SMs. Otherwise :func:`choose_dense_vector`'s forms.

    Measured on an H200 (132 SMs) on 2026-12-02, bf16, cold weights, back to back
    (``benchmarks/results/dense_vector_two_chunks.json``). ``dense-vector-profile --sweep``, µs, the previous
    default's sweep row -> the plan's row (this form) in one run: 4096 x 4096 10.20 -> 9.81, 6144 x 4096
    14.17 -> 13.79, 4096 x 14336 28.61 -> 27.61; at 14336 x 4096 (1792 blocks, outside the rule) 28.50 -> 29.99
    with four warps (the form's sweep row). With the weights loaded before ``griddepcontrol.wait``
    (``static_weights=True``) an earlier sweep gave (the plan's row -> the form's sweep row) 9.51 -> 9.49,
    14.00 -> 13.42 and 27.31 -> 27.35. The sweep of 2026-11-30 (``dense_vector_sweep.json``) already had it
    first at 4096 x 4096 (10.23 -> 9.81). In the decoder layer at M = 1 (one process, alternately) the graph
    measured 114.18 -> 114.02 µs and the four direct executes 112.30 -> 111.63. Other compute capabilities
    are not measured.
    """
    if compute_capability[0] != 9 or not vector or k < 2 * TWO_CHUNK_WARPS * 2 * CHUNK:
        return False
    per_sm = -(-n // 8) / multiprocessors
    return TWO_CHUNK_BLOCKS[0] <= per_sm <= TWO_CHUNK_BLOCKS[1]


def dense_vector_rows(n: int, warps: int, multiprocessors: int, blocks_per_sm: Callable[[int, int], int]) -> int:
    """Rows per block for a split of K the caller fixed (``DenseVectorPlan(warps=...)`` without
    ``rows``), by :func:`choose_dense_vector`'s rule: 16 when ``warps >= WIDE_MIN_WARPS`` and the
    16-row grid (``ceil(N / 16)`` blocks of ``warps`` warps) is resident in one wave and covers at
    least ``WIDE_MIN_SM_SHARE`` of the SMs, else 8. For the warps :func:`choose_dense_vector` picks,
    it gives the rows it picks.
    """
    if _takes_16_rows(n, warps, multiprocessors, blocks_per_sm):
        return 16
    return 8


def choose_vector_warps(n: int, k: int, multiprocessors: int, blocks_per_sm: Callable[[int], int], *,
                        rows: int = 8, chunk: int = CHUNK) -> int:
    """Warps per block (1, 2, 4 or 8) that split K, for N rows in blocks of ``rows``.

    The largest count such that every block is resident at once (one wave: ``ceil(N / rows)`` blocks
    fit in ``multiprocessors * blocks_per_sm(warps)``), the grid holds at most ``TARGET_WARPS_PER_SM``
    warps per SM beyond that, and each warp still reads at least two ``chunk``-column chunks. One warp
    when blocks of two warps do not fit in a wave (large N: there are enough blocks already) or K is shorter
    than four chunks (at any N).
    DenseVectorPlan: 8 or 16 rows, 256-column chunks; the batched GEMV of DenseMatmulPlan: 16 or 32 rows
    (one or two row tiles), 32 columns per unrolled step.

    Args:
        blocks_per_sm: resident blocks per SM for a block of ``warps`` warps (the occupancy query).
    """
    groups = -(-n // rows)
    best = 1
    warps = 2
    while warps <= MAX_WARPS:
        if k < 2 * warps * chunk:
            break
        if groups > multiprocessors * blocks_per_sm(warps):
            break
        if groups * warps > multiprocessors * TARGET_WARPS_PER_SM and best > 1:
            break
        best = warps
        warps *= 2
    return best


def vector_contract(symbol: str, output: DTypeInfo, input: DTypeInfo, buffers: tuple[str, str, str]) -> KernelContract:
    """The contract ``cuda_export(symbol, <o>=InOut[DeviceBuffer[output]], <a>=In[DeviceBuffer[input]],
    <b>=In[DeviceBuffer[input]], alpha=f32, beta=f32, n=i32, k=i32)`` of the vector kernels, with
    ``buffers = (o, a, b)``, built from Params: the element types are run-time values here."""
    o, a, b = buffers
    scalars = (("alpha", f32), ("beta", f32), ("n", i32), ("k", i32))
    return KernelContract(symbol, (Param(o, "buffer", output, "inout"), Param(a, "buffer", input, "in"),
                                   Param(b, "buffer", input, "in"),
                                   *(Param(name, "scalar", dtype_info(t)) for name, t in scalars)))


def blocks_per_sm(context: Context, kernel: TypedKernel, warps: int) -> int:
    """Resident blocks per SM of ``kernel`` at ``32 * warps`` threads (``cuOccupancyMaxActiveBlocksPerMultiprocessor``)."""
    context._make_current()
    return int(_cuda.call("cuOccupancyMaxActiveBlocksPerMultiprocessor", kernel._cu, 32 * warps, 0))


INVALID_VALUE = 1
"""``CUDA_ERROR_INVALID_VALUE``: what :func:`kernel_executor` returns for a misaligned address."""
INVALID_HANDLE = 400
"""``CUDA_ERROR_INVALID_HANDLE``: what :func:`kernel_executor` returns for a stream that is not the plan's."""


def kernel_executor(function: int, grid: int, block: int, n: int, k: int, alignment: int, swap: bool,
                    launch_function: Any = None, *, stream: int, out_alignment: int) -> Any:
    """An ``@numba.njit`` function ``execute(stream, p, q, out, alpha, beta) -> CUresult`` launching one
    of the dense NVRTC kernels, whose parameters are ``(out, ptr, ptr, f32 alpha, f32 beta, i32 n,
    i32 k)`` (``dense_vector.cu``, ``batched_gemv.cu``): the pointers go in as ``(out, q, p)`` when
    ``swap`` (DenseVectorPlan: ``x, w`` -> ``y, w, x``), else ``(out, p, q)``.

    Each call packs the parameters into a block of its own (C ABI offsets 0, 8, 16, 24, 28, 32, 36)
    and calls ``cuLaunchKernel`` through :func:`mircuda.numba_ext.driver_function` (or
    ``launch_function``, a stand-in with its prototype): reentrant, no interpreter. The stream must be
    ``stream`` (the plan's ``Stream.handle``), else it returns ``CUDA_ERROR_INVALID_HANDLE``
    (``INVALID_HANDLE``); ``p`` and ``q`` must be multiples of ``alignment`` and ``out`` of
    ``out_alignment`` (the output's element size), else it returns ``CUDA_ERROR_INVALID_VALUE``
    (``INVALID_VALUE``); either way it launches nothing. Lengths are not checked on this path; the
    plan's context must be current.
    The launch is a plain one (no programmatic dependent launch: the kernels are correct either way).
    """
    import numba
    import numpy as np

    from ..numba_ext import driver_function

    launch = driver_function("cuLaunchKernel") if launch_function is None else launch_function
    u64, f32, i32 = numba.uint64, np.float32, np.int32
    mask = numba.uint64(max(alignment, 1) - 1)
    out_mask = numba.uint64(max(out_alignment, 1) - 1)
    bound = numba.uint64(stream)

    @numba.njit(cache=False)
    def execute(stream: int, p: int, q: int, out: int, alpha: float, beta: float) -> int:
        if u64(stream) != bound:
            return INVALID_HANDLE
        pp, pq, po = u64(p), u64(q), u64(out)
        if (pp | pq) & mask or po & out_mask:
            return INVALID_VALUE
        values = np.empty(5, np.uint64)
        values[0] = po
        values[1] = pq if swap else pp
        values[2] = pp if swap else pq
        floats = values.view(f32)
        floats[6] = alpha
        floats[7] = beta
        ints = values.view(i32)
        ints[8] = n
        ints[9] = k
        base = u64(values.ctypes.data)
        pointers = np.empty(7, np.uint64)
        for i, offset in enumerate((0, 8, 16, 24, 28, 32, 36)):
            pointers[i] = base + u64(offset)
        return launch(function, grid, 1, 1, block, 1, 1, 0, u64(stream), u64(pointers.ctypes.data), 0)

    return execute


_COMPILERS: weakref.WeakKeyDictionary[Any, Compiler] = weakref.WeakKeyDictionary()


def shared_compiler(context: Context) -> Compiler:
    """One Compiler (and module cache) per context for the plans that need NVRTC kernels."""
    compiler = _COMPILERS.get(context)
    if compiler is None:
        compiler = _COMPILERS.setdefault(context, Compiler(context))
    return compiler


def plan_compiler(compiler: Any, context: Context) -> Compiler:
    """A plan's ``compiler=`` argument: ``None`` gives :func:`shared_compiler`; anything else must be
    a Compiler of ``context``.

    Raises:
        ContractError: ``compiler`` is neither.
    """
    if compiler is None:
        return shared_compiler(context)
    if not isinstance(compiler, Compiler) or compiler.context is not context:
        raise ContractError("compiler", f"None or a Compiler of {context!r}", repr(compiler))
    return compiler


@functools.lru_cache(maxsize=1)
def vector_kernels() -> tuple[KernelInfo, ...]:
    """The kernel-table entries of the dense vector kernel, one per type pair (index -1: not the
    library's), for DenseMatmulPlan at M = 1. ``tile`` is (most weight rows per block, M, K columns per
    warp step); ``alignment_bytes`` is the least it needs (2: the element-load variant)."""
    pairs = (("bf16", "bf16"), ("bf16", "f32"), ("f16", "f16"), ("f16", "f32"))
    return tuple(KernelInfo(-1, f"{VECTOR_FAMILY}_{i}_{o}", VECTOR_FAMILY, i, o, (max(ROW_CHOICES), 1, CHUNK), (1, 1),
                            0, 2, False, (), "nvrtc") for i, o in pairs)


def check_vector_knobs(rows: Any, warps: Any) -> None:
    """``rows`` (None, 8 or 16) and ``warps`` (None, 1, 2, 4 or 8) of the dense vector kernel, checked before the
    device is queried or anything is compiled.

    Raises:
        ContractError: naming ``rows`` or ``warps``.
    """
    if rows is not None and (type(rows) is not int or rows not in ROW_CHOICES):
        raise ContractError("rows", "None, 8 or 16 (output rows per block)", repr(rows))
    if warps is not None and (type(warps) is not int or warps not in (1, 2, 4, 8)):
        raise ContractError("warps", "None, 1, 2, 4 or 8 (warps per block splitting K)", repr(warps))


class VectorKernel:
    """The dense vector kernel compiled for one N x K and dtype pair, with its rows, warps and launch
    configuration: the engine of DenseVectorPlan and of DenseMatmulPlan at M = 1 (the plans check
    operands). ``rows`` and ``warps`` (both optional) are checked before anything is compiled; the
    16-row module is compiled when its occupancy is needed or it is chosen, the 8-row one when chosen, and
    where :func:`takes_two_chunks` gives the default (neither given) only the two-chunk module, without an
    occupancy query.

    Raises:
        ContractError: ``rows`` or ``warps`` is not one of the allowed values.
        CompileError: NVRTC rejected the kernel (a bug; the log is attached).
    """

    def __init__(self, context: Context, n: int, k: int, input: DTypeInfo, output: DTypeInfo,
                 compiler: Compiler | None = None, *, rows: int | None = None, warps: int | None = None,
                 static_weights: bool = False) -> None:
        check_vector_knobs(rows, warps)
        if compiler is None:
            compiler = shared_compiler(context)
        self.n, self.k = n, k
        self.input, self.output = input, output
        self.vector = k % 8 == 0
        self.alignment = 16 if self.vector else 2
        self.symbol = kernel_symbol(input.name, output.name, self.vector)
        contract = vector_contract(self.symbol, output, input, ("y", "w", "x"))
        modules: dict[tuple[int, int], TypedKernel] = {}

        def kernel(r: int, unroll: int = 1) -> TypedKernel:
            if (r, unroll) not in modules:
                modules[r, unroll] = compiler.compile(dense_vector_source(),
                                                      vector_options(r, static_weights, unroll)).kernel(contract)
            return modules[r, unroll]

        info = context.device_info()
        occupancy = lambda r, w: blocks_per_sm(context, kernel(r), w)  # noqa: E731
        self.unroll = 1
        if rows is None and warps is None and takes_two_chunks(n, k, info.multiprocessor_count,
                                                               info.compute_capability, self.vector):
            rows, chosen, self.unroll = 8, TWO_CHUNK_WARPS, 2
        elif rows is None:
            if warps is None:
                rows, chosen = choose_dense_vector(n, k, info.multiprocessor_count, occupancy)
            else:
                # A fixed split of K keeps choose_dense_vector's rule for the rows: 16 only with at least
                # WIDE_MIN_WARPS warps in one wave (where it measured them faster than 8), not 16 x 1.
                rows, chosen = dense_vector_rows(n, warps, info.multiprocessor_count, occupancy), warps
        elif warps is None:
            chosen = choose_vector_warps(n, k, info.multiprocessor_count, lambda w: occupancy(rows, w), rows=rows)
        else:
            chosen = warps
        self.rows = rows
        self.warps = chosen
        self._multiprocessors = info.multiprocessor_count
        self.static_weights = static_weights
        self.kernel: TypedKernel = kernel(rows, self.unroll)
        # On cc >= 9.0 the next kernel's ramp overlaps this one's tail (see cuda_src/dense_vector.cu).
        self.config = LaunchConfig((-(-n // rows),), (32 * self.warps,),
                                   programmatic_stream_serialization=info.supports_programmatic_launch)
        self.config.check(info, self.kernel.attributes.max_threads_per_block)
        self._launch = self.kernel.launch

    def launch(self, stream: Stream, x: DeviceBuffer[Any], w: DeviceBuffer[Any], y: DeviceBuffer[Any], alpha: float,
               beta: float) -> None:
        self._launch(stream, self.config, y, w, x, alpha, beta, self.n, self.k)

    def operands(self, x: str, w: str, y: str, m: int = 1) -> tuple[Operand, Operand, Operand]:
        """The plan's checks of ``x`` (``[M, K]``; M = 1 for DenseVectorPlan), ``w`` (``[N, K]``) and
        ``y`` (``[M, N]``), under the names the plan gives them: x and W aligned for this kernel's loads
        (16 bytes for ``_v16``, the element size for ``_any``), y to its element size (scalar stores)."""
        loads = (f"kernel {self.symbol}: 16-byte loads of rows of {self.k} elements" if self.vector
                 else f"kernel {self.symbol}: element loads")
        store = f"kernel {self.symbol}: {self.output.itemsize}-byte {self.output.name} stores"
        xs = f"[K] = [{self.k}]" if m == 1 and x == "x" else f"[M, K] = [{m}, {self.k}]"
        ys = f"[N] = [{self.n}]" if m == 1 and y == "y" else f"[M, N] = [{m}, {self.n}]"
        return (Operand(x, self.input, m * self.k, xs, max(self.alignment, self.input.itemsize), loads),
                Operand(w, self.input, self.n * self.k, f"[N, K] = [{self.n}, {self.k}]",
                        max(self.alignment, self.input.itemsize), loads),
                Operand(y, self.output, m * self.n, ys, self.output.itemsize, store))

    def numba_executor(self, stream: int) -> Any:
        """``execute(stream, x, w, y, alpha, beta) -> CUresult`` for the plan's stream handle ``stream``
        (see :func:`kernel_executor`)."""
        return kernel_executor(self.kernel.handle, self.config.grid[0], self.config.block[0], self.n, self.k,
                               self.alignment, swap=True, stream=stream, out_alignment=self.output.itemsize)

    def describe(self) -> str:
        loads = ("16-byte vector loads (K % 8 == 0)" if self.vector
                 else f"one element per lane per row (K = {self.k} is not a multiple of 8)")
        pdl = self.config.programmatic_stream_serialization
        preload = " -D MIRCUDA_PRELOAD_WEIGHTS=1" if self.static_weights else ""
        two = (" -D DENSE_VECTOR_UNROLL=2 -D DENSE_VECTOR_MIN_BLOCKS=1 -D MIRCUDA_PDL_TRIGGER_LATE=0"
               if self.unroll == 2 else "")
        step = (f"two {CHUNK}-column chunks per warp and pipeline step (takes_two_chunks: "
                f"{-(-self.n // 8)} blocks of 8 rows on {self._multiprocessors} SMs), early trigger"
                if self.unroll == 2 else "")
        return (f"kernel {self.symbol} (NVRTC, -D DENSE_VECTOR_ROWS={self.rows}{two}{preload}), {loads}; "
                f"{self.config.grid[0]} blocks x {self.warps} warp(s) ({self.rows} rows per block, K split over "
                f"{self.warps} warp(s)"
                + (f"; {step}" if step else "") + "), FP32 accumulation"
                + ("; programmatic dependent launch (overlaps the previous kernel's tail)" if pdl else "")
                + static_weights_note(self.static_weights, pdl, self.vector, self.k, CHUNK * self.unroll))


def static_weights_note(static_weights: bool, pdl: bool, vector: bool, k: int, columns: int,
                        unit: str = "step") -> str:
    """What ``static_weights=True`` does for a decode kernel, for its ``describe()`` ("" when False): the
    kernel loads its first ``unit`` (``columns`` columns of K per warp) early only with programmatic
    dependent launch, 16-byte loads and K of at least one whole ``unit``."""
    if not static_weights:
        return ""
    if not pdl:
        return "; static weights: no effect (no programmatic dependent launch below compute capability 9.0)"
    if not vector:
        return "; static weights: no effect (the element-load variant loads nothing early)"
    if k < columns:
        return f"; static weights: no effect (K = {k}: no warp has a whole {columns}-column {unit} to load early)"
    return f"; static weights: the first {unit}'s weights are loaded before griddepcontrol.wait"


class DenseVectorPlan(EngineViews, PlanBase, Generic[T]):
    """``y[N] = alpha * W[N, K] . x[K] + beta * y[N]``: the explicit M = 1 plan for bandwidth-bound
    projections (decode), as a CUDA C kernel (``cuda_src/dense_vector.cu``) compiled by NVRTC for the
    context's device (any compute capability >= 8.0).

    Args:
        context: the context the plan runs in.
        stream: a stream of ``context``: the plan is bound to it, and :meth:`execute` (and
            :attr:`numba_execute`) take no other (see "Streams" below).
        spec: ``DenseVectorSpec(n, k)``.
        input: ``mc.bf16`` or ``mc.f16``: the type of ``x`` and ``W``.
        output: ``None`` (the input type) or ``mc.f32``: the type of ``y``.
        compiler: the Compiler to build the kernel with (default: one shared per context).
        rows: output rows per block and warp (8 or 16); warps: warps per block splitting K (1, 2, 4 or
            8). By default both come from :func:`choose_dense_vector`, or, where :func:`takes_two_chunks`
            says so (compute capability 9.x, 3.5 to 6 blocks of 8 rows per SM: e.g. N = 4096 or 6144 on an
            H200; K % 8 == 0 and K >= 4096), the kernel's two-chunk form (8 rows, 4 warps, two 256-column chunks
            per pipeline step, early trigger; the repr adds "two chunks per step");
            a given ``rows`` alone gets :func:`choose_vector_warps`'s split, a given ``warps`` alone
            :func:`dense_vector_rows`'s rows (16 only with 4 or more warps whose 16-row grid fits one wave),
            both in the one-chunk form. A numpy integer is taken as the int; both are checked before the device
            is queried.
        static_weights: ``True`` promises that no kernel which may still be running on the plan's stream
            when this plan's kernel starts writes ``W`` (inference: weights written once, before a
            synchronization of the stream, or on another stream that this one waits on through an event, or
            followed by at least one kernel launched without programmatic dependent launch before this
            plan; the writer itself right before the plan is not enough: this kernel may start as its blocks
            exit, before its writes are flushed). That can be
            more than the previous kernel: one launched with programmatic dependent launch (as every
            mircuda decode plan is on cc >= 9.0) lets this kernel start before its own wait returns, while
            the kernel before it may still run; a writer of ``W`` two such launches back breaks the promise.
            On compute capability >= 9.0 the kernel then loads the first step of its weights into registers
            before ``griddepcontrol.wait``, while the previous kernel of the stream finishes (``x`` and ``y``
            still wait; ``-D MIRCUDA_PRELOAD_WEIGHTS=1``). Breaking the promise reads stale weights. Default
            ``False``; a ``numpy.bool_`` is taken as a bool. No effect below cc 9.0, for K % 8 != 0 or for
            K < 256 (no warp has a whole first step; ``describe()`` says which), nor through
            :attr:`numba_execute` (a plain launch without programmatic dependent launch). Measured on an H200
            (2026-12-02, bf16, cold weights, back to back, both forms in one process,
            ``benchmarks/results/static_weights_ab.json``, its ``dense M=1`` rows): 4096x4096 10.19 -> 9.54 µs,
            4096x14336 28.22 -> 27.38; 14336x4096, 6144x4096 and 28672x4096 within 0.3 %. Those were the
            one-chunk forms of that day (16 rows at 4096x4096 and 4096x14336); the two-chunk form
            (:func:`takes_two_chunks`), in two runs of ``dense-vector-profile`` without and with
            ``MIRCUDA_PRELOAD_WEIGHTS=1`` compiled in (``dense_vector_two_chunks.json``, ``after_change_profile_p0``
            and ``_p1``): 4096x4096 9.79 -> 9.52, 6144x4096 13.79 -> 13.48, 4096x14336 27.61 -> 27.77 (slower).

    Each warp computes 8 or 16 output rows, converting each pair of inputs to FP32 once and using it for
    all of them; accumulation is FP32; ``beta == 0`` never reads ``y`` (it may hold NaN). Any N and K:
    K % 8 == 0 selects 16-byte loads, any other K a one-element-per-lane kernel.

    Streams: a plan is bound to the stream it was made with (as every dense plan is; a plan holding
    workspace would race with itself on two unordered streams): ``execute`` on another stream is
    refused with a ContractError naming ``stream``, and so is the plan's stream while it is forked
    into a capture begun on another stream. A capture on the plan's own stream
    (:meth:`Stream.capture`) records the launch; the graph launches only on that stream. For work on
    several streams make one plan per stream (the compiled module is shared through the Compiler's
    cache), or enqueue on the plan's stream and order it with events.

    Alignment (``cuda_src/dense_vector.cu``): with K % 8 == 0 the kernel loads x and W 16 bytes at a
    time, so both addresses must be multiples of 16 (pool allocations are); otherwise of the element
    size. y must be a multiple of its element size. :attr:`operands` lists what is checked.

    Raises:
        ContractError: bad context, stream, spec, dtype, ``rows``, ``warps`` or ``static_weights``.
        UnsupportedPlatform: the device's compute capability is below 8.0.
        CompileError: NVRTC rejected the kernel (a bug; the log is attached).
    """

    def __init__(self, context: Context, stream: Stream, spec: DenseVectorSpec, input: Any = bf16,
                 output: Any = None, *, compiler: Compiler | None = None, rows: int | None = None,
                 warps: int | None = None, static_weights: bool = False) -> None:
        plan_stream(stream, context)
        if not isinstance(spec, DenseVectorSpec):
            raise ContractError("spec", "a DenseVectorSpec(n, k)", repr(spec))
        static_weights = check_static_weights(static_weights)
        rows, warps = int_knob(rows), int_knob(warps)  # numpy integers as ints, as the FP8 and FP4 plans take them
        check_vector_knobs(rows, warps)  # before the device is queried: bad input is a ContractError on any device
        self._in, self._out = resolve_dtypes(input, output)
        info = context.device_info()
        if info.compute_capability < (8, 0):
            raise UnsupportedPlatform(f"DenseVectorPlan needs compute capability >= 8.0; {info.name} has "
                                      f"{info.compute_capability[0]}.{info.compute_capability[1]}")
        compiler = plan_compiler(compiler, context)
        self._context = context
        self._stream = stream
        self._spec = spec
        self._engine = VectorKernel(context, spec.n, spec.k, self._in, self._out, compiler, rows=rows, warps=warps,
                                    static_weights=static_weights)
        self._operands = self._engine.operands("x", "w", "y")
        self._launch, self._config = self._engine.kernel.launch, self._engine.config  # bound once for execute
        self._numba: Any = None

    # -- properties ---------------------------------------------------------------------------

    @property
    def numba_execute(self) -> Any:
        """An ``@numba.njit`` function ``execute(stream, x, w, y, alpha, beta) -> int`` over raw
        handles (``Stream.handle``, ``DeviceBuffer.handle``) that launches the kernel through
        :mod:`mircuda.numba_ext` (see :func:`kernel_executor`): njit code can loop over executions
        without the interpreter. Returns a ``CUresult``: 0 enqueued; 400 (``CUDA_ERROR_INVALID_HANDLE``)
        for a stream handle that is not the plan's stream's, 1 (``CUDA_ERROR_INVALID_VALUE``) for a
        misaligned address; nothing is launched then. Lengths, overlaps and captures are not checked on this
        path; keep the plan's stream open while the function is used."""
        if self._numba is None:
            self._numba = self._engine.numba_executor(self._stream.handle)
        return self._numba

    @property
    def unroll(self) -> int:
        """256-column chunks per warp and pipeline step: 2 in the two-chunk form (:func:`takes_two_chunks`), else 1."""
        return self._engine.unroll

    def describe(self) -> Description:
        """Which kernel runs and why, in one paragraph (a ``str``; shown as Markdown in notebooks)."""
        s = self._spec
        return Description(f"DenseVectorPlan {self._in.name} -> {self._out.name}, N={s.n}, K={s.k} on "
                           f"{self._context.device_info().arch}: {self._engine.describe()}")

    # -- the hot path -------------------------------------------------------------------------
    def execute(self, stream: Stream, x: DeviceBuffer[T], w: DeviceBuffer[T], y: DeviceBuffer[Any],
                alpha: float = 1.0, beta: float = 0.0) -> None:
        """Enqueue ``y = alpha * W x + beta * y`` on ``stream``; allocates and synchronizes nothing.

        Args:
            x: ``[K]`` inputs of the input type.
            w: ``[N, K]`` row-major weights of the input type.
            y: ``[N]`` outputs of the output type; read only when ``beta != 0``.

        Raises:
            ContractError: a stream that is not the plan's (or the plan's forked into a capture begun on
                another stream), a buffer of the wrong type, dtype, context, length or alignment (named,
                with the address), ``y`` overlapping x or W (both byte ranges), a bad scalar; nothing is
                enqueued then.
            UseAfterFree: a buffer was freed. ClosedResourceError: the plan's stream was closed.
            CudaError: the driver refused the launch.
        """
        self._check_stream(stream)
        ctx = self._context
        ox, ow, oy = self._operands
        px, pw = check_operand(ox, x, ctx), check_operand(ow, w, ctx)
        check_disjoint(oy, check_operand(oy, y, ctx), ((ox, px), (ow, pw)))  # y over x or W: a race
        s = self._spec
        self._launch(stream, self._config, y, w, x, check_scalar("alpha", alpha), check_scalar("beta", beta),
                     s.n, s.k)

    def __repr__(self) -> str:
        # the two-chunk form shares rows and warps with DenseVectorPlan(rows=8, warps=4), a different kernel
        two = ", two chunks per step" if self._engine.unroll == 2 else ""
        return (f"DenseVectorPlan[{self._in.name}, {self._out.name}](n={self._spec.n}, k={self._spec.k}, "
                f"rows={self.rows}, warps={self.warps}{two})")

