/* pool.c — 2-D pooling on [N, C, H, W] (or [C, H, W]) tensors: max (with i64 indices,
 * as PyTorch: flat h*W+w within each plane), average (count_include_pad, ceil_mode) and
 * adaptive average, each with its backward op and derivative rule.
 *
 * Every H x W plane pools alone, so the loops run one plane per OpenMP task. oneDNN's
 * pooling wants blocked layouts, and reordering NCHW in and out costs more memory traffic
 * than the pooling itself, so these plain loops are the only path (PyTorch does the same
 * for NCHW tensors). Window bounds follow PyTorch's CPU kernels exactly, so values,
 * indices and ties agree. On a GPU, max pooling (the ResNet stem's) also reads halves and
 * channels-last tensors as they are, with outputs, indices and grads in the input's
 * layout; elsewhere halves pool through f32 and inputs through row-major copies. */
#include <math.h>

#include "internal.h"

/* The geometry of one pooling call; c->i holds it as: kernel[0..1], stride[2..3],
 * padding[4..5], dilation[6..7], ceil_mode[8], count_include_pad[9], and for the
 * backward ops the input plane size in_h, in_w [10..11]. */
typedef struct {
    int64_t planes, h, w, oh, ow;
    int64_t kh, kw, sh, sw, ph, pw, dh, dw;
    bool count_include_pad;
} pool_geom;

static void params_to_call(cr_call *c, const cr_pool2d_params *p) {
    for (int k = 0; k < 2; k++) {
        c->i[0 + k] = p->kernel[k];
        c->i[2 + k] = p->stride[k] ? p->stride[k] : p->kernel[k];
        c->i[4 + k] = p->padding[k];
        c->i[6 + k] = p->dilation[k] ? p->dilation[k] : 1;
    }
    c->i[8] = p->ceil_mode;
    c->i[9] = p->count_include_pad;
}

static void params_from_call(const cr_call *c, cr_pool2d_params *p) {
    for (int k = 0; k < 2; k++) {
        p->kernel[k] = c->i[0 + k];
        p->stride[k] = c->i[2 + k];
        p->padding[k] = c->i[4 + k];
        p->dilation[k] = c->i[6 + k];
    }
    p->ceil_mode = c->i[8];
    p->count_include_pad = c->i[9];
}

/* x is the input (forward) and y the output; both [..., plane]. */
static void geom_from_call(const cr_call *c, int64_t h, int64_t w, const cr_tensor *y,
                           pool_geom *g) {
    g->h = h, g->w = w;
    g->oh = y->shape[y->ndim - 2], g->ow = y->shape[y->ndim - 1];
    g->planes = g->oh * g->ow != 0 ? y->numel / (g->oh * g->ow) : 0;
    g->kh = c->i[0], g->kw = c->i[1], g->sh = c->i[2], g->sw = c->i[3];
    g->ph = c->i[4], g->pw = c->i[5], g->dh = c->i[6], g->dw = c->i[7];
    g->count_include_pad = c->i[9];
}

/* PyTorch's pooling_output_shape: in ceil mode the last window must still start inside
 * the input or its left padding. */
/* PyTorch's output size (pooling_output_shape): num may be negative when the dilated
 * kernel is wider than the padded input, and ceil mode can still give one window (all
 * padding: its output is -inf and its gradient goes nowhere, as in PyTorch). < 1: none. */
static int64_t out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil) {
    int64_t num = in + 2 * p - d * (k - 1) - 1 + (ceil ? s - 1 : 0);
    int64_t out = (num >= 0 ? num / s : -((-num + s - 1) / s)) + 1; /* floor division */
    if (ceil && (out - 1) * s >= in + p) out--;
    return out;
}

enum { PARAM_LIMIT = 1 << 30 };

/* Whether a GPU max-pooling tensor keeps its channels-last layout (rather than a
 * row-major copy): 4-D, channels-last and not also row-major. */
static bool gpu_channels_last(const cr_tensor *t) {
    return !cr_tensor_on_cpu(t) && t->ndim == 4 && cr_tensor_is_channels_last(t) && !cr_tensor_is_contiguous(t);
}

static cr_status check_input(const char *op, const cr_tensor *x) {
    char a[160];
    if (x->ndim != 3 && x->ndim != 4)
        return cr_fail(CR_ERR_ARG, "%s: input must be 4-D [N, C, H, W] or 3-D [C, H, W], got "
                       "%s", op, cr_shape_str(x, a, sizeof a));
    if (!cr_dtype_is_float(x->dtype))
        return cr_fail(CR_ERR_ARG, "%s: input must be a float tensor, got %s; convert with "
                       ":float()", op, cr_dtype_name(x->dtype));
    if (x->shape[x->ndim - 1] < 1 || x->shape[x->ndim - 2] < 1)
        return cr_fail(CR_ERR_ARG, "%s: input %s has an empty plane", op,
                       cr_shape_str(x, a, sizeof a));
    return CR_OK;
}

/* Checks the params against the input planes (`max` allows dilation) and fills the
 * output shape. */
