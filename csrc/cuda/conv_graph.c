/* conv_graph.c (cuda) — convolutions through cuDNN's graph (backend) API, whose engines
 * are the ones PyTorch's cuDNN path runs (its sm90 implicit-GEMM kernels among them).
 * Each problem (shapes, params, dtype, direction) gets an execution plan once: the first
 * engine config of cuDNN's heuristics (mode A) that finalizes, or with
 * CRESCENT_CUDNN_BENCHMARK=1 the fastest of them, each timed on the problem's own
 * tensors as torch.backends.cudnn.benchmark does. Later calls bind the three pointers
 * and execute. Engines that convert their inputs down to a narrower type are never
 * taken (as PyTorch filters them); f32 may use TF32 tensor cores, as the legacy path.
 * CRESCENT_CUDNN_GRAPH=0 sends every problem to the legacy API (conv.c);
 * CRESCENT_CUDNN_LOG=1 prints each problem's choice on stderr. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "conv_graph.h"

enum { UID_X = 1, UID_W = 2, UID_Y = 3, PLAN_CACHE = 512, MAX_CONFIGS = 64 };
static const int64_t BENCH_WORKSPACE = (int64_t)256 << 20; /* the legacy benchmark's limit */

/* Every descriptor a plan was built from, kept alive with it. */
typedef struct {
    cudnnBackendDescriptor_t x, w, y, conv, op, graph, heur, plan;
    cudnnBackendDescriptor_t configs[MAX_CONFIGS];
    int64_t nconfigs;
} plan_parts;

typedef struct {
    int64_t key[16];
    plan_parts parts; /* parts.plan NULL: no engine, the legacy API runs it */
    int64_t workspace;
} plan_entry;

static plan_entry plans[PLAN_CACHE];
static int plan_count, plan_evict;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static bool env_is(const char *name, char v) {
    const char *e = getenv(name);
    return e && e[0] == v && !e[1];
}

/* CRESCENT_CUDNN_GRAPH=0, read once (every convolution asks) */
static bool graph_off(void) {
    static int off = -1;
    if (off < 0) off = env_is("CRESCENT_CUDNN_GRAPH", '0');
    return off;
}

static void parts_free(plan_parts *p) {
    cudnnBackendDescriptor_t all[] = {p->plan, p->heur, p->graph, p->op, p->conv, p->y, p->w, p->x};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i]) cudnnBackendDestroyDescriptor(all[i]);
    for (int64_t i = 0; i < p->nconfigs; i++)
        if (p->configs[i]) cudnnBackendDestroyDescriptor(p->configs[i]);
    memset(p, 0, sizeof *p);
}

static cudnnDataType_t data_type(cr_dtype dt) {
    return dt == CR_DT_BF16 ? CUDNN_DATA_BFLOAT16 : dt == CR_DT_F16 ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
}

