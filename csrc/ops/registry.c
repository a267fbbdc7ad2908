/* registry.c — generated from the op list (crescent_ops.h): op names, the dispatch table
 * [op][device] and the table of derivative rules. Adding an op means adding one line to
 * its family's list; the compiler then demands its kernel and rule. */
#include "internal.h"

#define NAME_ENTRY(E, name, kernel, rule) name,
static const char *op_names[CR_OP_COUNT] = {CR_OPS(NAME_ENTRY)};
#undef NAME_ENTRY

/* CUDA kernels arrive with issue 6; until then the cuda column is empty and dispatch
 * says so. */
#define KERNEL_ENTRY(E, name, kernel, rule) [CR_OP_##E] = {[CR_DEV_CPU] = kernel},
cr_kernel_fn cr_kernel_table[CR_OP_COUNT][CR_DEV_COUNT] = {CR_OPS(KERNEL_ENTRY)};
#undef KERNEL_ENTRY

/* Ops without a derivative list cr_grad_none. */
#define RULE_ENTRY(E, name, kernel, rule) [CR_OP_##E] = rule,
cr_grad_fn cr_grad_table[CR_OP_COUNT] = {CR_OPS(RULE_ENTRY)};
#undef RULE_ENTRY

cr_status cr_grad_none(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    (void)gout;
    (void)gin;
    return cr_fail(CR_ERR_AUTOGRAD, "%s has no derivative", cr_op_name(n->call.op));
}

const char *cr_op_name(cr_op op) { return (unsigned)op < CR_OP_COUNT ? op_names[op] : "?"; }
int cr_op_count(void) { return CR_OP_COUNT; }
bool cr_op_differentiable(cr_op op) {
    return (unsigned)op < CR_OP_COUNT && cr_grad_table[op] != cr_grad_none;
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

cr_status cr_dispatch(cr_call *c) {
    const cr_tensor *lead = c->nout && c->out[0] ? c->out[0] : c->nin ? c->in[0] : NULL;
    cr_devtype dev = lead ? lead->storage->device : CR_DEV_CPU;
    cr_kernel_fn k = cr_kernel_table[c->op][dev];
    if (!k)
        return cr_fail(CR_ERR_UNSUPPORTED, "%s: no kernel for device %s in this build",
                       op_names[c->op], dev == CR_DEV_CPU ? "cpu" : "cuda");
    return k(c);
}
