/* random.c (cuda) — the creation ops on the GPU: arange, eye, and the Philox draws rand,
 * randn, randint, randperm, bernoulli and dropout (kernels/random.cu). The entries in
 * ops/random.c and ops/dropout.c reserve the words and record them in the call (i[0]
 * seed, i[1] first counter), so these kernels draw the numbers the cpu would. */
#include "cuda_impl.h"
#include "kernels/random.h"

static cr_status enter(cr_call *c, int *device, cudaStream_t *stream) {
    cr_status st = cr_gpu_call_device(c, device);
    *stream = cr_gpu_stream(*device);
    return st;
}
static uint64_t seed_of(const cr_call *c) { return (uint64_t)c->i[0]; }
static uint64_t counter_of(const cr_call *c) { return (uint64_t)c->i[1]; }

cr_status cr_gpu_arange(cr_call *c) {
    int device;
    cudaStream_t s;
    cr_status st = enter(c, &device, &s);
    if (st) return st;
    cr_tensor *o = c->out[0];
    return cr_gpu_check(crk_arange(cr_tensor_ptr(o), o->dtype, o->numel, c->f[0], c->f[1], (int)c->i[2],
                                   c->i[0], c->i[1], s),
                        "arange");
}

cr_status cr_gpu_eye(cr_call *c) {
    int device;
    cudaStream_t s;
    cr_status st = enter(c, &device, &s);
    if (st) return st;
    cr_tensor *o = c->out[0];
    return cr_gpu_check(crk_eye(cr_tensor_ptr(o), o->dtype, o->shape[0], o->shape[1], s), "eye");
}

cr_status cr_gpu_rand(cr_call *c) {
    int device;
    cudaStream_t s;
    cr_status st = enter(c, &device, &s);
    if (st) return st;
    cr_tensor *o = c->out[0];
    return cr_gpu_check(crk_rand(cr_tensor_ptr(o), o->dtype, o->numel, seed_of(c), counter_of(c), s), "rand");
}

cr_status cr_gpu_randn(cr_call *c) {
    int device;
    cudaStream_t s;
    cr_status st = enter(c, &device, &s);
    if (st) return st;
    cr_tensor *o = c->out[0];
    return cr_gpu_check(crk_randn(cr_tensor_ptr(o), o->dtype, o->numel, seed_of(c), counter_of(c), s), "randn");
}

/* i[2] low, i[3] high (exclusive) */
cr_status cr_gpu_randint(cr_call *c) {
    int device;
    cudaStream_t s;
    cr_status st = enter(c, &device, &s);
    if (st) return st;
    cr_tensor *o = c->out[0];
    return cr_gpu_check(crk_randint(cr_tensor_ptr(o), o->dtype, o->numel, c->i[2], c->i[3], seed_of(c),
                                    counter_of(c), s),
                        "randint");
}

/* i[2] n; the sort's scratch comes from the caching allocator. */
cr_status cr_gpu_randperm(cr_call *c) {
    int device;
    cudaStream_t s;
    cr_status st = enter(c, &device, &s);
    if (st) return st;
    cr_tensor *o = c->out[0];
    int64_t n = c->i[2];
    if (n > INT32_MAX)
        return cr_fail(CR_ERR_ARG, "randperm: n = %lld is more than the GPU sort takes (2^31 - 1); "
                       "draw it on the cpu and move it", (long long)n);
    if (n == 0) return CR_OK;
    size_t bytes = crk_randperm_scratch(n);
    void *scratch;
    if ((st = cr_gpu_alloc(device, bytes, &scratch))) return st;
    st = cr_gpu_check(crk_randperm(cr_tensor_ptr(o), o->dtype, n, seed_of(c), counter_of(c), scratch, s),
                      "randperm");
    cr_gpu_release(device, scratch, bytes); /* stream-ordered: reused only after the sort */
    return st;
}

/* A probability tensor outside [0, 1] is found by the kernel; this reports the first one
 * as the cpu entry does (one synchronisation, only for tensor probabilities). */
static cr_status report_bad_probability(cudaStream_t s, unsigned long long *bad_dev, const cr_tensor *p) {
    unsigned long long bad = 0;
    cr_status st = cr_gpu_check(cudaMemcpyAsync(&bad, bad_dev, sizeof bad, cudaMemcpyDeviceToHost, s),
                                "bernoulli: reading the range check");
    if (!st) st = cr_gpu_check(cudaStreamSynchronize(s), "bernoulli");
    if (st || bad >= (unsigned long long)p->numel) return st;
    _Alignas(8) char value[8]; /* cr_load_f64 reads it as the dtype's own type */
    size_t es = cr_dtype_size(p->dtype);
    st = cr_gpu_check(cudaMemcpy(value, (const char *)cr_tensor_ptr(p) + bad * es, es, cudaMemcpyDeviceToHost),
                      "bernoulli: reading the probability");
    if (st) return st;
    return cr_fail(CR_ERR_ARG, "bernoulli: probability %g at flat index %lld is outside [0, 1]; "
                   "clamp the probabilities first", cr_load_f64(value, p->dtype), (long long)bad);
}

/* in[0] p (contiguous) or, without inputs, f[0] the probability. */
cr_status cr_gpu_bernoulli(cr_call *c) {
    int device;
    cudaStream_t s;
    cr_status st = enter(c, &device, &s);
    if (st) return st;
    cr_tensor *o = c->out[0], *p = c->nin ? c->in[0] : NULL;
    unsigned long long *bad = NULL;
    if (p) {
        if ((st = cr_gpu_alloc(device, sizeof *bad, (void **)&bad))) return st;
        st = cr_gpu_check(cudaMemsetAsync(bad, 0xff, sizeof *bad, s), "bernoulli");
    }
    if (!st)
        st = cr_gpu_check(crk_bernoulli(cr_tensor_ptr(o), o->dtype, o->numel, p ? cr_tensor_ptr(p) : NULL,
                                        p ? (int)p->dtype : 0, c->f[0], bad, seed_of(c), counter_of(c), s),
                          "bernoulli");
    if (!st && p) st = report_bad_probability(s, bad, p);
    if (bad) cr_gpu_release(device, bad, sizeof *bad);
    return st;
}

/* in[0] x (contiguous); out[0] y, out[1] mask (u8); f[0] p. */
cr_status cr_gpu_dropout(cr_call *c) {
    int device;
    cudaStream_t s;
    cr_status st = enter(c, &device, &s);
    if (st) return st;
    cr_tensor *x = c->in[0];
    return cr_gpu_check(crk_dropout(cr_tensor_ptr(x), cr_tensor_ptr(c->out[0]), (uint8_t *)cr_tensor_ptr(c->out[1]),
                                    x->dtype, x->numel, c->f[0], seed_of(c), counter_of(c), s),
                        "dropout");
}

/* in[0] g (contiguous), in[1] mask; f[0] scale. */
cr_status cr_gpu_dropout_backward(cr_call *c) {
    int device;
    cudaStream_t s;
    cr_status st = enter(c, &device, &s);
    if (st) return st;
    cr_tensor *g = c->in[0];
    return cr_gpu_check(crk_dropout_backward(cr_tensor_ptr(g), (const uint8_t *)cr_tensor_ptr(c->in[1]),
                                             cr_tensor_ptr(c->out[0]), g->dtype, g->numel, c->f[0], s),
                        "dropout_backward");
}

