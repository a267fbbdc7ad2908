/* data_impl.h — what the csrc/data/ files share: the key mixing and the stream tags
 * that keep the shuffle and the augmentation draws apart (crescent_data.h documents the
 * layout). */
#ifndef CR_DATA_IMPL_H
#define CR_DATA_IMPL_H

#include "internal.h"

/* ASCII "Shuffle1", "Augment1" and "Buffer01": distinct keys for the uses of one seed. */
static const uint64_t CR_DATA_TAG_SHUFFLE = 0x53687566666c6531ULL;
static const uint64_t CR_DATA_TAG_AUGMENT = 0x4175676d656e7431ULL;
static const uint64_t CR_DATA_TAG_BUFFER = 0x4275666665723031ULL;

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

/* The same for encoded bytes already read (buf, len: malloc'd, taken over and freed),
 * called `name` in messages. */
cr_status cr_image_load_encoded(const char *name, uint8_t *buf, int64_t len, int channels, int height, int width,
                                uint8_t **pix, int64_t *h, int64_t *w);

/* ---- stream_reader.c: archive members read front to back for a pipeline ---- */
typedef struct cr_stream_reader cr_stream_reader;

/* A reader of the path table's members in the order `stream` (nstream rows, each
 * member's archive read forward), for a pipeline whose remaining batches use row r
 * need[r] times (need: n = the table's count entries, copied). */
cr_status cr_stream_reader_new(cr_stream_reader **out, const cr_data_paths *paths, const int64_t *stream,
                               int64_t nstream, const int32_t *need);

/* Row's encoded bytes (malloc'd, the caller frees them) in *buf, *len: returns 1 when
 * the stream holds them (read now, or earlier and kept since), 0 when it does not (the row
 * is not in the stream, its place was passed, or its read failed): the caller then
 * reads the row itself. Thread-safe. */
int cr_stream_reader_take(cr_stream_reader *r, int64_t row, uint8_t **buf, int64_t *len);

/* What the reader did so far (crescent_data.h). */
void cr_stream_reader_stats_get(cr_stream_reader *r, cr_data_stream_stats *out);

void cr_stream_reader_free(cr_stream_reader *r);

#endif
