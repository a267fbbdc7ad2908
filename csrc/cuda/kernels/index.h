/* index.h — the launchers of the index kernels (kernels/index.cu): the range check of index
 * values, gathers (index_select, gather, embedding), deterministic scatters (scatter_add,
 * index_add) and one_hot, in plain C types shared by csrc/cuda/index.c and the .cu file.
 * Each returns a cudaError_t (0 = success) and runs on the given stream; none synchronises.
 * Offsets and strides are in elements; dtype is a cr_dtype value. */
#ifndef CR_CUDA_KERNELS_INDEX_H
#define CR_CUDA_KERNELS_INDEX_H

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { CRK_INDEX_MAX_DIMS = 8 };

/* An index tensor, i64 or i32, any strides. Its values are numbered in the row-major order
 * of its shape (the CPU's flat position). ndim >= 1 (a 0-dim index is passed as [1]). */
typedef struct crk_index {
    const void *data; /* element 0 of the view */
    int is_i32;
    int ndim;
    int64_t numel;
    int64_t shape[CRK_INDEX_MAX_DIMS], stride[CRK_INDEX_MAX_DIMS];
} crk_index;

/* *first_bad (device memory) = the lowest flat position whose value is outside [0, size),
 * or UINT64_MAX when every value is in range. */
int crk_index_check(const crk_index *ix, int64_t size, unsigned long long *first_bad,
                    cudaStream_t stream);

/* One gather or scatter over a domain: a shape split at `dim` into (outer, along, inner),
 * each operand addressed by its own strides over it (its real shape may be larger).
 * Gathers: dst[.., j, ..] = src[.., v, ..]. Scatters: dst[.., v, ..] += src[.., j, ..].
 * v is the index value at flat position j (`full` = 0: index_select, index_add, embedding)
 * or at the same domain position, through idx_stride (`full` = 1: gather, scatter_add;
 * the index then has the domain's shape). Every index value must be valid already. */
typedef struct crk_move {
    int nd, dim;
    int64_t shape[CRK_INDEX_MAX_DIMS];
    int64_t outer, along, inner; /* products of shape before, at and after dim */
    int64_t dst_stride[CRK_INDEX_MAX_DIMS], src_stride[CRK_INDEX_MAX_DIMS];
    int64_t idx_stride[CRK_INDEX_MAX_DIMS]; /* full only */
    char *dst;
    const char *src;
    int dtype;
    int full;
    crk_index index;
    int64_t dst_size; /* scatters: dst's extent along dim */
} crk_move;

int crk_index_gather(const crk_move *m, cudaStream_t stream);

/* The scatter adds into dst (which already holds the base values) in the CPU's order:
 * each destination element gets its contributions in increasing position along dim, one
 * after the other, rounded to the dtype after each add. Deterministic. It needs
 * crk_index_scatter_workspace(m) bytes of device scratch (0 when there is nothing to do). */
size_t crk_index_scatter_workspace(const crk_move *m);
int crk_index_scatter(const crk_move *m, void *workspace, size_t bytes, cudaStream_t stream);

/* out [numel, classes] i64, row-major: zeros with a 1 at (k, index value k). */
int crk_one_hot(const crk_index *ix, int64_t classes, int64_t *out, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
