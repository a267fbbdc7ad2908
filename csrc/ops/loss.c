/* loss.c — nll_loss and cross_entropy for classification. Inputs are [N, C] or
 * [N, C, d...] (seen as [N, C, inner]; a 1-D [C] input is one sample), targets are class
 * indices [N, d...] with ignore_index, or for cross_entropy also class probabilities of
 * the logits' shape. cross_entropy is one fused kernel (log-sum-exp per position, then
 * the loss) and its derivative is computed directly: (softmax - target distribution)
 * times the reduction's scale. Label smoothing follows PyTorch exactly:
 *   loss = (1 - eps) * nll + eps / C * sum_c(-logp_c), ignored positions excluded.
 * Each derivative is an op of its own (NLL_LOSS_BACKWARD, CROSS_ENTROPY_BACKWARD), so a
 * device supplies its kernel; the forward leaves the mean's divisor (the count of
 * non-ignored positions) in call.f[1] for them. */
#include <math.h>

#include "elementwise_impl.h"
#include "loss_impl.h"
#include "reduce_impl.h"

static double ldv(const char *p, cr_dtype dt, int64_t i) {
    return dt == CR_DT_F32 ? ((const float *)p)[i] : ((const double *)p)[i];
}
static void stv(char *p, cr_dtype dt, int64_t i, double v) {
    if (dt == CR_DT_F32) ((float *)p)[i] = (float)v;
    else ((double *)p)[i] = v;
}

/* Checks input/target shapes and returns the [N, C, inner] view of the input. */
static cr_status check_loss_shapes(const char *op, const cr_tensor *x, const cr_tensor *target,
                                   bool soft, cr_loss_shape *s) {
    char a[160], b[160];
    if (x->ndim == 0)
        return cr_fail(CR_ERR_ARG, "%s: input is 0-dim; give scores of shape [N, C] or [C]", op);
    *s = cr_loss_shape_of(x->ndim, x->shape);
    if (soft) {
        if (!cr_same_shape(x, target))
            return cr_fail(CR_ERR_ARG, "%s: soft (probability) target of shape %s must have the "
                           "input's shape %s; for class indices pass an i64 target", op,
                           cr_shape_str(target, a, sizeof a), cr_shape_str(x, b, sizeof b));
        return CR_OK;
    }
    bool ok = target->ndim == (x->ndim == 1 ? 0 : x->ndim - 1);
    for (int d = 0; ok && d < target->ndim; d++)
        ok = target->shape[d] == x->shape[d == 0 ? 0 : d + 1];
    if (!ok)
        return cr_fail(CR_ERR_ARG, "%s: target of shape %s does not match input of shape %s; "
                       "class targets have the input's shape without the class dim 1 "
                       "([N] for [N, C])", op, cr_shape_str(target, a, sizeof a),
                       cr_shape_str(x, b, sizeof b));
    return CR_OK;
}

static cr_status check_reduction(const char *op, cr_reduction r) {
    if ((unsigned)r > CR_REDUCTION_SUM)
        return cr_fail(CR_ERR_ARG, "%s: reduction code %d is not one of 0 (none), 1 (mean), "
                       "2 (sum)", op, (int)r);
    return CR_OK;
}

cr_status cr_loss_target_error(const char *op, int64_t value, int64_t pos, int64_t C,
                               int64_t ignore) {
    return cr_fail(CR_ERR_ARG, "%s: target value %lld (at flat position %lld) is out of range "
                   "for %lld classes; class targets must be in [0, %lld) or equal ignore_index "
                   "(%lld)", op, (long long)value, (long long)pos, (long long)C, (long long)C,
                   (long long)ignore);
}

/* Class targets as a contiguous i64 buffer, each checked against [0, C) or ignore_index. */
static cr_status load_targets(const char *op, cr_tensor *target, int64_t C, int64_t ignore,
                              cr_tensor **tc) {
    cr_status st = cr_reduce_contig_as(tc, target, CR_DT_I64);
    if (st) return st;
    const int64_t *t = (const int64_t *)cr_tensor_ptr(*tc);
    for (int64_t i = 0; i < (*tc)->numel; i++)
        if (t[i] != ignore && (t[i] < 0 || t[i] >= C)) {
            int64_t v = t[i];
            cr_tensor_free(*tc);
            *tc = NULL;
            return cr_loss_target_error(op, v, i, C, ignore);
        }
    return CR_OK;
}

