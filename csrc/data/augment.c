/* augment.c — the crops of self-supervised training, one C call per batch and crop
 * spec: for every (crop, sample) draw the parameters from Philox (layout in
 * crescent_data.h), cut the RandomResizedCrop box out of the image (u8, or f32 in [0, 1]
 * read as 255 x value) and resize it with torchvision's antialiased bilinear filter
 * (PIL's; plain bilinear when enlarging), flipping on the way, then run the colour ops
 * (augment_color.c) on the f32 result and write it normalised. OpenMP over (crop,
 * sample) with per-thread scratch, or serial on the calling thread for the loader's
 * workers (cr_augment_crops); the draws depend only on (seed, epoch, sample index, crop
 * index), never on the thread. */
#include <math.h>
#include <omp.h>

#include "augment_impl.h"
#include "rng.h"

/* ASCII "CropsAg1": the key tag of the crop draws. */
static const uint64_t CR_DATA_TAG_CROPS = 0x43726f7073416731ULL;

enum { CR_AUG_ATTEMPTS = 10, CR_AUG_BLK_FLAGS = 10, CR_AUG_BLK_JITTER = 11,
       CR_AUG_BLK_MISC = 12, CR_AUG_PAR_GRAIN = 1 << 14 };

static inline double unit(uint32_t w) { return (double)w * (1.0 / 4294967296.0); }
static inline int64_t below(uint32_t w, int64_t n) { return (int64_t)(((uint64_t)w * (uint64_t)n) >> 32); }

static void block(uint64_t base, uint64_t crop, int blk, uint64_t counter, uint32_t w[4]) {
    cr_philox_block(cr_data_mix(base + 16 * crop + (uint64_t)blk), counter, w);
}

cr_status cr_augment_check_spec(const cr_data_crop_spec *s, int64_t nchan) {
    const char *op = "augment";
    if (!s) return cr_fail(CR_ERR_ARG, "%s: spec is nil", op);
    if (s->size_h < 1 || s->size_w < 1 || s->size_h > 65536 || s->size_w > 65536)
        return cr_fail(CR_ERR_ARG, "%s: crop size %lld x %lld must be in [1, 65536]; pass a positive size",
                       op, (long long)s->size_h, (long long)s->size_w);
    if (!(s->scale_lo > 0 && s->scale_lo <= s->scale_hi && s->scale_hi <= 1))
        return cr_fail(CR_ERR_ARG, "%s: scale {%g, %g} must satisfy 0 < lo <= hi <= 1 (fractions of the "
                       "image area)", op, s->scale_lo, s->scale_hi);
    if (!(s->ratio_lo > 0 && s->ratio_lo <= s->ratio_hi && isfinite(s->ratio_hi)))
        return cr_fail(CR_ERR_ARG, "%s: ratio {%g, %g} must satisfy 0 < lo <= hi (aspect w / h), e.g. "
                       "{3/4, 4/3}", op, s->ratio_lo, s->ratio_hi);
    const double ps[5] = {s->flip_p, s->jitter_p, s->gray_p, s->blur_p, s->solarize_p};
    const char *pn[5] = {"flip", "color_jitter.p", "grayscale", "blur.p", "solarize"};
    for (int k = 0; k < 5; k++)
        if (!(ps[k] >= 0 && ps[k] <= 1))
            return cr_fail(CR_ERR_ARG, "%s: probability %s = %g must be in [0, 1]", op, pn[k], ps[k]);
    const double js[3] = {s->brightness, s->contrast, s->saturation};
    const char *jn[3] = {"brightness", "contrast", "saturation"};
    for (int k = 0; k < 3; k++)
        if (!(js[k] >= 0 && isfinite(js[k])))
            return cr_fail(CR_ERR_ARG, "%s: color_jitter.%s = %g must be a finite number >= 0", op, jn[k],
                           js[k]);
    if (!(s->hue >= 0 && s->hue <= 0.5))
        return cr_fail(CR_ERR_ARG, "%s: color_jitter.hue = %g must be in [0, 0.5]", op, s->hue);
    if (s->blur_p > 0 && !(s->blur_sigma_lo > 0 && s->blur_sigma_lo <= s->blur_sigma_hi &&
                           s->blur_sigma_hi <= 40))
        return cr_fail(CR_ERR_ARG, "%s: blur sigma {%g, %g} must satisfy 0 < lo <= hi <= 40", op,
                       s->blur_sigma_lo, s->blur_sigma_hi);
    if (!isfinite(s->solarize_threshold))
        return cr_fail(CR_ERR_ARG, "%s: solarize threshold %g must be finite", op, s->solarize_threshold);
    for (int64_t c = 0; c < nchan; c++)
        if (!(s->std[c] != 0) || !isfinite(s->std[c]) || !isfinite(s->mean[c]))
            return cr_fail(CR_ERR_ARG, "%s: channel %lld has mean %g and std %g; std must be finite and "
                           "non-zero", op, (long long)c, s->mean[c], s->std[c]);
    return CR_OK;
}

