/* optim_impl.h — what the fused optimizer files share: argument checks on the slots
 * and the chunk list that OpenMP shares out.
 *
 * A chunk is a run of at most CR_OPTIM_CHUNK elements of one tensor. Chunks are cut the
 * same way whatever the thread count, and per-chunk partial sums are reduced serially
 * in chunk order, so norms (LARS ratios, clipping) are bit-identical on 1 or N threads. */
#ifndef CR_OPTIM_IMPL_H
#define CR_OPTIM_IMPL_H

#include "internal.h"

enum { CR_OPTIM_CHUNK = 32768 };

typedef struct {
    int slot;      /* index into the slots / params array */
    int64_t begin; /* element range [begin, end) */
    int64_t end;
} cr_optim_chunk;

typedef struct {
    cr_optim_chunk *chunks;
    int64_t n;
    int64_t total; /* elements over all chunks */
} cr_optim_chunks;

/* Resolves slot->grad (NULL: the param's .grad, a borrowed pointer) into grads[i] and
 * checks param, grad and buffers; needs_buf1/needs_buf2 say which buffers the update
 * uses (so their shape is checked when present). Fails naming "parameter i". */
cr_status cr_optim_check_slots(const char *opname, cr_optim_slot *slots, int n,
                               cr_tensor **grads, bool needs_buf1, bool needs_buf2);
/* Same for a plain params array (clipping, zeroing): grads[i] = params[i]->grad. */
cr_status cr_optim_check_grads(const char *opname, cr_tensor **params, int n,
                               cr_tensor **grads);
/* Chunks over tensors[i] for i with tensors[i] != NULL. Free with cr_optim_chunks_free. */
cr_status cr_optim_chunks_build(cr_optim_chunks *out, cr_tensor **tensors, int n);
void cr_optim_chunks_free(cr_optim_chunks *c);
/* A zero-filled (zero = true) or uninitialised tensor shaped like t. */
cr_status cr_optim_buffer_like(cr_tensor **out, const cr_tensor *t, bool zero);

/* The device the non-NULL tensors share: -1 for the cpu, else the CUDA index; an error
 * when they are on different devices. */
cr_status cr_optim_device(const char *opname, cr_tensor **tensors, int n, int *device);
/* out[k] = the power sum of chunk k (cr_optim_chunk_pow_sum), on `device` (-1: cpu). */
cr_status cr_optim_pow_sums(const cr_optim_chunks *ch, cr_tensor **tensors, double p, int device,
                            double *out);

/* Over elements [begin, end) of a contiguous f32/f64 tensor: the sum of |x|^p in f64
 * (p = 2: squares), or max |x| when p is INFINITY. */
double cr_optim_chunk_pow_sum(const cr_tensor *t, int64_t begin, int64_t end, double p);

#endif
