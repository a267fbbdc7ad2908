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
    dnnl_memory_desc_t data, vec; /* of the caller's buffers: x, y and grads; [C] vectors */
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

static void entry_clear(bn_entry *e) {
    if (e->prim) dnnl_primitive_destroy(e->prim);
    if (e->pd) dnnl_primitive_desc_destroy(e->pd);
    if (e->data) dnnl_memory_desc_destroy(e->data);
    if (e->vec) dnnl_memory_desc_destroy(e->vec);
    memset(e, 0, sizeof *e);
}

/* The cached entry for this key, created on a miss (evicting the least recent); NULL when
 * oneDNN declines it. */
static const bn_entry *bn_primitive(bool backward, int64_t N, int64_t C, int64_t S,
                                    unsigned flags, float eps) {
    bn_entry *victim = &bn_cache[0];
    for (int k = 0; k < BN_CACHE; k++) {
        bn_entry *e = &bn_cache[k];
        if (e->used && e->backward == backward && e->N == N && e->C == C && e->S == S &&
            e->flags == flags && e->eps == eps) {
            e->stamp = ++bn_clock;
            return e;
        }
        if (!e->used) victim = e;
        else if (victim->used && e->stamp < victim->stamp) victim = e;
    }
    entry_clear(victim);
    bn_entry e = {true, backward, N, C, S, flags, eps, ++bn_clock, NULL, NULL, NULL, NULL};
    dnnl_status_t s = backward ? make_backward_pd(&e.pd, N, C, S, flags, eps)
                               : make_forward_pd(&e.pd, N, C, S, flags, eps);
    if (s == dnnl_success) s = dnnl_primitive_create(&e.prim, e.pd);
    if (s == dnnl_success) {
        e.data = data_md(N, C, S);
        e.vec = vec_md(C);
    }
    if (s != dnnl_success || !e.data || !e.vec) {
        entry_clear(&e);
        return NULL;
    }
    *victim = e;
    return victim;
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

/* Executes prim on a's memories, then frees them. */
static bool run(dnnl_primitive_t prim, bn_args *a, bool ok) {
    if (ok) ok = dnnl_primitive_execute(prim, bn_stream, a->n, a->args) == dnnl_success &&
                 dnnl_stream_wait(bn_stream) == dnnl_success;
    for (int k = 0; k < a->n; k++) dnnl_memory_destroy(a->args[k].memory);
    return ok;
}

bool cr_dnnl_batch_norm_forward(float *y, const float *x, const float *weight,
                                const float *bias, float *mean, float *var, int64_t N,
                                int64_t C, int64_t S, bool use_global, double eps) {
    if (!bn_init()) return false;
    unsigned flags = (use_global ? dnnl_use_global_stats : 0u) | (weight ? dnnl_use_scale : 0u) |
                     (bias ? dnnl_use_shift : 0u);
    const bn_entry *e = bn_primitive(false, N, C, S, flags, (float)eps);
    if (!e) return false;
    bn_args a = {0};
    bool ok = add_arg(&a, DNNL_ARG_SRC, e->data, x) && add_arg(&a, DNNL_ARG_DST, e->data, y) &&
              add_arg(&a, DNNL_ARG_MEAN, e->vec, mean) &&
              add_arg(&a, DNNL_ARG_VARIANCE, e->vec, var);
    if (ok && weight) ok = add_arg(&a, DNNL_ARG_SCALE, e->vec, weight);
    if (ok && bias) ok = add_arg(&a, DNNL_ARG_SHIFT, e->vec, bias);
    return run(e->prim, &a, ok);
}

bool cr_dnnl_batch_norm_backward(float *gx, float *gw, float *gb, const float *g,
                                 const float *x, const float *weight, const float *mean,
                                 const float *var, int64_t N, int64_t C, int64_t S,
                                 bool use_global, double eps) {
    if (!bn_init()) return false;
    if (gw && !weight) return false;
    unsigned flags = (use_global ? dnnl_use_global_stats : 0u) | (weight ? dnnl_use_scale : 0u) |
                     (gb ? dnnl_use_shift : 0u);
    const bn_entry *e = bn_primitive(true, N, C, S, flags, (float)eps);
    if (!e) return false;
    /* the full backward writes both parameter diffs; unwanted ones go to scratch */
    float *tmp = NULL;
    if (weight && !gw) {
        tmp = malloc(sizeof(float) * (size_t)C);
        if (!tmp) return false;
        gw = tmp;
    }
    bn_args a = {0};
    bool ok = add_arg(&a, DNNL_ARG_SRC, e->data, x) &&
              add_arg(&a, DNNL_ARG_DIFF_DST, e->data, g) &&
              add_arg(&a, DNNL_ARG_MEAN, e->vec, mean) &&
              add_arg(&a, DNNL_ARG_VARIANCE, e->vec, var) &&
              add_arg(&a, DNNL_ARG_DIFF_SRC, e->data, gx);
    if (ok && weight)
        ok = add_arg(&a, DNNL_ARG_SCALE, e->vec, weight) &&
             add_arg(&a, DNNL_ARG_DIFF_SCALE, e->vec, gw);
    if (ok && gb) ok = add_arg(&a, DNNL_ARG_DIFF_SHIFT, e->vec, gb);
    ok = run(e->prim, &a, ok);
    free(tmp);
    return ok;
}

#endif
