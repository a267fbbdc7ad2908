/* comm.c — collectives on cpu tensors over MPI: build/libcrescent_mpi.so (crescent_dist.h).
 *
 * Every collective is started non-blocking (MPI_Iallreduce, MPI_Ibcast, ...) and waited by
 * polling MPI_Test against a deadline, so a rank that died or is stuck elsewhere becomes
 * an exit with one line naming the collective, never a hang: after `timeout` seconds the
 * waiting rank prints the line and calls MPI_Abort, which ends every rank of the job.
 * The poll spins briefly (small collectives finish in microseconds), then sleeps in
 * growing steps up to 1 ms, so a rank waiting for a slower one does not burn a core that
 * the slower one's OpenMP threads may need.
 *
 * MPI is called from the thread that called cr_mpi_init only (MPI_THREAD_FUNNELED): the
 * Lua thread. AVG is a SUM followed by a division by the world size on each rank. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

static int g_rank = 0, g_world = 1;
static bool g_ready = false;
static double g_timeout = 1800.0;

struct cr_dist_work {
    MPI_Request req;
    const char *what;     /* the collective's name, for the timeout message */
    cr_tensor *keep[2];   /* retained until the wait: MPI reads and writes their memory */
    cr_tensor *average;   /* divided by the world size after the sum (AVG) */
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static cr_status mpi_fail(int code, const char *what) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(code, msg, &len);
    return cr_fail(CR_ERR_DEVICE, "%s: MPI error on rank %d of %d: %s", what, g_rank, g_world, msg);
}

static cr_status need_init(const char *what) {
    if (!g_ready)
        return cr_fail(CR_ERR_ARG, "%s: MPI is not initialised in this process; call cr.dist.init() "
                                   "first (under mpirun or srun)", what);
    return CR_OK;
}

void cr_mpi_set_timeout(double seconds) {
    if (seconds > 0) g_timeout = seconds;
}

void cr_mpi_finalize(void) {
    int done = 0, inited = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&done);
    if (inited && !done) MPI_Finalize();
    g_ready = false;
}

cr_status cr_mpi_init(int *rank, int *world) {
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (finalized)
        return cr_fail(CR_ERR_ARG, "dist.init: MPI was already finalised in this process; a process "
                                   "can join one distributed run only");
    if (!inited) {
        int provided = 0;
        int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
        if (rc != MPI_SUCCESS) return mpi_fail(rc, "dist.init");
        atexit(cr_mpi_finalize);
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_world);
    g_ready = true;
    *rank = g_rank;
    *world = g_world;
    return CR_OK;
}

void cr_mpi_abort(const char *why) {
    fprintf(stderr, "crescent.dist: rank %d of %d: %s\n", g_rank, g_world, why ? why : "aborting");
    fflush(stderr);
    fflush(stdout);
    int inited = 0;
    MPI_Initialized(&inited);
    if (inited) MPI_Abort(MPI_COMM_WORLD, 1);
    _exit(1);
}

/* Polls req until it completes or the timeout passes (then every rank is ended). */
static cr_status wait_request(MPI_Request *req, const char *what) {
    double start = now_s();
    long spins = 0, sleep_ns = 2000;
    for (;;) {
        int done = 0;
        int rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return mpi_fail(rc, what);
        if (done) return CR_OK;
        if (++spins < 4096) continue;
        double waited = now_s() - start;
        if (waited > g_timeout) {
            char why[512];
            snprintf(why, sizeof why,
                     "%s waited %.0f s for the other ranks (dist.timeout = %g s): a rank died, is stuck, "
                     "or called a different collective. Ending every rank of the job.",
                     what, waited, g_timeout);
            cr_mpi_abort(why);
        }
        struct timespec ts = {0, sleep_ns};
        nanosleep(&ts, NULL);
        if (sleep_ns < 1000000) sleep_ns *= 2;
    }
}

