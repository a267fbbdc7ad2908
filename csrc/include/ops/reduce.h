/* ops/reduce.h — reductions over a set of dims (a bitmask; 0 means all dims), with
 * keepdim. Float sums and statistics accumulate in f64 (f32 inputs included); max/min
 * return the input's own values (exact for every dtype) and the first index on ties. */
#ifndef CR_OPS_REDUCE_H
#define CR_OPS_REDUCE_H

#define CR_OPS_REDUCE(X)                                                                                      \
    X(SUM, "sum", cr_cpu_sum, cr_gpu_sum, cr_grad_sum, F32)                                                   \
    X(MEAN, "mean", cr_cpu_mean, cr_gpu_mean, cr_grad_mean, F32)                                              \
    X(MAX_DIM, "max", cr_cpu_max_dim, cr_gpu_max_values, cr_grad_max_dim, KEEP)                               \
    X(MIN_DIM, "min", cr_cpu_min_dim, cr_gpu_min_values, cr_grad_min_dim, KEEP)                               \
    X(AMAX, "amax", cr_cpu_amax, cr_gpu_max_values, cr_grad_amax, KEEP)                                       \
    X(AMIN, "amin", cr_cpu_amin, cr_gpu_min_values, cr_grad_amin, KEEP)                                       \
    X(ARGMAX, "argmax", cr_cpu_argmax, cr_gpu_argmax, cr_grad_none, KEEP)                                     \
    X(ARGMIN, "argmin", cr_cpu_argmin, cr_gpu_argmin, cr_grad_none, KEEP)                                     \
    X(VAR, "var", cr_cpu_var, cr_gpu_var, cr_grad_var, KEEP)                                                  \
    X(NORM, "norm", cr_cpu_norm, cr_gpu_norm, cr_grad_norm, KEEP)                                             \
    X(LOGSUMEXP, "logsumexp", cr_cpu_logsumexp, cr_gpu_logsumexp, cr_grad_logsumexp, KEEP)                    \

cr_status cr_op_sum(cr_tensor **out, cr_tensor *t, uint32_t dims, bool keepdim);
cr_status cr_op_mean(cr_tensor **out, cr_tensor *t, uint32_t dims, bool keepdim);
/* values and i64 indices of the max/min along one dim (first index on ties). */
cr_status cr_op_max_dim(cr_tensor **values, cr_tensor **indices, cr_tensor *t, int64_t dim,
                        bool keepdim);
cr_status cr_op_min_dim(cr_tensor **values, cr_tensor **indices, cr_tensor *t, int64_t dim,
                        bool keepdim);
/* max/min over dims (gradient split evenly among ties). */
cr_status cr_op_amax(cr_tensor **out, cr_tensor *t, uint32_t dims, bool keepdim);
cr_status cr_op_amin(cr_tensor **out, cr_tensor *t, uint32_t dims, bool keepdim);
/* dim < -ndim: over the flattened tensor. */
cr_status cr_op_argmax(cr_tensor **out, cr_tensor *t, int64_t dim, bool keepdim);
cr_status cr_op_argmin(cr_tensor **out, cr_tensor *t, int64_t dim, bool keepdim);
/* variance with `correction` (1 = unbiased, Bessel); divides by max(0, N - correction). */
cr_status cr_op_var(cr_tensor **out, cr_tensor *t, uint32_t dims, int64_t correction,
                    bool keepdim);
/* p-norm: p > 0, INFINITY (max |x|), -INFINITY (min |x|) or 0 (count of non-zeros).
 * The p = 2 gradient at the origin is 0. */
cr_status cr_op_norm(cr_tensor **out, cr_tensor *t, double p, uint32_t dims, bool keepdim);
/* log(sum(exp(x))) computed stably (the max is subtracted); integers give f32. */
cr_status cr_op_logsumexp(cr_tensor **out, cr_tensor *t, uint32_t dims, bool keepdim);

#endif
