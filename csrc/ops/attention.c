/* attention.c — fused scaled dot-product attention, softmax(scale q k^T + mask) v, with an
 * optional causal mask, a boolean or additive mask broadcast over batch and heads, and
 * dropout on the attention weights. Flash-attention style on the CPU: the forward keeps an
 * online softmax per query row over key tiles and saves only the output and each row's
 * log-sum-exp; the backward (its own op, ATTENTION_BACKWARD) recomputes the scores tile
 * by tile: a head per work item where the heads keep every thread busy (each tile's
 * scores once), else in two passes (dK and dV per key block, then dQ per query block).
 * Each work item owns what it writes, so there are no atomics, and every sum runs in the
 * same order either way: the same bits at any thread count.
 * No [Tq, Tk] matrix exists beyond one tile per thread. Dropout draws from the Philox
 * stream: element (n, i, j) of the weights keeps when uniform(word (n Tq + i) Tk + j) >= p,
 * and the backward draws the same words again. f32 and f64 compute natively. On the CPU,
 * f16/bf16 inputs stay as they are, in any strides (a ViT's q, k and v are views of one
 * qkv product): each work item converts its head into f32 staging, computes in f32 and
 * writes its rows back in the inputs' dtype, so no f32 copy of a tensor is made or kept
 * for the backward. The tile kernels are in attention_tile.h. */
#include <math.h>
#include <omp.h>

#include "elementwise_impl.h"
#include "reduce_impl.h" /* cr_expf_fast */
#include "rng.h"

enum { ATT_BR = 64, ATT_BC = 64 }; /* query rows and keys per tile */
#if defined(__AVX512F__)
enum { ATT_MR = 6, ATT_NR = 32 };  /* the tile product's block of C held in registers */
#else
enum { ATT_MR = 6, ATT_NR = 16 };
#endif
enum { ATT_PAD_K = 256 };          /* the longest sum whose last rows of A are padded */
enum { ATT_MASK_NONE = 0, ATT_MASK_BOOL = 1, ATT_MASK_ADD = 2 };

/* What every kernel reads: the heads are n = b H + h of [B, H] (H = 1 for 3-d inputs). */
typedef struct {
    int64_t B, H, Tq, Tk, d, dv;
    bool causal, dropout;
    int mask_kind;
    const char *mask;
    int64_t ms[4]; /* the mask's strides along b, h, i, j, in elements (0: broadcast) */
    int mask_es;
    double scale, p;
    uint64_t seed, counter;
} att_geom;

/* The call's parameters: i[0..5] B, H, Tq, Tk, d, dv; i[6] causal; i[7] mask kind; i[8..11]
 * mask strides; i[12], i[13] the dropout reservation's seed and counter; f[0] scale; f[1]
 * p; in[3] the mask (the expanded view) or NULL. */
static att_geom geometry(const cr_call *c, const cr_tensor *mask) {
    att_geom g;
    memset(&g, 0, sizeof g);
    g.B = c->i[0], g.H = c->i[1], g.Tq = c->i[2], g.Tk = c->i[3], g.d = c->i[4], g.dv = c->i[5];
    g.causal = c->i[6] != 0;
    g.mask_kind = (int)c->i[7];
    for (int k = 0; k < 4; k++) g.ms[k] = c->i[8 + k];
    g.seed = (uint64_t)c->i[12];
    g.counter = (uint64_t)c->i[13];
    g.scale = c->f[0];
    g.p = c->f[1];
    g.dropout = g.p > 0;
    if (mask && g.mask_kind) {
        g.mask = cr_tensor_ptr(mask);
        g.mask_es = (int)cr_dtype_size(mask->dtype);
    }
    return g;
}

static bool parallel_worth(const att_geom *g, int64_t items) {
    return items > 1 && g->B * g->H * g->Tq * g->Tk * (g->d + g->dv) >= CR_PAR_GRAIN;
}

/* The tensors of a pass: the forward's inputs and outputs, the backward's besides.
 * staged: q, k, v and dO are read through their strides along b, h, t and the last dim
 * (elements: qs, ks, vs, gs) into per-thread f32 copies of a head, as f16/bf16 inputs
 * always are (half: their dtype; the outputs are in it too, lse and D f32) and f32 ones
 * that are views (half 0: the ViT's q, k, v are views of one qkv product). Otherwise they
 * are contiguous and read in place. */
