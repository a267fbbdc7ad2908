/* elementwise.c (cuda) — the CUDA column of the elementwise, creation and shape ops: each
 * call becomes one launch of kernels/elementwise.cu over the operands' merged dims
 * (ops/iter.c does the broadcasting and merging, as on the CPU). Views need no kernel, and
 * cat is a sequence of copies into slices of its output, as on the CPU. */
#include "cuda_impl.h"
#include "iter.h"

_Static_assert(CR_DT_F32 == 0 && CR_DT_F64 == 1 && CR_DT_F16 == 2 && CR_DT_BF16 == 3 &&
                   CR_DT_I64 == 4 && CR_DT_I32 == 5 && CR_DT_U8 == 6 && CR_DT_BOOL == 7,
               "kernels/*.cu number the dtypes as crescent.h does");
_Static_assert((int)CRK_MAX_DIMS == (int)CR_MAX_DIMS && (int)CRK_MAX_ARGS == (int)CR_ITER_MAX_ARGS,
               "crk_iter mirrors cr_iter");

/* How a call's tensors map to the kernel's operands. */
typedef enum { UNARY, BINARY, TERNARY, INPLACE, FILL } shape_kind;

typedef struct {
    crk_op kernel;
    shape_kind kind;
} ew_entry;

static ew_entry entries[CR_OP_COUNT];

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

static cr_status gpu_elementwise(cr_call *c) {
    const ew_entry *e = &entries[c->op];
    crk_compute compute;
    /* a value stored into an integer or bool output converts from double, as the cpu's
     * cr_store_f64 does (0.5 into bool is true, inf into i64 is 0) */
    cr_dtype od = c->out[0]->dtype;
    crk_compute value_compute = cr_dtype_is_float(od) ? compute_of(od) : CRK_F64;
    switch (e->kind) {
    case FILL: compute = value_compute; break;
    case INPLACE:
        compute = e->kernel == CRK_COPY ? conversion_compute(c->in[0]->dtype, c->out[0]->dtype)
                  : cr_dtype_is_float(c->out[0]->dtype) ? compute_of(c->out[0]->dtype)
                                                         : CRK_F64; /* add_ with a float alpha */
        break;
    case TERNARY: compute = compute_of(c->out[0]->dtype); break; /* where: cond is bool */
    default:
        compute = e->kernel == CRK_COPY ? conversion_compute(c->in[0]->dtype, c->out[0]->dtype)
                                        : compute_of(c->in[0]->dtype);
        if (c->op == CR_OP_MASKED_FILL) compute = value_compute;
    }
    return launch(c, e->kernel, e->kind, compute);
}

static void put(cr_op op, crk_op kernel, shape_kind kind) {
    entries[op] = (ew_entry){kernel, kind};
    cr_kernel_table[op][CR_DEV_CUDA] = gpu_elementwise;
}

void cr_gpu_register_elementwise(void) {
    static const struct {
        cr_op op;
        crk_op kernel;
    } binary[] = {
        {CR_OP_ADD, CRK_ADD}, {CR_OP_SUB, CRK_SUB}, {CR_OP_MUL, CRK_MUL}, {CR_OP_DIV, CRK_DIV},
        {CR_OP_POW, CRK_POW}, {CR_OP_MAXIMUM, CRK_MAXIMUM}, {CR_OP_MINIMUM, CRK_MINIMUM},
        {CR_OP_EQ, CRK_EQ}, {CR_OP_NE, CRK_NE}, {CR_OP_LT, CRK_LT}, {CR_OP_LE, CRK_LE},
        {CR_OP_GT, CRK_GT}, {CR_OP_GE, CRK_GE}, {CR_OP_LOGICAL_AND, CRK_LOGICAL_AND},
        {CR_OP_LOGICAL_OR, CRK_LOGICAL_OR}, {CR_OP_MASKED_FILL, CRK_MASKED_FILL},
        {CR_OP_RELU_BACKWARD, CRK_RELU_BACKWARD}, {CR_OP_ADD_RELU, CRK_ADD_RELU},
        {CR_OP_SIGMOID_BACKWARD, CRK_SIGMOID_BACKWARD}, {CR_OP_TANH_BACKWARD, CRK_TANH_BACKWARD},
        {CR_OP_GELU_BACKWARD, CRK_GELU_BACKWARD},
    };
    static const struct {
        cr_op op;
        crk_op kernel;
    } unary[] = {
        {CR_OP_LOGICAL_NOT, CRK_LOGICAL_NOT}, {CR_OP_NEG, CRK_NEG}, {CR_OP_ABS, CRK_ABS},
        {CR_OP_SIGN, CRK_SIGN}, {CR_OP_EXP, CRK_EXP}, {CR_OP_LOG, CRK_LOG},
        {CR_OP_SQRT, CRK_SQRT}, {CR_OP_RSQRT, CRK_RSQRT}, {CR_OP_SIGMOID, CRK_SIGMOID},
        {CR_OP_TANH, CRK_TANH}, {CR_OP_RELU, CRK_RELU}, {CR_OP_GELU, CRK_GELU},
        {CR_OP_POW_SCALAR, CRK_POW_SCALAR}, {CR_OP_CLAMP, CRK_CLAMP}, {CR_OP_CAST, CRK_COPY},
        {CR_OP_CLONE, CRK_COPY},
    };
    for (size_t i = 0; i < sizeof binary / sizeof *binary; i++)
        put(binary[i].op, binary[i].kernel, BINARY);
    for (size_t i = 0; i < sizeof unary / sizeof *unary; i++)
        put(unary[i].op, unary[i].kernel, UNARY);
    put(CR_OP_WHERE, CRK_WHERE, TERNARY);
    put(CR_OP_COPY_, CRK_COPY, INPLACE);
    put(CR_OP_ADD_, CRK_AXPY, INPLACE);
    put(CR_OP_MUL_, CRK_SCALE, INPLACE);
    put(CR_OP_FILL, CRK_FILL, FILL);
    /* no arithmetic: views only set geometry, cat copies slices through cr_copy_into,
     * to_device runs its copy through the backend */
    const cr_op device_free[] = {CR_OP_VIEW, CR_OP_PERMUTE, CR_OP_EXPAND, CR_OP_SLICE, CR_OP_CAT,
                                 CR_OP_TO_DEVICE};
    for (size_t i = 0; i < sizeof device_free / sizeof *device_free; i++)
        cr_kernel_table[device_free[i]][CR_DEV_CUDA] = cr_kernel_table[device_free[i]][CR_DEV_CPU];
}
