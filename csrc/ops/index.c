/* index.c — gathers and scatters along one dim: index_select, gather, scatter_add,
 * index_add, embedding, and one_hot. Every index value is checked before any element
 * moves, so a bad index is an error naming the value and the valid range, never a read
 * or write out of bounds.
 *
 * All four movers run one loop. The iteration domain is a shape D split at `dim` into
 * (outer o, along j, inner i); each operand is addressed by its own strides, so strided
 * views need no copy. Gathers read src at the index value and write dst at j; scatters
 * read src at j and add into dst at the index value. Scatters are parallel only over
 * (o, i): two (o, i) never touch the same destination element, so repeated indices
 * (which collide along j) are summed in order by one thread, and results do not depend
 * on the thread count.
 *
 * The index lives on its data's device. The GPU kernels (csrc/cuda/index.c) check the
 * values on the GPU, report a bad one in this file's words (index_impl.h) and add in
 * the same order, so both devices give the same bits. */
#include <omp.h>

#include "index_impl.h"

/* ---- index values ---------------------------------------------------------------------- */
static cr_status check_index_dtype(const char *op, const cr_tensor *idx, const char *argname) {
    if (idx->dtype == CR_DT_I64 || idx->dtype == CR_DT_I32) return CR_OK;
    return cr_fail(CR_ERR_ARG, "%s: '%s' has dtype %s but indices must be i64 (or i32); "
                   "convert it with :long()", op, argname, cr_dtype_name(idx->dtype));
}

/* The index values in idx's row-major order: idx's own data when it is contiguous i64,
 * else a copy in *owned (free it). */
static cr_status index_values(const char *op, const cr_tensor *idx, const int64_t **vals,
                              int64_t **owned) {
    *owned = NULL;
    if (!cr_tensor_on_cpu(idx)) { /* the cpu kernels only; a GPU index has GPU kernels */
        char b[32];
        return cr_fail(CR_ERR_DEVICE, "%s: the cpu kernel was given an index on %s", op,
                       cr_device_str(cr_tensor_dev(idx), b, sizeof b));
    }
    if (idx->dtype == CR_DT_I64 && cr_tensor_is_contiguous(idx)) {
        *vals = (const int64_t *)cr_tensor_ptr(idx);
        return CR_OK;
    }
    int64_t *v = malloc(sizeof *v * (size_t)(idx->numel ? idx->numel : 1));
    if (!v) return cr_fail(CR_ERR_OOM, "%s: out of memory for %lld indices", op, (long long)idx->numel);
    const char *base = (const char *)idx->storage->data;
    if (idx->dtype == CR_DT_I32 && cr_tensor_is_contiguous(idx)) {
        const int32_t *p = (const int32_t *)cr_tensor_ptr(idx);
        for (int64_t k = 0; k < idx->numel; k++) v[k] = p[k];
    } else {
        for (int64_t k = 0; k < idx->numel; k++) {
            int64_t off = cr_flat_offset(idx, k);
            v[k] = idx->dtype == CR_DT_I64 ? ((const int64_t *)base)[off] : ((const int32_t *)base)[off];
        }
    }
    *vals = *owned = v;
    return CR_OK;
}

const char *cr_index_range_name(cr_op op, int64_t arg, char *buf, size_t cap) {
    switch (op) {
    case CR_OP_INDEX_SELECT: snprintf(buf, cap, "dim %d", (int)arg); break;
    case CR_OP_EMBEDDING: snprintf(buf, cap, "the weight's rows"); break;
    case CR_OP_ONE_HOT: snprintf(buf, cap, "num_classes %lld", (long long)arg); break;
    default: snprintf(buf, cap, "dim %d of self", (int)arg); break;
    }
    return buf;
}

cr_status cr_index_out_of_range(const char *op, int64_t value, int64_t pos, int64_t size,
                                const char *what) {
    if (size == 0)
        return cr_fail(CR_ERR_ARG, "%s: index %lld (at flat position %lld) is out of range: "
                       "%s has size 0, so no index is valid", op, (long long)value,
                       (long long)pos, what);
    return cr_fail(CR_ERR_ARG, "%s: index %lld (at flat position %lld) is out of range for "
                   "%s of size %lld (valid 0..%lld)", op, (long long)value, (long long)pos,
                   what, (long long)size, (long long)(size - 1));
}

