"""NVFP4 numpy references: E2M1/UE4M3 encoding and decoding, the two scale layouts, NVIDIA ModelOpt's
quantization recipe, and dequantization. The device kernels (``cuda_src/fp4_*.cu``) match these bit for
bit; the tests compare them.

Format (NVIDIA ModelOpt ``modelopt/torch/quantization/qtensor/nvfp4_tensor.py``, TensorRT-LLM): values
E2M1 (0, 0.5, 1, 1.5, 2, 3, 4, 6 and negatives), two per byte, element 2i in the low nibble (CUTLASS's
and PyTorch's ``float4_e2m1fn_x2`` order); one UE4M3 scale (an E4M3 byte with the sign clear) per 16
consecutive K-elements; one FP32 global scale per tensor. ``x ~ q * block_scale * global``.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from ..dtypes import is_integer_value
from ..errors import ContractError
from ._spec import _DIM_LIMIT, _dim

__all__ = ["BLOCK", "ATOM_ROWS", "ATOM_BLOCKS", "ATOM_BYTES", "E2M1_VALUES", "FP4_MAX", "E4M3_MAX",
           "e2m1_decode", "e2m1_encode", "pack_e2m1", "unpack_e2m1", "ue4m3_decode", "ue4m3_encode",
           "scale_shape", "scale_bytes", "tiled_offsets", "scales_to_tiled", "scales_to_linear",
           "global_scale", "quantize", "dequantize", "KBLOCK_LIMIT", "GLOBAL_MIN", "GLOBAL_MAX"]

BLOCK = 16
"""K-elements per UE4M3 scale (NVFP4)."""
ATOM_ROWS = 128
"""Rows per atom of the tiled scale layout (``Sm1xxBlockScaledBasicChunk::Blk_MN``)."""
ATOM_BLOCKS = 4
"""K-blocks per atom row (``Blk_SF``)."""
ATOM_BYTES = ATOM_ROWS * ATOM_BLOCKS
FP4_MAX = 6.0
E4M3_MAX = 448.0
KBLOCK_LIMIT = _DIM_LIMIT // BLOCK
"""K-block counts stay below this (K = 16 * kblocks below ``_spec._DIM_LIMIT`` = 2**31 - 2**16, the bound of
every dimension the plans and the FP8 helpers take); rows and K stay below ``_DIM_LIMIT`` itself."""
FP32_MAX = float(np.finfo(np.float32).max)
GLOBAL_MIN = float(np.finfo(np.float32).tiny)
"""Smallest global scale :func:`quantize` takes: 2**-126, the smallest normal FP32. Below it (a subnormal
global) ``block scale * global`` can round to zero in FP32 and zero values would get NaN codes (0 / 0)."""
GLOBAL_MAX = float(np.float32(FP32_MAX / 6))
"""Largest global scale :func:`quantize` takes: about 5.6713724e37, the largest FP32 ``g`` with ``6 * g``
finite. Above it ``6 * global`` is inf in FP32 and every block scale would be computed as 0 whatever the
block holds."""
E2M1_VALUES = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], dtype=np.float32)
"""The value of each 4-bit E2M1 code (bit 3: sign; bits 1-2: exponent; bit 0: mantissa)."""


def _codes(name: str, value: Any, top: int) -> np.ndarray:
    """``value`` as uint8 codes; refuses non-integer dtypes and values outside ``0..top`` by name
    (masking them would give a silently wrong value)."""
    arr = _array(name, value, f"an integer array of codes 0..{top}")
    if arr.dtype.kind not in "iu":
        raise ContractError(name, f"an integer array of codes 0..{top}", f"dtype {arr.dtype}")
    if arr.size and (arr.min() < 0 or arr.max() > top):
        bad = arr[(arr < 0) | (arr > top)].reshape(-1)[0]
        raise ContractError(name, f"codes 0..{top}", f"{int(bad)}")
    return arr.astype(np.uint8)


def _array(name: str, value: Any, expected: str) -> np.ndarray:
    """``np.asarray(value)``; what numpy cannot make an array of (a ragged nested list) is refused naming ``name``."""
    try:
        return np.asarray(value)
    except (TypeError, ValueError) as exc:
        raise ContractError(name, expected, f"{type(value).__name__} ({exc})") from None


def _real(name: str, value: Any) -> np.ndarray:
    arr = _array(name, value, "a real array (int, float or BF16)")
    if arr.dtype.kind not in "iuf" and arr.dtype != np.dtype(ml_dtypes.bfloat16):
        raise ContractError(name, "a real array (int, float or BF16)", f"dtype {arr.dtype}")
    return arr


def _kblocks(name: str, value: Any) -> int:
    """A positive count of K-blocks below :data:`KBLOCK_LIMIT`, as a Python int (numpy integers would wrap
    in the size products)."""
    if not is_integer_value(value) or value < 1:
        raise ContractError(name, "a positive int", repr(value))
    if value >= KBLOCK_LIMIT:
        raise ContractError(name, f"a count of K-blocks below {KBLOCK_LIMIT} (K = 16 * kblocks below {_DIM_LIMIT}, "
                                  "the kernels index with 32-bit ints)", repr(value))
    return int(value)


def _finite_f32(arr: np.ndarray) -> np.ndarray:
    """``arr`` as float32; refuses, naming ``x``, a NaN, an infinity or a value beyond FP32's range."""
    with np.errstate(over="ignore"):
        xf = arr.astype(np.float32)
    bad = ~np.isfinite(xf)
    if bad.any():
        at = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ContractError("x", f"finite values within FP32's range (|x| <= {FP32_MAX:.8g}; NaN and inf give no "
                                 "usable scale)", f"{arr[at]!r} at {at}")
    return xf


