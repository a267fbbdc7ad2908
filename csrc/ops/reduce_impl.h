/* reduce_impl.h — the reduction plan shared by reduction kernels (private to csrc/ops):
 * an input split into kept dims (one output element each) and reduced dims (walked by an
 * odometer, no division per element). */
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

#endif
