/* ops/loss.h — softmax family and classification losses. Reductions: 0 none, 1 mean,
 * 2 sum (PyTorch's order is none/mean/sum by name; these are the codes). The losses'
 * derivatives are ops of their own (one fused pass; a GPU provides its own kernel),
 * called by the losses' derivative rules. */
#ifndef CR_OPS_LOSS_H
#define CR_OPS_LOSS_H

typedef enum { CR_REDUCTION_NONE = 0, CR_REDUCTION_MEAN = 1, CR_REDUCTION_SUM = 2 } cr_reduction;

#define CR_OPS_LOSS(X)                                                                                        \
    X(SOFTMAX, "softmax", cr_cpu_softmax, cr_gpu_softmax, cr_grad_softmax, F32)                               \
    X(LOG_SOFTMAX, "log_softmax", cr_cpu_log_softmax, cr_gpu_log_softmax, cr_grad_log_softmax, F32)           \
    X(NLL_LOSS, "nll_loss", cr_cpu_nll_loss, cr_gpu_loss_forward, cr_grad_nll_loss, F32)                      \
    X(CROSS_ENTROPY, "cross_entropy", cr_cpu_cross_entropy, cr_gpu_loss_forward, cr_grad_cross_entropy, F32)  \
    X(NLL_LOSS_BACKWARD, "nll_loss_backward", cr_cpu_nll_loss_backward,                                       \
      cr_gpu_loss_backward, cr_grad_none, KEEP)                                                               \
    X(CROSS_ENTROPY_BACKWARD, "cross_entropy_backward", cr_cpu_cross_entropy_backward,                        \
      cr_gpu_loss_backward, cr_grad_none, KEEP)                                                               \

/* along dim, stable; f16/bf16 compute in f32 and return their own dtype. */
cr_status cr_op_softmax(cr_tensor **out, cr_tensor *t, int64_t dim);
cr_status cr_op_log_softmax(cr_tensor **out, cr_tensor *t, int64_t dim);
/* logp [N, C] (or [N, C, d...], or [C] with a 0-dim target), target i64 [N] (or
 * [N, d...]); ignore_index skips; mean divides by the number of non-ignored targets.
 * Targets outside [0, C) (other than ignore_index) are an error. */
cr_status cr_op_nll_loss(cr_tensor **out, cr_tensor *logp, cr_tensor *target,
                         cr_reduction reduction, int64_t ignore_index);
/* logits [N, C] (or [N, C, d...]) and class targets i64 [N] (or [N, d...]), or soft
 * targets: class probabilities with the logits' shape. Label smoothing eps mixes the
 * target with the uniform distribution, as PyTorch: (1-eps)*nll + eps*mean_c(-logp). */
cr_status cr_op_cross_entropy(cr_tensor **out, cr_tensor *logits, cr_tensor *target,
                              cr_reduction reduction, double label_smoothing,
                              int64_t ignore_index);

#endif
