/* conv.c (cuda) — conv2d forward and backward through cuDNN, on channels-last
 * activations (the layout of cuDNN's tensor-core kernels; ops/conv.c allocates GPU conv
 * outputs channels-last). Weights are read through a channels-last (KRSC) copy and their
 * grad is written back in the weight's own layout. f16/bf16 run natively with f32
 * accumulation; f32 may use TF32 tensor cores, as PyTorch's default allows for
 * convolutions (CRESCENT_CUDA_TF32=0 turns that off); f64 runs in f64.
 *
 * The algorithms come from cuDNN's heuristics (cudnnGet*_v7) and are cached per problem
 * shape; with CRESCENT_CUDNN_BENCHMARK=1 they are timed instead (cudnnFind*Ex) on the
 * first call of each shape, and cr_cuda_set_deterministic keeps only algorithms that give
 * the same bits on every run. This uses cuDNN's legacy API, still shipped with cuDNN 9. */
#include <cudnn.h>
#include <pthread.h>

#include "cuda_impl.h"
#include "elementwise_impl.h"

static cudnnHandle_t handles[CR_GPU_MAX_DEVICES];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static bool deterministic;

void cr_gpu_set_deterministic(bool on) { deterministic = on; }

static cr_status check(cudnnStatus_t s, const char *what) {
    if (s == CUDNN_STATUS_SUCCESS) return CR_OK;
    return cr_fail(s == CUDNN_STATUS_ALLOC_FAILED ? CR_ERR_OOM : CR_ERR_DEVICE, "%s: cuDNN error "
                   "%d (%s)", what, (int)s, cudnnGetErrorString(s));
}

cr_status cr_gpu_cudnn(int device, cudnnHandle_t *out) {
    cr_status st = CR_OK;
    pthread_mutex_lock(&lock);
    if (!handles[device]) {
        st = check(cudnnCreate(&handles[device]), "cudnnCreate");
        if (!st) st = check(cudnnSetStream(handles[device], cr_gpu_stream(device)), "cudnnSetStream");
    }
    pthread_mutex_unlock(&lock);
    *out = handles[device];
    return st;
}

cudnnDataType_t cr_gpu_cudnn_type(cr_dtype dt) {
    switch (dt) {
    case CR_DT_F64: return CUDNN_DATA_DOUBLE;
    case CR_DT_F16: return CUDNN_DATA_HALF;
    case CR_DT_BF16: return CUDNN_DATA_BFLOAT16;
    default: return CUDNN_DATA_FLOAT;
    }
}

/* ---- the algorithm cache ---- */
typedef struct {
    int64_t key[20];
    cudnnConvolutionFwdAlgo_t fwd;
    cudnnConvolutionBwdDataAlgo_t bwd_data;
    cudnnConvolutionBwdFilterAlgo_t bwd_filter;
    bool has_fwd, has_data, has_filter;
} algo_entry;

enum { ALGO_CACHE = 512 };
static algo_entry cache[ALGO_CACHE];
static int cached;

typedef struct {
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
    int64_t key[20];
} conv_descs;

static cr_status tensor_desc(cudnnTensorDescriptor_t d, const cr_tensor *t) {
    return check(cudnnSetTensor4dDescriptorEx(d, cr_gpu_cudnn_type(t->dtype), (int)t->shape[0],
                                              (int)t->shape[1], (int)t->shape[2], (int)t->shape[3],
                                              (int)t->stride[0], (int)t->stride[1],
                                              (int)t->stride[2], (int)t->stride[3]),
                 "conv2d: tensor descriptor");
}

static void descs_free(conv_descs *d) {
    if (d->x) cudnnDestroyTensorDescriptor(d->x);
    if (d->y) cudnnDestroyTensorDescriptor(d->y);
    if (d->w) cudnnDestroyFilterDescriptor(d->w);
    if (d->conv) cudnnDestroyConvolutionDescriptor(d->conv);
}

