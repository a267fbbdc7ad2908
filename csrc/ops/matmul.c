/* matmul.c — matrix products: mm, bmm and addmm (kernels, checks, derivative rules) and
 * the composites matmul and linear, which are built from them and from views so that
 * autograd needs nothing more. The reference kernel is a cache-blocked loop; the f32
 * fast path is oneDNN (matmul_dnnl.c), which reads transposed and strided views in place.
 * bf16 operands multiply natively where the CPU has AVX512-BF16 (f32 accumulation; what
 * oneDNN declines runs on f32 copies); other half operands are converted to f32 (recorded
 * casts) and the result back. */
#include "elementwise_impl.h"
#include "matmul_impl.h"

/* ---- the reference kernel ---------------------------------------------------------
 * For each (k-block, column-block) a panel of b is packed contiguously, then every row
 * of c accumulates a[i, kk] * panel[kk, :] in increasing kk: the inner loop is
 * contiguous and vectorises whatever b's strides are, and each element's sum runs over
 * k in order, so results do not depend on the thread count. */
enum { GEMM_KB = 128, GEMM_JB = 512 };

#define GEMM_REF_BODY(T)                                                             \
    do {                                                                             \
        const T *A = (const T *)a;                                                   \
        const T *B = (const T *)b;                                                   \
        T *Cm = (T *)c;                                                              \
        T *panel = (T *)buf;                                                         \
        const T alpha = (T)g->alpha;                                                 \
        if (!g->accumulate)                                                          \
            for (int64_t i = 0; i < n * m; i++) Cm[i] = 0;                           \
        for (int64_t k0 = 0; k0 < K; k0 += GEMM_KB) {                                \
            int64_t kb = K - k0 < GEMM_KB ? K - k0 : GEMM_KB;                        \
            for (int64_t j0 = 0; j0 < m; j0 += GEMM_JB) {                            \
                int64_t jb = m - j0 < GEMM_JB ? m - j0 : GEMM_JB;                    \
                for (int64_t kk = 0; kk < kb; kk++)                                  \
                    for (int64_t jj = 0; jj < jb; jj++)                              \
                        panel[kk * jb + jj] = B[(k0 + kk) * sb1 + (j0 + jj) * sb2];  \
                _Pragma("omp parallel for schedule(static) if (par)")                \
                for (int64_t i = 0; i < n; i++) {                                    \
                    T *crow = Cm + i * m + j0;                                       \
                    const T *arow = A + i * sa1 + k0 * sa2;                          \
                    for (int64_t kk = 0; kk < kb; kk++) {                            \
                        const T aik = alpha * arow[kk * sa2];                        \
                        const T *prow = panel + kk * jb;                             \
                        for (int64_t jj = 0; jj < jb; jj++) crow[jj] += aik * prow[jj]; \
                    }                                                                \
                }                                                                    \
            }                                                                        \
        }                                                                            \
    } while (0)

/* One [n, k] @ [k, m] product into contiguous c; buf holds one panel of b. */
static void gemm_ref_f32(const cr_gemm *g, const char *a, const char *b, char *c, void *buf,
                         bool par) {
    const int64_t n = g->n, K = g->k, m = g->m;
    const int64_t sa1 = g->sa[1], sa2 = g->sa[2], sb1 = g->sb[1], sb2 = g->sb[2];
    GEMM_REF_BODY(float);
}
static void gemm_ref_f64(const cr_gemm *g, const char *a, const char *b, char *c, void *buf,
                         bool par) {
    const int64_t n = g->n, K = g->k, m = g->m;
    const int64_t sa1 = g->sa[1], sa2 = g->sa[2], sb1 = g->sb[1], sb2 = g->sb[2];
    GEMM_REF_BODY(double);
}

static void gemm_ref_one(const cr_gemm *g, int64_t p, void *buf, bool par) {
    size_t es = cr_dtype_size(g->dt);
    const char *a = g->a + p * g->sa[0] * (int64_t)es;
    const char *b = g->b + p * g->sb[0] * (int64_t)es;
    char *c = g->c + p * g->n * g->m * (int64_t)es;
    if (g->dt == CR_DT_F32) gemm_ref_f32(g, a, b, c, buf, par);
    else gemm_ref_f64(g, a, b, c, buf, par);
}

