/* conv_dnnl.c — the oneDNN fast path of conv2d (f32, and bf16 on CPUs with AVX512-BF16):
 * forward, backward data and backward weights (+ bias) through the C API.
 *
 * Activations are channels-last (nhwc) inside the primitive, and conv2d keeps them so
 * between layers (conv.c), so the common case runs without reorders: on the SwAV step
 * they took 1.63 s of 5.07 s of oneDNN time (ONEDNN_VERBOSE=1, 1 thread, 3 steps), while
 * the convolutions themselves were about 5% slower in nhwc than in the blocked layouts
 * (one profile). A row-major (nchw) argument, such as a network's input, is reordered at
 * the boundary; weights take oneDNN's preferred layout (format any). Primitive creation
 * costs far more than a small convolution, so primitives (and their reorders) are cached per shape and params in a small LRU. One
 * global CPU engine and stream serve every call; a mutex makes the cache safe to share. */
#include "conv_impl.h"

#ifndef CR_HAVE_DNNL

cr_status cr_conv2d_dnnl_forward(const cr_conv_geom *g, const void *x, const void *w,
                                 const void *b, void *y) {
    return CR_ERR_UNSUPPORTED;
}
cr_status cr_conv2d_dnnl_backward_data(const cr_conv_geom *g, const void *gy, const void *w,
                                       void *gx) {
    return CR_ERR_UNSUPPORTED;
}
cr_status cr_conv2d_dnnl_backward_weights(const cr_conv_geom *g, const void *x,
                                          const void *gy, void *gw, void *gb) {
    return CR_ERR_UNSUPPORTED;
}
int64_t cr_conv2d_dnnl_runs(void) { return 0; }

#else

#include <pthread.h>

#include <oneapi/dnnl/dnnl.h>

#include "dnnl_engine.h"

enum { KIND_FWD, KIND_BWD_DATA, KIND_BWD_WEIGHTS };
/* A ResNet-18 on two crop sizes has ~22 convolution shapes, each with a forward, a
 * backward-data and a backward-weights primitive: at 24 slots the LRU evicted every entry
 * before its next use, and rebuilding bf16 AMX primitives each step took a third of a
 * SwAV step (676 against 455 ms, cr.profiler, 2 threads). */
enum { CACHE_SLOTS = 128, MAX_ARGS = 4 };

typedef struct {
    int64_t kind, has_bias; /* int64 so the key has no padding bytes for memcmp */
    cr_conv_geom g;
} conv_key;

/* One argument of a primitive: the caller's plain layout, the primitive's layout, and
 * the reorder between them (user -> op for inputs, op -> user for outputs). */
typedef struct {
    int arg; /* DNNL_ARG_* */
    bool is_out;
    dnnl_memory_desc_t user, op; /* owned (clones) */
    dnnl_primitive_t reorder;    /* NULL when the layouts agree */
    size_t op_bytes;
} conv_arg;

typedef struct {
    bool used;
    uint64_t stamp; /* last use, for LRU eviction */
    conv_key key;
    dnnl_primitive_desc_t fwd_pd; /* backward pds keep a pointer to their forward hint */
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    int nargs;
    conv_arg args[MAX_ARGS];
} conv_entry;

static conv_entry cache[CACHE_SLOTS];
static uint64_t cache_clock;
static dnnl_engine_t engine;
static dnnl_stream_t stream;
static int64_t runs;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

int64_t cr_conv2d_dnnl_runs(void) { return __atomic_load_n(&runs, __ATOMIC_RELAXED); }

static bool engine_ready(void) { return cr_dnnl_engine(&engine, &stream); }