/* Every value in [0, size), or an error naming the first that is not. */
static cr_status check_index_range(const char *op, const int64_t *v, int64_t n, int64_t size,
                                   const char *what) {
    bool bad = false;
    for (int64_t k = 0; k < n; k++) bad |= (uint64_t)v[k] >= (uint64_t)size;
    if (!bad) return CR_OK;
    for (int64_t k = 0; k < n; k++)
        if ((uint64_t)v[k] >= (uint64_t)size) return cr_index_out_of_range(op, v[k], k, size, what);
    return CR_OK;
}

/* ---- geometry ------------------------------------------------------------------------------ */
/* An operand's strides over the domain; 0-dim tensors act as [1]. */
typedef struct {
    int64_t stride[CR_MAX_DIMS];
    char *base;    /* element 0 of the view */
    int64_t *tab;  /* inner offsets when the inner dims do not merge; else NULL */
    int64_t unit;  /* inner offset of i when tab is NULL: i * unit */
} operand;

typedef struct {
    int nd, dim;
    int64_t D[CR_MAX_DIMS];
    int64_t O, J, I;
} domain;

static void domain_init(domain *g, int ndim, const int64_t *shape, int dim) {
    g->nd = ndim ? ndim : 1;
    g->dim = ndim ? dim : 0;
    g->D[0] = 1;
    for (int d = 0; d < ndim; d++) g->D[d] = shape[d];
    g->O = g->I = 1;
    for (int d = 0; d < g->dim; d++) g->O *= g->D[d];
    for (int d = g->dim + 1; d < g->nd; d++) g->I *= g->D[d];
    g->J = g->D[g->dim];
}

static int64_t outer_offset(const domain *g, const operand *x, int64_t o) {
    int64_t off = 0;
    for (int d = g->dim - 1; d >= 0; d--) {
        off += (o % g->D[d]) * x->stride[d];
        o /= g->D[d];
    }
    return off;
}
static inline int64_t inner_offset(const operand *x, int64_t i) {
    return x->tab ? x->tab[i] : i * x->unit;
}

/* x addressed over domain g (x's own shape may be larger than D). */
static cr_status operand_init(operand *x, const domain *g, const cr_tensor *t, const char *op) {
    x->base = cr_tensor_ptr(t);
    x->tab = NULL;
    for (int d = 0; d < g->nd; d++) x->stride[d] = t->ndim ? t->stride[d] : 0;
    /* the inner dims collapse to one stride when, skipping size-1 dims, each stride is
     * the next one's times its size (true of every contiguous tensor and most views) */
    int last = g->nd - 1, prev = -1;
    bool merges = true;
    x->unit = 0;
    for (int d = last; d > g->dim; d--) {
        if (g->D[d] == 1) continue;
        if (prev < 0) x->unit = x->stride[d];
        else if (x->stride[d] != x->stride[prev] * g->D[prev]) merges = false;
        prev = d;
    }
    if (merges) return CR_OK;
    x->tab = malloc(sizeof *x->tab * (size_t)g->I);
    if (!x->tab) return cr_fail(CR_ERR_OOM, "%s: out of memory for %lld offsets", op, (long long)g->I);
    for (int64_t i = 0; i < g->I; i++) {
        int64_t r = i, off = 0;
        for (int d = last; d > g->dim; d--) {
            off += (r % g->D[d]) * x->stride[d];
            r /= g->D[d];
        }
        x->tab[i] = off;
    }
    return CR_OK;
}

/* ---- the one loop ---------------------------------------------------------------------- */
typedef struct {
    const domain *g;
    operand *dst, *src;
    const int64_t *v;
    bool full;    /* one index per domain element (gather/scatter_add), else one per j */
    bool scatter; /* dst[o, v, i] += src[o, j, i]; else dst[o, j, i] = src[o, v, i] */
    bool rows;    /* fast path: unit inner strides on both sides, so whole rows at once */
    cr_dtype dt;
} mover;

static void add_into(char *d, const char *s, cr_dtype dt) {
    switch (dt) {
    case CR_DT_F32: *(float *)d += *(const float *)s; break;
    case CR_DT_F64: *(double *)d += *(const double *)s; break;
    case CR_DT_I64: *(int64_t *)d += *(const int64_t *)s; break;
    case CR_DT_I32: *(int32_t *)d += *(const int32_t *)s; break;
    case CR_DT_U8: *(uint8_t *)d += *(const uint8_t *)s; break;
    default: cr_store_f64(d, dt, cr_load_f64(d, dt) + cr_load_f64(s, dt));
    }
}
static void copy_elem(char *d, const char *s, size_t es) {
    switch (es) {
    case 8: *(uint64_t *)d = *(const uint64_t *)s; break;
    case 4: *(uint32_t *)d = *(const uint32_t *)s; break;
    case 2: *(uint16_t *)d = *(const uint16_t *)s; break;
    default: *d = *s;
    }
}

