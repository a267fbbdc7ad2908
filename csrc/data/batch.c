/* batch.c — assembles a training batch from the images in one pass: gather the rows of
 * the batch, optionally crop-with-padding and flip them, and normalise to f32 (u8 through
 * a 256-entry table per channel; f32 images in [0, 1] directly). Doing this in Lua
 * (index_select, to f32, sub, div) costs four passes and four allocations per batch;
 * here it is one, threaded over the batch (or serial for the loader's worker threads).
 * Each sample's draws depend only on (seed, epoch, dataset index), never on the thread
 * that ran it or the batch it landed in. */
#include <math.h>
#include <omp.h>

#include "augment_impl.h"
#include "rng.h"

enum { CR_DATA_PAR_GRAIN = 1 << 18 };

static bool is_int_dtype(cr_dtype dt) {
    return dt == CR_DT_I64 || dt == CR_DT_I32 || dt == CR_DT_U8;
}

static int64_t load_label(const cr_tensor *labels, int64_t row) {
    const char *p = cr_tensor_ptr(labels) + row * labels->stride[0] *
                                                (int64_t)cr_dtype_size(labels->dtype);
    switch (labels->dtype) {
    case CR_DT_I64: return *(const int64_t *)p;
    case CR_DT_I32: return *(const int32_t *)p;
    default: return *(const uint8_t *)p;
    }
}

cr_status cr_batch_check(const cr_tensor *images, const cr_tensor *labels, const double *mean,
                         const double *std, const cr_data_augment *aug) {
    char buf[160];
    if (!images) return cr_fail(CR_ERR_ARG, "make_batch: images is nil; pass a u8 or f32 tensor");
    if (cr_tensor_device(images) != CR_DEV_CPU ||
        (images->dtype != CR_DT_U8 && images->dtype != CR_DT_F32) ||
        (images->ndim != 3 && images->ndim != 4) || !cr_tensor_is_contiguous(images))
        return cr_fail(CR_ERR_ARG,
                       "make_batch: images must be a contiguous CPU tensor [N, H, W] or "
                       "[N, C, H, W], u8 (0..255) or f32 (0..1), got %s %s",
                       cr_dtype_name(images->dtype), cr_shape_str(images, buf, sizeof buf));
    int64_t nchan = images->ndim == 4 ? images->shape[1] : 1;
    if (labels && (!is_int_dtype(labels->dtype) || labels->ndim != 1 ||
                   cr_tensor_device(labels) != CR_DEV_CPU || labels->shape[0] != images->shape[0]))
        return cr_fail(CR_ERR_ARG,
                       "make_batch: labels must be a CPU integer tensor [N] with N = %lld (the "
                       "number of images), got %s %s",
                       (long long)images->shape[0], cr_dtype_name(labels->dtype),
                       cr_shape_str(labels, buf, sizeof buf));
    return cr_batch_check_norm(nchan, mean, std, aug);
}

cr_status cr_batch_check_norm(int64_t nchan, const double *mean, const double *std, const cr_data_augment *aug) {
    if (!mean || !std) return cr_fail(CR_ERR_ARG, "make_batch: mean and std are required");
    for (int64_t c = 0; c < nchan; c++)
        if (!(std[c] != 0) || !isfinite(std[c]) || !isfinite(mean[c]))
            return cr_fail(CR_ERR_ARG,
                           "make_batch: channel %lld has mean %g and std %g; std must be finite "
                           "and non-zero",
                           (long long)c, mean[c], std[c]);
    if (aug && (aug->pad < 0 || aug->pad > 65536))
        return cr_fail(CR_ERR_ARG, "make_batch: augmentation pad %d must be in [0, 65536]",
                       aug->pad);
    return CR_OK;
}

static cr_status check_index(const cr_tensor *images, const cr_tensor *index,
                             const cr_data_augment *aug) {
    char buf[160];
    if (!index) return cr_fail(CR_ERR_ARG, "make_batch: index is nil; pass an i64 tensor");
    if (index->dtype != CR_DT_I64 || index->ndim != 1 || cr_tensor_device(index) != CR_DEV_CPU)
        return cr_fail(CR_ERR_ARG, "make_batch: index must be a CPU i64 tensor [B], got %s %s",
                       cr_dtype_name(index->dtype), cr_shape_str(index, buf, sizeof buf));
    const int64_t *ix = (const int64_t *)cr_tensor_ptr(index);
    int64_t n = images->shape[0];
    for (int64_t b = 0; b < index->shape[0]; b++) {
        int64_t r = ix[b * index->stride[0]];
        if (r < 0 || r >= n)
            return cr_fail(CR_ERR_ARG,
                           "make_batch: index[%lld] = %lld is out of range for %lld images",
                           (long long)b, (long long)r, (long long)n);
        if (aug && r > (int64_t)UINT32_MAX)
            return cr_fail(CR_ERR_ARG, "make_batch: augmentation needs indices below 2^32");
    }
    return CR_OK;
}

