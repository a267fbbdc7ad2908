/* where.c — selection by a bool mask: where(cond, a, b) picks a where cond is set and b
 * elsewhere (all three broadcast), masked_fill(t, mask, v) writes v where the mask is
 * set. Elements are moved as raw bits of their size, so one loop serves every dtype. */
#include <math.h>

#include "elementwise_impl.h"

/* o = m ? x : y as a bit blend: no branch, so the contiguous loops vectorise. */
#define BLEND(T, m, x, y)                                                            \
    ((T)(((x) & (T)(0 - (T)((m) != 0))) | ((y) & (T)((T)((m) != 0) - 1))))

#define WHERE_LOOP(T)                                                                \
    do {                                                                             \
        T *o = (T *)p[0];                                                            \
        const uint8_t *m = (const uint8_t *)p[1];                                    \
        const T *x = (const T *)p[2], *y = (const T *)p[3];                          \
        const int64_t so = s[0] / (int64_t)sizeof(T), sm = s[1],                     \
                      sx = s[2] / (int64_t)sizeof(T), sy = s[3] / (int64_t)sizeof(T); \
        if (so == 1 && sm == 1 && sx == 1 && sy == 1) {                              \
            for (int64_t i = 0; i < n; i++) o[i] = BLEND(T, m[i], x[i], y[i]);       \
        } else if (so == 1 && sm == 1 && sx == 1 && sy == 0) {                       \
            const T yv = y[0];                                                       \
            for (int64_t i = 0; i < n; i++) o[i] = BLEND(T, m[i], x[i], yv);         \
        } else if (so == 1 && sm == 1 && sx == 0 && sy == 1) {                       \
            const T xv = x[0];                                                       \
            for (int64_t i = 0; i < n; i++) o[i] = BLEND(T, m[i], xv, y[i]);         \
        } else {                                                                     \
            for (int64_t i = 0; i < n; i++)                                          \
                o[i * so] = m[i * sm] ? x[i * sx] : y[i * sy];                       \
        }                                                                            \
    } while (0)

static void loop_where(char **p, const int64_t *s, int64_t n, const void *ctx) {
    switch (*(const size_t *)ctx) {
    case 1: WHERE_LOOP(uint8_t); break;
    case 2: WHERE_LOOP(uint16_t); break;
    case 4: WHERE_LOOP(uint32_t); break;
    case 8: WHERE_LOOP(uint64_t); break;
    default: CR_ASSERT(!"element size");
    }
}

cr_status cr_cpu_where(cr_call *c) {
    cr_tensor *args[4] = {c->out[0], c->in[0], c->in[1], c->in[2]};
    cr_iter it;
    cr_iter_init(&it, 4, args);
    size_t es = cr_dtype_size(c->out[0]->dtype);
    cr_iter_run(&it, loop_where, &es);
    return CR_OK;
}

/* Broadcast shape of three tensors, or a message naming all three. */
static cr_status broadcast3(const cr_tensor *t[3], int *ndim, int64_t *shape) {
    int n = 0;
    for (int k = 0; k < 3; k++) n = t[k]->ndim > n ? t[k]->ndim : n;
    for (int d = 0; d < n; d++) {
        int64_t size = 1, sz[3];
        for (int k = 0; k < 3; k++) {
            int dk = d - (n - t[k]->ndim);
            sz[k] = dk >= 0 ? t[k]->shape[dk] : 1;
            if (sz[k] != 1) size = sz[k];
        }
        for (int k = 0; k < 3; k++) {
            if (sz[k] != 1 && sz[k] != size) {
                char b0[160], b1[160], b2[160];
                return cr_fail(CR_ERR_ARG, "where: shapes %s (condition), %s (self) and %s "
                               "(other) do not broadcast (dim %d: %lld, %lld, %lld); sizes must "
                               "match or be 1", cr_shape_str(t[0], b0, sizeof b0),
                               cr_shape_str(t[1], b1, sizeof b1), cr_shape_str(t[2], b2, sizeof b2),
                               d, (long long)sz[0], (long long)sz[1], (long long)sz[2]);
            }
        }
        shape[d] = size;
    }
    *ndim = n;
    return CR_OK;
}

cr_status cr_op_where(cr_tensor **out, cr_tensor *cond, cr_tensor *a, cr_tensor *b) {
    *out = NULL;
    CR_CHECK_TENSOR("where", cond, "condition");
    CR_CHECK_TENSOR("where", a, "self");
    CR_CHECK_TENSOR("where", b, "other");
    cr_status st;
    if ((st = cr_check_same_device("where", cond, a)) || (st = cr_check_same_device("where", a, b)))
        return st;
    if (cond->dtype != CR_DT_BOOL)
        return cr_fail(CR_ERR_ARG, "where: condition has dtype %s but must be bool; build it "
                       "with a comparison or convert it with :bool()", cr_dtype_name(cond->dtype));
    int ndim = 0;
    int64_t shape[CR_MAX_DIMS];
    const cr_tensor *all[3] = {cond, a, b};
    if ((st = broadcast3(all, &ndim, shape))) return st;
    cr_dtype dt = cr_result_dtype(a, b);
    cr_call c;
    if ((st = cr_call_init(&c, CR_OP_WHERE, 3, 1))) return st;
    cr_tensor *ca = NULL, *cb = NULL;
    if ((st = cr_cast_if_needed(&ca, a, dt))) return st;
    if ((st = cr_cast_if_needed(&cb, b, dt))) {
        cr_tensor_free(ca);
        return st;
    }
    c.in[0] = cond;
    c.in[1] = ca;
    c.in[2] = cb;
    st = cr_tensor_alloc(&c.out[0], ndim, shape, dt, cr_tensor_dev(a));
    if (st) cr_call_drop_outs(&c);
    else st = cr_call_finish(out, &c, 1, 0);
    cr_tensor_free(ca);
    cr_tensor_free(cb);
    return st;
}

