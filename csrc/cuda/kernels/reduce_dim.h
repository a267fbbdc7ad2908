/* reduce_dim.h — the launcher of the GPU reductions beyond sum and mean: max/min with
 * positions (max, min, amax, amin, argmax, argmin), variance, p-norms and logsumexp over
 * a reduction plan (ops/reduce_impl.h), with the cpu's semantics. Shared by
 * csrc/cuda/reduce_dim.c and kernels/reduce_dim.cu; plain C types. */
#ifndef CR_CUDA_REDUCE_DIM_H
#define CR_CUDA_REDUCE_DIM_H

#include "kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    CRK_RD_MAX = 0, /* values (r.out, the input's dtype) and/or positions (indices) */
    CRK_RD_MIN,
    CRK_RD_VAR,       /* param: the correction; divides M2 by max(0, N - correction) */
    CRK_RD_NORM,      /* param: p (> 0, 0, INFINITY or -INFINITY) */
    CRK_RD_LOGSUMEXP, /* any input dtype; r.out a float dtype */
} crk_reduce_dim_op;

/* r: the plan (strides in elements), the input, and the K contiguous outputs r.out in
 * r.out_dtype (NULL for argmax/argmin). indices: K contiguous i64 positions within the
 * reduced range (row-major over the reduced dims) for max/min, or NULL. */
typedef struct crk_reduce_dim_call {
    crk_reduce r;
    int64_t *indices;
    crk_reduce_dim_op op;
    double param;
} crk_reduce_dim_call;

/* Bytes of device scratch the launch needs (0 when each output is reduced in one pass);
 * the caller allocates them on the stream's device and passes them to crk_reduce_dim. */
size_t crk_reduce_dim_scratch(const crk_reduce_dim_call *q);
int crk_reduce_dim(const crk_reduce_dim_call *q, void *scratch, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
