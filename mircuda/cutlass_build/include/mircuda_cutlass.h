/* mircuda_cutlass.h: the C ABI of libmircuda_cutlass.so (CUTLASS matrix plans for mircuda).
 *
 * Plain C: opaque plan handles, integer status codes, raw device pointers; no C++ type crosses the
 * boundary. Two kinds of kernel (mircuda_cutlass_kernel_info.kind):
 *
 * DENSE: C[M,N] = alpha * A[M,K] . B[N,K]^T + beta * C[M,N] with FP32 accumulation; A and C are
 * row-major, B is [N,K] row-major (a linear layer's weights). beta == 0 never reads C.
 *
 * BLOCKWISE_SCALED (DeepSeek-V3 blockwise FP8): A E4M3 [M,K] row-major, B E4M3 [N,K] row-major, FP32
 * scales SFA for every scale_m x scale_k block of A and SFB for every scale_n x scale_k block of B
 * (1 x 128 and 128 x 128), D BF16 [M,N] row-major:
 *   D[m,n] = alpha * sum_kb SFA[m,kb] * SFB[n/128,kb] * (sum_{k in block kb} A[m,k] * B[n,k]) + beta * C[m,n]
 * with FP32 accumulation (each 128-K block's partial sum is scaled, then added to an FP32 total).
 * Scale majorness MIRCUDA_CUTLASS_K_MAJOR: SFA is [M, ceil(K/128)] row-major (consecutive K blocks
 * of a row adjacent) and SFB [ceil(N/128), ceil(K/128)] row-major -- the layout a per-token
 * quantizer writes; no transposed or padded copy is needed.
 *
 * BLOCK_SCALED (NVFP4, SM12x; present when the library exports mircuda_cutlass_block_scaled_plan_create):
 * A and B NVFP4, A [M,K] row-major and B [N,K] row-major, E2M1 codes two per byte (element 2i in the low
 * nibble), one UE4M3 scale per 16 K-elements of a row in the SF_TILED layout for SFA (M rows) and SFB (N
 * rows), D BF16 [M,N] row-major, FP32 accumulation, no C:
 *   D[m,n] = alpha * sum_k (A[m,k] SFA[m,k/16]) (B[n,k] SFB[n,k/16])
 * with alpha read from device memory when a pointer is given (graphs follow its current value).
 *
 * GROUPED_BLOCK_SCALED (grouped NVFP4 with device-resident routing, SM12x; ABI 3, present when the library
 * exports mircuda_cutlass_grouped_plan_create): G groups (fixed per plan) over one or two operand sets
 * sharing the routing. Set s: A NVFP4 [capacity, K] row-major (packed as above) with LINEAR UE4M3 scales
 * SFA [capacity, K/16] (row r of A has scale row r, MIRCUDA_CUTLASS_K_MAJOR); a bank of bank_size matrices
 * B[e] NVFP4 [N, K] row-major back to back (B[e] at byte e*N*K/2) with SF_TILED scales back to back (B[e]'s
 * at byte e * ceil(N/128)*128 * ceil(K/64)*4); D BF16 [capacity, N] row-major; alpha a device FP32 array
 * [bank_size]. Routing, device int32 [G]: row_counts, offsets, matrix_indices. For each valid group g, with
 * m = row_counts[g], o = offsets[g], e = matrix_indices[g]:
 *   D[o + i, n] = alpha[e] * sum_k (A[o + i, k] SFA[o + i, k/16]) (B[e][n, k] SFB[e][n, k/16]),  0 <= i < m
 * (FP32 accumulation, read when the kernel runs). A group with e outside [0, bank_size) ORs 1 into the device
 * int32 error flag, one with m < 0, o < 0 or o + m > capacity ORs 2; such a group is skipped (as if empty).
 * Rows of D that no group covers are never written. The plan's workspace holds each set's activation scales
 * repacked per group into the tiled layout (slots of 128-row multiples): capacity rounded up to 128 plus
 * 128 * min(G, capacity) rows per set, enough unless groups' row ranges overlap; a group whose slot would not
 * fit is skipped and ORs 2 as well.
 *
 * GROUPED_DENSE (grouped BF16 with device-resident routing, SM90; present when the library exports
 * mircuda_cutlass_grouped_dense_plan_execute): as GROUPED_BLOCK_SCALED with BF16 operands and no scales:
 * set s: A BF16 [capacity, K] row-major, a bank of bank_size matrices B[e] BF16 [N, K] row-major back to back
 * (B[e] at element e*N*K), D BF16 [capacity, N] row-major, alpha a device FP32 array [bank_size]; for each
 * valid group g
 *   D[o + i, n] = RN_bf16(alpha[e] * sum_k A[o + i, k] B[e][n, k]),  0 <= i < m   (FP32 accumulation)
 * with the same routing checks, error bits and skipped groups. Plans are created by mircuda_cutlass_grouped_plan_create
 * (workspace: CUTLASS's and the per-problem tables).
 *
 * A plan is used by one thread at a time (execute writes its kernel parameters).
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

#define MIRCUDA_CUTLASS_ABI_VERSION 3 /* 2: kernel kinds, blockwise-scaled FP8 kernels, constraints in the info;
                                       3: grouped block-scaled NVFP4 kernels (mircuda_cutlass_grouped_plan_*) */

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
#define MIRCUDA_CUTLASS_E4M3 4 /* cutlass::float_e4m3_t (OCP FP8 E4M3, max 448) */
#define MIRCUDA_CUTLASS_E2M1 5  /* cutlass::float_e2m1_t (OCP FP4 E2M1), two per byte, element 2i in the low nibble */
#define MIRCUDA_CUTLASS_UE4M3 6 /* cutlass::float_ue4m3_t (E4M3 with the sign clear: NVFP4's block scales) */

