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

#endif
