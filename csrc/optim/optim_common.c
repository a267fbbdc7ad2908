/* optim_common.c — checks on the slots every fused update receives, the chunk list
 * that OpenMP shares out (or the CUDA backend runs), and the f64 power sums behind every
 * norm. */
#include <math.h>

#include "cuda_backend.h"
#include "optim_impl.h"

static cr_status check_float(const char *opname, const cr_tensor *t, int i, const char *what) {
    if (t->dtype != CR_DT_F32 && t->dtype != CR_DT_F64)
        return cr_fail(CR_ERR_ARG, "%s: %s of parameter %d is %s; the optimizers update f32 "
                       "or f64 tensors (convert the model with :to('f32'))", opname, what, i,
                       cr_dtype_name(t->dtype));
    if (!cr_tensor_is_contiguous(t))
        return cr_fail(CR_ERR_ARG, "%s: %s of parameter %d is not contiguous; the fused update "
                       "writes it in place, so give it a contiguous tensor (p:contiguous())",
                       opname, what, i);
    return CR_OK;
}

static cr_status check_place(const char *opname, const cr_tensor *t, const cr_tensor *p, int i,
                             const char *what) {
    if (cr_same_device(t, p)) return CR_OK;
    char a[32], b[32];
    return cr_fail(CR_ERR_DEVICE, "%s: %s of parameter %d is on %s but the parameter is on %s; "
                   "move the optimizer state with the model", opname, what, i,
                   cr_device_str(cr_tensor_dev(t), a, sizeof a),
                   cr_device_str(cr_tensor_dev(p), b, sizeof b));
}

static cr_status check_like(const char *opname, const cr_tensor *t, const cr_tensor *p, int i,
                            const char *what) {
    cr_status st = check_place(opname, t, p, i, what);
    if (st) return st;
    if (!cr_same_shape(t, p) || t->dtype != p->dtype) {
        char a[160], b[160];
        return cr_fail(CR_ERR_ARG, "%s: %s of parameter %d is %s %s but the parameter is %s %s; "
                       "the optimizer state does not belong to this model", opname, what, i,
                       cr_dtype_name(t->dtype), cr_shape_str(t, a, sizeof a),
                       cr_dtype_name(p->dtype), cr_shape_str(p, b, sizeof b));
    }
    return check_float(opname, t, i, what);
}

static cr_status check_grad(const char *opname, const cr_tensor *g, const cr_tensor *p, int i) {
    cr_status st = check_place(opname, g, p, i, "the grad");
    if (st) return st;
    if (!cr_same_shape(g, p) || g->dtype != p->dtype) {
        char a[160], b[160];
        return cr_fail(CR_ERR_ARG, "%s: the grad of parameter %d is %s %s but the parameter is "
                       "%s %s", opname, i, cr_dtype_name(g->dtype), cr_shape_str(g, a, sizeof a),
                       cr_dtype_name(p->dtype), cr_shape_str(p, b, sizeof b));
    }
    if (!cr_tensor_is_contiguous(g))
        return cr_fail(CR_ERR_ARG, "%s: the grad of parameter %d is not contiguous; set "
                       "p.grad = p.grad:contiguous()", opname, i);
    if (g->storage == p->storage)
        return cr_fail(CR_ERR_ARG, "%s: the grad of parameter %d shares storage with the "
                       "parameter itself; give it its own tensor", opname, i);
    return CR_OK;
}