static void entry_clear(conv_entry *e) {
    for (int i = 0; i < e->nargs; i++) {
        conv_arg *a = &e->args[i];
        if (a->reorder) dnnl_primitive_destroy(a->reorder);
        if (a->user) dnnl_memory_desc_destroy(a->user);
        if (a->op) dnnl_memory_desc_destroy(a->op);
    }
    if (e->prim) dnnl_primitive_destroy(e->prim);
    if (e->pd && e->pd != e->fwd_pd) dnnl_primitive_desc_destroy(e->pd);
    if (e->fwd_pd) dnnl_primitive_desc_destroy(e->fwd_pd);
    memset(e, 0, sizeof *e);
}

/* ---- descriptors ---- */
static bool md_init(dnnl_memory_desc_t *md, int nd, const int64_t *dims, dnnl_format_tag_t tag,
                    dnnl_data_type_t dt) {
    dnnl_dims_t d;
    for (int i = 0; i < nd; i++) d[i] = dims[i];
    return dnnl_memory_desc_create_with_tag(md, nd, d, dt, tag) == dnnl_success;
}

/* Built, used and destroyed within entry_build (args keep clones). */
typedef struct {
    dnnl_memory_desc_t src, wei, bias, dst;          /* the primitive's: nhwc, weights any */
    dnnl_memory_desc_t src_u, wei_u, bias_u, dst_u;  /* the caller's plain layouts */
    dnnl_dims_t strides, dilates, pad_l, pad_r;
} conv_mds;

static void conv_mds_destroy(conv_mds *m) {
    dnnl_memory_desc_t all[8] = {m->src,   m->wei,   m->bias,   m->dst,
                                 m->src_u, m->wei_u, m->bias_u, m->dst_u};
    for (int i = 0; i < 8; i++)
        if (all[i]) dnnl_memory_desc_destroy(all[i]);
}

/* m starts zeroed; conv_mds_destroy frees what was made, whatever the result. */
static bool conv_mds_init(conv_mds *m, const cr_conv_geom *g) {
    const int64_t src[4] = {g->n, g->c, g->h, g->w}, dst[4] = {g->n, g->o, g->oh, g->ow};
    const int64_t wei4[4] = {g->o, g->c / g->groups, g->kh, g->kw};
    const int64_t wei5[5] = {g->groups, g->o / g->groups, g->c / g->groups, g->kh, g->kw};
    const int64_t bias[1] = {g->o};
    bool grouped = g->groups > 1;
    const dnnl_data_type_t dt = g->bf16 ? dnnl_bf16 : dnnl_f32;
    /* one channel or one pixel: nchw and nhwc are the same bytes, so no reorder */
    bool src_nhwc = g->src_cl || g->c == 1 || g->h * g->w == 1;
    bool dst_nhwc = g->dst_cl || g->o == 1 || g->oh * g->ow == 1;
    bool ok = md_init(&m->src, 4, src, dnnl_nhwc, dt) &&
              md_init(&m->src_u, 4, src, src_nhwc ? dnnl_nhwc : dnnl_nchw, dt) &&
              md_init(&m->dst, 4, dst, dnnl_nhwc, dt) &&
              md_init(&m->dst_u, 4, dst, dst_nhwc ? dnnl_nhwc : dnnl_nchw, dt) &&
              md_init(&m->bias, 1, bias, dnnl_a, dt) && md_init(&m->bias_u, 1, bias, dnnl_a, dt);
    /* PyTorch's [O, C/g, kh, kw] is, byte for byte, oneDNN's [g, O/g, C/g, kh, kw] */
    if (grouped)
        ok = ok && md_init(&m->wei, 5, wei5, dnnl_format_tag_any, dt) &&
             md_init(&m->wei_u, 5, wei5, dnnl_goihw, dt);
    else
        ok = ok && md_init(&m->wei, 4, wei4, dnnl_format_tag_any, dt) &&
             md_init(&m->wei_u, 4, wei4, dnnl_oihw, dt);
    /* oneDNN counts dilation from 0 and wants the right padding that makes its output
     * size formula land exactly on ours (it may be negative when the stride drops rows) */
    const int64_t in[2] = {g->h, g->w}, out[2] = {g->oh, g->ow}, k[2] = {g->kh, g->kw};
    const int64_t s[2] = {g->sh, g->sw}, p[2] = {g->ph, g->pw}, d[2] = {g->dh, g->dw};
    for (int i = 0; i < 2; i++) {
        m->strides[i] = s[i];
        m->dilates[i] = d[i] - 1;
        m->pad_l[i] = p[i];
        m->pad_r[i] = (out[i] - 1) * s[i] + (k[i] - 1) * d[i] + 1 - in[i] - p[i];
    }
    return ok;
}

