/* conv.c (cuda) — conv2d forward and backward through cuDNN, on channels-last
 * activations (the layout of cuDNN's tensor-core kernels; ops/conv.c allocates GPU conv
 * outputs channels-last). Activations and weights of other layouts go through
 * channels-last (NHWC/KRSC) copies, since cuDNN's NHWC kernels want them together, and
 * grads are written back in their tensors' own layouts. f16/bf16 run natively with f32
 * accumulation; f32 may use TF32 tensor cores, as PyTorch's default allows for
 * convolutions (CRESCENT_CUDA_TF32=0 turns that off); f64 runs in f64 on row-major (NCHW)
 * copies, since cuDNN has no f64 kernels for NHWC (CUDNN_STATUS_NOT_SUPPORTED backwards,
 * seen on an H200 with cuDNN 9).
 *
 * Each direction goes first to cuDNN's graph API (conv_graph.c: f32, f16 and bf16,
 * ungrouped, not deterministic), whose engines are PyTorch's; what it does not take runs
 * here through cuDNN's legacy API (still shipped with cuDNN 9). There the algorithms come
 * from cuDNN's heuristics (cudnnGet*_v7) and are cached per problem shape; with
 * CRESCENT_CUDNN_BENCHMARK=1 the algorithms are timed instead (cudnnFind*AlgorithmEx) on
 * the first call of each shape and direction, as torch.backends.cudnn.benchmark does,
 * and cr_cuda_set_deterministic keeps only algorithms that give the same bits on every
 * run. */
#include <cudnn.h>
#include <pthread.h>

#include "conv_graph.h"
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

