/* elementwise.c (cuda) — the CUDA kernels of the elementwise ops and of clone, cast, fill
 * and the in-place copy_, add_ and mul_ (the op rows name them, cr_gpu_<op>): each call
 * becomes one launch of kernels/elementwise.cu's kernel for the op over the operands'
 * merged dims (ops/iter.c does the broadcasting and merging, as on the CPU). Views, cat
 * and to_device need no kernel: their rows name the CPU function for both devices. The
 * backend's other files copy and fill through cr_gpu_copy_into / cr_gpu_fill_value. */
#include "cuda_impl.h"
#include "iter.h"

_Static_assert(CR_DT_F32 == 0 && CR_DT_F64 == 1 && CR_DT_F16 == 2 && CR_DT_BF16 == 3 &&
                   CR_DT_I64 == 4 && CR_DT_I32 == 5 && CR_DT_U8 == 6 && CR_DT_BOOL == 7,
               "kernels/*.cu number the dtypes as crescent.h does");
_Static_assert((int)CRK_MAX_DIMS == (int)CR_MAX_DIMS && (int)CRK_MAX_ARGS == (int)CR_ITER_MAX_ARGS,
               "crk_iter mirrors cr_iter");

/* How a call's tensors map to the kernel's operands. */
typedef enum { UNARY, BINARY, TERNARY, INPLACE, FILL } shape_kind;


static crk_compute compute_of(cr_dtype dt) {
    return dt == CR_DT_F64 ? CRK_F64 : cr_dtype_is_float(dt) ? CRK_F32 : CRK_I64;
}

/* A conversion computes in f64 whenever a side is f64 or an integer meets a float (the
 * CPU converts through double), in i64 between integers, else in f32. */
static crk_compute conversion_compute(cr_dtype from, cr_dtype to) {
    bool ff = cr_dtype_is_float(from), ft = cr_dtype_is_float(to);
    if (from == CR_DT_F64 || to == CR_DT_F64 || ff != ft) return CRK_F64;
    return ff ? CRK_F32 : CRK_I64;
}

static cr_status launch(cr_call *c, crk_op kop, shape_kind kind, crk_compute compute) {
    int device;
    cr_status st = cr_gpu_call_device(c, &device);
    if (st) return st;
    cr_tensor *args[CR_ITER_MAX_ARGS] = {c->out[0]};
    int nargs = kind == FILL ? 1 : kind == UNARY || kind == INPLACE ? 2 : kind == BINARY ? 3 : 4;
    for (int k = 1; k < nargs; k++) args[k] = c->in[k - 1];
    cr_iter it;
    cr_iter_init(&it, nargs, args);
    crk_iter kit;
    memset(&kit, 0, sizeof kit);
    kit.ndim = it.ndim;
    kit.nargs = nargs;
    kit.numel = it.numel;
    for (int d = 0; d < it.ndim; d++) kit.shape[d] = it.shape[d];
    for (int k = 0; k < nargs; k++) {
        kit.base[k] = it.base[k];
        kit.dtype[k] = args[k]->dtype;
        for (int d = 0; d < it.ndim; d++) kit.stride[k][d] = it.stride[k][d];
        if (cr_tensor_on_cpu(args[k])) { /* a 0-dim number (checked by cr_dispatch) */
            kit.host_scalar |= 1u << k;
            kit.scalar[k] = cr_load_f64(cr_tensor_ptr(args[k]), args[k]->dtype);
            kit.base[k] = NULL;
        }
    }
    return cr_gpu_check(crk_elementwise(kop, compute, &kit, c->f, cr_gpu_stream(device)),
                        cr_op_name(c->op));
}

