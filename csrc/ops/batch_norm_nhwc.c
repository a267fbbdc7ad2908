/* batch_norm_nhwc.c — batch norm on channels-last activations (what conv2d writes on its
 * oneDNN path), f32 or bf16: the data are rows [M = N*H*W, C] with the per-channel
 * vectors along a row. Rows go in blocks of about BLOCK_ELEMS values, split across
 * threads; within a block, channels go CHUNK at a time as one 16-lane vector (GCC vector
 * extensions: AVX-512 registers under -march=native, pairs of AVX2 ones on x86-64-v3),
 * with their sums (and scale and shift) held in registers across the block's rows.
 * bf16 values are widened to f32 in registers and results rounded back with half.h's
 * rounding (nearest even, quiet NaNs), so the arithmetic is the f32 kernel's and the
 * activations cross memory as bf16.
 *
 * The forward statistics take one pass over memory: a block (at most 16 KiB) is summed,
 * then read again from L1 for the squares about its own mean, and the block's (count,
 * mean, M2) is merged into the thread's f64 moments (Chan et al.'s pairwise update), the
 * threads' moments then merged in thread order. The gradient sums are f32 per block (at
 * most 256 terms) added into each thread's f64 sums. */
#include <omp.h>
#ifdef __AVX512F__
#include <immintrin.h>
#endif

#include "batch_norm_impl.h"

enum { BLOCK_ELEMS = 4096, CHUNK = 16, UNROLL = 4 };

/* Rows per block for C channels, at least 1. */
static inline int64_t block_rows(int64_t C) { return C >= BLOCK_ELEMS ? 1 : BLOCK_ELEMS / C; }

/* CHUNK lanes of f32, their bit patterns, and CHUNK bf16 values. Without AVX-512 GCC warns
 * that passing them by value changes the ABI; they never cross this file's functions
 * that are not inlined, so the warning does not apply. */
#pragma GCC diagnostic ignored "-Wpsabi"
typedef float vf __attribute__((vector_size(4 * CHUNK)));
typedef int32_t vi __attribute__((vector_size(4 * CHUNK)));
typedef uint32_t vu __attribute__((vector_size(4 * CHUNK)));
typedef uint16_t vh __attribute__((vector_size(2 * CHUNK)));

/* Always inlined, with `bf16` a constant there: a vector never crosses a call (whose ABI
 * differs without AVX-512) and each type's code keeps one branch. */
#define NHWC_INLINE static inline __attribute__((always_inline))

static inline vf vload_f32(const float *p) {
    vf v;
    memcpy(&v, p, sizeof v);
    return v;
}
#ifdef __AVX512F__ /* GCC 12 widens a 16-lane convertvector in two halves */
static inline vf vload_bf16(const uint16_t *p) {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return (vf)_mm512_slli_epi32(w, 16);
}
#else
static inline vf vload_bf16(const uint16_t *p) {
    vh h;
    memcpy(&h, p, sizeof h);
    return (vf)(__builtin_convertvector(h, vu) << 16);
}
#endif
static inline void vstore_f32(float *p, vf v) { memcpy(p, &v, sizeof v); }
/* cr_f32_to_bf16 on CHUNK lanes: round to nearest even, a NaN kept quiet with its sign. */
static inline void vstore_bf16(uint16_t *p, vf v) {
    const vu x = (vu)v;
    const vu rounded = x + 0x7fffu + ((x >> 16) & 1u);
    const vu is_nan = (vu)((x & 0x7fffffffu) > 0x7f800000u);
    const vu bits = (((x | 0x00400000u) & is_nan) | (rounded & ~is_nan)) >> 16;
#ifdef __AVX512F__
    _mm256_storeu_si256((__m256i *)p, _mm512_cvtepi32_epi16((__m512i)bits));
#else
    const vh h = __builtin_convertvector(bits, vh);
    memcpy(p, &h, sizeof h);
#endif
}
/* v where mask lanes are set, else 0 (mask: a lane comparison's all-ones or zero). */
NHWC_INLINE vf vkeep(vf v, vi mask) { return (vf)((vi)v & mask); }

