/* ops/elementwise.h — arithmetic, comparisons and unary math, element by element, with
 * broadcasting and type promotion (float beats int beats bool; the wider float wins).
 * Comparisons return bool tensors and have no derivative. */
#ifndef CR_OPS_ELEMENTWISE_H
#define CR_OPS_ELEMENTWISE_H

#define CR_OPS_ELEMENTWISE(X)                                                                                 \
    X(ADD, "add", cr_cpu_add, cr_gpu_add, cr_grad_add, KEEP)                                                  \
    X(SUB, "sub", cr_cpu_sub, cr_gpu_sub, cr_grad_sub, KEEP)                                                  \
    X(MUL, "mul", cr_cpu_mul, cr_gpu_mul, cr_grad_mul, KEEP)                                                  \
    X(DIV, "div", cr_cpu_div, cr_gpu_div, cr_grad_div, KEEP)                                                  \
    X(POW, "pow", cr_cpu_pow, cr_gpu_pow, cr_grad_pow, KEEP)                                                  \
    X(MAXIMUM, "maximum", cr_cpu_maximum, cr_gpu_maximum, cr_grad_maximum, KEEP)                              \
    X(MINIMUM, "minimum", cr_cpu_minimum, cr_gpu_minimum, cr_grad_minimum, KEEP)                              \
    X(EQ, "eq", cr_cpu_eq, cr_gpu_eq, cr_grad_none, KEEP)                                                     \
    X(NE, "ne", cr_cpu_ne, cr_gpu_ne, cr_grad_none, KEEP)                                                     \
    X(LT, "lt", cr_cpu_lt, cr_gpu_lt, cr_grad_none, KEEP)                                                     \
    X(LE, "le", cr_cpu_le, cr_gpu_le, cr_grad_none, KEEP)                                                     \
    X(GT, "gt", cr_cpu_gt, cr_gpu_gt, cr_grad_none, KEEP)                                                     \
    X(GE, "ge", cr_cpu_ge, cr_gpu_ge, cr_grad_none, KEEP)                                                     \
    X(LOGICAL_AND, "logical_and", cr_cpu_logical_and, cr_gpu_logical_and, cr_grad_none, KEEP)                 \
    X(LOGICAL_OR, "logical_or", cr_cpu_logical_or, cr_gpu_logical_or, cr_grad_none, KEEP)                     \
    X(LOGICAL_NOT, "logical_not", cr_cpu_logical_not, cr_gpu_logical_not, cr_grad_none, KEEP)                 \
    X(NEG, "neg", cr_cpu_neg, cr_gpu_neg, cr_grad_neg, KEEP)                                                  \
    X(ABS, "abs", cr_cpu_abs, cr_gpu_abs, cr_grad_abs, KEEP)                                                  \
    X(SIGN, "sign", cr_cpu_sign, cr_gpu_sign, cr_grad_sign, KEEP)                                             \
    X(EXP, "exp", cr_cpu_exp, cr_gpu_exp, cr_grad_exp, KEEP)                                                  \
    X(LOG, "log", cr_cpu_log, cr_gpu_log, cr_grad_log, KEEP)                                                  \
    X(SQRT, "sqrt", cr_cpu_sqrt, cr_gpu_sqrt, cr_grad_sqrt, KEEP)                                             \
    X(RSQRT, "rsqrt", cr_cpu_rsqrt, cr_gpu_rsqrt, cr_grad_rsqrt, KEEP)                                        \
    X(SIGMOID, "sigmoid", cr_cpu_sigmoid, cr_gpu_sigmoid, cr_grad_sigmoid, KEEP)                              \
    X(TANH, "tanh", cr_cpu_tanh, cr_gpu_tanh, cr_grad_tanh, KEEP)                                             \
    X(RELU, "relu", cr_cpu_relu, cr_gpu_relu, cr_grad_relu, KEEP)                                             \
    X(GELU, "gelu", cr_cpu_gelu, cr_gpu_gelu, cr_grad_gelu, KEEP)                                             \
    X(GELU_TANH, "gelu_tanh", cr_cpu_gelu_tanh, cr_gpu_gelu_tanh, cr_grad_gelu_tanh, KEEP)                    \
    X(POW_SCALAR, "pow_scalar", cr_cpu_pow_scalar, cr_gpu_pow_scalar, cr_grad_pow_scalar, KEEP)               \
    X(CLAMP, "clamp", cr_cpu_clamp, cr_gpu_clamp, cr_grad_clamp, KEEP)                                        \
    X(WHERE, "where", cr_cpu_where, cr_gpu_where, cr_grad_where, KEEP)                                        \
    X(MASKED_FILL, "masked_fill", cr_cpu_masked_fill, cr_gpu_masked_fill, cr_grad_masked_fill, KEEP)          \
    X(RELU_BACKWARD, "relu_backward", cr_cpu_relu_backward, cr_gpu_relu_backward, cr_grad_none, KEEP)         \
    X(ADD_RELU, "add_relu", cr_cpu_add_relu, cr_gpu_add_relu, cr_grad_add_relu, KEEP)                         \
    X(SIGMOID_BACKWARD, "sigmoid_backward", cr_cpu_sigmoid_backward,                                          \
      cr_gpu_sigmoid_backward, cr_grad_none, KEEP)                                                            \
    X(TANH_BACKWARD, "tanh_backward", cr_cpu_tanh_backward, cr_gpu_tanh_backward, cr_grad_none, KEEP)         \
    X(GELU_BACKWARD, "gelu_backward", cr_cpu_gelu_backward, cr_gpu_gelu_backward, cr_grad_none, KEEP)         \
    X(GELU_TANH_BACKWARD, "gelu_tanh_backward", cr_cpu_gelu_tanh_backward, cr_gpu_gelu_tanh_backward,          \
      cr_grad_none, KEEP)                                                                                     \
    X(CAST, "to", cr_cpu_cast, cr_gpu_cast, cr_grad_cast, KEEP)                                               \
    X(COPY_, "copy_", cr_cpu_copy_, cr_gpu_copy_, cr_grad_none, KEEP)                                         \
    X(ADD_, "add_", cr_cpu_add_, cr_gpu_add_, cr_grad_none, KEEP)                                             \
    X(MUL_, "mul_", cr_cpu_mul_, cr_gpu_mul_, cr_grad_none, KEEP)

