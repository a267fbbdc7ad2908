/* layer_norm.c — layer normalisation over the last `normalized_ndim` dims, with optional
 * elementwise weight and bias of that shape. Rows (the leading dims) are independent and
 * split across OpenMP threads; statistics accumulate in f64. The forward keeps each row's
 * mean and rstd as outputs 1 and 2 for the fused backward op LAYER_NORM_BACKWARD. */
#include <math.h>
#include <omp.h>

#include "elementwise_impl.h"

/* Row count and row length of x for the last nd dims. */
static void ln_geometry(const cr_tensor *x, int nd, int64_t *rows, int64_t *D) {
    *D = 1;
    for (int d = x->ndim - nd; d < x->ndim; d++) *D *= x->shape[d];
    *rows = *D ? x->numel / *D : 0;
    if (!*D) { /* an empty row: count the leading dims directly */
        *rows = 1;
        for (int d = 0; d < x->ndim - nd; d++) *rows *= x->shape[d];
    }
}

/* Sums over a row in f64 kept in LN_LANES independent lanes, so that the compiler
 * vectorises them (one running sum is a chain of dependent adds, ~4 cycles an element);
 * the tail and then the lanes are added in order, so the result depends only on D. EXPR
 * is the term for element j; ACC names the result. */
#define LN_LANES 16
#define LN_ROW_SUM(ACC, EXPR)                                                        \
    do {                                                                             \
        double lane_[LN_LANES] = { 0 };                                              \
        int64_t j = 0;                                                               \
        for (; j + LN_LANES <= D; j += LN_LANES)                                     \
            for (int64_t k_ = 0; k_ < LN_LANES; k_++) {                              \
                const int64_t jj_ = j + k_;                                          \
                lane_[k_] += (EXPR(jj_));                                            \
            }                                                                        \
        double tail_ = 0;                                                            \
        for (; j < D; j++) tail_ += (EXPR(j));                                       \
        for (int k_ = 0; k_ < LN_LANES; k_++) tail_ += lane_[k_];                    \
        ACC = tail_;                                                                 \
    } while (0)

/* Typed row kernels: T is float or double, everything else f64. */
#define LN_X(j) ((double)xr[j])
#define LN_DEV2(j) (((double)xr[j] - m) * ((double)xr[j] - m))
#define LN_FORWARD_ROW(T)                                                            \
    do {                                                                             \
        const T *xr = (const T *)xp + r * D;                                         \
        T *yr = (T *)yp + r * D;                                                     \
        const T *wv = (const T *)wp, *bv = (const T *)bp;                            \
        double s, sq;                                                                \
        LN_ROW_SUM(s, LN_X);                                                         \
        const double m = s / (double)D;                                              \
        LN_ROW_SUM(sq, LN_DEV2);                                                     \
        double rstd = 1.0 / sqrt(sq / (double)D + eps);                              \
        for (int64_t j = 0; j < D; j++) {                                            \
            double v = (xr[j] - m) * rstd;                                           \
            if (wv) v *= wv[j];                                                      \
            if (bv) v += bv[j];                                                      \
            yr[j] = (T)v;                                                            \
        }                                                                            \
        ((T *)mp)[r] = (T)m;                                                         \
        ((T *)rp)[r] = (T)rstd;                                                      \
    } while (0)

/* in: x (contiguous), weight?, bias? (contiguous, x's dtype); out: y, mean [rows],
 * rstd [rows]; i[0] normalized_ndim; f[0] eps. */
cr_status cr_cpu_layer_norm(cr_call *c) {
    cr_tensor *x = c->in[0];
    int64_t rows, D;
    ln_geometry(x, (int)c->i[0], &rows, &D);
    const double eps = c->f[0];
    const char *xp = cr_tensor_ptr(x);
    const char *wp = c->in[1] ? cr_tensor_ptr(c->in[1]) : NULL;
    const char *bp = c->in[2] ? cr_tensor_ptr(c->in[2]) : NULL;
    char *yp = cr_tensor_ptr(c->out[0]), *mp = cr_tensor_ptr(c->out[1]),
         *rp = cr_tensor_ptr(c->out[2]);
    if (D == 0) return CR_OK;
    bool par = x->numel >= CR_PAR_GRAIN && rows > 1;
    if (x->dtype == CR_DT_F32) {
#pragma omp parallel for if (par) schedule(static)
        for (int64_t r = 0; r < rows; r++) LN_FORWARD_ROW(float);
    } else {
#pragma omp parallel for if (par) schedule(static)
        for (int64_t r = 0; r < rows; r++) LN_FORWARD_ROW(double);
    }
    return CR_OK;
}