/* `what`/`index` name the primitive's descriptor for the argument (a bias is weights #1). */
static bool add_arg(conv_entry *e, int arg, bool is_out, const_dnnl_memory_desc_t user,
                    dnnl_query_t what, int index) {
    const_dnnl_memory_desc_t op = dnnl_primitive_desc_query_md(e->pd, what, index);
    if (!op) return false;
    conv_arg *a = &e->args[e->nargs++];
    a->arg = arg;
    a->is_out = is_out;
    if (dnnl_memory_desc_clone(&a->user, user) != dnnl_success ||
        dnnl_memory_desc_clone(&a->op, op) != dnnl_success)
        return false;
    a->op_bytes = dnnl_memory_desc_get_size(op);
    if (dnnl_memory_desc_equal(user, op)) return true;
    dnnl_primitive_desc_t rpd;
    const_dnnl_memory_desc_t from = is_out ? op : user, to = is_out ? user : op;
    if (dnnl_reorder_primitive_desc_create(&rpd, from, engine, to, engine, NULL) != dnnl_success)
        return false;
    bool ok = dnnl_primitive_create(&a->reorder, rpd) == dnnl_success;
    dnnl_primitive_desc_destroy(rpd);
    return ok;
}

static bool entry_build_with(conv_entry *e, const conv_key *k, conv_mds *m) {
    if (!conv_mds_init(m, &k->g)) return false;
    if (dnnl_convolution_forward_primitive_desc_create(
            &e->fwd_pd, engine, dnnl_forward_training, dnnl_convolution_direct, m->src, m->wei,
            k->has_bias ? m->bias : NULL, m->dst, m->strides, m->dilates, m->pad_l, m->pad_r,
            NULL) != dnnl_success)
        return false;
    if (k->kind == KIND_FWD) {
        e->pd = e->fwd_pd;
    } else if (k->kind == KIND_BWD_DATA) {
        if (dnnl_convolution_backward_data_primitive_desc_create(
                &e->pd, engine, dnnl_convolution_direct, m->src, m->wei, m->dst, m->strides,
                m->dilates, m->pad_l, m->pad_r, e->fwd_pd, NULL) != dnnl_success)
            return false;
    } else {
        if (dnnl_convolution_backward_weights_primitive_desc_create(
                &e->pd, engine, dnnl_convolution_direct, m->src, m->wei,
                k->has_bias ? m->bias : NULL, m->dst, m->strides, m->dilates, m->pad_l,
                m->pad_r, e->fwd_pd, NULL) != dnnl_success)
            return false;
    }
    /* oneDNN's reference kernels are far slower than converting to f32 and back */
    const char *impl = NULL;
    if (k->g.bf16 && (dnnl_primitive_desc_query(e->pd, dnnl_query_impl_info_str, 0, &impl) !=
                          dnnl_success ||
                      !impl || !strncmp(impl, "ref", 3)))
        return false;
    if (dnnl_primitive_create(&e->prim, e->pd) != dnnl_success) return false;
    /* argument order is the order of the pointers entry_run receives */
    switch (k->kind) {
    case KIND_FWD:
        return add_arg(e, DNNL_ARG_SRC, false, m->src_u, dnnl_query_src_md, 0) &&
               add_arg(e, DNNL_ARG_WEIGHTS, false, m->wei_u, dnnl_query_weights_md, 0) &&
               add_arg(e, DNNL_ARG_DST, true, m->dst_u, dnnl_query_dst_md, 0) &&
               (!k->has_bias ||
                add_arg(e, DNNL_ARG_BIAS, false, m->bias_u, dnnl_query_weights_md, 1));
    case KIND_BWD_DATA:
        return add_arg(e, DNNL_ARG_DIFF_DST, false, m->dst_u, dnnl_query_diff_dst_md, 0) &&
               add_arg(e, DNNL_ARG_WEIGHTS, false, m->wei_u, dnnl_query_weights_md, 0) &&
               add_arg(e, DNNL_ARG_DIFF_SRC, true, m->src_u, dnnl_query_diff_src_md, 0);
    default:
        return add_arg(e, DNNL_ARG_SRC, false, m->src_u, dnnl_query_src_md, 0) &&
               add_arg(e, DNNL_ARG_DIFF_DST, false, m->dst_u, dnnl_query_diff_dst_md, 0) &&
               add_arg(e, DNNL_ARG_DIFF_WEIGHTS, true, m->wei_u, dnnl_query_diff_weights_md, 0) &&
               (!k->has_bias ||
                add_arg(e, DNNL_ARG_DIFF_BIAS, true, m->bias_u, dnnl_query_diff_weights_md, 1));
    }
}

