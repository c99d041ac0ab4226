"""Loading ``libmircuda_cutlass.so`` with ctypes and reading its kernel table (the C ABI of
``mircuda/cutlass_build/include/mircuda_cutlass.h``)."""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..dtypes import is_integer_value

# CutlassError is re-exported here, where it was defined before it moved to mircuda.errors.
from ..errors import ContractError, CutlassError, CutlassNotFound
from ._build import LIBRARY_NAME, find_library

__all__ = ["ABI_VERSION", "KernelInfo", "CutlassLibrary", "CutlassError", "load_library", "FAMILIES", "DTYPES",
           "KINDS", "SCALE_MAJORS", "BLOCK_SCALED_SYMBOLS", "GROUPED_SYMBOLS", "COMPATIBLE_ABI_VERSIONS",
           "GroupedOperands", "GroupedTables", "GROUPED_TABLE_FIELDS", "GROUPED_DENSE_SYMBOLS", "GroupedDenseOperands",
           "GROUPED_DENSE_OPERAND_FIELDS", "GROUPED_DENSE_OPERAND_ALIGNMENT", "pick_family", "positive_size"]

ABI_VERSION = 3
"""``MIRCUDA_CUTLASS_ABI_VERSION`` this module speaks (2: kernel kinds and the blockwise-scaled FP8 kernels;
3: the grouped block-scaled NVFP4 kernels, ``mircuda_cutlass_grouped_plan_*``)."""
COMPATIBLE_ABI_VERSIONS = (2, 3)
"""The library ABI versions this module loads. ABI 3 only added entry points, kinds and families (the kernel
info struct and every ABI 2 entry point are unchanged), so an ABI 2 library loads with
:attr:`CutlassLibrary.grouped_kernels` empty."""

STATUS = {0: "OK", 1: "INVALID_ARGUMENT", 2: "NOT_IMPLEMENTABLE", 3: "WRONG_ARCH", 4: "CUDA_ERROR",
          5: "INTERNAL_ERROR", 6: "NO_WORKSPACE"}
"""The library's status codes (``MIRCUDA_CUTLASS_*``)."""
INVALID_ARGUMENT = 1
NOT_IMPLEMENTABLE = 2
DTYPES = {1: "bf16", 2: "f16", 3: "f32", 4: "e4m3", 5: "e2m1", 6: "ue4m3"}
"""``MIRCUDA_CUTLASS_*`` element types; ``"e2m1"``: packed FP4 codes, two per byte (element 2i in the low
nibble); ``"ue4m3"``: E4M3 scale bytes with the sign clear (NVFP4's block scales)."""
FAMILIES = {0: "simt", 1: "sm90_cooperative", 2: "sm90_pingpong", 3: "sm90_swapped", 4: "sm80_tensorop",
            5: "sm90_blockwise_cooperative", 6: "sm90_blockwise_pingpong", 7: "sm120_blockwise",
            8: "sm120_nvfp4_cooperative", 9: "sm120_nvfp4_pingpong", 10: "sm120_nvfp4_grouped_cooperative",
            11: "sm120_nvfp4_grouped_pingpong", 12: "sm90_grouped_cooperative", 13: "sm90_grouped_pingpong",
            14: "sm90_blockwise_experimental"}
KINDS = {0: "dense", 1: "blockwise_scaled", 2: "block_scaled", 3: "grouped_block_scaled", 4: "grouped_dense"}
"""``MIRCUDA_CUTLASS_KIND_*``: which plan entry points a kernel takes (``"block_scaled"``: the NVFP4 kernels,
:meth:`CutlassLibrary.create_block_scaled_plan`; ``"grouped_block_scaled"``: the grouped NVFP4 kernels with
device-resident routing, :meth:`CutlassLibrary.create_grouped_plan`; ``"grouped_dense"``: the grouped BF16
kernels of SM90 with device-resident routing, :meth:`CutlassLibrary.create_grouped_plan` and
:meth:`CutlassLibrary.execute_grouped_dense`)."""
SCALE_MAJORS = {0: "", 1: "k", 2: "mn", 3: "tiled"}
"""``MIRCUDA_CUTLASS_K_MAJOR`` (``"k"``: ``[rows, ceil(K/scale_k)]`` row-major), ``_MN_MAJOR`` (``"mn"``:
``[ceil(K/scale_k), rows]`` row-major), ``_SF_TILED`` (``"tiled"``: CUTLASS's SM1xx block-scaled layout,
512-byte atoms of 128 rows x 4 scales, mircuda's ``"tiled"`` scale layout); ``""`` for kernels without
scales."""
BLOCK_SCALED_SYMBOLS = ("mircuda_cutlass_block_scaled_plan_create", "mircuda_cutlass_block_scaled_plan_execute")
"""The entry points of the block-scaled (NVFP4) kernels. A library built before them (ABI 2 as well) lacks
them: it loads, with :attr:`CutlassLibrary.block_scaled_kernels` empty."""
GROUPED_SYMBOLS = ("mircuda_cutlass_grouped_plan_create", "mircuda_cutlass_grouped_plan_execute",
                   "mircuda_cutlass_grouped_setup")
"""The entry points of the grouped block-scaled (NVFP4) kernels (ABI 3). A library without them loads, with
:attr:`CutlassLibrary.grouped_kernels` empty."""
PDL_SYMBOL = "mircuda_cutlass_plan_set_pdl"
"""The entry point that launches a dense or blockwise-scaled plan's kernel with programmatic dependent launch (an
addition to ABI 3 without a version change). A library without it loads; its plans launch without (:attr:`CutlassLibrary.has_pdl`)."""
GROUPED_OPERAND_FIELDS = ("a", "sfa_linear", "b_bank", "sfb_bank_tiled", "d", "alpha_per_matrix")
"""The fields of ``mircuda_cutlass_grouped_operands`` in order: one operand set of a grouped plan."""
GROUPED_OPERAND_ALIGNMENT = (16, 1, 16, 16, 16, 4)
"""The byte alignment each of :data:`GROUPED_OPERAND_FIELDS` needs (TMA's 16-byte granules for the codes,
the bank's tiled scales and D; ``sfa_linear`` is read byte by byte by the repack kernel; alpha is FP32)."""


