/* graph.c — the define-by-run graph: ops record nodes here after their forward, saving
 * detached aliases of what their derivative rule needs together with the storage
 * version at save time, so a later in-place write is caught instead of silently giving
 * a wrong gradient. Also the tensor-side autograd API: requires_grad, .grad, detach,
 * hooks, retain_grad, and nodes for Lua-defined functions. */
#include "internal.h"

static _Thread_local bool grad_enabled = true;
static int64_t node_seq;

bool cr_grad_set_enabled(bool enabled) {
    bool old = grad_enabled;
    grad_enabled = enabled;
    return old;
}
bool cr_grad_is_enabled(void) { return grad_enabled; }

/* Ids of Lua functions whose nodes died, for the binding to forget. */
static int *reaped_ids;
static int nreaped, capreaped;

int cr_autograd_reap_custom(int *ids, int cap) {
    int n = nreaped < cap ? nreaped : cap;
    if (n <= 0) return 0;
    memcpy(ids, reaped_ids, (size_t)n * sizeof *ids);
    memmove(reaped_ids, reaped_ids + n, (size_t)(nreaped - n) * sizeof *ids);
    nreaped -= n;
    return n;
}

static void reap_push(int id) {
    if (nreaped == capreaped) {
        int cap = capreaped ? capreaped * 2 : 64;
        int *p = realloc(reaped_ids, (size_t)cap * sizeof *p);
        if (!p) return; /* the binding then keeps one stale closure; harmless */
        reaped_ids = p;
        capreaped = cap;
    }
    reaped_ids[nreaped++] = id;
}

void cr_node_retain(cr_node *n) { n->refcount++; }

static void node_release_saved(cr_node *n) {
    for (int i = 0; i < n->call.nin; i++) {
        cr_tensor_free(n->call.in[i]);
        n->call.in[i] = NULL;
    }
    for (int k = 0; k < n->call.nout; k++) {
        cr_tensor_free(n->call.out[k]);
        n->call.out[k] = NULL;
    }
    n->released = true;
}

/* Iterative, so that freeing a graph thousands of nodes deep cannot overflow the stack. */
void cr_node_free(cr_node *first) {
    cr_node *stack_small[64];
    cr_node **stack = stack_small;
    int top = 0, cap = 64;
    stack[top++] = first;
    while (top) {
        cr_node *n = stack[--top];
        if (--n->refcount > 0) continue;
        node_release_saved(n);
        for (int i = 0; i < n->call.nin; i++) {
            cr_node *next = n->edges ? n->edges[i].node : NULL;
            if (!next) continue;
            if (top == cap) {
                cr_node **grown = malloc((size_t)cap * 2 * sizeof *grown);
                CR_ASSERT(grown);
                memcpy(grown, stack, (size_t)top * sizeof *grown);
                if (stack != stack_small) free(stack);
                stack = grown;
                cap *= 2;
            }
            stack[top++] = next;
        }
        for (int k = 0; k < CR_CALL_MAX_OUT; k++) {
            free(n->hooks[k]);
            cr_tensor_free(n->buf[k]);
        }
        if (n->kind == CR_NODE_ACCUMULATE) {
            n->leaf->grad_acc = NULL;
            cr_tensor_free(n->leaf);
        }
        if (n->kind == CR_NODE_CUSTOM) reap_push(n->custom_id);
        cr_call_release_ins(&n->call);
        free(n->in_version);
        free(n->in_meta);
        free(n->edges);
        free(n);
    }
    if (stack != stack_small) free(stack);
}

/* What core calls when a tensor with a graph node goes (cr_core_set_grad_fn_release):
 * the node forgets it as a retain_grad target and loses the tensor's reference. */
static void release_grad_fn(cr_tensor *t) {
    cr_node *n = t->grad_fn;
    if (n->retain_target[t->output_nr] == t) n->retain_target[t->output_nr] = NULL;
    cr_node_free(n);
}
__attribute__((constructor)) static void hand_grad_fn_release_to_core(void) {
    cr_core_set_grad_fn_release(release_grad_fn);
}

