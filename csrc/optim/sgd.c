/* sgd.c — fused SGD and LARS/LARC steps over every parameter in one call.
 *
 * SGD follows torch.optim.SGD exactly (weight decay added to the grad, the momentum
 * buffer set to the grad on the first step, dampening, Nesterov). LARS is apex's LARC
 * as SwAV and VISSL use it: a per-tensor trust ratio scales (g + wd*p), then the same
 * SGD momentum update runs with weight decay 0. Both are one kernel: for each tensor,
 *     d = gmul * (gs*g + wd*p)
 * with gmul = 1 for SGD and the trust ratio for an adapted LARS tensor, gs the
 * accumulation scale. With gmul = gs = 1 the arithmetic is PyTorch's, operation for
 * operation. */
#include <math.h>

#include "cuda_backend.h"
#include "optim_impl.h"

/* Per-slot values fixed before the parallel loop. */
typedef struct {
    double gscale; /* gmul * grad_scale */
    double wd;     /* gmul * effective weight decay */
    bool first;    /* momentum buffer created this step: buf = d */
} sgd_plan;

/* One chunk. T is float or double; the loops are split by case so each vectorizes. */
#define SGD_CHUNK_BODY(T)                                                            \
    T *p = (T *)cr_tensor_ptr(s->param) + b;                                         \
    const T *g = (const T *)cr_tensor_ptr(grad) + b;                                 \
    const T lr = (T)s->lr, gsc = (T)pl->gscale, wd = (T)pl->wd, m = (T)s->momentum;  \
    const T damp1 = (T)(1.0 - s->dampening);                                         \
    const int64_t n = e - b;                                                         \
    if (s->momentum == 0.0) {                                                        \
        for (int64_t i = 0; i < n; i++) p[i] -= lr * (g[i] * gsc + wd * p[i]);       \
        return;                                                                      \
    }                                                                                \
    T *buf = (T *)cr_tensor_ptr(s->buf1) + b;                                        \
    const bool nesterov = (s->flags & CR_OPTIM_NESTEROV) != 0;                       \
    if (pl->first && nesterov) {                                                     \
        for (int64_t i = 0; i < n; i++) {                                            \
            T d = g[i] * gsc + wd * p[i];                                            \
            buf[i] = d;                                                              \
            p[i] -= lr * (d + m * d);                                                \
        }                                                                            \
    } else if (pl->first) {                                                          \
        for (int64_t i = 0; i < n; i++) {                                            \
            T d = g[i] * gsc + wd * p[i];                                            \
            buf[i] = d;                                                              \
            p[i] -= lr * d;                                                          \
        }                                                                            \
    } else if (nesterov) {                                                           \
        for (int64_t i = 0; i < n; i++) {                                            \
            T d = g[i] * gsc + wd * p[i];                                            \
            T v = m * buf[i] + damp1 * d;                                            \
            buf[i] = v;                                                              \
            p[i] -= lr * (d + m * v);                                                \
        }                                                                            \
    } else {                                                                         \
        for (int64_t i = 0; i < n; i++) {                                            \
            T d = g[i] * gsc + wd * p[i];                                            \
            T v = m * buf[i] + damp1 * d;                                            \
            buf[i] = v;                                                              \
            p[i] -= lr * v;                                                          \
        }                                                                            \
    }

static void sgd_chunk_f32(const cr_optim_slot *s, const sgd_plan *pl, const cr_tensor *grad,
                          int64_t b, int64_t e) {
    SGD_CHUNK_BODY(float)
}
static void sgd_chunk_f64(const cr_optim_slot *s, const sgd_plan *pl, const cr_tensor *grad,
                          int64_t b, int64_t e) {
    SGD_CHUNK_BODY(double)
}
#undef SGD_CHUNK_BODY

/* Allocates missing momentum buffers (serially, before any thread starts). */
static cr_status sgd_prepare(cr_optim_slot *slots, int n, cr_tensor **grads, sgd_plan *plans,
                             double grad_scale) {
    for (int i = 0; i < n; i++) {
        cr_optim_slot *s = &slots[i];
        plans[i].gscale = grad_scale;
        plans[i].wd = s->weight_decay;
        plans[i].first = false;
        if (!grads[i] || s->momentum == 0.0 || s->buf1) continue;
        cr_status st = cr_optim_buffer_like(&s->buf1, s->param, false);
        if (st) return st;
        plans[i].first = true;
    }
    return CR_OK;
}

