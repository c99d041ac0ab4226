"""The tensor-core blockwise FP8 decode kernel (``cuda_src/fp8_mma_gemv.cu``, ``blockwise_fp8_mma``):
BlockwiseFp8Plan's engine for 2 <= M <= 16, and both FP8 plans' for M = 1 where
:func:`~mircuda.matmul._select.fp8_m1_choice` names it (cc 9.x, K <= 4096) or ``kernel="blockwise_fp8_mma"``
asks for it. Same operands, parameters, checks and njit executor as the
CUDA-core kernel of :mod:`mircuda.matmul._fp8` (``blockwise_fp8_gemv``); the products run on
``mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32`` (PTX ISA 7.8, sm_89+)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from ..compile import CompileOptions, Compiler, CudaSource
from ..dtypes import bf16, e4m3, f32, i32
from ..errors import ContractError
from ..launch import In, InOut, LaunchConfig, cuda_export
from ..memory import DeviceBuffer
from ._spec import PDL_TRIGGERS, check_pdl_trigger, pdl_defines
from ._vector import blocks_per_sm, choose_vector_warps, package_source

if TYPE_CHECKING:
    from ..launch import TypedKernel
    from ..runtime import Context

__all__ = ["DECODES", "FP8_MMA_BLOCK_K", "FP8_MMA_ROWS", "FP8_MMA_SYMBOL", "PDL_TRIGGERS", "Fp8MmaGemv",
           "check_pdl_trigger", "fp8_mma_options", "fp8_mma_source", "fp8_mma_stages", "pdl_defines",
           "FP8_MMA_STAGES_MEASURED", "FP8_M1_STAGES_MEASURED", "FP8_M16_ROWS_MEASURED", "fp8_mma_rows"]

FP8_MMA_SYMBOL = "blockwise_fp8_mma"
FP8_MMA_ROWS = (16, 32)
"""Weight rows per block the kernel compiles for: one or two 16-row tiles (``MIRCUDA_FP8_TILES``); ptxas
(CUDA 13.0, sm_90, the plans' options: the load ring of :func:`fp8_mma_stages`, no spills) gives 86 / 110 / 116
registers at one tile for M = 1 / 8 / 16 and 128 / 194 / 228 at two (four tiles spill at M = 16, so they are not
offered)."""
FP8_MMA_BLOCK_K = 128
"""Columns one warp reads per step: one 128-K scale block (two 64-column mma steps)."""
DECODES = ("hardware", "integer")
"""How ``blockwise_fp8_mma`` turns E4M3 fragments into products (``MIRCUDA_FP8_INT_DECODE``; see
``cuda_src/fp8_mma_gemv.cu``): ``"hardware"`` (the default) hands E4M3 to ``mma.sync`` (QMMA on sm_89
and sm_120; sm_90 has no E4M3 ``mma.sync``: there the kernel decodes each fragment once with
``cvt.rn.f16x2.e4m3x2``, SASS F2FP, and runs FP16 ``mma.sync``, ``MIRCUDA_FP8_CVT``); ``"integer"`` decodes with integer
operations into FP16 x 2^-8 and runs FP16 ``mma.sync`` (a tuning option for sm_90, where F2FP's
conversion rate may bound the kernel; NaN codes read as +-480)."""


FP8_MMA_STAGES_MEASURED = (
    "fp8-profile on the H200, 2026-12-02, each variant's macros in its own run beside torch's rowwise _scaled_mm "
    "(benchmarks/results/fp8_mma_diet.json), 14336x4096 M = 2 / 4 / 8 / 16: a ring of 3 K-blocks 16.64 / 16.63 / "
    "16.44 / 22.78 µs, of 2 16.58 / 17.33 / 17.29 / 18.40, the former double buffer 17.2 / 17.5 / 19.5 / 20.6; at "
    "M = 16 the ring of 3 takes 174 registers and the one-wave rule then keeps one warp per block")
"""The measurement behind :func:`fp8_mma_stages`, as ``describe()`` quotes it."""


FP8_M1_STAGES_MEASURED = (
    "fp8-profile on the H200, 2026-12-02 (benchmarks/results/fp8_mma_m1_ring.json), M = 1: 16-row blocks 4096x4096 "
    "6.34 µs with a ring of 2 against 6.64-6.66 with 3 and 6.64-6.70 before the ring, 6144x4096 8.97 against 8.87 "
    "and 9.10; 32-row blocks (14336x4096, the M = 1 rule's) 17.59 with 2 and 16.55-16.59 with 3 against 16.21-16.29 "
    "with the former kernel (benchmarks/results/fp8_profile_m1_16.json, fp8_profile_decode_sweep.json)")
"""The measurement behind :func:`fp8_mma_stages` at M = 1, as ``describe()`` quotes it."""


FP8_M16_ROWS_MEASURED = (
    "fp8-profile --sweep on the H200, 2026-12-02 (benchmarks/results/fp8_mma_m1_ring.json, run D's ring3), M = 16: "
    "14336x4096 17.65-17.67 µs with 32-row blocks and a ring of 3 against 18.31-18.40 with 16 rows and 2; at N = 4096 "
    "and 6144 the 32-row form was level or slower (4096x14336 18.25 against 18.31, 4096x4096 7.75 against 7.16, "
    "6144x4096 10.34 against 10.06)")
"""The measurement behind :func:`fp8_mma_rows`, as ``describe()`` quotes it."""


def fp8_mma_rows(m: int, n: int) -> int:
    """Weight rows per block of ``blockwise_fp8_mma`` when ``rows`` is not given (M >= 2; the M = 1 rule picks its
    own): 32 for M > 8 with N >= 8192 (the M = 1 rule's threshold), with a ring of 3 (:func:`fp8_mma_stages`), else
    16 (:data:`FP8_M16_ROWS_MEASURED`)."""
    return 32 if m > 8 and n >= 8192 else 16


def fp8_mma_stages(m: int, rows: int = 16) -> int:
    """K-blocks of loads in ``blockwise_fp8_mma``'s register ring (``MIRCUDA_FP8_STAGES``): 3 for 2 <= M <= 8, 2
    above (:data:`FP8_MMA_STAGES_MEASURED`) but 3 with 32-row blocks (:data:`FP8_M16_ROWS_MEASURED`); at M = 1 2
    with 16-row blocks and 0, the former kernel (a copied double buffer and, on sm_90, ptxas's E4M3 emulation:
    :func:`fp8_mma_options` then adds ``MIRCUDA_FP8_CVT=0``), with 32-row blocks (:data:`FP8_M1_STAGES_MEASURED`)."""
    if m == 1:
        return 0 if rows == 32 else 2
    return 3 if m <= 8 or rows == 32 else 2


@functools.lru_cache(maxsize=1)
def fp8_mma_source() -> CudaSource:
    """``cuda_src/fp8_mma_gemv.cu`` as a :class:`CudaSource` (see :func:`package_source`)."""
    return package_source("fp8_mma_gemv.cu")


def fp8_mma_options(m: int, rows: int = 16, pdl_trigger: str | None = None, decode: str | None = None,
                    stages: int | None = None) -> CompileOptions:
    """The NVRTC options of the module for ``m`` rows of A, ``rows`` (16 or 32) weight rows per block, and
    when given the PDL trigger, the decode (:data:`DECODES`) and the K-blocks of the load ring (``stages``, 2..4:
    ``MIRCUDA_FP8_STAGES``; 0: the former kernel, with ``MIRCUDA_FP8_CVT=0``; None leaves the kernel's default, 2;
    the engine gives :func:`fp8_mma_stages`)."""
    extra = {} if decode is None else {"MIRCUDA_FP8_INT_DECODE": int(decode == "integer")}
    ring = {} if stages is None else {"MIRCUDA_FP8_STAGES": stages, **({"MIRCUDA_FP8_CVT": 0} if stages == 0 else {})}
    return CompileOptions(defines={"MIRCUDA_FP8_M": m, "MIRCUDA_FP8_TILES": rows // 16, **pdl_defines(pdl_trigger),
                                   **extra, **ring})


class Fp8MmaGemv:
    """The compiled tensor-core FP8 decode kernel for one M (1..16), N and K, with its rows, warps and
    launch configuration: an engine of both FP8 plans (they check operands). ``ceil(N / rows)`` blocks;
    warps per block split K by 128-K blocks (:func:`~mircuda.matmul._vector.choose_vector_warps`: one
    wave, at least two 128-K blocks per warp) unless ``warps`` is given.

    Raises:
        ContractError: ``m`` outside 1..16, ``rows`` not None, 16 or 32, ``warps`` not None, 1, 2, 4 or 8,
            ``pdl_trigger`` not None, ``"early"`` or ``"late"``, or ``decode`` not None or one of
            :data:`DECODES` (all checked before compiling).
        CompileError: NVRTC rejected the kernel (a bug; the log is attached).
    """

    symbol = FP8_MMA_SYMBOL

    def __init__(self, context: Context, m: int, n: int, k: int, compiler: Compiler, *, warps: int | None = None,
                 rows: int | None = None, pdl_trigger: str | None = None, decode: str | None = None) -> None:
        if type(m) is not int or not 1 <= m <= 16:
            raise ContractError("m", "1..16", repr(m))
        if warps is not None and (type(warps) is not int or warps not in (1, 2, 4, 8)):
            raise ContractError("warps", "None, 1, 2, 4 or 8 (warps per block splitting K)", repr(warps))
        if rows is not None and (type(rows) is not int or rows not in FP8_MMA_ROWS):
            raise ContractError("rows", f"None, 16 or 32 (weight rows per block of {FP8_MMA_SYMBOL}: 16-row mma "
                                        "tiles)", repr(rows))
        check_pdl_trigger(pdl_trigger)
        if decode is not None and (not isinstance(decode, str) or decode not in DECODES):
            raise ContractError("decode", "None, 'hardware' or 'integer' (how the E4M3 fragments are decoded)",
                                repr(decode))
        self.m, self.n, self.k = m, n, k
        self.default_rows = rows is None and fp8_mma_rows(m, n) != FP8_MMA_ROWS[0]
        self.rows = fp8_mma_rows(m, n) if rows is None else rows
        self.pdl_trigger = pdl_trigger
        self.decode = decode
        contract = cuda_export(FP8_MMA_SYMBOL, d=InOut[DeviceBuffer[bf16]], c=In[DeviceBuffer[bf16]],
                               a=In[DeviceBuffer[e4m3]], sa=In[DeviceBuffer[f32]], b=In[DeviceBuffer[e4m3]],
                               sb=In[DeviceBuffer[f32]], alpha=f32, beta=f32, n=i32, k=i32)
        self.stages = fp8_mma_stages(m, self.rows)
        self.options = fp8_mma_options(m, self.rows, pdl_trigger, decode, self.stages)
        self.arch = str(getattr(compiler, "arch", ""))  # the decode describe() names depends on the target
        self.kernel: TypedKernel = compiler.compile(fp8_mma_source(), self.options).kernel(contract)
        info = context.device_info()
        if warps is None:
            warps = choose_vector_warps(n, k, info.multiprocessor_count,
                                        lambda w: blocks_per_sm(context, self.kernel, w), rows=self.rows,
                                        chunk=FP8_MMA_BLOCK_K)
        self.warps = warps
        # On cc >= 9.0 the next kernel's ramp overlaps this one's tail (see cuda_src/fp8_mma_gemv.cu).
        self.config = LaunchConfig((-(-n // self.rows),), (32 * warps,),
                                   programmatic_stream_serialization=info.supports_programmatic_launch)
        self.config.check(info, self.kernel.attributes.max_threads_per_block)
        self.launch = self.kernel.launch

    def numba_executor(self, stream: int) -> Any:
        """``execute(stream, a, sa, b, sb, d, c, alpha, beta) -> CUresult`` for the plan's stream handle
        ``stream`` (the parameters are blockwise_fp8_gemv's: see :func:`~mircuda.matmul._fp8.fp8_gemv_executor`)."""
        from ._fp8 import fp8_gemv_executor

        return fp8_gemv_executor(self.kernel.handle, self.config.grid[0], self.config.block[0], self.n, self.k,
                                 stream=stream)

    def describe(self) -> str:
        defines = " ".join(f"-D {k}={v}" for k, v in self.options.defines)
        tiles = self.rows // 16
        return (f"kernel {FP8_MMA_SYMBOL} (NVRTC, {defines}): {self.config.grid[0]} blocks of {self.rows} weight rows "
                f"x {self.warps} warp(s) splitting K in 128-K blocks; tensor cores: mma.sync m16n8k32 E4M3 x E4M3 "
                f"-> FP32{' (E4M3 decoded by integer operations, FP16 mma)' if self.decode == 'integer' else ''}"
                + (" (on sm_90, which has no E4M3 mma.sync: each fragment decoded once by cvt.rn.f16x2.e4m3x2, "
                   "FP16 mma.sync m16n8k16 chained on the block sum)"
                   if self.decode != "integer" and self.stages != 0 and self.arch.split("_")[-1].rstrip("af") == "90"
                   else "") + " "
                f"({tiles} 16-row weight tile(s) x {-(-self.m // 8)} n8 tile(s) of activation rows, rows "
                "past M zero), each 128-K block's sums multiplied by sa * sb and added in FP32; 16-byte streamed "
                "weight loads (L1 bypassed, 128-byte L2 lines), "
                + (f"the next 128-K block in flight (the former kernel at M = 1 with 32-row blocks; {FP8_M1_STAGES_MEASURED})"
                   if self.stages == 0 else
                   f"a register ring of {self.stages} 128-K blocks of loads ({self.stages - 1} in flight; "
                   + (FP8_M1_STAGES_MEASURED if self.m == 1 else
                      FP8_M16_ROWS_MEASURED if self.m > 8 and self.rows == 32 else FP8_MMA_STAGES_MEASURED) + ")")
                + ("; 32 weight rows per block, the default for M > 8 at N >= 8192" if self.default_rows else "")
                + ("; programmatic dependent launch" if self.config.programmatic_stream_serialization else "")
                + (f" ({self.pdl_trigger} trigger)" if self.pdl_trigger is not None
                   and self.config.programmatic_stream_serialization else ""))
