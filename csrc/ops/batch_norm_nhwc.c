/* batch_norm_nhwc.c — batch norm on channels-last f32 activations (what conv2d writes on
 * its oneDNN path): the data are rows [M = N*H*W, C], so the per-channel sums run across
 * a row at a time, vectorised over channels. Each thread sums a block of rows into its
 * own f64 accumulators, which are then added in thread order: the same two-pass
 * arithmetic as the row-major kernels in batch_norm.c, reassociated. */
#include <omp.h>

#include "batch_norm_impl.h"

/* sums[c] = sum over rows of f(row, c), f64, rows split across threads. `kind` picks f:
 * 0: x; 1: (x - mean)^2; 2: g (masked) and 3: g*(x - mean) into sums2. */
typedef struct {
    const float *x, *g, *y; /* y: fused relu's output, masks g where y <= 0 */
    const double *mean;
    int64_t M, C;
} rows;

static void row_sums(const rows *r, int kind, double *sums, double *sums2) {
    const int64_t M = r->M, C = r->C;
    int nt = r->M * C >= CR_PAR_GRAIN ? omp_get_max_threads() : 1;
    int nacc = kind == 2 ? 2 : 1;
    double *acc = calloc((size_t)(nt * nacc) * (size_t)C, sizeof(double));
    if (!acc) nt = 0; /* sum serially straight into the outputs */
    if (!acc) {
        memset(sums, 0, sizeof(double) * (size_t)C);
        if (sums2) memset(sums2, 0, sizeof(double) * (size_t)C);
    }
#pragma omp parallel num_threads(nt > 0 ? nt : 1) if (nt > 1)
    {
        int t = omp_get_thread_num();
        double *a = acc ? acc + (size_t)t * (size_t)(nacc * C) : sums;
        double *a2 = acc ? a + C : sums2;
#pragma omp for schedule(static)
        for (int64_t m = 0; m < M; m++) {
            const float *xr = r->x + m * C;
            if (kind == 0) {
#pragma omp simd
                for (int64_t c = 0; c < C; c++) a[c] += xr[c];
            } else if (kind == 1) {
#pragma omp simd
                for (int64_t c = 0; c < C; c++) {
                    double d = (double)xr[c] - r->mean[c];
                    a[c] += d * d;
                }
            } else {
                const float *gr = r->g + m * C, *yr = r->y ? r->y + m * C : NULL;
                if (yr) {
#pragma omp simd
                    for (int64_t c = 0; c < C; c++) {
                        const float gk = gr[c], yk = yr[c];
                        const float gv = yk > 0.0f ? gk : 0.0f;
                        a[c] += gv;
                        a2[c] += (double)gv * ((double)xr[c] - r->mean[c]);
                    }
                } else {
#pragma omp simd
                    for (int64_t c = 0; c < C; c++) {
                        a[c] += gr[c];
                        a2[c] += (double)gr[c] * ((double)xr[c] - r->mean[c]);
                    }
                }
            }
        }
    }
    if (!acc) return;
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
}

void cr_bn_nhwc_stats(const float *x, int64_t M, int64_t C, double *mean, double *var) {
    rows r = {x, NULL, NULL, mean, M, C};
    row_sums(&r, 0, mean, NULL);
    for (int64_t c = 0; c < C; c++) mean[c] /= (double)M;
    row_sums(&r, 1, var, NULL);
    for (int64_t c = 0; c < C; c++) var[c] /= (double)M;
}

void cr_bn_nhwc_apply(float *y, const float *x, int64_t M, int64_t C, const float *scale,
                      const float *shift, bool relu) {
    bool par = M * C >= CR_PAR_GRAIN;
#pragma omp parallel for if (par) schedule(static)
    for (int64_t m = 0; m < M; m++) {
        const float *xr = x + m * C;
        float *yr = y + m * C;
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
}

void cr_bn_nhwc_grad_sums(const float *g, const float *x, const float *y, const double *mean,
                          int64_t M, int64_t C, double *sum_g, double *sum_gx) {
    rows r = {x, g, y, mean, M, C};
    row_sums(&r, 2, sum_g, sum_gx);
}

void cr_bn_nhwc_grad_input(float *gx, const float *g, const float *x, const float *y,
                           int64_t M, int64_t C, const float *a, const float *bx,
                           const float *c0) {
    bool par = M * C >= CR_PAR_GRAIN;
#pragma omp parallel for if (par) schedule(static)
    for (int64_t m = 0; m < M; m++) {
        const float *gr = g + m * C, *xr = x + m * C;
        float *o = gx + m * C;
        if (y) {
            const float *yr = y + m * C;
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
}
