// random.cu — the GPU creation kernels: arange, eye, and the Philox draws. One thread per
// Philox counter (four 32-bit words) makes the elements those words belong to, with the
// arithmetic of csrc/ops/random.c and dropout.c, so a seed gives the cpu's numbers bit for
// bit: rand, randint, randperm, bernoulli and dropout use only exact integer and rounding
// steps, and randn f32 repeats the cpu's own log, sincos and sqrt polynomials in f32
// (compiled with -fmad=false, as the cpu's loops have no fused multiply-adds). randn f64
// uses CUDA's log/sin/cos, which may differ from glibc's in the last bit.
#include <cub/cub.cuh>
#include <stdint.h>

#include "common.cuh"
#include "random.h"
#include "rng.h"

namespace {

// cr_store_f64 / cr_load_f64 on element i of a contiguous buffer
__device__ __forceinline__ void store_f64(void *base, int dt, int64_t i, double v) {
    store<double>((char *)base + i * dtype_size(dt), dt, v);
}
__device__ __forceinline__ double load_f64(const void *base, int dt, int64_t i) {
    return load<double>((const char *)base + i * dtype_size(dt), dt);
}
// An f32 result into f32/f16/bf16, rounded to nearest even as the cpu's store_f32.
__device__ __forceinline__ void store_f32(void *base, int dt, int64_t i, float v) {
    if (dt == F32) ((float *)base)[i] = v;
    else if (dt == F16) ((uint16_t *)base)[i] = cr_f32_to_f16(v);
    else ((uint16_t *)base)[i] = cr_f32_to_bf16(v);
}

// ---- arange and eye ---------------------------------------------------------------------------
__global__ void arange_kernel(void *out, int dt, int64_t n, double start, double step, int exact_int,
                              int64_t s0, int64_t st) {
    GRID_STRIDE(i, n) {
        if (dt == I64) ((int64_t *)out)[i] = exact_int ? s0 + i * st : (int64_t)(start + (double)i * step);
        else store_f64(out, dt, i, start + (double)i * step);
    }
}
__global__ void eye_kernel(void *out, int dt, int64_t n, int64_t m) {
    GRID_STRIDE(i, n < m ? n : m) store_f64(out, dt, i * m + i, 1.0);
}

// ---- rand ------------------------------------------------------------------------------------
// f32/f16/bf16: word e makes element e (24, 11 or 8 bits, each exact in its dtype); f64:
// words 2e and 2e+1 make element e.
__global__ void rand_kernel(void *out, int dt, int64_t n, uint64_t seed, uint64_t counter) {
    const int64_t per = dt == F64 ? 2 : 4, nctr = (n + per - 1) / per;
    GRID_STRIDE(b, nctr) {
        uint32_t w[4];
        cr_philox_block(seed, counter + (uint64_t)b, w);
        for (int j = 0; j < per; j++) {
            int64_t e = b * per + j;
            if (e >= n) break;
            if (dt == F64) ((double *)out)[e] = cr_uniform_f64(w[2 * j], w[2 * j + 1]);
            else if (dt == F32) ((float *)out)[e] = cr_uniform_f32(w[j]);
            else if (dt == F16) ((uint16_t *)out)[e] = cr_f32_to_f16((float)(w[j] >> 21) * (1.0f / 2048.0f));
            else ((uint16_t *)out)[e] = cr_f32_to_bf16((float)(w[j] >> 24) * (1.0f / 256.0f));
        }
    }
}

// ---- randn: Box-Muller on pairs (cr_box_muller_f32, core/rng.h) ---------------------------
// f32/f16/bf16: pair j takes words 2j, 2j+1, so one counter makes elements 4b..4b+3. f64:
// pair j takes the four words of counter j and makes elements 2j, 2j+1.
__global__ void randn_kernel(void *out, int dt, int64_t n, uint64_t seed, uint64_t counter) {
    const int64_t per = dt == F64 ? 2 : 4, nctr = (n + per - 1) / per;
    GRID_STRIDE(b, nctr) {
        uint32_t w[4];
        cr_philox_block(seed, counter + (uint64_t)b, w);
        if (dt == F64) {
            double u1 = 1.0 - cr_uniform_f64(w[0], w[1]), u2 = cr_uniform_f64(w[2], w[3]);
            double r = sqrt(-2.0 * log(u1)), a = 6.28318530717958647692 * u2;
            ((double *)out)[2 * b] = r * cos(a);
            if (2 * b + 1 < n) ((double *)out)[2 * b + 1] = r * sin(a);
            continue;
        }
        float z[4];
        cr_box_muller_f32(w[0], w[1], &z[0], &z[1]);
        cr_box_muller_f32(w[2], w[3], &z[2], &z[3]);
        for (int j = 0; j < 4 && 4 * b + j < n; j++) store_f32(out, dt, 4 * b + j, z[j]);
    }
}

// ---- randint: multiply-shift of one word (range <= 2^32) or two (wider) ----------------------
__global__ void randint_kernel(void *out, int dt, int64_t n, int64_t low, uint64_t range, uint64_t seed,
                               uint64_t counter) {
    const bool wide = range > ((uint64_t)1 << 32);
    const int64_t per = wide ? 2 : 4, nctr = (n + per - 1) / per;
    GRID_STRIDE(b, nctr) {
        uint32_t w[4];
        cr_philox_block(seed, counter + (uint64_t)b, w);
        for (int j = 0; j < per; j++) {
            int64_t e = b * per + j;
            if (e >= n) break;
            int64_t v;
            if (wide) {
                uint64_t x = ((uint64_t)w[2 * j] << 32) | w[2 * j + 1];
                v = (int64_t)((uint64_t)low + __umul64hi(x, range));
            } else {
                v = low + (int64_t)(((uint64_t)w[j] * range) >> 32);
            }
            if (dt == I64) ((int64_t *)out)[e] = v;
            else if (dt == I32) ((int32_t *)out)[e] = (int32_t)v;
            else if (dt == F32) ((float *)out)[e] = (float)v;
            else store_f64(out, dt, e, (double)v);
        }
    }
}

// ---- randperm: keys of words 2e, 2e+1, sorted stably (radix sort) with their positions -----
__global__ void randperm_keys_kernel(uint64_t *keys, int64_t *pos, int64_t n, uint64_t seed, uint64_t counter) {
    GRID_STRIDE(b, (n + 1) / 2) {
        uint32_t w[4];
        cr_philox_block(seed, counter + (uint64_t)b, w);
        for (int j = 0; j < 2 && 2 * b + j < n; j++) {
            keys[2 * b + j] = ((uint64_t)w[2 * j] << 32) | w[2 * j + 1];
            pos[2 * b + j] = 2 * b + j;
        }
    }
}
__global__ void store_positions_kernel(const int64_t *pos, void *out, int dt, int64_t n) {
    GRID_STRIDE(i, n) {
        if (dt == I64) ((int64_t *)out)[i] = pos[i];
        else store_f64(out, dt, i, (double)pos[i]);
    }
}

// ---- bernoulli and dropout -------------------------------------------------------------------
__global__ void bernoulli_kernel(void *out, int dt, int64_t n, const void *prob, int pdt, double p,
                                 unsigned long long *bad, uint64_t seed, uint64_t counter) {
    GRID_STRIDE(b, (n + 3) / 4) {
        uint32_t w[4];
        cr_philox_block(seed, counter + (uint64_t)b, w);
        for (int j = 0; j < 4 && 4 * b + j < n; j++) {
            int64_t e = 4 * b + j;
            double pe = prob ? load_f64(prob, pdt, e) : p;
            if (prob && !(pe >= 0 && pe <= 1)) atomicMin(bad, (unsigned long long)e);
            double u = (double)w[j] * (1.0 / 4294967296.0);
            store_f64(out, dt, e, u < pe ? 1.0 : 0.0);
        }
    }
}

__global__ void dropout_kernel(const void *x, void *y, uint8_t *mask, int dt, int64_t n, double p,
                               uint64_t seed, uint64_t counter) {
    const double scale = p < 1 ? 1.0 / (1.0 - p) : 0.0;
    const float pf = (float)p, scalef = (float)scale;
    GRID_STRIDE(b, (n + 3) / 4) {
        uint32_t w[4];
        if (p < 1) cr_philox_block(seed, counter + (uint64_t)b, w);
        for (int j = 0; j < 4 && 4 * b + j < n; j++) {
            int64_t i = 4 * b + j;
            uint8_t keep = p < 1 && cr_uniform_f32(w[j]) >= pf;
            mask[i] = keep;
            if (dt == F32) ((float *)y)[i] = keep ? ((const float *)x)[i] * scalef : 0.0f;
            else if (dt == F64) ((double *)y)[i] = keep ? ((const double *)x)[i] * scale : 0.0;
            else store_f64(y, dt, i, keep ? load_f64(x, dt, i) * scale : 0.0);
        }
    }
}
__global__ void dropout_backward_kernel(const void *g, const uint8_t *mask, void *gx, int dt, int64_t n,
                                        double scale) {
    const float s = (float)scale;
    GRID_STRIDE(i, n) {
        if (dt == F32) ((float *)gx)[i] = mask[i] ? ((const float *)g)[i] * s : 0.0f;
        else if (dt == F64) ((double *)gx)[i] = mask[i] ? ((const double *)g)[i] * scale : 0.0;
        else store_f64(gx, dt, i, mask[i] ? load_f64(g, dt, i) * scale : 0.0);
    }
}

size_t align256(size_t b) { return (b + 255) & ~(size_t)255; }

} // namespace