/* Per row, with xhat = (x-mean)*rstd and gy = g*w:
 *   gx = rstd * (gy - mean(gy) - xhat * mean(gy*xhat))
 * and over rows gw = sum(g*xhat), gb = sum(g), each thread summing into its own f64
 * buffer before the buffers are added up. The two means, then gx and the weight and bias
 * sums in one pass (the common case, all of them wanted with a weight, in a loop of its
 * own without branches). */
#define LN_GY(j) (wv ? (double)gr[j] * wv[j] : (double)gr[j])
#define LN_XHAT(j) (((double)xr[j] - m) * rs)
#define LN_GY_XHAT(j) (LN_GY(j) * LN_XHAT(j))
#define LN_BACKWARD_ROW(T)                                                           \
    do {                                                                             \
        const T *gr = (const T *)gp + r * D, *xr = (const T *)xp + r * D;            \
        const T *wv = (const T *)wp;                                                 \
        const double m = ((const T *)mp)[r], rs = ((const T *)rp)[r];                \
        T *gxr = gxp ? (T *)gxp + r * D : NULL;                                      \
        double a = 0, b = 0;                                                         \
        if (gxr) {                                                                   \
            LN_ROW_SUM(a, LN_GY);                                                    \
            LN_ROW_SUM(b, LN_GY_XHAT);                                               \
            a /= (double)D;                                                          \
            b /= (double)D;                                                          \
        }                                                                            \
        if (gxr && accw && accb && wv) {                                             \
            for (int64_t j = 0; j < D; j++) {                                        \
                const double g = gr[j], xh = LN_XHAT(j);                             \
                gxr[j] = (T)(rs * (g * wv[j] - a - xh * b));                         \
                accw[j] += g * xh;                                                   \
                accb[j] += g;                                                        \
            }                                                                        \
        } else {                                                                     \
            if (gxr)                                                                 \
                for (int64_t j = 0; j < D; j++) gxr[j] = (T)(rs * (LN_GY(j) - a - LN_XHAT(j) * b)); \
            if (accw)                                                                \
                for (int64_t j = 0; j < D; j++) accw[j] += (double)gr[j] * LN_XHAT(j); \
            if (accb)                                                                \
                for (int64_t j = 0; j < D; j++) accb[j] += gr[j];                    \
        }                                                                            \
    } while (0)

/* in: g, x, weight?, mean, rstd (g, x contiguous); out: gx?, gw?, gb?; i[0]
 * normalized_ndim. */