/* Kernel kinds. */
#define MIRCUDA_CUTLASS_KIND_DENSE 0            /* mircuda_cutlass_plan_create / _plan_execute */
#define MIRCUDA_CUTLASS_KIND_BLOCKWISE_SCALED 1 /* mircuda_cutlass_scaled_plan_create / _scaled_plan_execute */
#define MIRCUDA_CUTLASS_KIND_BLOCK_SCALED 2     /* mircuda_cutlass_block_scaled_plan_create / _execute (NVFP4) */
#define MIRCUDA_CUTLASS_KIND_GROUPED_BLOCK_SCALED 3 /* mircuda_cutlass_grouped_plan_create / _execute (grouped NVFP4) */
#define MIRCUDA_CUTLASS_KIND_GROUPED_DENSE 4 /* mircuda_cutlass_grouped_plan_create / mircuda_cutlass_grouped_dense_plan_execute
                                                (grouped BF16, SM90; see GROUPED_DENSE below) */

/* Majorness of a scale-factor tensor (kernel_info.sfa_major, sfb_major). */
#define MIRCUDA_CUTLASS_NO_SCALES 0
#define MIRCUDA_CUTLASS_K_MAJOR 1  /* [rows, ceil(K/scale_k)] row-major: consecutive K blocks adjacent */
#define MIRCUDA_CUTLASS_MN_MAJOR 2 /* [ceil(K/scale_k), rows] row-major: consecutive rows adjacent */
#define MIRCUDA_CUTLASS_SF_TILED 3 /* CUTLASS's SM1xx block-scaled layout: 512-byte atoms of 128 rows x 4 scales
                                      (row 32 r1 + r0, scale j at byte 16 r0 + 4 r1 + j), atoms K-fastest, rows
                                      padded to 128 and K/scale_k to 4 (cutlass/detail/sm100_blockscaled_layout.hpp) */

/* Kernel families. */
#define MIRCUDA_CUTLASS_SIMT 0              /* CUTLASS 2.x SIMT (arch::Sm50), any alignment */
#define MIRCUDA_CUTLASS_SM90_COOPERATIVE 1  /* TMA + WGMMA warp-specialized cooperative (large M) */
#define MIRCUDA_CUTLASS_SM90_PINGPONG 2     /* TMA + WGMMA warp-specialized ping-pong (medium M) */
#define MIRCUDA_CUTLASS_SM90_SWAPPED 3      /* C^T = B . A^T, small-N tile, split-K (decode, small M) */
#define MIRCUDA_CUTLASS_SM80_TENSOROP 4     /* CUTLASS 2.x TensorOp GemmUniversal (the SM120 path) */
#define MIRCUDA_CUTLASS_SM90_BLOCKWISE_COOPERATIVE 5 /* FP8 blockwise-scaled TMA + WGMMA cooperative (large M) */
#define MIRCUDA_CUTLASS_SM90_BLOCKWISE_PINGPONG 6    /* FP8 blockwise-scaled TMA + WGMMA ping-pong (medium M) */
#define MIRCUDA_CUTLASS_SM120_BLOCKWISE 7            /* FP8 blockwise-scaled TMA + mma.sync (SM12x family) */
#define MIRCUDA_CUTLASS_SM120_NVFP4_COOPERATIVE 8    /* NVFP4 block-scaled TMA + mma.sync block_scale, cooperative */
#define MIRCUDA_CUTLASS_SM120_NVFP4_PINGPONG 9       /* NVFP4 block-scaled TMA + mma.sync block_scale, ping-pong */
#define MIRCUDA_CUTLASS_SM120_NVFP4_GROUPED_COOPERATIVE 10 /* grouped NVFP4, pointer-array TMA + mma.sync block_scale,
                                                              cooperative, device-only problem shapes */