/* Writes the per-position losses (reduction none) or their sum/mean, and the count of
 * non-ignored positions (the mean's divisor, kept for backward) through *count_out.
 * Partial sums per thread are added in order, so results do not depend on timing. */
typedef double (*pos_loss_fn)(const void *ctx, int64_t q, bool *ignored);

static void reduce_losses(cr_tensor *out, int64_t npos, int64_t red, pos_loss_fn fn,
                          const void *ctx, double *count_out) {
    char *o = cr_tensor_ptr(out);
    cr_dtype odt = out->dtype;
    int nt = npos >= 1024 ? cr_threads() : 1;
    if (nt > 64) nt = 64;
    double sums[64] = {0}, counts[64] = {0};
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int t = 0; t < nt; t++) {
        int64_t lo = npos * t / nt, hi = npos * (t + 1) / nt;
        for (int64_t q = lo; q < hi; q++) {
            bool ign = false;
            double v = fn(ctx, q, &ign);
            if (red == CR_REDUCTION_NONE) cr_store_f64(o + q * (int64_t)cr_dtype_size(odt), odt, v);
            sums[t] += v;
            counts[t] += !ign;
        }
    }
    double sum = 0, count = 0;
    for (int t = 0; t < nt; t++) sum += sums[t], count += counts[t];
    if (red == CR_REDUCTION_MEAN) cr_store_f64(o, odt, sum / count);
    else if (red == CR_REDUCTION_SUM) cr_store_f64(o, odt, sum);
    *count_out = count;
}

/* The incoming grad per position: g[q] (none), g / count (mean) or g (sum). */
static cr_status grad_scale(cr_tensor *g, int64_t red, double count, int64_t npos,
                            double **scale, double *one) {
    if (red != CR_REDUCTION_NONE) {
        *one = cr_tensor_get_flat(g, 0);
        if (red == CR_REDUCTION_MEAN) *one /= count;
        *scale = NULL;
        return CR_OK;
    }
    *scale = malloc((size_t)(npos ? npos : 1) * sizeof **scale);
    if (!*scale) return cr_fail(CR_ERR_OOM, "loss backward: out of memory for %lld grads",
                                (long long)npos);
    return cr_tensor_read_f64(g, *scale);
}

/* ---- nll_loss ---- */
typedef struct {
    const char *x;
    cr_dtype dt;
    const int64_t *t;
    cr_loss_shape s;
    int64_t ignore;
} nll_ctx;

static double nll_pos(const void *ctx, int64_t q, bool *ignored) {
    const nll_ctx *c = ctx;
    int64_t y = c->t[q];
    if (y == c->ignore) {
        *ignored = true;
        return 0;
    }
    int64_t n = q / c->s.inner, j = q % c->s.inner;
    return -ldv(c->x, c->dt, (n * c->s.C + y) * c->s.inner + j);
}

cr_status cr_cpu_nll_loss(cr_call *c) {
    cr_tensor *x = c->in[0], *xc = NULL, *tc = NULL;
    cr_loss_shape s;
    cr_status st = check_loss_shapes("nll_loss", x, c->in[1], false, &s);
    if (st || (st = load_targets("nll_loss", c->in[1], s.C, c->i[1], &tc))) return st;
    if ((st = cr_reduce_contig_as(&xc, x, x->dtype))) goto done;
    nll_ctx n = {cr_tensor_ptr(xc), xc->dtype, (const int64_t *)cr_tensor_ptr(tc), s, c->i[1]};
    reduce_losses(c->out[0], s.N * s.inner, c->i[0], nll_pos, &n, &c->f[1]);
done:
    cr_tensor_free(xc);
    cr_tensor_free(tc);
    return st;
}