/* A channels-last tensor [n, c, h, w] (also KRSC filters) with its unique id. */
static cudnnStatus_t tensor_desc(cudnnBackendDescriptor_t *out, int64_t uid, cr_dtype dt, const int64_t *shape) {
    cudnnDataType_t type = data_type(dt);
    int64_t dims[4] = {shape[0], shape[1], shape[2], shape[3]};
    int64_t strides[4] = {shape[1] * shape[2] * shape[3], 1, shape[3] * shape[1], shape[1]};
    int64_t align = 16;
    cudnnStatus_t s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_TENSOR_DESCRIPTOR, out);
    if (!s) s = cudnnBackendSetAttribute(*out, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
    if (!s) s = cudnnBackendSetAttribute(*out, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims);
    if (!s) s = cudnnBackendSetAttribute(*out, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides);
    if (!s) s = cudnnBackendSetAttribute(*out, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    if (!s) s = cudnnBackendSetAttribute(*out, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
    if (!s) s = cudnnBackendFinalize(*out);
    return s;
}

static cudnnStatus_t conv_desc(cudnnBackendDescriptor_t *out, const int64_t *p) {
    int64_t spatial = 2;
    cudnnDataType_t compute = CUDNN_DATA_FLOAT;
    cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    int64_t stride[2] = {p[0], p[1]}, pad[2] = {p[2], p[3]}, dilation[2] = {p[4], p[5]};
    cudnnStatus_t s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, out);
    if (!s) s = cudnnBackendSetAttribute(*out, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &spatial);
    if (!s) s = cudnnBackendSetAttribute(*out, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
    if (!s) s = cudnnBackendSetAttribute(*out, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
    if (!s) s = cudnnBackendSetAttribute(*out, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad);
    if (!s) s = cudnnBackendSetAttribute(*out, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad);
    if (!s) s = cudnnBackendSetAttribute(*out, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dilation);
    if (!s) s = cudnnBackendSetAttribute(*out, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, stride);
    if (!s) s = cudnnBackendFinalize(*out);
    return s;
}

/* The operation of a direction, with the attribute names of its x, w, y, conv, alpha and
 * beta (the grads dx, dw and dy take the places of x, w and y). */
static cudnnStatus_t op_desc(plan_parts *p, cr_conv_dir dir) {
    static const cudnnBackendDescriptorType_t type[3] = {
        CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
        CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
        CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR};
    static const cudnnBackendAttributeName_t names[3][6] = {
        {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA},
        {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA},
        {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA}};
    const cudnnBackendAttributeName_t *n = names[dir];
    float alpha = 1.0f, beta = 0.0f;
    cudnnStatus_t s = cudnnBackendCreateDescriptor(type[dir], &p->op);
    if (!s) s = cudnnBackendSetAttribute(p->op, n[0], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &p->x);
    if (!s) s = cudnnBackendSetAttribute(p->op, n[1], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &p->w);
    if (!s) s = cudnnBackendSetAttribute(p->op, n[2], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &p->y);
    if (!s) s = cudnnBackendSetAttribute(p->op, n[3], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &p->conv);
    if (!s) s = cudnnBackendSetAttribute(p->op, n[4], CUDNN_TYPE_FLOAT, 1, &alpha);
    if (!s) s = cudnnBackendSetAttribute(p->op, n[5], CUDNN_TYPE_FLOAT, 1, &beta);
    if (!s) s = cudnnBackendFinalize(p->op);
    return s;
}

/* The graph of the one operation and cuDNN's ranked engine configs for it. */
static cudnnStatus_t graph_and_configs(plan_parts *p, cudnnHandle_t h) {
    cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    cudnnStatus_t s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &p->graph);
    if (!s) s = cudnnBackendSetAttribute(p->graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &p->op);
    if (!s) s = cudnnBackendSetAttribute(p->graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
    if (!s) s = cudnnBackendFinalize(p->graph);
    if (!s) s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &p->heur);
    if (!s)
        s = cudnnBackendSetAttribute(p->heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                     &p->graph);
    if (!s) s = cudnnBackendSetAttribute(p->heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    if (!s) s = cudnnBackendFinalize(p->heur);
    int64_t available = 0;
    if (!s) s = cudnnBackendGetAttribute(p->heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
                                         &available, NULL);
    if (s) return s;
    int64_t want = available < MAX_CONFIGS ? available : MAX_CONFIGS;
    for (int64_t i = 0; i < want && !s; i++) {
        s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &p->configs[i]);
        if (!s) p->nconfigs = i + 1;
    }
    int64_t got = 0;
    if (!s && want)
        s = cudnnBackendGetAttribute(p->heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, want,
                                     &got, p->configs);
    if (!s && got < p->nconfigs) {
        for (int64_t i = got; i < p->nconfigs; i++) cudnnBackendDestroyDescriptor(p->configs[i]);
        p->nconfigs = got;
    }
    return s;
}

/* Whether an engine config converts its inputs to a narrower type (never taken). */
static bool down_converts(cudnnBackendDescriptor_t config) {
    cudnnBackendDescriptor_t engine = NULL;
    bool found = false;
    if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &engine)) return true;
    int64_t n = 0;
    cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    if (cudnnBackendGetAttribute(config, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &engine) ||
        cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                 CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n, notes))
        found = true; /* unreadable: treated as unsafe */
    for (int64_t i = 0; i < n && !found; i++) found = notes[i] == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS;
    cudnnBackendDestroyDescriptor(engine);
    return found;
}