static cr_status check_params(const char *op, int ndim, const int64_t *ishape,
                              const cr_pool2d_params *p, bool max, int64_t *oshape) {
    if (!p) return cr_fail(CR_ERR_ARG, "%s: params are nil; pass kernel, stride, padding", op);
    char a[160];
    for (int k = 0; k < 2; k++) {
        int64_t kk = p->kernel[k], s = p->stride[k] ? p->stride[k] : kk, pad = p->padding[k];
        int64_t d = p->dilation[k] ? p->dilation[k] : 1;
        if (kk < 1 || kk > PARAM_LIMIT)
            return cr_fail(CR_ERR_ARG, "%s: kernel size must be in [1, %d], got {%lld, %lld}",
                           op, PARAM_LIMIT, (long long)p->kernel[0], (long long)p->kernel[1]);
        if (s < 1 || s > PARAM_LIMIT)
            return cr_fail(CR_ERR_ARG, "%s: stride must be in [1, %d] (0 means the kernel "
                           "size), got {%lld, %lld}", op, PARAM_LIMIT,
                           (long long)p->stride[0], (long long)p->stride[1]);
        if (d < 1 || d > PARAM_LIMIT)
            return cr_fail(CR_ERR_ARG, "%s: dilation must be in [1, %d], got {%lld, %lld}", op,
                           PARAM_LIMIT, (long long)p->dilation[0], (long long)p->dilation[1]);
        if (!max && d != 1)
            return cr_fail(CR_ERR_ARG, "%s: dilation is not defined for average pooling, got "
                           "{%lld, %lld}; use 1", op, (long long)p->dilation[0],
                           (long long)p->dilation[1]);
        if (pad < 0 || pad > kk / 2)
            return cr_fail(CR_ERR_ARG, "%s: padding {%lld, %lld} must be >= 0 and at most half "
                           "the kernel size {%lld, %lld}", op, (long long)p->padding[0],
                           (long long)p->padding[1], (long long)p->kernel[0],
                           (long long)p->kernel[1]);
        int64_t in = ishape[ndim - 2 + k];
        oshape[ndim - 2 + k] = out_size(in, kk, s, pad, d, p->ceil_mode);
        if (oshape[ndim - 2 + k] < 1)
            return cr_fail(CR_ERR_ARG, "%s: the kernel (%lld x %lld, dilation {%lld, %lld}) is "
                           "larger than the padded input %s with padding {%lld, %lld}", op,
                           (long long)p->kernel[0], (long long)p->kernel[1],
                           (long long)p->dilation[0], (long long)p->dilation[1],
                           cr_dims_str(ndim, ishape, a, sizeof a), (long long)p->padding[0],
                           (long long)p->padding[1]);
    }
    for (int d = 0; d < ndim - 2; d++) oshape[d] = ishape[d];
    return cr_check_shape_arg(op, ndim, oshape);
}

/* Element i of an f32, f64 or (global_pool_nhwc's kernels only) bf16 array; a bf16 store
 * rounds through f32. */
static inline double ld(cr_dtype dt, const char *p, int64_t i) {
    if (dt == CR_DT_BF16) return cr_bf16_to_f32(((const uint16_t *)p)[i]);
    return dt == CR_DT_F32 ? ((const float *)p)[i] : ((const double *)p)[i];
}
static inline void st(cr_dtype dt, char *p, int64_t i, double v) {
    if (dt == CR_DT_BF16) ((uint16_t *)p)[i] = cr_f32_to_bf16((float)v);
    else if (dt == CR_DT_F32) ((float *)p)[i] = (float)v;
    else ((double *)p)[i] = v;
}
static inline void add(cr_dtype dt, char *p, int64_t i, double v) {
    if (dt == CR_DT_F32) ((float *)p)[i] += (float)v;
    else ((double *)p)[i] += v;
}
static void zero_plane(char *p, int64_t n, cr_dtype dt) {
    memset(p, 0, (size_t)n * cr_dtype_size(dt));
}

/* Planes go to threads only when there is enough work to pay for the fork. */
static bool par_planes(const pool_geom *g, int64_t per_plane) {
    return g->planes * per_plane > CR_PAR_GRAIN;
}

/* ---- max pooling -------------------------------------------------------------------- */
/* Inlined twice with a constant dt, so each copy is a plain typed loop. NaN wins, and
 * the first maximum wins ties, as in PyTorch. A window that holds no input element
 * (possible only with dilation) gives -inf and index -1, which the backward skips. */
static inline __attribute__((always_inline)) void max_pool_plane(const pool_geom *g,
                                                                  cr_dtype dt, const char *x,
                                                                  char *y, int64_t *ind) {
    for (int64_t oh = 0; oh < g->oh; oh++) {
        int64_t h0 = oh * g->sh - g->ph, h1 = h0 + (g->kh - 1) * g->dh + 1;
        if (h1 > g->h) h1 = g->h;
        while (h0 < 0) h0 += g->dh;
        for (int64_t ow = 0; ow < g->ow; ow++) {
            int64_t w0 = ow * g->sw - g->pw, w1 = w0 + (g->kw - 1) * g->dw + 1;
            if (w1 > g->w) w1 = g->w;
            while (w0 < 0) w0 += g->dw;
            double best = -INFINITY;
            int64_t at = h0 < h1 && w0 < w1 ? h0 * g->w + w0 : -1;
            for (int64_t ih = h0; ih < h1; ih += g->dh)
                for (int64_t iw = w0; iw < w1; iw += g->dw) {
                    double v = ld(dt, x, ih * g->w + iw);
                    if (v > best || isnan(v)) {
                        best = v;
                        at = ih * g->w + iw;
                    }
                }
            st(dt, y, oh * g->ow + ow, best);
            ind[oh * g->ow + ow] = at;
        }
    }
}

