/* engine.c — the backward engine. It counts, for every node reachable from the root,
 * how many edges point at it, then runs nodes whose count reached zero, latest-created
 * first, summing the grads that flow into each node's outputs.
 *
 * It is pull-style: when Lua work is needed (a gradient hook, the backward of a
 * Lua-defined Function) cr_engine_run returns an event; the binding does the work,
 * answers with cr_engine_answer and calls cr_engine_run again. C never calls Lua, so no
 * FFI callback ever runs inside a compiled trace. */
#include "internal.h"

enum { ST_PICK, ST_PRE_HOOKS, ST_COMPUTE, ST_CUSTOM_WAIT, ST_POST_HOOKS, ST_DISTRIBUTE };

struct cr_engine {
    cr_node **nodes; /* every reachable node, retained */
    int nnodes, capnodes;
    cr_node **heap; /* ready nodes, max-heap by seq */
    int nheap;
    bool retain_graph;
    int64_t mark;
    /* the node in progress */
    cr_node *cur;
    int stage, hook_out, hook_idx;
    cr_tensor **gin;
    int capgin;
    /* the pending event */
    int event_id;
    cr_tensor *event_grads[CR_CALL_MAX_OUT];
    int event_ngrads;
    cr_tensor *event_tensor;
    cr_tensor *answer;
    bool answered;
};

static int64_t engine_marks;

static void heap_push(cr_engine *e, cr_node *n) {
    int i = e->nheap++;
    while (i > 0) {
        int p = (i - 1) / 2;
        if (e->heap[p]->seq >= n->seq) break;
        e->heap[i] = e->heap[p];
        i = p;
    }
    e->heap[i] = n;
}

static cr_node *heap_pop(cr_engine *e) {
    cr_node *top = e->heap[0], *last = e->heap[--e->nheap];
    int i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= e->nheap) break;
        if (c + 1 < e->nheap && e->heap[c + 1]->seq > e->heap[c]->seq) c++;
        if (e->heap[c]->seq <= last->seq) break;
        e->heap[i] = e->heap[c];
        i = c;
    }
    if (e->nheap) e->heap[i] = last;
    return top;
}

static cr_status collect(cr_engine *e, cr_node *start) {
    /* iterative DFS; a node's deps = number of edges into it from reachable nodes */
    cr_node **stack = malloc(sizeof *stack * 64);
    int top = 0, cap = 64;
    if (!stack) return cr_fail(CR_ERR_OOM, "backward: out of memory");
    start->visit_mark = e->mark;
    start->deps = 0;
    stack[top++] = start;
    while (top) {
        cr_node *n = stack[--top];
        if (e->nnodes == e->capnodes) {
            int c2 = e->capnodes ? e->capnodes * 2 : 64;
            cr_node **p = realloc(e->nodes, (size_t)c2 * sizeof *p);
            if (!p) {
                free(stack);
                return cr_fail(CR_ERR_OOM, "backward: out of memory");
            }
            e->nodes = p;
            e->capnodes = c2;
        }
        cr_node_retain(n);
        e->nodes[e->nnodes++] = n;
        for (int i = 0; i < n->call.nin; i++) {
            cr_node *m = n->edges[i].node;
            if (!m) continue;
            if (m->visit_mark != e->mark) {
                m->visit_mark = e->mark;
                m->deps = 0;
                if (top == cap) {
                    cr_node **p = realloc(stack, (size_t)cap * 2 * sizeof *p);
                    if (!p) {
                        free(stack);
                        return cr_fail(CR_ERR_OOM, "backward: out of memory");
                    }
                    stack = p;
                    cap *= 2;
                }
                stack[top++] = m;
            }
            m->deps++;
        }
    }
    free(stack);
    e->heap = malloc((size_t)e->nnodes * sizeof *e->heap);
    if (!e->heap) return cr_fail(CR_ERR_OOM, "backward: out of memory");
    return CR_OK;
}

