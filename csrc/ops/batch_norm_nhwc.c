/* batch_norm_nhwc.c — batch norm on channels-last activations (what conv2d writes on its
 * oneDNN path), f32 or bf16: the data are rows [M = N*H*W, C], so the per-channel sums
 * run across a row at a time, vectorised over channels. Each thread sums a block of rows
 * into its own f64 accumulators, which are then added in thread order: the same two-pass
 * arithmetic as the row-major kernels in batch_norm.c, reassociated. Rows go in blocks
 * of about BLOCK_ELEMS values; bf16 blocks are widened to f32 in a per-thread buffer (and
 * results narrowed the same way), so the arithmetic is the f32 kernel's and the
 * activations cross memory as bf16. Widening row by row cost 4x the f32 kernel's time at
 * 16 channels (the loop overhead of 16-value rows); a block is one dense loop. */
#include <omp.h>

#include "batch_norm_impl.h"

typedef struct {
    const void *x, *g, *y; /* y: fused relu's output, masks g where y <= 0 */
    const double *mean;
    int64_t M, C;
    bool bf16;
} rows;

enum { BLOCK_ELEMS = 4096 };

/* Rows per block for C channels, at least 1. */
static inline int64_t block_rows(int64_t C) { return C >= BLOCK_ELEMS ? 1 : BLOCK_ELEMS / C; }

/* Rows [m0, m0 + nr) of p as f32: the rows themselves, or widened into buf. */
static inline const float *rows_f32(const void *p, bool bf16, int64_t m0, int64_t nr,
                                    int64_t C, float *buf) {
    if (!bf16) return (const float *)p + m0 * C;
    const uint16_t *h = (const uint16_t *)p + m0 * C;
    const int64_t n = nr * C;
#pragma omp simd
    for (int64_t i = 0; i < n; i++) buf[i] = cr_bf16_to_f32(h[i]);
    return buf;
}

/* Where rows of an output are computed: the rows themselves, or buf (then narrowed by
 * rows_store). */
static inline float *rows_out(void *p, bool bf16, int64_t m0, int64_t C, float *buf) {
    return bf16 ? buf : (float *)p + m0 * C;
}
static inline void rows_store(void *p, bool bf16, int64_t m0, int64_t nr, int64_t C,
                              const float *buf) {
    if (!bf16) return;
    uint16_t *h = (uint16_t *)p + m0 * C;
    const int64_t n = nr * C;
#pragma omp simd
    for (int64_t i = 0; i < n; i++) h[i] = cr_f32_to_bf16(buf[i]);
}

/* A thread's widening buffer: `blocks` blocks of rows (NULL for f32, or when out of
 * memory: *oom is then set). */
static float *thread_buffer(bool bf16, int64_t C, int blocks, bool *oom) {
    if (!bf16) return NULL;
    float *buf = malloc(sizeof(float) * (size_t)(blocks * block_rows(C) * C));
    if (!buf) {
#pragma omp atomic write
        *oom = true;
    }
    return buf;
}

/* One block's sums into a (and a2), for kind as in row_sums: channels 16 at a time with
 * the sums in registers across the block's rows (per-row sums through memory were
 * bound by the accumulators' store-to-load latency at 16 channels), the rest row by row. */
enum { CHUNK = 16 };

#define CHUNK_SUMS(...)                                                             \
    do {                                                                             \
        double s[CHUNK] = {0}, s2[CHUNK] = {0}, mu[CHUNK];                           \
        for (int k = 0; k < CHUNK; k++) mu[k] = mean ? mean[c0 + k] : 0.0;           \
        for (int64_t i = 0; i < nr; i++) {                                           \
            const float *xr = xb + i * C + c0;                                       \
            const float *gr = gb ? gb + i * C + c0 : NULL;                           \
            const float *yr = yb ? yb + i * C + c0 : NULL;                           \
            (void)gr, (void)yr, (void)mu, (void)s2;                                  \
            _Pragma("omp simd")                                                      \
            for (int k = 0; k < CHUNK; k++) { __VA_ARGS__; }                                \
        }                                                                            \
        for (int k = 0; k < CHUNK; k++) {                                            \
            a[c0 + k] += s[k];                                                       \
            if (a2) a2[c0 + k] += s2[k];                                             \
        }                                                                            \
    } while (0)

static void block_sums(int kind, const float *xb, const float *gb, const float *yb, int64_t nr,
                       int64_t C, const double *mean, double *a, double *a2) {
    int64_t c0 = 0;
    for (; c0 + CHUNK <= C; c0 += CHUNK) {
        if (kind == 0) {
            CHUNK_SUMS(s[k] += xr[k]);
        } else if (kind == 1) {
            CHUNK_SUMS(const double d = (double)xr[k] - mu[k]; s[k] += d * d);
        } else if (yb) {
            CHUNK_SUMS(const float gk = gr[k], yk = yr[k]; const float gv = yk > 0.0f ? gk : 0.0f;
                       s[k] += gv; s2[k] += (double)gv * ((double)xr[k] - mu[k]));
        } else {
            CHUNK_SUMS(s[k] += gr[k]; s2[k] += (double)gr[k] * ((double)xr[k] - mu[k]));
        }
    }
    if (c0 == C) return;
    for (int64_t i = 0; i < nr; i++) {
        const float *xr = xb + i * C;
        if (kind == 0) {
            for (int64_t c = c0; c < C; c++) a[c] += xr[c];
        } else if (kind == 1) {
            for (int64_t c = c0; c < C; c++) {
                double d = (double)xr[c] - mean[c];
                a[c] += d * d;
            }
        } else {
            const float *gr = gb + i * C, *yr = yb ? yb + i * C : NULL;
            for (int64_t c = c0; c < C; c++) {
                const float gv = yr && !(yr[c] > 0.0f) ? 0.0f : gr[c];
                a[c] += gv;
                a2[c] += (double)gv * ((double)xr[c] - mean[c]);
            }
        }
    }
}

