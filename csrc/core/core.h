/* core.h — the core layer's private view: tensors and storages, errors, element access,
 * argument checks, the host cache, threads and profiler spans. Includes nothing of the
 * layers above (ops/call.h, autograd/node.h); the files of core/ include only this. */
#ifndef CR_CORE_H
#define CR_CORE_H

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

struct cr_node; /* autograd/node.h */

/* A live tensor's first word; anything else where a tensor is expected (a foreign
 * object the FFI passed as a pointer to its payload, a freed tensor whose memory the
 * allocator reused) fails CR_CHECK_TENSOR instead of being read as one. */
enum { CR_TENSOR_LIVE = 0x7e4a5c31, CR_TENSOR_DEAD = 0x0dead7e4 };

struct cr_tensor {
    /* What freeing a handle reads sits in its first cache line: Lua's collector frees
     * handles in bursts long after their last use, so each line read is a cache miss. */
    uint32_t magic; /* CR_TENSOR_LIVE; first, so checking it reads only the first word */
    int nhooks;     /* leaf pre-hooks */
    int64_t refcount;
    cr_storage *storage;
    cr_tensor *grad;
    struct cr_node *grad_fn; /* owned reference; NULL for leaves */
    int *hooks;
    int *post_hooks;
    int npost_hooks;
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
    int output_nr;
    struct cr_node *grad_acc; /* weak: the leaf's accumulate node, if one is alive */
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
/* f16 or bf16: the dtypes the CPU computes through f32. */
static inline bool cr_dtype_is_half(cr_dtype dt) { return dt == CR_DT_F16 || dt == CR_DT_BF16; }
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

/* ---- threads (core/threads.c) ---- */
int cr_threads(void);
/* Work below this many elements runs on one thread: the OpenMP fork costs more. */
enum { CR_PAR_GRAIN = 32768 };

/* ---- the profiler's spans (core/profile.c): push a static name, pop with its index ---- */
int64_t cr_profile_push(const char *name);
void cr_profile_pop(int64_t index);

/* Set once by autograd at load: how core lets go of a dying tensor's graph node. */
void cr_core_set_grad_fn_release(void (*release)(cr_tensor *t));

#endif
