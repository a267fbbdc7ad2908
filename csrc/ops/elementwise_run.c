/* elementwise_run.c — what every elementwise file shares (elementwise.c, compare.c,
 * unary.c, unary_math.c, where.c call it, and it calls none of them): promotion with
 * weak 0-dim operands, casts to the compute dtype, the argument checks and entry of
 * binary and unary ops, and the runners that drive a typed inner loop over an iter.c
 * iteration. */
#include "elementwise_impl.h"

/* ---- promotion: a 0-dim operand does not widen a tensor of its own category ---- */
static int category(cr_dtype dt) {
    return dt == CR_DT_BOOL ? 0 : cr_dtype_is_float(dt) ? 2 : 1;
}

cr_dtype cr_result_dtype(const cr_tensor *a, const cr_tensor *b) {
    bool sa = a->ndim == 0, sb = b->ndim == 0;
    if (sa == sb) return cr_dtype_promote(a->dtype, b->dtype);
    const cr_tensor *t = sa ? b : a, *s = sa ? a : b;
    if (category(s->dtype) <= category(t->dtype)) return t->dtype;
    return category(s->dtype) == 2 ? CR_DT_F32 : CR_DT_I64;
}

/* The cast is recorded like any op, so grads flow back through it to the original. */
cr_status cr_cast_if_needed(cr_tensor **out, cr_tensor *t, cr_dtype dt) {
    if (t->dtype == dt) {
        cr_tensor_retain(t);
        *out = t;
        return CR_OK;
    }
    return cr_op_to(out, t, dt);
}

cr_status cr_binary_op(cr_tensor **out, cr_op op, cr_tensor *a, cr_tensor *b,
                       cr_dtype compute, cr_dtype result, unsigned save_in, unsigned save_out) {
    const char *name = cr_op_name(op);
    *out = NULL;
    cr_call c;
    cr_status st = cr_call_init(&c, op, 2, 1);
    int ndim;
    int64_t shape[CR_MAX_DIMS];
    if ((st = cr_broadcast_shapes(name, a, b, &ndim, shape))) return st;
    cr_tensor *ca = NULL, *cb = NULL;
    if ((st = cr_cast_if_needed(&ca, a, compute))) return st;
    if ((st = cr_cast_if_needed(&cb, b, compute))) {
        cr_tensor_free(ca);
        return st;
    }
    c.in[0] = ca;
    c.in[1] = cb;
    /* the layout of an input with the output's shape (channels-last stays so) */
    st = cr_tensor_alloc_as(&c.out[0], ndim, shape, result,
                            cr_tensor_dev(cr_is_host_scalar(a) ? b : a),
                            cr_tensor_is_channels_last(a) ? a : b);
    if (st) cr_call_drop_outs(&c);
    else st = cr_call_finish(out, &c, save_in, save_out);
    cr_tensor_free(ca);
    cr_tensor_free(cb);
    return st;
}

cr_status cr_check_binary(const char *op, cr_tensor *a, cr_tensor *b) {
    CR_CHECK_TENSOR(op, a, "self");
    CR_CHECK_TENSOR(op, b, "other");
    if (cr_is_host_scalar(a) || cr_is_host_scalar(b)) return CR_OK; /* x_cuda * 2 */
    return cr_check_same_device(op, a, b);
}

cr_status cr_run_binary(cr_call *c, cr_loop_fn fn) {
    cr_tensor *args[3] = {c->out[0], c->in[0], c->in[1]};
    cr_iter it;
    cr_iter_init(&it, 3, args);
    cr_dtype dt = c->in[0]->dtype;
    cr_iter_run(&it, fn, &dt);
    return CR_OK;
}

cr_status cr_unary_op(cr_tensor **out, cr_op op, cr_tensor *t, cr_dtype result,
                      const double *params, int nparams, unsigned save_in, unsigned save_out) {
    *out = NULL;
    CR_CHECK_TENSOR(cr_op_name(op), t, "self");
    cr_call c;
    cr_status st = cr_call_init(&c, op, 1, 1);
    for (int k = 0; k < nparams && k < CR_CALL_MAX_F; k++) c.f[k] = params[k];
    c.in[0] = t;
    /* results keep a channels-last input's layout, except clone: contiguous() and
     * reshape() rely on it being row-major */
    if ((st = cr_tensor_alloc_as(&c.out[0], t->ndim, t->shape, result, cr_tensor_dev(t),
                                 op == CR_OP_CLONE ? NULL : t)))
        return st;
    return cr_call_finish(out, &c, save_in, save_out);
}

cr_status cr_run_unary(cr_call *c, cr_loop_fn fn) {
    cr_tensor *args[2] = {c->out[0], c->in[0]};
    cr_iter it;
    cr_iter_init(&it, 2, args);
    cr_iter_run(&it, fn, c);
    return CR_OK;
}