/* Many small matrices run one per thread; otherwise rows are split among threads. */
static cr_status gemm_reference(const cr_gemm *g) {
    CR_ASSERT(g->dt == CR_DT_F32 || g->dt == CR_DT_F64);
    int64_t kb = g->k < GEMM_KB ? g->k : GEMM_KB, jb = g->m < GEMM_JB ? g->m : GEMM_JB;
    size_t bytes = (size_t)(kb * jb) * cr_dtype_size(g->dt); /* one packed panel */
    double work = (double)g->n * (double)g->k * (double)g->m;
    int nt = cr_threads();
    bool over_batch = g->batch >= nt && nt > 1 && work * (double)g->batch > CR_PAR_GRAIN;
    if (over_batch) {
        bool oom = false;
#pragma omp parallel
        {
            void *buf = malloc(bytes);
            if (!buf) {
#pragma omp atomic write
                oom = true;
            }
#pragma omp for schedule(static)
            for (int64_t p = 0; p < g->batch; p++)
                if (buf) gemm_ref_one(g, p, buf, false);
            free(buf);
        }
        if (oom) return cr_fail(CR_ERR_OOM, "mm: out of memory for a %zu-byte panel", bytes);
        return CR_OK;
    }
    void *buf = malloc(bytes);
    if (!buf) return cr_fail(CR_ERR_OOM, "mm: out of memory for a %zu-byte panel", bytes);
    bool par = work > CR_PAR_GRAIN && g->n > 1;
    for (int64_t p = 0; p < g->batch; p++) gemm_ref_one(g, p, buf, par);
    free(buf);
    return CR_OK;
}

/* ---- the shared kernel body -------------------------------------------------------- */

#ifdef CR_HAVE_DNNL
/* Strides of a [rows, cols] matrix normalised so size-1 dims do not spoil the layout
 * test: oneDNN takes row-major or column-major matrices with any leading dimension. */
static bool plain_layout(int64_t rows, int64_t cols, int64_t *s0, int64_t *s1) {
    if ((cols == 1 || *s1 == 1) && (rows == 1 || *s0 >= cols)) {
        *s0 = rows == 1 ? cols : *s0;
        *s1 = 1;
        return true;
    }
    if ((rows == 1 || *s0 == 1) && (cols == 1 || *s1 >= rows)) {
        *s1 = cols == 1 ? rows : *s1;
        *s0 = 1;
        return true;
    }
    return false;
}

/* Fills a [rows, cols] operand's strides into s {batch, row, col} for the fast path and
 * says whether oneDNN can read it in place (plain matrices, batches that do not overlap
 * or are one shared matrix). */
static bool dnnl_operand(const cr_tensor *t, bool batched, int64_t batch, int64_t *s) {
    int o = batched ? 1 : 0;
    int64_t rows = t->shape[o], cols = t->shape[o + 1];
    s[0] = batched ? t->stride[0] : 0;
    s[1] = t->stride[o];
    s[2] = t->stride[o + 1];
    if (!plain_layout(rows, cols, &s[1], &s[2])) return false;
    if (batch <= 1 || s[0] == 0) return true;
    int64_t extent = (rows - 1) * s[1] + (cols - 1) * s[2] + 1;
    return s[0] >= extent;
}
#endif

/* out = beta * bias + alpha * (a @ b) for [n,k]@[k,m] (batched: [B,n,k]@[B,k,m]); bias
 * may be NULL (then beta is unused). out is a fresh contiguous tensor. A bf16 product
 * oneDNN does not take returns CR_ERR_UNSUPPORTED without a message (see gemm_kernel). */
