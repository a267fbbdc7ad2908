/* reduce_minmax.c — max/min along one dim (values and i64 indices), amax/amin over a
 * set of dims, and argmax/argmin (along a dim or over the flattened tensor). All share
 * one accumulator: a pointer to the best element so far and its flat position, so the
 * value written is the input's own bytes (exact for every dtype) and ties keep the first
 * position. NaN wins over any number, as in PyTorch (the first NaN is reported). */
#include <math.h>

#include "reduce_impl.h"

typedef struct {
    cr_dtype dt;
    bool is_max;
    char *vout;     /* values, same dtype as the input; NULL for argmax/argmin */
    int64_t *iout;  /* positions; NULL for amax/amin */
    bool fast;      /* contiguous f32/f64 runs take the two-pass vectorised loop */
} mm_ctx;

/* Is the element at p strictly better than the one at q? Integers compare exactly; every
 * other dtype converts to double exactly. */
static bool mm_better(cr_dtype dt, bool is_max, const char *p, const char *q) {
    if (dt == CR_DT_I64) {
        int64_t a = *(const int64_t *)p, b = *(const int64_t *)q;
        return is_max ? a > b : a < b;
    }
    double a = cr_load_f64(p, dt), b = cr_load_f64(q, dt);
    if (a != a) return b == b;
    return is_max ? a > b : a < b;
}

/* One run for a typed dtype T: the local best stays in a register. */
#define MM_RUN(T)                                                                    \
    do {                                                                             \
        const T *x = (const T *)p;                                                   \
        int64_t i0 = 0;                                                              \
        if (!a->best) {                                                              \
            a->best = p;                                                             \
            a->pos = pos;                                                            \
            i0 = 1;                                                                  \
        }                                                                            \
        T best = *(const T *)a->best;                                                \
        int64_t bi = -1;                                                             \
        if (m->is_max) {                                                             \
            for (int64_t i = i0; i < n; i++) {                                       \
                T v = x[i * stride];                                                 \
                if (v > best || (v != v && best == best)) best = v, bi = i;          \
            }                                                                        \
        } else {                                                                     \
            for (int64_t i = i0; i < n; i++) {                                       \
                T v = x[i * stride];                                                 \
                if (v < best || (v != v && best == best)) best = v, bi = i;          \
            }                                                                        \
        }                                                                            \
        if (bi >= 0) {                                                               \
            a->best = (const char *)(x + bi * stride);                               \
            a->pos = pos + bi;                                                       \
        }                                                                            \
    } while (0)

/* Fast path for a contiguous run: the extreme value (and whether a NaN is present) by a
 * vectorised reduction, then the first position holding it; the winner is offered to the
 * accumulator like any element. Blocks keep the second pass in cache. */
enum { MM_BLOCK = 4096 };
static void mm_seg_scalar(cr_reduce_acc *a, const char *p, int64_t stride, int64_t n,
                          int64_t pos);

#define MM_CONTIG(T)                                                                 \
    do {                                                                             \
        const T *x = (const T *)p;                                                   \
        for (int64_t b0 = 0; b0 < n; b0 += MM_BLOCK) {                               \
            int64_t bn = n - b0 < MM_BLOCK ? n - b0 : MM_BLOCK;                      \
            const T *xb = x + b0;                                                    \
            T e = m->is_max ? -INFINITY : INFINITY, chk = 0;                         \
            if (m->is_max) {                                                         \
                _Pragma("omp simd reduction(max : e) reduction(+ : chk)")           \
                for (int64_t i = 0; i < bn; i++) {                                   \
                    e = xb[i] > e ? xb[i] : e;                                       \
                    chk += xb[i] - xb[i];                                            \
                }                                                                    \
            } else {                                                                 \
                _Pragma("omp simd reduction(min : e) reduction(+ : chk)")           \
                for (int64_t i = 0; i < bn; i++) {                                   \
                    e = xb[i] < e ? xb[i] : e;                                       \
                    chk += xb[i] - xb[i];                                            \
                }                                                                    \
            }                                                                        \
            if (chk != chk) { /* an inf or NaN in the block: the exact scalar scan */ \
                mm_seg_scalar(a, (const char *)xb, 1, bn, pos + b0);                 \
                continue;                                                            \
            }                                                                        \
            int64_t bi = 0; /* skip 16 at a time with a vectorised test, then step */  \
            for (; bi + 16 <= bn; bi += 16) {                                        \
                int hit = 0;                                                         \
                _Pragma("omp simd reduction(| : hit)")                              \
                for (int j = 0; j < 16; j++) hit |= xb[bi + j] == e;                 \
                if (hit) break;                                                      \
            }                                                                        \
            while (xb[bi] != e) bi++;                                                \
            if (!a->best || mm_better(m->dt, m->is_max, (const char *)(xb + bi), a->best)) { \
                a->best = (const char *)(xb + bi);                                   \
                a->pos = pos + b0 + bi;                                              \
            }                                                                        \
        }                                                                            \
    } while (0)

