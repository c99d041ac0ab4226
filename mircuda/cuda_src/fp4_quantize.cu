// BF16 -> NVFP4 quantization on the device (NVIDIA ModelOpt's recipe, modelopt/torch/quantization/
// qtensor/nvfp4_tensor.py): global = amax(tensor) / (6 * 448); block scale = amax(block of 16) /
// (6 * global), rounded to E4M3 (RNE, satfinite); q = RNE E2M1 of x / (block scale * global), two codes
// per byte (element 2i in the low nibble). FP32 arithmetic with IEEE division (no fast math), so the
// numpy reference (mircuda.matmul._fp4_reference) matches bit for bit.
// Corner cases, as documented by the reference: an all-zero block (scale 0 before rounding) stores
// scale 1.0 (ModelOpt replaces zero block scales by 1) and zero codes; a block whose scale rounds to
// E4M3 zero stores zero codes (it dequantizes to zero either way); an all-zero tensor's computed global
// scale is 1.0. Scales go to the linear layout ([rows, K/16]) or, with MIRCUDA_FP4_TILED=1, to the tiled
// one (fp4_common.cuh), padding included (zeros).
#include <cuda_fp8.h>
#include "fp4_common.cuh"

#ifndef MIRCUDA_FP4_TILED
#define MIRCUDA_FP4_TILED 0
#endif

extern "C" __global__ void fp4_amax_reset(unsigned* amax) { *amax = 0u; }

// amax[0] = max |x| over `count` BF16 values, as the bits of a non-negative float (ordered like the
// floats). Any count, any 2-byte alignment.
extern "C" __global__ void fp4_amax_bf16(unsigned* amax, const unsigned short* __restrict__ x, long long count) {
    unsigned best = 0u;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += (long long)gridDim.x * blockDim.x)
        best = max(best, (unsigned(__ldg(x + i)) & 0x7fffu) << 16);
    best = __reduce_max_sync(0xffffffffu, best);
    if ((threadIdx.x & 31) == 0 && best != 0u) atomicMax(amax, best);
}

// One thread per 16-element block (row, kb) of the (padded) scale grid; x is [rows, K] row-major BF16,
// 16-byte aligned, K % 16 == 0. `global_in`: the global scale to use, or null to compute it from amax.
extern "C" __global__ void fp4_quantize_bf16(unsigned char* __restrict__ q, unsigned char* __restrict__ scales,
                                             float* global_out, const unsigned short* __restrict__ x,
                                             const float* global_in, const unsigned* amax, int rows, int k) {
    const int kblocks = k >> 4;
#if MIRCUDA_FP4_TILED
    const int kpad = (kblocks + 3) & ~3;
    const long long prows = ((long long)rows + 127) & ~127LL;
#else
    const int kpad = kblocks;
    const long long prows = rows;
#endif
    float g;
    if (global_in != nullptr) {
        g = *global_in;
    } else {
        const float a = __uint_as_float(*amax);
        g = a == 0.0f ? 1.0f : __fdiv_rn(a, 2688.0f);  // 6 * 448
    }
    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t == 0 && global_out != nullptr) *global_out = g;
    if (t >= prows * kpad) return;
    const long long row = t / kpad;
    const int kb = int(t % kpad);
#if MIRCUDA_FP4_TILED
    const long long where = fp4::tiled_offset(row, kb, kpad >> 2);
#else
    const long long where = fp4::linear_offset(row, kb, kblocks);
#endif
    if (row >= rows || kb >= kblocks) {  // tiled padding
        scales[where] = 0;
        return;
    }
    const uint4* p = reinterpret_cast<const uint4*>(x + row * k + kb * 16);
    const uint4 v0 = __ldg(p), v1 = __ldg(p + 1);
    const unsigned u[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
    float f[16];
    float bmax = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        f[2 * i] = __uint_as_float(u[i] << 16);
        f[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
        bmax = fmaxf(bmax, fmaxf(fabsf(f[2 * i]), fabsf(f[2 * i + 1])));
    }
    float s = __fdiv_rn(bmax, __fmul_rn(6.0f, g));
    if (s == 0.0f) s = 1.0f;
    const unsigned code = __nv_cvt_float_to_fp8(s, __NV_SATFINITE, __NV_E4M3);
    scales[where] = (unsigned char)code;
    const float sf = fp4::ue4m3_to_float(code);
    unsigned packed[2] = {0u, 0u};
    if (sf != 0.0f) {
        const float denom = __fmul_rn(sf, g);
#pragma unroll
        for (int i = 0; i < 16; ++i) packed[i >> 3] |= fp4::float_to_e2m1(__fdiv_rn(f[i], denom)) << (4 * (i & 7));
    }
    *reinterpret_cast<uint2*>(q + row * (k / 2) + kb * 8) = make_uint2(packed[0], packed[1]);
}