GROUPED_DENSE_SYMBOLS = ("mircuda_cutlass_grouped_plan_create", "mircuda_cutlass_grouped_dense_plan_execute")
"""The entry points of the grouped BF16 kernels (SM90; an addition to ABI 3 without a version change: the kernel
info struct and every other entry point are unchanged, and a module that does not know kind 4 ignores those
kernels). A library without them loads, with :attr:`CutlassLibrary.grouped_dense_kernels` empty."""
GROUPED_DENSE_OPERAND_FIELDS = ("a", "b_bank", "d", "alpha_per_matrix")
"""The fields of ``mircuda_cutlass_grouped_dense_operands`` in order (BF16 ``[capacity, K]``, ``[E, N, K]``,
``[capacity, N]``, each 16-byte aligned: TMA granules; FP32 ``[E]``, 4-byte aligned)."""
GROUPED_DENSE_OPERAND_ALIGNMENT = (16, 16, 16, 4)
"""The byte alignment each of :data:`GROUPED_DENSE_OPERAND_FIELDS` needs."""


class GroupedDenseOperands(ctypes.Structure):
    """``mircuda_cutlass_grouped_dense_operands``: one operand set of a grouped BF16 plan (device addresses)."""

    _fields_ = [(name, ctypes.c_void_p) for name in GROUPED_DENSE_OPERAND_FIELDS]


class GroupedOperands(ctypes.Structure):
    """``mircuda_cutlass_grouped_operands``: one operand set of a grouped plan (device addresses)."""

    _fields_ = [(name, ctypes.c_void_p) for name in GROUPED_OPERAND_FIELDS]


GROUPED_TABLE_FIELDS = ("rows", "a", "b", "sfa", "sfb", "d", "alpha", "slot_begin", "slot_end", "sfa_tiled")
"""The fields of ``mircuda_cutlass_grouped_tables`` in order (device arrays the grouped setup writes)."""


class GroupedTables(ctypes.Structure):
    """``mircuda_cutlass_grouped_tables``: where :meth:`CutlassLibrary.grouped_setup` writes (device
    addresses): ``rows`` int32 ``[S]``; ``a, b, sfa, sfb, d, alpha`` 8-byte addresses ``[S]`` (S = sets *
    groups, problem ``s * groups + g``); ``slot_begin, slot_end`` int32 ``[groups]``; ``sfa_tiled`` bytes
    ``[sets, slot_rows, ceil(K/64) * 4]`` (16-byte aligned)."""

    _fields_ = [(name, ctypes.c_void_p) for name in GROUPED_TABLE_FIELDS]


def status_error(status: int, call: str, detail: str = "", cuda_error: int = 0) -> CutlassError:
    """The :class:`CutlassError` of a library call that returned ``status`` (``name`` from :data:`STATUS`)."""
    name = STATUS.get(status, f"status {status}")
    text = f"{call} failed with {name}"
    if cuda_error:
        text += f" (cudaError_t {cuda_error})"
    return CutlassError(text + (f": {detail}" if detail else ""), call=call, status=status, name=name,
                        cuda_error=cuda_error)


class _Info(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("family", ctypes.c_int), ("input", ctypes.c_int),
                ("output", ctypes.c_int), ("tile_m", ctypes.c_int), ("tile_n", ctypes.c_int),
                ("tile_k", ctypes.c_int), ("cluster_m", ctypes.c_int), ("cluster_n", ctypes.c_int),
                ("stages", ctypes.c_int), ("alignment_bytes", ctypes.c_int), ("split_k", ctypes.c_int),
                ("arch_count", ctypes.c_int), ("archs", ctypes.c_int * 4),
                # ABI 2
                ("kind", ctypes.c_int), ("m_multiple", ctypes.c_int), ("n_multiple", ctypes.c_int),
                ("k_multiple", ctypes.c_int), ("scale_type", ctypes.c_int), ("scale_m", ctypes.c_int),
                ("scale_n", ctypes.c_int), ("scale_k", ctypes.c_int), ("sfa_major", ctypes.c_int),
                ("sfb_major", ctypes.c_int)]


