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
    int64_t bf16;           /* every buffer is bf16 (f32 accumulation inside oneDNN), else f32 */
} cr_conv_geom;

/* The oneDNN paths (f32 or bf16 buffers as g->bf16 says, row-major or channels-last as
 * the geometry says). They return CR_ERR_UNSUPPORTED, with no message, when oneDNN is
 * missing or declines the problem; the caller then runs the reference loops (through f32
 * copies for bf16). gb may be NULL. */
cr_status cr_conv2d_dnnl_forward(const cr_conv_geom *g, const void *x, const void *w,
                                 const void *b, void *y);
cr_status cr_conv2d_dnnl_backward_data(const cr_conv_geom *g, const void *gy, const void *w,
                                       void *gx);
cr_status cr_conv2d_dnnl_backward_weights(const cr_conv_geom *g, const void *x,
                                          const void *gy, void *gw, void *gb);

/* The grads of small-image channels-last bf16 convolutions (conv_small.c): whether g is
 * such a convolution; the weight grad as one matrix product (gw [o, c, kh, kw], no bias);
 * the input grad of a stride-1 one as a forward convolution. CR_ERR_UNSUPPORTED (the
 * caller then takes oneDNN's backward kernels) when a path does not apply or oneDNN
 * declines it. */
bool cr_conv2d_small_wanted(const cr_conv_geom *g);
cr_status cr_conv2d_small_backward_weights(const cr_conv_geom *g, const void *x, const void *gy,
                                           void *gw);
cr_status cr_conv2d_small_backward_data(const cr_conv_geom *g, const void *gy, const void *w,
                                        void *gx);

#endif
