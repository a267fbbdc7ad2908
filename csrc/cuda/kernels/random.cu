// random.cu — the GPU creation kernels: arange, eye, and the Philox draws. One thread per
// Philox counter (four 32-bit words) makes the elements those words belong to, with the
// arithmetic of csrc/ops/random.c and dropout.c, so a seed gives the cpu's numbers bit for
// bit: rand, randint, randperm, bernoulli and dropout use only exact integer and rounding
// steps, and randn f32 repeats the cpu's own log, sincos and sqrt polynomials in f32
// (compiled with -fmad=false, as the cpu's loops have no fused multiply-adds). randn f64
// uses CUDA's log/sin/cos, which may differ from glibc's in the last bit.
#include <cub/cub.cuh>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "random.h"

namespace {

enum { F32 = 0, F64, F16, BF16, I64, I32, U8, BOOL };

__device__ __forceinline__ void philox(uint64_t seed, uint64_t counter, uint32_t out[4]) {
    uint32_t c0 = (uint32_t)counter, c1 = (uint32_t)(counter >> 32), c2 = 0, c3 = 0;
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
#pragma unroll
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

__device__ __forceinline__ float uniform_f32(uint32_t w) { return (float)(w >> 8) * (1.0f / 16777216.0f); }
__device__ __forceinline__ double uniform_f64(uint32_t a, uint32_t b) {
    return (double)((((uint64_t)a << 32) | b) >> 11) * (1.0 / 9007199254740992.0);
}

// cr_store_f64 of csrc/core/dtype.c: halves through f32, non-finite values to 0 in integers.
__device__ __forceinline__ void store_f64(void *base, int dt, int64_t i, double v) {
    switch (dt) {
    case F32: ((float *)base)[i] = (float)v; break;
    case F64: ((double *)base)[i] = v; break;
    case F16: ((__half *)base)[i] = __float2half_rn((float)v); break;
    case BF16: ((__nv_bfloat16 *)base)[i] = __float2bfloat16_rn((float)v); break;
    case I64: ((int64_t *)base)[i] = isfinite(v) ? (int64_t)v : 0; break;
    case I32: ((int32_t *)base)[i] = isfinite(v) ? (int32_t)v : 0; break;
    case U8: ((uint8_t *)base)[i] = isfinite(v) ? (uint8_t)(int64_t)v : 0; break;
    default: ((uint8_t *)base)[i] = v != 0; break;
    }
}
__device__ __forceinline__ double load_f64(const void *base, int dt, int64_t i) {
    switch (dt) {
    case F32: return ((const float *)base)[i];
    case F64: return ((const double *)base)[i];
    case F16: return __half2float(((const __half *)base)[i]);
    case BF16: return __bfloat162float(((const __nv_bfloat16 *)base)[i]);
    case I64: return (double)((const int64_t *)base)[i];
    case I32: return ((const int32_t *)base)[i];
    case U8: return ((const uint8_t *)base)[i];
    default: return ((const uint8_t *)base)[i] != 0;
    }
}
// An f32 result into f32/f16/bf16, rounded to nearest even as cr_f32_to_f16/bf16.
__device__ __forceinline__ void store_f32(void *base, int dt, int64_t i, float v) {
    if (dt == F32) ((float *)base)[i] = v;
    else if (dt == F16) ((__half *)base)[i] = __float2half_rn(v);
    else ((__nv_bfloat16 *)base)[i] = __float2bfloat16_rn(v);
}

unsigned blocks_for(int64_t threads) {
    int64_t b = (threads + 255) / 256;
    return (unsigned)(b < 1 ? 1 : b > 65535 * 16 ? 65535 * 16 : b);
}
#define GRID_STRIDE(q, count)                                                                          \
    for (int64_t q = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; q < (count);                    \
         q += (int64_t)gridDim.x * blockDim.x)

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
        philox(seed, counter + (uint64_t)b, w);
        for (int j = 0; j < per; j++) {
            int64_t e = b * per + j;
            if (e >= n) break;
            if (dt == F64) ((double *)out)[e] = uniform_f64(w[2 * j], w[2 * j + 1]);
            else if (dt == F32) ((float *)out)[e] = uniform_f32(w[j]);
            else if (dt == F16) ((__half *)out)[e] = __float2half_rn((float)(w[j] >> 21) * (1.0f / 2048.0f));
            else ((__nv_bfloat16 *)out)[e] = __float2bfloat16_rn((float)(w[j] >> 24) * (1.0f / 256.0f));
        }
    }
}