typedef struct {
    const void *q, *k, *v, *o, *lse, *go, *D;
    void *out, *lse_out, *dq, *dk, *dv;
    bool staged;
    cr_dtype half;
    int64_t qs[4], ks[4], vs[4], gs[4];
} att_bufs;

static inline float att_half_to_f32(uint16_t h, bool bf16) { return bf16 ? cr_bf16_to_f32(h) : cr_f16_to_f32(h); }

/* A [B, H, T, e] or [B, T, e] tensor's strides along b, h (0 without H), t and e. */
static void att_strides(const cr_tensor *t, int64_t s[4]) {
    const int nd = t->ndim;
    s[0] = t->stride[0], s[1] = nd == 4 ? t->stride[1] : 0, s[2] = t->stride[nd - 2], s[3] = t->stride[nd - 1];
}

/* Whether the CPU kernel reads q, k, v (of one dtype) through their strides: f16/bf16
 * always, f32 when one of them is not contiguous; the entry, its derivative and the
 * kernels decide alike from the same tensors. */
static bool att_reads_strided(const cr_tensor *q, const cr_tensor *k, const cr_tensor *v) {
    if (cr_dtype_is_half(q->dtype)) return true;
    return q->dtype == CR_DT_F32 &&
           !(cr_tensor_is_contiguous(q) && cr_tensor_is_contiguous(k) && cr_tensor_is_contiguous(v));
}

/* b's staging and the strides of q, k, v (and dO, in[go] when go > 0) of a call whose
 * inputs are read through their strides; nothing for others. */
static void att_staged_inputs(att_bufs *b, const cr_call *c, int go) {
    if (!att_reads_strided(c->in[0], c->in[1], c->in[2])) return;
    b->staged = true;
    b->half = cr_dtype_is_half(c->in[0]->dtype) ? c->in[0]->dtype : (cr_dtype)0;
    att_strides(c->in[0], b->qs), att_strides(c->in[1], b->ks), att_strides(c->in[2], b->vs);
    if (go > 0) att_strides(c->in[go], b->gs);
}
enum { ATT_PASS_FWD, ATT_PASS_KV, ATT_PASS_Q, ATT_PASS_HEAD };

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
/* acc = A[6, K] B[K, nr] for f32 (A's rows of stride lda, B's of ldb): C's block in twelve
 * accumulators (two vectors of B per row, A broadcast), fused multiply-adds along k in
 * order, the shape of BLIS's Haswell kernel. Per k: 12 FMAs against 2 loads and 6
 * broadcasts, and 12 independent chains to cover the FMA latency; the first 4 x 16
 * version had 8 chains and ran the fused op at half the plain composite's speed. A variant
 * reading A transposed (to save the backward's tile transposes) made GCC spill an
 * accumulator in the loop and was slower than the transposes. With AVX-512 the block is
 * 6 x 32 and B's columns past nr read as 0 through masked loads (B is never read past its
 * N, so any nr takes it: ATT_BLOCK_MASKED); with AVX2 it is 6 x 16, for full blocks or B
 * padded to one. */