#define MIRCUDA_CUTLASS_SM120_NVFP4_GROUPED_PINGPONG 11    /* grouped NVFP4, as above, ping-pong */
#define MIRCUDA_CUTLASS_SM90_GROUPED_COOPERATIVE 12 /* grouped BF16, pointer-array TMA + WGMMA cooperative, device-only
                                                       problem shapes */
#define MIRCUDA_CUTLASS_SM90_GROUPED_PINGPONG 13    /* grouped BF16, as above, ping-pong */
#define MIRCUDA_CUTLASS_SM90_BLOCKWISE_EXPERIMENTAL 14 /* FP8 blockwise-scaled cooperative variants, measured by
                                                         name only (never chosen by a plan by itself) */

typedef struct CUstream_st *mircuda_cutlass_stream; /* a CUstream / cudaStream_t */

/* One operand set of a grouped plan (device addresses; see GROUPED_BLOCK_SCALED above). a, b_bank,
 * sfb_bank_tiled, d: 16-byte aligned; sfa_linear: any; alpha_per_matrix: 4-byte aligned. */
typedef struct {
  const void *a;
  const void *sfa_linear;
  const void *b_bank;
  const void *sfb_bank_tiled;
  void *d;
  const float *alpha_per_matrix; /* device FP32 [bank_size] */
} mircuda_cutlass_grouped_operands;

/* The per-problem tables the grouped setup writes (device arrays; S = sets * groups problems, problem
 * s * groups + g is group g of set s). See mircuda_cutlass_grouped_setup. */
typedef struct {
  int *rows;                /* [S] rows of the problem: row_counts[g], or 0 for a skipped group */
  const void **a;           /* [S] a + offsets[g] * K/2 (a for a skipped group) */
  const void **b;           /* [S] b_bank + e * N * K/2 */
  const void **sfa;         /* [S] the group's slot in sfa_tiled (the set's first slot when rows == 0) */
  const void **sfb;         /* [S] sfb_bank_tiled + e * ceil(N/128)*128 * ceil(K/64)*4 */
  void **d;                 /* [S] d + offsets[g] * N * 2 */
  const float **alpha;      /* [S] alpha_per_matrix + e (e = matrix_indices[g], 0 for a skipped group) */
  int *slot_begin;          /* [groups] first row of the group's slot: an exclusive prefix sum of ceil(rows/128)*128 */
  int *slot_end;            /* [groups] slot_begin + ceil(rows/128)*128, slot_begin for a skipped or empty group */
  unsigned char *sfa_tiled; /* [sets][slot_rows][ceil(K/64)*4], 16-byte aligned: each group's activation scales in
                               the SF_TILED layout at its slot (rows past rows[g], scales past K/16 zero); slot_rows =
                               ceil(capacity/128)*128 + 128 * min(groups, capacity) */
} mircuda_cutlass_grouped_tables;
typedef struct mircuda_cutlass_plan mircuda_cutlass_plan;

/* One operand set of a GROUPED_DENSE plan (device addresses): a BF16 [capacity, K], b_bank BF16 [bank_size, N, K],
 * d BF16 [capacity, N] (16-byte aligned); alpha_per_matrix FP32 [bank_size] (4-byte aligned). */
typedef struct {
  const void *a;
  const void *b_bank;
  void *d;
  const float *alpha_per_matrix;
} mircuda_cutlass_grouped_dense_operands;

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
  /* ABI 2 */
  int kind;           /* MIRCUDA_CUTLASS_KIND_DENSE or MIRCUDA_CUTLASS_KIND_BLOCKWISE_SCALED */
  int m_multiple, n_multiple, k_multiple; /* M, N, K must be multiples of these (from the operands' alignment
                                             and, for some scaled kernels, whole scale blocks) */
  int scale_type;     /* element type of SFA and SFB (MIRCUDA_CUTLASS_F32); 0 for dense kernels */
  int scale_m, scale_n, scale_k; /* one SFA value per scale_m x scale_k block of A, one SFB value per
                                    scale_n x scale_k block of B (1, 128, 128); 0 for dense kernels */
  int sfa_major, sfb_major;      /* MIRCUDA_CUTLASS_K_MAJOR, ...; MIRCUDA_CUTLASS_NO_SCALES for dense kernels */
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

