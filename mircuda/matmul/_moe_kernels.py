"""The grouped NVFP4 plans' portable kernels (``cuda_src/fp4_grouped.cu``, and ``cuda_src/fp4_vector.cu``
compiled with ``MIRCUDA_FP4_GROUPED`` for the ``"vector"`` variant; both with the setup kernel of
``cuda_src/fp4_grouped_table.cuh``): compile options, the tile shape rule, launches and the
``@numba.njit`` executor. The plans (:mod:`mircuda.matmul._moe`) check
operands first; nothing here allocates on the execute path."""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..compile import Compiler, CompileOptions, CudaSource
from ..dtypes import f64, is_integer_value, u64
from ..errors import ContractError
from ..launch import LaunchConfig, cuda_export
from ._fp4_layout import check_tiled_decode_k
from ._vector import INVALID_HANDLE, INVALID_VALUE, package_source

if TYPE_CHECKING:
    from ..launch import TypedKernel
    from ..runtime import Stream

__all__ = ["DECODES", "VECTOR_DECODES", "REGISTER_CAPS", "LEAN_MAX_GROUPS", "dp4a_applies", "check_dp4a_tile",
           "DecodeTuning", "default_tuning", "check_tuning", "default_register_cap", "DP4A_REGISTER_CAP",
           "DP4A_REGISTER_CAP_MEASURED", "SETUP_SYMBOL", "GROUPED_SYMBOL",
           "ROWS_PER_TILE", "VECTOR_ROWS_PER_TILE", "WARPS", "VARIANTS", "grouped_source", "vector_source",
           "grouped_options", "choose_rows_per_tile", "default_rows_per_tile", "default_vector_rows", "resolve_tuning", "choose_variant",
           "GroupedKernels", "vector_warps", "workspace_ints", "grouped_executor"]

SETUP_SYMBOL = "fp4_grouped_setup"
GROUPED_SYMBOL = "fp4_grouped_bf16"
ROWS_PER_TILE = (8, 16, 32, 64)
"""Activation rows per m-tile the mma kernel compiles for (``MIRCUDA_MOE_MT``): one or more n8 columns of
``mma.sync.m16n8k16`` each."""
VECTOR_ROWS_PER_TILE = (1, 2, 4, 8)
"""Activation rows per tile of the ``"vector"`` variant (``MIRCUDA_FP4_M`` = ``MIRCUDA_MOE_MT``): each
decoded weight meets that many rows in FP16 (the CUDA-core path of ``BlockScaledFp4VectorPlan``)."""
VECTOR_MAX_MEAN_ROWS = 1.0
"""The automatic choice runs the ``"vector"`` variant when a group has at most this many rows on average
(``capacity / G``, or R): decode steps, where a group's weights are read for one or two rows."""
WARPS = 8
SETUP_THREADS = 256
SPLIT_K_MAX_ROWS = 16
"""Tiles of at most this many rows split K over the block's warps (decode: the weights dominate, each read
once per m-tile); larger tiles run the staged variant (the activation chunk decoded once per block into
shared memory, each warp 32 weight rows)."""
VARIANTS = {"split_n": 0, "split_k": 1, "staged": 2, "vector": 3}
"""The grouped kernel's variants (``MIRCUDA_MOE_MODE``): ``"split_k"`` 16 weight rows per block, the warps
split K; ``"split_n"`` 16 weight rows per warp, both operands decoded in registers; ``"staged"`` 32 weight
rows per warp, activations decoded once per block into shared memory (m-tiles of 16 rows or more);
``"vector"`` (``fp4_vector.cu``, no tensor cores) 4 or 8 weight rows per block, the warps split K, tiles of
1-8 rows: each weight is decoded once and multiplied with the tile's rows by HFMA2, exact FP16 sums per
16-element block (decode steps with a row or two per group)."""
BLOCK_ROWS = {"split_n": 16 * WARPS, "split_k": 16, "staged": 32 * WARPS, "vector": 4}
"""Weight rows per block of each variant."""
MAX_WEIGHT_BLOCKS = 65535
"""CUDA's grid.y limit: the weight-row blocks of one matrix (the mma variants), the most tile slots
(``"vector"``, whose blocks walk the tiles past them)."""
VECTOR_WARPS = (1, 2, 4, 8)
"""Warps per block of the ``"vector"`` variant (``fp4_vector.cu``'s ``kMaxWarps`` is 8)."""
DECODES = {"bytes": 0, "pairs": 1, "e4m3": 2}
"""The E2M1 decoders of ``fp4_grouped.cu`` (``MIRCUDA_MOE_DECODE``; the file's header gives each formula):
``"bytes"`` byte by byte (cvt.rn.f16x2.e2m1x2 on the sm_1x0f/a targets), ``"pairs"`` two elements per
shift, ``"e4m3"`` bit operations to E4M3 bytes then the hardware cvt.rn.f16x2.e4m3x2 (cc >= 8.9)."""
VECTOR_DECODES = ("dp4a",)
"""Decoders the ``"vector"`` variant takes beyond :data:`DECODES`: ``"dp4a"``, the integer path of
``cuda_src/fp4_vector.cu`` (``MIRCUDA_FP4_DP4A``; :data:`~mircuda.matmul._fp4.VECTOR_DECODES`): E2M1 codes to int8
by PRMT, IDP4A products, exact int32 sums per 16-element block, the activations in the load ring. It needs
1-row tiles (the kernel's M = 1) and K % 32 == 0 (:func:`check_dp4a_tile`), and a persistent grid only with
``DecodeTuning.lean_tiles`` (:func:`check_tuning`); the vector variant's default where it applies
(:func:`default_tuning`)."""
STAGES = (2, 3, 4)
REGISTER_CAPS = (0, 72, 80, 96)
"""``DecodeTuning.max_registers`` values: 0 (no cap: ``__launch_bounds__(256)``), or a ``__maxnreg__`` cap of the
``"dp4a"`` kernel (``MIRCUDA_FP4_MAX_REGS``); None takes :func:`default_register_cap`. sm_90 SASS (ptxas 13.0):
uncapped, the grouped dp4a kernel takes 99 (mixtral: N 14336, K 4096, 8 groups) and 123 registers (fine: N 768, K
2048, 128 groups), the single plan's 72; at 80 neither spills, with or without ``lean_tiles``
(``tests/test_moe_lean.py``); at 72 both spill (40-68 bytes). 8 weight rows per block (frags 2) take 128 registers
uncapped (the single plan's too) and spill at every cap here."""
DP4A_REGISTER_CAP = 80
"""The grouped ``"dp4a"`` kernel's default register cap on sm_90 with 4 weight rows per block (:func:`default_register_cap`).
Measured with ``moe-profile --sweep`` on the H200 (2026-12-01, ``benchmarks/results/moe_sweep_dp4a_registers.json``,
cold weights, median of 5 x 10 calls): Mixtral-like 1 token 22.66 µs against 26.29 uncapped (2.92 against 2.51 TB/s),
fine-grained 16 tokens 37.04 against 41.00, fine-grained 1 token 7.90 against 7.80 (within a run's spread); spill-free
(``tests/test_moe_lean.py``)."""
DP4A_ROW_WARPS = 2
"""The grouped ``"dp4a"`` kernel's default row warps on sm_90 with 4 weight rows per block (:func:`default_row_warps`),
with the register cap of 80 (which spills 8 bytes in the fine-grained kernel yet was the faster):
:data:`DP4A_ROW_WARPS_MEASURED`."""
DP4A_ROW_WARPS_MEASURED = (
    "moe-profile --sweep on the H200, 2026-12-01, median of 7 x 20 cold calls: row warps 2 with the 80-register cap "
    "against one warp per block with it: fine-grained 1 token 7.37 against 7.83 µs, 16 tokens 35.92 against 37.05, "
    "Mixtral-like 1 token 22.36 against 22.40; row warps 2 uncapped 7.33 / 37.25 / 22.84, row warps 4 with the cap "
    "7.45 / 36.21 / 22.42 (benchmarks/results/moe_sweep_row_warps.json)")