static cr_status loss_entry(cr_tensor **out, cr_op op, cr_tensor *x, cr_tensor *target,
                         cr_reduction red, double eps, int64_t ignore) {
    const char *name = cr_op_name(op);
    *out = NULL;
    CR_CHECK_TENSOR(name, x, "input");
    CR_CHECK_TENSOR(name, target, "target");
    cr_status st = cr_check_same_device(name, x, target);
    if (st || (st = cr_check_float(name, x, "input")) || (st = check_reduction(name, red)))
        return st;
    bool soft = cr_dtype_is_float(target->dtype);
    if (soft && op == CR_OP_NLL_LOSS)
        return cr_fail(CR_ERR_ARG, "nll_loss: target has dtype %s but class indices are needed; "
                       "convert it with :long()", cr_dtype_name(target->dtype));
    if (!soft && target->dtype != CR_DT_I64 && target->dtype != CR_DT_I32 &&
        target->dtype != CR_DT_U8)
        return cr_fail(CR_ERR_ARG, "%s: target has dtype %s; give class indices (i64) or, for "
                       "cross_entropy, probabilities (float)", name, cr_dtype_name(target->dtype));
    cr_loss_shape s;
    if ((st = check_loss_shapes(name, x, target, soft, &s))) return st;
    if (eps != eps || eps < 0 || eps > 1)
        return cr_fail(CR_ERR_ARG, "%s: label_smoothing %g must be in [0, 1]", name, eps);
    if (cr_dtype_is_half(x->dtype)) { /* through f32, recorded */
        cr_tensor *f = NULL, *tf = NULL, *r = NULL;
        if (!(st = cr_op_to(&f, x, CR_DT_F32)) &&
            !(st = cr_cast_if_needed(&tf, target, soft ? CR_DT_F32 : target->dtype)) &&
            !(st = loss_entry(&r, op, f, tf, red, eps, ignore)))
            st = cr_op_to(out, r, x->dtype);
        cr_tensor_free(f);
        cr_tensor_free(tf);
        cr_tensor_free(r);
        return st;
    }
    cr_tensor *tgt = target;
    if (soft && (st = cr_cast_if_needed(&tgt, target, x->dtype))) return st;
    cr_call c;
    if ((st = cr_call_init(&c, op, 2, 1))) goto done;
    c.in[0] = x;
    c.in[1] = tgt;
    c.i[0] = red;
    c.i[1] = ignore;
    c.i[2] = soft;
    c.f[0] = eps;
    if (red == CR_REDUCTION_NONE) {
        int ndim = x->ndim - 1;
        int64_t shape[CR_MAX_DIMS];
        for (int d = 0, k = 0; d < x->ndim; d++)
            if (d != (x->ndim > 1 ? 1 : 0)) shape[k++] = x->shape[d];
        st = cr_tensor_alloc(&c.out[0], ndim, shape, x->dtype, cr_tensor_dev(x));
    } else {
        st = cr_tensor_alloc(&c.out[0], 0, NULL, x->dtype, cr_tensor_dev(x));
    }
    /* nll's derivative needs only the targets; cross_entropy recomputes softmax */
    unsigned save = op == CR_OP_NLL_LOSS ? 2 : 3;
    if (st) cr_call_drop_outs(&c);
    else st = cr_call_finish(out, &c, save, 0);
done:
    if (soft) cr_tensor_free(tgt);
    return st;
}

/* Autocast: the losses compute in f32 (a half soft target too). */
static cr_status loss_op(cr_tensor **out, cr_op op, cr_tensor *x, cr_tensor *target,
                         cr_reduction red, double eps, int64_t ignore) {
    if (cr_autocast_get() == CR_DT_F32) return loss_entry(out, op, x, target, red, eps, ignore);
    cr_autocast_scope s;
    cr_status st = cr_autocast_begin(&s, op, x, target, NULL);
    if (!st) st = loss_entry(out, op, s.t[0], s.t[1], red, eps, ignore);
    cr_autocast_end(&s);
    return st;
}

cr_status cr_op_nll_loss(cr_tensor **out, cr_tensor *logp, cr_tensor *target,
                         cr_reduction reduction, int64_t ignore_index) {
    return loss_op(out, CR_OP_NLL_LOSS, logp, target, reduction, 0.0, ignore_index);
}

