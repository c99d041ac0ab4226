// A user's CUDA C device function for a Numba kernel (tests/test_numba_compile.py, tests/gpu/test_numba_kernels.py).
#include "numba_user_device.cuh"

extern "C" __device__ float axpy_scaled(float a, float x, float y) {
    return AXPY_SCALE * (a * x + y);
}
