/* rng.h — the Philox4x32-10 counter-based generator (Salmon et al., SC'11), as cuRAND
 * and PyTorch use it. One global stream (seed, offset): an op reserves the words it
 * needs, and word i of its draw is word i%4 of Philox(key = seed, counter = start +
 * i/4). Any thread, and a GPU kernel (issue 6), can compute any word independently, so
 * results depend on neither thread count nor device.
 *
 * Which words each op uses (a GPU kernel must do exactly this to draw the same numbers).
 * n is the number of elements, w[k] word k of the op's reservation, and "reserve m"
 * means cr_rng_reserve(m) (rounded up to whole counters, so the next op starts on a
 * fresh counter):
 *
 *   rand f32      reserve n;  x[i] = cr_uniform_f32(w[i])              (24 bits)
 *   rand f16      reserve n;  x[i] = (w[i] >> 21) * 2^-11              (exact in f16, < 1)
 *   rand bf16     reserve n;  x[i] = (w[i] >> 24) * 2^-8               (exact in bf16, < 1)
 *   rand f64      reserve 2n; x[i] = cr_uniform_f64(w[2i], w[2i+1])    (53 bits)
 *   randn f32/f16/bf16   reserve 2*ceil(n/2); pair j = elements 2j, 2j+1 (the last pair
 *                 of an odd n keeps only its first), in f32 arithmetic:
 *                   u1 = ((w[2j] >> 8) + 1) * 2^-24   in (0, 1], so log is finite
 *                   u2 = (w[2j+1] >> 8) * 2^-24
 *                   r = sqrtf(-2 logf(u1)); x[2j] = r cosf(2 pi u2); x[2j+1] = r sinf(2 pi u2)
 *                 then rounded to f16/bf16 for those dtypes.
 *   randn f64     reserve 4*ceil(n/2); pair j uses the four words of one counter, in f64:
 *                   u1 = 1 - cr_uniform_f64(w[4j], w[4j+1]); u2 = cr_uniform_f64(w[4j+2], w[4j+3])
 *                   r = sqrt(-2 log(u1)); x[2j] = r cos(2 pi u2); x[2j+1] = r sin(2 pi u2)
 *   randint [low, high), r = high - low as uint64 (any output dtype):
 *                 r <= 2^32: reserve n;  x[i] = low + ((uint64)w[i] * r >> 32)
 *                 r >  2^32: reserve 2n; x[i] = low + hi64(((w[2i] << 32) | w[2i+1]) * r)
 *                 (multiply-shift: no rejection loop, bias below r / 2^32)
 *   randperm n    reserve 2n; key[i] = (w[2i] << 32) | w[2i+1]; the result lists 0..n-1
 *                 ordered by key ascending, ties by i ascending (a stable sort of keys).
 *   bernoulli     reserve n;  x[i] = (w[i] * 2^-32 < p[i]) computed in double.
 */
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
/* Words 4*b0 .. 4*(b0+nblocks)-1 of a reservation into out[4*nblocks]: out[4k+j] is word
 * j of counter s.counter + b0 + k. Computed several counters at a time (SIMD). */
void cr_philox_blocks(cr_philox_stream s, int64_t b0, int64_t nblocks, uint32_t *out);

/* [0, 1) from 24 random bits / from 53 random bits of two words. */
static inline float cr_uniform_f32(uint32_t w) { return (float)(w >> 8) * (1.0f / 16777216.0f); }
static inline double cr_uniform_f64(uint32_t a, uint32_t b) {
    return (double)((((uint64_t)a << 32) | b) >> 11) * (1.0 / 9007199254740992.0);
}

#endif
