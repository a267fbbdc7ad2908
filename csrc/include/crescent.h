/* crescent.h — the one public C API of crescent.
 *
 * Plain C that LuaJIT's ffi.cdef accepts after preprocessing: the Makefile runs
 * `cc -E -P -DCR_CDEF` on this file to produce build/crescent_cdef.h, which the Lua
 * binding loads. So: no macros inside declarations, enums instead of #defines, opaque
 * handles, POD structs. Ownership is in the name: every function that returns a tensor
 * through `cr_tensor **out` hands the caller one reference (release it with
 * cr_tensor_free). Every function that can fail on user input returns cr_status and
 * leaves a message in cr_last_error(). */
#ifndef CRESCENT_H
#define CRESCENT_H

#ifndef CR_CDEF
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

enum { CR_MAX_DIMS = 8 };

typedef enum {
    CR_OK = 0,
    CR_ERR_ARG = 1,      /* bad argument: shape, dtype, range, nil */
    CR_ERR_OOM = 2,      /* allocation failed: the binding collects garbage and retries once */
    CR_ERR_DEVICE = 3,   /* wrong or unavailable device */
    CR_ERR_AUTOGRAD = 4, /* graph misuse: double backward, modified saved tensor */
    CR_ERR_UNSUPPORTED = 5
} cr_status;

/* The dtypes, once: X(ENUM, name, bytes, is_float). The enum, the names, the sizes and
 * the float test (core/dtype.c) come from this list; the order is the ABI. */
#define CR_DTYPES(X)                                                                 \
    X(CR_DT_F32, "f32", 4, 1)                                                        \
    X(CR_DT_F64, "f64", 8, 1)                                                        \
    X(CR_DT_F16, "f16", 2, 1)                                                        \
    X(CR_DT_BF16, "bf16", 2, 1)                                                      \
    X(CR_DT_I64, "i64", 8, 0)                                                        \
    X(CR_DT_I32, "i32", 4, 0)                                                        \
    X(CR_DT_U8, "u8", 1, 0)                                                          \
    X(CR_DT_BOOL, "bool", 1, 0)

typedef enum {
#define CR_DTYPE_ENUM(e, name, bytes, is_float) e,
    CR_DTYPES(CR_DTYPE_ENUM)
#undef CR_DTYPE_ENUM
    CR_DT_COUNT
} cr_dtype;

typedef enum { CR_DEV_CPU = 0, CR_DEV_CUDA, CR_DEV_COUNT } cr_devtype;

typedef struct cr_tensor cr_tensor;
typedef struct cr_engine cr_engine;

/* ---- errors, threads, memory ------------------------------------------------ */
const char *cr_last_error(void);
void cr_set_num_threads(int n);
int cr_get_num_threads(void);
const char *cr_version(void);
const char *cr_build_features(void); /* "onednn=1 cuda=0": the core's (cr.features() adds mpi) */
const char *cr_dnnl_version(void);   /* "3.0.0"; "" when built without oneDNN */
/* The number of usable CUDA GPUs, or -1 with the reason in why (no driver, a driver
 * older than the build's toolkit, no device); the driver is opened at run time. */
int cr_cuda_probe(char *why, size_t cap);
/* CUDA_VERSION of the toolkit this build was compiled against (13000 = 13.0); 0: none. */
int cr_cuda_built_version(void);

/* ---- CUDA devices. The backend (build/libcrescent_cuda.so) is opened on first use; every
 * function below fails with the reason when no GPU is usable. ---- */
typedef struct {
    int64_t allocated_bytes;      /* held by live tensors (in the allocator's size classes) */
    int64_t reserved_bytes;       /* allocated plus cached: what the device gave crescent */
    int64_t peak_allocated_bytes; /* high-water mark of allocated_bytes */
    int64_t allocs;               /* allocations so far */
    int64_t cache_hits;           /* of those, served from the cache */
    int64_t device_mallocs;       /* cudaMalloc calls */
    int64_t oom_retries;          /* allocations that emptied the cache and retried */
} cr_cuda_memstats;
cr_status cr_cuda_init(void);
int cr_cuda_device_count(void); /* 0 when no GPU is usable */
cr_status cr_cuda_memory_stats(int device, cr_cuda_memstats *out);
cr_status cr_cuda_reset_peak(int device);
/* Gives the cached device blocks back to the driver (waits for the devices first). */
cr_status cr_cuda_empty_cache(void);
cr_status cr_cuda_synchronize(int device); /* -1: every device */
/* Only convolution algorithms that give the same bits on every run (train.deterministic). */
cr_status cr_cuda_set_deterministic(bool on);

