"""Grouped NVFP4 plans for mixture-of-experts layers: ``VariableGroupedFp4Plan``, ``IndexedGroupedFp4Plan``
and ``PairedVariableGroupedFp4Plan`` (issue 15).

For every group g of device-resident routing (``row_counts[g]``, ``offsets[g]``, ``matrix_indices[g]``,
int32) the plans compute, for the rows r in ``[offsets[g], offsets[g] + row_counts[g])``::

    D[r, n] = alpha_per_matrix[e] * sum_k (qa[r, k] sa[r, k/16]) (qb_e[n, k] sb_e[n, k/16]),  e = matrix_indices[g]
    alpha_per_matrix[e] = alpha * (*global_a) * global_b[e]     (computed on the device at every execute)

with FP32 accumulation and BF16 output, for NVFP4 operands as NVIDIA ModelOpt / TensorRT-LLM produce them
(E2M1 pairs, element 2i in the low nibble; UE4M3 scales per 16 K-elements; FP32 global scales; see
:class:`~mircuda.matmul.BlockScaledFp4Plan`). The routing is never read on the host: ``execute`` enqueues
a setup kernel (validation, error flag, alpha_per_matrix, the tile list) and the grouped kernel, so a
captured graph follows routing and global scales rewritten on the device between replays.

Operands (the shared contract ``moe_interface.md``):

- A ``[capacity, K/2]`` u8; its scales LINEAR ``[capacity, K/16]`` e4m3 (row r of A has scale row r);
  D ``[capacity, N]`` BF16 row-major. **Rows no group covers are never written.**
- The bank ``[E, N, K/2]`` u8 (matrix e at byte ``e N K/2``); its scales per matrix in ``scale_layout``:
  ``"tiled"`` (CUTLASS's SM1xx block-scaled layout, N padded to 128 and K/16 to 4; matrix e at byte
  ``e ceil(N/128) 128 ceil(K/64) 4``) or ``"linear"`` (``[N, K/16]``; matrix e at byte ``e N K/16``;
  portable path only).
- Invalid routing entries (matrix index outside ``[0, E)``: bit 1; negative count, negative offset or
  ``offset + count > capacity``: bit 2) make that group empty and OR the bit into the plan's device int32
  error flag (:attr:`error_flag`, :meth:`read_error_flag`); the other groups are computed; nothing is
  read or written out of bounds. A matrix index is checked even when its count is 0.
"""

from __future__ import annotations

import dataclasses
import weakref
from typing import TYPE_CHECKING, Any

from .. import _cuda
from .._repr import Description
from ..dtypes import bf16, dtype_info, e4m3, f32, i32, u8
from ..dtypes import is_integer_value
from ..errors import ClosedResourceError, ContractError, CutlassError, CutlassNotFound
from ..memory import DeviceBuffer
from ._fp4 import DP4A_DECODE, DP4A_DEFAULT_MEASURED, _device_checks, fp4_compiler, has_e2m1_cvt
from ._fp4_layout import address, check_layout
from ._fp4_reference import BLOCK, scale_bytes
from ._moe_kernels import (BLOCK_ROWS, DP4A_REGISTER_CAP, DP4A_REGISTER_CAP_MEASURED, DP4A_ROW_WARPS,
                           DP4A_ROW_WARPS_MEASURED, MAX_WEIGHT_BLOCKS, ROWS_PER_TILE, VARIANTS, VECTOR_MAX_MEAN_ROWS,
                           VECTOR_ROWS_PER_TILE, WARPS, DecodeTuning, GroupedKernels, resolve_tuning,
                           choose_variant, default_rows_per_tile, default_vector_rows, grouped_executor, grouped_options, tile_shape, workspace_ints)
from ._moe_spec import GroupedFp4Operands, IndexedGroupedFp4Spec, VariableGroupedFp4Spec
from ._spec import Operand, PlanBase, check_disjoint, check_operand, check_scalar, plan_stream, scalar_operand

if TYPE_CHECKING:
    from ..compile import Compiler
    from ..runtime import Context, Stream
    from ._library import CutlassLibrary

__all__ = ["VariableGroupedFp4Plan", "IndexedGroupedFp4Plan", "PairedVariableGroupedFp4Plan", "ERROR_MATRIX_INDEX",
           "ERROR_ROWS", "GroupedFp4Operands", "VariableGroupedFp4Spec", "IndexedGroupedFp4Spec", "PATHS"]

PATHS = ("cutlass", "decode_grouped", "portable")
"""The grouped plans' execution paths (the ``path=`` argument; None chooses): ``"cutlass"`` the SM120 grouped
block-scaled kernels (cc 12.x), ``"decode_grouped"`` NVFP4 decoded exactly to BF16, then the SM90 grouped BF16
CUTLASS kernel (cc 9.0; :mod:`._moe_grouped_dense`), ``"portable"`` ``fp4_grouped_bf16`` (any cc >= 8.0). The
automatic choice: portable when rows_per_tile, variant or tuning (its knobs) is given; else cutlass where it runs,
else decode_grouped where it runs and the mean rows per group
(capacity / groups; R for the indexed plan) reach
:data:`~mircuda.matmul._moe_grouped_dense.DECODE_GROUPED_MIN_ROWS`, else portable. decode_grouped keeps BF16 copies
of the bank(s) and activations on the device: ``sets * (E N K + capacity K) * 2`` bytes (``workspace_bytes``)."""

ERROR_MATRIX_INDEX = 1
"""Error flag bit: a group's matrix index is outside ``[0, bank_size)`` (the group is skipped)."""
ERROR_ROWS = 2
"""Error flag bit: a group's count is negative, its offset negative, or offset + count over the capacity
(the group is skipped); or, on the portable path, the groups' m-tiles add up to 2**31 - 1 or more (only
overlapping row ranges get there; nothing is computed)."""


def matrix_scale_bytes(n: int, k: int, layout: str) -> int:
    """Bytes of one bank matrix's scales: tiled ``ceil(N/128) 128 ceil(K/64) 4``, linear ``N K/16``."""
    return scale_bytes(n, k, layout)


def scale_pair_loads(path: str, variant: str, k: int) -> tuple[bool, bool]:
    """``(bank scales, activation scales)``: whether the portable grouped kernel of ``variant`` reads them in 16-bit
    pairs (a row's two adjacent scale bytes of a step, K % 32 == 0), so that they need 2-byte alignment: the bank
    scales in ``"vector"`` (fp4_vector.cu), ``"split_k"`` and ``"split_n"`` (fp4_grouped.cu's
    MIRCUDA_MOE_SCALE_PAIRS), the activation scales in the last two (the vector variant's integer path,
    ``decode="dp4a"``, reads them in pairs too: :func:`_set_operands`' ``dp4a``); ``"staged"`` and the other paths
    read bytes or run other kernels."""
    pairs = path == "portable" and variant in ("vector", "split_k", "split_n") and k % 32 == 0
    return pairs, pairs and variant != "vector"


