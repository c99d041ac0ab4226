// mircuda's CUDA C device helpers for Numba kernels.
//
// Every function is extern "C" (Numba's C ABI: arguments and result by value) and needs no header,
// so it compiles with mircuda's NVRTC (relocatable device code, linked into the Numba kernel) and
// with numba-cuda's own NVRTC path alike. The Numba declarations live in mircuda/numba_ext/helpers.py;
// 16-bit floats travel as their bit patterns (Numba's float16 and bfloat16 are 16-bit values, and so
// is unsigned short at the PTX level).
//
// Layouts: bfloat16 is 1-8-7; float16 is IEEE binary16; E4M3 is OCP FP8 E4M3 "fn" (bias 7, no
// infinities, S.1111.111 is NaN; OCP 8-bit Floating Point Specification 1.0); E2M1 is OCP MX FP4
// (bias 1, values 0, 0.5, 1, 1.5, 2, 3, 4, 6; OCP Microscaling Formats 1.0). A packed FP4 pair holds
// the lower-indexed element in the low nibble, as NVIDIA's tensor cores read them.

struct mircuda_f32x2 {  // Numba's float32x2: two floats, 4-byte aligned
    float x;
    float y;
};

// bfloat16 bits -> float32 (exact).
extern "C" __device__ float mircuda_bf16_to_f32(unsigned short bits) {
    return __uint_as_float(static_cast<unsigned int>(bits) << 16);
}

// float32 -> bfloat16 bits, round to nearest even; NaN stays NaN (quiet, sign kept).
extern "C" __device__ unsigned short mircuda_f32_to_bf16(float x) {
    unsigned int u = __float_as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        return static_cast<unsigned short>((u >> 16) | 0x0040u);
    }
    u += 0x7fffu + ((u >> 16) & 1u);
    return static_cast<unsigned short>(u >> 16);
}

// float16 bits -> float32 (exact).
extern "C" __device__ float mircuda_f16_to_f32(unsigned short bits) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(bits));
    return f;
}

// float32 -> float16 bits, round to nearest even (overflow gives infinity, as cvt.rn does).
extern "C" __device__ unsigned short mircuda_f32_to_f16(float x) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
    return h;
}

// E4M3 (fn) bits -> float32 (exact; 0x7f and 0xff are NaN).
extern "C" __device__ float mircuda_e4m3_to_f32(unsigned char bits) {
    const unsigned int sign = (bits & 0x80u) << 24;
    const unsigned int e = (bits >> 3) & 0xfu;
    const unsigned int m = bits & 0x7u;
    if (e == 0xfu && m == 0x7u) {
        return __uint_as_float(sign | 0x7fc00000u);
    }
    if (e == 0u) {  // subnormal: m * 2^-9
        return __uint_as_float(sign | __float_as_uint(static_cast<float>(m) * 0.001953125f));
    }
    return __uint_as_float(sign | ((e + 120u) << 23) | (m << 20));  // rebias 7 -> 127
}

__device__ static float mircuda_e2m1_value(unsigned int q) {
    const unsigned int sign = (q & 0x8u) << 28;
    const unsigned int e = (q >> 1) & 0x3u;
    const unsigned int m = q & 0x1u;
    const float magnitude = e ? __uint_as_float(((e + 126u) << 23) | (m << 22)) : 0.5f * static_cast<float>(m);
    return __uint_as_float(sign | __float_as_uint(magnitude));
}

// One E2M1 value (low 4 bits of the byte) -> float32 (exact).
extern "C" __device__ float mircuda_e2m1_to_f32(unsigned char nibble) {
    return mircuda_e2m1_value(nibble & 0xfu);
}

// A packed E2M1 pair -> (x: low nibble, y: high nibble) as float32 (exact).
extern "C" __device__ mircuda_f32x2 mircuda_e2m1x2_to_f32x2(unsigned char pair) {
    mircuda_f32x2 r;
    r.x = mircuda_e2m1_value(pair & 0xfu);
    r.y = mircuda_e2m1_value(pair >> 4);
    return r;
}

// Sum over the 32 lanes of a warp (butterfly; every lane gets the result). All 32 lanes must call it.
extern "C" __device__ float mircuda_warp_sum_f32(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) {
        v += __shfl_xor_sync(0xffffffffu, v, offset);
    }
    return v;
}

// Maximum over the 32 lanes of a warp (every lane gets the result). All 32 lanes must call it.
extern "C" __device__ float mircuda_warp_max_f32(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) {
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    }
    return v;
}