cr_status cr_cpu_max_pool2d(cr_call *c) {
    const cr_tensor *x = c->in[0];
    pool_geom g;
    geom_from_call(c, x->shape[x->ndim - 2], x->shape[x->ndim - 1], c->out[0], &g);
    const cr_dtype dt = x->dtype;
    const int64_t es = (int64_t)cr_dtype_size(dt), in_plane = g.h * g.w, out_plane = g.oh * g.ow;
    const char *xp = cr_tensor_ptr(x);
    char *yp = cr_tensor_ptr(c->out[0]);
    int64_t *ip = (int64_t *)cr_tensor_ptr(c->out[1]);
    const bool par = par_planes(&g, out_plane * g.kh * g.kw);
#pragma omp parallel for schedule(static) if (par) num_threads(cr_threads())
    for (int64_t k = 0; k < g.planes; k++) {
        if (dt == CR_DT_F32)
            max_pool_plane(&g, CR_DT_F32, xp + k * in_plane * es, yp + k * out_plane * es,
                           ip + k * out_plane);
        else
            max_pool_plane(&g, CR_DT_F64, xp + k * in_plane * es, yp + k * out_plane * es,
                           ip + k * out_plane);
    }
    return CR_OK;
}

static cr_status max_pool_through_f32(cr_tensor **out, cr_tensor **indices, cr_tensor *x,
                                      const cr_pool2d_params *p) {
    cr_tensor *xf = NULL, *y = NULL;
    cr_status s = cr_op_to(&xf, x, CR_DT_F32);
    if (!s) s = cr_op_max_pool2d(&y, indices, xf, p);
    if (!s) s = cr_op_to(out, y, x->dtype);
    cr_tensor_free(xf);
    cr_tensor_free(y);
    if (s && indices) {
        cr_tensor_free(*indices);
        *indices = NULL;
    }
    return s;
}

cr_status cr_op_max_pool2d(cr_tensor **out, cr_tensor **indices, cr_tensor *x,
                           const cr_pool2d_params *p) {
    *out = NULL;
    if (indices) *indices = NULL;
    CR_CHECK_TENSOR("max_pool2d", x, "input");
    int64_t oshape[4];
    cr_status s = check_input("max_pool2d", x);
    if (!s) s = check_params("max_pool2d", x->ndim, x->shape, p, true, oshape);
    if (s) return s;
    if (cr_dtype_is_half(x->dtype) && cr_tensor_on_cpu(x)) return max_pool_through_f32(out, indices, x, p);
    cr_call c;
    cr_tensor *xc = NULL;
    if ((s = cr_call_init(&c, CR_OP_MAX_POOL2D, 1, 2))) return s;
    params_to_call(&c, p);
    const bool cl = gpu_channels_last(x);
    if (cl) cr_tensor_retain(xc = x);
    else s = cr_op_contiguous(&xc, x);
    c.in[0] = xc;
    if (!s) s = cr_tensor_alloc_layout(&c.out[0], x->ndim, oshape, x->dtype, cr_tensor_dev(x), cl);
    if (!s) s = cr_tensor_alloc_layout(&c.out[1], x->ndim, oshape, CR_DT_I64, cr_tensor_dev(x), cl);
    if (s) cr_call_drop_outs(&c);
    else s = cr_call_finish(out, &c, 0, 2u); /* the backward needs only the indices */
    cr_tensor_free(xc);
    if (s) return s;
    if (indices) *indices = c.out[1];
    else cr_tensor_free(c.out[1]);
    return CR_OK;
}

cr_status cr_grad_max_pool2d(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    cr_tensor *ind;
    cr_status s = cr_saved_out(n, 1, &ind);
    if (s) return s;
    cr_pool2d_params p;
    params_from_call(&n->call, &p);
    const cr_input_meta *m = &n->in_meta[0];
    return cr_op_max_pool2d_backward(&gin[0], gout[0], ind, m->shape[m->ndim - 2],
                                     m->shape[m->ndim - 1], &p);
}

cr_status cr_cpu_max_pool2d_backward(cr_call *c) {
    const cr_tensor *gy = c->in[0], *ind = c->in[1];
    cr_tensor *gx = c->out[0];
    pool_geom g;
    geom_from_call(c, c->i[10], c->i[11], gy, &g);
    const cr_dtype dt = gy->dtype;
    const int64_t es = (int64_t)cr_dtype_size(dt), in_plane = g.h * g.w, out_plane = g.oh * g.ow;
    const int64_t *ip = (const int64_t *)cr_tensor_ptr(ind);
    for (int64_t k = 0; k < ind->numel; k++) /* indices may come from the user: never trust */
        if (ip[k] < -1 || ip[k] >= in_plane)
            return cr_fail(CR_ERR_ARG, "max_pool2d_backward: index %lld at position %lld is "
                           "outside the %lld x %lld input plane", (long long)ip[k],
                           (long long)k, (long long)g.h, (long long)g.w);
    const char *gyp = cr_tensor_ptr(gy);
    char *gxp = cr_tensor_ptr(gx);
    const bool par = par_planes(&g, in_plane + out_plane);
#pragma omp parallel for schedule(static) if (par) num_threads(cr_threads())
    for (int64_t k = 0; k < g.planes; k++) {
        char *dst = gxp + k * in_plane * es;
        const char *src = gyp + k * out_plane * es;
        const int64_t *at = ip + k * out_plane;
        zero_plane(dst, in_plane, dt);
        for (int64_t o = 0; o < out_plane; o++)
            if (at[o] >= 0) add(dt, dst, at[o], ld(dt, src, o));
    }
    return CR_OK;
}

