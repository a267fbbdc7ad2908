/* augment_impl.h — what augment.c (draws, crop + resize, the batch driver) shares with
 * augment_color.c (the per-image colour and blur ops), and the entry points of augment.c
 * and batch.c with a thread switch that the loader pipeline (pipeline.c) calls from its
 * worker threads. Images in the colour ops are f32 planes [C][h*w] holding values in
 * [0, 255]; every op works in place on one image. */
#ifndef CR_AUGMENT_IMPL_H
#define CR_AUGMENT_IMPL_H

#include "data_impl.h"

/* Colour jitter with the drawn factors, in the drawn order (crescent_data.h). */
void cr_augment_jitter(float *img, int64_t nchan, int64_t plane, const cr_data_crop_draw *d);
/* RGB -> grey (0.299, 0.587, 0.114) written to all three channels; a no-op for C = 1. */
void cr_augment_grayscale(float *img, int64_t nchan, int64_t plane);
/* Gaussian blur with a kernel of ksize taps (odd, ksize / 2 < min(h, w)), reflect
 * padding; tmp holds h*w floats. */
void cr_augment_blur(float *img, float *tmp, int64_t nchan, int64_t h, int64_t w, double sigma,
                     int64_t ksize);
/* x >= threshold -> 255 - x. */
void cr_augment_solarize(float *img, int64_t n, float threshold);

/* ---- entry points for pipeline.c ----
 * How a batch is built: CR_BATCH_PARALLEL spreads the work over OpenMP threads (the
 * public calls; the loader's worker threads pass 0 and run it on their own thread);
 * CR_BATCH_PINNED allocates the batch's tensors in page-locked host memory (the CUDA
 * backend's pinned cache), so their copies to a GPU can be asynchronous. */
enum { CR_BATCH_PARALLEL = 1, CR_BATCH_PINNED = 2 };
/* A host tensor of a batch, pinned or not as flags say. */
cr_status cr_batch_alloc(cr_tensor **out, int ndim, const int64_t *shape, cr_dtype dt, unsigned flags);
/* Checks a crop spec for images of nchan channels (0: skip mean/std). */
cr_status cr_augment_check_spec(const cr_data_crop_spec *s, int64_t nchan);
/* Checks the images of the augmentation: contiguous CPU u8 or f32, [N, H, W] or
 * [N, C, H, W] with C = 1 or 3, not empty; op names the caller in the message. */
cr_status cr_augment_check_images(const char *op, const cr_tensor *images);
/* cr_data_augment_crops; without CR_BATCH_PARALLEL on the calling thread without entering
 * OpenMP (same result: every crop is computed alone). */
cr_status cr_augment_crops(cr_tensor **out, const cr_tensor *images, const cr_tensor *index,
                           const cr_data_crop_spec *spec, int64_t ncrops, int64_t first_crop,
                           uint64_t seed, uint64_t epoch, unsigned flags);
/* Streamed multi-crop (pipeline.c): *out = the batch's f32 [ncrops, B, nchan, h, w] of
 * one crop group, to be filled sample by sample with cr_augment_crops_sample: crop
 * k of sample b from src, u8 [nchan, H, W] of any size, its draws keyed by id (the data
 * set row), so a sample's crops equal cr_augment_crops's on a tensor holding its image.
 * The spec is checked by the caller (cr_augment_check_spec). */
cr_status cr_augment_crops_alloc(cr_tensor **out, int64_t B, int64_t nchan, const cr_data_crop_spec *spec,
                                 int64_t ncrops, unsigned flags);
cr_status cr_augment_crops_sample(cr_tensor *out, const uint8_t *src, int64_t H, int64_t W, int64_t b,
                                  uint64_t id, const cr_data_crop_spec *spec, int64_t first_crop,
                                  uint64_t seed, uint64_t epoch);
/* cr_data_make_batch, with the same flags; ids (NULL: the index's rows) keys each
 * sample's draws, for batches whose images tensor holds the batch alone (streamed). */
cr_status cr_batch_make(cr_tensor **input, cr_tensor **target, const cr_tensor *images,
                        const cr_tensor *labels, const cr_tensor *index, const double *mean,
                        const double *std, const cr_data_augment *aug, unsigned flags,
                        const int64_t *ids);
/* The checks of cr_data_make_batch that do not depend on the index; the normalisation's
 * and augmentation's part alone for images of nchan channels. */
cr_status cr_batch_check_norm(int64_t nchan, const double *mean, const double *std, const cr_data_augment *aug);
cr_status cr_batch_check(const cr_tensor *images, const cr_tensor *labels, const double *mean,
                         const double *std, const cr_data_augment *aug);
/* *out = i64 [B] with labels[index[b]] (labels: a CPU integer tensor [N], checked). */
cr_status cr_batch_targets(cr_tensor **out, const cr_tensor *labels, const cr_tensor *index, unsigned flags);

#endif
