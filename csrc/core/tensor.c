/* tensor.c — storages and tensor handles: allocation with byte accounting (per-thread
 * counts, a per-thread cache of freed handles), reference counts, metadata accessors,
 * aliases (views share storage and its version counter), and the argument checks every
 * op uses. */
#include <math.h>
#include <pthread.h>

#include "cuda_backend.h"

/* Live CPU bytes and their high-water mark: one atomic add per storage made or freed. */
static int64_t stat_live_bytes, stat_peak_bytes, stat_since_hint;

/* GPU bytes, kept apart from the CPU figures above (the backend has its own statistics)
 * but seen by the GC hint: dead GPU tensors are freed only when Lua collects their
 * handles, so GPU garbage must count towards a collection too, or it piles up until the
 * device is full (seen on an H200: 139 GiB held by a ResNet-50 benchmark). The floor is
 * the backend's gc_every_bytes (an eighth of the smallest device), read from the backend
 * when it makes a storage (core calls the GPU layer, never the other way). */
static int64_t stat_gpu_live_bytes, stat_gpu_since_hint, gpu_hint_floor = (int64_t)1 << 30;

/* Larger than any machine we run on: a size past this is a mistake, not a request. */
static const int64_t CR_MAX_BYTES = (int64_t)1 << 46;

/* Storages of at most this many bytes share one allocation with their header. */
enum { CR_SMALL_STORAGE = 256 };

/* Counts of tensors and storages are kept per thread and summed when read, so making and
 * freeing a tensor costs no locked instruction for them: in a profile of 1-element adds
 * those (ten per op before) were most of the time of tensor allocation and freeing. A
 * thread's counts are folded into `exited` when it ends. Each thread also keeps up to
 * HANDLE_CACHE freed tensor handles for its next tensors instead of going through malloc
 * (Lua's finalizers free handles many at a time; the size was not tuned). */
enum { HANDLE_CACHE = 1024, FLUSH_BYTES = 1 << 20 };
#if defined(__SANITIZE_ADDRESS__)
enum { CACHE_ON = 0 }; /* let ASan see every use after free */
#else
enum { CACHE_ON = 1 };
#endif
typedef struct {
    int64_t tensors, storages, allocs; /* made minus freed; allocs only grows */
} tensor_counts;
typedef struct thread_counts {
    tensor_counts n;    /* this thread's */
    int64_t unflushed;  /* bytes allocated since the last add to stat_since_hint */
    struct thread_counts *prev, *next;
    int nhandles;
    cr_tensor *handles[HANDLE_CACHE];
} thread_counts;
static tensor_counts exited; /* of the threads that ended */
static thread_counts *counts_list;
static pthread_mutex_t counts_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_key_t counts_key;
static pthread_once_t counts_once = PTHREAD_ONCE_INIT;
static __thread thread_counts *my_counts;

/* Only the owning thread writes a thread's counts; readers load them relaxed. */
#define COUNT_ADD(c, field, d) __atomic_store_n(&(c)->n.field, (c)->n.field + (d), __ATOMIC_RELAXED)

static void counts_exit(void *arg) {
    thread_counts *c = arg;
    pthread_mutex_lock(&counts_lock);
    exited.tensors += c->n.tensors;
    exited.storages += c->n.storages;
    exited.allocs += c->n.allocs;
    if (c->prev) c->prev->next = c->next;
    else counts_list = c->next;
    if (c->next) c->next->prev = c->prev;
    pthread_mutex_unlock(&counts_lock);
    __atomic_add_fetch(&stat_since_hint, c->unflushed, __ATOMIC_RELAXED);
    for (int i = 0; i < c->nhandles; i++) free(c->handles[i]);
    my_counts = NULL;
    free(c);
}

static void counts_key_init(void) { CR_ASSERT(pthread_key_create(&counts_key, counts_exit) == 0); }

static thread_counts *counts_register(void) {
    pthread_once(&counts_once, counts_key_init);
    thread_counts *c = calloc(1, sizeof *c);
    CR_ASSERT(c);
    pthread_mutex_lock(&counts_lock);
    c->next = counts_list;
    if (counts_list) counts_list->prev = c;
    counts_list = c;
    pthread_mutex_unlock(&counts_lock);
    pthread_setspecific(counts_key, c);
    my_counts = c;
    return c;
}