/* gx shape: gout's leading dims, then in_h x in_w; halves_ok: the op takes half grads. */
static cr_status backward_out_shape(const char *op, const cr_tensor *gout, int64_t in_h,
                                    int64_t in_w, int64_t *shape, bool halves_ok) {
    char a[160];
    if (gout->ndim != 3 && gout->ndim != 4)
        return cr_fail(CR_ERR_ARG, "%s: grad_output must be 4-D or 3-D, got %s", op,
                       cr_shape_str(gout, a, sizeof a));
    if (!cr_dtype_is_float(gout->dtype) || (cr_dtype_is_half(gout->dtype) && !halves_ok))
        return cr_fail(CR_ERR_ARG, "%s: grad_output must be f32 or f64%s, got %s", op,
                       halves_ok ? ", or a half" : "", cr_dtype_name(gout->dtype));
    if (in_h < 1 || in_w < 1 || in_h > PARAM_LIMIT || in_w > PARAM_LIMIT)
        return cr_fail(CR_ERR_ARG, "%s: input size %lld x %lld must be in [1, %d]", op,
                       (long long)in_h, (long long)in_w, PARAM_LIMIT);
    for (int d = 0; d < gout->ndim - 2; d++) shape[d] = gout->shape[d];
    shape[gout->ndim - 2] = in_h;
    shape[gout->ndim - 1] = in_w;
    return cr_check_shape_arg(op, gout->ndim, shape);
}

/* The forward's params of a backward op: valid, and mapping its input (shape, gx's) onto
 * gout's plane. */
static cr_status check_backward_params(const char *op, const cr_tensor *gout, const int64_t *shape,
                                       const cr_pool2d_params *p, bool max) {
    int64_t oshape[4];
    cr_status s = check_params(op, gout->ndim, shape, p, max, oshape);
    if (s) return s;
    if (memcmp(oshape, gout->shape, sizeof(int64_t) * (size_t)gout->ndim)) {
        char a[160], b[160];
        int nd = gout->ndim;
        return cr_fail(CR_ERR_ARG, "%s: grad_output %s does not match the pooled shape %s of "
                       "a %lld x %lld input", op, cr_shape_str(gout, a, sizeof a),
                       cr_dims_str(nd, oshape, b, sizeof b), (long long)shape[nd - 2], (long long)shape[nd - 1]);
    }
    return CR_OK;
}

/* Runs a one-output backward op on contiguous copies of its inputs (no graph), or with
 * channels_last on the inputs as they are (each already channels-last) and gx likewise. */
static cr_status run_backward(cr_call *c, cr_tensor **gx, int nin, cr_tensor **ins,
                              int ndim, const int64_t *shape, cr_dtype dt, bool channels_last) {
    cr_tensor *cont[2] = {NULL, NULL};
    bool prev = cr_grad_set_enabled(false);
    cr_status s = CR_OK;
    for (int k = 0; k < nin && !s; k++) {
        if (channels_last) cr_tensor_retain(cont[k] = ins[k]);
        else s = cr_op_contiguous(&cont[k], ins[k]);
    }
    cr_grad_set_enabled(prev);
    for (int k = 0; k < nin; k++) c->in[k] = cont[k];
    if (!s) s = cr_tensor_alloc_layout(&c->out[0], ndim, shape, dt, cr_tensor_dev(ins[0]), channels_last);
    if (!s) s = cr_dispatch(c);
    for (int k = 0; k < nin; k++) cr_tensor_free(cont[k]);
    if (s) {
        cr_call_drop_outs(c);
        return s;
    }
    *gx = c->out[0];
    return CR_OK;
}

cr_status cr_op_max_pool2d_backward(cr_tensor **gx, cr_tensor *gout, cr_tensor *indices,
                                    int64_t in_h, int64_t in_w, const cr_pool2d_params *p) {
    const char *op = "max_pool2d_backward";
    *gx = NULL;
    CR_CHECK_TENSOR(op, gout, "grad_output");
    CR_CHECK_TENSOR(op, indices, "indices");
    cr_status s = cr_check_same_device(op, gout, indices);
    if (s) return s;
    int64_t shape[4];
    if ((s = backward_out_shape(op, gout, in_h, in_w, shape, !cr_tensor_on_cpu(gout)))) return s;
    if (indices->dtype != CR_DT_I64 || !cr_same_shape(indices, gout)) {
        char a[160], b[160];
        return cr_fail(CR_ERR_ARG, "%s: indices must be i64 with grad_output's shape %s, got "
                       "%s %s", op, cr_shape_str(gout, a, sizeof a),
                       cr_dtype_name(indices->dtype), cr_shape_str(indices, b, sizeof b));
    }
    if ((s = check_backward_params(op, gout, shape, p, true))) return s;
    cr_call c;
    if ((s = cr_call_init(&c, CR_OP_MAX_POOL2D_BACKWARD, 2, 1))) return s;
    params_to_call(&c, p);
    c.i[10] = in_h, c.i[11] = in_w;
    cr_tensor *ins[2] = {gout, indices};
    return run_backward(&c, gx, 2, ins, gout->ndim, shape, gout->dtype,
                        gpu_channels_last(gout) && gpu_channels_last(indices));
}