/* sums[c] = sum over rows of f(row, c), f64, rows split across threads. `kind` picks f:
 * 0: x; 1: (x - mean)^2; 2: g (masked) and 3: g*(x - mean) into sums2. Returns false when
 * out of memory. */
static bool row_sums(const rows *r, int kind, double *sums, double *sums2) {
    const int64_t M = r->M, C = r->C, R = block_rows(C), nb = (M + R - 1) / R;
    const bool bf16 = r->bf16;
    int nt = r->M * C >= CR_PAR_GRAIN ? omp_get_max_threads() : 1;
    int nacc = kind == 2 ? 2 : 1;
    double *acc = calloc((size_t)(nt * nacc) * (size_t)C, sizeof(double));
    if (!acc) return false;
    bool oom = false;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        int t = omp_get_thread_num();
        double *a = acc + (size_t)t * (size_t)(nacc * C);
        double *a2 = a + C;
        float *buf = thread_buffer(bf16, C, 3, &oom);
        float *bx = buf, *bg = buf ? buf + R * C : NULL, *by = buf ? buf + 2 * R * C : NULL;
#pragma omp for schedule(static)
        for (int64_t b = 0; b < nb; b++) {
            if (bf16 && !buf) continue;
            const int64_t m0 = b * R, nr = M - m0 < R ? M - m0 : R;
            const float *xb = rows_f32(r->x, bf16, m0, nr, C, bx);
            const float *gb = kind == 2 ? rows_f32(r->g, bf16, m0, nr, C, bg) : NULL;
            const float *yb = kind == 2 && r->y ? rows_f32(r->y, bf16, m0, nr, C, by) : NULL;
            block_sums(kind, xb, gb, yb, nr, C, kind == 0 ? NULL : r->mean, a, kind == 2 ? a2 : NULL);
        }
        free(buf);
    }
    for (int64_t c = 0; c < C && !oom; c++) {
        double s = 0, s2 = 0;
        for (int t = 0; t < nt; t++) {
            s += acc[(size_t)t * (size_t)(nacc * C) + (size_t)c];
            if (nacc == 2) s2 += acc[(size_t)t * (size_t)(nacc * C) + (size_t)(C + c)];
        }
        sums[c] = s;
        if (nacc == 2) sums2[c] = s2;
    }
    free(acc);
    return !oom;
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
    const int64_t R = block_rows(C), nb = (M + R - 1) / R;
    bool par = M * C >= CR_PAR_GRAIN, oom = false;
#pragma omp parallel if (par)
    {
        float *buf = thread_buffer(bf16, C, 2, &oom);
#pragma omp for schedule(static)
        for (int64_t b = 0; b < nb; b++) {
            if (bf16 && !buf) continue;
            const int64_t m0 = b * R, nr = M - m0 < R ? M - m0 : R;
            const float *xb = rows_f32(x, bf16, m0, nr, C, buf);
            float *yb = rows_out(y, bf16, m0, C, buf ? buf + R * C : NULL);
            for (int64_t i = 0; i < nr; i++) {
                const float *xr = xb + i * C;
                float *yr = yb + i * C;
                if (relu) {
#pragma omp simd
                    for (int64_t c = 0; c < C; c++) { /* NaN stays NaN, as in relu */
                        float v = xr[c] * scale[c] + shift[c];
                        yr[c] = v < 0.0f ? 0.0f : v;
                    }
                } else {
#pragma omp simd
                    for (int64_t c = 0; c < C; c++) yr[c] = xr[c] * scale[c] + shift[c];
                }
            }
            rows_store(y, bf16, m0, nr, C, yb);
        }
        free(buf);
    }
    return !oom;
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
    const int64_t R = block_rows(C), nb = (M + R - 1) / R;
    bool par = M * C >= CR_PAR_GRAIN, oom = false;
#pragma omp parallel if (par)
    {
        float *buf = thread_buffer(bf16, C, 4, &oom);
#pragma omp for schedule(static)
        for (int64_t b = 0; b < nb; b++) {
            if (bf16 && !buf) continue;
            const int64_t m0 = b * R, nr = M - m0 < R ? M - m0 : R;
            const float *gb = rows_f32(g, bf16, m0, nr, C, buf);
            const float *xb = rows_f32(x, bf16, m0, nr, C, buf ? buf + R * C : NULL);
            const float *yb = y ? rows_f32(y, bf16, m0, nr, C, buf ? buf + 2 * R * C : NULL) : NULL;
            float *ob = rows_out(gx, bf16, m0, C, buf ? buf + 3 * R * C : NULL);
            for (int64_t i = 0; i < nr; i++) {
                const float *gr = gb + i * C, *xr = xb + i * C;
                float *o = ob + i * C;
                if (yb) {
                    const float *yr = yb + i * C;
#pragma omp simd
                    for (int64_t c = 0; c < C; c++) {
                        const float gk = gr[c], yk = yr[c];
                        o[c] = (yk > 0.0f ? gk : 0.0f) * a[c] + xr[c] * bx[c] + c0[c];
                    }
                } else {
#pragma omp simd
                    for (int64_t c = 0; c < C; c++) o[c] = gr[c] * a[c] + xr[c] * bx[c] + c0[c];
                }
            }
            rows_store(gx, bf16, m0, nr, C, ob);
        }
        free(buf);
    }
    return !oom;
}