cr_status cr_engine_new(cr_engine **out, cr_tensor *root, cr_tensor *grad, bool retain_graph) {
    *out = NULL;
    CR_CHECK_TENSOR("backward", root, "self");
    if (!root->requires_grad)
        return cr_fail(CR_ERR_AUTOGRAD, "backward: the tensor does not require grad and has no "
                       "grad_fn; did an input set requires_grad=true, or is this under no_grad?");
    cr_tensor *g = grad;
    if (g) {
        if (!cr_same_shape(g, root)) {
            char a[160], b[160];
            return cr_fail(CR_ERR_ARG, "backward: gradient shape %s does not match the tensor's "
                           "shape %s", cr_shape_str(g, a, sizeof a), cr_shape_str(root, b, sizeof b));
        }
        cr_tensor_retain(g);
    } else {
        if (root->numel != 1)
            return cr_fail(CR_ERR_ARG, "backward: a gradient can be created implicitly only for "
                           "one-element outputs; this one has %lld elements, so pass a grad",
                           (long long)root->numel);
        cr_status st = cr_full_on(&g, root->ndim, root->shape, 1.0, root->dtype, cr_tensor_dev(root));
        if (st) return st;
    }
    cr_engine *e = calloc(1, sizeof *e);
    if (!e) {
        cr_tensor_free(g);
        return cr_fail(CR_ERR_OOM, "backward: out of memory");
    }
    e->retain_graph = retain_graph;
    e->mark = ++engine_marks;
    /* backward on a leaf: its accumulator is the whole graph */
    cr_node *start = root->grad_fn ? root->grad_fn : cr_autograd_leaf_accumulator(root);
    int slot = root->grad_fn ? root->output_nr : 0;
    cr_node_retain(start);
    cr_status st = collect(e, start);
    cr_node_free(start);
    if (st) {
        cr_tensor_free(g);
        cr_engine_free(e);
        return st;
    }
    cr_tensor_free(start->buf[slot]);
    start->buf[slot] = g;
    heap_push(e, start);
    e->stage = ST_PICK;
    *out = e;
    return CR_OK;
}

static cr_status zeros_for(cr_tensor **out, const cr_input_meta *m) {
    return cr_zeros_meta(out, m);
}

static cr_status accumulate(cr_tensor **slot, cr_tensor *g) {
    if (!*slot) {
        cr_tensor_retain(g);
        *slot = g;
        return CR_OK;
    }
    cr_tensor *sum;
    cr_status st = cr_op_add(&sum, *slot, g);
    if (st) return st;
    cr_tensor_free(*slot);
    *slot = sum;
    return CR_OK;
}

static void set_event(cr_engine *e, int id, cr_tensor *g, cr_tensor *t) {
    e->event_id = id;
    e->event_grads[0] = g;
    e->event_ngrads = 1;
    e->event_tensor = t;
    e->answer = NULL;
    e->answered = false;
}

/* Leaf accumulation: steal a grad nobody else holds, else copy; then add in place so
 * a caller holding .grad sees the sum, as in PyTorch. */
static cr_status accumulate_leaf(cr_tensor *leaf, cr_tensor *g) {
    if (g->dtype != leaf->dtype) {
        cr_tensor *c;
        cr_status st = cr_op_to(&c, g, leaf->dtype);
        if (st) return st;
        st = accumulate_leaf(leaf, c);
        cr_tensor_free(c);
        return st;
    }
    if (!leaf->grad) {
        if (g->refcount == 1 && g->storage->refcount == 1 && cr_tensor_is_contiguous(g) &&
            cr_same_shape(g, leaf)) {
            cr_tensor_retain(g);
            leaf->grad = g;
            return CR_OK;
        }
        return cr_op_clone(&leaf->grad, g);
    }
    return cr_op_add_(leaf->grad, g, 1.0);
}

static cr_status distribute(cr_engine *e, cr_node *n) {
    for (int i = 0; i < n->call.nin; i++) {
        cr_node *m = n->edges[i].node;
        if (!m) continue;
        cr_tensor *g = e->gin[i];
        if (g) {
            const cr_input_meta *want = &n->in_meta[i];
            if (g->ndim != want->ndim || memcmp(g->shape, want->shape,
                                                sizeof(int64_t) * (size_t)want->ndim)) {
                char a[160], b[160];
                return cr_fail(CR_ERR_AUTOGRAD, "backward of %s: gradient for input %d has shape "
                               "%s but the input had shape %s",
                               n->kind == CR_NODE_CUSTOM ? "Function" : cr_op_name(n->call.op),
                               i + 1, cr_shape_str(g, a, sizeof a),
                               cr_dims_str(want->ndim, want->shape, b, sizeof b));
            }
            cr_status st = accumulate(&m->buf[n->edges[i].input_nr], g);
            if (st) return st;
        }
        if (--m->deps == 0) heap_push(e, m);
    }
    return CR_OK;
}

static void clear_gin(cr_engine *e, int nin) {
    for (int i = 0; i < nin; i++) {
        cr_tensor_free(e->gin[i]);
        e->gin[i] = NULL;
    }
}

