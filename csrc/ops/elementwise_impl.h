/* elementwise_impl.h — what the elementwise kernels share (private to csrc/ops). */
#ifndef CR_ELEMENTWISE_IMPL_H
#define CR_ELEMENTWISE_IMPL_H

#include "iter.h"

/* Result dtype of a binary op: promotion where a 0-dim operand does not widen a tensor
 * of its own category (x_f16 * 2.0 stays f16), as in PyTorch. */
cr_dtype cr_result_dtype(const cr_tensor *a, const cr_tensor *b);
/* New reference to t converted to dt (recorded, so grads flow back through it). */
cr_status cr_cast_if_needed(cr_tensor **out, cr_tensor *t, cr_dtype dt);
cr_status cr_check_binary(const char *op, cr_tensor *a, cr_tensor *b);
/* Broadcast a and b, cast both to `compute`, allocate a `result` output, dispatch and
 * record (saving the cast inputs in save_in). */
cr_status cr_binary_op(cr_tensor **out, cr_op op, cr_tensor *a, cr_tensor *b,
                       cr_dtype compute, cr_dtype result, unsigned save_in);
/* Kernel body for 2-input ops: iterates out, in[0], in[1]; ctx = &in[0]->dtype. */
cr_status cr_run_binary(cr_call *c, cr_loop_fn fn);

/* One input, one output of dtype `result`; c.f[] carries scalar parameters. */
cr_status cr_unary_op(cr_tensor **out, cr_op op, cr_tensor *t, cr_dtype result,
                      const double *params, int nparams, unsigned save_in, unsigned save_out);
/* Kernel body for 1-input ops: iterates out, in[0]; ctx points at the cr_call. */
cr_status cr_run_unary(cr_call *c, cr_loop_fn fn);

#endif
