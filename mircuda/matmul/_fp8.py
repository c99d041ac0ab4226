"""Blockwise FP8 plans (DeepSeek-V3 style): ``BlockwiseFp8VectorPlan`` (M = 1: the NVRTC kernel that
:func:`~mircuda.matmul._select.fp8_m1_choice` names for the shape and the architecture, the CUDA-core
one of ``cuda_src/fp8_vector.cu`` or the tensor-core one of ``cuda_src/fp8_mma_gemv.cu``) and
``BlockwiseFp8Plan`` (any M: the same kernel for M = 1, the tensor-core NVRTC kernel for 2 <= M <= 16
(:mod:`mircuda.matmul._fp8_mma`), the CUTLASS blockwise kernels of ``libmircuda_cutlass.so`` above,
see :mod:`mircuda.matmul._fp8_cutlass`).

``D[M, N] = alpha * sum_kb sa[m, kb] * sb[n / 128, kb] * (A[m, kb] . B[n, kb]) + beta * C[M, N]`` with
FP32 accumulation, A E4M3 ``[M, K]`` row-major, ``sa`` FP32 ``[M, ceil(K/128)]`` row-major, B E4M3
``[N, K]`` row-major, ``sb`` FP32 ``[ceil(N/128), ceil(K/128)]`` row-major, C and D BF16 ``[M, N]``
(the layouts and their sources: :mod:`mircuda.matmul._quantize`). Partial last blocks of K and N are
supported (by the NVRTC and SM90 kernels); K must be a multiple of 16 (16-byte rows: the kernels' loads, and TMA's
rule for the CUTLASS kernels, which also need N a multiple of 8 on SM90 and N, K multiples of 128 on SM12x).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from .._repr import Description
from ..compile import CompileOptions, Compiler, CudaSource
from ..dtypes import bf16, dtype_info, e4m3, f32, i32
from ..errors import ContractError, CutlassNotFound, MircudaError, UnsupportedPlatform
from ..launch import In, InOut, LaunchConfig, cuda_export
from ..memory import DeviceBuffer
from ._fp8_cutlass import CutlassFp8, cutlass_fp8_operands
from ._fp8_mma import DECODES, FP8_MMA_ROWS, FP8_MMA_SYMBOL, Fp8MmaGemv, check_pdl_trigger, pdl_defines
from ._library import CutlassLibrary, KernelInfo
from ._quantize import activation_scale_shape, weight_scale_shape
from ._select import Selection, fp8_gemv_entry, fp8_m1_choice, fp8_mma_entry, select_fp8_kernel
from ._spec import (
    DenseMatmulSpec,
    DenseVectorSpec,
    EngineViews,
    Operand,
    PlanBase,
    check_disjoint,
    check_kernel_name,
    check_operand,
    check_scalar,
    int_knob,
    plan_stream,
)
from ._vector import (
    INVALID_HANDLE,
    INVALID_VALUE,
    blocks_per_sm,
    choose_vector_warps,
    package_source,
    plan_compiler,
)

if TYPE_CHECKING:
    from ..launch import TypedKernel
    from ..runtime import Context, Stream

__all__ = [
    "FP8_CHUNK",
    "FP8_GEMV_MAX_M",
    "FP8_GEMV_ROWS",
    "FP8_K_MULTIPLE",
    "FP8_MIN_CC",
    "BlockwiseFp8Plan",
    "BlockwiseFp8Unavailable",
    "BlockwiseFp8VectorPlan",
    "Fp8Gemv",
    "fp8_gemv_executor",
    "fp8_gemv_options",
    "fp8_gemv_rows",
    "fp8_operands",
    "fp8_vector_source",
]

FP8_GEMV_MAX_M = 16
"""Largest M of the NVRTC kernel (``MIRCUDA_FP8_M``)."""
FP8_GEMV_ROWS = (1, 2, 4, 8)
"""Weight rows per block ``blockwise_fp8_gemv`` compiles for (``MIRCUDA_FP8_ROWS``; rows x M <= 32)."""
FP8_CHUNK = 512
"""Columns one warp reads per step: 32 lanes x 16 bytes (``kChunk``)."""
FP8_K_MULTIPLE = 16
"""K must be a multiple of this: a lane's 16-byte load never straddles the end of a row."""
FP8_MIN_CC = (8, 9)
"""``cvt.rn.f16x2.e4m3x2`` (PTX ISA 7.8) needs sm_89."""
SYMBOL = "blockwise_fp8_gemv"


class BlockwiseFp8Unavailable(UnsupportedPlatform):
    """No blockwise FP8 kernel runs this shape on this device: M > 16 needs a CUTLASS blockwise FP8 kernel
    (SM90: sm_90a, CUTLASS example 67; SM12x: sm_120f, example 87) that the library holds and whose M,
    N, K multiples (``KernelInfo.multiples``) the shape meets; the message names what is missing."""


@functools.lru_cache(maxsize=1)
def fp8_vector_source() -> CudaSource:
    """``cuda_src/fp8_vector.cu`` as a :class:`CudaSource` (see :func:`package_source`)."""
    return package_source("fp8_vector.cu")


def fp8_gemv_rows(m: int) -> int:
    """Weight rows per block (and per warp) of ``blockwise_fp8_gemv`` for ``m`` activation rows: 8 for
    M <= 2, 4 for M <= 8, 2 for M <= 16 (``rows * m <= 32``: one output per lane). The FP32 accumulators
    and partial sums of rows x M outputs and two chunks of operands live in registers: ptxas (CUDA 13.0,
    sm_90, no spills) gives 120 registers at M = 1 with 8 rows, 157 at M = 2, 155 at M = 4 and 242 at
    M = 8 with 4 rows, 241 at M = 16 with 2 rows; M = 4 with 8 rows would not fit the 255, so M = 3..8
    take 4 rows."""
    if type(m) is int and 1 <= m <= 2:
        return 8
    if type(m) is int and 3 <= m <= 8:
        return 4
    if type(m) is int and 9 <= m <= FP8_GEMV_MAX_M:
        return 2
    raise ContractError("m", f"1..{FP8_GEMV_MAX_M}", repr(m))


