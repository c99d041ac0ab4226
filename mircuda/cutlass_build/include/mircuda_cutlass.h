/* mircuda_cutlass.h: the C ABI of libmircuda_cutlass.so (CUTLASS dense matrix plans for mircuda).
 *
 * Plain C: opaque plan handles, integer status codes, raw device pointers; no C++ type crosses the
 * boundary. A plan computes C[M,N] = alpha * A[M,K] . B[N,K]^T + beta * C[M,N] with FP32
 * accumulation; A and C are row-major, B is [N,K] row-major (a linear layer's weights). beta == 0
 * never reads C. A plan is used by one thread at a time (execute writes its kernel parameters).
 *
 * Life of a plan: mircuda_cutlass_plan_create (checks can-implement) -> mircuda_cutlass_plan_workspace_bytes
 * -> mircuda_cutlass_plan_set_workspace (device memory the caller owns; may be NULL when 0 bytes)
 * -> mircuda_cutlass_plan_execute (any number of times; stream-ordered, allocates and synchronizes
 * nothing) -> mircuda_cutlass_plan_destroy.
 */
#ifndef MIRCUDA_CUTLASS_H
#define MIRCUDA_CUTLASS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MIRCUDA_CUTLASS_ABI_VERSION 1

/* Status codes. */
#define MIRCUDA_CUTLASS_OK 0
#define MIRCUDA_CUTLASS_INVALID_ARGUMENT 1   /* null handle, bad index, non-positive dimension */
#define MIRCUDA_CUTLASS_NOT_IMPLEMENTABLE 2  /* the kernel cannot run this shape (alignment, tile limits) */
#define MIRCUDA_CUTLASS_WRONG_ARCH 3         /* the kernel was not compiled for the current device */
#define MIRCUDA_CUTLASS_CUDA_ERROR 4         /* a CUDA runtime call failed: see mircuda_cutlass_last_cuda_error */
#define MIRCUDA_CUTLASS_INTERNAL_ERROR 5     /* CUTLASS reported another failure */
#define MIRCUDA_CUTLASS_NO_WORKSPACE 6       /* the plan needs a workspace and none was set */

/* Element types. */
#define MIRCUDA_CUTLASS_BF16 1
#define MIRCUDA_CUTLASS_F16 2
#define MIRCUDA_CUTLASS_F32 3

/* Kernel families. */
#define MIRCUDA_CUTLASS_SIMT 0              /* CUTLASS 2.x SIMT (arch::Sm50), any alignment */
#define MIRCUDA_CUTLASS_SM90_COOPERATIVE 1  /* TMA + WGMMA warp-specialized cooperative (large M) */
#define MIRCUDA_CUTLASS_SM90_PINGPONG 2     /* TMA + WGMMA warp-specialized ping-pong (medium M) */
#define MIRCUDA_CUTLASS_SM90_SWAPPED 3      /* C^T = B . A^T, small-N tile, split-K (decode, small M) */
#define MIRCUDA_CUTLASS_SM80_TENSOROP 4     /* CUTLASS 2.x TensorOp GemmUniversal (the SM120 path) */

typedef struct CUstream_st *mircuda_cutlass_stream; /* a CUstream / cudaStream_t */
typedef struct mircuda_cutlass_plan mircuda_cutlass_plan;

typedef struct mircuda_cutlass_kernel_info {
  const char *name;   /* e.g. "sm90_coop_128x256x64_c2x1_bf16_bf16" */
  int family;         /* MIRCUDA_CUTLASS_SIMT ... */
  int input;          /* element type of A and B */
  int output;         /* element type of C */
  int tile_m, tile_n, tile_k;  /* threadblock tile (of the swapped problem for SM90_SWAPPED) */
  int cluster_m, cluster_n;
  int stages;         /* mainloop stages; 0 when chosen by the collective builder */
  int alignment_bytes; /* K * sizeof(input) and N * sizeof(output) must be multiples, and A, B, C
                          aligned to it (16 for the tensor-core kernels; the element size for SIMT) */
  int split_k;        /* 1 when the kernel takes split-K slices (the splits argument of create) */
  int arch_count;     /* how many entries of archs are used */
  int archs[4];       /* SASS targets compiled in, as 10 * major + minor (90, 120) */
} mircuda_cutlass_kernel_info;

int mircuda_cutlass_abi_version(void);
/* The CUTLASS version the library was built with, as 10000 * major + 100 * minor + patch. */
int mircuda_cutlass_cutlass_version(void);
int mircuda_cutlass_kernel_count(void);
/* Fill *out for kernel index in [0, kernel_count). Kernels are ordered by name. */
int mircuda_cutlass_kernel_info_get(int index, mircuda_cutlass_kernel_info *out);
const char *mircuda_cutlass_status_string(int status);
/* The last cudaError_t seen by a failing call of this thread (0 when none). */
int mircuda_cutlass_last_cuda_error(void);

/* Create a plan of kernel `index` for the shape (M, N, K) on the current device (the current
 * context's). splits: K slices for split-K kernels (1 = none; ignored by the others).
 * Returns NOT_IMPLEMENTABLE (and no plan) when the kernel cannot run the shape, WRONG_ARCH when the
 * library holds no SASS of the kernel for the device. */
int mircuda_cutlass_plan_create(int index, int m, int n, int k, int splits, mircuda_cutlass_plan **out);
int mircuda_cutlass_plan_workspace_bytes(const mircuda_cutlass_plan *plan, size_t *out);
int mircuda_cutlass_plan_set_workspace(mircuda_cutlass_plan *plan, void *workspace, size_t bytes);
/* Enqueue C = alpha * A . B^T + beta * C on stream. Pointers are device addresses aligned as the
 * kernel's info says (16 bytes for the tensor-core kernels). */
int mircuda_cutlass_plan_execute(mircuda_cutlass_plan *plan, mircuda_cutlass_stream stream, const void *a,
                                 const void *b, void *c, float alpha, float beta);
int mircuda_cutlass_plan_destroy(mircuda_cutlass_plan *plan);

#ifdef __cplusplus
}
#endif

#endif /* MIRCUDA_CUTLASS_H */