static cr_status cr_gpu_cudnn(int device, cudnnHandle_t *out) {
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

static cudnnDataType_t cr_gpu_cudnn_type(cr_dtype dt) {
    switch (dt) {
    case CR_DT_F64: return CUDNN_DATA_DOUBLE;
    case CR_DT_F16: return CUDNN_DATA_HALF;
    case CR_DT_BF16: return CUDNN_DATA_BFLOAT16;
    default: return CUDNN_DATA_FLOAT;
    }
}

/* ---- the algorithm cache ----
 * Per problem (shapes, parameters, dtype, device, deterministic mode): the algorithm of
 * each direction and the math type cuDNN ranked it with (the same algorithm may come
 * with and without tensor-core math), chosen on first use. */
typedef struct {
    int algo;
    cudnnMathType_t math;
    bool chosen;
} algo_choice;

typedef struct {
    int64_t key[16];
    algo_choice fwd, data, filter;
} algo_entry;

enum { ALGO_CACHE = 512 };
static algo_entry cache[ALGO_CACHE];
static int cached, evict_next;

typedef struct {
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
    int64_t key[16];
} conv_descs;

/* The layout cuDNN gets for a dtype: NHWC, except row-major NCHW for f64. */
static bool nchw_dtype(cr_dtype dt) { return dt == CR_DT_F64; }

/* t's memory is in its dtype's layout (see conv_memory): described with that layout's
 * canonical strides, so that size-1 dims never make cuDNN read it as another layout. */
static cr_status tensor_desc(cudnnTensorDescriptor_t d, const cr_tensor *t) {
    int n = (int)t->shape[0], c = (int)t->shape[1], h = (int)t->shape[2], w = (int)t->shape[3];
    cudnnDataType_t type = cr_gpu_cudnn_type(t->dtype);
    if (nchw_dtype(t->dtype))
        return check(cudnnSetTensor4dDescriptorEx(d, type, n, c, h, w, c * h * w, h * w, w, 1),
                     "conv2d: tensor descriptor");
    return check(cudnnSetTensor4dDescriptorEx(d, type, n, c, h, w, h * w * c, 1, w * c, c),
                 "conv2d: tensor descriptor");
}

static void descs_free(conv_descs *d) {
    if (d->x) cudnnDestroyTensorDescriptor(d->x);
    if (d->y) cudnnDestroyTensorDescriptor(d->y);
    if (d->w) cudnnDestroyFilterDescriptor(d->w);
    if (d->conv) cudnnDestroyConvolutionDescriptor(d->conv);
}

/* The math type a dtype asks for before cuDNN ranks algorithms: tensor cores for halves,
 * none for f64, and for f32 TF32 allowed (PyTorch's default for convolutions) unless
 * CRESCENT_CUDA_TF32=0. */
static cudnnMathType_t default_math(cr_dtype dt) {
    if (dt == CR_DT_F16 || dt == CR_DT_BF16) return CUDNN_TENSOR_OP_MATH;
    if (dt == CR_DT_F64 || cr_gpu_tf32_setting() == 0) return CUDNN_FMA_MATH;
    return CUDNN_DEFAULT_MATH;
}

/* x, y: activations with their dtype's memory layout (NHWC; NCHW for f64); w: filter
 * likewise (KRSC; KCRS). */
static cr_status descs_init(conv_descs *d, const cr_call *c, const cr_tensor *x,
                            const cr_tensor *w, const cr_tensor *y) {
    memset(d, 0, sizeof *d);
    if (x->numel > INT32_MAX || y->numel > INT32_MAX || w->numel > INT32_MAX)
        return cr_fail(CR_ERR_UNSUPPORTED, "conv2d: tensors of 2^31 elements or more are not "
                       "supported on the GPU; split the batch");
    cr_status st = check(cudnnCreateTensorDescriptor(&d->x), "conv2d");
    if (!st) st = check(cudnnCreateTensorDescriptor(&d->y), "conv2d");
    if (!st) st = check(cudnnCreateFilterDescriptor(&d->w), "conv2d");
    if (!st) st = check(cudnnCreateConvolutionDescriptor(&d->conv), "conv2d");
    if (!st) st = tensor_desc(d->x, x);
    if (!st) st = tensor_desc(d->y, y);
    if (!st)
        st = check(cudnnSetFilter4dDescriptor(d->w, cr_gpu_cudnn_type(w->dtype),
                                              nchw_dtype(w->dtype) ? CUDNN_TENSOR_NCHW : CUDNN_TENSOR_NHWC,
                                              (int)w->shape[0], (int)w->shape[1], (int)w->shape[2],
                                              (int)w->shape[3]), "conv2d: filter descriptor");
    cudnnDataType_t compute = x->dtype == CR_DT_F64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
    if (!st)
        st = check(cudnnSetConvolution2dDescriptor(d->conv, (int)c->i[2], (int)c->i[3], (int)c->i[0],
                                                   (int)c->i[1], (int)c->i[4], (int)c->i[5],
                                                   CUDNN_CROSS_CORRELATION, compute),
                   "conv2d: convolution descriptor");
    if (!st) st = check(cudnnSetConvolutionGroupCount(d->conv, (int)c->i[6]), "conv2d: groups");
    cudnnMathType_t math = default_math(x->dtype);
    if (!st) st = check(cudnnSetConvolutionMathType(d->conv, math), "conv2d: math type");
    int64_t key[16] = {x->shape[0], x->shape[1], x->shape[2], x->shape[3], w->shape[0],
                       w->shape[2], w->shape[3], c->i[0] << 16 | c->i[1], c->i[2] << 16 | c->i[3],
                       c->i[4] << 16 | c->i[5], c->i[6], x->dtype, x->storage->device_index,
                       deterministic, (int64_t)math, 0};
    memcpy(d->key, key, sizeof key);
    if (st) descs_free(d);
    return st;
}

/* Under the lock. */
static algo_entry *algo_for(const int64_t *key) {
    for (int i = 0; i < cached; i++)
        if (!memcmp(cache[i].key, key, sizeof cache[i].key)) return &cache[i];
    algo_entry *e = &cache[cached < ALGO_CACHE ? cached++ : evict_next++ % ALGO_CACHE];
    memset(e, 0, sizeof *e);
    memcpy(e->key, key, sizeof e->key);
    return e;
}

static bool benchmark_mode(void) {
    const char *e = getenv("CRESCENT_CUDNN_BENCHMARK");
    return e && *e == '1';
}

/* The first entry of cuDNN's ranked list that succeeded (and is deterministic when
 * asked), into an algo_choice. */
#define PICK(perf, n, choice)                                                        \
    do {                                                                             \
        for (int k_ = 0; k_ < (n) && !(choice)->chosen; k_++) {                      \
            if ((perf)[k_].status != CUDNN_STATUS_SUCCESS) continue;                 \
            if (deterministic && (perf)[k_].determinism != CUDNN_DETERMINISTIC) continue; \
            (choice)->algo = (int)(perf)[k_].algo;                                   \
            (choice)->math = (perf)[k_].mathType;                                    \
            (choice)->chosen = true;                                                 \
        }                                                                            \
    } while (0)

/* A workspace from the caching allocator (NULL for 0 bytes). */
static cr_status workspace(int device, size_t bytes, void **ptr) {
    *ptr = NULL;
    return bytes ? cr_gpu_alloc(device, bytes, ptr) : CR_OK;
}

/* Whether a 4-D tensor's memory is in its dtype's cuDNN layout. NHWC (for weights:
 * KRSC): channels-last itself, or row-major where that is the same memory (one channel,
 * or 1x1 planes); cuDNN's NHWC kernels want activations and filters in this layout
 * together. NCHW (f64): row-major. */
static bool conv_memory(const cr_tensor *t) {
    if (nchw_dtype(t->dtype)) return cr_tensor_is_contiguous(t);
    return cr_tensor_is_channels_last(t) ||
           (cr_tensor_is_contiguous(t) && (t->shape[1] == 1 || (t->shape[2] == 1 && t->shape[3] == 1)));
}

/* t in its dtype's layout: t itself (a new reference) or a copy. */
static cr_status as_conv_layout(cr_tensor **out, cr_tensor *t) {
    if (conv_memory(t)) {
        cr_tensor_retain(t);
        *out = t;
        return CR_OK;
    }
    cr_status st = cr_tensor_alloc_layout(out, 4, t->shape, t->dtype, cr_tensor_dev(t), !nchw_dtype(t->dtype));
    if (!st && (st = cr_copy_into(*out, t))) {
        cr_tensor_free(*out);
        *out = NULL;
    }
    return st;
}

/* An output slot in its dtype's layout: t itself, or a fresh tensor whose result the
 * caller copies into t. */
static cr_status conv_target(cr_tensor **out, cr_tensor *t) {
    if (conv_memory(t)) {
        cr_tensor_retain(t);
        *out = t;
        return CR_OK;
    }
    return cr_tensor_alloc_layout(out, 4, t->shape, t->dtype, cr_tensor_dev(t), !nchw_dtype(t->dtype));
}

/* Copies a temporary result into its slot (nothing when they are the same tensor). */
static cr_status deliver(cr_tensor *slot, cr_tensor *result) {
    return slot == result ? CR_OK : cr_copy_into(slot, result);
}

static const void *one_of(cr_dtype dt) {
    static const double one = 1.0;
    static const float onef = 1.0f;
    return dt == CR_DT_F64 ? (const void *)&one : (const void *)&onef;
}

static const void *zero_of(cr_dtype dt) {
    static const double zero = 0.0;
    static const float zerof = 0.0f;
    return dt == CR_DT_F64 ? (const void *)&zero : (const void *)&zerof;
}

/* The descriptors of a bias b [K] (as [1, K, 1, 1]) and of the output y it belongs to
 * (in y's layout); the caller destroys both (NULL where not made). */
static cr_status bias_descs(const cr_tensor *b, const cr_tensor *y, cudnnTensorDescriptor_t *bd,
                            cudnnTensorDescriptor_t *yd, const char *what) {
    *bd = *yd = NULL;
    cr_status st = check(cudnnCreateTensorDescriptor(bd), what);
    if (!st) st = check(cudnnCreateTensorDescriptor(yd), what);
    if (!st) st = tensor_desc(*yd, y);
    if (!st)
        st = check(cudnnSetTensor4dDescriptor(*bd, CUDNN_TENSOR_NCHW, cr_gpu_cudnn_type(b->dtype), 1,
                                              (int)b->shape[0], 1, 1), what);
    return st;
}

static void bias_descs_free(cudnnTensorDescriptor_t bd, cudnnTensorDescriptor_t yd) {
    if (bd) cudnnDestroyTensorDescriptor(bd);
    if (yd) cudnnDestroyTensorDescriptor(yd);
}

/* y[:, o] += b[o] */
static cr_status add_bias(cudnnHandle_t h, const cr_tensor *b, cr_tensor *y) {
    cudnnTensorDescriptor_t bd, yd;
    cr_status st = bias_descs(b, y, &bd, &yd, "conv2d: bias");
    if (!st)
        st = check(cudnnAddTensor(h, one_of(y->dtype), bd, cr_tensor_ptr(b), one_of(y->dtype), yd,
                                  cr_tensor_ptr(y)), "conv2d: bias");
    bias_descs_free(bd, yd);
    return st;
}

static cr_status choose_forward(cudnnHandle_t h, int device, conv_descs *d, const cr_tensor *x,
                                const cr_tensor *w, cr_tensor *y, algo_choice *out) {
    pthread_mutex_lock(&lock);
    algo_entry *e = algo_for(d->key);
    if (!e->fwd.chosen) {
        cudnnConvolutionFwdAlgoPerf_t perf[16];
        int n = 0;
        if (benchmark_mode()) {
            size_t ws_bytes = (size_t)256 << 20;
            void *ws = NULL;
            if (!workspace(device, ws_bytes, &ws) &&
                cudnnFindConvolutionForwardAlgorithmEx(h, d->x, cr_tensor_ptr(x), d->w, cr_tensor_ptr(w),
                                                       d->conv, d->y, cr_tensor_ptr(y), 16, &n, perf,
                                                       ws, ws_bytes) == CUDNN_STATUS_SUCCESS)
                PICK(perf, n, &e->fwd);
            if (ws) cr_gpu_release(device, ws, ws_bytes);
        }
        if (!e->fwd.chosen &&
            cudnnGetConvolutionForwardAlgorithm_v7(h, d->x, d->w, d->conv, d->y, 16, &n, perf) ==
                CUDNN_STATUS_SUCCESS)
            PICK(perf, n, &e->fwd);
        if (!e->fwd.chosen) e->fwd = (algo_choice){CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, default_math(x->dtype), true};
    }
    *out = e->fwd;
    pthread_mutex_unlock(&lock);
    return check(cudnnSetConvolutionMathType(d->conv, out->math), "conv2d: math type");
}

/* y = conv(x, w) through the legacy API (x, w, y in their dtype's layout). */
static cr_status forward_legacy(cudnnHandle_t h, int device, const cr_call *c, cr_tensor *x, cr_tensor *w,
                                cr_tensor *y) {
    conv_descs d;
    cr_status st = descs_init(&d, c, x, w, y);
    if (st) return st;
    algo_choice algo;
    size_t ws_bytes = 0;
    void *ws = NULL;
    cr_dtype dt = x->dtype;
    if (!(st = choose_forward(h, device, &d, x, w, y, &algo)) &&
        !(st = check(cudnnGetConvolutionForwardWorkspaceSize(h, d.x, d.w, d.conv, d.y,
                                                             (cudnnConvolutionFwdAlgo_t)algo.algo,
                                                             &ws_bytes), "conv2d: workspace size")) &&
        !(st = workspace(device, ws_bytes, &ws)))
        st = check(cudnnConvolutionForward(h, one_of(dt), d.x, cr_tensor_ptr(x), d.w, cr_tensor_ptr(w),
                                           d.conv, (cudnnConvolutionFwdAlgo_t)algo.algo, ws, ws_bytes,
                                           zero_of(dt), d.y, cr_tensor_ptr(y)), "conv2d");
    if (ws) cr_gpu_release(device, ws, ws_bytes);
    descs_free(&d);
    return st;
}

cr_status cr_gpu_conv2d(cr_call *c) {
    int device;
    cr_status st = cr_gpu_call_device(c, &device);
    if (st) return st;
    cr_tensor *b = c->in[2], *x = NULL, *w = NULL, *y = NULL;
    if (!c->out[0]->numel) return CR_OK;
    cudnnHandle_t h;
    bool ran = false;
    if ((st = cr_gpu_cudnn(device, &h)) || (st = as_conv_layout(&x, c->in[0])) || (st = as_conv_layout(&w, c->in[1])) ||
        (st = conv_target(&y, c->out[0])) ||
        (st = cr_gpu_conv_graph(h, device, CR_CONV_FWD, c->i, x, w, y, deterministic, &ran)))
        goto done;
    if (!ran) st = forward_legacy(h, device, c, x, w, y);
    if (!st && b) st = add_bias(h, b, y);
    if (!st) st = deliver(c->out[0], y);
done:
    cr_tensor_free(x);
    cr_tensor_free(w);
    cr_tensor_free(y);
    return st;
}

/* gx, gw: the outputs the timing runs may write (NULL when that grad is not wanted). */
static void choose_backward(cudnnHandle_t h, int device, conv_descs *d, const cr_tensor *x, const cr_tensor *w,
                            const cr_tensor *gy, cr_tensor *gx, cr_tensor *gw, cr_dtype dt, algo_choice *data,
                            algo_choice *filter) {
    pthread_mutex_lock(&lock);
    algo_entry *e = algo_for(d->key);
    const size_t bench_ws = (size_t)256 << 20;
    if (gx && !e->data.chosen) {
        cudnnConvolutionBwdDataAlgoPerf_t perf[16];
        int n = 0;
        if (benchmark_mode()) {
            void *ws = NULL;
            if (!workspace(device, bench_ws, &ws) &&
                cudnnFindConvolutionBackwardDataAlgorithmEx(h, d->w, cr_tensor_ptr(w), d->y, cr_tensor_ptr(gy),
                                                            d->conv, d->x, cr_tensor_ptr(gx), 16, &n, perf, ws,
                                                            bench_ws) == CUDNN_STATUS_SUCCESS)
                PICK(perf, n, &e->data);
            if (ws) cr_gpu_release(device, ws, bench_ws);
        }
        if (!e->data.chosen &&
            cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d->w, d->y, d->conv, d->x, 16, &n, perf) ==
                CUDNN_STATUS_SUCCESS)
            PICK(perf, n, &e->data);
        if (!e->data.chosen) e->data = (algo_choice){CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, default_math(dt), true};
    }
    if (gw && !e->filter.chosen) {
        cudnnConvolutionBwdFilterAlgoPerf_t perf[16];
        int n = 0;
        if (benchmark_mode()) {
            void *ws = NULL;
            if (!workspace(device, bench_ws, &ws) &&
                cudnnFindConvolutionBackwardFilterAlgorithmEx(h, d->x, cr_tensor_ptr(x), d->y, cr_tensor_ptr(gy),
                                                              d->conv, d->w, cr_tensor_ptr(gw), 16, &n, perf, ws,
                                                              bench_ws) == CUDNN_STATUS_SUCCESS)
                PICK(perf, n, &e->filter);
            if (ws) cr_gpu_release(device, ws, bench_ws);
        }
        if (!e->filter.chosen &&
            cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d->x, d->y, d->conv, d->w, 16, &n, perf) ==
                CUDNN_STATUS_SUCCESS)
            PICK(perf, n, &e->filter);
        if (!e->filter.chosen)
            e->filter = (algo_choice){CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, default_math(dt), true};
    }
    *data = e->data;
    *filter = e->filter;
    pthread_mutex_unlock(&lock);
}

