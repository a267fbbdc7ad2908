/* internal.h — the core's private view of tensors, storages, calls and graph nodes.
 * Shared by every C layer (ops, autograd, later optim/data/io/loop); never by Lua. */
#ifndef CR_INTERNAL_H
#define CR_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crescent.h"
#include "half.h"

/* Internal invariant broken: a crescent bug, not a user mistake. */
#define CR_ASSERT(cond)                                                              \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "crescent: internal error at %s:%d: %s\n", __FILE__,     \
                    __LINE__, #cond);                                                \
            abort();                                                                 \
        }                                                                            \
    } while (0)

/* ---- errors (core/error.c) ---- */
cr_status cr_fail(cr_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends " [shape]" for t to buf (for messages). */
const char *cr_shape_str(const cr_tensor *t, char *buf, size_t cap);
const char *cr_dims_str(int ndim, const int64_t *shape, char *buf, size_t cap);

/* ---- the large-block host cache (core/host_cache.c) ---- */
/* 64-byte aligned block of at least `bytes`; NULL when memory is exhausted even after
 * emptying the cache. Free with cr_host_free and the same `bytes`. */
void *cr_host_alloc(size_t bytes);
void cr_host_free(void *p, size_t bytes);
/* The bytes cr_host_alloc really reserves for a request (its size class). */
size_t cr_host_alloc_size(size_t bytes);
void cr_host_cache_stats(int64_t *bytes, int64_t *hits);

/* ---- storage and tensor ---- */
/* Where a storage lives: the cpu, or CUDA device `index` (cuda:index). */
typedef struct cr_device {
    cr_devtype type;
    int index;
} cr_device;
#define CR_CPU ((cr_device){CR_DEV_CPU, 0})

typedef struct cr_storage {
    int64_t refcount;
    void *data;
    size_t nbytes;
    cr_devtype device;
    int device_index;
    bool pinned;      /* page-locked host memory (from the CUDA backend) */
    uint64_t version; /* bumped by every in-place write; shared by all views */
} cr_storage;

struct cr_node;

/* A live tensor's first word; anything else where a tensor is expected (a foreign
 * object the FFI passed as a pointer to its payload, a freed tensor whose memory the
 * allocator reused) fails CR_CHECK_TENSOR instead of being read as one. */
enum { CR_TENSOR_LIVE = 0x7e4a5c31, CR_TENSOR_DEAD = 0x0dead7e4 };

struct cr_tensor {
    uint32_t magic; /* CR_TENSOR_LIVE; first, so checking it reads only the first word */
    int64_t refcount;
    cr_storage *storage;
    int64_t offset; /* in elements */
    int64_t numel;
    int ndim;
    cr_dtype dtype;
    int64_t shape[CR_MAX_DIMS];
    int64_t stride[CR_MAX_DIMS];
    /* autograd */
    bool requires_grad;
    bool retains_grad;
    bool is_view; /* shares storage with another tensor of the graph */
    cr_tensor *grad;
    struct cr_node *grad_fn; /* owned reference; NULL for leaves */
    int output_nr;
    struct cr_node *grad_acc; /* weak: the leaf's accumulate node, if one is alive */
    int *hooks, nhooks;       /* leaf pre-hooks */
    int *post_hooks, npost_hooks;
};

/* Allocation of a fresh contiguous tensor; returns CR_ERR_OOM with a message on failure. */
/* A fresh tensor, row-major or (4-D only) channels-last. */
cr_status cr_tensor_alloc_layout(cr_tensor **out, int ndim, const int64_t *shape, cr_dtype dt,
                                 cr_device dev, bool channels_last);
/* Channels-last when `like` is channels-last with this shape, else row-major: elementwise
 * results keep their input's layout. */
cr_status cr_tensor_alloc_as(cr_tensor **out, int ndim, const int64_t *shape, cr_dtype dt,
                             cr_device dev, const cr_tensor *like);
cr_status cr_tensor_alloc(cr_tensor **out, int ndim, const int64_t *shape, cr_dtype dt,
                          cr_device dev);
/* A fresh row-major tensor in page-locked host memory (the source of async copies). */
cr_status cr_tensor_alloc_pinned(cr_tensor **out, int ndim, const int64_t *shape, cr_dtype dt);
cr_status cr_tensor_alloc_like(cr_tensor **out, const cr_tensor *t);
/* A new handle sharing t's storage with the given geometry (no autograd). */
cr_tensor *cr_tensor_alias(const cr_tensor *t, int ndim, const int64_t *shape,
                           const int64_t *stride, int64_t offset);
void cr_contiguous_strides(int ndim, const int64_t *shape, int64_t *stride);
int64_t cr_shape_numel(int ndim, const int64_t *shape);
bool cr_same_shape(const cr_tensor *a, const cr_tensor *b);
static inline char *cr_tensor_ptr(const cr_tensor *t) {
    return (char *)t->storage->data + t->offset * (int64_t)cr_dtype_size(t->dtype);
}
static inline cr_device cr_tensor_dev(const cr_tensor *t) {
    return (cr_device){t->storage->device, t->storage->device_index};
}
static inline bool cr_tensor_on_cpu(const cr_tensor *t) { return t->storage->device == CR_DEV_CPU; }
static inline bool cr_same_device(const cr_tensor *a, const cr_tensor *b) {
    return a->storage->device == b->storage->device &&
           a->storage->device_index == b->storage->device_index;
}
/* A 0-dim cpu tensor: a number that may join an op on any device. */
static inline bool cr_is_host_scalar(const cr_tensor *t) {
    return t->ndim == 0 && t->storage->device == CR_DEV_CPU;
}
/* "cpu" or "cuda:N", for messages. */
const char *cr_device_str(cr_device dev, char *buf, size_t cap);
static inline void cr_tensor_bump_version(cr_tensor *t) { t->storage->version++; }

/* ---- element access for any dtype (core/dtype.c; f16/bf16 conversions in half.h) ---- */
double cr_load_f64(const void *p, cr_dtype dt);
void cr_store_f64(void *p, cr_dtype dt, double v); /* float -> int: toward zero, saturated, NaN 0 */
/* Integers stored and loaded exactly: a narrower integer dtype wraps modulo 2^bits. */
void cr_store_i64(void *p, cr_dtype dt, int64_t v);
int64_t cr_load_i64(const void *p, cr_dtype dt);
/* A value from the user for a tensor of dtype dt: an error naming op, v and the range
 * when an integer dtype cannot hold it (NaN, an infinity, out of range). */
cr_status cr_check_value(const char *op, cr_dtype dt, double v);
/* Offset (in elements) of flat row-major index i within the view. */
int64_t cr_flat_offset(const cr_tensor *t, int64_t i);

/* ---- argument checks shared by every op (they set the message and return) ---- */
#define CR_CHECK_TENSOR(opname, t, argname)                                          \
    do {                                                                             \
        if (!(t))                                                                    \
            return cr_fail(CR_ERR_ARG, "%s: argument '%s' is nil; pass a tensor",    \
                           opname, argname);                                         \
        if ((t)->magic != CR_TENSOR_LIVE)                                            \
            return cr_fail(CR_ERR_ARG, "%s: argument '%s' is not a live tensor (a "  \
                           "freed one, or another object)", opname, argname);        \
    } while (0)
cr_status cr_check_same_device(const char *op, const cr_tensor *a, const cr_tensor *b);
cr_status cr_check_float(const char *op, const cr_tensor *t, const char *argname);
/* Normalises dim into [0, ndim) (ndim+1 when `insert`), or fails naming the op. */
cr_status cr_check_dim(const char *op, int64_t *dim, int ndim, bool insert);
cr_status cr_check_shape_arg(const char *op, int ndim, const int64_t *shape);
cr_status cr_broadcast_shapes(const char *op, const cr_tensor *a, const cr_tensor *b,
                              int *ndim, int64_t *shape);

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
/* The profiler's spans (core/profile.c): push a static name, pop with its index. */
int64_t cr_profile_push(const char *name);
void cr_profile_pop(int64_t index);
/* "<op name> backward", a static string (ops/registry.c). */
const char *cr_op_backward_name(cr_op op);
/* Releases c->out[*] after a failure. */
void cr_call_drop_outs(cr_call *c);

typedef cr_status (*cr_kernel_fn)(cr_call *c);

/* ---- autograd (autograd/graph.c) ---- */
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

typedef struct cr_node {
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
} cr_node;

/* Derivative rule: given grads of the outputs (never NULL for float outputs: missing
 * ones are zeros; always NULL for integer outputs such as indices or masks),
 * writes new references into gin[i] for each input i with n->edges[i].node != NULL.
 * Runs with grad recording off. */
typedef cr_status (*cr_grad_fn)(cr_node *n, cr_tensor **gout, cr_tensor **gin);
/* Listed for ops without a derivative; never called. */
cr_status cr_grad_none(cr_node *n, cr_tensor **gout, cr_tensor **gin);

bool cr_autograd_needed(const cr_call *c);
/* After a successful forward: if any input requires grad and recording is on, builds
 * the node, saving detached aliases of the inputs in save_in (bitmask) and outputs in
 * save_out, and marks the outputs. Outputs that are not float stay grad-free. */
cr_status cr_autograd_record(cr_call *c, unsigned save_in, unsigned save_out);
/* The tail of an op's entry point: cr_dispatch, then cr_autograd_record(c, save_in,
 * save_out); on success *out = c->out[0] (out may be NULL: the caller takes c->out),
 * on failure every output is released and *out untouched. */
cr_status cr_call_finish(cr_tensor **out, cr_call *c, unsigned save_in, unsigned save_out);
/* Fetches saved input/output k, failing if it was released or modified in place. */
cr_status cr_saved_in(cr_node *n, int k, cr_tensor **t);
cr_status cr_saved_out(cr_node *n, int k, cr_tensor **t);
void cr_node_retain(cr_node *n);
/* The leaf's accumulate node (created on first use; refcount 0 until an edge takes it). */
cr_node *cr_autograd_leaf_accumulator(cr_tensor *leaf);
void cr_node_free(cr_node *n);
/* Set once by autograd at load: how core lets go of a dying tensor's graph node. */
void cr_core_set_grad_fn_release(void (*release)(cr_tensor *t));
/* Guard for in-place ops: fails on leaves that require grad while recording. */
cr_status cr_check_inplace(const char *op, cr_tensor *t);
/* A tensor of `value` on `dev` (zero grads of the inputs a rule does not reach). */
cr_status cr_full_on(cr_tensor **out, int ndim, const int64_t *shape, double value, cr_dtype dt,
                     cr_device dev);
static inline cr_status cr_zeros_meta(cr_tensor **out, const cr_input_meta *m) {
    return cr_full_on(out, m->ndim, m->shape, 0.0, m->dtype, m->device);
}
/* Sum `g` down to a broadcast source shape (grad of broadcasting). New reference. */
cr_status cr_sum_to_shape(cr_tensor **out, cr_tensor *g, int ndim, const int64_t *shape);

extern cr_grad_fn cr_grad_table[];
extern cr_kernel_fn cr_kernel_table[][CR_DEV_COUNT];

/* Every CPU kernel and derivative rule named in the op list, so kernels can call each
 * other (the CUDA column is declared in csrc/cuda/cuda_impl.h). */
#define CR_DECLARE_KERNEL(E, name, kernel, cuda, rule, amp)                               \
    cr_status kernel(cr_call *c);                                                    \
    cr_status rule(cr_node *n, cr_tensor **gout, cr_tensor **gin);
CR_OPS(CR_DECLARE_KERNEL)
#undef CR_DECLARE_KERNEL

/* ---- threads (core/threads.c) ---- */
int cr_threads(void);
/* Work below this many elements runs on one thread: the OpenMP fork costs more. */
enum { CR_PAR_GRAIN = 32768 };

#endif
