/* pool.c (cuda) — max, average and adaptive average pooling on the GPU: the call's
 * geometry (ops/pool.c's c->i layout: kernel, stride, padding, dilation, ceil mode, count
 * pad; in_h, in_w for the backward ops), dtype and layout handed to kernels/pool.cu. */
#include "cuda_impl.h"

/* h, w: the input plane; y: the pooled tensor [..., oh, ow]. */
static void geometry(const cr_call *c, int64_t h, int64_t w, const cr_tensor *y, crk_pool *g) {
    memset(g, 0, sizeof *g);
    g->h = h, g->w = w;
    g->oh = y->shape[y->ndim - 2], g->ow = y->shape[y->ndim - 1];
    g->planes = g->oh * g->ow != 0 ? y->numel / (g->oh * g->ow) : 0;
    g->kh = c->i[0], g->kw = c->i[1], g->sh = c->i[2], g->sw = c->i[3];
    g->ph = c->i[4], g->pw = c->i[5], g->dh = c->i[6], g->dw = c->i[7];
    g->count_include_pad = (int)c->i[9];
    g->dtype = (int)y->dtype;
    g->channels = y->ndim == 4 ? y->shape[1] : 1;
    /* ops/pool.c hands max pooling channels-last tensors that are not also row-major, and
     * the others of the call in the same layout: the first input's decides (a tensor
     * that is both has the same memory either way) */
    const cr_tensor *lead = c->in[0];
    g->channels_last = lead->ndim == 4 && cr_tensor_is_channels_last(lead) && !cr_tensor_is_contiguous(lead);
}

static void forward_geometry(const cr_call *c, crk_pool *g) {
    const cr_tensor *x = c->in[0];
    geometry(c, x->shape[x->ndim - 2], x->shape[x->ndim - 1], c->out[0], g);
}

#define ENTER(c)                                                                     \
    int device;                                                                      \
    cr_status st_ = cr_gpu_call_device(c, &device);                                  \
    if (st_) return st_;                                                             \
    cudaStream_t s = cr_gpu_stream(device)

cr_status cr_gpu_max_pool2d(cr_call *c) {
    ENTER(c);
    crk_pool g;
    forward_geometry(c, &g);
    return cr_gpu_check(crk_max_pool2d(&g, cr_tensor_ptr(c->in[0]), cr_tensor_ptr(c->out[0]),
                                       (int64_t *)cr_tensor_ptr(c->out[1]), s), "max_pool2d");
}

cr_status cr_gpu_max_pool2d_backward(cr_call *c) {
    ENTER(c);
    crk_pool g;
    geometry(c, c->i[10], c->i[11], c->in[0], &g);
    return cr_gpu_check(crk_max_pool2d_backward(&g, cr_tensor_ptr(c->in[0]),
                                                (const int64_t *)cr_tensor_ptr(c->in[1]),
                                                cr_tensor_ptr(c->out[0]), s),
                        "max_pool2d_backward");
}

cr_status cr_gpu_avg_pool2d(cr_call *c) {
    ENTER(c);
    crk_pool g;
    forward_geometry(c, &g);
    return cr_gpu_check(crk_avg_pool2d(&g, cr_tensor_ptr(c->in[0]), cr_tensor_ptr(c->out[0]), s),
                        "avg_pool2d");
}

cr_status cr_gpu_avg_pool2d_backward(cr_call *c) {
    ENTER(c);
    crk_pool g;
    geometry(c, c->i[10], c->i[11], c->in[0], &g);
    return cr_gpu_check(crk_avg_pool2d_backward(&g, cr_tensor_ptr(c->in[0]),
                                                cr_tensor_ptr(c->out[0]), s),
                        "avg_pool2d_backward");
}

cr_status cr_gpu_adaptive_avg_pool2d(cr_call *c) {
    ENTER(c);
    crk_pool g;
    forward_geometry(c, &g);
    return cr_gpu_check(crk_adaptive_avg_pool2d(&g, cr_tensor_ptr(c->in[0]),
                                                cr_tensor_ptr(c->out[0]), s),
                        "adaptive_avg_pool2d");
}

cr_status cr_gpu_adaptive_avg_pool2d_backward(cr_call *c) {
    ENTER(c);
    crk_pool g;
    geometry(c, c->i[10], c->i[11], c->in[0], &g);
    return cr_gpu_check(crk_adaptive_avg_pool2d_backward(&g, cr_tensor_ptr(c->in[0]),
                                                         cr_tensor_ptr(c->out[0]), s),
                        "adaptive_avg_pool2d_backward");
}

