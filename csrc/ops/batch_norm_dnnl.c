/* batch_norm_dnnl.c — the oneDNN fast path of batch norm (see batch_norm_impl.h).
 * Primitives are costly to create, so each (direction, shape, flags, eps) keeps one in a
 * small LRU cache, on the engine shared by every oneDNN path (dnnl_engine.c). The data [N, C, S]
 * are described as 4-D [N, C, S, 1] in nchw, or nhwc when S == 1 (same bytes), which
 * lets oneDNN pick its channels-last kernel for BatchNorm1d inputs. Ops run on the
 * caller's thread only, so the cache needs no lock. */
#include "batch_norm_impl.h"

#ifdef CR_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>

#include "dnnl_engine.h"

enum { BN_CACHE = 16 };

typedef struct {
    bool used, backward;
    int64_t N, C, S;
    unsigned flags;
    float eps;
    uint64_t stamp; /* last use, for LRU eviction */
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
} bn_entry;

static dnnl_engine_t bn_engine;
static dnnl_stream_t bn_stream;
static bn_entry bn_cache[BN_CACHE];
static uint64_t bn_clock;

static bool bn_init(void) { return cr_dnnl_engine(&bn_engine, &bn_stream); }

/* The data [N, C, S] and a vector [C] (NULL on failure; the caller destroys them). */
static dnnl_memory_desc_t data_md(int64_t N, int64_t C, int64_t S) {
    dnnl_dims_t dims = {N, C, S, 1};
    dnnl_memory_desc_t md = NULL;
    dnnl_memory_desc_create_with_tag(&md, 4, dims, dnnl_f32, S == 1 ? dnnl_nhwc : dnnl_nchw);
    return md;
}
static dnnl_memory_desc_t vec_md(int64_t C) {
    dnnl_dims_t dims = {C};
    dnnl_memory_desc_t md = NULL;
    dnnl_memory_desc_create_with_tag(&md, 1, dims, dnnl_f32, dnnl_a);
    return md;
}

static dnnl_status_t make_forward_pd(dnnl_primitive_desc_t *pd, int64_t N, int64_t C,
                                     int64_t S, unsigned flags, float eps) {
    dnnl_memory_desc_t md = data_md(N, C, S);
    if (!md) return dnnl_out_of_memory;
    dnnl_prop_kind_t prop =
        (flags & dnnl_use_global_stats) ? dnnl_forward_inference : dnnl_forward_training;
    dnnl_status_t s = dnnl_batch_normalization_forward_primitive_desc_create(
        pd, bn_engine, prop, md, md, eps, flags, NULL);
    dnnl_memory_desc_destroy(md);
    return s;
}

static dnnl_status_t make_backward_pd(dnnl_primitive_desc_t *pd, int64_t N, int64_t C,
                                      int64_t S, unsigned flags, float eps) {
    dnnl_primitive_desc_t hint;
    /* the hint is the training forward with the same flags */
    dnnl_status_t s = make_forward_pd(&hint, N, C, S, flags & ~(unsigned)dnnl_use_global_stats,
                                      eps);
    if (s != dnnl_success) return s;
    dnnl_memory_desc_t md = data_md(N, C, S);
    dnnl_prop_kind_t prop =
        (flags & (dnnl_use_scale | dnnl_use_shift)) ? dnnl_backward : dnnl_backward_data;
    s = md ? dnnl_batch_normalization_backward_primitive_desc_create(pd, bn_engine, prop, md, md,
                                                                     md, eps, flags, hint, NULL)
           : dnnl_out_of_memory;
    if (md) dnnl_memory_desc_destroy(md);
    dnnl_primitive_desc_destroy(hint);
    return s;
}

/* The cached primitive for this key, created on a miss (evicting the least recent). */
static dnnl_primitive_t bn_primitive(bool backward, int64_t N, int64_t C, int64_t S,
                                     unsigned flags, float eps) {
    bn_entry *victim = &bn_cache[0];
    for (int k = 0; k < BN_CACHE; k++) {
        bn_entry *e = &bn_cache[k];
        if (e->used && e->backward == backward && e->N == N && e->C == C && e->S == S &&
            e->flags == flags && e->eps == eps) {
            e->stamp = ++bn_clock;
            return e->prim;
        }
        if (!e->used) victim = e;
        else if (victim->used && e->stamp < victim->stamp) victim = e;
    }
    dnnl_primitive_desc_t pd;
    dnnl_status_t s = backward ? make_backward_pd(&pd, N, C, S, flags, eps)
                               : make_forward_pd(&pd, N, C, S, flags, eps);
    if (s != dnnl_success) return NULL;
    dnnl_primitive_t prim;
    if (dnnl_primitive_create(&prim, pd) != dnnl_success) {
        dnnl_primitive_desc_destroy(pd);
        return NULL;
    }
    if (victim->used) {
        dnnl_primitive_destroy(victim->prim);
        dnnl_primitive_desc_destroy(victim->pd);
    }
    *victim = (bn_entry){true, backward, N, C, S, flags, eps, ++bn_clock, pd, prim};
    return prim;
}

