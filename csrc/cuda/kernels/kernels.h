/* kernels.h — the launchers of crescent's own CUDA kernels, in plain C types so that the
 * C glue (the .c files of csrc/cuda) and the .cu files share them. Each returns a
 * cudaError_t (0 = success) and runs on the given stream; none synchronises. */
#ifndef CR_CUDA_KERNELS_H
#define CR_CUDA_KERNELS_H

#include <cuda_runtime.h>
#include <stdint.h>

#include "gpu_chunks.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { CRK_MAX_DIMS = 8, CRK_MAX_ARGS = 4 };

/* Operands broadcast to the output's shape (operand 0), dims merged as in ops/iter.h;
 * strides in bytes. An operand whose bit is set in host_scalar is a number held in
 * scalar[k] (a 0-dim cpu tensor next to GPU tensors). dtype: a cr_dtype value. */
typedef struct crk_iter {
    int ndim, nargs;
    int64_t numel;
    int64_t shape[CRK_MAX_DIMS];
    int64_t stride[CRK_MAX_ARGS][CRK_MAX_DIMS];
    char *base[CRK_MAX_ARGS];
    int dtype[CRK_MAX_ARGS];
    unsigned host_scalar;
    double scalar[CRK_MAX_ARGS];
} crk_iter;

/* The arithmetic type a kernel computes in: f32 for f32/f16/bf16, f64 when an operand is
 * f64, i64 for integer and bool work. */
typedef enum { CRK_F32 = 0, CRK_F64, CRK_I64 } crk_compute;

/* Elementwise ops. Operand 1.. are the inputs; AXPY and SCALE read operand 0 too
 * (in place: out += p0 * in1, out *= in1). WHERE: in1 ? in2 : in3. MASKED_FILL:
 * in2 ? p0 : in1. CLAMP: p0/p1 bounds, p2/p3 whether each applies. FILL: p0. */
typedef enum {
    CRK_COPY = 0, CRK_FILL, CRK_AXPY, CRK_SCALE,
    CRK_ADD, CRK_SUB, CRK_MUL, CRK_DIV, CRK_POW, CRK_MAXIMUM, CRK_MINIMUM,
    CRK_EQ, CRK_NE, CRK_LT, CRK_LE, CRK_GT, CRK_GE, CRK_LOGICAL_AND, CRK_LOGICAL_OR,
    CRK_LOGICAL_NOT, CRK_NEG, CRK_ABS, CRK_SIGN, CRK_EXP, CRK_LOG, CRK_SQRT, CRK_RSQRT,
    CRK_SIGMOID, CRK_TANH, CRK_RELU, CRK_GELU, CRK_GELU_TANH, CRK_POW_SCALAR, CRK_CLAMP,
    CRK_WHERE, CRK_MASKED_FILL,
    CRK_RELU_BACKWARD, CRK_ADD_RELU, CRK_SIGMOID_BACKWARD, CRK_TANH_BACKWARD, CRK_GELU_BACKWARD,
    CRK_GELU_TANH_BACKWARD,
    CRK_OP_COUNT
} crk_op;

int crk_elementwise(crk_op op, crk_compute compute, const crk_iter *it, const double *params,
                    cudaStream_t stream);

/* Sum over the reduced dims of a reduction plan (see ops/reduce_impl.h): out[k] =
 * scale * sum of the R elements of output k, accumulated in f64. Strides in elements. */
typedef struct crk_reduce {
    int nk, nr;
    int64_t kshape[CRK_MAX_DIMS], kstride[CRK_MAX_DIMS];
    int64_t rshape[CRK_MAX_DIMS], rstride[CRK_MAX_DIMS];
    int64_t K, R;
    const char *in;
    int in_dtype;
    char *out; /* K contiguous elements */
    int out_dtype;
} crk_reduce;

int crk_sum(const crk_reduce *r, double scale, cudaStream_t stream);

/* Batch norm over x viewed as M = N*S rows of C channels: channels-last (element (m, c)
 * at m*C + c) or row-major NCHW (at (m/S)*C*S + c*S + m%S). x and y f32, f64 (`f64`) or a
 * half (`half`: CRK_BN_F16 or CRK_BN_BF16); params (weight, bias, stats) f64 with f64 x,
 * else f32; sums in f64 (`acc`: 2*C doubles of scratch). */
enum { CRK_BN_F16 = 1, CRK_BN_BF16 = 2 };
typedef struct crk_bn {
    int64_t M, C, S;
    int channels_last, f64, half, relu;
    const void *x, *w, *b; /* w, b may be NULL (1 and 0) */
    void *y;
    void *mean, *invstd; /* [C] saved statistics */
    void *running_mean, *running_var; /* [C] or NULL */
    double momentum, eps;
    int use_batch, update_running;
    double *acc;
} crk_bn;
int crk_batch_norm_forward(const crk_bn *p, cudaStream_t stream);

/* gx = d/dx, gw = sum(g * xhat), gb = sum(g) (any of them NULL to skip); g masked by
 * y > 0 when the forward fused a relu (y given). g, x, y, gx in x's dtype (`f64`, `half`
 * as crk_bn), w, mean, invstd, gw, gb in the params' dtype. */
typedef struct crk_bn_backward {
    int64_t M, C, S;
    int channels_last, f64, half, use_batch;
    const void *g, *x, *w, *mean, *invstd, *y;
    void *gx, *gw, *gb;
    double *acc;
} crk_bn_backward;
int crk_batch_norm_backward(const crk_bn_backward *p, cudaStream_t stream);

/* Softmax or log-softmax (is_log) of a contiguous f32/f64 (`f64`) tensor viewed as
 * [outer, C, inner], along C; sums in f64, as the cpu reference. */
int crk_softmax(const void *x, void *y, int64_t outer, int64_t C, int64_t inner, int f64, int is_log,
                cudaStream_t stream);

/* Fused optimizer updates over chunks of parameters (gpu/gpu_chunks.h; the list in
 * device memory, at most 2^31 - 1 chunks): one block per chunk. */
int crk_optim_update(const cr_gpu_optim_chunk *chunks, int64_t n, cudaStream_t stream);

/* out[k] (device memory) = sum |x|^p over chunk k (p = 2: squares; INFINITY: max |x|, NaN sticking). */
int crk_pow_sums(const cr_gpu_norm_chunk *chunks, int64_t n, double p, double *out, cudaStream_t stream);

/* 2-D pooling over `planes` planes of h x w, as ops/pool.c: row-major, or for max pooling
 * also channels-last (planes = N * channels, element (n, c, r, q) at ((n h + r) w + q)
 * channels + c), for outputs and indices too. dtype (a cr_dtype value): f32 or f64, and
 * for max pooling also f16 or bf16. */
typedef struct crk_pool {
    int64_t planes, h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw, channels;
    int count_include_pad, dtype, channels_last;
} crk_pool;
int crk_max_pool2d(const crk_pool *g, const void *x, void *y, int64_t *ind, cudaStream_t stream);
int crk_max_pool2d_backward(const crk_pool *g, const void *gy, const int64_t *ind, void *gx,
                            cudaStream_t stream);
int crk_avg_pool2d(const crk_pool *g, const void *x, void *y, cudaStream_t stream);
int crk_avg_pool2d_backward(const crk_pool *g, const void *gy, void *gx, cudaStream_t stream);
int crk_adaptive_avg_pool2d(const crk_pool *g, const void *x, void *y, cudaStream_t stream);
int crk_adaptive_avg_pool2d_backward(const crk_pool *g, const void *gy, void *gx,
                                     cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
