/* reduce.c — the reduction plan, and sum and mean over any set of dims. Accumulation is
 * in f64 for float inputs, so an f32 sum of millions of elements stays accurate. */
#include <math.h>
#include <omp.h>

#include "reduce_impl.h"

void cr_reduce_plan_init(cr_reduce_plan *p, const cr_tensor *t, uint32_t dims) {
    memset(p, 0, sizeof *p);
    p->K = p->R = 1;
    for (int d = 0; d < t->ndim; d++) {
        bool red = dims == 0 || (dims & (1u << d));
        if (red) {
            p->rshape[p->nr] = t->shape[d];
            p->rstride[p->nr++] = t->stride[d];
            p->R *= t->shape[d];
        } else {
            p->kshape[p->nk] = t->shape[d];
            p->kstride[p->nk++] = t->stride[d];
            p->K *= t->shape[d];
        }
    }
}

int64_t cr_reduce_kept_offset(const cr_reduce_plan *p, int64_t k) {
    int64_t off = 0;
    for (int d = p->nk - 1; d >= 0; d--) {
        off += (k % p->kshape[d]) * p->kstride[d];
        k /= p->kshape[d];
    }
    return off;
}

cr_status cr_reduce_out_shape(const char *op, const cr_tensor *t, uint32_t dims, bool keepdim,
                              int *ndim, int64_t *shape) {
    if (t->ndim < 32 && (dims >> t->ndim) != 0)
        return cr_fail(CR_ERR_ARG, "%s: dims mask 0x%x names a dim past the tensor's %d dims",
                       op, dims, t->ndim);
    int n = 0;
    for (int d = 0; d < t->ndim; d++) {
        bool red = dims == 0 || (dims & (1u << d));
        if (!red) shape[n++] = t->shape[d];
        else if (keepdim) shape[n++] = 1;
    }
    *ndim = n;
    return CR_OK;
}

double cr_reduce_sum_f64(const cr_reduce_plan *p, const char *base, cr_dtype dt) {
    int64_t coord[CR_MAX_DIMS] = {0};
    int64_t es = (int64_t)cr_dtype_size(dt), off = 0;
    int last = p->nr - 1;
    double acc = 0;
    if (p->R == 0) return 0;
    if (last < 0) return cr_load_f64(base, dt);
    int64_t inner = p->rshape[last], istride = p->rstride[last];
    for (int64_t done = 0; done < p->R; done += inner) {
        const char *q = base + off * es;
        if (dt == CR_DT_F32) {
            const float *f = (const float *)q;
            for (int64_t i = 0; i < inner; i++) acc += f[i * istride];
        } else if (dt == CR_DT_F64) {
            const double *f = (const double *)q;
            for (int64_t i = 0; i < inner; i++) acc += f[i * istride];
        } else {
            for (int64_t i = 0; i < inner; i++) acc += cr_load_f64(q + i * istride * es, dt);
        }
        for (int d = last - 1; d >= 0; d--) { /* odometer over the outer reduced dims */
            coord[d]++;
            off += p->rstride[d];
            if (coord[d] < p->rshape[d]) break;
            off -= coord[d] * p->rstride[d];
            coord[d] = 0;
        }
    }
    return acc;
}

/* out[k] = scale * sum; integer sums stay exact in i64. */
static void sum_kernel(cr_call *c, double scale) {
    cr_tensor *x = c->in[0], *o = c->out[0];
    cr_reduce_plan p;
    cr_reduce_plan_init(&p, x, (uint32_t)c->i[0]);
    const char *base = cr_tensor_ptr(x);
    int64_t es = (int64_t)cr_dtype_size(x->dtype);
    char *out = cr_tensor_ptr(o);
    int64_t oes = (int64_t)cr_dtype_size(o->dtype);
    bool par = p.K * p.R >= CR_PAR_GRAIN && p.K >= cr_threads();
#pragma omp parallel for if (par) schedule(static)
    for (int64_t k = 0; k < p.K; k++) {
        const char *b = base + cr_reduce_kept_offset(&p, k) * es;
        double v = cr_reduce_sum_f64(&p, b, x->dtype) * scale;
        cr_store_f64(out + k * oes, o->dtype, v);
    }
    if (!par && p.K < cr_threads() && p.K * p.R >= CR_PAR_GRAIN && p.nr > 0) {
        /* few outputs, much work: split the outermost reduced dim across threads */
        for (int64_t k = 0; k < p.K; k++) {
            const char *b = base + cr_reduce_kept_offset(&p, k) * es;
            cr_reduce_plan sub = p;
            int64_t n0 = p.rshape[0], nt = cr_threads();
            double parts[256] = {0};
            if (nt > 256) nt = 256;
#pragma omp parallel for num_threads((int)nt) schedule(static)
            for (int64_t t = 0; t < nt; t++) {
                int64_t lo = n0 * t / nt, hi = n0 * (t + 1) / nt;
                cr_reduce_plan mine = sub;
                mine.rshape[0] = hi - lo;
                mine.R = p.R / n0 * (hi - lo);
                parts[t] = cr_reduce_sum_f64(&mine, b + lo * p.rstride[0] * es, x->dtype);
            }
            double v = 0;
            for (int64_t t = 0; t < nt; t++) v += parts[t];
            cr_store_f64(out + k * oes, o->dtype, v * scale);
        }
    }
}