static cr_node *node_new(cr_node_kind kind, cr_op op, int nin, int nout) {
    cr_node *n = calloc(1, sizeof *n);
    CR_ASSERT(n);
    n->kind = kind;
    n->seq = ++node_seq;
    n->custom_id = -1;
    if (cr_call_init(&n->call, op, nin, nout) != CR_OK) CR_ASSERT(!"out of memory");
    if (nin) {
        n->in_version = calloc((size_t)nin, sizeof *n->in_version);
        n->in_meta = calloc((size_t)nin, sizeof *n->in_meta);
        n->edges = calloc((size_t)nin, sizeof *n->edges);
        CR_ASSERT(n->in_version && n->in_meta && n->edges);
    }
    return n;
}

cr_node *cr_autograd_leaf_accumulator(cr_tensor *leaf) {
    if (leaf->grad_acc) return leaf->grad_acc;
    cr_node *n = node_new(CR_NODE_ACCUMULATE, CR_OP_COUNT, 0, 1);
    n->leaf = leaf;
    cr_tensor_retain(leaf);
    n->out_meta[0].ndim = leaf->ndim;
    n->out_meta[0].dtype = leaf->dtype;
    n->out_meta[0].device = cr_tensor_dev(leaf);
    memcpy(n->out_meta[0].shape, leaf->shape, sizeof leaf->shape);
    leaf->grad_acc = n;
    return n; /* refcount 0: the edge that points at it takes the first reference */
}

/* An edge to where grads for t flow: its producer, or its leaf accumulator. */
static cr_edge edge_for(cr_tensor *t) {
    cr_edge e = {NULL, 0};
    if (!t || !t->requires_grad) return e;
    if (t->grad_fn) {
        e.node = t->grad_fn;
        e.input_nr = t->output_nr;
    } else {
        e.node = cr_autograd_leaf_accumulator(t);
    }
    cr_node_retain(e.node);
    return e;
}

static cr_tensor *detached_alias(const cr_tensor *t) {
    return cr_tensor_alias(t, t->ndim, t->shape, t->stride, t->offset);
}

bool cr_grad_needed(const cr_tensor *t) { return grad_enabled && t && t->requires_grad; }

bool cr_autograd_needed(const cr_call *c) {
    if (!grad_enabled || cr_grad_table[c->op] == cr_grad_none) return false;
    for (int i = 0; i < c->nin; i++)
        if (c->in[i] && c->in[i]->requires_grad) return true;
    return false;
}

static void attach_outputs(cr_node *n, cr_tensor **outs, int nout, unsigned save_out) {
    for (int k = 0; k < nout; k++) {
        cr_tensor *o = outs[k];
        if (!o) continue;
        n->out_meta[k].ndim = o->ndim;
        n->out_meta[k].dtype = o->dtype;
        n->out_meta[k].device = cr_tensor_dev(o);
        memcpy(n->out_meta[k].shape, o->shape, sizeof o->shape);
        if (save_out & (1u << k)) {
            n->call.out[k] = detached_alias(o);
            n->out_version[k] = o->storage->version;
        }
        if (!cr_dtype_is_float(o->dtype)) continue;
        o->requires_grad = true;
        o->grad_fn = n;
        o->output_nr = k;
        cr_node_retain(n);
    }
}

cr_status cr_autograd_record(cr_call *c, unsigned save_in, unsigned save_out) {
    if (!cr_autograd_needed(c)) return CR_OK;
    cr_node *n = node_new(CR_NODE_OP, c->op, c->nin, c->nout);
    memcpy(n->call.i, c->i, sizeof c->i);
    memcpy(n->call.f, c->f, sizeof c->f);
    for (int i = 0; i < c->nin; i++) {
        cr_tensor *t = c->in[i];
        if (!t) continue;
        n->in_meta[i].ndim = t->ndim;
        n->in_meta[i].dtype = t->dtype;
        n->in_meta[i].device = cr_tensor_dev(t);
        memcpy(n->in_meta[i].shape, t->shape, sizeof t->shape);
        n->edges[i] = edge_for(t);
        if (save_in & (1u << i)) {
            n->call.in[i] = detached_alias(t);
            n->in_version[i] = t->storage->version;
        }
    }
    cr_node_retain(n); /* held while attaching, so a node with no float output dies here */
    attach_outputs(n, c->out, c->nout, save_out);
    cr_node_free(n);
    return CR_OK;
}