static inline thread_counts *counts(void) {
    thread_counts *c = my_counts;
    return __builtin_expect(c != NULL, 1) ? c : counts_register();
}

/* c: the calling thread's counts (counts()), looked up once by the caller. */
static void stats_add_bytes(thread_counts *c, int64_t n) {
    int64_t live = __atomic_add_fetch(&stat_live_bytes, n, __ATOMIC_RELAXED);
    if (n > 0) {
        c->unflushed += n;
        if (c->unflushed >= FLUSH_BYTES) {
            __atomic_add_fetch(&stat_since_hint, c->unflushed, __ATOMIC_RELAXED);
            c->unflushed = 0;
        }
        int64_t peak = __atomic_load_n(&stat_peak_bytes, __ATOMIC_RELAXED);
        while (live > peak && !__atomic_compare_exchange_n(&stat_peak_bytes, &peak, live, 1,
                                                           __ATOMIC_RELAXED, __ATOMIC_RELAXED))
            ;
    }
}

void cr_memory_stats(cr_memstats *out) {
    out->live_bytes = __atomic_load_n(&stat_live_bytes, __ATOMIC_RELAXED);
    out->peak_bytes = __atomic_load_n(&stat_peak_bytes, __ATOMIC_RELAXED);
    pthread_mutex_lock(&counts_lock);
    int64_t tensors = exited.tensors, storages = exited.storages, allocs = exited.allocs;
    for (thread_counts *c = counts_list; c; c = c->next) {
        tensors += __atomic_load_n(&c->n.tensors, __ATOMIC_RELAXED);
        storages += __atomic_load_n(&c->n.storages, __ATOMIC_RELAXED);
        allocs += __atomic_load_n(&c->n.allocs, __ATOMIC_RELAXED);
    }
    pthread_mutex_unlock(&counts_lock);
    out->live_tensors = tensors;
    out->live_storages = storages;
    out->allocs = allocs;
    cr_host_cache_stats(&out->cached_bytes, &out->cache_hits);
}

void cr_memory_reset_peak(void) {
    __atomic_store_n(&stat_peak_bytes, __atomic_load_n(&stat_live_bytes, __ATOMIC_RELAXED),
                     __ATOMIC_RELAXED);
}

/* Whether more than max(floor, live / 4) bytes were allocated since the last hint, on
 * the CPU (floor 64 MiB) or on the GPUs (floor gpu_hint_floor). Dead tensors wait for the
 * collection this triggers, so the fraction bounds them (live / 2 let a ViT step's peak
 * grow by a third over PyTorch's, which frees by refcount). */
static int hint_due(int64_t *since_counter, const int64_t *live_counter, int64_t floor) {
    int64_t since = __atomic_load_n(since_counter, __ATOMIC_RELAXED);
    if (since < floor) return 0;
    int64_t live = __atomic_load_n(live_counter, __ATOMIC_RELAXED);
    if (since < live / 4) return 0;
    __atomic_store_n(since_counter, 0, __ATOMIC_RELAXED);
    return 1;
}

int cr_memory_gc_hint(void) {
    int cpu = hint_due(&stat_since_hint, &stat_live_bytes, (int64_t)64 << 20);
    int gpu = hint_due(&stat_gpu_since_hint, &stat_gpu_live_bytes,
                       __atomic_load_n(&gpu_hint_floor, __ATOMIC_RELAXED));
    return cpu || gpu;
}

static cr_status storage_header(cr_storage **out, void *data, size_t alloc, cr_device dev) {
    cr_storage *s = calloc(1, sizeof *s);
    if (!s) return cr_fail(CR_ERR_OOM, "out of memory for a storage header");
    s->refcount = 1;
    s->data = data;
    s->nbytes = alloc;
    s->device = dev.type;
    s->device_index = dev.index;
    *out = s;
    return CR_OK;
}

/* GPU storages and pinned host storages come from the CUDA backend and are not counted
 * in the CPU statistics (the backend keeps its own). */
