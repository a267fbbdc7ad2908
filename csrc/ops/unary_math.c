/* unary_math.c — math one element at a time: abs, sign, exp, log, sqrt, rsqrt, sigmoid,
 * tanh, relu, gelu, pow_scalar, clamp, and the fused backward kernels of the
 * activations (relu, sigmoid, tanh, gelu), which their derivative rules call so that a
 * backward step is one pass over memory instead of three or four.
 *
 * f32 has two paths. The reference calls libm per element. The fast path (on unless
 * cr_set_fast_paths(false)) uses the branch-free polynomial versions below, which the
 * compiler vectorises (libm's expf and friends are opaque calls it cannot), as PyTorch
 * vectorises through Sleef. Measured against f64 over the whole range: exp and log
 * within 1.4 ulp, tanh and sigmoid 2.5, gelu's normal CDF 8 (PyTorch's erf-based gelu
 * is off by 1.5e-7 absolute, which is thousands of ulp in the left tail). Each path
 * gives the same answer for every layout. f64 and the halves (through f32) always take
 * libm. Integer inputs to float math (exp, log, sqrt, ...) become f32 first, as in
 * PyTorch. */
#include <math.h>
#include <pthread.h>
#if defined(__AVX__)
#include <immintrin.h>
#endif

#include "elementwise_impl.h"

/* The selects in the polynomials below vectorise only under -fno-trapping-math, which
 * the Makefile sets for every file (nothing in crescent reads the FP exception flags). */

/* ---- fast f32 approximations ---------------------------------------------------- */
/* Each is forced inline: called from many loops (f32 and the halves, forward and
 * backward), GCC stopped inlining fast_phif into the bf16 GELU loop, which then made a
 * call per element and ran at a tenth of the f32 loop's speed. */
#define FAST_FN static inline __attribute__((always_inline))
/* a*b + c in one rounding where the CPU has FMA: the polynomials below are chains of
 * these, and the build's -std=c11 keeps the compiler from fusing them itself (which
 * halved their speed). Every loop calls the same inlined code, so the contiguous and
 * strided paths still agree bit for bit. */
#if defined(__FMA__)
#define MADD(a, b, c) fmaf((a), (b), (c))
#else
#define MADD(a, b, c) ((a) * (b) + (c))
#endif
FAST_FN uint32_t f2u(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
FAST_FN float u2f(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* e^r * 2^k for |r| <= ln2/2: Cephes' polynomial, then 2^k applied as two factors so
 * that results down in the subnormals and up to the overflow to inf come out right
 * without branches. */
FAST_FN float exp_scaled(float r, int32_t k) {
    float p = 1.9875691500e-4f;
    p = MADD(p, r, 1.3981999507e-3f);
    p = MADD(p, r, 8.3334519073e-3f);
    p = MADD(p, r, 4.1665795894e-2f);
    p = MADD(p, r, 1.6666665459e-1f);
    p = MADD(p, r, 5.0000001201e-1f);
    float y = MADD(p * r, r, r) + 1.0f;
    int32_t k1 = k >> 1, k2 = k - k1;
    return y * u2f((uint32_t)(k1 + 127) << 23) * u2f((uint32_t)(k2 + 127) << 23);
}

/* e^x = 2^k * e^r with k = round(x/ln2); ln2 is split in two so that r = x - k*ln2 is
 * exact. NaN propagates through r. */
FAST_FN float fast_expf(float x) {
    x = x < -104.0f ? -104.0f : x; /* e^-104 rounds to 0 */
    x = x > 89.0f ? 89.0f : x;     /* e^89 overflows to inf */
    const float magic = 12582912.0f; /* 1.5*2^23: adding it rounds to an integer */
    float t = MADD(x, 1.44269504088896341f, magic);
    float k = t - magic;
    float r = MADD(k, -0.693359375f, x);
    r = MADD(k, 2.12194440e-4f, r);
    return exp_scaled(r, (int32_t)(f2u(t) - f2u(magic)));
}

/* e^(hi + lo) for hi in [-130, 0] and |lo| < 2, without rounding hi + lo: the reduction
 * works on hi, where it is exact, and lo joins the small remainder. */
FAST_FN float fast_expf_sum(float hi, float lo) {
    const float magic = 12582912.0f;
    float t = MADD(hi + lo, 1.44269504088896341f, magic);
    float k = t - magic;
    float r = MADD(k, -0.693359375f, hi);
    r = MADD(k, 2.12194440e-4f, r);
    return exp_scaled(r + lo, (int32_t)(f2u(t) - f2u(magic)));
}

/* log x = e*ln2 + log m with x = m*2^e, m in [sqrt(1/2), sqrt(2)); subnormals are scaled
 * up first. Special values are patched at the end with selects. */
FAST_FN float fast_logf(float x) {
    const int sub = x < 1.17549435e-38f;
    uint32_t u = f2u(sub ? x * 8388608.0f : x);
    int32_t e = (int32_t)((u >> 23) & 0xff) - 126 - (sub ? 23 : 0);
    float m = u2f((u & 0x007fffffu) | 0x3f000000u); /* [0.5, 1) */
    const int low = m < 0.707106781186547524f;
    e = low ? e - 1 : e;
    float f = low ? m + m - 1.0f : m - 1.0f;
    float z = f * f;
    float y = 7.0376836292e-2f;
    y = MADD(y, f, -1.1514610310e-1f);
    y = MADD(y, f, 1.1676998740e-1f);
    y = MADD(y, f, -1.2420140846e-1f);
    y = MADD(y, f, 1.4249322787e-1f);
    y = MADD(y, f, -1.6668057665e-1f);
    y = MADD(y, f, 2.0000714765e-1f);
    y = MADD(y, f, -2.4999993993e-1f);
    y = MADD(y, f, 3.3333331174e-1f);
    y = y * f * z;
    float ef = (float)e;
    y = y + ef * -2.12194440e-4f;
    y = y - 0.5f * z;
    float r = f + y;
    r = r + ef * 0.693359375f;
    r = x == 0.0f ? -INFINITY : r;
    r = x < 0.0f ? NAN : r;
    r = x == INFINITY ? x : r;
    return x != x ? x : r;
}

/* An odd polynomial near 0 (where 1 - 2/(e^2x + 1) would cancel), the exp form beyond. */
FAST_FN float fast_tanhf(float x) {
    float ax = fabsf(x), z = x * x;
    float p = -5.70498872745e-3f;
    p = MADD(p, z, 2.06390887954e-2f);
    p = MADD(p, z, -5.37397155531e-2f);
    p = MADD(p, z, 1.33314422036e-1f);
    p = MADD(p, z, -3.33332819422e-1f);
    float near0 = p * z * x + x;
    float far = copysignf(1.0f - 2.0f / (fast_expf(ax + ax) + 1.0f), x);
    return ax < 0.625f ? near0 : far;
}

FAST_FN float fast_sigmoidf(float x) { return 1.0f / (1.0f + fast_expf(-x)); }

/* sqrt or 1/sqrt over contiguous f32. GCC will not vectorise sqrtf (it may set errno),
 * so the AVX instruction is spelled out; it is correctly rounded like sqrtf, so this
 * agrees with the reference bit for bit. */
static void sqrt_f32(float *o, const float *x, int64_t n, bool recip) {
    int64_t i = 0;
#if defined(__AVX__)
    const __m256 one = _mm256_set1_ps(1.0f);
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_sqrt_ps(_mm256_loadu_ps(x + i));
        _mm256_storeu_ps(o + i, recip ? _mm256_div_ps(one, v) : v);
    }
#endif
    for (; i < n; i++) o[i] = recip ? 1.0f / sqrtf(x[i]) : sqrtf(x[i]);
}

#define SQRT1_2F 0.70710678118654752f

/* Phi(x), the standard normal CDF, as 0.5*erfc(|x|/sqrt 2) or 1 minus that. The erfc
 * is Numerical Recipes' Chebyshev fit, t*exp(-z^2 + P(t)) with relative error below
 * 1.2e-7 for any z >= 0, so the left tail keeps its relative accuracy instead of
 * cancelling in 1 + erf(x). The exponent -x^2/2 + P(t) is kept as an unrounded sum,
 * and x^2 carries its rounding error (one FMA): at x = -4 rounding either would cost
 * 15 ulp. Beyond |x| = 16, Phi is 0 or 1. */
FAST_FN float fast_phif(float x) {
    float ax = fabsf(x);
    ax = ax > 16.0f ? 16.0f : ax;
    const float t = 1.0f / MADD(0.5f * SQRT1_2F, ax, 1.0f);
    float p = 0.17087277f;
    p = MADD(p, t, -0.82215223f);
    p = MADD(p, t, 1.48851587f);
    p = MADD(p, t, -1.13520398f);
    p = MADD(p, t, 0.27886807f);
    p = MADD(p, t, -0.18628806f);
    p = MADD(p, t, 0.09678418f);
    p = MADD(p, t, 0.37409196f);
    p = MADD(p, t, 1.00002368f);
    p = MADD(p, t, -1.26551223f);
    const float xx = ax * ax;
#if defined(__FMA__)
    const float xx_err = fmaf(ax, ax, -xx);
#else
    const float xx_err = 0.0f;
#endif
    const float h = 0.5f * t * fast_expf_sum(-0.5f * xx, p - 0.5f * xx_err);
    return x < 0.0f ? h : 1.0f - h;
}

#define SQRT1_2 0.70710678118654752440
#define INV_SQRT_2PI 0.39894228040143267794 /* 1/sqrt(2*pi) */

static inline float ref_sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }
static inline double ref_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
/* Phi(x) = erfc(-x/sqrt 2)/2: no cancellation for negative x, unlike (1 + erf)/2. The
 * f32 reference computes in f64, where x/sqrt 2 rounds harmlessly. */
