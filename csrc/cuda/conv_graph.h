/* conv_graph.h (cuda) — convolutions through cuDNN's graph API (conv_graph.c), for
 * conv.c, which keeps the legacy API for what this path does not take. */
#ifndef CR_CUDA_CONV_GRAPH_H
#define CR_CUDA_CONV_GRAPH_H

#include <cudnn.h>

#include "cuda_impl.h"

typedef enum { CR_CONV_FWD = 0, CR_CONV_BWD_DATA, CR_CONV_BWD_FILTER } cr_conv_dir;

/* One direction of a 2-D convolution: x [N, C, H, W] and y [N, K, P, Q] channels-last
 * (NHWC), w [K, C, R, S] channels-last (KRSC); y = conv(x, w) forward, x = the data grad
 * of y backward-data, w = the filter grad of y backward-filter (the written one is
 * overwritten). params: the conv call's ints (stride h, w, padding h, w, dilation h, w,
 * groups). *ran is false, with CR_OK, where this path does not take the problem (f64,
 * groups, deterministic mode, f32 with TF32 off, pointers not 16-byte aligned, no
 * engine), and then the caller runs the legacy API. */
cr_status cr_gpu_conv_graph(cudnnHandle_t h, int device, cr_conv_dir dir, const int64_t *params,
                            const cr_tensor *x, const cr_tensor *w, const cr_tensor *y, bool deterministic,
                            bool *ran);

#endif