cr_status cr_cpu_layer_norm_backward(cr_call *c) {
    cr_tensor *x = c->in[1];
    int64_t rows, D;
    ln_geometry(x, (int)c->i[0], &rows, &D);
    const char *gp = cr_tensor_ptr(c->in[0]), *xp = cr_tensor_ptr(x);
    const char *wp = c->in[2] ? cr_tensor_ptr(c->in[2]) : NULL;
    const char *mp = cr_tensor_ptr(c->in[3]), *rp = cr_tensor_ptr(c->in[4]);
    char *gxp = c->out[0] ? cr_tensor_ptr(c->out[0]) : NULL;
    const bool want_w = c->out[1] != NULL, want_b = c->out[2] != NULL;
    const bool f32 = x->dtype == CR_DT_F32;
    bool par = x->numel >= CR_PAR_GRAIN && rows > 1;
    int nt = par ? cr_threads() : 1;
    if (nt > rows) nt = (int)(rows > 0 ? rows : 1);
    double *acc = NULL;
    int64_t per = (int64_t)(want_w + want_b) * D; /* accumulator doubles per thread */
    if (per) {
        acc = calloc((size_t)(nt * per), sizeof *acc);
        if (!acc) return cr_fail(CR_ERR_OOM, "layer_norm backward: out of memory for %d x %lld "
                                 "accumulators", nt, (long long)per);
    }
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        int t = omp_get_thread_num();
        double *accw = want_w ? acc + t * per : NULL;
        double *accb = want_b ? acc + t * per + (want_w ? D : 0) : NULL;
        int64_t lo = rows * t / nt, hi = rows * (t + 1) / nt;
        for (int64_t r = lo; r < hi; r++) {
            if (f32) LN_BACKWARD_ROW(float);
            else LN_BACKWARD_ROW(double);
        }
    }
    for (int k = 1; k <= 2; k++) {
        cr_tensor *o = c->out[k];
        if (!o) continue;
        int64_t off = k == 1 ? 0 : (want_w ? D : 0);
        for (int64_t j = 0; j < D; j++) {
            double s = 0;
            for (int t = 0; t < nt; t++) s += acc[t * per + off + j];
            if (f32) ((float *)cr_tensor_ptr(o))[j] = (float)s;
            else ((double *)cr_tensor_ptr(o))[j] = s;
        }
    }
    free(acc);
    return CR_OK;
}

/* weight/bias must have exactly the normalized shape. */
static cr_status check_affine(const cr_tensor *x, int nd, const cr_tensor *v, const char *name) {
    cr_status st = cr_check_same_device("layer_norm", x, v);
    if (st) return st;
    if ((st = cr_check_float("layer_norm", v, name))) return st;
    bool ok = v->ndim == nd;
    for (int d = 0; ok && d < nd; d++) ok = v->shape[d] == x->shape[x->ndim - nd + d];
    if (!ok) {
        char a[160], b[160], s[160];
        return cr_fail(CR_ERR_ARG, "layer_norm: '%s' has shape %s but the normalized shape of "
                       "input %s is %s; pass a %s of that shape", name,
                       cr_shape_str(v, a, sizeof a), cr_shape_str(x, b, sizeof b),
                       cr_dims_str(nd, x->shape + x->ndim - nd, s, sizeof s), name);
    }
    return CR_OK;
}

static cr_status layer_norm_entry(cr_tensor **out, cr_tensor *x, int normalized_ndim,
                           cr_tensor *weight, cr_tensor *bias, double eps) {
    *out = NULL;
    CR_CHECK_TENSOR("layer_norm", x, "input");
    cr_status st = cr_check_float("layer_norm", x, "input");
    if (st) return st;
    char a[160];
    if (normalized_ndim < 1 || normalized_ndim > x->ndim)
        return cr_fail(CR_ERR_ARG, "layer_norm: normalized over %d dims, but the input %s has "
                       "%d; normalized_shape must be 1..%d trailing dims of the input",
                       normalized_ndim, cr_shape_str(x, a, sizeof a), x->ndim, x->ndim);
    if (weight && (st = check_affine(x, normalized_ndim, weight, "weight"))) return st;
    if (bias && (st = check_affine(x, normalized_ndim, bias, "bias"))) return st;
    if (!(eps >= 0) || !isfinite(eps))
        return cr_fail(CR_ERR_ARG, "layer_norm: eps = %g; pass a finite eps >= 0 (default 1e-5)",
                       eps);

    cr_dtype dt = x->dtype == CR_DT_F64 ? CR_DT_F64 : CR_DT_F32;
    cr_tensor *xt = NULL, *xc = NULL, *wt = NULL, *wc = NULL, *bt = NULL, *bc = NULL;
    cr_call c;
    memset(&c, 0, sizeof c);
    if ((st = cr_cast_if_needed(&xt, x, dt)) || (st = cr_op_contiguous(&xc, xt))) goto done;
    if (weight && ((st = cr_cast_if_needed(&wt, weight, dt)) ||
                   (st = cr_op_contiguous(&wc, wt))))
        goto done;
    if (bias && ((st = cr_cast_if_needed(&bt, bias, dt)) || (st = cr_op_contiguous(&bc, bt))))
        goto done;
    if ((st = cr_call_init(&c, CR_OP_LAYER_NORM, 3, 3))) goto done;
    c.in[0] = xc;
    c.in[1] = wc;
    c.in[2] = bc;
    c.i[0] = normalized_ndim;
    c.i[1] = weight != NULL;
    c.i[2] = bias != NULL;
    c.f[0] = eps;
    int64_t rows, D;
    ln_geometry(xc, normalized_ndim, &rows, &D);
    if ((st = cr_tensor_alloc(&c.out[0], xc->ndim, xc->shape, dt, cr_tensor_dev(xc))) ||
        (st = cr_tensor_alloc(&c.out[1], 1, &rows, dt, cr_tensor_dev(xc))) ||
        (st = cr_tensor_alloc(&c.out[2], 1, &rows, dt, cr_tensor_dev(xc))))
        goto done;
    st = cr_call_finish(NULL, &c, 1u | 2u, 2u | 4u);
done:
    cr_tensor_free(xt);
    cr_tensor_free(xc);
    cr_tensor_free(wt);
    cr_tensor_free(wc);
    cr_tensor_free(bt);
    cr_tensor_free(bc);
    if (st) {
        cr_call_drop_outs(&c);
        return st;
    }
    cr_tensor_free(c.out[1]);
    cr_tensor_free(c.out[2]);
    if (x->dtype != dt) {
        st = cr_op_to(out, c.out[0], x->dtype);
        cr_tensor_free(c.out[0]);
        return st;
    }
    *out = c.out[0];
    return CR_OK;
}