/* d nll / d logp[n, t, j] = -scale; zeros elsewhere and at ignored positions.
 * in: target, g (the loss's grad); out: dx (the input's shape, zeroed here); i[0]
 * reduction, i[1] ignore_index; f[1] the forward's count of non-ignored positions. */
cr_status cr_cpu_nll_loss_backward(cr_call *c) {
    cr_tensor *dx = c->out[0], *tc = NULL;
    double *scale = NULL, one = 0;
    cr_loss_shape s = cr_loss_shape_of(dx->ndim, dx->shape);
    int64_t npos = s.N * s.inner, ignore = c->i[1];
    cr_status st;
    if ((st = cr_reduce_contig_as(&tc, c->in[0], CR_DT_I64)) ||
        (st = grad_scale(c->in[1], c->i[0], c->f[1], npos, &scale, &one)))
        goto done;
    const int64_t *t = (const int64_t *)cr_tensor_ptr(tc);
    char *dp = cr_tensor_ptr(dx);
    memset(dp, 0, (size_t)dx->numel * cr_dtype_size(dx->dtype));
    for (int64_t q = 0; q < npos; q++) {
        if (t[q] == ignore) continue;
        int64_t nn = q / s.inner, j = q % s.inner;
        stv(dp, dx->dtype, (nn * s.C + t[q]) * s.inner + j, -(scale ? scale[q] : one));
    }
done:
    free(scale);
    cr_tensor_free(tc);
    return st;
}

cr_status cr_grad_nll_loss(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    if (!n->edges[0].node) return CR_OK;
    const cr_input_meta *m = &n->in_meta[0];
    cr_tensor *target;
    cr_status st = cr_saved_in(n, 1, &target);
    if (st) return st;
    cr_call c;
    if ((st = cr_call_init(&c, CR_OP_NLL_LOSS_BACKWARD, 2, 1))) return st;
    c.in[0] = target;
    c.in[1] = gout[0];
    c.i[0] = n->call.i[0];
    c.i[1] = n->call.i[1];
    c.f[1] = n->call.f[1];
    if ((st = cr_tensor_alloc(&c.out[0], m->ndim, m->shape, m->dtype, m->device)) ||
        (st = cr_dispatch(&c))) {
        cr_call_drop_outs(&c);
        return st;
    }
    gin[0] = c.out[0];
    return CR_OK;
}

/* ---- cross_entropy ---- */
typedef struct {
    const char *x, *p; /* logits; soft target probabilities (NULL for class targets) */
    cr_dtype dt;
    const int64_t *t;
    cr_loss_shape s;
    int64_t ignore;
    double eps;
    bool fast; /* f32 rows through cr_expf_fast */
} ce_ctx;

/* log-sum-exp over the classes of position q relative to their max: log sum exp(x_k - mx),
 * with mx in *mxo and (xsum non-NULL) sum (x_k - mx) in *xsum. Every use takes x_k - mx
 * first, so logits as large as 1e30 keep their exact differences. */
static double ce_lse(const ce_ctx *c, int64_t q, double *mxo, double *xsum) {
    int64_t n = q / c->s.inner, j = q % c->s.inner, is = c->s.inner;
    int64_t base = n * c->s.C * is + j;
    double mx = -INFINITY, sum = 0, xs = 0;
    if (is == 1 && c->dt == CR_DT_F32 && c->fast) { /* [N, C]: contiguous rows */
        const float *r = (const float *)c->x + base;
        float fm = -INFINITY;
#pragma omp simd reduction(max : fm)
        for (int64_t k = 0; k < c->s.C; k++) fm = r[k] > fm ? r[k] : fm;
        mx = fm;
#pragma omp simd reduction(+ : sum, xs)
        for (int64_t k = 0; k < c->s.C; k++) {
            sum += cr_expf_fast(r[k] - fm);
            xs += r[k] - fm;
        }
    } else {
        for (int64_t k = 0; k < c->s.C; k++) {
            double v = ldv(c->x, c->dt, base + k * is);
            if (v > mx || v != v) mx = v;
        }
        bool fexp = c->fast && c->dt == CR_DT_F32;
        for (int64_t k = 0; k < c->s.C; k++) {
            double v = ldv(c->x, c->dt, base + k * is);
            sum += fexp ? cr_expf_fast((float)(v - mx)) : exp(v - mx);
            xs += v - mx;
        }
    }
    if (xsum) *xsum = xs;
    *mxo = mx;
    return log(sum);
}

