/* conv.c — conv2d on NCHW tensors: argument checks, the reference loops (a direct
 * convolution, one output or input plane per OpenMP task), the choice between them and
 * oneDNN (conv_dnnl.c: f32, and bf16 where the CPU has AVX512-BF16; other half
 * convolutions run on f32 copies), and the derivative rule, which calls the
 * conv2d_backward op so that each device can bring its own backward kernels. */
#include "conv_impl.h"
#include "elementwise_impl.h"

/* ---- typed row helpers: the only code that differs between f32 and f64 ---------
 * Rows are where the time goes; everything around them is written once. */
static void axpy_f32(int64_t n, double a, const float *x, int64_t sx, float *y, int64_t sy) {
    const float af = (float)a;
    if (sx == 1 && sy == 1) {
        for (int64_t i = 0; i < n; i++) y[i] += af * x[i];
    } else {
        for (int64_t i = 0; i < n; i++) y[i * sy] += af * x[i * sx];
    }
}
static void axpy_f64(int64_t n, double a, const double *x, int64_t sx, double *y, int64_t sy) {
    if (sx == 1 && sy == 1) {
        for (int64_t i = 0; i < n; i++) y[i] += a * x[i];
    } else {
        for (int64_t i = 0; i < n; i++) y[i * sy] += a * x[i * sx];
    }
}
/* Dot products accumulate in f64: weight grads sum over N*OH*OW terms. */
static double dot_f32(int64_t n, const float *x, int64_t sx, const float *y) {
    double acc = 0;
    for (int64_t i = 0; i < n; i++) acc += (double)x[i * sx] * y[i];
    return acc;
}
static double dot_f64(int64_t n, const double *x, int64_t sx, const double *y) {
    double acc = 0;
    for (int64_t i = 0; i < n; i++) acc += x[i * sx] * y[i];
    return acc;
}
static double sum_f32(int64_t n, const float *x) {
    double acc = 0;
    for (int64_t i = 0; i < n; i++) acc += x[i];
    return acc;
}
static double sum_f64(int64_t n, const double *x) {
    double acc = 0;
    for (int64_t i = 0; i < n; i++) acc += x[i];
    return acc;
}

/* Byte-pointer forms that pick the typed helper; `es` is the element size. */
static inline void row_axpy(cr_dtype dt, int64_t n, double a, const char *x, int64_t sx,
                            char *y, int64_t sy) {
    if (dt == CR_DT_F32) axpy_f32(n, a, (const float *)x, sx, (float *)y, sy);
    else axpy_f64(n, a, (const double *)x, sx, (double *)y, sy);
}
static inline double row_dot(cr_dtype dt, int64_t n, const char *x, int64_t sx, const char *y) {
    return dt == CR_DT_F32 ? dot_f32(n, (const float *)x, sx, (const float *)y)
                           : dot_f64(n, (const double *)x, sx, (const double *)y);
}
static inline double row_sum(cr_dtype dt, int64_t n, const char *x) {
    return dt == CR_DT_F32 ? sum_f32(n, (const float *)x) : sum_f64(n, (const double *)x);
}
static inline double ld(cr_dtype dt, const char *p, int64_t i) {
    return dt == CR_DT_F32 ? ((const float *)p)[i] : ((const double *)p)[i];
}
static inline void row_fill(cr_dtype dt, int64_t n, char *p, double v) {
    if (dt == CR_DT_F32) {
        for (int64_t i = 0; i < n; i++) ((float *)p)[i] = (float)v;
    } else {
        for (int64_t i = 0; i < n; i++) ((double *)p)[i] = v;
    }
}

/* Outputs o in [*lo, *hi) whose input index o*s - p + kd (kd = tap * dilation) lies in
 * [0, n): the taps that would read padding are skipped rather than tested per element. */
static void tap_range(int64_t n, int64_t nout, int64_t s, int64_t p, int64_t kd, int64_t *lo,
                      int64_t *hi) {
    int64_t off = p - kd; /* need off <= o*s <= n - 1 + off */
    int64_t l = off > 0 ? (off + s - 1) / s : 0;
    int64_t h = n - 1 + off >= 0 ? (n - 1 + off) / s + 1 : 0;
    if (h > nout) h = nout;
    if (l > h) l = h;
    *lo = l;
    *hi = h;
}