/* The grads the graph API left (gx, gw: NULL where done or not wanted) through the
 * legacy API. */
static cr_status backward_legacy(cudnnHandle_t h, int device, const cr_call *c, cr_tensor *x, cr_tensor *w,
                                 cr_tensor *gy, cr_tensor *gx, cr_tensor *gw) {
    conv_descs d;
    cr_status st = descs_init(&d, c, x, w, gy);
    if (st) return st;
    cr_dtype dt = x->dtype;
    algo_choice data, filter;
    choose_backward(h, device, &d, x, w, gy, gx, gw, dt, &data, &filter);
    if (gx) {
        size_t ws_bytes = 0;
        void *ws = NULL;
        if (!(st = check(cudnnSetConvolutionMathType(d.conv, data.math), "conv2d_backward")) &&
            !(st = check(cudnnGetConvolutionBackwardDataWorkspaceSize(
                             h, d.w, d.y, d.conv, d.x, (cudnnConvolutionBwdDataAlgo_t)data.algo, &ws_bytes),
                         "conv2d_backward")) &&
            !(st = workspace(device, ws_bytes, &ws)))
            st = check(cudnnConvolutionBackwardData(h, one_of(dt), d.w, cr_tensor_ptr(w), d.y, cr_tensor_ptr(gy),
                                                    d.conv, (cudnnConvolutionBwdDataAlgo_t)data.algo, ws,
                                                    ws_bytes, zero_of(dt), d.x, cr_tensor_ptr(gx)),
                       "conv2d_backward (data)");
        if (ws) cr_gpu_release(device, ws, ws_bytes);
    }
    if (!st && gw) {
        size_t ws_bytes = 0;
        void *ws = NULL;
        if (!(st = check(cudnnSetConvolutionMathType(d.conv, filter.math), "conv2d_backward")) &&
            !(st = check(cudnnGetConvolutionBackwardFilterWorkspaceSize(
                             h, d.x, d.y, d.conv, d.w, (cudnnConvolutionBwdFilterAlgo_t)filter.algo, &ws_bytes),
                         "conv2d_backward")) &&
            !(st = workspace(device, ws_bytes, &ws)))
            st = check(cudnnConvolutionBackwardFilter(h, one_of(dt), d.x, cr_tensor_ptr(x), d.y,
                                                      cr_tensor_ptr(gy), d.conv,
                                                      (cudnnConvolutionBwdFilterAlgo_t)filter.algo, ws, ws_bytes,
                                                      zero_of(dt), d.w, cr_tensor_ptr(gw)),
                       "conv2d_backward (filter)");
        if (ws) cr_gpu_release(device, ws, ws_bytes);
    }
    descs_free(&d);
    return st;
}

