/* augment_color.c — the per-image ops of the augmentation pipeline after the crop:
 * colour jitter (brightness, contrast, saturation, hue), grayscale, gaussian blur and
 * solarize, with torchvision's float-tensor formulas on values in [0, 255] (its bound
 * 1.0 becomes 255). Arithmetic is f32 like torchvision's on an f32 tensor; nothing is
 * rounded to integers. crescent_data.h lists where these differ from torchvision. */
#include <math.h>

#include "augment_impl.h"

static const float GREY_R = 0.299f, GREY_G = 0.587f, GREY_B = 0.114f;

static inline float clamp255(float v) { return v < 0.0f ? 0.0f : (v > 255.0f ? 255.0f : v); }

/* torchvision's _blend(img, zeros, f): clamp(f x). */
static void brightness(float *img, int64_t n, float f) {
    for (int64_t k = 0; k < n; k++) img[k] = clamp255(f * img[k]);
}

/* _blend(img, mean(grey(img)), f); for one channel the mean of the image itself. */
static void contrast(float *img, int64_t nchan, int64_t plane, float f) {
    double sum = 0;
    if (nchan == 3) {
        const float *r = img, *g = img + plane, *b = img + 2 * plane;
        for (int64_t k = 0; k < plane; k++) sum += GREY_R * r[k] + GREY_G * g[k] + GREY_B * b[k];
    } else {
        for (int64_t k = 0; k < plane; k++) sum += img[k];
    }
    float mean = (float)(sum / (double)plane), g = (1.0f - f) * mean;
    for (int64_t k = 0; k < nchan * plane; k++) img[k] = clamp255(f * img[k] + g);
}

/* _blend(img, grey(img), f) per pixel; a no-op for one channel. */
static void saturation(float *img, int64_t nchan, int64_t plane, float f) {
    if (nchan != 3) return;
    float *r = img, *g = img + plane, *b = img + 2 * plane, h = 1.0f - f;
    for (int64_t k = 0; k < plane; k++) {
        float grey = h * (GREY_R * r[k] + GREY_G * g[k] + GREY_B * b[k]);
        r[k] = clamp255(f * r[k] + grey);
        g[k] = clamp255(f * g[k] + grey);
        b[k] = clamp255(f * b[k] + grey);
    }
}

/* torchvision's adjust_hue: _rgb2hsv, h = (h + factor) mod 1, _hsv2rgb, on x / 255.
 * Written without branches (its sector switch became selects, as torchvision's own masks
 * are) so that the loop vectorises: the same arithmetic in the same order, 5x faster than
 * the switch was (the dearest op of SwAV's jitter). */
static inline float max2(float a, float b) { return a > b ? a : b; }
static inline float min2(float a, float b) { return a < b ? a : b; }
static inline float unit(float v) { return min2(max2(v, 0.0f), 1.0f); }

static void hue(float *img, int64_t nchan, int64_t plane, float factor) {
    if (nchan != 3) return;
    float *pr = img, *pg = img + plane, *pb = img + 2 * plane;
#pragma omp simd
    for (int64_t k = 0; k < plane; k++) {
        float r = pr[k] / 255.0f, g = pg[k] / 255.0f, b = pb[k] / 255.0f;
        float maxc = max2(r, max2(g, b)), minc = min2(r, min2(g, b));
        bool eqc = maxc == minc;
        float cr = maxc - minc;
        float s = cr / (eqc ? 1.0f : maxc);
        float div = eqc ? 1.0f : cr;
        float rc = (maxc - r) / div, gc = (maxc - g) / div, bc = (maxc - b) / div;
        float h = maxc == r ? bc - gc : (maxc == g ? 2.0f + rc - bc : 4.0f + gc - rc);
        h = h / 6.0f + 1.0f;
        h = h - floorf(h); /* fmod(h / 6 + 1, 1): h / 6 + 1 >= 0 */
        h = h + factor;
        h = h - floorf(h); /* torch.remainder(h, 1.0) */
        float v = maxc, i = floorf(h * 6.0f), f = h * 6.0f - i;
        float p = unit(v * (1.0f - s)), q = unit(v * (1.0f - s * f)), t = unit(v * (1.0f - s * (1.0f - f)));
        /* sectors 0..5: (v,t,p) (q,v,p) (p,v,t) (p,q,v) (t,p,v) (v,p,q) */
        float ro = (i == 0.0f || i == 5.0f) ? v : i == 1.0f ? q : i == 4.0f ? t : p;
        float go = i == 0.0f ? t : (i == 1.0f || i == 2.0f) ? v : i == 3.0f ? q : p;
        float bo = (i == 0.0f || i == 1.0f) ? p : i == 2.0f ? t : i == 5.0f ? q : v;
        pr[k] = ro * 255.0f;
        pg[k] = go * 255.0f;
        pb[k] = bo * 255.0f;
    }
}

