/* reduce_impl.h — the reduction plan shared by reduction kernels (private to csrc/ops):
 * an input split into kept dims (one output element each) and reduced dims (walked by an
 * odometer, no division per element), and a driver that runs an accumulator over the
 * plan, splitting the reduced range across threads when there are few outputs. */
#ifndef CR_REDUCE_IMPL_H
#define CR_REDUCE_IMPL_H

#include "internal.h"

typedef struct {
    int nk, nr;
    int64_t kshape[CR_MAX_DIMS], kstride[CR_MAX_DIMS]; /* element strides in the input */
    int64_t rshape[CR_MAX_DIMS], rstride[CR_MAX_DIMS];
    int64_t K, R; /* number of outputs, elements reduced into each */
} cr_reduce_plan;

/* dims: bitmask of reduced dims (0 = all). */
void cr_reduce_plan_init(cr_reduce_plan *p, const cr_tensor *t, uint32_t dims);
/* Input element offset (relative to the view's first element) of kept index k. */
int64_t cr_reduce_kept_offset(const cr_reduce_plan *p, int64_t k);
/* Validates dims against t (bits past ndim are an error) and returns the output shape. */
cr_status cr_reduce_out_shape(const char *op, const cr_tensor *t, uint32_t dims, bool keepdim,
                              int *ndim, int64_t *shape);

/* Sum of the R reduced elements starting at `base` (f64 accumulation for floats). */
double cr_reduce_sum_f64(const cr_reduce_plan *p, const char *base, cr_dtype dt);

/* Grad of a reduction over `dims` of an input described by `in`: g reshaped to keepdim
 * form and expanded back (a view; no copy). */
cr_status cr_reduce_grad_expand(cr_tensor **out, cr_tensor *g, const cr_input_meta *in,
                                uint32_t dims);

/* ---- accumulator driver ---------------------------------------------------------
 * An op describes its accumulator by four functions; the driver walks each output's
 * reduced elements as runs of the innermost reduced dim (`seg`: n elements, `stride`
 * elements apart, the first at flat position `pos` of the reduced range). With fewer
 * outputs than threads and much work, the outermost reduced dim is cut into chunks whose
 * accumulators are merged in order, so ties keep the first position. */
typedef struct cr_reduce_acc {
    double v0, v1, v2;  /* op-defined: sum; (max, sum of exp); (count, mean, M2) */
    int64_t pos;        /* flat reduced position of `best` (max/min) */
    const char *best;   /* the best element so far (max/min), NULL before the first */
    const void *ctx;    /* the op's parameters, read-only */
    int64_t k;          /* the output this accumulator belongs to (set before init) */
} cr_reduce_acc;

typedef struct cr_reduce_def {
    void (*init)(cr_reduce_acc *a);
    void (*seg)(cr_reduce_acc *a, const char *p, int64_t stride, int64_t n, int64_t pos);
    void (*merge)(cr_reduce_acc *into, const cr_reduce_acc *from); /* from follows into */
    void (*done)(const cr_reduce_acc *a, int64_t k);               /* writes output k */
} cr_reduce_def;

void cr_reduce_run(const cr_reduce_plan *p, const char *base, const cr_reduce_def *def,
                   const void *ctx, cr_dtype dt);

/* Tensor handles for the derivative helpers: a new contiguous tensor of t's shape with
 * dtype dt (t converted, grad recording off). */
cr_status cr_reduce_contig_as(cr_tensor **out, cr_tensor *t, cr_dtype dt);

/* gin = expand(g / ties) * mask for max-like reductions: the grad split evenly among the
 * elements equal to the result (with `absolute`, |x| is compared and the mask is sign(x),
 * for the inf-norm). x and best are the saved input and result. */
cr_status cr_reduce_tie_grad(cr_tensor **gin, cr_tensor *g, cr_tensor *x, cr_tensor *best,
                             const cr_input_meta *m, uint32_t dims, bool absolute);

/* The derivative rules composed of ops (reduce_grad_ops.c), for inputs off the cpu, where
 * the rules above cannot walk the memory: max/min along `dim` (g to the saved index),
 * the tie split of cr_reduce_tie_grad, and gin = expand(g) * w(x, result) for the norms
 * and logsumexp. */
cr_status cr_reduce_index_grad_ops(cr_tensor **gin, cr_tensor *g, cr_tensor *idx,
                                   const cr_input_meta *m, int64_t dim);
cr_status cr_reduce_tie_grad_ops(cr_tensor **gin, cr_tensor *g, cr_tensor *x, cr_tensor *best,
                                 const cr_input_meta *m, uint32_t dims, bool absolute);
typedef enum {
    CR_REDUCE_W_NORM2,  /* x / norm (0 where norm is not > 0) */
    CR_REDUCE_W_NORM1,  /* sign(x) */
    CR_REDUCE_W_NORMP,  /* sign(x) (|x| / norm)^(p-1) (0 where norm <= 0 or x == 0) */
    CR_REDUCE_W_LSE,    /* exp(x - lse) (0 where lse is -inf) */
} cr_reduce_weight;
cr_status cr_reduce_weight_grad_ops(cr_tensor **gin, cr_tensor *g, cr_tensor *x, cr_tensor *res,
                                    const cr_input_meta *m, uint32_t dims, cr_reduce_weight kind,
                                    double p);

/* exp for f32 fast paths (softmax, cross_entropy): Cody-Waite range reduction and the
 * Cephes degree-6 polynomial, within 2 ulp of expf on the whole range, written so that
 * loops calling it vectorise (libm's expf does not). Underflow gives 0, NaN stays NaN. */
static inline float cr_expf_fast(float x) {
    float xc = x < -104.0f ? -104.0f : x > 88.8f ? 88.8f : x;
    float n = __builtin_rintf(xc * 1.44269504088896341f);
    float r = __builtin_fmaf(n, -0.693359375f, xc);
    r = __builtin_fmaf(n, 2.12194440e-4f, r);
    float p = 1.9875691500e-4f;
    p = __builtin_fmaf(p, r, 1.3981999507e-3f);
    p = __builtin_fmaf(p, r, 8.3334519073e-3f);
    p = __builtin_fmaf(p, r, 4.1665795894e-2f);
    p = __builtin_fmaf(p, r, 1.6666665459e-1f);
    p = __builtin_fmaf(p, r, 5.0000001201e-1f);
    p = __builtin_fmaf(p, r * r, r) + 1.0f;
    /* 2^n as two factors, so n = 128 (near FLT_MAX) and n < -126 (denormals) work */
    int32_t ni = (int32_t)n, n1 = ni >> 1, n2 = ni - n1;
    union {
        int32_t i;
        float f;
    } s1 = {.i = (int32_t)((uint32_t)(n1 + 127) << 23)}, s2 = {.i = (int32_t)((uint32_t)(n2 + 127) << 23)};
    float y = p * s1.f * s2.f;
    return x != x ? x : y;
}

#endif