cr_status cr_op_layer_norm(cr_tensor **out, cr_tensor *x, int normalized_ndim,
                           cr_tensor *weight, cr_tensor *bias, double eps) {
    if (cr_autocast_get() == CR_DT_F32) return layer_norm_entry(out, x, normalized_ndim, weight, bias, eps);
    cr_autocast_scope s;
    cr_status st = cr_autocast_begin(&s, CR_OP_LAYER_NORM, x, weight, bias);
    if (!st) st = layer_norm_entry(out, s.t[0], normalized_ndim, s.t[1], s.t[2], eps);
    cr_autocast_end(&s);
    return st;
}

cr_status cr_grad_layer_norm(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    const bool has_w = n->call.i[1], has_b = n->call.i[2];
    const bool need_x = n->edges[0].node, need_w = has_w && n->edges[1].node,
               need_b = has_b && n->edges[2].node;
    if (!need_x && !need_w && !need_b) return CR_OK;
    cr_tensor *x, *w = NULL, *mean, *rstd, *g = NULL;
    cr_status st;
    if ((st = cr_saved_in(n, 0, &x)) || (has_w && (st = cr_saved_in(n, 1, &w))) ||
        (st = cr_saved_out(n, 1, &mean)) || (st = cr_saved_out(n, 2, &rstd)))
        return st;
    if ((st = cr_op_contiguous(&g, gout[0]))) return st;
    const int nd = (int)n->call.i[0];
    const int64_t *pshape = x->shape + x->ndim - nd;
    cr_call c;
    if ((st = cr_call_init(&c, CR_OP_LAYER_NORM_BACKWARD, 5, 3))) goto done;
    c.in[0] = g;
    c.in[1] = x;
    c.in[2] = w;
    c.in[3] = mean;
    c.in[4] = rstd;
    c.i[0] = nd;
    if ((need_x && (st = cr_tensor_alloc(&c.out[0], x->ndim, x->shape, x->dtype,
                                         cr_tensor_dev(x)))) ||
        (need_w && (st = cr_tensor_alloc(&c.out[1], nd, pshape, x->dtype, cr_tensor_dev(x)))) ||
        (need_b && (st = cr_tensor_alloc(&c.out[2], nd, pshape, x->dtype, cr_tensor_dev(x)))))
        goto done;
    if ((st = cr_dispatch(&c))) goto done;
    for (int k = 0; k < 3; k++) {
        gin[k] = c.out[k];
        c.out[k] = NULL;
    }
done:
    cr_call_drop_outs(&c);
    cr_call_release_ins(&c);
    cr_tensor_free(g);
    return st;
}
