/* conv_small.c — the grads of small-image channels-last bf16 convolutions, where oneDNN's
 * AMX backward kernels run at a small fraction of its forward rate: on a SwAV step
 * (ResNet-18 width 16, batch 256, 2 threads, Xeon with AMX) oneDNN 2.6's backward weights
 * took 23 ms per call at [1024, 128, 2, 2] against 3.3 ms for the forward, and were 45% of
 * the step. oneDNN 3.2 is better but not there: the whole backward (data and weights) of
 * that convolution took 30.4 ms against 10.8 ms on these paths, and 17.9 against 11.8 ms
 * at [512, 128, 4, 4] (medians of 7, interleaved in one process).
 *   - weight grad as matrix products: gw[o, (kh, kw, c)] = gy^T [o, P] @ cols [P, (kh, kw,
 *     c)] over the P = N*OH*OW output pixels, the im2col columns gathered from x (whole
 *     channel runs per kernel tap) a cache-sized chunk of pixels at a time, the products
 *     on oneDNN's matmul (AMX) summed in f32, then permuted to [o, c, kh, kw];
 *   - input grad of a stride-1 convolution as the forward convolution of gy with the
 *     flipped, transposed weights wf[c, o, kh, kw] = w[o, c, K-1-kh, K-1-kw] and padding
 *     (K-1)*dilation - padding, on oneDNN's forward kernel.
 * conv.c chooses these paths by cr_conv2d_small_wanted. */
#include <pthread.h>

#include "conv_impl.h"
#include "matmul_impl.h"

/* Output images up to this many pixels take these paths: with oneDNN 3.2, at 16 (4 x 4)
 * they took the backward in 0.35-0.75 of oneDNN's time, at 49 (7 x 7) 0.95-1.3 times it, at
 * 196 (14 x 14) 2.4 times (conv2d backward at SwAV's shapes, 2 threads). */
enum { SMALL_MAX_PIXELS = 16 };

bool cr_conv2d_small_wanted(const cr_conv_geom *g) {
#ifdef CR_HAVE_DNNL
    static int mode = -1; /* CRESCENT_CONV_SMALL=0|1 forces them off or on (benchmarks) */
    if (mode < 0) {
        const char *e = getenv("CRESCENT_CONV_SMALL");
        mode = e && *e ? (*e == '1' ? 1 : 0) : 2;
    }
    if (mode == 0 || !g->bf16 || !g->src_cl || !g->dst_cl || g->groups != 1) return false;
    return mode == 1 || g->oh * g->ow <= SMALL_MAX_PIXELS;
#else
    (void)g;
    return false;
#endif
}

#ifdef CR_HAVE_DNNL
/* The columns and the f32 sums live in one buffer kept across calls (page faults on a
 * fresh multi-megabyte buffer per call cost as much as the product). */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static uint16_t *buffer;
static size_t buffer_elems;

static uint16_t *buffer_get(size_t elems) {
    if (elems > buffer_elems) {
        free(buffer);
        buffer = aligned_alloc(64, (elems * sizeof(uint16_t) + 63) / 64 * 64);
        buffer_elems = buffer ? elems : 0;
    }
    return buffer;
}

/* cols[p - p0, (kh, kw, c)] for output pixels p in [p0, p0 + np), p = (n, oh, ow):
 * x[n, ih, iw, :] or zeros. */
static void gather_columns(const cr_conv_geom *g, const uint16_t *x, int64_t p0, int64_t np,
                           uint16_t *cols) {
    const int64_t C = g->c, K = g->kh * g->kw * C;
    bool par = np * K >= CR_PAR_GRAIN;
#pragma omp parallel for if (par) schedule(static)
    for (int64_t p = p0; p < p0 + np; p++) {
        const int64_t n = p / (g->oh * g->ow), oh = p / g->ow % g->oh, ow = p % g->ow;
        uint16_t *row = cols + (p - p0) * K;
        for (int64_t kh = 0; kh < g->kh; kh++) {
            const int64_t ih = oh * g->sh - g->ph + kh * g->dh;
            for (int64_t kw = 0; kw < g->kw; kw++) {
                const int64_t iw = ow * g->sw - g->pw + kw * g->dw;
                uint16_t *dst = row + (kh * g->kw + kw) * C;
                if (ih < 0 || ih >= g->h || iw < 0 || iw >= g->w)
                    memset(dst, 0, sizeof(uint16_t) * (size_t)C);
                else
                    memcpy(dst, x + ((n * g->h + ih) * g->w + iw) * C, sizeof(uint16_t) * (size_t)C);
            }
        }
    }
}