// ---- randn: Box-Muller on pairs, the cpu's f32 functions (ops/random.c) -------------------
__device__ __forceinline__ float bm_logf(float u) {
    uint32_t iu = __float_as_uint(u);
    int e = (int)(iu >> 23) - 127;
    float m = __uint_as_float((iu & 0x007FFFFFu) | 0x3F800000u);
    int big = m > 1.41421356f;
    m = big ? m * 0.5f : m;
    float fe = (float)(e + big), x = m - 1.0f, z = x * x;
    float y = ((((((((7.0376836292e-2f * x - 1.1514610310e-1f) * x + 1.1676998740e-1f) * x -
                   1.2420140846e-1f) * x + 1.4249322787e-1f) * x - 1.6668057665e-1f) * x +
                 2.0000714765e-1f) * x - 2.4999993993e-1f) * x + 3.3333331174e-1f) * x * z;
    y += -2.12194440e-4f * fe - 0.5f * z;
    return x + y + 0.693359375f * fe;
}
__device__ __forceinline__ void bm_sincos_2pi(float q, float *sn, float *cs) {
    int k = (int)(q * 4.0f + 0.5f);
    float x = (q - (float)k * 0.25f) * 6.28318530717958647692f;
    float x2 = x * x;
    float s = x + x * x2 * (-1.6666654611e-1f + x2 * (8.3321608736e-3f + x2 * -1.9515295891e-4f));
    float c = 1.0f - 0.5f * x2 +
              x2 * x2 * (4.166664568298827e-2f + x2 * (-1.388731625493765e-3f + x2 * 2.443315711809948e-5f));
    float ss = (k & 1) ? c : s, cc = (k & 1) ? s : c;
    *sn = (k & 2) ? -ss : ss;
    *cs = ((k + 1) & 2) ? -cc : cc;
}
__device__ __forceinline__ float bm_sqrtf(float y) {
    uint32_t i = 0x1fbd1df5u + (__float_as_uint(y) >> 1);
    float r = __uint_as_float(i);
    r = 0.5f * (r + y / r);
    r = 0.5f * (r + y / r);
    r = 0.5f * (r + y / r);
    return y > 0 ? r : 0.0f;
}
__device__ __forceinline__ void bm_pair_f32(uint32_t a, uint32_t b, float *z0, float *z1) {
    float u1 = (float)((a >> 8) + 1) * (1.0f / 16777216.0f);
    float u2 = (float)(b >> 8) * (1.0f / 16777216.0f);
    float r = bm_sqrtf(-2.0f * bm_logf(u1)), sn, cs;
    bm_sincos_2pi(u2, &sn, &cs);
    *z0 = r * cs;
    *z1 = r * sn;
}

