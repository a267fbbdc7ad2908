/* allocator.c — the caching allocator of GPU memory, one pool per device.
 *
 * cudaMalloc and cudaFree are slow (cudaFree also waits for the whole device), and a
 * training step frees and requests the same sizes every time. So a freed block is kept in
 * a LIFO list of its size class (512-byte steps below 4 KiB, then eight classes per power
 * of two: at most 12.5% rounding) and handed to the next request of that class. Blocks
 * belong to the device's compute stream (see backend.c), so reusing one needs no event:
 * work queued on that stream before the free runs before work queued after the reuse.
 *
 * When cudaMalloc fails, the device is synchronised, every cached block of the device is
 * returned to the driver and the request is retried once; a second failure is CR_ERR_OOM
 * with the size asked for and the pool's figures (the Lua binding then collects garbage
 * and retries the op once more). */
#include <pthread.h>

#include "cuda_impl.h"

enum { MAX_CLASSES = 512 };

typedef struct free_node {
    void *ptr;
    struct free_node *next;
} free_node;

typedef struct {
    free_node *head;
} size_class;

typedef struct {
    pthread_mutex_t lock;
    size_class classes[MAX_CLASSES]; /* indexed by class_index */
    bool used;                        /* an allocation was made: the device has a context */
    int64_t allocated, cached, peak, allocs, hits, mallocs, oom_retries;
} pool;

static pool pools[CR_GPU_MAX_DEVICES];
static pthread_once_t pools_once = PTHREAD_ONCE_INIT;

static void pools_init(void) {
    for (int d = 0; d < CR_GPU_MAX_DEVICES; d++) pthread_mutex_init(&pools[d].lock, NULL);
}

static size_t class_bytes(size_t bytes) {
    if (bytes <= 4096) return bytes <= 512 ? 512 : (bytes + 511) & ~(size_t)511;
    int top = 63 - __builtin_clzll(bytes);
    size_t step = (size_t)1 << (top - 3);
    return (bytes + step - 1) / step * step;
}

/* The slot of a class size (a class_bytes result), computed rather than searched: 0..7
 * for 512-byte steps up to 4 KiB, then eight per power of two (at most 423). */
static int class_index(size_t cb) {
    if (cb <= 4096) return (int)(cb / 512) - 1;
    int top = 63 - __builtin_clzll(cb);
    return 8 + (top - 12) * 8 + (int)((cb >> (top - 3)) & 7);
}
static size_t index_bytes(int i) {
    if (i < 8) return (size_t)(i + 1) * 512;
    int top = 12 + (i - 8) / 8;
    return ((size_t)8 + (size_t)((i - 8) % 8)) << (top - 3);
}

/* Under the pool's lock, with `device` current: every cached block back to the driver. */
static void release_cached(pool *p) {
    for (int i = 0; i < MAX_CLASSES; i++) {
        size_class *c = &p->classes[i];
        while (c->head) {
            free_node *n = c->head;
            c->head = n->next;
            cudaFree(n->ptr);
            p->cached -= (int64_t)index_bytes(i);
            free(n);
        }
    }
    cudaGetLastError();
}

static void human(int64_t b, char *buf, size_t cap) {
    if (b >= (int64_t)1 << 30) snprintf(buf, cap, "%.2f GiB", (double)b / (1 << 30));
    else snprintf(buf, cap, "%.1f MiB", (double)b / (1 << 20));
}

cr_status cr_gpu_alloc(int device, size_t bytes, void **ptr) {
    pthread_once(&pools_once, pools_init);
    cr_status st = cr_gpu_enter(device);
    if (st) return st;
    pool *p = &pools[device];
    size_t cb = class_bytes(bytes);
    pthread_mutex_lock(&p->lock);
    p->allocs++;
    p->used = true;
    size_class *c = &p->classes[class_index(cb)];
    void *got = NULL;
    if (c->head) {
        free_node *n = c->head;
        c->head = n->next;
        got = n->ptr;
        free(n);
        p->cached -= (int64_t)cb;
        p->hits++;
    } else {
        cudaError_t err = cudaMalloc(&got, cb);
        if (err == cudaErrorMemoryAllocation) {
            cudaGetLastError();
            p->oom_retries++;
            cudaDeviceSynchronize();
            release_cached(p);
            err = cudaMalloc(&got, cb);
        }
        if (err != cudaSuccess) {
            cudaGetLastError();
            size_t free_b = 0, total_b = 0;
            cudaMemGetInfo(&free_b, &total_b);
            char want[32], alloc[32], peak[32], fr[32], tot[32];
            human((int64_t)cb, want, sizeof want);
            human(p->allocated, alloc, sizeof alloc);
            human(p->peak, peak, sizeof peak);
            human((int64_t)free_b, fr, sizeof fr);
            human((int64_t)total_b, tot, sizeof tot);
            pthread_mutex_unlock(&p->lock);
            if (err == cudaErrorMemoryAllocation)
                return cr_fail(CR_ERR_OOM, "out of GPU memory on cuda:%d: could not allocate %s "
                               "(crescent holds %s in tensors, peak %s; the device has %s free "
                               "of %s); free tensors or reduce the batch size", device, want,
                               alloc, peak, fr, tot);
            return cr_gpu_check(err, "cudaMalloc");
        }
        p->mallocs++;
    }
    p->allocated += (int64_t)cb;
    if (p->allocated > p->peak) p->peak = p->allocated;
    pthread_mutex_unlock(&p->lock);
    *ptr = got;
    return CR_OK;
}

void cr_gpu_release(int device, void *ptr, size_t bytes) {
    pool *p = &pools[device];
    size_t cb = class_bytes(bytes);
    free_node *n = malloc(sizeof *n);
    pthread_mutex_lock(&p->lock);
    p->allocated -= (int64_t)cb;
    size_class *c = &p->classes[class_index(cb)];
    if (n) {
        n->ptr = ptr;
        n->next = c->head;
        c->head = n;
        p->cached += (int64_t)cb;
        n = NULL;
    }
    pthread_mutex_unlock(&p->lock);
    if (n) { /* no record to cache it with: give it back */
        free(n);
        if (!cr_gpu_enter(device)) cudaFree(ptr);
    }
}

cr_status cr_gpu_memory_stats(int device, cr_cuda_memstats *out) {
    pthread_once(&pools_once, pools_init);
    pool *p = &pools[device];
    pthread_mutex_lock(&p->lock);
    *out = (cr_cuda_memstats){
        .allocated_bytes = p->allocated,
        .reserved_bytes = p->allocated + p->cached,
        .peak_allocated_bytes = p->peak,
        .allocs = p->allocs,
        .cache_hits = p->hits,
        .device_mallocs = p->mallocs,
        .oom_retries = p->oom_retries,
    };
    pthread_mutex_unlock(&p->lock);
    return CR_OK;
}

void cr_gpu_reset_peak(int device) {
    pthread_once(&pools_once, pools_init);
    pool *p = &pools[device];
    pthread_mutex_lock(&p->lock);
    p->peak = p->allocated;
    pthread_mutex_unlock(&p->lock);
}

/* Called after every device was synchronised. */
void cr_gpu_empty_cache(void) {
    pthread_once(&pools_once, pools_init);
    for (int d = 0; d < cr_gpu_device_count(); d++) {
        if (!pools[d].used || cr_gpu_enter(d)) continue; /* never used: no context */
        pthread_mutex_lock(&pools[d].lock);
        release_cached(&pools[d]);
        pthread_mutex_unlock(&pools[d].lock);
    }
}
