/* normalize.c (cuda) — L2 normalisation along one dim on the GPU (kernels/normalize.cu),
 * with ops/normalize.c's semantics: y = x / max(||x||, eps), gx = (g - y sum(g y)) / ||x||
 * where ||x|| >= eps, else g / eps. ops/normalize.c has made x (and the backward's g)
 * contiguous f32 or f64; the call's tensors go to the kernels as they are. */
#include "cuda_impl.h"
#include "kernels/normalize.h"

/* x viewed as [outer, L, inner] around the normalised dim (ops/normalize.c's geometry). */
static void geometry(const cr_tensor *x, int64_t dim, crk_normalize *p) {
    p->outer = p->inner = 1;
    for (int d = 0; d < dim; d++) p->outer *= x->shape[d];
    for (int d = (int)dim + 1; d < x->ndim; d++) p->inner *= x->shape[d];
    p->L = x->ndim ? x->shape[dim] : 1;
    p->f64 = x->dtype == CR_DT_F64;
}

/* in: x; out: y, norms (keepdim shape); i[0] dim; f[0] eps. */
cr_status cr_gpu_normalize(cr_call *c) {
    int device;
    cr_status st = cr_gpu_call_device(c, &device);
    if (st) return st;
    crk_normalize p;
    memset(&p, 0, sizeof p);
    geometry(c->in[0], c->i[0], &p);
    p.eps = c->f[0];
    p.x = cr_tensor_ptr(c->in[0]);
    p.out = cr_tensor_ptr(c->out[0]);
    p.nrm = cr_tensor_ptr(c->out[1]);
    return cr_gpu_check(crk_normalize_forward(&p, cr_gpu_stream(device)), "normalize");
}

/* in: g, y, norms; out: gx; i[0] dim; f[0] eps. */
cr_status cr_gpu_normalize_backward(cr_call *c) {
    int device;
    cr_status st = cr_gpu_call_device(c, &device);
    if (st) return st;
    crk_normalize p;
    memset(&p, 0, sizeof p);
    geometry(c->in[1], c->i[0], &p);
    p.eps = c->f[0];
    p.x = cr_tensor_ptr(c->in[0]);
    p.y = cr_tensor_ptr(c->in[1]);
    p.nrm = cr_tensor_ptr(c->in[2]);
    p.out = cr_tensor_ptr(c->out[0]);
    return cr_gpu_check(crk_normalize_backward(&p, cr_gpu_stream(device)), "normalize_backward");
}