/* One op's call with its kernel and the way its tensors map to the kernel's operands. */
static cr_status gpu_elementwise(cr_call *c, crk_op kernel, shape_kind kind) {
    crk_compute compute;
    /* a value stored into an integer or bool output converts from double, as the cpu's
     * cr_store_f64 does (0.5 into bool is true, inf into i64 is 0) */
    cr_dtype od = c->out[0]->dtype;
    crk_compute value_compute = cr_dtype_is_float(od) ? compute_of(od) : CRK_F64;
    switch (kind) {
    case FILL: compute = value_compute; break;
    case INPLACE:
        compute = kernel == CRK_COPY ? conversion_compute(c->in[0]->dtype, c->out[0]->dtype)
                  : cr_dtype_is_float(c->out[0]->dtype) ? compute_of(c->out[0]->dtype)
                                                         : CRK_F64; /* add_ with a float alpha */
        break;
    case TERNARY: compute = compute_of(c->out[0]->dtype); break; /* where: cond is bool */
    default:
        compute = kernel == CRK_COPY ? conversion_compute(c->in[0]->dtype, c->out[0]->dtype)
                                      : compute_of(c->in[0]->dtype);
        if (c->op == CR_OP_MASKED_FILL) compute = value_compute;
    }
    return launch(c, kernel, kind, compute);
}

/* The kernels the op rows name: each launches its elementwise kernel on the operands. */
cr_status cr_gpu_add(cr_call *c) { return gpu_elementwise(c, CRK_ADD, BINARY); }
cr_status cr_gpu_sub(cr_call *c) { return gpu_elementwise(c, CRK_SUB, BINARY); }
cr_status cr_gpu_mul(cr_call *c) { return gpu_elementwise(c, CRK_MUL, BINARY); }
cr_status cr_gpu_div(cr_call *c) { return gpu_elementwise(c, CRK_DIV, BINARY); }
cr_status cr_gpu_pow(cr_call *c) { return gpu_elementwise(c, CRK_POW, BINARY); }
cr_status cr_gpu_maximum(cr_call *c) { return gpu_elementwise(c, CRK_MAXIMUM, BINARY); }
cr_status cr_gpu_minimum(cr_call *c) { return gpu_elementwise(c, CRK_MINIMUM, BINARY); }
cr_status cr_gpu_eq(cr_call *c) { return gpu_elementwise(c, CRK_EQ, BINARY); }
cr_status cr_gpu_ne(cr_call *c) { return gpu_elementwise(c, CRK_NE, BINARY); }
cr_status cr_gpu_lt(cr_call *c) { return gpu_elementwise(c, CRK_LT, BINARY); }
cr_status cr_gpu_le(cr_call *c) { return gpu_elementwise(c, CRK_LE, BINARY); }
cr_status cr_gpu_gt(cr_call *c) { return gpu_elementwise(c, CRK_GT, BINARY); }
cr_status cr_gpu_ge(cr_call *c) { return gpu_elementwise(c, CRK_GE, BINARY); }
cr_status cr_gpu_logical_and(cr_call *c) { return gpu_elementwise(c, CRK_LOGICAL_AND, BINARY); }
cr_status cr_gpu_logical_or(cr_call *c) { return gpu_elementwise(c, CRK_LOGICAL_OR, BINARY); }
cr_status cr_gpu_masked_fill(cr_call *c) { return gpu_elementwise(c, CRK_MASKED_FILL, BINARY); }
cr_status cr_gpu_relu_backward(cr_call *c) { return gpu_elementwise(c, CRK_RELU_BACKWARD, BINARY); }
cr_status cr_gpu_add_relu(cr_call *c) { return gpu_elementwise(c, CRK_ADD_RELU, BINARY); }
cr_status cr_gpu_sigmoid_backward(cr_call *c) { return gpu_elementwise(c, CRK_SIGMOID_BACKWARD, BINARY); }
cr_status cr_gpu_tanh_backward(cr_call *c) { return gpu_elementwise(c, CRK_TANH_BACKWARD, BINARY); }
cr_status cr_gpu_gelu_backward(cr_call *c) { return gpu_elementwise(c, CRK_GELU_BACKWARD, BINARY); }
cr_status cr_gpu_gelu_tanh_backward(cr_call *c) { return gpu_elementwise(c, CRK_GELU_TANH_BACKWARD, BINARY); }
cr_status cr_gpu_logical_not(cr_call *c) { return gpu_elementwise(c, CRK_LOGICAL_NOT, UNARY); }
cr_status cr_gpu_neg(cr_call *c) { return gpu_elementwise(c, CRK_NEG, UNARY); }
cr_status cr_gpu_abs(cr_call *c) { return gpu_elementwise(c, CRK_ABS, UNARY); }
cr_status cr_gpu_sign(cr_call *c) { return gpu_elementwise(c, CRK_SIGN, UNARY); }
cr_status cr_gpu_exp(cr_call *c) { return gpu_elementwise(c, CRK_EXP, UNARY); }
cr_status cr_gpu_log(cr_call *c) { return gpu_elementwise(c, CRK_LOG, UNARY); }
cr_status cr_gpu_sqrt(cr_call *c) { return gpu_elementwise(c, CRK_SQRT, UNARY); }
cr_status cr_gpu_rsqrt(cr_call *c) { return gpu_elementwise(c, CRK_RSQRT, UNARY); }
cr_status cr_gpu_sigmoid(cr_call *c) { return gpu_elementwise(c, CRK_SIGMOID, UNARY); }
cr_status cr_gpu_tanh(cr_call *c) { return gpu_elementwise(c, CRK_TANH, UNARY); }
cr_status cr_gpu_relu(cr_call *c) { return gpu_elementwise(c, CRK_RELU, UNARY); }
cr_status cr_gpu_gelu(cr_call *c) { return gpu_elementwise(c, CRK_GELU, UNARY); }
cr_status cr_gpu_gelu_tanh(cr_call *c) { return gpu_elementwise(c, CRK_GELU_TANH, UNARY); }
cr_status cr_gpu_pow_scalar(cr_call *c) { return gpu_elementwise(c, CRK_POW_SCALAR, UNARY); }
cr_status cr_gpu_clamp(cr_call *c) { return gpu_elementwise(c, CRK_CLAMP, UNARY); }
cr_status cr_gpu_cast(cr_call *c) { return gpu_elementwise(c, CRK_COPY, UNARY); }
cr_status cr_gpu_clone(cr_call *c) { return gpu_elementwise(c, CRK_COPY, UNARY); }
cr_status cr_gpu_where(cr_call *c) { return gpu_elementwise(c, CRK_WHERE, TERNARY); }
cr_status cr_gpu_copy_(cr_call *c) { return gpu_elementwise(c, CRK_COPY, INPLACE); }
cr_status cr_gpu_add_(cr_call *c) { return gpu_elementwise(c, CRK_AXPY, INPLACE); }
cr_status cr_gpu_mul_(cr_call *c) { return gpu_elementwise(c, CRK_SCALE, INPLACE); }
cr_status cr_gpu_fill(cr_call *c) { return gpu_elementwise(c, CRK_FILL, FILL); }

