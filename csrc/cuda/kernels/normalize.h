/* normalize.h — launchers of the L2-normalisation kernels (normalize.cu), with
 * ops/normalize.c's semantics: x is [outer, L, inner] contiguous (f32, or f64 when
 * `f64`), normalised along L; the norms [outer, inner] are summed in f64. Plain C types,
 * shared by the glue (cuda/normalize.c) and the .cu file; each returns a cudaError_t
 * (0 = success), runs on the given stream and does not synchronise. */
#ifndef CR_CUDA_KERNELS_NORMALIZE_H
#define CR_CUDA_KERNELS_NORMALIZE_H

#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Forward: nrm = ||x||, y = x / max(nrm, eps). Backward (g, y, nrm given; out gx):
 * gx = (g - y * sum(g y)) / nrm where nrm >= eps, else g / eps. */
typedef struct crk_normalize {
    int64_t outer, L, inner;
    int f64;
    double eps;
    const void *x;   /* forward: x; backward: g */
    const void *y;   /* backward: the forward's y */
    void *out;       /* forward: y; backward: gx */
    void *nrm;       /* forward: written; backward: read */
} crk_normalize;
int crk_normalize_forward(const crk_normalize *p, cudaStream_t stream);
int crk_normalize_backward(const crk_normalize *p, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