static inline double ref_phi(double x) { return 0.5 * erfc(-x * SQRT1_2); }
static inline float ref_phif(float x) { return (float)ref_phi(x); }
static inline float ref_geluf(float x) { return x * ref_phif(x); }
FAST_FN float fast_geluf(float x) { return x * fast_phif(x); }
static inline double ref_gelu(double x) { return x * ref_phi(x); }
/* The tanh approximation: x/2 (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), computed as
 * x sigmoid(2u) = x / (1 + exp(-2u)), the same function without 1 + tanh's cancellation
 * for negative x. */
#define GELU_TANH_K 0.79788456080286535588 /* sqrt(2/pi) */
#define GELU_TANH_C 0.044715
static inline double gelu_tanh_u2(double x) { return 2.0 * GELU_TANH_K * (x + GELU_TANH_C * x * x * x); }
static inline double ref_gelu_tanh(double x) { return x / (1.0 + exp(-gelu_tanh_u2(x))); }
static inline float ref_gelu_tanhf(float x) { return (float)ref_gelu_tanh(x); }
FAST_FN float fast_gelu_tanhf(float x) {
    return x / (1.0f + fast_expf(-2.0f * (float)GELU_TANH_K * (x + (float)GELU_TANH_C * x * x * x)));
}

/* ---- loops ------------------------------------------------------------------------
 * As CR_BIN_LOOP (elementwise_impl.h): a contiguous loop the compiler vectorises, and a strided
 * one. `x` is the input element. */
#define UN_LOOP(T, EXPR)                                                             \
    do {                                                                             \
        T *o = (T *)p[0];                                                            \
        const T *in = (const T *)p[1];                                               \
        const int64_t so = s[0] / (int64_t)sizeof(T), sx = s[1] / (int64_t)sizeof(T); \
        if (so == 1 && sx == 1) {                                                    \
            for (int64_t i = 0; i < n; i++) {                                        \
                const T x = in[i];                                                   \
                o[i] = (EXPR);                                                       \
            }                                                                        \
        } else {                                                                     \
            for (int64_t i = 0; i < n; i++) {                                        \
                const T x = in[i * sx];                                              \
                o[i * so] = (EXPR);                                                  \
            }                                                                        \
        }                                                                            \
    } while (0)

