/* nccl.c — the CUDA backend's NCCL entries (cuda_backend.h): one communicator per process,
 * on one GPU, with a stream of its own. Built with NCCL when the Makefile found nccl.h
 * (CR_HAVE_NCCL); without it the table's NCCL entries stay NULL and the core says why.
 *
 * Ordering: a collective is enqueued on the communicator's stream after an event recorded
 * on the device's compute stream, so it reads what queued kernels wrote; a wait makes the
 * compute stream wait for an event recorded after it, so later kernels (and the caching
 * allocator, whose blocks belong to the compute stream) see it done. The host never
 * blocks on a collective except in nccl_synchronize.
 *
 * Never hanging: the communicator is non-blocking (config.blocking = 0), so init,
 * connection setup inside a collective and finalize return ncclInProgress instead of
 * blocking, and settle() polls them against the timeout. A watchdog thread follows the
 * enqueued collectives (an event each, in stream order) and NCCL's asynchronous error:
 * a collective not done within the timeout of its enqueueing, or an error such as a dead
 * peer, prints one line, aborts the communicator and ends the process (crescent_dist.h).
 * The other ranks then see their peer gone and end the same way. */
#include "cuda_impl.h"

#ifndef CR_HAVE_NCCL

void cr_gpu_fill_nccl(cr_cuda_backend *be) { (void)be; }

#else

#include <nccl.h>
#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

_Static_assert(CR_NCCL_ID_BYTES == NCCL_UNIQUE_ID_BYTES, "crescent_dist.h's id size is NCCL's");

/* A collective in flight, as the watchdog sees it. */
typedef struct pending {
    cudaEvent_t done;
    double since; /* enqueued at (monotonic seconds) */
    cr_collective kind;
    struct pending *next;
} pending;

static struct {
    ncclComm_t comm; /* NULL: no communicator */
    int rank, world, device, version;
    double timeout;
    cudaStream_t stream;
    cudaEvent_t ready; /* recorded on the compute stream before each collective */
    /* the watchdog: a FIFO of pending collectives, under lock */
    pthread_t thread;
    bool thread_on, stop;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pending *head, *tail;
} g = {.lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER};

static int dying;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static const char *kind_name(cr_collective k) {
    switch (k) {
    case CR_COLL_ALL_REDUCE: return "all_reduce";
    case CR_COLL_BROADCAST: return "broadcast";
    case CR_COLL_ALL_GATHER: return "all_gather";
    case CR_COLL_REDUCE_SCATTER: return "reduce_scatter";
    }
    return "collective";
}

/* The one line, then the end of this rank (and, through NCCL, of the job). A second
 * thread arriving here waits for the first to end the process. */
__attribute__((noreturn)) static void die(const char *what, const char *why) {
    if (__atomic_exchange_n(&dying, 1, __ATOMIC_ACQ_REL))
        for (;;) pause();
    fprintf(stderr, "crescent: NCCL %s on rank %d of %d (cuda:%d) %s; aborting the job\n", what,
            g.rank, g.world, g.device, why);
    fflush(stdout);
    if (g.comm) ncclCommAbort(g.comm);
    _exit(1);
}

__attribute__((noreturn)) static void die_timeout(const char *what) {
    char why[256];
    snprintf(why, sizeof why, "did not complete within the timeout of %g s: a rank died, is "
             "stuck, or called another collective", g.timeout);
    die(what, why);
}

__attribute__((noreturn)) static void die_error(const char *what, ncclResult_t r) {
    char why[1024];
    const char *last = ncclGetLastError(g.comm);
    snprintf(why, sizeof why, "failed: %s%s%.800s", ncclGetErrorString(r), last && *last ? ": " : "",
             last ? last : "");
    die(what, why);
}

/* An NCCL call's result, once settled: ncclInProgress is polled (the communicator is
 * non-blocking) until done or the timeout, which ends the process. Invalid arguments come
 * back as CR_ERR_ARG; any other failure leaves the communicator unusable and ends it. */
static cr_status settle(ncclResult_t r, const char *what) {
    double deadline = now_s() + g.timeout;
    while (r == ncclInProgress) {
        if (now_s() > deadline) die_timeout(what);
        usleep(200);
        ncclResult_t q = ncclCommGetAsyncError(g.comm, &r);
        if (q != ncclSuccess) r = q;
    }
    if (r == ncclSuccess) return CR_OK;
    if (r == ncclInvalidArgument || r == ncclInvalidUsage)
        return cr_fail(CR_ERR_ARG, "NCCL %s on rank %d: %s (%s)", what, g.rank, ncclGetErrorString(r),
                       ncclGetLastError(g.comm));
    die_error(what, r);
}

