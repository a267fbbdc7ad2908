/* reduce_stats.c — variance, p-norms and logsumexp over a set of dims. Each walks its
 * reduced elements in chunks converted to double (exact for every dtype, and loops the
 * compiler vectorises), so f32 statistics are computed in f64: variance by two passes per
 * chunk merged with Chan's formula, logsumexp by a running (max, sum of exp) pair. The
 * derivative rules compute d out / d x in one pass and multiply by the expanded grad. */
#include <math.h>

#include "reduce_impl.h"

enum { CHUNK = 256 };

static void load_chunk(double *buf, const char *p, int64_t stride, int64_t n, cr_dtype dt) {
    if (dt == CR_DT_F32) {
        const float *f = (const float *)p;
        if (stride == 1)
            for (int64_t i = 0; i < n; i++) buf[i] = f[i];
        else
            for (int64_t i = 0; i < n; i++) buf[i] = f[i * stride];
    } else if (dt == CR_DT_F64) {
        const double *f = (const double *)p;
        for (int64_t i = 0; i < n; i++) buf[i] = f[i * stride];
    } else {
        int64_t es = (int64_t)cr_dtype_size(dt);
        for (int64_t i = 0; i < n; i++) buf[i] = cr_load_f64(p + i * stride * es, dt);
    }
}

static void store_chunk(char *p, int64_t stride, int64_t n, cr_dtype dt, const double *buf) {
    if (dt == CR_DT_F32) {
        float *f = (float *)p;
        for (int64_t i = 0; i < n; i++) f[i * stride] = (float)buf[i];
    } else if (dt == CR_DT_F64) {
        double *f = (double *)p;
        for (int64_t i = 0; i < n; i++) f[i * stride] = buf[i];
    } else {
        int64_t es = (int64_t)cr_dtype_size(dt);
        for (int64_t i = 0; i < n; i++) cr_store_f64(p + i * stride * es, dt, buf[i]);
    }
}

/* Every chunk of a run: `buf` holds m elements, the first at run index i0. */
#define FOR_CHUNKS(dt, p, stride, n)                                                 \
    double buf[CHUNK];                                                               \
    int64_t es_ = (int64_t)cr_dtype_size(dt);                                        \
    for (int64_t i0 = 0, m; i0 < (n) && (m = (n) - i0 < CHUNK ? (n) - i0 : CHUNK,   \
                                          load_chunk(buf, (p) + i0 * (stride) * es_, \
                                                     (stride), m, (dt)), 1);         \
         i0 += CHUNK)

/* Shared by every op here: the input dtype, the output, and the op's parameter. */
typedef struct {
    cr_dtype dt, odt;
    char *out;
    double param; /* correction (var), p (norm) */
    bool fast;    /* contiguous f32 runs of logsumexp use cr_expf_fast */
} st_ctx;

static void st_store(const st_ctx *s, int64_t k, double v) {
    cr_store_f64(s->out + k * (int64_t)cr_dtype_size(s->odt), s->odt, v);
}

/* Allocates, dispatches and records a reduction with one float output. */
static cr_status stat_op(cr_tensor **out, cr_op op, cr_tensor *t, uint32_t dims, bool keepdim,
                         cr_dtype result, double param, unsigned save_in, unsigned save_out) {
    const char *name = cr_op_name(op);
    *out = NULL;
    int ndim;
    int64_t shape[CR_MAX_DIMS];
    cr_status st = cr_reduce_out_shape(name, t, dims, keepdim, &ndim, shape);
    if (st) return st;
    cr_call c;
    if ((st = cr_call_init(&c, op, 1, 1))) return st;
    c.in[0] = t;
    c.i[0] = dims;
    c.i[1] = keepdim;
    c.f[0] = param;
    if ((st = cr_tensor_alloc(&c.out[0], ndim, shape, result, cr_tensor_dev(t)))) return st;
    return cr_call_finish(out, &c, save_in, save_out);
}

