/* normalize.c (cuda) — L2 normalisation along one dim on the GPU, composed of GPU ops
 * (x*x, a f64-accumulated sum, sqrt, clamp, div; the backward's projection and its
 * clamped branch through where), with ops/normalize.c's semantics: y = x / max(||x||, eps),
 * gx = (g - y sum(g y)) / ||x|| where ||x|| >= eps, else g / eps. A fused kernel would
 * save a few passes over the (small) embeddings it is used on. */
#include "cuda_impl.h"
#include "elementwise_impl.h"

/* t[k] temporaries, freed together. */
enum { NTMP = 8 };

static void free_all(cr_tensor **t) {
    for (int k = 0; k < NTMP; k++) cr_tensor_free(t[k]);
}

cr_status cr_gpu_normalize(cr_call *c) {
    cr_tensor *x = c->in[0], *t[NTMP] = {0};
    uint32_t dims = 1u << c->i[0];
    bool was = cr_grad_set_enabled(false);
    cr_status st;
    if (!(st = cr_op_mul(&t[0], x, x)) && !(st = cr_op_sum(&t[1], t[0], dims, true)) &&
        !(st = cr_op_sqrt(&t[2], t[1])) && !(st = cr_copy_into(c->out[1], t[2])) &&
        !(st = cr_op_clamp(&t[3], t[2], true, c->f[0], false, 0)) && !(st = cr_op_div(&t[4], x, t[3])))
        st = cr_copy_into(c->out[0], t[4]);
    cr_grad_set_enabled(was);
    free_all(t);
    return st;
}

cr_status cr_gpu_normalize_backward(cr_call *c) {
    cr_tensor *g = c->in[0], *y = c->in[1], *nrm = c->in[2], *t[NTMP] = {0}, *eps = NULL;
    uint32_t dims = 1u << c->i[0];
    bool was = cr_grad_set_enabled(false);
    cr_status st = cr_tensor_scalar(&eps, c->f[0], nrm->dtype);
    if (!st && !(st = cr_op_mul(&t[0], g, y)) && !(st = cr_op_sum(&t[1], t[0], dims, true)) &&
        !(st = cr_op_mul(&t[2], y, t[1])) && !(st = cr_op_sub(&t[3], g, t[2])) &&
        !(st = cr_op_div(&t[4], t[3], nrm)) && !(st = cr_op_div(&t[5], g, eps)) &&
        !(st = cr_op_ge(&t[6], nrm, eps)) && !(st = cr_op_where(&t[7], t[6], t[4], t[5])))
        st = cr_copy_into(c->out[0], t[7]);
    cr_grad_set_enabled(was);
    cr_tensor_free(eps);
    free_all(t);
    return st;
}

