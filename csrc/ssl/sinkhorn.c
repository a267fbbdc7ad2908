/* sinkhorn.c — SwAV's Sinkhorn-Knopp on prototype scores [B, K], whole
 * (cr_ssl_sinkhorn) and in the steps between which a distributed run all-reduces its
 * sums (see crescent_ssl.h for the algorithm and why each prototype's max is taken out
 * before exp). Q is an f64 [B, K] tensor (sample-major, like the scores, so a sample's
 * normalisation reads one contiguous row). Sums over samples add per-block partial
 * vectors (blocks of SK_BLOCK rows) in block order, so they are bit-identical on any
 * thread count. Scores on a GPU take the same steps as ops on their device (see
 * sinkhorn_on_device). */
#include <math.h>
#include <omp.h>

#include "internal.h"

enum { SK_BLOCK = 64 };

static cr_status bad_epsilon(const char *op, double eps) {
    return cr_fail(CR_ERR_ARG, "%s: epsilon must be a finite number > 0 (SwAV: 0.05), got %g", op, eps);
}

/* The scores of every entry: a non-empty float [B, K] tensor; on the cpu, except for the
 * whole cr_ssl_sinkhorn (any_device). */
static cr_status check_scores_on(const char *op, const cr_tensor *s, bool any_device) {
    CR_CHECK_TENSOR(op, s, "scores");
    char buf[160];
    if (s->ndim != 2)
        return cr_fail(CR_ERR_ARG, "%s: scores must be [B, K] (samples x prototypes), got %s",
                       op, cr_shape_str(s, buf, sizeof buf));
    if (!cr_dtype_is_float(s->dtype))
        return cr_fail(CR_ERR_ARG, "%s: scores must be a float tensor, got %s; convert with "
                       ":float()", op, cr_dtype_name(s->dtype));
    if (!any_device && s->storage->device != CR_DEV_CPU)
        return cr_fail(CR_ERR_DEVICE, "%s: scores are not on the CPU; the C kernel needs CPU "
                       "tensors", op);
    if (s->shape[0] < 1 || s->shape[1] < 1)
        return cr_fail(CR_ERR_ARG, "%s: scores %s are empty; give at least one sample and one "
                       "prototype", op, cr_shape_str(s, buf, sizeof buf));
    return CR_OK;
}

static cr_status check_scores(const char *op, const cr_tensor *s) { return check_scores_on(op, s, false); }

static cr_status check_q(const char *op, const cr_tensor *q) {
    CR_CHECK_TENSOR(op, q, "q");
    if (q->ndim != 2 || q->dtype != CR_DT_F64 || !cr_tensor_is_contiguous(q) ||
        q->storage->device != CR_DEV_CPU)
        return cr_fail(CR_ERR_ARG, "%s: q must be the contiguous f64 [B, K] tensor made by "
                       "cr_ssl_sinkhorn_exp", op);
    return CR_OK;
}

/* Row b of the scores as doubles into dst[K]. */
static void load_row(const cr_tensor *s, int64_t b, double *dst) {
    int64_t K = s->shape[1], s0 = s->stride[0], s1 = s->stride[1];
    const char *base = (const char *)s->storage->data;
    if (s->dtype == CR_DT_F32) {
        const float *p = (const float *)base + s->offset + b * s0;
        for (int64_t k = 0; k < K; k++) dst[k] = p[k * s1];
    } else if (s->dtype == CR_DT_F64) {
        const double *p = (const double *)base + s->offset + b * s0;
        for (int64_t k = 0; k < K; k++) dst[k] = p[k * s1];
    } else {
        size_t es = cr_dtype_size(s->dtype);
        for (int64_t k = 0; k < K; k++)
            dst[k] = cr_load_f64(base + (size_t)(s->offset + b * s0 + k * s1) * es, s->dtype);
    }
}

static int64_t nblocks(int64_t B) { return (B + SK_BLOCK - 1) / SK_BLOCK; }
static bool parallel(const cr_tensor *t) { return t->numel >= CR_PAR_GRAIN; }

