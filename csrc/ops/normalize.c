/* normalize.c — L2 normalisation along one dim, y = x / max(||x||_2, eps), as PyTorch's
 * F.normalize(p=2). One op rather than a chain of sum/sqrt/clamp/div: one pass for the
 * norms and one for y, and a fused backward (NORMALIZE_BACKWARD):
 *   ||x|| >= eps: gx = (g - y * sum(g*y)) / ||x||     (the projection off y)
 *   ||x|| <  eps: gx = g / eps                         (the clamp makes y linear in x)
 * The input is viewed as [outer, L, inner] with L the normalised dim; the norms (output
 * 1, keepdim shape) are computed per (outer, inner) pair, in f64. */
#include <math.h>
#include <omp.h>

#include "elementwise_impl.h"

static void geometry(const cr_tensor *x, int64_t dim, int64_t *outer, int64_t *L,
                     int64_t *inner) {
    *outer = *inner = 1;
    for (int d = 0; d < dim; d++) *outer *= x->shape[d];
    for (int d = (int)dim + 1; d < x->ndim; d++) *inner *= x->shape[d];
    *L = x->ndim ? x->shape[dim] : 1;
}

#define NORMALIZE_BLOCK(T)                                                           \
    do {                                                                             \
        const T *xs = (const T *)xp + o * L * inner;                                 \
        T *ys = (T *)yp + o * L * inner;                                             \
        for (int64_t k = 0; k < inner; k++) acc[k] = 0;                              \
        for (int64_t l = 0; l < L; l++)                                              \
            for (int64_t k = 0; k < inner; k++) {                                    \
                double v = xs[l * inner + k];                                        \
                acc[k] += v * v;                                                     \
            }                                                                        \
        for (int64_t k = 0; k < inner; k++) {                                        \
            double nrm = sqrt(acc[k]);                                               \
            ((T *)np)[o * inner + k] = (T)nrm;                                       \
            acc[k] = 1.0 / (nrm > eps ? nrm : eps);                                  \
        }                                                                            \
        for (int64_t l = 0; l < L; l++)                                              \
            for (int64_t k = 0; k < inner; k++)                                      \
                ys[l * inner + k] = (T)(xs[l * inner + k] * acc[k]);                 \
    } while (0)

/* in: x (contiguous f32/f64); out: y, norms (keepdim shape); i[0] dim; f[0] eps. */
cr_status cr_cpu_normalize(cr_call *c) {
    cr_tensor *x = c->in[0];
    int64_t outer, L, inner;
    geometry(x, c->i[0], &outer, &L, &inner);
    const double eps = c->f[0];
    const char *xp = cr_tensor_ptr(x);
    char *yp = cr_tensor_ptr(c->out[0]), *np = cr_tensor_ptr(c->out[1]);
    const bool f32 = x->dtype == CR_DT_F32;
    bool par = x->numel >= CR_PAR_GRAIN && outer > 1, oom = false;
#pragma omp parallel if (par)
    {
        double *acc = malloc(sizeof(double) * (size_t)(inner ? inner : 1));
        if (!acc) {
#pragma omp atomic write
            oom = true;
        }
#pragma omp for schedule(static)
        for (int64_t o = 0; o < outer; o++) {
            if (!acc) continue;
            if (f32) NORMALIZE_BLOCK(float);
            else NORMALIZE_BLOCK(double);
        }
        free(acc);
    }
    if (oom) return cr_fail(CR_ERR_OOM, "normalize: out of memory for %lld accumulators",
                            (long long)inner);
    return CR_OK;
}

#define NORMALIZE_BACKWARD_BLOCK(T)                                                  \
    do {                                                                             \
        const T *gs = (const T *)gp + o * L * inner, *ys = (const T *)yp + o * L * inner; \
        T *gxs = (T *)gxp + o * L * inner;                                           \
        for (int64_t k = 0; k < inner; k++) acc[k] = 0;                              \
        for (int64_t l = 0; l < L; l++)                                              \
            for (int64_t k = 0; k < inner; k++)                                      \
                acc[k] += (double)gs[l * inner + k] * ys[l * inner + k];             \
        for (int64_t l = 0; l < L; l++)                                              \
            for (int64_t k = 0; k < inner; k++) {                                    \
                double nrm = ((const T *)np)[o * inner + k];                         \
                double gv = gs[l * inner + k];                                       \
                gxs[l * inner + k] = (T)(nrm >= eps ? (gv - ys[l * inner + k] * acc[k]) / nrm \
                                                    : gv / eps);                     \
            }                                                                        \
    } while (0)