static cr_status finish_node(cr_engine *e, cr_node *n) {
    cr_status st = distribute(e, n);
    clear_gin(e, n->call.nin);
    for (int k = 0; k < CR_CALL_MAX_OUT; k++) {
        cr_tensor_free(n->buf[k]);
        n->buf[k] = NULL;
    }
    if (!e->retain_graph && n->kind != CR_NODE_ACCUMULATE) {
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
    e->cur = NULL;
    e->stage = ST_PICK;
    return st;
}

static cr_status run_rule(cr_engine *e, cr_node *n) {
    /* A missing grad of the first output is zeros. The other outputs (statistics, norms,
     * indices) stay NULL when nothing reached them: no rule reads their grads, and their
     * zeros were two fills per batch norm per step. */
    if (n->call.nout > 0 && !n->buf[0] && cr_dtype_is_float(n->out_meta[0].dtype)) {
        cr_status st = zeros_for(&n->buf[0], &n->out_meta[0]);
        if (st) return st;
    }
    if (n->released)
        return cr_fail(CR_ERR_AUTOGRAD, "backward through %s a second time: its saved tensors "
                       "were freed by the first backward; pass retain_graph=true to the first "
                       "backward", cr_op_name(n->call.op));
    if (!cr_profile_active()) return cr_grad_table[n->call.op](n, n->buf, e->gin);
    int64_t span = cr_profile_push(cr_op_backward_name(n->call.op));
    cr_status st = cr_grad_table[n->call.op](n, n->buf, e->gin);
    cr_profile_pop(span);
    return st;
}

static bool any_grad(const cr_node *n) {
    for (int k = 0; k < CR_CALL_MAX_OUT; k++)
        if (n->buf[k]) return true;
    return false;
}

cr_status cr_engine_run(cr_engine *e, cr_engine_event *event) {
    bool prev = cr_grad_set_enabled(false);
    cr_dtype prev_autocast = cr_autocast_set(CR_DT_F32); /* grads keep their forward dtypes */
    cr_status st = CR_OK;
    *event = CR_ENGINE_DONE;
    for (;;) {
        cr_node *n = e->cur;
        if (e->stage == ST_PICK) {
            if (!e->nheap) break;
            n = e->cur = heap_pop(e);
            if (e->capgin < n->call.nin) {
                cr_tensor **p = realloc(e->gin, (size_t)n->call.nin * sizeof *p);
                if (!p) {
                    st = cr_fail(CR_ERR_OOM, "backward: out of memory");
                    break;
                }
                memset(p + e->capgin, 0, (size_t)(n->call.nin - e->capgin) * sizeof *p);
                e->gin = p;
                e->capgin = n->call.nin;
            }
            e->stage = any_grad(n) ? ST_PRE_HOOKS : ST_DISTRIBUTE;
            e->hook_out = 0;
            e->hook_idx = 0;
            continue;
        }
        if (e->stage == ST_PRE_HOOKS) {
            /* apply the answer of the hook that just ran */
            if (e->answered && e->answer) {
                cr_tensor_free(n->buf[e->hook_out]);
                n->buf[e->hook_out] = e->answer;
                e->answer = NULL;
            }
            e->answered = false;
            bool yielded = false;
            while (e->hook_out < (n->kind == CR_NODE_ACCUMULATE ? 1 : n->call.nout)) {
                int k = e->hook_out;
                int nh = n->kind == CR_NODE_ACCUMULATE ? n->leaf->nhooks : n->nhooks[k];
                int *hooks = n->kind == CR_NODE_ACCUMULATE ? n->leaf->hooks : n->hooks[k];
                if (n->buf[k] && e->hook_idx < nh) {
                    set_event(e, hooks[e->hook_idx++], n->buf[k], NULL);
                    *event = CR_ENGINE_HOOK;
                    yielded = true;
                    break;
                }
                if (n->buf[k] && n->kind != CR_NODE_ACCUMULATE && n->retain[k] &&
                    n->retain_target[k]) {
                    cr_tensor *t = n->retain_target[k];
                    cr_tensor *copy;
                    st = cr_op_clone(&copy, n->buf[k]);
                    if (st) break;
                    if (t->grad) {
                        cr_tensor *sum;
                        st = cr_op_add(&sum, t->grad, copy);
                        cr_tensor_free(copy);
                        if (st) break;
                        copy = sum;
                    }
                    cr_tensor_free(t->grad);
                    t->grad = copy;
                }
                e->hook_out++;
                e->hook_idx = 0;
            }
            if (st || yielded) break;
            e->stage = ST_COMPUTE;
            continue;
        }
        if (e->stage == ST_COMPUTE) {
            if (n->kind == CR_NODE_ACCUMULATE) {
                st = accumulate_leaf(n->leaf, n->buf[0]);
                if (st) break;
                e->stage = ST_POST_HOOKS;
                e->hook_idx = 0;
                continue;
            }
            if (n->kind == CR_NODE_CUSTOM) {
                for (int k = 0; k < n->call.nout; k++) {
                    if (n->buf[k]) continue;
                    st = zeros_for(&n->buf[k], &n->out_meta[k]);
                    if (st) break;
                }
                if (st) break;
                e->event_id = n->custom_id;
                e->event_ngrads = n->call.nout;
                for (int k = 0; k < n->call.nout; k++) e->event_grads[k] = n->buf[k];
                e->event_tensor = NULL;
                e->stage = ST_CUSTOM_WAIT;
                *event = CR_ENGINE_CUSTOM;
                break;
            }
            st = run_rule(e, n);
            if (st) break;
            e->stage = ST_DISTRIBUTE;
            continue;
        }
        if (e->stage == ST_CUSTOM_WAIT) { /* answers arrived through cr_engine_answer */
            e->stage = ST_DISTRIBUTE;
            continue;
        }
        if (e->stage == ST_POST_HOOKS) {
            if (e->hook_idx < n->leaf->npost_hooks) {
                set_event(e, n->leaf->post_hooks[e->hook_idx++], n->leaf->grad, n->leaf);
                *event = CR_ENGINE_POST_ACC;
                break;
            }
            e->stage = ST_DISTRIBUTE;
            continue;
        }
        if (e->stage == ST_DISTRIBUTE) {
            st = finish_node(e, n);
            if (st) break;
            continue;
        }
    }
    cr_grad_set_enabled(prev);
    cr_autocast_set(prev_autocast);
    return st;
}

int cr_engine_event_id(const cr_engine *e) { return e->event_id; }
int cr_engine_event_ngrads(const cr_engine *e) { return e->event_ngrads; }
cr_tensor *cr_engine_event_grad(const cr_engine *e, int i) {
    return i >= 0 && i < e->event_ngrads ? e->event_grads[i] : NULL;
}
cr_tensor *cr_engine_event_tensor(const cr_engine *e) { return e->event_tensor; }

cr_status cr_engine_answer(cr_engine *e, int i, cr_tensor *grad) {
    cr_node *n = e->cur;
    if (!n) return cr_fail(CR_ERR_AUTOGRAD, "backward: no event is waiting for an answer");
    if (e->stage == ST_CUSTOM_WAIT) {
        if (i < 0 || i >= n->call.nin)
            return cr_fail(CR_ERR_ARG, "Function backward: returned grad %d but the forward had "
                           "%d inputs", i + 1, n->call.nin);
        if (grad && n->edges[i].node && !cr_dtype_is_float(grad->dtype))
            return cr_fail(CR_ERR_ARG, "Function backward: grad %d has dtype %s; grads must "
                           "be floating", i + 1, cr_dtype_name(grad->dtype));
        cr_tensor_retain(grad);
        cr_tensor_free(e->gin[i]);
        e->gin[i] = grad;
        return CR_OK;
    }
    if (grad) {
        cr_tensor *cur = e->event_grads[0];
        if (cur && !cr_same_shape(cur, grad)) {
            char a[160], b[160];
            return cr_fail(CR_ERR_ARG, "hook: returned a grad of shape %s for a grad of shape %s",
                           cr_shape_str(grad, a, sizeof a), cr_shape_str(cur, b, sizeof b));
        }
    }
    cr_tensor_retain(grad);
    cr_tensor_free(e->answer);
    e->answer = grad;
    e->answered = true;
    return CR_OK;
}

void cr_engine_free(cr_engine *e) {
    if (!e) return;
    /* an engine stopped midway (an error) leaves grads in buffers: drop them */
    for (int j = 0; j < e->nnodes; j++)
        for (int k = 0; k < CR_CALL_MAX_OUT; k++) {
            cr_tensor_free(e->nodes[j]->buf[k]);
            e->nodes[j]->buf[k] = NULL;
        }
    if (e->cur) clear_gin(e, e->cur->call.nin);
    for (int j = 0; j < e->nnodes; j++) cr_node_free(e->nodes[j]);
    cr_tensor_free(e->answer);
    free(e->nodes);
    free(e->heap);
    free(e->gin);
    free(e);
}