static cr_status run_gemm(cr_tensor *out, cr_tensor *a, cr_tensor *b, bool batched,
                          cr_tensor *bias, double beta, double alpha) {
    int o = batched ? 1 : 0;
    cr_gemm g;
    memset(&g, 0, sizeof g);
    g.dt = out->dtype;
    g.batch = batched ? out->shape[0] : 1;
    g.n = a->shape[o];
    g.k = a->shape[o + 1];
    g.m = b->shape[o + 1];
    g.alpha = alpha;
    g.c = cr_tensor_ptr(out);
    if (out->numel == 0) return CR_OK;
    size_t es = cr_dtype_size(g.dt);
    const bool half = cr_dtype_is_half(g.dt);

    /* c starts as beta * bias broadcast to [n, m] (or as the fused oneDNN bias row) */
#ifdef CR_HAVE_DNNL
    bool fast = cr_fast_paths_enabled();
#endif
    if (bias && beta != 0.0) {
        int64_t bs0 = 0, bs1 = 0;
        if (bias->ndim == 2) {
            bs0 = bias->shape[0] == 1 ? 0 : bias->stride[0];
            bs1 = bias->shape[1] == 1 ? 0 : bias->stride[1];
        } else if (bias->ndim == 1) {
            bs1 = bias->shape[0] == 1 ? 0 : bias->stride[0];
        }
        const char *bp = cr_tensor_ptr(bias);
#ifdef CR_HAVE_DNNL
        if (fast && (g.dt == CR_DT_F32 || g.dt == CR_DT_BF16) && g.k > 0 && beta == 1.0 &&
            alpha == 1.0 && bs0 == 0 && bs1 == 1 && !batched)
            g.bias = bp;
#endif
        if (!g.bias && half) return CR_ERR_UNSUPPORTED;
        if (!g.bias) {
            for (int64_t p = 0; p < g.batch; p++)
                for (int64_t i = 0; i < g.n; i++) {
                    char *crow = g.c + (p * g.n + i) * g.m * (int64_t)es;
                    const char *brow = bp + i * bs0 * (int64_t)es;
                    if (g.dt == CR_DT_F32)
                        for (int64_t j = 0; j < g.m; j++)
                            ((float *)crow)[j] = (float)beta * ((const float *)brow)[j * bs1];
                    else
                        for (int64_t j = 0; j < g.m; j++)
                            ((double *)crow)[j] = beta * ((const double *)brow)[j * bs1];
                }
            g.accumulate = true;
        }
    }
    if (g.k == 0) { /* an empty sum: the product is zero */
        if (!g.accumulate) memset(g.c, 0, (size_t)out->numel * es);
        return CR_OK;
    }

#ifdef CR_HAVE_DNNL
    if (fast && (g.dt == CR_DT_F32 || g.dt == CR_DT_BF16)) {
        /* layouts oneDNN cannot read in place are copied once (without recording) */
        cr_tensor *ca = NULL, *cb = NULL;
        cr_status st = CR_OK;
        bool grad = cr_grad_set_enabled(false);
        if (!dnnl_operand(a, batched, g.batch, g.sa)) {
            st = cr_op_contiguous(&ca, a);
            if (!st) dnnl_operand(ca, batched, g.batch, g.sa);
        }
        if (!st && !dnnl_operand(b, batched, g.batch, g.sb)) {
            st = cr_op_contiguous(&cb, b);
            if (!st) dnnl_operand(cb, batched, g.batch, g.sb);
        }
        cr_grad_set_enabled(grad);
        if (!st) {
            g.a = cr_tensor_ptr(ca ? ca : a);
            g.b = cr_tensor_ptr(cb ? cb : b);
            st = cr_gemm_dnnl(&g);
        }
        cr_tensor_free(ca);
        cr_tensor_free(cb);
        if (st != CR_ERR_UNSUPPORTED || half) return st;
        if (g.bias) return cr_fail(CR_ERR_UNSUPPORTED, "addmm: oneDNN declined a fused bias "
                                   "(crescent bug)");
    }
#endif
    if (half) return CR_ERR_UNSUPPORTED;
    g.a = cr_tensor_ptr(a);
    g.b = cr_tensor_ptr(b);
    g.sa[0] = batched ? a->stride[0] : 0;
    g.sa[1] = a->stride[o];
    g.sa[2] = a->stride[o + 1];
    g.sb[0] = batched ? b->stride[0] : 0;
    g.sb[1] = b->stride[o];
    g.sb[2] = b->stride[o + 1];
    return gemm_reference(&g);
}

/* ---- argument checks ---------------------------------------------------------------- */
static cr_status check_operands(const char *op, cr_tensor *a, cr_tensor *b, const char *an,
                                const char *bn, int ndim) {
    CR_CHECK_TENSOR(op, a, an);
    CR_CHECK_TENSOR(op, b, bn);
    cr_status st;
    if ((st = cr_check_same_device(op, a, b))) return st;
    if ((st = cr_check_float(op, a, an)) || (st = cr_check_float(op, b, bn))) return st;
    char sa[160], sb[160];
    if (a->dtype != b->dtype)
        return cr_fail(CR_ERR_ARG, "%s: '%s' is %s but '%s' is %s; convert one with :to() so "
                       "both have the same dtype", op, an, cr_dtype_name(a->dtype), bn,
                       cr_dtype_name(b->dtype));
    const char *what = ndim == 2 ? "a 2-D matrix" : "a 3-D batch of matrices";
    const char *fix = ndim == 2 ? "use matmul for 1-D or batched operands"
                                : "use matmul for other ranks";
    if (a->ndim != ndim)
        return cr_fail(CR_ERR_ARG, "%s: '%s' must be %s, got shape %s; %s", op, an, what,
                       cr_shape_str(a, sa, sizeof sa), fix);
    if (b->ndim != ndim)
        return cr_fail(CR_ERR_ARG, "%s: '%s' must be %s, got shape %s; %s", op, bn, what,
                       cr_shape_str(b, sb, sizeof sb), fix);
    int o = ndim - 2;
    if (a->shape[o + 1] != b->shape[o])
        return cr_fail(CR_ERR_ARG, "%s: shapes %s and %s cannot be multiplied (%lld columns "
                       "vs %lld rows); the inner sizes must match", op,
                       cr_shape_str(a, sa, sizeof sa), cr_shape_str(b, sb, sizeof sb),
                       (long long)a->shape[o + 1], (long long)b->shape[o]);
    if (ndim == 3 && a->shape[0] != b->shape[0])
        return cr_fail(CR_ERR_ARG, "%s: batch sizes differ (%s and %s); both need the same "
                       "batch size, or use matmul to broadcast", op,
                       cr_shape_str(a, sa, sizeof sa), cr_shape_str(b, sb, sizeof sb));
    return CR_OK;
}