def _set_operands(suffix: str, n: int, k: int, capacity: int, bank: int, layout: str,
                  scale_pairs: bool = False, dp4a: bool = False, a_scale_pairs: bool = False) -> tuple[Operand, ...]:
    """One operand set's checks. ``scale_pairs``: the kernel reads the bank scales two adjacent bytes at a time
    (K % 32 == 0: fp4_vector.cu's 16-bit loads in the ``"vector"`` variant, fp4_grouped.cu's MIRCUDA_MOE_SCALE_PAIRS
    in ``"split_k"`` and ``"split_n"``), so b_scales needs 2-byte alignment. ``dp4a`` (the vector variant's integer
    path): one 16-byte load of activation codes and one 16-bit load of two activation scales per lane and step, so a
    needs 16-byte and a_scales 2-byte alignment. ``a_scale_pairs`` (split_k and split_n with K % 32 == 0): the
    activation scales in 16-bit pairs too, a_scales 2-byte aligned."""
    wide = k % 32 == 0
    kernel = "fp4_grouped_bf16"
    per = matrix_scale_bytes(n, k, layout)
    shape_sb = (f"[E, N, K/16] = [{bank}, {n}, {k // BLOCK}] linear UE4M3" if layout == "linear" else
                f"{bank} matrices of tiled UE4M3 scales of [{n}, {k}], {per} bytes each (N padded to 128, K/16 to 4)")
    return (
        Operand("a" + suffix, dtype_info(u8), capacity * k // 2, f"[capacity, K/2] = [{capacity}, {k // 2}] packed E2M1",
                16 if dp4a else 8, f"kernel {kernel}: {'16' if dp4a else '8'}-byte activation loads"
                + (" (decode 'dp4a')" if dp4a else "")),
        Operand("a_scales" + suffix, dtype_info(e4m3), capacity * k // BLOCK,
                f"[capacity, K/16] = [{capacity}, {k // BLOCK}] linear UE4M3", 2 if dp4a or a_scale_pairs else 1,
                f"kernel {kernel} (decode 'dp4a'): 16-bit loads of two adjacent scales" if dp4a else
                f"kernel {kernel}: 16-bit loads of two adjacent scales (K % 32 == 0)" if a_scale_pairs
                else "byte loads"),
        Operand("b_bank" + suffix, dtype_info(u8), bank * n * k // 2, f"[E, N, K/2] = [{bank}, {n}, {k // 2}] packed E2M1",
                16 if wide else 8, f"kernel {kernel}: {'16' if wide else '8'}-byte weight loads"),
        Operand("b_scales" + suffix, dtype_info(e4m3), bank * per, shape_sb, 2 if scale_pairs else 1,
                f"kernel {kernel}: 16-bit loads of two adjacent scales (K % 32 == 0)" if scale_pairs
                else "byte loads"),
        Operand("d" + suffix, dtype_info(bf16), capacity * n, f"[capacity, N] = [{capacity}, {n}] BF16", 2,
                f"kernel {kernel}: BF16 stores"),
    )


def _routing_operand(name: str, groups: int) -> Operand:
    return Operand(name, dtype_info(i32), groups, f"[{groups}] int32 (device routing)", 4, "int32 loads")


def _global_b(name: str, buf: Any, bank: int, context: Context) -> int:
    if buf is None:
        return 0
    return check_operand(Operand(name, dtype_info(f32), bank, f"[E] = [{bank}] FP32 global scales per matrix", 4,
                                 "FP32 loads"), buf, context)


_CUTLASS_ERRORS = (ImportError, CutlassNotFound, CutlassError, ContractError, AttributeError)