def fp8_gemv_options(m: int, rows: int, pdl_trigger: str | None = None, persistent: bool = False) -> CompileOptions:
    """The NVRTC options of the module for ``m`` rows of A and ``rows`` weight rows per block (and, when
    given, the programmatic-dependent-launch trigger ``"early"`` or ``"late"``; default late; ``persistent``:
    the kernel's persistent form, ``MIRCUDA_FP8_PERSISTENT``)."""
    return CompileOptions(defines={"MIRCUDA_FP8_M": m, "MIRCUDA_FP8_ROWS": rows, **pdl_defines(pdl_trigger),
                                   **({"MIRCUDA_FP8_PERSISTENT": 1} if persistent else {})})


def check_persistent(persistent: Any, kernel: str) -> bool:
    """``persistent=``: None (False) or a bool; True only for ``blockwise_fp8_gemv``.

    Raises:
        ContractError: naming ``persistent``.
    """
    if persistent is None:
        return False
    if not isinstance(persistent, bool):
        raise ContractError("persistent", "None, True or False", repr(persistent))
    if persistent and kernel != SYMBOL:
        raise ContractError("persistent", f"None or False for kernel {kernel} (the persistent grid is {SYMBOL}'s)",
                            repr(persistent))
    return persistent


def knob_kernel(rows: Any, persistent: Any, decode: Any) -> tuple[str, str] | None:
    """The NVRTC kernel that a knob given without ``kernel=`` belongs to, and the knob in words: ``rows``
    1, 2, 4 or 8 or ``persistent=True`` name ``blockwise_fp8_gemv``; ``rows`` 16 or 32 or ``decode="integer"``
    name ``blockwise_fp8_mma`` (the two kernels' row counts are disjoint). None when no knob names one.
    The M = 1 default follows it, so that a knob of one kernel keeps its meaning whichever kernel
    :func:`~mircuda.matmul._select.fp8_m1_choice` names for the shape; conflicting knobs are refused by
    the kernel the first one names (``rows``, then ``persistent``, then ``decode``)."""
    if type(rows) is int and rows in FP8_GEMV_ROWS:
        return SYMBOL, f"rows={rows}"
    if type(rows) is int and rows in FP8_MMA_ROWS:
        return FP8_MMA_SYMBOL, f"rows={rows}"
    if persistent is True:
        return SYMBOL, "persistent=True"
    if isinstance(decode, str) and decode == "integer":  # an array's == would not be one bool
        return FP8_MMA_SYMBOL, "decode='integer'"
    return None


def m1_selection(n: int, k: int, compute_capability: tuple[int, int], rows: Any, persistent: Any,
                 decode: Any) -> tuple[Selection, Any]:
    """The M = 1 kernel of both plans when ``kernel=`` is None, and the rows to build it with: the kernel a
    knob names (:func:`knob_kernel`; the caller's rows, else the rule's when the knob names the rule's own
    kernel, else None: that kernel's default), else :func:`~mircuda.matmul._select.fp8_m1_choice`'s kernel
    and rows for N, K and the architecture. The selection's reason says which and why.

    Raises:
        ContractError: ``rows`` or ``decode`` that neither kernel takes (named, with both kernels' values:
            without ``kernel=`` either kernel's value is valid, so the message does not name only the rule's).
    """
    choice = fp8_m1_choice(n, k, compute_capability)
    named = knob_kernel(rows, persistent, decode)
    if named is None and rows is not None:  # an int of either kernel's set would have named it
        raise ContractError("rows", f"None, one of {FP8_GEMV_ROWS} ({SYMBOL}) or of {FP8_MMA_ROWS} ({FP8_MMA_SYMBOL}): "
                                    "weight rows per block, which pick the kernel at M = 1 without kernel=", repr(rows))
    if named is None and decode is not None and (not isinstance(decode, str) or decode not in DECODES):
        raise ContractError("decode", f"None, 'hardware' or 'integer' (the E4M3 decode; 'integer' runs "
                                      f"{FP8_MMA_SYMBOL} at M = 1 without kernel=)", repr(decode))
    if named is None:
        entry = fp8_mma_entry() if choice.kernel == FP8_MMA_SYMBOL else fp8_gemv_entry()
        return Selection(entry, 1, choice.reason), choice.rows
    kernel, knob = named
    if rows is None and kernel == choice.kernel:
        # decode='integer' on a shape the rule runs on 32 rows keeps them (it does not pick the rows)
        rows = choice.rows
    entry = fp8_mma_entry() if kernel == FP8_MMA_SYMBOL else fp8_gemv_entry()
    return Selection(entry, 1, f"M = 1 with {knob}, a knob of {kernel} only, given without kernel= (for N = {n}, "
                               f"K = {k} the M = 1 rule alone, fp8_m1_choice, runs {choice.kernel} with "
                               f"{choice.rows} rows)"), rows


def _check_spec_k(k: int) -> None:
    if k % FP8_K_MULTIPLE:
        raise ContractError("spec", f"K a multiple of {FP8_K_MULTIPLE} (16-byte rows of E4M3 codes)", f"K = {k}")


def _check_cc(context: Context, what: str) -> None:
    info = context.device_info()
    if info.compute_capability < FP8_MIN_CC:
        raise UnsupportedPlatform(f"{what} needs compute capability >= 8.9 (E4M3 conversions); {info.name} has "
                                  f"{info.compute_capability[0]}.{info.compute_capability[1]}")


