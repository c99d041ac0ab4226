"""Narrow float kernel parameters (issue 12, item 4) against CUDA's own round-to-nearest conversions.

The kernel receives each value twice: as mircuda packed it (an f16, bf16, e4m3 or e2m1 parameter) and as
the exact double, which it converts with CUDA's conversions (``__double2half``, ``__double2bfloat16``,
``__nv_cvt_double_to_fp8``, ``__nv_cvt_double_to_fp4``, all round-to-nearest-even); both must agree
bit for bit at ties, subnormals and the saturation edge.
"""

from __future__ import annotations

import pytest

import mircuda as mc
from helpers import download

NARROW = mc.cuda_kernel(r'''
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_fp4.h>
extern "C" __global__ void narrow(unsigned char* out, double x, __half f16, __nv_bfloat16 bf16,
                                  __nv_fp8_storage_t e4m3, __nv_fp4_storage_t e2m1) {
    __half h = __double2half(x);
    __nv_bfloat16 b = __double2bfloat16(x);
    __nv_fp8_storage_t q = __nv_cvt_double_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
    __nv_fp4_storage_t r = __nv_cvt_double_to_fp4(x, __NV_E2M1, cudaRoundNearest);
    memcpy(out, &f16, 2); memcpy(out + 2, &h, 2);
    memcpy(out + 4, &bf16, 2); memcpy(out + 6, &b, 2);
    out[8] = e4m3; out[9] = q; out[10] = e2m1; out[11] = r;
}''', "narrow_edges.cu")
Narrow = mc.cuda_export("narrow", out=mc.Out[mc.DeviceBuffer[mc.u8]], x=mc.f64, f16=mc.f16, bf16=mc.bf16,
                        e4m3=mc.e4m3, e2m1=mc.e2m1)

EDGES = [
    464.0, -464.0, 463.99, 448.0, 240.0,                   # e4m3: the tie below the NaN slot, its neighbours
    1 + 2**-8 + 2**-30, 1 + 2**-8, 1 + 3 * 2**-8,         # bf16: just above a tie (one rounding), ties
    1 + 2**-4 + 2**-40, 1 + 2**-11, 1 + 2**-11 + 2**-40,  # e4m3 and f16 ties, just above
    2.0**-10, 3 * 2.0**-10, 2.0**-9 * 1.5,                 # e4m3 subnormal ties
    2.0**-25, 3 * 2.0**-25, 2.0**-24,                      # f16 subnormal ties
    2.0**-134, 3 * 2.0**-134,                              # bf16 subnormal ties
    0.25, 0.75, 5.0, 6.99, -6.0, 2.5,                      # e2m1 ties and its saturation edge
    65519.99, -65504.0, 0.1, -0.0, 0.0, 3.0e38,
]


@pytest.fixture(scope="module")
def narrow(compiler):
    return compiler.compile(NARROW).kernel(Narrow)


@pytest.mark.parametrize("x", EDGES)
def test_narrow_parameters_equal_cudas_round_to_nearest_conversions(context, stream, pool, narrow, x) -> None:
    packer = {name: mc.ArgumentPacker(mc.cuda_export("k", v=t), context)
              for name, t in (("f16", mc.f16), ("bf16", mc.bf16), ("e4m3", mc.e4m3), ("e2m1", mc.e2m1))}
    held = {}
    for name, p in packer.items():
        try:
            p.pack(x)
            held[name] = x
        except mc.ContractError:  # beyond the type's range: refused on the host, 0 sent instead
            held[name] = 0.0
    out = pool.allocate(mc.u8, stream, 16)
    stream.memset(out, 0xEE)
    narrow.launch(stream, mc.LaunchConfig(1, 1), out, x, held["f16"], held["bf16"], held["e4m3"], held["e2m1"])
    got = download(context, stream, out)
    pairs = {"f16": (got[0:2], got[2:4]), "bf16": (got[4:6], got[6:8]), "e4m3": (got[8:9], got[9:10]),
             "e2m1": (got[10:11], got[11:12])}
    for name, (sent, device) in pairs.items():
        if held[name] == x:
            assert sent.tobytes() == device.tobytes(), (name, x)
            assert sent.tobytes() == packer[name].pack(x)
