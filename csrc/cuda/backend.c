/* backend.c — the CUDA backend's entry (cr_cuda_backend_open, called by the core's
 * cuda_loader.c): the function table it fills, copies between host and devices, pinned
 * host memory, events, the optimizer's chunked updates. The per-device context (streams,
 * cuBLAS handle, error mapping) is device.c's.
 *
 * Ordering: every kernel, library call and allocation of a device runs on its compute
 * stream, so work is ordered without events. The copy stream carries only asynchronous
 * host-to-device copies from pinned memory: it first waits for the compute stream (the
 * destination block may have just been freed by queued work), and the compute stream
 * then waits for the copy before its next kernel. */
#include <pthread.h>

#include "cuda_impl.h"

/* ---- copies ---- */
static cr_status copy_async_h2d(void *dst, int dd, const void *src, size_t bytes) {
    cudaStream_t compute = cr_gpu_stream(dd), copy = cr_gpu_copy_stream(dd);
    cudaEvent_t before = NULL, after = NULL;
    cr_status st = cr_gpu_check(cudaEventCreateWithFlags(&before, cudaEventDisableTiming), "event");
    if (!st) st = cr_gpu_check(cudaEventCreateWithFlags(&after, cudaEventDisableTiming), "event");
    if (!st) st = cr_gpu_check(cudaEventRecord(before, compute), "cudaEventRecord");
    if (!st) st = cr_gpu_check(cudaStreamWaitEvent(copy, before, 0), "cudaStreamWaitEvent");
    if (!st)
        st = cr_gpu_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, copy),
                          "copying to the GPU");
    if (!st) st = cr_gpu_check(cudaEventRecord(after, copy), "cudaEventRecord");
    if (!st) st = cr_gpu_check(cudaStreamWaitEvent(compute, after, 0), "cudaStreamWaitEvent");
    if (before) cudaEventDestroy(before); /* released by the driver once they complete */
    if (after) cudaEventDestroy(after);
    return st;
}

static cr_status copy(void *dst, int dd, const void *src, int sd, size_t bytes, bool non_blocking) {
    cr_status st;
    if (sd < 0 && dd < 0) {
        memcpy(dst, src, bytes);
        return CR_OK;
    }
    if (sd < 0) { /* host -> device */
        if ((st = cr_gpu_enter(dd))) return st;
        if (non_blocking) return copy_async_h2d(dst, dd, src, bytes);
        cudaStream_t s = cr_gpu_stream(dd);
        st = cr_gpu_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s),
                          "copying to the GPU");
        /* the pageable source may be freed as soon as we return */
        return st ? st : cr_gpu_check(cudaStreamSynchronize(s), "copying to the GPU");
    }
    if (dd < 0) { /* device -> host: the caller reads the bytes next */
        if ((st = cr_gpu_enter(sd))) return st;
        cudaStream_t s = cr_gpu_stream(sd);
        st = cr_gpu_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s),
                          "copying from the GPU");
        return st ? st : cr_gpu_check(cudaStreamSynchronize(s), "copying from the GPU");
    }
    if (sd == dd) {
        if ((st = cr_gpu_enter(dd))) return st;
        return cr_gpu_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice,
                                            cr_gpu_stream(dd)), "copying on the GPU");
    }
    /* between GPUs: the source's queued work first, then the copy on the target's stream */
    if ((st = cr_gpu_enter(sd)) ||
        (st = cr_gpu_check(cudaStreamSynchronize(cr_gpu_stream(sd)), "copying between GPUs")) ||
        (st = cr_gpu_enter(dd)))
        return st;
    /* the source block belongs to the source's stream, which may reuse it as soon as the
     * caller frees it: the copy must be over before we return */
    st = cr_gpu_check(cudaMemcpyPeerAsync(dst, dd, src, sd, bytes, cr_gpu_stream(dd)),
                      "copying between GPUs");
    return st ? st : cr_gpu_check(cudaStreamSynchronize(cr_gpu_stream(dd)), "copying between GPUs");
}