/* The draws of one crop (see crescent_data.h); spec already checked. */
static void draw(cr_data_crop_draw *d, const cr_data_crop_spec *s, int64_t H, int64_t W,
                 uint64_t base, uint64_t epoch, uint64_t index, uint64_t crop) {
    uint64_t counter = (epoch << 32) | index;
    uint32_t w[4];
    /* RandomResizedCrop.get_params */
    double area = (double)H * (double)W;
    double lr0 = log(s->ratio_lo), lr1 = log(s->ratio_hi);
    bool found = false;
    for (int a = 0; a < CR_AUG_ATTEMPTS && !found; a++) {
        block(base, crop, a, counter, w);
        double target = area * (s->scale_lo + (s->scale_hi - s->scale_lo) * unit(w[0]));
        double ar = exp(lr0 + (lr1 - lr0) * unit(w[1]));
        int64_t cw = (int64_t)rint(sqrt(target * ar)), ch = (int64_t)rint(sqrt(target / ar));
        if (cw > 0 && cw <= W && ch > 0 && ch <= H) {
            d->height = ch, d->width = cw;
            d->top = below(w[2], H - ch + 1);
            d->left = below(w[3], W - cw + 1);
            found = true;
        }
    }
    if (!found) { /* torchvision's fallback: the central crop, within the ratio range */
        double in_ratio = (double)W / (double)H;
        int64_t cw = W, ch = H;
        if (in_ratio < s->ratio_lo) ch = (int64_t)rint((double)cw / s->ratio_lo);
        else if (in_ratio > s->ratio_hi) cw = (int64_t)rint((double)ch * s->ratio_hi);
        if (ch < 1) ch = 1;
        if (cw < 1) cw = 1;
        d->height = ch, d->width = cw;
        d->top = (H - ch) / 2, d->left = (W - cw) / 2;
    }
    block(base, crop, CR_AUG_BLK_FLAGS, counter, w);
    d->flip = unit(w[0]) < s->flip_p;
    d->jitter = unit(w[1]) < s->jitter_p;
    d->gray = unit(w[2]) < s->gray_p;
    d->blur = unit(w[3]) < s->blur_p;
    block(base, crop, CR_AUG_BLK_JITTER, counter, w);
    const double f[3] = {s->brightness, s->contrast, s->saturation};
    double out[3];
    for (int k = 0; k < 3; k++) {
        double lo = 1 - f[k] > 0 ? 1 - f[k] : 0, hi = 1 + f[k];
        out[k] = f[k] > 0 ? lo + (hi - lo) * unit(w[k]) : 1.0;
    }
    d->brightness = out[0], d->contrast = out[1], d->saturation = out[2];
    d->hue = s->hue > 0 ? -s->hue + 2 * s->hue * unit(w[3]) : 0.0;
    block(base, crop, CR_AUG_BLK_MISC, counter, w);
    int64_t r = below(w[0], 24);
    int32_t left[4] = {0, 1, 2, 3};
    const int64_t radix[3] = {6, 2, 1};
    for (int k = 0, n = 4; k < 3; k++, n--) {
        int64_t j = r / radix[k];
        r %= radix[k];
        d->order[k] = left[j];
        for (int m = (int)j; m < n - 1; m++) left[m] = left[m + 1];
    }
    d->order[3] = left[0];
    d->sigma = s->blur_sigma_lo + (s->blur_sigma_hi - s->blur_sigma_lo) * unit(w[1]);
    d->solarize = unit(w[2]) < s->solarize_p;
    int64_t ks = 2 * (int64_t)ceil(3 * d->sigma) + 1;
    int64_t mn = s->size_h < s->size_w ? s->size_h : s->size_w;
    if (ks > 2 * mn - 1) ks = 2 * mn - 1;
    d->ksize = ks;
}

