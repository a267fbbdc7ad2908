/* attention.h — launchers of the fused attention kernels (attention.cu), with
 * ops/attention.c's semantics: q [N, Tq, d], k [N, Tk, d], v [N, Tk, dv] contiguous (f32,
 * or f64 when `f64`), the heads n = b H + h; an optional mask read through strides along
 * (b, h, i, j) (kind 1: bool bytes, nonzero attends; kind 2: added to the scores, in the
 * compute dtype); causal hides key j > i; dropout keeps weight (n, i, j) when
 * uniform(Philox word (n Tq + i) Tk + j of (seed, counter)) >= p. Plain C types, shared
 * by the glue (cuda/attention.c) and the .cu file; each launcher returns a cudaError_t
 * (0 = success), runs on the given stream and does not synchronise. */
#ifndef CR_CUDA_KERNELS_ATTENTION_H
#define CR_CUDA_KERNELS_ATTENTION_H

#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct crk_attention {
    int64_t B, H, Tq, Tk, d, dv;
    int f64, causal, mask_kind;
    const void *mask;
    int64_t mask_strides[4];
    double scale, p; /* p > 0: dropout */
    uint64_t seed, counter;
    const void *q, *k, *v;
    void *o, *lse; /* forward outputs; the backward's inputs */
    const void *go; /* backward: the output's gradient */
    void *dq, *dk, *dv_; /* backward outputs, each may be NULL */
} crk_attention;

/* Whether the head sizes fit the kernels' shared-memory tiles (d + dv up to about 5,000
 * in f32 and 2,500 in f64). */
int crk_attention_fits(const crk_attention *p);
/* O and lse = m + log l per query row (-inf, and O = 0, for a row with every key masked). */
int crk_attention_forward(const crk_attention *p, cudaStream_t stream);
/* Bytes of device scratch the backward needs (the row terms D = dO . O). */
size_t crk_attention_backward_scratch_bytes(const crk_attention *p);
int crk_attention_backward(const crk_attention *p, void *scratch, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
