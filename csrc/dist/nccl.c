/* nccl.c — the public cr_nccl_* calls of crescent_dist.h: they check their tensors
 * (GPU, on the communicator's device, contiguous, one dtype, sizes that fit the
 * collective) and forward raw device pointers to the CUDA backend's NCCL entries
 * (cuda_backend.h, csrc/cuda/nccl.c), which own the communicator and its stream.
 *
 * A work handle keeps its tensors alive until the wait: their blocks belong to the
 * compute stream's caching allocator, and the wait (the compute stream waiting for the
 * collective) is what makes a later reuse of a block safe. These handles are this
 * library's own; the MPI library (csrc/dist/mpi/) has handles of its own, never mixed. */
#include "cuda_backend.h"

struct cr_dist_work {
    void *done;       /* the backend's event after the collective; NULL: nothing to wait */
    cr_tensor *t[2];  /* retained until the wait */
};

/* The communicator as the core knows it (the backend holds the real one). */
static int comm_device = -1, comm_rank, comm_world;

/* The backend with its NCCL entries, or the reason why not, prefixed with `op`. */
static cr_status nccl_backend(const cr_cuda_backend **be, const char *op) {
    if (!(*be = cr_cuda_backend_get())) {
        char why[1600];
        snprintf(why, sizeof why, "%s", cr_last_error());
        return cr_fail(CR_ERR_DEVICE, "%s: NCCL needs a usable CUDA GPU: %s", op, why);
    }
    if (!(*be)->nccl_init)
        return cr_fail(CR_ERR_UNSUPPORTED, "%s: crescent's GPU backend was built without NCCL: install "
                       "NCCL (nccl.h) where NCCL_HOME points and rerun make", op);
    return CR_OK;
}

static cr_status need_comm(const cr_cuda_backend **be, const char *op) {
    cr_status st = nccl_backend(be, op);
    if (st) return st;
    if (comm_device < 0)
        return cr_fail(CR_ERR_ARG, "%s: there is no NCCL communicator yet; call cr_nccl_init "
                       "(cr.dist.init) first", op);
    return CR_OK;
}

/* A tensor NCCL can move: on the communicator's GPU, contiguous, of a dtype it knows. */
static cr_status check_tensor(const char *op, const cr_tensor *t, const char *arg, bool reduces) {
    CR_CHECK_TENSOR(op, t, arg);
    char dev[32];
    if (t->storage->device != CR_DEV_CUDA)
        return cr_fail(CR_ERR_DEVICE, "%s: '%s' is on the cpu, and NCCL moves GPU tensors: move it "
                       "with :to('cuda:%d'), or use the MPI collectives for cpu tensors", op, arg,
                       comm_device);
    if (t->storage->device_index != comm_device)
        return cr_fail(CR_ERR_DEVICE, "%s: '%s' is on %s but this rank's NCCL communicator is on "
                       "cuda:%d: move it there with :to('cuda:%d')", op, arg,
                       cr_device_str(cr_tensor_dev(t), dev, sizeof dev), comm_device, comm_device);
    if (!cr_tensor_is_contiguous(t))
        return cr_fail(CR_ERR_ARG, "%s: '%s' is not contiguous; pass :contiguous() (every rank must "
                       "send the same elements in the same order)", op, arg);
    if (t->dtype == CR_DT_BOOL && reduces)
        return cr_fail(CR_ERR_ARG, "%s: '%s' is bool, which NCCL cannot reduce: convert it to "
                       "u8 or i32 first", op, arg);
    if ((unsigned)t->dtype >= CR_DT_COUNT)
        return cr_fail(CR_ERR_ARG, "%s: '%s' has an unknown dtype", op, arg);
    return CR_OK;
}

static cr_status check_op(const char *op, cr_reduce_op r, const cr_tensor *t) {
    if ((unsigned)r > CR_REDUCE_MIN)
        return cr_fail(CR_ERR_ARG, "%s: reduction %d is not one of sum, avg, max, min", op, (int)r);
    if (r == CR_REDUCE_AVG && !cr_dtype_is_float(t->dtype))
        return cr_fail(CR_ERR_ARG, "%s: avg needs a floating dtype, and the tensor is %s: reduce "
                       "with sum and divide, or convert it to f32", op, cr_dtype_name(t->dtype));
    return CR_OK;
}

