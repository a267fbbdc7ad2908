/* crescent_dist.h — collectives across the processes of a distributed run (one process
 * per GPU, or several cpu processes), and the rendezvous that starts them.
 *
 * cpu tensors go through MPI: cr_mpi_* live in build/libcrescent_mpi.so, built when
 * mpicc is present (the probe line "MPI") and opened by lua/crescent/dist/comm.lua only
 * in a run started by an MPI launcher, so libcrescent.so never needs MPI to load.
 * GPU tensors go through NCCL: cr_nccl_* are in libcrescent.so and forward to the CUDA
 * backend (built with NCCL when nccl.h is present), on a communication stream of its own.
 *
 * Every collective takes contiguous tensors of the same dtype, shape and order on every
 * rank: a rank that passes another shape makes MPI/NCCL fail or hang, which the timeout
 * below turns into an exit. Asynchronous forms return a work handle (work != NULL); the
 * tensors must not be touched until cr_*_wait returns. With work == NULL a call waits.
 *
 * Timeout: a wait that lasts longer than the timeout (cr_mpi_set_timeout, cr_nccl_init)
 * means a rank died or is stuck. It prints one line naming the collective, the rank and
 * the timeout to stderr, then aborts every rank of the job (MPI_Abort, ncclCommAbort):
 * a distributed run never hangs forever. */
#ifndef CRESCENT_DIST_H
#define CRESCENT_DIST_H

typedef enum { CR_REDUCE_SUM = 0, CR_REDUCE_AVG, CR_REDUCE_MAX, CR_REDUCE_MIN } cr_reduce_op;
typedef struct cr_dist_work cr_dist_work;

/* ---- MPI (build/libcrescent_mpi.so) ---------------------------------------------------
 * init: MPI_Init_thread (funneled) when not yet initialised; rank and size of
 * MPI_COMM_WORLD. finalize: MPI_Finalize, once (also registered with atexit by init). */
cr_status cr_mpi_init(int *rank, int *world);
void cr_mpi_set_timeout(double seconds);
cr_status cr_mpi_all_reduce(cr_tensor *t, cr_reduce_op op, cr_dist_work **work);
cr_status cr_mpi_broadcast(cr_tensor *t, int root, cr_dist_work **work);
/* out: world * numel(in) elements, rank r's `in` at offset r * numel(in). */
cr_status cr_mpi_all_gather(cr_tensor *out, cr_tensor *in, cr_dist_work **work);
/* in: world * numel(out) elements; rank r gets the reduction of block r. */
cr_status cr_mpi_reduce_scatter(cr_tensor *out, cr_tensor *in, cr_reduce_op op, cr_dist_work **work);
cr_status cr_mpi_barrier(void);
/* Raw buffers, for bootstrap ids and the doubles of SwAV's Sinkhorn sums. */
cr_status cr_mpi_broadcast_bytes(void *buf, int64_t n, int root);
cr_status cr_mpi_all_reduce_f64(double *buf, int64_t n, cr_reduce_op op);
/* Waits for an asynchronous collective and frees the handle (also when it fails). */
cr_status cr_mpi_wait(cr_dist_work *work);
/* Drives MPI's progress engine through one test of the work's request, without waiting:
 * a cpu rank has no progress thread, so a started collective advances only inside MPI
 * calls. Sets *done when the request has completed (the handle still needs its wait). */
cr_status cr_mpi_test(cr_dist_work *work, int *done);
/* Prints `why` (with this rank) and ends every rank of the job; does not return. */
void cr_mpi_abort(const char *why);
void cr_mpi_finalize(void);

/* ---- NCCL (the CUDA backend) -----------------------------------------------------------
 * Bootstrap: rank 0 makes an id, every rank receives it (over MPI or cr_dist_rendezvous),
 * then each rank calls cr_nccl_init with its GPU. A collective is enqueued on the
 * communicator's stream after the work already queued on the device's compute stream; a
 * work handle's wait makes the compute stream wait for it (the host does not block), and
 * cr_nccl_synchronize blocks the host, with the timeout. One communicator per process, on
 * one GPU; every tensor must be on that GPU. A watchdog thread gives each enqueued
 * collective timeout_s (> 0) from its enqueueing, so an unwaited or device-side wait
 * cannot hang either. dtypes: f32, f64, f16, bf16, i64, i32, u8; bool for broadcast and
 * all_gather only; AVG for floating dtypes (NCCL >= 2.10). In place: all_gather's `in`
 * may be rank r's block of `out`, reduce_scatter's `out` rank r's block of `in`. */
enum { CR_NCCL_ID_BYTES = 128 };
cr_status cr_nccl_unique_id(uint8_t *id);
cr_status cr_nccl_init(int rank, int world, const uint8_t *id, int device, double timeout_s);
cr_status cr_nccl_all_reduce(cr_tensor *t, cr_reduce_op op, cr_dist_work **work);
cr_status cr_nccl_broadcast(cr_tensor *t, int root, cr_dist_work **work);
cr_status cr_nccl_all_gather(cr_tensor *out, cr_tensor *in, cr_dist_work **work);
cr_status cr_nccl_reduce_scatter(cr_tensor *out, cr_tensor *in, cr_reduce_op op, cr_dist_work **work);
cr_status cr_nccl_wait(cr_dist_work *work);
cr_status cr_nccl_synchronize(void);
void cr_nccl_finalize(void);
/* Whether this build's CUDA backend has NCCL (false when there is no backend). */
bool cr_nccl_available(void);

/* ---- TCP rendezvous (no MPI launcher: torchrun-style MASTER_ADDR / MASTER_PORT) ----------
 * Rank 0 listens on port (every address of addr's family, as torchrun does) and sends its
 * n bytes (at most 1 MiB) to each of the other world - 1 ranks, which connect to addr:port
 * (retrying until the timeout) and read them into buf; rank 0 returns once every rank has
 * acknowledged. Used to spread the NCCL id. Returns within timeout_s (> 0); world == 1
 * returns at once. Fails with the address, the rank and what went wrong (refused, timed
 * out, port in use, ranks that disagree on WORLD_SIZE or n). */
cr_status cr_dist_rendezvous(const char *addr, int port, int rank, int world, uint8_t *buf, size_t n,
                             double timeout_s);

#endif