/* ---- reference kernels ------------------------------------------------------------ */
/* y[n, oc] = bias[oc] + sum over the group's input channels and the taps of w * x. */
static void conv2d_forward_ref(const cr_conv_geom *g, cr_dtype dt, const char *x, const char *w,
                               const char *b, char *y) {
    const int64_t es = (int64_t)cr_dtype_size(dt), cg = g->c / g->groups, og = g->o / g->groups;
    const int64_t plane = g->oh * g->ow, taps = g->kh * g->kw;
    const int64_t work = g->n * g->o * plane * cg * taps;
#pragma omp parallel for schedule(static) if (work > CR_PAR_GRAIN) num_threads(cr_threads())
    for (int64_t no = 0; no < g->n * g->o; no++) {
        const int64_t n = no / g->o, oc = no % g->o, ic0 = (oc / og) * cg;
        char *yp = y + no * plane * es;
        row_fill(dt, plane, yp, b ? ld(dt, b, oc) : 0.0);
        for (int64_t icl = 0; icl < cg; icl++) {
            const char *xp = x + (n * g->c + ic0 + icl) * g->h * g->w * es;
            const char *wp = w + (oc * cg + icl) * taps * es;
            for (int64_t ki = 0; ki < g->kh; ki++) {
                int64_t oh0, oh1;
                tap_range(g->h, g->oh, g->sh, g->ph, ki * g->dh, &oh0, &oh1);
                for (int64_t kj = 0; kj < g->kw; kj++) {
                    int64_t ow0, ow1;
                    tap_range(g->w, g->ow, g->sw, g->pw, kj * g->dw, &ow0, &ow1);
                    const double wv = ld(dt, wp, ki * g->kw + kj);
                    const int64_t iw0 = ow0 * g->sw - g->pw + kj * g->dw;
                    for (int64_t oh = oh0; oh < oh1; oh++) {
                        const int64_t ih = oh * g->sh - g->ph + ki * g->dh;
                        row_axpy(dt, ow1 - ow0, wv, xp + (ih * g->w + iw0) * es, g->sw,
                                 yp + (oh * g->ow + ow0) * es, 1);
                    }
                }
            }
        }
    }
}

/* gx[n, ic] = sum over the group's output channels and taps of w * gy, scattered back
 * to the input positions each tap read. One input plane per task: no write races. */
static void conv2d_backward_data_ref(const cr_conv_geom *g, cr_dtype dt, const char *gy,
                                     const char *w, char *gx) {
    const int64_t es = (int64_t)cr_dtype_size(dt), cg = g->c / g->groups, og = g->o / g->groups;
    const int64_t plane = g->oh * g->ow, taps = g->kh * g->kw;
    const int64_t work = g->n * g->o * plane * cg * taps;
#pragma omp parallel for schedule(static) if (work > CR_PAR_GRAIN) num_threads(cr_threads())
    for (int64_t nc = 0; nc < g->n * g->c; nc++) {
        const int64_t n = nc / g->c, ic = nc % g->c, grp = ic / cg, icl = ic % cg;
        char *gxp = gx + nc * g->h * g->w * es;
        row_fill(dt, g->h * g->w, gxp, 0.0);
        for (int64_t ocl = 0; ocl < og; ocl++) {
            const int64_t oc = grp * og + ocl;
            const char *gyp = gy + (n * g->o + oc) * plane * es;
            const char *wp = w + (oc * cg + icl) * taps * es;
            for (int64_t ki = 0; ki < g->kh; ki++) {
                int64_t oh0, oh1;
                tap_range(g->h, g->oh, g->sh, g->ph, ki * g->dh, &oh0, &oh1);
                for (int64_t kj = 0; kj < g->kw; kj++) {
                    int64_t ow0, ow1;
                    tap_range(g->w, g->ow, g->sw, g->pw, kj * g->dw, &ow0, &ow1);
                    const double wv = ld(dt, wp, ki * g->kw + kj);
                    const int64_t iw0 = ow0 * g->sw - g->pw + kj * g->dw;
                    for (int64_t oh = oh0; oh < oh1; oh++) {
                        const int64_t ih = oh * g->sh - g->ph + ki * g->dh;
                        row_axpy(dt, ow1 - ow0, wv, gyp + (oh * g->ow + ow0) * es, 1,
                                 gxp + (ih * g->w + iw0) * es, g->sw);
                    }
                }
            }
        }
    }
}

