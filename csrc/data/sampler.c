/* sampler.c — the order in which a loader visits a data set in one epoch. A pure
 * function of (seed, epoch): it never reads or moves the global RNG stream, so resuming
 * at (epoch, batch) replays the same order, and the model's own draws (dropout, init)
 * do not shift when a loader is added or removed. Layout: crescent_data.h. */
#include "data_impl.h"
#include "rng.h"

uint64_t cr_data_mix(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

enum { PERM_CHUNK = 1024 }; /* counters drawn at a time: 16 KiB of words */

cr_status cr_data_permutation(cr_tensor **out, int64_t n, uint64_t seed, uint64_t epoch,
                              bool shuffle) {
    *out = NULL;
    if (n < 0 || n > (int64_t)UINT32_MAX)
        return cr_fail(CR_ERR_ARG, "permutation: n = %lld is out of range [0, 2^32)",
                       (long long)n);
    int64_t shape[1] = {n};
    cr_status st = cr_tensor_alloc(out, 1, shape, CR_DT_I64, CR_CPU);
    if (st) return st;
    int64_t *p = (int64_t *)cr_tensor_ptr(*out);
    for (int64_t i = 0; i < n; i++) p[i] = i;
    if (!shuffle || n < 2) return CR_OK;
    cr_philox_stream s = {cr_data_mix(cr_data_mix(seed ^ CR_DATA_TAG_SHUFFLE) + epoch), 0};
    /* Fisher–Yates is sequential, but drawing the words is not: fill a chunk of words with
     * the vectorised block function, then consume it. Slot i uses word i. */
    uint32_t w[4 * PERM_CHUNK];
    int64_t have_b0 = -1;
    for (int64_t i = n - 1; i >= 1; i--) {
        int64_t b = i / 4, b0 = b - b % PERM_CHUNK;
        if (b0 != have_b0) {
            int64_t nb = (n + 3) / 4 - b0 < PERM_CHUNK ? (n + 3) / 4 - b0 : PERM_CHUNK;
            cr_philox_blocks(s, b0, nb, w);
            have_b0 = b0;
        }
        uint64_t j = ((uint64_t)w[i - 4 * b0] * (uint64_t)(i + 1)) >> 32;
        int64_t tmp = p[i];
        p[i] = p[j];
        p[j] = tmp;
    }
    return CR_OK;
}

/* Philox words in order (word k = word k % 4 of block k / 4), drawn a chunk at a time. */
typedef struct {
    cr_philox_stream s;
    uint32_t w[4 * PERM_CHUNK];
    int64_t b0, next; /* the chunk held starts at block b0 (-1: none); the next word */
} word_source;

static uint32_t next_word(word_source *ws) {
    int64_t b = ws->next / 4, b0 = b - b % PERM_CHUNK;
    if (b0 != ws->b0) {
        cr_philox_blocks(ws->s, b0, PERM_CHUNK, ws->w);
        ws->b0 = b0;
    }
    return ws->w[ws->next++ - 4 * b0];
}

cr_status cr_data_buffer_shuffle(cr_tensor **out, const cr_tensor *stream, int64_t buffer, uint64_t seed,
                                 uint64_t epoch) {
    *out = NULL;
    char buf[160];
    if (!stream || stream->dtype != CR_DT_I64 || stream->ndim != 1 || cr_tensor_device(stream) != CR_DEV_CPU)
        return cr_fail(CR_ERR_ARG, "buffer_shuffle: stream must be a CPU i64 tensor [M] (rows in read order), "
                       "got %s", stream ? cr_shape_str(stream, buf, sizeof buf) : "nil");
    if (buffer < 1 || buffer > (int64_t)UINT32_MAX)
        return cr_fail(CR_ERR_ARG, "buffer_shuffle: buffer = %lld must be in [1, 2^32)", (long long)buffer);
    int64_t m = stream->shape[0], st0 = stream->stride[0];
    cr_status st = cr_tensor_alloc(out, 1, &m, CR_DT_I64, CR_CPU);
    if (st) return st;
    const int64_t *in = (const int64_t *)cr_tensor_ptr(stream);
    int64_t *o = (int64_t *)cr_tensor_ptr(*out);
    int64_t cap = buffer < m ? buffer : m;
    int64_t *pool = malloc(sizeof(int64_t) * (size_t)(cap > 0 ? cap : 1));
    if (!pool) {
        cr_tensor_free(*out);
        *out = NULL;
        return cr_fail(CR_ERR_OOM, "buffer_shuffle: out of memory for a buffer of %lld rows", (long long)cap);
    }
    word_source ws = {{cr_data_mix(cr_data_mix(seed ^ CR_DATA_TAG_BUFFER) + epoch), 0}, {0}, -1, 0};
    int64_t held = 0, emitted = 0;
    for (int64_t t = 0; t < m; t++) {
        int64_t row = in[t * st0];
        if (held < cap) {
            pool[held++] = row;
            continue;
        }
        int64_t k = (int64_t)(((uint64_t)next_word(&ws) * (uint64_t)cap) >> 32);
        o[emitted++] = pool[k];
        pool[k] = row;
    }
    while (held > 0) { /* the stream ended: the rest leaves in random order */
        int64_t k = (int64_t)(((uint64_t)next_word(&ws) * (uint64_t)held) >> 32);
        o[emitted++] = pool[k];
        pool[k] = pool[--held];
    }
    free(pool);
    return CR_OK;
}
