/* clip.c — whole-model gradient operations in one call: the total grad norm (f64, the
 * same bits on any thread count), clipping by norm and by value, scaling and zeroing.
 * Grads are written in place and their version counters bumped; params without a grad
 * are skipped. */
#include <math.h>

#include "optim_impl.h"

/* grads[] and chunks for the params that have a grad; device -1 for the cpu, else the
 * CUDA index (GPU grads are updated through the elementwise ops, one per tensor). */
typedef struct {
    cr_tensor **grads;
    cr_optim_chunks ch;
    int device;
} grad_set;

static cr_status grad_set_init(grad_set *gs, const char *opname, cr_tensor **params, int n) {
    gs->ch.chunks = NULL;
    gs->ch.n = 0;
    gs->grads = calloc((size_t)(n > 0 ? n : 1), sizeof(cr_tensor *));
    if (!gs->grads) return cr_fail(CR_ERR_OOM, "%s: out of memory for %d params", opname, n);
    gs->device = -1;
    cr_status st = cr_optim_check_grads(opname, params, n, gs->grads);
    if (!st) st = cr_optim_device(opname, gs->grads, n, &gs->device);
    if (!st) st = cr_optim_chunks_build(&gs->ch, gs->grads, n);
    return st;
}

static void grad_set_free(grad_set *gs) {
    free(gs->grads);
    cr_optim_chunks_free(&gs->ch);
}

static void grad_set_bump(grad_set *gs, int n) {
    for (int i = 0; i < n; i++)
        if (gs->grads[i]) cr_tensor_bump_version(gs->grads[i]);
}

static bool grad_set_par(const grad_set *gs) { return gs->ch.n > 1 && gs->ch.total >= CR_PAR_GRAIN; }

static cr_status total_norm(double *out, grad_set *gs, double norm_type, double grad_scale) {
    int64_t nc = gs->ch.n;
    double *part = malloc(sizeof(double) * (size_t)(nc > 0 ? nc : 1));
    if (!part) return cr_fail(CR_ERR_OOM, "grad norm: out of memory for %lld chunks", (long long)nc);
    cr_status st = cr_optim_pow_sums(&gs->ch, gs->grads, norm_type, gs->device, part);
    if (st) {
        free(part);
        return st;
    }
    double acc = 0.0;
    if (isinf(norm_type)) {
        for (int64_t k = 0; k < nc; k++) {
            if (part[k] != part[k]) { /* NaN wins, as in torch.norm */
                acc = part[k];
                break;
            }
            if (part[k] > acc) acc = part[k];
        }
    } else {
        for (int64_t k = 0; k < nc; k++) acc += part[k];
        acc = norm_type == 2.0 ? sqrt(acc) : pow(acc, 1.0 / norm_type);
    }
    free(part);
    *out = acc * fabs(grad_scale);
    return CR_OK;
}

static cr_status check_norm_type(const char *opname, double norm_type) {
    if (!(norm_type > 0.0))
        return cr_fail(CR_ERR_ARG, "%s: norm_type must be positive (2 for the Euclidean norm, "
                       "math.huge for the max norm), got %g", opname, norm_type);
    return CR_OK;
}

cr_status cr_optim_grad_norm(double *out, cr_tensor **params, int n, double norm_type,
                             double grad_scale) {
    *out = 0.0;
    cr_status st = check_norm_type("grad_norm", norm_type);
    if (st) return st;
    grad_set gs;
    st = grad_set_init(&gs, "grad_norm", params, n);
    if (!st) st = total_norm(out, &gs, norm_type, grad_scale);
    grad_set_free(&gs);
    return st;
}

/* On a GPU, each grad through an op: f(g) for every grad of the set. */
static cr_status each_gpu_grad(grad_set *gs, int n, cr_status (*f)(cr_tensor *g, double v), double v) {
    bool was = cr_grad_set_enabled(false);
    cr_status st = CR_OK;
    for (int i = 0; i < n && !st; i++)
        if (gs->grads[i]) st = f(gs->grads[i], v);
    cr_grad_set_enabled(was);
    return st;
}

static cr_status scale_one(cr_tensor *g, double v) {
    cr_tensor *s;
    cr_status st = cr_tensor_scalar(&s, v, g->dtype);
    if (!st) st = cr_op_mul_(g, s);
    cr_tensor_free(s);
    return st;
}

static cr_status clip_one(cr_tensor *g, double v) {
    cr_tensor *c;
    cr_status st = cr_op_clamp(&c, g, true, -v, true, v);
    if (!st) st = cr_op_copy_(g, c);
    cr_tensor_free(c);
    return st;
}

static cr_status zero_one(cr_tensor *g, double v) { return cr_op_fill_(g, v); }