static cr_status storage_new_cuda(cr_storage **out, size_t alloc, cr_device dev, bool pinned) {
    const cr_cuda_backend *be;
    cr_status st = cr_cuda_backend_for(&be, pinned ? -1 : dev.index, pinned);
    if (st) return st;
    if (be->gc_every_bytes > 0 && __atomic_load_n(&gpu_hint_floor, __ATOMIC_RELAXED) != be->gc_every_bytes)
        __atomic_store_n(&gpu_hint_floor, be->gc_every_bytes, __ATOMIC_RELAXED);
    void *data = NULL;
    st = pinned ? be->host_alloc(alloc, &data) : be->alloc(dev.index, alloc, &data);
    if (st) return st;
    if ((st = storage_header(out, data, alloc, dev))) {
        if (pinned) be->host_release(data, alloc);
        else be->release(dev.index, data, alloc);
        return st;
    }
    (*out)->pinned = pinned;
    if (!pinned) __atomic_add_fetch(&stat_gpu_live_bytes, (int64_t)alloc, __ATOMIC_RELAXED);
    /* pinned blocks count towards the next collection too: a loader pinning every batch
     * would otherwise page-lock garbage faster than the GPU's allocations call the GC */
    __atomic_add_fetch(&stat_gpu_since_hint, (int64_t)alloc, __ATOMIC_RELAXED);
    return CR_OK;
}

static cr_status storage_new(cr_storage **out, size_t nbytes, cr_device dev, bool pinned) {
    size_t alloc = nbytes ? (nbytes + 63) & ~(size_t)63 : 64;
    if (dev.type != CR_DEV_CPU || pinned) return storage_new_cuda(out, alloc, dev, pinned);
    cr_storage *s = NULL;
    void *data = NULL;
    if (alloc <= CR_SMALL_STORAGE) {
        /* one plain malloc for header and data: for small tensors the allocator is most
         * of the cost of an op, and posix_memalign's splitting churns the heap */
        s = malloc(sizeof *s + alloc + 63);
        if (s) {
            memset(s, 0, sizeof *s);
            data = (void *)(((uintptr_t)(s + 1) + 63) & ~(uintptr_t)63);
        }
    } else if ((s = calloc(1, sizeof *s))) {
        data = cr_host_alloc(alloc); /* host_cache.c: large blocks are reused, not re-faulted */
    }
    if (!s || !data) {
        free(s);
        cr_memstats st;
        cr_memory_stats(&st);
        return cr_fail(CR_ERR_OOM,
                       "out of memory: could not allocate %zu bytes (%lld bytes live in "
                       "%lld tensors); free tensors or reduce the batch size",
                       nbytes, (long long)st.live_bytes, (long long)st.live_tensors);
    }
    s->refcount = 1;
    s->data = data;
    s->nbytes = alloc;
    s->device = CR_DEV_CPU;
    thread_counts *c = counts();
    stats_add_bytes(c, (int64_t)alloc);
    COUNT_ADD(c, storages, 1);
    COUNT_ADD(c, allocs, 1);
    *out = s;
    return CR_OK;
}

/* Whether the caller's reference was the last. A count of one needs no locked
 * instruction: no other thread holds a reference through which it could take another. */
static inline bool drop_reference(int64_t *refcount) {
    return __atomic_load_n(refcount, __ATOMIC_ACQUIRE) == 1 ||
           __atomic_sub_fetch(refcount, 1, __ATOMIC_ACQ_REL) == 0;
}

static void storage_release(cr_storage *s) {
    if (!drop_reference(&s->refcount)) return;
    if (s->device != CR_DEV_CPU || s->pinned) {
        const cr_cuda_backend *be = cr_cuda_backend_get(); /* loaded: it made the storage */
        CR_ASSERT(be);
        if (s->pinned) {
            be->host_release(s->data, s->nbytes);
        } else {
            be->release(s->device_index, s->data, s->nbytes);
            __atomic_sub_fetch(&stat_gpu_live_bytes, (int64_t)s->nbytes, __ATOMIC_RELAXED);
        }
        free(s);
        return;
    }
    thread_counts *c = counts();
    stats_add_bytes(c, -(int64_t)s->nbytes);
    COUNT_ADD(c, storages, -1);
    if (s->nbytes > CR_SMALL_STORAGE) cr_host_free(s->data, s->nbytes); /* small: inside s */
    free(s);
}