class _GroupedFp4PlanBase(PlanBase):
    """What the three plans share: one portable kernel pair (or the SM120 CUTLASS grouped plan), the kept
    workspace, error flag and alpha_per_matrix, the checks, describe and close."""

    _kind: str
    _dense: Any = None  # the decode_grouped engine (DecodeGroupedFp4) when that path runs
    _default_tuning = False  # tuning=None: the target's default (describe quotes the dp4a rule then)

    def _build(self, context: Context, stream: Stream, *, n: int, k: int, capacity: int, groups: int, bank: int,
               fixed_rows: int, sets: int, scale_layout: Any, compiler: Compiler | None, rows_per_tile: Any,
               variant: Any, library: CutlassLibrary | None, path: Any = None, tuning: Any = None) -> None:
        if path is not None and (not isinstance(path, str) or path not in PATHS):
            raise ContractError("path", f"None (choose) or one of {', '.join(map(repr, PATHS))}", repr(path))
        from ._dense import _check_library

        _check_library(library)  # a wrong library must not be silently replaced by the portable path
        self._layout = check_layout("scale_layout", scale_layout)
        if variant is not None and (not isinstance(variant, str) or variant not in VARIANTS):
            raise ContractError("variant", f"None or one of {', '.join(map(repr, VARIANTS))}", repr(variant))
        if variant is None and is_integer_value(rows_per_tile) and rows_per_tile in VECTOR_ROWS_PER_TILE[:-1]:
            variant = "vector"  # 1, 2 or 4 rows per tile: only the vector variant has them
        if variant == "vector":
            tiles_allowed, what = VECTOR_ROWS_PER_TILE, "activation rows per tile with variant='vector'"
        else:
            tiles_allowed, what = ROWS_PER_TILE, (f"activation rows per m-tile; {VECTOR_ROWS_PER_TILE} with variant "
                                                  "'vector'")
        if rows_per_tile is not None and (not is_integer_value(rows_per_tile) or rows_per_tile not in tiles_allowed):
            raise ContractError("rows_per_tile", f"None or one of {tiles_allowed} ({what})", repr(rows_per_tile))
        rows_per_tile = None if rows_per_tile is None else int(rows_per_tile)  # numpy integers as the specs take them
        if variant == "staged" and rows_per_tile == 8:
            raise ContractError("rows_per_tile", "16, 32 or 64 with variant='staged'", repr(rows_per_tile))
        plan_stream(stream, context)
        if capacity >= 2**31:
            raise ContractError("capacity", "below 2**31 (routing is int32 on the device)", repr(capacity))
        compiler = fp4_compiler(compiler, context)
        _device_checks(context, self._kind)
        self._context, self._stream = context, stream
        self._in, self._out = dtype_info(u8), dtype_info(bf16)
        self._n, self._k, self._capacity, self._groups, self._bank = n, k, capacity, groups, bank
        self._fixed, self._sets = fixed_rows, sets
        self._closed = False
        self._numba: Any = None
        self._cutlass: Any = None
        self._dense = None
        self._buffers: list[DeviceBuffer[Any]] = []
        knobs_given = rows_per_tile is not None or variant is not None or tuning is not None
        mean_rows = fixed_rows or capacity / groups
        if variant is None and rows_per_tile is None and tuning is None and mean_rows <= VECTOR_MAX_MEAN_ROWS:
            variant = "vector"  # decode: a row or two per group (see VECTOR_MAX_MEAN_ROWS)
        if variant == "vector":
            mt = rows_per_tile if rows_per_tile is not None else default_vector_rows(capacity, groups, fixed_rows)
        else:
            mt = rows_per_tile if rows_per_tile is not None else default_rows_per_tile(capacity, groups, fixed_rows)
        if variant == "staged" and mt == 8:
            mt = 16
        self._default_tuning = tuning is None
        tuning = resolve_tuning(tuning, choose_variant(mt) if variant is None else variant, compiler.arch, mt, k)
        shape = tile_shape(n=n, capacity=capacity, groups=groups, rows_per_tile=mt, fixed_rows=fixed_rows, sets=sets,
                           variant=variant, tuning=tuning)
        if shape.variant != "vector" and shape.weight_blocks > MAX_WEIGHT_BLOCKS:
            most = MAX_WEIGHT_BLOCKS * BLOCK_ROWS[shape.variant] * tuning.frags
            raise ContractError("n", f"at most {most} (grid.y of the grouped "
                                f"kernel: {MAX_WEIGHT_BLOCKS})", repr(n))
        options = grouped_options(n=n, k=k, groups=groups, bank_size=bank, capacity=capacity, rows_per_tile=mt,
                                  fixed_rows=fixed_rows, tiled=self._layout == "tiled", sets=sets,
                                  variant=shape.variant, tuning=tuning)
        self._kernels = GroupedKernels(compiler, options, shape, groups, bank,
                                       pdl=context.device_info().supports_programmatic_launch, capacity=capacity, k=k,
                                       persistent=tuning.persistent)
        # The vector variant's warps come from the occupancy rule unless tuning gave them.
        self._tuning = dataclasses.replace(tuning, warps=self._kernels.shape.warps)
        self._why_portable = self._choose_path(path, library, compiler,
                                               portable_knobs=knobs_given)
        try:
            pool = context.default_memory_pool()
            self._ws = pool.allocate_zeroed(i32, stream, workspace_ints(groups))
            self._buffers.append(self._ws)
            self._error = pool.allocate_zeroed(i32, stream, 1)
            self._buffers.append(self._error)
            self._alpha = pool.allocate_zeroed(f32, stream, sets * bank)
            self._buffers.append(self._alpha)
        except BaseException:
            self._free_now()
            if self._dense is not None:
                self._dense.close()
            raise
        self._finalizer = weakref.finalize(self, _free_all, list(self._buffers), context, stream)
        self._finalizer.atexit = False
        pairs, a_pairs = scale_pair_loads(self.path, shape.variant, k)
        dp4a = self.path == "portable" and tuning.decode == "dp4a"
        self._set_ops = tuple(_set_operands(suffix, n, k, capacity, bank, self._layout, pairs, dp4a, a_pairs)
                              for suffix in (("",) if sets == 1 else ("1", "2")))
        self._operands = tuple(op for ops in self._set_ops for op in ops)
        self._masks = tuple(op.alignment - 1 for op in self._set_ops[0])

    def _choose_path(self, path: str | None, library: CutlassLibrary | None, compiler: Compiler, *,
                     portable_knobs: bool = False) -> str:
        """Make the engine of ``path`` (None: the automatic choice, see :data:`PATHS`); return why the portable
        path runs ("" when another one does). ``portable_knobs``: rows_per_tile, variant or tuning was given (the
        portable kernel's knobs), which makes the automatic choice the portable path (before, on cc 12.x the
        SM120 CUTLASS path ran and the knobs were silently unused).

        Raises:
            ContractError: a path was asked for that cannot run here (the reason in the message).
        """
        if path == "portable":
            return "path='portable' was asked for"
        if path is None and portable_knobs:  # the knobs are the portable kernel's: honour them on every device
            return "rows_per_tile, variant or tuning (the portable kernel's knobs) was given"
        why = "path='decode_grouped' was asked for" if path == "decode_grouped" else self._try_cutlass(library)
        if path == "cutlass" and self._cutlass is None:
            raise ContractError("path", "a path that can run here", "'cutlass'", why)
        if self._cutlass is not None:
            return ""
        from ._moe_grouped_dense import DECODE_GROUPED_MIN_ROWS

        rows = self._fixed or self._capacity / self._groups
        if path is None and rows < DECODE_GROUPED_MIN_ROWS:
            return (f"{why}; decode_grouped: {rows:g} rows per group on average < {DECODE_GROUPED_MIN_ROWS} (the "
                    "bank's decode would outweigh the GEMM)")
        dense_why = self._try_decode_grouped(library, compiler, rows)
        if path == "decode_grouped" and self._dense is None:
            raise ContractError("path", "a path that can run here", "'decode_grouped'", dense_why)
        return "" if self._dense is not None else f"{why}; decode_grouped: {dense_why}"

    def _try_decode_grouped(self, library: CutlassLibrary | None, compiler: Compiler, rows: float) -> str:
        """Make the SM90 decode+grouped engine where it can run; return why not otherwise."""
        from ._library import load_library
        from ._moe_grouped_dense import DecodeGroupedFp4, decode_grouped_why_not

        cc = self._context.device_info().compute_capability
        try:
            lib = library if library is not None else load_library()
        except _CUTLASS_ERRORS as exc:
            return f"no CUTLASS library ({type(exc).__name__}: {exc})"
        why = decode_grouped_why_not(lib, (cc[0], cc[1]), self._n, self._k)
        if why:
            return why
        try:
            self._dense = DecodeGroupedFp4(self._context, lib, n=self._n, k=self._k, capacity=self._capacity,
                                           groups=self._groups, bank_size=self._bank, sets=self._sets,
                                           scale_layout=self._layout, stream=self._stream, compiler=compiler,
                                           rows_per_group=rows)
        except _CUTLASS_ERRORS as exc:
            self._dense = None
            return f"the grouped BF16 CUTLASS plan is not available ({type(exc).__name__}: {exc})"
        return ""

    def _try_cutlass(self, library: CutlassLibrary | None) -> str:
        """Make the SM120 CUTLASS grouped plan where it can run; return why the portable path runs
        otherwise."""
        cc = self._context.device_info().compute_capability
        if cc[0] != 12:
            return (f"cc {cc[0]}.{cc[1]} has no FP4 tensor-core instruction (the SM120 grouped block-scaled kernels "
                    "need cc 12.x)")
        if self._layout != "tiled":
            return "scale_layout='linear': the SM120 grouped kernels read the tiled bank scales"
        try:
            import importlib

            from ._library import load_library

            # moe120's module; absent in builds without it (then the portable path runs).
            wrapper = importlib.import_module(f"{__package__}._fp4_grouped_cutlass")
            lib = library if library is not None else load_library()
            self._cutlass = wrapper.CutlassGroupedFp4(self._context, lib, n=self._n, k=self._k, capacity=self._capacity,
                                              groups=self._groups, bank_size=self._bank, sets=self._sets,
                                              stream=self._stream)
        except _CUTLASS_ERRORS as exc:
            self._cutlass = None
            return f"the SM120 grouped CUTLASS plan is not available ({type(exc).__name__}: {exc})"
        return ""

    def _free_now(self) -> None:
        for buf in self._buffers:
            if not buf.freed:
                buf.free(self._stream)
        self._buffers.clear()

    # -- properties --------------------------------------------------------------------------------
    @property
    def scale_layout(self) -> str:
        """The layout of the bank scales: ``"linear"`` or ``"tiled"`` (activation scales are linear)."""
        return self._layout

    @property
    def path(self) -> str:
        """``"cutlass"`` (SM120 grouped block-scaled kernels), ``"decode_grouped"`` (BF16 decode + the SM90
        grouped BF16 kernel) or ``"portable"`` (``fp4_grouped_bf16``); see :data:`PATHS`."""
        if self._cutlass is not None:
            return "cutlass"
        return "decode_grouped" if self._dense is not None else "portable"

    @property
    def cutlass_kernel(self) -> str:
        """The name of the CUTLASS kernel the cutlass or decode_grouped path runs ("" on the portable path)."""
        engine = self._cutlass if self._cutlass is not None else self._dense
        return str(engine.kernel.name) if engine is not None else ""

    @property
    def rows_per_tile(self) -> int:
        """Activation rows per m-tile (per tile with variant ``"vector"``) of the portable kernel."""
        return self._kernels.shape.rows_per_tile

    @property
    def tuning(self) -> DecodeTuning:
        """The portable kernel's decode knobs (:class:`~mircuda.matmul._moe_kernels.DecodeTuning`)."""
        return self._tuning

    @property
    def variant(self) -> str:
        """The portable kernel's variant: ``"split_k"``, ``"split_n"``, ``"staged"`` or ``"vector"``
        (:data:`~mircuda.matmul._moe_kernels.VARIANTS`)."""
        return self._kernels.shape.variant

    @property
    def error_flag(self) -> DeviceBuffer[Any]:
        """The kept device int32 error flag: bits OR-ed by every execute (:data:`ERROR_MATRIX_INDEX`,
        :data:`ERROR_ROWS`) until :meth:`read_error_flag` resets it (or the caller zeroes it on the device,
        e.g. in a graph)."""
        return self._error

    @property
    def alpha_per_matrix(self) -> DeviceBuffer[Any]:
        """The kept device FP32 ``[sets, E]``: ``alpha * (*global_a) * global_b[e]`` per operand set, written
        by every execute."""
        return self._alpha

    @property
    def workspace_bytes(self) -> int:
        extra = self._cutlass.workspace_bytes if self._cutlass is not None else 0
        extra += self._dense.workspace_bytes if self._dense is not None else 0
        return sum(b.nbytes for b in self._buffers) + extra

    def read_error_flag(self, *, reset: bool = True) -> int:
        """The error flag's bits (0: every group was valid) after the work enqueued so far; then zero it on
        the plan's stream when ``reset``. **Synchronizes the plan's stream** (a host read: never part of
        ``execute``).

        Raises:
            ClosedResourceError: the plan was closed. ContractError: the stream is capturing.
        """
        if self._closed:
            raise ClosedResourceError(f"the {self._kind} was closed")
        value = int(self._stream.download(self._error)[0])
        if reset:
            self._stream.memset(self._error, 0)
        return value

    def describe(self) -> Description:
        arch = self._context.device_info().arch
        shape = self._kernels.shape
        head = (f"{self._kind} NVFP4 bank of {self._bank} [{self._n}, {self._k}] matrices ({self._layout} scales) x "
                f"NVFP4 activations -> bf16, capacity {self._capacity} rows, {self._groups} "
                f"{'products of ' + str(self._fixed) + ' rows' if self._fixed else 'groups'}"
                f"{', two operand sets' if self._sets == 2 else ''} on {arch}: ")
        setup = ("fp4_grouped_setup (NVRTC; validates the device routing, ORs bits into the kept error flag, writes "
                 "alpha_per_matrix and the tile list: prefix sums of m-tiles over groups, built by the last of "
                 f"{self._kernels.setup_config.grid[0]} block(s))")
        if self._cutlass is not None:
            return Description(f"{head}{setup}, then the SM120 CUTLASS grouped block-scaled kernels "
                               f"({self._cutlass.describe() if hasattr(self._cutlass, 'describe') else 'sm_120f'}).")
        if self._dense is not None:
            return Description(f"{head}path decode_grouped: {setup}, then {self._dense.describe()}.")
        t = self._tuning
        decode = ("cvt.rn.f16x2.e2m1x2" if t.decode == "bytes" and has_e2m1_cvt(self._kernels.arch) else
                  f"an exact software E2M1 decode: {t.decode} (target {self._kernels.arch})")
        pdl = "; programmatic dependent launch (the grouped kernel's launch overlaps the setup)" if self._kernels.pdl else ""
        if shape.variant == "vector":
            return Description(
                f"{head}{setup}, then fp4_grouped_bf16 (NVRTC fp4_vector.cu, portable, any cc >= 8.0, no tensor "
                f"cores): grid ({shape.weight_blocks} weight-row blocks of {BLOCK_ROWS['vector'] * t.frags} rows"
                + (f" in blocks of {shape.row_warps} warps, each warp taking its own row block whole (row_warps"
                   + (f"; the default with 4 weight rows per block on sm_90, measured: {DP4A_ROW_WARPS_MEASURED}"
                      if self._default_tuning and shape.row_warps == DP4A_ROW_WARPS else "") + ")"
                   if shape.row_warps > 1 else "")
                + f", {shape.tiles} tile slots of {shape.rows_per_tile} activation row(s) walked persistently, "
                f"{shape.sets} set(s)); variant vector: "
                + ("one warp per row block (no K split)" if shape.row_warps > 1 else f"the block's {t.warps} warp(s) split K")
                + f", a ring of {t.stages} load stages"
                + (f" (persistent: {self._kernels.grouped_config.grid[0]} blocks per tile slot walk the weight-row "
                   + ("blocks, one table lookup each, each row block's ring starting afresh)" if t.decode == "dp4a"
                      else "blocks, the ring running on across them)") if t.persistent else "")
                + ("; lean tiles: the tile's group table entries in one L2 round trip, the matrix's alpha read before "
                   "the K loop, nothing hoisted across the tile walk" if t.lean_tiles else "")
                + (f"; at most {t.max_registers} registers per thread (__maxnreg__)" if t.max_registers else "") + (
                    "; decode='dp4a': " + DP4A_DECODE + " with the 1-row tile's int8 activations, each 16-element "
                    "block summed exactly in "
                    "int32, scaled by the UE4M3 scales in FP32, the activations and their scales in the load ring "
                    "(fp4_matvec_lean, the single plan's integer path)"
                    + (f"; the default for 1-row tiles with K % 32 == 0 on {self._kernels.arch} (4 weight rows per "
                       "block, 8 when K > 4096; 2 stages; measured on the single plan: "
                       + DP4A_DEFAULT_MEASURED + ")" + (
                           f"; the {DP4A_REGISTER_CAP}-register cap is the default with 4 weight rows per block on "
                           f"sm_90 (measured: {DP4A_REGISTER_CAP_MEASURED})" if t.max_registers == DP4A_REGISTER_CAP
                           else "") if self._default_tuning else "")
                    if t.decode == "dp4a" else "; each weight is "
                    f"decoded once ({decode}) and meets the tile's rows in HFMA2 (each 16-element block summed exactly "
                    "in FP16), scaled by the UE4M3 scales in FP32")
                + ", BF16 out" + pdl + f". Why portable: {self._why_portable}.")
        split = {"split_k": f"variant split_k: the block's {t.warps} warps split K over {16 * t.frags} weight rows "
                            f"(decode: each weight read once per m-tile), a ring of {t.stages} load stages",
                 "split_n": f"variant split_n: each of the block's {WARPS} warps owns 16 weight rows and all of K, both "
                            "operands decoded in registers",
                 "staged": f"variant staged: each of the block's {WARPS} warps owns 32 weight rows (two A fragments per "
                           "B fragment); per K step the block decodes the m-tile's activations once into shared memory "
                           "(double-buffered, conflict-free 8-byte B loads)"}[shape.variant]
        return Description(
            f"{head}{setup}, then fp4_grouped_bf16 (NVRTC, portable, any cc >= 8.0): grid ({shape.tiles} m-tile slots "
            f"walked persistently, {shape.weight_blocks} weight-row blocks, {shape.sets} set(s)), m-tiles of "
            f"{shape.rows_per_tile} activation rows; {split}; E2M1 x UE4M3 decoded exactly to FP16 ({decode}, times "
            "the UE4M3 scale in FP16) and multiplied by mma.sync m16n8k16 FP16 x FP16 -> FP32 (weights the 16-row A "
            f"operand, activation rows the n8 columns), BF16 out"
            + pdl + f". Why portable: {self._why_portable}.")

    # -- execution ---------------------------------------------------------------------------------
    def _check_set(self, ops: tuple[Operand, ...], names: tuple[str, str], a: Any, sa: Any, b: Any, sb: Any, d: Any,
                   ga: Any, gb: Any, alpha: Any) -> tuple[Any, ...]:
        ctx = self._context
        ptrs = tuple(check_operand(op, buf, ctx) for op, buf in zip(ops, (a, sa, b, sb, d)))
        return (*ptrs, address(names[0], ga, ctx), _global_b(names[1], gb, self._bank, ctx),
                check_scalar(names[0].replace("global_a", "alpha"), alpha))

    def _check_routing(self, row_counts: Any, offsets: Any, matrix_indices: Any,
                       names: tuple[str, str, str] = ("row_counts", "offsets", "matrix_indices")) -> tuple[int, int, int]:
        ctx = self._context
        rc = 0 if row_counts is None else check_operand(_routing_operand(names[0], self._groups), row_counts, ctx)
        of = 0 if offsets is None else check_operand(_routing_operand(names[1], self._groups), offsets, ctx)
        mi = check_operand(_routing_operand(names[2], self._groups), matrix_indices, ctx)
        return rc, of, mi

    def _check_outputs(self, sets: list[tuple[Any, ...]], routing: tuple[int, int, int],
                       names: tuple[str, str, str] = ("row_counts", "offsets", "matrix_indices")) -> None:
        """Each set's D against every operand the kernels read (both sets' A, scales, bank, bank scales, global
        scales, the routing) and the other set's D: :func:`~mircuda.matmul._spec.check_disjoint`."""
        reads = [(_routing_operand(name, self._groups), ptr) for name, ptr in zip(names, routing)]
        for ops, ptrs in zip(self._set_ops, sets):
            suffix = ops[0].name[1:]  # "" or the set's number
            reads.extend(zip(ops[:4], ptrs[:4]))
            reads.append((scalar_operand("global_a" + suffix), ptrs[5]))
            reads.append((scalar_operand("global_b" + suffix, self._bank), ptrs[6]))
        for i, (ops, ptrs) in enumerate(zip(self._set_ops, sets)):
            others = reads + [(o[4], p[4]) for o, p in zip(self._set_ops[:i], sets[:i])]
            check_disjoint(ops[4], ptrs[4], others)

    def _enqueue(self, stream: Stream, routing: tuple[int, int, int], first: tuple[Any, ...],
                 second: tuple[Any, ...] | None) -> None:
        rc, of, mi = routing
        a1, sa1, b1, sb1, d1, ga1, gb1, al1 = first
        none: tuple[Any, ...] = (0, 0, 0, 0, 0, 0, 0, 1.0)
        a2, sa2, b2, sb2, d2, ga2, gb2, al2 = second if second is not None else none
        ws, err, apm = self._ws._ptr, self._error._ptr, self._alpha._ptr
        k = self._kernels
        k.setup.launch(stream, k.setup_config, ws, err, apm, rc, of, mi, ga1, gb1, al1, ga2, gb2, al2)
        engine = self._cutlass if self._cutlass is not None else self._dense  # the SM120 or decode_grouped path
        if engine is not None:
            ops = [(a1, sa1, b1, sb1, d1, apm)]
            if second is not None:
                ops.append((a2, sa2, b2, sb2, d2, apm + 4 * self._bank))
            engine.execute(stream, row_counts=rc, offsets=of, matrix_indices=mi, operands=ops, error_flag=err)
            return
        k.grouped.launch(stream, k.grouped_config, ws, apm, a1, sa1, b1, sb1, d1, a2, sa2, b2, sb2, d2)

    def _executor(self) -> Any:
        """The combined ``@numba.njit`` launcher (:func:`~mircuda.matmul._moe_kernels.grouped_executor`) on
        the portable path; on the CUTLASS path the setup kernel's launch followed by the wrapper's
        executor."""
        kept = (self._ws._ptr, self._error._ptr, self._alpha._ptr)
        if self._dense is not None:
            return _cutlass_executor(self, kept, self._dense.numba_executor())
        if self._cutlass is None:
            return grouped_executor(self._kernels, kept, self._masks, stream=self._stream.handle)
        return _cutlass_executor(self, kept, _sm120_adaptor(self._cutlass.numba_executor(), self._sets))

    def _enter_execute(self, stream: Any) -> None:
        if self._closed:
            raise ClosedResourceError(f"the {self._kind} was closed")
        self._check_stream(stream)

    def close(self) -> None:
        """Free the kept workspace, error flag and alpha_per_matrix (stream-ordered) and the CUTLASS plan.
        Idempotent."""
        self._closed = True
        self._finalizer()
        if self._cutlass is not None:
            self._cutlass.close()
        if self._dense is not None:
            self._dense.close()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_DOC_COMMON = """
    The portable path (every device of cc >= 8.0; the H200): ``cuda_src/fp4_grouped.cu``, NVRTC. A setup kernel
    spanning ``ceil(max(G, E) / 256)`` blocks validates the routing, sets the error flag, computes
    alpha_per_matrix and builds the tile list (prefix sums of m-tiles over groups); the grouped kernel's
    blocks walk that list: E2M1 x UE4M3 decoded exactly to FP16 in registers, ``mma.sync`` m16n8k16 FP16 ->
    FP32, BF16 out (variant ``"vector"``, chosen for decode steps of about one row per group: the CUDA-core
    kernel of ``cuda_src/fp4_vector.cu`` per tile of 1-8 rows, each weight decoded once for the tile's rows;
    with 1-row tiles and K % 32 == 0 on targets without ``cvt.rn.f16x2.e2m1x2`` (the H200) its integer path,
    ``decode="dp4a"``: E2M1 -> int8 by PRMT, IDP4A, exact int32 block sums; ``a`` must then be 16-byte and
    ``a_scales`` 2-byte aligned, :attr:`operands`). With K % 32 == 0 the variants ``"vector"``, ``"split_k"`` and
    ``"split_n"`` read a row's two scale bytes of a step in one 16-bit load: ``b_scales`` must then be 2-byte
    aligned, and ``a_scales`` too for ``"split_k"`` and ``"split_n"`` (:func:`scale_pair_loads`, :attr:`operands`).
    On cc 12.x with a CUTLASS library holding the grouped block-scaled kind (and tiled scales)
    the SM120 grouped kernels run instead (``._fp4_grouped_cutlass``); on cc 9.0 with a library holding the
    grouped BF16 kernels and many rows per group (:data:`PATHS`), the decode_grouped path (``._moe_grouped_dense``:
    the operands decoded exactly to BF16 in kept workspaces, then one CUTLASS grouped BF16 GEMM with
    alpha_per_matrix in its epilogue); ``describe()`` says which and why.
    ``execute`` enqueues only (no allocation, no synchronization, no host read of the routing) and checks
    every operand first; the plan keeps a device int32 error flag (:attr:`error_flag`,
    :meth:`read_error_flag`) and alpha_per_matrix.

    Raises (construction):
        ContractError: a bad context, stream, spec, scale_layout, rows_per_tile, variant, tuning, path,
            library or compiler (named); N too large for the grid. UnsupportedPlatform: cc below 8.0. CompileError: NVRTC rejected the kernels (a bug).
"""