static cr_status run_stat(cr_call *c, const cr_reduce_def *def) {
    cr_tensor *x = c->in[0], *o = c->out[0];
    cr_reduce_plan p;
    cr_reduce_plan_init(&p, x, (uint32_t)c->i[0]);
    st_ctx s = {x->dtype, o->dtype, cr_tensor_ptr(o), c->f[0], cr_fast_paths_enabled()};
    cr_reduce_run(&p, cr_tensor_ptr(x), def, &s, x->dtype);
    return CR_OK;
}

/* Weight pass for the derivative rules: w[x] = fn(x, out[k]) over a contiguous copy of
 * the input, then gin = expand(g) * w. */
typedef double (*weight_fn)(double x, double out, double p);
typedef struct {
    cr_dtype dt;
    const char *xbase;
    char *wbase;
    const double *res; /* the results, one per output, as double */
    weight_fn fn;
    double p;
} w_ctx;

static void w_init(cr_reduce_acc *a) { (void)a; }
static void w_seg(cr_reduce_acc *a, const char *p, int64_t stride, int64_t n, int64_t pos) {
    (void)pos;
    const w_ctx *w = a->ctx;
    double r = w->res[a->k];
    char *wp = w->wbase + (p - w->xbase);
    FOR_CHUNKS(w->dt, p, stride, n) {
        for (int64_t i = 0; i < m; i++) buf[i] = w->fn(buf[i], r, w->p);
        store_chunk(wp + i0 * stride * es_, stride, m, w->dt, buf);
    }
}
static void w_merge(cr_reduce_acc *into, const cr_reduce_acc *from) { (void)into, (void)from; }
static void w_done(const cr_reduce_acc *a, int64_t k) { (void)a, (void)k; }
static const cr_reduce_def w_def = {w_init, w_seg, w_merge, w_done};

static cr_status weight_grad(cr_node *n, cr_tensor **gout, cr_tensor **gin, weight_fn fn,
                             double param) {
    const cr_input_meta *m = &n->in_meta[0];
    uint32_t dims = (uint32_t)n->call.i[0];
    cr_tensor *x, *res, *xc = NULL, *rc = NULL, *w = NULL, *ge = NULL;
    cr_status st;
    if ((st = cr_saved_in(n, 0, &x)) || (st = cr_saved_out(n, 0, &res))) return st;
    if ((st = cr_reduce_contig_as(&xc, x, m->dtype)) ||
        (st = cr_reduce_contig_as(&rc, res, CR_DT_F64)) ||
        (st = cr_tensor_alloc(&w, m->ndim, m->shape, m->dtype, m->device)))
        goto done;
    cr_reduce_plan p;
    cr_reduce_plan_init(&p, xc, dims);
    w_ctx c = {m->dtype, cr_tensor_ptr(xc), cr_tensor_ptr(w), (const double *)cr_tensor_ptr(rc),
               fn, param};
    cr_reduce_run(&p, c.xbase, &w_def, &c, m->dtype);
    if ((st = cr_reduce_grad_expand(&ge, gout[0], m, dims))) goto done;
    st = cr_op_mul(&gin[0], ge, w);
done:
    cr_tensor_free(xc);
    cr_tensor_free(rc);
    cr_tensor_free(w);
    cr_tensor_free(ge);
    return st;
}

/* ---- var: (count v0, mean v1, M2 v2), Chan's merge ---- */
static void var_init(cr_reduce_acc *a) { a->v0 = a->v1 = a->v2 = 0; }
static void var_add(cr_reduce_acc *a, double nb, double mb, double m2b) {
    if (nb == 0) return;
    double na = a->v0, n = na + nb, delta = mb - a->v1;
    a->v1 += delta * nb / n;
    a->v2 += m2b + delta * delta * na * nb / n;
    a->v0 = n;
}
static void var_seg(cr_reduce_acc *a, const char *p, int64_t stride, int64_t n, int64_t pos) {
    (void)pos;
    const st_ctx *s = a->ctx;
    FOR_CHUNKS(s->dt, p, stride, n) {
        double sum = 0, m2 = 0;
#pragma omp simd reduction(+ : sum)
        for (int64_t i = 0; i < m; i++) sum += buf[i];
        double mean = sum / (double)m;
#pragma omp simd reduction(+ : m2)
        for (int64_t i = 0; i < m; i++) m2 += (buf[i] - mean) * (buf[i] - mean);
        var_add(a, (double)m, mean, m2);
    }
}
static void var_merge(cr_reduce_acc *into, const cr_reduce_acc *from) {
    var_add(into, from->v0, from->v1, from->v2);
}
static void var_done(const cr_reduce_acc *a, int64_t k) {
    const st_ctx *s = a->ctx;
    double denom = a->v0 - s->param;
    st_store(s, k, a->v2 / (denom > 0 ? denom : 0.0));
}
static const cr_reduce_def var_def = {var_init, var_seg, var_merge, var_done};

