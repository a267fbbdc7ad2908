/* reduce_grad_ops.c — the derivative rules of max/min along a dim, amax/amin, the
 * inf-norm, the p-norms and logsumexp composed of ops, for inputs that are not on the cpu.
 * The cpu rules (reduce_minmax.c, reduce_stats.c) walk host memory; these run wherever
 * the ops they use have kernels (elementwise ops, sum, arange). They build the cpu rules'
 * masks and tie counts exactly; the weights are computed in the input's dtype instead of
 * in f64 and rounded, so they may differ in the last bit. */
#include <math.h>

#include "reduce_impl.h"

enum { TEMPS = 16 };

static void free_temps(cr_tensor **t) {
    for (int k = 0; k < TEMPS; k++) cr_tensor_free(t[k]);
}

/* The input's shape with the reduced dims (a mask; 0 = all) set to 1. */
static void keepdim_shape(const cr_input_meta *m, uint32_t dims, int64_t *shape) {
    for (int d = 0; d < m->ndim; d++)
        shape[d] = (dims == 0 || (dims & (1u << d))) ? 1 : m->shape[d];
}

/* max/min along `dim`: g goes to the saved index of each slice, zeros elsewhere:
 * masked_fill(expand(g), arange(n) != index, 0). */
cr_status cr_reduce_index_grad_ops(cr_tensor **gin, cr_tensor *g, cr_tensor *idx,
                                   const cr_input_meta *m, int64_t dim) {
    cr_tensor *t[TEMPS] = {0};
    cr_status st;
    if (m->ndim == 0) return cr_reduce_contig_as(gin, g, m->dtype);
    int64_t kshape[CR_MAX_DIMS], pshape[CR_MAX_DIMS];
    for (int d = 0; d < m->ndim; d++) {
        kshape[d] = d == dim ? 1 : m->shape[d];
        pshape[d] = d == dim ? m->shape[d] : 1;
    }
    if (!(st = cr_op_to(&t[0], g, m->dtype)) &&
        !(st = cr_op_reshape(&t[1], t[0], m->ndim, kshape)) &&
        !(st = cr_op_expand(&t[2], t[1], m->ndim, m->shape)) &&
        !(st = cr_op_reshape(&t[3], idx, m->ndim, kshape)) &&
        !(st = cr_op_arange(&t[4], 0, (double)m->shape[dim], 1, CR_DT_I64, m->device.type,
                            m->device.index)) &&
        !(st = cr_op_reshape(&t[5], t[4], m->ndim, pshape)) &&
        !(st = cr_op_ne(&t[6], t[5], t[3])))
        st = cr_op_masked_fill(gin, t[2], t[6], 0.0);
    free_temps(t);
    return st;
}

/* amax/amin and the inf-norm: w = (key == best) or both NaN, key = x or |x|, the mask
 * sign(x) for |x|; gin = expand(g / max(1, ties)) * w. */