#define UN_LOOP_HALF(LOAD, STORE, EXPR)                                              \
    do {                                                                             \
        if (s[0] == 2 && s[1] == 2) { /* dense: typed, so it vectorises */           \
            uint16_t *o = (uint16_t *)p[0];                                          \
            const uint16_t *xp = (const uint16_t *)p[1];                             \
            for (int64_t i = 0; i < n; i++) {                                        \
                const float x = LOAD(xp[i]);                                         \
                o[i] = STORE(EXPR);                                                  \
            }                                                                        \
        } else {                                                                     \
            for (int64_t i = 0; i < n; i++) {                                        \
                const float x = LOAD(*(const uint16_t *)(p[1] + i * s[1]));          \
                *(uint16_t *)(p[0] + i * s[0]) = STORE(EXPR);                        \
            }                                                                        \
        }                                                                            \
    } while (0)

/* Float dtypes; f32 and the halves (computed in f32) take FAST32 or REF32 by the
 * fast-path switch (REF32's libm calls made a bf16 ViT's GELU half of its step). LOOP and
 * LOOP_HALF are the unary (UN_) or backward (BW_) loops. */
#define FLOAT_TYPES(LOOP, LOOP_HALF, FAST32, REF32, REF64)                           \
    switch (dt) {                                                                    \
    case CR_DT_F32:                                                                  \
        if (fast) LOOP(float, FAST32);                                               \
        else LOOP(float, REF32);                                                     \
        break;                                                                       \
    case CR_DT_F64: LOOP(double, REF64); break;                                      \
    case CR_DT_F16:                                                                  \
        if (fast) LOOP_HALF(cr_f16_to_f32, cr_f32_to_f16, FAST32);                   \
        else LOOP_HALF(cr_f16_to_f32, cr_f32_to_f16, REF32);                         \
        break;                                                                       \
    case CR_DT_BF16:                                                                 \
        if (fast) LOOP_HALF(cr_bf16_to_f32, cr_f32_to_bf16, FAST32);                 \
        else LOOP_HALF(cr_bf16_to_f32, cr_f32_to_bf16, REF32);                       \
        break;                                                                       \
    default: break;                                                                  \
    }
#define UN_FLOAT_TYPES(FAST32, REF32, REF64) FLOAT_TYPES(UN_LOOP, UN_LOOP_HALF, FAST32, REF32, REF64)

/* Every dtype; unsigned ones (u8, bool) get their own expression, since x < 0 is
 * meaningless there (and a warning). */
#define UN_ALL_TYPES(FLOAT_EXPR, INT_EXPR, U8_EXPR)                                  \
    switch (dt) {                                                                    \
    case CR_DT_F32: UN_LOOP(float, FLOAT_EXPR); break;                               \
    case CR_DT_F64: UN_LOOP(double, FLOAT_EXPR); break;                              \
    case CR_DT_F16: UN_LOOP_HALF(cr_f16_to_f32, cr_f32_to_f16, FLOAT_EXPR); break;   \
    case CR_DT_BF16: UN_LOOP_HALF(cr_bf16_to_f32, cr_f32_to_bf16, FLOAT_EXPR); break; \
    case CR_DT_I64: UN_LOOP(int64_t, INT_EXPR); break;                               \
    case CR_DT_I32: UN_LOOP(int32_t, INT_EXPR); break;                               \
    case CR_DT_U8:                                                                   \
    case CR_DT_BOOL: UN_LOOP(uint8_t, U8_EXPR); break;                               \
    default: break;                                                                  \
    }

#define UN_PROLOGUE                                                                  \
    const cr_call *c = ctx;                                                          \
    const cr_dtype dt = c->in[0]->dtype;                                             \
    const bool fast = cr_fast_paths_enabled();                                       \
    (void)fast

/* ---- entry points ---- */
static cr_status float_unary(cr_tensor **out, cr_op op, cr_tensor *t, unsigned save_in,
                             unsigned save_out) {
    *out = NULL;
    CR_CHECK_TENSOR(cr_op_name(op), t, "self");
    if (cr_dtype_is_float(t->dtype))
        return cr_unary_op(out, op, t, t->dtype, NULL, 0, save_in, save_out);
    cr_tensor *f;
    cr_status st = cr_op_to(&f, t, CR_DT_F32);
    if (st) return st;
    st = cr_unary_op(out, op, f, CR_DT_F32, NULL, 0, save_in, save_out);
    cr_tensor_free(f);
    return st;
}

static cr_status no_bool(const char *op, const cr_tensor *t) {
    if (t->dtype == CR_DT_BOOL)
        return cr_fail(CR_ERR_ARG, "%s: not defined for bool tensors; convert with :long() "
                       "or :float() first", op);
    return CR_OK;
}

static cr_status scalar_mul(cr_tensor **out, cr_tensor *t, double v) {
    cr_tensor *s;
    cr_status st = cr_tensor_scalar(&s, v, t->dtype);
    if (st) return st;
    st = cr_op_mul(out, t, s);
    cr_tensor_free(s);
    return st;
}

static cr_status zeros_for_input(cr_node *n, int k, cr_tensor **out) {
    return cr_zeros_meta(out, &n->in_meta[k]);
}

/* ---- abs: grad g*sign(x), so 0 at 0 ---- */
static void loop_abs(char **p, const int64_t *s, int64_t n, const void *ctx) {
    UN_PROLOGUE;
    UN_ALL_TYPES(x < 0 ? -x : x, x < 0 ? -x : x, x)
}
cr_status cr_cpu_abs(cr_call *c) { return cr_run_unary(c, loop_abs); }
cr_status cr_op_abs(cr_tensor **out, cr_tensor *t) {
    CR_CHECK_TENSOR("abs", t, "self");
    cr_status st = no_bool("abs", t);
    return st ? st : cr_unary_op(out, CR_OP_ABS, t, t->dtype, NULL, 0, 1, 0);
}
cr_status cr_grad_abs(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    cr_tensor *x, *sg;
    cr_status st = cr_saved_in(n, 0, &x);
    if (st || (st = cr_op_sign(&sg, x))) return st;
    st = cr_op_mul(&gin[0], gout[0], sg);
    cr_tensor_free(sg);
    return st;
}

