/* cuda_backend.h — what the core asks of the CUDA backend, and how it finds it.
 *
 * The backend is a library of its own, build/libcrescent_cuda.so (csrc/cuda/, built when
 * nvcc is present), opened with dlopen the first time a tensor goes to a GPU. So
 * libcrescent.so itself needs no CUDA library to load and run on the CPU, and one build
 * serves machines with and without GPUs. On opening, the backend fills this table (memory,
 * copies, streams) and its column of the dispatch table cr_kernel_table[op][CR_DEV_CUDA].
 * Private to the C layers. */
#ifndef CR_CUDA_BACKEND_H
#define CR_CUDA_BACKEND_H

#include "gpu_chunks.h"
#include "core.h"

enum { CR_CUDA_BACKEND_ABI = 6 };

/* The collectives of the NCCL entry. `count` is what one rank contributes: numel of the
 * tensor for all_reduce and broadcast, of `send` for all_gather, of `recv` for
 * reduce_scatter. */
typedef enum {
    CR_COLL_ALL_REDUCE = 0,
    CR_COLL_BROADCAST,
    CR_COLL_ALL_GATHER,
    CR_COLL_REDUCE_SCATTER
} cr_collective;

typedef struct cr_cuda_backend {
    int abi; /* CR_CUDA_BACKEND_ABI of the backend's build; must equal the core's */
    int device_count;
    /* GPU bytes allocated between Lua collections at the least (core/tensor.c's GC hint):
     * an eighth of the smallest device's memory. */
    int64_t gc_every_bytes;
    /* Device memory from the caching allocator of `device`. Blocks belong to the device's
     * compute stream: a freed block is reused by later work on that stream without a
     * wait. Out of memory: the cache is emptied and the request retried once, then
     * CR_ERR_OOM with the size and the allocator's stats. */
    cr_status (*alloc)(int device, size_t bytes, void **ptr);
    void (*release)(int device, void *ptr, size_t bytes);
    /* Page-locked host memory (the only source from which host-to-device copies can run
     * asynchronously), cached by size class; release takes the bytes that were asked. */
    cr_status (*host_alloc)(size_t bytes, void **ptr);
    void (*host_release)(void *ptr, size_t bytes);
    /* Copies bytes; a device of -1 means the host. Device-to-host copies wait for the
     * data. A host-to-device copy from pinned memory with non_blocking runs on the copy
     * stream, and the compute stream waits for it before its next kernel. */
    cr_status (*copy)(void *dst, int dst_device, const void *src, int src_device, size_t bytes,
                      bool non_blocking);
    cr_status (*synchronize)(int device); /* -1: every device */
    cr_status (*memory_stats)(int device, cr_cuda_memstats *out);
    void (*reset_peak)(int device);
    void (*empty_cache)(void);
    void (*set_deterministic)(bool on); /* deterministic cuDNN algorithms only */
    /* The fused optimizer updates and the norms behind LARS and clipping, on `device`
     * (see gpu_chunks.h); pow_sums writes n host doubles and waits for them. */
    cr_status (*optim_update)(int device, const cr_gpu_optim_chunk *chunks, int64_t n);
    cr_status (*pow_sums)(int device, const cr_gpu_norm_chunk *chunks, int64_t n, double p,
                          double *out);
    /* The profiler's GPU clock (core/profile.c): event_record makes a timing event and
     * records it on the device's compute stream; event_elapsed gives the milliseconds
     * between two recorded events once the device was synchronised; event_free. */
    cr_status (*event_record)(int device, void **event);
    cr_status (*event_elapsed)(void *start, void *end, double *ms);
    void (*event_free)(void *event);
    /* NCCL (csrc/cuda/nccl.c): one communicator per process, on one device, with a stream
     * of its own. All NULL in a backend built without nccl.h. The core (dist/nccl.c)
     * checks the arguments; these check only what the core cannot see.
     *   nccl_unique_id: CR_NCCL_ID_BYTES bytes of ncclGetUniqueId, made on rank 0.
     *   nccl_init: the communicator of `rank` on `device`, waiting at most timeout_s for
     *     the other ranks to join (then CR_ERR_DEVICE naming the wait); timeout_s is kept
     *     as the limit of every later wait (a watchdog thread and nccl_synchronize).
     *   nccl_collective: enqueues `kind` on the communicator's stream after the work
     *     queued so far on the device's compute stream; *done receives an event recorded
     *     after it (an opaque cudaEvent_t) that nccl_wait consumes. `recv` and `send` are
     *     device pointers (the same for in-place); root only for broadcast.
     *   nccl_wait: the compute stream waits for `done` (the host does not), which is then
     *     destroyed; also on failure.
     *   nccl_synchronize: the host waits for every collective enqueued so far, up to the
     *     timeout; a timeout or an NCCL error prints one line, aborts the communicator and
     *     ends the process (crescent_dist.h).
     *   nccl_finalize: waits (as synchronize), then frees the communicator; a no-op
     *     without one. */
    cr_status (*nccl_unique_id)(uint8_t *id);
    cr_status (*nccl_init)(int rank, int world, const uint8_t *id, int device, double timeout_s);
    cr_status (*nccl_collective)(cr_collective kind, void *recv, const void *send, int64_t count,
                                 cr_dtype dt, cr_reduce_op op, int root, void **done);
    cr_status (*nccl_wait)(void *done);
    cr_status (*nccl_synchronize)(void);
    void (*nccl_finalize)(void);
} cr_cuda_backend;

/* Exported by libcrescent_cuda.so: fills *out (and the CUDA column of the dispatch table),
 * or fails with the reason (CR_ERR_DEVICE). It first checks that the caller was built
 * from the same version (core_abi, table_bytes) and writes nothing when it was not. */
typedef cr_status (*cr_cuda_backend_open_fn)(cr_cuda_backend *out, int core_abi, size_t table_bytes);

/* The loaded backend, opening it on first use; NULL with the reason in cr_last_error()
 * (no driver, no device, a version mismatch, or a build without nvcc). */
const cr_cuda_backend *cr_cuda_backend_get(void);
/* The backend, with `device` checked to be one of its GPUs (-1, every GPU, when any_ok). */
cr_status cr_cuda_backend_for(const cr_cuda_backend **be, int device, bool any_ok);

#endif
