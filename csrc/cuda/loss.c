/* loss.c (cuda) — nll_loss and cross_entropy, forward and backward, on the GPU
 * (kernels/loss.cu). ops/loss.c has validated the call, put the target on the input's
 * device and cast halves to f32; here the input and probability targets become
 * contiguous in the input's dtype and class targets contiguous i64. The forward
 * synchronises once: it brings back the first class target out of range, reported with
 * the cpu's message, and the count of non-ignored positions, which the backward op gets
 * from the host as the mean's divisor (call.f[1]). */
#include "cuda_impl.h"
#include "kernels/loss.h"
#include "loss_impl.h"
#include "reduce_impl.h"


/* The [N, C, inner] geometry of a tensor of the loss input's shape, and the target as a
 * contiguous copy *tc: probabilities in dtype dt, or class indices in i64. */
static cr_status prepare(crk_loss *p, const cr_tensor *shaped, cr_tensor *target, bool soft,
                         cr_dtype dt, cr_tensor **tc) {
    cr_loss_shape s = cr_loss_shape_of(shaped->ndim, shaped->shape);
    memset(p, 0, sizeof *p);
    p->N = s.N;
    p->C = s.C;
    p->inner = s.inner;
    p->f64 = dt == CR_DT_F64;
    cr_status st = cr_reduce_contig_as(tc, target, soft ? dt : CR_DT_I64);
    if (st) return st;
    if (soft) p->p = cr_tensor_ptr(*tc);
    else p->t = (const int64_t *)cr_tensor_ptr(*tc);
    return CR_OK;
}

/* in: x, target; out: the losses or their mean/sum; i[0] reduction, i[1] ignore_index,
 * i[2] soft (cross entropy); f[0] label smoothing; writes f[1], the count. */
cr_status cr_gpu_loss_forward(cr_call *c) {
    int device;
    cr_status st = cr_gpu_call_device(c, &device);
    if (st) return st;
    const char *op = cr_op_name(c->op);
    const bool ce = c->op == CR_OP_CROSS_ENTROPY, soft = ce && c->i[2];
    cr_tensor *x = c->in[0], *xc = NULL, *tc = NULL;
    cudaStream_t stream = cr_gpu_stream(device);
    crk_loss p;
    crk_loss_result res;
    void *scratch = NULL;
    size_t bytes = 0;
    if ((st = prepare(&p, x, c->in[1], soft, x->dtype, &tc)) ||
        (st = cr_reduce_contig_as(&xc, x, x->dtype)))
        goto done;
    p.x = cr_tensor_ptr(xc);
    p.cross_entropy = ce;
    p.reduction = (int)c->i[0];
    p.ignore = c->i[1];
    p.eps = ce ? c->f[0] : 0;
    p.out = cr_tensor_ptr(c->out[0]);
    bytes = crk_loss_scratch_bytes(&p);
    if ((st = cr_gpu_alloc(device, bytes, &scratch)) ||
        (st = cr_gpu_check(crk_loss_forward(&p, scratch, stream), op)) ||
        (st = cr_gpu_check(cudaMemcpyAsync(&res, scratch, sizeof res, cudaMemcpyDeviceToHost,
                                           stream), op)) ||
        (st = cr_gpu_check(cudaStreamSynchronize(stream), op)))
        goto done;
    c->f[1] = res.count;
    if (res.bad_position != UINT64_MAX) { /* fetch the value for the message */
        int64_t value = 0, pos = (int64_t)res.bad_position;
        if (!(st = cr_gpu_check(cudaMemcpyAsync(&value, p.t + pos, sizeof value,
                                                cudaMemcpyDeviceToHost, stream), op)) &&
            !(st = cr_gpu_check(cudaStreamSynchronize(stream), op)))
            st = cr_loss_target_error(op, value, pos, p.C, p.ignore);
    }
done:
    if (scratch) cr_gpu_release(device, scratch, bytes);
    cr_tensor_free(xc);
    cr_tensor_free(tc);
    return st;
}

/* nll: in target, g; out dx. cross entropy: in x, target, g; out dx?, dp?. i[0]
 * reduction, i[1] ignore_index, i[2] soft; f[0] label smoothing, f[1] the count. */
cr_status cr_gpu_loss_backward(cr_call *c) {
    int device;
    cr_status st = cr_gpu_call_device(c, &device);
    if (st) return st;
    const bool ce = c->op == CR_OP_CROSS_ENTROPY_BACKWARD, soft = ce && c->i[2];
    cr_tensor *target = c->in[ce ? 1 : 0], *g = c->in[ce ? 2 : 1];
    cr_tensor *dx = c->out[0], *dp = ce ? c->out[1] : NULL, *shaped = dx ? dx : dp;
    cr_tensor *xc = NULL, *tc = NULL, *gc = NULL;
    if (!shaped) return CR_OK;
    crk_loss p;
    if ((st = prepare(&p, shaped, target, soft, shaped->dtype, &tc))) goto done;
    if (ce) {
        if ((st = cr_reduce_contig_as(&xc, c->in[0], shaped->dtype))) goto done;
        p.x = cr_tensor_ptr(xc);
    }
    if (cr_tensor_on_cpu(g)) { /* a 0-dim cpu number next to GPU tensors */
        p.g_value = cr_tensor_get_flat(g, 0);
    } else {
        if ((st = cr_reduce_contig_as(&gc, g, CR_DT_F64))) goto done;
        p.g = (const double *)cr_tensor_ptr(gc);
    }
    p.cross_entropy = ce;
    p.reduction = (int)c->i[0];
    p.ignore = c->i[1];
    p.eps = ce ? c->f[0] : 0;
    p.count = c->f[1];
    p.dx = dx ? cr_tensor_ptr(dx) : NULL;
    p.dp = dp ? cr_tensor_ptr(dp) : NULL;
    st = cr_gpu_check(crk_loss_backward(&p, cr_gpu_stream(device)), cr_op_name(c->op));
done:
    cr_tensor_free(xc);
    cr_tensor_free(tc);
    cr_tensor_free(gc);
    return st;
}