def fp8_operands(m: int, n: int, k: int, symbol: str = SYMBOL) -> tuple[Operand, ...]:
    """The plans' checks of ``a, sa, b, sb, d, c`` for the NVRTC kernel ``symbol`` (both take the same
    operands): codes aligned to 16 bytes (16-byte loads), scales to 4 and outputs to 2 (their element
    sizes)."""
    kb, nb = -(-k // 128), -(-n // 128)
    codes, scales, out = dtype_info(e4m3), dtype_info(f32), dtype_info(bf16)
    loads = f"kernel {symbol}: 16-byte loads of rows of {k} E4M3 codes"
    a_shape = f"E4M3 [K] = [{k}]" if m == 1 else f"E4M3 [M, K] = [{m}, {k}]"
    sa_shape = f"FP32 [ceil(K/128)] = [{kb}]" if m == 1 else f"FP32 [M, ceil(K/128)] = [{m}, {kb}]"
    d_shape = f"BF16 [N] = [{n}]" if m == 1 else f"BF16 [M, N] = [{m}, {n}]"
    return (Operand("a", codes, m * k, a_shape, 16, loads),
            Operand("sa", scales, m * kb, sa_shape, 4, f"kernel {symbol}: FP32 scale loads"),
            Operand("b", codes, n * k, f"E4M3 [N, K] = [{n}, {k}]", 16, loads),
            Operand("sb", scales, nb * kb, f"FP32 [ceil(N/128), ceil(K/128)] = [{nb}, {kb}]", 4,
                    f"kernel {symbol}: FP32 scale loads"),
            Operand("d", out, m * n, d_shape, 2, f"kernel {symbol}: 2-byte BF16 stores"),
            Operand("c", out, m * n, d_shape, 2, f"kernel {symbol}: 2-byte BF16 loads"))


class Fp8Gemv:
    """The compiled FP8 GEMV for one M (1..16), N and K, with its rows, warps and launch configuration:
    the engine of both plans (they check operands). Warps per block split K by
    :func:`~mircuda.matmul._vector.choose_vector_warps` (one wave, 512-column chunks).

    Raises:
        ContractError: ``m`` outside 1..16, ``warps`` not 1, 2, 4 or 8, ``rows`` not one of
            :data:`FP8_GEMV_ROWS` with rows x M <= 32, ``pdl_trigger`` not None, ``"early"`` or
            ``"late"``, or ``decode`` not None or ``"hardware"`` (all checked before compiling).
        CompileError: NVRTC rejected the kernel (a bug; the log is attached).
    """

    symbol = SYMBOL

    def __init__(self, context: Context, m: int, n: int, k: int, compiler: Compiler, *,
                 warps: int | None = None, rows: int | None = None, pdl_trigger: str | None = None,
                 decode: str | None = None, persistent: bool | None = None) -> None:
        self.persistent = check_persistent(persistent, SYMBOL)
        if type(m) is not int or not 1 <= m <= FP8_GEMV_MAX_M:
            raise ContractError("m", f"1..{FP8_GEMV_MAX_M}", repr(m))
        if warps is not None and (type(warps) is not int or warps not in (1, 2, 4, 8)):
            raise ContractError("warps", "None, 1, 2, 4 or 8 (warps per block splitting K)", repr(warps))
        if rows is not None and (type(rows) is not int or rows not in FP8_GEMV_ROWS or rows * m > 32):
            raise ContractError("rows", f"None or one of {FP8_GEMV_ROWS} with rows x M <= 32 (M = {m}; weight rows "
                                        f"per block of {SYMBOL})", repr(rows))
        check_pdl_trigger(pdl_trigger)
        if decode is not None and (not isinstance(decode, str) or decode != "hardware"):
            raise ContractError("decode", f"None or 'hardware' ({SYMBOL} decodes with cvt.rn.f16x2.e4m3x2)", repr(decode))
        self.m, self.n, self.k = m, n, k
        self.rows = fp8_gemv_rows(m) if rows is None else rows
        self.pdl_trigger = pdl_trigger
        contract = cuda_export(SYMBOL, d=InOut[DeviceBuffer[bf16]], c=In[DeviceBuffer[bf16]],
                               a=In[DeviceBuffer[e4m3]], sa=In[DeviceBuffer[f32]], b=In[DeviceBuffer[e4m3]],
                               sb=In[DeviceBuffer[f32]], alpha=f32, beta=f32, n=i32, k=i32)
        self.kernel: TypedKernel = compiler.compile(fp8_vector_source(),
                                                   fp8_gemv_options(m, self.rows, pdl_trigger,
                                                                    self.persistent)).kernel(contract)
        info = context.device_info()
        if warps is None:
            warps = choose_vector_warps(n, k, info.multiprocessor_count,
                                        lambda w: blocks_per_sm(context, self.kernel, w), rows=self.rows,
                                        chunk=FP8_CHUNK)
        self.warps = warps
        blocks = -(-n // self.rows)
        if self.persistent:  # at most one wave; the blocks walk the row blocks
            blocks = min(blocks, info.multiprocessor_count * max(1, blocks_per_sm(context, self.kernel, warps)))
        # On cc >= 9.0 the next kernel's ramp overlaps this one's tail (see cuda_src/fp8_vector.cu).
        self.config = LaunchConfig((blocks,), (32 * warps,),
                                   programmatic_stream_serialization=info.supports_programmatic_launch)
        self.config.check(info, self.kernel.attributes.max_threads_per_block)
        self.launch = self.kernel.launch

    def numba_executor(self, stream: int) -> Any:
        """``execute(stream, a, sa, b, sb, d, c, alpha, beta) -> CUresult`` for the plan's stream handle
        ``stream`` (see :func:`fp8_gemv_executor`)."""
        return fp8_gemv_executor(self.kernel.handle, self.config.grid[0], self.config.block[0], self.n, self.k,
                                 stream=stream)

    def describe(self) -> str:
        return (f"kernel {SYMBOL} (NVRTC, -D MIRCUDA_FP8_M={self.m} -D MIRCUDA_FP8_ROWS={self.rows}"
                f"{' -D MIRCUDA_FP8_PERSISTENT=1' if self.persistent else ''}): {self.config.grid[0]} "
                f"{'persistent blocks (one wave) walking row blocks' if self.persistent else 'blocks'} of "
                f"{self.rows} weight rows x {self.warps} warp(s) splitting K in "
                f"{FP8_CHUNK}-column chunks; 16-byte streamed weight loads (L1 bypassed, 128-byte L2 lines); E4M3 "
                "pairs decoded by cvt.rn.f16x2.e4m3x2, FP32 accumulation, one multiply by sa * sb per lane and "
                "128-K block"
                + ("; programmatic dependent launch" if self.config.programmatic_stream_serialization else "")
                + (f" ({self.pdl_trigger} trigger)" if self.pdl_trigger is not None
                   and self.config.programmatic_stream_serialization else ""))


def fp8_gemv_executor(function: int, grid: int, block: int, n: int, k: int, launch_function: Any = None, *,
                      stream: int) -> Any:
    """An ``@numba.njit`` function ``execute(stream, a, sa, b, sb, d, c, alpha, beta) -> CUresult``
    launching ``blockwise_fp8_gemv`` (parameters ``(d, c, a, sa, b, sb, f32 alpha, f32 beta, i32 n,
    i32 k)``: C ABI offsets 0, 8, 16, 24, 32, 40, 48, 52, 56, 60) through
    :func:`mircuda.numba_ext.driver_function` (or ``launch_function``, a stand-in with its prototype).
    ``c`` may equal ``d``. The stream must be ``stream`` (the plan's ``Stream.handle``), else it returns
    ``CUDA_ERROR_INVALID_HANDLE`` (400); ``a`` and ``b`` must be multiples of 16, ``sa`` and ``sb`` of 4,
    ``d`` and ``c`` of 2, else it returns ``CUDA_ERROR_INVALID_VALUE`` (1); either way it launches
    nothing. Lengths are not checked on this path; the plan's context must be current. A plain launch
    (no programmatic dependent launch: the kernel is correct either way)."""
    import numba
    import numpy as np

    from ..numba_ext import driver_function

    launch = driver_function("cuLaunchKernel") if launch_function is None else launch_function
    u64, f32_, i32_ = numba.uint64, np.float32, np.int32
    offsets = (0, 8, 16, 24, 32, 40, 48, 52, 56, 60)
    bound = u64(stream)

    @numba.njit(cache=False)
    def execute(stream: int, a: int, sa: int, b: int, sb: int, d: int, c: int, alpha: float, beta: float) -> int:
        if u64(stream) != bound:
            return INVALID_HANDLE
        pa, psa, pb, psb, pd, pc = u64(a), u64(sa), u64(b), u64(sb), u64(d), u64(c)
        if (pa | pb) & u64(15) or (psa | psb) & u64(3) or (pd | pc) & u64(1):
            return INVALID_VALUE
        values = np.empty(8, np.uint64)
        values[0] = pd
        values[1] = pc
        values[2] = pa
        values[3] = psa
        values[4] = pb
        values[5] = psb
        floats = values.view(f32_)
        floats[12] = alpha
        floats[13] = beta
        ints = values.view(i32_)
        ints[14] = n
        ints[15] = k
        base = u64(values.ctypes.data)
        pointers = np.empty(10, np.uint64)
        for i, offset in enumerate(offsets):
            pointers[i] = base + u64(offset)
        return launch(function, grid, 1, 1, block, 1, 1, 0, u64(stream), u64(pointers.ctypes.data), 0)

    return execute


class _Fp8PlanBase(EngineViews, PlanBase):
    """Operand checks and the hot path shared by both plans."""

    _engine: Fp8Gemv | Fp8MmaGemv
    _m: int
    _n: int
    _k: int
    _numba: Any

    def _setup(self, context: Context, stream: Stream, m: int, n: int, k: int, compiler: Any, warps: Any,
               kernel: str = SYMBOL, rows: Any = None, pdl_trigger: Any = None, decode: Any = None,
               persistent: Any = None) -> None:
        self._context, self._stream = context, stream
        self._m, self._n, self._k = m, n, k
        check_persistent(persistent, kernel)
        engine: Any = Fp8MmaGemv if kernel == FP8_MMA_SYMBOL else Fp8Gemv
        extra = {"persistent": persistent} if kernel != FP8_MMA_SYMBOL and persistent is not None else {}
        self._engine = engine(context, m, n, k, plan_compiler(compiler, context), warps=warps, rows=rows,
                              pdl_trigger=pdl_trigger, decode=decode, **extra)
        self._launch, self._config = self._engine.launch, self._engine.config
        self._in, self._out = dtype_info(e4m3), dtype_info(bf16)
        self._operands = fp8_operands(m, n, k, kernel)
        self._sa_shape = activation_scale_shape(m, k)
        self._sb_shape = weight_scale_shape(n, k)
        self._numba = None

    @property
    def sa_shape(self) -> tuple[int, int]:
        """``(M, ceil(K / 128))``: the activation scales, FP32 row-major."""
        return self._sa_shape

    @property
    def sb_shape(self) -> tuple[int, int]:
        """``(ceil(N / 128), ceil(K / 128))``: the weight scales, FP32 row-major."""
        return self._sb_shape

    @property
    def numba_execute(self) -> Any:
        """An ``@numba.njit`` function ``execute(stream, a, sa, b, sb, d, c, alpha, beta) -> int`` over raw
        handles (``Stream.handle``, ``DeviceBuffer.handle``; pass ``d``'s handle as ``c`` to accumulate in
        place; note the order: ``c`` before ``alpha, beta``, unlike ``execute``'s ``d, alpha, beta, c``) that
        launches the kernel through :mod:`mircuda.numba_ext` (see :func:`fp8_gemv_executor`).
        Returns a ``CUresult``: 0 enqueued; 400 (``CUDA_ERROR_INVALID_HANDLE``) for a stream handle that
        is not the plan's stream's; 1 (``CUDA_ERROR_INVALID_VALUE``) for a misaligned address; nothing is
        launched then. Lengths, overlaps and captures are not checked on this path; keep the plan and its stream
        alive while the function is used."""
        if self._numba is None:
            self._numba = self._engine.numba_executor(self._stream.handle)
        return self._numba

    def _checked(self, stream: Any, a: Any, sa: Any, b: Any, sb: Any, d: Any, alpha: Any, beta: Any,
                 c: Any) -> tuple[int, int, int, int, int, int, float, float]:
        """Every check of an execution, for the NVRTC and the CUTLASS kernels alike (nothing is enqueued
        before): ``(a, sa, b, sb, d, c)`` addresses (``c``: 0 when None) and alpha, beta."""
        self._check_stream(stream)
        ctx = self._context
        oa, osa, ob, osb, od, oc = self._operands
        pa, psa, pb, psb = (check_operand(oa, a, ctx), check_operand(osa, sa, ctx), check_operand(ob, b, ctx),
                            check_operand(osb, sb, ctx))
        reads = [(oa, pa), (osa, psa), (ob, pb), (osb, psb)]
        pd = check_operand(od, d, ctx)
        pc = 0 if c is None else check_operand(oc, c, ctx)
        if pc and pc != pd:  # c is d: each output reads its own old value first; a shifted c would race
            reads.append((oc, pc))
        check_disjoint(od, pd, reads)
        return pa, psa, pb, psb, pd, pc, check_scalar("alpha", alpha), check_scalar("beta", beta)

    def _execute(self, stream: Any, a: Any, sa: Any, b: Any, sb: Any, d: Any, alpha: Any, beta: Any, c: Any) -> None:
        *_, fa, fb = self._checked(stream, a, sa, b, sb, d, alpha, beta, c)
        self._launch(stream, self._config, d, d if c is None else c, a, sa, b, sb, fa, fb, self._n, self._k)


class BlockwiseFp8VectorPlan(_Fp8PlanBase):
    """``d[N] = alpha * sum_kb sa[kb] * sb[n / 128, kb] * (a[kb] . B[n, kb]) + beta * c[N]``: the M = 1
    blockwise FP8 product (decode) as a CUDA C kernel compiled by NVRTC for the context's device
    (compute capability >= 8.9): ``blockwise_fp8_gemv`` (``cuda_src/fp8_vector.cu``, CUDA cores) or
    ``blockwise_fp8_mma`` (``cuda_src/fp8_mma_gemv.cu``, tensor cores), by default the one
    :func:`~mircuda.matmul._select.fp8_m1_choice` names: on cc 9.x (measured on the H200, 2026-12-01)
    the tensor-core kernel for K <= 4096 (32 weight rows per block for N >= 8192, else 16) and the
    CUDA-core kernel (8 rows) for larger K; the CUDA-core kernel on other architectures.

    Operands (DeepSeek-V3 blockwise FP8; layouts and sources in :mod:`mircuda.matmul._quantize`): ``a``
    E4M3 ``[K]``, ``sa`` FP32 ``[ceil(K/128)]`` (the ``[1, ceil(K/128)]`` row of 1 x 128 scales), ``b``
    E4M3 ``[N, K]`` row-major, ``sb`` FP32 ``[ceil(N/128), ceil(K/128)]`` row-major, ``d`` and ``c`` BF16
    ``[N]``. N any; K a multiple of 16; partial last 128-blocks of K and N are supported.

    Args:
        context: the context the plan runs in.
        stream: the stream the plan is bound to (``execute`` refuses any other).
        spec: ``DenseVectorSpec(n, k)``.
        compiler: the Compiler of the kernel (default: one shared per context).
        warps: warps per block splitting K (1, 2, 4 or 8; default: one wave, see ``Fp8Gemv``).
        kernel: ``"blockwise_fp8_gemv"`` (CUDA cores) or ``"blockwise_fp8_mma"`` (tensor cores:
            mma.sync m16n8k32 E4M3, the one activation row in column 0 of the n8 tile); ``None``: the
            kernel a knob given belongs to (``rows`` of one kernel's set, ``persistent=True``,
            ``decode="integer"``: :func:`knob_kernel`), else the M = 1 rule's
            (:func:`~mircuda.matmul._select.fp8_m1_choice`).
        rows: weight rows per block (``blockwise_fp8_gemv``: 1, 2, 4 or 8, default 8;
            ``blockwise_fp8_mma``: 16 or 32, default 16, or the M = 1 rule's 32 for N >= 8192 where the rule
            runs this kernel and ``kernel=`` is not given, ``decode="integer"`` or not).
        pdl_trigger: where programmatic dependent launch lets the next kernel start on cc >= 9.0:
            ``"early"`` or ``"late"`` (default: late).
        decode: ``blockwise_fp8_mma`` only: ``"hardware"`` (default) or ``"integer"`` (see
            :data:`~mircuda.matmul._fp8_mma.DECODES`).
        persistent: ``blockwise_fp8_gemv`` only: True launches at most one wave of blocks that walk the row
            blocks, each warp's double buffer running on across them (``MIRCUDA_FP8_PERSISTENT``); None or
            False: one block per row block. Measured on the H200 at M = 1: 0.99-1.25x the non-persistent
            grid's time, faster nowhere (``benchmarks/results/fp8_sweep_persistent.json``, 2026-12-01), so
            off by default.
            ``rows``, ``warps``, ``pdl_trigger``, ``decode`` and ``persistent`` are the tuning knobs that
            ``fp8-profile --sweep`` measures.

    The plan allocates nothing (it keeps no workspace); ``execute`` allocates and synchronizes nothing.

    Raises:
        ContractError: bad context, stream, spec (K not a multiple of 16, named ``spec``), ``compiler``,
            ``kernel``, ``rows``, ``warps``, ``pdl_trigger``, ``decode`` or ``persistent``.
        UnsupportedPlatform: compute capability below 8.9.
        CompileError: NVRTC rejected the kernel (a bug; the log is attached).
    """

    def __init__(self, context: Context, stream: Stream, spec: DenseVectorSpec, *, compiler: Compiler | None = None,
                 warps: int | None = None, kernel: str | None = None, rows: int | None = None,
                 pdl_trigger: str | None = None, decode: str | None = None, persistent: bool | None = None) -> None:
        plan_stream(stream, context)
        warps, rows = (int_knob(warps), int_knob(rows))  # numpy integers as ints
        if not isinstance(spec, DenseVectorSpec):
            raise ContractError("spec", "a DenseVectorSpec(n, k)", repr(spec))
        if kernel is not None and (not isinstance(kernel, str) or kernel not in (SYMBOL, FP8_MMA_SYMBOL)):
            raise ContractError("kernel", f"None, {SYMBOL!r} or {FP8_MMA_SYMBOL!r}", repr(kernel))
        _check_spec_k(spec.k)
        _check_cc(context, "BlockwiseFp8VectorPlan")
        self._spec = spec
        cc = context.device_info().compute_capability
        if kernel is None:
            self._selection, rows = m1_selection(spec.n, spec.k, cc, rows, persistent, decode)
        else:
            self._selection = select_fp8_kernel((), DenseMatmulSpec(1, spec.n, spec.k), cc, kernel)
        self._setup(context, stream, 1, spec.n, spec.k, compiler, warps, self._selection.kernel.name, rows,
                    pdl_trigger, decode, persistent)

    @property
    def kernel_name(self) -> str:
        """The running kernel: ``"blockwise_fp8_gemv"`` or ``"blockwise_fp8_mma"``."""
        return self._engine.symbol

    def describe(self) -> Description:
        """Which kernel runs and why, in one paragraph."""
        s = self._spec
        return Description(f"BlockwiseFp8VectorPlan e4m3 x e4m3 -> bf16 (1x128 activation / 128x128 weight FP32 scales), "
                f"N={s.n}, K={s.k} on {self._context.device_info().arch}: {self._engine.describe()}. "
                f"Why: {self._selection.reason}")

    def execute(self, stream: Stream, a: DeviceBuffer[Any], sa: DeviceBuffer[Any], b: DeviceBuffer[Any],
                sb: DeviceBuffer[Any], d: DeviceBuffer[Any], alpha: float = 1.0, beta: float = 0.0,
                c: DeviceBuffer[Any] | None = None) -> None:
        """Enqueue ``d = alpha * (a . B^T, blockwise scaled) + beta * c`` on ``stream``; allocates and
        synchronizes nothing.

        Argument order: ``alpha, beta`` come before ``c`` here, and ``c`` is optional; the raw-handle
        :attr:`numba_execute` takes ``(stream, a, sa, b, sb, d, c, alpha, beta)`` instead (``c`` first,
        required). Pass ``alpha``, ``beta`` and ``c`` by keyword to avoid mixing the two up.

        Args:
            stream: the plan's stream.
            a: E4M3 ``[K]``, 16-byte aligned. sa: FP32 ``[ceil(K/128)]``.
            b: E4M3 ``[N, K]`` row-major, 16-byte aligned. sb: FP32 ``[ceil(N/128), ceil(K/128)]`` row-major.
            d: BF16 ``[N]``, written. c: BF16 ``[N]`` read when ``beta != 0``; ``None`` means ``d``.

        Raises:
            ContractError: a stream that is not the plan's (or the plan's forked into a capture begun on
                another stream), a buffer of the wrong type, dtype, context, length or alignment (named,
                with the address), ``d`` overlapping an input or a ``c`` that is not ``d`` (both byte
                ranges), or a bad scalar; nothing is enqueued then.
            UseAfterFree: a buffer was freed. ClosedResourceError: the plan's stream was closed.
            CudaError: the driver refused the launch.
        """
        self._execute(stream, a, sa, b, sb, d, alpha, beta, c)

    def __repr__(self) -> str:
        return (f"BlockwiseFp8VectorPlan(n={self._n}, k={self._k}, {self.kernel_name}, rows={self.rows}, "
                f"warps={self.warps})")


class BlockwiseFp8Plan(_Fp8PlanBase):
    """``D[M, N] = alpha * sum_kb sa[m, kb] * sb[n / 128, kb] * (A[m, kb] . B[n, kb]) + beta * C[M, N]``
    (DeepSeek-V3 blockwise FP8; layouts and sources in :mod:`mircuda.matmul._quantize`) with FP32
    accumulation, by a kernel chosen for the shape and the device at construction (see :meth:`describe`).

    Operands: ``a`` E4M3 ``[M, K]`` row-major, ``sa`` FP32 ``[M, ceil(K/128)]`` row-major, ``b`` E4M3
    ``[N, K]`` row-major, ``sb`` FP32 ``[ceil(N/128), ceil(K/128)]`` row-major, ``d`` and ``c`` BF16
    ``[M, N]`` row-major: the quantizers' layouts, which every kernel reads as they are (the CUTLASS
    kernels' scales are K-major). K a multiple of 16; partial last 128-blocks of K and N are supported.

    Kernels (:func:`~mircuda.matmul._select.select_fp8_kernel`): decode (M <= 16) runs NVRTC kernels
    compiled for M (cc >= 8.9, any N), every weight read once: for M = 1 BlockwiseFp8VectorPlan's kernel
    and rows (:func:`~mircuda.matmul._select.fp8_m1_choice`: on cc 9.x ``blockwise_fp8_mma`` for K <=
    4096, with 32 rows for N >= 8192, and ``blockwise_fp8_gemv``, ``cuda_src/fp8_vector.cu``, CUDA
    cores, for larger K; ``blockwise_fp8_gemv`` elsewhere), for 2 <= M <= 16 ``blockwise_fp8_mma``
    (``cuda_src/fp8_mma_gemv.cu``): the weights as the 16-row A operand of
    ``mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32``, the M activation rows as its 8 (or 2 x 8)
    columns, each 128-K block's FP32 sums scaled by sa * sb and added in FP32. Larger M runs the
    CUTLASS blockwise FP8 kernels of
    ``libmircuda_cutlass.so``: on SM90 (sm_90a) TMA + WGMMA warp-specialized kernels (CUTLASS example
    67), the 64x128x128 ping-pong kernel where its output tiles fit in one wave of the SMs and the 128x128x128
    cooperative kernel (1x2 cluster) otherwise (:func:`~mircuda.matmul._select.sm90_fp8_family`, measured on the
    H200), N a multiple of 8; the cooperative kernel's execution is two kernels, a copy of ``sa`` M-major into
    the plan's workspace (which its TMA reads) and the GEMM; on SM12x
    (sm_120f) the 128x128x128 kernel (example 87), N and K multiples of 128. Shapes those kernels
    cannot take, and other devices, raise :class:`BlockwiseFp8Unavailable` naming why.

    Args:
        context: the context the plan runs in. stream: the stream it is bound to; a CUTLASS plan's
            workspace is allocated from the context's default pool on it and kept until :meth:`close`.
        spec: ``DenseMatmulSpec(m, n, k)``.
        kernel: force a kernel by name: ``"blockwise_fp8_gemv"`` or ``"blockwise_fp8_mma"`` (M <= 16), or
            a name of ``CutlassLibrary.scaled_kernels`` that runs on the device and takes the shape.
        library: a loaded :class:`CutlassLibrary` (default: :func:`load_library` when a CUTLASS kernel
            is needed).
        compiler: the Compiler of the NVRTC kernel (default: one shared per context).
        warps: warps per block splitting K for the NVRTC kernels (1, 2, 4 or 8; default: one wave);
            must be None when a CUTLASS kernel runs.
        rows: weight rows per block of the NVRTC kernel (``blockwise_fp8_gemv``: 1, 2, 4 or 8 with rows
            x M <= 32; ``blockwise_fp8_mma``: 16 or 32; default: the kernel's, at M = 1 the rule's); None
            for CUTLASS. At M = 1 without ``kernel=``, ``rows``, ``persistent=True`` or
            ``decode="integer"`` pick the kernel they belong to (:func:`knob_kernel`).
        pdl_trigger: ``"early"`` or ``"late"`` (default: late): where the NVRTC kernel lets the next
            kernel start under programmatic dependent launch (cc >= 9.0); None for CUTLASS.
        decode: ``blockwise_fp8_mma`` only: ``"hardware"`` (default) or ``"integer"`` (see
            :data:`~mircuda.matmul._fp8_mma.DECODES`); None for CUTLASS.
        persistent: ``blockwise_fp8_gemv`` only: the persistent grid (as :class:`BlockwiseFp8VectorPlan`);
            None for CUTLASS.

    Streams: the plan is bound to ``stream`` (its workspace and the library's launch parameters belong
    to one execution at a time); ``execute`` refuses another stream, and the plan's while it is forked
    into a capture begun on another stream. A capture on the plan's stream records the execution.

    Raises:
        ContractError: bad context, stream, spec (K not a multiple of 16, named ``spec``), ``kernel``,
            ``library``, ``compiler``, ``warps``, ``rows``, ``pdl_trigger``, ``decode`` or ``persistent``.
        BlockwiseFp8Unavailable: no kernel for the shape on this device (M > 16 on a device other than
            cc 9.x / 12.x, a library without the FP8 kernels for it, or N, K outside the kernel's
            multiples).
        CutlassNotFound: a CUTLASS kernel is needed and no library is built (the message gives the
            build command).
        CutlassError: the library refused the plan.
        UnsupportedPlatform: compute capability below 8.9.
        CompileError: NVRTC rejected the kernel (a bug; the log is attached).
    """

    def __init__(self, context: Context, stream: Stream, spec: DenseMatmulSpec, *, kernel: str | None = None,
                 library: CutlassLibrary | None = None, compiler: Compiler | None = None,
                 warps: int | None = None, rows: int | None = None, pdl_trigger: str | None = None,
                 decode: str | None = None, persistent: bool | None = None) -> None:
        from ._library import CutlassLibrary as _Library
        from ._library import load_library
        from ._select import FP8_GEMV_NAME, FP8_MMA_NAME, FP8_NVRTC_MAX_M

        plan_stream(stream, context)
        warps, rows = (int_knob(warps), int_knob(rows))  # numpy integers as ints
        if not isinstance(spec, DenseMatmulSpec):
            raise ContractError("spec", "a DenseMatmulSpec(m, n, k)", repr(spec))
        check_kernel_name(kernel)
        if library is not None and not isinstance(library, _Library):
            raise ContractError("library", "None or a CutlassLibrary (mc.matmul.load_library())", repr(library))
        _check_spec_k(spec.k)
        _check_cc(context, "BlockwiseFp8Plan")
        lib, missing = library, None
        needs_library = (kernel not in (FP8_GEMV_NAME, FP8_MMA_NAME)
                         and (spec.m > FP8_NVRTC_MAX_M or kernel is not None))
        if needs_library:  # a CUTLASS kernel runs: the NVRTC knobs are refused before the library is looked for
            for name, value in (("warps", warps), ("rows", rows), ("pdl_trigger", pdl_trigger), ("decode", decode),
                                ("persistent", persistent)):
                if value is not None:
                    raise ContractError(name, f"None: {kernel if kernel is not None else 'a CUTLASS kernel'} (CUTLASS) "
                                              f"runs M = {spec.m}", repr(value))
        if lib is None and needs_library:
            try:
                lib = load_library()
            except CutlassNotFound as exc:
                missing = exc
        cc = context.device_info().compute_capability
        if spec.m == 1 and kernel is None:  # the M = 1 rule, or the kernel a knob belongs to
            self._selection, rows = m1_selection(spec.n, spec.k, cc, rows, persistent, decode)
        else:
            try:
                self._selection = select_fp8_kernel(lib.scaled_kernels if lib is not None else (), spec, cc, kernel,
                                                    context.device_info().multiprocessor_count)
            except MircudaError:
                # A device the library has kernels for hears how to build it; any other, that it has none.
                if missing is not None and cc[0] in (9, 12):
                    raise missing from None
                raise
        self._spec = spec
        self._lib = lib
        self._closed = False
        self._cutlass: CutlassFp8 | None = None
        if self._selection.kernel.origin == "nvrtc":
            self._setup(context, stream, spec.m, spec.n, spec.k, compiler, warps, self._selection.kernel.name, rows,
                        pdl_trigger, decode, persistent)
            return
        if compiler is not None:
            plan_compiler(compiler, context)  # checked alike on every path
        self._context, self._stream = context, stream
        self._m, self._n, self._k = spec.m, spec.n, spec.k
        self._in, self._out = dtype_info(e4m3), dtype_info(bf16)
        self._sa_shape = activation_scale_shape(spec.m, spec.k)
        self._sb_shape = weight_scale_shape(spec.n, spec.k)
        self._numba = None
        self._operands = cutlass_fp8_operands(self._selection.kernel, spec.m, spec.n, spec.k)
        self._cutlass = CutlassFp8(context, stream, lib, self._selection.kernel, spec.m, spec.n, spec.k)  # type: ignore[arg-type]

    # -- what runs ------------------------------------------------------------------------------
    @property
    def kernel_info(self) -> KernelInfo:
        """The chosen kernel's table entry (``origin`` ``"nvrtc"`` for the NVRTC kernel, ``"cutlass"`` for
        the library's, with its family, tile, cluster and multiples)."""
        return self._selection.kernel

    @property
    def kernel_name(self) -> str:
        return self._selection.kernel.name

    @property
    def kernel(self) -> TypedKernel:
        """The bound NVRTC kernel (contract ``d, c, a, sa, b, sb, alpha, beta, n, k``: what a graph's
        kernel node is updated with).

        Raises:
            ContractError: a CUTLASS kernel runs the plan (see :attr:`kernel_info`)."""
        self._nvrtc_only("kernel")
        return self._engine.kernel

    @property
    def launch_config(self) -> LaunchConfig:
        """The NVRTC kernel's ``ceil(N / rows)`` blocks of ``32 * warps`` threads (ContractError for CUTLASS)."""
        self._nvrtc_only("launch_config")
        return self._engine.config

    @property
    def rows(self) -> int:
        """The NVRTC kernel's weight rows per block (ContractError for CUTLASS)."""
        self._nvrtc_only("rows")
        return self._engine.rows

    @property
    def warps(self) -> int:
        """The NVRTC kernel's warps per block splitting K (ContractError for CUTLASS)."""
        self._nvrtc_only("warps")
        return self._engine.warps

    @property
    def workspace_bytes(self) -> int:
        """The CUTLASS plan's workspace, allocated at construction (0 for the NVRTC kernel)."""
        return self._cutlass.workspace_bytes if self._cutlass is not None else 0

    @property
    def handle(self) -> int:
        """The library's plan handle as an int; 0 for the NVRTC kernel and after :meth:`close`."""
        return self._cutlass.handle if self._cutlass is not None else 0

    @property
    def library(self) -> CutlassLibrary | None:
        return self._lib

    @property
    def programmatic_launch(self) -> bool:
        """Whether the plan's kernels launch with programmatic dependent launch (cc >= 9.0): they may then start
        while the previous kernel of the stream finishes, and wait for it (``griddepcontrol.wait``) before they
        touch global memory. True for the NVRTC kernels where the device supports it (their
        :attr:`numba_execute` launches without), and on cc 9.0 for the SM90 CUTLASS cooperative and ping-pong
        kernels (sm_90a, built with CUTLASS's grid dependency control; the cooperative kernel's ``sa`` copy
        launches so too), like DenseMatmulPlan's CUTLASS kernels.
        The value is the one set when the plan was made (:meth:`CutlassLibrary.set_pdl` on :attr:`handle`
        changes the launch, not this property). A CUTLASS kernel's :attr:`numba_execute` launches as
        :meth:`execute` does."""
        if self._cutlass is None:
            return bool(self._engine.config.programmatic_stream_serialization)
        return self._cutlass.pdl

    def _nvrtc_only(self, what: str) -> None:
        if self._cutlass is not None:
            raise ContractError("plan", f"a plan running the NVRTC kernel (for .{what})",
                                f"a plan running {self.kernel_name} (CUTLASS): see .kernel_info")

    def describe(self) -> Description:
        """Which kernel runs and why, in one paragraph."""
        s = self._spec
        head = (f"BlockwiseFp8Plan e4m3 x e4m3 -> bf16 (1x128 activation / 128x128 weight FP32 scales, K-major), "
                f"M={s.m} N={s.n} K={s.k} on {self._context.device_info().arch}: ")
        if self._cutlass is None:
            return Description(f"{head}{self._engine.describe()}. Why: {self._selection.reason}")
        k = self._selection.kernel
        tile = "x".join(map(str, k.tile))
        cluster = f", cluster {k.cluster[0]}x{k.cluster[1]}" if k.cluster != (1, 1) else ""
        ws = f", workspace {self.workspace_bytes} B" if self.workspace_bytes else ""
        ws += ", programmatic dependent launch" if self._cutlass.pdl else ""
        return Description(f"{head}kernel {k.name} (CUTLASS {k.family}, tile {tile}{cluster}{ws}; M, N, K multiples of "
                f"{k.multiples}). Why: {self._selection.reason}")

    # -- the hot path -----------------------------------------------------------------------------
    def execute(self, stream: Stream, a: DeviceBuffer[Any], sa: DeviceBuffer[Any], b: DeviceBuffer[Any],
                sb: DeviceBuffer[Any], d: DeviceBuffer[Any], alpha: float = 1.0, beta: float = 0.0,
                c: DeviceBuffer[Any] | None = None) -> None:
        """Enqueue ``D = alpha * (A B^T, blockwise scaled) + beta * C`` on ``stream``; allocates and
        synchronizes nothing.

        Argument order: ``alpha, beta`` come before ``c`` here, and ``c`` is optional; the raw-handle
        :attr:`numba_execute` takes ``(stream, a, sa, b, sb, d, c, alpha, beta)`` instead (``c`` first,
        required). Pass ``alpha``, ``beta`` and ``c`` by keyword to avoid mixing the two up.

        Args:
            stream: the plan's stream.
            a: E4M3 ``[M, K]``, 16-byte aligned. sa: FP32 ``[M, ceil(K/128)]``.
            b: E4M3 ``[N, K]``, 16-byte aligned. sb: FP32 ``[ceil(N/128), ceil(K/128)]``.
            d: BF16 ``[M, N]``, written (16-byte aligned for a CUTLASS kernel, 2 for the NVRTC one).
            c: BF16 ``[M, N]`` read when ``beta != 0`` (aligned as ``d``); ``None`` means ``d``.

        Raises:
            ContractError: a stream that is not the plan's (or the plan's forked into a capture begun on
                another stream), a buffer of the wrong type, dtype, context, length or alignment (named,
                with the address), ``d`` overlapping an input or a ``c`` that is not ``d`` (both byte
                ranges), or a bad scalar; nothing is enqueued then.
            UseAfterFree: a buffer was freed. ClosedResourceError: the plan or its stream was closed.
            CutlassError: the library failed to enqueue. CudaError: the driver refused the launch.
        """
        if self._closed:
            from ..errors import ClosedResourceError

            raise ClosedResourceError("the BlockwiseFp8Plan was closed")
        if self._cutlass is None:
            self._execute(stream, a, sa, b, sb, d, alpha, beta, c)
            return
        # the NVRTC kernel's checks, the overlap of d with what the kernel reads included
        pa, psa, pb, psb, pd, pc, fa, fb = self._checked(stream, a, sa, b, sb, d, alpha, beta, c)
        self._cutlass.execute(stream, pa, psa, pb, psb, pd, pc, fa, fb)

    @property
    def numba_execute(self) -> Any:
        """An ``@numba.njit`` function ``execute(stream, a, sa, b, sb, d, c, alpha, beta) -> int`` over raw
        handles (``Stream.handle``, ``DeviceBuffer.handle``; ``c`` = ``d``'s handle accumulates in place;
        note the order: ``c`` before ``alpha, beta``, unlike ``execute``'s ``d, alpha, beta, c``).
        The NVRTC kernel's launches through :mod:`mircuda.numba_ext` and returns a ``CUresult`` (0
        enqueued, 400 ``CUDA_ERROR_INVALID_HANDLE`` another stream, 1 ``CUDA_ERROR_INVALID_VALUE`` a
        misaligned address: see :func:`fp8_gemv_executor`); a CUTLASS kernel's calls the library's
        ``mircuda_cutlass_scaled_plan_execute`` and returns its status (0 enqueued, 1 another stream, 2 a
        misaligned address: see :func:`~mircuda.matmul._fp8_cutlass.scaled_executor`). Nothing is
        enqueued on a refusal; lengths and captures are not checked on this path. Keep the plan and its
        stream alive (and open) while the function is used."""
        if self._numba is None:
            if self._cutlass is None:
                self._numba = self._engine.numba_executor(self._stream.handle)
            else:
                self._numba = self._cutlass.numba_executor(self._stream.handle)
        return self._numba

    def close(self) -> None:
        """Destroy the library plan and free its workspace (stream-ordered on the plan's stream); the
        NVRTC kernel's module has its own lifetime. Idempotent; ``execute`` raises afterwards."""
        self._closed = True
        if self._cutlass is not None:
            self._cutlass.close()

    def __enter__(self) -> BlockwiseFp8Plan:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        s = self._spec
        return f"BlockwiseFp8Plan(m={s.m}, n={s.n}, k={s.k}, {self.kernel_name})"