/* Merges the moments of nb values (mean mb, M2 qb) into those of n values (*mean, *m2). */
static inline void merge_moments(double n, double nb, double mb, double qb, double *mean,
                                 double *m2) {
    const double total = n + nb, delta = mb - *mean;
    *mean += delta * (nb / total);
    *m2 += qb + delta * delta * (n * nb / total);
}
/* The same for a block of nb values summed about mu, its f32 mean: l = sum (x - mu) and
 * q = sum (x - mu)^2 correct mu's rounding (the corrected two-pass formula), which would
 * otherwise count in the variance of values far from 0 against their spread. */
static inline void merge_block(double n, double nb, double mu, double l, double q, double *mean,
                               double *m2) {
    merge_moments(n, nb, mu + l / nb, q - l * l / nb, mean, m2);
}

/* Element i of an f32 or bf16 array (bf16 widened to f32): CHUNK lanes from i on, or one
 * value; and the stores back, rounded to bf16 as cr_f32_to_bf16. */
NHWC_INLINE vf vload_at(const void *p, int64_t i, bool bf16) {
    return bf16 ? vload_bf16((const uint16_t *)p + i) : vload_f32((const float *)p + i);
}
NHWC_INLINE float load_at(const void *p, int64_t i, bool bf16) {
    return bf16 ? cr_bf16_to_f32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}
NHWC_INLINE void vstore_at(void *p, int64_t i, vf v, bool bf16) {
    if (bf16)
        vstore_bf16((uint16_t *)p + i, v);
    else
        vstore_f32((float *)p + i, v);
}
NHWC_INLINE void store_at(void *p, int64_t i, float v, bool bf16) {
    if (bf16)
        ((uint16_t *)p)[i] = cr_f32_to_bf16(v);
    else
        ((float *)p)[i] = v;
}

/* The kernels, over rows [m0, m0 + nr), for either storage type. Each caller below calls
 * one twice, under `if (bf16)`, with the flag a constant, so each call compiles to the
 * code of one type, the other branch gone. */

/* Merges the block's per-channel count, mean and M2 into (n, mean, m2). */
NHWC_INLINE void moments(const void *x, bool bf16, int64_t m0, int64_t nr, int64_t C, double n,
                         double *mean, double *m2) {
    const float inv_nr = 1.0f / (float)nr;
    int64_t c0 = 0;
    for (; c0 + CHUNK <= C; c0 += CHUNK) {
        const int64_t base = m0 * C + c0;
        vf s[UNROLL] = {{0}}, q[UNROLL] = {{0}};
        int64_t i = 0;
        for (; i + UNROLL <= nr; i += UNROLL)
            for (int u = 0; u < UNROLL; u++) s[u] += vload_at(x, base + (i + u) * C, bf16);
        for (; i < nr; i++) s[0] += vload_at(x, base + i * C, bf16);
        for (int u = 1; u < UNROLL; u++) s[0] += s[u];
        const vf mu = s[0] * inv_nr;
        vf l[UNROLL] = {{0}};
        for (i = 0; i + UNROLL <= nr; i += UNROLL)
            for (int u = 0; u < UNROLL; u++) {
                const vf d = vload_at(x, base + (i + u) * C, bf16) - mu;
                l[u] += d;
                q[u] += d * d;
            }
        for (; i < nr; i++) {
            const vf d = vload_at(x, base + i * C, bf16) - mu;
            l[0] += d;
            q[0] += d * d;
        }
        for (int u = 1; u < UNROLL; u++) l[0] += l[u], q[0] += q[u];
        for (int k = 0; k < CHUNK; k++)
            merge_block(n, (double)nr, mu[k], l[0][k], q[0][k], mean + c0 + k, m2 + c0 + k);
    }
    for (int64_t c = c0; c < C; c++) { /* the channels past the last chunk */
        float s = 0, l = 0, q = 0;
        for (int64_t i = m0; i < m0 + nr; i++) s += load_at(x, i * C + c, bf16);
        const float mu = s * inv_nr;
        for (int64_t i = m0; i < m0 + nr; i++) {
            const float d = load_at(x, i * C + c, bf16) - mu;
            l += d;
            q += d * d;
        }
        merge_block(n, (double)nr, mu, l, q, mean + c, m2 + c);
    }
}