/* x and y channels-last or row-major, w channels-last (KRSC). */
static cr_status descs_init(conv_descs *d, const cr_call *c, const cr_tensor *x,
                            const cr_tensor *w, const cr_tensor *y) {
    memset(d, 0, sizeof *d);
    for (int k = 0; k < 4; k++) {
        if (x->shape[k] > INT32_MAX || y->shape[k] > INT32_MAX || x->numel > INT32_MAX ||
            y->numel > INT32_MAX)
            return cr_fail(CR_ERR_UNSUPPORTED, "conv2d: tensors of 2^31 elements or more are "
                           "not supported on the GPU; split the batch");
    }
    cr_status st = check(cudnnCreateTensorDescriptor(&d->x), "conv2d");
    if (!st) st = check(cudnnCreateTensorDescriptor(&d->y), "conv2d");
    if (!st) st = check(cudnnCreateFilterDescriptor(&d->w), "conv2d");
    if (!st) st = check(cudnnCreateConvolutionDescriptor(&d->conv), "conv2d");
    if (!st) st = tensor_desc(d->x, x);
    if (!st) st = tensor_desc(d->y, y);
    if (!st)
        st = check(cudnnSetFilter4dDescriptor(d->w, cr_gpu_cudnn_type(w->dtype), CUDNN_TENSOR_NHWC,
                                              (int)w->shape[0], (int)w->shape[1], (int)w->shape[2],
                                              (int)w->shape[3]), "conv2d: filter descriptor");
    cudnnDataType_t compute = x->dtype == CR_DT_F64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
    if (!st)
        st = check(cudnnSetConvolution2dDescriptor(d->conv, (int)c->i[2], (int)c->i[3], (int)c->i[0],
                                                   (int)c->i[1], (int)c->i[4], (int)c->i[5],
                                                   CUDNN_CROSS_CORRELATION, compute),
                   "conv2d: convolution descriptor");
    if (!st) st = check(cudnnSetConvolutionGroupCount(d->conv, (int)c->i[6]), "conv2d: groups");
    const char *tf32 = getenv("CRESCENT_CUDA_TF32");
    cudnnMathType_t math = x->dtype == CR_DT_F16 || x->dtype == CR_DT_BF16 ? CUDNN_TENSOR_OP_MATH
                           : (tf32 && *tf32 == '0') || x->dtype == CR_DT_F64 ? CUDNN_FMA_MATH
                                                                            : CUDNN_DEFAULT_MATH;
    if (!st) st = check(cudnnSetConvolutionMathType(d->conv, math), "conv2d: math type");
    int64_t key[20] = {x->shape[0], x->shape[1], x->shape[2], x->shape[3], w->shape[0],
                       w->shape[2], w->shape[3], c->i[0], c->i[1], c->i[2], c->i[3], c->i[4],
                       c->i[5], c->i[6], x->dtype, cr_tensor_is_channels_last(x),
                       cr_tensor_is_channels_last(y), x->storage->device_index, deterministic,
                       (int64_t)math};
    memcpy(d->key, key, sizeof key);
    if (st) descs_free(d);
    return st;
}

static algo_entry *algo_for(const int64_t *key) {
    for (int i = 0; i < cached; i++)
        if (!memcmp(cache[i].key, key, sizeof cache[i].key)) return &cache[i];
    algo_entry *e = &cache[cached < ALGO_CACHE ? cached++ : (int)(key[0] % ALGO_CACHE)];
    memset(e, 0, sizeof *e);
    memcpy(e->key, key, sizeof e->key);
    return e;
}

static bool benchmark_mode(void) {
    const char *e = getenv("CRESCENT_CUDNN_BENCHMARK");
    return e && *e == '1';
}

/* The first algorithm of cuDNN's ranked list that succeeded (and is deterministic when
 * asked). */
#define PICK(perf, n, out)                                                           \
    do {                                                                             \
        for (int k_ = 0; k_ < (n); k_++) {                                           \
            if ((perf)[k_].status != CUDNN_STATUS_SUCCESS) continue;                 \
            if (deterministic && (perf)[k_].determinism != CUDNN_DETERMINISTIC) continue; \
            *(out) = (perf)[k_].algo;                                                \
            found = true;                                                            \
            break;                                                                   \
        }                                                                            \
    } while (0)

/* A workspace from the caching allocator (NULL for 0 bytes). */
static cr_status workspace(int device, size_t bytes, void **ptr) {
    *ptr = NULL;
    return bytes ? cr_gpu_alloc(device, bytes, ptr) : CR_OK;
}

/* Whether a weight-shaped tensor's memory is KRSC (channels-last): channels-last itself,
 * or row-major where that is the same memory (1x1 kernels, one input channel). */
static bool krsc(const cr_tensor *t) {
    return cr_tensor_is_channels_last(t) ||
           (cr_tensor_is_contiguous(t) && ((t->shape[2] == 1 && t->shape[3] == 1) || t->shape[1] == 1));
}

/* w in KRSC memory: itself or a copy. */
static cr_status filter_nhwc(cr_tensor **out, cr_tensor *w) {
    if (krsc(w)) {
        cr_tensor_retain(w);
        *out = w;
        return CR_OK;
    }
    cr_status st = cr_tensor_alloc_layout(out, 4, w->shape, w->dtype, cr_tensor_dev(w), true);
    if (!st && (st = cr_copy_into(*out, w))) {
        cr_tensor_free(*out);
        *out = NULL;
    }
    return st;
}

