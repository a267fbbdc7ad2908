/* batch_norm.c (cuda) — batch norm forward/backward on the GPU: the call's tensors handed
 * to kernels/batch_norm.cu (ops/batch_norm.c has already cast halves to f32 and made x
 * row-major or channels-last). */
#include "cuda_impl.h"

static void geometry(const cr_tensor *x, int64_t *M, int64_t *S, int *cl) {
    *S = 1;
    for (int d = 2; d < x->ndim; d++) *S *= x->shape[d];
    *M = x->shape[0] * *S;
    *cl = cr_tensor_is_channels_last(x);
}

static const void *ptr_or_null(const cr_tensor *t) { return t ? cr_tensor_ptr(t) : NULL; }

static cr_status gpu_batch_norm(cr_call *c) {
    int device;
    cr_status st = cr_gpu_call_device(c, &device);
    if (st) return st;
    cr_tensor *x = c->in[0], *rm = c->in[3], *rv = c->in[4];
    crk_bn p;
    memset(&p, 0, sizeof p);
    geometry(x, &p.M, &p.S, &p.channels_last);
    p.C = x->shape[1];
    p.f64 = x->dtype == CR_DT_F64;
    p.relu = (int)c->i[4];
    p.x = cr_tensor_ptr(x);
    p.w = ptr_or_null(c->in[1]);
    p.b = ptr_or_null(c->in[2]);
    p.y = cr_tensor_ptr(c->out[0]);
    p.mean = cr_tensor_ptr(c->out[1]);
    p.invstd = cr_tensor_ptr(c->out[2]);
    p.running_mean = (void *)ptr_or_null(rm);
    p.running_var = (void *)ptr_or_null(rv);
    p.momentum = c->f[0];
    p.eps = c->f[1];
    p.use_batch = (int)c->i[3];
    p.update_running = c->i[0] && rm;
    size_t acc_bytes = sizeof(double) * 2 * (size_t)(p.C > 0 ? p.C : 1);
    void *acc = NULL;
    if ((st = cr_gpu_alloc(device, acc_bytes, &acc))) return st;
    p.acc = acc;
    st = cr_gpu_check(crk_batch_norm_forward(&p, cr_gpu_stream(device)), "batch_norm");
    cr_gpu_release(device, acc, acc_bytes);
    return st;
}

static cr_status gpu_batch_norm_backward(cr_call *c) {
    int device;
    cr_status st = cr_gpu_call_device(c, &device);
    if (st) return st;
    cr_tensor *x = c->in[1];
    crk_bn_backward p;
    memset(&p, 0, sizeof p);
    geometry(x, &p.M, &p.S, &p.channels_last);
    p.C = x->shape[1];
    p.f64 = x->dtype == CR_DT_F64;
    p.use_batch = (int)c->i[0];
    p.g = cr_tensor_ptr(c->in[0]);
    p.x = cr_tensor_ptr(x);
    p.w = ptr_or_null(c->in[2]);
    p.mean = cr_tensor_ptr(c->in[3]);
    p.invstd = cr_tensor_ptr(c->in[4]);
    p.y = c->nin > 5 ? ptr_or_null(c->in[5]) : NULL;
    p.gx = (void *)ptr_or_null(c->out[0]);
    p.gw = (void *)ptr_or_null(c->out[1]);
    p.gb = (void *)ptr_or_null(c->out[2]);
    size_t acc_bytes = sizeof(double) * 2 * (size_t)(p.C > 0 ? p.C : 1);
    void *acc = NULL;
    if ((st = cr_gpu_alloc(device, acc_bytes, &acc))) return st;
    p.acc = acc;
    st = cr_gpu_check(crk_batch_norm_backward(&p, cr_gpu_stream(device)), "batch_norm_backward");
    cr_gpu_release(device, acc, acc_bytes);
    return st;
}

void cr_gpu_register_batch_norm(void) {
    cr_kernel_table[CR_OP_BATCH_NORM][CR_DEV_CUDA] = gpu_batch_norm;
    cr_kernel_table[CR_OP_BATCH_NORM_BACKWARD][CR_DEV_CUDA] = gpu_batch_norm_backward;
}
