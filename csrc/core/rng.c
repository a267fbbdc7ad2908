/* rng.c — see rng.h. The global state is (seed, offset in counters); checkpoints save
 * and restore it with cr_rng_get_state/cr_rng_set_state. */
#include "rng.h"

#include "core.h"

static uint64_t rng_seed = 0x5eed, rng_offset = 0;

void cr_rng_manual_seed(uint64_t seed) {
    rng_seed = seed;
    rng_offset = 0;
}
void cr_rng_get_state(uint64_t *seed, uint64_t *offset) {
    *seed = rng_seed;
    *offset = rng_offset;
}
void cr_rng_set_state(uint64_t seed, uint64_t offset) {
    rng_seed = seed;
    rng_offset = offset;
}

cr_philox_stream cr_rng_reserve(int64_t nwords) {
    cr_philox_stream s = {rng_seed, rng_offset};
    rng_offset += (uint64_t)((nwords + 3) / 4);
    return s;
}

void cr_rng_give_back(cr_philox_stream s) {
    if (s.seed == rng_seed && s.counter <= rng_offset) rng_offset = s.counter;
}

uint32_t cr_philox_word(cr_philox_stream s, int64_t i) {
    uint32_t w[4];
    cr_philox_block(s.seed, s.counter + (uint64_t)(i / 4), w);
    return w[i % 4];
}

/* The same rounds as cr_philox_block on LANES counters at once: the loops over lanes are
 * what the compiler vectorises (32x32->64 multiplies). */
enum { LANES = 8 };
void cr_philox_blocks(cr_philox_stream s, int64_t b0, int64_t nblocks, uint32_t *out) {
    int64_t k = 0;
    for (; k + LANES <= nblocks; k += LANES) {
        uint32_t c0[LANES], c1[LANES], c2[LANES], c3[LANES];
        uint32_t k0 = (uint32_t)s.seed, k1 = (uint32_t)(s.seed >> 32);
        for (int l = 0; l < LANES; l++) {
            uint64_t ctr = s.counter + (uint64_t)(b0 + k + l);
            c0[l] = (uint32_t)ctr;
            c1[l] = (uint32_t)(ctr >> 32);
            c2[l] = c3[l] = 0;
        }
        for (int r = 0; r < 10; r++) {
            for (int l = 0; l < LANES; l++) {
                uint64_t p0 = (uint64_t)0xD2511F53u * c0[l], p1 = (uint64_t)0xCD9E8D57u * c2[l];
                uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1[l] ^ k0;
                uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3[l] ^ k1;
                c1[l] = (uint32_t)p1;
                c3[l] = (uint32_t)p0;
                c0[l] = n0;
                c2[l] = n2;
            }
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        for (int l = 0; l < LANES; l++) {
            uint32_t *o = out + 4 * (k + l);
            o[0] = c0[l];
            o[1] = c1[l];
            o[2] = c2[l];
            o[3] = c3[l];
        }
    }
    for (; k < nblocks; k++) cr_philox_block(s.seed, s.counter + (uint64_t)(b0 + k), out + 4 * k);
}

void cr_rng_philox_words(uint32_t *out, int64_t n, uint64_t seed, uint64_t offset) {
    cr_philox_stream s = {seed, offset};
    for (int64_t i = 0; i < n; i++) out[i] = cr_philox_word(s, i);
}