"""The measurement behind :data:`DP4A_ROW_WARPS`, as ``describe()`` quotes it."""
DP4A_REGISTER_CAP_MEASURED = ("Mixtral-like 1 token 22.7 µs against 26.3 uncapped, fine-grained 16 tokens 37.0 "
                              "against 41.0, H200 2026-12-01")
"""The measurement :data:`DP4A_REGISTER_CAP` rests on, as ``describe()`` quotes it."""
LEAN_MAX_GROUPS = 128
"""The most groups ``lean_tiles`` takes: the group table in at most 4 registers per lane and column (prefix,
offset, matrix)."""
TUNED_WARPS = (4, 8, 16)
FRAGS = (1, 2)


@dataclass(frozen=True)
class DecodeTuning:
    """Knobs of the portable grouped kernel's decode path (one compile-time choice each, so one GPU run can
    compare them: ``moe-profile --sweep``).

    Every field but ``decode`` left None takes the target's default for the plan's variant
    (:func:`default_tuning`); integers may be numpy integers. decode: one of :data:`DECODES`, or with variant
    ``"vector"`` ``"dp4a"`` (:data:`VECTOR_DECODES`: 1-row tiles, K % 32 == 0, persistent only with
    ``lean_tiles``); ``max_registers`` None takes :func:`default_register_cap`. stages: 2, 3 or
    4 K steps of loads in the register ring (split_k, split_n, vector; staged has no ring and takes 2).
    warps: 4, 8 or 16 warps per block (split_k; vector: 1, 2, 4 or 8, or 0 for the occupancy rule's count;
    the other variants take 8). frags: 1 or 2 weight-row groups per block (split_k: 16 or 32 weight rows,
    every activation fragment feeding both; vector: 4 or 8 weight rows; the other variants take 1).
    persistent: vector only: at most one wave of blocks over the tile slots, each walking weight-row blocks
    x, x + gridDim.x, ... with its load ring running on across them (fp4_vector.cu's MIRCUDA_FP4_PERSISTENT);
    measured slower in all four decode cases of ``moe-profile`` on the H200: 1.07-1.25x the time of the
    non-persistent vector kernel with the same 1-row tiles, 1.08-2.48x the default plan's
    (``benchmarks/results/moe_sweep_persistent.json``, 2026-12-01), so it stays off by default. With
    ``decode="dp4a"`` only together with ``lean_tiles``: the block looks its tile up once and walks the weight-row
    blocks, each row block's ring starting afresh.
    lean_tiles: ``decode="dp4a"`` only, at most :data:`LEAN_MAX_GROUPS` groups (``MIRCUDA_MOE_LEAN_TILES``): the
    tile's group table entries in one L2 round trip (not two dependent ones), the matrix's alpha read before the K
    loop, nothing but the tile index live across the tile walk (99 / 123 -> 80 / 95 registers for the mixtral / fine
    decode kernels, sm_90). Off by default: measured on the H200 (2026-12-01,
    ``benchmarks/results/moe_sweep_dp4a_registers.json``) it gained nothing over the register cap alone (Mixtral-
    like 1 token 22.66 µs either way; 23.76 without the cap) and was slower with it at fine 16 tokens (37.20 against
    37.04); persistent with it 23.29-23.72. The same run's 8 weight rows per block with it, uncapped
    (``dp4a:m1:r8:l1``), took 34.52 µs at fine 16 tokens, the fastest there, and 23.00 at Mixtral-like 1 token;
    8-row blocks without it were not in that run.
    max_registers: None (the default, :func:`default_register_cap`: 80 for ``"dp4a"`` with 4 weight rows per
    block on sm_90, else none) or one of :data:`REGISTER_CAPS`, a cap other than 0 with ``decode="dp4a"`` only: 0
    none, else the kernel's ``__maxnreg__`` (more warps per SM: 65536 / (32 * registers rounded up to 8), at most
    32 one-warp blocks).
    row_warps: 1 (one weight-row block per block), or 2, 4 or 8 with ``decode="dp4a"`` (without ``lean_tiles`` or
    ``persistent``; ``warps`` None, 0 or 1): that many warps per block, each taking its own weight-row block of the
    tile whole (``MIRCUDA_FP4_ROW_WARPS``, the single plan's ``row_warps``), so the grid has that many times fewer
    blocks; None takes :func:`default_row_warps` (:data:`DP4A_ROW_WARPS` for ``"dp4a"`` with 4 weight rows per block
    on sm_90 where ``warps`` is None or 1 and neither ``lean_tiles`` nor ``persistent`` is set; there with ``warps``
    0, the occupancy rule's, it is 1, named, so that the plan's ``tuning``, which shows the rule's count, runs the
    same kernel when given back; elsewhere None, one row block per block)."""

    decode: str
    stages: int | None = None
    warps: int | None = None
    frags: int | None = None
    persistent: bool = False
    lean_tiles: bool = False
    max_registers: int | None = None
    row_warps: int | None = None

    def __post_init__(self) -> None:
        # What holds for every variant and target is checked here, when the tuning is made, so that a misspelt
        # decoder fails on a machine without a GPU too; check_tuning adds what depends on the plan's variant and
        # target (dp4a with the vector variant only, e4m3 from cc 8.9, the variant's stages and warps).
        from ._fp4 import ROW_WARPS

        decodes = (*DECODES, *VECTOR_DECODES)
        if not isinstance(self.decode, str) or self.decode not in decodes:
            raise ContractError("tuning.decode", f"one of {', '.join(map(repr, decodes))}", repr(self.decode))
        for name, allowed in (("stages", STAGES), ("warps", tuple(sorted({0, *VECTOR_WARPS, *TUNED_WARPS}))),
                              ("frags", FRAGS), ("max_registers", REGISTER_CAPS), ("row_warps", ROW_WARPS)):
            value = getattr(self, name)
            if value is not None and (not is_integer_value(value) or value not in allowed):
                raise ContractError(f"tuning.{name}", f"None or an integer, one of {allowed}", repr(value))
        for name in ("persistent", "lean_tiles"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise ContractError(f"tuning.{name}", "a bool", repr(getattr(self, name)))

    def label(self, variant: str = "split_k") -> str:
        """``decode:s<stages>:w<warps>:r<weight rows per block>[:l1][:g<registers>][:o<row warps>][:persistent]``
        (the sweep's candidate name; rows per block 16 ``frags`` for the mma variants, 4 ``frags`` for ``"vector"``;
        ``l1`` lean tiles, ``g`` the register cap, ``o`` row warps, ``o1`` included, each only when set)."""
        rows = None if self.frags is None else (4 if variant == "vector" else 16) * self.frags
        return (f"{self.decode}:s{self.stages}:w{self.warps}:r{rows}" + (":l1" if self.lean_tiles else "")
                + (f":g{self.max_registers}" if self.max_registers else "")
                + (f":o{self.row_warps}" if self.row_warps else "") + (":persistent" if self.persistent else ""))


def _arch_number(arch: str) -> int:
    """``"sm_90"`` -> 90, ``"sm_120f"`` -> 120."""
    return int("".join(ch for ch in arch.removeprefix("sm_").removeprefix("compute_") if ch.isdigit()))


def dp4a_applies(arch: str, variant: str, rows_per_tile: int, k: int) -> bool:
    """Whether the ``"vector"`` variant defaults to ``decode="dp4a"``: 1-row tiles, K % 32 == 0 (K > 0 given) and
    a target without ``cvt.rn.f16x2.e2m1x2`` -- the conditions of the single plan's default
    (:func:`~mircuda.matmul._fp4.default_vector_decode`, measured there on the H200:
    :data:`~mircuda.matmul._fp4.DP4A_DEFAULT_MEASURED`)."""
    from ._fp4 import default_vector_decode

    return (variant == "vector" and rows_per_tile == 1 and k > 0
            and default_vector_decode(arch, 1, k, "fp4") == "dp4a")


def check_dp4a_tile(tuning: DecodeTuning, rows_per_tile: int, k: int) -> None:
    """What ``decode="dp4a"`` needs beyond :func:`check_tuning`: 1-row tiles and K % 32 == 0.

    Raises:
        ContractError: naming ``tuning.decode``.
    """
    if tuning.decode != "dp4a":
        return
    if rows_per_tile != 1:
        raise ContractError("tuning.decode", f"a decoder of {tuple(DECODES)} for {rows_per_tile}-row tiles ('dp4a' "
                            "takes 1-row tiles: the integer path is the M = 1 kernel)", "'dp4a'")
    if k % 32:
        raise ContractError("tuning.decode", f"a decoder of {tuple(DECODES)} for K = {k} ('dp4a' needs K % 32 == 0: "
                            "16-byte loads of 32 codes per lane)", "'dp4a'")


def default_register_cap(arch: str, decode: str, frags: int) -> int | None:
    """The register cap a :class:`DecodeTuning` without ``max_registers`` takes: :data:`DP4A_REGISTER_CAP` for
    ``decode="dp4a"`` with 4 weight rows per block (``frags`` 1) on sm_90, where it was measured; None (no cap)
    elsewhere: 8 rows per block spill at every cap, other targets were not measured. With row warps the cap of 80
    spills 8 bytes in the fine-grained layer's kernel (K = 2048, 128 groups; uncapped it takes 95 registers), yet
    was faster than uncapped in 2 of 3 decode cases and equal in the third (:data:`DP4A_ROW_WARPS_MEASURED`)."""
    return DP4A_REGISTER_CAP if _dp4a_measured(arch, decode, frags) else None


def _dp4a_measured(arch: str, decode: str, frags: int) -> bool:
    """Where the grouped integer path's register cap and row warps were measured: ``decode="dp4a"``, 4 weight rows
    per block (``frags`` 1), sm_90."""
    return decode == "dp4a" and frags == 1 and _arch_number(arch) == 90


def default_row_warps(arch: str, decode: str, frags: int) -> int | None:
    """The row warps a :class:`DecodeTuning` without ``row_warps`` takes where it may have them (``warps`` None or 1,
    no ``lean_tiles`` or ``persistent``): :data:`DP4A_ROW_WARPS` for ``decode="dp4a"`` with 4 weight rows per block
    (``frags`` 1) on sm_90, where it was measured (:data:`DP4A_ROW_WARPS_MEASURED`); None (one row block per block)
    elsewhere."""
    return DP4A_ROW_WARPS if _dp4a_measured(arch, decode, frags) else None


def _dp4a_tuning(k: int, arch: str) -> DecodeTuning:
    """``decode="dp4a"``'s knobs for K: 2 stages, 4 weight rows per block, 8 when K > 4096 (the single plan's rule,
    :func:`~mircuda.matmul._fp4.dp4a_rows`), the row warps of :func:`default_row_warps` (then one warp per row
    block: warps 0 is read as 1), else the occupancy rule's warps (0), the register cap of
    :func:`default_register_cap`."""
    from ._fp4 import dp4a_rows

    frags = dp4a_rows(k) // BLOCK_ROWS["vector"]
    row_warps = default_row_warps(arch, "dp4a", frags)
    return DecodeTuning("dp4a", 2, 0, frags, max_registers=default_register_cap(arch, "dp4a", frags),
                        row_warps=row_warps)


def default_tuning(arch: str, variant: str, rows_per_tile: int = 0, k: int = 0) -> DecodeTuning:
    """The expected best decode path for the NVRTC target ``arch`` (e.g. ``"sm_90"``): the e4m3 route where
    cvt.rn.f16x2.e4m3x2 exists (cc >= 8.9; on sm_120f too, where the bytes decoder's cvt.rn.f16x2.e2m1x2
    and its 2^-14 HMUL2 spill at 3 stages), else ``"pairs"``; split_k with 3 stages (2 on cc 12.x, where
    ptxas spills 16-row m-tiles at 3 and the CUTLASS grouped kernels normally run) and 8 warps of 16 rows
    (at most 128 registers, no spills: ``tests/test_moe.py``); the other variants 2 stages (their
    register budget). The ``"vector"`` variant with 1-row tiles and K % 32 == 0 (``rows_per_tile`` and ``k``
    given) takes ``"dp4a"`` where :func:`dp4a_applies`: 2 stages, the warps of the occupancy rule, 4 weight rows
    per block, 8 when K > 4096 (the single plan's rule, :func:`~mircuda.matmul._fp4.dp4a_rows`)."""
    number = _arch_number(arch)
    decode = "e4m3" if number >= 89 else "pairs"
    if dp4a_applies(arch, variant, rows_per_tile, k):
        # The single plan's integer path, which beat its e4m3 default by 11-19 % on the H200 (2026-12-01); the
        # grouped kernel's blocks run the same function on 1-row tiles.
        return _dp4a_tuning(k, arch)
    if variant == "vector":
        # moe-profile --sweep vector on the H200 (2026-12-01, benchmarks/results/moe_sweep_vector.json): 2 stages
        # x 4 weight rows x 1-row tiles was the fastest vector candidate where the plan chooses the vector
        # variant (mixtral 1 token 27.8 µs against 31.5 for 3 stages, fine 1 / 16 tokens 8.6 / 44.8 against
        # 8.9 / 50.1; at mixtral 16 tokens, where split_k runs, 2- and 4-row tiles were faster but still
        # far slower than split_k); the warps come from the occupancy rule (vector_warps), which took 1
        # there (2 and 4 were slower).
        return DecodeTuning(decode, 2, 0, 1)
    if variant == "split_k" and 89 <= number < 120:
        # moe-profile --sweep all on the H200 (2026-12-01): 2 stages x 4 warps x 32-row blocks was the fastest
        # in 3 of 4 decode cases (mixtral 1 / 16 tokens 39.0 / 172.3 µs against 42.8 / 220.2 for 3 x 8 x 16
        # rows; fine 16 tokens 44.8 against 54.4) and 3% slower in the fourth (fine, 1 token).
        return DecodeTuning(decode, 2, 4, 2)
    return DecodeTuning(decode, 3 if variant == "split_k" and number < 120 else 2, WARPS, 1)


def _is_int(value: object, want: int) -> bool:
    """``value`` is the integer ``want`` (a Python or numpy integer; not a bool, an array or a float)."""
    return is_integer_value(value) and int(value) == want


def _is_off(flag: object) -> bool:
    """``flag`` is False (a Python or numpy bool; not an array or another false value)."""
    return isinstance(flag, (bool, np.bool_)) and not flag


def resolve_tuning(tuning: object, variant: str, arch: str, rows_per_tile: int = 0, k: int = 0) -> DecodeTuning:
    """The plan's decode knobs: :func:`default_tuning` when ``tuning`` is None, else ``tuning`` with its None
    fields taken from the default of the decoder it names (``"dp4a"``: 2 stages, the occupancy rule's warps,
    :func:`~mircuda.matmul._fp4.dp4a_rows`; a word decoder: the variant's default without the integer path;
    ``row_warps`` as :class:`DecodeTuning` says), checked (:func:`check_tuning`, and :func:`check_dp4a_tile` when
    ``k`` is given)."""
    default = default_tuning(arch, variant, rows_per_tile, k)
    if tuning is None:
        return check_tuning(default, variant, arch)  # its normal form: warps 1 with row warps, as a tuning given
    if not isinstance(tuning, DecodeTuning):
        raise ContractError("tuning", "None or a DecodeTuning", repr(tuning))
    # The defaults of the decoder asked for: a word decoder given where dp4a is the default keeps the word
    # decoders' measured knobs (4 weight rows), and dp4a given where it is not takes its own rows rule.
    dp4a = isinstance(tuning.decode, str) and tuning.decode == "dp4a"
    if default.decode == "dp4a" and not dp4a:
        default = default_tuning(arch, variant)
    elif dp4a and default.decode != "dp4a" and variant == "vector" and k > 0:
        default = _dp4a_tuning(k, arch)
    filled = dataclasses.replace(
        tuning, stages=default.stages if tuning.stages is None else tuning.stages,
        warps=default.warps if tuning.warps is None else tuning.warps,
        frags=default.frags if tuning.frags is None else tuning.frags)
    if filled.max_registers is None and isinstance(filled.decode, str) and is_integer_value(filled.frags):
        filled = dataclasses.replace(filled, max_registers=default_register_cap(arch, filled.decode, int(filled.frags)))
    if (filled.row_warps is None and variant == "vector" and isinstance(filled.decode, str)
            and is_integer_value(filled.frags) and _is_off(tuning.lean_tiles) and _is_off(tuning.persistent)):
        # only where row warps can run: a K split, lean tiles or a persistent grid asked for keeps one row block per
        # block (a field of another type is left to check_tuning to name)
        row_warps = default_row_warps(arch, filled.decode, int(filled.frags))
        if row_warps is not None and _is_int(tuning.warps, 0):
            # the occupancy rule's warps asked for (they may split K): one row block per block, named, as the plan's
            # tuning then shows the rule's count in place of 0 -- 1 included, which with row_warps None would take
            # the default row warps when given back
            filled = dataclasses.replace(filled, row_warps=1)
        elif tuning.warps is None or _is_int(tuning.warps, 1):
            filled = dataclasses.replace(filled, row_warps=row_warps)
    checked = check_tuning(filled, variant, arch)
    if k:
        check_dp4a_tile(checked, rows_per_tile, k)
    return checked


FIXED_KNOBS = {"split_n": {"warps": WARPS, "frags": 1}, "staged": {"warps": WARPS, "frags": 1, "stages": 2}}
"""The knobs the mma variants other than split_k do not take: their one value."""


def check_tuning(tuning: object, variant: str, arch: str) -> DecodeTuning:
    """``tuning`` (every field given) checked against ``variant`` and the NVRTC target ``arch``; returns it
    with numpy integers and booleans as Python ones.

    Raises:
        ContractError: naming the field (``tuning.decode``, ``tuning.stages``...).
    """
    if not isinstance(tuning, DecodeTuning):
        raise ContractError("tuning", "None or a DecodeTuning", repr(tuning))
    if isinstance(tuning.decode, str) and tuning.decode == "dp4a" and variant != "vector":
        raise ContractError("tuning.decode", f"one of {', '.join(map(repr, DECODES))} with variant {variant!r} "
                            "('dp4a' is the vector variant's)", repr(tuning.decode))
    if not isinstance(tuning.decode, str) or tuning.decode not in (*DECODES, *VECTOR_DECODES):
        raise ContractError("tuning.decode", f"one of {', '.join(map(repr, (*DECODES, *VECTOR_DECODES)))} ('dp4a' "
                            "with variant 'vector')", repr(tuning.decode))
    if tuning.decode == "e4m3" and _arch_number(arch) < 89:
        raise ContractError("tuning.decode", "'bytes' or 'pairs' below compute capability 8.9 (cvt.rn.f16x2.e4m3x2)",
                            f"'e4m3' for target {arch}")
    persistent = tuning.persistent
    if isinstance(persistent, np.bool_):
        persistent = bool(persistent)
    if not isinstance(persistent, bool) or (persistent and variant != "vector"):
        raise ContractError("tuning.persistent", "False, or True with variant 'vector'",
                            f"{tuning.persistent!r} with variant {variant!r}")
    lean = tuning.lean_tiles
    if isinstance(lean, np.bool_):
        lean = bool(lean)
    if not isinstance(lean, bool) or (lean and tuning.decode != "dp4a"):
        raise ContractError("tuning.lean_tiles", "False, or True with decode 'dp4a' (the integer path's tile walk)",
                            f"{tuning.lean_tiles!r} with decode {tuning.decode!r}")
    if persistent and tuning.decode == "dp4a" and not lean:
        raise ContractError("tuning.persistent", "False with decode 'dp4a' unless lean_tiles (the integer path walks "
                            "row blocks only in the lean tile walk)", repr(tuning.persistent))
    cap = tuning.max_registers
    if cap is not None and (not is_integer_value(cap) or cap not in REGISTER_CAPS or (cap and tuning.decode != "dp4a")):
        raise ContractError("tuning.max_registers", f"None or an integer, one of {REGISTER_CAPS} (a cap other than 0 "
                            "with decode 'dp4a')", f"{cap!r} with decode {tuning.decode!r}")
    from ._fp4 import ROW_WARPS

    row_warps = tuning.row_warps
    if row_warps is not None:
        if not is_integer_value(row_warps) or row_warps not in ROW_WARPS:
            raise ContractError("tuning.row_warps", f"None or an integer, one of {ROW_WARPS}", repr(row_warps))
        row_warps = int(row_warps)  # 1 given stays 1: one row block per block, where None may take row warps
    if row_warps is not None and row_warps > 1 and (tuning.decode != "dp4a" or variant != "vector" or lean
                                                    or persistent):
        raise ContractError("tuning.row_warps", "None or 1 unless decode 'dp4a' with variant 'vector', without "
                            "lean_tiles or persistent (the integer path's one-tile blocks)",
                            f"{tuning.row_warps!r} with decode {tuning.decode!r}, variant {variant!r}")
    if row_warps is not None and row_warps > 1 and not (_is_int(tuning.warps, 0) or _is_int(tuning.warps, 1)):
        raise ContractError("tuning.warps", f"0 or 1 with row_warps={row_warps} (each warp takes its row block "
                            "whole; no K split)", repr(tuning.warps))
    # vector: warps 0 leaves them to the occupancy rule (vector_warps), as its default tuning does
    values = {}
    for name, allowed in (("stages", STAGES), ("warps", (0, *VECTOR_WARPS) if variant == "vector" else TUNED_WARPS),
                          ("frags", FRAGS)):
        value = getattr(tuning, name)
        if not is_integer_value(value) or value not in allowed:
            raise ContractError(f"tuning.{name}", f"an integer, one of {allowed}" + (" with variant 'vector'" if
                                variant == "vector" else ""), repr(value))
        fixed = FIXED_KNOBS.get(variant, {}).get(name)
        if fixed is not None and value != fixed:
            raise ContractError(f"tuning.{name}", f"{fixed} with variant {variant!r} (the variant has no such knob)",
                                repr(value))
        values[name] = int(value)
    return dataclasses.replace(tuning, stages=values["stages"],
                               warps=1 if row_warps is not None and row_warps > 1 else values["warps"],
                               frags=values["frags"], persistent=persistent, lean_tiles=lean,
                               max_registers=None if cap is None else int(cap), row_warps=row_warps)


@functools.lru_cache(maxsize=1)
def grouped_source() -> CudaSource:
    """``cuda_src/fp4_grouped.cu`` with its headers inlined."""
    return package_source("fp4_grouped.cu")


def choose_rows_per_tile(rows_per_group: int) -> int:
    """The smallest of :data:`ROWS_PER_TILE` holding ``rows_per_group`` (the expected rows of a group:
    ``ceil(capacity / groups)``, or R for the indexed plan), 64 above that."""
    return next((t for t in ROWS_PER_TILE if t >= rows_per_group), ROWS_PER_TILE[-1])


def vector_source() -> CudaSource:
    """``cuda_src/fp4_vector.cu`` with its headers inlined (the ``"vector"`` variant's module)."""
    from ._fp4 import fp4_vector_source

    return fp4_vector_source()


def choose_variant(rows_per_tile: int) -> str:
    """``"split_k"`` for m-tiles of at most :data:`SPLIT_K_MAX_ROWS` rows (decode), else ``"staged"``."""
    return "split_k" if rows_per_tile <= SPLIT_K_MAX_ROWS else "staged"


def default_rows_per_tile(capacity: int, groups: int, fixed_rows: int = 0) -> int:
    """The plans' default m-tile: :func:`choose_rows_per_tile` of R (the indexed plan: every group has R
    rows), else of ``min(capacity, 4 ceil(capacity / groups))``: routing is uneven, and a group's weights
    are read once per m-tile, so the tile leaves room for 4x the mean rows per group -- but 2x where 4x would
    give a split_k tile (at most :data:`SPLIT_K_MAX_ROWS` rows; a mean of 3 or 4 rows: 8-row tiles, not 16).
    Measured with ``moe-profile --sweep ...:t8`` on the H200 (2026-12-01,
    ``benchmarks/results/moe_sweep_tile8.json``): Mixtral-like at 16 tokens (top-2 of 8 experts, 4 rows per expert on
    average) took 139.9 µs with 8-row tiles against 172.4 with 16 (half the mma.sync n8 tiles and activation decodes
    per weight; a group past 8 rows takes a second tile, which reads its weights again)."""
    if fixed_rows:
        return choose_rows_per_tile(fixed_rows)
    mean = -(-capacity // groups)
    headroom = 4 * mean
    if choose_rows_per_tile(min(capacity, headroom)) <= SPLIT_K_MAX_ROWS:
        headroom = 2 * mean
    return choose_rows_per_tile(min(capacity, headroom))


def default_vector_rows(capacity: int, groups: int, fixed_rows: int = 0) -> int:
    """The ``"vector"`` variant's default tile: the smallest of :data:`VECTOR_ROWS_PER_TILE` holding R (the
    indexed plan) or ``ceil(capacity / groups)`` (8 above that): a group's usual rows meet each decoded
    weight in one tile."""
    rows = fixed_rows if fixed_rows else -(-capacity // groups)
    return next((t for t in VECTOR_ROWS_PER_TILE if t >= rows), VECTOR_ROWS_PER_TILE[-1])


def grouped_options(*, n: int, k: int, groups: int, bank_size: int, capacity: int, rows_per_tile: int,
                    fixed_rows: int, tiled: bool, sets: int, variant: str | None = None,
                    tuning: DecodeTuning | None = None) -> CompileOptions:
    """The NVRTC defines of ``fp4_grouped.cu`` for one plan (its shapes are compile-time constants);
    ``variant`` None: :func:`choose_variant`; ``tuning`` None: the kernel's own defaults (the bytes decode,
    2 stages, 8 warps, 16-row blocks).

    Raises:
        ContractError: variant ``"vector"`` with tiled scales and K above
            :data:`~mircuda.matmul._fp4_layout.TILED_DECODE_MAX_K` (named ``spec``: fp4_vector.cu's 32-bit
            column offset into the tiled scales); ``tuning.lean_tiles`` with more than :data:`LEAN_MAX_GROUPS`
            groups.
    """
    variant = choose_variant(rows_per_tile) if variant is None else variant
    if variant == "vector":
        check_tiled_decode_k(k, "tiled" if tiled else "linear")
    moe = {"MIRCUDA_MOE_N": n, "MIRCUDA_MOE_K": k, "MIRCUDA_MOE_G": groups, "MIRCUDA_MOE_E": bank_size,
           "MIRCUDA_MOE_CAPACITY": capacity, "MIRCUDA_MOE_MT": rows_per_tile, "MIRCUDA_MOE_FIXED_ROWS": fixed_rows,
           "MIRCUDA_MOE_TILED": int(tiled), "MIRCUDA_MOE_SETS": sets}
    if variant == "vector":
        vt = DecodeTuning("bytes", 2, 0, 1) if tuning is None else tuning
        vt_frags = vt.frags or 1  # None: the kernel's own defaults (1 frag, 2 stages)
        dp4a = vt.decode == "dp4a"
        if dp4a:
            check_dp4a_tile(vt, rows_per_tile, k)
        if vt.lean_tiles and groups > LEAN_MAX_GROUPS:
            raise ContractError("tuning.lean_tiles", f"False for {groups} groups (at most {LEAN_MAX_GROUPS}: the group "
                                "table in registers)", "True")
        # the knobs' defines only when set (no cap: none), so uncapped plans' options and cache keys stay as
        # they were before the knobs; the sm_90 dp4a default does set its cap (default_register_cap)
        lean = {"MIRCUDA_MOE_LEAN_TILES": 1} if vt.lean_tiles else {}
        if vt.max_registers:
            lean["MIRCUDA_FP4_MAX_REGS"] = vt.max_registers
        if vt.row_warps and vt.row_warps > 1:
            lean["MIRCUDA_FP4_ROW_WARPS"] = vt.row_warps
        return CompileOptions(defines={**moe, **lean,
            "MIRCUDA_FP4_GROUPED": 1, "MIRCUDA_FP4_M": rows_per_tile, "MIRCUDA_FP4_ROWS": BLOCK_ROWS["vector"] * vt_frags,
            "MIRCUDA_FP4_TILED": int(tiled), "MIRCUDA_FP4_ACT_TILED": 0, "MIRCUDA_FP4_WIDE": int(k % 32 == 0),
            "MIRCUDA_FP4_ACT_BF16": 0, "MIRCUDA_FP4_DECODE": 0 if dp4a else DECODES[vt.decode],
            "MIRCUDA_FP4_DP4A": int(dp4a), "MIRCUDA_FP4_HALF_SUM": int(not dp4a),
            "MIRCUDA_FP4_STAGES": vt.stages or 2, "MIRCUDA_FP4_PERSISTENT": int(vt.persistent)})
    tuned = {} if tuning is None else {  # a None field: the kernel's own default (2 stages, 8 warps, 1 frag)
        "MIRCUDA_MOE_DECODE": DECODES[tuning.decode], "MIRCUDA_MOE_STAGES": tuning.stages or 2,
        "MIRCUDA_MOE_WARPS": tuning.warps or WARPS, "MIRCUDA_MOE_FRAGS": tuning.frags or 1}
    return CompileOptions(defines={**tuned, **moe, "MIRCUDA_MOE_MODE": VARIANTS[variant]})


def workspace_ints(groups: int) -> int:
    """int32 elements of the group table: prefix [G + 1], count, offset, matrix [G] each, the ticket."""
    return 4 * groups + 2


SETUP_PARAMS = ("ws", "error", "alpha_per_matrix", "row_counts", "offsets", "matrix_indices", "global_a1",
                "global_b1", "alpha1", "global_a2", "global_b2", "alpha2")
GROUPED_PARAMS = ("ws", "alpha_per_matrix", "a1", "sa1", "b1", "sb1", "d1", "a2", "sa2", "b2", "sb2", "d2")


@dataclass(frozen=True)
class TileShape:
    """The portable kernel's geometry for one plan."""

    rows_per_tile: int
    variant: str
    tiles: int          # grid.x ("vector": grid.y): m-tile slots (persistent: a block walks tiles x, x + grid.x, ...)
    weight_blocks: int  # grid.y ("vector": grid.x)
    sets: int           # grid.z
    warps: int = WARPS  # per block, splitting K
    row_warps: int = 1  # "vector" with dp4a: warps per block, each taking its own weight-row block (grid.x / it)


def tile_shape(*, n: int, capacity: int, groups: int, rows_per_tile: int, fixed_rows: int, sets: int,
               variant: str | None = None, tuning: DecodeTuning | None = None) -> TileShape:
    """Grid of the grouped kernel. With groups that do not overlap (the documented use), the m-tiles
    number at most ``min(ceil(capacity / MT) + G, capacity)`` (indexed: ``P ceil(R / MT)``): one block per
    m-tile slot (``"vector"``: at most :data:`MAX_WEIGHT_BLOCKS` slots, grid.y); overlapping groups, and
    tiles past the slots, are still all computed (the blocks walk the list)."""
    tiles = (groups * -(-fixed_rows // rows_per_tile) if fixed_rows else
             min(-(-capacity // rows_per_tile) + groups, capacity))
    variant = choose_variant(rows_per_tile) if variant is None else variant
    if variant == "vector":
        tiles = min(tiles, MAX_WEIGHT_BLOCKS)
    warps, frags = (WARPS, 1) if tuning is None else (tuning.warps if tuning.warps is not None else WARPS,
                                                      tuning.frags or 1)
    row_warps = (tuning.row_warps or 1) if tuning is not None and variant == "vector" else 1
    return TileShape(rows_per_tile, variant, max(tiles, 1), -(-n // (BLOCK_ROWS[variant] * frags)), sets,
                     1 if row_warps > 1 else warps, row_warps)


def vector_warps(shape: TileShape, capacity: int, groups: int, k: int, multiprocessors: int,
                 blocks_per_sm: Any) -> int:
    """The ``"vector"`` variant's warps per block when not given: :func:`~mircuda.matmul._vector.choose_vector_warps`
    (the single FP4 GEMV's occupancy rule) over the weight-row blocks of the tiles a routing is expected to
    fill, ``min(ceil(capacity / MT), G)`` (every row in its own group, at most G groups), in every operand set
    (the paired plan's grid.z doubles the blocks)."""
    from ._vector import choose_vector_warps

    expected = max(1, min(-(-capacity // shape.rows_per_tile), groups)) * shape.sets
    # choose_vector_warps counts blocks as ceil(N / rows): pass the blocks themselves with rows = 1.
    return choose_vector_warps(shape.weight_blocks * expected, k, multiprocessors, blocks_per_sm, rows=1,
                               chunk=32 * (32 if k % 32 == 0 else 16))


class GroupedKernels:
    """The setup and grouped kernels compiled for one plan, with their launch configurations."""

    def __init__(self, compiler: Compiler, options: CompileOptions, shape: TileShape, groups: int,
                 bank_size: int, pdl: bool = False, *, capacity: int = 0, k: int = 0,
                 persistent: bool = False) -> None:
        """``pdl``: launch both kernels with programmatic stream serialization (cc >= 9.0): each waits
        (``griddepcontrol.wait``) before touching memory, so the grouped kernel's launch overlaps the setup
        kernel's run. The ``"vector"`` variant with ``shape.warps == 0`` takes :func:`vector_warps`'s count
        (``capacity`` and ``k`` feed it)."""
        vector = shape.variant == "vector"
        module = compiler.compile(vector_source() if vector else grouped_source(), options)
        self.arch = compiler.arch
        self.options = options
        self.shape = shape
        self.setup: TypedKernel = module.kernel(cuda_export(
            SETUP_SYMBOL, **{name: (f64 if name.startswith("alpha") and name != "alpha_per_matrix" else u64)
                             for name in SETUP_PARAMS}))
        self.grouped: TypedKernel = module.kernel(cuda_export(GROUPED_SYMBOL, **{name: u64 for name in GROUPED_PARAMS}))
        self.pdl = pdl
        if vector and shape.warps == 0:
            from ._vector import blocks_per_sm

            context = compiler.context
            warps = vector_warps(shape, capacity, groups, k, context.device_info().multiprocessor_count,
                                 lambda w: blocks_per_sm(context, self.grouped, w))
            shape = dataclasses.replace(shape, warps=warps)
            self.shape = shape
        self.setup_config = LaunchConfig((-(-max(groups, bank_size) // SETUP_THREADS),), (SETUP_THREADS,),
                                         programmatic_stream_serialization=pdl)
        # The vector kernel takes the weight-row blocks on x (up to 2^31 - 1) and one tile per y; persistent,
        # one wave over the tiles a routing is expected to fill, each block walking weight-row blocks.
        x = shape.weight_blocks
        if vector and persistent:
            from ._vector import blocks_per_sm

            context = compiler.context
            expected = max(1, min(shape.tiles, -(-capacity // shape.rows_per_tile), groups))
            wave = context.device_info().multiprocessor_count * max(1, blocks_per_sm(context, self.grouped, shape.warps))
            x = min(x, max(1, wave // expected))
        x = -(-x // shape.row_warps)  # row warps: each block's warps take row_warps consecutive row blocks
        grid = (x, shape.tiles, shape.sets) if vector else (shape.tiles, shape.weight_blocks, shape.sets)
        self.grouped_config = LaunchConfig(grid, (32 * shape.warps * shape.row_warps,),
                                           programmatic_stream_serialization=pdl)

    def launch(self, stream: Stream, setup_args: tuple[Any, ...], grouped_args: tuple[Any, ...]) -> None:
        self.setup.launch(stream, self.setup_config, *setup_args)
        self.grouped.launch(stream, self.grouped_config, *grouped_args)


def grouped_executor(kernels: GroupedKernels, kept: tuple[int, int, int], masks: tuple[int, ...],
                     launch_function: Any = None, *, stream: int) -> Any:
    """An ``@numba.njit`` function ``execute(stream, row_counts, offsets, matrix_indices, a1, sa1, b1, sb1,
    d1, global_a1, global_b1, alpha1, a2, sa2, b2, sb2, d2, global_a2, global_b2, alpha2) -> CUresult``
    launching the setup and the grouped kernel through ``cuLaunchKernel``
    (:func:`mircuda.numba_ext.driver_function`, or ``launch_function`` with its prototype). Every parameter
    of both kernels is 8 bytes (addresses, alphas as double): C ABI offsets 0, 8, ..., 88.

    ``kept`` is ``(workspace, error flag, alpha_per_matrix)``; ``masks`` the alignment masks of ``(a, sa,
    b, sb, d)`` (the routing and global scales: 4 bytes). Returns ``INVALID_HANDLE`` (400) for a stream
    that is not ``stream`` and ``INVALID_VALUE`` (1) for a misaligned address, launching nothing; lengths
    are not checked here. The second set's addresses are 0 for a single-set plan. The launches are plain
    ones (no programmatic dependent launch: the kernels are correct either way)."""
    import numba
    import numpy as np

    from ..numba_ext import driver_function

    launch = driver_function("cuLaunchKernel") if launch_function is None else launch_function
    U = numba.uint64
    bound = U(stream)
    ws, err, apm = (U(x) for x in kept)
    ma, msa, mb, msb, md = (U(x) for x in masks)
    setup, grouped = kernels.setup.handle, kernels.grouped.handle
    sgrid = kernels.setup_config.grid[0]
    gx, gy, gz = kernels.grouped_config.grid
    sthreads, gthreads = kernels.setup_config.block[0], kernels.grouped_config.block[0]
    two = kernels.shape.sets == 2
    four = U(3)

    @numba.njit(cache=False)
    def execute(stream: int, row_counts: int, offsets: int, matrix_indices: int, a1: int, sa1: int, b1: int,
                sb1: int, d1: int, global_a1: int, global_b1: int, alpha1: float, a2: int, sa2: int, b2: int,
                sb2: int, d2: int, global_a2: int, global_b2: int, alpha2: float) -> int:
        if U(stream) != bound:
            return INVALID_HANDLE
        if (U(row_counts) | U(offsets) | U(matrix_indices) | U(global_a1) | U(global_b1)) & four:
            return INVALID_VALUE
        if U(a1) & ma or U(sa1) & msa or U(b1) & mb or U(sb1) & msb or U(d1) & md:
            return INVALID_VALUE
        if two and (U(a2) & ma or U(sa2) & msa or U(b2) & mb or U(sb2) & msb or U(d2) & md
                    or (U(global_a2) | U(global_b2)) & four):
            return INVALID_VALUE
        values = np.zeros(12, np.uint64)
        values[0], values[1], values[2] = ws, err, apm
        values[3], values[4], values[5] = U(row_counts), U(offsets), U(matrix_indices)
        values[6], values[7], values[9], values[10] = U(global_a1), U(global_b1), U(global_a2), U(global_b2)
        floats = values.view(np.float64)
        floats[8] = alpha1
        floats[11] = alpha2
        base = U(values.ctypes.data)
        pointers = np.empty(12, np.uint64)
        for i in range(12):
            pointers[i] = base + U(8 * i)
        status = launch(setup, sgrid, 1, 1, sthreads, 1, 1, 0, U(stream), U(pointers.ctypes.data), 0)
        if status != 0:
            return status
        gvalues = np.zeros(12, np.uint64)
        gvalues[0], gvalues[1] = ws, apm
        gvalues[2], gvalues[3], gvalues[4], gvalues[5], gvalues[6] = U(a1), U(sa1), U(b1), U(sb1), U(d1)
        if two:
            gvalues[7], gvalues[8], gvalues[9], gvalues[10], gvalues[11] = U(a2), U(sa2), U(b2), U(sb2), U(d2)
        gbase = U(gvalues.ctypes.data)
        gpointers = np.empty(12, np.uint64)
        for i in range(12):
            gpointers[i] = gbase + U(8 * i)
        return launch(grouped, gx, gy, gz, gthreads, 1, 1, 0, U(stream), U(gpointers.ctypes.data), 0)

    return execute