static cr_status reduce_op(cr_tensor **out, cr_op op, cr_tensor *t, uint32_t dims,
                           bool keepdim, cr_dtype result) {
    *out = NULL;
    const char *name = cr_op_name(op);
    CR_CHECK_TENSOR(name, t, "self");
    int ndim;
    int64_t shape[CR_MAX_DIMS];
    cr_status st = cr_reduce_out_shape(name, t, dims, keepdim, &ndim, shape);
    if (st) return st;
    cr_call c;
    if ((st = cr_call_init(&c, op, 1, 1))) return st;
    c.in[0] = t;
    c.i[0] = dims;
    c.i[1] = keepdim;
    if ((st = cr_tensor_alloc(&c.out[0], ndim, shape, result, t->storage->device))) return st;
    if (!(st = cr_dispatch(&c))) st = cr_autograd_record(&c, 0, 0);
    if (st) {
        cr_call_drop_outs(&c);
        return st;
    }
    *out = c.out[0];
    return CR_OK;
}

/* Grad of a reduction to `ndim/shape`: reshape g to keepdim form, then expand. */
cr_status cr_reduce_grad_expand(cr_tensor **out, cr_tensor *g, const cr_input_meta *in,
                                uint32_t dims) {
    int64_t kshape[CR_MAX_DIMS];
    for (int d = 0; d < in->ndim; d++)
        kshape[d] = (dims == 0 || (dims & (1u << d))) ? 1 : in->shape[d];
    cr_tensor *r;
    cr_status st = cr_op_reshape(&r, g, in->ndim, kshape);
    if (st) return st;
    st = cr_op_expand(out, r, in->ndim, in->shape);
    cr_tensor_free(r);
    return st;
}

/* ---- sum ---- */
cr_status cr_cpu_sum(cr_call *c) {
    sum_kernel(c, 1.0);
    return CR_OK;
}
cr_status cr_op_sum(cr_tensor **out, cr_tensor *t, uint32_t dims, bool keepdim) {
    CR_CHECK_TENSOR("sum", t, "self");
    cr_dtype r = cr_dtype_is_float(t->dtype) ? t->dtype : CR_DT_I64;
    return reduce_op(out, CR_OP_SUM, t, dims, keepdim, r);
}
cr_status cr_grad_sum(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    return cr_reduce_grad_expand(&gin[0], gout[0], &n->in_meta[0], (uint32_t)n->call.i[0]);
}

/* ---- mean ---- */
cr_status cr_cpu_mean(cr_call *c) {
    cr_reduce_plan p;
    cr_reduce_plan_init(&p, c->in[0], (uint32_t)c->i[0]);
    sum_kernel(c, p.R ? 1.0 / (double)p.R : NAN);
    return CR_OK;
}
cr_status cr_op_mean(cr_tensor **out, cr_tensor *t, uint32_t dims, bool keepdim) {
    CR_CHECK_TENSOR("mean", t, "self");
    cr_status st = cr_check_float("mean", t, "self");
    if (st) return st;
    return reduce_op(out, CR_OP_MEAN, t, dims, keepdim, t->dtype);
}
cr_status cr_grad_mean(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    const cr_input_meta *m = &n->in_meta[0];
    uint32_t dims = (uint32_t)n->call.i[0];
    int64_t R = 1;
    for (int d = 0; d < m->ndim; d++)
        if (dims == 0 || (dims & (1u << d))) R *= m->shape[d];
    cr_tensor *scale, *g;
    cr_status st = cr_tensor_scalar(&scale, R ? 1.0 / (double)R : 0.0, gout[0]->dtype);
    if (st) return st;
    st = cr_op_mul(&g, gout[0], scale);
    cr_tensor_free(scale);
    if (st) return st;
    st = cr_reduce_grad_expand(&gin[0], g, m, dims);
    cr_tensor_free(g);
    return st;
}