static void mm_init(cr_reduce_acc *a) { a->best = NULL; }

static void mm_seg_scalar(cr_reduce_acc *a, const char *p, int64_t stride, int64_t n,
                          int64_t pos) {
    const mm_ctx *m = a->ctx;
    switch (m->dt) {
    case CR_DT_F32: MM_RUN(float); break;
    case CR_DT_F64: MM_RUN(double); break;
    case CR_DT_I64: MM_RUN(int64_t); break;
    case CR_DT_I32: MM_RUN(int32_t); break;
    case CR_DT_U8:
    case CR_DT_BOOL: MM_RUN(uint8_t); break;
    default: { /* halves: compare through double */
        int64_t es = (int64_t)cr_dtype_size(m->dt);
        for (int64_t i = 0; i < n; i++) {
            const char *q = p + i * stride * es;
            if (!a->best || mm_better(m->dt, m->is_max, q, a->best)) {
                a->best = q;
                a->pos = pos + i;
            }
        }
    }
    }
}

static void mm_seg(cr_reduce_acc *a, const char *p, int64_t stride, int64_t n, int64_t pos) {
    const mm_ctx *m = a->ctx;
    if (m->fast && stride == 1 && n > 16 && (m->dt == CR_DT_F32 || m->dt == CR_DT_F64)) {
        if (m->dt == CR_DT_F32) MM_CONTIG(float);
        else MM_CONTIG(double);
        return;
    }
    mm_seg_scalar(a, p, stride, n, pos);
}

static void mm_merge(cr_reduce_acc *into, const cr_reduce_acc *from) {
    const mm_ctx *m = into->ctx;
    if (!from->best) return;
    if (!into->best || mm_better(m->dt, m->is_max, from->best, into->best)) {
        into->best = from->best;
        into->pos = from->pos;
    }
}

static void mm_done(const cr_reduce_acc *a, int64_t k) {
    const mm_ctx *m = a->ctx;
    if (m->vout) {
        size_t es = cr_dtype_size(m->dt);
        memcpy(m->vout + (size_t)k * es, a->best, es);
    }
    if (m->iout) m->iout[k] = a->pos;
}

static const cr_reduce_def mm_def = {mm_init, mm_seg, mm_merge, mm_done};

/* Runs the accumulator: in[0] over c->i[0]'s dims mask into out[0] (values or, when
 * `index_only`, positions) and out[1] (positions) when there is one. */
static cr_status mm_kernel(cr_call *c, bool is_max, bool index_only) {
    cr_tensor *x = c->in[0];
    cr_reduce_plan p;
    cr_reduce_plan_init(&p, x, (uint32_t)c->i[0]);
    mm_ctx m = {x->dtype, is_max, NULL, NULL, cr_fast_paths_enabled()};
    if (index_only) {
        m.iout = (int64_t *)cr_tensor_ptr(c->out[0]);
    } else {
        m.vout = cr_tensor_ptr(c->out[0]);
        if (c->nout > 1) m.iout = (int64_t *)cr_tensor_ptr(c->out[1]);
    }
    if (p.K > 0 && p.R == 0)
        return cr_fail(CR_ERR_ARG, "%s: cannot reduce over zero elements (a reduced dim has "
                       "size 0); there is no identity for max/min", cr_op_name(c->op));
    cr_reduce_run(&p, cr_tensor_ptr(x), &mm_def, &m, x->dtype);
    return CR_OK;
}

