// Included by numba_user_device.cu through its own directory (a test of declare_device's include path).
#ifndef AXPY_SCALE
#define AXPY_SCALE 1.0f
#endif