/* ---- sign: -1, 0 or 1 (0 for NaN, as PyTorch); bool stays bool ---- */
static void loop_sign(char **p, const int64_t *s, int64_t n, const void *ctx) {
    UN_PROLOGUE;
    UN_ALL_TYPES((x > 0) - (x < 0), (x > 0) - (x < 0), x > 0)
}
cr_status cr_cpu_sign(cr_call *c) { return cr_run_unary(c, loop_sign); }
cr_status cr_op_sign(cr_tensor **out, cr_tensor *t) {
    CR_CHECK_TENSOR("sign", t, "self");
    return cr_unary_op(out, CR_OP_SIGN, t, t->dtype, NULL, 0, 0, 0);
}
cr_status cr_grad_sign(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    (void)gout;
    return zeros_for_input(n, 0, &gin[0]);
}

/* ---- exp: grad g*y ---- */
static void loop_exp(char **p, const int64_t *s, int64_t n, const void *ctx) {
    UN_PROLOGUE;
    UN_FLOAT_TYPES(fast_expf(x), expf(x), exp(x))
}
cr_status cr_cpu_exp(cr_call *c) { return cr_run_unary(c, loop_exp); }
cr_status cr_op_exp(cr_tensor **out, cr_tensor *t) { return float_unary(out, CR_OP_EXP, t, 0, 1); }
cr_status cr_grad_exp(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    cr_tensor *y;
    cr_status st = cr_saved_out(n, 0, &y);
    return st ? st : cr_op_mul(&gin[0], gout[0], y);
}

/* ---- log: grad g/x ---- */
static void loop_log(char **p, const int64_t *s, int64_t n, const void *ctx) {
    UN_PROLOGUE;
    UN_FLOAT_TYPES(fast_logf(x), logf(x), log(x))
}
cr_status cr_cpu_log(cr_call *c) { return cr_run_unary(c, loop_log); }
cr_status cr_op_log(cr_tensor **out, cr_tensor *t) { return float_unary(out, CR_OP_LOG, t, 1, 0); }
cr_status cr_grad_log(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    cr_tensor *x;
    cr_status st = cr_saved_in(n, 0, &x);
    return st ? st : cr_op_div(&gin[0], gout[0], x);
}

/* ---- sqrt: grad g/(2y) ---- */
static void loop_sqrt(char **p, const int64_t *s, int64_t n, const void *ctx) {
    UN_PROLOGUE;
    if (dt == CR_DT_F32 && fast && s[0] == 4 && s[1] == 4) {
        sqrt_f32((float *)p[0], (const float *)p[1], n, false);
        return;
    }
    UN_FLOAT_TYPES(sqrtf(x), sqrtf(x), sqrt(x))
}
cr_status cr_cpu_sqrt(cr_call *c) { return cr_run_unary(c, loop_sqrt); }
cr_status cr_op_sqrt(cr_tensor **out, cr_tensor *t) { return float_unary(out, CR_OP_SQRT, t, 0, 1); }
cr_status cr_grad_sqrt(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    cr_tensor *y, *q;
    cr_status st = cr_saved_out(n, 0, &y);
    if (st || (st = cr_op_div(&q, gout[0], y))) return st;
    st = scalar_mul(&gin[0], q, 0.5);
    cr_tensor_free(q);
    return st;
}

/* ---- rsqrt: grad -g*y^3/2 ---- */
static void loop_rsqrt(char **p, const int64_t *s, int64_t n, const void *ctx) {
    UN_PROLOGUE;
    if (dt == CR_DT_F32 && fast && s[0] == 4 && s[1] == 4) {
        sqrt_f32((float *)p[0], (const float *)p[1], n, true);
        return;
    }
    UN_FLOAT_TYPES(1.0f / sqrtf(x), 1.0f / sqrtf(x), 1.0 / sqrt(x))
}
cr_status cr_cpu_rsqrt(cr_call *c) { return cr_run_unary(c, loop_rsqrt); }
cr_status cr_op_rsqrt(cr_tensor **out, cr_tensor *t) {
    return float_unary(out, CR_OP_RSQRT, t, 0, 1);
}
cr_status cr_grad_rsqrt(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    cr_tensor *y, *y3 = NULL, *q = NULL;
    cr_status st = cr_saved_out(n, 0, &y);
    if (!st) st = cr_op_pow_scalar(&y3, y, 3.0);
    if (!st) st = cr_op_mul(&q, gout[0], y3);
    if (!st) st = scalar_mul(&gin[0], q, -0.5);
    cr_tensor_free(y3);
    cr_tensor_free(q);
    return st;
}

/* ---- sigmoid, tanh: grads from the output through the fused backward kernels ---- */
static void loop_sigmoid(char **p, const int64_t *s, int64_t n, const void *ctx) {
    UN_PROLOGUE;
    UN_FLOAT_TYPES(fast_sigmoidf(x), ref_sigmoidf(x), ref_sigmoid(x))
}
cr_status cr_cpu_sigmoid(cr_call *c) { return cr_run_unary(c, loop_sigmoid); }
cr_status cr_op_sigmoid(cr_tensor **out, cr_tensor *t) {
    return float_unary(out, CR_OP_SIGMOID, t, 0, 1);
}
cr_status cr_grad_sigmoid(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    cr_tensor *y;
    cr_status st = cr_saved_out(n, 0, &y);
    return st ? st : cr_op_sigmoid_backward(&gin[0], gout[0], y);
}

static void loop_tanh(char **p, const int64_t *s, int64_t n, const void *ctx) {
    UN_PROLOGUE;
    UN_FLOAT_TYPES(fast_tanhf(x), tanhf(x), tanh(x))
}
cr_status cr_cpu_tanh(cr_call *c) { return cr_run_unary(c, loop_tanh); }
cr_status cr_op_tanh(cr_tensor **out, cr_tensor *t) { return float_unary(out, CR_OP_TANH, t, 0, 1); }
cr_status cr_grad_tanh(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    cr_tensor *y;
    cr_status st = cr_saved_out(n, 0, &y);
    return st ? st : cr_op_tanh_backward(&gin[0], gout[0], y);
}