/* Binary ops broadcast a and b (either may be a 0-dim tensor made from a number). */
cr_status cr_op_add(cr_tensor **out, cr_tensor *a, cr_tensor *b);
cr_status cr_op_sub(cr_tensor **out, cr_tensor *a, cr_tensor *b);
cr_status cr_op_mul(cr_tensor **out, cr_tensor *a, cr_tensor *b);
cr_status cr_op_div(cr_tensor **out, cr_tensor *a, cr_tensor *b); /* true division */
cr_status cr_op_pow(cr_tensor **out, cr_tensor *a, cr_tensor *b);
cr_status cr_op_maximum(cr_tensor **out, cr_tensor *a, cr_tensor *b);
cr_status cr_op_minimum(cr_tensor **out, cr_tensor *a, cr_tensor *b);
cr_status cr_op_eq(cr_tensor **out, cr_tensor *a, cr_tensor *b);
cr_status cr_op_ne(cr_tensor **out, cr_tensor *a, cr_tensor *b);
cr_status cr_op_lt(cr_tensor **out, cr_tensor *a, cr_tensor *b);
cr_status cr_op_le(cr_tensor **out, cr_tensor *a, cr_tensor *b);
cr_status cr_op_gt(cr_tensor **out, cr_tensor *a, cr_tensor *b);
cr_status cr_op_ge(cr_tensor **out, cr_tensor *a, cr_tensor *b);
cr_status cr_op_logical_and(cr_tensor **out, cr_tensor *a, cr_tensor *b);
cr_status cr_op_logical_or(cr_tensor **out, cr_tensor *a, cr_tensor *b);
cr_status cr_op_logical_not(cr_tensor **out, cr_tensor *t);
cr_status cr_op_neg(cr_tensor **out, cr_tensor *t);
cr_status cr_op_abs(cr_tensor **out, cr_tensor *t);
cr_status cr_op_sign(cr_tensor **out, cr_tensor *t);
cr_status cr_op_exp(cr_tensor **out, cr_tensor *t);
cr_status cr_op_log(cr_tensor **out, cr_tensor *t);
cr_status cr_op_sqrt(cr_tensor **out, cr_tensor *t);
cr_status cr_op_rsqrt(cr_tensor **out, cr_tensor *t);
cr_status cr_op_sigmoid(cr_tensor **out, cr_tensor *t);
cr_status cr_op_tanh(cr_tensor **out, cr_tensor *t);
cr_status cr_op_relu(cr_tensor **out, cr_tensor *t);
cr_status cr_op_gelu(cr_tensor **out, cr_tensor *t); /* exact, with erf */
/* the tanh approximation: x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
cr_status cr_op_gelu_tanh(cr_tensor **out, cr_tensor *t);
cr_status cr_op_pow_scalar(cr_tensor **out, cr_tensor *t, double exponent);
/* clamp to [lo, hi]; has_lo/has_hi say which bounds apply. */
cr_status cr_op_clamp(cr_tensor **out, cr_tensor *t, bool has_lo, double lo, bool has_hi,
                      double hi);
/* cond ? a : b, broadcasting all three; cond is bool. */
cr_status cr_op_where(cr_tensor **out, cr_tensor *cond, cr_tensor *a, cr_tensor *b);
/* t with value wherever mask (bool, broadcastable to t) is true. */
cr_status cr_op_masked_fill(cr_tensor **out, cr_tensor *t, cr_tensor *mask, double value);
/* Fused backward kernels of the activations (their derivative rules use them; loss and
 * norm kernels may too): grad * f'(x), from the saved output y for relu, sigmoid and tanh
 * and from the input x for gelu. grad and the saved tensor have the same shape. */
cr_status cr_op_relu_backward(cr_tensor **out, cr_tensor *grad, cr_tensor *y);
/* relu(a + b) in one pass (the residual join of ResNet blocks); float dtypes. */
cr_status cr_op_add_relu(cr_tensor **out, cr_tensor *a, cr_tensor *b);
cr_status cr_op_sigmoid_backward(cr_tensor **out, cr_tensor *grad, cr_tensor *y);
cr_status cr_op_tanh_backward(cr_tensor **out, cr_tensor *grad, cr_tensor *y);
cr_status cr_op_gelu_backward(cr_tensor **out, cr_tensor *grad, cr_tensor *x);
cr_status cr_op_gelu_tanh_backward(cr_tensor **out, cr_tensor *grad, cr_tensor *x);
/* dtype conversion; returns a new reference to t itself when dt is already t's dtype. */
cr_status cr_op_to(cr_tensor **out, cr_tensor *t, cr_dtype dt);
/* In place, with dst's version bumped: dst = src (broadcast to dst, converted, and moved
 * when src is on another device). */
cr_status cr_op_copy_(cr_tensor *dst, cr_tensor *src);
/* In place: dst += alpha * src; dst *= src. */
cr_status cr_op_add_(cr_tensor *dst, cr_tensor *src, double alpha);
cr_status cr_op_mul_(cr_tensor *dst, cr_tensor *src);
cr_status cr_op_zero_(cr_tensor *t);

#endif