def e2m1_decode(codes: np.ndarray) -> np.ndarray:
    """4-bit codes (an integer array, values 0..15) -> float32 values.

    Raises:
        ContractError: ``codes`` not an integer array, or a code outside 0..15.
    """
    return E2M1_VALUES[_codes("codes", codes, 15)]


def e2m1_encode(values: np.ndarray) -> np.ndarray:
    """float32 -> 4-bit E2M1 codes (uint8), round to nearest even, magnitudes above 6 saturate to 6 (as
    ``cvt.rn.satfinite.e2m1x2.f32``); the sign is kept (-0.1 -> 0x8, as ml_dtypes' ``float4_e2m1fn``);
    NaN -> 0x7 or 0xF. The device kernels use the same thresholds (``fp4_common.cuh``)."""
    v = np.asarray(values, dtype=np.float32)
    a = np.abs(v)
    c = np.select([a <= 0.25, a < 0.75, a <= 1.25, a < 1.75, a <= 2.5, a < 3.5, a <= 5.0],
                  [0, 1, 2, 3, 4, 5, 6], 7).astype(np.uint8)
    c[np.isnan(a)] = 7
    return (c | (np.signbit(v).astype(np.uint8) << 3)).astype(np.uint8)


def pack_e2m1(codes: np.ndarray) -> np.ndarray:
    """``[..., K]`` codes -> ``[..., K/2]`` bytes: element 2i in the low nibble, 2i+1 in the high one.

    Raises:
        ContractError: ``codes`` not an integer array of at least one dimension, a code outside 0..15,
            or an odd K.
    """
    c = _codes("codes", codes, 15)
    if c.ndim == 0 or c.shape[-1] % 2:
        raise ContractError("codes", "[..., K] codes with an even K", f"shape {c.shape}")
    return (c[..., 0::2] & 0xF) | ((c[..., 1::2] & 0xF) << 4)


def unpack_e2m1(packed: np.ndarray) -> np.ndarray:
    """``[..., K/2]`` bytes -> ``[..., K]`` codes (the inverse of :func:`pack_e2m1`)."""
    p = _codes("packed", packed, 255)
    if p.ndim == 0:
        raise ContractError("packed", "a [..., K/2] byte array", "a 0-d array")
    out = np.empty(p.shape[:-1] + (2 * p.shape[-1],), dtype=np.uint8)
    out[..., 0::2] = p & 0xF
    out[..., 1::2] = p >> 4
    return out