#if defined(__AVX512F__)
typedef __m512 att_vec;
enum { ATT_VW = 16 };
typedef __mmask16 att_lanes;
#define ATT_VZERO _mm512_setzero_ps
#define ATT_VLOAD(p, m) _mm512_maskz_loadu_ps(m, p)
#define ATT_VSET1 _mm512_set1_ps
#define ATT_VFMA _mm512_fmadd_ps
#define ATT_VSTORE _mm512_storeu_ps
static inline att_lanes att_lanes_of(int n) { return n >= 16 ? (att_lanes)0xFFFF : n > 0 ? (att_lanes)((1u << n) - 1) : 0; }
#define ATT_BLOCK_MASKED 1
#else
typedef __m256 att_vec;
enum { ATT_VW = 8 };
typedef int att_lanes;
#define ATT_VZERO _mm256_setzero_ps
#define ATT_VLOAD(p, m) ((void)(m), _mm256_loadu_ps(p))
#define ATT_VSET1 _mm256_set1_ps
#define ATT_VFMA _mm256_fmadd_ps
#define ATT_VSTORE _mm256_storeu_ps
static inline att_lanes att_lanes_of(int n) { return n; }
#endif
_Static_assert(2 * ATT_VW == ATT_NR, "the block is two vectors wide");
static inline void att_block_f32(int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb, int nr,
                                 float acc[ATT_MR][ATT_NR]) {
    const att_lanes m0 = att_lanes_of(nr), m1 = att_lanes_of(nr - ATT_VW);
    att_vec c[ATT_MR][2];
    for (int r = 0; r < ATT_MR; r++) c[r][0] = c[r][1] = ATT_VZERO();
    for (int64_t k = 0; k < K; k++) {
        const att_vec b0 = ATT_VLOAD(B + k * ldb, m0), b1 = ATT_VLOAD(B + k * ldb + ATT_VW, m1);
        for (int r = 0; r < ATT_MR; r++) {
            const att_vec a = ATT_VSET1(A[r * lda + k]);
            c[r][0] = ATT_VFMA(a, b0, c[r][0]);
            c[r][1] = ATT_VFMA(a, b1, c[r][1]);
        }
    }
    for (int r = 0; r < ATT_MR; r++) {
        ATT_VSTORE(acc[r], c[r][0]);
        ATT_VSTORE(acc[r] + ATT_VW, c[r][1]);
    }
}
#define ATT_BLOCK_F32 att_block_f32
#endif

#if defined(__AVX2__)
#include <immintrin.h>
/* dst[c][r] = src[r][c] for one 8 x 8 block of f32 (rows of stride lds and ldd): the
 * usual unpack / shuffle / lane-permute sequence, moves only, so the same bits as the
 * scalar loop. Done a float at a time, the transposes were the hottest code of the op
 * outside its tile products (perf, forward+backward at ViT shapes). */
static inline void att_transpose8_f32(const float *src, int64_t lds, float *dst, int64_t ldd) {
    __m256 r0 = _mm256_loadu_ps(src), r1 = _mm256_loadu_ps(src + lds), r2 = _mm256_loadu_ps(src + 2 * lds),
           r3 = _mm256_loadu_ps(src + 3 * lds), r4 = _mm256_loadu_ps(src + 4 * lds),
           r5 = _mm256_loadu_ps(src + 5 * lds), r6 = _mm256_loadu_ps(src + 6 * lds),
           r7 = _mm256_loadu_ps(src + 7 * lds);
    __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1), t2 = _mm256_unpacklo_ps(r2, r3),
           t3 = _mm256_unpackhi_ps(r2, r3), t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5),
           t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
    __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE),
           u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE),
           u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE),
           u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    _mm256_storeu_ps(dst, _mm256_permute2f128_ps(u0, u4, 0x20));
    _mm256_storeu_ps(dst + ldd, _mm256_permute2f128_ps(u1, u5, 0x20));
    _mm256_storeu_ps(dst + 2 * ldd, _mm256_permute2f128_ps(u2, u6, 0x20));
    _mm256_storeu_ps(dst + 3 * ldd, _mm256_permute2f128_ps(u3, u7, 0x20));
    _mm256_storeu_ps(dst + 4 * ldd, _mm256_permute2f128_ps(u0, u4, 0x31));
    _mm256_storeu_ps(dst + 5 * ldd, _mm256_permute2f128_ps(u1, u5, 0x31));
    _mm256_storeu_ps(dst + 6 * ldd, _mm256_permute2f128_ps(u2, u6, 0x31));
    _mm256_storeu_ps(dst + 7 * ldd, _mm256_permute2f128_ps(u3, u7, 0x31));
}
#endif

/* f32 exp through cr_expf_fast, so the loops vectorise; exactly 0 at -inf (masked). */
static inline float att_expf(float x) { return x == -INFINITY ? 0.0f : cr_expf_fast(x); }

