/* random.c — rand, randn, randint, randperm and bernoulli from the Philox stream. The
 * entry reserves the op's words (recorded in the call as seed and counter, so a GPU
 * kernel gets the same reservation) and the kernel turns word i into element i exactly
 * as rng.h documents. Work is split in whole counters, so every thread computes the
 * words of its own elements and the numbers do not depend on the thread count. */
#include <math.h>
#include <omp.h>

#include "rng.h"
#include "sort_impl.h"

/* ---- the parallel driver -------------------------------------------------------------- */

/* Consumes words word0 .. word0+nw-1 of the reservation (w[k] is word word0+k). */
typedef void (*draw_fn)(const uint32_t *w, int64_t word0, int64_t nw, void *ctx);

enum { CHUNK_BLOCKS = 256 }; /* 1024 words, 4 KiB of stack per thread */

static void draw(const cr_call *c, int64_t nwords, draw_fn fn, void *ctx) {
    cr_philox_stream s = {(uint64_t)c->i[0], (uint64_t)c->i[1]};
    int64_t nblocks = (nwords + 3) / 4;
    int64_t nchunks = (nblocks + CHUNK_BLOCKS - 1) / CHUNK_BLOCKS;
    /* ten rounds of multiplies per four words: worth threads well below CR_PAR_GRAIN */
    bool par = nwords >= CR_PAR_GRAIN / 4 && cr_threads() > 1;
#pragma omp parallel for if (par) schedule(static)
    for (int64_t ch = 0; ch < nchunks; ch++) {
        uint32_t w[4 * CHUNK_BLOCKS];
        int64_t b0 = ch * CHUNK_BLOCKS;
        int64_t nb = nblocks - b0 < CHUNK_BLOCKS ? nblocks - b0 : CHUNK_BLOCKS;
        cr_philox_blocks(s, b0, nb, w);
        fn(w, 4 * b0, 4 * nb, ctx);
    }
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Allocates the output and reserves nwords; the kernel reads c->i[0..1]. */
static cr_status random_setup(cr_call *c, cr_op op, int ndim, const int64_t *shape,
                              cr_dtype dt, cr_device dev) {
    cr_status st = cr_call_init(c, op, 0, 1);
    if (st) return st;
    return cr_tensor_alloc(&c->out[0], ndim, shape, dt, dev);
}
static void reserve_into(cr_call *c, int64_t nwords) {
    cr_philox_stream s = cr_rng_reserve(nwords);
    c->i[0] = (int64_t)s.seed;
    c->i[1] = (int64_t)s.counter;
}
static cr_status random_finish(cr_tensor **out, cr_call *c) {
    cr_status st = cr_dispatch(c);
    if (st) {
        cr_rng_give_back((cr_philox_stream){(uint64_t)c->i[0], (uint64_t)c->i[1]});
        cr_call_drop_outs(c);
        return st;
    }
    *out = c->out[0];
    return CR_OK;
}

static cr_status check_dtype(const char *op, cr_dtype dt) {
    if ((unsigned)dt >= CR_DT_COUNT)
        return cr_fail(CR_ERR_ARG, "%s: invalid dtype %d; use one of f32, f64, f16, bf16, i64, "
                       "i32, u8, bool", op, (int)dt);
    return CR_OK;
}
static cr_status check_float_dtype(const char *op, cr_dtype dt, const char *hint) {
    cr_status st = check_dtype(op, dt);
    if (st) return st;
    if (!cr_dtype_is_float(dt))
        return cr_fail(CR_ERR_ARG, "%s: dtype %s is not a floating dtype; %s", op,
                       cr_dtype_name(dt), hint);
    return CR_OK;
}

/* ---- rand ------------------------------------------------------------------------------ */
static void draw_rand(const uint32_t *w, int64_t word0, int64_t nw, void *ctx) {
    cr_tensor *o = ctx;
    int64_t n = o->numel;
    switch (o->dtype) {
    case CR_DT_F32: {
        float *x = (float *)cr_tensor_ptr(o);
        for (int64_t e = word0, end = min64(n, word0 + nw); e < end; e++)
            x[e] = cr_uniform_f32(w[e - word0]);
        break;
    }
    case CR_DT_F64: {
        double *x = (double *)cr_tensor_ptr(o);
        for (int64_t e = word0 / 2, end = min64(n, (word0 + nw) / 2); e < end; e++)
            x[e] = cr_uniform_f64(w[2 * e - word0], w[2 * e + 1 - word0]);
        break;
    }
    case CR_DT_F16: { /* 11 bits: exact in f16, so rounding never reaches 1 */
        uint16_t *x = (uint16_t *)cr_tensor_ptr(o);
        for (int64_t e = word0, end = min64(n, word0 + nw); e < end; e++)
            x[e] = cr_f32_to_f16((float)(w[e - word0] >> 21) * (1.0f / 2048.0f));
        break;
    }
    default: { /* bf16: 8 bits */
        uint16_t *x = (uint16_t *)cr_tensor_ptr(o);
        for (int64_t e = word0, end = min64(n, word0 + nw); e < end; e++)
            x[e] = cr_f32_to_bf16((float)(w[e - word0] >> 24) * (1.0f / 256.0f));
    }
    }
}
static int64_t rand_words(const cr_tensor *o) {
    return o->dtype == CR_DT_F64 ? 2 * o->numel : o->numel;
}
cr_status cr_cpu_rand(cr_call *c) {
    draw(c, rand_words(c->out[0]), draw_rand, c->out[0]);
    return CR_OK;
}
cr_status cr_op_rand(cr_tensor **out, int ndim, const int64_t *shape, cr_dtype dt,
                     cr_devtype dev, int dev_index) {
    *out = NULL;
    cr_status st = cr_check_shape_arg("rand", ndim, shape);
    if (!st) st = check_float_dtype("rand", dt, "use randint for integers");
    if (st) return st;
    cr_call c;
    if ((st = random_setup(&c, CR_OP_RAND, ndim, shape, dt, (cr_device){dev, dev_index}))) return st;
    reserve_into(&c, rand_words(c.out[0]));
    return random_finish(out, &c);
}

/* ---- randn: Box-Muller on pairs (cr_box_muller_f32 in rng.h) ---------------------- */
static void store_f32(cr_tensor *o, int64_t e, float v) {
    char *p = cr_tensor_ptr(o);
    if (o->dtype == CR_DT_F32) ((float *)p)[e] = v;
    else if (o->dtype == CR_DT_F16) ((uint16_t *)p)[e] = cr_f32_to_f16(v);
    else ((uint16_t *)p)[e] = cr_f32_to_bf16(v);
}

static void draw_randn(const uint32_t *w, int64_t word0, int64_t nw, void *ctx) {
    cr_tensor *o = ctx;
    int64_t n = o->numel;
    if (o->dtype == CR_DT_F64) {
        double *x = (double *)cr_tensor_ptr(o);
        for (int64_t j = word0 / 4, end = (word0 + nw) / 4; j < end && 2 * j < n; j++) {
            const uint32_t *q = w + (4 * j - word0);
            double u1 = 1.0 - cr_uniform_f64(q[0], q[1]), u2 = cr_uniform_f64(q[2], q[3]);
            double r = sqrt(-2.0 * log(u1)), a = 6.28318530717958647692 * u2;
            x[2 * j] = r * cos(a);
            if (2 * j + 1 < n) x[2 * j + 1] = r * sin(a);
        }
        return;
    }
    int64_t j0 = word0 / 2, j1 = (word0 + nw) / 2, full = n / 2; /* pairs with both halves */
    if (o->dtype == CR_DT_F32) {
        float *x = (float *)cr_tensor_ptr(o);
        const uint32_t *q = w - word0;
        int64_t jend = j1 < full ? j1 : full;
        for (int64_t j = j0; j < jend; j++) cr_box_muller_f32(q[2 * j], q[2 * j + 1], &x[2 * j], &x[2 * j + 1]);
        j0 = jend > j0 ? jend : j0;
    }
    for (int64_t j = j0; j < j1 && 2 * j < n; j++) {
        float z0, z1;
        cr_box_muller_f32(w[2 * j - word0], w[2 * j + 1 - word0], &z0, &z1);
        store_f32(o, 2 * j, z0);
        if (2 * j + 1 < n) store_f32(o, 2 * j + 1, z1);
    }
}
static int64_t randn_words(const cr_tensor *o) {
    int64_t pairs = (o->numel + 1) / 2;
    return o->dtype == CR_DT_F64 ? 4 * pairs : 2 * pairs;
}
cr_status cr_cpu_randn(cr_call *c) {
    draw(c, randn_words(c->out[0]), draw_randn, c->out[0]);
    return CR_OK;
}
cr_status cr_op_randn(cr_tensor **out, int ndim, const int64_t *shape, cr_dtype dt,
                      cr_devtype dev, int dev_index) {
    *out = NULL;
    cr_status st = cr_check_shape_arg("randn", ndim, shape);
    if (!st) st = check_float_dtype("randn", dt, "draw floats and convert them");
    if (st) return st;
    cr_call c;
    if ((st = random_setup(&c, CR_OP_RANDN, ndim, shape, dt, (cr_device){dev, dev_index}))) return st;
    reserve_into(&c, randn_words(c.out[0]));
    return random_finish(out, &c);
}

/* ---- randint ---------------------------------------------------------------------------- */
static bool range_is_wide(const cr_call *c) {
    return (uint64_t)c->i[3] - (uint64_t)c->i[2] > ((uint64_t)1 << 32);
}
static void draw_randint(const uint32_t *w, int64_t word0, int64_t nw, void *ctx) {
    const cr_call *c = ctx;
    cr_tensor *o = c->out[0];
    int64_t n = o->numel, low = c->i[2];
    uint64_t r = (uint64_t)c->i[3] - (uint64_t)low;
    char *base = cr_tensor_ptr(o);
    size_t es = cr_dtype_size(o->dtype);
    if (range_is_wide(c)) {
        for (int64_t e = word0 / 2, end = min64(n, (word0 + nw) / 2); e < end; e++) {
            uint64_t x = ((uint64_t)w[2 * e - word0] << 32) | w[2 * e + 1 - word0];
            int64_t v = (int64_t)((uint64_t)low + (uint64_t)(((unsigned __int128)x * r) >> 64));
            if (o->dtype == CR_DT_I64) ((int64_t *)base)[e] = v;
            else cr_store_f64(base + e * (int64_t)es, o->dtype, (double)v);
        }
        return;
    }
    int64_t end = min64(n, word0 + nw);
    if (o->dtype == CR_DT_I64) {
        int64_t *x = (int64_t *)base;
        for (int64_t e = word0; e < end; e++)
            x[e] = low + (int64_t)(((uint64_t)w[e - word0] * r) >> 32);
    } else if (o->dtype == CR_DT_I32) {
        int32_t *x = (int32_t *)base;
        for (int64_t e = word0; e < end; e++)
            x[e] = (int32_t)(low + (int64_t)(((uint64_t)w[e - word0] * r) >> 32));
    } else if (o->dtype == CR_DT_F32) {
        float *x = (float *)base;
        for (int64_t e = word0; e < end; e++)
            x[e] = (float)(low + (int64_t)(((uint64_t)w[e - word0] * r) >> 32));
    } else {
        for (int64_t e = word0; e < end; e++)
            cr_store_f64(base + e * (int64_t)es, o->dtype,
                         (double)(low + (int64_t)(((uint64_t)w[e - word0] * r) >> 32)));
    }
}
static int64_t randint_words(const cr_call *c) {
    return range_is_wide(c) ? 2 * c->out[0]->numel : c->out[0]->numel;
}
cr_status cr_cpu_randint(cr_call *c) {
    draw(c, randint_words(c), draw_randint, c);
    return CR_OK;
}

/* Largest integer m such that every integer in [0, m] is exact in dt (and in range). */
static double exact_int_max(cr_dtype dt) {
    switch (dt) {
    case CR_DT_F32: return 16777216.0;
    case CR_DT_F64: return 9007199254740992.0;
    case CR_DT_F16: return 2048.0;
    case CR_DT_BF16: return 256.0;
    case CR_DT_I32: return 2147483647.0;
    case CR_DT_U8: return 255.0;
    case CR_DT_BOOL: return 1.0;
    default: return 9223372036854775807.0;
    }
}
static double exact_int_min(cr_dtype dt) {
    if (dt == CR_DT_U8 || dt == CR_DT_BOOL) return 0;
    if (dt == CR_DT_I32) return -2147483648.0;
    if (dt == CR_DT_I64) return -9223372036854775808.0;
    return -exact_int_max(dt);
}

cr_status cr_op_randint(cr_tensor **out, int64_t low, int64_t high, int ndim,
                        const int64_t *shape, cr_dtype dt, cr_devtype dev, int dev_index) {
    *out = NULL;
    cr_status st = cr_check_shape_arg("randint", ndim, shape);
    if (!st) st = check_dtype("randint", dt);
    if (st) return st;
    if (high <= low)
        return cr_fail(CR_ERR_ARG, "randint: empty range [%lld, %lld); low must be below high "
                       "(high is exclusive)", (long long)low, (long long)high);
    if ((double)low < exact_int_min(dt) || (double)(high - 1) > exact_int_max(dt))
        return cr_fail(CR_ERR_ARG, "randint: range [%lld, %lld) does not fit dtype %s (exact "
                       "integers %.0f..%.0f); use a wider dtype", (long long)low,
                       (long long)high, cr_dtype_name(dt), exact_int_min(dt), exact_int_max(dt));
    cr_call c;
    if ((st = random_setup(&c, CR_OP_RANDINT, ndim, shape, dt, (cr_device){dev, dev_index}))) return st;
    c.i[2] = low;
    c.i[3] = high;
    reserve_into(&c, randint_words(&c));
    return random_finish(out, &c);
}

/* ---- randperm: a stable sort of 64-bit random keys ----------------------------------- */
typedef struct {
    cr_sort_pair *a;
    uint32_t *lo; /* fast path: low key words, by position */
    int64_t n;
} keys_ctx;
static void draw_keys(const uint32_t *w, int64_t word0, int64_t nw, void *ctx) {
    keys_ctx *k = ctx;
    for (int64_t e = word0 / 2, end = min64(k->n, (word0 + nw) / 2); e < end; e++) {
        uint32_t hi = w[2 * e - word0], lo = w[2 * e + 1 - word0];
        k->a[e].idx = e;
        if (k->lo) {
            k->a[e].key = hi;
            k->lo[e] = lo;
        } else {
            k->a[e].key = ((uint64_t)hi << 32) | lo;
        }
    }
}

/* The reference sorts the 64-bit keys. The fast path radix-sorts the high words only (4
 * byte passes, not 8) and then sorts by the full key just the runs of equal high words,
 * which for random words are rare and short: the same order, at half the cost. */
cr_status cr_cpu_randperm(cr_call *c) {
    cr_tensor *o = c->out[0];
    int64_t n = c->i[2];
    bool fast = cr_fast_paths_enabled();
    size_t cap = (size_t)(n ? n : 1);
    cr_sort_pair *a = malloc(sizeof *a * cap), *tmp = malloc(sizeof *tmp * cap);
    uint32_t *lo = fast ? malloc(sizeof *lo * cap) : NULL;
    if (!a || !tmp || (fast && !lo)) {
        free(a);
        free(tmp);
        free(lo);
        return cr_fail(CR_ERR_OOM, "randperm: out of memory for %lld sort keys", (long long)n);
    }
    keys_ctx kc = {a, lo, n};
    draw(c, 2 * n, draw_keys, &kc);
    cr_sort_pairs(a, tmp, n, fast);
    if (fast) {
        for (int64_t s = 0, e; s < n; s = e) {
            for (e = s + 1; e < n && a[e].key == a[s].key; e++) {}
            if (e - s < 2) continue;
            for (int64_t k = s; k < e; k++) a[k].key = (a[k].key << 32) | lo[a[k].idx];
            cr_sort_pairs(a + s, tmp, e - s, false);
        }
    }
    char *base = cr_tensor_ptr(o);
    size_t es = cr_dtype_size(o->dtype);
    if (o->dtype == CR_DT_I64) {
        for (int64_t e = 0; e < n; e++) ((int64_t *)base)[e] = a[e].idx;
    } else {
        for (int64_t e = 0; e < n; e++) cr_store_f64(base + e * (int64_t)es, o->dtype, (double)a[e].idx);
    }
    free(a);
    free(tmp);
    free(lo);
    return CR_OK;
}
cr_status cr_op_randperm(cr_tensor **out, int64_t n, cr_dtype dt, cr_devtype dev, int dev_index) {
    *out = NULL;
    int64_t shape[1] = {n};
    cr_status st = cr_check_shape_arg("randperm", 1, shape);
    if (!st) st = check_dtype("randperm", dt);
    if (st) return st;
    if (n > 0 && (double)(n - 1) > exact_int_max(dt))
        return cr_fail(CR_ERR_ARG, "randperm: n = %lld does not fit dtype %s (exact integers up "
                       "to %.0f); use i64", (long long)n, cr_dtype_name(dt), exact_int_max(dt));
    cr_call c;
    if ((st = random_setup(&c, CR_OP_RANDPERM, 1, shape, dt, (cr_device){dev, dev_index}))) return st;
    c.i[2] = n;
    reserve_into(&c, 2 * n);
    return random_finish(out, &c);
}

/* ---- bernoulli -------------------------------------------------------------------------- */
static void draw_bernoulli(const uint32_t *w, int64_t word0, int64_t nw, void *ctx) {
    const cr_call *c = ctx;
    cr_tensor *o = c->out[0], *p = c->nin ? c->in[0] : NULL;
    int64_t end = min64(o->numel, word0 + nw);
    char *base = cr_tensor_ptr(o);
    size_t es = cr_dtype_size(o->dtype);
    const char *pb = p ? cr_tensor_ptr(p) : NULL;
    for (int64_t e = word0; e < end; e++) {
        double u = (double)w[e - word0] * (1.0 / 4294967296.0);
        double pe = !p ? c->f[0]
                    : p->dtype == CR_DT_F32 ? ((const float *)pb)[e]
                    : p->dtype == CR_DT_F64 ? ((const double *)pb)[e]
                                            : cr_load_f64(pb + e * (int64_t)cr_dtype_size(p->dtype), p->dtype);
        double v = u < pe ? 1.0 : 0.0;
        if (o->dtype == CR_DT_F32) ((float *)base)[e] = (float)v;
        else cr_store_f64(base + e * (int64_t)es, o->dtype, v);
    }
}
/* p (contiguous, checked by the entry) or the scalar c->f[0]. */
cr_status cr_cpu_bernoulli(cr_call *c) {
    draw(c, c->out[0]->numel, draw_bernoulli, c);
    return CR_OK;
}

static cr_status check_probability(double p, int64_t at) {
    if (p >= 0 && p <= 1) return CR_OK;
    if (at < 0)
        return cr_fail(CR_ERR_ARG, "bernoulli: probability %g is outside [0, 1]", p);
    return cr_fail(CR_ERR_ARG, "bernoulli: probability %g at flat index %lld is outside [0, 1]; "
                   "clamp the probabilities first", p, (long long)at);
}

cr_status cr_op_bernoulli(cr_tensor **out, cr_tensor *p) {
    *out = NULL;
    CR_CHECK_TENSOR("bernoulli", p, "p");
    cr_status st = cr_check_float("bernoulli", p, "p");
    if (st) return st;
    /* no derivative: the copy to contiguous needs no graph either */
    bool was = cr_grad_set_enabled(false);
    cr_tensor *pc;
    st = cr_op_contiguous(&pc, p);
    cr_grad_set_enabled(was);
    if (st) return st;
    /* on a GPU the kernel checks the range (and reports it as here) */
    const char *pb = cr_tensor_ptr(pc);
    size_t es = cr_dtype_size(pc->dtype);
    for (int64_t i = 0; cr_tensor_on_cpu(pc) && i < pc->numel; i++) {
        double v = cr_load_f64(pb + i * (int64_t)es, pc->dtype);
        if (!(v >= 0 && v <= 1)) {
            cr_tensor_free(pc);
            return check_probability(v, i);
        }
    }
    cr_call c;
    if ((st = random_setup(&c, CR_OP_BERNOULLI, pc->ndim, pc->shape, pc->dtype, cr_tensor_dev(pc)))) {
        cr_tensor_free(pc);
        return st;
    }
    c.nin = 1;
    c.in[0] = pc;
    reserve_into(&c, c.out[0]->numel); /* on a GPU the kernel checks the range */
    st = random_finish(out, &c);
    cr_tensor_free(pc);
    return st;
}

cr_status cr_op_bernoulli_scalar(cr_tensor **out, double p, int ndim, const int64_t *shape,
                                 cr_dtype dt, cr_devtype dev, int dev_index) {
    *out = NULL;
    cr_status st = cr_check_shape_arg("bernoulli", ndim, shape);
    if (!st) st = check_dtype("bernoulli", dt);
    if (!st) st = check_probability(p, -1);
    if (st) return st;
    cr_call c;
    if ((st = random_setup(&c, CR_OP_BERNOULLI, ndim, shape, dt, (cr_device){dev, dev_index}))) return st;
    c.f[0] = p;
    reserve_into(&c, c.out[0]->numel);
    return random_finish(out, &c);
}
