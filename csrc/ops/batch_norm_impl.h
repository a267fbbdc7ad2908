/* batch_norm_impl.h — the oneDNN fast path of batch norm (batch_norm_dnnl.c), as seen by
 * batch_norm.c. Data are contiguous f32 [N, C, S]; per-channel vectors are f32 [C].
 * Built only with CR_HAVE_DNNL. Each returns false when oneDNN refuses the shape, and
 * the caller then runs the reference loops. A gw request needs a weight (gw of an
 * absent weight is never asked for). */
#ifndef CR_BATCH_NORM_IMPL_H
#define CR_BATCH_NORM_IMPL_H

#include "internal.h"

/* use_global: mean/var are inputs (eval); else they receive the batch mean and the
 * biased batch variance. weight/bias may be NULL. */
bool cr_dnnl_batch_norm_forward(float *y, const float *x, const float *weight,
                                const float *bias, float *mean, float *var, int64_t N,
                                int64_t C, int64_t S, bool use_global, double eps);
/* gx is always written; gw/gb are written when non-NULL (gw needs weight). var is the
 * variance the forward normalised with. */
bool cr_dnnl_batch_norm_backward(float *gx, float *gw, float *gb, const float *g,
                                 const float *x, const float *weight, const float *mean,
                                 const float *var, int64_t N, int64_t C, int64_t S,
                                 bool use_global, double eps);

/* Channels-last f32 or (bf16 true) bf16 data as rows [M = N*H*W, C] (batch_norm_nhwc.c,
 * any build); statistics and per-channel vectors stay f64/f32. Each returns false when out
 * of memory. */
/* Batch mean and biased variance per channel (one pass over memory, f64 moments). */
bool cr_bn_nhwc_stats(const void *x, bool bf16, int64_t M, int64_t C, double *mean,
                      double *var);
/* y = (x - mean)*scale + shift per channel, then relu when asked. */
bool cr_bn_nhwc_apply(void *y, const void *x, bool bf16, int64_t M, int64_t C,
                      const float *mean, const float *scale, const float *shift, bool relu);
/* sum_g = sum g, sum_gx = sum g*(x - mean) per channel, about the same f32 mean the
 * affine passes take; g masked where y <= 0 when y is given (the fused relu). */
bool cr_bn_nhwc_grad_sums(const void *g, const void *x, const void *y, bool bf16,
                          const float *mean, int64_t M, int64_t C, double *sum_g,
                          double *sum_gx);
/* gx = g*a + (x - mean)*bx + c0 per channel (g masked as above). */
bool cr_bn_nhwc_grad_input(void *gx, const void *g, const void *x, const void *y, bool bf16,
                           int64_t M, int64_t C, const float *mean, const float *a,
                           const float *bx, const float *c0);

#endif