#define ATT_T float
#define ATT_SUF_F64 0
#define ATT_EXP att_expf
#define ATT_LOG logf
#ifdef ATT_BLOCK_F32
#define ATT_BLOCK ATT_BLOCK_F32
#endif
#if defined(__AVX2__)
#define ATT_TRANSPOSE8 att_transpose8_f32
#endif
#include "attention_tile.h"
#undef ATT_BLOCK
#undef ATT_BLOCK_MASKED
#undef ATT_TRANSPOSE8
#undef ATT_T
#undef ATT_SUF_F64
#undef ATT_EXP
#undef ATT_LOG
#define ATT_T double
#define ATT_SUF_F64 1
#define ATT_EXP exp
#define ATT_LOG log
#include "attention_tile.h"
#undef ATT_T
#undef ATT_SUF_F64
#undef ATT_EXP
#undef ATT_LOG

static bool run_pass(const att_geom *g, int pass, const att_bufs *b, bool f32) {
    return f32 ? att_run_f32(g, pass, b) : att_run_f64(g, pass, b);
}

/* in: q [N, Tq, d], k [N, Tk, d], v [N, Tk, dv] (one float dtype; contiguous unless
 * read strided: att_reads_strided), mask?; out: o [N, Tq, dv] (q's dtype), lse [N Tq]
 * (f32, f64 for f64). */
cr_status cr_cpu_attention(cr_call *c) {
    att_geom g = geometry(c, c->in[3]);
    att_bufs b = {.q = cr_tensor_ptr(c->in[0]), .k = cr_tensor_ptr(c->in[1]), .v = cr_tensor_ptr(c->in[2]),
                  .out = cr_tensor_ptr(c->out[0]), .lse_out = cr_tensor_ptr(c->out[1])};
    att_staged_inputs(&b, c, 0);
    if (!run_pass(&g, ATT_PASS_FWD, &b, c->in[0]->dtype != CR_DT_F64))
        return cr_fail(CR_ERR_OOM, "attention: out of memory for the threads' scratch tiles");
    return CR_OK;
}

/* D_i = dO_i . O_i of a staged dO (any strides) and O (contiguous), summed in f32. */
static void att_row_dots_staged(const att_geom *g, const att_bufs *b, float *D, bool par) {
    const bool bf16 = b->half == CR_DT_BF16;
    const int64_t rows = g->B * g->H * g->Tq, dv = g->dv;
#pragma omp parallel for if (par) schedule(static)
    for (int64_t i = 0; i < rows; i++) {
        const int64_t n = i / g->Tq, t = i % g->Tq;
        const int64_t off = (n / g->H) * b->gs[0] + (n % g->H) * b->gs[1] + t * b->gs[2];
        float s = 0;
        if (!b->half) {
            const float *go = (const float *)b->go + off, *o = (const float *)b->o + i * dv;
            for (int64_t e = 0; e < dv; e++) s += go[e * b->gs[3]] * o[e];
            D[i] = s;
            continue;
        }
        const uint16_t *go = (const uint16_t *)b->go + off;
        const uint16_t *o = (const uint16_t *)b->o + i * dv;
        if (bf16 && b->gs[3] == 1) {
#pragma omp simd reduction(+ : s)
            for (int64_t e = 0; e < dv; e++) s += cr_bf16_to_f32(go[e]) * cr_bf16_to_f32(o[e]);
        } else {
            for (int64_t e = 0; e < dv; e++) s += att_half_to_f32(go[e * b->gs[3]], bf16) * att_half_to_f32(o[e], bf16);
        }
        D[i] = s;
    }
}

/* in: q, k, v, o, lse, dO (contiguous unless read strided), mask?; out: dq?, dk?, dv? (the
 * inputs' dtype); the forward's i[], f[]. */