static cr_status saved_check(cr_node *n, cr_tensor *t, uint64_t version, const char *what,
                             int k) {
    if (n->released)
        return cr_fail(CR_ERR_AUTOGRAD, "backward through %s a second time: its saved tensors "
                       "were freed by the first backward; pass retain_graph=true to the first "
                       "backward", cr_op_name(n->call.op));
    if (!t)
        return cr_fail(CR_ERR_AUTOGRAD, "%s: %s %d was not saved for backward (crescent bug)",
                       cr_op_name(n->call.op), what, k);
    if (t->storage->version != version)
        return cr_fail(CR_ERR_AUTOGRAD, "%s: %s %d, needed for its gradient, was modified by an "
                       "in-place operation (version %llu, saved at %llu); clone it before "
                       "modifying it", cr_op_name(n->call.op), what, k,
                       (unsigned long long)t->storage->version, (unsigned long long)version);
    return CR_OK;
}

cr_status cr_saved_in(cr_node *n, int k, cr_tensor **t) {
    *t = n->released ? NULL : n->call.in[k];
    return saved_check(n, *t, n->in_version[k], "input", k);
}

cr_status cr_saved_out(cr_node *n, int k, cr_tensor **t) {
    *t = n->released ? NULL : n->call.out[k];
    return saved_check(n, *t, n->out_version[k], "output", k);
}

cr_status cr_check_inplace(const char *op, cr_tensor *t) {
    for (int d = 0; d < t->ndim; d++)
        if (t->stride[d] == 0 && t->shape[d] > 1) {
            char b[160];
            return cr_fail(CR_ERR_ARG, "%s: the tensor of shape %s repeats elements (an expanded view: dim %d has "
                           "stride 0), so an in-place write would land several times on one element; write to a "
                           "copy (:clone() or :contiguous())", op, cr_shape_str(t, b, sizeof b), d);
        }
    if (grad_enabled && t->requires_grad)
        return cr_fail(CR_ERR_AUTOGRAD, "%s: in-place write to a tensor that requires grad "
                       "while recording; use the out-of-place op, or wrap it in cr.no_grad",
                       op);
    return CR_OK;
}

/* ---- tensor-side API ---- */
bool cr_tensor_requires_grad(const cr_tensor *t) { return t && t->requires_grad; }
bool cr_tensor_is_leaf(const cr_tensor *t) { return !t || t->grad_fn == NULL; }

cr_status cr_tensor_set_requires_grad(cr_tensor *t, bool flag) {
    CR_CHECK_TENSOR("requires_grad_", t, "self");
    if (t->grad_fn && !flag)
        return cr_fail(CR_ERR_AUTOGRAD, "requires_grad_: only leaves can stop requiring grad; "
                       "use :detach() for a non-leaf");
    if (flag && !cr_dtype_is_float(t->dtype))
        return cr_fail(CR_ERR_ARG, "requires_grad_: only floating tensors can require grad "
                       "(this one is %s)", cr_dtype_name(t->dtype));
    t->requires_grad = flag;
    return CR_OK;
}

cr_tensor *cr_tensor_grad(const cr_tensor *t) {
    if (!t) return NULL;
    cr_tensor_retain(t->grad);
    return t->grad;
}

cr_status cr_tensor_set_grad(cr_tensor *t, cr_tensor *grad) {
    CR_CHECK_TENSOR("set grad", t, "self");
    if (grad && !cr_same_shape(t, grad)) {
        char a[160], b[160];
        return cr_fail(CR_ERR_ARG, "set grad: grad shape %s does not match tensor shape %s",
                       cr_shape_str(grad, a, sizeof a), cr_shape_str(t, b, sizeof b));
    }
    if (grad && grad->dtype != t->dtype)
        return cr_fail(CR_ERR_ARG, "set grad: grad dtype %s does not match tensor dtype %s",
                       cr_dtype_name(grad->dtype), cr_dtype_name(t->dtype));
    cr_tensor_retain(grad);
    cr_tensor_free(t->grad);
    t->grad = grad;
    return CR_OK;
}

const char *cr_tensor_grad_fn_name(const cr_tensor *t) {
    if (!t || !t->grad_fn) return "";
    if (t->grad_fn->kind == CR_NODE_CUSTOM) return "LuaFunction";
    return cr_op_name(t->grad_fn->call.op);
}

cr_status cr_tensor_detach(cr_tensor **out, cr_tensor *t) {
    CR_CHECK_TENSOR("detach", t, "self");
    *out = detached_alias(t);
    return CR_OK;
}

static cr_status push_id(int **list, int *n, int id) {
    int *p = realloc(*list, (size_t)(*n + 1) * sizeof *p);
    if (!p) return cr_fail(CR_ERR_OOM, "register_hook: out of memory");
    p[(*n)++] = id;
    *list = p;
    return CR_OK;
}