void cr_contiguous_strides(int ndim, const int64_t *shape, int64_t *stride) {
    int64_t acc = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        stride[d] = acc;
        acc *= shape[d] > 0 ? shape[d] : 1;
    }
}

int64_t cr_shape_numel(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    return n;
}

cr_status cr_check_shape_arg(const char *op, int ndim, const int64_t *shape) {
    if (ndim < 0 || ndim > CR_MAX_DIMS)
        return cr_fail(CR_ERR_ARG, "%s: %d dims requested; crescent tensors have at most %d",
                       op, ndim, CR_MAX_DIMS);
    if (ndim > 0 && !shape) return cr_fail(CR_ERR_ARG, "%s: shape is nil", op);
    double total = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0) {
            char b[160];
            return cr_fail(CR_ERR_ARG, "%s: negative size %lld in shape %s; sizes must be >= 0",
                           op, (long long)shape[d], cr_dims_str(ndim, shape, b, sizeof b));
        }
        total *= (double)shape[d];
    }
    if (total * 8 > (double)CR_MAX_BYTES) {
        char b[160];
        return cr_fail(CR_ERR_ARG, "%s: shape %s has %.3g elements, beyond any memory; check "
                       "the sizes", op, cr_dims_str(ndim, shape, b, sizeof b), total);
    }
    return CR_OK;
}

static cr_tensor *tensor_handle(void) {
    thread_counts *c = counts();
    cr_tensor *t;
    if (c->nhandles > 0) {
        t = c->handles[--c->nhandles];
        memset(t, 0, sizeof *t);
    } else {
        t = calloc(1, sizeof *t);
        CR_ASSERT(t);
    }
    t->magic = CR_TENSOR_LIVE;
    t->refcount = 1;
    COUNT_ADD(c, tensors, 1);
    return t;
}

static cr_status tensor_alloc(cr_tensor **out, int ndim, const int64_t *shape, cr_dtype dt,
                              cr_device dev, bool pinned) {
    *out = NULL;
    cr_status st = cr_check_shape_arg("empty", ndim, shape);
    if (st) return st;
    if ((unsigned)dt >= CR_DT_COUNT)
        return cr_fail(CR_ERR_ARG, "empty: invalid dtype %d", (int)dt);
    if ((unsigned)dev.type >= CR_DEV_COUNT)
        return cr_fail(CR_ERR_ARG, "empty: invalid device type %d", (int)dev.type);
    int64_t numel = cr_shape_numel(ndim, shape);
    cr_storage *s = NULL;
    st = storage_new(&s, (size_t)numel * cr_dtype_size(dt), dev, pinned);
    if (st) return st;
    cr_tensor *t = tensor_handle();
    t->storage = s;
    t->ndim = ndim;
    t->dtype = dt;
    t->numel = numel;
    for (int d = 0; d < ndim; d++) t->shape[d] = shape[d];
    cr_contiguous_strides(ndim, shape, t->stride);
    *out = t;
    return CR_OK;
}

cr_status cr_tensor_alloc(cr_tensor **out, int ndim, const int64_t *shape, cr_dtype dt,
                          cr_device dev) {
    return tensor_alloc(out, ndim, shape, dt, dev, false);
}

cr_status cr_tensor_alloc_pinned(cr_tensor **out, int ndim, const int64_t *shape, cr_dtype dt) {
    return tensor_alloc(out, ndim, shape, dt, CR_CPU, true);
}

/* Dense channels-last [N, C, H, W] (strides [HWC, 1, WC, C], size-1 dims free) that is not
 * also row-major: the layout oneDNN's convolutions read and write without reorders. */
bool cr_tensor_is_channels_last(const cr_tensor *t) {
    if (!t || t->ndim != 4 || cr_tensor_is_contiguous(t)) return false;
    const int64_t *sh = t->shape;
    const int64_t want[4] = {sh[1] * sh[2] * sh[3], 1, sh[3] * sh[1], sh[1]};
    for (int d = 0; d < 4; d++)
        if (sh[d] != 1 && t->stride[d] != want[d]) return false;
    return true;
}