class VariableGroupedFp4Plan(_GroupedFp4PlanBase):
    __doc__ = ("""``D[rows of group g] = alpha_per_matrix[e_g] * A[rows of g] . B[e_g]^T`` for G groups of
    device-resident row counts (0 allowed), compact offsets and matrix indices (the module docstring gives
    the operands, layouts and the error flag).

    Args:
        context, stream: the plan's context and the stream it is bound to.
        spec: ``VariableGroupedFp4Spec(n, k, capacity, groups, bank_size)``.
        scale_layout: the bank scales' layout, ``"tiled"`` (default; the SM120 path's) or ``"linear"``.
        compiler: the NVRTC Compiler (default: :func:`~mircuda.matmul._fp4.fp4_compiler`).
        rows_per_tile: None (:func:`~mircuda.matmul._moe_kernels.default_rows_per_tile`: the smallest of 8, 16,
            32, 64 holding ``min(capacity, 4 ceil(capacity / groups))``, room for uneven routing: a group's weights
            are read once per m-tile; 2x instead of 4x where 4x would give a split_k tile of <= 16 rows, e.g. 8-row
            tiles for a mean of 3 or 4 rows per group; variant ``"vector"``: the smallest of 1, 2, 4, 8 holding
            ``ceil(capacity / groups)``) or one of them (1, 2, 4 or 8 with variant ``"vector"``; 1, 2 or 4 without
            a variant choose it).
        variant: None (``"vector"`` for at most one row per group on average (``capacity / groups <= 1``, and
            neither rows_per_tile nor tuning given: a given tuning keeps the split_k default), else
            ``"split_k"`` for m-tiles of <= 16 rows, else ``"staged"``), ``"split_k"``, ``"split_n"``,
            ``"staged"`` (m-tiles of >= 16 rows) or ``"vector"`` (CUDA cores, no tensor cores;
            ``cuda_src/fp4_vector.cu``): the portable kernel's work split (``describe()`` says it).
        library: the CUTLASS library tried on cc 12.x (SM120 grouped kernels) and cc 9.0 (the decode_grouped
            path's grouped BF16 kernels) (default: :func:`load_library`).
        path: None (choose, see :data:`PATHS`; a given rows_per_tile or variant keeps the choice off
            decode_grouped) or one of ``"cutlass"``, ``"decode_grouped"``, ``"portable"`` to force (ContractError,
            with the reason, when it cannot run here); :attr:`path` and ``describe()`` say which runs and why.
        tuning: None (:func:`~mircuda.matmul._moe_kernels.default_tuning` of the target, variant, tile and K:
            ``decode="dp4a"`` for the vector variant's 1-row tiles with K % 32 == 0 where it applies) or a
            :class:`~mircuda.matmul._moe_kernels.DecodeTuning` (decode, stages, warps, frags, persistent,
            lean_tiles, max_registers, row_warps) of the portable kernel, its None fields taken from that default
            (``max_registers`` None: :func:`~mircuda.matmul._moe_kernels.default_register_cap`, 80 registers for
            ``"dp4a"`` with 4 weight rows per block on sm_90; ``row_warps`` None:
            :func:`~mircuda.matmul._moe_kernels.default_row_warps`, 2 warps per block, each its own row block, for
            the same, unless ``warps`` other than 1, ``lean_tiles`` or ``persistent`` is given; 1 turns them off);
            ContractError names a field that does not fit the variant or the target.
""" + _DOC_COMMON)

    _kind = "VariableGroupedFp4Plan"

    def __init__(self, context: Context, stream: Stream, spec: VariableGroupedFp4Spec, *, scale_layout: str = "tiled",
                 compiler: Compiler | None = None, rows_per_tile: int | None = None, variant: str | None = None,
                 library: CutlassLibrary | None = None, path: str | None = None,
                 tuning: DecodeTuning | None = None) -> None:
        if not isinstance(spec, VariableGroupedFp4Spec):
            raise ContractError("spec", "a VariableGroupedFp4Spec(n, k, capacity, groups, bank_size)", repr(spec))
        self._spec = spec
        self._build(context, stream, n=spec.n, k=spec.k, capacity=spec.capacity, groups=spec.groups,
                    bank=spec.bank_size, fixed_rows=0, sets=1, scale_layout=scale_layout, compiler=compiler,
                    rows_per_tile=rows_per_tile, variant=variant, library=library, path=path, tuning=tuning)

    def execute(self, stream: Stream, a: DeviceBuffer[Any], a_scales: DeviceBuffer[Any], b_bank: DeviceBuffer[Any],
                b_scales: DeviceBuffer[Any], d: DeviceBuffer[Any], row_counts: DeviceBuffer[Any],
                offsets: DeviceBuffer[Any], matrix_indices: DeviceBuffer[Any], *,
                global_a: DeviceBuffer[Any] | None = None, global_b: DeviceBuffer[Any] | None = None,
                alpha: float = 1.0) -> None:
        """Enqueue the grouped product on ``stream`` (the plan's). ``row_counts``, ``offsets``,
        ``matrix_indices``: ``DeviceBuffer[i32]`` ``[G]``; ``global_a`` f32 ``[1]``, ``global_b`` f32 ``[E]``.

        Raises:
            ContractError: another stream; a bad buffer (type, dtype, context, length, alignment); a bad
                alpha; ``d`` overlapping an operand the kernels read (named, with both byte ranges).
                UseAfterFree, ClosedResourceError, CudaError.
        """
        self._enter_execute(stream)
        routing = self._check_routing(row_counts, offsets, matrix_indices)
        first = self._check_set(self._set_ops[0], ("global_a", "global_b"), a, a_scales, b_bank, b_scales, d,
                                global_a, global_b, alpha)
        self._check_outputs([first], routing)
        self._enqueue(stream, routing, first, None)

    @property
    def numba_execute(self) -> Any:
        """An ``@numba.njit`` function ``execute(stream, a, a_scales, b_bank, b_scales, d, row_counts, offsets,
        matrix_indices, global_a, global_b, alpha) -> int`` over raw addresses (0 for an absent global
        scale): 0 enqueued, 400 another stream, 1 a misaligned address (nothing launched), else the
        ``CUresult`` of a launch. Lengths, overlaps and captures are not checked on this path."""
        if self._numba is None:
            self._numba = _variable_numba(self._executor())
        return self._numba

    def __repr__(self) -> str:
        s = self._spec
        return (f"VariableGroupedFp4Plan(n={s.n}, k={s.k}, capacity={s.capacity}, groups={s.groups}, "
                f"bank_size={s.bank_size}, scale_layout={self._layout!r}, path={self.path!r})")


