/* ops/norm.h — normalisation layers and dropout, functional form. Batch norm updates
 * running statistics in place when training (momentum as in PyTorch: new = (1-m)*old +
 * m*batch, unbiased variance for the running estimate). Each layer's backward is an op
 * of its own (one fused pass; a GPU provides its own kernel), called by the layer's
 * derivative rule. The forwards keep their statistics as extra outputs for backward;
 * the typed entries below return only the result. */
#ifndef CR_OPS_NORM_H
#define CR_OPS_NORM_H

#define CR_OPS_NORM(X)                                                                                        \
    X(BATCH_NORM, "batch_norm", cr_cpu_batch_norm, cr_gpu_batch_norm, cr_grad_batch_norm, KEEP)               \
    X(BATCH_NORM_BACKWARD, "batch_norm_backward", cr_cpu_batch_norm_backward,                                 \
      cr_gpu_batch_norm_backward, cr_grad_none, KEEP)                                                         \
    X(LAYER_NORM, "layer_norm", cr_cpu_layer_norm, cr_gpu_layer_norm, cr_grad_layer_norm, F32)                \
    X(LAYER_NORM_BACKWARD, "layer_norm_backward", cr_cpu_layer_norm_backward,                                 \
      cr_gpu_layer_norm_backward, cr_grad_none, KEEP)                                                         \
    X(DROPOUT, "dropout", cr_cpu_dropout, cr_gpu_dropout, cr_grad_dropout, KEEP)                              \
    X(DROPOUT_BACKWARD, "dropout_backward", cr_cpu_dropout_backward,                                          \
      cr_gpu_dropout_backward, cr_grad_dropout_backward, KEEP)                                                \
    X(NORMALIZE, "normalize", cr_cpu_normalize, cr_gpu_normalize, cr_grad_normalize, F32)                     \
    X(NORMALIZE_BACKWARD, "normalize_backward", cr_cpu_normalize_backward,                                    \
      cr_gpu_normalize_backward, cr_grad_none, KEEP)

/* x [N, C, ...]; weight/bias [C] or NULL; running_mean/var [C] or NULL (then batch
 * statistics are used even in eval). */
cr_status cr_op_batch_norm(cr_tensor **out, cr_tensor *x, cr_tensor *weight, cr_tensor *bias,
                           cr_tensor *running_mean, cr_tensor *running_var, bool training,
                           double momentum, double eps);
/* relu(batch_norm(...)) fused: one pass forward, one backward (the ResNet pattern). */
cr_status cr_op_batch_norm_relu(cr_tensor **out, cr_tensor *x, cr_tensor *weight,
                                cr_tensor *bias, cr_tensor *running_mean,
                                cr_tensor *running_var, bool training, double momentum,
                                double eps);
/* batch_norm (relu: fused as above) whose training statistics come from `splits` equal
 * groups of consecutive samples, each normalised on its own (the shared weight and bias),
 * as `splits` GPUs with per-GPU batch norm would (MoCo's SplitBatchNorm); the running
 * statistics take the mean of the groups' updates. splits = 1 is batch_norm; eval ignores
 * splits. The batch must divide into the groups. */
cr_status cr_op_batch_norm_split(cr_tensor **out, cr_tensor *x, cr_tensor *weight,
                                 cr_tensor *bias, cr_tensor *running_mean,
                                 cr_tensor *running_var, bool training, double momentum,
                                 double eps, bool relu, int64_t splits);
/* Normalises over the last `normalized_ndim` dims; weight/bias of that shape or NULL. */
cr_status cr_op_layer_norm(cr_tensor **out, cr_tensor *x, int normalized_ndim,
                           cr_tensor *weight, cr_tensor *bias, double eps);
/* Zeroes each element with probability p and scales the rest by 1/(1-p). Identity
 * (a new reference to x) when !training or p == 0. The mask comes from the Philox
 * stream: element i keeps when uniform(word i) >= p. */
cr_status cr_op_dropout(cr_tensor **out, cr_tensor *x, double p, bool training);
/* x / max(||x||_2 along dim, eps). */
cr_status cr_op_normalize(cr_tensor **out, cr_tensor *x, int64_t dim, double eps);

#endif