static cr_status check_same_dtype(const char *op, const cr_tensor *out, const cr_tensor *in) {
    if (out->dtype == in->dtype) return CR_OK;
    return cr_fail(CR_ERR_ARG, "%s: 'out' is %s but 'in' is %s: give both the same dtype", op,
                   cr_dtype_name(out->dtype), cr_dtype_name(in->dtype));
}

/* out and in may be the same bytes only where NCCL computes in place: `in` is rank r's
 * block of `out` (all_gather) or `out` is rank r's block of `in` (reduce_scatter). */
static cr_status check_overlap(const char *op, const cr_tensor *big, const cr_tensor *small) {
    size_t es = cr_dtype_size(big->dtype);
    const char *b = cr_tensor_ptr(big), *s = cr_tensor_ptr(small);
    size_t bn = (size_t)big->numel * es, sn = (size_t)small->numel * es;
    if (!bn || !sn || s + sn <= b || b + bn <= s) return CR_OK;
    if (s == b + (size_t)comm_rank * sn) return CR_OK;
    return cr_fail(CR_ERR_ARG, "%s: 'out' and 'in' overlap; in place, the small one must be exactly "
                   "this rank's block of the large one (rank %d: elements %lld to %lld)", op,
                   comm_rank, (long long)comm_rank * small->numel,
                   (long long)(comm_rank + 1) * small->numel - 1);
}

/* Runs one checked collective: allocates the handle first (a failure after NCCL has the
 * call would leave this rank out of a collective the others joined), then enqueues, then
 * either hands the handle out or waits at once. */
static cr_status run(const cr_cuda_backend *be, cr_collective kind, cr_tensor *out, cr_tensor *in,
                     int64_t count, cr_reduce_op op, int root, cr_dist_work **work) {
    cr_dist_work *w = NULL;
    if (work) {
        *work = NULL;
        if (!(w = calloc(1, sizeof *w)))
            return cr_fail(CR_ERR_OOM, "NCCL: out of host memory for a work handle");
    }
    void *done = NULL;
    cr_status st = CR_OK;
    if (count > 0) /* every rank has the same count, so every rank skips an empty call */
        st = be->nccl_collective(kind, cr_tensor_ptr(out), cr_tensor_ptr(in), count, in->dtype, op,
                                 root, &done);
    if (st) {
        free(w);
        return st;
    }
    cr_tensor_bump_version(out);
    if (!w) return be->nccl_wait(done);
    w->done = done;
    w->t[0] = out;
    cr_tensor_retain(out);
    if (in != out) {
        w->t[1] = in;
        cr_tensor_retain(in);
    }
    *work = w;
    return CR_OK;
}

cr_status cr_nccl_unique_id(uint8_t *id) {
    if (!id) return cr_fail(CR_ERR_ARG, "nccl_unique_id: id is NULL; pass a buffer of %d bytes",
                            (int)CR_NCCL_ID_BYTES);
    const cr_cuda_backend *be;
    cr_status st = nccl_backend(&be, "nccl_unique_id");
    return st ? st : be->nccl_unique_id(id);
}

cr_status cr_nccl_init(int rank, int world, const uint8_t *id, int device, double timeout_s) {
    const char *op = "nccl_init";
    if (world < 1) return cr_fail(CR_ERR_ARG, "%s: world size %d; it must be at least 1", op, world);
    if (rank < 0 || rank >= world)
        return cr_fail(CR_ERR_ARG, "%s: rank %d does not lie in [0, %d) (the world size)", op, rank,
                       world);
    if (!id) return cr_fail(CR_ERR_ARG, "%s: id is NULL; pass rank 0's cr_nccl_unique_id", op);
    if (!(timeout_s > 0))
        return cr_fail(CR_ERR_ARG, "%s: timeout %g s; it must be a positive number of seconds", op,
                       timeout_s);
    const cr_cuda_backend *be;
    cr_status st = nccl_backend(&be, op);
    if (st) return st;
    if (comm_device >= 0)
        return cr_fail(CR_ERR_ARG, "%s: this process already has a communicator (rank %d of %d on "
                       "cuda:%d); call cr_nccl_finalize first", op, comm_rank, comm_world,
                       comm_device);
    if ((st = cr_cuda_backend_for(&be, device, false))) return st;
    if ((st = be->nccl_init(rank, world, id, device, timeout_s))) return st;
    comm_device = device, comm_rank = rank, comm_world = world;
    return CR_OK;
}

