"""NVFP4 numpy references: E2M1/UE4M3 encoding and decoding, the two scale layouts, NVIDIA ModelOpt's
quantization recipe, and dequantization. The device kernels (``cuda_src/fp4_*.cu``) match these bit for
bit; the tests compare them.

Format (NVIDIA ModelOpt ``modelopt/torch/quantization/qtensor/nvfp4_tensor.py``, TensorRT-LLM): values
E2M1 (0, 0.5, 1, 1.5, 2, 3, 4, 6 and negatives), two per byte, element 2i in the low nibble (CUTLASS's
and PyTorch's ``float4_e2m1fn_x2`` order); one UE4M3 scale (an E4M3 byte with the sign clear) per 16
consecutive K-elements; one FP32 global scale per tensor. ``x ~ q * block_scale * global``.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

__all__ = ["BLOCK", "ATOM_ROWS", "ATOM_BLOCKS", "ATOM_BYTES", "E2M1_VALUES", "FP4_MAX", "E4M3_MAX",
           "e2m1_decode", "e2m1_encode", "pack_e2m1", "unpack_e2m1", "ue4m3_decode", "ue4m3_encode",
           "scale_shape", "scale_bytes", "tiled_offsets", "scales_to_tiled", "scales_to_linear",
           "global_scale", "quantize", "dequantize"]

BLOCK = 16
"""K-elements per UE4M3 scale (NVFP4)."""
ATOM_ROWS = 128
"""Rows per atom of the tiled scale layout (``Sm1xxBlockScaledBasicChunk::Blk_MN``)."""
ATOM_BLOCKS = 4
"""K-blocks per atom row (``Blk_SF``)."""
ATOM_BYTES = ATOM_ROWS * ATOM_BLOCKS
FP4_MAX = 6.0
E4M3_MAX = 448.0
E2M1_VALUES = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], dtype=np.float32)
"""The value of each 4-bit E2M1 code (bit 3: sign; bits 1-2: exponent; bit 0: mantissa)."""


def e2m1_decode(codes: np.ndarray) -> np.ndarray:
    """4-bit codes (any integer array, values 0..15) -> float32 values."""
    return E2M1_VALUES[np.asarray(codes, dtype=np.uint8) & 0xF]


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
    """``[..., K]`` codes -> ``[..., K/2]`` bytes: element 2i in the low nibble, 2i+1 in the high one."""
    c = np.asarray(codes, dtype=np.uint8)
    if c.shape[-1] % 2:
        raise ValueError(f"K = {c.shape[-1]} is odd")
    return (c[..., 0::2] & 0xF) | ((c[..., 1::2] & 0xF) << 4)


def unpack_e2m1(packed: np.ndarray) -> np.ndarray:
    """``[..., K/2]`` bytes -> ``[..., K]`` codes (the inverse of :func:`pack_e2m1`)."""
    p = np.asarray(packed, dtype=np.uint8)
    out = np.empty(p.shape[:-1] + (2 * p.shape[-1],), dtype=np.uint8)
    out[..., 0::2] = p & 0xF
    out[..., 1::2] = p >> 4
    return out


def ue4m3_decode(codes: np.ndarray) -> np.ndarray:
    """UE4M3 bytes -> float32 (E4M3FN values; the sign bit is ignored, as the kernels do)."""
    c = np.asarray(codes, dtype=np.uint8) & 0x7F
    return c.view(ml_dtypes.float8_e4m3fn).astype(np.float32)


def ue4m3_encode(values: np.ndarray) -> np.ndarray:
    """Non-negative float32 -> UE4M3 bytes, round to nearest even, satfinite (above 448 -> 448, as
    ``__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3)``)."""
    v = np.minimum(np.asarray(values, dtype=np.float32), np.float32(E4M3_MAX))
    return v.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)


def _check_k(k: int) -> None:
    if k % BLOCK:
        raise ValueError(f"K = {k} is not a multiple of {BLOCK}")


def scale_shape(rows: int, k: int, layout: str) -> tuple[int, int]:
    """``(rows, K/16)`` for ``"linear"``; ``(ceil(rows/128) * 128, ceil(K/64) * 4)`` (padded) for
    ``"tiled"``."""
    _check_k(k)
    kb = k // BLOCK
    if layout == "linear":
        return rows, kb
    if layout == "tiled":
        return -(-rows // ATOM_ROWS) * ATOM_ROWS, -(-kb // ATOM_BLOCKS) * ATOM_BLOCKS
    raise ValueError(f"layout {layout!r} is not 'linear' or 'tiled'")


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
    r = np.arange(rows, dtype=np.int64)[:, None]
    kb = np.arange(kblocks, dtype=np.int64)[None, :]
    katoms = -(-kblocks // ATOM_BLOCKS)
    return ((r // ATOM_ROWS) * katoms + kb // ATOM_BLOCKS) * ATOM_BYTES + (r % 32) * 16 + (r % ATOM_ROWS // 32) * 4 \
        + kb % ATOM_BLOCKS


def scales_to_tiled(linear: np.ndarray) -> np.ndarray:
    """``[rows, K/16]`` linear scale bytes -> the tiled layout, flat (padding zero)."""
    lin = np.asarray(linear, dtype=np.uint8)
    rows, kb = lin.shape
    r, c = -(-rows // ATOM_ROWS) * ATOM_ROWS, -(-kb // ATOM_BLOCKS) * ATOM_BLOCKS
    out = np.zeros(r * c, dtype=np.uint8)
    out[tiled_offsets(rows, kb)] = lin
    return out


def scales_to_linear(tiled: np.ndarray, rows: int, kblocks: int) -> np.ndarray:
    """Flat tiled scale bytes -> ``[rows, kblocks]`` linear (padding dropped)."""
    return np.asarray(tiled, dtype=np.uint8).reshape(-1)[tiled_offsets(rows, kblocks)]


def global_scale(x: np.ndarray) -> np.float32:
    """ModelOpt's per-tensor scale: ``amax(|x|) / (6 * 448)`` in float32; 1.0 for an all-zero tensor (the
    device quantizer's choice: it keeps every division finite)."""
    a = np.float32(np.max(np.abs(np.asarray(x, dtype=np.float32)))) if np.size(x) else np.float32(0)
    return np.float32(1.0) if a == 0 else np.float32(a / np.float32(FP4_MAX * E4M3_MAX))


