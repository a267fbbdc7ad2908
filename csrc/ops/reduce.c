/* reduce.c — the reduction plan and accumulator driver, and sum and mean over any set of
 * dims. Accumulation is in f64 for float inputs, so an f32 sum of millions of elements
 * stays accurate; contiguous f32/f64 inputs in the common layouts take fast loops that
 * the spec compares with the plain reference walk. */
#include <math.h>
#include <omp.h>

#include "reduce_impl.h"

void cr_reduce_plan_init(cr_reduce_plan *p, const cr_tensor *t, uint32_t dims) {
    memset(p, 0, sizeof *p);
    p->K = p->R = 1;
    for (int d = 0; d < t->ndim; d++) {
        bool red = dims == 0 || (dims & (1u << d));
        if (red) {
            p->rshape[p->nr] = t->shape[d];
            p->rstride[p->nr++] = t->stride[d];
            p->R *= t->shape[d];
        } else {
            p->kshape[p->nk] = t->shape[d];
            p->kstride[p->nk++] = t->stride[d];
            p->K *= t->shape[d];
        }
    }
}

int64_t cr_reduce_kept_offset(const cr_reduce_plan *p, int64_t k) {
    int64_t off = 0;
    for (int d = p->nk - 1; d >= 0; d--) {
        off += (k % p->kshape[d]) * p->kstride[d];
        k /= p->kshape[d];
    }
    return off;
}

cr_status cr_reduce_out_shape(const char *op, const cr_tensor *t, uint32_t dims, bool keepdim,
                              int *ndim, int64_t *shape) {
    if (t->ndim < 32 && (dims >> t->ndim) != 0)
        return cr_fail(CR_ERR_ARG, "%s: dims mask 0x%x names a dim past the tensor's %d dims",
                       op, dims, t->ndim);
    int n = 0;
    for (int d = 0; d < t->ndim; d++) {
        bool red = dims == 0 || (dims & (1u << d));
        if (!red) shape[n++] = t->shape[d];
        else if (keepdim) shape[n++] = 1;
    }
    *ndim = n;
    return CR_OK;
}

double cr_reduce_sum_f64(const cr_reduce_plan *p, const char *base, cr_dtype dt) {
    int64_t coord[CR_MAX_DIMS] = {0};
    int64_t es = (int64_t)cr_dtype_size(dt), off = 0;
    int last = p->nr - 1;
    double acc = 0;
    if (p->R == 0) return 0;
    if (last < 0) return cr_load_f64(base, dt);
    int64_t inner = p->rshape[last], istride = p->rstride[last];
    for (int64_t done = 0; done < p->R; done += inner) {
        const char *q = base + off * es;
        if (dt == CR_DT_F32) {
            const float *f = (const float *)q;
            for (int64_t i = 0; i < inner; i++) acc += f[i * istride];
        } else if (dt == CR_DT_F64) {
            const double *f = (const double *)q;
            for (int64_t i = 0; i < inner; i++) acc += f[i * istride];
        } else if (dt == CR_DT_BF16) {
            const uint16_t *h = (const uint16_t *)q;
            for (int64_t i = 0; i < inner; i++) acc += cr_bf16_to_f32(h[i * istride]);
        } else {
            for (int64_t i = 0; i < inner; i++) acc += cr_load_f64(q + i * istride * es, dt);
        }
        for (int d = last - 1; d >= 0; d--) { /* odometer over the outer reduced dims */
            coord[d]++;
            off += p->rstride[d];
            if (coord[d] < p->rshape[d]) break;
            off -= coord[d] * p->rstride[d];
            coord[d] = 0;
        }
    }
    return acc;
}