/* Inner size 1 (the dim is the last one that is not 1): one element per j, and the
 * index of (o, j) is vl[j] in both the full and the per-j case. */
static void move_line(const mover *m, int64_t o, int64_t j0, int64_t j1) {
    const domain *g = m->g;
    int64_t es = (int64_t)cr_dtype_size(m->dt), dim = g->dim;
    int64_t dsd = m->dst->stride[dim], ssd = m->src->stride[dim];
    char *d = m->dst->base + outer_offset(g, m->dst, o) * es;
    const char *s = m->src->base + outer_offset(g, m->src, o) * es;
    const int64_t *vl = m->full ? m->v + o * g->J : m->v;
    if (m->scatter) { /* j in order: repeated indices add up the same way every run */
        if (m->dt == CR_DT_F32 && dsd == 1 && ssd == 1) {
            for (int64_t j = j0; j < j1; j++) ((float *)d)[vl[j]] += ((const float *)s)[j];
        } else if (m->dt == CR_DT_F32) {
            for (int64_t j = j0; j < j1; j++) ((float *)d)[vl[j] * dsd] += ((const float *)s)[j * ssd];
        } else if (m->dt == CR_DT_F64) {
            for (int64_t j = j0; j < j1; j++) ((double *)d)[vl[j] * dsd] += ((const double *)s)[j * ssd];
        } else {
            for (int64_t j = j0; j < j1; j++) add_into(d + vl[j] * dsd * es, s + j * ssd * es, m->dt);
        }
        return;
    }
    /* unit strides, the common case, let the compiler use vector gathers */
    if (es == 4 && dsd == 1 && ssd == 1) {
        for (int64_t j = j0; j < j1; j++) ((uint32_t *)d)[j] = ((const uint32_t *)s)[vl[j]];
        return;
    }
    if (es == 8 && dsd == 1 && ssd == 1) {
        for (int64_t j = j0; j < j1; j++) ((uint64_t *)d)[j] = ((const uint64_t *)s)[vl[j]];
        return;
    }
    switch (es) {
    case 4:
        for (int64_t j = j0; j < j1; j++) ((uint32_t *)d)[j * dsd] = ((const uint32_t *)s)[vl[j] * ssd];
        break;
    case 8:
        for (int64_t j = j0; j < j1; j++) ((uint64_t *)d)[j * dsd] = ((const uint64_t *)s)[vl[j] * ssd];
        break;
    default:
        for (int64_t j = j0; j < j1; j++) copy_elem(d + j * dsd * es, s + vl[j] * ssd * es, (size_t)es);
    }
}

/* One task: outer position o, inner range [i0, i1), every j in order. */
static void move_task(const mover *m, int64_t o, int64_t i0, int64_t i1) {
    const domain *g = m->g;
    const operand *dst = m->dst, *src = m->src;
    int64_t es = (int64_t)cr_dtype_size(m->dt), dim = g->dim;
    int64_t dob = outer_offset(g, dst, o), sob = outer_offset(g, src, o);
    int64_t dsd = dst->stride[dim], ssd = src->stride[dim];
    for (int64_t j = 0; j < g->J; j++) {
        const int64_t *vr = m->full ? m->v + (o * g->J + j) * g->I : NULL;
        int64_t vj = m->full ? 0 : m->v[j];
        if (m->scatter) {
            const char *s = src->base + (sob + j * ssd) * es;
            char *d = dst->base + dob * es;
            if (m->rows && !vr && m->dt == CR_DT_F32) {
                float *df = (float *)d + vj * dsd;
                const float *sf = (const float *)s;
                for (int64_t i = i0; i < i1; i++) df[i] += sf[i];
            } else if (m->rows && !vr && m->dt == CR_DT_F64) {
                double *df = (double *)d + vj * dsd;
                const double *sf = (const double *)s;
                for (int64_t i = i0; i < i1; i++) df[i] += sf[i];
            } else if (m->rows && m->dt == CR_DT_F32) {
                float *df = (float *)d;
                const float *sf = (const float *)s;
                for (int64_t i = i0; i < i1; i++) df[vr[i] * dsd + i] += sf[i];
            } else {
                for (int64_t i = i0; i < i1; i++)
                    add_into(d + ((vr ? vr[i] : vj) * dsd + inner_offset(dst, i)) * es,
                             s + inner_offset(src, i) * es, m->dt);
            }
        } else {
            char *d = dst->base + (dob + j * dsd) * es;
            const char *s = src->base + sob * es;
            if (m->rows && !vr) {
                memcpy(d + i0 * es, s + (vj * ssd + i0) * es, (size_t)((i1 - i0) * es));
            } else {
                for (int64_t i = i0; i < i1; i++)
                    copy_elem(d + inner_offset(dst, i) * es,
                              s + ((vr ? vr[i] : vj) * ssd + inner_offset(src, i)) * es, (size_t)es);
            }
        }
    }
}