cr_status cr_ssl_sinkhorn_colmax(cr_tensor *scores, double *colmax) {
    cr_status st = check_scores("sinkhorn", scores);
    if (st) return st;
    int64_t B = scores->shape[0], K = scores->shape[1];
    double *row = malloc(sizeof(double) * (size_t)K);
    if (!row) return cr_fail(CR_ERR_OOM, "sinkhorn: out of memory for %lld prototypes", (long long)K);
    for (int64_t k = 0; k < K; k++) colmax[k] = -INFINITY;
    /* max is exact in any order: one pass, no blocks needed */
    for (int64_t b = 0; b < B; b++) {
        load_row(scores, b, row);
        for (int64_t k = 0; k < K; k++)
            if (row[k] > colmax[k] || row[k] != row[k]) colmax[k] = row[k];
    }
    free(row);
    return CR_OK;
}

/* Sum over samples of q[b, k] for each k, deterministic: per-block partials. */
static cr_status col_sums(const cr_tensor *q, double *out) {
    int64_t B = q->shape[0], K = q->shape[1], nb = nblocks(B);
    const double *Q = (const double *)cr_tensor_ptr(q);
    double *part = calloc((size_t)(nb * K), sizeof(double));
    if (!part) return cr_fail(CR_ERR_OOM, "sinkhorn: out of memory for %lld partial sums", (long long)(nb * K));
#pragma omp parallel for schedule(static) if (parallel(q))
    for (int64_t blk = 0; blk < nb; blk++) {
        double *acc = part + blk * K;
        int64_t end = (blk + 1) * SK_BLOCK < B ? (blk + 1) * SK_BLOCK : B;
        for (int64_t b = blk * SK_BLOCK; b < end; b++) {
            const double *r = Q + b * K;
#pragma omp simd
            for (int64_t k = 0; k < K; k++) acc[k] += r[k];
        }
    }
    for (int64_t k = 0; k < K; k++) out[k] = 0.0;
    for (int64_t blk = 0; blk < nb; blk++)
        for (int64_t k = 0; k < K; k++) out[k] += part[blk * K + k];
    free(part);
    return CR_OK;
}

cr_status cr_ssl_sinkhorn_exp(cr_tensor **q, cr_tensor *scores, const double *colmax,
                              double eps, double *total) {
    *q = NULL;
    cr_status st = check_scores("sinkhorn", scores);
    if (st) return st;
    if (!(eps > 0) || !isfinite(eps)) return bad_epsilon("sinkhorn", eps);
    int64_t B = scores->shape[0], K = scores->shape[1], nb = nblocks(B);
    if ((st = cr_tensor_alloc(q, 2, scores->shape, CR_DT_F64, CR_CPU))) return st;
    double *Q = (double *)cr_tensor_ptr(*q);
    double *part = calloc((size_t)nb, sizeof(double));
    if (!part) {
        cr_tensor_free(*q);
        *q = NULL;
        return cr_fail(CR_ERR_OOM, "sinkhorn: out of memory");
    }
    const double inv = 1.0 / eps;
#pragma omp parallel for schedule(static) if (parallel(scores))
    for (int64_t blk = 0; blk < nb; blk++) {
        int64_t end = (blk + 1) * SK_BLOCK < B ? (blk + 1) * SK_BLOCK : B;
        double acc = 0.0;
        for (int64_t b = blk * SK_BLOCK; b < end; b++) {
            double *r = Q + b * K;
            load_row(scores, b, r);
            for (int64_t k = 0; k < K; k++) {
                r[k] = exp((r[k] - colmax[k]) * inv);
                acc += r[k];
            }
        }
        part[blk] = acc;
    }
    double t = 0.0;
    for (int64_t blk = 0; blk < nb; blk++) t += part[blk];
    free(part);
    *total = t;
    return CR_OK;
}

cr_status cr_ssl_sinkhorn_scale(cr_tensor *q, double factor) {
    cr_status st = check_q("sinkhorn_scale", q);
    if (st) return st;
    double *Q = (double *)cr_tensor_ptr(q);
    int64_t n = q->numel;
    if (!isfinite(factor)) factor = 0.0; /* a zero total (all underflowed): keep zeros */
#pragma omp parallel for simd schedule(static) if (parallel(q))
    for (int64_t i = 0; i < n; i++) Q[i] *= factor;
    cr_tensor_bump_version(q);
    return CR_OK;
}

cr_status cr_ssl_sinkhorn_colsum(cr_tensor *q, double *colsum) {
    cr_status st = check_q("sinkhorn_colsum", q);
    if (st) return st;
    return col_sums(q, colsum);
}

