/* reduce.c (cuda) — sum and mean on the GPU: the CPU's reduction plan (ops/reduce.c splits
 * the input into kept and reduced dims) handed to kernels/reduce.cu. */
#include "cuda_impl.h"
#include "reduce_impl.h"

static cr_status gpu_sum_scaled(cr_call *c, bool mean) {
    int device;
    cr_status st = cr_gpu_call_device(c, &device);
    if (st) return st;
    cr_tensor *in = c->in[0], *out = c->out[0];
    cr_reduce_plan p;
    cr_reduce_plan_init(&p, in, (uint32_t)c->i[0]);
    crk_reduce r;
    memset(&r, 0, sizeof r);
    r.nk = p.nk;
    r.nr = p.nr;
    for (int d = 0; d < p.nk; d++) r.kshape[d] = p.kshape[d], r.kstride[d] = p.kstride[d];
    for (int d = 0; d < p.nr; d++) r.rshape[d] = p.rshape[d], r.rstride[d] = p.rstride[d];
    r.K = p.K;
    r.R = p.R;
    r.in = cr_tensor_ptr(in);
    r.in_dtype = in->dtype;
    r.out = cr_tensor_ptr(out);
    r.out_dtype = out->dtype;
    double scale = mean ? (p.R ? 1.0 / (double)p.R : NAN) : 1.0;
    return cr_gpu_check(crk_sum(&r, scale, cr_gpu_stream(device)), cr_op_name(c->op));
}

cr_status cr_gpu_sum(cr_call *c) { return gpu_sum_scaled(c, false); }
cr_status cr_gpu_mean(cr_call *c) { return gpu_sum_scaled(c, true); }

