/* softmax.c — softmax and log_softmax along one dim, stable (the max is subtracted
 * first). The input is seen as [outer, C, inner] with the softmax over C. The reference
 * path walks one (outer, inner) position at a time in double; the fast path (f32/f64)
 * works on whole rows when inner is 1 and on blocks of inner positions otherwise, in the
 * input's type with double sums, so the loops vectorise (f32 exp via cr_expf_fast).
 * Derivatives use the saved output:
 * softmax  dx = y * (g - sum(g * y)),  log_softmax  dx = g - exp(y) * sum(g). Halves run
 * through f32. */
#include <math.h>

#include "reduce_impl.h"

typedef struct {
    int64_t outer, C, inner;
} sm_shape;

static sm_shape sm_split(const cr_tensor *t, int64_t dim) {
    sm_shape s = {1, 1, 1};
    for (int d = 0; d < t->ndim; d++) {
        if (d < dim) s.outer *= t->shape[d];
        else if (d == dim) s.C = t->shape[d];
        else s.inner *= t->shape[d];
    }
    return s;
}

static double ld(const char *p, cr_dtype dt, int64_t i) {
    return dt == CR_DT_F32 ? ((const float *)p)[i] : ((const double *)p)[i];
}
static void stv(char *p, cr_dtype dt, int64_t i, double v) {
    if (dt == CR_DT_F32) ((float *)p)[i] = (float)v;
    else ((double *)p)[i] = v;
}

/* ---- forward, reference: one position at a time, three passes over C in double ---- */
static void softmax_reference(const char *x, char *y, cr_dtype dt, sm_shape s, bool is_log) {
    int64_t npos = s.outer * s.inner;
#pragma omp parallel for if (npos * s.C >= CR_PAR_GRAIN) schedule(static)
    for (int64_t q = 0; q < npos; q++) {
        int64_t base = (q / s.inner) * s.C * s.inner + q % s.inner;
        double mx = -INFINITY, sum = 0;
        for (int64_t c = 0; c < s.C; c++) {
            double v = ld(x, dt, base + c * s.inner);
            if (v > mx || v != v) mx = v;
        }
        for (int64_t c = 0; c < s.C; c++) sum += exp(ld(x, dt, base + c * s.inner) - mx);
        double lse = mx + log(sum);
        for (int64_t c = 0; c < s.C; c++) {
            double v = ld(x, dt, base + c * s.inner);
            stv(y, dt, base + c * s.inner, is_log ? v - lse : exp(v - mx) / sum);
        }
    }
}

/* ---- forward, fast ----
 * f32 uses cr_expf_fast so the exp loops vectorise; sums are in double. A NaN anywhere in
 * a row makes its sum NaN, so the whole row comes out NaN as on the reference path. */
enum { SM_BLOCK = 64 }; /* inner positions handled together when inner > 1 */

static void softmax_row_f32(const float *x, float *y, int64_t C, bool is_log) {
    float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int64_t c = 0; c < C; c++) mx = x[c] > mx ? x[c] : mx;
    double sum = 0;
    if (is_log) {
#pragma omp simd reduction(+ : sum)
        for (int64_t c = 0; c < C; c++) sum += cr_expf_fast(x[c] - mx);
        float sub = (float)(mx + log(sum));
        for (int64_t c = 0; c < C; c++) y[c] = x[c] - sub;
    } else {
#pragma omp simd reduction(+ : sum)
        for (int64_t c = 0; c < C; c++) {
            float e = cr_expf_fast(x[c] - mx);
            y[c] = e;
            sum += e;
        }
        float inv = (float)(1.0 / sum);
        for (int64_t c = 0; c < C; c++) y[c] *= inv;
    }
}

static void softmax_row_f64(const double *x, double *y, int64_t C, bool is_log) {
    double mx = -INFINITY, sum = 0;
    for (int64_t c = 0; c < C; c++) mx = x[c] > mx ? x[c] : mx;
    for (int64_t c = 0; c < C; c++) sum += exp(x[c] - mx);
    double lse = mx + log(sum), inv = 1.0 / sum;
    for (int64_t c = 0; c < C; c++) y[c] = is_log ? x[c] - lse : exp(x[c] - mx) * inv;
}

/* A block of jn inner positions of one outer index: the C loop is outside, so each
 * inner loop runs over jn contiguous elements. */