/* gw[oc, icl, ki, kj] = sum over the batch and output positions of gy * the x it read. */
static void conv2d_backward_weights_ref(const cr_conv_geom *g, cr_dtype dt, const char *x,
                                        const char *gy, char *gw) {
    const int64_t es = (int64_t)cr_dtype_size(dt), cg = g->c / g->groups, og = g->o / g->groups;
    const int64_t plane = g->oh * g->ow, taps = g->kh * g->kw;
    const int64_t work = g->n * g->o * plane * cg * taps;
#pragma omp parallel for schedule(dynamic) if (work > CR_PAR_GRAIN) num_threads(cr_threads())
    for (int64_t oi = 0; oi < g->o * cg; oi++) {
        const int64_t oc = oi / cg, ic = (oc / og) * cg + oi % cg;
        for (int64_t ki = 0; ki < g->kh; ki++) {
            int64_t oh0, oh1;
            tap_range(g->h, g->oh, g->sh, g->ph, ki * g->dh, &oh0, &oh1);
            for (int64_t kj = 0; kj < g->kw; kj++) {
                int64_t ow0, ow1;
                tap_range(g->w, g->ow, g->sw, g->pw, kj * g->dw, &ow0, &ow1);
                const int64_t iw0 = ow0 * g->sw - g->pw + kj * g->dw;
                double acc = 0;
                for (int64_t n = 0; n < g->n; n++) {
                    const char *xp = x + (n * g->c + ic) * g->h * g->w * es;
                    const char *gyp = gy + (n * g->o + oc) * plane * es;
                    for (int64_t oh = oh0; oh < oh1; oh++) {
                        const int64_t ih = oh * g->sh - g->ph + ki * g->dh;
                        acc += row_dot(dt, ow1 - ow0, xp + (ih * g->w + iw0) * es, g->sw,
                                       gyp + (oh * g->ow + ow0) * es);
                    }
                }
                row_fill(dt, 1, gw + (oi * taps + ki * g->kw + kj) * es, acc);
            }
        }
    }
}

/* gb[oc] = sum of gy over the batch and the plane. */
static void conv2d_backward_bias_ref(const cr_conv_geom *g, cr_dtype dt, const char *gy,
                                     char *gb) {
    const int64_t es = (int64_t)cr_dtype_size(dt), plane = g->oh * g->ow;
#pragma omp parallel for schedule(static) if (g->n * g->o * plane > CR_PAR_GRAIN) \
    num_threads(cr_threads())
    for (int64_t oc = 0; oc < g->o; oc++) {
        double acc = 0;
        for (int64_t n = 0; n < g->n; n++)
            acc += row_sum(dt, plane, gy + (n * g->o + oc) * plane * es);
        row_fill(dt, 1, gb + oc * es, acc);
    }
}

/* ---- geometry and checks ----------------------------------------------------------- */
enum { PARAM_LIMIT = 1 << 30 }; /* larger strides/paddings are mistakes, and would overflow */

static void geom_from_call(const cr_call *c, const cr_tensor *x, const cr_tensor *w,
                           cr_conv_geom *g) {
    memset(g, 0, sizeof *g);
    g->n = x->shape[0], g->c = x->shape[1], g->h = x->shape[2], g->w = x->shape[3];
    g->o = w->shape[0], g->kh = w->shape[2], g->kw = w->shape[3];
    g->sh = c->i[0], g->sw = c->i[1], g->ph = c->i[2], g->pw = c->i[3];
    g->dh = c->i[4], g->dw = c->i[5], g->groups = c->i[6];
    g->oh = (g->h + 2 * g->ph - g->dh * (g->kh - 1) - 1) / g->sh + 1;
    g->ow = (g->w + 2 * g->pw - g->dw * (g->kw - 1) - 1) / g->sw + 1;
}