/* Create a plan of DENSE kernel `index` for the shape (M, N, K) on the current device (the current
 * context's). splits: K slices for split-K kernels (1 = none; ignored by the others).
 * Returns NOT_IMPLEMENTABLE (and no plan) when the kernel cannot run the shape, WRONG_ARCH when the
 * library holds no SASS of the kernel for the device, INVALID_ARGUMENT for a kernel of another kind. */
int mircuda_cutlass_plan_create(int index, int m, int n, int k, int splits, mircuda_cutlass_plan **out);
int mircuda_cutlass_plan_workspace_bytes(const mircuda_cutlass_plan *plan, size_t *out);
int mircuda_cutlass_plan_set_workspace(mircuda_cutlass_plan *plan, void *workspace, size_t bytes);
/* Launch a DENSE or BLOCKWISE_SCALED plan's kernel with programmatic dependent launch (enable != 0) or without (0,
 * the default) from the next execute on: the kernel may then start while the previous kernel of the stream finishes;
 * its producer warps wait (griddepcontrol.wait) for that kernel before they load, and nothing of it touches global
 * memory before. On its last tile it lets the next kernel launch (griddepcontrol.launch_dependents): a following
 * kernel of yours launched with programmatic dependent launch must wait (cudaGridDependencySynchronize) before it
 * reads C (D). A blockwise plan whose execute first copies SFA (the SM90 cooperative kernel) launches that copy so
 * too; the copy waits before it reads SFA.
 * Returns OK; NOT_IMPLEMENTABLE (and nothing changes) for enable != 0 when the kernel was not built to wait (only the
 * SM90 persistent-scheduler dense families and the SM90 blockwise cooperative and ping-pong kernels are);
 * INVALID_ARGUMENT for a null plan or a plan of another kind. There is no
 * getter: the caller keeps what it set. Not while another thread executes the plan (see above); a capture records
 * the launch as it is at execute. An addition to ABI 3 without a version change: find it with dlsym; a library
 * without it launches without, and one built before the blockwise kernels took it answers INVALID_ARGUMENT for a
 * BLOCKWISE_SCALED plan (its kernels do not wait: launch them without). */
int mircuda_cutlass_plan_set_pdl(mircuda_cutlass_plan *plan, int enable);
/* Enqueue C = alpha * A . B^T + beta * C on stream. Pointers are device addresses aligned as the
 * kernel's info says (16 bytes for the tensor-core kernels). */
int mircuda_cutlass_plan_execute(mircuda_cutlass_plan *plan, mircuda_cutlass_stream stream, const void *a,
                                 const void *b, void *c, float alpha, float beta);
int mircuda_cutlass_plan_destroy(mircuda_cutlass_plan *plan);

/* Create a plan of BLOCKWISE_SCALED kernel `index` for the shape (M, N, K) on the current device.
 * Status as mircuda_cutlass_plan_create (NOT_IMPLEMENTABLE when M, N, K break the kernel's
 * m/n/k_multiple). Workspace, set_workspace and destroy are the dense plans' functions. */
int mircuda_cutlass_scaled_plan_create(int index, int m, int n, int k, mircuda_cutlass_plan **out);
/* Enqueue D = alpha * blockwise(A, SFA, B, SFB) + beta * C on stream (see the top of this file).
 * a, b: E4M3, 16-byte aligned; sfa, sfb: FP32, 4-byte aligned, majorness as the kernel's info says;
 * c, d: BF16 [M,N] row-major, 16-byte aligned; c may be NULL (then C is d itself, read only when
 * beta != 0) or equal to d (in place). INVALID_ARGUMENT for a dense plan or a NULL a, b, sfa, sfb, d. */
int mircuda_cutlass_scaled_plan_execute(mircuda_cutlass_plan *plan, mircuda_cutlass_stream stream, const void *a,
                                        const void *b, const void *sfa, const void *sfb, const void *c, void *d,
                                        float alpha, float beta);

/* Create a plan of BLOCK_SCALED kernel `index` for the shape (M, N, K) on the current device. Status as
 * mircuda_cutlass_scaled_plan_create. Workspace, set_workspace and destroy are the dense plans'. */
int mircuda_cutlass_block_scaled_plan_create(int index, int m, int n, int k, mircuda_cutlass_plan **out);
/* Enqueue D = alpha * block_scaled(A, SFA, B, SFB) on stream (see the top of this file). a, b: packed E2M1,
 * 16-byte aligned; sfa, sfb: UE4M3 bytes in the SF_TILED layout (M resp. N rows padded to 128, K/16 to 4),
 * 16-byte aligned; d: BF16 [M,N] row-major, 16-byte aligned. alpha_device: a device FP32 read when the
 * kernel runs (then `alpha` is ignored), or NULL to use `alpha`. INVALID_ARGUMENT for a plan of another
 * kind or a NULL a, b, sfa, sfb, d. */