static bool entry_build(conv_entry *e, const conv_key *k) {
    conv_mds m;
    memset(&m, 0, sizeof m);
    bool ok = entry_build_with(e, k, &m);
    conv_mds_destroy(&m);
    return ok;
}

/* The cached entry for k, built on a miss (evicting the least recently used). */
static conv_entry *entry_get(const conv_key *k) {
    conv_entry *victim = &cache[0];
    for (int i = 0; i < CACHE_SLOTS; i++) {
        conv_entry *e = &cache[i];
        if (e->used && !memcmp(&e->key, k, sizeof *k)) {
            e->stamp = ++cache_clock;
            return e;
        }
        if (!e->used) {
            if (victim->used) victim = e;
        } else if (victim->used && e->stamp < victim->stamp) {
            victim = e;
        }
    }
    entry_clear(victim);
    victim->key = *k;
    if (!entry_build(victim, k)) {
        entry_clear(victim);
        return NULL;
    }
    victim->used = true;
    victim->stamp = ++cache_clock;
    return victim;
}

/* Blocked copies of the arguments live in one buffer per argument slot, kept and grown
 * across calls (under the lock): fresh multi-megabyte buffers each call cost more in page
 * faults than the reorders themselves. They hold at most the largest blocked activation
 * seen per slot, so memory stays flat from step to step. */
static void *ws_buf[MAX_ARGS];
static size_t ws_cap[MAX_ARGS];

static void *workspace(int slot, size_t bytes) {
    bytes = (bytes + 63) / 64 * 64;
    if (bytes == 0) bytes = 64;
    if (ws_cap[slot] < bytes) {
        free(ws_buf[slot]);
        ws_buf[slot] = aligned_alloc(64, bytes);
        ws_cap[slot] = ws_buf[slot] ? bytes : 0;
    }
    return ws_buf[slot];
}

/* Runs e on the caller's buffers (ptrs in argument order), reordering through the
 * workspace where oneDNN's layout differs from the plain one. */