#define SOFTMAX_BLOCK(T, EXP)                                                        \
    do {                                                                             \
        const T *xb = (const T *)x + o * s.C * s.inner + j0;                         \
        T *yb = (T *)y + o * s.C * s.inner + j0;                                     \
        T mx[SM_BLOCK], f[SM_BLOCK];                                                 \
        double sum[SM_BLOCK];                                                        \
        for (int64_t j = 0; j < jn; j++) mx[j] = -INFINITY, sum[j] = 0;              \
        for (int64_t c = 0; c < s.C; c++)                                            \
            for (int64_t j = 0; j < jn; j++) {                                       \
                T v = xb[c * s.inner + j];                                           \
                mx[j] = v > mx[j] ? v : mx[j];                                       \
            }                                                                        \
        for (int64_t c = 0; c < s.C; c++)                                            \
            for (int64_t j = 0; j < jn; j++) {                                       \
                T e = EXP(xb[c * s.inner + j] - mx[j]);                              \
                if (!is_log) yb[c * s.inner + j] = e;                                \
                sum[j] += e;                                                         \
            }                                                                        \
        for (int64_t j = 0; j < jn; j++)                                             \
            f[j] = is_log ? (T)(mx[j] + log(sum[j])) : (T)(1.0 / sum[j]);            \
        for (int64_t c = 0; c < s.C; c++)                                            \
            for (int64_t j = 0; j < jn; j++) {                                       \
                if (is_log) yb[c * s.inner + j] = xb[c * s.inner + j] - f[j];        \
                else yb[c * s.inner + j] *= f[j];                                    \
            }                                                                        \
    } while (0)

static void softmax_fast(const char *x, char *y, cr_dtype dt, sm_shape s, bool is_log) {
    bool par = s.outer * s.C * s.inner >= CR_PAR_GRAIN;
    if (s.inner == 1) {
#pragma omp parallel for if (par) schedule(static)
        for (int64_t r = 0; r < s.outer; r++) {
            if (dt == CR_DT_F32)
                softmax_row_f32((const float *)x + r * s.C, (float *)y + r * s.C, s.C, is_log);
            else
                softmax_row_f64((const double *)x + r * s.C, (double *)y + r * s.C, s.C, is_log);
        }
        return;
    }
    int64_t blocks = (s.inner + SM_BLOCK - 1) / SM_BLOCK;
#pragma omp parallel for if (par) schedule(static)
    for (int64_t it = 0; it < s.outer * blocks; it++) {
        int64_t o = it / blocks, j0 = (it % blocks) * SM_BLOCK;
        int64_t jn = s.inner - j0 < SM_BLOCK ? s.inner - j0 : SM_BLOCK;
        if (dt == CR_DT_F32) SOFTMAX_BLOCK(float, cr_expf_fast);
        else SOFTMAX_BLOCK(double, exp);
    }
}

static cr_status softmax_kernel(cr_call *c, bool is_log) {
    cr_tensor *xc;
    cr_status st = cr_reduce_contig_as(&xc, c->in[0], c->in[0]->dtype);
    if (st) return st;
    sm_shape s = sm_split(xc, c->i[0]);
    if (cr_fast_paths_enabled())
        softmax_fast(cr_tensor_ptr(xc), cr_tensor_ptr(c->out[0]), xc->dtype, s, is_log);
    else
        softmax_reference(cr_tensor_ptr(xc), cr_tensor_ptr(c->out[0]), xc->dtype, s, is_log);
    cr_tensor_free(xc);
    return CR_OK;
}

static cr_status softmax_entry(cr_tensor **out, cr_op op, cr_tensor *t, int64_t dim) {
    const char *name = cr_op_name(op);
    *out = NULL;
    CR_CHECK_TENSOR(name, t, "self");
    cr_status st = cr_check_float(name, t, "self");
    if (st || (st = cr_check_dim(name, &dim, t->ndim, false))) return st;
    if (cr_dtype_is_half(t->dtype)) { /* through f32, recorded */
        cr_tensor *f = NULL, *r = NULL;
        if (!(st = cr_op_to(&f, t, CR_DT_F32)) && !(st = softmax_entry(&r, op, f, dim)))
            st = cr_op_to(out, r, t->dtype);
        cr_tensor_free(f);
        cr_tensor_free(r);
        return st;
    }
    cr_call c;
    if ((st = cr_call_init(&c, op, 1, 1))) return st;
    c.in[0] = t;
    c.i[0] = dim;
    if ((st = cr_tensor_alloc(&c.out[0], t->ndim, t->shape, t->dtype, cr_tensor_dev(t))))
        return st;
    return cr_call_finish(out, &c, 0, 1);
}

/* Autocast: softmax and log-softmax compute in f32. */
static cr_status softmax_op(cr_tensor **out, cr_op op, cr_tensor *t, int64_t dim) {
    if (cr_autocast_get() == CR_DT_F32) return softmax_entry(out, op, t, dim);
    cr_autocast_scope s;
    cr_status st = cr_autocast_begin(&s, op, t, NULL, NULL);
    if (!st) st = softmax_entry(out, op, s.t[0], dim);
    cr_autocast_end(&s);
    return st;
}

/* ---- backward: one kernel per rule, from the saved output ----
 * Reference: one position at a time in double. Fast (f32/f64 rows, inner == 1): typed
 * loops, f32 exp through cr_expf_fast. */
static void softmax_backward_reference(const char *yp, const char *gp, char *dp, cr_dtype dt,
                                       sm_shape s, bool is_log) {
    int64_t npos = s.outer * s.inner, is = s.inner;
#pragma omp parallel for if (npos * s.C >= CR_PAR_GRAIN) schedule(static)
    for (int64_t q = 0; q < npos; q++) {
        int64_t base = (q / is) * s.C * is + q % is;
        double dot = 0;
        for (int64_t c = 0; c < s.C; c++)
            dot += ld(gp, dt, base + c * is) * (is_log ? 1.0 : ld(yp, dt, base + c * is));
        for (int64_t c = 0; c < s.C; c++) {
            int64_t i = base + c * is;
            double yv = ld(yp, dt, i), gv = ld(gp, dt, i);
            stv(dp, dt, i, is_log ? gv - exp(yv) * dot : yv * (gv - dot));
        }
    }
}

