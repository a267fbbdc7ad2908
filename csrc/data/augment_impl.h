/* augment_impl.h — what augment.c (draws, crop + resize, the batch driver) shares with
 * augment_color.c (the per-image colour and blur ops). Images here are f32 planes
 * [C][h*w] holding values in [0, 255]; every op works in place on one image. */
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

#endif