/* ---- relu: max(x, 0) with NaN kept; integers allowed; grad 0 at 0 ---- */
static void loop_relu(char **p, const int64_t *s, int64_t n, const void *ctx) {
    UN_PROLOGUE;
    UN_ALL_TYPES(x < 0 ? 0 : x, x < 0 ? 0 : x, x)
}
cr_status cr_cpu_relu(cr_call *c) { return cr_run_unary(c, loop_relu); }
cr_status cr_op_relu(cr_tensor **out, cr_tensor *t) {
    CR_CHECK_TENSOR("relu", t, "self");
    cr_status st = no_bool("relu", t);
    return st ? st : cr_unary_op(out, CR_OP_RELU, t, t->dtype, NULL, 0, 0, 1);
}
cr_status cr_grad_relu(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    cr_tensor *y;
    cr_status st = cr_saved_out(n, 0, &y);
    return st ? st : cr_op_relu_backward(&gin[0], gout[0], y);
}

/* ---- f16/bf16 GELU by table ---------------------------------------------------------
 * A half has 65,536 values, so on the fast path GELU (either form) and its derivative are
 * tabulated once per dtype, when first used, from the reference: the forward looks up the
 * very half the reference path rounds to, and the backward multiplies g by the f64
 * derivative as the reference does, so both agree with it bit for bit, at a lookup's
 * cost instead of the polynomial's (a bf16 ViT's GELUs were an eighth of its step).
 * 128 KiB + 512 KiB per (form, dtype) in use; without the memory the polynomial runs. */
typedef struct {
    int ready;       /* set (release) once fwd and grad are filled */
    uint16_t *fwd;   /* gelu(x) as the reference path stores it, by x's bits */
    double *grad;    /* d gelu / dx in f64, by x's bits */
} gelu_table;
static gelu_table gelu_tables[4]; /* [tanh form][f16] */
static pthread_mutex_t gelu_tables_lock = PTHREAD_MUTEX_INITIALIZER;

static double ref_gelu_grad(double g, double x);
static double ref_gelu_tanh_grad(double g, double x);

static const gelu_table *gelu_table_for(bool tanh_form, cr_dtype dt) {
    gelu_table *t = &gelu_tables[2 * tanh_form + (dt == CR_DT_F16)];
    if (__atomic_load_n(&t->ready, __ATOMIC_ACQUIRE)) return t;
    pthread_mutex_lock(&gelu_tables_lock);
    if (!t->ready) {
        uint16_t *fwd = malloc(65536 * sizeof *fwd);
        double *grad = malloc(65536 * sizeof *grad);
        if (fwd && grad) {
            for (uint32_t h = 0; h < 65536; h++) {
                const float x = dt == CR_DT_F16 ? cr_f16_to_f32((uint16_t)h) : cr_bf16_to_f32((uint16_t)h);
                const float y = tanh_form ? ref_gelu_tanhf(x) : ref_geluf(x);
                fwd[h] = dt == CR_DT_F16 ? cr_f32_to_f16(y) : cr_f32_to_bf16(y);
                grad[h] = tanh_form ? ref_gelu_tanh_grad(1.0, x) : ref_gelu_grad(1.0, x);
            }
            t->fwd = fwd, t->grad = grad;
            __atomic_store_n(&t->ready, 1, __ATOMIC_RELEASE);
        } else {
            free(fwd);
            free(grad);
        }
    }
    pthread_mutex_unlock(&gelu_tables_lock);
    return t->ready ? t : NULL;
}

/* out = table(x) over a unary call's f16/bf16 operands; false (nothing done) without a table. */
static bool gelu_by_table(char **p, const int64_t *s, int64_t n, bool tanh_form, cr_dtype dt) {
    const gelu_table *t = gelu_table_for(tanh_form, dt);
    if (!t) return false;
    const uint16_t *f = t->fwd;
    if (s[0] == 2 && s[1] == 2) {
        uint16_t *o = (uint16_t *)p[0];
        const uint16_t *x = (const uint16_t *)p[1];
        for (int64_t i = 0; i < n; i++) o[i] = f[x[i]];
    } else {
        for (int64_t i = 0; i < n; i++) *(uint16_t *)(p[0] + i * s[0]) = f[*(const uint16_t *)(p[1] + i * s[1])];
    }
    return true;
}

/* out = g * table'(v) over a backward call's f16/bf16 operands (g, v), the reference's
 * product: (float)((double)g * gelu'(v)), then rounded to the half. */
static bool gelu_grad_by_table(char **p, const int64_t *s, int64_t n, bool tanh_form, cr_dtype dt) {
    const gelu_table *t = gelu_table_for(tanh_form, dt);
    if (!t) return false;
    const double *d = t->grad;
    const bool bf16 = dt == CR_DT_BF16;
    if (bf16 && s[0] == 2 && s[1] == 2 && s[2] == 2) {
        uint16_t *o = (uint16_t *)p[0];
        const uint16_t *g = (const uint16_t *)p[1], *v = (const uint16_t *)p[2];
        for (int64_t i = 0; i < n; i++) o[i] = cr_f32_to_bf16((float)((double)cr_bf16_to_f32(g[i]) * d[v[i]]));
    } else {
        for (int64_t i = 0; i < n; i++) {
            const uint16_t gh = *(const uint16_t *)(p[1] + i * s[1]), vh = *(const uint16_t *)(p[2] + i * s[2]);
            const float g = bf16 ? cr_bf16_to_f32(gh) : cr_f16_to_f32(gh);
            const float r = (float)((double)g * d[vh]);
            *(uint16_t *)(p[0] + i * s[0]) = bf16 ? cr_f32_to_bf16(r) : cr_f32_to_f16(r);
        }
    }
    return true;
}