/* ---- the accumulator driver (reduce_impl.h) ---- */
static void walk(const cr_reduce_plan *p, const char *base, int64_t es, const cr_reduce_def *def,
                 cr_reduce_acc *a, int64_t pos0) {
    if (p->R == 0) return;
    if (p->nr == 0) {
        def->seg(a, base, 1, 1, pos0);
        return;
    }
    int64_t coord[CR_MAX_DIMS] = {0}, off = 0;
    int last = p->nr - 1;
    int64_t inner = p->rshape[last], istride = p->rstride[last];
    for (int64_t done = 0; done < p->R; done += inner) {
        def->seg(a, base + off * es, istride, inner, pos0 + done);
        for (int d = last - 1; d >= 0; d--) {
            coord[d]++;
            off += p->rstride[d];
            if (coord[d] < p->rshape[d]) break;
            off -= coord[d] * p->rstride[d];
            coord[d] = 0;
        }
    }
}

void cr_reduce_run(const cr_reduce_plan *p, const char *base, const cr_reduce_def *def,
                   const void *ctx, cr_dtype dt) {
    int64_t es = (int64_t)cr_dtype_size(dt);
    int nt = cr_threads();
    bool big = p->K * p->R >= CR_PAR_GRAIN;
    if (p->K >= nt || !big || p->nr == 0 || p->rshape[0] < 2 || nt < 2) {
#pragma omp parallel for if (big && p->K > 1) schedule(static)
        for (int64_t k = 0; k < p->K; k++) {
            cr_reduce_acc a = {.ctx = ctx, .k = k};
            def->init(&a);
            walk(p, base + cr_reduce_kept_offset(p, k) * es, es, def, &a, 0);
            def->done(&a, k);
        }
        return;
    }
    /* few outputs, much work: cut the outermost reduced dim into one chunk per thread */
    if (nt > 64) nt = 64;
    int64_t n0 = p->rshape[0], per = p->R / n0;
    for (int64_t k = 0; k < p->K; k++) {
        const char *b = base + cr_reduce_kept_offset(p, k) * es;
        cr_reduce_acc parts[64];
#pragma omp parallel for num_threads(nt) schedule(static)
        for (int t = 0; t < nt; t++) {
            int64_t lo = n0 * t / nt, hi = n0 * (t + 1) / nt;
            cr_reduce_plan mine = *p;
            mine.rshape[0] = hi - lo;
            mine.R = per * (hi - lo);
            cr_reduce_acc a = {.ctx = ctx, .k = k}; /* local: parts[] share cache lines */
            def->init(&a);
            walk(&mine, b + lo * p->rstride[0] * es, es, def, &a, lo * per);
            parts[t] = a;
        }
        for (int t = 1; t < nt; t++) def->merge(&parts[0], &parts[t]);
        def->done(&parts[0], k);
    }
}

cr_status cr_reduce_contig_as(cr_tensor **out, cr_tensor *t, cr_dtype dt) {
    bool prev = cr_grad_set_enabled(false);
    cr_tensor *a = NULL;
    cr_status st = cr_op_to(&a, t, dt);
    if (!st) {
        st = cr_op_contiguous(out, a);
        cr_tensor_free(a);
    }
    cr_grad_set_enabled(prev);
    return st;
}

/* ---- sum: the reference path ----
 * out[k] = scale * sum, each output walked by the plan's odometer; f64 accumulation. */
