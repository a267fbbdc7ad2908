/* batch_norm_nhwc.c — batch norm on channels-last activations (what conv2d writes on its
 * oneDNN path), f32 or bf16: the data are rows [M = N*H*W, C] with the per-channel
 * vectors along a row. Rows go in blocks of about BLOCK_ELEMS values, split across
 * threads; within a block, channels go CHUNK at a time with their sums (and scale and
 * shift) held in registers across the block's rows, so a row of 16 channels costs a few
 * vector instructions instead of a pass through memory-resident accumulators (per-row
 * loops over 16-channel rows were bound by loop overhead and store-to-load latency).
 * bf16 values are widened to f32 in registers and results rounded back (half.h), so the
 * arithmetic is the f32 kernel's and the activations cross memory as bf16. The sums of a
 * block (at most BLOCK_ELEMS / CHUNK = 256 rows) run in f32 registers, centred on the mean
 * where the formula is, and are added into each thread's f64 sums, which are then added
 * in thread order: the two-pass arithmetic of the row-major kernels in batch_norm.c,
 * reassociated, with f32 partial sums of at most 256 terms. */
#include <omp.h>

#include "batch_norm_impl.h"

enum { BLOCK_ELEMS = 4096, CHUNK = 16 };

/* Rows per block for C channels, at least 1. */
static inline int64_t block_rows(int64_t C) { return C >= BLOCK_ELEMS ? 1 : BLOCK_ELEMS / C; }

#define LD_f32(p, i) ((p)[i])
#define LD_bf16(p, i) cr_bf16_to_f32((p)[i])
#define ST_f32(p, i, v) ((p)[i] = (v))
#define ST_bf16(p, i, v) ((p)[i] = cr_f32_to_bf16(v))

/* The kernels for one storage type T (float or uint16_t bf16), loaded with LD_<S> and
 * stored with ST_<S>. `kind` of sums: 0: x; 1: (x - mean)^2; 2: g (masked where y <= 0
 * when y is given) into a and g*(x - mean) into a2. Rows [m0, m0 + nr). */
