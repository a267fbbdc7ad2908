/* loss.h — launchers of the classification-loss kernels (loss.cu): nll_loss and
 * cross_entropy forward and backward, with ops/loss.c's semantics. Plain C types, shared
 * by the glue (cuda/loss.c) and the .cu file; each returns a cudaError_t (0 = success),
 * runs on the given stream and does not synchronise. */
#ifndef CR_CUDA_KERNELS_LOSS_H
#define CR_CUDA_KERNELS_LOSS_H

#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One loss call. The input x is contiguous [N, C, inner] (f32, or f64 when `f64`):
 * log-probabilities for nll, logits for cross entropy; position q = n*inner + j. The
 * target is either class indices t (contiguous i64 [N*inner]) or, for cross entropy,
 * probabilities p of x's shape and dtype (then t is NULL). */
typedef struct crk_loss {
    int64_t N, C, inner;
    int f64, cross_entropy, reduction; /* reduction: 0 none, 1 mean, 2 sum */
    const void *x, *p;
    const int64_t *t;
    int64_t ignore;
    double eps; /* label smoothing (cross entropy) */
    /* forward: [N*inner] losses (none) or the 0-dim mean/sum, x's dtype */
    void *out;
    /* backward: the incoming grad as f64, [N*inner] (none) or one value, in device
     * memory (g) or, when g is NULL, g_value; count is the mean's divisor; dx and dp
     * (x's shape and dtype) may each be NULL */
    const double *g;
    double g_value, count;
    void *dx, *dp;
} crk_loss;

/* What the forward leaves at the start of its scratch memory for the host: the first
 * flat position whose class target is outside [0, C) and not ignore_index (UINT64_MAX
 * when none), and the number of positions that are not ignored. */
typedef struct crk_loss_result {
    unsigned long long bad_position;
    double count;
} crk_loss_result;

/* Bytes of device scratch the forward needs (a crk_loss_result, then partial sums). */
size_t crk_loss_scratch_bytes(const crk_loss *p);
/* The loss per position, then their sum or mean in f64 in a fixed order (the result
 * does not depend on timing). */
int crk_loss_forward(const crk_loss *p, void *scratch, cudaStream_t stream);
/* dx (and dp for probability targets) as cr_cpu_*_backward computes them. */
int crk_loss_backward(const crk_loss *p, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