cr_status cr_ssl_sinkhorn_normalize(cr_tensor *q, const double *colsum, double batch_global) {
    cr_status st = check_q("sinkhorn_normalize", q);
    if (st) return st;
    if (!(batch_global >= 1))
        return cr_fail(CR_ERR_ARG, "sinkhorn_normalize: the global batch must be >= 1, got %g",
                       batch_global);
    int64_t B = q->shape[0], K = q->shape[1];
    double *Q = (double *)cr_tensor_ptr(q);
    double *inv = malloc(sizeof(double) * (size_t)K);
    if (!inv) return cr_fail(CR_ERR_OOM, "sinkhorn: out of memory for %lld prototypes", (long long)K);
    /* a zero prototype sum (every entry underflowed) keeps its zeros instead of 0/0 */
    for (int64_t k = 0; k < K; k++) inv[k] = colsum[k] > 0 ? 1.0 / (colsum[k] * (double)K) : 0.0;
#pragma omp parallel for schedule(static) if (parallel(q))
    for (int64_t b = 0; b < B; b++) {
        double *r = Q + b * K, s = 0.0;
        for (int64_t k = 0; k < K; k++) {
            r[k] *= inv[k];
            s += r[k];
        }
        double f = s > 0 ? 1.0 / (s * batch_global) : 0.0;
#pragma omp simd
        for (int64_t k = 0; k < K; k++) r[k] *= f;
    }
    free(inv);
    cr_tensor_bump_version(q);
    return CR_OK;
}

cr_status cr_ssl_sinkhorn_finish(cr_tensor **out, cr_tensor *q, double batch_global,
                                 cr_dtype dtype) {
    *out = NULL;
    cr_status st = check_q("sinkhorn_finish", q);
    if (st) return st;
    if (!cr_dtype_is_float(dtype))
        return cr_fail(CR_ERR_ARG, "sinkhorn_finish: the output dtype must be a float type, got %s",
                       cr_dtype_name(dtype));
    if ((st = cr_tensor_alloc(out, 2, q->shape, dtype, CR_CPU))) return st;
    const double *Q = (const double *)cr_tensor_ptr(q);
    char *o = cr_tensor_ptr(*out);
    int64_t n = q->numel;
    if (dtype == CR_DT_F32) {
        float *f = (float *)o;
#pragma omp parallel for simd schedule(static) if (parallel(q))
        for (int64_t i = 0; i < n; i++) f[i] = (float)(Q[i] * batch_global);
    } else if (dtype == CR_DT_F64) {
        double *d = (double *)o;
#pragma omp parallel for simd schedule(static) if (parallel(q))
        for (int64_t i = 0; i < n; i++) d[i] = Q[i] * batch_global;
    } else {
        size_t es = cr_dtype_size(dtype);
        for (int64_t i = 0; i < n; i++) cr_store_f64(o + (size_t)i * es, dtype, Q[i] * batch_global);
    }
    return CR_OK;
}

/* ---- GPU scores: the same steps as ops on the scores' device, in f64 ----
 * Everything stays on the device's stream (the first version computed on a host copy,
 * which drained the GPU in the middle of every SwAV step). The cpu steps' guards hold: a
 * zero or non-finite total, and a prototype or sample whose sum is not positive, give
 * zeros. Sums over samples run in the GPU's reduction order, so the last bits of an f64
 * result may differ from the cpu's. */

/* *cur = *made (the old *cur freed): the step that made it succeeded. */
static void replace(cr_tensor **cur, cr_tensor **made) {
    cr_tensor_free(*cur);
    *cur = *made;
    *made = NULL;
}

/* *out = 1 / (sum * scale) where sum > 0, else 0. */
static cr_status guarded_inverse(cr_tensor **out, cr_tensor *sum, double scale) {
    cr_tensor *one = NULL, *zero = NULL, *sc = NULL, *pos = NULL, *not_pos = NULL, *den = NULL, *inv = NULL;
    cr_status st;
    if (!(st = cr_tensor_scalar(&one, 1.0, CR_DT_F64)) && !(st = cr_tensor_scalar(&zero, 0.0, CR_DT_F64)) &&
        !(st = cr_tensor_scalar(&sc, scale, CR_DT_F64)) && !(st = cr_op_gt(&pos, sum, zero)) &&
        !(st = cr_op_logical_not(&not_pos, pos)) && !(st = cr_op_mul(&den, sum, sc)) &&
        !(st = cr_op_div(&inv, one, den)))
        st = cr_op_masked_fill(out, inv, not_pos, 0.0);
    cr_tensor *all[] = {one, zero, sc, pos, not_pos, den, inv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) cr_tensor_free(all[i]);
    return st;
}