/* ---- average pooling ------------------------------------------------------------------ */
/* The window of output (oh, ow) clipped to the input, and its divisor: the window size
 * clipped to the padded input (count_include_pad) or to the input itself. 0 when empty. */
static inline int64_t avg_window(const pool_geom *g, int64_t oh, int64_t ow, int64_t *h0,
                                 int64_t *h1, int64_t *w0, int64_t *w1) {
    int64_t a0 = oh * g->sh - g->ph, b0 = ow * g->sw - g->pw;
    int64_t a1 = a0 + g->kh, b1 = b0 + g->kw;
    if (a1 > g->h + g->ph) a1 = g->h + g->ph;
    if (b1 > g->w + g->pw) b1 = g->w + g->pw;
    int64_t padded = (a1 - a0) * (b1 - b0);
    if (a0 < 0) a0 = 0;
    if (b0 < 0) b0 = 0;
    if (a1 > g->h) a1 = g->h;
    if (b1 > g->w) b1 = g->w;
    *h0 = a0, *h1 = a1, *w0 = b0, *w1 = b1;
    if (a0 >= a1 || b0 >= b1) return 0;
    return g->count_include_pad ? padded : (a1 - a0) * (b1 - b0);
}

static inline __attribute__((always_inline)) void avg_pool_plane(const pool_geom *g,
                                                                  cr_dtype dt, const char *x,
                                                                  char *y) {
    for (int64_t oh = 0; oh < g->oh; oh++)
        for (int64_t ow = 0; ow < g->ow; ow++) {
            int64_t h0, h1, w0, w1, div = avg_window(g, oh, ow, &h0, &h1, &w0, &w1);
            double sum = 0;
            for (int64_t ih = h0; ih < h1; ih++)
                for (int64_t iw = w0; iw < w1; iw++) sum += ld(dt, x, ih * g->w + iw);
            st(dt, y, oh * g->ow + ow, div ? sum / (double)div : 0.0);
        }
}

static inline __attribute__((always_inline)) void avg_pool_plane_backward(const pool_geom *g,
                                                                           cr_dtype dt,
                                                                           const char *gy,
                                                                           char *gx) {
    zero_plane(gx, g->h * g->w, dt);
    for (int64_t oh = 0; oh < g->oh; oh++)
        for (int64_t ow = 0; ow < g->ow; ow++) {
            int64_t h0, h1, w0, w1, div = avg_window(g, oh, ow, &h0, &h1, &w0, &w1);
            if (!div) continue;
            double v = ld(dt, gy, oh * g->ow + ow) / (double)div;
            for (int64_t ih = h0; ih < h1; ih++)
                for (int64_t iw = w0; iw < w1; iw++) add(dt, gx, ih * g->w + iw, v);
        }
}

cr_status cr_cpu_avg_pool2d(cr_call *c) {
    const cr_tensor *x = c->in[0];
    pool_geom g;
    geom_from_call(c, x->shape[x->ndim - 2], x->shape[x->ndim - 1], c->out[0], &g);
    const cr_dtype dt = x->dtype;
    const int64_t es = (int64_t)cr_dtype_size(dt), in_plane = g.h * g.w, out_plane = g.oh * g.ow;
    const char *xp = cr_tensor_ptr(x);
    char *yp = cr_tensor_ptr(c->out[0]);
    const bool par = par_planes(&g, out_plane * g.kh * g.kw);
#pragma omp parallel for schedule(static) if (par) num_threads(cr_threads())
    for (int64_t k = 0; k < g.planes; k++) {
        if (dt == CR_DT_F32)
            avg_pool_plane(&g, CR_DT_F32, xp + k * in_plane * es, yp + k * out_plane * es);
        else
            avg_pool_plane(&g, CR_DT_F64, xp + k * in_plane * es, yp + k * out_plane * es);
    }
    return CR_OK;
}

cr_status cr_cpu_avg_pool2d_backward(cr_call *c) {
    const cr_tensor *gy = c->in[0];
    pool_geom g;
    geom_from_call(c, c->i[10], c->i[11], gy, &g);
    const cr_dtype dt = gy->dtype;
    const int64_t es = (int64_t)cr_dtype_size(dt), in_plane = g.h * g.w, out_plane = g.oh * g.ow;
    const char *gyp = cr_tensor_ptr(gy);
    char *gxp = cr_tensor_ptr(c->out[0]);
    const bool par = par_planes(&g, in_plane + out_plane * g.kh * g.kw);
#pragma omp parallel for schedule(static) if (par) num_threads(cr_threads())
    for (int64_t k = 0; k < g.planes; k++) {
        if (dt == CR_DT_F32)
            avg_pool_plane_backward(&g, CR_DT_F32, gyp + k * out_plane * es,
                                    gxp + k * in_plane * es);
        else
            avg_pool_plane_backward(&g, CR_DT_F64, gyp + k * out_plane * es,
                                    gxp + k * in_plane * es);
    }
    return CR_OK;
}

