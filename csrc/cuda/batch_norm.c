/* batch_norm.c (cuda) — batch norm forward/backward on the GPU: the call's tensors handed
 * to kernels/batch_norm.cu (ops/batch_norm.c has already made x row-major or
 * channels-last). x is f32, f64 or a half, read and written as such; the kernels read
 * the per-channel vectors as dense arrays of the params' dtype (f64 with f64 x, else
 * f32): weight, bias or running statistics of another dtype or with strides go through
 * dense copies (the running statistics are written back). The statistics are summed
 * with atomic adds, so their last bits may differ from run to run. */
#include "cuda_impl.h"
#include "elementwise_impl.h"

/* t as a dense [C] array of dtype dt: its own memory, or *copy (a new tensor). */
static cr_status dense(const cr_tensor *t, cr_dtype dt, cr_tensor **copy, void **ptr) {
    *copy = NULL;
    *ptr = NULL;
    if (!t) return CR_OK;
    if (t->dtype == dt && cr_tensor_is_contiguous(t)) {
        *ptr = cr_tensor_ptr(t);
        return CR_OK;
    }
    cr_status st = cr_tensor_alloc(copy, t->ndim, t->shape, dt, cr_tensor_dev(t));
    if (!st) st = cr_copy_into(*copy, (cr_tensor *)t);
    if (!st) *ptr = cr_tensor_ptr(*copy);
    return st;
}

static void geometry(const cr_tensor *x, int64_t *M, int64_t *S, int *cl) {
    *S = 1;
    for (int d = 2; d < x->ndim; d++) *S *= x->shape[d];
    *M = x->shape[0] * *S;
    *cl = cr_tensor_is_channels_last(x);
}

static const void *ptr_or_null(const cr_tensor *t) { return t ? cr_tensor_ptr(t) : NULL; }

/* The dtype of the params and of the arithmetic for an x of dtype dt. */
static cr_dtype param_dtype(cr_dtype dt) { return dt == CR_DT_F64 ? CR_DT_F64 : CR_DT_F32; }

static int half_kind(cr_dtype dt) {
    return dt == CR_DT_F16 ? CRK_BN_F16 : dt == CR_DT_BF16 ? CRK_BN_BF16 : 0;
}

cr_status cr_gpu_batch_norm(cr_call *c) {
    int device;
    cr_status st = cr_gpu_call_device(c, &device);
    if (st) return st;
    cr_tensor *x = c->in[0], *rm = c->in[3], *rv = c->in[4];
    cr_tensor *tmp[4] = {0};
    void *w = NULL, *b = NULL, *m = NULL, *v = NULL;
    const cr_dtype pdt = param_dtype(x->dtype);
    if ((st = dense(c->in[1], pdt, &tmp[0], &w)) || (st = dense(c->in[2], pdt, &tmp[1], &b)) ||
        (st = dense(rm, pdt, &tmp[2], &m)) || (st = dense(rv, pdt, &tmp[3], &v)))
        goto done;
    crk_bn p;
    memset(&p, 0, sizeof p);
    geometry(x, &p.M, &p.S, &p.channels_last);
    p.C = x->shape[1];
    p.f64 = x->dtype == CR_DT_F64;
    p.half = half_kind(x->dtype);
    p.relu = (int)c->i[4];
    p.x = cr_tensor_ptr(x);
    p.w = w;
    p.b = b;
    p.y = cr_tensor_ptr(c->out[0]);
    p.mean = cr_tensor_ptr(c->out[1]);
    p.invstd = cr_tensor_ptr(c->out[2]);
    p.running_mean = m;
    p.running_var = v;
    p.momentum = c->f[0];
    p.eps = c->f[1];
    p.use_batch = (int)c->i[3];
    p.update_running = c->i[0] && rm;
    size_t acc_bytes = sizeof(double) * 2 * (size_t)(p.C > 0 ? p.C : 1);
    void *acc = NULL;
    if ((st = cr_gpu_alloc(device, acc_bytes, &acc))) goto done;
    p.acc = acc;
    st = cr_gpu_check(crk_batch_norm_forward(&p, cr_gpu_stream(device)), "batch_norm");
    cr_gpu_release(device, acc, acc_bytes);
    /* running statistics updated in copies go back to the caller's tensors */
    if (!st && p.update_running && tmp[2]) st = cr_copy_into(rm, tmp[2]);
    if (!st && p.update_running && tmp[3]) st = cr_copy_into(rv, tmp[3]);
done:
    for (int k = 0; k < 4; k++) cr_tensor_free(tmp[k]);
    return st;
}

cr_status cr_gpu_batch_norm_backward(cr_call *c) {
    int device;
    cr_status st = cr_gpu_call_device(c, &device);
    if (st) return st;
    cr_tensor *x = c->in[1], *wcopy = NULL;
    void *w = NULL;
    if ((st = dense(c->in[2], param_dtype(x->dtype), &wcopy, &w))) return st;
    crk_bn_backward p;
    memset(&p, 0, sizeof p);
    geometry(x, &p.M, &p.S, &p.channels_last);
    p.C = x->shape[1];
    p.f64 = x->dtype == CR_DT_F64;
    p.half = half_kind(x->dtype);
    p.use_batch = (int)c->i[0];
    p.g = cr_tensor_ptr(c->in[0]);
    p.x = cr_tensor_ptr(x);
    p.w = w;
    p.mean = cr_tensor_ptr(c->in[3]);
    p.invstd = cr_tensor_ptr(c->in[4]);
    p.y = c->nin > 5 ? ptr_or_null(c->in[5]) : NULL;
    p.gx = (void *)ptr_or_null(c->out[0]);
    p.gw = (void *)ptr_or_null(c->out[1]);
    p.gb = (void *)ptr_or_null(c->out[2]);
    size_t acc_bytes = sizeof(double) * 2 * (size_t)(p.C > 0 ? p.C : 1);
    void *acc = NULL;
    if (!(st = cr_gpu_alloc(device, acc_bytes, &acc))) {
        p.acc = acc;
        st = cr_gpu_check(crk_batch_norm_backward(&p, cr_gpu_stream(device)), "batch_norm_backward");
        cr_gpu_release(device, acc, acc_bytes);
    }
    cr_tensor_free(wcopy);
    return st;
}