class IndexedGroupedFp4Plan(_GroupedFp4PlanBase):
    __doc__ = ("""P products of R rows: ``D[pR : pR + R] = alpha_per_matrix[indices[p]] * A[pR : pR + R] .
    B[indices[p]]^T`` (the variable plan with ``row_counts = R``, ``offsets = p R`` made on the device).
    Indices may repeat and P may exceed the bank size; an index outside ``[0, E)`` sets error bit 1 and
    leaves that product's rows unwritten.

    Args:
        spec: ``IndexedGroupedFp4Spec(n, k, rows, products, bank_size)``; the others as
            :class:`VariableGroupedFp4Plan` (default ``rows_per_tile``: the smallest holding R).
""" + _DOC_COMMON)

    _kind = "IndexedGroupedFp4Plan"

    def __init__(self, context: Context, stream: Stream, spec: IndexedGroupedFp4Spec, *, scale_layout: str = "tiled",
                 compiler: Compiler | None = None, rows_per_tile: int | None = None, variant: str | None = None,
                 library: CutlassLibrary | None = None, path: str | None = None,
                 tuning: DecodeTuning | None = None) -> None:
        if not isinstance(spec, IndexedGroupedFp4Spec):
            raise ContractError("spec", "an IndexedGroupedFp4Spec(n, k, rows, products, bank_size)", repr(spec))
        self._spec = spec
        self._build(context, stream, n=spec.n, k=spec.k, capacity=spec.capacity, groups=spec.products,
                    bank=spec.bank_size, fixed_rows=spec.rows, sets=1, scale_layout=scale_layout, compiler=compiler,
                    rows_per_tile=rows_per_tile, variant=variant, library=library, path=path, tuning=tuning)
        if self._cutlass is not None or self._dense is not None:
            # The CUTLASS wrappers take row_counts/offsets arrays: keep them, written once (R, p R).
            self._fixed_routing = _fixed_routing(self, spec)

    def execute(self, stream: Stream, a: DeviceBuffer[Any], a_scales: DeviceBuffer[Any], b_bank: DeviceBuffer[Any],
                b_scales: DeviceBuffer[Any], d: DeviceBuffer[Any], indices: DeviceBuffer[Any], *,
                global_a: DeviceBuffer[Any] | None = None, global_b: DeviceBuffer[Any] | None = None,
                alpha: float = 1.0) -> None:
        """Enqueue the P products on ``stream``. ``indices``: ``DeviceBuffer[i32]`` ``[P]``.

        Raises:
            ContractError, UseAfterFree, ClosedResourceError, CudaError: as :meth:`VariableGroupedFp4Plan.execute`.
        """
        self._enter_execute(stream)
        _, _, mi = self._check_routing(None, None, indices, ("row_counts", "offsets", "indices"))
        first = self._check_set(self._set_ops[0], ("global_a", "global_b"), a, a_scales, b_bank, b_scales, d,
                                global_a, global_b, alpha)
        self._check_outputs([first], (0, 0, mi), ("row_counts", "offsets", "indices"))
        rc, of = ((self._fixed_routing[0]._ptr, self._fixed_routing[1]._ptr) if self.path != "portable" else (0, 0))
        self._enqueue(stream, (rc, of, mi), first, None)

    @property
    def numba_execute(self) -> Any:
        """An ``@numba.njit`` function ``execute(stream, a, a_scales, b_bank, b_scales, d, indices, global_a,
        global_b, alpha) -> int`` (statuses as :attr:`VariableGroupedFp4Plan.numba_execute`)."""
        if self._numba is None:
            rc, of = ((self._fixed_routing[0]._ptr, self._fixed_routing[1]._ptr) if self.path != "portable"
                      else (0, 0))
            self._numba = _indexed_numba(self._executor(), rc, of)
        return self._numba

    def __repr__(self) -> str:
        s = self._spec
        return (f"IndexedGroupedFp4Plan(n={s.n}, k={s.k}, rows={s.rows}, products={s.products}, "
                f"bank_size={s.bank_size}, scale_layout={self._layout!r}, path={self.path!r})")