typedef struct {
    int64_t live_bytes;    /* bytes held by live CPU storages */
    int64_t peak_bytes;    /* high-water mark of live_bytes */
    int64_t live_tensors;  /* tensor handles alive */
    int64_t live_storages;
    int64_t allocs;        /* storage allocations so far */
    int64_t cached_bytes;  /* freed large blocks kept for reuse (not in live_bytes) */
    int64_t cache_hits;    /* allocations served from that cache */
} cr_memstats;
void cr_memory_stats(cr_memstats *out);
void cr_memory_reset_peak(void);
/* Gives the cached blocks back to the system. */
void cr_memory_empty_cache(void);
/* At most this many bytes stay cached; -1 restores the default (env
 * CRESCENT_HOST_CACHE_MB, else a quarter of physical memory), 0 turns caching off. */
void cr_memory_set_cache_limit(int64_t bytes);
/* 1 when enough bytes were allocated since the last call that returned 1 that the
 * binding should run the Lua GC (tensor bytes live outside the Lua heap). */
int cr_memory_gc_hint(void);

/* ---- dtypes ----------------------------------------------------------------- */
const char *cr_dtype_name(cr_dtype dt);
size_t cr_dtype_size(cr_dtype dt);
bool cr_dtype_is_float(cr_dtype dt);
/* Whether a value from the user fits dtype dt: always for floats and bool; for integer
 * dtypes a finite value within the range once truncated toward zero. */
bool cr_dtype_holds(cr_dtype dt, double v);
cr_dtype cr_dtype_promote(cr_dtype a, cr_dtype b);

/* ---- tensors: lifetime and metadata ---------------------------------------- */
/* Uninitialised; dev_index picks the GPU for CR_DEV_CUDA (0 for the cpu). */
cr_status cr_tensor_empty(cr_tensor **out, int ndim, const int64_t *shape, cr_dtype dt,
                          cr_devtype dev, int dev_index);
/* Wraps a copy of `nbytes` bytes of host data laid out contiguously in `dt`. */
cr_status cr_tensor_from_data(cr_tensor **out, const void *data, int ndim,
                              const int64_t *shape, cr_dtype dt);
cr_status cr_tensor_scalar(cr_tensor **out, double value, cr_dtype dt);
void cr_tensor_retain(cr_tensor *t);
void cr_tensor_free(cr_tensor *t);
/* Lua's t:free(): when the caller's reference is the only one, releases the tensor's
 * memory, graph node and grad now and leaves the handle empty and marked dead (every op
 * then refuses it) until cr_tensor_free frees the handle; returns true. Returns false,
 * doing nothing, when others hold the tensor too (the caller then drops its reference
 * with cr_tensor_free) or it is not a live tensor. */
bool cr_tensor_release(cr_tensor *t);
/* Whether t is a live tensor (not released or freed, and a tensor at all). */
bool cr_tensor_is_live(const cr_tensor *t);

int cr_tensor_ndim(const cr_tensor *t);
int64_t cr_tensor_size(const cr_tensor *t, int dim);
int64_t cr_tensor_stride(const cr_tensor *t, int dim);
int64_t cr_tensor_offset(const cr_tensor *t);
int64_t cr_tensor_numel(const cr_tensor *t);
cr_dtype cr_tensor_dtype(const cr_tensor *t);
cr_devtype cr_tensor_device(const cr_tensor *t);
int cr_tensor_device_index(const cr_tensor *t);
bool cr_tensor_is_contiguous(const cr_tensor *t);
bool cr_tensor_is_pinned(const cr_tensor *t); /* in page-locked host memory */
/* Dense [N, C, H, W] with strides [HWC, 1, WC, C] (and not also row-major): the layout of
 * conv2d's f32 output on the oneDNN path, which elementwise ops and batch norm keep. */
