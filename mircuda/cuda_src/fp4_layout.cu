// NVFP4 scale layouts and the portable path of BlockScaledFp4Plan:
// - fp4_scales_linear_to_tiled / fp4_scales_tiled_to_linear: UE4M3 scales between the linear layout
//   ([rows, K/16] row-major) and the tiled one of CUTLASS's SM1xx block-scaled kernels and cuBLASLt's
//   VEC16_UE4M3 (fp4_common.cuh: 512-byte atoms of 128 rows x 4 K-blocks; rows padded to 128 and K/16 to
//   4, padding written as zeros).
// - fp4_decode_bf16: codes x block scales -> BF16, exactly (an E2M1 value has 2 significant bits and a
//   UE4M3 value 4, between 2^-10 and 2688: the product fits BF16's 8 bits and its range). The global
//   scale is not applied (it is the plan's alpha).
// - fp4_scale_output: D = BF16(alpha * global_a * global_b * C) for C in FP32.
// - fp4_alpha_product: *out = alpha * global_a * global_b (the CUTLASS NVFP4 kernels' device alpha).
#include <cuda_bf16.h>
#include "fp4_common.cuh"

#ifndef MIRCUDA_FP4_TILED
#define MIRCUDA_FP4_TILED 0
#endif

extern "C" __global__ void fp4_scales_linear_to_tiled(unsigned char* __restrict__ tiled,
                                                      const unsigned char* __restrict__ linear, int rows, int kblocks) {
    const int katoms = (kblocks + 3) >> 2;
    const long long total = (((long long)rows + 127) >> 7) * katoms * 512;
    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= total) return;
    const long long atom = t >> 9;
    const int within = int(t & 511);
    const long long row = (atom / katoms) * 128 + ((within >> 2) & 3) * 32 + (within >> 4);
    const int kb = int(atom % katoms) * 4 + (within & 3);
    tiled[t] = row < rows && kb < kblocks ? linear[row * kblocks + kb] : (unsigned char)0;
}

extern "C" __global__ void fp4_scales_tiled_to_linear(unsigned char* __restrict__ linear,
                                                      const unsigned char* __restrict__ tiled, int rows, int kblocks) {
    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (long long)rows * kblocks) return;
    linear[t] = tiled[fp4::tiled_offset(t / kblocks, int(t % kblocks), (kblocks + 3) >> 2)];
}

// One thread per eight elements (a 32-bit word of codes; 4-byte aligned: K % 16 == 0); out is [rows, K].
extern "C" __global__ void fp4_decode_bf16(__nv_bfloat16* __restrict__ out, const unsigned char* __restrict__ q,
                                           const unsigned char* __restrict__ scales, int rows, int k) {
    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const int words = k >> 3;
    if (t >= (long long)rows * words) return;
    const long long row = t / words;
    const int col = int(t % words) * 8;
    const int kblocks = k >> 4;
#if MIRCUDA_FP4_TILED
    const long long where = fp4::tiled_offset(row, col >> 4, (kblocks + 3) >> 2);
#else
    const long long where = fp4::linear_offset(row, col >> 4, kblocks);
#endif
    const float s = fp4::ue4m3_to_float(scales[where]) * fp4::decode_bias();
    unsigned h[4];
    fp4::decode8(reinterpret_cast<const unsigned*>(q)[t], h);
    unsigned packed[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const float2 f = fp4::half2_to_float2(h[i]);
        const __nv_bfloat162 b = __floats2bfloat162_rn(f.x * s, f.y * s);
        packed[i] = *reinterpret_cast<const unsigned*>(&b);
    }
    *reinterpret_cast<uint4*>(out + row * k + col) = make_uint4(packed[0], packed[1], packed[2], packed[3]);
}

extern "C" __global__ void fp4_scale_output(__nv_bfloat16* __restrict__ d, const float* __restrict__ c,
                                            const float* global_a, const float* global_b, float alpha, long long count) {
    float scale = alpha;
    if (global_a != nullptr) scale *= *global_a;
    if (global_b != nullptr) scale *= *global_b;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += (long long)gridDim.x * blockDim.x)
        d[i] = __float2bfloat16_rn(scale * c[i]);
}

// BlockScaledFp4Plan's CUTLASS path (SM12x): the epilogue reads one FP32 alpha from device memory, so the
// product alpha * global_a * global_b (the same order of multiplication as fp4_scale_output) is written
// there first, when the kernel runs (a captured graph follows the global scales' current values).
extern "C" __global__ void fp4_alpha_product(float* __restrict__ out, const float* global_a, const float* global_b,
                                             float alpha) {
    float scale = alpha;
    if (global_a != nullptr) scale *= *global_a;
    if (global_b != nullptr) scale *= *global_b;
    *out = scale;
}