class PairedVariableGroupedFp4Plan(_GroupedFp4PlanBase):
    __doc__ = ("""Two independent grouped products sharing one routing (e.g. the gate and up projections of
    a SwiGLU expert): for each operand set s in (first, second), ``D_s[rows of g] = alpha_s * global_a_s *
    global_b_s[e_g] * A_s[rows of g] . B_s[e_g]^T``. The banks are not concatenated; activations, scales,
    global scales and alphas may differ; one grouped launch covers both (grid.z = 2).

    Args:
        spec: ``VariableGroupedFp4Spec`` (both sets have its shapes); the others as
            :class:`VariableGroupedFp4Plan`.
""" + _DOC_COMMON)

    _kind = "PairedVariableGroupedFp4Plan"

    def __init__(self, context: Context, stream: Stream, spec: VariableGroupedFp4Spec, *, scale_layout: str = "tiled",
                 compiler: Compiler | None = None, rows_per_tile: int | None = None, variant: str | None = None,
                 library: CutlassLibrary | None = None, path: str | None = None,
                 tuning: DecodeTuning | None = None) -> None:
        if not isinstance(spec, VariableGroupedFp4Spec):
            raise ContractError("spec", "a VariableGroupedFp4Spec(n, k, capacity, groups, bank_size)", repr(spec))
        self._spec = spec
        self._build(context, stream, n=spec.n, k=spec.k, capacity=spec.capacity, groups=spec.groups,
                    bank=spec.bank_size, fixed_rows=0, sets=2, scale_layout=scale_layout, compiler=compiler,
                    rows_per_tile=rows_per_tile, variant=variant, library=library, path=path, tuning=tuning)

    def execute(self, stream: Stream, first: GroupedFp4Operands, second: GroupedFp4Operands,
                row_counts: DeviceBuffer[Any], offsets: DeviceBuffer[Any], matrix_indices: DeviceBuffer[Any]) -> None:
        """Enqueue both products on ``stream``. ``first``, ``second``: :class:`GroupedFp4Operands`; errors
        name ``a1``, ``b_scales2``, ``global_a1``... (the set's number appended).

        Raises:
            ContractError, UseAfterFree, ClosedResourceError, CudaError: as :meth:`VariableGroupedFp4Plan.execute`.
        """
        self._enter_execute(stream)
        for name, value in (("first", first), ("second", second)):
            if not isinstance(value, GroupedFp4Operands):
                raise ContractError(name, "a GroupedFp4Operands", type(value).__name__)
        routing = self._check_routing(row_counts, offsets, matrix_indices)
        sets = [self._check_set(self._set_ops[i], (f"global_a{i + 1}", f"global_b{i + 1}"), o.a, o.a_scales, o.b_bank,
                                o.b_scales, o.d, o.global_a, o.global_b, o.alpha)
                for i, o in enumerate((first, second))]
        self._check_outputs(sets, routing)
        self._enqueue(stream, routing, sets[0], sets[1])

    @property
    def numba_execute(self) -> Any:
        """An ``@numba.njit`` function ``execute(stream, row_counts, offsets, matrix_indices, a1, a_scales1,
        b_bank1, b_scales1, d1, global_a1, global_b1, alpha1, a2, ..., alpha2) -> int`` (statuses as
        :attr:`VariableGroupedFp4Plan.numba_execute`)."""
        if self._numba is None:
            self._numba = self._executor()
        return self._numba

    def __repr__(self) -> str:
        s = self._spec
        return (f"PairedVariableGroupedFp4Plan(n={s.n}, k={s.k}, capacity={s.capacity}, groups={s.groups}, "
                f"bank_size={s.bank_size}, scale_layout={self._layout!r}, path={self.path!r})")