/* grads *= scale over the set, in parallel. */
static cr_status scale_all(grad_set *gs, int n, double scale) {
    if (gs->device >= 0) return each_gpu_grad(gs, n, scale_one, scale);
    int64_t nc = gs->ch.n;
#pragma omp parallel for schedule(dynamic, 2) if (grad_set_par(gs)) num_threads(cr_threads())
    for (int64_t k = 0; k < nc; k++) {
        const cr_optim_chunk *c = &gs->ch.chunks[k];
        cr_tensor *g = gs->grads[c->slot];
        if (g->dtype == CR_DT_F32) {
            float *x = (float *)cr_tensor_ptr(g), f = (float)scale;
            for (int64_t i = c->begin; i < c->end; i++) x[i] *= f;
        } else {
            double *x = (double *)cr_tensor_ptr(g);
            for (int64_t i = c->begin; i < c->end; i++) x[i] *= scale;
        }
    }
    return CR_OK;
}

cr_status cr_optim_clip_grad_norm(double *total, cr_tensor **params, int n, double max_norm,
                                  double norm_type, double grad_scale) {
    *total = 0.0;
    cr_status st = check_norm_type("clip_grad_norm", norm_type);
    if (st) return st;
    if (!(max_norm >= 0.0))
        return cr_fail(CR_ERR_ARG, "clip_grad_norm: max_norm must be >= 0, got %g", max_norm);
    grad_set gs;
    st = grad_set_init(&gs, "clip_grad_norm", params, n);
    if (!st) st = total_norm(total, &gs, norm_type, grad_scale);
    if (!st) {
        /* PyTorch: coef = max_norm / (total + 1e-6), clamped to 1 (NaN passes through) */
        double coef = max_norm / (*total + 1e-6);
        if (!(coef >= 1.0) && !(st = scale_all(&gs, n, coef))) grad_set_bump(&gs, n);
    }
    grad_set_free(&gs);
    return st;
}

cr_status cr_optim_scale_grads(cr_tensor **params, int n, double scale) {
    grad_set gs;
    cr_status st = grad_set_init(&gs, "scale_grads", params, n);
    if (!st && !(st = scale_all(&gs, n, scale))) grad_set_bump(&gs, n);
    grad_set_free(&gs);
    return st;
}

cr_status cr_optim_clip_grad_value(cr_tensor **params, int n, double clip) {
    if (!(clip >= 0.0))
        return cr_fail(CR_ERR_ARG, "clip_grad_value: the clip value must be >= 0, got %g", clip);
    grad_set gs;
    cr_status st = grad_set_init(&gs, "clip_grad_value", params, n);
    if (st) {
        grad_set_free(&gs);
        return st;
    }
    if (gs.device >= 0) {
        st = each_gpu_grad(&gs, n, clip_one, clip);
        grad_set_free(&gs);
        return st;
    }
    int64_t nc = gs.ch.n;
#pragma omp parallel for schedule(dynamic, 2) if (grad_set_par(&gs)) num_threads(cr_threads())
    for (int64_t k = 0; k < nc; k++) {
        const cr_optim_chunk *c = &gs.ch.chunks[k];
        cr_tensor *g = gs.grads[c->slot];
        if (g->dtype == CR_DT_F32) {
            float *x = (float *)cr_tensor_ptr(g), hi = (float)clip, lo = -(float)clip;
            for (int64_t i = c->begin; i < c->end; i++) x[i] = x[i] < lo ? lo : (x[i] > hi ? hi : x[i]);
        } else {
            double *x = (double *)cr_tensor_ptr(g), hi = clip, lo = -clip;
            for (int64_t i = c->begin; i < c->end; i++) x[i] = x[i] < lo ? lo : (x[i] > hi ? hi : x[i]);
        }
    }
    grad_set_bump(&gs, n);
    grad_set_free(&gs);
    return CR_OK;
}

cr_status cr_optim_zero_grads(cr_tensor **params, int n) {
    grad_set gs;
    cr_status st = grad_set_init(&gs, "zero_grads", params, n);
    if (st) {
        grad_set_free(&gs);
        return st;
    }
    if (gs.device >= 0) {
        st = each_gpu_grad(&gs, n, zero_one, 0.0);
        grad_set_free(&gs);
        return st;
    }
    int64_t nc = gs.ch.n;
#pragma omp parallel for schedule(dynamic, 2) if (grad_set_par(&gs)) num_threads(cr_threads())
    for (int64_t k = 0; k < nc; k++) {
        const cr_optim_chunk *c = &gs.ch.chunks[k];
        cr_tensor *g = gs.grads[c->slot];
        size_t es = cr_dtype_size(g->dtype);
        memset(cr_tensor_ptr(g) + c->begin * (int64_t)es, 0, (size_t)(c->end - c->begin) * es);
    }
    grad_set_bump(&gs, n);
    grad_set_free(&gs);
    return CR_OK;
}
