/* ops/conv.h — 2-D convolution and pooling on NCHW tensors (f32/f64). oneDNN is the
 * fast path for f32; the direct loops are the reference. Backward kernels are ops of
 * their own so each device can provide them (cuDNN on the GPU). */
#ifndef CR_OPS_CONV_H
#define CR_OPS_CONV_H

#define CR_OPS_CONV(X)                                                                                        \
    X(CONV2D, "conv2d", cr_cpu_conv2d, cr_gpu_conv2d, cr_grad_conv2d, HALF)                                   \
    X(CONV2D_BACKWARD, "conv2d_backward", cr_cpu_conv2d_backward, cr_gpu_conv2d_backward, cr_grad_none, KEEP) \
    X(MAX_POOL2D, "max_pool2d", cr_cpu_max_pool2d, cr_gpu_max_pool2d, cr_grad_max_pool2d, KEEP)               \
    X(MAX_POOL2D_BACKWARD, "max_pool2d_backward", cr_cpu_max_pool2d_backward,                                 \
      cr_gpu_max_pool2d_backward, cr_grad_none, KEEP)                                                         \
    X(AVG_POOL2D, "avg_pool2d", cr_cpu_avg_pool2d, cr_gpu_avg_pool2d, cr_grad_avg_pool2d, KEEP)               \
    X(AVG_POOL2D_BACKWARD, "avg_pool2d_backward", cr_cpu_avg_pool2d_backward,                                 \
      cr_gpu_avg_pool2d_backward, cr_grad_none, KEEP)                                                         \
    X(ADAPTIVE_AVG_POOL2D, "adaptive_avg_pool2d", cr_cpu_adaptive_avg_pool2d,                                 \
      cr_gpu_adaptive_avg_pool2d, cr_grad_adaptive_avg_pool2d, KEEP)                                          \
    X(ADAPTIVE_AVG_POOL2D_BACKWARD, "adaptive_avg_pool2d_backward", cr_cpu_adaptive_avg_pool2d_backward,      \
      cr_gpu_adaptive_avg_pool2d_backward, cr_grad_none, KEEP)                                                \

typedef struct {
    int64_t stride[2];
    int64_t padding[2];
    int64_t dilation[2];
    int64_t groups;
} cr_conv2d_params;

/* x [N, C, H, W] (or unbatched [C, H, W]), w [O, C/groups, kh, kw], bias [O] or NULL.
 * f16/bf16 inputs compute in f32. */
cr_status cr_op_conv2d(cr_tensor **out, cr_tensor *x, cr_tensor *w, cr_tensor *bias,
                       const cr_conv2d_params *p);
/* Grads of x, w and bias (each may be requested or not: pass NULL to skip). */
cr_status cr_op_conv2d_backward(cr_tensor **gx, cr_tensor **gw, cr_tensor **gb,
                                cr_tensor *gout, cr_tensor *x, cr_tensor *w,
                                const cr_conv2d_params *p);
/* How many convolution primitives oneDNN has run (forward and backward), so tests can
 * tell the fast path from a silent fallback to the reference loops. */
int64_t cr_conv2d_dnnl_runs(void);

typedef struct {
    int64_t kernel[2];
    int64_t stride[2]; /* 0 means = kernel */
    int64_t padding[2];
    int64_t dilation[2]; /* max pooling only; 0 means 1 */
    bool ceil_mode;
    bool count_include_pad; /* avg pooling only */
} cr_pool2d_params;

/* Pooling takes [N, C, H, W] or [C, H, W] (any leading dims: each H x W plane pools
 * alone). indices (i64, flat h*W+w within each plane) may be NULL when not wanted. */
cr_status cr_op_max_pool2d(cr_tensor **out, cr_tensor **indices, cr_tensor *x,
                           const cr_pool2d_params *p);
cr_status cr_op_avg_pool2d(cr_tensor **out, cr_tensor *x, const cr_pool2d_params *p);
cr_status cr_op_adaptive_avg_pool2d(cr_tensor **out, cr_tensor *x, int64_t out_h,
                                    int64_t out_w);
/* The backward ops: gx has gout's leading dims and planes of in_h x in_w. p: the
 * forward's params (the GPU's max backward gathers each input's grad from the windows
 * that hold it, so the indices must be those max_pool2d gave with these params). */
cr_status cr_op_max_pool2d_backward(cr_tensor **gx, cr_tensor *gout, cr_tensor *indices,
                                    int64_t in_h, int64_t in_w, const cr_pool2d_params *p);
cr_status cr_op_avg_pool2d_backward(cr_tensor **gx, cr_tensor *gout, int64_t in_h,
                                    int64_t in_w, const cr_pool2d_params *p);
cr_status cr_op_adaptive_avg_pool2d_backward(cr_tensor **gx, cr_tensor *gout, int64_t in_h,
                                             int64_t in_w);

#endif
