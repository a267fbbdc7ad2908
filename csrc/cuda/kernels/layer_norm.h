/* layer_norm.h — launchers of the layer-norm kernels (layer_norm.cu), with
 * ops/layer_norm.c's semantics: x is `rows` contiguous rows of D elements (f32, or f64
 * when `f64`), weight and bias are [D] in x's dtype, statistics are summed in f64. Plain
 * C types, shared by the glue (cuda/layer_norm.c) and the .cu file; each returns a
 * cudaError_t (0 = success), runs on the given stream and does not synchronise. */
#ifndef CR_CUDA_KERNELS_LAYER_NORM_H
#define CR_CUDA_KERNELS_LAYER_NORM_H

#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* y = (x - mean) * rstd * w + b per row, rstd = 1 / sqrt(biased var + eps); mean and
 * rstd [rows] are kept for the backward. w and b may be NULL. */
typedef struct crk_layer_norm {
    int64_t rows, D;
    int f64;
    const void *x, *w, *b;
    void *y, *mean, *rstd;
    double eps;
} crk_layer_norm;
int crk_layer_norm_forward(const crk_layer_norm *p, cudaStream_t stream);

/* gx = rstd * (g*w - mean(g*w) - xhat * mean(g*w * xhat)) per row, gw = sum over rows of
 * g * xhat, gb = sum of g; any of gx, gw, gb may be NULL (w NULL: 1). gw and gb are
 * summed per chunk of rows into f64 scratch, then over the chunks in order, so they do
 * not depend on timing. */
typedef struct crk_layer_norm_grad {
    int64_t rows, D;
    int f64;
    const void *g, *x, *w, *mean, *rstd;
    void *gx, *gw, *gb;
} crk_layer_norm_grad;
/* Bytes of device scratch the backward needs (0 when neither gw nor gb is asked for). */
size_t crk_layer_norm_backward_scratch_bytes(const crk_layer_norm_grad *p);
int crk_layer_norm_backward(const crk_layer_norm_grad *p, void *scratch, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
