/* batch_norm.c — batch normalisation over [N, C, ...] (statistics per channel over N and
 * the spatial dims): the op entry, the reference kernels (OpenMP over channels, f64
 * accumulation) and the derivative rule. f32 goes through oneDNN (batch_norm_dnnl.c)
 * when fast paths are on; oneDNN keeps no running statistics, so their update is done
 * here for both paths.
 *
 * The forward has three outputs: y, and the mean and invstd it normalised with (batch
 * statistics in training, running ones in eval), kept for the backward, which is the op
 * BATCH_NORM_BACKWARD so that a GPU can bring its own fused kernel. */
#include <math.h>
#include <omp.h>

#include "batch_norm_impl.h"
#include "elementwise_impl.h"

/* Spatial size: the product of the dims after N and C. */
static int64_t spatial_size(const cr_tensor *x) {
    int64_t S = 1;
    for (int d = 2; d < x->ndim; d++) S *= x->shape[d];
    return S;
}

/* Whether x's data are rows of C channels: channels-last, or [N, C] (or [N, C, 1, ...])
 * once contiguous. */
static bool rows_of_channels(const cr_tensor *x) {
    return cr_tensor_is_channels_last(x) || (x->ndim >= 2 && spatial_size(x) == 1);
}

/* An input the channels-last kernels (batch_norm_nhwc.c) read as it is: rows of C
 * channels in memory, f32 or bf16, fast paths on. For [N, C] the per-channel loops of the
 * row-major kernels would stride across the rows (the fused BN + ReLU of an MLP head,
 * whose backward oneDNN does not take). */
static bool nhwc_kernels(const cr_tensor *x) {
    return cr_fast_paths_enabled() && (x->dtype == CR_DT_F32 || x->dtype == CR_DT_BF16) &&
           rows_of_channels(x) && (cr_tensor_is_channels_last(x) || cr_tensor_is_contiguous(x));
}

/* Element c of a [C] vector of any float dtype and any stride. */
static double vec_get(const cr_tensor *v, int64_t c) {
    return cr_load_f64(cr_tensor_ptr(v) + c * v->stride[0] * (int64_t)cr_dtype_size(v->dtype),
                       v->dtype);
}
static void vec_set(cr_tensor *v, int64_t c, double val) {
    cr_store_f64(cr_tensor_ptr(v) + c * v->stride[0] * (int64_t)cr_dtype_size(v->dtype),
                 v->dtype, val);
}

/* ---- forward ---------------------------------------------------------------------- */

/* Reference: per channel, two passes (mean, then centred squares) in f64, then y. */
static void bn_forward_ref(cr_call *c, bool use_batch, double *mean, double *var) {
    cr_tensor *x = c->in[0], *w = c->in[1], *b = c->in[2], *rm = c->in[3], *rv = c->in[4];
    const int64_t N = x->shape[0], C = x->shape[1], S = spatial_size(x), M = N * S;
    const double eps = c->f[1];
    const bool f32 = x->dtype == CR_DT_F32, relu = c->i[4];
    const char *xp = cr_tensor_ptr(x);
    char *yp = cr_tensor_ptr(c->out[0]);
    bool par = x->numel >= CR_PAR_GRAIN && C > 1;
#pragma omp parallel for if (par) schedule(static)
    for (int64_t ch = 0; ch < C; ch++) {
        double m, v;
        if (use_batch) {
            double s = 0, sq = 0;
            for (int64_t n = 0; n < N; n++) {
                int64_t base = (n * C + ch) * S;
                for (int64_t k = 0; k < S; k++)
                    s += f32 ? ((const float *)xp)[base + k] : ((const double *)xp)[base + k];
            }
            m = s / (double)M;
            for (int64_t n = 0; n < N; n++) {
                int64_t base = (n * C + ch) * S;
                for (int64_t k = 0; k < S; k++) {
                    double d = (f32 ? ((const float *)xp)[base + k]
                                    : ((const double *)xp)[base + k]) - m;
                    sq += d * d;
                }
            }
            v = sq / (double)M;
        } else {
            m = vec_get(rm, ch);
            v = vec_get(rv, ch);
        }
        mean[ch] = m;
        var[ch] = v;
        double invstd = 1.0 / sqrt(v + eps);
        double wc = w ? vec_get(w, ch) : 1.0, bc = b ? vec_get(b, ch) : 0.0;
        for (int64_t n = 0; n < N; n++) {
            int64_t base = (n * C + ch) * S;
            if (f32) {
                const float *xs = (const float *)xp + base;
                float *ys = (float *)yp + base;
                for (int64_t k = 0; k < S; k++) {
                    float y = (float)((xs[k] - m) * invstd * wc + bc);
                    ys[k] = relu && y < 0 ? 0.0f : y;
                }
            } else {
                const double *xs = (const double *)xp + base;
                double *ys = (double *)yp + base;
                for (int64_t k = 0; k < S; k++) {
                    double y = (xs[k] - m) * invstd * wc + bc;
                    ys[k] = relu && y < 0 ? 0.0 : y;
                }
            }
        }
    }
}

/* Fast f32 path for NCHW: the same arithmetic as the reference, written so the compiler
 * vectorises it — f64 sums as SIMD reductions (reassociated, so the last bits may differ
 * from the reference's sequential order) and y = x*a + b' in f32. */