/* Work is cut into (o, range) tasks. Scatters never split j (repeated indices collide
 * along it); they split the inner range when there are few outer positions. */
static void move(const mover *m) {
    const domain *g = m->g;
    int64_t total = g->O * g->J * g->I, nt = cr_threads();
    if (total == 0) return;
    bool par = total >= CR_PAR_GRAIN && nt > 1;
    bool line = g->I == 1 && m->rows;
    int64_t span = line ? (m->scatter ? 1 : g->J) : g->I; /* what a task may split */
    int64_t chunks = (!par || g->O >= nt) ? 1 : (4 * nt + g->O - 1) / g->O;
    if (chunks > span) chunks = span;
    int64_t tasks = g->O * chunks;
#pragma omp parallel for if (par) schedule(static)
    for (int64_t t = 0; t < tasks; t++) {
        int64_t o = t / chunks, c = t % chunks;
        if (line) move_line(m, o, g->J * c / chunks, g->J * (c + 1) / chunks);
        else move_task(m, o, g->I * c / chunks, g->I * (c + 1) / chunks);
    }
}

static bool unit_inner(const operand *x) { return !x->tab && x->unit == 1; }
static bool trivial_inner(const domain *g) { return g->I == 1; }

/* Runs a mover over domain (ndim, shape, dim) with dst = out-like `dt`, freeing tables. */
static cr_status run_mover(const char *op, int ndim, const int64_t *shape, int dim,
                           cr_tensor *dst, cr_tensor *src, const int64_t *v, bool full,
                           bool scatter) {
    domain g;
    domain_init(&g, ndim, shape, dim);
    operand od, os;
    cr_status st = operand_init(&od, &g, dst, op);
    if (st) return st;
    if ((st = operand_init(&os, &g, src, op))) {
        free(od.tab);
        return st;
    }
    mover m = {&g, &od, &os, v, full, scatter, false, dst->dtype};
    /* the fast paths: whole rows when both inner strides are 1, or one element per j
     * when there is no inner range; the reference is move_task's general loop */
    m.rows = cr_fast_paths_enabled() &&
             (trivial_inner(&g) || (unit_inner(&od) && unit_inner(&os)));
    move(&m);
    free(od.tab);
    free(os.tab);
    return CR_OK;
}

/* ---- shared entry plumbing ----------------------------------------------------------------- */
/* The index lives where the data does: a GPU op reads its indices on the GPU. */
static cr_status check_pair(const char *op, cr_tensor *t, cr_tensor *idx, const char *tname) {
    CR_CHECK_TENSOR(op, t, tname);
    CR_CHECK_TENSOR(op, idx, "index");
    if (!cr_same_device(t, idx)) {
        char di[32], dt[32];
        return cr_fail(CR_ERR_DEVICE, "%s: the index is on %s but %s is on %s; an index must be "
                       "on its data's device: move it with :to('%s')", op,
                       cr_device_str(cr_tensor_dev(idx), di, sizeof di), tname,
                       cr_device_str(cr_tensor_dev(t), dt, sizeof dt), dt);
    }
    return check_index_dtype(op, idx, "index");
}

/* out = copy of t, for the scatters (which add into it). */
static cr_status copy_base(cr_call *c) {
    bool was = cr_grad_set_enabled(false);
    cr_status st = cr_op_copy_(c->out[0], c->in[0]);
    cr_grad_set_enabled(was);
    return st;
}

static cr_status zeros_like_meta(cr_tensor **z, const cr_input_meta *m, cr_dtype dt) {
    return cr_full_on(z, m->ndim, m->shape, 0.0, dt, m->device);
}