cr_status cr_tensor_alloc_layout(cr_tensor **out, int ndim, const int64_t *shape, cr_dtype dt,
                                 cr_device dev, bool channels_last) {
    cr_status st = cr_tensor_alloc(out, ndim, shape, dt, dev);
    if (st || !channels_last || ndim != 4) return st;
    int64_t *s = (*out)->stride;
    s[1] = 1;
    s[3] = shape[1];
    s[2] = shape[3] * shape[1];
    s[0] = shape[2] * shape[3] * shape[1];
    return CR_OK;
}

cr_status cr_tensor_alloc_as(cr_tensor **out, int ndim, const int64_t *shape, cr_dtype dt,
                             cr_device dev, const cr_tensor *like) {
    bool cl = like && like->ndim == ndim && !memcmp(like->shape, shape, sizeof *shape * (size_t)ndim) &&
              cr_tensor_is_channels_last(like);
    return cr_tensor_alloc_layout(out, ndim, shape, dt, dev, cl);
}

cr_status cr_tensor_alloc_like(cr_tensor **out, const cr_tensor *t) {
    return cr_tensor_alloc(out, t->ndim, t->shape, t->dtype, cr_tensor_dev(t));
}

cr_status cr_tensor_empty(cr_tensor **out, int ndim, const int64_t *shape, cr_dtype dt,
                          cr_devtype dev, int dev_index) {
    return cr_tensor_alloc(out, ndim, shape, dt, (cr_device){dev, dev_index});
}

cr_status cr_tensor_from_data(cr_tensor **out, const void *data, int ndim,
                              const int64_t *shape, cr_dtype dt) {
    cr_status st = cr_tensor_alloc(out, ndim, shape, dt, CR_CPU);
    if (st) return st;
    if ((*out)->numel) {
        if (!data) {
            cr_tensor_free(*out);
            *out = NULL;
            return cr_fail(CR_ERR_ARG, "from_data: data pointer is NULL");
        }
        memcpy((*out)->storage->data, data, (size_t)(*out)->numel * cr_dtype_size(dt));
    }
    return CR_OK;
}

cr_status cr_tensor_scalar(cr_tensor **out, double value, cr_dtype dt) {
    *out = NULL;
    cr_status st = (unsigned)dt < CR_DT_COUNT ? cr_check_value("scalar", dt, value) : CR_OK;
    if (st) return st;
    st = cr_tensor_alloc(out, 0, NULL, dt, CR_CPU);
    if (st) return st;
    cr_store_f64((*out)->storage->data, dt, value);
    return CR_OK;
}

cr_tensor *cr_tensor_alias(const cr_tensor *t, int ndim, const int64_t *shape,
                           const int64_t *stride, int64_t offset) {
    cr_tensor *v = tensor_handle();
    v->storage = t->storage;
    __atomic_add_fetch(&t->storage->refcount, 1, __ATOMIC_RELAXED);
    v->offset = offset;
    v->ndim = ndim;
    v->dtype = t->dtype;
    for (int d = 0; d < ndim; d++) {
        v->shape[d] = shape[d];
        v->stride[d] = stride[d];
    }
    v->numel = cr_shape_numel(ndim, shape);
    return v;
}

void cr_tensor_retain(cr_tensor *t) {
    if (t) __atomic_add_fetch(&t->refcount, 1, __ATOMIC_RELAXED);
}

/* The storage of released tensors (cr_tensor_release): empty, on the CPU, never freed. */
static char released_byte;
static cr_storage released_storage = {.refcount = INT64_MAX / 2, .data = &released_byte, .device = CR_DEV_CPU};

/* Autograd (graph.c) hands core the function that lets go of a tensor's graph node, so
 * core never calls up into autograd. */
static void (*grad_fn_release)(cr_tensor *t);
void cr_core_set_grad_fn_release(void (*release)(cr_tensor *t)) { grad_fn_release = release; }

/* Drops what a tensor holds: its graph node, grad, hooks and storage. */
static void drop_contents(cr_tensor *t) {
    if (t->grad_fn) grad_fn_release(t);
    cr_tensor_free(t->grad);
    free(t->hooks);
    free(t->post_hooks);
    if (t->storage != &released_storage) storage_release(t->storage);
    t->grad_fn = NULL;
    t->grad = NULL;
    t->hooks = t->post_hooks = NULL;
    t->nhooks = t->npost_hooks = 0;
    t->storage = NULL;
}