static void sum_reference(cr_call *c, double scale) {
    cr_tensor *x = c->in[0], *o = c->out[0];
    cr_reduce_plan p;
    cr_reduce_plan_init(&p, x, (uint32_t)c->i[0]);
    const char *base = cr_tensor_ptr(x);
    int64_t es = (int64_t)cr_dtype_size(x->dtype);
    char *out = cr_tensor_ptr(o);
    int64_t oes = (int64_t)cr_dtype_size(o->dtype);
    bool par = p.K * p.R >= CR_PAR_GRAIN && p.K >= cr_threads();
#pragma omp parallel for if (par) schedule(static)
    for (int64_t k = 0; k < p.K; k++) {
        const char *b = base + cr_reduce_kept_offset(&p, k) * es;
        double v = cr_reduce_sum_f64(&p, b, x->dtype) * scale;
        cr_store_f64(out + k * oes, o->dtype, v);
    }
    if (!par && p.K < cr_threads() && p.K * p.R >= CR_PAR_GRAIN && p.nr > 0) {
        /* few outputs, much work: split the outermost reduced dim across threads */
        for (int64_t k = 0; k < p.K; k++) {
            const char *b = base + cr_reduce_kept_offset(&p, k) * es;
            cr_reduce_plan sub = p;
            int64_t n0 = p.rshape[0], nt = cr_threads();
            double parts[256] = {0};
            if (nt > 256) nt = 256;
#pragma omp parallel for num_threads((int)nt) schedule(static)
            for (int64_t t = 0; t < nt; t++) {
                int64_t lo = n0 * t / nt, hi = n0 * (t + 1) / nt;
                cr_reduce_plan mine = sub;
                mine.rshape[0] = hi - lo;
                mine.R = p.R / n0 * (hi - lo);
                parts[t] = cr_reduce_sum_f64(&mine, b + lo * p.rstride[0] * es, x->dtype);
            }
            double v = 0;
            for (int64_t t = 0; t < nt; t++) v += parts[t];
            cr_store_f64(out + k * oes, o->dtype, v * scale);
        }
    }
}

/* ---- sum: fast paths for contiguous f32/f64/bf16 inputs (bf16 summed in f64 too; the
 * grads of a bf16 network's biases) ----
 * A contiguous input's non-trivial dims merge into runs of reduced (R) and kept (K) dims;
 * the layouts that dominate training get their own loops, each accumulating in double
 * with `omp simd` lanes (so the compiler may reorder the f64 adds and vectorise):
 *   [R]        full reduction (loss.sum(), norms)
 *   [K, R]     rows: reduce the trailing dims (mean over features)
 *   [A, R, K]  columns: reduce leading dims (bias grad of a linear layer; A = 1 there)
 *   [R, K, R]  channels: [N, C, H, W] over N, H, W (batch-norm and conv bias grads) */
enum { SUM_TILE = 512 }; /* columns accumulated at once: 4 KiB of doubles stays in L1 */

static double sum_run(const char *x, cr_dtype dt, int64_t n) {
    double acc = 0;
    if (dt == CR_DT_F32) {
        const float *f = (const float *)x;
#pragma omp simd reduction(+ : acc)
        for (int64_t i = 0; i < n; i++) acc += (double)f[i];
    } else if (dt == CR_DT_BF16) {
        const uint16_t *h = (const uint16_t *)x;
#pragma omp simd reduction(+ : acc)
        for (int64_t i = 0; i < n; i++) acc += (double)cr_bf16_to_f32(h[i]);
    } else {
        const double *f = (const double *)x;
#pragma omp simd reduction(+ : acc)
        for (int64_t i = 0; i < n; i++) acc += f[i];
    }
    return acc;
}

/* acc[j] += x[j] for a tile of one row */
static void sum_tile_add(double *acc, const char *x, cr_dtype dt, int64_t n) {
    if (dt == CR_DT_F32) {
        const float *f = (const float *)x;
#pragma omp simd
        for (int64_t j = 0; j < n; j++) acc[j] += (double)f[j];
    } else if (dt == CR_DT_BF16) {
        const uint16_t *h = (const uint16_t *)x;
#pragma omp simd
        for (int64_t j = 0; j < n; j++) acc[j] += (double)cr_bf16_to_f32(h[j]);
    } else {
        const double *f = (const double *)x;
#pragma omp simd
        for (int64_t j = 0; j < n; j++) acc[j] += f[j];
    }
}

static void store_scaled(char *out, cr_dtype dt, int64_t k, double v) {
    if (dt == CR_DT_F32) ((float *)out)[k] = (float)v;
    else if (dt == CR_DT_BF16) ((uint16_t *)out)[k] = cr_f32_to_bf16((float)v);
    else ((double *)out)[k] = v;
}