def _variable_numba(core: Any) -> Any:
    import numba

    @numba.njit(cache=False)
    def execute(stream: int, a: int, a_scales: int, b_bank: int, b_scales: int, d: int, row_counts: int,
                offsets: int, matrix_indices: int, global_a: int, global_b: int, alpha: float) -> int:
        return core(stream, row_counts, offsets, matrix_indices, a, a_scales, b_bank, b_scales, d, global_a, global_b,
                    alpha, 0, 0, 0, 0, 0, 0, 0, 1.0)

    return execute


def _indexed_numba(core: Any, row_counts: int, offsets: int) -> Any:
    import numba

    @numba.njit(cache=False)
    def execute(stream: int, a: int, a_scales: int, b_bank: int, b_scales: int, d: int, indices: int, global_a: int,
                global_b: int, alpha: float) -> int:
        return core(stream, row_counts, offsets, indices, a, a_scales, b_bank, b_scales, d, global_a, global_b, alpha,
                    0, 0, 0, 0, 0, 0, 0, 1.0)

    return execute


def _fixed_routing(plan: IndexedGroupedFp4Plan, spec: IndexedGroupedFp4Spec) -> tuple[DeviceBuffer[Any], DeviceBuffer[Any]]:
    """row_counts = R and offsets = p R for the CUTLASS wrapper, uploaded once at construction."""
    import numpy as np

    p = spec.products
    pool = plan._context.default_memory_pool()
    counts = plan._stream.upload(pool, np.full(p, spec.rows, np.int32))
    offs = plan._stream.upload(pool, (np.arange(p, dtype=np.int64) * spec.rows).astype(np.int32))
    plan._buffers.extend((counts, offs))
    plan._finalizer.detach()
    plan._finalizer = weakref.finalize(plan, _free_all, list(plan._buffers), plan._context, plan._stream)
    plan._finalizer.atexit = False
    return counts, offs