/* gb[o] = sum of gy[:, o] */
static cr_status bias_grad(cudnnHandle_t h, const cr_tensor *gy, cr_tensor *gb) {
    cudnnTensorDescriptor_t bd, yd;
    cr_status st = bias_descs(gb, gy, &bd, &yd, "conv2d_backward: bias");
    if (!st)
        st = check(cudnnConvolutionBackwardBias(h, one_of(gy->dtype), yd, cr_tensor_ptr(gy), zero_of(gy->dtype), bd,
                                                cr_tensor_ptr(gb)), "conv2d_backward (bias)");
    bias_descs_free(bd, yd);
    return st;
}

cr_status cr_gpu_conv2d_backward(cr_call *c) {
    int device;
    cr_status st = cr_gpu_call_device(c, &device);
    if (st) return st;
    cr_tensor *gx_slot = c->out[0], *gw_slot = c->out[1], *gb = c->out[2];
    cudnnHandle_t h;
    if ((st = cr_gpu_cudnn(device, &h))) return st;
    if (!c->in[0]->numel || !c->in[1]->numel) { /* nothing flows: zero grads */
        if (gx_slot) st = cr_gpu_fill_value(gx_slot, 0);
        if (!st && gw_slot) st = cr_gpu_fill_value(gw_slot, 0);
        if (!st && gb) st = cr_gpu_fill_value(gb, 0);
        return st;
    }
    cr_tensor *gy = NULL, *x = NULL, *w = NULL, *gx = NULL, *gw = NULL;
    bool data_ran = false, filter_ran = false;
    if ((st = as_conv_layout(&gy, c->in[0])) || (st = as_conv_layout(&x, c->in[1])) || (st = as_conv_layout(&w, c->in[2])) ||
        (gx_slot && (st = conv_target(&gx, gx_slot))) || (gw_slot && (st = conv_target(&gw, gw_slot))) ||
        (gx && (st = cr_gpu_conv_graph(h, device, CR_CONV_BWD_DATA, c->i, gx, w, gy, deterministic, &data_ran))) ||
        (gw && (st = cr_gpu_conv_graph(h, device, CR_CONV_BWD_FILTER, c->i, x, gw, gy, deterministic, &filter_ran))))
        goto done;
    if ((gx && !data_ran) || (gw && !filter_ran))
        st = backward_legacy(h, device, c, x, w, gy, data_ran ? NULL : gx, filter_ran ? NULL : gw);
    if (!st && gx) st = deliver(gx_slot, gx);
    if (!st && gw) st = deliver(gw_slot, gw);
    if (!st && gb) st = bias_grad(h, gy, gb);
done:
    cr_tensor_free(gy);
    cr_tensor_free(x);
    cr_tensor_free(w);
    cr_tensor_free(gx);
    cr_tensor_free(gw);
    return st;
}