static void params_to_call(cr_call *c, const cr_conv2d_params *p) {
    c->i[0] = p->stride[0], c->i[1] = p->stride[1];
    c->i[2] = p->padding[0], c->i[3] = p->padding[1];
    c->i[4] = p->dilation[0], c->i[5] = p->dilation[1];
    c->i[6] = p->groups;
}

static void params_from_call(const cr_call *c, cr_conv2d_params *p) {
    p->stride[0] = c->i[0], p->stride[1] = c->i[1];
    p->padding[0] = c->i[2], p->padding[1] = c->i[3];
    p->dilation[0] = c->i[4], p->dilation[1] = c->i[5];
    p->groups = c->i[6];
}

static cr_status check_pair(const char *op, const char *what, const int64_t *v, int64_t lo) {
    for (int k = 0; k < 2; k++) {
        if (v[k] < lo)
            return cr_fail(CR_ERR_ARG, "%s: %s must be >= %lld, got {%lld, %lld}", op, what,
                           (long long)lo, (long long)v[0], (long long)v[1]);
        if (v[k] > PARAM_LIMIT)
            return cr_fail(CR_ERR_ARG, "%s: %s {%lld, %lld} is absurdly large (limit %d)", op,
                           what, (long long)v[0], (long long)v[1], PARAM_LIMIT);
    }
    return CR_OK;
}

/* Checks x [N, C, H, W] against w [O, C/groups, kh, kw] and the params; fills out[4]. */
static cr_status conv_check(const char *op, const cr_tensor *x, const cr_tensor *w,
                            const cr_conv2d_params *p, int64_t *out) {
    char a[160], b[160];
    if (!p)
        return cr_fail(CR_ERR_ARG, "%s: params are nil; pass stride, padding, dilation, groups",
                       op);
    if (x->ndim != 4)
        return cr_fail(CR_ERR_ARG, "%s: input must be 4-D [N, C, H, W] (or 3-D [C, H, W]), got "
                       "%s; reshape it", op, cr_shape_str(x, a, sizeof a));
    if (w->ndim != 4)
        return cr_fail(CR_ERR_ARG, "%s: weight must be 4-D [out_channels, in_channels/groups, "
                       "kh, kw], got %s", op, cr_shape_str(w, a, sizeof a));
    if (!cr_dtype_is_float(x->dtype) || x->dtype != w->dtype)
        return cr_fail(CR_ERR_ARG, "%s: input (%s) and weight (%s) must have the same float "
                       "dtype; convert with :float() or :double()", op, cr_dtype_name(x->dtype),
                       cr_dtype_name(w->dtype));
    cr_status st;
    if ((st = check_pair(op, "stride", p->stride, 1))) return st;
    if ((st = check_pair(op, "padding", p->padding, 0))) return st;
    if ((st = check_pair(op, "dilation", p->dilation, 1))) return st;
    if (p->groups < 1 || p->groups > PARAM_LIMIT)
        return cr_fail(CR_ERR_ARG, "%s: groups must be >= 1, got %lld", op, (long long)p->groups);
    if (x->shape[1] < 1 || x->shape[1] % p->groups)
        return cr_fail(CR_ERR_ARG, "%s: input %s has %lld channels, which groups=%lld does not "
                       "divide; use a groups value that divides the channels", op,
                       cr_shape_str(x, a, sizeof a), (long long)x->shape[1], (long long)p->groups);
    if (w->shape[0] < 1 || w->shape[0] % p->groups)
        return cr_fail(CR_ERR_ARG, "%s: weight %s has %lld output channels, which groups=%lld "
                       "does not divide", op, cr_shape_str(w, a, sizeof a),
                       (long long)w->shape[0], (long long)p->groups);
    if (w->shape[1] * p->groups != x->shape[1])
        return cr_fail(CR_ERR_ARG, "%s: weight %s expects %lld input channels (shape[1] * "
                       "groups=%lld), but input %s has %lld; the weight must be [O, C/groups, "
                       "kh, kw]", op, cr_shape_str(w, a, sizeof a),
                       (long long)(w->shape[1] * p->groups), (long long)p->groups,
                       cr_shape_str(x, b, sizeof b), (long long)x->shape[1]);
    if (w->shape[2] < 1 || w->shape[3] < 1)
        return cr_fail(CR_ERR_ARG, "%s: weight %s has an empty kernel", op,
                       cr_shape_str(w, a, sizeof a));
    for (int k = 0; k < 2; k++) {
        int64_t in = x->shape[2 + k] + 2 * p->padding[k];
        int64_t ext = p->dilation[k] * (w->shape[2 + k] - 1) + 1;
        if (ext > in)
            return cr_fail(CR_ERR_ARG, "%s: the kernel (%lld x %lld, dilation {%lld, %lld}) is "
                           "larger than the padded input %s with padding {%lld, %lld}; use "
                           "more padding or a smaller kernel", op, (long long)w->shape[2],
                           (long long)w->shape[3], (long long)p->dilation[0],
                           (long long)p->dilation[1], cr_shape_str(x, a, sizeof a),
                           (long long)p->padding[0], (long long)p->padding[1]);
        out[2 + k] = (in - ext) / p->stride[k] + 1;
    }
    out[0] = x->shape[0];
    out[1] = w->shape[0];
    return cr_check_shape_arg(op, 4, out);
}