/* ---- the watchdog ---- */
static void drop_pending(void) {
    while (g.head) {
        pending *p = g.head;
        g.head = p->next;
        cudaEventDestroy(p->done);
        free(p);
    }
    g.tail = NULL;
}

static void *watchdog(void *arg) {
    (void)arg;
    cudaSetDevice(g.device);
    pthread_mutex_lock(&g.lock);
    while (!g.stop) {
        pending *p = g.head;
        if (!p) {
            pthread_cond_wait(&g.wake, &g.lock);
            continue;
        }
        pthread_mutex_unlock(&g.lock);
        /* only this thread removes entries, so p stays valid without the lock */
        cudaError_t q = cudaEventQuery(p->done);
        ncclResult_t r = ncclSuccess;
        ncclCommGetAsyncError(g.comm, &r);
        if (r != ncclSuccess && r != ncclInProgress) die_error(kind_name(p->kind), r);
        if (q == cudaSuccess) {
            pthread_mutex_lock(&g.lock);
            g.head = p->next;
            if (!g.head) g.tail = NULL;
            cudaEventDestroy(p->done);
            free(p);
            continue;
        }
        if (q == cudaErrorCudartUnloading) { /* the process is ending */
            pthread_mutex_lock(&g.lock);
            break;
        }
        if (q != cudaErrorNotReady) {
            char why[256];
            snprintf(why, sizeof why, "failed on the GPU: %s", cudaGetErrorString(q));
            die(kind_name(p->kind), why);
        }
        if (now_s() - p->since > g.timeout) die_timeout(kind_name(p->kind));
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 20 * 1000 * 1000; /* 20 ms between looks */
        if (until.tv_nsec >= 1000000000) until.tv_sec++, until.tv_nsec -= 1000000000;
        pthread_mutex_lock(&g.lock);
        if (!g.stop) pthread_cond_timedwait(&g.wake, &g.lock, &until);
    }
    pthread_mutex_unlock(&g.lock);
    return NULL;
}

static void stop_watchdog(void) {
    if (!g.thread_on || __atomic_load_n(&dying, __ATOMIC_ACQUIRE)) return;
    pthread_mutex_lock(&g.lock);
    g.stop = true;
    pthread_cond_signal(&g.wake);
    pthread_mutex_unlock(&g.lock);
    pthread_join(g.thread, NULL);
    g.thread_on = false;
    g.stop = false;
    drop_pending();
}

/* ---- the table's entries ---- */
static cr_status need_comm(const char *what) {
    if (g.comm) return CR_OK;
    return cr_fail(CR_ERR_ARG, "NCCL %s: there is no communicator; call cr_nccl_init first", what);
}

static cr_status nccl_unique_id(uint8_t *id) {
    ncclUniqueId u;
    ncclResult_t r = ncclGetUniqueId(&u);
    if (r != ncclSuccess)
        return cr_fail(CR_ERR_DEVICE, "NCCL could not make its unique id: %s (%s); set "
                       "NCCL_SOCKET_IFNAME to the interface the ranks reach each other on",
                       ncclGetErrorString(r), ncclGetLastError(NULL));
    memcpy(id, u.internal, CR_NCCL_ID_BYTES);
    return CR_OK;
}

static void free_comm_state(void) {
    if (g.ready) cudaEventDestroy(g.ready);
    if (g.stream) cudaStreamDestroy(g.stream);
    cudaGetLastError();
    g.ready = NULL;
    g.stream = NULL;
    g.comm = NULL;
}