/* *q = *q * guarded_inverse(sum of *q over dims, scale) */
static cr_status normalize_by_sum(cr_tensor **q, uint32_t dims, double scale) {
    cr_tensor *sum = NULL, *inv = NULL, *next = NULL;
    cr_status st = cr_op_sum(&sum, *q, dims, dims != 0);
    if (!st) st = guarded_inverse(&inv, sum, scale);
    if (!st && !(st = cr_op_mul(&next, *q, inv))) replace(q, &next);
    cr_tensor_free(sum);
    cr_tensor_free(inv);
    return st;
}

static cr_status sinkhorn_on_device(cr_tensor **out, cr_tensor *scores, double eps, int iters) {
    const int64_t B = scores->shape[0], K = scores->shape[1];
    cr_tensor *q = NULL, *m = NULL, *next = NULL, *inv_eps = NULL, *batch = NULL;
    bool was = cr_grad_set_enabled(false);
    /* each prototype's max over the samples, or one max of all when no iteration
     * normalises the prototypes (cr_ssl_sinkhorn's reason) */
    cr_status st = cr_op_to(&q, scores, CR_DT_F64);
    if (!st) st = cr_op_amax(&m, q, iters > 0 ? 1u : 0u, true);
    if (!st && !(st = cr_op_sub(&next, q, m))) replace(&q, &next);
    if (!st) st = cr_tensor_scalar(&inv_eps, 1.0 / eps, CR_DT_F64);
    if (!st && !(st = cr_op_mul(&next, q, inv_eps))) replace(&q, &next);
    if (!st && !(st = cr_op_exp(&next, q))) replace(&q, &next);
    if (!st) st = normalize_by_sum(&q, 0, 1.0);
    for (int it = 0; it < iters && !st; it++) {
        st = normalize_by_sum(&q, 1u << 0, (double)K); /* each prototype to 1/K */
        if (!st) st = normalize_by_sum(&q, 1u << 1, (double)B); /* each sample to 1/B */
    }
    if (!st) st = cr_tensor_scalar(&batch, (double)B, CR_DT_F64);
    if (!st && !(st = cr_op_mul(&next, q, batch))) replace(&q, &next);
    if (!st) st = cr_op_to(out, q, scores->dtype);
    cr_grad_set_enabled(was);
    cr_tensor *all[] = {q, m, inv_eps, batch};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) cr_tensor_free(all[i]);
    return st;
}

cr_status cr_ssl_sinkhorn(cr_tensor **out, cr_tensor *scores, double eps, int iters) {
    *out = NULL;
    cr_status st = check_scores_on("sinkhorn", scores, true);
    if (st) return st;
    if (iters < 0)
        return cr_fail(CR_ERR_ARG, "sinkhorn: iterations must be >= 0 (SwAV: 3), got %d", iters);
    if (!cr_tensor_on_cpu(scores)) {
        if (!(eps > 0) || !isfinite(eps)) return bad_epsilon("sinkhorn", eps);
        return sinkhorn_on_device(out, scores, eps, iters);
    }
    int64_t B = scores->shape[0], K = scores->shape[1];
    double *m = malloc(sizeof(double) * (size_t)K);
    if (!m) return cr_fail(CR_ERR_OOM, "sinkhorn: out of memory for %lld prototypes", (long long)K);
    cr_tensor *q = NULL;
    double total = 0.0;
    if ((st = cr_ssl_sinkhorn_colmax(scores, m))) goto done;
    if (iters == 0) { /* no prototype normalisation to cancel per-prototype shifts: one shift */
        for (int64_t k = 1; k < K; k++)
            if (m[k] > m[0] || m[k] != m[k]) m[0] = m[k];
        for (int64_t k = 1; k < K; k++) m[k] = m[0];
    }
    if ((st = cr_ssl_sinkhorn_exp(&q, scores, m, eps, &total)) ||
        (st = cr_ssl_sinkhorn_scale(q, 1.0 / total)))
        goto done;
    for (int it = 0; it < iters; it++)
        if ((st = cr_ssl_sinkhorn_colsum(q, m)) ||
            (st = cr_ssl_sinkhorn_normalize(q, m, (double)B)))
            goto done;
    st = cr_ssl_sinkhorn_finish(out, q, (double)B, scores->dtype);
done:
    free(m);
    if (q) cr_tensor_free(q);
    return st;
}