extern "C" {

int crk_arange(void *out, int dtype, int64_t n, double start, double step, int exact_int, int64_t s0,
               int64_t st, cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    arange_kernel<<<grid_for(n), THREADS, 0, stream>>>(out, dtype, n, start, step, exact_int, s0, st);
    return cudaGetLastError();
}

int crk_eye(void *out, int dtype, int64_t n, int64_t m, cudaStream_t stream) {
    if (n * m == 0) return cudaSuccess;
    cudaError_t err = cudaMemsetAsync(out, 0, (size_t)(n * m) * (size_t)dtype_size(dtype), stream);
    if (err) return err;
    eye_kernel<<<grid_for(n < m ? n : m), THREADS, 0, stream>>>(out, dtype, n, m);
    return cudaGetLastError();
}

int crk_rand(void *out, int dtype, int64_t n, uint64_t seed, uint64_t counter, cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    rand_kernel<<<grid_for((n + 1) / 2), THREADS, 0, stream>>>(out, dtype, n, seed, counter);
    return cudaGetLastError();
}

int crk_randn(void *out, int dtype, int64_t n, uint64_t seed, uint64_t counter, cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    randn_kernel<<<grid_for((n + 1) / 2), THREADS, 0, stream>>>(out, dtype, n, seed, counter);
    return cudaGetLastError();
}

int crk_randint(void *out, int dtype, int64_t n, int64_t low, int64_t high, uint64_t seed,
                uint64_t counter, cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    randint_kernel<<<grid_for((n + 1) / 2), THREADS, 0, stream>>>(out, dtype, n, low,
                                                                 (uint64_t)high - (uint64_t)low, seed, counter);
    return cudaGetLastError();
}

// Scratch: keys in and out, positions in and out, then CUB's temporary storage.
size_t crk_randperm_scratch(int64_t n) {
    size_t temp = 0;
    cub::DeviceRadixSort::SortPairs(nullptr, temp, (const uint64_t *)nullptr, (uint64_t *)nullptr,
                                    (const int64_t *)nullptr, (int64_t *)nullptr, (int)n);
    return 4 * align256((size_t)n * 8) + align256(temp);
}

int crk_randperm(void *out, int dtype, int64_t n, uint64_t seed, uint64_t counter, void *scratch,
                 cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    char *s = (char *)scratch;
    const size_t part = align256((size_t)n * 8);
    uint64_t *keys = (uint64_t *)s, *keys_sorted = (uint64_t *)(s + part);
    int64_t *pos = (int64_t *)(s + 2 * part), *pos_sorted = (int64_t *)(s + 3 * part);
    randperm_keys_kernel<<<grid_for((n + 1) / 2), THREADS, 0, stream>>>(keys, pos, n, seed, counter);
    cudaError_t err = cudaGetLastError();
    if (err) return err;
    size_t temp = 0;
    cub::DeviceRadixSort::SortPairs(nullptr, temp, keys, keys_sorted, pos, pos_sorted, (int)n);
    err = cub::DeviceRadixSort::SortPairs(s + 4 * part, temp, keys, keys_sorted, pos, pos_sorted, (int)n, 0,
                                          64, stream);
    if (err) return err;
    store_positions_kernel<<<grid_for(n), THREADS, 0, stream>>>(pos_sorted, out, dtype, n);
    return cudaGetLastError();
}

int crk_bernoulli(void *out, int dtype, int64_t n, const void *prob, int prob_dtype, double p,
                  unsigned long long *bad, uint64_t seed, uint64_t counter, cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    bernoulli_kernel<<<grid_for((n + 3) / 4), THREADS, 0, stream>>>(out, dtype, n, prob, prob_dtype, p, bad, seed,
                                                                  counter);
    return cudaGetLastError();
}

int crk_dropout(const void *x, void *y, uint8_t *mask, int dtype, int64_t n, double p, uint64_t seed,
                uint64_t counter, cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    dropout_kernel<<<grid_for((n + 3) / 4), THREADS, 0, stream>>>(x, y, mask, dtype, n, p, seed, counter);
    return cudaGetLastError();
}

int crk_dropout_backward(const void *g, const uint8_t *mask, void *gx, int dtype, int64_t n, double scale,
                         cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    dropout_backward_kernel<<<grid_for(n), THREADS, 0, stream>>>(g, mask, gx, dtype, n, scale);
    return cudaGetLastError();
}

} // extern "C"