// f32/f16/bf16: pair j takes words 2j, 2j+1, so one counter makes elements 4b..4b+3. f64:
// pair j takes the four words of counter j and makes elements 2j, 2j+1.
__global__ void randn_kernel(void *out, int dt, int64_t n, uint64_t seed, uint64_t counter) {
    const int64_t per = dt == F64 ? 2 : 4, nctr = (n + per - 1) / per;
    GRID_STRIDE(b, nctr) {
        uint32_t w[4];
        philox(seed, counter + (uint64_t)b, w);
        if (dt == F64) {
            double u1 = 1.0 - uniform_f64(w[0], w[1]), u2 = uniform_f64(w[2], w[3]);
            double r = sqrt(-2.0 * log(u1)), a = 6.28318530717958647692 * u2;
            ((double *)out)[2 * b] = r * cos(a);
            if (2 * b + 1 < n) ((double *)out)[2 * b + 1] = r * sin(a);
            continue;
        }
        float z[4];
        bm_pair_f32(w[0], w[1], &z[0], &z[1]);
        bm_pair_f32(w[2], w[3], &z[2], &z[3]);
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
        philox(seed, counter + (uint64_t)b, w);
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
        philox(seed, counter + (uint64_t)b, w);
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
        philox(seed, counter + (uint64_t)b, w);
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
        if (p < 1) philox(seed, counter + (uint64_t)b, w);
        for (int j = 0; j < 4 && 4 * b + j < n; j++) {
            int64_t i = 4 * b + j;
            uint8_t keep = p < 1 && uniform_f32(w[j]) >= pf;
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
    arange_kernel<<<blocks_for(n), 256, 0, stream>>>(out, dtype, n, start, step, exact_int, s0, st);
    return cudaGetLastError();
}

int crk_eye(void *out, int dtype, int64_t n, int64_t m, cudaStream_t stream) {
    static const int sizes[] = {4, 8, 2, 2, 8, 4, 1, 1};
    if (n * m == 0) return cudaSuccess;
    cudaError_t err = cudaMemsetAsync(out, 0, (size_t)(n * m) * (size_t)sizes[dtype], stream);
    if (err) return err;
    eye_kernel<<<blocks_for(n < m ? n : m), 256, 0, stream>>>(out, dtype, n, m);
    return cudaGetLastError();
}

int crk_rand(void *out, int dtype, int64_t n, uint64_t seed, uint64_t counter, cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    rand_kernel<<<blocks_for((n + 1) / 2), 256, 0, stream>>>(out, dtype, n, seed, counter);
    return cudaGetLastError();
}

int crk_randn(void *out, int dtype, int64_t n, uint64_t seed, uint64_t counter, cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    randn_kernel<<<blocks_for((n + 1) / 2), 256, 0, stream>>>(out, dtype, n, seed, counter);
    return cudaGetLastError();
}

int crk_randint(void *out, int dtype, int64_t n, int64_t low, int64_t high, uint64_t seed,
                uint64_t counter, cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    randint_kernel<<<blocks_for((n + 1) / 2), 256, 0, stream>>>(out, dtype, n, low,
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
    randperm_keys_kernel<<<blocks_for((n + 1) / 2), 256, 0, stream>>>(keys, pos, n, seed, counter);
    cudaError_t err = cudaGetLastError();
    if (err) return err;
    size_t temp = 0;
    cub::DeviceRadixSort::SortPairs(nullptr, temp, keys, keys_sorted, pos, pos_sorted, (int)n);
    err = cub::DeviceRadixSort::SortPairs(s + 4 * part, temp, keys, keys_sorted, pos, pos_sorted, (int)n, 0,
                                          64, stream);
    if (err) return err;
    store_positions_kernel<<<blocks_for(n), 256, 0, stream>>>(pos_sorted, out, dtype, n);
    return cudaGetLastError();
}

int crk_bernoulli(void *out, int dtype, int64_t n, const void *prob, int prob_dtype, double p,
                  unsigned long long *bad, uint64_t seed, uint64_t counter, cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    bernoulli_kernel<<<blocks_for((n + 3) / 4), 256, 0, stream>>>(out, dtype, n, prob, prob_dtype, p, bad, seed,
                                                                  counter);
    return cudaGetLastError();
}

int crk_dropout(const void *x, void *y, uint8_t *mask, int dtype, int64_t n, double p, uint64_t seed,
                uint64_t counter, cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    dropout_kernel<<<blocks_for((n + 3) / 4), 256, 0, stream>>>(x, y, mask, dtype, n, p, seed, counter);
    return cudaGetLastError();
}

int crk_dropout_backward(const void *g, const uint8_t *mask, void *gx, int dtype, int64_t n, double scale,
                         cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    dropout_backward_kernel<<<blocks_for(n), 256, 0, stream>>>(g, mask, gx, dtype, n, scale);
    return cudaGetLastError();
}

} // extern "C"
