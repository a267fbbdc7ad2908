/* elementwise.c — binary arithmetic (add, sub, mul, div, pow, maximum, minimum, add_relu)
 * as typed inner loops driven by iter.c, through the shared entry and runners of
 * elementwise_run.c. Each op's derivative rule sits under its kernel. */
#include <math.h>

#include "elementwise_impl.h"

/* ---- typed inner loops (CR_BIN_LOOP in elementwise_impl.h) ---- */
#define BIN_LOOP(T, EXPR) CR_BIN_LOOP(T, T, EXPR)
#define BIN_LOOP_HALF(LOAD, STORE, EXPR) CR_BIN_LOOP_HALF(uint16_t, LOAD, STORE, EXPR)

#define BIN_ALL_TYPES(EXPR, INT_EXPR)                                                \
    switch (dt) {                                                                    \
    case CR_DT_F32: BIN_LOOP(float, EXPR); break;                                    \
    case CR_DT_F64: BIN_LOOP(double, EXPR); break;                                   \
    case CR_DT_F16: BIN_LOOP_HALF(cr_f16_to_f32, cr_f32_to_f16, EXPR); break;        \
    case CR_DT_BF16: BIN_LOOP_HALF(cr_bf16_to_f32, cr_f32_to_bf16, EXPR); break;     \
    case CR_DT_I64: BIN_LOOP(int64_t, INT_EXPR); break;                              \
    case CR_DT_I32: BIN_LOOP(int32_t, INT_EXPR); break;                              \
    case CR_DT_U8: BIN_LOOP(uint8_t, INT_EXPR); break;                               \
    case CR_DT_BOOL: BIN_LOOP(uint8_t, (uint8_t)((INT_EXPR) != 0)); break;           \
    default: break;                                                                  \
    }

static void loop_add(char **p, const int64_t *s, int64_t n, const void *ctx) {
    cr_dtype dt = *(const cr_dtype *)ctx;
    BIN_ALL_TYPES(a + b, a + b)
}
static void loop_sub(char **p, const int64_t *s, int64_t n, const void *ctx) {
    cr_dtype dt = *(const cr_dtype *)ctx;
    BIN_ALL_TYPES(a - b, a - b)
}
static void loop_mul(char **p, const int64_t *s, int64_t n, const void *ctx) {
    cr_dtype dt = *(const cr_dtype *)ctx;
    BIN_ALL_TYPES(a * b, a * b)
}
static void loop_div(char **p, const int64_t *s, int64_t n, const void *ctx) {
    cr_dtype dt = *(const cr_dtype *)ctx; /* only float dtypes reach here */
    BIN_ALL_TYPES(a / b, b ? a / b : 0)
}

/* ---- add ---- */
cr_status cr_cpu_add(cr_call *c) { return cr_run_binary(c, loop_add); }
cr_status cr_op_add(cr_tensor **out, cr_tensor *a, cr_tensor *b) {
    cr_status st = cr_check_binary("add", a, b);
    if (st) return st;
    cr_dtype dt = cr_result_dtype(a, b);
    return cr_binary_op(out, CR_OP_ADD, a, b, dt, dt, 0, 0);
}
cr_status cr_grad_add(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    for (int i = 0; i < 2; i++) {
        if (!n->edges[i].node) continue;
        cr_status st = cr_sum_to_shape(&gin[i], gout[0], n->in_meta[i].ndim, n->in_meta[i].shape);
        if (st) return st;
    }
    return CR_OK;
}

/* ---- sub ---- */
cr_status cr_cpu_sub(cr_call *c) { return cr_run_binary(c, loop_sub); }
cr_status cr_op_sub(cr_tensor **out, cr_tensor *a, cr_tensor *b) {
    cr_status st = cr_check_binary("sub", a, b);
    if (st) return st;
    if (a->dtype == CR_DT_BOOL && b->dtype == CR_DT_BOOL)
        return cr_fail(CR_ERR_ARG, "sub: subtracting bool tensors is not defined; use "
                       "logical_xor or convert with :long()");
    cr_dtype dt = cr_result_dtype(a, b);
    return cr_binary_op(out, CR_OP_SUB, a, b, dt, dt, 0, 0);
}
cr_status cr_grad_sub(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    cr_status st;
    if (n->edges[0].node &&
        (st = cr_sum_to_shape(&gin[0], gout[0], n->in_meta[0].ndim, n->in_meta[0].shape)))
        return st;
    if (n->edges[1].node) {
        cr_tensor *neg;
        if ((st = cr_op_neg(&neg, gout[0]))) return st;
        st = cr_sum_to_shape(&gin[1], neg, n->in_meta[1].ndim, n->in_meta[1].shape);
        cr_tensor_free(neg);
        if (st) return st;
    }
    return CR_OK;
}

