/* elementwise_impl.h — what the elementwise kernels share (private to csrc/ops): the
 * entry and runner functions of elementwise_run.c, cr_copy_into (unary.c), and the
 * typed inner-loop macros. */
#ifndef CR_ELEMENTWISE_IMPL_H
#define CR_ELEMENTWISE_IMPL_H

#include "iter.h"

/* Result dtype of a binary op: promotion where a 0-dim operand does not widen a tensor
 * of its own category (x_f16 * 2.0 stays f16), as in PyTorch. */
cr_dtype cr_result_dtype(const cr_tensor *a, const cr_tensor *b);
/* New reference to t converted to dt (recorded, so grads flow back through it). */
cr_status cr_cast_if_needed(cr_tensor **out, cr_tensor *t, cr_dtype dt);
cr_status cr_check_binary(const char *op, cr_tensor *a, cr_tensor *b);
/* Broadcast a and b, cast both to `compute`, allocate a `result` output, dispatch and
 * record (saving the cast inputs in save_in, the output when save_out is 1). */
cr_status cr_binary_op(cr_tensor **out, cr_op op, cr_tensor *a, cr_tensor *b,
                       cr_dtype compute, cr_dtype result, unsigned save_in, unsigned save_out);
/* Kernel body for 2-input ops: iterates out, in[0], in[1]; ctx = &in[0]->dtype. */
cr_status cr_run_binary(cr_call *c, cr_loop_fn fn);

/* One input, one output of dtype `result`; c.f[] carries scalar parameters. */
cr_status cr_unary_op(cr_tensor **out, cr_op op, cr_tensor *t, cr_dtype result,
                      const double *params, int nparams, unsigned save_in, unsigned save_out);
/* Kernel body for 1-input ops: iterates out, in[0]; ctx points at the cr_call. */
cr_status cr_run_unary(cr_call *c, cr_loop_fn fn);
/* dst = src (cast to dst's dtype) over any strides of either, on dst's device: the copy
 * kernels use between layouts. Not recorded, no checks: dst is a fresh tensor or view. */
cr_status cr_copy_into(cr_tensor *dst, cr_tensor *src);

/* One dense run of a binary loop: a and b (of type T) from the expressions A and B of i,
 * o[i] = STORE(EXPR); CR_BIN_AS_IS stores as is. */
#define CR_BIN_DENSE(T, A, B, STORE, EXPR)                                           \
    for (int64_t i = 0; i < n; i++) {                                                \
        const T a = (A), b = (B);                                                    \
        o[i] = STORE(EXPR);                                                          \
    }
#define CR_BIN_AS_IS(v) (v)
/* The inner loop of a binary op for one dtype pair: out of type TO, inputs of type TI,
 * `a` and `b` bound for EXPR. It handles the layouts that matter: all contiguous, either
 * operand a broadcast scalar (x * 2, 1 - x, a [B, 1, 1] factor over rows: all three
 * vectorised), and general strides. Used inside a cr_loop_fn, where p, s and n are its
 * arguments. */
#define CR_BIN_LOOP(TO, TI, EXPR)                                                    \
    do {                                                                             \
        TO *o = (TO *)p[0];                                                          \
        const TI *x = (const TI *)p[1], *y = (const TI *)p[2];                       \
        const int64_t so = s[0] / (int64_t)sizeof(TO), sx = s[1] / (int64_t)sizeof(TI), \
                      sy = s[2] / (int64_t)sizeof(TI);                               \
        if (so == 1 && sx == 1 && sy == 1) {                                         \
            CR_BIN_DENSE(TI, x[i], y[i], CR_BIN_AS_IS, EXPR)                         \
        } else if (so == 1 && sx == 1 && sy == 0) {                                  \
            const TI y0 = y[0];                                                      \
            CR_BIN_DENSE(TI, x[i], y0, CR_BIN_AS_IS, EXPR)                           \
        } else if (so == 1 && sx == 0 && sy == 1) {                                  \
            const TI x0 = x[0];                                                      \
            CR_BIN_DENSE(TI, x0, y[i], CR_BIN_AS_IS, EXPR)                           \
        } else {                                                                     \
            for (int64_t i = 0; i < n; i++) {                                        \
                TI a = x[i * sx], b = y[i * sy];                                     \
                o[i * so] = (EXPR);                                                  \
            }                                                                        \
        }                                                                            \
    } while (0)

/* The same for f16/bf16 inputs, computed in f32; STORE converts the result (the
 * identity-like (uint8_t) for bool outputs). */
#define CR_BIN_LOOP_HALF(TO, LOAD, STORE, EXPR)                                      \
    do {                                                                             \
        TO *o = (TO *)p[0];                                                          \
        const uint16_t *xp = (const uint16_t *)p[1], *yp = (const uint16_t *)p[2];   \
        const bool dense_o = s[0] == (int64_t)sizeof(TO);                            \
        if (dense_o && s[1] == 2 && s[2] == 2) {                                     \
            CR_BIN_DENSE(float, LOAD(xp[i]), LOAD(yp[i]), STORE, EXPR)               \
        } else if (dense_o && s[1] == 2 && s[2] == 0) {                              \
            const float y0 = LOAD(yp[0]);                                            \
            CR_BIN_DENSE(float, LOAD(xp[i]), y0, STORE, EXPR)                        \
        } else if (dense_o && s[1] == 0 && s[2] == 2) {                              \
            const float x0 = LOAD(xp[0]);                                            \
            CR_BIN_DENSE(float, x0, LOAD(yp[i]), STORE, EXPR)                        \
        } else {                                                                     \
            for (int64_t i = 0; i < n; i++) {                                        \
                float a = LOAD(*(const uint16_t *)(p[1] + i * s[1]));                \
                float b = LOAD(*(const uint16_t *)(p[2] + i * s[2]));                \
                *(TO *)(p[0] + i * s[0]) = STORE(EXPR);                              \
            }                                                                        \
        }                                                                            \
    } while (0)

#endif