cr_status cr_data_augment_draw(cr_data_crop_draw *out, const cr_data_crop_spec *spec,
                               int64_t height, int64_t width, uint64_t seed, uint64_t epoch,
                               int64_t index, int64_t crop) {
    if (!out) return cr_fail(CR_ERR_ARG, "augment_draw: out is nil");
    cr_status st = cr_augment_check_spec(spec, 0);
    if (st) return st;
    if (height < 1 || width < 1)
        return cr_fail(CR_ERR_ARG, "augment_draw: image size %lld x %lld must be positive",
                       (long long)height, (long long)width);
    if (index < 0 || index > (int64_t)UINT32_MAX || crop < 0)
        return cr_fail(CR_ERR_ARG, "augment_draw: index %lld must be in [0, 2^32) and crop %lld >= 0",
                       (long long)index, (long long)crop);
    memset(out, 0, sizeof *out);
    draw(out, spec, height, width, cr_data_mix(seed ^ CR_DATA_TAG_CROPS), epoch, (uint64_t)index,
         (uint64_t)crop);
    return CR_OK;
}

/* Resampling taps along one axis (torch's _compute_indices_weights_aa, PIL's
 * ImagingResample with the triangle filter): output i covers input [first[i], first[i] +
 * count[i]) with weights wt[i * maxtaps + k]. */
typedef struct {
    int64_t *first, *count;
    float *wt;
    int64_t maxtaps;
} taps;

static int64_t max_taps(int64_t in, int64_t out) {
    double scale = (double)in / (double)out, support = scale >= 1 ? scale : 1.0;
    return (int64_t)ceil(support) * 2 + 1;
}

static void make_taps(taps *t, int64_t in, int64_t out) {
    double scale = (double)in / (double)out;
    double support = scale >= 1 ? scale : 1.0, invscale = scale >= 1 ? 1.0 / scale : 1.0;
    t->maxtaps = max_taps(in, out);
    for (int64_t i = 0; i < out; i++) {
        double center = scale * ((double)i + 0.5);
        int64_t lo = (int64_t)(center - support + 0.5);
        if (lo < 0) lo = 0;
        int64_t hi = (int64_t)(center + support + 0.5);
        if (hi > in) hi = in;
        int64_t n = hi - lo;
        if (n > t->maxtaps) n = t->maxtaps;
        double w[64], total = 0;
        double *wp = n <= 64 ? w : NULL;
        float *dst = t->wt + i * t->maxtaps;
        for (int64_t k = 0; k < n; k++) {
            double x = ((double)(k + lo) - center + 0.5) * invscale;
            double v = 1.0 - fabs(x);
            if (v < 0) v = 0;
            if (wp) wp[k] = v;
            else dst[k] = (float)v;
            total += v;
        }
        for (int64_t k = 0; k < n; k++) dst[k] = (float)((wp ? wp[k] : dst[k]) / total);
        t->first[i] = lo;
        t->count[i] = n;
    }
}

/* Per-thread scratch, grown on demand. */
typedef struct {
    float *img, *tmp;
    int64_t nimg, ntmp;
    int64_t *idx;
    float *wt;
    int64_t nidx, nwt;
} scratch;

static bool grow(void **p, int64_t *have, int64_t want, size_t elem) {
    if (want <= *have) return true;
    void *q = realloc(*p, (size_t)want * elem);
    if (!q) return false;
    *p = q;
    *have = want;
    return true;
}

/* The horizontal pass over the crop's rows: source rows -> tmp [ch][ow], flipped if
 * drawn. u8 pixels are read as they are, f32 ones (in [0, 1]) as 255 x value. */
static void resample_rows_u8(float *tmp, const uint8_t *sp, int64_t W, int64_t ch, int64_t ow,
                             const cr_data_crop_draw *d, const taps *hx) {
    for (int64_t y = 0; y < ch; y++) {
        const uint8_t *row = sp + (d->top + y) * W + d->left;
        float *t = tmp + y * ow;
        for (int64_t x = 0; x < ow; x++) {
            int64_t xs = d->flip ? ow - 1 - x : x;
            const uint8_t *p = row + hx->first[xs];
            const float *wt = hx->wt + xs * hx->maxtaps;
            float acc = 0;
            for (int64_t k = 0; k < hx->count[xs]; k++) acc += wt[k] * (float)p[k];
            t[x] = acc;
        }
    }
}