/* ---- index_select -------------------------------------------------------------------------- */
cr_status cr_cpu_index_select(cr_call *c) {
    cr_tensor *t = c->in[0], *idx = c->in[1], *o = c->out[0];
    int dim = (int)c->i[0];
    const int64_t *v;
    int64_t *owned;
    cr_status st = index_values("index_select", idx, &v, &owned);
    if (st) return st;
    char what[64];
    cr_index_range_name(CR_OP_INDEX_SELECT, dim, what, sizeof what);
    if (!(st = check_index_range("index_select", v, idx->numel, t->ndim ? t->shape[dim] : 1, what)))
        st = run_mover("index_select", o->ndim, o->shape, dim, o, t, v, false, false);
    free(owned);
    return st;
}
cr_status cr_op_index_select(cr_tensor **out, cr_tensor *t, int64_t dim, cr_tensor *index) {
    *out = NULL;
    cr_status st = check_pair("index_select", t, index, "self");
    if (!st) st = cr_check_dim("index_select", &dim, t->ndim, false);
    if (st) return st;
    char b[160];
    if (index->ndim > 1)
        return cr_fail(CR_ERR_ARG, "index_select: index must be 1-D, got shape %s; flatten it "
                       "or use gather", cr_shape_str(index, b, sizeof b));
    if (t->ndim == 0 && index->numel != 1)
        return cr_fail(CR_ERR_ARG, "index_select: a 0-dim tensor takes exactly one index, got "
                       "%lld", (long long)index->numel);
    cr_call c;
    if ((st = cr_call_init(&c, CR_OP_INDEX_SELECT, 2, 1))) return st;
    int64_t shape[CR_MAX_DIMS];
    memcpy(shape, t->shape, sizeof shape);
    if (t->ndim) shape[dim] = index->numel;
    c.in[0] = t;
    c.in[1] = index;
    c.i[0] = dim;
    if ((st = cr_tensor_alloc(&c.out[0], t->ndim, shape, t->dtype, cr_tensor_dev(t)))) return st;
    return cr_call_finish(out, &c, 1u << 1, 0);
}
cr_status cr_grad_index_select(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    cr_tensor *idx, *z;
    cr_status st = cr_saved_in(n, 1, &idx);
    if (!st) st = zeros_like_meta(&z, &n->in_meta[0], gout[0]->dtype);
    if (st) return st;
    st = cr_op_index_add(&gin[0], z, n->call.i[0], idx, gout[0]);
    cr_tensor_free(z);
    return st;
}

/* ---- gather -------------------------------------------------------------------------------- */
cr_status cr_cpu_gather(cr_call *c) {
    cr_tensor *t = c->in[0], *idx = c->in[1], *o = c->out[0];
    int dim = (int)c->i[0];
    const int64_t *v;
    int64_t *owned;
    cr_status st = index_values("gather", idx, &v, &owned);
    if (st) return st;
    char what[64];
    cr_index_range_name(CR_OP_GATHER, dim, what, sizeof what);
    if (!(st = check_index_range("gather", v, idx->numel, t->ndim ? t->shape[dim] : 1, what)))
        st = run_mover("gather", o->ndim, o->shape, dim, o, t, v, true, false);
    free(owned);
    return st;
}

/* index fits `t` in every dim but `dim` (and fits `src` in every dim when given). */
static cr_status check_index_shape(const char *op, const cr_tensor *t, const cr_tensor *idx,
                                   const cr_tensor *src, int64_t dim) {
    char a[160], b[160], e[160];
    if (idx->ndim != t->ndim || (src && src->ndim != t->ndim))
        return cr_fail(CR_ERR_ARG, "%s: index %s%s%s must have as many dims as self %s", op,
                       cr_shape_str(idx, a, sizeof a), src ? " and src " : "",
                       src ? cr_shape_str(src, e, sizeof e) : "", cr_shape_str(t, b, sizeof b));
    for (int d = 0; d < t->ndim; d++) {
        if (d != dim && idx->shape[d] > t->shape[d])
            return cr_fail(CR_ERR_ARG, "%s: index shape %s is larger than self shape %s at dim %d "
                           "(only dim %lld may be larger)", op, cr_shape_str(idx, a, sizeof a),
                           cr_shape_str(t, b, sizeof b), d, (long long)dim);
        if (src && idx->shape[d] > src->shape[d])
            return cr_fail(CR_ERR_ARG, "%s: index shape %s is larger than src shape %s at dim %d",
                           op, cr_shape_str(idx, a, sizeof a), cr_shape_str(src, b, sizeof b), d);
    }
    return CR_OK;
}

