/* rng.h — the Philox4x32-10 counter-based generator (Salmon et al., SC'11), as cuRAND
 * and PyTorch use it. One global stream (seed, offset): an op reserves the words it
 * needs, and word i of its draw is word i%4 of Philox(key = seed, counter = start +
 * i/4). Any thread, and a GPU kernel, can compute any word independently, so
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

#include "half.h" /* CR_HD: host and device under nvcc; bit casts */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    uint64_t seed;
    uint64_t counter; /* first 128-bit counter of the reservation */
} cr_philox_stream;

/* Reserves nwords 32-bit words (rounded up to whole counters) from the global stream. */
cr_philox_stream cr_rng_reserve(int64_t nwords);
/* Gives back the newest reservation, made by an op that then failed: the draws after a
 * failed call are those of a run without it, whether the failure came before the
 * reservation (a cpu check) or after (a GPU kernel's check, out of memory). */
void cr_rng_give_back(cr_philox_stream s);
/* Word i of a reservation. */
uint32_t cr_philox_word(cr_philox_stream s, int64_t i);
/* Words 4*b0 .. 4*(b0+nblocks)-1 of a reservation into out[4*nblocks]: out[4k+j] is word
 * j of counter s.counter + b0 + k. Computed several counters at a time (SIMD). */
void cr_philox_blocks(cr_philox_stream s, int64_t b0, int64_t nblocks, uint32_t *out);

#ifdef __cplusplus
}
#endif

/* ---- shared by the cpu and the CUDA kernels (kernels/random.cu): one definition each ---- */

/* The four words of counter `counter` under key `seed`: ten Philox4x32 rounds. */
static inline CR_HD void cr_philox_block(uint64_t seed, uint64_t counter, uint32_t out[4]) {
    uint32_t c0 = (uint32_t)counter, c1 = (uint32_t)(counter >> 32), c2 = 0, c3 = 0;
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1;
        c3 = (uint32_t)p0;
        c0 = n0;
        c2 = n2;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

/* [0, 1) from 24 random bits / from 53 random bits of two words. */
static inline CR_HD float cr_uniform_f32(uint32_t w) { return (float)(w >> 8) * (1.0f / 16777216.0f); }
static inline CR_HD double cr_uniform_f64(uint32_t a, uint32_t b) {
    return (double)((((uint64_t)a << 32) | b) >> 11) * (1.0 / 9007199254740992.0);
}

/* ---- randn f32: Box-Muller on a pair of words ----
 * f32 log and sin/cos written branch-free so the cpu's pair loop vectorises (libm's scalar
 * logf/sinf/cosf made randn six times slower than rand). Cephes polynomials, about 1 ulp on
 * the ranges used here. The GPU gets the same bits because kernels/random.cu is compiled
 * without fused multiply-adds, as the cpu's loops are (gcc, -std=c11). */

/* log(u) for u in (0, 1] with 24-bit u (never subnormal). */
static inline CR_HD float cr_bm_logf(float u) {
    uint32_t iu = cr_f32_bits(u);
    int e = (int)(iu >> 23) - 127;
    float m = cr_bits_f32((iu & 0x007FFFFFu) | 0x3F800000u); /* mantissa in [1, 2) */
    int big = m > 1.41421356f; /* to [sqrt(1/2), sqrt(2)) */
    m = big ? m * 0.5f : m;
    float fe = (float)(e + big), x = m - 1.0f, z = x * x;
    float y = ((((((((7.0376836292e-2f * x - 1.1514610310e-1f) * x + 1.1676998740e-1f) * x -
                   1.2420140846e-1f) * x + 1.4249322787e-1f) * x - 1.6668057665e-1f) * x +
                 2.0000714765e-1f) * x - 2.4999993993e-1f) * x + 3.3333331174e-1f) * x * z;
    y += -2.12194440e-4f * fe - 0.5f * z;
    return x + y + 0.693359375f * fe;
}

/* sin and cos of 2 pi q for q in [0, 1): whole quarter turns come off exactly first. */
static inline CR_HD void cr_bm_sincos_2pi(float q, float *sn, float *cs) {
    int k = (int)(q * 4.0f + 0.5f);
    float x = (q - (float)k * 0.25f) * 6.28318530717958647692f; /* [-pi/4, pi/4] */
    float x2 = x * x;
    float s = x + x * x2 * (-1.6666654611e-1f + x2 * (8.3321608736e-3f + x2 * -1.9515295891e-4f));
    float c = 1.0f - 0.5f * x2 +
              x2 * x2 * (4.166664568298827e-2f + x2 * (-1.388731625493765e-3f + x2 * 2.443315711809948e-5f));
    float ss = (k & 1) ? c : s, cc = (k & 1) ? s : c;
    *sn = (k & 2) ? -ss : ss;
    *cs = ((k + 1) & 2) ? -cc : cc;
}

/* sqrt of y >= 0 (at most 34 here): libm's sqrtf writes errno, which stops the loop from
 * vectorising under -fmath-errno, so a bit-level estimate and three Newton steps
 * (within 1 ulp); exactly 0 at 0. */
static inline CR_HD float cr_bm_sqrtf(float y) {
    float r = cr_bits_f32(0x1fbd1df5u + (cr_f32_bits(y) >> 1));
    r = 0.5f * (r + y / r);
    r = 0.5f * (r + y / r);
    r = 0.5f * (r + y / r);
    return y > 0 ? r : 0.0f;
}

/* The two normals of words a, b (rng.h's randn f32 rule above). */
static inline CR_HD void cr_box_muller_f32(uint32_t a, uint32_t b, float *z0, float *z1) {
    float u1 = (float)((a >> 8) + 1) * (1.0f / 16777216.0f);
    float u2 = (float)(b >> 8) * (1.0f / 16777216.0f);
    float r = cr_bm_sqrtf(-2.0f * cr_bm_logf(u1)), sn, cs;
    cr_bm_sincos_2pi(u2, &sn, &cs);
    *z0 = r * cs;
    *z1 = r * sn;
}

#endif