/* Half tensors the cpu does not convolve natively (f16; bf16 without AVX512-BF16). */
static bool half_via_f32(const cr_tensor *x) {
    return cr_dtype_is_half(x->dtype) && cr_tensor_on_cpu(x) &&
           !(x->dtype == CR_DT_BF16 && cr_cpu_bf16_native());
}

/* ---- conv2d ------------------------------------------------------------------------- */
/* oneDNN computes f32 convolutions; their activations are channels-last (see
 * conv_dnnl.c), and conv2d's output stays so, which the ops after it keep. */
/* Channels-last activations: on a GPU always (cuDNN's tensor-core kernels are NHWC), on
 * the cpu on the oneDNN path. */
static bool conv_fast(const cr_tensor *x) {
    if (!cr_tensor_on_cpu(x)) return true;
#ifdef CR_HAVE_DNNL
    return cr_fast_paths_enabled() && (x->dtype == CR_DT_F32 || x->dtype == CR_DT_BF16);
#else
    (void)x;
    return false;
#endif
}

/* t itself when it is row-major or (on the fast path) channels-last, else a row-major copy. */
static cr_status conv_operand(cr_tensor **out, cr_tensor *t, bool fast) {
    if (fast && cr_tensor_is_channels_last(t)) {
        cr_tensor_retain(t);
        *out = t;
        return CR_OK;
    }
    return cr_op_contiguous(out, t);
}

/* The reference loops read and write row-major buffers: a row-major copy (not recorded),
 * or t itself. */
static cr_status rowmajor(cr_tensor **out, cr_tensor *t) {
    bool prev = cr_grad_set_enabled(false);
    cr_status st = cr_op_contiguous(out, t);
    cr_grad_set_enabled(prev);
    return st;
}

static void conv_layouts(cr_conv_geom *g, const cr_tensor *xside, const cr_tensor *yside) {
    g->src_cl = cr_tensor_is_channels_last(xside);
    g->dst_cl = cr_tensor_is_channels_last(yside);
}

cr_status cr_cpu_conv2d(cr_call *c) {
    cr_conv_geom g;
    geom_from_call(c, c->in[0], c->in[1], &g);
    conv_layouts(&g, c->in[0], c->out[0]);
    cr_dtype dt = c->in[0]->dtype;
    const char *b = c->in[2] ? cr_tensor_ptr(c->in[2]) : NULL;
    g.bf16 = dt == CR_DT_BF16;
    if ((dt == CR_DT_F32 || g.bf16) && cr_fast_paths_enabled() && c->out[0]->numel > 0 &&
        cr_conv2d_dnnl_forward(&g, cr_tensor_ptr(c->in[0]), cr_tensor_ptr(c->in[1]), b,
                               cr_tensor_ptr(c->out[0])) == CR_OK)
        return CR_OK;
    if (cr_dtype_is_half(dt)) return cr_call_via_f32(c, cr_cpu_conv2d);
    cr_tensor *x = NULL, *y = c->out[0];
    cr_status st = rowmajor(&x, c->in[0]);
    if (!st && g.dst_cl) st = cr_tensor_alloc(&y, 4, y->shape, dt, CR_CPU);
    if (!st) {
        conv2d_forward_ref(&g, dt, cr_tensor_ptr(x), cr_tensor_ptr(c->in[1]), b,
                           cr_tensor_ptr(y));
        if (g.dst_cl) st = cr_copy_into(c->out[0], y);
    }
    if (y != c->out[0]) cr_tensor_free(y);
    cr_tensor_free(x);
    return st;
}