/* Runs a one-in one-out pooling forward: contiguous input, dispatch, record. */
static cr_status run_forward(cr_call *c, cr_tensor **out, cr_tensor *x, const int64_t *oshape) {
    cr_tensor *xc = NULL;
    cr_status s = cr_op_contiguous(&xc, x);
    c->in[0] = xc;
    if (!s) s = cr_tensor_alloc(&c->out[0], x->ndim, oshape, x->dtype, cr_tensor_dev(x));
    if (s) cr_call_drop_outs(c);
    else s = cr_call_finish(out, c, 0, 0); /* the backward needs only sizes */
    cr_tensor_free(xc);
    return s;
}

cr_status cr_op_avg_pool2d(cr_tensor **out, cr_tensor *x, const cr_pool2d_params *p) {
    *out = NULL;
    CR_CHECK_TENSOR("avg_pool2d", x, "input");
    int64_t oshape[4];
    cr_status s = check_input("avg_pool2d", x);
    if (!s) s = check_params("avg_pool2d", x->ndim, x->shape, p, false, oshape);
    if (s) return s;
    if (cr_dtype_is_half(x->dtype)) {
        cr_tensor *xf = NULL, *y = NULL;
        s = cr_op_to(&xf, x, CR_DT_F32);
        if (!s) s = cr_op_avg_pool2d(&y, xf, p);
        if (!s) s = cr_op_to(out, y, x->dtype);
        cr_tensor_free(xf);
        cr_tensor_free(y);
        return s;
    }
    cr_call c;
    if ((s = cr_call_init(&c, CR_OP_AVG_POOL2D, 1, 1))) return s;
    params_to_call(&c, p);
    return run_forward(&c, out, x, oshape);
}

cr_status cr_grad_avg_pool2d(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    cr_pool2d_params p;
    params_from_call(&n->call, &p);
    const cr_input_meta *m = &n->in_meta[0];
    return cr_op_avg_pool2d_backward(&gin[0], gout[0], m->shape[m->ndim - 2],
                                     m->shape[m->ndim - 1], &p);
}

cr_status cr_op_avg_pool2d_backward(cr_tensor **gx, cr_tensor *gout, int64_t in_h,
                                    int64_t in_w, const cr_pool2d_params *p) {
    const char *op = "avg_pool2d_backward";
    *gx = NULL;
    CR_CHECK_TENSOR(op, gout, "grad_output");
    int64_t shape[4];
    cr_status s = backward_out_shape(op, gout, in_h, in_w, shape, false);
    if (s) return s;
    if ((s = check_backward_params(op, gout, shape, p, false))) return s;
    cr_call c;
    if ((s = cr_call_init(&c, CR_OP_AVG_POOL2D_BACKWARD, 1, 1))) return s;
    params_to_call(&c, p);
    c.i[10] = in_h, c.i[11] = in_w;
    return run_backward(&c, gx, 1, &gout, gout->ndim, shape, gout->dtype, false);
}

/* ---- adaptive average pooling ---------------------------------------------------------- */
/* PyTorch's bins: output i averages inputs [floor(i*n/out), ceil((i+1)*n/out)). */
static inline int64_t bin_start(int64_t i, int64_t n, int64_t out) { return i * n / out; }
static inline int64_t bin_end(int64_t i, int64_t n, int64_t out) {
    return ((i + 1) * n + out - 1) / out;
}

static inline __attribute__((always_inline)) void adaptive_plane(const pool_geom *g,
                                                                  cr_dtype dt, const char *x,
                                                                  char *y) {
    for (int64_t oh = 0; oh < g->oh; oh++) {
        int64_t h0 = bin_start(oh, g->h, g->oh), h1 = bin_end(oh, g->h, g->oh);
        for (int64_t ow = 0; ow < g->ow; ow++) {
            int64_t w0 = bin_start(ow, g->w, g->ow), w1 = bin_end(ow, g->w, g->ow);
            double sum = 0;
            for (int64_t ih = h0; ih < h1; ih++)
                for (int64_t iw = w0; iw < w1; iw++) sum += ld(dt, x, ih * g->w + iw);
            st(dt, y, oh * g->ow + ow, sum / (double)((h1 - h0) * (w1 - w0)));
        }
    }
}

static inline __attribute__((always_inline)) void adaptive_plane_backward(const pool_geom *g,
                                                                           cr_dtype dt,
                                                                           const char *gy,
                                                                           char *gx) {
    zero_plane(gx, g->h * g->w, dt);
    for (int64_t oh = 0; oh < g->oh; oh++) {
        int64_t h0 = bin_start(oh, g->h, g->oh), h1 = bin_end(oh, g->h, g->oh);
        for (int64_t ow = 0; ow < g->ow; ow++) {
            int64_t w0 = bin_start(ow, g->w, g->ow), w1 = bin_end(ow, g->w, g->ow);
            double v = ld(dt, gy, oh * g->ow + ow) / (double)((h1 - h0) * (w1 - w0));
            for (int64_t ih = h0; ih < h1; ih++)
                for (int64_t iw = w0; iw < w1; iw++) add(dt, gx, ih * g->w + iw, v);
        }
    }
}

