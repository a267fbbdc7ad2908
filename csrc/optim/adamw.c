/* adamw.c — fused AdamW step over every parameter in one call, torch.optim.AdamW's
 * arithmetic (amsgrad off): decoupled weight decay p *= 1 - lr*wd, moments
 * m = lerp(m, g, 1 - b1) and v = b2*v + (1 - b2)*g², bias corrections with the
 * per-tensor step count, eps added outside the square root. */
#include <math.h>
#if defined(__AVX__)
#include <immintrin.h>
#endif

#include "cuda_backend.h"
#include "optim_impl.h"

typedef struct {
    double decay;     /* 1 - lr*wd */
    double step_size; /* lr / (1 - b1^t) */
    double bc2_sqrt;  /* sqrt(1 - b2^t) */
    bool fresh;       /* moments created this step (already zero) */
} adamw_plan;

/* In-place square roots of a tile. sqrtf/sqrt may set errno, so without -fno-math-errno
 * GCC keeps a guarded scalar call per element and the whole update loop stays scalar
 * (4x slower). The AVX instructions are IEEE square roots, bit-identical to sqrtf. */
static void adamw_sqrt_f32(float *x, int n) {
    int i = 0;
#if defined(__AVX__)
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_sqrt_ps(_mm256_loadu_ps(x + i)));
#endif
    for (; i < n; i++) x[i] = sqrtf(x[i]);
}
static void adamw_sqrt_f64(double *x, int n) {
    int i = 0;
#if defined(__AVX__)
    for (; i + 4 <= n; i += 4) _mm256_storeu_pd(x + i, _mm256_sqrt_pd(_mm256_loadu_pd(x + i)));
#endif
    for (; i < n; i++) x[i] = sqrt(x[i]);
}

enum { ADAMW_TILE = 256 };

/* One chunk, in tiles: moments and the decayed param (vectorized), the square roots of
 * v in a stack tile, then the param update (vectorized). */
#define ADAMW_CHUNK_BODY(T, SQRT_TILE)                                               \
    T *p = (T *)cr_tensor_ptr(s->param) + b;                                         \
    const T *g = (const T *)cr_tensor_ptr(grad) + b;                                 \
    T *m = (T *)cr_tensor_ptr(s->buf1) + b;                                          \
    T *v = (T *)cr_tensor_ptr(s->buf2) + b;                                          \
    const T decay = (T)pl->decay, step_size = (T)pl->step_size;                      \
    const T bc2_sqrt = (T)pl->bc2_sqrt, eps = (T)s->eps, gs = (T)grad_scale;         \
    const T w1 = (T)(1.0 - s->beta1), b2 = (T)s->beta2, w2 = (T)(1.0 - s->beta2);    \
    T root[ADAMW_TILE];                                                              \
    for (int64_t t0 = 0; t0 < e - b; t0 += ADAMW_TILE) {                             \
        const int len = (int)(e - b - t0 < ADAMW_TILE ? e - b - t0 : ADAMW_TILE);    \
        T *pt = p + t0, *mt = m + t0, *vt = v + t0;                                  \
        const T *gt = g + t0;                                                        \
        for (int i = 0; i < len; i++) {                                              \
            T gi = gt[i] * gs;                                                       \
            T mi = mt[i] + w1 * (gi - mt[i]);                                        \
            T vi = b2 * vt[i] + w2 * (gi * gi);                                      \
            pt[i] = pt[i] * decay;                                                   \
            mt[i] = mi;                                                              \
            vt[i] = vi;                                                              \
            root[i] = vi;                                                            \
        }                                                                            \
        SQRT_TILE(root, len);                                                        \
        for (int i = 0; i < len; i++)                                                \
            pt[i] = pt[i] - step_size * (mt[i] / (root[i] / bc2_sqrt + eps));        \
    }

static void adamw_chunk_f32(const cr_optim_slot *s, const adamw_plan *pl, const cr_tensor *grad,
                            double grad_scale, int64_t b, int64_t e) {
    ADAMW_CHUNK_BODY(float, adamw_sqrt_f32)
}
static void adamw_chunk_f64(const cr_optim_slot *s, const adamw_plan *pl, const cr_tensor *grad,
                            double grad_scale, int64_t b, int64_t e) {
    ADAMW_CHUNK_BODY(double, adamw_sqrt_f64)
}
#undef ADAMW_CHUNK_BODY

static void adamw_run_cpu(const cr_optim_slot *slots, cr_tensor **grads, const adamw_plan *plans,
                          const cr_optim_chunks *ch, double grad_scale) {
    int64_t nc = ch->n;
#pragma omp parallel for schedule(dynamic, 2) if (nc > 1 && ch->total >= CR_PAR_GRAIN) \
    num_threads(cr_threads())
    for (int64_t k = 0; k < nc; k++) {
        const cr_optim_chunk *c = &ch->chunks[k];
        const cr_optim_slot *s = &slots[c->slot];
        if (s->param->dtype == CR_DT_F32)
            adamw_chunk_f32(s, &plans[c->slot], grads[c->slot], grad_scale, c->begin, c->end);
        else
            adamw_chunk_f64(s, &plans[c->slot], grads[c->slot], grad_scale, c->begin, c->end);
    }
}