/* Half inputs: convert to f32 (recorded, so grads flow back), convolve, convert back. */
static cr_status conv2d_through_f32(cr_tensor **out, cr_tensor *x, cr_tensor *w,
                                    cr_tensor *bias, const cr_conv2d_params *p) {
    cr_tensor *xf = NULL, *wf = NULL, *bf = NULL, *y = NULL;
    cr_status st = cr_op_to(&xf, x, CR_DT_F32);
    if (!st) st = cr_op_to(&wf, w, CR_DT_F32);
    if (!st && bias) st = cr_op_to(&bf, bias, CR_DT_F32);
    if (!st) st = cr_op_conv2d(&y, xf, wf, bf, p);
    if (!st) st = cr_op_to(out, y, x->dtype);
    cr_tensor_free(xf);
    cr_tensor_free(wf);
    cr_tensor_free(bf);
    cr_tensor_free(y);
    return st;
}

/* Unbatched [C, H, W]: a batch of one, squeezed afterwards (both recorded views). */
static cr_status conv2d_unbatched(cr_tensor **out, cr_tensor *x, cr_tensor *w, cr_tensor *bias,
                                  const cr_conv2d_params *p) {
    cr_tensor *x4 = NULL, *y = NULL;
    cr_status st = cr_op_unsqueeze(&x4, x, 0);
    if (!st) st = cr_op_conv2d(&y, x4, w, bias, p);
    if (!st) st = cr_op_squeeze(out, y, 0);
    cr_tensor_free(x4);
    cr_tensor_free(y);
    return st;
}

static cr_status conv2d_entry(cr_tensor **out, cr_tensor *x, cr_tensor *w, cr_tensor *bias,
                       const cr_conv2d_params *p) {
    *out = NULL;
    CR_CHECK_TENSOR("conv2d", x, "input");
    CR_CHECK_TENSOR("conv2d", w, "weight");
    cr_status st = cr_check_same_device("conv2d", x, w);
    if (!st && bias) st = cr_check_same_device("conv2d", x, bias);
    if (st) return st;
    if (x->ndim == 3) return conv2d_unbatched(out, x, w, bias, p);
    int64_t oshape[4];
    if ((st = conv_check("conv2d", x, w, p, oshape))) return st;
    if (bias) {
        char a[160];
        if (bias->ndim != 1 || bias->shape[0] != w->shape[0])
            return cr_fail(CR_ERR_ARG, "conv2d: bias must be 1-D with %lld entries (one per "
                           "output channel), got %s", (long long)w->shape[0],
                           cr_shape_str(bias, a, sizeof a));
        if (bias->dtype != x->dtype)
            return cr_fail(CR_ERR_ARG, "conv2d: bias is %s but input is %s; convert it with "
                           ":to('%s')", cr_dtype_name(bias->dtype), cr_dtype_name(x->dtype),
                           cr_dtype_name(x->dtype));
    }
    if (half_via_f32(x)) return conv2d_through_f32(out, x, w, bias, p);

    cr_tensor *xc = NULL, *wc = NULL, *bc = NULL;
    cr_call c;
    if ((st = cr_call_init(&c, CR_OP_CONV2D, 3, 1))) return st;
    params_to_call(&c, p);
    bool fast = conv_fast(x);
    st = conv_operand(&xc, x, fast);
    if (!st) st = cr_op_contiguous(&wc, w);
    if (!st && bias) st = cr_op_contiguous(&bc, bias);
    c.in[0] = xc, c.in[1] = wc, c.in[2] = bc;
    if (!st)
        st = cr_tensor_alloc_layout(&c.out[0], 4, oshape, x->dtype, cr_tensor_dev(x), fast);
    if (st) cr_call_drop_outs(&c);
    else st = cr_call_finish(out, &c, 1u | 2u, 0);
    cr_tensor_free(xc);
    cr_tensor_free(wc);
    cr_tensor_free(bc);
    return st;
}