static void resample_rows_f32(float *tmp, const float *sp, int64_t W, int64_t ch, int64_t ow,
                              const cr_data_crop_draw *d, const taps *hx) {
    for (int64_t y = 0; y < ch; y++) {
        const float *row = sp + (d->top + y) * W + d->left;
        float *t = tmp + y * ow;
        for (int64_t x = 0; x < ow; x++) {
            int64_t xs = d->flip ? ow - 1 - x : x;
            const float *p = row + hx->first[xs];
            const float *wt = hx->wt + xs * hx->maxtaps;
            float acc = 0;
            for (int64_t k = 0; k < hx->count[xs]; k++) acc += wt[k] * p[k];
            t[x] = 255.0f * acc;
        }
    }
}

/* One crop of one image (planes of H x W, u8 or f32 as `f32` says) into dst (C x oh x ow,
 * normalised with x * na[c] - nb[c]); false when out of memory. */
static bool one_crop(scratch *sc, float *dst, const void *src, bool f32, int64_t nchan, int64_t H,
                     int64_t W, const cr_data_crop_spec *s, const cr_data_crop_draw *d,
                     const float *na, const float *nb) {
    int64_t oh = s->size_h, ow = s->size_w, ch = d->height, cw = d->width;
    int64_t tx = max_taps(cw, ow), ty = max_taps(ch, oh), plane = oh * ow;
    if (!grow((void **)&sc->img, &sc->nimg, nchan * plane, sizeof(float)) ||
        !grow((void **)&sc->tmp, &sc->ntmp, (ch * ow > plane ? ch * ow : plane), sizeof(float)) ||
        !grow((void **)&sc->idx, &sc->nidx, 2 * (ow + oh), sizeof(int64_t)) ||
        !grow((void **)&sc->wt, &sc->nwt, ow * tx + oh * ty, sizeof(float)))
        return false;
    taps hx = {sc->idx, sc->idx + ow, sc->wt, 0};
    taps hy = {sc->idx + 2 * ow, sc->idx + 2 * ow + oh, sc->wt + ow * tx, 0};
    make_taps(&hx, cw, ow);
    make_taps(&hy, ch, oh);
    for (int64_t c = 0; c < nchan; c++) {
        if (f32) resample_rows_f32(sc->tmp, (const float *)src + c * H * W, W, ch, ow, d, &hx);
        else resample_rows_u8(sc->tmp, (const uint8_t *)src + c * H * W, W, ch, ow, d, &hx);
        /* vertical pass: tmp -> img plane c */
        float *o = sc->img + c * plane;
        for (int64_t y = 0; y < oh; y++) {
            float *orow = o + y * ow;
            const float *wt = hy.wt + y * hy.maxtaps;
            const float *base = sc->tmp + hy.first[y] * ow;
            for (int64_t x = 0; x < ow; x++) orow[x] = 0;
            for (int64_t k = 0; k < hy.count[y]; k++) {
                float kk = wt[k];
                const float *t = base + k * ow;
                for (int64_t x = 0; x < ow; x++) orow[x] += kk * t[x];
            }
        }
    }
    float *img = sc->img;
    if (d->jitter) cr_augment_jitter(img, nchan, plane, d);
    if (d->gray) cr_augment_grayscale(img, nchan, plane);
    if (d->blur) cr_augment_blur(img, sc->tmp, nchan, oh, ow, d->sigma, d->ksize);
    if (d->solarize) cr_augment_solarize(img, nchan * plane, (float)s->solarize_threshold);
    for (int64_t c = 0; c < nchan; c++) {
        const float *p = img + c * plane;
        float *q = dst + c * plane, a = na[c], b = nb[c];
        for (int64_t k = 0; k < plane; k++) q[k] = p[k] * a - b;
    }
    return true;
}