static double ce_pos(const void *ctx, int64_t q, bool *ignored) {
    const ce_ctx *c = ctx;
    int64_t n = q / c->s.inner, j = q % c->s.inner, is = c->s.inner, C = c->s.C;
    int64_t base = n * C * is + j;
    double mx, xsum, lse = ce_lse(c, q, &mx, &xsum); /* all relative to mx */
    if (c->p) { /* soft: -sum_c q_c logp_c with q = (1 - eps) p + eps / C */
        double acc = 0;
        for (int64_t k = 0; k < C; k++)
            acc += ldv(c->p, c->dt, base + k * is) * (lse - (ldv(c->x, c->dt, base + k * is) - mx));
        return (1 - c->eps) * acc + c->eps * (lse - xsum / (double)C);
    }
    int64_t y = c->t[q];
    if (y == c->ignore) {
        *ignored = true;
        return 0;
    }
    double nll = lse - (ldv(c->x, c->dt, base + y * is) - mx);
    return c->eps == 0 ? nll : (1 - c->eps) * nll + c->eps * (lse - xsum / (double)C);
}

cr_status cr_cpu_cross_entropy(cr_call *c) {
    cr_tensor *x = c->in[0], *xc = NULL, *tc = NULL;
    bool soft = c->i[2];
    cr_loss_shape s;
    cr_status st = check_loss_shapes("cross_entropy", x, c->in[1], soft, &s);
    if (st) return st;
    if (soft) st = cr_reduce_contig_as(&tc, c->in[1], x->dtype);
    else st = load_targets("cross_entropy", c->in[1], s.C, c->i[1], &tc);
    if (st || (st = cr_reduce_contig_as(&xc, x, x->dtype))) goto done;
    ce_ctx ce = {cr_tensor_ptr(xc), soft ? cr_tensor_ptr(tc) : NULL, xc->dtype,
                 soft ? NULL : (const int64_t *)cr_tensor_ptr(tc), s, c->i[1], c->f[0],
                 cr_fast_paths_enabled()};
    reduce_losses(c->out[0], s.N * s.inner, c->i[0], ce_pos, &ce, &c->f[1]);
done:
    cr_tensor_free(xc);
    cr_tensor_free(tc);
    return st;
}

cr_status cr_op_cross_entropy(cr_tensor **out, cr_tensor *logits, cr_tensor *target,
                              cr_reduction reduction, double label_smoothing,
                              int64_t ignore_index) {
    return loss_op(out, CR_OP_CROSS_ENTROPY, logits, target, reduction, label_smoothing,
                   ignore_index);
}

/* d/dx_c = scale * (softmax_c * sum(q) - q_c), q the smoothed target distribution;
 * d/dp_c (soft targets) = scale * (1 - eps) * (-logp_c).
 * in: x, target, g (the loss's grad); out: dx?, dp? (x's shape); i[0] reduction, i[1]
 * ignore_index, i[2] soft; f[0] label smoothing, f[1] the forward's count. */
