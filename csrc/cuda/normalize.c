/* normalize.c (cuda) — L2 normalisation along one dim on the GPU (kernels/normalize.cu),
 * with ops/normalize.c's semantics: y = x / max(||x||, eps), gx = (g - y sum(g y)) / ||x||
 * where ||x|| >= eps, else g / eps. ops/normalize.c has made x (and the backward's g)
 * contiguous f32 or f64; the call's tensors go to the kernels as they are. */
#include "cuda_impl.h"
#include "kernels/normalize.h"

/* The kernels' params for the call: x viewed as [outer, L, inner] around the normalised
 * dim (ops/normalize.c's geometry), eps, and the device it runs on. */
static cr_status params(cr_call *c, const cr_tensor *x, crk_normalize *p, int *device) {
    memset(p, 0, sizeof *p);
    int64_t dim = c->i[0];
    p->outer = p->inner = 1;
    for (int d = 0; d < dim; d++) p->outer *= x->shape[d];
    for (int d = (int)dim + 1; d < x->ndim; d++) p->inner *= x->shape[d];
    p->L = x->ndim ? x->shape[dim] : 1;
    p->f64 = x->dtype == CR_DT_F64;
    p->eps = c->f[0];
    return cr_gpu_call_device(c, device);
}

/* in: x; out: y, norms (keepdim shape); i[0] dim; f[0] eps. */
cr_status cr_gpu_normalize(cr_call *c) {
    crk_normalize p;
    int device;
    cr_status st = params(c, c->in[0], &p, &device);
    if (st) return st;
    p.x = cr_tensor_ptr(c->in[0]);
    p.out = cr_tensor_ptr(c->out[0]);
    p.nrm = cr_tensor_ptr(c->out[1]);
    return cr_gpu_check(crk_normalize_forward(&p, cr_gpu_stream(device)), "normalize");
}

/* in: g, y, norms; out: gx; i[0] dim; f[0] eps. */
cr_status cr_gpu_normalize_backward(cr_call *c) {
    crk_normalize p;
    int device;
    cr_status st = params(c, c->in[1], &p, &device);
    if (st) return st;
    p.x = cr_tensor_ptr(c->in[0]);
    p.y = cr_tensor_ptr(c->in[1]);
    p.nrm = cr_tensor_ptr(c->in[2]);
    p.out = cr_tensor_ptr(c->out[0]);
    return cr_gpu_check(crk_normalize_backward(&p, cr_gpu_stream(device)), "normalize_backward");
}