cr_status cr_op_gather(cr_tensor **out, cr_tensor *t, int64_t dim, cr_tensor *index) {
    *out = NULL;
    cr_status st = check_pair("gather", t, index, "self");
    if (!st) st = cr_check_dim("gather", &dim, t->ndim, false);
    if (!st) st = check_index_shape("gather", t, index, NULL, dim);
    if (st) return st;
    cr_call c;
    if ((st = cr_call_init(&c, CR_OP_GATHER, 2, 1))) return st;
    c.in[0] = t;
    c.in[1] = index;
    c.i[0] = dim;
    if ((st = cr_tensor_alloc(&c.out[0], index->ndim, index->shape, t->dtype, cr_tensor_dev(t))))
        return st;
    return cr_call_finish(out, &c, 1u << 1, 0);
}
cr_status cr_grad_gather(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    cr_tensor *idx, *z;
    cr_status st = cr_saved_in(n, 1, &idx);
    if (!st) st = zeros_like_meta(&z, &n->in_meta[0], gout[0]->dtype);
    if (st) return st;
    st = cr_op_scatter_add(&gin[0], z, n->call.i[0], idx, gout[0]);
    cr_tensor_free(z);
    return st;
}

/* ---- scatter_add ----------------------------------------------------------------------------- */
cr_status cr_cpu_scatter_add(cr_call *c) {
    cr_tensor *t = c->in[0], *idx = c->in[1], *src = c->in[2], *o = c->out[0];
    int dim = (int)c->i[0];
    const int64_t *v;
    int64_t *owned;
    cr_status st = index_values("scatter_add", idx, &v, &owned);
    if (st) return st;
    char what[64];
    cr_index_range_name(CR_OP_SCATTER_ADD, dim, what, sizeof what);
    if (!(st = check_index_range("scatter_add", v, idx->numel, t->ndim ? t->shape[dim] : 1, what)) &&
        !(st = copy_base(c)))
        st = run_mover("scatter_add", idx->ndim, idx->shape, dim, o, src, v, true, true);
    free(owned);
    return st;
}

static cr_status check_src(const char *op, const cr_tensor *t, const cr_tensor *src) {
    CR_CHECK_TENSOR(op, src, "src");
    cr_status st = cr_check_same_device(op, t, src);
    if (st) return st;
    if (src->dtype != t->dtype)
        return cr_fail(CR_ERR_ARG, "%s: src has dtype %s but self has %s; convert src with "
                       ":to('%s')", op, cr_dtype_name(src->dtype), cr_dtype_name(t->dtype),
                       cr_dtype_name(t->dtype));
    return CR_OK;
}

cr_status cr_op_scatter_add(cr_tensor **out, cr_tensor *t, int64_t dim, cr_tensor *index,
                            cr_tensor *src) {
    *out = NULL;
    cr_status st = check_pair("scatter_add", t, index, "self");
    if (!st) st = check_src("scatter_add", t, src);
    if (!st) st = cr_check_dim("scatter_add", &dim, t->ndim, false);
    if (!st) st = check_index_shape("scatter_add", t, index, src, dim);
    if (st) return st;
    cr_call c;
    if ((st = cr_call_init(&c, CR_OP_SCATTER_ADD, 3, 1))) return st;
    c.in[0] = t;
    c.in[1] = index;
    c.in[2] = src;
    c.i[0] = dim;
    if ((st = cr_tensor_alloc(&c.out[0], t->ndim, t->shape, t->dtype, cr_tensor_dev(t))))
        return st;
    return cr_call_finish(out, &c, 1u << 1, 0);
}

/* The part of src that the index covers gets gather(g); where src is larger than the
 * index, the rest of its grad is zero. */
cr_status cr_grad_scatter_add(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    if (n->edges[0].node) {
        cr_tensor_retain(gout[0]);
        gin[0] = gout[0];
    }
    if (!n->edges[2].node) return CR_OK;
    cr_tensor *idx, *g;
    cr_status st = cr_saved_in(n, 1, &idx);
    if (!st) st = cr_op_gather(&g, gout[0], n->call.i[0], idx);
    if (st) return st;
    const cr_input_meta *m = &n->in_meta[2];
    if (m->ndim == g->ndim && !memcmp(m->shape, g->shape, sizeof(int64_t) * (size_t)m->ndim)) {
        gin[2] = g;
        return CR_OK;
    }
    cr_tensor *z, *region;
    if ((st = zeros_like_meta(&z, m, g->dtype))) {
        cr_tensor_free(g);
        return st;
    }
    cr_tensor_retain(z);
    region = z;
    for (int d = 0; d < m->ndim && !st; d++) {
        cr_tensor *r2;
        if (!(st = cr_op_narrow(&r2, region, d, 0, g->shape[d]))) {
            cr_tensor_free(region);
            region = r2;
        }
    }
    if (!st) st = cr_op_copy_(region, g);
    cr_tensor_free(region);
    cr_tensor_free(g);
    if (st) {
        cr_tensor_free(z);
        return st;
    }
    gin[2] = z;
    return CR_OK;
}