cr_status cr_cpu_attention_backward(cr_call *c) {
    att_geom g = geometry(c, c->in[6]);
    const int64_t rows = g.B * g.H * g.Tq;
    const bool f32 = c->in[0]->dtype != CR_DT_F64;
    void *D = malloc((size_t)(rows > 0 ? rows : 1) * (f32 ? sizeof(float) : sizeof(double)));
    if (!D) return cr_fail(CR_ERR_OOM, "attention backward: out of memory for %lld row terms", (long long)rows);
    att_bufs b = {.q = cr_tensor_ptr(c->in[0]), .k = cr_tensor_ptr(c->in[1]), .v = cr_tensor_ptr(c->in[2]),
                  .o = cr_tensor_ptr(c->in[3]), .lse = cr_tensor_ptr(c->in[4]), .go = cr_tensor_ptr(c->in[5]),
                  .D = D, .dq = c->out[0] ? cr_tensor_ptr(c->out[0]) : NULL,
                  .dk = c->out[1] ? cr_tensor_ptr(c->out[1]) : NULL, .dv = c->out[2] ? cr_tensor_ptr(c->out[2]) : NULL};
    const bool par = rows * g.dv >= CR_PAR_GRAIN;
    att_staged_inputs(&b, c, 5);
    if (b.staged) att_row_dots_staged(&g, &b, D, par);
    else if (f32) att_row_dots_f32(b.go, b.o, D, rows, g.dv, par);
    else att_row_dots_f64(b.go, b.o, D, rows, g.dv, par);
    /* a head per work item where the heads keep every thread busy (one pass, each tile's
     * scores once); else key blocks, then query blocks */
    bool ok;
    if (g.B * g.H >= 4 * (int64_t)omp_get_max_threads()) {
        ok = run_pass(&g, ATT_PASS_HEAD, &b, f32);
    } else {
        ok = (!b.dk && !b.dv) || run_pass(&g, ATT_PASS_KV, &b, f32);
        ok = ok && (!b.dq || run_pass(&g, ATT_PASS_Q, &b, f32));
    }
    free(D);
    if (!ok) return cr_fail(CR_ERR_OOM, "attention backward: out of memory for the threads' scratch tiles");
    return CR_OK;
}

/* ---- entry and derivative ---------------------------------------------------------------- */

/* q [..., Tq, d], k [..., Tk, d], v [..., Tk, dv] with the same 1 or 2 leading dims. */
static cr_status check_qkv(const cr_tensor *q, const cr_tensor *k, const cr_tensor *v) {
    char a[160], b[160], e[160];
    cr_status st;
    if ((st = cr_check_float("attention", q, "query")) || (st = cr_check_float("attention", k, "key")) ||
        (st = cr_check_float("attention", v, "value")) || (st = cr_check_same_device("attention", q, k)) ||
        (st = cr_check_same_device("attention", q, v)))
        return st;
    if (q->dtype != k->dtype || q->dtype != v->dtype)
        return cr_fail(CR_ERR_ARG, "attention: query, key and value are %s, %s and %s; give the three "
                       "the same dtype", cr_dtype_name(q->dtype), cr_dtype_name(k->dtype), cr_dtype_name(v->dtype));
    bool ok = (q->ndim == 3 || q->ndim == 4) && k->ndim == q->ndim && v->ndim == q->ndim;
    const int nd = q->ndim;
    for (int i = 0; ok && i < nd - 2; i++) ok = k->shape[i] == q->shape[i] && v->shape[i] == q->shape[i];
    ok = ok && k->shape[nd - 1] == q->shape[nd - 1] && v->shape[nd - 2] == k->shape[nd - 2];
    if (!ok)
        return cr_fail(CR_ERR_ARG, "attention: query %s, key %s and value %s do not fit; pass query [B, H, Tq, d], "
                       "key [B, H, Tk, d] and value [B, H, Tk, dv] (or the same without H)",
                       cr_shape_str(q, a, sizeof a), cr_shape_str(k, b, sizeof b), cr_shape_str(v, e, sizeof e));
    return CR_OK;
}

/* The mask as a view of shape [..., Tq, Tk] (its broadcast dims stride 0), in the compute
 * dtype when additive; its kind and strides go into the call. */