static cr_status nccl_init(int rank, int world, const uint8_t *id, int device, double timeout_s) {
    if (g.comm)
        return cr_fail(CR_ERR_ARG, "NCCL init: this process already has a communicator (rank %d "
                       "of %d on cuda:%d); call cr_nccl_finalize first", g.rank, g.world, g.device);
    cr_status st = cr_gpu_enter(device); /* NCCL takes the current device */
    if (st) return st;
    g.rank = rank, g.world = world, g.device = device, g.timeout = timeout_s;
    ncclGetVersion(&g.version);
    st = cr_gpu_check(cudaStreamCreateWithFlags(&g.stream, cudaStreamNonBlocking),
                      "creating the NCCL stream");
    if (!st)
        st = cr_gpu_check(cudaEventCreateWithFlags(&g.ready, cudaEventDisableTiming), "NCCL init");
    if (st) {
        free_comm_state();
        return st;
    }
    ncclUniqueId u;
    memcpy(u.internal, id, CR_NCCL_ID_BYTES);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t comm = NULL;
    ncclResult_t r = ncclCommInitRankConfig(&comm, world, u, rank, &config);
    double deadline = now_s() + timeout_s;
    while (r == ncclInProgress && comm) {
        if (now_s() > deadline) break;
        usleep(1000);
        ncclResult_t q = ncclCommGetAsyncError(comm, &r);
        if (q != ncclSuccess) r = q;
    }
    if (r != ncclSuccess) {
        const char *last = ncclGetLastError(comm);
        char why[1100];
        if (r == ncclInProgress)
            snprintf(why, sizeof why, "did not complete within %g s: not every rank joined (a rank "
                     "failed before init, was given another id, or WORLD_SIZE counts more ranks "
                     "than were started)", timeout_s);
        else
            snprintf(why, sizeof why, "failed: %s%s%.900s", ncclGetErrorString(r),
                     last && *last ? ": " : "", last ? last : "");
        if (comm) ncclCommAbort(comm);
        free_comm_state();
        return cr_fail(CR_ERR_DEVICE, "NCCL init of rank %d of %d on cuda:%d %s", rank, world,
                       device, why);
    }
    g.comm = comm;
    g.stop = false;
    if (pthread_create(&g.thread, NULL, watchdog, NULL) != 0) {
        ncclCommAbort(comm);
        free_comm_state();
        return cr_fail(CR_ERR_DEVICE, "NCCL init: could not start the watchdog thread");
    }
    g.thread_on = true;
    /* a process that ends without finalize: the watchdog stops before the CUDA runtime's
     * own exit handlers (registered earlier, so run later) take the device away */
    static bool registered;
    if (!registered) registered = atexit(stop_watchdog) == 0;
    return CR_OK;
}

static cr_status nccl_types(cr_dtype dt, cr_reduce_op op, bool reduces, ncclDataType_t *type,
                            ncclRedOp_t *red) {
    switch (dt) {
    case CR_DT_F32: *type = ncclFloat32; break;
    case CR_DT_F64: *type = ncclFloat64; break;
    case CR_DT_F16: *type = ncclFloat16; break;
    case CR_DT_BF16: *type = ncclBfloat16; break;
    case CR_DT_I64: *type = ncclInt64; break;
    case CR_DT_I32: *type = ncclInt32; break;
    case CR_DT_U8: *type = ncclUint8; break;
    case CR_DT_BOOL:
        if (reduces) return cr_fail(CR_ERR_ARG, "NCCL cannot reduce bool tensors");
        *type = ncclUint8;
        break;
    default: return cr_fail(CR_ERR_ARG, "NCCL: dtype %d is not one it moves", (int)dt);
    }
    switch (op) {
    case CR_REDUCE_SUM: *red = ncclSum; break;
    case CR_REDUCE_MAX: *red = ncclMax; break;
    case CR_REDUCE_MIN: *red = ncclMin; break;
    case CR_REDUCE_AVG:
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 10, 0)
        if (g.version >= NCCL_VERSION(2, 10, 0)) {
            *red = ncclAvg;
            break;
        }
#endif
        return cr_fail(CR_ERR_UNSUPPORTED, "NCCL %d.%d has no AVG (it came with 2.10): reduce "
                       "with SUM and divide by the world size, or install a newer NCCL",
                       g.version / 10000, g.version / 100 % 100);
    default: return cr_fail(CR_ERR_ARG, "NCCL: reduction %d is not one of SUM, AVG, MAX, MIN", (int)op);
    }
    return CR_OK;
}