/* Half tensors the cpu does not multiply natively (f16; bf16 without AVX512-BF16). */
static bool half_via_f32(const cr_tensor *a) {
    return cr_dtype_is_half(a->dtype) && cr_tensor_on_cpu(a) &&
           !(a->dtype == CR_DT_BF16 && cr_cpu_bf16_native());
}

/* Half operands on the cpu: the same op on f32 copies (recorded casts), the result cast
 * back. On a GPU, cuBLAS multiplies them natively (f32 accumulation). */
static cr_status via_f32(cr_tensor **out, cr_op op, cr_tensor *bias, cr_tensor *a,
                         cr_tensor *b, double beta, double alpha) {
    cr_dtype dt = a->dtype;
    cr_tensor *fa = NULL, *fb = NULL, *fbias = NULL, *r = NULL;
    cr_status st;
    if ((st = cr_op_to(&fa, a, CR_DT_F32)) || (st = cr_op_to(&fb, b, CR_DT_F32))) goto done;
    if (bias && (st = cr_op_to(&fbias, bias, CR_DT_F32))) goto done;
    if (op == CR_OP_MM) st = cr_op_mm(&r, fa, fb);
    else if (op == CR_OP_BMM) st = cr_op_bmm(&r, fa, fb);
    else st = cr_op_addmm(&r, fbias, fa, fb, beta, alpha);
    if (!st) st = cr_op_to(out, r, dt);
done:
    cr_tensor_free(fa);
    cr_tensor_free(fb);
    cr_tensor_free(fbias);
    cr_tensor_free(r);
    return st;
}

/* Allocates the output (shape checked under the op's name), dispatches and records. */
static cr_status product_op(cr_tensor **out, cr_call *c, int ndim, const int64_t *shape) {
    cr_status st = cr_check_shape_arg(cr_op_name(c->op), ndim, shape);
    if (!st) st = cr_tensor_alloc(&c->out[0], ndim, shape, c->in[c->nin - 1]->dtype,
                                  cr_tensor_dev(c->in[c->nin - 1]));
    if (st) cr_call_drop_outs(c);
    else st = cr_call_finish(out, c, c->op == CR_OP_ADDMM ? 6u : 3u, 0);
    return st;
}

/* alpha * t as a new reference (t itself when alpha is 1). */
static cr_status scaled(cr_tensor **out, cr_tensor *t, double alpha) {
    if (alpha == 1.0) {
        cr_tensor_retain(t);
        *out = t;
        return CR_OK;
    }
    cr_tensor *s;
    cr_status st = cr_tensor_scalar(&s, alpha, t->dtype);
    if (st) return st;
    st = cr_op_mul(out, t, s);
    cr_tensor_free(s);
    return st;
}

/* x @ y, batched or not. */
static cr_status product(cr_tensor **out, bool batched, cr_tensor *x, cr_tensor *y) {
    return batched ? cr_op_bmm(out, x, y) : cr_op_mm(out, x, y);
}

/* Whether t is a transposed contiguous matrix (or batch of them), like w^T in linear. */
static bool transposed_contiguous(const cr_tensor *t, int64_t d0) {
    if (cr_tensor_is_contiguous(t)) return false;
    int64_t shape[CR_MAX_DIMS], stride[CR_MAX_DIMS];
    memcpy(shape, t->shape, sizeof shape);
    memcpy(stride, t->stride, sizeof stride);
    shape[d0] = t->shape[d0 + 1];
    shape[d0 + 1] = t->shape[d0];
    stride[d0] = t->stride[d0 + 1];
    stride[d0 + 1] = t->stride[d0];
    int64_t expect = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (shape[d] != 1 && stride[d] != expect) return false;
        expect *= shape[d];
    }
    return true;
}