/* Merges the contiguous input's dims of size > 1 into alternating runs; returns their
 * count, the first run's kind in *first_red. */
static int sum_runs(const cr_tensor *x, uint32_t dims, int64_t *run, bool *first_red) {
    int n = 0;
    bool last = false;
    for (int d = 0; d < x->ndim; d++) {
        if (x->shape[d] == 1) continue;
        bool red = dims == 0 || (dims & (1u << d));
        if (n > 0 && red == last) {
            run[n - 1] *= x->shape[d];
        } else {
            if (n == 0) *first_red = red;
            if (n == 4) return -1;
            run[n++] = x->shape[d];
            last = red;
        }
    }
    return n;
}

/* Full reduction of n elements: one block per thread, partials added in order. */
static double sum_full(const char *x, cr_dtype dt, int64_t n) {
    int64_t es = (int64_t)cr_dtype_size(dt);
    int nt = n >= CR_PAR_GRAIN ? cr_threads() : 1;
    if (nt > 256) nt = 256;
    if (nt == 1) return sum_run(x, dt, n);
    double parts[256];
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int t = 0; t < nt; t++) {
        int64_t lo = n * t / nt, hi = n * (t + 1) / nt;
        parts[t] = sum_run(x + lo * es, dt, hi - lo);
    }
    double v = 0;
    for (int t = 0; t < nt; t++) v += parts[t];
    return v;
}

/* out[a, k] = sum_r x[a, r, k], tile by tile; with few tiles the rows are split too. */
static cr_status sum_columns(const char *x, cr_dtype dt, char *out, cr_dtype odt, int64_t A,
                             int64_t R, int64_t K, double scale) {
    int64_t es = (int64_t)cr_dtype_size(dt);
    int64_t tiles = (K + SUM_TILE - 1) / SUM_TILE, items = A * tiles;
    int nt = cr_threads();
    bool big = A * R * K >= CR_PAR_GRAIN;
    int64_t splits = 1;
    if (big && items < nt) splits = R < nt ? R : nt;
    double *part = NULL;
    if (splits > 1) {
        part = malloc((size_t)(splits * A * K) * sizeof *part);
        if (!part) return cr_fail(CR_ERR_OOM, "sum: out of memory for %lld partial sums",
                                  (long long)(splits * A * K));
    }
#pragma omp parallel for if (big) schedule(static) collapse(2)
    for (int64_t s = 0; s < splits; s++)
        for (int64_t it = 0; it < items; it++) {
            int64_t a = it / tiles, k0 = (it % tiles) * SUM_TILE;
            int64_t kn = K - k0 < SUM_TILE ? K - k0 : SUM_TILE;
            int64_t r0 = R * s / splits, r1 = R * (s + 1) / splits;
            double acc[SUM_TILE];
            for (int64_t j = 0; j < kn; j++) acc[j] = 0;
            for (int64_t r = r0; r < r1; r++)
                sum_tile_add(acc, x + ((a * R + r) * K + k0) * es, dt, kn);
            if (part) memcpy(part + (s * A + a) * K + k0, acc, (size_t)kn * sizeof *acc);
            else
                for (int64_t j = 0; j < kn; j++) store_scaled(out, odt, a * K + k0 + j, acc[j] * scale);
        }
    if (part) {
        for (int64_t i = 0; i < A * K; i++) {
            double v = 0;
            for (int64_t s = 0; s < splits; s++) v += part[s * A * K + i];
            store_scaled(out, odt, i, v * scale);
        }
        free(part);
    }
    return CR_OK;
}