/* ---- index_add --------------------------------------------------------------------------------- */
cr_status cr_cpu_index_add(cr_call *c) {
    cr_tensor *t = c->in[0], *idx = c->in[1], *src = c->in[2], *o = c->out[0];
    int dim = (int)c->i[0];
    const int64_t *v;
    int64_t *owned;
    cr_status st = index_values("index_add", idx, &v, &owned);
    if (st) return st;
    char what[64];
    cr_index_range_name(CR_OP_INDEX_ADD, dim, what, sizeof what);
    if (!(st = check_index_range("index_add", v, idx->numel, t->ndim ? t->shape[dim] : 1, what)) &&
        !(st = copy_base(c)))
        st = run_mover("index_add", src->ndim, src->shape, dim, o, src, v, false, true);
    free(owned);
    return st;
}
cr_status cr_op_index_add(cr_tensor **out, cr_tensor *t, int64_t dim, cr_tensor *index,
                          cr_tensor *src) {
    *out = NULL;
    cr_status st = check_pair("index_add", t, index, "self");
    if (!st) st = check_src("index_add", t, src);
    if (!st) st = cr_check_dim("index_add", &dim, t->ndim, false);
    if (st) return st;
    char a[160], b[160];
    if (index->ndim > 1)
        return cr_fail(CR_ERR_ARG, "index_add: index must be 1-D, got shape %s",
                       cr_shape_str(index, a, sizeof a));
    bool ok = src->ndim == t->ndim && (t->ndim > 0 || index->numel == 1);
    for (int d = 0; ok && d < t->ndim; d++)
        ok = src->shape[d] == (d == dim ? index->numel : t->shape[d]);
    if (!ok)
        return cr_fail(CR_ERR_ARG, "index_add: src shape %s should be self's shape %s with dim "
                       "%lld of size %lld (the number of indices)", cr_shape_str(src, a, sizeof a),
                       cr_shape_str(t, b, sizeof b), (long long)dim, (long long)index->numel);
    cr_call c;
    if ((st = cr_call_init(&c, CR_OP_INDEX_ADD, 3, 1))) return st;
    c.in[0] = t;
    c.in[1] = index;
    c.in[2] = src;
    c.i[0] = dim;
    if ((st = cr_tensor_alloc(&c.out[0], t->ndim, t->shape, t->dtype, cr_tensor_dev(t))))
        return st;
    return cr_call_finish(out, &c, 1u << 1, 0);
}
cr_status cr_grad_index_add(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    if (n->edges[0].node) {
        cr_tensor_retain(gout[0]);
        gin[0] = gout[0];
    }
    if (!n->edges[2].node) return CR_OK;
    cr_tensor *idx;
    cr_status st = cr_saved_in(n, 1, &idx);
    if (st) return st;
    return cr_op_index_select(&gin[2], gout[0], n->call.i[0], idx);
}

/* ---- embedding ------------------------------------------------------------------------------- */
cr_status cr_cpu_embedding(cr_call *c) {
    cr_tensor *w = c->in[0], *idx = c->in[1], *o = c->out[0];
    const int64_t *v;
    int64_t *owned;
    cr_status st = index_values("embedding", idx, &v, &owned);
    if (st) return st;
    char what[64];
    cr_index_range_name(CR_OP_EMBEDDING, 0, what, sizeof what);
    if (!(st = check_index_range("embedding", v, idx->numel, w->shape[0], what))) {
        int64_t shape[2] = {idx->numel, w->shape[1]};
        int64_t stride[2];
        cr_contiguous_strides(2, shape, stride);
        cr_tensor *o2 = cr_tensor_alias(o, 2, shape, stride, o->offset);
        st = run_mover("embedding", 2, shape, 0, o2, w, v, false, false);
        cr_tensor_free(o2);
    }
    free(owned);
    return st;
}
cr_status cr_op_embedding(cr_tensor **out, cr_tensor *weight, cr_tensor *idx) {
    *out = NULL;
    cr_status st = check_pair("embedding", weight, idx, "weight");
    if (st) return st;
    char a[160];
    if (weight->ndim != 2)
        return cr_fail(CR_ERR_ARG, "embedding: weight must be 2-D [num_embeddings, dim], got %s",
                       cr_shape_str(weight, a, sizeof a));
    if (idx->ndim >= CR_MAX_DIMS)
        return cr_fail(CR_ERR_ARG, "embedding: indices %s have %d dims; at most %d leave room for "
                       "the embedding dim", cr_shape_str(idx, a, sizeof a), idx->ndim, CR_MAX_DIMS - 1);
    int64_t shape[CR_MAX_DIMS];
    memcpy(shape, idx->shape, sizeof(int64_t) * (size_t)idx->ndim);
    shape[idx->ndim] = weight->shape[1];
    cr_call c;
    if ((st = cr_call_init(&c, CR_OP_EMBEDDING, 2, 1))) return st;
    c.in[0] = weight;
    c.in[1] = idx;
    if ((st = cr_tensor_alloc(&c.out[0], idx->ndim + 1, shape, weight->dtype,
                              cr_tensor_dev(weight))))
        return st;
    return cr_call_finish(out, &c, 1u << 1, 0);
}
cr_status cr_grad_embedding(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    const cr_input_meta *m = &n->in_meta[0];
    cr_tensor *idx, *flat_idx = NULL, *g2 = NULL, *z = NULL;
    int64_t minus1 = -1, rows[2] = {-1, m->shape[1]};
    cr_status st = cr_saved_in(n, 1, &idx);
    if (!st) st = cr_op_reshape(&flat_idx, idx, 1, &minus1);
    if (!st) st = cr_op_reshape(&g2, gout[0], 2, rows);
    if (!st) st = zeros_like_meta(&z, m, gout[0]->dtype);
    if (!st) st = cr_op_index_add(&gin[0], z, 0, flat_idx, g2);
    cr_tensor_free(flat_idx);
    cr_tensor_free(g2);
    cr_tensor_free(z);
    return st;
}