/* Grads of p = a @ b (2-D, or batched): ga = g @ b^T, gb = a^T @ g, each times alpha.
 * The transposes are views the kernels read in place. When an input is itself a
 * transposed contiguous matrix (w^T in linear), its grad is computed transposed,
 * ga = (b @ g^T)^T, so that after the transpose's own backward the leaf's grad is
 * contiguous, as PyTorch does. */
static cr_status product_grads(cr_node *n, int ia, cr_tensor *g, double alpha,
                               cr_tensor **gin) {
    bool batched = n->call.op == CR_OP_BMM;
    int64_t d0 = batched ? 1 : 0;
    cr_tensor *ab[2], *t = NULL, *q = NULL, *p = NULL;
    cr_status st;
    if ((st = cr_saved_in(n, ia, &ab[0])) || (st = cr_saved_in(n, ia + 1, &ab[1]))) return st;
    for (int which = 0; which < 2; which++) {
        if (!n->edges[ia + which].node) continue;
        cr_tensor *other = ab[1 - which];
        if (transposed_contiguous(ab[which], d0)) {
            if ((st = cr_op_transpose(&t, g, d0, d0 + 1))) return st;
            st = which == 0 ? product(&q, batched, other, t) : product(&q, batched, t, other);
            if (!st) st = cr_op_transpose(&p, q, d0, d0 + 1);
            cr_tensor_free(q);
        } else {
            if ((st = cr_op_transpose(&t, other, d0, d0 + 1))) return st;
            st = which == 0 ? product(&p, batched, g, t) : product(&p, batched, t, g);
        }
        cr_tensor_free(t);
        if (!st) st = scaled(&gin[ia + which], p, alpha);
        cr_tensor_free(p);
        p = NULL;
        if (st) return st;
    }
    return CR_OK;
}

/* ---- mm ---- */
/* A kernel's result, or its run on f32 copies where a bf16 product was declined. */
static cr_status gemm_kernel(cr_call *c, cr_kernel_fn self, cr_status st) {
    if (st == CR_ERR_UNSUPPORTED && cr_dtype_is_half(c->out[0]->dtype)) return cr_call_via_f32(c, self);
    return st;
}

cr_status cr_cpu_mm(cr_call *c) {
    return gemm_kernel(c, cr_cpu_mm, run_gemm(c->out[0], c->in[0], c->in[1], false, NULL, 0, 1));
}
static cr_status mm_entry(cr_tensor **out, cr_tensor *a, cr_tensor *b) {
    *out = NULL;
    cr_status st = check_operands("mm", a, b, "self", "mat2", 2);
    if (st) return st;
    if (half_via_f32(a)) return via_f32(out, CR_OP_MM, NULL, a, b, 0, 1);
    cr_call c;
    cr_call_init(&c, CR_OP_MM, 2, 1);
    c.in[0] = a;
    c.in[1] = b;
    int64_t shape[2] = {a->shape[0], b->shape[1]};
    return product_op(out, &c, 2, shape);
}

cr_status cr_op_mm(cr_tensor **out, cr_tensor *a, cr_tensor *b) {
    if (cr_autocast_get() == CR_DT_F32) return mm_entry(out, a, b);
    cr_autocast_scope s;
    cr_status st = cr_autocast_begin(&s, CR_OP_MM, a, b, NULL);
    if (!st) st = mm_entry(out, s.t[0], s.t[1]);
    cr_autocast_end(&s);
    return st;
}
cr_status cr_grad_mm(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    return product_grads(n, 0, gout[0], 1.0, gin);
}

/* ---- bmm ---- */
cr_status cr_cpu_bmm(cr_call *c) {
    return gemm_kernel(c, cr_cpu_bmm, run_gemm(c->out[0], c->in[0], c->in[1], true, NULL, 0, 1));
}
static cr_status bmm_entry(cr_tensor **out, cr_tensor *a, cr_tensor *b) {
    *out = NULL;
    cr_status st = check_operands("bmm", a, b, "self", "mat2", 3);
    if (st) return st;
    if (half_via_f32(a)) return via_f32(out, CR_OP_BMM, NULL, a, b, 0, 1);
    cr_call c;
    cr_call_init(&c, CR_OP_BMM, 2, 1);
    c.in[0] = a;
    c.in[1] = b;
    int64_t shape[3] = {a->shape[0], a->shape[1], b->shape[2]};
    return product_op(out, &c, 3, shape);
}