/* ---- gelu, exact: x * Phi(x) = x/2 * (1 + erf(x/sqrt 2)) ---- */
static void loop_gelu(char **p, const int64_t *s, int64_t n, const void *ctx) {
    UN_PROLOGUE;
    if (fast && cr_dtype_is_half(dt) && gelu_by_table(p, s, n, false, dt)) return;
    UN_FLOAT_TYPES(fast_geluf(x), ref_geluf(x), ref_gelu(x))
}
cr_status cr_cpu_gelu(cr_call *c) { return cr_run_unary(c, loop_gelu); }
cr_status cr_op_gelu(cr_tensor **out, cr_tensor *t) { return float_unary(out, CR_OP_GELU, t, 1, 0); }
cr_status cr_grad_gelu(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    cr_tensor *x;
    cr_status st = cr_saved_in(n, 0, &x);
    return st ? st : cr_op_gelu_backward(&gin[0], gout[0], x);
}

/* ---- gelu, tanh approximation ---- */
static void loop_gelu_tanh(char **p, const int64_t *s, int64_t n, const void *ctx) {
    UN_PROLOGUE;
    if (fast && cr_dtype_is_half(dt) && gelu_by_table(p, s, n, true, dt)) return;
    UN_FLOAT_TYPES(fast_gelu_tanhf(x), ref_gelu_tanhf(x), ref_gelu_tanh(x))
}
cr_status cr_cpu_gelu_tanh(cr_call *c) { return cr_run_unary(c, loop_gelu_tanh); }
cr_status cr_op_gelu_tanh(cr_tensor **out, cr_tensor *t) { return float_unary(out, CR_OP_GELU_TANH, t, 1, 0); }
cr_status cr_grad_gelu_tanh(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    cr_tensor *x;
    cr_status st = cr_saved_in(n, 0, &x);
    return st ? st : cr_op_gelu_tanh_backward(&gin[0], gout[0], x);
}

/* ---- pow_scalar: x^e. Integer tensors stay integer for integral e >= 0; the common
 * exponents are multiplications or square roots instead of powf (fast path). ---- */
static int64_t to_i64_sat(double v) {
    if (v <= -9.2233720368547758e18) return INT64_MIN;
    if (v >= 9.2233720368547758e18) return INT64_MAX;
    return (int64_t)v;
}
static int64_t ipow_scalar(int64_t a, int64_t e) {
    uint64_t r = 1, x = (uint64_t)a; /* unsigned: overflow wraps instead of being UB */
    while (e > 0) {
        if (e & 1) r *= x;
        x *= x;
        e >>= 1;
    }
    return (int64_t)r;
}
static void loop_pow_scalar(char **p, const int64_t *s, int64_t n, const void *ctx) {
    UN_PROLOGUE;
    const double e = c->f[0];
    const float ef = (float)e;
    if (dt == CR_DT_F32 && fast) {
        if (e == 2) UN_LOOP(float, x * x);
        else if (e == 3) UN_LOOP(float, x * x * x);
        else if ((e == 0.5 || e == -0.5) && s[0] == 4 && s[1] == 4)
            sqrt_f32((float *)p[0], (const float *)p[1], n, e < 0);
        else if (e == 1) UN_LOOP(float, x);
        else if (e == -1) UN_LOOP(float, 1.0f / x);
        else if (e == -2) UN_LOOP(float, 1.0f / (x * x));
        else UN_LOOP(float, powf(x, ef));
        return;
    }
    if (dt == CR_DT_F32) {
        UN_LOOP(float, powf(x, ef));
        return;
    }
    const int64_t ei = cr_dtype_is_float(dt) ? 0 : to_i64_sat(e);
    UN_ALL_TYPES(pow(x, e), ipow_scalar(x, ei), ipow_scalar(x, ei))
}
cr_status cr_cpu_pow_scalar(cr_call *c) { return cr_run_unary(c, loop_pow_scalar); }
cr_status cr_op_pow_scalar(cr_tensor **out, cr_tensor *t, double exponent) {
    *out = NULL;
    CR_CHECK_TENSOR("pow", t, "self");
    cr_dtype dt = t->dtype;
    if (!cr_dtype_is_float(dt)) {
        if (exponent != floor(exponent) || isinf(exponent)) dt = CR_DT_F32;
        else if (exponent < 0)
            return cr_fail(CR_ERR_ARG, "pow: integers to negative integer powers (%g) are not "
                           "allowed; convert with :float() first", exponent);
        else if (dt == CR_DT_BOOL) dt = CR_DT_I64;
    }
    cr_tensor *src;
    cr_status st = cr_cast_if_needed(&src, t, dt);
    if (st) return st;
    st = cr_unary_op(out, CR_OP_POW_SCALAR, src, dt, &exponent, 1, 1, 0);
    cr_tensor_free(src);
    return st;
}
/* g*e*x^(e-1), and zero for e == 0 (not 0*x^-1, which is NaN at 0). */
cr_status cr_grad_pow_scalar(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    double e = n->call.f[0];
    if (e == 0) return zeros_for_input(n, 0, &gin[0]);
    cr_tensor *x, *xe = NULL, *d = NULL;
    cr_status st = cr_saved_in(n, 0, &x);
    if (st) return st;
    if (e == 2) {
        cr_tensor_retain(x);
        xe = x;
    } else {
        st = cr_op_pow_scalar(&xe, x, e - 1);
    }
    if (!st) st = scalar_mul(&d, xe, e);
    if (!st) st = cr_op_mul(&gin[0], gout[0], d);
    cr_tensor_free(xe);
    cr_tensor_free(d);
    return st;
}