/* ---- mul ---- */
cr_status cr_cpu_mul(cr_call *c) { return cr_run_binary(c, loop_mul); }
cr_status cr_op_mul(cr_tensor **out, cr_tensor *a, cr_tensor *b) {
    cr_status st = cr_check_binary("mul", a, b);
    if (st) return st;
    cr_dtype dt = cr_result_dtype(a, b);
    /* a's grad needs b and b's needs a: a tensor is kept only for the other's grad */
    unsigned save = (cr_grad_needed(b) ? 1u : 0u) | (cr_grad_needed(a) ? 2u : 0u);
    return cr_binary_op(out, CR_OP_MUL, a, b, dt, dt, save, 0);
}
/* d(a*b) = g*b, g*a, each summed back to its input's shape. */
cr_status cr_grad_mul(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    for (int i = 0; i < 2; i++) {
        if (!n->edges[i].node) continue;
        cr_tensor *other, *prod;
        cr_status st = cr_saved_in(n, 1 - i, &other);
        if (st) return st;
        if ((st = cr_op_mul(&prod, gout[0], other))) return st;
        st = cr_sum_to_shape(&gin[i], prod, n->in_meta[i].ndim, n->in_meta[i].shape);
        cr_tensor_free(prod);
        if (st) return st;
    }
    return CR_OK;
}

/* ---- div: true division; integer operands divide as f32 ---- */
cr_status cr_cpu_div(cr_call *c) { return cr_run_binary(c, loop_div); }
cr_status cr_op_div(cr_tensor **out, cr_tensor *a, cr_tensor *b) {
    cr_status st = cr_check_binary("div", a, b);
    if (st) return st;
    cr_dtype dt = cr_result_dtype(a, b);
    if (!cr_dtype_is_float(dt)) dt = CR_DT_F32;
    /* both grads need b; only b's needs a */
    unsigned save = (cr_grad_needed(b) ? 1u : 0u) | (cr_grad_needed(a) || cr_grad_needed(b) ? 2u : 0u);
    return cr_binary_op(out, CR_OP_DIV, a, b, dt, dt, save, 0);
}
/* d(a/b) = g/b, -g*a/b^2 */
cr_status cr_grad_div(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    cr_tensor *a, *b, *t1 = NULL, *t2 = NULL, *t3 = NULL;
    cr_status st;
    if ((st = cr_saved_in(n, 1, &b)) || (n->edges[1].node && (st = cr_saved_in(n, 0, &a)))) return st;
    if ((st = cr_op_div(&t1, gout[0], b))) return st; /* g/b */
    if (n->edges[0].node &&
        (st = cr_sum_to_shape(&gin[0], t1, n->in_meta[0].ndim, n->in_meta[0].shape)))
        goto done;
    if (n->edges[1].node) {
        if ((st = cr_op_mul(&t2, t1, a))) goto done; /* g*a/b */
        if ((st = cr_op_div(&t3, t2, b))) goto done; /* g*a/b^2 */
        cr_tensor_free(t2);
        if ((st = cr_op_neg(&t2, t3))) goto done;
        st = cr_sum_to_shape(&gin[1], t2, n->in_meta[1].ndim, n->in_meta[1].shape);
    }
done:
    cr_tensor_free(t1);
    cr_tensor_free(t2);
    cr_tensor_free(t3);
    return st;
}

/* ---- helpers for the derivative rules below ---- */
#define TRY(x)                                                                       \
    do {                                                                             \
        if ((st = (x))) goto done;                                                   \
    } while (0)

static void free_all(cr_tensor **ts, int n) {
    for (int k = 0; k < n; k++) cr_tensor_free(ts[k]);
}