/* Global average pooling (a 1 x 1 output) of a channels-last cpu tensor, f32 or bf16: its
 * [N, H, W, C] memory is read as it lies, rows of C channels summed in f64 per image (the
 * row-major path's sums, in the same order), where that path would first copy it to
 * row-major; the grad is written channels-last. c->i[12] marks such calls. A fast path: off
 * with the others (cr_set_fast_paths). */
enum { GLOBAL_NHWC_FLAG = 12, GLOBAL_CHUNK = 256 };

static bool global_pool_nhwc(const cr_tensor *x, int64_t out_h, int64_t out_w) {
    return cr_fast_paths_enabled() && out_h == 1 && out_w == 1 && x->ndim == 4 &&
           cr_tensor_on_cpu(x) && (x->dtype == CR_DT_F32 || x->dtype == CR_DT_BF16) &&
           cr_tensor_is_channels_last(x) && !cr_tensor_is_contiguous(x);
}

/* y[n, c] = mean of x[n, :, :, c]; x [N, C, H, W] channels-last, y [N, C, 1, 1]. */
static void global_pool_nhwc_forward(const cr_tensor *x, cr_tensor *y) {
    const int64_t N = x->shape[0], C = x->shape[1], HW = x->shape[2] * x->shape[3];
    const cr_dtype dt = x->dtype;
    const char *xp = cr_tensor_ptr(x);
    char *yp = cr_tensor_ptr(y);
#pragma omp parallel for schedule(static) if (N * HW * C > CR_PAR_GRAIN) num_threads(cr_threads())
    for (int64_t n = 0; n < N; n++) {
        for (int64_t c0 = 0; c0 < C; c0 += GLOBAL_CHUNK) {
            const int64_t nc = C - c0 < GLOBAL_CHUNK ? C - c0 : GLOBAL_CHUNK;
            double sum[GLOBAL_CHUNK] = {0};
            for (int64_t p = 0; p < HW; p++) {
                const int64_t row = (n * HW + p) * C + c0;
                for (int64_t k = 0; k < nc; k++) sum[k] += ld(dt, xp, row + k);
            }
            for (int64_t k = 0; k < nc; k++) st(dt, yp, n * C + c0 + k, sum[k] / (double)HW);
        }
    }
}

/* gx[n, :, :, c] = gy[n, c] / (H W); gy [N, C, 1, 1] dense, gx channels-last. */
static void global_pool_nhwc_backward(const cr_tensor *gy, cr_tensor *gx) {
    const int64_t N = gx->shape[0], C = gx->shape[1], HW = gx->shape[2] * gx->shape[3];
    const cr_dtype dt = gx->dtype;
    const char *gyp = cr_tensor_ptr(gy);
    char *gxp = cr_tensor_ptr(gx);
#pragma omp parallel for schedule(static) if (N * HW * C > CR_PAR_GRAIN) num_threads(cr_threads())
    for (int64_t n = 0; n < N; n++) {
        for (int64_t c0 = 0; c0 < C; c0 += GLOBAL_CHUNK) {
            const int64_t nc = C - c0 < GLOBAL_CHUNK ? C - c0 : GLOBAL_CHUNK;
            float v[GLOBAL_CHUNK]; /* the f32 values every pixel gets */
            for (int64_t k = 0; k < nc; k++)
                v[k] = (float)(ld(dt, gyp, n * C + c0 + k) / (double)HW);
            for (int64_t p = 0; p < HW; p++) {
                const int64_t row = (n * HW + p) * C + c0;
                for (int64_t k = 0; k < nc; k++) st(dt, gxp, row + k, v[k]);
            }
        }
    }
}

/* Adaptive pooling keeps no params in c->i beyond the sizes: its bins come from them. */
cr_status cr_cpu_adaptive_avg_pool2d(cr_call *c) {
    const cr_tensor *x = c->in[0];
    if (c->i[GLOBAL_NHWC_FLAG]) {
        global_pool_nhwc_forward(x, c->out[0]);
        return CR_OK;
    }
    pool_geom g;
    memset(&g, 0, sizeof g);
    geom_from_call(c, x->shape[x->ndim - 2], x->shape[x->ndim - 1], c->out[0], &g);
    const cr_dtype dt = x->dtype;
    const int64_t es = (int64_t)cr_dtype_size(dt), in_plane = g.h * g.w, out_plane = g.oh * g.ow;
    const char *xp = cr_tensor_ptr(x);
    char *yp = cr_tensor_ptr(c->out[0]);
    const bool par = par_planes(&g, in_plane + out_plane);
#pragma omp parallel for schedule(static) if (par) num_threads(cr_threads())
    for (int64_t k = 0; k < g.planes; k++) {
        if (dt == CR_DT_F32)
            adaptive_plane(&g, CR_DT_F32, xp + k * in_plane * es, yp + k * out_plane * es);
        else
            adaptive_plane(&g, CR_DT_F64, xp + k * in_plane * es, yp + k * out_plane * es);
    }
    return CR_OK;
}

