/* matmul_dnnl.c — the f32 and bf16 fast path of mm/bmm/addmm: oneDNN's matmul primitive
 * through its C API. Transposed and strided operands are described to oneDNN by their strides,
 * never copied. Creating a primitive costs far more than a small product, so primitives
 * live in a small LRU cache keyed by the whole geometry (dims, strides, dtype, alpha,
 * bias, accumulate). oneDNN runs on the same OpenMP runtime (libgomp) as our loops, so
 * cr_set_num_threads governs both. */
#include "matmul_impl.h"

#ifdef CR_HAVE_DNNL
#include <pthread.h>

#include <oneapi/dnnl/dnnl.h>

#include "dnnl_engine.h"

/* Enough for the distinct products of a large network's forward and backward passes
 * (each linear layer needs three); a miss costs a primitive creation. */
enum { CACHE_SLOTS = 128 };

/* memcmp-compared: built from a zeroed struct so padding bytes match. */
typedef struct gemm_key {
    cr_dtype dt;
    bool accumulate, has_bias, c_f32;
    int threads; /* oneDNN fixes its blocking for the thread count at creation */
    int64_t batch, ba, bb, n, k, m;
    int64_t sa[3], sb[3];
    double alpha;
} gemm_key;

typedef struct gemm_slot {
    bool used;
    uint64_t hash; /* of key, so a lookup compares keys only on a likely hit */
    gemm_key key;
    uint64_t last_use;
    dnnl_primitive_t prim; /* NULL: oneDNN declined this geometry (remembered too) */
    dnnl_memory_t mem[4];  /* src, weights, dst, bias; data handles set per call */
} gemm_slot;

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static gemm_slot cache[CACHE_SLOTS];
static uint64_t use_clock;
static dnnl_engine_t engine;
static dnnl_stream_t stream;

static bool engine_ready(void) { return cr_dnnl_engine(&engine, &stream); }

static void slot_clear(gemm_slot *s) {
    if (s->prim) dnnl_primitive_destroy(s->prim);
    for (int i = 0; i < 4; i++)
        if (s->mem[i]) dnnl_memory_destroy(s->mem[i]);
    memset(s, 0, sizeof *s);
}

/* A [rows, cols] matrix (with a leading batch dim when nd == 3); the caller destroys md. */
static bool matrix_md(dnnl_memory_desc_t *md, int nd, int64_t batch, int64_t rows, int64_t cols,
                      const int64_t *s, dnnl_data_type_t dt) {
    dnnl_dims_t dims = {0}, strides = {0};
    if (nd == 3) {
        dims[0] = batch;
        dims[1] = rows;
        dims[2] = cols;
        /* a shared (broadcast) matrix: oneDNN wants batch 1 and any sane stride */
        strides[0] = batch == 1 ? rows * cols : s[0];
        strides[1] = s[1];
        strides[2] = s[2];
    } else {
        dims[0] = rows;
        dims[1] = cols;
        strides[0] = s[1];
        strides[1] = s[2];
    }
    return dnnl_memory_desc_create_with_strides(md, nd, dims, dt, strides) == dnnl_success;
}

/* Builds the primitive and its memory objects into s; leaves s->prim NULL when oneDNN
 * has no optimised implementation (its "ref" kernels are slower than our own loop).
 * alpha is an eltwise "linear" post-op on the f32 accumulator, then accumulate a sum
 * post-op: c = alpha * a b (+ c). */