/* ---- pow: a^b elementwise; integers by repeated squaring ---- */
static int64_t ipow(int64_t a, int64_t b) {
    if (b < 0) /* what PyTorch's kernel gives: only 1 and -1 survive a negative power */
        return a == 1 ? 1 : a == -1 ? ((b & 1) ? -1 : 1) : 0;
    uint64_t r = 1, x = (uint64_t)a; /* unsigned: overflow wraps instead of being UB */
    while (b) {
        if (b & 1) r *= x;
        x *= x;
        b >>= 1;
    }
    return (int64_t)r;
}
static void loop_pow(char **p, const int64_t *s, int64_t n, const void *ctx) {
    cr_dtype dt = *(const cr_dtype *)ctx;
    switch (dt) {
    case CR_DT_F32: BIN_LOOP(float, powf(a, b)); break;
    case CR_DT_F64: BIN_LOOP(double, pow(a, b)); break;
    case CR_DT_F16: BIN_LOOP_HALF(cr_f16_to_f32, cr_f32_to_f16, powf(a, b)); break;
    case CR_DT_BF16: BIN_LOOP_HALF(cr_bf16_to_f32, cr_f32_to_bf16, powf(a, b)); break;
    case CR_DT_I64: BIN_LOOP(int64_t, ipow(a, b)); break;
    case CR_DT_I32: BIN_LOOP(int32_t, (int32_t)ipow(a, b)); break;
    case CR_DT_U8: BIN_LOOP(uint8_t, (uint8_t)ipow(a, b)); break;
    case CR_DT_BOOL: BIN_LOOP(uint8_t, (uint8_t)(ipow(a, b) != 0)); break;
    default: break;
    }
}
cr_status cr_cpu_pow(cr_call *c) { return cr_run_binary(c, loop_pow); }
cr_status cr_op_pow(cr_tensor **out, cr_tensor *a, cr_tensor *b) {
    cr_status st = cr_check_binary("pow", a, b);
    if (st) return st;
    cr_dtype dt = cr_result_dtype(a, b);
    if (dt == CR_DT_BOOL) dt = CR_DT_I64;
    return cr_binary_op(out, CR_OP_POW, a, b, dt, dt, 3, 0);
}
/* As PyTorch: d/da = g*b*a^(b-1), zero where b == 0; d/db = g*a^b*log(a), zero where
 * a == 0 and b >= 0 (the limit, instead of 0*-inf). */
cr_status cr_grad_pow(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    cr_tensor *a, *b, *t[10] = {0};
    cr_status st;
    if ((st = cr_saved_in(n, 0, &a)) || (st = cr_saved_in(n, 1, &b))) return st;
    TRY(cr_tensor_scalar(&t[0], 0.0, gout[0]->dtype));
    TRY(cr_tensor_scalar(&t[1], 1.0, b->dtype));
    if (n->edges[0].node) {
        TRY(cr_op_sub(&t[2], b, t[1]));     /* b-1 */
        TRY(cr_op_pow(&t[3], a, t[2]));     /* a^(b-1) */
        TRY(cr_op_mul(&t[4], t[3], b));     /* b*a^(b-1) */
        TRY(cr_op_mul(&t[5], t[4], gout[0]));
        TRY(cr_op_eq(&t[6], b, t[0]));
        TRY(cr_op_where(&t[7], t[6], t[0], t[5]));
        TRY(cr_sum_to_shape(&gin[0], t[7], n->in_meta[0].ndim, n->in_meta[0].shape));
        free_all(t + 2, 6);
        memset(t + 2, 0, 6 * sizeof *t);
    }
    if (n->edges[1].node) {
        TRY(cr_op_pow(&t[2], a, b));
        TRY(cr_op_log(&t[3], a));
        TRY(cr_op_mul(&t[4], t[2], t[3])); /* a^b*log(a) */
        TRY(cr_op_eq(&t[5], a, t[0]));
        TRY(cr_op_ge(&t[6], b, t[0]));
        TRY(cr_op_logical_and(&t[7], t[5], t[6]));
        TRY(cr_op_where(&t[8], t[7], t[0], t[4]));
        TRY(cr_op_mul(&t[9], t[8], gout[0]));
        TRY(cr_sum_to_shape(&gin[1], t[9], n->in_meta[1].ndim, n->in_meta[1].shape));
    }
done:
    free_all(t, 10);
    return st;
}

/* ---- maximum, minimum: NaN wins, as in PyTorch ---- */
static void loop_maximum(char **p, const int64_t *s, int64_t n, const void *ctx) {
    cr_dtype dt = *(const cr_dtype *)ctx;
    BIN_ALL_TYPES((a > b || a != a) ? a : b, a > b ? a : b)
}
static void loop_minimum(char **p, const int64_t *s, int64_t n, const void *ctx) {
    cr_dtype dt = *(const cr_dtype *)ctx;
    BIN_ALL_TYPES((a < b || a != a) ? a : b, a < b ? a : b)
}
cr_status cr_cpu_maximum(cr_call *c) { return cr_run_binary(c, loop_maximum); }
cr_status cr_cpu_minimum(cr_call *c) { return cr_run_binary(c, loop_minimum); }
cr_status cr_op_maximum(cr_tensor **out, cr_tensor *a, cr_tensor *b) {
    cr_status st = cr_check_binary("maximum", a, b);
    if (st) return st;
    cr_dtype dt = cr_result_dtype(a, b);
    return cr_binary_op(out, CR_OP_MAXIMUM, a, b, dt, dt, 3, 0);
}
cr_status cr_op_minimum(cr_tensor **out, cr_tensor *a, cr_tensor *b) {
    cr_status st = cr_check_binary("minimum", a, b);
    if (st) return st;
    cr_dtype dt = cr_result_dtype(a, b);
    return cr_binary_op(out, CR_OP_MINIMUM, a, b, dt, dt, 3, 0);
}
/* The grad goes to the input that was picked, split evenly on ties (as PyTorch:
 * where(a == b, g/2, g) with the loser's side zeroed). */