/* Wraps caller buffers as oneDNN memories for one execution. */
typedef struct {
    int n;
    dnnl_exec_arg_t args[10];
} bn_args;

static bool add_arg(bn_args *a, int arg, const_dnnl_memory_desc_t md, const void *ptr) {
    dnnl_memory_t m;
    if (dnnl_memory_create(&m, md, bn_engine, (void *)ptr) != dnnl_success) return false;
    a->args[a->n].arg = arg;
    a->args[a->n].memory = m;
    a->n++;
    return true;
}

/* Executes prim on a's memories, then frees them and the two descriptors. */
static bool run(dnnl_primitive_t prim, bn_args *a, bool ok, dnnl_memory_desc_t dmd,
                dnnl_memory_desc_t vmd) {
    if (ok) ok = dnnl_primitive_execute(prim, bn_stream, a->n, a->args) == dnnl_success &&
                 dnnl_stream_wait(bn_stream) == dnnl_success;
    for (int k = 0; k < a->n; k++) dnnl_memory_destroy(a->args[k].memory);
    if (dmd) dnnl_memory_desc_destroy(dmd);
    if (vmd) dnnl_memory_desc_destroy(vmd);
    return ok;
}

bool cr_dnnl_batch_norm_forward(float *y, const float *x, const float *weight,
                                const float *bias, float *mean, float *var, int64_t N,
                                int64_t C, int64_t S, bool use_global, double eps) {
    if (!bn_init()) return false;
    unsigned flags = (use_global ? dnnl_use_global_stats : 0u) | (weight ? dnnl_use_scale : 0u) |
                     (bias ? dnnl_use_shift : 0u);
    dnnl_primitive_t prim = bn_primitive(false, N, C, S, flags, (float)eps);
    if (!prim) return false;
    dnnl_memory_desc_t dmd = data_md(N, C, S), vmd = vec_md(C);
    bn_args a = {0};
    bool ok = dmd && vmd && add_arg(&a, DNNL_ARG_SRC, dmd, x) && add_arg(&a, DNNL_ARG_DST, dmd, y) &&
              add_arg(&a, DNNL_ARG_MEAN, vmd, mean) && add_arg(&a, DNNL_ARG_VARIANCE, vmd, var);
    if (ok && weight) ok = add_arg(&a, DNNL_ARG_SCALE, vmd, weight);
    if (ok && bias) ok = add_arg(&a, DNNL_ARG_SHIFT, vmd, bias);
    return run(prim, &a, ok, dmd, vmd);
}

bool cr_dnnl_batch_norm_backward(float *gx, float *gw, float *gb, const float *g,
                                 const float *x, const float *weight, const float *mean,
                                 const float *var, int64_t N, int64_t C, int64_t S,
                                 bool use_global, double eps) {
    if (!bn_init()) return false;
    if (gw && !weight) return false;
    unsigned flags = (use_global ? dnnl_use_global_stats : 0u) | (weight ? dnnl_use_scale : 0u) |
                     (gb ? dnnl_use_shift : 0u);
    dnnl_primitive_t prim = bn_primitive(true, N, C, S, flags, (float)eps);
    if (!prim) return false;
    /* the full backward writes both parameter diffs; unwanted ones go to scratch */
    float *tmp = NULL;
    if (weight && !gw) {
        tmp = malloc(sizeof(float) * (size_t)C);
        if (!tmp) return false;
        gw = tmp;
    }
    dnnl_memory_desc_t dmd = data_md(N, C, S), vmd = vec_md(C);
    bn_args a = {0};
    bool ok = dmd && vmd && add_arg(&a, DNNL_ARG_SRC, dmd, x) &&
              add_arg(&a, DNNL_ARG_DIFF_DST, dmd, g) && add_arg(&a, DNNL_ARG_MEAN, vmd, mean) &&
              add_arg(&a, DNNL_ARG_VARIANCE, vmd, var) && add_arg(&a, DNNL_ARG_DIFF_SRC, dmd, gx);
    if (ok && weight)
        ok = add_arg(&a, DNNL_ARG_SCALE, vmd, weight) && add_arg(&a, DNNL_ARG_DIFF_SCALE, vmd, gw);
    if (ok && gb) ok = add_arg(&a, DNNL_ARG_DIFF_SHIFT, vmd, gb);
    ok = run(prim, &a, ok, dmd, vmd);
    free(tmp);
    return ok;
}

#endif