void cr_tensor_free(cr_tensor *t) {
    if (!t || !drop_reference(&t->refcount)) return;
    drop_contents(t);
    t->magic = CR_TENSOR_DEAD;
    thread_counts *c = counts();
    COUNT_ADD(c, tensors, -1);
    if (CACHE_ON && c->nhandles < HANDLE_CACHE) c->handles[c->nhandles++] = t;
    else free(t);
}

bool cr_tensor_release(cr_tensor *t) {
    if (!t || t->magic != CR_TENSOR_LIVE || __atomic_load_n(&t->refcount, __ATOMIC_ACQUIRE) != 1) return false;
    drop_contents(t);
    t->storage = &released_storage;
    t->ndim = 1;
    t->shape[0] = 0;
    t->stride[0] = 1;
    t->numel = t->offset = 0;
    t->requires_grad = t->retains_grad = t->is_view = false;
    t->grad_acc = NULL;
    t->magic = CR_TENSOR_DEAD;
    return true;
}

bool cr_tensor_is_live(const cr_tensor *t) { return t && t->magic == CR_TENSOR_LIVE; }

/* ---- accessors ---- */
int cr_tensor_ndim(const cr_tensor *t) { return t ? t->ndim : 0; }
int64_t cr_tensor_size(const cr_tensor *t, int dim) {
    return t && dim >= 0 && dim < t->ndim ? t->shape[dim] : -1;
}
int64_t cr_tensor_stride(const cr_tensor *t, int dim) {
    return t && dim >= 0 && dim < t->ndim ? t->stride[dim] : 0;
}
int64_t cr_tensor_offset(const cr_tensor *t) { return t ? t->offset : 0; }
int64_t cr_tensor_numel(const cr_tensor *t) { return t ? t->numel : 0; }
cr_dtype cr_tensor_dtype(const cr_tensor *t) { return t ? t->dtype : CR_DT_F32; }
cr_devtype cr_tensor_device(const cr_tensor *t) { return t ? t->storage->device : CR_DEV_CPU; }
int cr_tensor_device_index(const cr_tensor *t) { return t ? t->storage->device_index : 0; }
uint64_t cr_tensor_version(const cr_tensor *t) { return t ? t->storage->version : 0; }
bool cr_tensor_same_storage(const cr_tensor *a, const cr_tensor *b) {
    return a && b && a->storage == b->storage;
}
void *cr_tensor_data(const cr_tensor *t) {
    return t && t->storage->device == CR_DEV_CPU ? cr_tensor_ptr(t) : NULL;
}

bool cr_tensor_is_pinned(const cr_tensor *t) { return t && t->storage->pinned; }

const char *cr_device_str(cr_device dev, char *buf, size_t cap) {
    if (dev.type == CR_DEV_CPU) snprintf(buf, cap, "cpu");
    else snprintf(buf, cap, "cuda:%d", dev.index);
    return buf;
}

bool cr_tensor_is_contiguous(const cr_tensor *t) {
    if (!t) return false;
    int64_t expect = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->shape[d] == 1) continue;
        if (t->stride[d] != expect) return false;
        expect *= t->shape[d];
    }
    return true;
}

bool cr_same_shape(const cr_tensor *a, const cr_tensor *b) {
    if (a->ndim != b->ndim) return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d]) return false;
    return true;
}

int64_t cr_flat_offset(const cr_tensor *t, int64_t i) {
    int64_t off = t->offset;
    for (int d = t->ndim - 1; d >= 0; d--) {
        int64_t n = t->shape[d];
        off += (i % n) * t->stride[d];
        i /= n;
    }
    return off;
}

double cr_tensor_get_flat(const cr_tensor *t, int64_t i) {
    if (!cr_tensor_is_live(t) || i < 0 || i >= t->numel || t->storage->device != CR_DEV_CPU) return NAN;
    size_t es = cr_dtype_size(t->dtype);
    return cr_load_f64((char *)t->storage->data + cr_flat_offset(t, i) * (int64_t)es, t->dtype);
}