cr_status cr_tensor_add_hook(cr_tensor *t, int hook_id) {
    CR_CHECK_TENSOR("register_hook", t, "self");
    if (!t->requires_grad)
        return cr_fail(CR_ERR_AUTOGRAD, "register_hook: the tensor does not require grad, so "
                       "no gradient will reach the hook");
    if (!t->grad_fn) return push_id(&t->hooks, &t->nhooks, hook_id);
    cr_node *n = t->grad_fn;
    return push_id(&n->hooks[t->output_nr], &n->nhooks[t->output_nr], hook_id);
}

cr_status cr_tensor_add_post_accumulate_hook(cr_tensor *t, int hook_id) {
    CR_CHECK_TENSOR("register_post_accumulate_grad_hook", t, "self");
    if (!t->requires_grad || t->grad_fn)
        return cr_fail(CR_ERR_AUTOGRAD, "register_post_accumulate_grad_hook: only leaves that "
                       "require grad accumulate a .grad");
    return push_id(&t->post_hooks, &t->npost_hooks, hook_id);
}

static bool remove_id(int *list, int *n, int id) {
    for (int i = 0; i < *n; i++)
        if (list[i] == id) {
            memmove(list + i, list + i + 1, (size_t)(*n - i - 1) * sizeof *list);
            (*n)--;
            return true;
        }
    return false;
}

cr_status cr_tensor_remove_hook(cr_tensor *t, int hook_id) {
    CR_CHECK_TENSOR("remove_hook", t, "self");
    if (remove_id(t->hooks, &t->nhooks, hook_id)) return CR_OK;
    if (remove_id(t->post_hooks, &t->npost_hooks, hook_id)) return CR_OK;
    if (t->grad_fn && remove_id(t->grad_fn->hooks[t->output_nr],
                                &t->grad_fn->nhooks[t->output_nr], hook_id))
        return CR_OK;
    return cr_fail(CR_ERR_ARG, "remove_hook: hook %d is not registered on this tensor", hook_id);
}

cr_status cr_tensor_retain_grad(cr_tensor *t) {
    CR_CHECK_TENSOR("retain_grad", t, "self");
    if (!t->requires_grad)
        return cr_fail(CR_ERR_AUTOGRAD, "retain_grad: the tensor does not require grad");
    if (!t->grad_fn) return CR_OK; /* leaves keep their grad anyway */
    t->retains_grad = true;
    t->grad_fn->retain[t->output_nr] = true;
    t->grad_fn->retain_target[t->output_nr] = t;
    return CR_OK;
}

cr_status cr_autograd_custom(cr_tensor **outs, int nout, cr_tensor **ins, int nin, int fn_id) {
    if (nout < 1 || nout > CR_CALL_MAX_OUT)
        return cr_fail(CR_ERR_ARG, "Function: %d outputs; between 1 and %d are supported", nout,
                       CR_CALL_MAX_OUT);
    if (!outs || (nin > 0 && !ins)) return cr_fail(CR_ERR_ARG, "Function: nil output or input list");
    for (int k = 0; k < nout; k++)
        if (!outs[k]) return cr_fail(CR_ERR_ARG, "Function: output %d is nil", k + 1);
    bool any = false;
    for (int i = 0; i < nin; i++) any = any || (ins[i] && ins[i]->requires_grad);
    if (!grad_enabled || !any) return CR_OK;
    for (int k = 0; k < nout; k++)
        if (outs[k] && outs[k]->grad_fn)
            return cr_fail(CR_ERR_AUTOGRAD, "Function: output %d already has a grad_fn; "
                           "forward must return new tensors", k + 1);
    cr_node *n = node_new(CR_NODE_CUSTOM, CR_OP_COUNT, nin, nout);
    n->custom_id = fn_id;
    for (int i = 0; i < nin; i++) {
        if (!ins[i]) continue;
        n->in_meta[i].ndim = ins[i]->ndim;
        n->in_meta[i].dtype = ins[i]->dtype;
        memcpy(n->in_meta[i].shape, ins[i]->shape, sizeof ins[i]->shape);
        n->edges[i] = edge_for(ins[i]);
    }
    cr_node_retain(n);
    attach_outputs(n, outs, nout, 0);
    cr_node_free(n);
    return CR_OK;
}
