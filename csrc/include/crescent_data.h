/* crescent_data.h — data sets on the C side (csrc/data/): the IDX file reader, the
 * epoch permutation of the sampler, and batch assembly (u8 images -> normalised f32,
 * optional random crop + horizontal flip). Included by crescent.h, so it is FFI-clean
 * like it: no macros in declarations, POD structs only.
 *
 * Randomness here never touches the global RNG stream: the shuffle and the per-sample
 * augmentation draws are pure functions of (seed, epoch, sample index) computed with
 * Philox4x32-10 (csrc/core/rng.h), so a loader gives the same batches whatever the
 * thread count, whatever else drew numbers before, and after a resume. The word layout,
 * which a GPU or threaded loader must reproduce, with mix(x) = splitmix64's finaliser (data/sampler.c) and the tags SHUFFLE =
 * 0x53687566666c6531, AUGMENT = 0x4175676d656e7431:
 *
 *   permutation  key = mix(mix(seed ^ SHUFFLE) + epoch); w[i] = word i%4 of
 *                Philox(key, counter = i/4). Fisher–Yates from the last slot down: for
 *                i = n-1 .. 1, slot i swaps with slot j = (w[i] * (i + 1)) >> 32.
 *   augmentation one Philox block per sample: key = mix(seed ^ AUGMENT), counter =
 *                (epoch << 32) | index; w0 -> dy = (w0 * (2 pad + 1)) >> 32,
 *                w1 -> dx likewise, w2 >> 31 -> flip. */
#ifndef CRESCENT_DATA_H
#define CRESCENT_DATA_H

/* Reads an IDX file (plain or gzip, detected from its content): magic 0x00 0x00 type
 * ndim, then ndim big-endian u32 dims, then the items big-endian. Types: 0x08 u8 -> u8,
 * 0x09 i8, 0x0B i16, 0x0C i32 -> i32, 0x0D f32 -> f32, 0x0E f64 -> f64. The file must
 * hold exactly the items its header declares; every failure names the file and the
 * problem (cannot open, bad magic, unknown type, bad ndim, absurd dims, truncated, extra
 * bytes). */
cr_status cr_data_read_idx(cr_tensor **out, const char *path);

/* The sampler's order for one epoch: i64 [n], a permutation of 0..n-1 drawn from
 * (seed, epoch) as described above; shuffle = false gives 0..n-1. */
cr_status cr_data_permutation(cr_tensor **out, int64_t n, uint64_t seed, uint64_t epoch,
                              bool shuffle);

/* Training augmentation of cr_data_make_batch: pad the image by `pad` pixels of value 0
 * on every side, crop it back to H x W at a random offset, then flip it left-right
 * with probability 1/2 when `hflip` is non-zero (torchvision's RandomCrop(padding) +
 * RandomHorizontalFlip on the raw pixels, before normalisation). */
typedef struct {
    int pad;
    int hflip;
    uint64_t seed;
    uint64_t epoch;
} cr_data_augment;

/* Assembles one batch: images u8 [N, H, W] or [N, C, H, W] (contiguous, CPU), labels
 * [N] of an integer dtype or NULL, index i64 [B] (dataset rows, each in [0, N)),
 * mean/std arrays of C values (one per channel). Writes *input = f32 [B, C, H, W] with
 * (x / 255 - mean[c]) / std[c], and *target = i64 [B] (left NULL when labels is NULL).
 * aug may be NULL (no augmentation). Runs OpenMP over the batch; the result does not
 * depend on the thread count. */
cr_status cr_data_make_batch(cr_tensor **input, cr_tensor **target, const cr_tensor *images,
                             const cr_tensor *labels, const cr_tensor *index,
                             const double *mean, const double *std,
                             const cr_data_augment *aug);