static cr_status synchronize(int device) {
    for (int d = device < 0 ? 0 : device; d < (device < 0 ? cr_gpu_device_count() : device + 1); d++) {
        if (!cr_gpu_device_ready(d)) continue;
        cr_status st = cr_gpu_enter(d);
        if (!st) st = cr_gpu_check(cudaStreamSynchronize(cr_gpu_stream(d)), "synchronize");
        if (!st) st = cr_gpu_check(cudaStreamSynchronize(cr_gpu_copy_stream(d)), "synchronize");
        if (st) return st;
    }
    return CR_OK;
}

/* ---- pinned host memory ----
 * cudaHostAlloc page-locks and maps every page, so pinned blocks are cached: a request is
 * rounded to its size class (cr_host_alloc_size: eight classes per power of two) and a
 * released block goes back to a free list for that size. A block may still be the source
 * of a copy in flight when its storage dies, so it is reusable only once an event recorded
 * on every copy stream at release has passed. At most PINNED_CACHE_MAX bytes stay cached;
 * a failed cudaHostAlloc empties the cache and retries once. Lists under pinned_lock. */
enum { PINNED_CACHE_MAX = 1 << 30 };
typedef struct deferred {
    void *ptr;
    size_t size;
    cudaEvent_t done[CR_GPU_MAX_DEVICES];
    int n;
    struct deferred *next;
} deferred;
static deferred *pending; /* released, maybe still read by a copy */
static deferred *cached;  /* reusable (their events destroyed), newest first */
static size_t cached_bytes;
static pthread_mutex_t pinned_lock = PTHREAD_MUTEX_INITIALIZER;

static void free_cached_pinned(void) {
    while (cached) {
        deferred *p = cached;
        cached = p->next;
        cudaFreeHost(p->ptr);
        free(p);
    }
    cached_bytes = 0;
}

/* Released blocks whose copies have passed go to the cache (`wait`: wait for all). */
static void reap_pinned(bool wait) {
    deferred **pp = &pending;
    while (*pp) {
        deferred *p = *pp;
        bool done = true;
        for (int k = 0; k < p->n && done; k++) {
            if (wait) cudaEventSynchronize(p->done[k]);
            else if (cudaEventQuery(p->done[k]) == cudaErrorNotReady) done = false;
        }
        cudaGetLastError();
        if (!done) {
            pp = &p->next;
            continue;
        }
        for (int k = 0; k < p->n; k++) cudaEventDestroy(p->done[k]);
        p->n = 0;
        *pp = p->next;
        if (cached_bytes + p->size > PINNED_CACHE_MAX) {
            cudaFreeHost(p->ptr);
            free(p);
        } else {
            p->next = cached;
            cached = p;
            cached_bytes += p->size;
        }
    }
}

static cr_status host_alloc(size_t bytes, void **ptr) {
    size_t size = cr_host_alloc_size(bytes);
    cudaError_t err = cudaSuccess;
    pthread_mutex_lock(&pinned_lock);
    reap_pinned(false);
    deferred **pp = &cached;
    while (*pp && (*pp)->size != size) pp = &(*pp)->next;
    if (*pp) {
        deferred *hit = *pp;
        *pp = hit->next;
        cached_bytes -= size;
        *ptr = hit->ptr;
        free(hit);
    } else {
        err = cudaHostAlloc(ptr, size, cudaHostAllocPortable);
        if (err == cudaErrorMemoryAllocation) {
            cudaGetLastError();
            reap_pinned(true);
            free_cached_pinned();
            err = cudaHostAlloc(ptr, size, cudaHostAllocPortable);
        }
    }
    pthread_mutex_unlock(&pinned_lock);
    if (err == cudaErrorMemoryAllocation) {
        cudaGetLastError();
        return cr_fail(CR_ERR_OOM, "pin_memory: could not page-lock %zu bytes of host memory; "
                       "pin smaller batches or raise the memlock limit (ulimit -l)", size);
    }
    return cr_gpu_check(err, "pin_memory");
}