cr_status cr_tensor_read_f64(const cr_tensor *t, double *out) {
    if (!t || !out) return cr_fail(CR_ERR_ARG, "read: nil tensor or buffer");
    if (t->magic != CR_TENSOR_LIVE) return cr_fail(CR_ERR_ARG, "read: not a live tensor (a freed one, or another object)");
    if (t->storage->device != CR_DEV_CPU)
        return cr_fail(CR_ERR_DEVICE, "read: tensor is on cuda; copy it to cpu first");
    size_t es = cr_dtype_size(t->dtype);
    for (int64_t i = 0; i < t->numel; i++)
        out[i] = cr_load_f64((char *)t->storage->data + cr_flat_offset(t, i) * (int64_t)es,
                             t->dtype);
    return CR_OK;
}

cr_status cr_tensor_read_i64(const cr_tensor *t, int64_t *out) {
    if (!t || !out) return cr_fail(CR_ERR_ARG, "read: nil tensor or buffer");
    if (t->magic != CR_TENSOR_LIVE) return cr_fail(CR_ERR_ARG, "read: not a live tensor (a freed one, or another object)");
    if (t->storage->device != CR_DEV_CPU)
        return cr_fail(CR_ERR_DEVICE, "read: tensor is on cuda; copy it to cpu first");
    size_t es = cr_dtype_size(t->dtype);
    for (int64_t i = 0; i < t->numel; i++) {
        const char *p = (char *)t->storage->data + cr_flat_offset(t, i) * (int64_t)es;
        out[i] = t->dtype == CR_DT_I64 ? *(const int64_t *)p : (int64_t)cr_load_f64(p, t->dtype);
    }
    return CR_OK;
}

/* ---- checks ---- */
cr_status cr_check_same_device(const char *op, const cr_tensor *a, const cr_tensor *b) {
    if (cr_same_device(a, b)) return CR_OK;
    char da[32], db[32];
    return cr_fail(CR_ERR_DEVICE, "%s: tensors on different devices (%s and %s); move one "
                   "with :to('%s') or :to('%s')", op, cr_device_str(cr_tensor_dev(a), da, sizeof da),
                   cr_device_str(cr_tensor_dev(b), db, sizeof db), da, db);
}

cr_status cr_check_float(const char *op, const cr_tensor *t, const char *argname) {
    if (cr_dtype_is_float(t->dtype)) return CR_OK;
    return cr_fail(CR_ERR_ARG, "%s: '%s' has dtype %s but a floating dtype is needed; "
                   "convert it with :float()", op, argname, cr_dtype_name(t->dtype));
}

cr_status cr_check_dim(const char *op, int64_t *dim, int ndim, bool insert) {
    int64_t n = ndim + (insert ? 1 : 0);
    int64_t d = *dim;
    if (n == 0 && (d == 0 || d == -1)) { /* 0-dim tensors accept dim 0/-1 */
        *dim = 0;
        return CR_OK;
    }
    if (d < -n || d >= n)
        return cr_fail(CR_ERR_ARG, "%s: dim %lld out of range for a %d-dim tensor (valid: "
                       "%lld..%lld)", op, (long long)d, ndim, (long long)-n, (long long)(n - 1));
    *dim = d < 0 ? d + n : d;
    return CR_OK;
}

cr_status cr_broadcast_shapes(const char *op, const cr_tensor *a, const cr_tensor *b,
                              int *ndim, int64_t *shape) {
    int n = a->ndim > b->ndim ? a->ndim : b->ndim;
    for (int d = 0; d < n; d++) {
        int da = d - (n - a->ndim), db = d - (n - b->ndim);
        int64_t sa = da >= 0 ? a->shape[da] : 1, sb = db >= 0 ? b->shape[db] : 1;
        if (sa != sb && sa != 1 && sb != 1) {
            char ba[160], bb[160];
            return cr_fail(CR_ERR_ARG, "%s: shapes %s and %s do not broadcast (dim %d: %lld vs "
                           "%lld); sizes must match or be 1", op,
                           cr_shape_str(a, ba, sizeof ba), cr_shape_str(b, bb, sizeof bb), d,
                           (long long)sa, (long long)sb);
        }
        shape[d] = sa == 1 ? sb : sa;
    }
    *ndim = n;
    return CR_OK;
}