cr_status cr_cpu_cross_entropy_backward(cr_call *c) {
    cr_tensor *x = c->in[0], *target = c->in[1], *xc = NULL, *tc = NULL;
    cr_tensor *dx = c->out[0], *dp = c->out[1];
    bool soft = c->i[2];
    double *scale = NULL, one = 0;
    cr_status st;
    cr_loss_shape s;
    if ((st = check_loss_shapes("cross_entropy", x, target, soft, &s))) return st;
    int64_t npos = s.N * s.inner, is = s.inner, C = s.C;
    double eps = c->f[0];
    cr_dtype dt = x->dtype;
    if ((st = cr_reduce_contig_as(&xc, x, dt)) ||
        (st = cr_reduce_contig_as(&tc, target, soft ? dt : CR_DT_I64)) ||
        (st = grad_scale(c->in[2], c->i[0], c->f[1], npos, &scale, &one)))
        goto done;
    ce_ctx ce = {cr_tensor_ptr(xc), soft ? cr_tensor_ptr(tc) : NULL, dt,
                 soft ? NULL : (const int64_t *)cr_tensor_ptr(tc), s, c->i[1], eps,
                 cr_fast_paths_enabled()};
    char *dxp = dx ? cr_tensor_ptr(dx) : NULL, *dpp = dp ? cr_tensor_ptr(dp) : NULL;
#pragma omp parallel for if (npos * C >= CR_PAR_GRAIN) schedule(static)
    for (int64_t q = 0; q < npos; q++) {
        int64_t base = (q / is) * C * is + q % is;
        double g = scale ? scale[q] : one;
        bool ignored = !soft && ce.t[q] == ce.ignore;
        if (ignored) g = 0;
        double mx = 0, lse = ignored ? 0 : ce_lse(&ce, q, &mx, NULL); /* log softmax_k = x_k - mx - lse */
        if (ce.fast && !soft && is == 1 && dt == CR_DT_F32 && dxp) { /* [N, C] rows */
            const float *xr = (const float *)ce.x + base;
            float *dr = (float *)dxp + base, gf = (float)g, l = (float)lse, m = (float)mx;
            float off = (float)(eps / (double)C);
            if (ignored) {
                memset(dr, 0, (size_t)C * sizeof *dr);
                continue;
            }
#pragma omp simd
            for (int64_t k = 0; k < C; k++) dr[k] = gf * (cr_expf_fast(xr[k] - m - l) - off);
            dr[ce.t[q]] -= gf * (float)(1 - eps);
            continue;
        }
        double psum = 1;
        if (soft) {
            psum = 0;
            for (int64_t k = 0; k < C; k++) psum += ldv(ce.p, dt, base + k * is);
            psum = (1 - eps) * psum + eps;
        }
        for (int64_t k = 0; k < C; k++) {
            int64_t i = base + k * is;
            double v = ldv(ce.x, dt, i) - mx - lse; /* log softmax */
            if (dxp) {
                double qk = eps / (double)C;
                if (soft) qk += (1 - eps) * ldv(ce.p, dt, i);
                else if (k == ce.t[q]) qk += 1 - eps;
                double e = ce.fast && dt == CR_DT_F32 ? cr_expf_fast((float)v) : exp(v);
                stv(dxp, dt, i, ignored ? 0.0 : g * (e * psum - qk));
            }
            if (dpp) stv(dpp, dt, i, -g * (1 - eps) * v);
        }
    }
done:
    free(scale);
    cr_tensor_free(xc);
    cr_tensor_free(tc);
    return st;
}

cr_status cr_grad_cross_entropy(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    const cr_input_meta *m = &n->in_meta[0];
    bool soft = n->call.i[2], want_x = n->edges[0].node, want_p = soft && n->edges[1].node;
    if (!want_x && !want_p) return CR_OK;
    cr_tensor *x, *target;
    cr_status st;
    if ((st = cr_saved_in(n, 0, &x)) || (st = cr_saved_in(n, 1, &target))) return st;
    cr_call c;
    if ((st = cr_call_init(&c, CR_OP_CROSS_ENTROPY_BACKWARD, 3, 2))) return st;
    c.in[0] = x;
    c.in[1] = target;
    c.in[2] = gout[0];
    for (int k = 0; k < 3; k++) c.i[k] = n->call.i[k];
    c.f[0] = n->call.f[0];
    c.f[1] = n->call.f[1];
    if ((want_x && (st = cr_tensor_alloc(&c.out[0], m->ndim, m->shape, m->dtype, m->device))) ||
        (want_p && (st = cr_tensor_alloc(&c.out[1], m->ndim, m->shape, m->dtype, m->device))) ||
        (st = cr_dispatch(&c))) {
        cr_call_drop_outs(&c);
        return st;
    }
    gin[0] = c.out[0];
    gin[1] = c.out[1];
    return CR_OK;
}