cr_status cr_reduce_tie_grad_ops(cr_tensor **gin, cr_tensor *g, cr_tensor *x, cr_tensor *best,
                                 const cr_input_meta *m, uint32_t dims, bool absolute) {
    cr_tensor *t[TEMPS] = {0}, *w;
    int64_t kshape[CR_MAX_DIMS];
    keepdim_shape(m, dims, kshape);
    cr_status st = absolute ? cr_op_abs(&t[0], x) : cr_op_to(&t[0], x, x->dtype);
    if (st) return st;
    /* tie (t[6]): key == best, or both NaN */
    if ((st = cr_reduce_grad_expand(&t[1], best, m, dims)) || (st = cr_op_eq(&t[2], t[0], t[1])) ||
        (st = cr_op_ne(&t[3], t[0], t[0])) || (st = cr_op_ne(&t[4], t[1], t[1])) ||
        (st = cr_op_logical_and(&t[5], t[3], t[4])) || (st = cr_op_logical_or(&t[6], t[2], t[5])))
        goto done;
    /* the mask w: the ties as 1, or as sign(x) for |x| */
    if ((st = cr_op_to(&t[7], t[6], m->dtype))) goto done;
    w = t[7];
    if (absolute) {
        if ((st = cr_op_sign(&t[8], x)) || (st = cr_op_mul(&t[9], t[8], t[7]))) goto done;
        w = t[9];
    }
    /* g divided by the tie count, at least 1 (a NaN result may tie with nothing) */
    if ((st = cr_op_sum(&t[10], t[6], dims, true)) ||
        (st = cr_op_clamp(&t[11], t[10], true, 1.0, false, 0.0)) ||
        (st = cr_op_to(&t[12], t[11], g->dtype)) || (st = cr_op_reshape(&t[13], g, m->ndim, kshape)) ||
        (st = cr_op_div(&t[14], t[13], t[12])) || (st = cr_op_expand(&t[15], t[14], m->ndim, m->shape)))
        goto done;
    st = cr_op_mul(gin, t[15], w);
done:
    free_temps(t);
    return st;
}

/* gin = expand(g) * w(x, result): the cpu's w_norm2, w_norm1, w_normp and w_lse. */
cr_status cr_reduce_weight_grad_ops(cr_tensor **gin, cr_tensor *g, cr_tensor *x, cr_tensor *res,
                                    const cr_input_meta *m, uint32_t dims, cr_reduce_weight kind,
                                    double p) {
    cr_tensor *t[TEMPS] = {0};
    cr_tensor *re, *w = NULL;
    cr_status st;
    /* t[1]: the number the result is compared with (-inf for logsumexp, else 0) */
    if ((st = cr_reduce_grad_expand(&t[0], res, m, dims)) ||
        (st = cr_tensor_scalar(&t[1], kind == CR_REDUCE_W_LSE ? -INFINITY : 0.0, x->dtype)))
        goto done;
    re = t[0];
    switch (kind) {
    case CR_REDUCE_W_NORM2: /* x / norm, 0 where the norm is not > 0 */
        if ((st = cr_op_div(&t[2], x, re)) || (st = cr_op_gt(&t[3], re, t[1])) ||
            (st = cr_op_logical_not(&t[4], t[3])) ||
            (st = cr_op_masked_fill(&t[5], t[2], t[4], 0.0)))
            goto done;
        w = t[5];
        break;
    case CR_REDUCE_W_NORM1: /* sign(x) */
        if ((st = cr_op_sign(&t[2], x))) goto done;
        w = t[2];
        break;
    case CR_REDUCE_W_NORMP: /* sign(x) (|x| / norm)^(p-1), 0 where norm <= 0 or x == 0 */
        if ((st = cr_op_abs(&t[2], x)) || (st = cr_op_div(&t[3], t[2], re)) ||
            (st = cr_op_pow_scalar(&t[4], t[3], p - 1)) || (st = cr_op_sign(&t[5], x)) ||
            (st = cr_op_mul(&t[6], t[5], t[4])) || (st = cr_op_le(&t[7], re, t[1])) ||
            (st = cr_op_eq(&t[8], x, t[1])) || (st = cr_op_logical_or(&t[9], t[7], t[8])) ||
            (st = cr_op_masked_fill(&t[10], t[6], t[9], 0.0)))
            goto done;
        w = t[10];
        break;
    case CR_REDUCE_W_LSE: /* exp(x - lse), 0 where lse is -inf */
        if ((st = cr_op_sub(&t[2], x, re)) ||
            (st = cr_op_exp(&t[3], t[2])) || (st = cr_op_eq(&t[4], re, t[1])) ||
            (st = cr_op_masked_fill(&t[5], t[3], t[4], 0.0)))
            goto done;
        w = t[5];
        break;
    }
    if (!(st = cr_reduce_grad_expand(&t[11], g, m, dims))) st = cr_op_mul(gin, t[11], w);
done:
    free_temps(t);
    return st;
}