cr_status cr_cpu_adaptive_avg_pool2d_backward(cr_call *c) {
    const cr_tensor *gy = c->in[0];
    if (c->i[GLOBAL_NHWC_FLAG]) {
        global_pool_nhwc_backward(gy, c->out[0]);
        return CR_OK;
    }
    pool_geom g;
    geom_from_call(c, c->i[10], c->i[11], gy, &g);
    const cr_dtype dt = gy->dtype;
    const int64_t es = (int64_t)cr_dtype_size(dt), in_plane = g.h * g.w, out_plane = g.oh * g.ow;
    const char *gyp = cr_tensor_ptr(gy);
    char *gxp = cr_tensor_ptr(c->out[0]);
    const bool par = par_planes(&g, in_plane + out_plane);
#pragma omp parallel for schedule(static) if (par) num_threads(cr_threads())
    for (int64_t k = 0; k < g.planes; k++) {
        if (dt == CR_DT_F32)
            adaptive_plane_backward(&g, CR_DT_F32, gyp + k * out_plane * es,
                                    gxp + k * in_plane * es);
        else
            adaptive_plane_backward(&g, CR_DT_F64, gyp + k * out_plane * es,
                                    gxp + k * in_plane * es);
    }
    return CR_OK;
}

cr_status cr_op_adaptive_avg_pool2d(cr_tensor **out, cr_tensor *x, int64_t out_h,
                                    int64_t out_w) {
    const char *op = "adaptive_avg_pool2d";
    *out = NULL;
    CR_CHECK_TENSOR(op, x, "input");
    cr_status s = check_input(op, x);
    if (s) return s;
    if (out_h < 1 || out_w < 1 || out_h > PARAM_LIMIT || out_w > PARAM_LIMIT)
        return cr_fail(CR_ERR_ARG, "%s: output size must be >= 1 (and sane), got {%lld, %lld}",
                       op, (long long)out_h, (long long)out_w);
    if (global_pool_nhwc(x, out_h, out_w)) {
        const int64_t oshape[4] = {x->shape[0], x->shape[1], 1, 1};
        cr_call c;
        if ((s = cr_call_init(&c, CR_OP_ADAPTIVE_AVG_POOL2D, 1, 1))) return s;
        c.i[GLOBAL_NHWC_FLAG] = 1;
        c.in[0] = x;
        if ((s = cr_tensor_alloc(&c.out[0], 4, oshape, x->dtype, cr_tensor_dev(x)))) {
            cr_call_drop_outs(&c);
            return s;
        }
        return cr_call_finish(out, &c, 0, 0); /* the backward needs only sizes */
    }
    if (cr_dtype_is_half(x->dtype)) {
        cr_tensor *xf = NULL, *y = NULL;
        s = cr_op_to(&xf, x, CR_DT_F32);
        if (!s) s = cr_op_adaptive_avg_pool2d(&y, xf, out_h, out_w);
        if (!s) s = cr_op_to(out, y, x->dtype);
        cr_tensor_free(xf);
        cr_tensor_free(y);
        return s;
    }
    int64_t oshape[4];
    for (int d = 0; d < x->ndim - 2; d++) oshape[d] = x->shape[d];
    oshape[x->ndim - 2] = out_h;
    oshape[x->ndim - 1] = out_w;
    if ((s = cr_check_shape_arg(op, x->ndim, oshape))) return s;
    cr_call c;
    if ((s = cr_call_init(&c, CR_OP_ADAPTIVE_AVG_POOL2D, 1, 1))) return s;
    return run_forward(&c, out, x, oshape);
}

/* gx of the given shape from gout (checked by the caller); nhwc: the global channels-last
 * kernel, gout a dense [N, C, 1, 1] and gx channels-last. */
static cr_status adaptive_backward(cr_tensor **gx, cr_tensor *gout, int ndim,
                                   const int64_t *shape, bool nhwc) {
    cr_call c;
    cr_status s = cr_call_init(&c, CR_OP_ADAPTIVE_AVG_POOL2D_BACKWARD, 1, 1);
    if (s) return s;
    c.i[10] = shape[ndim - 2], c.i[11] = shape[ndim - 1], c.i[GLOBAL_NHWC_FLAG] = nhwc;
    return run_backward(&c, gx, 1, &gout, ndim, shape, gout->dtype, nhwc);
}

cr_status cr_grad_adaptive_avg_pool2d(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    const cr_input_meta *m = &n->in_meta[0];
    if (!n->call.i[GLOBAL_NHWC_FLAG])
        return cr_op_adaptive_avg_pool2d_backward(&gin[0], gout[0], m->shape[m->ndim - 2],
                                                  m->shape[m->ndim - 1]);
    /* the forward's global channels-last kernel: the grad channels-last too, from gout as a
     * dense [N, C, 1, 1] in the input's dtype (f32 or bf16, which the kernel reads) */
    cr_tensor *t = NULL, *g = NULL;
    bool prev = cr_grad_set_enabled(false);
    cr_status s = cr_op_to(&t, gout[0], m->dtype);
    if (!s) s = cr_op_contiguous(&g, t);
    cr_grad_set_enabled(prev);
    cr_tensor_free(t);
    if (!s) s = adaptive_backward(&gin[0], g, 4, m->shape, true);
    cr_tensor_free(g);
    return s;
}

cr_status cr_op_adaptive_avg_pool2d_backward(cr_tensor **gx, cr_tensor *gout, int64_t in_h,
                                             int64_t in_w) {
    const char *op = "adaptive_avg_pool2d_backward";
    *gx = NULL;
    CR_CHECK_TENSOR(op, gout, "grad_output");
    int64_t shape[4];
    cr_status s = backward_out_shape(op, gout, in_h, in_w, shape, false);
    return s ? s : adaptive_backward(gx, gout, gout->ndim, shape, false);
}
