/* crescent_data.h — data sets on the C side (csrc/data/): the IDX file reader, the
 * epoch permutation of the sampler, batch assembly (u8 or f32 images -> normalised f32,
 * optional random crop + horizontal flip), the SSL crops, and the loader's worker
 * pipeline. Included by crescent.h, so it is FFI-clean
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

/* The order in which a shuffle buffer of `buffer` rows emits the rows of `stream` (i64
 * [M], the rows in the order they are read; webdataset's shuffle): the first `buffer`
 * rows fill it; then each row read replaces a uniformly chosen one, which is emitted;
 * when the stream ends, the rows left are emitted in random order. Draw k (the k-th
 * pick) uses word k of Philox(key = mix(mix(seed ^ BUFFER) + epoch)), BUFFER =
 * 0x4275666665723031, the slot (w * held) >> 32. So the row emitted k-th was read among
 * the first k + buffer rows: a reader going front to back holds at most `buffer` rows
 * that wait. Returns i64 [M]. */
cr_status cr_data_buffer_shuffle(cr_tensor **out, const cr_tensor *stream, int64_t buffer, uint64_t seed,
                                 uint64_t epoch);

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

/* Assembles one batch: images u8 [N, H, W] or [N, C, H, W] (contiguous, CPU), or f32
 * with values in [0, 1] (torchvision's float convention, read as x = 255 * value),
 * labels [N] of an integer dtype or NULL, index i64 [B] (dataset rows, each in [0, N)),
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
 * torchvision's semantics applied to the float image x = u8 value in [0, 255], or
 * 255 * value for f32 images in [0, 1] (that is torchvision on a float tensor x/255,
 * scaled by 255): values stay f32 between steps and
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
 * batch: images u8 [N, H, W] or [N, C, H, W] (C = 1 or 3, contiguous, CPU), or f32 in
 * [0, 1] (x = 255 * value: an f32 image equal to u8 / 255 gives the u8 crops to within
 * float rounding), index i64 [B]
 * (rows in [0, N), below 2^32). Writes *out = f32 [ncrops, B, C, size_h, size_w],
 * normalised. OpenMP over (crop, sample); the result does not depend on the thread
 * count. */
cr_status cr_data_augment_crops(cr_tensor **out, const cr_tensor *images, const cr_tensor *index,
                                const cr_data_crop_spec *spec, int64_t ncrops,
                                int64_t first_crop, uint64_t seed, uint64_t epoch);
/* ==== end of the augmentation pipeline ================================================ */

/* ==== loader pipeline (csrc/data/pipeline.c) ==========================================
 * Worker threads (pthreads) that build an epoch's batches ahead of the consumer, for
 * cr.data.Loader's `workers` option. Workers claim batch numbers in order, build each
 * one single-threaded with the code of cr_data_make_batch / cr_data_augment_crops (no
 * OpenMP inside a worker) and publish it into ring slot b % prefetch; the consumer takes
 * batch b when it is ready and frees the slot. A worker starts batch b only once batch
 * b - prefetch was taken, so at most `prefetch` batches are alive in the ring besides
 * those handed out. Every draw is keyed by (seed, epoch, sample, crop), so the batches
 * are bit-identical to the synchronous calls for any worker count. */

/* One crop group of a multi-crop job: the arguments of one cr_data_augment_crops call. */
typedef struct {
    cr_data_crop_spec spec;
    int64_t ncrops;
    int64_t first_crop;
} cr_data_crop_group;

/* The file paths of a streamed data set: one copy of the strings, shared (counted
 * references) by the pipelines of every epoch. Entries are whole files, or members of
 * archives: member i is the lengths[i] bytes at offsets[i] of files[i], called names[i]. */
typedef struct cr_data_paths cr_data_paths;
cr_status cr_data_paths_new(cr_data_paths **out, const char *const *paths, int64_t n);
cr_status cr_data_paths_new_members(cr_data_paths **out, const char *const *files, const char *const *names,
                                    const int64_t *offsets, const int64_t *lengths, int64_t n);
int64_t cr_data_paths_count(const cr_data_paths *p);
/* Path i (0-based; NULL when out of range): the file, or the member's archive. */
const char *cr_data_paths_get(const cr_data_paths *p, int64_t i);
/* Member i's name, offset and length; NULL for a table of whole files. */
const char *cr_data_paths_member(const cr_data_paths *p, int64_t i, int64_t *offset, int64_t *length);

/* The regular files of a tar archive (ustar, with GNU long names and pax paths), in
 * archive order: their names packed '\0'-separated in *names (*names_len bytes), and the
 * offset and length of each one's data in *ranges (2 per file); free them with
 * cr_tar_index_free. Headers only are read (the data is seeked over). */
cr_status cr_tar_index(const char *path, char **names, int64_t *names_len, int64_t **ranges, int64_t *count);
void cr_tar_index_free(char *names, int64_t *ranges);
/* Drops one reference (NULL is fine). */
void cr_data_paths_free(cr_data_paths *p);