/* What every sample of one batch shares. */
typedef struct {
    const char *src;
    const int64_t *ix;
    const cr_tensor *labels;
    const cr_data_augment *aug; /* NULL: no crop, no flip */
    float *dst;
    int64_t *tgt;
    const float *lut;  /* u8: [nchan][256] normalised values */
    const float *scale, *shift; /* f32: x * scale[c] - shift[c] = (x - mean) / std */
    const int64_t *ids; /* NULL: the draws are keyed by the rows */
    bool f32;
    uint64_t aug_key;
    int64_t nchan, H, W, istride;
} batch_job;

/* Normalised value of source element k of channel c. */
static inline float norm_px(const batch_job *j, const void *plane, int64_t c, int64_t k) {
    if (j->f32) return ((const float *)plane)[k] * j->scale[c] - j->shift[c];
    return j->lut[c * 256 + ((const uint8_t *)plane)[k]];
}

static void fill_sample(const batch_job *j, int64_t b) {
    int64_t H = j->H, W = j->W, plane = H * W, sample = j->nchan * plane;
    size_t esize = j->f32 ? sizeof(float) : 1;
    int64_t row = j->ix[b * j->istride];
    const char *s = j->src + (size_t)(row * sample) * esize;
    float *d = j->dst + b * sample;
    if (j->tgt) j->tgt[b] = load_label(j->labels, row);
    const cr_data_augment *aug = j->aug;
    if (!aug) {
        for (int64_t c = 0; c < j->nchan; c++) {
            const char *sp = s + (size_t)(c * plane) * esize;
            float *dp = d + c * plane;
            if (j->f32) {
                const float *fp = (const float *)sp;
                float a = j->scale[c], sh = j->shift[c];
                for (int64_t k = 0; k < plane; k++) dp[k] = fp[k] * a - sh;
            } else {
                const float *t = j->lut + c * 256;
                const uint8_t *up = (const uint8_t *)sp;
                for (int64_t k = 0; k < plane; k++) dp[k] = t[up[k]];
            }
        }
        return;
    }
    uint32_t w[4];
    uint64_t id = j->ids ? (uint64_t)j->ids[b] : (uint64_t)row;
    cr_philox_block(j->aug_key, (aug->epoch << 32) | id, w);
    int64_t span = 2 * (int64_t)aug->pad + 1, pad = aug->pad;
    int64_t dy = (int64_t)(((uint64_t)w[0] * (uint64_t)span) >> 32) - pad;
    int64_t dx = (int64_t)(((uint64_t)w[1] * (uint64_t)span) >> 32) - pad;
    bool flip = aug->hflip && (w[2] >> 31);
    for (int64_t c = 0; c < j->nchan; c++) {
        const char *sp = s + (size_t)(c * plane) * esize;
        float *dp = d + c * plane;
        float fill = j->f32 ? -j->shift[c] : j->lut[c * 256]; /* x = 0 */
        for (int64_t y = 0; y < H; y++) {
            int64_t sy = y + dy;
            float *drow = dp + y * W;
            if (sy < 0 || sy >= H) {
                for (int64_t x = 0; x < W; x++) drow[x] = fill;
                continue;
            }
            for (int64_t x = 0; x < W; x++) {
                int64_t sx = (flip ? W - 1 - x : x) + dx;
                drow[x] = (sx < 0 || sx >= W) ? fill : norm_px(j, sp, c, sy * W + sx);
            }
        }
    }
}