static cudnnStatus_t plan_of(cudnnBackendDescriptor_t *plan, cudnnHandle_t h, cudnnBackendDescriptor_t config,
                             int64_t *workspace) {
    int64_t n = 0;
    cudnnStatus_t s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, plan);
    if (!s) s = cudnnBackendSetAttribute(*plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
    if (!s)
        s = cudnnBackendSetAttribute(*plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                     &config);
    if (!s) s = cudnnBackendFinalize(*plan);
    if (!s)
        s = cudnnBackendGetAttribute(*plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n,
                                     workspace);
    if (s && *plan) {
        cudnnBackendDestroyDescriptor(*plan);
        *plan = NULL;
    }
    return s;
}

static cudnnStatus_t execute(cudnnHandle_t h, cudnnBackendDescriptor_t plan, void *const ptrs[3], void *workspace) {
    cudnnBackendDescriptor_t pack = NULL;
    int64_t uids[3] = {UID_X, UID_W, UID_Y};
    cudnnStatus_t s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack);
    if (!s) s = cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, ptrs);
    if (!s) s = cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids);
    if (!s) s = cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
    if (!s) s = cudnnBackendFinalize(pack);
    if (!s) s = cudnnBackendExecute(h, plan, pack);
    if (pack) cudnnBackendDestroyDescriptor(pack);
    return s;
}

/* Milliseconds of one run of a plan (after one untimed run); a negative number if it fails. */
static float time_plan(cudnnHandle_t h, cudaStream_t stream, cudnnBackendDescriptor_t plan, void *const ptrs[3],
                       void *workspace) {
    cudaEvent_t start = NULL, stop = NULL;
    float ms = -1;
    if (cudaEventCreate(&start) == cudaSuccess && cudaEventCreate(&stop) == cudaSuccess &&
        execute(h, plan, ptrs, workspace) == CUDNN_STATUS_SUCCESS && cudaEventRecord(start, stream) == cudaSuccess &&
        execute(h, plan, ptrs, workspace) == CUDNN_STATUS_SUCCESS && cudaEventRecord(stop, stream) == cudaSuccess &&
        cudaEventSynchronize(stop) == cudaSuccess && cudaEventElapsedTime(&ms, start, stop) != cudaSuccess)
        ms = -1;
    if (start) cudaEventDestroy(start);
    if (stop) cudaEventDestroy(stop);
    cudaGetLastError();
    return ms;
}

/* Under the lock: the plan of a new problem into e (e->parts.plan stays NULL when no
 * engine config finalizes). Benchmark mode times every config that fits the benchmark
 * workspace and keeps the fastest. */
static void build_plan(plan_entry *e, cudnnHandle_t h, int device, cr_conv_dir dir, const int64_t *params,
                       const cr_tensor *x, const cr_tensor *w, const cr_tensor *y, void *const ptrs[3]) {
    plan_parts *p = &e->parts;
    cudnnStatus_t s = tensor_desc(&p->x, UID_X, x->dtype, x->shape);
    if (!s) s = tensor_desc(&p->w, UID_W, w->dtype, w->shape);
    if (!s) s = tensor_desc(&p->y, UID_Y, y->dtype, y->shape);
    if (!s) s = conv_desc(&p->conv, params);
    if (!s) s = op_desc(p, dir);
    if (!s) s = graph_and_configs(p, h);
    if (s) return;
    bool benchmark = env_is("CRESCENT_CUDNN_BENCHMARK", '1');
    void *bench_ws = NULL;
    if (benchmark && cr_gpu_alloc(device, (size_t)BENCH_WORKSPACE, &bench_ws)) benchmark = false;
    float best = -1;
    for (int64_t i = 0; i < p->nconfigs; i++) {
        if (down_converts(p->configs[i])) continue;
        cudnnBackendDescriptor_t plan = NULL;
        int64_t ws = 0;
        if (plan_of(&plan, h, p->configs[i], &ws)) continue;
        if (!benchmark) {
            p->plan = plan;
            e->workspace = ws;
            break;
        }
        float ms = ws <= BENCH_WORKSPACE ? time_plan(h, cr_gpu_stream(device), plan, ptrs, bench_ws) : -1;
        if (ms >= 0 && (best < 0 || ms < best)) {
            if (p->plan) cudnnBackendDestroyDescriptor(p->plan);
            p->plan = plan;
            e->workspace = ws;
            best = ms;
        } else {
            cudnnBackendDestroyDescriptor(plan);
        }
    }
    if (bench_ws) cr_gpu_release(device, bench_ws, (size_t)BENCH_WORKSPACE);
    if (env_is("CRESCENT_CUDNN_LOG", '1')) {
        static const char *what[3] = {"fwd", "bwd-data", "bwd-filter"};
        fprintf(stderr, "cudnn graph %s x[%lld,%lld,%lld,%lld] w[%lld,%lld,%lld,%lld] dtype %d: %s, %lld configs, "
                "workspace %lld, %.3f ms\n", what[dir], (long long)x->shape[0], (long long)x->shape[1],
                (long long)x->shape[2], (long long)x->shape[3], (long long)w->shape[0], (long long)w->shape[1],
                (long long)w->shape[2], (long long)w->shape[3], (int)x->dtype,
                p->plan ? "plan" : "no engine: legacy API", (long long)p->nconfigs, (long long)e->workspace, best);
    }
}

