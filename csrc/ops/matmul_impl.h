/* matmul_impl.h — one (batched) matrix product as plain geometry, shared by the op
 * layer (matmul.c) and the oneDNN fast path (matmul_dnnl.c). Private to csrc/ops. */
#ifndef CR_MATMUL_IMPL_H
#define CR_MATMUL_IMPL_H

#include "internal.h"

/* c[p] (+)= alpha * a[p] @ b[p] for p < batch, with a[p] [n, k], b[p] [k, m] and
 * c contiguous [batch, n, m]. Strides are in elements: sa = {batch, row, col}; a batch
 * stride of 0 means one matrix shared by every batch entry. */
typedef struct cr_gemm {
    cr_dtype dt; /* f32 or f64; bf16 on the fast path only */
    int64_t batch, n, k, m;
    const char *a, *b;
    char *c;
    int64_t sa[3], sb[3];
    double alpha;
    bool accumulate;  /* c already holds beta * bias: add the product to it */
    bool c_f32;       /* fast path, bf16 operands only: c is f32 (f32 sums across calls) */
    const void *bias; /* fast path only: a contiguous row of m values added to each row */
} cr_gemm;

#ifdef CR_HAVE_DNNL
/* Runs g through a cached oneDNN matmul primitive. CR_ERR_UNSUPPORTED when oneDNN
 * declines this layout (the caller then takes the reference path). */
cr_status cr_gemm_dnnl(const cr_gemm *g);
#endif

#endif