cr_status cr_cpu_var(cr_call *c) { return run_stat(c, &var_def); }
cr_status cr_op_var(cr_tensor **out, cr_tensor *t, uint32_t dims, int64_t correction,
                    bool keepdim) {
    *out = NULL;
    CR_CHECK_TENSOR("var", t, "self");
    cr_status st = cr_check_float("var", t, "self");
    if (st) return st;
    if (correction < 0)
        return cr_fail(CR_ERR_ARG, "var: correction %lld is negative; use 0 (population) or 1 "
                       "(unbiased)", (long long)correction);
    return stat_op(out, CR_OP_VAR, t, dims, keepdim, t->dtype, (double)correction, 1, 0);
}
/* d var = g * 2 (x - mean) / (N - correction) */
cr_status cr_grad_var(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    const cr_input_meta *m = &n->in_meta[0];
    uint32_t dims = (uint32_t)n->call.i[0];
    int64_t N = 1;
    for (int d = 0; d < m->ndim; d++)
        if (dims == 0 || (dims & (1u << d))) N *= m->shape[d];
    double denom = (double)N - n->call.f[0];
    cr_tensor *x, *mean = NULL, *dev = NULL, *ge = NULL, *s = NULL, *t = NULL;
    cr_status st;
    if ((st = cr_saved_in(n, 0, &x))) return st;
    if ((st = cr_op_mean(&mean, x, dims, true)) || (st = cr_op_sub(&dev, x, mean)) ||
        (st = cr_reduce_grad_expand(&ge, gout[0], m, dims)) ||
        (st = cr_tensor_scalar(&s, denom > 0 ? 2.0 / denom : INFINITY, m->dtype)) ||
        (st = cr_op_mul(&t, dev, s)))
        goto done;
    st = cr_op_mul(&gin[0], ge, t);
done:
    cr_tensor_free(mean);
    cr_tensor_free(dev);
    cr_tensor_free(ge);
    cr_tensor_free(s);
    cr_tensor_free(t);
    return st;
}

/* ---- norm: v0 = sum |x|^p, or max/min |x| for p = +-inf ---- */
static void norm_init(cr_reduce_acc *a) {
    const st_ctx *s = a->ctx;
    a->v0 = s->param == -INFINITY ? INFINITY : 0;
}
static void norm_seg(cr_reduce_acc *a, const char *p, int64_t stride, int64_t n, int64_t pos) {
    (void)pos;
    const st_ctx *s = a->ctx;
    double q = s->param;
    FOR_CHUNKS(s->dt, p, stride, n) {
        double acc = 0;
        if (q == 2) {
#pragma omp simd reduction(+ : acc)
            for (int64_t i = 0; i < m; i++) acc += buf[i] * buf[i];
        } else if (q == 1) {
#pragma omp simd reduction(+ : acc)
            for (int64_t i = 0; i < m; i++) acc += fabs(buf[i]);
        } else if (q == 0) {
            for (int64_t i = 0; i < m; i++) acc += buf[i] != 0;
        } else if (isinf(q)) {
            acc = a->v0;
            for (int64_t i = 0; i < m; i++) {
                double v = fabs(buf[i]);
                if (v != v || (q > 0 ? v > acc : v < acc)) acc = v;
                if (acc != acc) break;
            }
            a->v0 = acc;
            continue;
        } else {
            for (int64_t i = 0; i < m; i++) acc += pow(fabs(buf[i]), q);
        }
        a->v0 += acc;
    }
}
static void norm_merge(cr_reduce_acc *into, const cr_reduce_acc *from) {
    const st_ctx *s = into->ctx;
    if (!isinf(s->param)) into->v0 += from->v0;
    else if (from->v0 != from->v0 || (s->param > 0 ? from->v0 > into->v0 : from->v0 < into->v0))
        into->v0 = from->v0;
}
static void norm_done(const cr_reduce_acc *a, int64_t k) {
    const st_ctx *s = a->ctx;
    double q = s->param, v = a->v0;
    if (q == 2) v = sqrt(v);
    else if (q != 1 && q != 0 && !isinf(q)) v = pow(v, 1.0 / q);
    st_store(s, k, v);
}
static const cr_reduce_def norm_def = {norm_init, norm_seg, norm_merge, norm_done};