/* a += sum g, a2 += sum g*(x - m), g masked where y <= 0 when y is given. */
NHWC_INLINE void grad_sums(const void *x, const void *g, const void *y, bool bf16, int64_t m0,
                           int64_t nr, int64_t C, const float *m, double *a, double *a2) {
    int64_t c0 = 0;
    for (; c0 + CHUNK <= C; c0 += CHUNK) {
        vf s[2] = {{0}}, s2[2] = {{0}}, mu;
        for (int k = 0; k < CHUNK; k++) mu[k] = m[c0 + k];
        const int64_t o0 = m0 * C + c0;
        for (int64_t i = 0; i < nr; i++) { /* two chains: row parity */
            const int64_t o = o0 + i * C;
            vf gv = vload_at(g, o, bf16);
            if (y) gv = vkeep(gv, vload_at(y, o, bf16) > 0.0f);
            s[i & 1] += gv;
            s2[i & 1] += gv * (vload_at(x, o, bf16) - mu);
        }
        for (int k = 0; k < CHUNK; k++) {
            a[c0 + k] += s[0][k] + s[1][k];
            a2[c0 + k] += s2[0][k] + s2[1][k];
        }
    }
    for (int64_t i = m0; i < m0 + nr && c0 < C; i++) { /* the channels past the last chunk */
        for (int64_t c = c0; c < C; c++) {
            const float xv = load_at(x, i * C + c, bf16);
            const float gv = y && !(load_at(y, i * C + c, bf16) > 0.0f) ? 0.0f : load_at(g, i * C + c, bf16);
            a[c] += gv;
            a2[c] += (double)gv * ((double)xv - m[c]);
        }
    }
}

/* out = (x - m)*p + q (relu: clipped at 0; NaN stays NaN, as in relu), or with g given:
 * out = g'*p + (x - m)*q + r, g' = g masked where y <= 0 when y is given. Centred on the
 * mean, so an input far from 0 against its spread keeps its precision. */
NHWC_INLINE void affine(void *out, const void *x, const void *g, const void *y, bool bf16,
                        int64_t m0, int64_t nr, int64_t C, const float *m, const float *p,
                        const float *q, const float *r, bool relu) {
    int64_t c0 = 0;
    for (; c0 + CHUNK <= C; c0 += CHUNK) {
        vf mk, pk, qk, rk;
        for (int k = 0; k < CHUNK; k++) {
            mk[k] = m[c0 + k], pk[k] = p[c0 + k], qk[k] = q[c0 + k];
            rk[k] = r ? r[c0 + k] : 0.0f;
        }
        for (int64_t i = m0; i < m0 + nr; i++) {
            const int64_t o = i * C + c0;
            vf v;
            if (!g) {
                v = (vload_at(x, o, bf16) - mk) * pk + qk;
                if (relu) v = vkeep(v, ~(v < 0.0f));
            } else {
                vf gv = vload_at(g, o, bf16);
                if (y) gv = vkeep(gv, vload_at(y, o, bf16) > 0.0f);
                v = gv * pk + (vload_at(x, o, bf16) - mk) * qk + rk;
            }
            vstore_at(out, o, v, bf16);
        }
    }
    for (int64_t i = m0; i < m0 + nr && c0 < C; i++) {
        for (int64_t c = c0; c < C; c++) {
            const int64_t o = i * C + c;
            float v;
            if (!g) {
                v = (load_at(x, o, bf16) - m[c]) * p[c] + q[c];
                if (relu && v < 0.0f) v = 0.0f;
            } else {
                const float gv = y && !(load_at(y, o, bf16) > 0.0f) ? 0.0f : load_at(g, o, bf16);
                v = gv * p[c] + (load_at(x, o, bf16) - m[c]) * q[c] + r[c];
            }
            store_at(out, o, v, bf16);
        }
    }
}

/* Threads for a pass over M rows of C channels. */
static int pass_threads(int64_t M, int64_t C) {
    return M * C >= CR_PAR_GRAIN ? omp_get_max_threads() : 1;
}

/* Per-channel batch mean and biased variance over all rows, rows split across threads in
 * blocks. Returns false when out of memory. */
