"""DenseVectorPlan: the M = 1 matrix-vector product as a native CUDA kernel compiled by NVRTC."""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from importlib import resources
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from .. import _cuda
from ..compile import Compiler, CompileOptions, CudaSource
from ..dtypes import bf16, f32, i32
from ..errors import ContractError, UnsupportedPlatform
from ..launch import In, InOut, LaunchConfig, cuda_export
from ..memory import DeviceBuffer
from ._spec import DenseVectorSpec, PlanBase, check_operand, check_scalar, plan_stream, resolve_dtypes

if TYPE_CHECKING:
    from ..launch import TypedKernel
    from ..runtime import Context, Stream

__all__ = ["DenseVectorPlan", "choose_dense_vector_warps", "choose_vector_warps", "dense_vector_source", "blocks_per_sm", "kernel_executor",
           "shared_compiler", "ROWS_PER_BLOCK", "MAX_WARPS"]

T = TypeVar("T")

ROWS_PER_BLOCK = 8
"""Output rows per block and per warp (``kRows`` in ``cuda_src/dense_vector.cu``)."""
MAX_WARPS = 8
"""Most warps per block splitting K (``kMaxWarps``)."""
CHUNK = 256
"""Columns one warp reads per step in the vector variant: 32 lanes x 8 elements."""
TARGET_WARPS_PER_SM = 16
"""Resident warps per SM the split of K aims at: enough 16-byte loads in flight to saturate HBM."""


@functools.lru_cache(maxsize=1)
def dense_vector_source() -> CudaSource:
    """``cuda_src/dense_vector.cu`` as a :class:`CudaSource` (from the installed package)."""
    text = resources.files("mircuda").joinpath("cuda_src", "dense_vector.cu").read_text()
    return CudaSource(text, "dense_vector.cu")


def kernel_symbol(input_name: str, output_name: str, vector: bool) -> str:
    """The kernel for one dtype pair: ``dense_vector_<in>_<out>_v16`` (16-byte loads) or ``_any``."""
    return f"dense_vector_{input_name}_{output_name}_{'v16' if vector else 'any'}"


VECTOR_WARPS_PER_SM = 32
"""Warps of work per SM DenseVectorPlan's split of K aims at (about two waves of 16 resident warps)."""