def ue4m3_decode(codes: np.ndarray) -> np.ndarray:
    """UE4M3 bytes -> float32 (E4M3FN values; the sign bit is ignored, as the kernels do)."""
    c = _codes("codes", codes, 255) & 0x7F
    return c.view(ml_dtypes.float8_e4m3fn).astype(np.float32)


def ue4m3_encode(values: np.ndarray) -> np.ndarray:
    """Non-negative float32 -> UE4M3 bytes, round to nearest even, satfinite (above 448 -> 448, as
    ``__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3)``)."""
    v = np.minimum(np.asarray(values, dtype=np.float32), np.float32(E4M3_MAX))
    return v.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)


def _check_k(k: Any) -> int:
    if not is_integer_value(k) or k < 1 or k % BLOCK:
        raise ContractError("k", f"a positive multiple of {BLOCK}", repr(k))
    if k >= _DIM_LIMIT:
        raise ContractError("k", f"a dimension below {_DIM_LIMIT} (the kernels index with 32-bit ints)", repr(k))
    return int(k)


def _check_layout(layout: Any) -> str:
    if not isinstance(layout, str) or layout not in ("linear", "tiled"):  # str first: an array's `in` is ambiguous
        raise ContractError("layout", "'linear' or 'tiled'", repr(layout))
    return str(layout)