#define NHWC_KERNELS(S, T)                                                                          \
    static void sums_##S(int kind, const T *x, const T *g, const T *y, int64_t m0, int64_t nr,      \
                         int64_t C, const double *mean, double *a, double *a2) {                    \
        int64_t c0 = 0;                                                                             \
        for (; c0 + CHUNK <= C; c0 += CHUNK) {                                                      \
            float s[CHUNK] = {0}, s2[CHUNK] = {0}, mu[CHUNK];                                       \
            for (int k = 0; k < CHUNK; k++) mu[k] = mean ? (float)mean[c0 + k] : 0.0f;              \
            const T *xc = x + m0 * C + c0, *gc = g ? g + m0 * C + c0 : NULL;                        \
            const T *yc = y ? y + m0 * C + c0 : NULL;                                               \
            if (kind == 0) {                                                                        \
                for (int64_t i = 0; i < nr; i++)                                                    \
                    _Pragma("omp simd") for (int k = 0; k < CHUNK; k++) s[k] += LD_##S(xc, i * C + k); \
            } else if (kind == 1) {                                                                 \
                for (int64_t i = 0; i < nr; i++)                                                    \
                    _Pragma("omp simd") for (int k = 0; k < CHUNK; k++) {                           \
                        const float d = LD_##S(xc, i * C + k) - mu[k];                              \
                        s[k] += d * d;                                                              \
                    }                                                                               \
            } else if (yc) {                                                                        \
                for (int64_t i = 0; i < nr; i++)                                                    \
                    _Pragma("omp simd") for (int k = 0; k < CHUNK; k++) {                           \
                        const float gk = LD_##S(gc, i * C + k), yk = LD_##S(yc, i * C + k);         \
                        const float gv = yk > 0.0f ? gk : 0.0f;                                     \
                        s[k] += gv;                                                                 \
                        s2[k] += gv * (LD_##S(xc, i * C + k) - mu[k]);                              \
                    }                                                                               \
            } else {                                                                                \
                for (int64_t i = 0; i < nr; i++)                                                    \
                    _Pragma("omp simd") for (int k = 0; k < CHUNK; k++) {                           \
                        const float gk = LD_##S(gc, i * C + k);                                     \
                        s[k] += gk;                                                                 \
                        s2[k] += gk * (LD_##S(xc, i * C + k) - mu[k]);                              \
                    }                                                                               \
            }                                                                                       \
            for (int k = 0; k < CHUNK; k++) {                                                       \
                a[c0 + k] += s[k];                                                                  \
                if (a2) a2[c0 + k] += s2[k];                                                        \
            }                                                                                       \
        }                                                                                           \
        for (int64_t i = m0; i < m0 + nr && c0 < C; i++) { /* the channels past the last chunk */  \
            for (int64_t c = c0; c < C; c++) {                                                      \
                const float xv = LD_##S(x, i * C + c);                                              \
                if (kind == 0) {                                                                    \
                    a[c] += xv;                                                                     \
                } else if (kind == 1) {                                                             \
                    const double d = (double)xv - mean[c];                                          \
                    a[c] += d * d;                                                                  \
                } else {                                                                            \
                    const float gv = y && !(LD_##S(y, i * C + c) > 0.0f) ? 0.0f : LD_##S(g, i * C + c); \
                    a[c] += gv;                                                                     \
                    a2[c] += (double)gv * ((double)xv - mean[c]);                                   \
                }                                                                                   \
            }                                                                                       \
        }                                                                                           \
    }                                                                                               \
    /* out = x*p + q (relu: clipped at 0; NaN stays NaN, as in relu), or with g given:             \
     * out = g'*p + x*q + r, g' = g masked where y <= 0 when y is given. */                        \
    static void affine_##S(T *out, const T *x, const T *g, const T *y, int64_t m0, int64_t nr,      \
                           int64_t C, const float *p, const float *q, const float *r, bool relu) {  \
        int64_t c0 = 0;                                                                             \
        for (; c0 + CHUNK <= C; c0 += CHUNK) {                                                      \
            float pk[CHUNK], qk[CHUNK], rk[CHUNK];                                                  \
            for (int k = 0; k < CHUNK; k++) pk[k] = p[c0 + k], qk[k] = q[c0 + k], rk[k] = r ? r[c0 + k] : 0.0f; \
            for (int64_t i = m0; i < m0 + nr; i++) {                                                \
                const int64_t o = i * C + c0;                                                       \
                if (!g) {                                                                           \
                    _Pragma("omp simd") for (int k = 0; k < CHUNK; k++) {                           \
                        const float v = LD_##S(x, o + k) * pk[k] + qk[k];                           \
                        ST_##S(out, o + k, relu && v < 0.0f ? 0.0f : v);                            \
                    }                                                                               \
                } else if (y) {                                                                     \
                    _Pragma("omp simd") for (int k = 0; k < CHUNK; k++) {                           \
                        const float gk = LD_##S(g, o + k), yk = LD_##S(y, o + k);                   \
                        ST_##S(out, o + k, (yk > 0.0f ? gk : 0.0f) * pk[k] + LD_##S(x, o + k) * qk[k] + rk[k]); \
                    }                                                                               \
                } else {                                                                            \
                    _Pragma("omp simd") for (int k = 0; k < CHUNK; k++)                             \
                        ST_##S(out, o + k, LD_##S(g, o + k) * pk[k] + LD_##S(x, o + k) * qk[k] + rk[k]); \
                }                                                                                   \
            }                                                                                       \
        }                                                                                           \
        for (int64_t i = m0; i < m0 + nr && c0 < C; i++) {                                          \
            for (int64_t c = c0; c < C; c++) {                                                      \
                const int64_t o = i * C + c;                                                        \
                float v;                                                                            \
                if (!g) {                                                                           \
                    v = LD_##S(x, o) * p[c] + q[c];                                                 \
                    if (relu && v < 0.0f) v = 0.0f;                                                 \
                } else {                                                                            \
                    const float gv = y && !(LD_##S(y, o) > 0.0f) ? 0.0f : LD_##S(g, o);             \
                    v = gv * p[c] + LD_##S(x, o) * q[c] + r[c];                                     \
                }                                                                                   \
                ST_##S(out, o, v);                                                                  \
            }                                                                                       \
        }                                                                                           \
    }

NHWC_KERNELS(f32, float)
NHWC_KERNELS(bf16, uint16_t)

typedef struct {
    const void *x, *g, *y; /* y: fused relu's output, masks g where y <= 0 */
    const double *mean;
    int64_t M, C;
    bool bf16;
} rows;

/* sums[c] (and sums2[c]) over all rows for `kind` as in sums_<S>, f64, rows split across
 * threads in blocks. Returns false when out of memory. */
static bool row_sums(const rows *r, int kind, double *sums, double *sums2) {
    const int64_t M = r->M, C = r->C, R = block_rows(C), nb = (M + R - 1) / R;
    int nt = M * C >= CR_PAR_GRAIN ? omp_get_max_threads() : 1;
    int nacc = kind == 2 ? 2 : 1;
    double *acc = calloc((size_t)(nt * nacc) * (size_t)C, sizeof(double));
    if (!acc) return false;
    const double *mean = kind == 0 ? NULL : r->mean;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        double *a = acc + (size_t)omp_get_thread_num() * (size_t)(nacc * C);
        double *a2 = kind == 2 ? a + C : NULL;
#pragma omp for schedule(static)
        for (int64_t b = 0; b < nb; b++) {
            const int64_t m0 = b * R, nr = M - m0 < R ? M - m0 : R;
            if (r->bf16)
                sums_bf16(kind, r->x, r->g, r->y, m0, nr, C, mean, a, a2);
            else
                sums_f32(kind, r->x, r->g, r->y, m0, nr, C, mean, a, a2);
        }
    }
    for (int64_t c = 0; c < C; c++) {
        double s = 0, s2 = 0;
        for (int t = 0; t < nt; t++) {
            s += acc[(size_t)t * (size_t)(nacc * C) + (size_t)c];
            if (nacc == 2) s2 += acc[(size_t)t * (size_t)(nacc * C) + (size_t)(C + c)];
        }
        sums[c] = s;
        if (nacc == 2) sums2[c] = s2;
    }
    free(acc);
    return true;
}

/* affine_<S> over all rows, in blocks across threads. */
static void row_affine(void *out, const void *x, const void *g, const void *y, bool bf16,
                       int64_t M, int64_t C, const float *p, const float *q, const float *r,
                       bool relu) {
    const int64_t R = block_rows(C), nb = (M + R - 1) / R;
    bool par = M * C >= CR_PAR_GRAIN;
#pragma omp parallel for if (par) schedule(static)
    for (int64_t b = 0; b < nb; b++) {
        const int64_t m0 = b * R, nr = M - m0 < R ? M - m0 : R;
        if (bf16)
            affine_bf16(out, x, g, y, m0, nr, C, p, q, r, relu);
        else
            affine_f32(out, x, g, y, m0, nr, C, p, q, r, relu);
    }
}

bool cr_bn_nhwc_stats(const void *x, bool bf16, int64_t M, int64_t C, double *mean,
                      double *var) {
    rows r = {x, NULL, NULL, mean, M, C, bf16};
    if (!row_sums(&r, 0, mean, NULL)) return false;
    for (int64_t c = 0; c < C; c++) mean[c] /= (double)M;
    if (!row_sums(&r, 1, var, NULL)) return false;
    for (int64_t c = 0; c < C; c++) var[c] /= (double)M;
    return true;
}

bool cr_bn_nhwc_apply(void *y, const void *x, bool bf16, int64_t M, int64_t C,
                      const float *scale, const float *shift, bool relu) {
    row_affine(y, x, NULL, NULL, bf16, M, C, scale, shift, NULL, relu);
    return true;
}

bool cr_bn_nhwc_grad_sums(const void *g, const void *x, const void *y, bool bf16,
                          const double *mean, int64_t M, int64_t C, double *sum_g,
                          double *sum_gx) {
    rows r = {x, g, y, mean, M, C, bf16};
    return row_sums(&r, 2, sum_g, sum_gx);
}

bool cr_bn_nhwc_grad_input(void *gx, const void *g, const void *x, const void *y, bool bf16,
                           int64_t M, int64_t C, const float *a, const float *bx,
                           const float *c0) {
    row_affine(gx, x, g, y, bf16, M, C, a, bx, c0, false);
    return true;
}