bool cr_tensor_is_channels_last(const cr_tensor *t);
/* Address of element 0 of the view (CPU only; NULL otherwise). */
void *cr_tensor_data(const cr_tensor *t);
uint64_t cr_tensor_version(const cr_tensor *t);
bool cr_tensor_same_storage(const cr_tensor *a, const cr_tensor *b);
/* Element at a flat row-major index of the view, as double (any dtype). */
double cr_tensor_get_flat(const cr_tensor *t, int64_t i);
/* Copies the view's elements, row-major, converted to f64 / i64, into out[numel]. */
cr_status cr_tensor_read_f64(const cr_tensor *t, double *out);
cr_status cr_tensor_read_i64(const cr_tensor *t, int64_t *out);

/* ---- autograd metadata ------------------------------------------------------- */
bool cr_tensor_requires_grad(const cr_tensor *t);
cr_status cr_tensor_set_requires_grad(cr_tensor *t, bool flag);
bool cr_tensor_is_leaf(const cr_tensor *t);
/* New reference to .grad, or NULL. */
cr_tensor *cr_tensor_grad(const cr_tensor *t);
cr_status cr_tensor_set_grad(cr_tensor *t, cr_tensor *grad); /* grad may be NULL */
/* Name of the op that produced t ("" for leaves). */
const char *cr_tensor_grad_fn_name(const cr_tensor *t);
/* A new tensor sharing storage, cut from the graph. */
cr_status cr_tensor_detach(cr_tensor **out, cr_tensor *t);

/* Grad recording is on by default; returns the previous value. Thread-local. */
bool cr_grad_set_enabled(bool enabled);
bool cr_grad_is_enabled(void);

/* Autocast (mixed precision): while set to f16 or bf16, matrix products (mm, bmm, addmm,
 * linear) and convolutions cast their f32 inputs to that dtype, and the
 * precision-sensitive ops (softmax, log_softmax, the losses, normalize, layer_norm, sum,
 * mean) cast half inputs to f32. The casts are recorded, so grads reach f32 leaves in f32. CR_DT_F32
 * turns it off (the default). Returns the previous setting. Thread-local. */
cr_dtype cr_autocast_set(cr_dtype dt);
cr_dtype cr_autocast_get(void);

/* ---- RNG: Philox4x32-10, counter based -------------------------------------- */
void cr_rng_manual_seed(uint64_t seed);
/* State is (seed, offset in 128-bit counters); saved and restored by checkpoints. */
void cr_rng_get_state(uint64_t *seed, uint64_t *offset);
void cr_rng_set_state(uint64_t seed, uint64_t offset);
/* The raw stream, for tests: out[i] = word i%4 of Philox(key=seed, counter=offset+i/4). */
void cr_rng_philox_words(uint32_t *out, int64_t n, uint64_t seed, uint64_t offset);

/* ---- the profiler: spans of every op, backward rule and named region ----------- */
/* While on, every op the calling thread dispatches, every backward rule the engine runs
 * (named "<op> backward") and every region between cr_profile_begin and cr_profile_end
 * (a step, the optimizer) is recorded with its start and duration in microseconds, its
 * nesting depth and its self time (its duration less its children's). Only the thread
 * that called cr_profile_start is recorded. Starting again discards the last record. */
cr_status cr_profile_start(void);
/* As cr_profile_start, with every span timed on the GPU instead: a timing event on the
 * compute stream of cuda:device at its start and end, so a span's time is the GPU work
 * queued inside it (host work that the GPU overlaps costs nothing there). The times are
 * read at cr_profile_stop, which waits for the device; a span whose events could not be
 * made keeps its host times. */
cr_status cr_profile_start_gpu(int device);
void cr_profile_stop(void);
bool cr_profile_active(void);
/* A named region (names are copied); returns its index for cr_profile_end, or -1 when
 * the profiler is off. */
int64_t cr_profile_begin(const char *name);
void cr_profile_end(int64_t index);
/* The record: its length, and event i's fields (start and durations in microseconds
 * from cr_profile_start; name borrowed until the next start). */