cr_status cr_op_bmm(cr_tensor **out, cr_tensor *a, cr_tensor *b) {
    if (cr_autocast_get() == CR_DT_F32) return bmm_entry(out, a, b);
    cr_autocast_scope s;
    cr_status st = cr_autocast_begin(&s, CR_OP_BMM, a, b, NULL);
    if (!st) st = bmm_entry(out, s.t[0], s.t[1]);
    cr_autocast_end(&s);
    return st;
}
cr_status cr_grad_bmm(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    return product_grads(n, 0, gout[0], 1.0, gin);
}

/* ---- addmm ---- */
cr_status cr_cpu_addmm(cr_call *c) {
    return gemm_kernel(c, cr_cpu_addmm,
                       run_gemm(c->out[0], c->in[1], c->in[2], false, c->in[0], c->f[0], c->f[1]));
}
static cr_status addmm_entry(cr_tensor **out, cr_tensor *bias, cr_tensor *a, cr_tensor *b,
                      double beta, double alpha) {
    *out = NULL;
    cr_status st = check_operands("addmm", a, b, "mat1", "mat2", 2);
    if (st) return st;
    CR_CHECK_TENSOR("addmm", bias, "self");
    if ((st = cr_check_same_device("addmm", bias, a))) return st;
    if (bias->dtype != a->dtype)
        return cr_fail(CR_ERR_ARG, "addmm: bias is %s but the matrices are %s; convert it "
                       "with :to()", cr_dtype_name(bias->dtype), cr_dtype_name(a->dtype));
    int64_t n = a->shape[0], m = b->shape[1];
    int64_t bn = bias->ndim == 2 ? bias->shape[0] : 1;
    int64_t bm = bias->ndim >= 1 ? bias->shape[bias->ndim - 1] : 1;
    if (bias->ndim > 2 || (bn != 1 && bn != n) || (bm != 1 && bm != m)) {
        char s[160];
        return cr_fail(CR_ERR_ARG, "addmm: bias of shape %s does not broadcast to the result "
                       "[%lld, %lld]; give a bias of shape [%lld], [1, %lld] or [%lld, %lld]",
                       cr_shape_str(bias, s, sizeof s), (long long)n, (long long)m,
                       (long long)m, (long long)m, (long long)n, (long long)m);
    }
    if (beta != beta || alpha != alpha)
        return cr_fail(CR_ERR_ARG, "addmm: beta and alpha must be numbers (got NaN)");
    if (half_via_f32(a)) return via_f32(out, CR_OP_ADDMM, bias, a, b, beta, alpha);
    cr_call c;
    cr_call_init(&c, CR_OP_ADDMM, 3, 1);
    c.in[0] = bias;
    c.in[1] = a;
    c.in[2] = b;
    c.f[0] = beta;
    c.f[1] = alpha;
    int64_t shape[2] = {n, m};
    return product_op(out, &c, 2, shape);
}

cr_status cr_op_addmm(cr_tensor **out, cr_tensor *bias, cr_tensor *a, cr_tensor *b,
                      double beta, double alpha) {
    if (cr_autocast_get() == CR_DT_F32) return addmm_entry(out, bias, a, b, beta, alpha);
    cr_autocast_scope s;
    cr_status st = cr_autocast_begin(&s, CR_OP_ADDMM, bias, a, b);
    if (!st) st = addmm_entry(out, s.t[0], s.t[1], s.t[2], beta, alpha);
    cr_autocast_end(&s);
    return st;
}
/* d(beta*bias + alpha*a@b): beta * g summed to bias's shape, then alpha times mm's. */
cr_status cr_grad_addmm(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    double beta = n->call.f[0], alpha = n->call.f[1];
    cr_status st;
    if (n->edges[0].node) {
        cr_tensor *s;
        if ((st = cr_sum_to_shape(&s, gout[0], n->in_meta[0].ndim, n->in_meta[0].shape)))
            return st;
        st = scaled(&gin[0], s, beta);
        cr_tensor_free(s);
        if (st) return st;
    }
    return product_grads(n, 1, gout[0], alpha, gin);
}

/* ---- matmul: composite --------------------------------------------------------------- */

