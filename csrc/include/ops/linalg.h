/* ops/linalg.h — matrix products. f32/f64 compute natively (f16/bf16 go through f32);
 * oneDNN matmul is the f32 fast path, a cache-blocked loop the reference. matmul and
 * linear are composites of mm/bmm/addmm and views, so their gradients come for free.
 * attention is fused scaled dot-product attention (ops/attention.c), with its backward
 * as an op of its own. */
#ifndef CR_OPS_LINALG_H
#define CR_OPS_LINALG_H

#define CR_OPS_LINALG(X)                                                                                      \
    X(MM, "mm", cr_cpu_mm, cr_gpu_mm, cr_grad_mm, HALF)                                                       \
    X(BMM, "bmm", cr_cpu_bmm, cr_gpu_bmm, cr_grad_bmm, HALF)                                                  \
    X(ADDMM, "addmm", cr_cpu_addmm, cr_gpu_addmm, cr_grad_addmm, HALF)                                        \
    X(ATTENTION, "attention", cr_cpu_attention, cr_gpu_attention, cr_grad_attention, KEEP)                      \
    X(ATTENTION_BACKWARD, "attention_backward", cr_cpu_attention_backward, cr_gpu_attention_backward,            \
      cr_grad_none, KEEP)

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

/* softmax(scale q k^T + mask) v: q [B, H, Tq, d] (or [N, Tq, d]), k [.., Tk, d], v [.., Tk,
 * dv] -> [.., Tq, dv]. mask (or NULL) broadcasts to [.., Tq, Tk]: bool (true attends) or
 * float (added to the scores). causal hides key j > query i (top-left aligned, as
 * PyTorch's is_causal). scale 0 means 1/sqrt(d). dropout_p > 0 drops weights (Philox:
 * weight (n, i, j) keeps when uniform(word (n Tq + i) Tk + j) >= p) and scales the rest
 * by 1/(1-p); pass 0 outside training. A query row whose every key is masked gives 0
 * (and a zero gradient). The mask takes no gradient. */
cr_status cr_op_attention(cr_tensor **out, cr_tensor *q, cr_tensor *k, cr_tensor *v, cr_tensor *mask, bool causal,
                          double scale, double dropout_p);

#endif