/* Pixels per product: columns of about COLUMN_BYTES stay in the cores' caches between the
 * gather and the product, and the partial products add up in f32. */
enum { COLUMN_BYTES = 1 << 20 };

cr_status cr_conv2d_small_backward_weights(const cr_conv_geom *g, const void *x, const void *gy,
                                           void *gw) {
    const int64_t C = g->c, O = g->o, taps = g->kh * g->kw, K = taps * C;
    const int64_t P = g->n * g->oh * g->ow;
    int64_t chunk = COLUMN_BYTES / (K * (int64_t)sizeof(uint16_t));
    chunk = chunk < 64 ? 64 : chunk / 64 * 64;
    if (chunk > P) chunk = P;
    pthread_mutex_lock(&lock);
    /* the columns, then the f32 sums [O, (kh, kw, c)] */
    uint16_t *cols = buffer_get((size_t)(chunk * K + 2 * O * K));
    if (!cols) { /* oneDNN's own kernel then takes the weight grad */
        pthread_mutex_unlock(&lock);
        return CR_ERR_UNSUPPORTED;
    }
    float *sums = (float *)(void *)(cols + chunk * K);
    cr_status st = CR_OK;
    for (int64_t p0 = 0; p0 < P && !st; p0 += chunk) {
        const int64_t np = P - p0 < chunk ? P - p0 : chunk;
        gather_columns(g, (const uint16_t *)x, p0, np, cols);
        cr_gemm m;
        memset(&m, 0, sizeof m);
        m.dt = CR_DT_BF16;
        m.c_f32 = true;
        m.accumulate = p0 > 0;
        m.batch = 1;
        m.n = O, m.k = np, m.m = K;
        m.a = (const char *)gy + p0 * O * (int64_t)sizeof(uint16_t); /* gy^T: gy is [P, O] */
        m.sa[1] = 1, m.sa[2] = O;
        m.b = (const char *)cols;
        m.sb[1] = K, m.sb[2] = 1;
        m.c = (char *)sums;
        m.alpha = 1.0;
        st = cr_gemm_dnnl(&m);
    }
    if (!st) { /* [O, kh, kw, C] -> [O, C, kh, kw], rounded to bf16 */
        uint16_t *out = gw;
        for (int64_t o = 0; o < O; o++)
            for (int64_t t = 0; t < taps; t++)
                for (int64_t c = 0; c < C; c++)
                    out[(o * C + c) * taps + t] = cr_f32_to_bf16(sums[(o * taps + t) * C + c]);
    }
    pthread_mutex_unlock(&lock);
    return st;
}

cr_status cr_conv2d_small_backward_data(const cr_conv_geom *g, const void *gy, const void *w,
                                        void *gx) {
    const int64_t pad_h = (g->kh - 1) * g->dh - g->ph, pad_w = (g->kw - 1) * g->dw - g->pw;
    if (g->sh != 1 || g->sw != 1 || g->groups != 1 || pad_h < 0 || pad_w < 0)
        return CR_ERR_UNSUPPORTED;
    const int64_t O = g->o, C = g->c, taps = g->kh * g->kw;
    uint16_t *wf = malloc(sizeof(uint16_t) * (size_t)(O * C * taps));
    if (!wf) return CR_ERR_UNSUPPORTED;
    const uint16_t *wp = w;
    for (int64_t o = 0; o < O; o++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t t = 0; t < taps; t++)
                wf[(c * O + o) * taps + t] = wp[(o * C + c) * taps + taps - 1 - t];
    cr_conv_geom f = *g;
    f.c = O, f.h = g->oh, f.w = g->ow;
    f.o = C, f.oh = g->h, f.ow = g->w;
    f.ph = pad_h, f.pw = pad_w;
    f.src_cl = g->dst_cl, f.dst_cl = g->src_cl;
    cr_status st = cr_conv2d_dnnl_forward(&f, gy, wf, NULL, gx);
    free(wf);
    return st;
}
#else
cr_status cr_conv2d_small_backward_data(const cr_conv_geom *g, const void *gy, const void *w,
                                        void *gx) {
    (void)g, (void)gy, (void)w, (void)gx;
    return CR_ERR_UNSUPPORTED;
}
cr_status cr_conv2d_small_backward_weights(const cr_conv_geom *g, const void *x, const void *gy,
                                          void *gw) {
    (void)g, (void)x, (void)gy, (void)gw;
    return CR_ERR_UNSUPPORTED;
}
#endif