static cr_status check_nonempty(const char *op, const cr_tensor *t, uint32_t dims) {
    char b[160];
    int64_t K = 1, R = 1;
    for (int d = 0; d < t->ndim; d++) {
        if (dims == 0 || (dims & (1u << d))) R *= t->shape[d];
        else K *= t->shape[d];
    }
    if (R == 0 && K > 0)
        return cr_fail(CR_ERR_ARG, "%s: cannot reduce a tensor of shape %s over a dim of size 0 "
                       "(max/min of nothing); reduce over non-empty dims", op,
                       cr_shape_str(t, b, sizeof b));
    return CR_OK;
}

/* ---- max/min along one dim: values and indices ---- */
static cr_status minmax_dim(cr_tensor **values, cr_tensor **indices, cr_op op, cr_tensor *t,
                            int64_t dim, bool keepdim) {
    const char *name = cr_op_name(op);
    if (values) *values = NULL;
    if (indices) *indices = NULL;
    if (!values || !indices) return cr_fail(CR_ERR_ARG, "%s: output pointers are NULL", name);
    CR_CHECK_TENSOR(name, t, "self");
    cr_status st = cr_check_dim(name, &dim, t->ndim, false);
    if (st) return st;
    uint32_t dims = t->ndim ? 1u << dim : 0;
    if ((st = check_nonempty(name, t, dims))) return st;
    int ndim;
    int64_t shape[CR_MAX_DIMS];
    if ((st = cr_reduce_out_shape(name, t, dims, keepdim, &ndim, shape))) return st;
    cr_call c;
    if ((st = cr_call_init(&c, op, 1, 2))) return st;
    c.in[0] = t;
    c.i[0] = dims;
    c.i[1] = keepdim;
    c.i[2] = dim;
    if ((st = cr_tensor_alloc(&c.out[0], ndim, shape, t->dtype, cr_tensor_dev(t))) ||
        (st = cr_tensor_alloc(&c.out[1], ndim, shape, CR_DT_I64, cr_tensor_dev(t))))
        goto fail;
    if ((st = cr_call_finish(values, &c, 0, 2))) return st;
    *indices = c.out[1];
    return CR_OK;
fail:
    cr_call_drop_outs(&c);
    return st;
}

/* Grad of max/min along a dim: g goes to the chosen index of each slice, zeros elsewhere
 * (like PyTorch: the index picks one element even when several tie). */
static cr_status grad_minmax_dim(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    const cr_input_meta *m = &n->in_meta[0];
    cr_tensor *idx, *g = NULL, *z = NULL;
    cr_status st = cr_saved_out(n, 1, &idx);
    if (st) return st;
    if (m->device.type != CR_DEV_CPU)
        return cr_reduce_index_grad_ops(&gin[0], gout[0], idx, m, n->call.i[2]);
    if ((st = cr_reduce_contig_as(&g, gout[0], m->dtype))) return st;
    if ((st = cr_zeros_meta(&z, m))) goto done;
    cr_reduce_plan p;
    cr_reduce_plan_init(&p, z, (uint32_t)n->call.i[0]);
    int64_t es = (int64_t)cr_dtype_size(m->dtype);
    int64_t rs = p.nr ? p.rstride[0] : 0;
    const char *gp = cr_tensor_ptr(g);
    char *zp = cr_tensor_ptr(z);
    for (int64_t k = 0; k < p.K; k++) {
        int64_t i = (int64_t)cr_tensor_get_flat(idx, k);
        memcpy(zp + (cr_reduce_kept_offset(&p, k) + i * rs) * es, gp + k * es, (size_t)es);
    }
    gin[0] = z;
    z = NULL;
done:
    cr_tensor_free(g);
    cr_tensor_free(z);
    return st;
}

cr_status cr_cpu_max_dim(cr_call *c) { return mm_kernel(c, true, false); }
cr_status cr_cpu_min_dim(cr_call *c) { return mm_kernel(c, false, false); }
cr_status cr_op_max_dim(cr_tensor **values, cr_tensor **indices, cr_tensor *t, int64_t dim,
                        bool keepdim) {
    return minmax_dim(values, indices, CR_OP_MAX_DIM, t, dim, keepdim);
}
cr_status cr_op_min_dim(cr_tensor **values, cr_tensor **indices, cr_tensor *t, int64_t dim,
                        bool keepdim) {
    return minmax_dim(values, indices, CR_OP_MIN_DIM, t, dim, keepdim);
}
cr_status cr_grad_max_dim(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    return grad_minmax_dim(n, gout, gin);
}
cr_status cr_grad_min_dim(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    return grad_minmax_dim(n, gout, gin);
}

