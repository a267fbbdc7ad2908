/* loss_impl.h — what the loss kernels of every device share (ops/loss.c and the CUDA
 * glue cuda/loss.c): the [N, C, inner] view of a loss input and the error for a class
 * target out of range, so that each device reports it with the same words. */
#ifndef CR_LOSS_IMPL_H
#define CR_LOSS_IMPL_H

#include "internal.h"

/* Input [N, C, d...] seen as [N, C, inner] ([C] is one sample): positions = N * inner,
 * element (n, c, j) at (n*C + c)*inner + j. */
typedef struct {
    int64_t N, C, inner;
} cr_loss_shape;

static inline cr_loss_shape cr_loss_shape_of(int ndim, const int64_t *shape) {
    cr_loss_shape s = {ndim >= 2 ? shape[0] : 1, ndim == 1 ? shape[0] : shape[1], 1};
    for (int d = 2; d < ndim; d++) s.inner *= shape[d];
    return s;
}

/* The failure for class target `value` at flat position `pos` outside [0, C) and not
 * ignore_index. */
cr_status cr_loss_target_error(const char *op, int64_t value, int64_t pos, int64_t C,
                               int64_t ignore);

#endif