/* ---- one_hot ----------------------------------------------------------------------------------- */
cr_status cr_cpu_one_hot(cr_call *c) {
    cr_tensor *idx = c->in[0], *o = c->out[0];
    int64_t C = c->i[0];
    const int64_t *v;
    int64_t *owned;
    cr_status st = index_values("one_hot", idx, &v, &owned);
    if (st) return st;
    char what[64];
    cr_index_range_name(CR_OP_ONE_HOT, C, what, sizeof what);
    if (!(st = check_index_range("one_hot", v, idx->numel, C, what))) {
        int64_t *x = (int64_t *)cr_tensor_ptr(o);
        memset(x, 0, sizeof *x * (size_t)o->numel);
        for (int64_t k = 0; k < idx->numel; k++) x[k * C + v[k]] = 1;
    }
    free(owned);
    return st;
}
cr_status cr_op_one_hot(cr_tensor **out, cr_tensor *idx, int64_t num_classes) {
    *out = NULL;
    CR_CHECK_TENSOR("one_hot", idx, "index");
    cr_status st = check_index_dtype("one_hot", idx, "index");
    if (st) return st;
    char a[160];
    if (idx->ndim >= CR_MAX_DIMS)
        return cr_fail(CR_ERR_ARG, "one_hot: index %s has %d dims; at most %d leave room for the "
                       "class dim", cr_shape_str(idx, a, sizeof a), idx->ndim, CR_MAX_DIMS - 1);
    if (num_classes < 0) { /* infer: max + 1 */
        if (idx->numel == 0)
            return cr_fail(CR_ERR_ARG, "one_hot: cannot infer num_classes from an empty index; "
                           "pass num_classes");
        cr_tensor *host = idx; /* a GPU index: the output's shape waits for its values */
        if (!cr_tensor_on_cpu(idx) &&
            (st = cr_op_to_device(&host, idx, CR_DEV_CPU, 0, false)))
            return st;
        const int64_t *v;
        int64_t *owned;
        st = index_values("one_hot", host, &v, &owned);
        if (!st) {
            int64_t mx = v[0];
            for (int64_t k = 1; k < host->numel; k++) mx = v[k] > mx ? v[k] : mx;
            free(owned);
            num_classes = mx < 0 ? 0 : mx + 1;
        }
        if (host != idx) cr_tensor_free(host);
        if (st) return st;
    }
    int64_t shape[CR_MAX_DIMS];
    memcpy(shape, idx->shape, sizeof(int64_t) * (size_t)idx->ndim);
    shape[idx->ndim] = num_classes;
    if ((st = cr_check_shape_arg("one_hot", idx->ndim + 1, shape))) return st;
    cr_call c;
    if ((st = cr_call_init(&c, CR_OP_ONE_HOT, 1, 1))) return st;
    c.in[0] = idx;
    c.i[0] = num_classes;
    if ((st = cr_tensor_alloc(&c.out[0], idx->ndim + 1, shape, CR_DT_I64, cr_tensor_dev(idx))))
        return st;
    return cr_call_finish(out, &c, 0, 0);
}