cr_status cr_op_conv2d(cr_tensor **out, cr_tensor *x, cr_tensor *w, cr_tensor *bias,
                       const cr_conv2d_params *p) {
    if (cr_autocast_get() == CR_DT_F32) return conv2d_entry(out, x, w, bias, p);
    cr_autocast_scope s;
    cr_status st = cr_autocast_begin(&s, CR_OP_CONV2D, x, w, bias);
    if (!st) st = conv2d_entry(out, s.t[0], s.t[1], s.t[2], p);
    cr_autocast_end(&s);
    return st;
}

cr_status cr_grad_conv2d(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    cr_conv2d_params p;
    params_from_call(&n->call, &p);
    cr_tensor *x, *w;
    cr_status st = cr_saved_in(n, 0, &x);
    if (!st) st = cr_saved_in(n, 1, &w);
    if (st) return st;
    return cr_op_conv2d_backward(n->edges[0].node ? &gin[0] : NULL,
                                 n->edges[1].node ? &gin[1] : NULL,
                                 n->edges[2].node ? &gin[2] : NULL, gout[0], x, w, &p);
}

/* ---- conv2d_backward ------------------------------------------------------------------ */
cr_status cr_cpu_conv2d_backward(cr_call *c) {
    cr_tensor *gy = c->in[0], *x = c->in[1], *w = c->in[2];
    cr_tensor *gx = c->out[0], *gw = c->out[1], *gb = c->out[2];
    cr_conv_geom g;
    geom_from_call(c, x, w, &g);
    conv_layouts(&g, x, gy);
    cr_dtype dt = x->dtype;
    g.bf16 = dt == CR_DT_BF16;
    bool fast = (dt == CR_DT_F32 || g.bf16) && cr_fast_paths_enabled() && gy->numel > 0 &&
                x->numel > 0;
    const bool small = fast && cr_conv2d_small_wanted(&g);
    bool gx_done = !gx ||
                   (small && cr_conv2d_small_backward_data(&g, cr_tensor_ptr(gy), cr_tensor_ptr(w),
                                                           cr_tensor_ptr(gx)) == CR_OK) ||
                   (fast && cr_conv2d_dnnl_backward_data(&g, cr_tensor_ptr(gy), cr_tensor_ptr(w),
                                                         cr_tensor_ptr(gx)) == CR_OK);
    bool gw_gemm = gw && small &&
                   cr_conv2d_small_backward_weights(&g, cr_tensor_ptr(x), cr_tensor_ptr(gy),
                                                    cr_tensor_ptr(gw)) == CR_OK;
    bool gw_done = !gw || gw_gemm ||
                   (fast && cr_conv2d_dnnl_backward_weights(
                                &g, cr_tensor_ptr(x), cr_tensor_ptr(gy), cr_tensor_ptr(gw),
                                gb ? cr_tensor_ptr(gb) : NULL) == CR_OK);
    if (gw && gw_done && !gw_gemm) gb = NULL; /* oneDNN wrote the bias grad too */
    if (gx_done && gw_done && !gb) return CR_OK;
    if (cr_dtype_is_half(dt)) { /* the f32 route for what oneDNN declined */
        cr_call rest = *c;
        rest.in = rest.in_small;
        memcpy(rest.in_small, c->in, sizeof(cr_tensor *) * 3);
        if (gx_done) rest.out[0] = NULL;
        if (gw_done) rest.out[1] = NULL;
        rest.out[2] = gb;
        return cr_call_via_f32(&rest, cr_cpu_conv2d_backward);
    }
    /* the reference loops, on row-major copies of channels-last operands */
    cr_tensor *gyr = NULL, *xr = NULL, *gxr = gx;
    cr_status st = rowmajor(&gyr, gy);
    if (!st) st = rowmajor(&xr, x);
    if (!st && !gx_done && cr_tensor_is_channels_last(gx))
        st = cr_tensor_alloc(&gxr, 4, gx->shape, dt, CR_CPU);
    if (!st) {
        if (!gx_done) {
            conv2d_backward_data_ref(&g, dt, cr_tensor_ptr(gyr), cr_tensor_ptr(w),
                                     cr_tensor_ptr(gxr));
            if (gxr != gx) st = cr_copy_into(gx, gxr);
        }
        if (!gw_done)
            conv2d_backward_weights_ref(&g, dt, cr_tensor_ptr(xr), cr_tensor_ptr(gyr),
                                        cr_tensor_ptr(gw));
        if (gb) conv2d_backward_bias_ref(&g, dt, cr_tensor_ptr(gyr), cr_tensor_ptr(gb));
    }
    if (gxr != gx) cr_tensor_free(gxr);
    cr_tensor_free(gyr);
    cr_tensor_free(xr);
    return st;
}