static void slot_build(gemm_slot *s, const gemm_key *k, const cr_gemm *g) {
    int nd = k->batch > 1 ? 3 : 2;
    dnnl_memory_desc_t md[4] = {0};
    int64_t sc[3] = {k->n * k->m, k->m, 1}, sbias[3] = {k->m, k->m, 1};
    const dnnl_data_type_t dt = k->dt == CR_DT_BF16 ? dnnl_bf16 : dnnl_f32;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    bool ok = matrix_md(&md[0], nd, k->ba, k->n, k->k, k->sa, dt) &&
              matrix_md(&md[1], nd, k->bb, k->k, k->m, k->sb, dt) &&
              matrix_md(&md[2], nd, k->batch, k->n, k->m, sc, k->c_f32 ? dnnl_f32 : dt) &&
              matrix_md(&md[3], nd, 1, 1, k->m, sbias, dt);
    if (ok) ok = dnnl_primitive_attr_create(&attr) == dnnl_success;
    if (ok && (k->alpha != 1.0 || k->accumulate)) {
        ok = dnnl_post_ops_create(&po) == dnnl_success;
        if (ok && k->alpha != 1.0)
            ok = dnnl_post_ops_append_eltwise(po, dnnl_eltwise_linear, (float)k->alpha, 0.0f) ==
                 dnnl_success;
        if (ok && k->accumulate)
            ok = dnnl_post_ops_append_sum(po, 1.0f, 0, dnnl_data_type_undef) == dnnl_success;
        if (ok) ok = dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success;
    }
    if (ok)
        ok = dnnl_matmul_primitive_desc_create(&pd, engine, md[0], md[1],
                                               k->has_bias ? md[3] : NULL, md[2],
                                               attr) == dnnl_success;
    if (ok) {
        const char *impl = NULL;
        dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
        ok = impl && strncmp(impl, "ref", 3) != 0;
    }
    if (ok) ok = dnnl_primitive_create(&s->prim, pd) == dnnl_success;
    const void *ptrs[4] = {g->a, g->b, g->c, g->bias};
    for (int i = 0; ok && i < 4; i++) {
        if (i == 3 && !k->has_bias) break;
        ok = dnnl_memory_create(&s->mem[i], md[i], engine, (void *)ptrs[i]) == dnnl_success;
    }
    if (!ok && s->prim) {
        dnnl_primitive_destroy(s->prim);
        s->prim = NULL;
    }
    for (int i = 0; i < 4; i++)
        if (md[i]) dnnl_memory_desc_destroy(md[i]);
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (po) dnnl_post_ops_destroy(po);
    if (attr) dnnl_primitive_attr_destroy(attr);
}

static uint64_t key_hash(const gemm_key *k) {
    const unsigned char *p = (const unsigned char *)k;
    uint64_t h = 14695981039346656037ull; /* FNV-1a */
    for (size_t i = 0; i < sizeof *k; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static gemm_slot *slot_for(const gemm_key *k, const cr_gemm *g) {
    uint64_t h = key_hash(k);
    gemm_slot *victim = &cache[0];
    for (int i = 0; i < CACHE_SLOTS; i++) {
        gemm_slot *s = &cache[i];
        if (s->used && s->hash == h && !memcmp(&s->key, k, sizeof *k)) {
            s->last_use = ++use_clock;
            return s;
        }
        if (!s->used || (victim->used && s->last_use < victim->last_use)) victim = s;
    }
    slot_clear(victim);
    victim->used = true;
    victim->hash = h;
    victim->key = *k;
    victim->last_use = ++use_clock;
    slot_build(victim, k, g);
    return victim;
}

cr_status cr_gemm_dnnl(const cr_gemm *g) {
    if (g->dt != CR_DT_F32 && g->dt != CR_DT_BF16) return CR_ERR_UNSUPPORTED;
    gemm_key k;
    memset(&k, 0, sizeof k);
    k.dt = g->dt;
    k.accumulate = g->accumulate;
    k.c_f32 = g->c_f32 && g->dt == CR_DT_BF16;
    k.has_bias = g->bias != NULL;
    k.threads = cr_threads();
    k.batch = g->batch;
    k.ba = g->batch > 1 && g->sa[0] == 0 ? 1 : g->batch;
    k.bb = g->batch > 1 && g->sb[0] == 0 ? 1 : g->batch;
    k.n = g->n;
    k.k = g->k;
    k.m = g->m;
    memcpy(k.sa, g->sa, sizeof k.sa);
    memcpy(k.sb, g->sb, sizeof k.sb);
    k.alpha = g->alpha;

    cr_status st = CR_ERR_UNSUPPORTED;
    pthread_mutex_lock(&cache_lock);
    if (engine_ready()) {
        gemm_slot *s = slot_for(&k, g);
        if (s->prim) {
            const void *ptrs[4] = {g->a, g->b, g->c, g->bias};
            static const int arg_ids[4] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST,
                                           DNNL_ARG_BIAS};
            dnnl_exec_arg_t args[4];
            int nargs = k.has_bias ? 4 : 3;
            bool ok = true;
            for (int i = 0; i < nargs; i++) {
                ok = ok && dnnl_memory_set_data_handle(s->mem[i], (void *)ptrs[i]) ==
                               dnnl_success;
                args[i].arg = arg_ids[i];
                args[i].memory = s->mem[i];
            }
            if (ok && dnnl_primitive_execute(s->prim, stream, nargs, args) == dnnl_success &&
                dnnl_stream_wait(stream) == dnnl_success)
                st = CR_OK;
        }
    }
    pthread_mutex_unlock(&cache_lock);
    return st;
}
#endif