static void softmax_backward_row_f32(const float *y, const float *g, float *dx, int64_t C,
                                     bool is_log) {
    double dot = 0;
    if (is_log) {
#pragma omp simd reduction(+ : dot)
        for (int64_t c = 0; c < C; c++) dot += g[c];
        float d = (float)dot;
        for (int64_t c = 0; c < C; c++) dx[c] = g[c] - cr_expf_fast(y[c]) * d;
    } else {
#pragma omp simd reduction(+ : dot)
        for (int64_t c = 0; c < C; c++) dot += (double)(g[c] * y[c]);
        float d = (float)dot;
        for (int64_t c = 0; c < C; c++) dx[c] = y[c] * (g[c] - d);
    }
}

static void softmax_backward_row_f64(const double *y, const double *g, double *dx, int64_t C,
                                     bool is_log) {
    double dot = 0;
    for (int64_t c = 0; c < C; c++) dot += is_log ? g[c] : g[c] * y[c];
    for (int64_t c = 0; c < C; c++) dx[c] = is_log ? g[c] - exp(y[c]) * dot : y[c] * (g[c] - dot);
}

/* On a GPU the rule is composed of ops: log-softmax dx = g - exp(y) * sum(g), softmax
 * dx = y * (g - sum(g * y)), sums along the dim. */
static cr_status softmax_backward_ops(cr_tensor *y, cr_tensor *g, int64_t dim, bool is_log,
                                      cr_tensor **dx) {
    cr_tensor *t[3] = {0};
    uint32_t dims = 1u << dim;
    cr_status st;
    if (is_log) {
        if (!(st = cr_op_sum(&t[0], g, dims, true)) && !(st = cr_op_exp(&t[1], y)) &&
            !(st = cr_op_mul(&t[2], t[1], t[0])))
            st = cr_op_sub(dx, g, t[2]);
    } else {
        if (!(st = cr_op_mul(&t[0], g, y)) && !(st = cr_op_sum(&t[1], t[0], dims, true)) &&
            !(st = cr_op_sub(&t[2], g, t[1])))
            st = cr_op_mul(dx, y, t[2]);
    }
    for (int k = 0; k < 3; k++) cr_tensor_free(t[k]);
    return st;
}

static cr_status softmax_backward(cr_node *n, cr_tensor **gout, cr_tensor **gin, bool is_log) {
    cr_tensor *y, *g = NULL, *dx = NULL;
    cr_status st = cr_saved_out(n, 0, &y);
    if (st) return st;
    if (!cr_tensor_on_cpu(y)) return softmax_backward_ops(y, gout[0], n->call.i[0], is_log, &gin[0]);
    cr_dtype dt = y->dtype;
    if ((st = cr_reduce_contig_as(&g, gout[0], dt)) || (st = cr_tensor_alloc_like(&dx, g)))
        goto done;
    sm_shape s = sm_split(y, n->call.i[0]);
    const char *yp = cr_tensor_ptr(y), *gp = cr_tensor_ptr(g);
    char *dp = cr_tensor_ptr(dx);
    if (cr_fast_paths_enabled() && s.inner == 1) {
#pragma omp parallel for if (s.outer * s.C >= CR_PAR_GRAIN) schedule(static)
        for (int64_t r = 0; r < s.outer; r++) {
            int64_t o = r * s.C;
            if (dt == CR_DT_F32)
                softmax_backward_row_f32((const float *)yp + o, (const float *)gp + o,
                                         (float *)dp + o, s.C, is_log);
            else
                softmax_backward_row_f64((const double *)yp + o, (const double *)gp + o,
                                         (double *)dp + o, s.C, is_log);
        }
    } else {
        softmax_backward_reference(yp, gp, dp, dt, s, is_log);
    }
    gin[0] = dx;
    dx = NULL;
done:
    cr_tensor_free(g);
    cr_tensor_free(dx);
    return st;
}

cr_status cr_cpu_softmax(cr_call *c) { return softmax_kernel(c, false); }
cr_status cr_cpu_log_softmax(cr_call *c) { return softmax_kernel(c, true); }
cr_status cr_op_softmax(cr_tensor **out, cr_tensor *t, int64_t dim) {
    return softmax_op(out, CR_OP_SOFTMAX, t, dim);
}
cr_status cr_op_log_softmax(cr_tensor **out, cr_tensor *t, int64_t dim) {
    return softmax_op(out, CR_OP_LOG_SOFTMAX, t, dim);
}
cr_status cr_grad_softmax(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    return softmax_backward(n, gout, gin, false);
}
cr_status cr_grad_log_softmax(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    return softmax_backward(n, gout, gin, true);
}
