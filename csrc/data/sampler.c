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
