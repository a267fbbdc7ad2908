/* ema.c — the fused momentum update of a key/target encoder (MoCo, BYOL):
 * target = m * target + (1 - m) * source over every pair in one call, and the exact copy
 * of buffers. Elements are cut into the optimizers' fixed chunks (csrc/optim), which
 * OpenMP shares out, so small and large tensors balance. Each element's update depends on
 * that element alone: results do not depend on the thread count. */
#include <math.h>

#include "../optim/optim_impl.h"

static cr_status check_pair(const char *op, cr_tensor *t, cr_tensor *s, int i, bool float_only) {
    if (!t) return cr_fail(CR_ERR_ARG, "%s: the target of pair %d is nil", op, i);
    if (!s) return cr_fail(CR_ERR_ARG, "%s: the source of pair %d is nil", op, i);
    char a[160], b[160];
    if (!cr_same_shape(t, s) || t->dtype != s->dtype)
        return cr_fail(CR_ERR_ARG, "%s: pair %d: the target is %s %s but the source is %s %s; "
                       "the two models must have the same architecture", op, i,
                       cr_dtype_name(t->dtype), cr_shape_str(t, a, sizeof a),
                       cr_dtype_name(s->dtype), cr_shape_str(s, b, sizeof b));
    if (!cr_same_device(t, s)) {
        char da[32], db[32];
        return cr_fail(CR_ERR_DEVICE, "%s: pair %d: the target is on %s but the source on %s; "
                       "keep both models on one device", op, i,
                       cr_device_str(cr_tensor_dev(t), da, sizeof da),
                       cr_device_str(cr_tensor_dev(s), db, sizeof db));
    }
    if (float_only && t->dtype != CR_DT_F32 && t->dtype != CR_DT_F64)
        return cr_fail(CR_ERR_ARG, "%s: pair %d is %s; the momentum update takes f32 or f64 "
                       "tensors (copy integer buffers with copy_tensors)", op, i,
                       cr_dtype_name(t->dtype));
    if (!cr_tensor_is_contiguous(t) || !cr_tensor_is_contiguous(s))
        return cr_fail(CR_ERR_ARG, "%s: pair %d is not contiguous; the fused update needs "
                       "contiguous tensors (:contiguous())", op, i);
    if (t->storage == s->storage)
        return cr_fail(CR_ERR_ARG, "%s: pair %d: the target shares storage with the source; "
                       "the target encoder needs its own copy of the weights (clone them)", op, i);
    return CR_OK;
}

/* On a GPU, pair by pair through the elementwise ops: target = m*target, += (1-m)*source
 * (the rounding of m*target comes first here; the cpu fuses both products). */
static cr_status run_gpu(cr_tensor **target, cr_tensor **source, int n, double m, bool copy) {
    cr_tensor *ms = NULL;
    bool was = cr_grad_set_enabled(false);
    cr_status st = CR_OK;
    for (int i = 0; i < n && !st; i++) {
        cr_tensor *t = target[i], *s = source[i];
        if (copy) {
            st = cr_op_copy_(t, s);
            continue;
        }
        if (!(st = cr_tensor_scalar(&ms, m, t->dtype)) && !(st = cr_op_mul_(t, ms)))
            st = cr_op_add_(t, s, 1.0 - m);
        cr_tensor_free(ms);
        ms = NULL;
    }
    cr_grad_set_enabled(was);
    return st;
}

static cr_status run(const char *op, cr_tensor **target, cr_tensor **source, int n, double m,
                     bool copy) {
    if (n < 0) return cr_fail(CR_ERR_ARG, "%s: negative pair count %d", op, n);
    if (n > 0 && (!target || !source)) return cr_fail(CR_ERR_ARG, "%s: the tensor lists are NULL", op);
    if (!copy && !(m >= 0 && m <= 1))
        return cr_fail(CR_ERR_ARG, "%s: momentum must be in [0, 1] (MoCo: 0.999), got %g", op, m);
    cr_status st;
    for (int i = 0; i < n; i++)
        if ((st = check_pair(op, target[i], source[i], i, !copy))) return st;
    if (n > 0 && !cr_tensor_on_cpu(target[0])) return run_gpu(target, source, n, m, copy);
    cr_optim_chunks ch;
    if ((st = cr_optim_chunks_build(&ch, target, n))) return st;
    const double w = 1.0 - m;
    const float mf = (float)m, wf = (float)w;
#pragma omp parallel for schedule(dynamic, 4) if (ch.total >= CR_PAR_GRAIN)
    for (int64_t c = 0; c < ch.n; c++) {
        const cr_optim_chunk *k = &ch.chunks[c];
        cr_tensor *t = target[k->slot], *s = source[k->slot];
        size_t es = cr_dtype_size(t->dtype);
        char *tp = cr_tensor_ptr(t);
        const char *sp = cr_tensor_ptr(s);
        if (copy) {
            memcpy(tp + (size_t)k->begin * es, sp + (size_t)k->begin * es,
                   (size_t)(k->end - k->begin) * es);
        } else if (t->dtype == CR_DT_F32) {
            float *x = (float *)tp;
            const float *y = (const float *)sp;
#pragma omp simd
            for (int64_t i = k->begin; i < k->end; i++) x[i] = mf * x[i] + wf * y[i];
        } else {
            double *x = (double *)tp;
            const double *y = (const double *)sp;
#pragma omp simd
            for (int64_t i = k->begin; i < k->end; i++) x[i] = m * x[i] + w * y[i];
        }
    }
    cr_optim_chunks_free(&ch);
    for (int i = 0; i < n; i++) cr_tensor_bump_version(target[i]);
    return CR_OK;
}

cr_status cr_ssl_ema_update(cr_tensor **target, cr_tensor **source, int n, double m) {
    return run("ema_update", target, source, n, m, false);
}

cr_status cr_ssl_copy_tensors(cr_tensor **target, cr_tensor **source, int n) {
    return run("copy_tensors", target, source, n, 0.0, true);
}