static void bn_forward_f32(cr_call *c, bool use_batch, double *mean, double *var) {
    cr_tensor *x = c->in[0], *w = c->in[1], *b = c->in[2], *rm = c->in[3], *rv = c->in[4];
    const int64_t N = x->shape[0], C = x->shape[1], S = spatial_size(x), M = N * S;
    const double eps = c->f[1];
    const bool relu = c->i[4];
    const float *xp = (const float *)cr_tensor_ptr(x);
    float *yp = (float *)cr_tensor_ptr(c->out[0]);
    bool par = x->numel >= CR_PAR_GRAIN && C > 1;
#pragma omp parallel for if (par) schedule(static)
    for (int64_t ch = 0; ch < C; ch++) {
        double m, v;
        if (use_batch) {
            double s = 0, sq = 0;
            for (int64_t n = 0; n < N; n++) {
                const float *xs = xp + (n * C + ch) * S;
#pragma omp simd reduction(+ : s)
                for (int64_t k = 0; k < S; k++) s += xs[k];
            }
            m = s / (double)M;
            for (int64_t n = 0; n < N; n++) {
                const float *xs = xp + (n * C + ch) * S;
#pragma omp simd reduction(+ : sq)
                for (int64_t k = 0; k < S; k++) {
                    double d = xs[k] - m;
                    sq += d * d;
                }
            }
            v = sq / (double)M;
        } else {
            m = vec_get(rm, ch);
            v = vec_get(rv, ch);
        }
        mean[ch] = m;
        var[ch] = v;
        const double invstd = 1.0 / sqrt(v + eps);
        const double wc = w ? vec_get(w, ch) : 1.0, bc = b ? vec_get(b, ch) : 0.0;
        const float a = (float)(invstd * wc), shift = (float)(bc - m * invstd * wc);
        for (int64_t n = 0; n < N; n++) {
            const float *xs = xp + (n * C + ch) * S;
            float *ys = yp + (n * C + ch) * S;
            if (relu) {
#pragma omp simd
                for (int64_t k = 0; k < S; k++) { /* NaN stays NaN, as in relu */
                    float y = xs[k] * a + shift;
                    ys[k] = y < 0.0f ? 0.0f : y;
                }
            } else {
#pragma omp simd
                for (int64_t k = 0; k < S; k++) ys[k] = xs[k] * a + shift;
            }
        }
    }
}

#ifdef CR_HAVE_DNNL
/* oneDNN forward; false when it refused the shape. */
/* oneDNN only for [N, C] inputs: on NCHW with a spatial extent its plain-layout kernels
 * were slower than the OpenMP loops here (training forward+backward, 2 threads, medians
 * after warm-up: [128,16,28,28] 4.9 vs 3.1 ms, [128,32,14,14] 1.55 vs 1.38 ms,
 * [128,64,7,7] 0.75 vs 0.70 ms), while on [256,512] oneDNN won (0.35 vs 0.56 ms).
 * Blocked activation layouts (not kept yet) would change this: measure again then. */
static bool bn_use_dnnl(const cr_tensor *x) {
    return x->dtype == CR_DT_F32 && cr_fast_paths_enabled() && x->numel > 0 &&
           spatial_size(x) == 1;
}

static bool bn_forward_dnnl(cr_call *c, bool use_batch, double *mean, double *var) {
    cr_tensor *x = c->in[0], *w = c->in[1], *b = c->in[2], *rm = c->in[3], *rv = c->in[4];
    const int64_t N = x->shape[0], C = x->shape[1], S = spatial_size(x);
    float *buf = malloc(sizeof(float) * (size_t)(4 * C));
    if (!buf) return false;
    float *mf = buf, *vf = buf + C, *wf = buf + 2 * C, *bf = buf + 3 * C;
    for (int64_t ch = 0; ch < C; ch++) {
        if (w) wf[ch] = (float)vec_get(w, ch);
        if (b) bf[ch] = (float)vec_get(b, ch);
        if (!use_batch) {
            mf[ch] = (float)vec_get(rm, ch);
            vf[ch] = (float)vec_get(rv, ch);
        }
    }
    bool ok = cr_dnnl_batch_norm_forward((float *)cr_tensor_ptr(c->out[0]),
                                         (const float *)cr_tensor_ptr(x), w ? wf : NULL,
                                         b ? bf : NULL, mf, vf, N, C, S, !use_batch, c->f[1]);
    if (ok) {
        for (int64_t ch = 0; ch < C; ch++) {
            mean[ch] = use_batch ? mf[ch] : vec_get(rm, ch);
            var[ch] = use_batch ? vf[ch] : vec_get(rv, ch);
        }
    }
    free(buf);
    return ok;
}
#endif

/* Channels-last f32 or bf16 (conv2d's output on the oneDNN path): batch_norm_nhwc.c. */
static bool bn_forward_nhwc(cr_call *c, bool use_batch, double *mean, double *var) {
    cr_tensor *x = c->in[0], *w = c->in[1], *b = c->in[2], *rm = c->in[3], *rv = c->in[4];
    const int64_t C = x->shape[1], M = x->numel / C;
    const bool bf16 = x->dtype == CR_DT_BF16;
    float *scale = malloc(sizeof(float) * (size_t)(3 * C)), *shift = scale + C, *mf = shift + C;
    if (!scale) return false;
    const void *xp = cr_tensor_ptr(x);
    if (use_batch) {
        if (!cr_bn_nhwc_stats(xp, bf16, M, C, mean, var)) {
            free(scale);
            return false;
        }
    } else {
        for (int64_t ch = 0; ch < C; ch++) mean[ch] = vec_get(rm, ch), var[ch] = vec_get(rv, ch);
    }
    for (int64_t ch = 0; ch < C; ch++) {
        const double invstd = 1.0 / sqrt(var[ch] + c->f[1]);
        const double wc = w ? vec_get(w, ch) : 1.0, bc = b ? vec_get(b, ch) : 0.0;
        mf[ch] = (float)mean[ch];
        scale[ch] = (float)(invstd * wc);
        shift[ch] = (float)(bc - (mean[ch] - mf[ch]) * invstd * wc); /* mf's rounding */
    }
    bool ok = cr_bn_nhwc_apply(cr_tensor_ptr(c->out[0]), xp, bf16, M, C, mf, scale, shift, c->i[4]);
    free(scale);
    return ok;
}

