/* registry.c — generated from the op list (crescent_ops.h): op names, the dispatch table
 * [op][device] and the table of derivative rules. Adding an op means adding one line to
 * its family's list; the compiler then demands its kernel and rule. */
#include "internal.h"

#define NAME_ENTRY(E, name, kernel, cuda, rule, amp) name,
static const char *op_names[CR_OP_COUNT] = {CR_OPS(NAME_ENTRY)};
#undef NAME_ENTRY
#define BACKWARD_NAME_ENTRY(E, name, kernel, cuda, rule, amp) name " backward",
static const char *op_backward_names[CR_OP_COUNT] = {CR_OPS(BACKWARD_NAME_ENTRY)};
#undef BACKWARD_NAME_ENTRY

/* The cuda column is filled by the CUDA backend when it opens, from the rows' cuda
 * names (csrc/cuda/backend.c); an op it leaves empty fails with a message naming the op. */
#define KERNEL_ENTRY(E, name, kernel, cuda, rule, amp) [CR_OP_##E] = {[CR_DEV_CPU] = kernel},
cr_kernel_fn cr_kernel_table[CR_OP_COUNT][CR_DEV_COUNT] = {CR_OPS(KERNEL_ENTRY)};
#undef KERNEL_ENTRY

/* The autocast class of each op (its row's last column). */
#define AMP_ENTRY(E, name, kernel, cuda, rule, amp) [CR_OP_##E] = CR_AMP_##amp,
static const cr_amp_class op_amp[CR_OP_COUNT] = {CR_OPS(AMP_ENTRY)};
#undef AMP_ENTRY

cr_amp_class cr_op_autocast_class(cr_op op) {
    return (int)op >= 0 && op < CR_OP_COUNT ? op_amp[op] : CR_AMP_KEEP;
}

/* Ops without a derivative list cr_grad_none. */
#define RULE_ENTRY(E, name, kernel, cuda, rule, amp) [CR_OP_##E] = rule,
cr_grad_fn cr_grad_table[CR_OP_COUNT] = {CR_OPS(RULE_ENTRY)};
#undef RULE_ENTRY

cr_status cr_grad_none(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    (void)gout;
    (void)gin;
    return cr_fail(CR_ERR_AUTOGRAD, "%s has no derivative", cr_op_name(n->call.op));
}

const char *cr_op_name(cr_op op) { return (unsigned)op < CR_OP_COUNT ? op_names[op] : "?"; }
const char *cr_op_backward_name(cr_op op) {
    return (unsigned)op < CR_OP_COUNT ? op_backward_names[op] : "? backward";
}
int cr_op_count(void) { return CR_OP_COUNT; }
bool cr_op_differentiable(cr_op op) {
    return (unsigned)op < CR_OP_COUNT && cr_grad_table[op] != cr_grad_none;
}

bool cr_op_has_kernel(cr_op op, cr_devtype dev) {
    return (unsigned)op < CR_OP_COUNT && (unsigned)dev < CR_DEV_COUNT && cr_kernel_table[op][dev];
}

static bool fast_paths = true;
bool cr_set_fast_paths(bool enabled) {
    bool old = fast_paths;
    fast_paths = enabled;
    return old;
}
bool cr_fast_paths_enabled(void) { return fast_paths; }

cr_status cr_call_init(cr_call *c, cr_op op, int nin, int nout) {
    memset(c, 0, sizeof *c);
    c->op = op;
    c->nin = nin;
    c->nout = nout;
    CR_ASSERT(nout <= CR_CALL_MAX_OUT);
    if (nin <= CR_CALL_SMALL_IN) {
        c->in = c->in_small;
    } else {
        c->in = calloc((size_t)nin, sizeof *c->in);
        if (!c->in) return cr_fail(CR_ERR_OOM, "%s: out of memory for %d inputs", op_names[op], nin);
    }
    return CR_OK;
}

void cr_call_release_ins(cr_call *c) {
    if (c->in && c->in != c->in_small) free(c->in);
    c->in = c->in_small;
}

void cr_call_drop_outs(cr_call *c) {
    for (int k = 0; k < c->nout; k++) {
        cr_tensor_free(c->out[k]);
        c->out[k] = NULL;
    }
}

cr_status cr_call_finish(cr_tensor **out, cr_call *c, unsigned save_in, unsigned save_out) {
    cr_status st = cr_dispatch(c);
    if (!st) st = cr_autograd_record(c, save_in, save_out);
    if (st) {
        cr_call_drop_outs(c);
        return st;
    }
    if (out) *out = c->out[0];
    return CR_OK;
}

/* Every tensor of a call sits on the lead tensor's device; on a GPU, a 0-dim cpu input is
 * a scalar the kernel reads on the host (x * 2 on cuda), as in PyTorch. */
static cr_status check_devices(const cr_call *c, const cr_tensor *lead) {
    for (int k = 0; k < c->nin + c->nout; k++) {
        const cr_tensor *t = k < c->nin ? c->in[k] : c->out[k - c->nin];
        if (!t || cr_same_device(t, lead)) continue;
        if (k < c->nin && !cr_tensor_on_cpu(lead) && cr_is_host_scalar(t)) continue;
        return cr_check_same_device(op_names[c->op], lead, t);
    }
    return CR_OK;
}

cr_status cr_dispatch(cr_call *c) {
    const cr_tensor *lead = c->nout && c->out[0] ? c->out[0] : c->nin ? c->in[0] : NULL;
    cr_devtype dev = lead ? lead->storage->device : CR_DEV_CPU;
    if (lead) {
        cr_status st = check_devices(c, lead);
        if (st) return st;
    }
    cr_kernel_fn k = cr_kernel_table[c->op][dev];
    if (!k)
        return cr_fail(CR_ERR_UNSUPPORTED, "%s: the CUDA backend has no kernel for this op yet; "
                       "compute it on the cpu (:cpu()) and move the result back with :cuda()",
                       op_names[c->op]);
    if (!cr_profile_active()) return k(c);
    int64_t span = cr_profile_push(op_names[c->op]);
    cr_status st = k(c);
    cr_profile_pop(span);
    return st;
}