cr_status cr_nccl_all_reduce(cr_tensor *t, cr_reduce_op op, cr_dist_work **work) {
    const char *name = "nccl_all_reduce";
    const cr_cuda_backend *be;
    cr_status st = need_comm(&be, name);
    if (!st) st = check_tensor(name, t, "t", true);
    if (!st) st = check_op(name, op, t);
    return st ? st : run(be, CR_COLL_ALL_REDUCE, t, t, t->numel, op, 0, work);
}

cr_status cr_nccl_broadcast(cr_tensor *t, int root, cr_dist_work **work) {
    const char *name = "nccl_broadcast";
    const cr_cuda_backend *be;
    cr_status st = need_comm(&be, name);
    if (!st) st = check_tensor(name, t, "t", false);
    if (st) return st;
    if (root < 0 || root >= comm_world)
        return cr_fail(CR_ERR_ARG, "%s: root %d does not lie in [0, %d) (the world size)", name, root,
                       comm_world);
    return run(be, CR_COLL_BROADCAST, t, t, t->numel, CR_REDUCE_SUM, root, work);
}

cr_status cr_nccl_all_gather(cr_tensor *out, cr_tensor *in, cr_dist_work **work) {
    const char *name = "nccl_all_gather";
    const cr_cuda_backend *be;
    cr_status st = need_comm(&be, name);
    if (!st) st = check_tensor(name, out, "out", false);
    if (!st) st = check_tensor(name, in, "in", false);
    if (!st) st = check_same_dtype(name, out, in);
    if (st) return st;
    if (out->numel != (int64_t)comm_world * in->numel)
        return cr_fail(CR_ERR_ARG, "%s: 'out' has %lld elements, but gathering %lld from each of %d "
                       "ranks needs %lld: make out world_size times as large as in", name,
                       (long long)out->numel, (long long)in->numel, comm_world,
                       (long long)comm_world * in->numel);
    if ((st = check_overlap(name, out, in))) return st;
    return run(be, CR_COLL_ALL_GATHER, out, in, in->numel, CR_REDUCE_SUM, 0, work);
}

cr_status cr_nccl_reduce_scatter(cr_tensor *out, cr_tensor *in, cr_reduce_op op, cr_dist_work **work) {
    const char *name = "nccl_reduce_scatter";
    const cr_cuda_backend *be;
    cr_status st = need_comm(&be, name);
    if (!st) st = check_tensor(name, out, "out", true);
    if (!st) st = check_tensor(name, in, "in", true);
    if (!st) st = check_same_dtype(name, out, in);
    if (!st) st = check_op(name, op, in);
    if (st) return st;
    if (in->numel != (int64_t)comm_world * out->numel)
        return cr_fail(CR_ERR_ARG, "%s: 'in' has %lld elements, but scattering %lld to each of %d "
                       "ranks needs %lld: make in world_size times as large as out", name,
                       (long long)in->numel, (long long)out->numel, comm_world,
                       (long long)comm_world * out->numel);
    if ((st = check_overlap(name, in, out))) return st;
    return run(be, CR_COLL_REDUCE_SCATTER, out, in, out->numel, op, 0, work);
}

cr_status cr_nccl_wait(cr_dist_work *work) {
    if (!work) return cr_fail(CR_ERR_ARG, "nccl_wait: the work handle is NULL (already waited?)");
    cr_status st = CR_OK;
    if (work->done) {
        const cr_cuda_backend *be = cr_cuda_backend_get(); /* loaded: it made the handle */
        st = be ? be->nccl_wait(work->done) : CR_ERR_DEVICE;
    }
    cr_tensor_free(work->t[0]);
    cr_tensor_free(work->t[1]);
    free(work);
    return st;
}

cr_status cr_nccl_synchronize(void) {
    const cr_cuda_backend *be;
    cr_status st = need_comm(&be, "nccl_synchronize");
    return st ? st : be->nccl_synchronize();
}

void cr_nccl_finalize(void) {
    if (comm_device < 0) return;
    const cr_cuda_backend *be = cr_cuda_backend_get();
    if (be && be->nccl_finalize) be->nccl_finalize();
    comm_device = -1;
}

bool cr_nccl_available(void) {
    char saved[2048];
    snprintf(saved, sizeof saved, "%s", cr_last_error()); /* a question, not a failure */
    const cr_cuda_backend *be = cr_cuda_backend_get();
    cr_fail(CR_OK, "%s", saved);
    return be && be->nccl_init;
}