cr_status cr_augment_check_images(const char *op, const cr_tensor *images) {
    char buf[160];
    if (!images) return cr_fail(CR_ERR_ARG, "%s: images is nil; pass a u8 or f32 tensor", op);
    if (cr_tensor_device(images) != CR_DEV_CPU ||
        (images->dtype != CR_DT_U8 && images->dtype != CR_DT_F32) ||
        (images->ndim != 3 && images->ndim != 4) || !cr_tensor_is_contiguous(images) ||
        (images->ndim == 4 && images->shape[1] != 1 && images->shape[1] != 3))
        return cr_fail(CR_ERR_ARG,
                       "%s: images must be a contiguous CPU tensor [N, H, W] or [N, C, H, W] with "
                       "C = 1 or 3, u8 (0..255) or f32 (0..1), got %s %s",
                       op, cr_dtype_name(images->dtype), cr_shape_str(images, buf, sizeof buf));
    int nd = images->ndim;
    if (images->shape[nd - 1] < 1 || images->shape[nd - 2] < 1)
        return cr_fail(CR_ERR_ARG, "%s: images %s are empty", op, cr_shape_str(images, buf, sizeof buf));
    return CR_OK;
}

static cr_status check_args(const cr_tensor *images, const cr_tensor *index, int64_t ncrops,
                            int64_t first_crop) {
    char buf[160];
    cr_status st = cr_augment_check_images("augment", images);
    if (st) return st;
    if (!index) return cr_fail(CR_ERR_ARG, "augment: index is nil; pass an i64 tensor");
    if (index->dtype != CR_DT_I64 || index->ndim != 1 || cr_tensor_device(index) != CR_DEV_CPU)
        return cr_fail(CR_ERR_ARG, "augment: index must be a CPU i64 tensor [B], got %s %s",
                       cr_dtype_name(index->dtype), cr_shape_str(index, buf, sizeof buf));
    if (ncrops < 1 || first_crop < 0)
        return cr_fail(CR_ERR_ARG, "augment: ncrops = %lld must be >= 1 and first_crop = %lld >= 0",
                       (long long)ncrops, (long long)first_crop);
    const int64_t *ix = (const int64_t *)cr_tensor_ptr(index);
    int64_t n = images->shape[0];
    for (int64_t b = 0; b < index->shape[0]; b++) {
        int64_t r = ix[b * index->stride[0]];
        if (r < 0 || r >= n || r > (int64_t)UINT32_MAX)
            return cr_fail(CR_ERR_ARG, "augment: index[%lld] = %lld is out of range for %lld images",
                           (long long)b, (long long)r, (long long)n);
    }
    return CR_OK;
}

/* What every (crop, sample) of one call shares. */
typedef struct {
    const cr_data_crop_spec *spec;
    const char *src;
    const int64_t *ix;
    float *dst;
    int64_t B, H, W, nchan, istride, osample, first_crop;
    size_t ssample; /* bytes of one source image */
    bool f32;
    uint64_t base, epoch;
    float na[3], nb[3];
} crop_job;

/* Crop t = k * B + b (crop k of batch row b) of the image at src (H x W), its draws keyed
 * by the data set row id; false when out of memory. */
static bool crop_at(const crop_job *j, scratch *sc, int64_t t, const void *src, int64_t H, int64_t W,
                    uint64_t id) {
    cr_data_crop_draw d;
    draw(&d, j->spec, H, W, j->base, j->epoch, id, (uint64_t)(j->first_crop + t / j->B));
    return one_crop(sc, j->dst + t * j->osample, src, j->f32, j->nchan, H, W, j->spec, &d, j->na, j->nb);
}

/* Crop t of the job's images tensor. */
static bool crop_one(const crop_job *j, scratch *sc, int64_t t) {
    int64_t row = j->ix[(t % j->B) * j->istride];
    return crop_at(j, sc, t, j->src + (size_t)row * j->ssample, j->H, j->W, (uint64_t)row);
}

/* The normalisation, key and output of a job writing [ncrops, B, nchan, h, w] into dst. */
static void job_init(crop_job *j, const cr_data_crop_spec *spec, int64_t nchan, int64_t B,
                     int64_t first_crop, uint64_t seed, uint64_t epoch, float *dst) {
    j->spec = spec;
    j->nchan = nchan;
    j->B = B;
    j->first_crop = first_crop;
    j->epoch = epoch;
    j->base = cr_data_mix(seed ^ CR_DATA_TAG_CROPS);
    j->osample = nchan * spec->size_h * spec->size_w;
    j->dst = dst;
    for (int64_t c = 0; c < nchan; c++) {
        j->na[c] = (float)(1.0 / (255.0 * spec->std[c]));
        j->nb[c] = (float)(spec->mean[c] / spec->std[c]);
    }
}