/* The chunks as the CUDA backend's work list, run on `device`. */
static cr_status sgd_run_gpu(cr_optim_slot *slots, cr_tensor **grads, const sgd_plan *plans,
                             const cr_optim_chunks *ch, int device) {
    const cr_cuda_backend *be = cr_cuda_backend_get();
    if (!be) return CR_ERR_DEVICE;
    cr_gpu_optim_chunk *list = calloc((size_t)(ch->n > 0 ? ch->n : 1), sizeof *list);
    if (!list) return cr_fail(CR_ERR_OOM, "optimizer: out of memory for %lld chunks", (long long)ch->n);
    for (int64_t k = 0; k < ch->n; k++) {
        const cr_optim_chunk *c = &ch->chunks[k];
        const cr_optim_slot *s = &slots[c->slot];
        const sgd_plan *pl = &plans[c->slot];
        int64_t es = (int64_t)cr_dtype_size(s->param->dtype), off = c->begin * es;
        list[k] = (cr_gpu_optim_chunk){
            .p = cr_tensor_ptr(s->param) + off,
            .buf1 = s->buf1 ? cr_tensor_ptr(s->buf1) + off : NULL,
            .g = cr_tensor_ptr(grads[c->slot]) + off,
            .n = c->end - c->begin,
            .f64 = s->param->dtype == CR_DT_F64,
            .nesterov = (s->flags & CR_OPTIM_NESTEROV) != 0,
            .first = pl->first,
            .lr = s->lr,
            .gscale = pl->gscale,
            .wd = pl->wd,
            .momentum = s->momentum,
            .damp1 = 1.0 - s->dampening,
        };
    }
    cr_status st = be->optim_update(device, list, ch->n);
    free(list);
    return st;
}

static void sgd_run_cpu(const cr_optim_slot *slots, cr_tensor **grads, const sgd_plan *plans,
                        const cr_optim_chunks *ch) {
    int64_t nc = ch->n;
#pragma omp parallel for schedule(dynamic, 2) if (nc > 1 && ch->total >= CR_PAR_GRAIN) \
    num_threads(cr_threads())
    for (int64_t k = 0; k < nc; k++) {
        const cr_optim_chunk *c = &ch->chunks[k];
        const cr_optim_slot *s = &slots[c->slot];
        if (s->param->dtype == CR_DT_F32)
            sgd_chunk_f32(s, &plans[c->slot], grads[c->slot], c->begin, c->end);
        else
            sgd_chunk_f64(s, &plans[c->slot], grads[c->slot], c->begin, c->end);
    }
}

/* The update on the params' device (-1: cpu), then the step counts and versions. */
static cr_status sgd_run(cr_optim_slot *slots, int n, cr_tensor **grads, const sgd_plan *plans,
                         const cr_optim_chunks *ch, int device) {
    if (device >= 0) {
        cr_status st = sgd_run_gpu(slots, grads, plans, ch, device);
        if (st) return st;
    } else {
        sgd_run_cpu(slots, grads, plans, ch);
    }
    for (int i = 0; i < n; i++) {
        if (!grads[i]) continue;
        cr_optim_slot *s = &slots[i];
        s->step++;
        s->stepped = 1;
        cr_tensor_bump_version(s->param);
        if (s->buf1) cr_tensor_bump_version(s->buf1);
    }
    return CR_OK;
}

/* Scratch shared by both steps: borrowed grads, plans, chunks. */
typedef struct {
    cr_tensor **grads;
    sgd_plan *plans;
    cr_optim_chunks ch;
} sgd_scratch;

static cr_status scratch_init(sgd_scratch *w, int n) {
    w->grads = calloc((size_t)(n > 0 ? n : 1), sizeof(cr_tensor *));
    w->plans = calloc((size_t)(n > 0 ? n : 1), sizeof(sgd_plan));
    w->ch.chunks = NULL;
    w->ch.n = 0;
    if (!w->grads || !w->plans)
        return cr_fail(CR_ERR_OOM, "optimizer: out of memory for %d slots", n);
    return CR_OK;
}
/* On failure, buffers created by this call go away again: a half-built buffer must not
 * reach the caller's state as if it held a momentum. */
static void scratch_free(sgd_scratch *w, cr_optim_slot *slots, int n, cr_status st) {
    for (int i = 0; st && w->plans && i < n; i++) {
        if (!w->plans[i].first) continue;
        cr_tensor_free(slots[i].buf1);
        slots[i].buf1 = NULL;
    }
    free(w->grads);
    free(w->plans);
    cr_optim_chunks_free(&w->ch);
}