cr_status cr_cpu_norm(cr_call *c) { return run_stat(c, &norm_def); }
cr_status cr_op_norm(cr_tensor **out, cr_tensor *t, double p, uint32_t dims, bool keepdim) {
    *out = NULL;
    CR_CHECK_TENSOR("norm", t, "self");
    cr_status st = cr_check_float("norm", t, "self");
    if (st) return st;
    if (p != p || (p < 0 && p != -INFINITY))
        return cr_fail(CR_ERR_ARG, "norm: p = %g is not a norm order; use p > 0 (2 for "
                       "Euclidean), 0, inf or -inf", p);
    int64_t R = 1;
    for (int d = 0; d < t->ndim; d++)
        if (dims == 0 || (dims & (1u << d))) R *= t->shape[d];
    if (isinf(p) && R == 0)
        return cr_fail(CR_ERR_ARG, "norm: the %s-norm of zero elements is undefined; reduce "
                       "over non-empty dims", p > 0 ? "inf" : "-inf");
    return stat_op(out, CR_OP_NORM, t, dims, keepdim, t->dtype, p, 1, 1);
}
static double w_norm2(double x, double r, double p) { (void)p; return r > 0 ? x / r : 0.0; }
static double w_norm1(double x, double r, double p) {
    (void)r, (void)p;
    return (x > 0) - (x < 0);
}
static double w_normp(double x, double r, double p) {
    if (r <= 0 || x == 0) return 0.0;
    return ((x > 0) - (x < 0)) * pow(fabs(x) / r, p - 1);
}
/* p=2: x / norm (0 at norm 0, not nan); p=1: sign(x); inf: sign(x) on the ties, split
 * evenly; general p: sign(x) (|x| / norm)^(p-1). */
cr_status cr_grad_norm(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    double p = n->call.f[0];
    if (isinf(p)) {
        cr_tensor *x, *res;
        cr_status st;
        if ((st = cr_saved_in(n, 0, &x)) || (st = cr_saved_out(n, 0, &res))) return st;
        return cr_reduce_tie_grad(&gin[0], gout[0], x, res, &n->in_meta[0],
                                  (uint32_t)n->call.i[0], true);
    }
    const cr_input_meta *m = &n->in_meta[0];
    if (p == 0) return cr_zeros_meta(&gin[0], m);
    if (m->device.type != CR_DEV_CPU) {
        cr_tensor *x, *res;
        cr_status st;
        if ((st = cr_saved_in(n, 0, &x)) || (st = cr_saved_out(n, 0, &res))) return st;
        cr_reduce_weight w = p == 2 ? CR_REDUCE_W_NORM2 : p == 1 ? CR_REDUCE_W_NORM1
                                                                 : CR_REDUCE_W_NORMP;
        return cr_reduce_weight_grad_ops(&gin[0], gout[0], x, res, m, (uint32_t)n->call.i[0], w, p);
    }
    return weight_grad(n, gout, gin, p == 2 ? w_norm2 : p == 1 ? w_norm1 : w_normp, p);
}