cr_status cr_op_matmul(cr_tensor **out, cr_tensor *a, cr_tensor *b) {
    *out = NULL;
    CR_CHECK_TENSOR("matmul", a, "self");
    CR_CHECK_TENSOR("matmul", b, "other");
    cr_status st;
    if ((st = cr_check_same_device("matmul", a, b))) return st;
    if ((st = cr_check_float("matmul", a, "self")) || (st = cr_check_float("matmul", b, "other")))
        return st;
    char sa[160], sb[160];
    int da = a->ndim, db = b->ndim;
    if (da == 0 || db == 0)
        return cr_fail(CR_ERR_ARG, "matmul: both arguments need at least 1 dim (got shapes %s "
                       "and %s); use mul to multiply by a scalar",
                       cr_shape_str(a, sa, sizeof sa), cr_shape_str(b, sb, sizeof sb));
    if (a->dtype != b->dtype)
        return cr_fail(CR_ERR_ARG, "matmul: 'self' is %s but 'other' is %s; convert one with "
                       ":to() so both have the same dtype", cr_dtype_name(a->dtype),
                       cr_dtype_name(b->dtype));
    int64_t k = a->shape[da - 1], kb = db == 1 ? b->shape[0] : b->shape[db - 2];
    if (k != kb)
        return cr_fail(CR_ERR_ARG, "matmul: shapes %s and %s cannot be multiplied (%lld vs "
                       "%lld); the last dim of 'self' must equal the %s dim of 'other'",
                       cr_shape_str(a, sa, sizeof sa), cr_shape_str(b, sb, sizeof sb),
                       (long long)k, (long long)kb, db == 1 ? "only" : "second-to-last");

    cr_tensor *a2 = NULL, *b2 = NULL, *r = NULL;
    int64_t shape[CR_MAX_DIMS];
    int rnd = 0; /* result dims */
    if (da <= 2 && db <= 2) {
        /* 1-D operands become a row (a) or a column (b), dropped again afterwards */
        int64_t as[2] = {1, k}, bs[2] = {k, 1};
        if (da == 2) shape[rnd++] = a->shape[0];
        if (db == 2) shape[rnd++] = b->shape[1];
        if ((st = cr_op_reshape(&a2, a, 2, da == 2 ? a->shape : as)) ||
            (st = cr_op_reshape(&b2, b, 2, db == 2 ? b->shape : bs)) || (st = cr_op_mm(&r, a2, b2)))
            goto done;
    } else if (db <= 2) {
        /* [..., n, k] @ [k, m]: fold the batch into the rows, one mm */
        int64_t m = db == 2 ? b->shape[1] : 1, flat[2] = {1, k}, bs[2] = {k, 1};
        for (int d = 0; d < da - 1; d++) {
            shape[rnd++] = a->shape[d];
            flat[0] *= a->shape[d];
        }
        if (db == 2) shape[rnd++] = m;
        if ((st = cr_op_reshape(&a2, a, 2, flat)) ||
            (st = cr_op_reshape(&b2, b, 2, db == 2 ? b->shape : bs)) || (st = cr_op_mm(&r, a2, b2)))
            goto done;
    } else {
        /* general: broadcast the batch dims, flatten them, one bmm */
        int64_t n = da == 1 ? 1 : a->shape[da - 2], m = b->shape[db - 1];
        int nba = da > 2 ? da - 2 : 0, nbb = db - 2;
        int nb = nba > nbb ? nba : nbb;
        int64_t batch[CR_MAX_DIMS], nbatch = 1;
        for (int d = 0; d < nb; d++) {
            int ia = d - (nb - nba), ib = d - (nb - nbb);
            int64_t x = ia >= 0 ? a->shape[ia] : 1, y = ib >= 0 ? b->shape[ib] : 1;
            if (x != y && x != 1 && y != 1)
                return cr_fail(CR_ERR_ARG, "matmul: batch dims of %s and %s do not broadcast "
                               "(%lld vs %lld); sizes must match or be 1",
                               cr_shape_str(a, sa, sizeof sa), cr_shape_str(b, sb, sizeof sb),
                               (long long)x, (long long)y);
            batch[d] = x == 1 ? y : x;
            nbatch *= batch[d];
            shape[rnd++] = batch[d];
        }
        if (da >= 2) shape[rnd++] = n;
        shape[rnd++] = m;
        int64_t ea[CR_MAX_DIMS], eb[CR_MAX_DIMS], fa[3] = {nbatch, n, k}, fb[3] = {nbatch, k, m};
        memcpy(ea, batch, sizeof(int64_t) * (size_t)nb);
        memcpy(eb, batch, sizeof(int64_t) * (size_t)nb);
        ea[nb] = n;
        ea[nb + 1] = k;
        eb[nb] = k;
        eb[nb + 1] = m;
        cr_tensor *xa = NULL, *xb = NULL;
        int64_t row[2] = {1, k};
        if (da == 1) {
            if ((st = cr_op_reshape(&xa, a, 2, row))) goto done;
        } else {
            cr_tensor_retain(a);
            xa = a;
        }
        st = cr_op_expand(&a2, xa, nb + 2, ea);
        cr_tensor_free(xa);
        if (st || (st = cr_op_expand(&xb, b, nb + 2, eb))) goto done;
        st = cr_op_reshape(&b2, xb, 3, fb);
        cr_tensor_free(xb);
        if (st) goto done;
        xa = a2;
        a2 = NULL;
        st = cr_op_reshape(&a2, xa, 3, fa);
        cr_tensor_free(xa);
        if (st || (st = cr_op_bmm(&r, a2, b2))) goto done;
    }
    st = cr_op_reshape(out, r, rnd, shape);
done:
    cr_tensor_free(a2);
    cr_tensor_free(b2);
    cr_tensor_free(r);
    return st;
}