/* ---- amax/amin over a dims mask ---- */
static cr_status amaxmin(cr_tensor **out, cr_op op, cr_tensor *t, uint32_t dims, bool keepdim) {
    const char *name = cr_op_name(op);
    *out = NULL;
    CR_CHECK_TENSOR(name, t, "self");
    int ndim;
    int64_t shape[CR_MAX_DIMS];
    cr_status st = cr_reduce_out_shape(name, t, dims, keepdim, &ndim, shape);
    if (st) return st;
    if ((st = check_nonempty(name, t, dims))) return st;
    cr_call c;
    if ((st = cr_call_init(&c, op, 1, 1))) return st;
    c.in[0] = t;
    c.i[0] = dims;
    c.i[1] = keepdim;
    if ((st = cr_tensor_alloc(&c.out[0], ndim, shape, t->dtype, cr_tensor_dev(t)))) return st;
    return cr_call_finish(out, &c, 1, 1);
}

/* Tie mask of a contiguous x against its reduced values: w = (x == best), and per output
 * the number of ties. */
typedef struct {
    cr_dtype dt;
    const char *xbase;
    char *wbase;
    const char *best; /* contiguous values, one per output */
    double *count;
    bool absolute;    /* compare |x| (the inf-norm) and write sign(x) instead of 1 */
} tie_ctx;

static void tie_init(cr_reduce_acc *a) { a->v0 = 0; }
static void tie_seg(cr_reduce_acc *a, const char *p, int64_t stride, int64_t n, int64_t pos) {
    (void)pos;
    const tie_ctx *t = a->ctx;
    int64_t es = (int64_t)cr_dtype_size(t->dt);
    double b = cr_load_f64(t->best + a->k * es, t->dt);
    char *w = t->wbase + (p - t->xbase);
    for (int64_t i = 0; i < n; i++) {
        double v = cr_load_f64(p + i * stride * es, t->dt);
        double key = t->absolute ? fabs(v) : v;
        bool tie = key == b || (key != key && b != b);
        double out = !tie ? 0.0 : t->absolute ? (v > 0) - (v < 0) : 1.0;
        cr_store_f64(w + i * stride * es, t->dt, out);
        a->v0 += tie;
    }
}
static void tie_merge(cr_reduce_acc *into, const cr_reduce_acc *from) { into->v0 += from->v0; }
static void tie_done(const cr_reduce_acc *a, int64_t k) {
    const tie_ctx *t = a->ctx;
    t->count[k] = a->v0;
}
static const cr_reduce_def tie_def = {tie_init, tie_seg, tie_merge, tie_done};

/* gin = expand(g / count) * mask: the grad of max over dims, split evenly among ties.
 * x: the saved input; best: the saved result (keepdim or not, K elements). */
cr_status cr_reduce_tie_grad(cr_tensor **gin, cr_tensor *g, cr_tensor *x, cr_tensor *best,
                             const cr_input_meta *m, uint32_t dims, bool absolute) {
    if (m->device.type != CR_DEV_CPU)
        return cr_reduce_tie_grad_ops(gin, g, x, best, m, dims, absolute);
    cr_tensor *xc = NULL, *bc = NULL, *w = NULL, *cnt = NULL, *gs = NULL, *ge = NULL;
    cr_status st;
    if ((st = cr_reduce_contig_as(&xc, x, m->dtype)) ||
        (st = cr_reduce_contig_as(&bc, best, m->dtype)) ||
        (st = cr_tensor_alloc(&w, m->ndim, m->shape, m->dtype, m->device)) ||
        (st = cr_tensor_alloc(&cnt, bc->ndim, bc->shape, CR_DT_F64, cr_tensor_dev(bc))))
        goto done;
    cr_reduce_plan p;
    cr_reduce_plan_init(&p, xc, dims);
    tie_ctx t = {m->dtype, cr_tensor_ptr(xc), cr_tensor_ptr(w), cr_tensor_ptr(bc),
                 (double *)cr_tensor_ptr(cnt), absolute};
    cr_reduce_run(&p, t.xbase, &tie_def, &t, m->dtype);
    for (int64_t k = 0; k < p.K; k++) /* a NaN result ties with nothing it can divide by */
        if (t.count[k] == 0) t.count[k] = 1;
    cr_tensor *cd = NULL;
    if ((st = cr_op_to(&cd, cnt, g->dtype))) goto done;
    st = cr_op_div(&gs, g, cd);
    cr_tensor_free(cd);
    if (st || (st = cr_reduce_grad_expand(&ge, gs, m, dims))) goto done;
    st = cr_op_mul(gin, ge, w);
done:
    cr_tensor_free(xc);
    cr_tensor_free(bc);
    cr_tensor_free(w);
    cr_tensor_free(cnt);
    cr_tensor_free(gs);
    cr_tensor_free(ge);
    return st;
}