/* out[k] = sum_{r1, r2} x[r1, k, r2]; with fewer channels than threads, r1 is split. */
static cr_status sum_channels(const char *x, cr_dtype dt, char *out, cr_dtype odt, int64_t R1,
                              int64_t K, int64_t R2, double scale) {
    int64_t es = (int64_t)cr_dtype_size(dt);
    int nt = cr_threads();
    bool big = R1 * K * R2 >= CR_PAR_GRAIN;
    int64_t splits = big && K < nt ? (R1 < nt ? R1 : nt) : 1;
    double part[64 * 64];
    if (splits * K > 64 * 64) splits = 1;
#pragma omp parallel for if (big) schedule(static) collapse(2)
    for (int64_t s = 0; s < splits; s++)
        for (int64_t k = 0; k < K; k++) {
            int64_t r0 = R1 * s / splits, r1 = R1 * (s + 1) / splits;
            double acc = 0;
            for (int64_t r = r0; r < r1; r++) acc += sum_run(x + (r * K + k) * R2 * es, dt, R2);
            if (splits > 1) part[s * K + k] = acc;
            else store_scaled(out, odt, k, acc * scale);
        }
    if (splits > 1)
        for (int64_t k = 0; k < K; k++) {
            double v = 0;
            for (int64_t s = 0; s < splits; s++) v += part[s * K + k];
            store_scaled(out, odt, k, v * scale);
        }
    return CR_OK;
}

/* Returns true when a fast loop handled the call. */
static bool sum_fast(cr_call *c, double scale, cr_status *st) {
    cr_tensor *x = c->in[0], *o = c->out[0];
    cr_dtype dt = x->dtype;
    *st = CR_OK;
    if ((dt != CR_DT_F32 && dt != CR_DT_F64 && dt != CR_DT_BF16) || o->dtype != dt ||
        !cr_tensor_is_contiguous(x) ||
        x->numel == 0)
        return false;
    int64_t run[4];
    bool first_red = false;
    int n = sum_runs(x, (uint32_t)c->i[0], run, &first_red);
    const char *xp = cr_tensor_ptr(x);
    char *out = cr_tensor_ptr(o);
    int64_t es = (int64_t)cr_dtype_size(dt);
    if (n == 1 && first_red) {
        store_scaled(out, dt, 0, sum_full(xp, dt, run[0]) * scale);
    } else if (n == 2 && !first_red) { /* rows */
        int64_t K = run[0], R = run[1];
        if (K >= cr_threads() || K * R < CR_PAR_GRAIN) {
#pragma omp parallel for if (K * R >= CR_PAR_GRAIN) schedule(static)
            for (int64_t k = 0; k < K; k++) store_scaled(out, dt, k, sum_run(xp + k * R * es, dt, R) * scale);
        } else {
            for (int64_t k = 0; k < K; k++) store_scaled(out, dt, k, sum_full(xp + k * R * es, dt, R) * scale);
        }
    } else if (n == 2 && first_red) {
        *st = sum_columns(xp, dt, out, dt, 1, run[0], run[1], scale);
    } else if (n == 3 && !first_red) {
        *st = sum_columns(xp, dt, out, dt, run[0], run[1], run[2], scale);
    } else if (n == 3 && first_red) {
        *st = sum_channels(xp, dt, out, dt, run[0], run[1], run[2], scale);
    } else {
        return false;
    }
    return true;
}

static cr_status sum_kernel(cr_call *c, double scale) {
    cr_status st;
    if (cr_fast_paths_enabled() && sum_fast(c, scale, &st)) return st;
    sum_reference(c, scale);
    return CR_OK;
}

static cr_status reduce_op(cr_tensor **out, cr_op op, cr_tensor *t, uint32_t dims,
                           bool keepdim, cr_dtype result) {
    *out = NULL;
    const char *name = cr_op_name(op);
    CR_CHECK_TENSOR(name, t, "self");
    int ndim;
    int64_t shape[CR_MAX_DIMS];
    cr_status st = cr_reduce_out_shape(name, t, dims, keepdim, &ndim, shape);
    if (st) return st;
    cr_call c;
    if ((st = cr_call_init(&c, op, 1, 1))) return st;
    c.in[0] = t;
    c.i[0] = dims;
    c.i[1] = keepdim;
    if ((st = cr_tensor_alloc(&c.out[0], ndim, shape, result, cr_tensor_dev(t)))) return st;
    return cr_call_finish(out, &c, 0, 0);
}

