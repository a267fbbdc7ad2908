/* rng.h — the Philox4x32-10 counter-based generator (Salmon et al., SC'11), as cuRAND
 * and PyTorch use it. One global stream (seed, offset): an op reserves the words it
 * needs, and word i of its draw is word i%4 of Philox(key = seed, counter = start +
 * i/4). Any thread, and a GPU kernel (issue 6), can compute any word independently, so
 * results depend on neither thread count nor device. */
#ifndef CR_RNG_H
#define CR_RNG_H

#include <stdint.h>

typedef struct {
    uint64_t seed;
    uint64_t counter; /* first 128-bit counter of the reservation */
} cr_philox_stream;

/* Reserves nwords 32-bit words (rounded up to whole counters) from the global stream. */
cr_philox_stream cr_rng_reserve(int64_t nwords);
/* The four words of counter `counter` under key `seed`. */
void cr_philox_block(uint64_t seed, uint64_t counter, uint32_t out[4]);
/* Word i of a reservation. */
uint32_t cr_philox_word(cr_philox_stream s, int64_t i);

/* [0, 1) from 24 random bits / from 53 random bits of two words. */
static inline float cr_uniform_f32(uint32_t w) { return (float)(w >> 8) * (1.0f / 16777216.0f); }
static inline double cr_uniform_f64(uint32_t a, uint32_t b) {
    return (double)((((uint64_t)a << 32) | b) >> 11) * (1.0 / 9007199254740992.0);
}

#endif