/* ---- logsumexp: v0 = running max, v1 = sum of exp(x - v0), v2 = NaN seen ---- */
static void lse_init(cr_reduce_acc *a) {
    a->v0 = -INFINITY;
    a->v1 = 0;
    a->v2 = 0;
}
/* Adds a partial (max mb, sum sb) to the running pair. */
static void lse_add(cr_reduce_acc *a, double mb, double sb) {
    if (mb == -INFINITY) return;
    if (mb == INFINITY || a->v0 == INFINITY) {
        a->v0 = INFINITY;
        return;
    }
    if (mb > a->v0) {
        a->v1 = a->v1 * exp(a->v0 - mb) + sb;
        a->v0 = mb;
    } else {
        a->v1 += sb * exp(mb - a->v0);
    }
}
static void lse_seg(cr_reduce_acc *a, const char *p, int64_t stride, int64_t n, int64_t pos) {
    (void)pos;
    const st_ctx *s = a->ctx;
    if (s->fast && s->dt == CR_DT_F32 && stride == 1) {
        const float *x = (const float *)p;
        for (int64_t b0 = 0; b0 < n; b0 += 4096) {
            int64_t bn = n - b0 < 4096 ? n - b0 : 4096;
            const float *xb = x + b0;
            float mx = -INFINITY;
            int nan = 0;
#pragma omp simd reduction(max : mx) reduction(| : nan)
            for (int64_t i = 0; i < bn; i++) {
                mx = xb[i] > mx ? xb[i] : mx;
                nan |= xb[i] != xb[i];
            }
            if (nan) a->v2 = 1;
            if (isinf(mx)) {
                lse_add(a, mx, 0);
                continue;
            }
            double sum = 0;
#pragma omp simd reduction(+ : sum)
            for (int64_t i = 0; i < bn; i++) sum += cr_expf_fast(xb[i] - mx);
            lse_add(a, mx, sum);
        }
        return;
    }
    FOR_CHUNKS(s->dt, p, stride, n) {
        double mx = -INFINITY, sum = 0;
        for (int64_t i = 0; i < m; i++) {
            if (buf[i] != buf[i]) a->v2 = 1;
            mx = buf[i] > mx ? buf[i] : mx;
        }
        if (mx == -INFINITY || mx == INFINITY) {
            lse_add(a, mx, 0);
            continue;
        }
        for (int64_t i = 0; i < m; i++) sum += exp(buf[i] - mx);
        lse_add(a, mx, sum);
    }
}
static void lse_merge(cr_reduce_acc *into, const cr_reduce_acc *from) {
    if (from->v2) into->v2 = 1;
    lse_add(into, from->v0, from->v1);
}
static void lse_done(const cr_reduce_acc *a, int64_t k) {
    const st_ctx *s = a->ctx;
    double v = a->v2 ? NAN : isinf(a->v0) ? a->v0 : a->v0 + log(a->v1);
    st_store(s, k, v);
}
static const cr_reduce_def lse_def = {lse_init, lse_seg, lse_merge, lse_done};

cr_status cr_cpu_logsumexp(cr_call *c) { return run_stat(c, &lse_def); }
cr_status cr_op_logsumexp(cr_tensor **out, cr_tensor *t, uint32_t dims, bool keepdim) {
    *out = NULL;
    CR_CHECK_TENSOR("logsumexp", t, "self");
    cr_dtype r = cr_dtype_is_float(t->dtype) ? t->dtype : CR_DT_F32;
    return stat_op(out, CR_OP_LOGSUMEXP, t, dims, keepdim, r, 0, 1, 1);
}
static double w_lse(double x, double r, double p) {
    (void)p;
    return r == -INFINITY ? 0.0 : exp(x - r);
}
/* d lse = g * exp(x - lse): the softmax over the reduced dims. */
cr_status cr_grad_logsumexp(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    const cr_input_meta *m = &n->in_meta[0];
    if (m->device.type != CR_DEV_CPU) {
        cr_tensor *x, *res;
        cr_status st;
        if ((st = cr_saved_in(n, 0, &x)) || (st = cr_saved_out(n, 0, &res))) return st;
        return cr_reduce_weight_grad_ops(&gin[0], gout[0], x, res, m, (uint32_t)n->call.i[0],
                                         CR_REDUCE_W_LSE, 0);
    }
    return weight_grad(n, gout, gin, w_lse, 0);
}