/* in: x, weight?, bias?, running_mean?, running_var?; out: y, save_mean, save_invstd;
 * i[0] training, i[3] use batch statistics; f[0] momentum, f[1] eps. */
cr_status cr_cpu_batch_norm(cr_call *c) {
    cr_tensor *x = c->in[0], *rm = c->in[3], *rv = c->in[4];
    const int64_t N = x->shape[0], C = x->shape[1], M = N * spatial_size(x);
    const bool training = c->i[0], use_batch = c->i[3];
    const double momentum = c->f[0], eps = c->f[1];
    double *mean = malloc(sizeof(double) * (size_t)(2 * C + 1)), *var = mean + C;
    if (!mean) return cr_fail(CR_ERR_OOM, "batch_norm: out of memory for %lld channels",
                              (long long)C);
    bool done = false;
#ifdef CR_HAVE_DNNL
    if (!c->i[4] && bn_use_dnnl(x)) done = bn_forward_dnnl(c, use_batch, mean, var);
#endif
    if (!done && nhwc_kernels(x)) {
        if (!bn_forward_nhwc(c, use_batch, mean, var)) {
            free(mean);
            return cr_fail(CR_ERR_OOM, "batch_norm: out of memory for %lld channels", (long long)C);
        }
        done = true;
    }
    if (!done && cr_dtype_is_half(x->dtype)) {
        free(mean);
        return cr_call_via_f32(c, cr_cpu_batch_norm);
    }
    if (!done && x->dtype == CR_DT_F32 && cr_fast_paths_enabled())
        bn_forward_f32(c, use_batch, mean, var);
    else if (!done)
        bn_forward_ref(c, use_batch, mean, var);
    for (int64_t ch = 0; ch < C; ch++) {
        vec_set(c->out[1], ch, mean[ch]);
        vec_set(c->out[2], ch, 1.0 / sqrt(var[ch] + eps));
    }
    if (training && rm) { /* the running variance is the unbiased one, as in PyTorch */
        double unbias = M > 1 ? (double)M / (double)(M - 1) : 1.0;
        for (int64_t ch = 0; ch < C; ch++) {
            vec_set(rm, ch, (1 - momentum) * vec_get(rm, ch) + momentum * mean[ch]);
            vec_set(rv, ch, (1 - momentum) * vec_get(rv, ch) + momentum * var[ch] * unbias);
        }
    }
    free(mean);
    return CR_OK;
}

static cr_status check_channel_vec(const cr_tensor *x, const cr_tensor *v, const char *name) {
    cr_status st = cr_check_same_device("batch_norm", x, v);
    if (st) return st;
    if ((st = cr_check_float("batch_norm", v, name))) return st;
    if (v->ndim != 1 || v->shape[0] != x->shape[1]) {
        char a[160], b[160];
        return cr_fail(CR_ERR_ARG, "batch_norm: '%s' has shape %s but the input %s has %lld "
                       "channels (dim 1); pass a 1-D tensor of %lld elements", name,
                       cr_shape_str(v, a, sizeof a), cr_shape_str(x, b, sizeof b),
                       (long long)x->shape[1], (long long)x->shape[1]);
    }
    return CR_OK;
}

/* ---- split batch norm: groups of samples with statistics of their own ---- */