def scale_shape(rows: int, k: int, layout: str) -> tuple[int, int]:
    """The 2-D extent of the scales of a ``[rows, K]`` operand: ``(rows, K/16)`` for ``"linear"`` (the shape
    of :func:`quantize`'s linear scale array); ``(ceil(rows/128) * 128, ceil(K/64) * 4)`` (padded) for
    ``"tiled"``, whose product is the byte count (:func:`scale_bytes`) only: the tiled scales that
    :func:`quantize` and :func:`scales_to_tiled` return are a flat ``(product,)`` uint8 array, not an array of
    this shape (their byte order is not row-major over it; see :func:`tiled_offsets`).

    Raises:
        ContractError: ``rows`` not a positive int, ``k`` not a positive multiple of 16, either not below
            2**31 - 2**16 (the bound of the plans' dimensions), or another layout.
    """
    rows, k, layout = _dim("rows", rows), _check_k(k), _check_layout(layout)
    kb = k // BLOCK
    if layout == "linear":
        return rows, kb
    return -(-rows // ATOM_ROWS) * ATOM_ROWS, -(-kb // ATOM_BLOCKS) * ATOM_BLOCKS


def scale_bytes(rows: int, k: int, layout: str) -> int:
    """Bytes of the scale tensor of a ``[rows, K]`` operand in ``layout``."""
    r, c = scale_shape(rows, k, layout)
    return r * c


def tiled_offsets(rows: int, kblocks: int) -> np.ndarray:
    """``[rows, kblocks]`` int64: the byte offset of scale (row, kb) in the tiled layout of CUTLASS's
    SM1xx block-scaled kernels (``cutlass/detail/sm100_blockscaled_layout.hpp``:
    ``SfKMajorAtom = Layout<Shape<Shape<_32,_4>, Shape<_16,_4>>, Stride<Stride<_16,_4>, Stride<_0,_1>>>``
    tiled by ``tile_to_shape(atom, (rows, K, L), Step<_2,_1,_3>)``, atoms K-fastest) and of cuBLASLt's
    ``CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3``: atom ``(row // 128) * ceil(kblocks / 4) + kb // 4`` of
    512 bytes, in it ``(row % 32) * 16 + (row % 128 // 32) * 4 + kb % 4``."""
    rows, kblocks = _dim("rows", rows), _kblocks("kblocks", kblocks)
    r = np.arange(rows, dtype=np.int64)[:, None]
    kb = np.arange(kblocks, dtype=np.int64)[None, :]
    katoms = -(-kblocks // ATOM_BLOCKS)
    return ((r // ATOM_ROWS) * katoms + kb // ATOM_BLOCKS) * ATOM_BYTES + (r % 32) * 16 + (r % ATOM_ROWS // 32) * 4 \
        + kb % ATOM_BLOCKS


def _padded_bytes(rows: int, kblocks: int) -> int:
    return -(-rows // ATOM_ROWS) * ATOM_ROWS * -(-kblocks // ATOM_BLOCKS) * ATOM_BLOCKS


def scales_to_tiled(linear: np.ndarray) -> np.ndarray:
    """``[rows, K/16]`` linear scale bytes -> the tiled layout as a flat 1-D uint8 array of
    ``ceil(rows/128) * 128 * ceil(K/64) * 4`` bytes (512 per atom; padding zero).

    Raises:
        ContractError: ``linear`` not a non-empty 2-D integer array of bytes 0..255, or rows / K-blocks not
            below the bounds of :func:`scale_shape`.
    """
    lin = _codes("linear", linear, 255)
    if lin.ndim != 2 or lin.size == 0:
        raise ContractError("linear", "a non-empty [rows, K/16] byte array", f"shape {lin.shape}")
    rows, kb = lin.shape
    if rows >= _DIM_LIMIT or kb >= KBLOCK_LIMIT:
        raise ContractError("linear", f"[rows, K/16] with rows below {_DIM_LIMIT} and K/16 below {KBLOCK_LIMIT}",
                            f"shape {lin.shape}")
    r, c = -(-rows // ATOM_ROWS) * ATOM_ROWS, -(-kb // ATOM_BLOCKS) * ATOM_BLOCKS
    out = np.zeros(r * c, dtype=np.uint8)
    out[tiled_offsets(rows, kb)] = lin
    return out


def _from_tiled(name: str, tiled: Any, rows: int, kblocks: int) -> np.ndarray:
    """``tiled`` (checked rows / kblocks) -> ``[rows, kblocks]``; its byte count is checked, naming ``name``,
    before the offsets are allocated."""
    flat = _codes(name, tiled, 255).reshape(-1)
    want = _padded_bytes(rows, kblocks)
    if flat.size != want:
        raise ContractError(name, f"{want} bytes (the tiled layout of [{rows}, {kblocks}] scales)",
                            f"{flat.size} bytes")
    return flat[tiled_offsets(rows, kblocks)]


def scales_to_linear(tiled: np.ndarray, rows: int, kblocks: int) -> np.ndarray:
    """Tiled scale bytes (any shape; read flat) -> ``[rows, kblocks]`` uint8 linear (padding dropped).

    Raises:
        ContractError: ``rows`` not a positive int below 2**31 - 2**16, ``kblocks`` not a positive int below
            :data:`KBLOCK_LIMIT` (numpy integers are taken), or ``tiled`` not of the padded size
            ``ceil(rows/128) * 128 * ceil(kblocks/4) * 4`` bytes (checked before anything is allocated).
    """
    rows, kblocks = _dim("rows", rows), _kblocks("kblocks", kblocks)
    return _from_tiled("tiled", tiled, rows, kblocks)


def global_scale(x: np.ndarray) -> np.float32:
    """ModelOpt's per-tensor scale: ``amax(|x|) / (6 * 448)`` in float32; 1.0 for an all-zero (or empty)
    tensor (the device quantizer's choice: it keeps every division finite). A nonzero amax below
    ``2688 * 2**-126`` (about 3.2e-35) gives a subnormal or zero scale, returned as computed (:func:`quantize`
    refuses it).

    Raises:
        ContractError: ``x`` not a real (int, float or BF16) array, or holding a NaN, an infinity or a value
            beyond FP32's range (the device could never receive it; its scale would be NaN or inf).
    """
    arr = _real("x", x)
    return _global_of(_finite_f32(arr))


def _global_of(xf: np.ndarray) -> np.float32:
    a = np.float32(np.max(np.abs(xf))) if xf.size else np.float32(0)
    return np.float32(1.0) if a == 0 else np.float32(a / np.float32(FP4_MAX * E4M3_MAX))


def _check_global(value: Any) -> np.float32:
    expected = (f"a finite positive real (FP32) from {GLOBAL_MIN:.9g} (2**-126, the smallest normal FP32) to "
                f"{GLOBAL_MAX:.9g} (6 * global must be finite in FP32), or None")
    # ml_dtypes' scalars (bfloat16(1)) are np.generic but not np.number
    real = isinstance(value, (int, float, np.number)) or (isinstance(value, np.generic)
                                                          and value.dtype == np.dtype(ml_dtypes.bfloat16))
    if (isinstance(value, (bool, np.bool_, np.timedelta64)) or not real
            or isinstance(value, complex | np.complexfloating)):
        raise ContractError("global_value", expected, repr(value))
    try:
        with np.errstate(over="ignore"):
            g = np.float32(value)
    except OverflowError:  # a Python int beyond float's range
        raise ContractError("global_value", expected, repr(value)) from None
    if not (np.isfinite(g) and GLOBAL_MIN <= g <= GLOBAL_MAX):
        raise ContractError("global_value", expected, repr(value))
    return g


def quantize(x: np.ndarray, global_value: float | None = None, layout: str = "linear"
             ) -> tuple[np.ndarray, np.ndarray, np.float32]:
    """ModelOpt's NVFP4 quantization of ``x`` (``[rows, K]``, BF16 or float32 values; K % 16 == 0), in
    float32 arithmetic as the device quantizer does it:

    - ``global = amax / (6 * 448)`` (:func:`global_scale`) unless ``global_value`` is given;
    - ``block scale = amax(block of 16) / (6 * global)`` -> UE4M3 (RNE, satfinite); an all-zero block
      (scale 0) stores 1.0, as ModelOpt replaces zero block scales by 1;
    - ``q = RNE E2M1 of x / (float(block scale) * global)``; a block whose scale rounds to zero gets zero
      codes (it dequantizes to zero; ModelOpt would divide by zero).

    A given ``global_value`` must lie in ``[GLOBAL_MIN, GLOBAL_MAX]`` = ``[2**-126, about 5.67e37]``: above,
    ``6 * global`` overflows FP32 and every block scale would come out 0; below (subnormal),
    ``block scale * global`` can round to 0 and zero values would get NaN codes. Inside the range a global
    too small for ``x`` saturates, as documented and as the device does: a block scale whose quotient
    exceeds 448 (or overflows to inf) stores 448, and a value whose quotient exceeds 6 (or overflows to inf)
    gets the code of +-6; no warning is issued for these overflows. A global too large flushes small blocks
    to zero codes (their scale rounds to E4M3 zero). Without ``global_value``, an ``x`` whose computed global
    scale is below 2**-126 (a nonzero amax below about 3.2e-35) is refused for the same reason: pass a
    ``global_value``.

    Returns ``(packed, scales, global)``: ``packed`` ``[rows, K/2]`` uint8; ``scales`` a 2-D ``[rows, K/16]``
    uint8 array (``"linear"``) or, for ``"tiled"``, a flat 1-D uint8 array of
    ``ceil(rows/128) * 128 * ceil(K/64) * 4`` bytes (512 per atom of 128 rows x 4 K-blocks, zero padding),
    as :func:`scales_to_tiled` returns; ``global`` an ``np.float32``.

    Raises:
        ContractError: ``x`` not a non-empty real ``[rows, K]`` array with K a multiple of 16, or holding a
            NaN, an infinity or a value beyond FP32's range (with or without ``global_value``), or (without
            ``global_value``) a computed global scale below 2**-126; ``global_value`` not a real in
            ``[GLOBAL_MIN, GLOBAL_MAX]`` (0, negative, inf, NaN give no usable codes);
            ``layout`` not ``"linear"`` or ``"tiled"``.
    """
    layout = _check_layout(layout)
    arr = _real("x", x)
    if arr.ndim != 2 or arr.size == 0:
        raise ContractError("x", "a non-empty [rows, K] array", f"shape {arr.shape}")
    rows, k = arr.shape
    if k % BLOCK:
        raise ContractError("x", f"[rows, K] with K a multiple of {BLOCK}", f"shape {arr.shape}")
    if rows >= _DIM_LIMIT or k >= _DIM_LIMIT:
        raise ContractError("x", f"[rows, K] with rows and K below {_DIM_LIMIT}", f"shape {arr.shape}")
    given = None if global_value is None else _check_global(global_value)
    xf = _finite_f32(arr)
    if given is None:
        g = _global_of(xf)
        if g < GLOBAL_MIN:
            raise ContractError("x", f"an amax(|x|) of 0 or at least about {GLOBAL_MIN * FP4_MAX * E4M3_MAX:.3g} "
                                     "(the computed global scale amax / 2688 must be a normal FP32; or pass "
                                     "global_value)", f"amax {float(np.max(np.abs(xf)))!r} (global scale {float(g)!r})")
    else:
        g = given
    blocks = xf.reshape(rows, k // BLOCK, BLOCK)
    bmax = np.max(np.abs(blocks), axis=2)
    with np.errstate(over="ignore"):  # the documented saturation: a quotient beyond FP32 stores 448
        s = (bmax / np.float32(np.float32(6.0) * g)).astype(np.float32)
    s[s == 0] = 1.0
    codes_s = ue4m3_encode(s)
    sf = ue4m3_decode(codes_s)
    denom = (sf * g).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # overflow: codes saturate to +-6
        q = e2m1_encode((blocks / denom[..., None]).astype(np.float32))
    q[sf == 0] = 0
    packed = pack_e2m1(q.reshape(rows, k))
    scales = codes_s if layout == "linear" else scales_to_tiled(codes_s)
    return packed, scales, g


def dequantize(packed: np.ndarray, scales: np.ndarray, rows: int, k: int, layout: str = "linear") -> np.ndarray:
    """``[rows, K]`` float64 ``q * block scale`` (the global scale not applied). ``packed``: ``[rows, K/2]``
    bytes, or the same ``rows * K/2`` bytes flat. ``scales``: ``rows * K/16`` bytes (``"linear"``, any shape, read
    row-major) or the flat tiled bytes of :func:`quantize` / :func:`scales_to_tiled` (``"tiled"``, padding ignored).

    Raises:
        ContractError: bad ``rows``, ``k`` or ``layout``; ``packed`` neither ``rows * K/2`` flat bytes nor shaped
            ``[rows, K/2]``; ``scales`` not ``rows * K/16`` bytes (linear) or the padded tiled size.

    Every scale byte is decoded as the kernels decode it, so that this is their oracle for any input: UE4M3 has
    no sign, and bit 7 is ignored (0x80 + b decodes as b); 0x7F and 0xFF decode to NaN, and so do their blocks.
    """
    rows, k, layout = _dim("rows", rows), _check_k(k), _check_layout(layout)
    p = _codes("packed", packed, 255)
    # flat bytes (as downloaded) or [rows, K/2]; a 2-d array of the right size but another shape ([K/2, rows], or
    # rows and k swapped) would be read as other rows and give a silently wrong result
    if (p.ndim != 1 or p.size != rows * k // 2) and p.shape != (rows, k // 2):
        raise ContractError("packed", f"{rows * k // 2} bytes, flat or shaped [{rows}, {k // 2}] ([rows, K/2])",
                            f"shape {p.shape}")
    s = _codes("scales", scales, 255)
    if layout == "linear" and s.size != rows * (k // BLOCK):
        raise ContractError("scales", f"{rows * (k // BLOCK)} bytes ([{rows}, {k // BLOCK}])", f"shape {s.shape}")
    lin = s.reshape(rows, k // BLOCK) if layout == "linear" else _from_tiled("scales", s, rows, k // BLOCK)
    q = e2m1_decode(unpack_e2m1(p.reshape(rows, k // 2))).astype(np.float64)
    return q * np.repeat(ue4m3_decode(lin).astype(np.float64), BLOCK, axis=1)
