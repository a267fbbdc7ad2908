/* node.h — the autograd layer's private view: graph nodes and edges, recording, saved
 * tensors and derivative rules. Above ops/call.h (a node holds its call). */
#ifndef CR_NODE_H
#define CR_NODE_H

#include "call.h"

typedef struct cr_edge {
    struct cr_node *node; /* NULL when that input needs no grad */
    int input_nr;         /* which output of `node` this input was */
} cr_edge;

typedef struct cr_input_meta {
    int ndim;
    cr_dtype dtype;
    cr_device device;
    int64_t shape[CR_MAX_DIMS];
} cr_input_meta;

typedef enum { CR_NODE_OP, CR_NODE_ACCUMULATE, CR_NODE_CUSTOM } cr_node_kind;

struct cr_node {
    int64_t refcount;
    cr_node_kind kind;
    int64_t seq; /* creation order; the engine runs later nodes first */
    cr_call call; /* op and params; in[]/out[] hold saved detached aliases or NULL */
    uint64_t *in_version;  /* [nin] storage version when saved */
    uint64_t out_version[CR_CALL_MAX_OUT];
    cr_input_meta *in_meta; /* [nin] */
    cr_input_meta out_meta[CR_CALL_MAX_OUT];
    cr_edge *edges;         /* [nin] */
    bool released;          /* saved tensors freed after backward */
    cr_tensor *leaf;        /* CR_NODE_ACCUMULATE: the leaf (owned) */
    int custom_id;          /* CR_NODE_CUSTOM: the binding's function id */
    int *hooks[CR_CALL_MAX_OUT]; /* pre-hooks on the grad of output k */
    int nhooks[CR_CALL_MAX_OUT];
    bool retain[CR_CALL_MAX_OUT];
    struct cr_tensor *retain_target[CR_CALL_MAX_OUT]; /* weak, for retain_grad */
    /* engine scratch */
    int deps;
    int64_t visit_mark;
    cr_tensor *buf[CR_CALL_MAX_OUT];
};

bool cr_autograd_needed(const cr_call *c);
/* Recording is on and t requires grad: an op keeps what t's grad rule needs. */
bool cr_grad_needed(const cr_tensor *t);
/* After a successful forward: if any input requires grad and recording is on, builds
 * the node, saving detached aliases of the inputs in save_in (bitmask) and outputs in
 * save_out, and marks the outputs. Outputs that are not float stay grad-free. */
cr_status cr_autograd_record(cr_call *c, unsigned save_in, unsigned save_out);
/* Fetches saved input/output k, failing if it was released or modified in place. */
cr_status cr_saved_in(cr_node *n, int k, cr_tensor **t);
cr_status cr_saved_out(cr_node *n, int k, cr_tensor **t);
void cr_node_retain(cr_node *n);
/* The leaf's accumulate node (created on first use; refcount 0 until an edge takes it). */
cr_node *cr_autograd_leaf_accumulator(cr_tensor *leaf);
void cr_node_free(cr_node *n);
/* Guard for in-place ops: fails on leaves that require grad while recording. */
cr_status cr_check_inplace(const char *op, cr_tensor *t);

/* Zeros of an input's recorded shape, dtype and device (the grads a rule does not reach). */
static inline cr_status cr_zeros_meta(cr_tensor **out, const cr_input_meta *m) {
    return cr_full_on(out, m->ndim, m->shape, 0.0, m->dtype, m->device);
}

#endif