/* in: g (contiguous), y, norms; out: gx; i[0] dim; f[0] eps. */
cr_status cr_cpu_normalize_backward(cr_call *c) {
    cr_tensor *y = c->in[1];
    int64_t outer, L, inner;
    geometry(y, c->i[0], &outer, &L, &inner);
    const double eps = c->f[0];
    const char *gp = cr_tensor_ptr(c->in[0]), *yp = cr_tensor_ptr(y),
               *np = cr_tensor_ptr(c->in[2]);
    char *gxp = cr_tensor_ptr(c->out[0]);
    const bool f32 = y->dtype == CR_DT_F32;
    bool par = y->numel >= CR_PAR_GRAIN && outer > 1, oom = false;
#pragma omp parallel if (par)
    {
        double *acc = malloc(sizeof(double) * (size_t)(inner ? inner : 1));
        if (!acc) {
#pragma omp atomic write
            oom = true;
        }
#pragma omp for schedule(static)
        for (int64_t o = 0; o < outer; o++) {
            if (!acc) continue;
            if (f32) NORMALIZE_BACKWARD_BLOCK(float);
            else NORMALIZE_BACKWARD_BLOCK(double);
        }
        free(acc);
    }
    if (oom) return cr_fail(CR_ERR_OOM, "normalize backward: out of memory for %lld accumulators",
                            (long long)inner);
    return CR_OK;
}

cr_status cr_grad_normalize(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    cr_tensor *y, *nrm, *g;
    cr_status st;
    if ((st = cr_saved_out(n, 0, &y)) || (st = cr_saved_out(n, 1, &nrm))) return st;
    if ((st = cr_op_contiguous(&g, gout[0]))) return st;
    cr_call c;
    cr_call_init(&c, CR_OP_NORMALIZE_BACKWARD, 3, 1);
    c.in[0] = g;
    c.in[1] = y;
    c.in[2] = nrm;
    c.i[0] = n->call.i[0];
    c.f[0] = n->call.f[0];
    if (!(st = cr_tensor_alloc(&c.out[0], y->ndim, y->shape, y->dtype, cr_tensor_dev(y))))
        st = cr_dispatch(&c);
    cr_tensor_free(g);
    if (st) {
        cr_call_drop_outs(&c);
        return st;
    }
    gin[0] = c.out[0];
    return CR_OK;
}

static cr_status normalize_entry(cr_tensor **out, cr_tensor *x, int64_t dim, double eps) {
    *out = NULL;
    CR_CHECK_TENSOR("normalize", x, "input");
    cr_status st = cr_check_float("normalize", x, "input");
    if (st) return st;
    if ((st = cr_check_dim("normalize", &dim, x->ndim, false))) return st;
    if (!(eps >= 0) || !isfinite(eps))
        return cr_fail(CR_ERR_ARG, "normalize: eps = %g; pass a finite eps >= 0 (default 1e-12)",
                       eps);
    cr_dtype dt = x->dtype == CR_DT_F64 ? CR_DT_F64 : CR_DT_F32;
    cr_tensor *xt = NULL, *xc = NULL;
    if ((st = cr_cast_if_needed(&xt, x, dt))) return st;
    st = cr_op_contiguous(&xc, xt);
    cr_tensor_free(xt);
    if (st) return st;
    int64_t kshape[CR_MAX_DIMS];
    for (int d = 0; d < xc->ndim; d++) kshape[d] = d == dim ? 1 : xc->shape[d];
    cr_call c;
    cr_call_init(&c, CR_OP_NORMALIZE, 1, 2);
    c.in[0] = xc;
    c.i[0] = dim;
    c.f[0] = eps;
    if (!(st = cr_tensor_alloc(&c.out[0], xc->ndim, xc->shape, dt, cr_tensor_dev(xc))) &&
        !(st = cr_tensor_alloc(&c.out[1], xc->ndim, kshape, dt, cr_tensor_dev(xc))))
        st = cr_call_finish(NULL, &c, 0, 1u | 2u);
    cr_tensor_free(xc);
    if (st) {
        cr_call_drop_outs(&c);
        return st;
    }
    cr_tensor_free(c.out[1]);
    if (x->dtype != dt) {
        st = cr_op_to(out, c.out[0], x->dtype);
        cr_tensor_free(c.out[0]);
        return st;
    }
    *out = c.out[0];
    return CR_OK;
}

cr_status cr_op_normalize(cr_tensor **out, cr_tensor *x, int64_t dim, double eps) {
    if (cr_autocast_get() == CR_DT_F32) return normalize_entry(out, x, dim, eps);
    cr_autocast_scope s;
    cr_status st = cr_autocast_begin(&s, CR_OP_NORMALIZE, x, NULL, NULL);
    if (!st) st = normalize_entry(out, s.t[0], dim, eps);
    cr_autocast_end(&s);
    return st;
}
