/* attention.c (cuda) — fused scaled dot-product attention forward and backward on the GPU
 * (kernels/attention.cu). ops/attention.c has made q, k, v contiguous f32 or f64 of one
 * dtype (and the backward's grad contiguous) and put the geometry, the mask's kind and
 * strides and the dropout reservation in the call; they go to the kernels as they are. */
#include "cuda_impl.h"
#include "kernels/attention.h"

static void *ptr_or_null(const cr_tensor *t) { return t ? cr_tensor_ptr(t) : NULL; }

/* The call's geometry (ops/attention.c: i[0..13], f[0..1]) and its mask. */
static crk_attention params(const cr_call *c, const cr_tensor *mask) {
    crk_attention p;
    memset(&p, 0, sizeof p);
    p.B = c->i[0], p.H = c->i[1], p.Tq = c->i[2], p.Tk = c->i[3], p.d = c->i[4], p.dv = c->i[5];
    p.causal = c->i[6] != 0;
    p.mask_kind = mask ? (int)c->i[7] : 0;
    p.mask = ptr_or_null(mask);
    for (int k = 0; k < 4; k++) p.mask_strides[k] = c->i[8 + k];
    p.seed = (uint64_t)c->i[12];
    p.counter = (uint64_t)c->i[13];
    p.scale = c->f[0];
    p.p = c->f[1];
    p.f64 = c->in[0]->dtype == CR_DT_F64;
    p.q = cr_tensor_ptr(c->in[0]);
    p.k = cr_tensor_ptr(c->in[1]);
    p.v = cr_tensor_ptr(c->in[2]);
    return p;
}

static cr_status check_fits(const crk_attention *p) {
    if (crk_attention_fits(p)) return CR_OK;
    return cr_fail(CR_ERR_UNSUPPORTED, "attention: head sizes d = %lld and dv = %lld are too large for the GPU "
                   "kernel's shared-memory tiles; split the heads further", (long long)p->d, (long long)p->dv);
}

/* in: q, k, v, mask?; out: o, lse. */
cr_status cr_gpu_attention(cr_call *c) {
    int device;
    cr_status st = cr_gpu_call_device(c, &device);
    if (st) return st;
    crk_attention p = params(c, c->in[3]);
    p.o = cr_tensor_ptr(c->out[0]);
    p.lse = cr_tensor_ptr(c->out[1]);
    if ((st = check_fits(&p))) return st;
    return cr_gpu_check(crk_attention_forward(&p, cr_gpu_stream(device)), "attention");
}

/* in: q, k, v, o, lse, dO, mask?; out: dq?, dk?, dv?. */
cr_status cr_gpu_attention_backward(cr_call *c) {
    int device;
    cr_status st = cr_gpu_call_device(c, &device);
    if (st) return st;
    crk_attention p = params(c, c->in[6]);
    p.o = cr_tensor_ptr(c->in[3]);
    p.lse = cr_tensor_ptr(c->in[4]);
    p.go = cr_tensor_ptr(c->in[5]);
    p.dq = ptr_or_null(c->out[0]);
    p.dk = ptr_or_null(c->out[1]);
    p.dv_ = ptr_or_null(c->out[2]);
    if ((st = check_fits(&p))) return st;
    size_t bytes = crk_attention_backward_scratch_bytes(&p);
    void *scratch = NULL;
    if (bytes && (st = cr_gpu_alloc(device, bytes, &scratch))) return st;
    st = cr_gpu_check(crk_attention_backward(&p, scratch, cr_gpu_stream(device)), "attention_backward");
    if (scratch) cr_gpu_release(device, scratch, bytes);
    return st;
}