cr_status cr_optim_check_slots(const char *opname, cr_optim_slot *slots, int n,
                               cr_tensor **grads, bool needs_buf1, bool needs_buf2) {
    if (n < 0) return cr_fail(CR_ERR_ARG, "%s: negative parameter count %d", opname, n);
    if (n > 0 && !slots) return cr_fail(CR_ERR_ARG, "%s: slots is NULL", opname);
    for (int i = 0; i < n; i++) {
        cr_optim_slot *s = &slots[i];
        s->stepped = 0;
        s->trust_ratio = 1.0;
        if (!s->param) return cr_fail(CR_ERR_ARG, "%s: parameter %d is nil", opname, i);
        cr_status st = check_float(opname, s->param, i, "the tensor");
        if (st) return st;
        if (s->param->grad_fn)
            return cr_fail(CR_ERR_ARG, "%s: parameter %d is not a leaf (it was computed by %s); "
                           "optimize the leaf tensors of the model", opname, i,
                           cr_tensor_grad_fn_name(s->param));
        cr_tensor *g = s->grad ? s->grad : s->param->grad;
        grads[i] = g;
        if (!g) continue;
        if ((st = check_grad(opname, g, s->param, i))) return st;
        if (needs_buf1 && s->buf1 && (st = check_like(opname, s->buf1, s->param, i, "state buffer 1")))
            return st;
        if (needs_buf2 && s->buf2 && (st = check_like(opname, s->buf2, s->param, i, "state buffer 2")))
            return st;
        if (!isfinite(s->lr))
            return cr_fail(CR_ERR_ARG, "%s: parameter %d has a non-finite lr (%g)", opname, i, s->lr);
    }
    return CR_OK;
}

cr_status cr_optim_check_grads(const char *opname, cr_tensor **params, int n,
                               cr_tensor **grads) {
    if (n < 0) return cr_fail(CR_ERR_ARG, "%s: negative parameter count %d", opname, n);
    if (n > 0 && !params) return cr_fail(CR_ERR_ARG, "%s: params is NULL", opname);
    for (int i = 0; i < n; i++) {
        cr_tensor *p = params[i];
        if (!p) return cr_fail(CR_ERR_ARG, "%s: parameter %d is nil", opname, i);
        grads[i] = p->grad;
        if (!p->grad) continue;
        cr_status st = check_float(opname, p->grad, i, "the grad");
        if (st) return st;
        if ((st = check_grad(opname, p->grad, p, i))) return st;
    }
    return CR_OK;
}

cr_status cr_optim_chunks_build(cr_optim_chunks *out, cr_tensor **tensors, int n) {
    out->chunks = NULL;
    out->n = 0;
    out->total = 0;
    int64_t count = 0;
    for (int i = 0; i < n; i++)
        if (tensors[i]) count += (tensors[i]->numel + CR_OPTIM_CHUNK - 1) / CR_OPTIM_CHUNK;
    if (count == 0) return CR_OK;
    out->chunks = malloc(sizeof(cr_optim_chunk) * (size_t)count);
    if (!out->chunks)
        return cr_fail(CR_ERR_OOM, "optimizer: out of memory for %lld chunks", (long long)count);
    for (int i = 0; i < n; i++) {
        if (!tensors[i]) continue;
        int64_t numel = tensors[i]->numel;
        for (int64_t b = 0; b < numel; b += CR_OPTIM_CHUNK) {
            cr_optim_chunk *c = &out->chunks[out->n++];
            c->slot = i;
            c->begin = b;
            c->end = b + CR_OPTIM_CHUNK < numel ? b + CR_OPTIM_CHUNK : numel;
        }
        out->total += numel;
    }
    return CR_OK;
}

void cr_optim_chunks_free(cr_optim_chunks *c) {
    free(c->chunks);
    c->chunks = NULL;
    c->n = 0;
}

cr_status cr_optim_buffer_like(cr_tensor **out, const cr_tensor *t, bool zero) {
    cr_status st = cr_tensor_alloc(out, t->ndim, t->shape, t->dtype, cr_tensor_dev(t));
    if (st || !zero) return st;
    if (cr_tensor_on_cpu(t)) {
        memset(cr_tensor_ptr(*out), 0, (size_t)t->numel * cr_dtype_size(t->dtype));
    } else if ((st = cr_op_fill_(*out, 0.0))) {
        cr_tensor_free(*out);
        *out = NULL;
    }
    return st;
}