static cr_status gpu_conv2d(cr_call *c) {
    int device;
    cr_status st = cr_gpu_call_device(c, &device);
    if (st) return st;
    cr_tensor *x = c->in[0], *w = NULL, *b = c->in[2], *y = c->out[0];
    if (!y->numel) return CR_OK;
    cudnnHandle_t h;
    conv_descs d;
    if ((st = cr_gpu_cudnn(device, &h)) || (st = filter_nhwc(&w, c->in[1]))) return st;
    if ((st = descs_init(&d, c, x, w, y))) {
        cr_tensor_free(w);
        return st;
    }
    pthread_mutex_lock(&lock);
    algo_entry *e = algo_for(d.key);
    if (!e->has_fwd) {
        cudnnConvolutionFwdAlgoPerf_t perf[16];
        int n = 0;
        bool found = false;
        if (benchmark_mode()) {
            size_t ws_bytes = (size_t)256 << 20;
            void *ws = NULL;
            if (!workspace(device, ws_bytes, &ws) &&
                cudnnFindConvolutionForwardAlgorithmEx(h, d.x, cr_tensor_ptr(x), d.w, cr_tensor_ptr(w),
                                                       d.conv, d.y, cr_tensor_ptr(y), 16, &n, perf,
                                                       ws, ws_bytes) == CUDNN_STATUS_SUCCESS)
                PICK(perf, n, &e->fwd);
            if (ws) cr_gpu_release(device, ws, ws_bytes);
        }
        if (!found && cudnnGetConvolutionForwardAlgorithm_v7(h, d.x, d.w, d.conv, d.y, 16, &n, perf) ==
                          CUDNN_STATUS_SUCCESS)
            PICK(perf, n, &e->fwd);
        if (!found) e->fwd = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
        e->has_fwd = true;
    }
    cudnnConvolutionFwdAlgo_t algo = e->fwd;
    pthread_mutex_unlock(&lock);
    size_t ws_bytes = 0;
    void *ws = NULL;
    st = check(cudnnGetConvolutionForwardWorkspaceSize(h, d.x, d.w, d.conv, d.y, algo, &ws_bytes),
               "conv2d: workspace size");
    if (!st) st = workspace(device, ws_bytes, &ws);
    double one = 1.0, zero = 0.0;
    float onef = 1.0f, zerof = 0.0f;
    const void *pone = x->dtype == CR_DT_F64 ? (const void *)&one : &onef;
    const void *pzero = x->dtype == CR_DT_F64 ? (const void *)&zero : &zerof;
    if (!st)
        st = check(cudnnConvolutionForward(h, pone, d.x, cr_tensor_ptr(x), d.w, cr_tensor_ptr(w),
                                           d.conv, algo, ws, ws_bytes, pzero, d.y, cr_tensor_ptr(y)),
                   "conv2d");
    if (ws) cr_gpu_release(device, ws, ws_bytes);
    if (!st && b) { /* y += bias over the channels */
        cudnnTensorDescriptor_t bd = NULL;
        st = check(cudnnCreateTensorDescriptor(&bd), "conv2d: bias");
        if (!st)
            st = check(cudnnSetTensor4dDescriptor(bd, CUDNN_TENSOR_NCHW, cr_gpu_cudnn_type(b->dtype), 1,
                                                  (int)b->shape[0], 1, 1), "conv2d: bias");
        if (!st)
            st = check(cudnnAddTensor(h, pone, bd, cr_tensor_ptr(b), pone, d.y, cr_tensor_ptr(y)),
                       "conv2d: bias");
        if (bd) cudnnDestroyTensorDescriptor(bd);
    }
    descs_free(&d);
    cr_tensor_free(w);
    return st;
}

