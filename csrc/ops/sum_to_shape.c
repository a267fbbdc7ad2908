/* sum_to_shape.c — the gradient of broadcasting: sum a grad over the dims that were
 * broadcast so it matches its input's shape again. */
#include "internal.h"

cr_status cr_sum_to_shape(cr_tensor **out, cr_tensor *g, int ndim, const int64_t *shape) {
    if (g->ndim == ndim && !memcmp(g->shape, shape, sizeof(int64_t) * (size_t)ndim)) {
        cr_tensor_retain(g);
        *out = g;
        return CR_OK;
    }
    int lead = g->ndim - ndim;
    CR_ASSERT(lead >= 0);
    uint32_t dims = 0;
    for (int d = 0; d < g->ndim; d++) {
        int ds = d - lead;
        if (ds < 0 || (shape[ds] == 1 && g->shape[d] != 1)) dims |= 1u << d;
    }
    cr_tensor *summed;
    cr_status st;
    if (dims) {
        if ((st = cr_op_sum(&summed, g, dims, true))) return st;
    } else {
        cr_tensor_retain(g);
        summed = g;
    }
    st = cr_op_reshape(out, summed, ndim, shape);
    cr_tensor_free(summed);
    return st;
}