/* ==== augmentation pipeline (csrc/data/augment.c, augment_color.c) ====================
 * Crops for self-supervised training: RandomResizedCrop, horizontal flip, colour jitter,
 * grayscale, gaussian blur, solarize and normalize, in that fixed order (flip commutes
 * with everything after the crop, so it is folded into the resampling), with
 * torchvision's semantics applied to the float image x = u8 value in [0, 255] (that is
 * torchvision on a float tensor x/255, scaled by 255): values stay f32 between steps and
 * are never rounded; blends clamp to [0, 255] as torchvision clamps to [0, 1].
 * Differences from torchvision, on purpose: grayscale (and the mean of contrast, and the
 * grey of saturation) use the ITU-R 601 weights 0.299/0.587/0.114 (PIL's; torchvision's
 * tensor path uses 0.2989); the blur kernel size is 2*ceil(3 sigma)+1 per draw, at most
 * 2*min(h, w)-1 (torchvision takes it fixed from the user; PIL's blur approximates).
 *
 * Randomness: one group of Philox4x32-10 blocks per (crop index, sample), never the
 * global stream. With mix() and the tags of the header's top and CROPS =
 * 0x43726f7073416731 ("CropsAg1"), u(w) = w * 2^-32 (a double in [0, 1)):
 *   key(crop, blk) = mix(mix(seed ^ CROPS) + 16 * crop + blk);
 *   counter        = (epoch << 32) | sample index;  block blk = Philox(key(crop, blk), counter)
 *   blk 0..9   RandomResizedCrop attempt blk: area = H W (scale_lo + (scale_hi - scale_lo) u(w0)),
 *              r = exp(log ratio_lo + (log ratio_hi - log ratio_lo) u(w1)),
 *              cw = rint(sqrt(area r)), ch = rint(sqrt(area / r)) (half to even, as Python);
 *              if 0 < cw <= W and 0 < ch <= H: top = (w2 (H - ch + 1)) >> 32,
 *              left = (w3 (W - cw + 1)) >> 32, and no later attempt is drawn. After 10
 *              failures torchvision's centre-crop fallback (clamped to the ratio range).
 *   blk 10     flip = u(w0) < flip_p, jitter = u(w1) < jitter_p, gray = u(w2) < gray_p,
 *              blur = u(w3) < blur_p
 *   blk 11     brightness = lo + (hi - lo) u(w0) with [lo, hi] = [max(0, 1 - b), 1 + b];
 *              contrast u(w1), saturation u(w2) alike; hue = -h + 2 h u(w3)
 *   blk 12     order: r = (w0 * 24) >> 32 is the Lehmer code of the jitter order (digits
 *              r / 6, (r % 6) / 2, r % 2 pick from the remaining ops of [brightness,
 *              contrast, saturation, hue]); sigma = lo + (hi - lo) u(w1);
 *              solarize = u(w2) < solarize_p; w3 unused.
 * So a crop is a pure function of (seed, epoch, sample index, crop index, spec, image),
 * whatever the thread count or the batch it lands in. */

/* One crop specification: output size, RandomResizedCrop ranges and the per-crop
 * transform list. A probability of 0 turns an op off; a jitter factor of 0 turns that
 * jitter op off (torchvision's None). */
typedef struct {
    int64_t size_h, size_w;             /* output size */
    double scale_lo, scale_hi;          /* fraction of the image area, in (0, 1] */
    double ratio_lo, ratio_hi;          /* aspect ratio w / h, > 0, drawn log-uniform */
    double flip_p;                      /* horizontal flip */
    double jitter_p;                    /* colour jitter as a whole */
    double brightness, contrast, saturation, hue; /* >= 0; hue <= 0.5 */
    double gray_p;
    double blur_p, blur_sigma_lo, blur_sigma_hi;  /* 0 < lo <= hi */
    double solarize_p, solarize_threshold;        /* x >= threshold -> 255 - x */
    double mean[3], std[3];             /* normalize: (x / 255 - mean[c]) / std[c] */
} cr_data_crop_spec;

/* What one crop drew (for tests and for debugging a pipeline): the crop box in the
 * source image, which ops ran, the jitter factors and order (0 brightness, 1 contrast,
 * 2 saturation, 3 hue), and the blur sigma and kernel size for an output of the spec's
 * size. */
typedef struct {
    int64_t top, left, height, width;
    int32_t flip, jitter, gray, blur, solarize;
    int32_t order[4];
    double brightness, contrast, saturation, hue;
    double sigma;
    int64_t ksize;
} cr_data_crop_draw;

/* The draws of crop `crop` of sample `index` for an image of height x width. */
cr_status cr_data_augment_draw(cr_data_crop_draw *out, const cr_data_crop_spec *spec,
                               int64_t height, int64_t width, uint64_t seed, uint64_t epoch,
                               int64_t index, int64_t crop);

/* ncrops crops (crop indices first_crop .. first_crop + ncrops - 1) of every image of the
 * batch: images u8 [N, H, W] or [N, C, H, W] (C = 1 or 3, contiguous, CPU), index i64 [B]
 * (rows in [0, N), below 2^32). Writes *out = f32 [ncrops, B, C, size_h, size_w],
 * normalised. OpenMP over (crop, sample); the result does not depend on the thread
 * count. */
cr_status cr_data_augment_crops(cr_tensor **out, const cr_tensor *images, const cr_tensor *index,
                                const cr_data_crop_spec *spec, int64_t ncrops,
                                int64_t first_crop, uint64_t seed, uint64_t epoch);
/* ==== end of the augmentation pipeline ================================================ */

#endif