static cr_status gpu_conv2d_backward(cr_call *c) {
    int device;
    cr_status st = cr_gpu_call_device(c, &device);
    if (st) return st;
    cr_tensor *gy = c->in[0], *x = c->in[1], *w = NULL;
    cr_tensor *gx = c->out[0], *gw = c->out[1], *gb = c->out[2];
    cudnnHandle_t h;
    if ((st = cr_gpu_cudnn(device, &h))) return st;
    if (!gy->numel || !x->numel) { /* nothing flows: zero grads */
        if (gx) st = cr_op_fill_(gx, 0);
        if (!st && gw) st = cr_op_fill_(gw, 0);
        if (!st && gb) st = cr_op_fill_(gb, 0);
        return st;
    }
    if ((st = filter_nhwc(&w, c->in[2]))) return st;
    conv_descs d;
    if ((st = descs_init(&d, c, x, w, gy))) {
        cr_tensor_free(w);
        return st;
    }
    double one = 1.0, zero = 0.0;
    float onef = 1.0f, zerof = 0.0f;
    const void *pone = x->dtype == CR_DT_F64 ? (const void *)&one : &onef;
    const void *pzero = x->dtype == CR_DT_F64 ? (const void *)&zero : &zerof;
    pthread_mutex_lock(&lock);
    algo_entry *e = algo_for(d.key);
    if (gx && !e->has_data) {
        cudnnConvolutionBwdDataAlgoPerf_t perf[16];
        int n = 0;
        bool found = false;
        if (cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w, d.y, d.conv, d.x, 16, &n, perf) ==
            CUDNN_STATUS_SUCCESS)
            PICK(perf, n, &e->bwd_data);
        if (!found) e->bwd_data = CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
        e->has_data = true;
    }
    if (gw && !e->has_filter) {
        cudnnConvolutionBwdFilterAlgoPerf_t perf[16];
        int n = 0;
        bool found = false;
        if (cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d.x, d.y, d.conv, d.w, 16, &n, perf) ==
            CUDNN_STATUS_SUCCESS)
            PICK(perf, n, &e->bwd_filter);
        if (!found) e->bwd_filter = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;
        e->has_filter = true;
    }
    cudnnConvolutionBwdDataAlgo_t data_algo = e->bwd_data;
    cudnnConvolutionBwdFilterAlgo_t filter_algo = e->bwd_filter;
    pthread_mutex_unlock(&lock);

    if (gx) {
        /* gx's descriptor: its own strides (x's layout) */
        cudnnTensorDescriptor_t gxd = NULL;
        size_t ws_bytes = 0;
        void *ws = NULL;
        st = check(cudnnCreateTensorDescriptor(&gxd), "conv2d_backward");
        if (!st) st = tensor_desc(gxd, gx);
        if (!st)
            st = check(cudnnGetConvolutionBackwardDataWorkspaceSize(h, d.w, d.y, d.conv, gxd, data_algo,
                                                                    &ws_bytes), "conv2d_backward");
        if (!st) st = workspace(device, ws_bytes, &ws);
        if (!st)
            st = check(cudnnConvolutionBackwardData(h, pone, d.w, cr_tensor_ptr(w), d.y, cr_tensor_ptr(gy),
                                                    d.conv, data_algo, ws, ws_bytes, pzero, gxd,
                                                    cr_tensor_ptr(gx)), "conv2d_backward (data)");
        if (ws) cr_gpu_release(device, ws, ws_bytes);
        if (gxd) cudnnDestroyTensorDescriptor(gxd);
    }
    if (!st && gw) {
        /* cuDNN writes the filter grad channels-last; gw keeps the weight's layout */
        cr_tensor *gwn = NULL;
        size_t ws_bytes = 0;
        void *ws = NULL;
        st = krsc(gw) ? CR_OK
                      : cr_tensor_alloc_layout(&gwn, 4, gw->shape, gw->dtype, cr_tensor_dev(gw), true);
        cr_tensor *target = gwn ? gwn : gw;
        if (!st)
            st = check(cudnnGetConvolutionBackwardFilterWorkspaceSize(h, d.x, d.y, d.conv, d.w, filter_algo,
                                                                      &ws_bytes), "conv2d_backward");
        if (!st) st = workspace(device, ws_bytes, &ws);
        if (!st)
            st = check(cudnnConvolutionBackwardFilter(h, pone, d.x, cr_tensor_ptr(x), d.y, cr_tensor_ptr(gy),
                                                      d.conv, filter_algo, ws, ws_bytes, pzero, d.w,
                                                      cr_tensor_ptr(target)), "conv2d_backward (filter)");
        if (ws) cr_gpu_release(device, ws, ws_bytes);
        if (!st && gwn) st = cr_copy_into(gw, gwn);
        cr_tensor_free(gwn);
    }
    if (!st && gb) {
        cudnnTensorDescriptor_t bd = NULL;
        st = check(cudnnCreateTensorDescriptor(&bd), "conv2d_backward: bias");
        if (!st)
            st = check(cudnnSetTensor4dDescriptor(bd, CUDNN_TENSOR_NCHW, cr_gpu_cudnn_type(gb->dtype), 1,
                                                  (int)gb->shape[0], 1, 1), "conv2d_backward: bias");
        if (!st)
            st = check(cudnnConvolutionBackwardBias(h, pone, d.y, cr_tensor_ptr(gy), pzero, bd,
                                                    cr_tensor_ptr(gb)), "conv2d_backward (bias)");
        if (bd) cudnnDestroyTensorDescriptor(bd);
    }
    descs_free(&d);
    cr_tensor_free(w);
    return st;
}

void cr_gpu_register_conv(void) {
    cr_kernel_table[CR_OP_CONV2D][CR_DEV_CUDA] = gpu_conv2d;
    cr_kernel_table[CR_OP_CONV2D_BACKWARD][CR_DEV_CUDA] = gpu_conv2d_backward;
}