/* Samples [s*n, (s+1)*n) of t (dim 0), a view with t's strides. */
static cr_tensor *samples(cr_tensor *t, int64_t s, int64_t n) {
    int64_t shape[CR_MAX_DIMS];
    memcpy(shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
    shape[0] = n;
    return cr_tensor_alias(t, t->ndim, shape, t->stride, t->offset + s * n * t->stride[0]);
}

/* Per-channel statistics (or their grads): [C], or a row per split ([splits, C]). */
static cr_status alloc_stats(cr_tensor **out, int64_t splits, int64_t C, cr_dtype dt,
                             cr_device dev) {
    const int64_t dims[2] = {splits, C};
    return splits > 1 ? cr_tensor_alloc(out, 2, dims, dt, dev)
                      : cr_tensor_alloc(out, 1, &C, dt, dev);
}

/* Row s of a contiguous [splits, C] tensor, as a [C] view. */
static cr_tensor *row(cr_tensor *t, int64_t s) {
    const int64_t C = t->shape[1], one = 1;
    return cr_tensor_alias(t, 1, &C, &one, t->offset + s * C);
}

/* r = (1 - m) r + m * mean over rows of per_split ([splits, C]), in place: the running
 * statistic's update by the mean of the groups' statistics. */
static cr_status running_update(cr_tensor *r, cr_tensor *per_split, double momentum) {
    cr_tensor *avg = NULL, *diff = NULL;
    cr_status st = cr_op_mean(&avg, per_split, 1u, false);
    if (!st) st = cr_op_sub(&diff, avg, r);
    if (!st) st = cr_op_add_(r, diff, momentum);
    cr_tensor_free(avg);
    cr_tensor_free(diff);
    return st;
}

/* Runs c (a training batch norm of x, its statistics outputs [splits, C]) as `splits`
 * calls, one per group of consecutive samples, each normalised with the group's own batch
 * statistics, as that many GPUs with per-GPU batch norm would (MoCo's SplitBatchNorm).
 * The running statistics take the mean of the groups' updates: each group's call writes
 * its statistics into a zeroed row with momentum 1 (exactly the batch mean and the
 * unbiased variance), and the rows' mean enters with the real momentum. Any device. */
static cr_status dispatch_splits(cr_call *c, int64_t splits) {
    cr_tensor *x = c->in[0], *rm = c->in[3], *rv = c->in[4];
    const int64_t n = x->shape[0] / splits;
    cr_tensor *stats[2] = {NULL, NULL}; /* the groups' running-stat rows */
    cr_status st = CR_OK;
    for (int k = 0; k < 2 && rm && !st; k++) {
        cr_tensor *like = k ? rv : rm;
        st = alloc_stats(&stats[k], splits, x->shape[1], like->dtype, cr_tensor_dev(like));
        if (!st) st = cr_op_zero_(stats[k]);
    }
    for (int64_t s = 0; s < splits && !st; s++) {
        cr_call sub;
        if ((st = cr_call_init(&sub, CR_OP_BATCH_NORM, 5, 3))) break;
        sub.in[0] = samples(x, s, n);
        sub.in[1] = c->in[1];
        sub.in[2] = c->in[2];
        sub.in[3] = rm ? row(stats[0], s) : NULL;
        sub.in[4] = rm ? row(stats[1], s) : NULL;
        memcpy(sub.i, c->i, sizeof sub.i);
        memcpy(sub.f, c->f, sizeof sub.f);
        sub.i[5] = 1;
        sub.f[0] = 1.0;
        sub.out[0] = samples(c->out[0], s, n);
        sub.out[1] = row(c->out[1], s);
        sub.out[2] = row(c->out[2], s);
        st = cr_dispatch(&sub);
        cr_tensor *views[6] = {sub.in[0], sub.in[3], sub.in[4], sub.out[0], sub.out[1], sub.out[2]};
        for (int k = 0; k < 6; k++) cr_tensor_free(views[k]);
        cr_call_release_ins(&sub);
    }
    if (!st && rm) st = running_update(rm, stats[0], c->f[0]);
    if (!st && rm) st = running_update(rv, stats[1], c->f[0]);
    cr_tensor_free(stats[0]);
    cr_tensor_free(stats[1]);
    return st;
}

static cr_status batch_norm(cr_tensor **out, cr_tensor *x, cr_tensor *weight, cr_tensor *bias,
                            cr_tensor *running_mean, cr_tensor *running_var, bool training,
                            double momentum, double eps, bool relu, int64_t splits) {
    *out = NULL;
    CR_CHECK_TENSOR("batch_norm", x, "input");
    cr_status st = cr_check_float("batch_norm", x, "input");
    if (st) return st;
    char a[160];
    if (x->ndim < 2)
        return cr_fail(CR_ERR_ARG, "batch_norm: input of shape %s has %d dims; batch norm needs "
                       "[N, C, ...] (at least 2 dims)", cr_shape_str(x, a, sizeof a), x->ndim);
    if ((running_mean == NULL) != (running_var == NULL))
        return cr_fail(CR_ERR_ARG, "batch_norm: running_mean and running_var go together; pass "
                       "both or neither");
    struct { cr_tensor *t; const char *name; } vecs[4] = {
        {weight, "weight"}, {bias, "bias"}, {running_mean, "running_mean"},
        {running_var, "running_var"}};
    for (int k = 0; k < 4; k++)
        if (vecs[k].t && (st = check_channel_vec(x, vecs[k].t, vecs[k].name))) return st;
    if (!(eps >= 0) || !isfinite(eps))
        return cr_fail(CR_ERR_ARG, "batch_norm: eps = %g; pass a finite eps >= 0 (default 1e-5)",
                       eps);
    if (!isfinite(momentum))
        return cr_fail(CR_ERR_ARG, "batch_norm: momentum = %g; pass a finite number (default "
                       "0.1)", momentum);
    if (!training && !running_mean)
        return cr_fail(CR_ERR_ARG, "batch_norm: eval mode (training = false) normalises with running_mean and "
                       "running_var, and none were given; pass them, or training = true to use this batch's "
                       "statistics (as a BatchNorm without running statistics does)");
    if (splits < 1)
        return cr_fail(CR_ERR_ARG, "batch_norm: splits = %lld; pass 1 (one group: the whole "
                       "batch) or more", (long long)splits);
    if (!training) splits = 1; /* eval normalises with the running statistics, whole */
    if (x->shape[0] % splits != 0)
        return cr_fail(CR_ERR_ARG, "batch_norm: the batch of %lld samples does not divide into "
                       "splits = %lld groups; use a batch size that is a multiple of %lld",
                       (long long)x->shape[0], (long long)splits, (long long)splits);
    const int64_t C = x->shape[1], M = C ? x->numel / C / splits : 0;
    const bool use_batch = training;
    if (training && M <= 1)
        return cr_fail(CR_ERR_ARG, "batch_norm: expected more than 1 value per channel when "
                       "training, got input of shape %s%s; use a larger batch or eval mode",
                       cr_shape_str(x, a, sizeof a), splits > 1 ? " in each split" : "");
    if (use_batch && M == 0 && C > 0)
        return cr_fail(CR_ERR_ARG, "batch_norm: input of shape %s is empty, so there are no "
                       "batch statistics", cr_shape_str(x, a, sizeof a));
    if (training && running_mean) {
        if ((st = cr_check_inplace("batch_norm", running_mean)) ||
            (st = cr_check_inplace("batch_norm", running_var)))
            return st;
    }

    /* halves compute in f32, with weight, bias and statistics in f32 (dt): on a GPU, and
     * for channels-last or [N, C] bf16 on a cpu with AVX512-BF16, reading and writing the
     * halves themselves (io), as cuDNN's mixed-precision batch norm does; otherwise
     * through an f32 copy of x */
    cr_dtype dt = x->dtype == CR_DT_F64 ? CR_DT_F64 : CR_DT_F32;
    const bool half = cr_dtype_is_half(x->dtype);
    const bool native = !cr_tensor_on_cpu(x) ||
                        (x->dtype == CR_DT_BF16 && cr_cpu_bf16_native() && rows_of_channels(x));
    const cr_dtype io = half && native ? x->dtype : dt;
    cr_tensor *xc = NULL, *xt = NULL, *wc = NULL, *bc = NULL;
    cr_call c;
    memset(&c, 0, sizeof c);
    if ((st = cr_cast_if_needed(&xt, x, io))) goto done;
    /* channels-last f32 (batch_norm_nhwc.c) and GPU halves stay so; anything else becomes
     * row-major */
    if (io != CR_DT_F64 && cr_fast_paths_enabled() && cr_tensor_is_channels_last(xt)) {
        cr_tensor_retain(xt);
        xc = xt;
    } else if ((st = cr_op_contiguous(&xc, xt))) {
        goto done;
    }
    if (weight && (st = cr_cast_if_needed(&wc, weight, dt))) goto done;
    if (bias && (st = cr_cast_if_needed(&bc, bias, dt))) goto done;
    if ((st = cr_call_init(&c, CR_OP_BATCH_NORM, 5, 3))) goto done;
    c.in[0] = xc;
    c.in[1] = wc;
    c.in[2] = bc;
    c.in[3] = running_mean;
    c.in[4] = running_var;
    c.i[0] = training;
    c.i[1] = weight != NULL;
    c.i[2] = bias != NULL;
    c.i[3] = use_batch;
    c.i[4] = relu;
    c.i[5] = splits;
    c.f[0] = momentum;
    c.f[1] = eps;
    if ((st = cr_tensor_alloc_as(&c.out[0], xc->ndim, xc->shape, io, cr_tensor_dev(xc), xc)) ||
        (st = alloc_stats(&c.out[1], splits, C, dt, cr_tensor_dev(xc))) ||
        (st = alloc_stats(&c.out[2], splits, C, dt, cr_tensor_dev(xc))))
        goto done;
    if ((st = splits > 1 ? dispatch_splits(&c, splits) : cr_dispatch(&c))) goto done;
    if (training && running_mean) {
        cr_tensor_bump_version(running_mean);
        cr_tensor_bump_version(running_var);
    }
    /* x and weight for the grads; the statistics are outputs 1 and 2; y for a fused relu */
    st = cr_autograd_record(&c, 1u | 2u, 2u | 4u | (relu ? 1u : 0u));
done:
    cr_call_release_ins(&c);
    cr_tensor_free(xt);
    cr_tensor_free(xc);
    cr_tensor_free(wc);
    cr_tensor_free(bc);
    if (st) {
        cr_call_drop_outs(&c);
        return st;
    }
    cr_tensor_free(c.out[1]);
    cr_tensor_free(c.out[2]);
    if (x->dtype != io) { /* back to the input's half dtype, recorded */
        st = cr_op_to(out, c.out[0], x->dtype);
        cr_tensor_free(c.out[0]);
        return st;
    }
    *out = c.out[0];
    return CR_OK;
}

cr_status cr_op_batch_norm(cr_tensor **out, cr_tensor *x, cr_tensor *weight, cr_tensor *bias,
                           cr_tensor *running_mean, cr_tensor *running_var, bool training,
                           double momentum, double eps) {
    return batch_norm(out, x, weight, bias, running_mean, running_var, training, momentum, eps,
                      false, 1);
}

/* relu(batch_norm(x)) in one pass forward and one backward: the ResNet pattern. */
cr_status cr_op_batch_norm_relu(cr_tensor **out, cr_tensor *x, cr_tensor *weight,
                                cr_tensor *bias, cr_tensor *running_mean,
                                cr_tensor *running_var, bool training, double momentum,
                                double eps) {
    return batch_norm(out, x, weight, bias, running_mean, running_var, training, momentum, eps,
                      true, 1);
}

cr_status cr_op_batch_norm_split(cr_tensor **out, cr_tensor *x, cr_tensor *weight,
                                 cr_tensor *bias, cr_tensor *running_mean,
                                 cr_tensor *running_var, bool training, double momentum,
                                 double eps, bool relu, int64_t splits) {
    return batch_norm(out, x, weight, bias, running_mean, running_var, training, momentum, eps,
                      relu, splits);
}

/* ---- backward --------------------------------------------------------------------- */

/* Reference: per channel, sums of g and g*(x-mean), then
 *   batch stats: gx = w*invstd*(g - mean(g) - (x-mean)*invstd^2*mean(g*(x-mean)))
 *   fixed stats: gx = w*invstd*g
 * and gw = invstd*sum(g*(x-mean)), gb = sum(g). */
static void bn_backward_ref(cr_call *c) {
    cr_tensor *g = c->in[0], *x = c->in[1], *w = c->in[2], *mean = c->in[3], *inv = c->in[4];
    cr_tensor *gx = c->out[0], *gw = c->out[1], *gb = c->out[2];
    const int64_t N = x->shape[0], C = x->shape[1], S = spatial_size(x), M = N * S;
    const bool use_batch = c->i[0], f32 = x->dtype == CR_DT_F32;
    const char *gp = cr_tensor_ptr(g), *xp = cr_tensor_ptr(x);
    /* fused relu: the grad is zero where the output was clipped */
    const char *yp = c->nin > 5 && c->in[5] ? cr_tensor_ptr(c->in[5]) : NULL;
    char *gxp = gx ? cr_tensor_ptr(gx) : NULL;
    bool par = x->numel >= CR_PAR_GRAIN && C > 1;
#pragma omp parallel for if (par) schedule(static)
    for (int64_t ch = 0; ch < C; ch++) {
        const double m = vec_get(mean, ch), is = vec_get(inv, ch);
        const double wc = w ? vec_get(w, ch) : 1.0;
        double sg = 0, sgx = 0;
        for (int64_t n = 0; n < N; n++) {
            int64_t base = (n * C + ch) * S;
            for (int64_t k = 0; k < S; k++) {
                double gv = f32 ? ((const float *)gp)[base + k] : ((const double *)gp)[base + k];
                if (yp && !((f32 ? ((const float *)yp)[base + k] : ((const double *)yp)[base + k]) > 0))
                    gv = 0;
                double xv = f32 ? ((const float *)xp)[base + k] : ((const double *)xp)[base + k];
                sg += gv;
                sgx += gv * (xv - m);
            }
        }
        if (gb) vec_set(gb, ch, sg);
        if (gw) vec_set(gw, ch, sgx * is);
        if (!gx) continue;
        const double gmean = use_batch ? sg / (double)M : 0.0;
        const double proj = use_batch ? sgx / (double)M * is * is : 0.0;
        for (int64_t n = 0; n < N; n++) {
            int64_t base = (n * C + ch) * S;
            for (int64_t k = 0; k < S; k++) {
                double gv = f32 ? ((const float *)gp)[base + k] : ((const double *)gp)[base + k];
                if (yp && !((f32 ? ((const float *)yp)[base + k] : ((const double *)yp)[base + k]) > 0))
                    gv = 0;
                double xv = f32 ? ((const float *)xp)[base + k] : ((const double *)xp)[base + k];
                double r = wc * is * (gv - gmean - (xv - m) * proj);
                if (f32) ((float *)gxp)[base + k] = (float)r;
                else ((double *)gxp)[base + k] = r;
            }
        }
    }
}

/* Fast f32 path of the backward: the reference's formulas, vectorised (see
 * bn_forward_f32); gx = g*a + x*b' + c' per channel in f32. */
static void bn_backward_f32(cr_call *c) {
    cr_tensor *g = c->in[0], *x = c->in[1], *w = c->in[2], *mean = c->in[3], *inv = c->in[4];
    cr_tensor *gx = c->out[0], *gw = c->out[1], *gb = c->out[2];
    const int64_t N = x->shape[0], C = x->shape[1], S = spatial_size(x), M = N * S;
    const bool use_batch = c->i[0];
    const float *gp = (const float *)cr_tensor_ptr(g), *xp = (const float *)cr_tensor_ptr(x);
    const float *yp = c->nin > 5 && c->in[5] ? (const float *)cr_tensor_ptr(c->in[5]) : NULL;
    float *gxp = gx ? (float *)cr_tensor_ptr(gx) : NULL;
    bool par = x->numel >= CR_PAR_GRAIN && C > 1;
#pragma omp parallel for if (par) schedule(static)
    for (int64_t ch = 0; ch < C; ch++) {
        const double m = vec_get(mean, ch), is = vec_get(inv, ch);
        const double wc = w ? vec_get(w, ch) : 1.0;
        double sg = 0, sgx = 0;
        for (int64_t n = 0; n < N; n++) {
            const float *gs = gp + (n * C + ch) * S, *xs = xp + (n * C + ch) * S;
            if (yp) {
                const float *ys = yp + (n * C + ch) * S;
#pragma omp simd reduction(+ : sg, sgx)
                for (int64_t k = 0; k < S; k++) {
                    const float gk = gs[k], yk = ys[k]; /* loads first: a select vectorises */
                    const float gv = yk > 0.0f ? gk : 0.0f;
                    sg += gv;
                    sgx += (double)gv * ((double)xs[k] - m);
                }
                continue;
            }
#pragma omp simd reduction(+ : sg, sgx)
            for (int64_t k = 0; k < S; k++) {
                sg += gs[k];
                sgx += (double)gs[k] * ((double)xs[k] - m);
            }
        }
        if (gb) vec_set(gb, ch, sg);
        if (gw) vec_set(gw, ch, sgx * is);
        if (!gx) continue;
        const double gmean = use_batch ? sg / (double)M : 0.0;
        const double proj = use_batch ? sgx / (double)M * is * is : 0.0;
        /* wc*is*(g - gmean - (x - m)*proj) = g*a + x*bx + c0 */
        const float a = (float)(wc * is), bx = (float)(-wc * is * proj);
        const float c0 = (float)(wc * is * (m * proj - gmean));
        for (int64_t n = 0; n < N; n++) {
            const float *gs = gp + (n * C + ch) * S, *xs = xp + (n * C + ch) * S;
            float *o = gxp + (n * C + ch) * S;
            if (yp) {
                const float *ys = yp + (n * C + ch) * S;
#pragma omp simd
                for (int64_t k = 0; k < S; k++) {
                    const float gk = gs[k], yk = ys[k];
                    o[k] = (yk > 0.0f ? gk : 0.0f) * a + xs[k] * bx + c0;
                }
                continue;
            }
#pragma omp simd
            for (int64_t k = 0; k < S; k++) o[k] = gs[k] * a + xs[k] * bx + c0;
        }
    }
}

#ifdef CR_HAVE_DNNL
/* oneDNN wants the variance; it is recovered from the saved invstd. */
static bool bn_backward_dnnl(cr_call *c) {
    cr_tensor *g = c->in[0], *x = c->in[1], *w = c->in[2], *mean = c->in[3], *inv = c->in[4];
    cr_tensor *gx = c->out[0], *gw = c->out[1], *gb = c->out[2];
    const int64_t N = x->shape[0], C = x->shape[1], S = spatial_size(x);
    const double eps = c->f[0];
    float *buf = malloc(sizeof(float) * (size_t)(5 * C));
    float *scratch = gx ? NULL : malloc(sizeof(float) * (size_t)x->numel);
    if (!buf || (!gx && !scratch)) {
        free(buf);
        free(scratch);
        return false;
    }
    float *mf = buf, *vf = buf + C, *wf = buf + 2 * C, *gwf = buf + 3 * C, *gbf = buf + 4 * C;
    for (int64_t ch = 0; ch < C; ch++) {
        double is = vec_get(inv, ch);
        mf[ch] = (float)vec_get(mean, ch);
        vf[ch] = (float)(1.0 / (is * is) - eps);
        if (w) wf[ch] = (float)vec_get(w, ch);
    }
    bool ok = cr_dnnl_batch_norm_backward(
        gx ? (float *)cr_tensor_ptr(gx) : scratch, gw ? gwf : NULL, gb ? gbf : NULL,
        (const float *)cr_tensor_ptr(g), (const float *)cr_tensor_ptr(x), w ? wf : NULL, mf, vf,
        N, C, S, !c->i[0], eps);
    if (ok) {
        for (int64_t ch = 0; ch < C; ch++) {
            if (gw) vec_set(gw, ch, gwf[ch]);
            if (gb) vec_set(gb, ch, gbf[ch]);
        }
    }
    free(buf);
    free(scratch);
    return ok;
}
#endif

/* Channels-last f32 or bf16 backward (g, x, y and gx all channels-last, one dtype): the
 * f32 formulas. */
static cr_status bn_backward_nhwc(cr_call *c) {
    cr_tensor *g = c->in[0], *x = c->in[1], *w = c->in[2], *mean = c->in[3], *inv = c->in[4];
    cr_tensor *gx = c->out[0], *gw = c->out[1], *gb = c->out[2];
    const int64_t C = x->shape[1], M = x->numel / C;
    const bool use_batch = c->i[0], bf16 = x->dtype == CR_DT_BF16;
    const void *y = c->nin > 5 && c->in[5] ? cr_tensor_ptr(c->in[5]) : NULL;
    double *m = malloc(sizeof(double) * (size_t)(3 * C)), *sg = m + C, *sgx = m + 2 * C;
    float *a = malloc(sizeof(float) * (size_t)(4 * C)), *bx = a + C, *c0 = a + 2 * C;
    float *mf = a + 3 * C;
    if (!m || !a) {
        free(m);
        free(a);
        return cr_fail(CR_ERR_OOM, "batch_norm backward: out of memory for %lld channels",
                       (long long)C);
    }
    /* the kernels centre x on the f32 mean mf: its rounding is accounted for below */
    for (int64_t ch = 0; ch < C; ch++) m[ch] = vec_get(mean, ch), mf[ch] = (float)m[ch];
    const void *gp = cr_tensor_ptr(g), *xp = cr_tensor_ptr(x);
    bool ok = cr_bn_nhwc_grad_sums(gp, xp, y, bf16, mf, M, C, sg, sgx);
    for (int64_t ch = 0; ch < C && ok; ch++) {
        const double dm = m[ch] - mf[ch];
        sgx[ch] -= dm * sg[ch];
        const double is = vec_get(inv, ch), wc = w ? vec_get(w, ch) : 1.0;
        if (gb) vec_set(gb, ch, sg[ch]);
        if (gw) vec_set(gw, ch, sgx[ch] * is);
        const double gmean = use_batch ? sg[ch] / (double)M : 0.0;
        const double proj = use_batch ? sgx[ch] / (double)M * is * is : 0.0;
        a[ch] = (float)(wc * is);
        bx[ch] = (float)(-wc * is * proj);
        c0[ch] = (float)(wc * is * (dm * proj - gmean));
    }
    if (ok && gx)
        ok = cr_bn_nhwc_grad_input(cr_tensor_ptr(gx), gp, xp, y, bf16, M, C, mf, a, bx, c0);
    free(m);
    free(a);
    return ok ? CR_OK : cr_fail(CR_ERR_OOM, "batch_norm backward: out of memory for the "
                                "per-thread rows of %lld channels", (long long)C);
}

/* in: g, x, weight?, save_mean, save_invstd, and y when the forward fused a relu (the
 * grad is then zero where y was clipped); g and x contiguous, one float dtype.
 * out: gx?, gw?, gb?; i[0] batch statistics were used; f[0] eps. */
cr_status cr_cpu_batch_norm_backward(cr_call *c) {
    const cr_tensor *x = c->in[1];
#ifdef CR_HAVE_DNNL
    if (c->nin == 5 && bn_use_dnnl(x) && bn_backward_dnnl(c))
        return CR_OK;
#endif
    if (nhwc_kernels(x)) return bn_backward_nhwc(c);
    if (cr_dtype_is_half(x->dtype))
        return cr_call_via_f32(c, cr_cpu_batch_norm_backward);
    if (x->dtype == CR_DT_F32 && cr_fast_paths_enabled())
        bn_backward_f32(c);
    else
        bn_backward_ref(c);
    return CR_OK;
}

/* The grad in x's dtype and layout: channels-last for a channels-last x, else row-major. */
static cr_status grad_like(cr_tensor **out, cr_tensor *g, const cr_tensor *x) {
    if (g->dtype != x->dtype) {
        cr_tensor *cast = NULL;
        cr_status st = cr_op_to(&cast, g, x->dtype);
        if (!st) st = grad_like(out, cast, x);
        cr_tensor_free(cast);
        return st;
    }
    if (!cr_tensor_is_channels_last(x)) return cr_op_contiguous(out, g);
    if (cr_tensor_is_channels_last(g)) {
        cr_tensor_retain(g);
        *out = g;
        return CR_OK;
    }
    cr_status st = cr_tensor_alloc_layout(out, 4, g->shape, g->dtype, cr_tensor_dev(g), true);
    if (!st) st = cr_copy_into(*out, g);
    if (st) {
        cr_tensor_free(*out);
        *out = NULL;
    }
    return st;
}

/* The backward of a split batch norm: one call per group (its rows of g, x, y and gx, its
 * row of the statistics), each writing its weight and bias grads into a row of
 * c->out[1..2] ([splits, C]), which are then summed into [C]. */
static cr_status backward_splits(cr_call *c, int64_t splits) {
    const int64_t n = c->in[1]->shape[0] / splits;
    cr_status st = CR_OK;
    for (int64_t s = 0; s < splits && !st; s++) {
        cr_call sub;
        if ((st = cr_call_init(&sub, CR_OP_BATCH_NORM_BACKWARD, c->nin, 3))) break;
        sub.in[0] = samples(c->in[0], s, n);
        sub.in[1] = samples(c->in[1], s, n);
        sub.in[2] = c->in[2];
        sub.in[3] = row(c->in[3], s);
        sub.in[4] = row(c->in[4], s);
        if (c->nin > 5) sub.in[5] = samples(c->in[5], s, n);
        memcpy(sub.i, c->i, sizeof sub.i);
        memcpy(sub.f, c->f, sizeof sub.f);
        for (int k = 0; k < 3; k++)
            if (c->out[k]) sub.out[k] = k ? row(c->out[k], s) : samples(c->out[0], s, n);
        st = cr_dispatch(&sub);
        cr_tensor *views[8] = {sub.in[0], sub.in[1], sub.in[3], sub.in[4],
                               c->nin > 5 ? sub.in[5] : NULL, sub.out[0], sub.out[1], sub.out[2]};
        for (int k = 0; k < 8; k++) cr_tensor_free(views[k]);
        cr_call_release_ins(&sub);
    }
    for (int k = 1; k < 3 && !st; k++) {
        if (!c->out[k]) continue;
        cr_tensor *sum = NULL;
        if ((st = cr_op_sum(&sum, c->out[k], 1u, false))) break;
        cr_tensor_free(c->out[k]);
        c->out[k] = sum;
    }
    return st;
}

cr_status cr_grad_batch_norm(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    const bool has_w = n->call.i[1], has_b = n->call.i[2];
    const bool need_x = n->edges[0].node, need_w = has_w && n->edges[1].node,
               need_b = has_b && n->edges[2].node;
    if (!need_x && !need_w && !need_b) return CR_OK;
    const bool relu = n->call.i[4];
    cr_tensor *x, *w = NULL, *mean, *inv, *y = NULL, *g = NULL;
    cr_status st;
    if ((st = cr_saved_in(n, 0, &x)) || (has_w && (st = cr_saved_in(n, 1, &w))) ||
        (st = cr_saved_out(n, 1, &mean)) || (st = cr_saved_out(n, 2, &inv)) ||
        (relu && (st = cr_saved_out(n, 0, &y))))
        return st;
    if ((st = grad_like(&g, gout[0], x))) return st;
    cr_call c;
    if ((st = cr_call_init(&c, CR_OP_BATCH_NORM_BACKWARD, relu ? 6 : 5, 3))) goto done;
    if (relu) c.in[5] = y;
    c.in[0] = g;
    c.in[1] = x;
    c.in[2] = w;
    c.in[3] = mean;
    c.in[4] = inv;
    c.i[0] = n->call.i[3];
    c.f[0] = n->call.f[1];
    const int64_t splits = n->call.i[5], C = x->shape[1]; /* the forward's, >= 1 */
    if ((need_x && (st = cr_tensor_alloc_as(&c.out[0], x->ndim, x->shape, x->dtype,
                                            cr_tensor_dev(x), x))) ||
        (need_w && (st = alloc_stats(&c.out[1], splits, C, mean->dtype, cr_tensor_dev(x)))) ||
        (need_b && (st = alloc_stats(&c.out[2], splits, C, mean->dtype, cr_tensor_dev(x)))))
        goto done;
    if ((st = splits > 1 ? backward_splits(&c, splits) : cr_dispatch(&c))) goto done;
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
