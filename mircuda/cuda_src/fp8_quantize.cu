// Quantizers of DeepSeek-V3 blockwise FP8 (mircuda.matmul.quantize_activations / quantize_weights):
// BF16 [R, K] row-major -> E4M3 codes [R, K] row-major and FP32 scales, one per block:
//   quantize_rows_1x128:    blocks of 1 x 128 (activations): scales [R, ceil(K / 128)] row-major;
//   quantize_blocks_128x128: blocks of 128 x 128 (weights):    scales [ceil(R / 128), ceil(K / 128)] row-major.
// A partial last block holds the elements that exist. For each block:
//   amax  = max |x| over the block (the BF16 values, exactly as FP32);
//   scale = amax / 448 (FP32, round to nearest even; 448 is E4M3's largest finite value), and 1 when
//           amax == 0 (an all-zero block: scale 1, every code a zero of the
//           input's sign: 0x00 for +0, 0x80 for -0);
//   code  = E4M3(x / scale): the quotient rounded to FP32 (nearest even), then to E4M3 (nearest even,
//           saturated to +-448 by cvt.rn.satfinite: the quotient exceeds 448 only by FP32 rounding).
// so that x ~ code * scale (DeepSeek-V3 inference/kernel.py act_quant: s = amax / 448, y = x / s).
// Non-finite inputs: amax is taken over the bit patterns of |x|, so a NaN in the block makes the scale
// NaN and an infinity makes it +inf (the codes are then not specified); nothing non-finite is hidden.
// Compiled by NVRTC (cc >= 8.9: cvt.rn.satfinite.e4m3x2.f32 needs sm_89); IEEE division (no fast math).
#include <cuda_bf16.h>

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 890
#error "the FP8 quantizers need compute capability >= 8.9 (cvt.rn.satfinite.e4m3x2.f32)"
#endif

namespace {

constexpr int kBlockK = 128;
constexpr float kE4m3Max = 448.f;

// |x| of a BF16 bit pattern as an unsigned key whose integer order is the order of |x|, with NaN
// above +inf.
__device__ __forceinline__ unsigned abs_key(unsigned short bits) { return bits & 0x7fffu; }

__device__ __forceinline__ float block_scale(unsigned amax_key) {
    const float amax = __uint_as_float(amax_key << 16);
    return amax == 0.f ? 1.f : __fdiv_rn(amax, kE4m3Max);
}

// E4M3 code of x / scale (round to nearest even, saturating finite values).
__device__ __forceinline__ unsigned char encode(float x, float scale) {
    const float q = __fdiv_rn(x, scale);
    unsigned short pair;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(pair) : "f"(0.f), "f"(q));  // low byte: q
    return (unsigned char)(pair & 0xffu);
}

}  // namespace

// One warp per 1 x 128 block (lane l: columns 4l .. 4l + 3 of the block); blockDim.x a multiple of 32,
// grid.x * warps per block >= rows * ceil(K / 128).
extern "C" __global__ void __launch_bounds__(256)
    quantize_rows_1x128(unsigned char* __restrict__ q, float* __restrict__ s, const unsigned short* __restrict__ x,
                        int rows, int k) {
    const int kblocks = (k + kBlockK - 1) / kBlockK;
    const long long block = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (block >= (long long)rows * kblocks) return;  // whole warps leave together
    const long long row = block / kblocks;
    const int col0 = (int)(block % kblocks) * kBlockK + lane * 4;
    const unsigned short* in = x + row * (long long)k;
    unsigned short v[4];
    unsigned key = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        v[i] = col0 + i < k ? in[col0 + i] : (unsigned short)0;
        key = max(key, abs_key(v[i]));
    }
    key = __reduce_max_sync(0xffffffffu, key);
    const float scale = block_scale(key);
    unsigned char* out = q + row * (long long)k;
#pragma unroll
    for (int i = 0; i < 4; ++i)
        if (col0 + i < k) out[col0 + i] = encode(__uint_as_float(unsigned(v[i]) << 16), scale);
    if (lane == 0) s[block] = scale;
}

// One block of 256 threads per 128 x 128 block: grid (ceil(K / 128), ceil(R / 128)). Thread t reads
// columns 4 (t % 32) .. + 3 of rows t / 32, t / 32 + 8, ..., once for the maximum and again (from L2)
// for the codes.
extern "C" __global__ void __launch_bounds__(256)
    quantize_blocks_128x128(unsigned char* __restrict__ q, float* __restrict__ s, const unsigned short* __restrict__ x,
                            int rows, int k) {
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;  // 8 warps
    const long long row0 = (long long)blockIdx.y * kBlockK;
    const int col0 = blockIdx.x * kBlockK + lane * 4;
    unsigned key = 0;
    for (int r = warp; r < kBlockK; r += 8) {
        const long long row = row0 + r;
        if (row >= rows) break;
        const unsigned short* in = x + row * (long long)k;
#pragma unroll
        for (int i = 0; i < 4; ++i)
            if (col0 + i < k) key = max(key, abs_key(in[col0 + i]));
    }
    key = __reduce_max_sync(0xffffffffu, key);
    __shared__ unsigned keys[8];
    if (lane == 0) keys[warp] = key;
    __syncthreads();
#pragma unroll
    for (int i = 0; i < 8; ++i) key = max(key, keys[i]);
    const float scale = block_scale(key);
    for (int r = warp; r < kBlockK; r += 8) {
        const long long row = row0 + r;
        if (row >= rows) break;
        const unsigned short* in = x + row * (long long)k;
        unsigned char* out = q + row * (long long)k;
#pragma unroll
        for (int i = 0; i < 4; ++i)
            if (col0 + i < k) out[col0 + i] = encode(__uint_as_float(unsigned(in[col0 + i]) << 16), scale);
    }
    if (threadIdx.x == 0) s[(long long)blockIdx.y * gridDim.x + blockIdx.x] = scale;
}