/* ---- clamp: min(max(x, lo), hi) as PyTorch (so hi wins when lo > hi; NaN stays) ---- */
static void loop_clamp(char **p, const int64_t *s, int64_t n, const void *ctx) {
    UN_PROLOGUE;
    const double lo = c->f[0], hi = c->f[1];
    const bool has_lo = c->f[2] != 0, has_hi = c->f[3] != 0;
    const int64_t ilo = has_lo ? to_i64_sat(lo) : INT64_MIN;
    const int64_t ihi = has_hi ? to_i64_sat(hi) : INT64_MAX;
    switch (dt) {
    case CR_DT_F32: {
        const float l = (float)lo, h = (float)hi;
        UN_LOOP(float, (x < l ? l : x) > h ? h : (x < l ? l : x));
        break;
    }
    case CR_DT_F64: UN_LOOP(double, (x < lo ? lo : x) > hi ? hi : (x < lo ? lo : x)); break;
    case CR_DT_F16:
    case CR_DT_BF16: {
        const float l = (float)lo, h = (float)hi;
        if (dt == CR_DT_F16)
            UN_LOOP_HALF(cr_f16_to_f32, cr_f32_to_f16, (x < l ? l : x) > h ? h : (x < l ? l : x));
        else
            UN_LOOP_HALF(cr_bf16_to_f32, cr_f32_to_bf16, (x < l ? l : x) > h ? h : (x < l ? l : x));
        break;
    }
    case CR_DT_I64:
        UN_LOOP(int64_t, (x < ilo ? ilo : x) > ihi ? ihi : (x < ilo ? ilo : x));
        break;
    case CR_DT_I32:
        UN_LOOP(int32_t, (int32_t)((x < ilo ? ilo : x) > ihi ? ihi : (x < ilo ? ilo : x)));
        break;
    case CR_DT_U8:
        UN_LOOP(uint8_t, (uint8_t)((x < ilo ? ilo : x) > ihi ? ihi : (x < ilo ? ilo : x)));
        break;
    default: break;
    }
}
cr_status cr_cpu_clamp(cr_call *c) { return cr_run_unary(c, loop_clamp); }
cr_status cr_op_clamp(cr_tensor **out, cr_tensor *t, bool has_lo, double lo, bool has_hi,
                      double hi) {
    *out = NULL;
    CR_CHECK_TENSOR("clamp", t, "self");
    if (!has_lo && !has_hi)
        return cr_fail(CR_ERR_ARG, "clamp: neither lo nor hi was given; pass at least one "
                       "bound (nil for the other)");
    cr_status st = no_bool("clamp", t);
    if (st) return st;
    cr_dtype dt = t->dtype;
    /* an integer tensor clamped to a fractional bound becomes f32, as in PyTorch */
    if (!cr_dtype_is_float(dt) && ((has_lo && lo != floor(lo)) || (has_hi && hi != floor(hi))))
        dt = CR_DT_F32;
    double params[4] = {has_lo ? lo : -INFINITY, has_hi ? hi : INFINITY, has_lo, has_hi};
    cr_tensor *src;
    if ((st = cr_cast_if_needed(&src, t, dt))) return st;
    st = cr_unary_op(out, CR_OP_CLAMP, src, dt, params, 4, 1, 0);
    cr_tensor_free(src);
    return st;
}
/* The grad passes where lo <= x <= hi, bounds included (as PyTorch). */
cr_status cr_grad_clamp(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    const double *f = n->call.f;
    cr_tensor *x, *t[6] = {0};
    cr_status st = cr_saved_in(n, 0, &x);
    if (st) return st;
    cr_tensor *mask = NULL;
    if (f[2] != 0) {
        if ((st = cr_tensor_scalar(&t[0], f[0], x->dtype)) || (st = cr_op_ge(&t[1], x, t[0])))
            goto done;
        mask = t[1];
    }
    if (f[3] != 0) {
        if ((st = cr_tensor_scalar(&t[2], f[1], x->dtype)) || (st = cr_op_le(&t[3], x, t[2])))
            goto done;
        if (mask && (st = cr_op_logical_and(&t[4], mask, t[3]))) goto done;
        mask = mask ? t[4] : t[3];
    }
    if ((st = cr_tensor_scalar(&t[5], 0.0, gout[0]->dtype))) goto done;
    st = cr_op_where(&gin[0], mask, gout[0], t[5]);
done:
    for (int k = 0; k < 6; k++) cr_tensor_free(t[k]);
    return st;
}

/* ---- fused backward kernels: out = g * f'(.) from the saved tensor v ---------------- */
#define BW_LOOP(T, EXPR)                                                             \
    do {                                                                             \
        T *o = (T *)p[0];                                                            \
        const T *gp = (const T *)p[1], *vp = (const T *)p[2];                        \
        const int64_t so = s[0] / (int64_t)sizeof(T), sg = s[1] / (int64_t)sizeof(T), \
                      sv = s[2] / (int64_t)sizeof(T);                                \
        if (so == 1 && sg == 1 && sv == 1) {                                         \
            for (int64_t i = 0; i < n; i++) {                                        \
                const T g = gp[i], v = vp[i];                                        \
                o[i] = (EXPR);                                                       \
            }                                                                        \
        } else {                                                                     \
            for (int64_t i = 0; i < n; i++) {                                        \
                const T g = gp[i * sg], v = vp[i * sv];                              \
                o[i * so] = (EXPR);                                                  \
            }                                                                        \
        }                                                                            \
    } while (0)

#define BW_LOOP_HALF(LOAD, STORE, EXPR)                                              \
    do {                                                                             \
        if (s[0] == 2 && s[1] == 2 && s[2] == 2) { /* dense: typed, so it vectorises */ \
            uint16_t *o = (uint16_t *)p[0];                                          \
            const uint16_t *gp = (const uint16_t *)p[1], *vp = (const uint16_t *)p[2]; \
            for (int64_t i = 0; i < n; i++) {                                        \
                const float g = LOAD(gp[i]), v = LOAD(vp[i]);                        \
                o[i] = STORE(EXPR);                                                  \
            }                                                                        \
        } else {                                                                     \
            for (int64_t i = 0; i < n; i++) {                                        \
                const float g = LOAD(*(const uint16_t *)(p[1] + i * s[1]));          \
                const float v = LOAD(*(const uint16_t *)(p[2] + i * s[2]));          \
                *(uint16_t *)(p[0] + i * s[0]) = STORE(EXPR);                        \
            }                                                                        \
        }                                                                            \
    } while (0)

#define BW_FLOAT_TYPES(FAST32, REF32, REF64) FLOAT_TYPES(BW_LOOP, BW_LOOP_HALF, FAST32, REF32, REF64)

#define BW_PROLOGUE                                                                  \
    const cr_dtype dt = *(const cr_dtype *)ctx;                                      \
    const bool fast = cr_fast_paths_enabled();                                       \
    (void)fast