@dataclass(frozen=True)
class KernelInfo:
    """One kernel of the library.

    Attributes:
        index: its index in the library's (name-ordered) table.
        name: e.g. ``"sm90_coop_128x256x64_c2x1_bf16_bf16"``.
        family: ``"simt"``, ``"sm90_cooperative"``, ``"sm90_pingpong"``, ``"sm90_swapped"``, ``"sm80_tensorop"``.
        input, output: element type names (``"bf16"``, ``"f16"``, ``"f32"``).
        tile: the threadblock tile (M, N, K) of the problem the kernel solves (N x M for swapped kernels).
        cluster: thread block cluster (M, N).
        stages: mainloop stages (0: chosen by CUTLASS's collective builder).
        alignment_bytes: K and N in bytes and the operand addresses must be multiples of it.
        split_k: whether the kernel takes split-K slices.
        (family also ``"sm120_nvfp4_cooperative"``, ``"sm120_nvfp4_pingpong"``: the block-scaled NVFP4
        kernels, input ``"e2m1"``; ``"sm120_nvfp4_grouped_cooperative"``, ``"sm120_nvfp4_grouped_pingpong"``:
        the grouped ones.)
        archs: SASS targets compiled in (90 for sm_90a, 120 for sm_120f); empty for NVRTC kernels.
        origin: ``"cutlass"`` (a kernel of the library) or ``"nvrtc"`` (a CUDA C kernel of
            ``cuda_src/`` that NVRTC compiles for the device at plan construction, any cc >= 8.0).
        kind: ``"dense"`` (:meth:`CutlassLibrary.create_plan`, :meth:`CutlassLibrary.execute`) or
            ``"blockwise_scaled"`` (:meth:`CutlassLibrary.create_scaled_plan`,
            :meth:`CutlassLibrary.execute_scaled`) or ``"block_scaled"`` (NVFP4:
            :meth:`CutlassLibrary.create_block_scaled_plan`, :meth:`CutlassLibrary.execute_block_scaled`)
            or ``"grouped_block_scaled"`` (grouped NVFP4: :meth:`CutlassLibrary.create_grouped_plan`,
            :meth:`CutlassLibrary.execute_grouped`).
        multiples: (M, N, K) must be multiples of these (operand alignment and, for the sm120 blockwise
            kernel, whole 128-blocks of N and K); (1, 1, 1) for the NVRTC kernels' entries.
        scale_type: element type of the scale factors (``"f32"``; ``"ue4m3"`` for NVFP4); ``""`` for dense
            kernels.
        scale_block: (scale_m, scale_n, scale_k): one SFA value per scale_m x scale_k block of A, one SFB
            value per scale_n x scale_k block of B; ``(1, 128, 128)`` for the blockwise FP8 kernels,
            ``(1, 1, 16)`` for the NVFP4 kernels, ``(0, 0, 0)`` for dense kernels.
        scale_major: majorness of (SFA, SFB): ``"k"`` means ``[rows, ceil(K/scale_k)]`` row-major
            (``SFA[m, kb]`` at ``m * ceil(K/128) + kb``, ``SFB[nb, kb]`` at ``nb * ceil(K/128) + kb``);
            ``"tiled"`` is CUTLASS's SM1xx block-scaled layout (:data:`SCALE_MAJORS`). The grouped NVFP4
            kernels take ``("k", "tiled")``: linear activation scales ``[capacity, K/16]``, a tiled bank.
    """

    index: int
    name: str
    family: str
    input: str
    output: str
    tile: tuple[int, int, int]
    cluster: tuple[int, int]
    stages: int
    alignment_bytes: int
    split_k: bool
    archs: tuple[int, ...]
    origin: str = "cutlass"
    kind: str = "dense"
    multiples: tuple[int, int, int] = (1, 1, 1)
    scale_type: str = ""
    scale_block: tuple[int, int, int] = (0, 0, 0)
    scale_major: tuple[str, str] = ("", "")

    def scale_shapes(self, m: int, n: int, k: int) -> tuple[tuple[int, int], tuple[int, int]]:
        """The (SFA, SFB) shapes this kernel reads for the problem (M, N, K), as row-major 2-D arrays:
        ``([M, ceil(K/128)], [ceil(N/128), ceil(K/128)])`` for the K-major blockwise FP8 kernels; for the
        tiled NVFP4 ones the padded extents ``([ceil(M/128) 128, ceil(K/64) 4], [ceil(N/128) 128,
        ceil(K/64) 4])`` (their products are the tiled tensors' bytes; the order inside is the atoms').

        Raises:
            ContractError: the kernel takes no scales (``kind == "dense"``); ``m``, ``n`` or ``k`` is not a
                positive int (numpy integers count, taken as the int: the extents would wrap in a narrow numpy
                type; bool does not).
        """
        if self.kind not in ("blockwise_scaled", "block_scaled", "grouped_block_scaled"):
            raise ContractError("kernel", "a blockwise-scaled or block-scaled kernel", f"{self.name} ({self.kind})")
        for name, value in (("m", m), ("n", n), ("k", k)):
            if not is_integer_value(value) or value < 1:
                raise ContractError(name, "a positive int", repr(value))
        m, n, k = int(m), int(n), int(k)
        sm, sn, sk = self.scale_block

        def shape(rows: int, block: int, major: str) -> tuple[int, int]:
            if major == "tiled":
                return -(-rows // 128) * 128, -(-k // (4 * sk)) * 4
            blocks, kb = -(-rows // block), -(-k // sk)
            return (blocks, kb) if major == "k" else (kb, blocks)

        return shape(m, sm, self.scale_major[0]), shape(n, sn, self.scale_major[1])

    def refusal(self, m: int, n: int, k: int) -> str:
        """Why the kernel cannot take (M, N, K) by its table's constraints (``""`` when it can; CUTLASS's
        can-implement at plan creation remains the final word)."""
        names = ("M", "N", "K")
        bad = [f"{d} = {v} is not a multiple of {q}" for d, v, q in zip(names, (m, n, k), self.multiples)
               if q > 1 and v % q]
        return "; ".join(bad)

    def runs_on(self, compute_capability: tuple[int, int]) -> bool:
        """sm_90a code loads on cc 9.0 only; sm_120f family code on every 12.x device; NVRTC kernels are
        compiled for the device itself (cc >= 8.0)."""
        if self.origin == "nvrtc":
            return tuple(compute_capability) >= (8, 0)
        cc = 10 * compute_capability[0] + compute_capability[1]
        return any(a == cc or (a >= 100 and a // 10 == cc // 10) for a in self.archs)


class CutlassLibrary:
    """The loaded library: its kernel table and typed entry points (ctypes)."""

    def __init__(self, path: Path, origin: str = "path") -> None:
        try:
            lib = ctypes.CDLL(str(path))
        except OSError as exc:
            raise CutlassNotFound(f"{origin}: {path} could not be loaded: {exc}") from None
        self.path = Path(path)
        self._lib = lib
        c_int, vp, c_size_p = ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)
        for name, res, args in [
            ("mircuda_cutlass_abi_version", c_int, []),
            ("mircuda_cutlass_cutlass_version", c_int, []),
            ("mircuda_cutlass_kernel_count", c_int, []),
            ("mircuda_cutlass_kernel_info_get", c_int, [c_int, ctypes.POINTER(_Info)]),
            ("mircuda_cutlass_last_cuda_error", c_int, []),
            ("mircuda_cutlass_plan_create", c_int, [c_int, c_int, c_int, c_int, c_int, ctypes.POINTER(vp)]),
            ("mircuda_cutlass_plan_workspace_bytes", c_int, [vp, c_size_p]),
            ("mircuda_cutlass_plan_set_workspace", c_int, [vp, vp, ctypes.c_size_t]),
            ("mircuda_cutlass_plan_execute", c_int, [vp, vp, vp, vp, vp, ctypes.c_float, ctypes.c_float]),
            ("mircuda_cutlass_plan_destroy", c_int, [vp]),
            ("mircuda_cutlass_scaled_plan_create", c_int, [c_int, c_int, c_int, c_int, ctypes.POINTER(vp)]),
            ("mircuda_cutlass_scaled_plan_execute", c_int,
             [vp, vp, vp, vp, vp, vp, vp, vp, ctypes.c_float, ctypes.c_float]),
        ]:
            try:
                fn = getattr(lib, name)
            except AttributeError:  # some other shared library: ctypes reports the undefined symbol
                raise CutlassNotFound(f"{origin}: expected a {LIBRARY_NAME} (built by `python -m mircuda "
                                      f"build-cutlass`), received {str(path)!r}, which has no {name}") from None
            fn.restype, fn.argtypes = res, args
        self.has_pdl = hasattr(lib, PDL_SYMBOL)
        """Whether the library exports :data:`PDL_SYMBOL` (libraries built before 2026-12-03 do not)."""
        if self.has_pdl:
            lib.mircuda_cutlass_plan_set_pdl.restype = c_int
            lib.mircuda_cutlass_plan_set_pdl.argtypes = [vp, c_int]
        self.has_block_scaled = all(hasattr(lib, name) for name in BLOCK_SCALED_SYMBOLS)
        """Whether the library exports the block-scaled (NVFP4) entry points (:data:`BLOCK_SCALED_SYMBOLS`)."""
        if self.has_block_scaled:
            lib.mircuda_cutlass_block_scaled_plan_create.restype = c_int
            lib.mircuda_cutlass_block_scaled_plan_create.argtypes = [c_int, c_int, c_int, c_int, ctypes.POINTER(vp)]
            lib.mircuda_cutlass_block_scaled_plan_execute.restype = c_int
            lib.mircuda_cutlass_block_scaled_plan_execute.argtypes = [vp, vp, vp, vp, vp, vp, vp, vp, ctypes.c_float]
        abi = lib.mircuda_cutlass_abi_version()
        if abi not in COMPATIBLE_ABI_VERSIONS:
            raise CutlassNotFound(f"{path} speaks ABI {abi}, this mircuda speaks {ABI_VERSION} (and loads "
                                  f"{', '.join(map(str, COMPATIBLE_ABI_VERSIONS))}): rebuild it (python -m mircuda "
                                  "build-cutlass)")
        self.abi_version = abi
        """The library's ``MIRCUDA_CUTLASS_ABI_VERSION`` (one of :data:`COMPATIBLE_ABI_VERSIONS`)."""
        self.has_grouped = abi >= 3 and all(hasattr(lib, name) for name in GROUPED_SYMBOLS)
        """Whether the library exports the grouped block-scaled entry points (:data:`GROUPED_SYMBOLS`, ABI 3)."""
        if self.has_grouped:
            lib.mircuda_cutlass_grouped_plan_create.restype = c_int
            lib.mircuda_cutlass_grouped_plan_create.argtypes = [c_int] * 7 + [ctypes.POINTER(vp)]
            lib.mircuda_cutlass_grouped_plan_execute.restype = c_int
            lib.mircuda_cutlass_grouped_plan_execute.argtypes = [vp, vp, vp, vp, vp, ctypes.POINTER(GroupedOperands),
                                                                vp]
            lib.mircuda_cutlass_grouped_setup.restype = c_int
            lib.mircuda_cutlass_grouped_setup.argtypes = ([vp] + [c_int] * 6 + [vp, vp, vp, ctypes.POINTER(GroupedOperands),
                                                          vp, ctypes.POINTER(GroupedTables)])
        self.has_grouped_dense = abi >= 3 and all(hasattr(lib, name) for name in GROUPED_DENSE_SYMBOLS)
        """Whether the library exports the grouped BF16 entry points (:data:`GROUPED_DENSE_SYMBOLS`)."""
        if self.has_grouped_dense:
            lib.mircuda_cutlass_grouped_plan_create.restype = c_int
            lib.mircuda_cutlass_grouped_plan_create.argtypes = [c_int] * 7 + [ctypes.POINTER(vp)]
            lib.mircuda_cutlass_grouped_dense_plan_execute.restype = c_int
            lib.mircuda_cutlass_grouped_dense_plan_execute.argtypes = [vp, vp, vp, vp, vp,
                                                                      ctypes.POINTER(GroupedDenseOperands), vp]
        v = lib.mircuda_cutlass_cutlass_version()
        self.cutlass_version = f"{v // 10000}.{v // 100 % 100}.{v % 100}"
        table = tuple(self._info(i) for i in range(lib.mircuda_cutlass_kernel_count()))
        self.kernels = tuple(k for k in table if k.kind == "dense")
        """The dense kernels (what DenseMatmulPlan chooses among)."""
        self.scaled_kernels = tuple(k for k in table if k.kind == "blockwise_scaled")
        """The blockwise-scaled FP8 kernels (E4M3 x E4M3 -> BF16, 1 x 128 / 128 x 128 FP32 scales)."""
        self.block_scaled_kernels = (tuple(k for k in table if k.kind == "block_scaled") if self.has_block_scaled
                                     else ())
        """The block-scaled NVFP4 kernels (NVFP4 x NVFP4 -> BF16, tiled UE4M3 scales per 16; sm_120f); empty
        for a library built without them (or before them)."""
        self.grouped_kernels = (tuple(k for k in table if k.kind == "grouped_block_scaled") if self.has_grouped
                                else ())
        """The grouped block-scaled NVFP4 kernels (device-routed groups of NVFP4 x NVFP4 -> BF16, linear
        activation scales, tiled bank scales; sm_120f); empty for a library built without them."""
        self.grouped_dense_kernels = (tuple(k for k in table if k.kind == "grouped_dense")
                                      if self.has_grouped_dense else ())
        """The grouped BF16 kernels (device-routed groups of BF16 x BF16 -> BF16, sm_90a); empty for a library
        built without them."""
        self.grouped_dense_execute_address = (
            ctypes.cast(lib.mircuda_cutlass_grouped_dense_plan_execute, ctypes.c_void_p).value or 0
            if self.has_grouped_dense else 0)
        """The address of ``mircuda_cutlass_grouped_dense_plan_execute`` (0 when the library lacks it): ``int
        (void *plan, void *stream, const int *row_counts, const int *offsets, const int *matrix_indices, const
        mircuda_cutlass_grouped_dense_operands *operands, int *error_flag)``."""
        self.execute_address = ctypes.cast(lib.mircuda_cutlass_plan_execute, ctypes.c_void_p).value or 0
        """The address of ``mircuda_cutlass_plan_execute`` (for callers outside Python, e.g. ``@njit``)."""
        self.scaled_execute_address = ctypes.cast(lib.mircuda_cutlass_scaled_plan_execute, ctypes.c_void_p).value or 0
        """The address of ``mircuda_cutlass_scaled_plan_execute``: ``int (void *plan, void *stream, const
        void *a, const void *b, const void *sfa, const void *sfb, const void *c, void *d, float alpha,
        float beta)``."""
        self.block_scaled_execute_address = (
            ctypes.cast(lib.mircuda_cutlass_block_scaled_plan_execute, ctypes.c_void_p).value or 0
            if self.has_block_scaled else 0)
        self.grouped_execute_address = (
            ctypes.cast(lib.mircuda_cutlass_grouped_plan_execute, ctypes.c_void_p).value or 0
            if self.has_grouped else 0)
        """The address of ``mircuda_cutlass_grouped_plan_execute`` (0 when the library lacks it): ``int (void
        *plan, void *stream, const int *row_counts, const int *offsets, const int *matrix_indices, const
        mircuda_cutlass_grouped_operands *operands, int *error_flag)``."""
        """The address of ``mircuda_cutlass_block_scaled_plan_execute`` (0 when the library lacks it): ``int
        (void *plan, void *stream, const void *a, const void *b, const void *sfa, const void *sfb, void *d,
        const float *alpha_device, float alpha)``."""

    def _info(self, index: int) -> KernelInfo:
        raw = _Info()
        self._check(self._lib.mircuda_cutlass_kernel_info_get(index, ctypes.byref(raw)), "kernel_info_get")
        return KernelInfo(index, raw.name.decode(), FAMILIES.get(raw.family, str(raw.family)),
                          DTYPES.get(raw.input, "?"), DTYPES.get(raw.output, "?"),
                          (raw.tile_m, raw.tile_n, raw.tile_k), (raw.cluster_m, raw.cluster_n), raw.stages,
                          raw.alignment_bytes, bool(raw.split_k), tuple(raw.archs[: raw.arch_count]), "cutlass",
                          KINDS.get(raw.kind, str(raw.kind)), (raw.m_multiple, raw.n_multiple, raw.k_multiple),
                          DTYPES.get(raw.scale_type, ""), (raw.scale_m, raw.scale_n, raw.scale_k),
                          (SCALE_MAJORS.get(raw.sfa_major, "?"), SCALE_MAJORS.get(raw.sfb_major, "?")))

    def _check(self, status: int, call: str, detail: str = "") -> None:
        if status:
            cuda = self._lib.mircuda_cutlass_last_cuda_error() if status == 4 else 0
            raise status_error(status, f"mircuda_cutlass_{call}", detail, cuda)

    # -- plans ------------------------------------------------------------------------------------
    def create_plan(self, kernel: KernelInfo, m: int, n: int, k: int, splits: int) -> int:
        """Create a plan on the current context's device; return its handle (an address).

        Raises:
            CutlassError: NOT_IMPLEMENTABLE, WRONG_ARCH, ...
        """
        handle = ctypes.c_void_p()
        self._check(self._lib.mircuda_cutlass_plan_create(kernel.index, m, n, k, splits, ctypes.byref(handle)),
                    "plan_create", f"kernel {kernel.name}, M={m} N={n} K={k} splits={splits}")
        return int(handle.value or 0)

    def create_scaled_plan(self, kernel: KernelInfo, m: int, n: int, k: int) -> int:
        """Create a plan of a blockwise-scaled kernel on the current context's device; return its handle.
        Its workspace (:meth:`workspace_bytes`, :meth:`set_workspace`) and :meth:`destroy` are the dense
        plans'.

        Raises:
            ContractError: ``kernel`` is a dense kernel, or (M, N, K) break its ``multiples`` (named
                before the library is called).
            CutlassError: NOT_IMPLEMENTABLE (CUTLASS's can-implement), WRONG_ARCH, ...
        """
        if kernel.kind != "blockwise_scaled":
            raise ContractError("kernel", "a blockwise-scaled kernel (CutlassLibrary.scaled_kernels)",
                                f"{kernel.name} ({kernel.kind})")
        why = kernel.refusal(m, n, k)
        if why:
            raise ContractError("shape", f"(M, N, K) that {kernel.name} takes: multiples of {kernel.multiples}",
                                f"({m}, {n}, {k})", why)
        handle = ctypes.c_void_p()
        self._check(self._lib.mircuda_cutlass_scaled_plan_create(kernel.index, m, n, k, ctypes.byref(handle)),
                    "scaled_plan_create", f"kernel {kernel.name}, M={m} N={n} K={k}")
        return int(handle.value or 0)

    def execute_scaled(self, plan: int, stream: int, a: int, b: int, sfa: int, sfb: int, c: int, d: int,
                       alpha: float, beta: float) -> None:
        """Enqueue ``D = alpha * blockwise(A, SFA, B, SFB) + beta * C`` on ``stream`` (device addresses;
        ``c`` = 0 reads C from ``d``, and only when ``beta != 0``). Allocates and synchronizes nothing.

        Raises:
            CutlassError: INVALID_ARGUMENT (a dense plan, a null operand), CUDA_ERROR, ...
        """
        self._check(self._lib.mircuda_cutlass_scaled_plan_execute(plan, stream or None, a or None, b or None,
                                                                  sfa or None, sfb or None, c or None, d or None,
                                                                  alpha, beta), "scaled_plan_execute")

    def create_block_scaled_plan(self, kernel: KernelInfo, m: int, n: int, k: int) -> int:
        """Create a plan of a block-scaled NVFP4 kernel on the current context's device; return its handle.
        Workspace and :meth:`destroy` are the dense plans'.

        Raises:
            ContractError: ``kernel`` is not a block-scaled kernel, or (M, N, K) break its ``multiples``
                (named before the library is called).
            CutlassError: NOT_IMPLEMENTABLE (CUTLASS's can-implement), WRONG_ARCH, ...
        """
        if kernel.kind != "block_scaled" or not self.has_block_scaled:
            raise ContractError("kernel", "a block-scaled NVFP4 kernel (CutlassLibrary.block_scaled_kernels)",
                                f"{kernel.name} ({kernel.kind})")
        why = kernel.refusal(m, n, k)
        if why:
            raise ContractError("shape", f"(M, N, K) that {kernel.name} takes: multiples of {kernel.multiples}",
                                f"({m}, {n}, {k})", why)
        handle = ctypes.c_void_p()
        self._check(self._lib.mircuda_cutlass_block_scaled_plan_create(kernel.index, m, n, k, ctypes.byref(handle)),
                    "block_scaled_plan_create", f"kernel {kernel.name}, M={m} N={n} K={k}")
        return int(handle.value or 0)

    def execute_block_scaled(self, plan: int, stream: int, a: int, b: int, sfa: int, sfb: int, d: int,
                             alpha_device: int, alpha: float) -> None:
        """Enqueue ``D = alpha * block_scaled(A, SFA, B, SFB)`` on ``stream`` (device addresses;
        ``alpha_device`` = 0 uses the host ``alpha``, else the FP32 there is read when the kernel runs).
        Allocates and synchronizes nothing.

        Raises:
            CutlassError: INVALID_ARGUMENT (a plan of another kind, a null operand), CUDA_ERROR, ...
        """
        self._check(self._lib.mircuda_cutlass_block_scaled_plan_execute(
            plan, stream or None, a or None, b or None, sfa or None, sfb or None, d or None, alpha_device or None,
            alpha), "block_scaled_plan_execute")

    def create_grouped_plan(self, kernel: KernelInfo, n: int, k: int, capacity: int, groups: int, bank_size: int,
                            sets: int) -> int:
        """Create a plan of a grouped block-scaled NVFP4 kernel on the current context's device for N, K, a
        row capacity, ``groups`` groups, a bank of ``bank_size`` matrices and ``sets`` (1 or 2) operand sets;
        return its handle. It needs a workspace (:meth:`workspace_bytes`, :meth:`set_workspace`: device
        tables and the activation scales repacked per group); :meth:`destroy` is the dense plans'.

        Raises:
            ContractError: ``kernel`` is not a grouped kernel of this library, a size is not a positive int,
                ``sets`` is not 1 or 2, or (N, K) break the kernel's multiples (named before the library is
                called).
            CutlassError: NOT_IMPLEMENTABLE (CUTLASS's can-implement, a scale workspace past 2^31 rows),
                WRONG_ARCH (the device is not cc 12.x), ...
        """
        if not ((kernel.kind == "grouped_block_scaled" and self.has_grouped)
                or (kernel.kind == "grouped_dense" and self.has_grouped_dense)):
            raise ContractError("kernel", "a grouped kernel (CutlassLibrary.grouped_kernels or "
                                "grouped_dense_kernels)", f"{kernel.name} ({kernel.kind})")
        for name, value in (("n", n), ("k", k), ("capacity", capacity), ("groups", groups), ("bank_size", bank_size)):
            if type(value) is not int or not 1 <= value < 2**31:
                raise ContractError(name, "a positive int below 2^31", repr(value))
        if type(sets) is not int or sets not in (1, 2):
            raise ContractError("sets", "1 or 2 operand sets", repr(sets))
        why = kernel.refusal(1, n, k)
        if why:
            raise ContractError("shape", f"(N, K) that {kernel.name} takes: multiples of {kernel.multiples[1:]}",
                                f"({n}, {k})", why)
        handle = ctypes.c_void_p()
        self._check(self._lib.mircuda_cutlass_grouped_plan_create(kernel.index, n, k, capacity, groups, bank_size,
                                                                  sets, ctypes.byref(handle)),
                    "grouped_plan_create", f"kernel {kernel.name}, N={n} K={k} capacity={capacity} groups={groups} "
                    f"bank_size={bank_size} sets={sets}")
        return int(handle.value or 0)

    def execute_grouped(self, plan: int, stream: int, row_counts: int, offsets: int, matrix_indices: int,
                        operands: Sequence[Sequence[int]], error_flag: int) -> None:
        """Enqueue a grouped plan on ``stream``: the setup kernels, then the grouped GEMM (device addresses;
        ``operands``: one ``(a, sfa_linear, b_bank, sfb_bank_tiled, d, alpha_per_matrix)`` per operand set,
        :data:`GROUPED_OPERAND_FIELDS`; the library reads as many entries as the plan has sets: give exactly
        that many, as :class:`~mircuda.matmul._fp4_grouped_cutlass.CutlassGroupedFp4` does). Allocates and
        synchronizes nothing; reads no routing on the host.

        Raises:
            ContractError: ``operands`` is not a sequence of 6-tuples of non-negative ints.
            CutlassError: INVALID_ARGUMENT (a plan of another kind, a null address),
                NOT_IMPLEMENTABLE (a misaligned address), CUDA_ERROR, ...
        """
        array = self._grouped_operands(operands)
        self._check(self._lib.mircuda_cutlass_grouped_plan_execute(
            plan, stream or None, row_counts or None, offsets or None, matrix_indices or None, array,
            error_flag or None), "grouped_plan_execute")

    def execute_grouped_dense(self, plan: int, stream: int, row_counts: int, offsets: int, matrix_indices: int,
                              operands: Sequence[Sequence[int]], error_flag: int) -> None:
        """Enqueue a grouped BF16 plan (made by :meth:`create_grouped_plan` from a kernel of
        :attr:`grouped_dense_kernels`) on ``stream``: the setup kernel (routing checks ORing ``error_flag``,
        per-problem shapes, pointers and strides), then the grouped GEMM. ``operands``: one ``(a, b_bank, d)``
        per operand set (:data:`GROUPED_DENSE_OPERAND_FIELDS`: ``(a, b_bank, d, alpha_per_matrix)``), exactly as
        many as the plan has sets.
        Allocates and synchronizes nothing; reads no routing on the host.

        Raises:
            ContractError: ``operands`` is not a non-empty sequence of 4-tuples of non-negative ints.
            CutlassError: INVALID_ARGUMENT (a plan of another kind, a null address, the library lacks the
                entry point), NOT_IMPLEMENTABLE (a misaligned address), CUDA_ERROR, ...
        """
        if isinstance(operands, (str, bytes)) or not isinstance(operands, Sequence) or not operands:
            raise ContractError("operands", "a non-empty sequence of (a, b_bank, d, alpha_per_matrix) tuples",
                                repr(operands))
        array = (GroupedDenseOperands * len(operands))()
        for i, entry in enumerate(operands):
            if (not isinstance(entry, Sequence) or len(entry) != len(GROUPED_DENSE_OPERAND_FIELDS)
                    or any(type(v) is not int or v < 0 for v in entry)):
                raise ContractError(f"operands[{i}]", "a tuple of 4 device addresses (a, b_bank, d, alpha_per_matrix)",
                                    repr(entry))
            for name, value in zip(GROUPED_DENSE_OPERAND_FIELDS, entry):
                setattr(array[i], name, value or None)
        if not self.has_grouped_dense:
            raise status_error(1, "mircuda_cutlass_grouped_dense_plan_execute",
                               f"{self.path} lacks the grouped BF16 entry points")
        self._check(self._lib.mircuda_cutlass_grouped_dense_plan_execute(
            plan, stream or None, row_counts or None, offsets or None, matrix_indices or None, array,
            error_flag or None), "grouped_dense_plan_execute")

    def grouped_setup(self, stream: int, n: int, k: int, capacity: int, groups: int, bank_size: int,
                      row_counts: int, offsets: int, matrix_indices: int, operands: Sequence[Sequence[int]],
                      error_flag: int, tables: Sequence[int]) -> None:
        """Enqueue the grouped plans' device setup alone on ``stream`` (``mircuda_cutlass_grouped_setup``: the
        routing checks ORing ``error_flag``, the per-problem rows and pointers, the slots and the repacked
        activation scales) into ``tables`` (device addresses in :data:`GROUPED_TABLE_FIELDS` order). It runs
        on every GPU the library has code for (the GEMM needs cc 12.x): what tests the setup on the H200.
        ``operands``: 1 or 2 sets, as :meth:`execute_grouped` takes them.

        Raises:
            ContractError: ``operands`` or ``tables`` malformed (before the library is called).
            CutlassError: INVALID_ARGUMENT (a size, a null address), NOT_IMPLEMENTABLE (N % 8, K % 32),
                CUDA_ERROR (a launch failed), or the library lacks the entry point (INVALID_ARGUMENT).
        """
        array = self._grouped_operands(operands)
        if (isinstance(tables, (str, bytes)) or not isinstance(tables, Sequence)
                or len(tables) != len(GROUPED_TABLE_FIELDS) or any(type(v) is not int or v < 0 for v in tables)):
            raise ContractError("tables", f"{len(GROUPED_TABLE_FIELDS)} device addresses "
                                f"({', '.join(GROUPED_TABLE_FIELDS)})", repr(tables))
        if not self.has_grouped:
            raise status_error(1, "mircuda_cutlass_grouped_setup", f"{self.path} lacks the grouped entry points")
        t = GroupedTables(*[v or None for v in tables])
        self._check(self._lib.mircuda_cutlass_grouped_setup(
            stream or None, n, k, capacity, groups, bank_size, len(array), row_counts or None, offsets or None,
            matrix_indices or None, array, error_flag or None, ctypes.byref(t)), "grouped_setup")

    @staticmethod
    def _grouped_operands(operands: Sequence[Sequence[int]]) -> ctypes.Array[GroupedOperands]:
        if isinstance(operands, (str, bytes)) or not isinstance(operands, Sequence) or not operands:
            raise ContractError("operands", "a non-empty sequence of (a, sfa, b_bank, sfb_bank, d, alpha) tuples",
                                repr(operands))
        array = (GroupedOperands * len(operands))()
        for i, entry in enumerate(operands):
            if (not isinstance(entry, Sequence) or len(entry) != len(GROUPED_OPERAND_FIELDS)
                    or any(type(v) is not int or v < 0 for v in entry)):
                raise ContractError(f"operands[{i}]", f"a tuple of {len(GROUPED_OPERAND_FIELDS)} device addresses "
                                    f"({', '.join(GROUPED_OPERAND_FIELDS)})", repr(entry))
            for name, value in zip(GROUPED_OPERAND_FIELDS, entry):
                setattr(array[i], name, value or None)
        return array

    def workspace_bytes(self, plan: int) -> int:
        out = ctypes.c_size_t()
        self._check(self._lib.mircuda_cutlass_plan_workspace_bytes(plan, ctypes.byref(out)), "plan_workspace_bytes")
        return int(out.value)

    def set_workspace(self, plan: int, address: int, nbytes: int) -> None:
        self._check(self._lib.mircuda_cutlass_plan_set_workspace(plan, address or None, nbytes), "plan_set_workspace")

    def set_pdl(self, plan: int, on: bool) -> bool:
        """Launch dense or blockwise-scaled plan ``plan``'s kernel with programmatic dependent launch from its next
        execute (``on``) or without; returns whether the kernel now launches so. False for ``on`` when the kernel was
        not built to wait for the previous kernel (``NOT_IMPLEMENTABLE``: only the SM90 dense families, the split-K
        and stream-K ones where built with ``StreamKGdcScheduler``, and the SM90 blockwise FP8 cooperative and
        ping-pong kernels are, not the experimental blockwise families; see ``cutlass_build/src/sm90.cuh`` and
        ``blockwise_instance.cuh``). With a library that predates :data:`PDL_SYMBOL` it returns False after checking
        the arguments and calls nothing. Like execute, one thread at a time per plan.

        Raises:
            ContractError: ``plan`` is not a positive int below 2**64 (a plan handle, a pointer) or ``on`` not a
                bool; nothing is called.
            CutlassError: any other status the library answers (a null plan, a plan of another kind; also a
                blockwise plan with a library built before the blockwise kernels took it, 2026-12-03: the
                FP8 plans then launch without)."""
        if isinstance(plan, bool) or not isinstance(plan, int) or not 0 < plan < 1 << 64:
            # (ctypes would wrap a larger int into another address without a word)
            raise ContractError("plan", "a library plan handle (a positive int below 2**64)", repr(plan))
        if not isinstance(on, bool):
            raise ContractError("on", "a bool", repr(on))
        if not self.has_pdl:
            return False
        status = int(self._lib.mircuda_cutlass_plan_set_pdl(plan, int(on)))
        if on and status == NOT_IMPLEMENTABLE:
            return False
        self._check(status, "plan_set_pdl")
        return bool(on)

    def execute(self, plan: int, stream: int, a: int, b: int, c: int, alpha: float, beta: float) -> None:
        self._check(self._lib.mircuda_cutlass_plan_execute(plan, stream or None, a, b, c, alpha, beta), "plan_execute")

    def destroy(self, plan: int) -> int:
        return int(self._lib.mircuda_cutlass_plan_destroy(plan))

    def __repr__(self) -> str:
        return f"CutlassLibrary({str(self.path)!r}, CUTLASS {self.cutlass_version}, {len(self.kernels)} kernels)"


_lock = threading.Lock()
_loaded: dict[str, CutlassLibrary] = {}


def load_library(path: str | Path | None = None) -> CutlassLibrary:
    """Load the library (``MIRCUDA_CUTLASS_LIBRARY`` or the cached build) once per process.

    Raises:
        ContractError: ``path`` is not None, a str or an os.PathLike of str, is empty or holds a NUL.
        CutlassNotFound: no library, or the file is not a mircuda CUTLASS library (it lacks the
            library's entry points); the message names where the path came from and the build command.
    """
    if path is None:
        resolved = find_library()
        origin = "MIRCUDA_CUTLASS_LIBRARY" if os.environ.get("MIRCUDA_CUTLASS_LIBRARY") else "the cached build"
    else:
        text = os.fspath(path) if isinstance(path, (str, os.PathLike)) else None
        if not isinstance(text, str) or not text or "\0" in text:
            raise ContractError("path", f"None or a non-empty str/os.PathLike path of a {LIBRARY_NAME} "
                                "without NUL characters", repr(path))
        resolved, origin = Path(text), "argument 'path'"
    key = str(resolved.resolve())
    with _lock:
        lib = _loaded.get(key)
        if lib is None:
            lib = _loaded[key] = CutlassLibrary(resolved, origin)
        return lib


def pick_family(kernels: Sequence[KernelInfo], want: str) -> tuple[KernelInfo, str]:
    """The kernel of family ``want`` among ``kernels`` (non-empty), else the first; and "" or the note
    saying the wanted family is missing from the library (the grouped engines' kernel choice)."""
    chosen = {k.family: k for k in kernels}.get(want) or kernels[0]
    return chosen, "" if chosen.family == want else f" wanted, the library has only {chosen.name}"


def positive_size(name: str, value: Any) -> int:
    """A size the C entry points take as int: a Python int in [1, 2^31).

    Raises:
        ContractError: naming ``name``.
    """
    if type(value) is not int or not 1 <= value < 2**31:
        raise ContractError(name, "a positive int below 2^31", repr(value))
    return value