/* g goes to a where cond is set and to b elsewhere, each summed back to its shape. */
cr_status cr_grad_where(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    cr_tensor *cond, *zero;
    cr_status st = cr_saved_in(n, 0, &cond);
    if (st || (st = cr_tensor_scalar(&zero, 0.0, gout[0]->dtype))) return st;
    for (int i = 1; i <= 2 && !st; i++) {
        if (!n->edges[i].node) continue;
        cr_tensor *g;
        st = i == 1 ? cr_op_where(&g, cond, gout[0], zero) : cr_op_where(&g, cond, zero, gout[0]);
        if (st) break;
        st = cr_sum_to_shape(&gin[i], g, n->in_meta[i].ndim, n->in_meta[i].shape);
        cr_tensor_free(g);
    }
    cr_tensor_free(zero);
    return st;
}

/* ---- masked_fill ---- */
typedef struct {
    size_t es;
    uint64_t bits; /* the fill value in the tensor's dtype, in the low es bytes */
} fill_value;

#define MASKED_FILL_LOOP(T)                                                          \
    do {                                                                             \
        T *o = (T *)p[0];                                                            \
        const T *x = (const T *)p[1];                                                \
        const uint8_t *m = (const uint8_t *)p[2];                                    \
        T v;                                                                         \
        memcpy(&v, &fv->bits, sizeof v);                                             \
        const int64_t so = s[0] / (int64_t)sizeof(T), sx = s[1] / (int64_t)sizeof(T), \
                      sm = s[2];                                                     \
        if (so == 1 && sx == 1 && sm == 1) {                                         \
            for (int64_t i = 0; i < n; i++) o[i] = BLEND(T, m[i], v, x[i]);          \
        } else if (so == 1 && sx == 1 && sm == 0) {                                  \
            const T w = m[0] ? v : 0, keep = m[0] ? 0 : (T)~(T)0;                    \
            for (int64_t i = 0; i < n; i++) o[i] = (T)((x[i] & keep) | w);           \
        } else {                                                                     \
            for (int64_t i = 0; i < n; i++) o[i * so] = m[i * sm] ? v : x[i * sx];   \
        }                                                                            \
    } while (0)

static void loop_masked_fill(char **p, const int64_t *s, int64_t n, const void *ctx) {
    const fill_value *fv = ctx;
    switch (fv->es) {
    case 1: MASKED_FILL_LOOP(uint8_t); break;
    case 2: MASKED_FILL_LOOP(uint16_t); break;
    case 4: MASKED_FILL_LOOP(uint32_t); break;
    case 8: MASKED_FILL_LOOP(uint64_t); break;
    default: CR_ASSERT(!"element size");
    }
}

cr_status cr_cpu_masked_fill(cr_call *c) {
    cr_tensor *args[3] = {c->out[0], c->in[0], c->in[1]};
    cr_iter it;
    cr_iter_init(&it, 3, args);
    fill_value fv = {cr_dtype_size(c->out[0]->dtype), 0};
    char one[8] = {0};
    cr_store_f64(one, c->out[0]->dtype, c->f[0]);
    memcpy(&fv.bits, one, sizeof fv.bits);
    cr_iter_run(&it, loop_masked_fill, &fv);
    return CR_OK;
}

cr_status cr_op_masked_fill(cr_tensor **out, cr_tensor *t, cr_tensor *mask, double value) {
    *out = NULL;
    CR_CHECK_TENSOR("masked_fill", t, "self");
    CR_CHECK_TENSOR("masked_fill", mask, "mask");
    cr_status st = cr_check_same_device("masked_fill", t, mask);
    if (st) return st;
    if (mask->dtype != CR_DT_BOOL)
        return cr_fail(CR_ERR_ARG, "masked_fill: mask has dtype %s but must be bool; build it "
                       "with a comparison or convert it with :bool()", cr_dtype_name(mask->dtype));
    int ndim;
    int64_t shape[CR_MAX_DIMS];
    if ((st = cr_broadcast_shapes("masked_fill", t, mask, &ndim, shape))) return st;
    if (ndim != t->ndim || memcmp(shape, t->shape, sizeof(int64_t) * (size_t)ndim)) {
        char a[160], b[160];
        return cr_fail(CR_ERR_ARG, "masked_fill: mask of shape %s does not broadcast to the "
                       "tensor's shape %s; the mask may only have size-1 or missing dims "
                       "where they differ", cr_shape_str(mask, a, sizeof a),
                       cr_shape_str(t, b, sizeof b));
    }
    if (!cr_dtype_is_float(t->dtype) && !isfinite(value))
        return cr_fail(CR_ERR_ARG, "masked_fill: value %g cannot be stored in a %s tensor; "
                       "use a finite value or convert the tensor with :float()", value,
                       cr_dtype_name(t->dtype));
    cr_call c;
    if ((st = cr_call_init(&c, CR_OP_MASKED_FILL, 2, 1))) return st;
    c.in[0] = t;
    c.in[1] = mask;
    c.f[0] = value;
    if ((st = cr_tensor_alloc(&c.out[0], t->ndim, t->shape, t->dtype, cr_tensor_dev(t))))
        return st;
    return cr_call_finish(out, &c, 2, 0);
}

/* The filled places did not come from t: their grad is zero. */
cr_status cr_grad_masked_fill(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    cr_tensor *mask;
    cr_status st = cr_saved_in(n, 1, &mask);
    return st ? st : cr_op_masked_fill(&gin[0], gout[0], mask, 0.0);
}