static cr_status grad_amaxmin(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    cr_tensor *x, *best;
    cr_status st;
    if ((st = cr_saved_in(n, 0, &x)) || (st = cr_saved_out(n, 0, &best))) return st;
    return cr_reduce_tie_grad(&gin[0], gout[0], x, best, &n->in_meta[0],
                              (uint32_t)n->call.i[0], false);
}

cr_status cr_cpu_amax(cr_call *c) { return mm_kernel(c, true, false); }
cr_status cr_cpu_amin(cr_call *c) { return mm_kernel(c, false, false); }
cr_status cr_op_amax(cr_tensor **out, cr_tensor *t, uint32_t dims, bool keepdim) {
    return amaxmin(out, CR_OP_AMAX, t, dims, keepdim);
}
cr_status cr_op_amin(cr_tensor **out, cr_tensor *t, uint32_t dims, bool keepdim) {
    return amaxmin(out, CR_OP_AMIN, t, dims, keepdim);
}
cr_status cr_grad_amax(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    return grad_amaxmin(n, gout, gin);
}
cr_status cr_grad_amin(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    return grad_amaxmin(n, gout, gin);
}

/* ---- argmax/argmin ---- */
static cr_status argmaxmin(cr_tensor **out, cr_op op, cr_tensor *t, int64_t dim, bool keepdim) {
    const char *name = cr_op_name(op);
    *out = NULL;
    CR_CHECK_TENSOR(name, t, "self");
    uint32_t dims = 0;
    int ndim;
    int64_t shape[CR_MAX_DIMS];
    cr_status st;
    if (dim < -(int64_t)t->ndim) { /* over the flattened tensor */
        ndim = keepdim ? t->ndim : 0;
        for (int d = 0; d < ndim; d++) shape[d] = 1;
    } else {
        if ((st = cr_check_dim(name, &dim, t->ndim, false))) return st;
        dims = t->ndim ? 1u << dim : 0;
        if ((st = cr_reduce_out_shape(name, t, dims, keepdim, &ndim, shape))) return st;
    }
    if ((st = check_nonempty(name, t, dims))) return st;
    cr_call c;
    if ((st = cr_call_init(&c, op, 1, 1))) return st;
    c.in[0] = t;
    c.i[0] = dims;
    c.i[1] = keepdim;
    if ((st = cr_tensor_alloc(&c.out[0], ndim, shape, CR_DT_I64, cr_tensor_dev(t)))) return st;
    if ((st = cr_dispatch(&c))) {
        cr_call_drop_outs(&c);
        return st;
    }
    *out = c.out[0];
    return CR_OK;
}

cr_status cr_cpu_argmax(cr_call *c) { return mm_kernel(c, true, true); }
cr_status cr_cpu_argmin(cr_call *c) { return mm_kernel(c, false, true); }
cr_status cr_op_argmax(cr_tensor **out, cr_tensor *t, int64_t dim, bool keepdim) {
    return argmaxmin(out, CR_OP_ARGMAX, t, dim, keepdim);
}
cr_status cr_op_argmin(cr_tensor **out, cr_tensor *t, int64_t dim, bool keepdim) {
    return argmaxmin(out, CR_OP_ARGMIN, t, dim, keepdim);
}