/* The chunks as the CUDA backend's work list, run on `device`. */
static cr_status adamw_run_gpu(const cr_optim_slot *slots, cr_tensor **grads, const adamw_plan *plans,
                               const cr_optim_chunks *ch, double grad_scale, int device) {
    const cr_cuda_backend *be = cr_cuda_backend_get();
    if (!be) return CR_ERR_DEVICE;
    cr_gpu_optim_chunk *list = calloc((size_t)(ch->n > 0 ? ch->n : 1), sizeof *list);
    if (!list) return cr_fail(CR_ERR_OOM, "AdamW step: out of memory for %lld chunks", (long long)ch->n);
    for (int64_t k = 0; k < ch->n; k++) {
        const cr_optim_chunk *c = &ch->chunks[k];
        const cr_optim_slot *s = &slots[c->slot];
        const adamw_plan *pl = &plans[c->slot];
        int64_t off = c->begin * (int64_t)cr_dtype_size(s->param->dtype);
        list[k] = (cr_gpu_optim_chunk){
            .p = cr_tensor_ptr(s->param) + off,
            .buf1 = cr_tensor_ptr(s->buf1) + off,
            .buf2 = cr_tensor_ptr(s->buf2) + off,
            .g = cr_tensor_ptr(grads[c->slot]) + off,
            .n = c->end - c->begin,
            .f64 = s->param->dtype == CR_DT_F64,
            .adamw = 1,
            .gscale = grad_scale,
            .decay = pl->decay,
            .step_size = pl->step_size,
            .bc2_sqrt = pl->bc2_sqrt,
            .eps = s->eps,
            .w1 = 1.0 - s->beta1,
            .b2 = s->beta2,
            .w2 = 1.0 - s->beta2,
        };
    }
    cr_status st = be->optim_update(device, list, ch->n);
    free(list);
    return st;
}

cr_status cr_optim_adamw_step(cr_optim_slot *slots, int n, double grad_scale) {
    cr_tensor **grads = calloc((size_t)(n > 0 ? n : 1), sizeof(cr_tensor *));
    adamw_plan *plans = calloc((size_t)(n > 0 ? n : 1), sizeof(adamw_plan));
    cr_optim_chunks ch = {NULL, 0, 0};
    cr_status st = CR_OK;
    if (!grads || !plans) {
        st = cr_fail(CR_ERR_OOM, "AdamW step: out of memory for %d slots", n);
        goto done;
    }
    if ((st = cr_optim_check_slots("AdamW step", slots, n, grads, true, true))) goto done;
    for (int i = 0; i < n; i++) {
        cr_optim_slot *s = &slots[i];
        if (!grads[i]) continue;
        if ((s->buf1 == NULL) != (s->buf2 == NULL)) {
            st = cr_fail(CR_ERR_ARG, "AdamW step: parameter %d has only one of its two moment "
                         "buffers; the optimizer state is corrupt", i);
            goto done;
        }
        if (!s->buf1) {
            if ((st = cr_optim_buffer_like(&s->buf1, s->param, true))) goto done;
            plans[i].fresh = true;
            if ((st = cr_optim_buffer_like(&s->buf2, s->param, true))) goto done;
        }
        double t = (double)(s->step + 1);
        plans[i].decay = 1.0 - s->lr * s->weight_decay;
        plans[i].step_size = s->lr / (1.0 - pow(s->beta1, t));
        plans[i].bc2_sqrt = sqrt(1.0 - pow(s->beta2, t));
    }
    int device = -1;
    if ((st = cr_optim_device("AdamW step", grads, n, &device))) goto done;
    if ((st = cr_optim_chunks_build(&ch, grads, n))) goto done;
    if (device >= 0) {
        if ((st = adamw_run_gpu(slots, grads, plans, &ch, grad_scale, device))) goto done;
    } else {
        adamw_run_cpu(slots, grads, plans, &ch, grad_scale);
    }
    for (int i = 0; i < n; i++) {
        if (!grads[i]) continue;
        cr_optim_slot *s = &slots[i];
        s->step++;
        s->stepped = 1;
        cr_tensor_bump_version(s->param);
        cr_tensor_bump_version(s->buf1);
        cr_tensor_bump_version(s->buf2);
    }
done:
    /* On failure, moments created here go away again (see sgd.c). */
    for (int i = 0; st && plans && i < n; i++) {
        if (!plans[i].fresh) continue;
        cr_tensor_free(slots[i].buf1);
        cr_tensor_free(slots[i].buf2);
        slots[i].buf1 = slots[i].buf2 = NULL;
    }
    cr_optim_chunks_free(&ch);
    free(grads);
    free(plans);
    return st;
}