void cr_augment_jitter(float *img, int64_t nchan, int64_t plane, const cr_data_crop_draw *d) {
    for (int j = 0; j < 4; j++) {
        switch (d->order[j]) {
        case 0:
            if (d->brightness != 1.0) brightness(img, nchan * plane, (float)d->brightness);
            break;
        case 1:
            if (d->contrast != 1.0) contrast(img, nchan, plane, (float)d->contrast);
            break;
        case 2:
            if (d->saturation != 1.0) saturation(img, nchan, plane, (float)d->saturation);
            break;
        default:
            if (d->hue != 0.0) hue(img, nchan, plane, (float)d->hue);
            break;
        }
    }
}

void cr_augment_grayscale(float *img, int64_t nchan, int64_t plane) {
    if (nchan != 3) return;
    float *r = img, *g = img + plane, *b = img + 2 * plane;
    for (int64_t k = 0; k < plane; k++) {
        float grey = GREY_R * r[k] + GREY_G * g[k] + GREY_B * b[k];
        r[k] = g[k] = b[k] = grey;
    }
}

void cr_augment_solarize(float *img, int64_t n, float threshold) {
    for (int64_t k = 0; k < n; k++)
        if (img[k] >= threshold) img[k] = 255.0f - img[k];
}

/* Mirror without repeating the edge (torch's 'reflect'); |overhang| < n. */
static inline int64_t reflect(int64_t i, int64_t n) {
    if (i < 0) return -i;
    if (i >= n) return 2 * (n - 1) - i;
    return i;
}

enum { MAX_TAPS = 255 };

void cr_augment_blur(float *img, float *tmp, int64_t nchan, int64_t h, int64_t w, double sigma,
                     int64_t ksize) {
    if (ksize <= 1) return;
    if (ksize > MAX_TAPS) ksize = MAX_TAPS;
    /* torchvision's _get_gaussian_kernel1d: x = -half .. half, exp(-x^2 / (2 sigma^2)),
     * normalised to sum 1. */
    float kern[MAX_TAPS];
    int64_t half = ksize / 2;
    double sum = 0;
    for (int64_t k = 0; k < ksize; k++) {
        double x = (double)(k - half) / sigma;
        double v = exp(-0.5 * x * x);
        kern[k] = (float)v;
        sum += v;
    }
    for (int64_t k = 0; k < ksize; k++) kern[k] = (float)(kern[k] / sum);
    for (int64_t c = 0; c < nchan; c++) {
        float *p = img + c * h * w;
        /* rows: p -> tmp. Interior columns without index reflection, a tap at a time
         * along x so the loop vectorises (each column still sums its taps in order);
         * the edges reflect. */
        const int64_t lo = half < w ? half : w, hi = w - half > lo ? w - half : lo;
        for (int64_t y = 0; y < h; y++) {
            const float *src = p + y * w;
            float *dst = tmp + y * w;
            for (int64_t x = lo; x < hi; x++) dst[x] = 0;
            for (int64_t k = 0; k < ksize; k++) {
                const float *s = src + k - half, kk = kern[k];
                for (int64_t x = lo; x < hi; x++) dst[x] += kk * s[x];
            }
            for (int64_t x = 0; x < w; x++) {
                if (x == lo) x = hi;
                if (x >= w) break;
                float acc = 0;
                for (int64_t k = 0; k < ksize; k++) acc += kern[k] * src[reflect(x + k - half, w)];
                dst[x] = acc;
            }
        }
        /* columns: tmp -> p, a row at a time so the inner loop runs along x */
        for (int64_t y = 0; y < h; y++) {
            float *dst = p + y * w;
            for (int64_t x = 0; x < w; x++) dst[x] = 0;
            for (int64_t k = 0; k < ksize; k++) {
                const float *s = tmp + reflect(y + k - half, h) * w;
                float kk = kern[k];
                for (int64_t x = 0; x < w; x++) dst[x] += kk * s[x];
            }
        }
    }
}