/* d gelu = Phi(x) + x*phi(x) */
static double ref_gelu_grad(double g, double x) {
    return g * (ref_phi(x) + x * INV_SQRT_2PI * exp(-0.5 * x * x));
}
static inline float ref_gelu_gradf(float g, float x) { return (float)ref_gelu_grad(g, x); }
FAST_FN float fast_gelu_gradf(float g, float x) {
    return g * (fast_phif(x) + x * (float)INV_SQRT_2PI * fast_expf(-0.5f * x * x));
}

/* d gelu_tanh = s + 2 x s (1 - s) sqrt(2/pi) (1 + 3 c x^2), s = sigmoid(2u) (the same as
 * (1 + t)/2 + x/2 (1 - t^2) u' with t = tanh(u)) */
static double ref_gelu_tanh_grad(double g, double x) {
    const double sg = 1.0 / (1.0 + exp(-gelu_tanh_u2(x)));
    return g * (sg + 2.0 * x * sg * (1.0 - sg) * GELU_TANH_K * (1.0 + 3.0 * GELU_TANH_C * x * x));
}
static inline float ref_gelu_tanh_gradf(float g, float x) { return (float)ref_gelu_tanh_grad(g, x); }
FAST_FN float fast_gelu_tanh_gradf(float g, float x) {
    const float k = (float)GELU_TANH_K, c = (float)GELU_TANH_C;
    const float sg = 1.0f / (1.0f + fast_expf(-2.0f * k * (x + c * x * x * x)));
    return g * (sg + 2.0f * x * sg * (1.0f - sg) * k * (1.0f + 3.0f * c * x * x));
}

static void loop_relu_backward(char **p, const int64_t *s, int64_t n, const void *ctx) {
    BW_PROLOGUE;
    BW_FLOAT_TYPES(v > 0 ? g : 0.0f, v > 0 ? g : 0.0f, v > 0 ? g : 0.0)
}
static void loop_sigmoid_backward(char **p, const int64_t *s, int64_t n, const void *ctx) {
    BW_PROLOGUE;
    BW_FLOAT_TYPES(g * (1.0f - v) * v, g * (1.0f - v) * v, g * (1.0 - v) * v)
}
static void loop_tanh_backward(char **p, const int64_t *s, int64_t n, const void *ctx) {
    BW_PROLOGUE;
    BW_FLOAT_TYPES(g * (1.0f - v * v), g * (1.0f - v * v), g * (1.0 - v * v))
}
static void loop_gelu_backward(char **p, const int64_t *s, int64_t n, const void *ctx) {
    BW_PROLOGUE;
    if (fast && cr_dtype_is_half(dt) && gelu_grad_by_table(p, s, n, false, dt)) return;
    BW_FLOAT_TYPES(fast_gelu_gradf(g, v), ref_gelu_gradf(g, v), ref_gelu_grad(g, v))
}
cr_status cr_cpu_relu_backward(cr_call *c) { return cr_run_binary(c, loop_relu_backward); }
cr_status cr_cpu_sigmoid_backward(cr_call *c) { return cr_run_binary(c, loop_sigmoid_backward); }
cr_status cr_cpu_tanh_backward(cr_call *c) { return cr_run_binary(c, loop_tanh_backward); }
cr_status cr_cpu_gelu_backward(cr_call *c) { return cr_run_binary(c, loop_gelu_backward); }
static void loop_gelu_tanh_backward(char **p, const int64_t *s, int64_t n, const void *ctx) {
    BW_PROLOGUE;
    if (fast && cr_dtype_is_half(dt) && gelu_grad_by_table(p, s, n, true, dt)) return;
    BW_FLOAT_TYPES(fast_gelu_tanh_gradf(g, v), ref_gelu_tanh_gradf(g, v), ref_gelu_tanh_grad(g, v))
}
cr_status cr_cpu_gelu_tanh_backward(cr_call *c) { return cr_run_binary(c, loop_gelu_tanh_backward); }

static cr_status act_backward(cr_tensor **out, cr_op op, cr_tensor *g, cr_tensor *v) {
    const char *name = cr_op_name(op);
    *out = NULL;
    CR_CHECK_TENSOR(name, g, "grad");
    CR_CHECK_TENSOR(name, v, "saved");
    cr_status st = cr_check_same_device(name, g, v);
    if (st) return st;
    if (!cr_same_shape(g, v)) {
        char a[160], b[160];
        return cr_fail(CR_ERR_ARG, "%s: grad of shape %s and saved tensor of shape %s differ; "
                       "pass the grad of the activation's output", name,
                       cr_shape_str(g, a, sizeof a), cr_shape_str(v, b, sizeof b));
    }
    if ((st = cr_check_float(name, v, "saved"))) return st;
    cr_call c;
    if ((st = cr_call_init(&c, op, 2, 1))) return st;
    cr_tensor *gc;
    if ((st = cr_cast_if_needed(&gc, g, v->dtype))) return st;
    c.in[0] = gc;
    c.in[1] = v;
    st = cr_tensor_alloc_as(&c.out[0], v->ndim, v->shape, v->dtype, cr_tensor_dev(v), v);
    if (st) cr_call_drop_outs(&c);
    else st = cr_call_finish(out, &c, 0, 0);
    cr_tensor_free(gc);
    return st;
}
cr_status cr_op_relu_backward(cr_tensor **out, cr_tensor *grad, cr_tensor *y) {
    return act_backward(out, CR_OP_RELU_BACKWARD, grad, y);
}
cr_status cr_op_sigmoid_backward(cr_tensor **out, cr_tensor *grad, cr_tensor *y) {
    return act_backward(out, CR_OP_SIGMOID_BACKWARD, grad, y);
}
cr_status cr_op_tanh_backward(cr_tensor **out, cr_tensor *grad, cr_tensor *y) {
    return act_backward(out, CR_OP_TANH_BACKWARD, grad, y);
}
cr_status cr_op_gelu_backward(cr_tensor **out, cr_tensor *grad, cr_tensor *x) {
    return act_backward(out, CR_OP_GELU_BACKWARD, grad, x);
}
cr_status cr_op_gelu_tanh_backward(cr_tensor **out, cr_tensor *grad, cr_tensor *x) {
    return act_backward(out, CR_OP_GELU_TANH_BACKWARD, grad, x);
}
