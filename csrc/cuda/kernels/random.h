/* random.h — launchers of the GPU creation kernels: arange and eye, and the Philox draws
 * (rand, randn, randint, randperm's keys, bernoulli, dropout). Each draw turns word i of
 * the op's reservation (seed, first counter) into element i exactly as csrc/core/rng.h
 * specifies, so a seed gives the same numbers on the GPU as on the cpu. */
#ifndef CR_CUDA_KERNELS_RANDOM_H
#define CR_CUDA_KERNELS_RANDOM_H

#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* x[i] = start + i*step in double (or s0 + i*st in i64 when `exact_int`), stored in dtype. */
int crk_arange(void *out, int dtype, int64_t n, double start, double step, int exact_int, int64_t s0,
               int64_t st, cudaStream_t stream);
/* n x m row-major, ones on the diagonal. */
int crk_eye(void *out, int dtype, int64_t n, int64_t m, cudaStream_t stream);

/* rand / randn into n contiguous elements of a float dtype. */
int crk_rand(void *out, int dtype, int64_t n, uint64_t seed, uint64_t counter, cudaStream_t stream);
int crk_randn(void *out, int dtype, int64_t n, uint64_t seed, uint64_t counter, cudaStream_t stream);
/* randint in [low, high) into n contiguous elements of any dtype. */
int crk_randint(void *out, int dtype, int64_t n, int64_t low, int64_t high, uint64_t seed,
                uint64_t counter, cudaStream_t stream);
/* A permutation of 0..n-1 into `out` (dtype): the stable order of randperm's 64-bit keys.
 * `scratch` holds crk_randperm_scratch(n) bytes. */
size_t crk_randperm_scratch(int64_t n);
int crk_randperm(void *out, int dtype, int64_t n, uint64_t seed, uint64_t counter, void *scratch,
                 cudaStream_t stream);
/* out[i] = w[i] * 2^-32 < p: p from `prob` (contiguous, prob_dtype) or the number p when prob
 * is NULL. A probability outside [0, 1] lowers *bad (device memory, set to n first) to its
 * flat index. */
int crk_bernoulli(void *out, int dtype, int64_t n, const void *prob, int prob_dtype, double p,
                  unsigned long long *bad, uint64_t seed, uint64_t counter, cudaStream_t stream);
/* Inverted dropout on n contiguous elements (f32/f64/f16/bf16): mask[i] = p < 1 and
 * uniform_f32(w[i]) >= p; y = mask ? x / (1 - p) : 0. */
int crk_dropout(const void *x, void *y, uint8_t *mask, int dtype, int64_t n, double p, uint64_t seed,
                uint64_t counter, cudaStream_t stream);
/* gx = mask ? g * scale : 0. */
int crk_dropout_backward(const void *g, const uint8_t *mask, void *gx, int dtype, int64_t n,
                         double scale, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
