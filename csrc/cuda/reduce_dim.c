/* reduce_dim.c (cuda) — max/min along a dim (values and indices), amax/amin,
 * argmax/argmin, var, norm and logsumexp on the GPU: the cpu's reduction plan
 * (ops/reduce_impl.h) handed to kernels/reduce_dim.cu, which follows ops/reduce_minmax.c
 * and ops/reduce_stats.c. The entries (cr_op_*) have already checked the arguments; the
 * derivative rules compose GPU ops when the input is not on the cpu. */
#include "cuda_impl.h"
#include "kernels/reduce_dim.h"
#include "reduce_impl.h"

/* Runs one reduction of c->in[0] over the dims mask c->i[0] into `values` (in its own
 * dtype) and `indices` (i64 positions); either may be NULL. */
static cr_status reduce_dim(cr_call *c, crk_reduce_dim_op op, double param, cr_tensor *values,
                            cr_tensor *indices) {
    int device;
    cr_status st = cr_gpu_call_device(c, &device);
    if (st) return st;
    cr_tensor *in = c->in[0];
    cr_reduce_plan p;
    cr_reduce_plan_init(&p, in, (uint32_t)c->i[0]);
    /* an empty max/min was refused by the entry (check_nonempty) */
    crk_reduce_dim_call q;
    memset(&q, 0, sizeof q);
    q.r.nk = p.nk;
    q.r.nr = p.nr;
    for (int d = 0; d < p.nk; d++) q.r.kshape[d] = p.kshape[d], q.r.kstride[d] = p.kstride[d];
    for (int d = 0; d < p.nr; d++) q.r.rshape[d] = p.rshape[d], q.r.rstride[d] = p.rstride[d];
    q.r.K = p.K;
    q.r.R = p.R;
    q.r.in = cr_tensor_ptr(in);
    q.r.in_dtype = in->dtype;
    q.r.out = values ? cr_tensor_ptr(values) : NULL;
    q.r.out_dtype = values ? values->dtype : in->dtype;
    q.indices = indices ? (int64_t *)cr_tensor_ptr(indices) : NULL;
    q.op = op;
    q.param = param;
    size_t bytes = crk_reduce_dim_scratch(&q);
    void *scratch = NULL;
    if (bytes && (st = cr_gpu_alloc(device, bytes, &scratch))) return st;
    st = cr_gpu_check(crk_reduce_dim(&q, scratch, cr_gpu_stream(device)), cr_op_name(c->op));
    if (scratch) cr_gpu_release(device, scratch, bytes);
    return st;
}

/* max/min(dim): out[0] values, out[1] indices; amax/amin: out[0] values. */
cr_status cr_gpu_max_values(cr_call *c) {
    return reduce_dim(c, CRK_RD_MAX, 0, c->out[0], c->nout > 1 ? c->out[1] : NULL);
}
cr_status cr_gpu_min_values(cr_call *c) {
    return reduce_dim(c, CRK_RD_MIN, 0, c->out[0], c->nout > 1 ? c->out[1] : NULL);
}
cr_status cr_gpu_argmax(cr_call *c) { return reduce_dim(c, CRK_RD_MAX, 0, NULL, c->out[0]); }
cr_status cr_gpu_argmin(cr_call *c) { return reduce_dim(c, CRK_RD_MIN, 0, NULL, c->out[0]); }
cr_status cr_gpu_var(cr_call *c) { return reduce_dim(c, CRK_RD_VAR, c->f[0], c->out[0], NULL); }
cr_status cr_gpu_norm(cr_call *c) { return reduce_dim(c, CRK_RD_NORM, c->f[0], c->out[0], NULL); }
cr_status cr_gpu_logsumexp(cr_call *c) {
    return reduce_dim(c, CRK_RD_LOGSUMEXP, 0, c->out[0], NULL);
}