def choose_dense_vector_warps(n: int, k: int, multiprocessors: int) -> int:
    """DenseVectorPlan's warps per block (1, 2, 4 or 8) splitting K: the largest count whose grid
    (``ceil(N / 8)`` blocks) holds at most ``VECTOR_WARPS_PER_SM`` warps per SM and whose warps each
    read at least two 256-column chunks.

    Unlike :func:`choose_vector_warps` it lets the grid take two waves: measured on an H200 on
    2026-11-29 (every split, bf16/f16/bf16->f32, cold weights) one more doubling than a single wave
    allows was the fastest on 4096 x 4096 (8 warps: 11.2 instead of 11.8 µs), 14336 x 4096 (2: 30.2
    instead of 31.3), 6144 x 4096 (4: 15.5 instead of 16.7) and equal on 4096 x 14336 (8: 29.2).
    """
    groups = -(-n // ROWS_PER_BLOCK)
    best = 1
    for warps in (2, 4, 8):
        if k < 2 * warps * CHUNK or groups * warps > multiprocessors * VECTOR_WARPS_PER_SM:
            break
        best = warps
    return best


def choose_vector_warps(n: int, k: int, multiprocessors: int, blocks_per_sm: Callable[[int], int], *,
                        rows: int = ROWS_PER_BLOCK, chunk: int = CHUNK) -> int:
    """Warps per block (1, 2, 4 or 8) that split K, for N rows in blocks of ``rows``.

    The largest count such that every block is resident at once (one wave: ``ceil(N / rows)`` blocks
    fit in ``multiprocessors * blocks_per_sm(warps)``), the grid holds at most ``TARGET_WARPS_PER_SM``
    warps per SM beyond that, and each warp still reads at least two ``chunk``-column chunks. One warp
    when even one warp per block does not fit in a wave (large N: there are enough blocks already).
    DenseVectorPlan: 8 rows, 256-column chunks; the batched GEMV of DenseMatmulPlan: 16 rows, 128.

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


def blocks_per_sm(context: Context, kernel: TypedKernel, warps: int) -> int:
    """Resident blocks per SM of ``kernel`` at ``32 * warps`` threads (``cuOccupancyMaxActiveBlocksPerMultiprocessor``)."""
    context._make_current()
    return int(_cuda.call("cuOccupancyMaxActiveBlocksPerMultiprocessor", kernel._cu, 32 * warps, 0))


INVALID_VALUE = 1
"""``CUDA_ERROR_INVALID_VALUE``: what :func:`kernel_executor` returns for a misaligned address."""


def kernel_executor(function: int, grid: int, block: int, n: int, k: int, alignment: int, swap: bool,
                    launch_function: Any = None) -> Any:
    """An ``@numba.njit`` function ``execute(stream, p, q, out, alpha, beta) -> CUresult`` launching one
    of the dense NVRTC kernels, whose parameters are ``(out, ptr, ptr, f32 alpha, f32 beta, i32 n,
    i32 k)`` (``dense_vector.cu``, ``batched_gemv.cu``): the pointers go in as ``(out, q, p)`` when
    ``swap`` (DenseVectorPlan: ``x, w`` -> ``y, w, x``), else ``(out, p, q)``.

    Each call packs the parameters into a block of its own (C ABI offsets 0, 8, 16, 24, 28, 32, 36)
    and calls ``cuLaunchKernel`` through :func:`mircuda.numba_ext.driver_function` (or
    ``launch_function``, a stand-in with its prototype): reentrant, no interpreter. ``p`` and ``q``
    must be multiples of ``alignment`` and ``out`` of 2, else it returns ``CUDA_ERROR_INVALID_VALUE``
    and launches nothing. Lengths are not checked on this path; the plan's context must be current.
    The launch is a plain one (no programmatic dependent launch: the kernels are correct either way).
    """
    import numba
    import numpy as np

    from ..numba_ext import driver_function

    launch = driver_function("cuLaunchKernel") if launch_function is None else launch_function
    u64, f32, i32 = numba.uint64, np.float32, np.int32
    mask = numba.uint64(max(alignment, 1) - 1)

    @numba.njit(cache=False)
    def execute(stream: int, p: int, q: int, out: int, alpha: float, beta: float) -> int:
        pp, pq, po = u64(p), u64(q), u64(out)
        if (pp | pq) & mask or po & u64(1):
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


class DenseVectorPlan(PlanBase, Generic[T]):
    """``y[N] = alpha * W[N, K] . x[K] + beta * y[N]``: the explicit M = 1 plan for bandwidth-bound
    projections (decode), as a CUDA C kernel (``cuda_src/dense_vector.cu``) compiled by NVRTC for the
    context's device (any compute capability >= 8.0).

    Args:
        context: the context the plan runs in.
        stream: a stream of ``context`` (the plan allocates nothing; checked for symmetry with the
            matrix plans).
        spec: ``DenseVectorSpec(n, k)``.
        input: ``mc.bf16`` or ``mc.f16``: the type of ``x`` and ``W``.
        output: ``None`` (the input type) or ``mc.f32``: the type of ``y``.
        compiler: the Compiler to build the kernel with (default: one shared per context).
        warps: warps per block splitting K (1, 2, 4 or 8); default :func:`choose_dense_vector_warps`.

    Each warp computes eight output rows, converting each pair of inputs to FP32 once and using it for
    all eight; accumulation is FP32; ``beta == 0`` never reads ``y`` (it may hold NaN). Any N and K:
    K % 8 == 0 selects 16-byte loads, any other K a one-element-per-lane kernel.

    Raises:
        ContractError: bad context, stream, spec, dtype or ``warps``.
        UnsupportedPlatform: the device's compute capability is below 8.0.
        CompileError: NVRTC rejected the kernel (a bug; the log is attached).
    """

    def __init__(self, context: Context, stream: Stream, spec: DenseVectorSpec, input: Any = bf16,
                 output: Any = None, *, compiler: Compiler | None = None, warps: int | None = None) -> None:
        plan_stream(stream, context)
        if not isinstance(spec, DenseVectorSpec):
            raise ContractError("spec", "a DenseVectorSpec(n, k)", repr(spec))
        self._in, self._out = resolve_dtypes(input, output)
        info = context.device_info()
        if info.compute_capability < (8, 0):
            raise UnsupportedPlatform(f"DenseVectorPlan needs compute capability >= 8.0; {info.name} has "
                                      f"{info.compute_capability[0]}.{info.compute_capability[1]}")
        if compiler is None:
            compiler = shared_compiler(context)
        elif not isinstance(compiler, Compiler) or compiler.context is not context:
            raise ContractError("compiler", f"a Compiler of {context!r}", repr(compiler))
        self._context = context
        self._spec = spec
        self._vector = spec.k % 8 == 0
        symbol = kernel_symbol(self._in.name, self._out.name, self._vector)
        contract = cuda_export(symbol, y=InOut[DeviceBuffer[self._out.scalar_type]],
                               w=In[DeviceBuffer[self._in.scalar_type]], x=In[DeviceBuffer[self._in.scalar_type]],
                               alpha=f32, beta=f32, n=i32, k=i32)
        module = compiler.compile(dense_vector_source(), CompileOptions())
        self._kernel: TypedKernel = module.kernel(contract)
        if warps is None:
            warps = choose_dense_vector_warps(spec.n, spec.k, info.multiprocessor_count)
        elif type(warps) is not int or warps not in (1, 2, 4, 8):
            raise ContractError("warps", "1, 2, 4 or 8 (warps per block splitting K)", repr(warps))
        self._warps = warps
        # On cc >= 9.0 the kernel's first weight loads overlap the previous kernel's tail (H200,
        # 4096x4096 bf16, M = 1: 11.0 instead of 11.9 µs per call back to back); see cuda_src/.
        self._config = LaunchConfig((-(-spec.n // ROWS_PER_BLOCK),), (32 * warps,),
                                    programmatic_stream_serialization=info.supports_programmatic_launch)
        self._config.check(info, self._kernel.attributes.max_threads_per_block)
        self._launch = self._kernel.launch
        self._numba: Any = None

    # -- properties ---------------------------------------------------------------------------
    @property
    def kernel(self) -> TypedKernel:
        """The bound kernel (its contract: ``y, w, x, alpha, beta, n, k``)."""
        return self._kernel

    @property
    def launch_config(self) -> LaunchConfig:
        """``ceil(N / 8)`` blocks of ``32 * warps`` threads."""
        return self._config

    @property
    def warps(self) -> int:
        return self._warps

    @property
    def numba_execute(self) -> Any:
        """An ``@numba.njit`` function ``execute(stream, x, w, y, alpha, beta) -> int`` over raw
        handles (``Stream.handle``, ``DeviceBuffer.handle``) that launches the kernel through
        :mod:`mircuda.numba_ext` (see :func:`kernel_executor`): njit code can loop over executions
        without the interpreter. Returns a ``CUresult`` (0: enqueued; 1 for a misaligned address).
        Lengths are not checked on this path."""
        if self._numba is None:
            self._numba = kernel_executor(self._kernel.handle, self._config.grid[0], self._config.block[0],
                                          self._spec.n, self._spec.k, 16 if self._vector else 2, swap=True)
        return self._numba

    def describe(self) -> str:
        """Which kernel runs and why, in one paragraph."""
        s = self._spec
        loads = ("16-byte vector loads (K % 8 == 0)" if self._vector
                 else f"one element per lane per row (K = {s.k} is not a multiple of 8)")
        return (f"DenseVectorPlan {self._in.name} -> {self._out.name}, N={s.n}, K={s.k} on "
                f"{self._context.device_info().arch}: kernel {self._kernel.contract.symbol}, {loads}; "
                f"{self._config.grid[0]} blocks x {self._warps} warp(s) (8 rows per block, K split over "
                f"{self._warps} warp(s)), FP32 accumulation"
                + ("; programmatic dependent launch (overlaps the previous kernel's tail)"
                   if self._config.programmatic_stream_serialization else ""))

    # -- the hot path -------------------------------------------------------------------------
    def execute(self, stream: Stream, x: DeviceBuffer[T], w: DeviceBuffer[T], y: DeviceBuffer[Any],
                alpha: float = 1.0, beta: float = 0.0) -> None:
        """Enqueue ``y = alpha * W x + beta * y`` on ``stream``; allocates and synchronizes nothing.

        Args:
            x: ``[K]`` inputs of the input type.
            w: ``[N, K]`` row-major weights of the input type.
            y: ``[N]`` outputs of the output type; read only when ``beta != 0``.

        Raises:
            ContractError: a buffer of the wrong type, dtype, context or length (named), a bad stream
                or scalar; nothing is enqueued then.
            UseAfterFree: a buffer was freed.
            CudaError: the driver refused the launch.
        """
        s = self._spec
        ctx = self._context
        check_operand("x", x, self._in, s.k, ctx, f"[K] = [{s.k}]")
        check_operand("w", w, self._in, s.n * s.k, ctx, f"[N, K] = [{s.n}, {s.k}]")
        check_operand("y", y, self._out, s.n, ctx, f"[N] = [{s.n}]")
        self._launch(stream, self._config, y, w, x, check_scalar("alpha", alpha), check_scalar("beta", beta),
                     s.n, s.k)

    def __repr__(self) -> str:
        return (f"DenseVectorPlan[{self._in.name}, {self._out.name}](n={self._spec.n}, k={self._spec.k}, "
                f"warps={self._warps})")