static void host_release(void *ptr, size_t bytes) {
    int saved = cr_gpu_current_device();
    deferred *p = calloc(1, sizeof *p);
    if (!p) { /* no record to defer with: wait for the copies, then free */
        for (int d = 0; d < cr_gpu_device_count(); d++)
            if (cr_gpu_device_ready(d) && !cr_gpu_enter(d))
                cudaStreamSynchronize(cr_gpu_copy_stream(d));
        if (saved >= 0) cr_gpu_enter(saved);
        cudaFreeHost(ptr);
        cudaGetLastError();
        return;
    }
    p->ptr = ptr;
    p->size = cr_host_alloc_size(bytes);
    for (int d = 0; d < cr_gpu_device_count(); d++) {
        if (!cr_gpu_device_ready(d) || cr_gpu_enter(d)) continue;
        if (cudaEventCreateWithFlags(&p->done[p->n], cudaEventDisableTiming) != cudaSuccess) break;
        cudaEventRecord(p->done[p->n], cr_gpu_copy_stream(d));
        p->n++;
    }
    if (saved >= 0) cr_gpu_enter(saved);
    cudaGetLastError();
    pthread_mutex_lock(&pinned_lock);
    p->next = pending;
    pending = p;
    reap_pinned(false);
    pthread_mutex_unlock(&pinned_lock);
}

/* A host list copied into a block of the caching allocator. An asynchronous copy from
 * pageable memory may return before the driver has read it, so the list goes through a
 * cached pinned block on the copy stream (ordered both ways with the compute stream), and
 * the block is reused only once that copy has passed. */
static cr_status upload(int device, const void *host, size_t bytes, void **dev) {
    void *staging = NULL;
    cr_status st = host_alloc(bytes, &staging);
    if (st) return st;
    memcpy(staging, host, bytes);
    if (!(st = cr_gpu_alloc(device, bytes, dev)) &&
        (st = copy_async_h2d(*dev, device, staging, bytes)))
        cr_gpu_release(device, *dev, bytes);
    host_release(staging, bytes);
    return st;
}

static cr_status optim_update(int device, const cr_gpu_optim_chunk *chunks, int64_t n) {
    if (n <= 0) return CR_OK;
    if (n > INT32_MAX) return cr_fail(CR_ERR_UNSUPPORTED, "optimizer step: %lld chunks", (long long)n);
    cr_status st = cr_gpu_enter(device);
    size_t bytes = sizeof *chunks * (size_t)n;
    void *dev = NULL;
    if (st || (st = upload(device, chunks, bytes, &dev))) return st;
    st = cr_gpu_check(crk_optim_update(dev, n, cr_gpu_stream(device)), "optimizer step");
    cr_gpu_release(device, dev, bytes); /* stream-ordered: reused only after the kernel */
    return st;
}

static cr_status pow_sums(int device, const cr_gpu_norm_chunk *chunks, int64_t n, double p,
                          double *out) {
    if (n <= 0) return CR_OK;
    if (n > INT32_MAX) return cr_fail(CR_ERR_UNSUPPORTED, "gradient norm: %lld chunks", (long long)n);
    cr_status st = cr_gpu_enter(device);
    size_t bytes = sizeof *chunks * (size_t)n, out_bytes = sizeof(double) * (size_t)n;
    void *dev = NULL, *dout = NULL;
    if (st || (st = upload(device, chunks, bytes, &dev))) return st;
    cudaStream_t s = cr_gpu_stream(device);
    st = cr_gpu_alloc(device, out_bytes, &dout);
    if (!st) st = cr_gpu_check(crk_pow_sums(dev, n, p, dout, s), "gradient norm");
    if (!st)
        st = cr_gpu_check(cudaMemcpyAsync(out, dout, out_bytes, cudaMemcpyDeviceToHost, s),
                          "gradient norm");
    if (!st) st = cr_gpu_check(cudaStreamSynchronize(s), "gradient norm");
    cr_gpu_release(device, dev, bytes);
    if (dout) cr_gpu_release(device, dout, out_bytes);
    return st;
}

