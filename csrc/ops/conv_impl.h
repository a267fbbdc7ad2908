/* conv_impl.h — what conv.c (entry points, reference loops) shares with conv_dnnl.c
 * (the oneDNN fast path). Private to csrc/ops. */
#ifndef CR_CONV_IMPL_H
#define CR_CONV_IMPL_H

#include "internal.h"

/* One convolution's sizes: x [n, c, h, w], w [o, c/groups, kh, kw], y [n, o, oh, ow].
 * Dilation is PyTorch's (1 = dense). All int64 so the struct has no padding and can be
 * compared with memcmp as a cache key. */
typedef struct {
    int64_t n, c, h, w;
    int64_t o, kh, kw;
    int64_t oh, ow;
    int64_t sh, sw, ph, pw, dh, dw, groups;
    int64_t src_cl, dst_cl; /* x-side (x, gx) and y-side (y, gy) buffers are channels-last */
} cr_conv_geom;

/* The oneDNN paths (f32 buffers, row-major or channels-last as the geometry says). They return CR_ERR_UNSUPPORTED, with
 * no message, when oneDNN is missing or declines the problem; the caller then runs the
 * reference loops. gb may be NULL. */
cr_status cr_conv2d_dnnl_forward(const cr_conv_geom *g, const float *x, const float *w,
                                 const float *b, float *y);
cr_status cr_conv2d_dnnl_backward_data(const cr_conv_geom *g, const float *gy, const float *w,
                                       float *gx);
cr_status cr_conv2d_dnnl_backward_weights(const cr_conv_geom *g, const float *x,
                                          const float *gy, float *gw, float *gb);

#endif