static void scratch_free(scratch *sc) {
    free(sc->img);
    free(sc->tmp);
    free(sc->idx);
    free(sc->wt);
}

cr_status cr_augment_crops(cr_tensor **out, const cr_tensor *images, const cr_tensor *index,
                           const cr_data_crop_spec *spec, int64_t ncrops, int64_t first_crop,
                           uint64_t seed, uint64_t epoch, unsigned flags) {
    *out = NULL;
    cr_status st = check_args(images, index, ncrops, first_crop);
    if (st) return st;
    int nd = images->ndim;
    int64_t nchan = nd == 4 ? images->shape[1] : 1;
    st = cr_augment_check_spec(spec, nchan);
    if (st) return st;
    int64_t shape[5] = {ncrops, index->shape[0], nchan, spec->size_h, spec->size_w};
    st = cr_batch_alloc(out, 5, shape, CR_DT_F32, flags);
    if (st) return st;
    crop_job j = {.src = cr_tensor_ptr(images), .ix = (const int64_t *)cr_tensor_ptr(index),
                  .H = images->shape[nd - 2], .W = images->shape[nd - 1], .istride = index->stride[0],
                  .f32 = images->dtype == CR_DT_F32};
    job_init(&j, spec, nchan, index->shape[0], first_crop, seed, epoch, (float *)cr_tensor_ptr(*out));
    j.ssample = (size_t)(nchan * j.H * j.W) * cr_dtype_size(images->dtype);
    int64_t total = ncrops * j.B;
    bool par = (flags & CR_BATCH_PARALLEL) && total > 1 && total * j.osample >= CR_AUG_PAR_GRAIN && cr_threads() > 1;
    int oom = 0;
    if (!par) { /* no OpenMP at all: the loader's worker threads call this */
        scratch sc = {0};
        for (int64_t t = 0; t < total && !oom; t++) oom = !crop_one(&j, &sc, t);
        scratch_free(&sc);
    } else {
#pragma omp parallel
        {
            scratch sc = {0};
#pragma omp for schedule(static)
            for (int64_t t = 0; t < total; t++) {
                if (!crop_one(&j, &sc, t)) {
#pragma omp atomic write
                    oom = 1;
                }
            }
            scratch_free(&sc);
        }
    }
    if (oom) {
        cr_tensor_free(*out);
        *out = NULL;
        return cr_fail(CR_ERR_OOM, "augment: out of memory for the scratch of a %lld x %lld crop",
                       (long long)spec->size_h, (long long)spec->size_w);
    }
    return CR_OK;
}

cr_status cr_augment_crops_alloc(cr_tensor **out, int64_t B, int64_t nchan, const cr_data_crop_spec *spec,
                                 int64_t ncrops, unsigned flags) {
    int64_t shape[5] = {ncrops, B, nchan, spec->size_h, spec->size_w};
    return cr_batch_alloc(out, 5, shape, CR_DT_F32, flags);
}

cr_status cr_augment_crops_sample(cr_tensor *out, const uint8_t *src, int64_t H, int64_t W, int64_t b,
                                  uint64_t id, const cr_data_crop_spec *spec, int64_t first_crop,
                                  uint64_t seed, uint64_t epoch) {
    int64_t ncrops = out->shape[0], B = out->shape[1], nchan = out->shape[2];
    crop_job j = {.H = H, .W = W};
    job_init(&j, spec, nchan, B, first_crop, seed, epoch, (float *)cr_tensor_ptr(out));
    scratch sc = {0};
    bool ok = true;
    for (int64_t k = 0; k < ncrops && ok; k++) ok = crop_at(&j, &sc, k * B + b, src, H, W, id);
    scratch_free(&sc);
    if (!ok)
        return cr_fail(CR_ERR_OOM, "augment: out of memory for the scratch of a %lld x %lld crop",
                       (long long)spec->size_h, (long long)spec->size_w);
    return CR_OK;
}

cr_status cr_data_augment_crops(cr_tensor **out, const cr_tensor *images, const cr_tensor *index,
                                const cr_data_crop_spec *spec, int64_t ncrops,
                                int64_t first_crop, uint64_t seed, uint64_t epoch) {
    return cr_augment_crops(out, images, index, spec, ncrops, first_crop, seed, epoch, CR_BATCH_PARALLEL);
}