def _sm120_adaptor(grouped: Any, sets: int) -> Any:
    """The SM120 wrapper's executor (``execute_one`` / ``execute_two`` of
    :func:`~mircuda.matmul._fp4_grouped_cutlass.grouped_executor`: error flag fifth, one or two sets) called
    as the decode_grouped engine's executor is: ``(stream, row_counts, offsets, matrix_indices, error_flag,
    a1, sa1, b1, sb1, d1, apm1, a2, sa2, b2, sb2, d2, apm2)``."""
    import numba

    two = sets == 2

    @numba.njit(cache=False)
    def call(stream: int, rc: int, of: int, mi: int, err: int, a1: int, sa1: int, b1: int, sb1: int, d1: int,
             apm1: int, a2: int, sa2: int, b2: int, sb2: int, d2: int, apm2: int) -> int:
        if two:
            return grouped(stream, rc, of, mi, err, a1, sa1, b1, sb1, d1, apm1, a2, sa2, b2, sb2, d2, apm2)
        return grouped(stream, rc, of, mi, err, a1, sa1, b1, sb1, d1, apm1)

    return call


def _cutlass_executor(plan: _GroupedFp4PlanBase, kept: tuple[int, int, int], grouped: Any) -> Any:
    """The CUTLASS paths' njit launcher: the setup kernel (validation, error flag, alpha_per_matrix) through
    ``cuLaunchKernel``, then ``grouped`` (the SM120 wrapper's executor through :func:`_sm120_adaptor`, or the
    decode_grouped engine's), called as ``(stream, row_counts, offsets, matrix_indices, error_flag, a1, sa1,
    b1, sb1, d1, alpha_per_matrix1, a2, sa2, b2, sb2, d2, alpha_per_matrix2) -> int`` (the second set 0 for
    one set)."""
    import numba
    import numpy as np

    from ..numba_ext import driver_function
    from ._vector import INVALID_HANDLE

    launch = driver_function("cuLaunchKernel")
    U = numba.uint64
    bound = U(plan._stream.handle)
    ws, err, apm = (U(x) for x in kept)
    apm2 = apm + U(4 * plan._bank)
    setup = plan._kernels.setup.handle
    sgrid, sthreads = plan._kernels.setup_config.grid[0], plan._kernels.setup_config.block[0]
    two = plan._sets == 2

    @numba.njit(cache=False)
    def execute(stream: int, row_counts: int, offsets: int, matrix_indices: int, a1: int, sa1: int, b1: int,
                sb1: int, d1: int, global_a1: int, global_b1: int, alpha1: float, a2: int, sa2: int, b2: int,
                sb2: int, d2: int, global_a2: int, global_b2: int, alpha2: float) -> int:
        if U(stream) != bound:
            return INVALID_HANDLE
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
        return grouped(stream, row_counts, offsets, matrix_indices, err, a1, sa1, b1, sb1, d1, apm, a2 if two else 0,
                       sa2 if two else 0, b2 if two else 0, sb2 if two else 0, d2 if two else 0,
                       apm2 if two else U(0))

    return execute


@_cuda.finalizer
def _free_all(buffers: list[Any], context: Any, stream: Any) -> None:
    if not context._closed and stream.handle:
        for buf in buffers:
            if not buf.freed:
                buf.free(stream)

