/* ops/linalg.h — matrix products. f32/f64 compute natively (f16/bf16 go through f32);
 * oneDNN matmul is the f32 fast path, a cache-blocked loop the reference. matmul and
 * linear are composites of mm/bmm/addmm and views, so their gradients come for free. */
#ifndef CR_OPS_LINALG_H
#define CR_OPS_LINALG_H

#define CR_OPS_LINALG(X)                                                                                      \
    X(MM, "mm", cr_cpu_mm, cr_gpu_mm, cr_grad_mm, HALF)                                                       \
    X(BMM, "bmm", cr_cpu_bmm, cr_gpu_bmm, cr_grad_bmm, HALF)                                                  \
    X(ADDMM, "addmm", cr_cpu_addmm, cr_gpu_addmm, cr_grad_addmm, HALF)

/* a [n, k] @ b [k, m]; either may be a transposed or strided view (no copy needed). */
cr_status cr_op_mm(cr_tensor **out, cr_tensor *a, cr_tensor *b);
/* a [B, n, k] @ b [B, k, m]. */
cr_status cr_op_bmm(cr_tensor **out, cr_tensor *a, cr_tensor *b);
/* beta * bias + alpha * (a @ b); bias (at most 2-D) broadcasts to [n, m]. With beta 0
 * the bias is ignored (NaNs in it do not propagate), as in PyTorch. */
cr_status cr_op_addmm(cr_tensor **out, cr_tensor *bias, cr_tensor *a, cr_tensor *b,
                      double beta, double alpha);
/* PyTorch matmul semantics: 1-D . 1-D is a dot product (0-dim result), 1-D operands
 * gain and then lose a dim, batch dims broadcast. Composite. */
cr_status cr_op_matmul(cr_tensor **out, cr_tensor *a, cr_tensor *b);
/* x [..., in] @ w[out, in]^T + bias[out] (bias may be NULL). Composite. */
cr_status cr_op_linear(cr_tensor **out, cr_tensor *x, cr_tensor *w, cr_tensor *bias);

#endif
