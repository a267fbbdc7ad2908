/* dropout.c — inverted dropout: each element is kept with probability 1-p and scaled by
 * 1/(1-p), else zeroed. Element i keeps when uniform(word i of a Philox reservation) >=
 * p, so the mask depends on the seed only, never on the thread count or device. The
 * forward saves the mask (u8, output 1); the backward is DROPOUT_BACKWARD, g*mask*scale,
 * which is linear in g and so is its own derivative. */
#include <math.h>

#include "elementwise_impl.h"
#include "rng.h"

/* in: x (contiguous, float); out: y, mask (u8); f[0] p; i[0], i[1] the reservation's
 * seed and first counter. Blocks of 4 elements share one Philox call. */
cr_status cr_cpu_dropout(cr_call *c) {
    cr_tensor *x = c->in[0], *y = c->out[0];
    const double p = c->f[0];
    const float pf = (float)p;
    const uint64_t seed = (uint64_t)c->i[0], counter = (uint64_t)c->i[1];
    const int64_t n = x->numel, nblocks = (n + 3) / 4;
    const cr_dtype dt = x->dtype;
    const char *xp = cr_tensor_ptr(x);
    char *yp = cr_tensor_ptr(y);
    uint8_t *mask = (uint8_t *)cr_tensor_ptr(c->out[1]);
    const double scale = p < 1 ? 1.0 / (1.0 - p) : 0.0;
    const float scalef = (float)scale;
    const size_t es = cr_dtype_size(dt);
    bool par = n >= CR_PAR_GRAIN;
#pragma omp parallel for if (par) schedule(static)
    for (int64_t blk = 0; blk < nblocks; blk++) {
        uint32_t w[4];
        cr_philox_block(seed, counter + (uint64_t)blk, w);
        int64_t i0 = blk * 4, cnt = n - i0 < 4 ? n - i0 : 4;
        for (int64_t j = 0; j < cnt; j++) {
            int64_t i = i0 + j;
            uint8_t keep = p < 1 && cr_uniform_f32(w[j]) >= pf;
            mask[i] = keep;
            if (dt == CR_DT_F32)
                ((float *)yp)[i] = keep ? ((const float *)xp)[i] * scalef : 0.0f;
            else if (dt == CR_DT_F64)
                ((double *)yp)[i] = keep ? ((const double *)xp)[i] * scale : 0.0;
            else
                cr_store_f64(yp + i * es, dt, keep ? cr_load_f64(xp + i * es, dt) * scale : 0.0);
        }
    }
    return CR_OK;
}

/* in: g (contiguous), mask (u8); out: gx; f[0] scale. */
cr_status cr_cpu_dropout_backward(cr_call *c) {
    cr_tensor *g = c->in[0], *gx = c->out[0];
    const uint8_t *mask = (const uint8_t *)cr_tensor_ptr(c->in[1]);
    const int64_t n = g->numel;
    const double scale = c->f[0];
    const cr_dtype dt = g->dtype;
    const size_t es = cr_dtype_size(dt);
    const char *gp = cr_tensor_ptr(g);
    char *op = cr_tensor_ptr(gx);
    if (dt == CR_DT_F32) {
        const float *gf = (const float *)gp;
        float *of = (float *)op, s = (float)scale;
#pragma omp parallel for if (n >= CR_PAR_GRAIN) schedule(static)
        for (int64_t i = 0; i < n; i++) of[i] = mask[i] ? gf[i] * s : 0.0f;
    } else if (dt == CR_DT_F64) {
        const double *gd = (const double *)gp;
        double *od = (double *)op;
#pragma omp parallel for if (n >= CR_PAR_GRAIN) schedule(static)
        for (int64_t i = 0; i < n; i++) od[i] = mask[i] ? gd[i] * scale : 0.0;
    } else {
#pragma omp parallel for if (n >= CR_PAR_GRAIN) schedule(static)
        for (int64_t i = 0; i < n; i++)
            cr_store_f64(op + i * (int64_t)es, dt,
                         mask[i] ? cr_load_f64(gp + i * (int64_t)es, dt) * scale : 0.0);
    }
    return CR_OK;
}

/* gx = g * mask * scale, recorded (so the grad of the grad is the same map). */
static cr_status dropout_backward(cr_tensor **out, cr_tensor *g, cr_tensor *mask, double scale) {
    *out = NULL;
    cr_tensor *gc;
    cr_status st = cr_op_contiguous(&gc, g);
    if (st) return st;
    cr_call c;
    cr_call_init(&c, CR_OP_DROPOUT_BACKWARD, 2, 1);
    c.in[0] = gc;
    c.in[1] = mask;
    c.f[0] = scale;
    if (!(st = cr_tensor_alloc(&c.out[0], gc->ndim, gc->shape, gc->dtype, cr_tensor_dev(gc))))
        st = cr_call_finish(out, &c, 2u, 0);
    cr_tensor_free(gc);
    return st;
}

cr_status cr_grad_dropout_backward(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    cr_tensor *mask;
    cr_status st = cr_saved_in(n, 1, &mask);
    if (st) return st;
    return dropout_backward(&gin[0], gout[0], mask, n->call.f[0]);
}

cr_status cr_grad_dropout(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    cr_tensor *mask;
    cr_status st = cr_saved_out(n, 1, &mask);
    if (st) return st;
    double p = n->call.f[0];
    return dropout_backward(&gin[0], gout[0], mask, p < 1 ? 1.0 / (1.0 - p) : 0.0);
}

cr_status cr_op_dropout(cr_tensor **out, cr_tensor *x, double p, bool training) {
    *out = NULL;
    CR_CHECK_TENSOR("dropout", x, "input");
    if (!(p >= 0 && p <= 1))
        return cr_fail(CR_ERR_ARG, "dropout: probability p = %g is outside [0, 1]; pass a "
                       "probability of an element to be zeroed", p);
    cr_status st = cr_check_float("dropout", x, "input");
    if (st) return st;
    if (!training || p == 0) {
        cr_tensor_retain(x);
        *out = x;
        return CR_OK;
    }
    cr_tensor *xc;
    if ((st = cr_op_contiguous(&xc, x))) return st;
    cr_call c;
    cr_call_init(&c, CR_OP_DROPOUT, 1, 2);
    c.in[0] = xc;
    c.f[0] = p;
    /* p == 1 draws nothing: every element is dropped */
    cr_philox_stream s = p < 1 ? cr_rng_reserve(xc->numel) : (cr_philox_stream){0, 0};
    c.i[0] = (int64_t)s.seed;
    c.i[1] = (int64_t)s.counter;
    if (!(st = cr_tensor_alloc(&c.out[0], xc->ndim, xc->shape, xc->dtype, cr_tensor_dev(xc))) &&
        !(st = cr_tensor_alloc(&c.out[1], xc->ndim, xc->shape, CR_DT_U8, cr_tensor_dev(xc))))
        st = cr_call_finish(NULL, &c, 0, 2u);
    cr_tensor_free(xc);
    if (st) {
        if (p < 1) cr_rng_give_back(s);
        cr_call_drop_outs(&c);
        return st;
    }
    cr_tensor_free(c.out[1]);
    *out = c.out[0];
    return CR_OK;
}
