/* compare.c — comparisons (eq, ne, lt, le, gt, ge) and logical ops (and, or, not). Both
 * operands are promoted to a common dtype (a number beside a tensor does not widen it),
 * compared in that dtype, and the result is a bool tensor without a derivative. */
#include "elementwise_impl.h"

/* CR_BIN_LOOP (elementwise_impl.h) with a bool output instead of one of the input type. */
#define CMP_LOOP(T, EXPR) CR_BIN_LOOP(uint8_t, T, EXPR)
#define CMP_LOOP_HALF(LOAD, EXPR) CR_BIN_LOOP_HALF(uint8_t, LOAD, (uint8_t), EXPR)

#define CMP_ALL_TYPES(EXPR)                                                          \
    switch (dt) {                                                                    \
    case CR_DT_F32: CMP_LOOP(float, EXPR); break;                                    \
    case CR_DT_F64: CMP_LOOP(double, EXPR); break;                                   \
    case CR_DT_F16: CMP_LOOP_HALF(cr_f16_to_f32, EXPR); break;                       \
    case CR_DT_BF16: CMP_LOOP_HALF(cr_bf16_to_f32, EXPR); break;                     \
    case CR_DT_I64: CMP_LOOP(int64_t, EXPR); break;                                  \
    case CR_DT_I32: CMP_LOOP(int32_t, EXPR); break;                                  \
    case CR_DT_U8:                                                                   \
    case CR_DT_BOOL: CMP_LOOP(uint8_t, EXPR); break;                                 \
    default: break;                                                                  \
    }

static void loop_eq(char **p, const int64_t *s, int64_t n, const void *ctx) {
    cr_dtype dt = *(const cr_dtype *)ctx;
    CMP_ALL_TYPES(a == b)
}
static void loop_ne(char **p, const int64_t *s, int64_t n, const void *ctx) {
    cr_dtype dt = *(const cr_dtype *)ctx;
    CMP_ALL_TYPES(a != b)
}
static void loop_lt(char **p, const int64_t *s, int64_t n, const void *ctx) {
    cr_dtype dt = *(const cr_dtype *)ctx;
    CMP_ALL_TYPES(a < b)
}
static void loop_le(char **p, const int64_t *s, int64_t n, const void *ctx) {
    cr_dtype dt = *(const cr_dtype *)ctx;
    CMP_ALL_TYPES(a <= b)
}
static void loop_gt(char **p, const int64_t *s, int64_t n, const void *ctx) {
    cr_dtype dt = *(const cr_dtype *)ctx;
    CMP_ALL_TYPES(a > b)
}
static void loop_ge(char **p, const int64_t *s, int64_t n, const void *ctx) {
    cr_dtype dt = *(const cr_dtype *)ctx;
    CMP_ALL_TYPES(a >= b)
}
static void loop_logical_and(char **p, const int64_t *s, int64_t n, const void *ctx) {
    cr_dtype dt = *(const cr_dtype *)ctx;
    CMP_ALL_TYPES(a != 0 && b != 0)
}
static void loop_logical_or(char **p, const int64_t *s, int64_t n, const void *ctx) {
    cr_dtype dt = *(const cr_dtype *)ctx;
    CMP_ALL_TYPES(a != 0 || b != 0)
}

cr_status cr_cpu_eq(cr_call *c) { return cr_run_binary(c, loop_eq); }
cr_status cr_cpu_ne(cr_call *c) { return cr_run_binary(c, loop_ne); }
cr_status cr_cpu_lt(cr_call *c) { return cr_run_binary(c, loop_lt); }
cr_status cr_cpu_le(cr_call *c) { return cr_run_binary(c, loop_le); }
cr_status cr_cpu_gt(cr_call *c) { return cr_run_binary(c, loop_gt); }
cr_status cr_cpu_ge(cr_call *c) { return cr_run_binary(c, loop_ge); }
cr_status cr_cpu_logical_and(cr_call *c) { return cr_run_binary(c, loop_logical_and); }
cr_status cr_cpu_logical_or(cr_call *c) { return cr_run_binary(c, loop_logical_or); }

static cr_status compare(cr_tensor **out, cr_op op, cr_tensor *a, cr_tensor *b) {
    cr_status st = cr_check_binary(cr_op_name(op), a, b);
    if (st) return st;
    return cr_binary_op(out, op, a, b, cr_result_dtype(a, b), CR_DT_BOOL, 0, 0);
}
cr_status cr_op_eq(cr_tensor **out, cr_tensor *a, cr_tensor *b) { return compare(out, CR_OP_EQ, a, b); }
cr_status cr_op_ne(cr_tensor **out, cr_tensor *a, cr_tensor *b) { return compare(out, CR_OP_NE, a, b); }
cr_status cr_op_lt(cr_tensor **out, cr_tensor *a, cr_tensor *b) { return compare(out, CR_OP_LT, a, b); }
cr_status cr_op_le(cr_tensor **out, cr_tensor *a, cr_tensor *b) { return compare(out, CR_OP_LE, a, b); }
cr_status cr_op_gt(cr_tensor **out, cr_tensor *a, cr_tensor *b) { return compare(out, CR_OP_GT, a, b); }
cr_status cr_op_ge(cr_tensor **out, cr_tensor *a, cr_tensor *b) { return compare(out, CR_OP_GE, a, b); }
cr_status cr_op_logical_and(cr_tensor **out, cr_tensor *a, cr_tensor *b) {
    return compare(out, CR_OP_LOGICAL_AND, a, b);
}
cr_status cr_op_logical_or(cr_tensor **out, cr_tensor *a, cr_tensor *b) {
    return compare(out, CR_OP_LOGICAL_OR, a, b);
}

/* ---- logical_not: x == 0, for any input dtype ---- */
static void loop_logical_not(char **p, const int64_t *s, int64_t n, const void *ctx) {
    const cr_call *c = ctx;
    cr_dtype dt = c->in[0]->dtype;
    uint8_t *o = (uint8_t *)p[0];
    switch (dt) {
    case CR_DT_BOOL:
    case CR_DT_U8:
        if (s[0] == 1 && s[1] == 1) {
            const uint8_t *x = (const uint8_t *)p[1];
            for (int64_t i = 0; i < n; i++) o[i] = x[i] == 0;
            break;
        }
        for (int64_t i = 0; i < n; i++) o[i * s[0]] = *(const uint8_t *)(p[1] + i * s[1]) == 0;
        break;
    case CR_DT_F32:
        for (int64_t i = 0; i < n; i++) o[i * s[0]] = *(const float *)(p[1] + i * s[1]) == 0;
        break;
    default:
        for (int64_t i = 0; i < n; i++) o[i * s[0]] = cr_load_f64(p[1] + i * s[1], dt) == 0;
        break;
    }
}
cr_status cr_cpu_logical_not(cr_call *c) { return cr_run_unary(c, loop_logical_not); }
cr_status cr_op_logical_not(cr_tensor **out, cr_tensor *t) {
    return cr_unary_op(out, CR_OP_LOGICAL_NOT, t, CR_DT_BOOL, NULL, 0, 0, 0);
}
