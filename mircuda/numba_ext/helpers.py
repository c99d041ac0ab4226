"""mircuda's CUDA C device helpers (``mircuda/cuda_src/numba_helpers.cu``), callable from Numba kernels.

Use them like any Numba device function; the CUDA C is compiled and linked into the kernel when it
is built (by mircuda's compiler, or by numba-cuda when launched the classic way)::

    from mircuda.numba_ext import helpers

    def dequantize(out, q, scale):
        i = cuda.grid(1)
        if i < q.size:
            out[i] = helpers.e4m3_to_f32(q[i]) * scale

Conversions are exact where the target holds every value; narrowing rounds to nearest even.
Formats: see the CUDA C file's header (OCP FP8 E4M3 "fn", OCP MX FP4 E2M1, low nibble first).
"""

from __future__ import annotations

from pathlib import Path

from ..compile import CudaSource
from . import _compat
from ._cuda_c import declare_device

__all__ = ["bf16_to_f32", "f32_to_bf16", "f16_to_f32", "f32_to_f16", "e4m3_to_f32", "e2m1_to_f32",
           "e2m1x2_to_f32x2", "warp_sum_f32", "warp_max_f32", "SOURCE"]

_PATH = Path(__file__).resolve().parent.parent / "cuda_src" / "numba_helpers.cu"
SOURCE = CudaSource(_PATH.read_text(encoding="utf-8"), "numba_helpers.cu")
"""The helpers' CUDA C translation unit."""

_t = _compat.types

bf16_to_f32 = declare_device("mircuda_bf16_to_f32", _t.float32(_compat.bfloat16), SOURCE)
"""``float32(bfloat16)``: exact."""
f32_to_bf16 = declare_device("mircuda_f32_to_bf16", _compat.bfloat16(_t.float32), SOURCE)
"""``bfloat16(float32)``: round to nearest even; NaN stays NaN."""
f16_to_f32 = declare_device("mircuda_f16_to_f32", _t.float32(_t.float16), SOURCE)
"""``float32(float16)``: exact."""
f32_to_f16 = declare_device("mircuda_f32_to_f16", _t.float16(_t.float32), SOURCE)
"""``float16(float32)``: round to nearest even; beyond ±65504 gives ±inf."""
e4m3_to_f32 = declare_device("mircuda_e4m3_to_f32", _t.float32(_t.uint8), SOURCE)
"""``float32(uint8)``: decode one E4M3 (fn) byte, exactly (0x7f/0xff: NaN)."""
e2m1_to_f32 = declare_device("mircuda_e2m1_to_f32", _t.float32(_t.uint8), SOURCE)
"""``float32(uint8)``: decode the E2M1 value in the low 4 bits, exactly."""
e2m1x2_to_f32x2 = declare_device("mircuda_e2m1x2_to_f32x2", _compat.float32x2()(_t.uint8), SOURCE)
"""``float32x2(uint8)``: decode a packed FP4 pair; ``.x`` is the low nibble (the lower-indexed element)."""
warp_sum_f32 = declare_device("mircuda_warp_sum_f32", _t.float32(_t.float32), SOURCE)
"""``float32(float32)``: the sum over the warp's 32 lanes, in every lane; all 32 lanes must call it."""
warp_max_f32 = declare_device("mircuda_warp_max_f32", _t.float32(_t.float32), SOURCE)
"""``float32(float32)``: the maximum over the warp's 32 lanes, in every lane; all 32 lanes must call it."""