/* The epoch's batch job. Batch b (first_batch <= b < num_batches) holds the rows
 * index = order[b * batch_size .. min(M, (b + 1) batch_size)) of the images. Plain
 * batches (groups NULL) are cr_data_make_batch(images, labels, index, mean, std, aug);
 * multi-crop batches one cr_data_augment_crops(images, index, groups[g]..., seed, epoch)
 * per group. A streamed job has paths instead of images: each worker reads and decodes
 * the files of its batch (JPEG, PNG) to `channels` u8 channels, sample by sample, and
 * crops each right away (every crop and draw as from an images tensor holding the same
 * pixels) or, for plain batches, resizes it to height x width. Everything is copied or
 * referenced at start: the caller may free the job and its arrays right after. */
typedef struct {
    const cr_tensor *images;          /* u8 or f32 [N, H, W] / [N, C, H, W], contiguous, CPU */
    const cr_data_paths *paths;       /* instead of images: N files, decoded in the workers */
    int32_t channels;                 /* streamed: 1 or 3 */
    int32_t skip_bad;                 /* streamed: a file that does not decode is replaced by the
                                       * next readable one (the rows after it, wrapping round),
                                       * its draws still keyed by its own row; else the batch fails */
    int32_t height, width;            /* streamed plain batches: every image resized to this */
    const cr_tensor *labels;          /* an integer tensor [N], or NULL */
    const cr_tensor *order;           /* i64 [M]: the epoch's rows (cr_data_permutation) */
    int64_t batch_size;               /* >= 1 */
    int64_t num_batches;              /* (num_batches - 1) * batch_size < M */
    int64_t first_batch;              /* in [0, num_batches]: a resume starts later */
    const double *mean, *std;         /* plain batches: one value per channel */
    const cr_data_augment *aug;       /* plain batches: NULL or the pad-crop/flip */
    const cr_data_crop_group *groups; /* multi-crop batches: ngroups groups (1 .. 64) */
    int64_t ngroups;
    uint64_t seed, epoch;             /* the crops' draws */
    int32_t workers;                  /* threads, 1 .. 64 */
    int32_t prefetch;                 /* ring slots, 1 .. 1024 */
    const cr_tensor *stream;          /* NULL, or (paths of archive members only) i64 [S]: rows in
                                       * the order to read them, each archive front to back, each
                                       * row at most once; the workers then take each row's bytes
                                       * from one sequential reader (stream_reader.c), which keeps
                                       * the rows read ahead of their batch in memory and skips the
                                       * rows no remaining batch uses. A row not in it is read on
                                       * its own. Give the order from cr_data_buffer_shuffle over
                                       * it, so that what waits stays bounded by its buffer. */
    int32_t pin_memory;               /* 1: the batches' tensors (not the index) in page-locked host
                                       * memory, for asynchronous copies to a GPU (needs CUDA) */
} cr_data_pipeline_job;

/* What a pipeline's sequential reader did (all 0 without a stream): members read, their
 * bytes, seeks that went backwards, and the most bytes and members waiting at once. */
typedef struct {
    int64_t members, bytes, backward_seeks, peak_bytes, peak_members;
} cr_data_stream_stats;

typedef struct cr_data_pipeline cr_data_pipeline;

/* Checks the job (errors name the field and the fix), takes references to its tensors
 * and starts the workers. Release with cr_data_pipeline_free. */
cr_status cr_data_pipeline_start(cr_data_pipeline **out, const cr_data_pipeline_job *job);

/* Waits for the next batch (in order) and hands over its tensors, one reference each:
 * outs[0 .. G-1] the inputs (G = 1 plain: f32 [B, C, H, W]; else one f32
 * [ncrops, B, C, h, w] per group), outs[G] the targets i64 [B] (NULL without labels),
 * outs[G + 1] the index i64 [B] (a view of order). After the last batch it returns
 * CR_OK with every outs[k] NULL. A worker's failure (out of memory, an index out of
 * range) is returned by the call that reaches its batch, with the worker's message, and
 * by every later call. */
cr_status cr_data_pipeline_next(cr_data_pipeline *p, cr_tensor **outs);

/* Streamed with skip_bad: the files replaced so far in this pipeline, and the first
 * one's message ("'<path>': <problem>") in msg (cap bytes; "" when none). */
int64_t cr_data_pipeline_skipped(cr_data_pipeline *p, char *msg, int64_t cap);

/* The sequential reader's figures so far (zeros when the job had no stream). */
void cr_data_pipeline_stream_stats(cr_data_pipeline *p, cr_data_stream_stats *out);

/* Stops the workers: each finishes the batch it is building, then all are joined and
 * the ring's batches freed. Idempotent; next fails afterwards. */
void cr_data_pipeline_stop(cr_data_pipeline *p);

/* Stops the pipeline, drops its references and frees it (NULL is fine). */
void cr_data_pipeline_free(cr_data_pipeline *p);

/* Worker threads started and not yet joined, over all pipelines (for tests: 0 once
 * every pipeline was stopped). */
int64_t cr_data_pipeline_threads(void);
/* ==== end of the loader pipeline ====================================================== */

#endif