/* Under the lock: the cache entry of a problem, built on first use. */
static plan_entry *entry_for(const int64_t *key, cudnnHandle_t h, int device, cr_conv_dir dir,
                             const int64_t *params, const cr_tensor *x, const cr_tensor *w, const cr_tensor *y,
                             void *const ptrs[3]) {
    for (int i = 0; i < plan_count; i++)
        if (!memcmp(plans[i].key, key, sizeof plans[i].key)) return &plans[i];
    plan_entry *e = &plans[plan_count < PLAN_CACHE ? plan_count++ : plan_evict++ % PLAN_CACHE];
    parts_free(&e->parts);
    memset(e, 0, sizeof *e);
    memcpy(e->key, key, sizeof e->key);
    build_plan(e, h, device, dir, params, x, w, y, ptrs);
    return e;
}

static bool aligned16(const cr_tensor *t) { return ((uintptr_t)cr_tensor_ptr(t) & 15) == 0; }

cr_status cr_gpu_conv_graph(cudnnHandle_t h, int device, cr_conv_dir dir, const int64_t *params,
                            const cr_tensor *x, const cr_tensor *w, const cr_tensor *y, bool deterministic,
                            bool *ran) {
    *ran = false;
    cr_dtype dt = x->dtype;
    bool f32_ok = dt == CR_DT_F32 && cr_gpu_tf32_setting() != 0;
    if (graph_off() || deterministic || params[6] != 1 ||
        !(f32_ok || dt == CR_DT_BF16 || dt == CR_DT_F16) || !aligned16(x) || !aligned16(w) || !aligned16(y))
        return CR_OK;
    void *ptrs[3] = {cr_tensor_ptr(x), cr_tensor_ptr(w), cr_tensor_ptr(y)};
    int64_t key[16] = {x->shape[0], x->shape[1], x->shape[2], x->shape[3], w->shape[0], w->shape[2], w->shape[3],
                       params[0] << 16 | params[1], params[2] << 16 | params[3], params[4] << 16 | params[5],
                       dt, device, dir, y->shape[2], y->shape[3], 0};
    /* under the lock throughout, so that no other thread evicts the plan while it runs
     * (executing only enqueues work) */
    pthread_mutex_lock(&lock);
    plan_entry *e = entry_for(key, h, device, dir, params, x, w, y, ptrs);
    cr_status st = CR_OK;
    if (e->parts.plan) {
        void *ws = NULL;
        int64_t ws_bytes = e->workspace;
        if (!(st = ws_bytes ? cr_gpu_alloc(device, (size_t)ws_bytes, &ws) : CR_OK)) {
            cudnnStatus_t s = execute(h, e->parts.plan, ptrs, ws);
            if (ws) cr_gpu_release(device, ws, (size_t)ws_bytes);
            if (s == CUDNN_STATUS_SUCCESS) {
                *ran = true;
            } else { /* a plan that built but does not run: the legacy API takes this problem */
                static const char *what[3] = {"forward", "backward data", "backward filter"};
                fprintf(stderr, "crescent: the cuDNN graph API's %s convolution failed (%s); the legacy API "
                        "runs this problem from now on\n", what[dir], cudnnGetErrorString(s));
                parts_free(&e->parts);
            }
        }
    }
    pthread_mutex_unlock(&lock);
    return st;
}
