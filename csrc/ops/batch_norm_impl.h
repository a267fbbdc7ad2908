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

#endif
