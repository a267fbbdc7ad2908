/* call.h — the ops layer's private view: calls (one op application, the unit of dispatch
 * and of autograd), the dispatch table, autocast, and the op helpers derivative rules
 * use. Above core/core.h; autograd/node.h adds the graph nodes. */
#ifndef CR_CALL_H
#define CR_CALL_H

#include "core.h"

typedef struct cr_node cr_node; /* autograd/node.h */

/* ---- calls: one op application, the unit of dispatch and of autograd ---- */
enum { CR_CALL_MAX_OUT = 4, CR_CALL_MAX_I = 24, CR_CALL_MAX_F = 6, CR_CALL_SMALL_IN = 4 };
typedef struct cr_call {
    cr_op op;
    int nin, nout;
    cr_tensor **in; /* points at in_small or a heap array (cat/stack) */
    cr_tensor *in_small[CR_CALL_SMALL_IN];
    cr_tensor *out[CR_CALL_MAX_OUT];
    int64_t i[CR_CALL_MAX_I]; /* integer parameters: dims, sizes, flags */
    double f[CR_CALL_MAX_F];  /* float parameters: alpha, eps, momentum */
} cr_call;

cr_status cr_call_init(cr_call *c, cr_op op, int nin, int nout);
void cr_call_release_ins(cr_call *c); /* frees a heap `in` array (not the tensors) */
/* Runs the kernel of c->op for the device of its first input. */
cr_status cr_dispatch(cr_call *c);
/* "<op name> backward", a static string (ops/registry.c). */
const char *cr_op_backward_name(cr_op op);
/* Releases c->out[*] after a failure. */
void cr_call_drop_outs(cr_call *c);

typedef cr_status (*cr_kernel_fn)(cr_call *c);

/* ---- autocast (ops/autocast.c) ----
 * An op whose row's autocast class is HALF or F32 wraps its entry:
 *     if (cr_autocast_get() == CR_DT_F32) return entry(out, a, b);
 *     cr_autocast_scope s;
 *     cr_status st = cr_autocast_begin(&s, CR_OP_MM, a, b, NULL);
 *     if (!st) st = entry(out, s.t[0], s.t[1]);
 *     cr_autocast_end(&s);
 * begin casts f32 inputs to the autocast dtype (HALF) or half inputs to f32 (F32), as
 * the op's row says, and turns autocast off until end, so the op's own inner ops are not
 * cast again. spec/autocast_spec.lua checks every op of those classes. */
typedef struct {
    cr_tensor *t[3];
    cr_dtype prev;
} cr_autocast_scope;
cr_status cr_autocast_begin(cr_autocast_scope *s, cr_op op, cr_tensor *a, cr_tensor *b, cr_tensor *c);
void cr_autocast_end(cr_autocast_scope *s);
/* Runs a cpu kernel on f32 copies of the call's f16/bf16 inputs and outputs and writes the
 * results back: the route of a kernel whose native half path declines a problem. */
cr_status cr_call_via_f32(cr_call *c, cr_kernel_fn kernel);

/* The tail of an op's entry point: cr_dispatch, then cr_autograd_record(c, save_in,
 * save_out); on success *out = c->out[0] (out may be NULL: the caller takes c->out),
 * on failure every output is released and *out untouched. */
cr_status cr_call_finish(cr_tensor **out, cr_call *c, unsigned save_in, unsigned save_out);

/* A tensor of `value` on `dev` (zero grads of the inputs a rule does not reach). */
cr_status cr_full_on(cr_tensor **out, int ndim, const int64_t *shape, double value, cr_dtype dt,
                     cr_device dev);
/* Sum `g` down to a broadcast source shape (grad of broadcasting). New reference. */
cr_status cr_sum_to_shape(cr_tensor **out, cr_tensor *g, int ndim, const int64_t *shape);

/* Derivative rule: given grads of the outputs (gout[0] is never NULL for a float output:
 * a missing one is zeros; gout[k > 0] is NULL when nothing reached that output, and
 * always for integer outputs such as indices or masks: rules read gout[0] only),
 * writes new references into gin[i] for each input i with n->edges[i].node != NULL.
 * Runs with grad recording off. */
typedef cr_status (*cr_grad_fn)(cr_node *n, cr_tensor **gout, cr_tensor **gin);
/* Listed for ops without a derivative; never called. */
cr_status cr_grad_none(cr_node *n, cr_tensor **gout, cr_tensor **gin);

extern cr_grad_fn cr_grad_table[];
extern cr_kernel_fn cr_kernel_table[][CR_DEV_COUNT];

/* Every CPU kernel and derivative rule named in the op list, so kernels can call each
 * other (the CUDA column is declared in csrc/cuda/cuda_impl.h). */
#define CR_DECLARE_KERNEL(E, name, kernel, cuda, rule, amp)                               \
    cr_status kernel(cr_call *c);                                                    \
    cr_status rule(cr_node *n, cr_tensor **gout, cr_tensor **gin);
CR_OPS(CR_DECLARE_KERNEL)
#undef CR_DECLARE_KERNEL

#endif