static MPI_Datatype mpi_type(cr_dtype dt) {
    switch (dt) {
    case CR_DT_F32: return MPI_FLOAT;
    case CR_DT_F64: return MPI_DOUBLE;
    case CR_DT_I64: return MPI_INT64_T;
    case CR_DT_I32: return MPI_INT32_T;
    case CR_DT_U8: return MPI_UINT8_T;
    case CR_DT_BOOL: return MPI_UINT8_T;
    case CR_DT_F16:
    case CR_DT_BF16: return MPI_UINT16_T; /* moved as bits: no reductions */
    default: return MPI_DATATYPE_NULL;
    }
}

static cr_status mpi_op(cr_reduce_op op, cr_dtype dt, const char *what, MPI_Op *out) {
    switch (op) {
    case CR_REDUCE_SUM:
    case CR_REDUCE_AVG: *out = MPI_SUM; break;
    case CR_REDUCE_MAX: *out = MPI_MAX; break;
    case CR_REDUCE_MIN: *out = MPI_MIN; break;
    default: return cr_fail(CR_ERR_ARG, "%s: unknown reduction %d; use sum, avg, max or min", what, (int)op);
    }
    if (dt == CR_DT_F16 || dt == CR_DT_BF16 || dt == CR_DT_BOOL)
        return cr_fail(CR_ERR_ARG, "%s: cannot reduce %s tensors over MPI; reduce a :float() copy", what,
                       cr_dtype_name(dt));
    if (op == CR_REDUCE_AVG && !cr_dtype_is_float(dt))
        return cr_fail(CR_ERR_ARG, "%s: avg needs a floating-point tensor, got %s; use sum and divide", what,
                       cr_dtype_name(dt));
    return CR_OK;
}

static cr_status check_tensor(const cr_tensor *t, const char *what, const char *name) {
    if (!t) return cr_fail(CR_ERR_ARG, "%s: %s is nil; pass a tensor", what, name);
    if (cr_tensor_device(t) != CR_DEV_CPU)
        return cr_fail(CR_ERR_DEVICE, "%s: %s is on a GPU; MPI moves cpu tensors (GPU tensors go through "
                                      "NCCL)", what, name);
    if (!cr_tensor_is_contiguous(t))
        return cr_fail(CR_ERR_ARG, "%s: %s is not contiguous; pass :contiguous() (the result lands in "
                                   "place)", what, name);
    if (mpi_type(cr_tensor_dtype(t)) == MPI_DATATYPE_NULL)
        return cr_fail(CR_ERR_ARG, "%s: dtype %s is not supported", what, cr_dtype_name(cr_tensor_dtype(t)));
    if (cr_tensor_numel(t) > (int64_t)0x7fffffff)
        return cr_fail(CR_ERR_ARG, "%s: %s has %lld elements, more than MPI's 2^31 - 1 per call; split it",
                       what, name, (long long)cr_tensor_numel(t));
    return CR_OK;
}

static void divide_by_world(cr_tensor *t) {
    int64_t n = cr_tensor_numel(t);
    if (cr_tensor_dtype(t) == CR_DT_F64) {
        double *p = cr_tensor_data(t);
        for (int64_t i = 0; i < n; i++) p[i] /= g_world;
    } else {
        float *p = cr_tensor_data(t);
        for (int64_t i = 0; i < n; i++) p[i] /= (float)g_world;
    }
}

static void release(cr_dist_work *w) {
    for (int i = 0; i < 2; i++)
        if (w->keep[i]) cr_tensor_free(w->keep[i]);
    free(w);
}

cr_status cr_mpi_wait(cr_dist_work *w) {
    if (!w) return cr_fail(CR_ERR_ARG, "dist.wait: the work handle is nil");
    cr_status st = wait_request(&w->req, w->what);
    if (st == CR_OK && w->average) divide_by_world(w->average);
    release(w);
    return st;
}

cr_status cr_mpi_test(cr_dist_work *w, int *done) {
    if (!w || !done) return cr_fail(CR_ERR_ARG, "dist.test: the work handle is nil");
    *done = 0;
    int rc = MPI_Test(&w->req, done, MPI_STATUS_IGNORE);
    return rc == MPI_SUCCESS ? CR_OK : mpi_fail(rc, w->what);
}

