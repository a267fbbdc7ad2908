/* data_impl.h — what the csrc/data/ files share: the key mixing and the stream tags
 * that keep the shuffle and the augmentation draws apart (crescent_data.h documents the
 * layout). */
#ifndef CR_DATA_IMPL_H
#define CR_DATA_IMPL_H

#include "internal.h"

/* ASCII "Shuffle1" and "Augment1": distinct keys for the two uses of one seed. */
static const uint64_t CR_DATA_TAG_SHUFFLE = 0x53687566666c6531ULL;
static const uint64_t CR_DATA_TAG_AUGMENT = 0x4175676d656e7431ULL;

/* splitmix64's finaliser: a bijection that spreads nearby seeds over the key space. */
uint64_t cr_data_mix(uint64_t x);

/* One more reference to a path table (cr_data_paths_free drops one). */
void cr_data_paths_retain(cr_data_paths *p);

/* For the loader's worker threads: the file at path (or, member non-NULL, the `length`
 * bytes at `offset` of the archive at path, called member) decoded (image.c) to u8 CHW
 * [channels, h, w] in a malloc'd block, at its own size (height = width = 0) or resized
 * to height x width; the error (this thread's message) names the file or member. */
cr_status cr_image_load(const char *path, const char *member, int64_t offset, int64_t length, int channels,
                        int height, int width, uint8_t **pix, int64_t *h, int64_t *w);

#endif