static cr_status entry_run(conv_entry *e, void *const *ptrs) {
    dnnl_memory_t um[MAX_ARGS] = {0}, om[MAX_ARGS] = {0};
    dnnl_exec_arg_t args[MAX_ARGS];
    bool ok = true;
    for (int i = 0; i < e->nargs && ok; i++) {
        conv_arg *a = &e->args[i];
        ok = dnnl_memory_create(&um[i], a->user, engine, ptrs[i]) == dnnl_success;
        if (ok && a->reorder) {
            void *buf = workspace(i, a->op_bytes);
            ok = buf && dnnl_memory_create(&om[i], a->op, engine, buf) == dnnl_success;
            if (ok && !a->is_out) {
                dnnl_exec_arg_t r[2] = {{DNNL_ARG_FROM, um[i]}, {DNNL_ARG_TO, om[i]}};
                ok = dnnl_primitive_execute(a->reorder, stream, 2, r) == dnnl_success;
            }
        }
        args[i].arg = a->arg;
        args[i].memory = om[i] ? om[i] : um[i];
    }
    if (ok) ok = dnnl_primitive_execute(e->prim, stream, e->nargs, args) == dnnl_success;
    for (int i = 0; i < e->nargs && ok; i++) {
        conv_arg *a = &e->args[i];
        if (!a->is_out || !a->reorder) continue;
        dnnl_exec_arg_t r[2] = {{DNNL_ARG_FROM, om[i]}, {DNNL_ARG_TO, um[i]}};
        ok = dnnl_primitive_execute(a->reorder, stream, 2, r) == dnnl_success;
    }
    if (ok) ok = dnnl_stream_wait(stream) == dnnl_success;
    for (int i = 0; i < e->nargs; i++) {
        if (om[i]) dnnl_memory_destroy(om[i]);
        if (um[i]) dnnl_memory_destroy(um[i]);
    }
    if (ok) __atomic_add_fetch(&runs, 1, __ATOMIC_RELAXED);
    return ok ? CR_OK : CR_ERR_UNSUPPORTED;
}

static cr_status run(int kind, const cr_conv_geom *g, bool has_bias, void *const *ptrs) {
    conv_key k;
    memset(&k, 0, sizeof k);
    k.kind = kind;
    k.has_bias = has_bias;
    k.g = *g;
    pthread_mutex_lock(&lock);
    cr_status st = CR_ERR_UNSUPPORTED;
    if (engine_ready()) {
        conv_entry *e = entry_get(&k);
        if (e) st = entry_run(e, ptrs);
    }
    pthread_mutex_unlock(&lock);
    return st;
}

cr_status cr_conv2d_dnnl_forward(const cr_conv_geom *g, const void *x, const void *w,
                                 const void *b, void *y) {
    void *const ptrs[4] = {(void *)x, (void *)w, y, (void *)b};
    return run(KIND_FWD, g, b != NULL, ptrs);
}

cr_status cr_conv2d_dnnl_backward_data(const cr_conv_geom *g, const void *gy, const void *w,
                                       void *gx) {
    void *const ptrs[3] = {(void *)gy, (void *)w, gx};
    return run(KIND_BWD_DATA, g, false, ptrs);
}

/* oneDNN's strided 1x1 backward-weights kernel writes past a buffer when the input has
 * fewer channels than a vector: valgrind showed 3.2's jit_avx2_1x1_convolution_bwd_weights_t
 * writing 8 bytes past a heap block for 1, 2, 4, 5 and 7 input channels at stride 2 on an
 * AVX2 EPYC, and the corrupted heap crashed spec/checkpoint_spec.lua's width-4 ResNets
 * (2.6 did the same; letting it choose its own src layout, the earlier workaround, did not
 * help in 3.2). Such convolutions are tiny (a ResNet's downsampling ones have 64 channels
 * and more); the reference loops take them. */
static bool bwd_weights_declined(const cr_conv_geom *g) {
    return g->kh == 1 && g->kw == 1 && (g->sh > 1 || g->sw > 1) && (g->c / g->groups) % 16 != 0;
}

cr_status cr_conv2d_dnnl_backward_weights(const cr_conv_geom *g, const void *x,
                                          const void *gy, void *gw, void *gb) {
    if (bwd_weights_declined(g)) return CR_ERR_UNSUPPORTED;
    void *const ptrs[4] = {(void *)x, (void *)gy, gw, gb};
    return run(KIND_BWD_WEIGHTS, g, gb != NULL, ptrs);
}

#endif