cr_status cr_optim_device(const char *opname, cr_tensor **tensors, int n, int *device) {
    const cr_tensor *first = NULL;
    *device = -1;
    for (int i = 0; i < n; i++) {
        const cr_tensor *t = tensors[i];
        if (!t) continue;
        if (!first) {
            first = t;
            *device = cr_tensor_on_cpu(t) ? -1 : t->storage->device_index;
            continue;
        }
        if (!cr_same_device(t, first)) {
            char a[32], b[32];
            return cr_fail(CR_ERR_DEVICE, "%s: parameter %d is on %s but an earlier one is on %s; "
                           "one optimizer step updates parameters on one device", opname, i,
                           cr_device_str(cr_tensor_dev(t), a, sizeof a),
                           cr_device_str(cr_tensor_dev(first), b, sizeof b));
        }
    }
    return CR_OK;
}

cr_status cr_optim_pow_sums(const cr_optim_chunks *ch, cr_tensor **tensors, double p, int device,
                            double *out) {
    int64_t nc = ch->n;
    if (device >= 0) {
        const cr_cuda_backend *be = cr_cuda_backend_get();
        if (!be) return CR_ERR_DEVICE;
        cr_gpu_norm_chunk *list = malloc(sizeof *list * (size_t)(nc > 0 ? nc : 1));
        if (!list) return cr_fail(CR_ERR_OOM, "norm: out of memory for %lld chunks", (long long)nc);
        for (int64_t k = 0; k < nc; k++) {
            const cr_optim_chunk *c = &ch->chunks[k];
            const cr_tensor *t = tensors[c->slot];
            list[k] = (cr_gpu_norm_chunk){cr_tensor_ptr(t) + c->begin * (int64_t)cr_dtype_size(t->dtype),
                                          c->end - c->begin, t->dtype == CR_DT_F64};
        }
        cr_status st = be->pow_sums(device, list, nc, p, out);
        free(list);
        return st;
    }
#pragma omp parallel for schedule(dynamic, 2) if (nc > 1 && ch->total >= CR_PAR_GRAIN) \
    num_threads(cr_threads())
    for (int64_t k = 0; k < nc; k++) {
        const cr_optim_chunk *c = &ch->chunks[k];
        out[k] = cr_optim_chunk_pow_sum(tensors[c->slot], c->begin, c->end, p);
    }
    return CR_OK;
}

double cr_optim_chunk_pow_sum(const cr_tensor *t, int64_t begin, int64_t end, double p) {
    double s = 0.0;
    if (t->dtype == CR_DT_F32) {
        const float *x = (const float *)cr_tensor_ptr(t);
        if (p == 2.0) {
#pragma omp simd reduction(+ : s)
            for (int64_t i = begin; i < end; i++) s += (double)x[i] * (double)x[i];
        } else if (p == 1.0) {
#pragma omp simd reduction(+ : s)
            for (int64_t i = begin; i < end; i++) s += fabs((double)x[i]);
        } else if (isinf(p)) {
            for (int64_t i = begin; i < end; i++) {
                double a = fabs((double)x[i]);
                if (a > s || a != a) s = a; /* NaN sticks, as in torch.norm(inf) */
            }
        } else {
            for (int64_t i = begin; i < end; i++) s += pow(fabs((double)x[i]), p);
        }
    } else {
        const double *x = (const double *)cr_tensor_ptr(t);
        if (p == 2.0) {
#pragma omp simd reduction(+ : s)
            for (int64_t i = begin; i < end; i++) s += x[i] * x[i];
        } else if (p == 1.0) {
#pragma omp simd reduction(+ : s)
            for (int64_t i = begin; i < end; i++) s += fabs(x[i]);
        } else if (isinf(p)) {
            for (int64_t i = begin; i < end; i++) {
                double a = fabs(x[i]);
                if (a > s || a != a) s = a;
            }
        } else {
            for (int64_t i = begin; i < end; i++) s += pow(fabs(x[i]), p);
        }
    }
    return s;
}