int mircuda_cutlass_block_scaled_plan_execute(mircuda_cutlass_plan *plan, mircuda_cutlass_stream stream,
                                              const void *a, const void *b, const void *sfa, const void *sfb, void *d,
                                              const float *alpha_device, float alpha);

/* Create a plan of GROUPED_BLOCK_SCALED (or GROUPED_DENSE) kernel `index` for N, K, a row capacity, `groups` groups, a bank of
 * `bank_size` matrices and `sets` (1 or 2) operand sets on the current device. NOT_IMPLEMENTABLE when N or K
 * break the kernel's n/k_multiple (8, 32) or the scale workspace would pass 2^31 rows; INVALID_ARGUMENT for
 * a kernel of another kind, a non-positive size or sets not 1 or 2. Workspace (needed: device tables and
 * the repacked activation scales), set_workspace and destroy are the dense plans'. */
int mircuda_cutlass_grouped_plan_create(int index, int n, int k, int capacity, int groups, int bank_size, int sets,
                                        mircuda_cutlass_plan **out);
/* Enqueue on stream: a setup kernel (checks the routing, ORs the error flag, writes the per-group problem
 * shapes M_g x N x K, pointers, strides, scale layouts and alpha pointers alpha_per_matrix + matrix_indices[g],
 * repacks the activation scales), then the CUTLASS pointer-array grouped kernel over sets * groups problems
 * with device-only problem shapes. The host reads no routing: a captured graph follows routing rewritten on
 * the device. row_counts, offsets, matrix_indices: device int32 [groups]; operands: a host array of `sets`
 * entries (read during the call); error_flag: a device int32 the setup kernel ORs into (never cleared here).
 * INVALID_ARGUMENT for a plan of another kind or a NULL pointer; NOT_IMPLEMENTABLE for a misaligned operand.
 * Allocates and synchronizes nothing. */
int mircuda_cutlass_grouped_plan_execute(mircuda_cutlass_plan *plan, mircuda_cutlass_stream stream,
                                         const int *row_counts, const int *offsets, const int *matrix_indices,
                                         const mircuda_cutlass_grouped_operands *operands, int *error_flag);

/* Enqueue a GROUPED_DENSE plan (created by mircuda_cutlass_grouped_plan_create) on stream: a setup kernel (one
 * thread per problem: checks the routing, ORs the error flag, writes the problem shapes M_g x N x K, pointers,
 * alpha pointers alpha_per_matrix + matrix_indices[g] and strides), then the CUTLASS pointer-array grouped kernel over sets * groups problems with device-only problem
 * shapes. Arguments as mircuda_cutlass_grouped_plan_execute; operands: a host array of the plan's `sets` entries.
 * INVALID_ARGUMENT for a plan of another kind or a NULL pointer; NOT_IMPLEMENTABLE for a misaligned operand.
 * Allocates and synchronizes nothing. */
int mircuda_cutlass_grouped_dense_plan_execute(mircuda_cutlass_plan *plan, mircuda_cutlass_stream stream,
                                               const int *row_counts, const int *offsets, const int *matrix_indices,
                                               const mircuda_cutlass_grouped_dense_operands *operands, int *error_flag);

/* The device setup of mircuda_cutlass_grouped_plan_execute alone, into caller-owned tables: on stream, one
 * block checks the routing (ORs 1 / 2 into error_flag as above) and writes rows, pointers and slots; then one
 * block per 128-row chunk of each set's slots repacks the linear activation scales into sfa_tiled. No GEMM:
 * it runs on every GPU the library has code for (all archs of the build), so the setup is verified where
 * the sm_120f grouped GEMM cannot run. INVALID_ARGUMENT for a non-positive size, sets not 1 or 2, a NULL
 * pointer or a misaligned sfa_tiled; NOT_IMPLEMENTABLE for N % 8, K % 32 or 2^31 slot rows. */
int mircuda_cutlass_grouped_setup(mircuda_cutlass_stream stream, int n, int k, int capacity, int groups, int bank_size,
                                  int sets, const int *row_counts, const int *offsets, const int *matrix_indices,
                                  const mircuda_cutlass_grouped_operands *operands, int *error_flag,
                                  const mircuda_cutlass_grouped_tables *tables);

#ifdef __cplusplus
}
#endif

#endif /* MIRCUDA_CUTLASS_H */
