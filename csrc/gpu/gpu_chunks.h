/* gpu_chunks.h — the work lists that the fused optimizer updates (csrc/optim) hand to the
 * CUDA backend: plain C, shared by the core, the backend's C glue and its kernels. One
 * entry is a chunk of one tensor (pointers already at the chunk's first element) with its
 * tensor's plan; see crescent_optim.h for the arithmetic. */
#ifndef CR_GPU_CHUNKS_H
#define CR_GPU_CHUNKS_H

#include <stdint.h>

typedef struct cr_gpu_optim_chunk {
    void *p, *buf1, *buf2;
    const void *g;
    int64_t n;
    int f64, adamw, nesterov, first; /* first: SGD momentum buffer created this step */
    double lr, gscale, wd, momentum, damp1;            /* SGD / LARS */
    double decay, step_size, bc2_sqrt, eps, w1, b2, w2; /* AdamW */
} cr_gpu_optim_chunk;

typedef struct cr_gpu_norm_chunk {
    const void *x;
    int64_t n;
    int f64;
} cr_gpu_norm_chunk;

#endif