int64_t cr_profile_count(void);
cr_status cr_profile_event(int64_t i, const char **name, double *start_us, double *dur_us, double *self_us,
                           int *depth);

/* ---- the op registry --------------------------------------------------------- */
#include "crescent_ops.h"

const char *cr_op_name(cr_op op);
int cr_op_count(void);
bool cr_op_differentiable(cr_op op);
/* Whether `dev` has a kernel for op (the cuda column fills when the backend opens). */
bool cr_op_has_kernel(cr_op op, cr_devtype dev);

/* ---- the backward engine, pull-style ------------------------------------------
 * C never calls Lua here. cr_engine_run returns to the caller whenever Lua work is
 * needed (a gradient hook, a Lua-defined autograd function), the caller does it and
 * calls cr_engine_run again, until CR_ENGINE_DONE. */
typedef enum {
    CR_ENGINE_DONE = 0,
    CR_ENGINE_HOOK = 1,    /* call hook `event_id` with grad `event_grad`; may replace it */
    CR_ENGINE_CUSTOM = 2,  /* run the Lua function `event_id`'s backward on the grads */
    CR_ENGINE_POST_ACC = 3 /* post-accumulate hook `event_id` on leaf `event_tensor` */
} cr_engine_event;

cr_status cr_engine_new(cr_engine **out, cr_tensor *root, cr_tensor *grad, bool retain_graph);
cr_status cr_engine_run(cr_engine *e, cr_engine_event *event);
int cr_engine_event_id(const cr_engine *e);
/* Borrowed references, valid until the next cr_engine_run. */
cr_tensor *cr_engine_event_grad(const cr_engine *e, int i);
int cr_engine_event_ngrads(const cr_engine *e);
cr_tensor *cr_engine_event_tensor(const cr_engine *e);
/* Answers to an event: a replacement grad for HOOK, grad i for CUSTOM (NULL = none). */
cr_status cr_engine_answer(cr_engine *e, int i, cr_tensor *grad);
void cr_engine_free(cr_engine *e);

/* Gradient hooks. A hook id is chosen by the caller (the binding keeps id -> function).
 * On a leaf, pre-hooks see the incoming grad before it is accumulated into .grad, and
 * post-accumulate hooks fire after (DDP launches its bucket all-reduces from those). */
cr_status cr_tensor_add_hook(cr_tensor *t, int hook_id);
cr_status cr_tensor_add_post_accumulate_hook(cr_tensor *t, int hook_id);
cr_status cr_tensor_remove_hook(cr_tensor *t, int hook_id);
cr_status cr_tensor_retain_grad(cr_tensor *t);

/* Lua-defined autograd functions: the binding computes the forward under no_grad, then
 * records a node whose backward is answered through CR_ENGINE_CUSTOM with `fn_id`. */
cr_status cr_autograd_custom(cr_tensor **outs, int nout, cr_tensor **ins, int nin, int fn_id);
/* Ids of Lua functions whose nodes were freed since the last call, so the binding can
 * drop its references. Returns how many were written (at most cap). */
int cr_autograd_reap_custom(int *ids, int cap);
/* What the graph behind `root` keeps for its backward, per op (arrays of CR_OP_COUNT):
 * bytes of the storages its nodes' saved tensors hold (each storage once), how many, and
 * how many nodes; leaf_bytes: storages saved as leaves' values (parameters). */
cr_status cr_autograd_saved_memory(const cr_tensor *root, int64_t *bytes, int64_t *tensors,
                                   int64_t *nodes, int64_t *leaf_bytes);

/* ---- data: IDX reader, sampler order, batch assembly (csrc/data/) ----------- */
#include "crescent_data.h"
#include "crescent_images.h"

/* ---- fused optimizer updates, gradient clipping --------------------------------- */
#include "crescent_optim.h"
#include "crescent_ssl.h" /* SSL: Sinkhorn-Knopp, momentum (EMA) update */
#include "crescent_io.h"  /* weights on disk: safetensors */
#include "crescent_dist.h" /* collectives: MPI (cpu), NCCL (GPU), TCP rendezvous */

#ifdef __cplusplus
}
#endif
#endif