cr_status cr_optim_sgd_step(cr_optim_slot *slots, int n, double grad_scale) {
    sgd_scratch w;
    int device = -1;
    cr_status st = scratch_init(&w, n);
    if (!st) st = cr_optim_check_slots("SGD step", slots, n, w.grads, true, false);
    if (!st) st = cr_optim_device("SGD step", w.grads, n, &device);
    if (!st) st = sgd_prepare(slots, n, w.grads, w.plans, grad_scale);
    if (!st) st = cr_optim_chunks_build(&w.ch, w.grads, n);
    if (!st) st = sgd_run(slots, n, w.grads, w.plans, &w.ch, device);
    scratch_free(&w, slots, n, st);
    return st;
}

/* ---- LARS ------------------------------------------------------------------------
 * Norms first (one parallel pass over p and g of the adapted tensors, partial sums per
 * chunk, reduced in chunk order), then the ratio per tensor, then the SGD kernel. */
cr_status cr_optim_lars_step(cr_optim_slot *slots, int n, double grad_scale) {
    sgd_scratch w;
    cr_status st = scratch_init(&w, n);
    cr_tensor **adapt = NULL;
    double *psum = NULL, *gsum = NULL, *pn = NULL, *gn = NULL;
    cr_optim_chunks nch = {NULL, 0, 0};
    int device = -1;
    if (!st) st = cr_optim_check_slots("LARS step", slots, n, w.grads, true, false);
    if (!st) st = cr_optim_device("LARS step", w.grads, n, &device);
    if (!st) st = sgd_prepare(slots, n, w.grads, w.plans, grad_scale);
    if (st) goto done;

    adapt = calloc((size_t)(n > 0 ? n : 1), sizeof(cr_tensor *));
    pn = calloc((size_t)(n > 0 ? n : 1), sizeof(double));
    gn = calloc((size_t)(n > 0 ? n : 1), sizeof(double));
    if (!adapt || !pn || !gn) {
        st = cr_fail(CR_ERR_OOM, "LARS step: out of memory for %d slots", n);
        goto done;
    }
    for (int i = 0; i < n; i++)
        if (w.grads[i] && (slots[i].flags & CR_OPTIM_LARS_ADAPT)) adapt[i] = slots[i].param;
    if ((st = cr_optim_chunks_build(&nch, adapt, n))) goto done;
    if (nch.n > 0) {
        psum = malloc(sizeof(double) * (size_t)nch.n);
        gsum = malloc(sizeof(double) * (size_t)nch.n);
        if (!psum || !gsum) {
            st = cr_fail(CR_ERR_OOM, "LARS step: out of memory for %lld chunks", (long long)nch.n);
            goto done;
        }
    }
    int64_t nc = nch.n;
    if ((st = cr_optim_pow_sums(&nch, adapt, 2.0, device, psum)) ||
        (st = cr_optim_pow_sums(&nch, w.grads, 2.0, device, gsum)))
        goto done;
    for (int64_t k = 0; k < nc; k++) {
        pn[nch.chunks[k].slot] += psum[k];
        gn[nch.chunks[k].slot] += gsum[k];
    }
    for (int i = 0; i < n; i++) {
        if (!adapt[i]) continue;
        cr_optim_slot *s = &slots[i];
        double p_norm = sqrt(pn[i]), g_norm = sqrt(gn[i]) * fabs(grad_scale);
        if (p_norm != 0.0 && g_norm != 0.0) {
            double ratio = s->trust_coefficient * p_norm /
                           (g_norm + p_norm * s->weight_decay + s->eps);
            if (s->flags & CR_OPTIM_LARS_CLIP) ratio = s->lr > 0.0 ? fmin(ratio / s->lr, 1.0) : 1.0;
            s->trust_ratio = ratio;
            w.plans[i].gscale = ratio * grad_scale;
            w.plans[i].wd = ratio * s->weight_decay;
        } else {
            w.plans[i].wd = 0.0; /* apex leaves the grad untouched: no weight decay either */
        }
    }
    if ((st = cr_optim_chunks_build(&w.ch, w.grads, n))) goto done;
    st = sgd_run(slots, n, w.grads, w.plans, &w.ch, device);
done:
    free(adapt);
    free(pn);
    free(gn);
    free(psum);
    free(gsum);
    cr_optim_chunks_free(&nch);
    scratch_free(&w, slots, n, st);
    return st;
}