/* ---- linear: composite ----------------------------------------------------------------- */
cr_status cr_op_linear(cr_tensor **out, cr_tensor *x, cr_tensor *w, cr_tensor *bias) {
    *out = NULL;
    CR_CHECK_TENSOR("linear", x, "input");
    CR_CHECK_TENSOR("linear", w, "weight");
    cr_status st;
    if (cr_autocast_get() != CR_DT_F32) { /* a composite of addmm: x, w and bias in the half dtype */
        cr_autocast_scope s;
        if (!(st = cr_autocast_begin(&s, CR_OP_ADDMM, x, w, bias)))
            st = cr_op_linear(out, s.t[0], s.t[1], s.t[2]);
        cr_autocast_end(&s);
        return st;
    }
    if ((st = cr_check_same_device("linear", x, w))) return st;
    if ((st = cr_check_float("linear", x, "input")) || (st = cr_check_float("linear", w, "weight")))
        return st;
    char sx[160], sw[160];
    if (w->ndim != 2)
        return cr_fail(CR_ERR_ARG, "linear: weight must be 2-D [out_features, in_features], "
                       "got shape %s", cr_shape_str(w, sw, sizeof sw));
    if (x->ndim == 0 || x->shape[x->ndim - 1] != w->shape[1])
        return cr_fail(CR_ERR_ARG, "linear: input of shape %s does not match weight %s; the "
                       "input's last dim must be in_features = %lld",
                       cr_shape_str(x, sx, sizeof sx), cr_shape_str(w, sw, sizeof sw),
                       (long long)w->shape[1]);
    if (x->dtype != w->dtype)
        return cr_fail(CR_ERR_ARG, "linear: input is %s but weight is %s; convert one with "
                       ":to()", cr_dtype_name(x->dtype), cr_dtype_name(w->dtype));
    if (bias) {
        if ((st = cr_check_same_device("linear", x, bias))) return st;
        if (bias->ndim != 1 || bias->shape[0] != w->shape[0])
            return cr_fail(CR_ERR_ARG, "linear: bias of shape %s does not match weight %s; "
                           "give a bias of shape [%lld] or nil", cr_shape_str(bias, sx, sizeof sx),
                           cr_shape_str(w, sw, sizeof sw), (long long)w->shape[0]);
        if (bias->dtype != x->dtype)
            return cr_fail(CR_ERR_ARG, "linear: bias is %s but input is %s; convert it with "
                           ":to()", cr_dtype_name(bias->dtype), cr_dtype_name(x->dtype));
    }
    int64_t flat[2] = {1, w->shape[1]}, shape[CR_MAX_DIMS];
    for (int d = 0; d < x->ndim - 1; d++) {
        shape[d] = x->shape[d];
        flat[0] *= x->shape[d];
    }
    shape[x->ndim - 1] = w->shape[0];
    cr_tensor *wt = NULL, *x2 = NULL, *r = NULL;
    if ((st = cr_op_transpose(&wt, w, 0, 1))) return st;
    if (x->ndim == 2) {
        cr_tensor_retain(x);
        x2 = x;
    } else if ((st = cr_op_reshape(&x2, x, 2, flat))) {
        goto done;
    }
    st = bias ? cr_op_addmm(&r, bias, x2, wt, 1.0, 1.0) : cr_op_mm(&r, x2, wt);
    if (st) goto done;
    if (x->ndim == 2) {
        *out = r;
        r = NULL;
    } else {
        st = cr_op_reshape(out, r, x->ndim, shape);
    }
done:
    cr_tensor_free(wt);
    cr_tensor_free(x2);
    cr_tensor_free(r);
    return st;
}