static cr_status event_record(int device, void **out) {
    *out = NULL;
    cr_status st = cr_gpu_enter(device);
    if (st) return st;
    cudaEvent_t e = NULL;
    cudaError_t err = cudaEventCreate(&e);
    if (err == cudaSuccess) err = cudaEventRecord(e, cr_gpu_stream(device));
    if (err != cudaSuccess) {
        if (e) cudaEventDestroy(e);
        return cr_gpu_check(err, "profiler: GPU timing event");
    }
    *out = e;
    return CR_OK;
}

static cr_status event_elapsed(void *start, void *end, double *ms) {
    float f = 0;
    cr_status st = cr_gpu_check(cudaEventElapsedTime(&f, (cudaEvent_t)start, (cudaEvent_t)end),
                                "profiler: GPU time between events");
    *ms = f;
    return st;
}

static void event_free(void *e) {
    if (e) cudaEventDestroy((cudaEvent_t)e);
}

static void empty_cache(void) {
    synchronize(-1);
    pthread_mutex_lock(&pinned_lock);
    reap_pinned(true);
    free_cached_pinned();
    pthread_mutex_unlock(&pinned_lock);
    cr_gpu_empty_cache();
}

cr_status cr_cuda_backend_open(cr_cuda_backend *out, int core_abi, size_t table_bytes);
cr_status cr_cuda_backend_open(cr_cuda_backend *out, int core_abi, size_t table_bytes) {
    if (core_abi != CR_CUDA_BACKEND_ABI || table_bytes != sizeof *out)
        return cr_fail(CR_ERR_DEVICE, "built from another crescent version (backend ABI %d, %zu "
                       "bytes; libcrescent.so ABI %d, %zu bytes); rebuild both with make",
                       CR_CUDA_BACKEND_ABI, sizeof *out, core_abi, table_bytes);
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
        cudaGetLastError();
        return cr_fail(CR_ERR_DEVICE, "the CUDA runtime sees no usable GPU: %s",
                       cudaGetErrorString(err));
    }
    if (n < 1) return cr_fail(CR_ERR_DEVICE, "the CUDA runtime sees no GPU");
    int device_count = cr_gpu_devices_found(n);
    size_t smallest = 0;
    for (int d = 0; d < device_count; d++) {
        struct cudaDeviceProp prop;
        if (cudaGetDeviceProperties(&prop, d) == cudaSuccess && (!smallest || prop.totalGlobalMem < smallest))
            smallest = prop.totalGlobalMem;
    }
    cudaGetLastError();
    *out = (cr_cuda_backend){
        .abi = CR_CUDA_BACKEND_ABI,
        .device_count = device_count,
        .gc_every_bytes = smallest ? (int64_t)(smallest / 8) : (int64_t)1 << 30,
        .alloc = cr_gpu_alloc,
        .release = cr_gpu_release,
        .host_alloc = host_alloc,
        .host_release = host_release,
        .copy = copy,
        .synchronize = synchronize,
        .memory_stats = cr_gpu_memory_stats,
        .reset_peak = cr_gpu_reset_peak,
        .empty_cache = empty_cache,
        .set_deterministic = cr_gpu_set_deterministic,
        .optim_update = optim_update,
        .pow_sums = pow_sums,
        .event_record = event_record,
        .event_elapsed = event_elapsed,
        .event_free = event_free,
    };
    cr_gpu_fill_nccl(out); /* NULL entries in a build without NCCL */
    for (int op = 0; op < CR_OP_COUNT; op++)
        cr_kernel_table[op][CR_DEV_CUDA] = cr_gpu_kernels[op] == cr_gpu_none ? NULL : cr_gpu_kernels[op];
    return CR_OK;
}
