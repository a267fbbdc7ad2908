/* sort.h — the launcher of the row sort behind sort and topk (kernels/sort.cu), in plain C
 * types shared by csrc/cuda/sort.c and the .cu file. It returns a cudaError_t (0 =
 * success), runs on the given stream and does not synchronise. Offsets and strides are in
 * elements; dtype is a cr_dtype value. */
#ifndef CR_CUDA_KERNELS_SORT_H
#define CR_CUDA_KERNELS_SORT_H

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { CRK_SORT_MAX_DIMS = 8 };

/* The rows of `in` along one dim: n elements `stride` apart, row r at the offset of r
 * taken row-major over the other dims (rshape, rstride; nr of them, possibly 0). Each row
 * is ordered stably by ops/sort_impl.h's keys (NaN above +inf, -0 equal to +0; ties keep
 * the lower position first; descending reverses the keys, not the ties), and its first k
 * elements go to `values` and their positions to `indices`: contiguous outputs whose
 * element (r, j) sits at (r / inner) * k * inner + r % inner + j * inner. */
typedef struct crk_sort {
    const char *in;
    int dtype;
    int64_t n, stride, rows;
    int nr;
    int64_t rshape[CRK_SORT_MAX_DIMS], rstride[CRK_SORT_MAX_DIMS];
    int64_t k, inner;
    int descending;
    char *values;
    int64_t *indices;
} crk_sort;

/* Bytes of device scratch crk_sort_rows needs (0 when there is nothing to do). */
size_t crk_sort_workspace(const crk_sort *p);
int crk_sort_rows(const crk_sort *p, void *workspace, size_t bytes, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
