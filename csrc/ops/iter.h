/* iter.h — strided N-operand iteration for elementwise kernels. Operands are broadcast
 * to the output shape (stride 0), adjacent dims that are contiguous for every operand are
 * merged, and the work is cut into row segments for an inner typed loop. The outer range
 * is split across OpenMP threads when there is enough work. */
#ifndef CR_ITER_H
#define CR_ITER_H

#include "internal.h"

enum { CR_ITER_MAX_ARGS = 4 };

typedef struct {
    int ndim;
    int nargs;
    int64_t numel;
    int64_t shape[CR_MAX_DIMS];
    int64_t stride[CR_ITER_MAX_ARGS][CR_MAX_DIMS]; /* bytes */
    char *base[CR_ITER_MAX_ARGS];
} cr_iter;

/* Inner loop over n elements: ptrs[k] advance by strides[k] bytes. */
typedef void (*cr_loop_fn)(char **ptrs, const int64_t *strides, int64_t n, const void *ctx);

/* args[0] is the output (its shape is the iteration shape); the rest broadcast to it. */
void cr_iter_init(cr_iter *it, int nargs, cr_tensor *const *args);
void cr_iter_run(const cr_iter *it, cr_loop_fn fn, const void *ctx);

#endif