/* Hands the started request to the caller (work != NULL) or waits for it. */
static cr_status finish(int rc, cr_dist_work *w, cr_dist_work **work) {
    if (rc != MPI_SUCCESS) {
        cr_status st = mpi_fail(rc, w->what);
        release(w);
        return st;
    }
    if (work) {
        *work = w;
        return CR_OK;
    }
    return cr_mpi_wait(w);
}

static cr_dist_work *new_work(const char *what, cr_tensor *a, cr_tensor *b) {
    cr_dist_work *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->what = what;
    w->keep[0] = a;
    w->keep[1] = b;
    if (a) cr_tensor_retain(a);
    if (b) cr_tensor_retain(b);
    return w;
}

/* Every entry starts here: no handle until the collective has started, and MPI ready. */
static cr_status begin(const char *what, cr_dist_work **work) {
    if (work) *work = NULL;
    return need_init(what);
}

cr_status cr_mpi_all_reduce(cr_tensor *t, cr_reduce_op op, cr_dist_work **work) {
    cr_status st0 = begin("all_reduce", work);
    if (st0) return st0;
    cr_status st = check_tensor(t, "all_reduce", "the tensor");
    MPI_Op mop = MPI_SUM;
    if (!st) st = mpi_op(op, cr_tensor_dtype(t), "all_reduce", &mop);
    if (st) return st;
    cr_dist_work *w = new_work(op == CR_REDUCE_AVG ? "all_reduce(avg)" : op == CR_REDUCE_MAX ? "all_reduce(max)"
                               : op == CR_REDUCE_MIN ? "all_reduce(min)" : "all_reduce(sum)", t, NULL);
    if (!w) return cr_fail(CR_ERR_OOM, "all_reduce: out of memory for the work handle");
    if (op == CR_REDUCE_AVG) w->average = t;
    int rc = MPI_Iallreduce(MPI_IN_PLACE, cr_tensor_data(t), (int)cr_tensor_numel(t),
                            mpi_type(cr_tensor_dtype(t)), mop, MPI_COMM_WORLD, &w->req);
    return finish(rc, w, work);
}

cr_status cr_mpi_broadcast(cr_tensor *t, int root, cr_dist_work **work) {
    cr_status st0 = begin("broadcast", work);
    if (st0) return st0;
    cr_status st = check_tensor(t, "broadcast", "the tensor");
    if (st) return st;
    if (root < 0 || root >= g_world)
        return cr_fail(CR_ERR_ARG, "broadcast: root %d is not a rank of this run (0 .. %d)", root, g_world - 1);
    cr_dist_work *w = new_work("broadcast", t, NULL);
    if (!w) return cr_fail(CR_ERR_OOM, "broadcast: out of memory for the work handle");
    int rc = MPI_Ibcast(cr_tensor_data(t), (int)cr_tensor_numel(t), mpi_type(cr_tensor_dtype(t)), root,
                        MPI_COMM_WORLD, &w->req);
    return finish(rc, w, work);
}

static cr_status check_pair(cr_tensor *out, cr_tensor *in, const char *what, int64_t big, int64_t small) {
    cr_status st = check_tensor(out, what, "out");
    if (!st) st = check_tensor(in, what, "the input");
    if (st) return st;
    if (cr_tensor_dtype(out) != cr_tensor_dtype(in))
        return cr_fail(CR_ERR_ARG, "%s: out is %s and the input %s; they must match", what,
                       cr_dtype_name(cr_tensor_dtype(out)), cr_dtype_name(cr_tensor_dtype(in)));
    if (big != small * g_world)
        return cr_fail(CR_ERR_ARG, "%s: needs %lld = %d ranks x %lld elements, got %lld", what,
                       (long long)(small * g_world), g_world, (long long)small, (long long)big);
    if (cr_tensor_same_storage(out, in))
        return cr_fail(CR_ERR_ARG, "%s: out and the input share memory; pass separate tensors", what);
    return CR_OK;
}