cr_status cr_batch_make(cr_tensor **input, cr_tensor **target, const cr_tensor *images,
                        const cr_tensor *labels, const cr_tensor *index, const double *mean,
                        const double *std, const cr_data_augment *aug, unsigned flags,
                        const int64_t *ids) {
    *input = NULL;
    if (target) *target = NULL;
    cr_status st = cr_batch_check(images, labels, mean, std, aug);
    if (!st) st = check_index(images, index, aug);
    if (st) return st;
    if (labels && !target)
        return cr_fail(CR_ERR_ARG, "make_batch: labels given but no place for the targets");

    int nd = images->ndim;
    int64_t nchan = nd == 4 ? images->shape[1] : 1;
    int64_t B = index->shape[0], H = images->shape[nd - 2], W = images->shape[nd - 1];
    int64_t sample = nchan * H * W;
    int64_t shape[4] = {B, nchan, H, W};
    st = cr_batch_alloc(input, 4, shape, CR_DT_F32, flags);
    if (st) return st;
    if (labels) {
        st = cr_batch_alloc(target, 1, shape, CR_DT_I64, flags);
        if (st) {
            cr_tensor_free(*input);
            *input = NULL;
            return st;
        }
    }
    /* u8: (x / 255 - mean) / std for every byte value, per channel: gathering becomes a
     * lookup. f32: x / std - mean / std per pixel. */
    bool f32 = images->dtype == CR_DT_F32;
    float *lut = f32 ? NULL : malloc(sizeof(float) * 256 * (size_t)nchan);
    float *stats = f32 ? malloc(sizeof(float) * 2 * (size_t)nchan) : NULL;
    if (!lut && !stats) {
        cr_tensor_free(*input);
        *input = NULL;
        if (labels) {
            cr_tensor_free(*target);
            *target = NULL;
        }
        return cr_fail(CR_ERR_OOM, "make_batch: out of memory for %lld channel tables",
                       (long long)nchan);
    }
    batch_job j = {.src = cr_tensor_ptr(images), .ix = (const int64_t *)cr_tensor_ptr(index),
                   .labels = labels, .dst = (float *)cr_tensor_ptr(*input),
                   .tgt = labels ? (int64_t *)cr_tensor_ptr(*target) : NULL, .lut = lut,
                   .scale = stats, .shift = stats ? stats + nchan : NULL, .f32 = f32,
                   .nchan = nchan, .H = H, .W = W, .istride = index->stride[0], .ids = ids};
    for (int64_t c = 0; c < nchan; c++) {
        if (lut)
            for (int v = 0; v < 256; v++)
                lut[c * 256 + v] = (float)(((double)v / 255.0 - mean[c]) / std[c]);
        if (stats) stats[c] = (float)(1.0 / std[c]), stats[nchan + c] = (float)(mean[c] / std[c]);
    }
    if (aug && (aug->pad != 0 || aug->hflip)) {
        j.aug = aug;
        j.aug_key = cr_data_mix(aug->seed ^ CR_DATA_TAG_AUGMENT);
    }
    /* A Fashion-MNIST batch of 256 is 0.2 ms on one core; forking threads for it gains
     * little and, when the other cores are busy, costs milliseconds. Threads pay from
     * ~256K pixels on (CIFAR batches of 256, anything at ImageNet sizes). */
    bool par = (flags & CR_BATCH_PARALLEL) && B * sample >= CR_DATA_PAR_GRAIN && B > 1 && cr_threads() > 1;
    if (!par) { /* no OpenMP at all: the loader's worker threads call this */
        for (int64_t b = 0; b < B; b++) fill_sample(&j, b);
    } else {
#pragma omp parallel for schedule(static)
        for (int64_t b = 0; b < B; b++) fill_sample(&j, b);
    }
    free(lut);
    free(stats);
    return CR_OK;
}

cr_status cr_data_make_batch(cr_tensor **input, cr_tensor **target, const cr_tensor *images,
                             const cr_tensor *labels, const cr_tensor *index,
                             const double *mean, const double *std,
                             const cr_data_augment *aug) {
    return cr_batch_make(input, target, images, labels, index, mean, std, aug, CR_BATCH_PARALLEL, NULL);
}

cr_status cr_batch_targets(cr_tensor **out, const cr_tensor *labels, const cr_tensor *index, unsigned flags) {
    int64_t B = index->shape[0];
    cr_status st = cr_batch_alloc(out, 1, &B, CR_DT_I64, flags);
    if (st) return st;
    const int64_t *ix = (const int64_t *)cr_tensor_ptr(index);
    int64_t *t = (int64_t *)cr_tensor_ptr(*out);
    for (int64_t b = 0; b < B; b++) t[b] = load_label(labels, ix[b * index->stride[0]]);
    return CR_OK;
}

cr_status cr_batch_alloc(cr_tensor **out, int ndim, const int64_t *shape, cr_dtype dt, unsigned flags) {
    if (flags & CR_BATCH_PINNED) return cr_tensor_alloc_pinned(out, ndim, shape, dt);
    return cr_tensor_alloc(out, ndim, shape, dt, CR_CPU);
}