cr_status cr_op_conv2d_backward(cr_tensor **gx, cr_tensor **gw, cr_tensor **gb,
                                cr_tensor *gout, cr_tensor *x, cr_tensor *w,
                                const cr_conv2d_params *p) {
    if (gx) *gx = NULL;
    if (gw) *gw = NULL;
    if (gb) *gb = NULL;
    const char *op = "conv2d_backward";
    CR_CHECK_TENSOR(op, gout, "grad_output");
    CR_CHECK_TENSOR(op, x, "input");
    CR_CHECK_TENSOR(op, w, "weight");
    cr_status st = cr_check_same_device(op, x, w);
    if (!st) st = cr_check_same_device(op, x, gout);
    if (st) return st;
    int64_t oshape[4];
    if ((st = conv_check(op, x, w, p, oshape))) return st;
    if (half_via_f32(x))
        return cr_fail(CR_ERR_ARG, "%s: %s is computed in f32 on this cpu; convert the tensors "
                       "with :float()", op, cr_dtype_name(x->dtype));
    if (gout->ndim != 4 || memcmp(gout->shape, oshape, sizeof oshape) || gout->dtype != x->dtype) {
        char a[160], b[160];
        return cr_fail(CR_ERR_ARG, "%s: grad_output must be %s %s (the conv2d output), got %s "
                       "%s", op, cr_dtype_name(x->dtype), cr_dims_str(4, oshape, a, sizeof a),
                       cr_dtype_name(gout->dtype), cr_shape_str(gout, b, sizeof b));
    }
    if (!gx && !gw && !gb) return CR_OK;

    cr_call c;
    if ((st = cr_call_init(&c, CR_OP_CONV2D_BACKWARD, 3, 3))) return st;
    params_to_call(&c, p);
    cr_tensor *gc = NULL, *xc = NULL, *wc = NULL;
    bool prev = cr_grad_set_enabled(false); /* a non-differentiable op: copies need no graph */
    bool fast = conv_fast(x);
    st = conv_operand(&xc, x, fast);
    /* on the cpu the grad in x's layout: oneDNN then reorders nothing, and the small-image
     * paths (conv_small.c) read both channels-last */
    if (!st && fast && cr_tensor_on_cpu(x) && cr_tensor_is_channels_last(xc) &&
        !cr_tensor_is_channels_last(gout)) {
        st = cr_tensor_alloc_layout(&gc, 4, gout->shape, gout->dtype, cr_tensor_dev(gout), true);
        if (!st) st = cr_copy_into(gc, gout);
    } else if (!st) {
        st = conv_operand(&gc, gout, fast);
    }
    if (!st) st = cr_op_contiguous(&wc, w);
    cr_grad_set_enabled(prev);
    c.in[0] = gc, c.in[1] = xc, c.in[2] = wc;
    cr_device dev = cr_tensor_dev(x);
    /* gx in x's layout */
    if (!st && gx) st = cr_tensor_alloc_as(&c.out[0], 4, x->shape, x->dtype, dev, xc);
    if (!st && gw) st = cr_tensor_alloc(&c.out[1], 4, w->shape, w->dtype, dev);
    if (!st && gb) st = cr_tensor_alloc(&c.out[2], 1, w->shape, w->dtype, dev);
    if (!st) st = cr_dispatch(&c);
    cr_tensor_free(gc);
    cr_tensor_free(xc);
    cr_tensor_free(wc);
    if (st) {
        cr_call_drop_outs(&c);
        return st;
    }
    if (gx) *gx = c.out[0];
    if (gw) *gw = c.out[1];
    if (gb) *gb = c.out[2];
    return CR_OK;
}