cr_status cr_mpi_all_gather(cr_tensor *out, cr_tensor *in, cr_dist_work **work) {
    cr_status st0 = begin("all_gather", work);
    if (st0) return st0;
    cr_status st = check_pair(out, in, "all_gather", out ? cr_tensor_numel(out) : 0, in ? cr_tensor_numel(in) : 0);
    if (st) return st;
    cr_dist_work *w = new_work("all_gather", out, in);
    if (!w) return cr_fail(CR_ERR_OOM, "all_gather: out of memory for the work handle");
    MPI_Datatype ty = mpi_type(cr_tensor_dtype(in));
    int rc = MPI_Iallgather(cr_tensor_data(in), (int)cr_tensor_numel(in), ty, cr_tensor_data(out),
                            (int)cr_tensor_numel(in), ty, MPI_COMM_WORLD, &w->req);
    return finish(rc, w, work);
}

cr_status cr_mpi_reduce_scatter(cr_tensor *out, cr_tensor *in, cr_reduce_op op, cr_dist_work **work) {
    cr_status st0 = begin("reduce_scatter", work);
    if (st0) return st0;
    cr_status st = check_pair(out, in, "reduce_scatter", in ? cr_tensor_numel(in) : 0,
                              out ? cr_tensor_numel(out) : 0);
    MPI_Op mop = MPI_SUM;
    if (!st) st = mpi_op(op, cr_tensor_dtype(in), "reduce_scatter", &mop);
    if (st) return st;
    cr_dist_work *w = new_work("reduce_scatter", out, in);
    if (!w) return cr_fail(CR_ERR_OOM, "reduce_scatter: out of memory for the work handle");
    if (op == CR_REDUCE_AVG) w->average = out;
    int rc = MPI_Ireduce_scatter_block(cr_tensor_data(in), cr_tensor_data(out), (int)cr_tensor_numel(out),
                                       mpi_type(cr_tensor_dtype(in)), mop, MPI_COMM_WORLD, &w->req);
    return finish(rc, w, work);
}

cr_status cr_mpi_barrier(void) {
    cr_status st0 = begin("barrier", NULL);
    if (st0) return st0;
    MPI_Request req;
    int rc = MPI_Ibarrier(MPI_COMM_WORLD, &req);
    if (rc != MPI_SUCCESS) return mpi_fail(rc, "barrier");
    return wait_request(&req, "barrier");
}

cr_status cr_mpi_broadcast_bytes(void *buf, int64_t n, int root) {
    cr_status st0 = begin("broadcast_bytes", NULL);
    if (st0) return st0;
    if (!buf || n < 0 || n > 0x7fffffff) return cr_fail(CR_ERR_ARG, "broadcast_bytes: bad buffer or size %lld", (long long)n);
    if (root < 0 || root >= g_world)
        return cr_fail(CR_ERR_ARG, "broadcast_bytes: root %d is not a rank (0 .. %d)", root, g_world - 1);
    MPI_Request req;
    int rc = MPI_Ibcast(buf, (int)n, MPI_BYTE, root, MPI_COMM_WORLD, &req);
    if (rc != MPI_SUCCESS) return mpi_fail(rc, "broadcast_bytes");
    return wait_request(&req, "broadcast_bytes");
}

cr_status cr_mpi_all_reduce_f64(double *buf, int64_t n, cr_reduce_op op) {
    cr_status st0 = begin("all_reduce", NULL);
    if (st0) return st0;
    MPI_Op mop = MPI_SUM;
    cr_status st = mpi_op(op, CR_DT_F64, "all_reduce", &mop);
    if (st) return st;
    if (!buf || n < 0 || n > 0x7fffffff) return cr_fail(CR_ERR_ARG, "all_reduce: bad buffer or size %lld", (long long)n);
    MPI_Request req;
    int rc = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_DOUBLE, mop, MPI_COMM_WORLD, &req);
    if (rc != MPI_SUCCESS) return mpi_fail(rc, "all_reduce");
    st = wait_request(&req, "all_reduce(f64)");
    if (!st && op == CR_REDUCE_AVG)
        for (int64_t i = 0; i < n; i++) buf[i] /= g_world;
    return st;
}