/* Grad of a reduction to `ndim/shape`: reshape g to keepdim form, then expand. */
cr_status cr_reduce_grad_expand(cr_tensor **out, cr_tensor *g, const cr_input_meta *in,
                                uint32_t dims) {
    int64_t kshape[CR_MAX_DIMS];
    for (int d = 0; d < in->ndim; d++)
        kshape[d] = (dims == 0 || (dims & (1u << d))) ? 1 : in->shape[d];
    cr_tensor *r;
    cr_status st = cr_op_reshape(&r, g, in->ndim, kshape);
    if (st) return st;
    st = cr_op_expand(out, r, in->ndim, in->shape);
    cr_tensor_free(r);
    return st;
}

/* ---- sum ---- */
cr_status cr_cpu_sum(cr_call *c) { return sum_kernel(c, 1.0); }
static cr_status sum_entry(cr_tensor **out, cr_tensor *t, uint32_t dims, bool keepdim) {
    CR_CHECK_TENSOR("sum", t, "self");
    cr_dtype r = cr_dtype_is_float(t->dtype) ? t->dtype : CR_DT_I64;
    return reduce_op(out, CR_OP_SUM, t, dims, keepdim, r);
}

cr_status cr_op_sum(cr_tensor **out, cr_tensor *t, uint32_t dims, bool keepdim) {
    if (cr_autocast_get() == CR_DT_F32) return sum_entry(out, t, dims, keepdim);
    cr_autocast_scope s;
    cr_status st = cr_autocast_begin(&s, CR_OP_SUM, t, NULL, NULL);
    if (!st) st = sum_entry(out, s.t[0], dims, keepdim);
    cr_autocast_end(&s);
    return st;
}
cr_status cr_grad_sum(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    return cr_reduce_grad_expand(&gin[0], gout[0], &n->in_meta[0], (uint32_t)n->call.i[0]);
}

/* ---- mean ---- */
cr_status cr_cpu_mean(cr_call *c) {
    cr_reduce_plan p;
    cr_reduce_plan_init(&p, c->in[0], (uint32_t)c->i[0]);
    return sum_kernel(c, p.R ? 1.0 / (double)p.R : NAN);
}
static cr_status mean_entry(cr_tensor **out, cr_tensor *t, uint32_t dims, bool keepdim) {
    CR_CHECK_TENSOR("mean", t, "self");
    cr_status st = cr_check_float("mean", t, "self");
    if (st) return st;
    return reduce_op(out, CR_OP_MEAN, t, dims, keepdim, t->dtype);
}

cr_status cr_op_mean(cr_tensor **out, cr_tensor *t, uint32_t dims, bool keepdim) {
    if (cr_autocast_get() == CR_DT_F32) return mean_entry(out, t, dims, keepdim);
    cr_autocast_scope s;
    cr_status st = cr_autocast_begin(&s, CR_OP_MEAN, t, NULL, NULL);
    if (!st) st = mean_entry(out, s.t[0], dims, keepdim);
    cr_autocast_end(&s);
    return st;
}
cr_status cr_grad_mean(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    const cr_input_meta *m = &n->in_meta[0];
    uint32_t dims = (uint32_t)n->call.i[0];
    int64_t R = 1;
    for (int d = 0; d < m->ndim; d++)
        if (dims == 0 || (dims & (1u << d))) R *= m->shape[d];
    cr_tensor *scale, *g;
    cr_status st = cr_tensor_scalar(&scale, R ? 1.0 / (double)R : 0.0, gout[0]->dtype);
    if (st) return st;
    st = cr_op_mul(&g, gout[0], scale);
    cr_tensor_free(scale);
    if (st) return st;
    st = cr_reduce_grad_expand(&gin[0], g, m, dims);
    cr_tensor_free(g);
    return st;
}