/* ---- for the backend's own files: the kernels without an op entry (no dispatch, no
 * autograd), so cuda/ composes nothing from the op layer above it ---- */
static cr_status own_launch(cr_op op, crk_op kernel, shape_kind kind, cr_tensor *dst, cr_tensor *src,
                            double value) {
    cr_call c;
    cr_status st = cr_call_init(&c, op, src ? 1 : 0, 1);
    if (st) return st;
    if (src) c.in[0] = src;
    c.out[0] = dst;
    c.f[0] = value;
    return gpu_elementwise(&c, kernel, kind);
}

cr_status cr_gpu_copy_into(cr_tensor *dst, cr_tensor *src) {
    return own_launch(CR_OP_COPY_, CRK_COPY, INPLACE, dst, src, 0);
}

cr_status cr_gpu_fill_value(cr_tensor *t, double value) {
    return own_launch(CR_OP_FILL, CRK_FILL, FILL, t, NULL, value);
}

cr_status cr_gpu_contiguous_copy(cr_tensor **out, cr_tensor *t) {
    cr_status st = cr_tensor_alloc_like(out, t);
    if (st) return st;
    if ((st = cr_gpu_copy_into(*out, t))) {
        cr_tensor_release(*out);
        *out = NULL;
    }
    return st;
}
