/* layer_norm.c (cuda) — layer norm forward and backward on the GPU (kernels/layer_norm.cu).
 * ops/layer_norm.c has made x, weight and bias contiguous f32 or f64 of one dtype and
 * the backward's grad contiguous; the call's tensors go to the kernels as they are. */
#include "cuda_impl.h"
#include "kernels/layer_norm.h"


/* Rows and row length of x for its last nd dims (ops/layer_norm.c's ln_geometry). */
static void geometry(const cr_tensor *x, int nd, int64_t *rows, int64_t *D) {
    *D = 1;
    for (int d = x->ndim - nd; d < x->ndim; d++) *D *= x->shape[d];
    *rows = 1;
    for (int d = 0; d < x->ndim - nd; d++) *rows *= x->shape[d];
}

static void *ptr_or_null(const cr_tensor *t) { return t ? cr_tensor_ptr(t) : NULL; }

/* in: x, weight?, bias?; out: y, mean, rstd; i[0] normalized_ndim; f[0] eps. */
cr_status cr_gpu_layer_norm(cr_call *c) {
    int device;
    cr_status st = cr_gpu_call_device(c, &device);
    if (st) return st;
    crk_layer_norm p;
    memset(&p, 0, sizeof p);
    geometry(c->in[0], (int)c->i[0], &p.rows, &p.D);
    p.f64 = c->in[0]->dtype == CR_DT_F64;
    p.x = cr_tensor_ptr(c->in[0]);
    p.w = ptr_or_null(c->in[1]);
    p.b = ptr_or_null(c->in[2]);
    p.y = cr_tensor_ptr(c->out[0]);
    p.mean = cr_tensor_ptr(c->out[1]);
    p.rstd = cr_tensor_ptr(c->out[2]);
    p.eps = c->f[0];
    return cr_gpu_check(crk_layer_norm_forward(&p, cr_gpu_stream(device)), "layer_norm");
}

/* in: g, x, weight?, mean, rstd; out: gx?, gw?, gb?; i[0] normalized_ndim. */
cr_status cr_gpu_layer_norm_backward(cr_call *c) {
    int device;
    cr_status st = cr_gpu_call_device(c, &device);
    if (st) return st;
    crk_layer_norm_grad p;
    memset(&p, 0, sizeof p);
    geometry(c->in[1], (int)c->i[0], &p.rows, &p.D);
    p.f64 = c->in[1]->dtype == CR_DT_F64;
    p.g = cr_tensor_ptr(c->in[0]);
    p.x = cr_tensor_ptr(c->in[1]);
    p.w = ptr_or_null(c->in[2]);
    p.mean = cr_tensor_ptr(c->in[3]);
    p.rstd = cr_tensor_ptr(c->in[4]);
    p.gx = ptr_or_null(c->out[0]);
    p.gw = ptr_or_null(c->out[1]);
    p.gb = ptr_or_null(c->out[2]);
    size_t bytes = crk_layer_norm_backward_scratch_bytes(&p);
    void *scratch = NULL;
    if (bytes && (st = cr_gpu_alloc(device, bytes, &scratch))) return st;
    st = cr_gpu_check(crk_layer_norm_backward(&p, scratch, cr_gpu_stream(device)),
                      "layer_norm_backward");
    if (scratch) cr_gpu_release(device, scratch, bytes);
    return st;
}