static cr_status mask_view(cr_call *c, cr_tensor **view, cr_tensor *mask, const cr_tensor *q, int64_t Tk, cr_dtype dt) {
    char a[160], b[160];
    const int nd = q->ndim;
    int64_t full[4];
    for (int i = 0; i < nd - 1; i++) full[i] = q->shape[i];
    full[nd - 1] = Tk;
    bool ok = mask->ndim <= nd;
    for (int i = 0; ok && i < mask->ndim; i++) {
        int64_t m = mask->shape[mask->ndim - 1 - i], f = full[nd - 1 - i];
        ok = m == f || m == 1;
    }
    if (!ok)
        return cr_fail(CR_ERR_ARG, "attention: the mask %s does not broadcast to the weights' shape %s; pass a "
                       "mask of [Tq, Tk], [B, 1, Tq, Tk], [B, 1, 1, Tk] or another shape that broadcasts",
                       cr_shape_str(mask, a, sizeof a), cr_dims_str(nd, full, b, sizeof b));
    if (mask->requires_grad)
        return cr_fail(CR_ERR_ARG, "attention: the mask requires grad, but no gradient flows to it; pass "
                       "mask:detach()");
    cr_tensor *cast = NULL;
    cr_status st;
    if (mask->dtype == CR_DT_BOOL || mask->dtype == CR_DT_U8) {
        c->i[7] = ATT_MASK_BOOL;
        cr_tensor_retain(mask);
        cast = mask;
    } else if (cr_dtype_is_float(mask->dtype)) {
        c->i[7] = ATT_MASK_ADD;
        if ((st = cr_cast_if_needed(&cast, mask, dt))) return st;
    } else {
        return cr_fail(CR_ERR_ARG, "attention: the mask is %s; pass a bool mask (true: attend) or a float "
                       "mask added to the scores", cr_dtype_name(mask->dtype));
    }
    st = cr_op_expand(view, cast, nd, full);
    cr_tensor_free(cast);
    if (st) return st;
    const int64_t *s = (*view)->stride;
    c->i[8] = s[0];
    c->i[9] = nd == 4 ? s[1] : 0;
    c->i[10] = s[nd - 2];
    c->i[11] = s[nd - 1];
    return CR_OK;
}

cr_status cr_op_attention(cr_tensor **out, cr_tensor *q, cr_tensor *k, cr_tensor *v, cr_tensor *mask, bool causal,
                          double scale, double dropout_p) {
    *out = NULL;
    CR_CHECK_TENSOR("attention", q, "query");
    CR_CHECK_TENSOR("attention", k, "key");
    CR_CHECK_TENSOR("attention", v, "value");
    if (mask) CR_CHECK_TENSOR("attention", mask, "mask");
    cr_status st = check_qkv(q, k, v);
    if (st) return st;
    const int nd = q->ndim;
    const int64_t Tq = q->shape[nd - 2], Tk = k->shape[nd - 2], d = q->shape[nd - 1], dv = v->shape[nd - 1];
    if (scale == 0) scale = d > 0 ? 1.0 / sqrt((double)d) : 1.0;
    if (!isfinite(scale))
        return cr_fail(CR_ERR_ARG, "attention: scale = %g; pass a finite scale (0 for 1/sqrt(d))", scale);
    if (!(dropout_p >= 0 && dropout_p < 1))
        return cr_fail(CR_ERR_ARG, "attention: dropout p = %g is outside [0, 1); pass the probability of "
                       "zeroing a weight", dropout_p);
    const cr_dtype dt = q->dtype == CR_DT_F64 ? CR_DT_F64 : CR_DT_F32;
    /* the CPU kernel takes f16/bf16, and f32 views, in any strides (att_bufs); the GPU's,
     * f32 contiguous */
    const bool strided_io = cr_tensor_on_cpu(q) && att_reads_strided(q, k, v);
    cr_tensor *cast[3] = {NULL, NULL, NULL}, *cont[3] = {NULL, NULL, NULL}, *mv = NULL;
    cr_tensor *src[3] = {q, k, v};
    cr_call c;
    memset(&c, 0, sizeof c);
    for (int t = 0; t < 3; t++) {
        if (strided_io) st = cr_cast_if_needed(&cont[t], src[t], q->dtype); /* a new reference */
        else if (!(st = cr_cast_if_needed(&cast[t], src[t], dt))) st = cr_op_contiguous(&cont[t], cast[t]);
        if (st) goto done;
    }
    if ((st = cr_call_init(&c, CR_OP_ATTENTION, 4, 2))) goto done;
    if (mask && (st = mask_view(&c, &mv, mask, q, Tk, dt))) goto done;
    const int64_t B = q->shape[0], H = nd == 4 ? q->shape[1] : 1;
    c.in[0] = cont[0], c.in[1] = cont[1], c.in[2] = cont[2], c.in[3] = mv;
    c.i[0] = B, c.i[1] = H, c.i[2] = Tq, c.i[3] = Tk, c.i[4] = d, c.i[5] = dv, c.i[6] = causal;
    c.f[0] = scale;
    c.f[1] = dropout_p;
    int64_t oshape[4], rows = B * H * Tq;
    memcpy(oshape, q->shape, sizeof(int64_t) * (size_t)nd);
    oshape[nd - 1] = dv;
    if ((st = cr_tensor_alloc(&c.out[0], nd, oshape, strided_io ? q->dtype : dt, cr_tensor_dev(q))) ||
        (st = cr_tensor_alloc(&c.out[1], 1, &rows, dt, cr_tensor_dev(q))))
        goto done;
    cr_philox_stream rs = {0, 0};
    if (dropout_p > 0) {
        rs = cr_rng_reserve(rows * Tk);
        c.i[12] = (int64_t)rs.seed;
        c.i[13] = (int64_t)rs.counter;
    }
    if ((st = cr_call_finish(NULL, &c, 1u | 2u | 4u | (mv ? 8u : 0u), 1u | 2u)) && dropout_p > 0) cr_rng_give_back(rs);
done:
    for (int t = 0; t < 3; t++) {
        cr_tensor_free(cast[t]);
        cr_tensor_free(cont[t]);
    }
    cr_tensor_free(mv);
    if (st) {
        cr_call_drop_outs(&c);
        return st;
    }
    cr_tensor_free(c.out[1]);
    if (q->dtype != c.out[0]->dtype) {
        st = cr_op_to(out, c.out[0], q->dtype);
        cr_tensor_free(c.out[0]);
        return st;
    }
    *out = c.out[0];
    return CR_OK;
}