static cr_status nccl_collective(cr_collective kind, void *recv, const void *send, int64_t count,
                                 cr_dtype dt, cr_reduce_op op, int root, void **done) {
    const char *what = kind_name(kind);
    *done = NULL;
    cr_status st = need_comm(what);
    if (st) return st;
    bool reduces = kind == CR_COLL_ALL_REDUCE || kind == CR_COLL_REDUCE_SCATTER;
    ncclDataType_t type = ncclFloat32;
    ncclRedOp_t red = ncclSum;
    if ((st = nccl_types(dt, reduces ? op : CR_REDUCE_SUM, reduces, &type, &red))) return st;
    if ((st = cr_gpu_enter(g.device))) return st;
    /* both events exist before NCCL sees the call: a failure after it would leave this
     * rank out of a collective the others joined */
    pending *p = calloc(1, sizeof *p);
    cudaEvent_t ev = NULL;
    if (!p) return cr_fail(CR_ERR_OOM, "NCCL %s: out of host memory", what);
    st = cr_gpu_check(cudaEventCreateWithFlags(&p->done, cudaEventDisableTiming), what);
    if (!st) st = cr_gpu_check(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), what);
    if (!st) st = cr_gpu_check(cudaEventRecord(g.ready, cr_gpu_stream(g.device)), what);
    if (!st) st = cr_gpu_check(cudaStreamWaitEvent(g.stream, g.ready, 0), what);
    if (st) {
        if (p->done) cudaEventDestroy(p->done);
        if (ev) cudaEventDestroy(ev);
        free(p);
        return st;
    }
    size_t n = (size_t)count;
    ncclResult_t r;
    switch (kind) {
    case CR_COLL_ALL_REDUCE: r = ncclAllReduce(send, recv, n, type, red, g.comm, g.stream); break;
    case CR_COLL_BROADCAST: r = ncclBroadcast(send, recv, n, type, root, g.comm, g.stream); break;
    case CR_COLL_ALL_GATHER: r = ncclAllGather(send, recv, n, type, g.comm, g.stream); break;
    case CR_COLL_REDUCE_SCATTER:
        r = ncclReduceScatter(send, recv, n, type, red, g.comm, g.stream);
        break;
    default: r = ncclInvalidArgument; break;
    }
    if ((st = settle(r, what))) {
        cudaEventDestroy(p->done);
        cudaEventDestroy(ev);
        free(p);
        return st;
    }
    cudaEventRecord(p->done, g.stream);
    if (cudaEventRecord(ev, g.stream) != cudaSuccess) {
        /* enqueued but unwaitable: wait here (under the watchdog) so the compute stream
         * cannot run ahead of it; the caller's wait then has nothing to do */
        cudaGetLastError();
        cudaStreamSynchronize(g.stream);
        cudaEventDestroy(ev);
        ev = NULL;
    }
    p->since = now_s();
    p->kind = kind;
    pthread_mutex_lock(&g.lock);
    if (g.tail) g.tail->next = p;
    else g.head = p;
    g.tail = p;
    pthread_cond_signal(&g.wake);
    pthread_mutex_unlock(&g.lock);
    *done = ev;
    return CR_OK;
}

static cr_status nccl_wait(void *done) {
    if (!done) return CR_OK;
    cudaEvent_t ev = (cudaEvent_t)done;
    cr_status st = cr_gpu_enter(g.device);
    if (!st) st = cr_gpu_check(cudaStreamWaitEvent(cr_gpu_stream(g.device), ev, 0), "NCCL wait");
    cudaEventDestroy(ev); /* released by the driver once the wait has passed */
    return st;
}

static cr_status nccl_synchronize(void) {
    cr_status st = need_comm("synchronize");
    if (st || (st = cr_gpu_enter(g.device))) return st;
    cudaEvent_t ev;
    if ((st = cr_gpu_check(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "NCCL synchronize")))
        return st;
    if ((st = cr_gpu_check(cudaEventRecord(ev, g.stream), "NCCL synchronize"))) {
        cudaEventDestroy(ev);
        return st;
    }
    double deadline = now_s() + g.timeout;
    for (int spin = 0;; spin++) {
        cudaError_t q = cudaEventQuery(ev);
        if (q == cudaSuccess) break;
        if (q != cudaErrorNotReady) {
            cudaEventDestroy(ev);
            return cr_gpu_check(q, "NCCL synchronize");
        }
        ncclResult_t r = ncclSuccess;
        ncclCommGetAsyncError(g.comm, &r);
        if (r != ncclSuccess && r != ncclInProgress) die_error("synchronize", r);
        if (now_s() > deadline) die_timeout("synchronize");
        if (spin < 1000) sched_yield(); /* short collectives: answer within microseconds */
        else usleep(200);
    }
    cudaEventDestroy(ev);
    return CR_OK;
}

static void nccl_finalize(void) {
    if (!g.comm) return;
    nccl_synchronize(); /* a timeout ends the process here */
    stop_watchdog();
    settle(ncclCommFinalize(g.comm), "finalize");
    ncclCommDestroy(g.comm);
    free_comm_state();
}

void cr_gpu_fill_nccl(cr_cuda_backend *be) {
    be->nccl_unique_id = nccl_unique_id;
    be->nccl_init = nccl_init;
    be->nccl_collective = nccl_collective;
    be->nccl_wait = nccl_wait;
    be->nccl_synchronize = nccl_synchronize;
    be->nccl_finalize = nccl_finalize;
}

#endif