static bool row_moments(const void *x, bool bf16, int64_t M, int64_t C, double *mean,
                        double *var) {
    const int64_t R = block_rows(C), nb = (M + R - 1) / R;
    const int nt = pass_threads(M, C);
    double *acc = calloc((size_t)nt * (size_t)(2 * C + 1), sizeof(double)); /* mean, m2, n */
    if (!acc) return false;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        double *tm = acc + (size_t)omp_get_thread_num() * (size_t)(2 * C + 1), *tq = tm + C;
        double *tn = tq + C;
#pragma omp for schedule(static)
        for (int64_t b = 0; b < nb; b++) {
            const int64_t m0 = b * R, nr = M - m0 < R ? M - m0 : R;
            if (bf16)
                moments(x, true, m0, nr, C, *tn, tm, tq);
            else
                moments(x, false, m0, nr, C, *tn, tm, tq);
            *tn += (double)nr;
        }
    }
    for (int64_t c = 0; c < C; c++) mean[c] = 0, var[c] = 0;
    double n = 0;
    for (int t = 0; t < nt; t++) {
        const double *tm = acc + (size_t)t * (size_t)(2 * C + 1), *tq = tm + C, tn = tq[C];
        if (tn == 0) continue;
        for (int64_t c = 0; c < C; c++) merge_moments(n, tn, tm[c], tq[c], mean + c, var + c);
        n += tn;
    }
    for (int64_t c = 0; c < C; c++) var[c] /= (double)M;
    free(acc);
    return true;
}

/* sum_g[c] = sum g, sum_gx[c] = sum g*(x - mean) over all rows (g masked where y <= 0
 * when y is given), f64, rows split across threads in blocks. Returns false when out of
 * memory. */
static bool row_grad_sums(const void *g, const void *x, const void *y, bool bf16,
                          const float *mean, int64_t M, int64_t C, double *sum_g,
                          double *sum_gx) {
    const int64_t R = block_rows(C), nb = (M + R - 1) / R;
    const int nt = pass_threads(M, C);
    double *acc = calloc((size_t)nt * (size_t)(2 * C), sizeof(double));
    if (!acc) return false;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        double *a = acc + (size_t)omp_get_thread_num() * (size_t)(2 * C), *a2 = a + C;
#pragma omp for schedule(static)
        for (int64_t b = 0; b < nb; b++) {
            const int64_t m0 = b * R, nr = M - m0 < R ? M - m0 : R;
            if (bf16)
                grad_sums(x, g, y, true, m0, nr, C, mean, a, a2);
            else
                grad_sums(x, g, y, false, m0, nr, C, mean, a, a2);
        }
    }
    for (int64_t c = 0; c < C; c++) {
        double s = 0, s2 = 0;
        for (int t = 0; t < nt; t++) {
            s += acc[(size_t)t * (size_t)(2 * C) + (size_t)c];
            s2 += acc[(size_t)t * (size_t)(2 * C) + (size_t)(C + c)];
        }
        sum_g[c] = s;
        sum_gx[c] = s2;
    }
    free(acc);
    return true;
}

/* affine over all rows, in blocks across threads. */
static void row_affine(void *out, const void *x, const void *g, const void *y, bool bf16,
                       int64_t M, int64_t C, const float *m, const float *p, const float *q,
                       const float *r, bool relu) {
    const int64_t R = block_rows(C), nb = (M + R - 1) / R;
    const int nt = pass_threads(M, C);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (int64_t b = 0; b < nb; b++) {
        const int64_t m0 = b * R, nr = M - m0 < R ? M - m0 : R;
        if (bf16)
            affine(out, x, g, y, true, m0, nr, C, m, p, q, r, relu);
        else
            affine(out, x, g, y, false, m0, nr, C, m, p, q, r, relu);
    }
}

bool cr_bn_nhwc_stats(const void *x, bool bf16, int64_t M, int64_t C, double *mean,
                      double *var) {
    return row_moments(x, bf16, M, C, mean, var);
}

bool cr_bn_nhwc_apply(void *y, const void *x, bool bf16, int64_t M, int64_t C,
                      const float *mean, const float *scale, const float *shift, bool relu) {
    row_affine(y, x, NULL, NULL, bf16, M, C, mean, scale, shift, NULL, relu);
    return true;
}

bool cr_bn_nhwc_grad_sums(const void *g, const void *x, const void *y, bool bf16,
                          const float *mean, int64_t M, int64_t C, double *sum_g,
                          double *sum_gx) {
    return row_grad_sums(g, x, y, bf16, mean, M, C, sum_g, sum_gx);
}

bool cr_bn_nhwc_grad_input(void *gx, const void *g, const void *x, const void *y, bool bf16,
                           int64_t M, int64_t C, const float *mean, const float *a,
                           const float *bx, const float *c0) {
    row_affine(gx, x, g, y, bf16, M, C, mean, a, bx, c0, false);
    return true;
}