def quantize(x: np.ndarray, global_value: float | None = None, layout: str = "linear"
             ) -> tuple[np.ndarray, np.ndarray, np.float32]:
    """ModelOpt's NVFP4 quantization of ``x`` (``[rows, K]``, BF16 or float32 values; K % 16 == 0), in
    float32 arithmetic as the device quantizer does it:

    - ``global = amax / (6 * 448)`` (:func:`global_scale`) unless ``global_value`` is given;
    - ``block scale = amax(block of 16) / (6 * global)`` -> UE4M3 (RNE, satfinite); an all-zero block
      (scale 0) stores 1.0, as ModelOpt replaces zero block scales by 1;
    - ``q = RNE E2M1 of x / (float(block scale) * global)``; a block whose scale rounds to zero gets zero
      codes (it dequantizes to zero; ModelOpt would divide by zero).

    Returns ``(packed [rows, K/2] uint8, scales, global)``: scales ``[rows, K/16]`` uint8 (``"linear"``)
    or flat tiled bytes with zero padding (``"tiled"``).
    """
    xf = np.asarray(x).astype(np.float32)
    if xf.ndim != 2:
        raise ValueError("x must be [rows, K]")
    rows, k = xf.shape
    _check_k(k)
    g = global_scale(xf) if global_value is None else np.float32(global_value)
    blocks = xf.reshape(rows, k // BLOCK, BLOCK)
    bmax = np.max(np.abs(blocks), axis=2)
    s = (bmax / np.float32(np.float32(6.0) * g)).astype(np.float32)
    s[s == 0] = 1.0
    codes_s = ue4m3_encode(s)
    sf = ue4m3_decode(codes_s)
    denom = (sf * g).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = e2m1_encode((blocks / denom[..., None]).astype(np.float32))
    q[sf == 0] = 0
    packed = pack_e2m1(q.reshape(rows, k))
    scales = codes_s if layout == "linear" else scales_to_tiled(codes_s) if layout == "tiled" else None
    if scales is None:
        raise ValueError(f"layout {layout!r} is not 'linear' or 'tiled'")
    return packed, scales, g


def dequantize(packed: np.ndarray, scales: np.ndarray, rows: int, k: int, layout: str = "linear") -> np.ndarray:
    """``[rows, K]`` float64 ``q * block scale`` (the global scale not applied)."""
    _check_k(k)
    q = e2m1_decode(unpack_e2m1(np.asarray(packed, dtype=np.uint8).reshape(rows, k // 2))).astype(np.float64)
    s = np.asarray(scales, dtype=np.uint8)
    lin = s.reshape(rows, k // BLOCK) if layout == "linear" else scales_to_linear(s, rows, k // BLOCK)
    return q * np.repeat(ue4m3_decode(lin).astype(np.float64), BLOCK, axis=1)