static cr_status grad_max_min(cr_node *n, cr_tensor **gout, cr_tensor **gin, bool is_max) {
    cr_tensor *a, *b, *t[5] = {0};
    cr_status st;
    if ((st = cr_saved_in(n, 0, &a)) || (st = cr_saved_in(n, 1, &b))) return st;
    TRY(cr_tensor_scalar(&t[0], 0.5, gout[0]->dtype));
    TRY(cr_op_mul(&t[1], gout[0], t[0]));
    TRY(cr_op_eq(&t[2], a, b));
    TRY(cr_op_where(&t[3], t[2], t[1], gout[0]));
    for (int i = 0; i < 2; i++) {
        if (!n->edges[i].node) continue;
        cr_tensor *lost = NULL, *g = NULL;
        /* input 0 lost where a < b for maximum (a > b for minimum); input 1 the reverse */
        if (is_max == (i == 0)) st = cr_op_lt(&lost, a, b);
        else st = cr_op_gt(&lost, a, b);
        if (!st) st = cr_op_masked_fill(&g, t[3], lost, 0.0);
        if (!st) st = cr_sum_to_shape(&gin[i], g, n->in_meta[i].ndim, n->in_meta[i].shape);
        cr_tensor_free(lost);
        cr_tensor_free(g);
        if (st) goto done;
    }
done:
    free_all(t, 5);
    return st;
}
cr_status cr_grad_maximum(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    return grad_max_min(n, gout, gin, true);
}
cr_status cr_grad_minimum(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    return grad_max_min(n, gout, gin, false);
}

/* ---- add_relu: relu(a + b), the residual join; one pass instead of add then relu ---- */
static void loop_add_relu(char **p, const int64_t *s, int64_t n, const void *ctx) {
    cr_dtype dt = *(const cr_dtype *)ctx; /* float dtypes only; NaN stays NaN, as in relu */
    switch (dt) {
    case CR_DT_F32: BIN_LOOP(float, a + b < 0 ? 0.0f : a + b); break;
    case CR_DT_F64: BIN_LOOP(double, a + b < 0 ? 0.0 : a + b); break;
    case CR_DT_F16: BIN_LOOP_HALF(cr_f16_to_f32, cr_f32_to_f16, a + b < 0 ? 0.0f : a + b); break;
    case CR_DT_BF16: BIN_LOOP_HALF(cr_bf16_to_f32, cr_f32_to_bf16, a + b < 0 ? 0.0f : a + b); break;
    default: break;
    }
}
cr_status cr_cpu_add_relu(cr_call *c) { return cr_run_binary(c, loop_add_relu); }

cr_status cr_op_add_relu(cr_tensor **out, cr_tensor *a, cr_tensor *b) {
    cr_status st = cr_check_binary("add_relu", a, b);
    if (st) return st;
    cr_dtype dt = cr_result_dtype(a, b);
    if (!cr_dtype_is_float(dt))
        return cr_fail(CR_ERR_ARG, "add_relu: needs floating tensors (got %s and %s); use "
                       "add then relu for integers", cr_dtype_name(a->dtype),
                       cr_dtype_name(b->dtype));
    return cr_binary_op(out, CR_OP_ADD_RELU, a, b, dt, dt, 0, 1); /* the output masks the grad */
}
/* d relu(a+b) = g where the output is positive, summed back to each input's shape. */
cr_status cr_grad_add_relu(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    cr_tensor *y, *g;
    cr_status st = cr_saved_out(n, 0, &y);
    if (st || (st = cr_op_relu_backward(&g, gout[0], y))) return st;
    for (int i = 0; i < 2 && !st; i++)
        if (n->edges[i].node)
            st = cr_sum_to_shape(&gin[i], g, n->in_meta[i].ndim, n->in_meta[i].shape);
    cr_tensor_free(g);
    return st;
}