cr_status cr_grad_attention(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    bool need[3];
    for (int k = 0; k < 3; k++) need[k] = n->edges[k].node != NULL;
    if (!need[0] && !need[1] && !need[2]) return CR_OK;
    cr_tensor *t[3], *mask = NULL, *o, *lse, *g = NULL;
    cr_status st;
    for (int k = 0; k < 3; k++)
        if ((st = cr_saved_in(n, k, &t[k]))) return st;
    if (n->call.i[7] && (st = cr_saved_in(n, 3, &mask))) return st;
    if ((st = cr_saved_out(n, 0, &o)) || (st = cr_saved_out(n, 1, &lse))) return st;
    /* inputs read strided on the CPU: dO in their dtype, any strides; else contiguous */
    if (cr_tensor_on_cpu(t[0]) && att_reads_strided(t[0], t[1], t[2]))
        st = cr_cast_if_needed(&g, gout[0], t[0]->dtype);
    else st = cr_op_contiguous(&g, gout[0]);
    if (st) return st;
    cr_call c;
    if ((st = cr_call_init(&c, CR_OP_ATTENTION_BACKWARD, 7, 3))) goto done;
    c.in[0] = t[0], c.in[1] = t[1], c.in[2] = t[2], c.in[3] = o, c.in[4] = lse, c.in[5] = g, c.in[6] = mask;
    memcpy(c.i, n->call.i, sizeof c.i);
    memcpy(c.f, n->call.f, sizeof c.f);
    for (int k = 0; k < 3; k++)
        if (need[k] && (st = cr_tensor_alloc(&c.out[k], t[k]->ndim, t[k]->shape, t[k]->dtype, cr_tensor_dev(t[k]))))
            goto done;
    if ((st = cr_dispatch(&c))) goto done;
    for (int k = 0; k < 3; k++) {
        gin[k] = c.out[k];
        c.out[k] = NULL;
    }
done:
    cr_call_drop_outs(&c);
    cr_call_release_ins(&c);
    cr_tensor_free(g);
    return st;
}
