/* fill.c — constant tensors: full/zeros/ones and fill_ (the kernel behind zero_). */
#include "elementwise_impl.h"

static void loop_fill(char **p, const int64_t *s, int64_t n, const void *ctx) {
    const cr_call *c = ctx;
    cr_dtype dt = c->out[0]->dtype;
    double v = c->f[0];
    if (dt == CR_DT_F32 && s[0] == 4) {
        float *o = (float *)p[0], f = (float)v;
        for (int64_t i = 0; i < n; i++) o[i] = f;
        return;
    }
    /* any other dtype: its bits once, then typed stores (a memcpy call per element made
     * the zero grads of a bf16 MoCo step's split batch norm half of the step) */
    union {
        char b[8];
        uint8_t u8;
        uint16_t u16;
        uint32_t u32;
        uint64_t u64;
    } one = {{0}};
    const int64_t es = (int64_t)cr_dtype_size(dt);
    cr_store_f64(one.b, dt, v);
    if (s[0] == es && one.u64 == 0) {
        memset(p[0], 0, (size_t)(n * es));
    } else if (es == 2) {
        for (int64_t i = 0; i < n; i++) *(uint16_t *)(p[0] + i * s[0]) = one.u16;
    } else if (es == 4) {
        for (int64_t i = 0; i < n; i++) *(uint32_t *)(p[0] + i * s[0]) = one.u32;
    } else if (es == 8) {
        for (int64_t i = 0; i < n; i++) *(uint64_t *)(p[0] + i * s[0]) = one.u64;
    } else {
        for (int64_t i = 0; i < n; i++) *(uint8_t *)(p[0] + i * s[0]) = one.u8;
    }
}

cr_status cr_cpu_fill(cr_call *c) {
    cr_tensor *args[1] = {c->out[0]};
    cr_iter it;
    cr_iter_init(&it, 1, args);
    cr_iter_run(&it, loop_fill, c);
    return CR_OK;
}

static cr_status run_fill(cr_tensor *t, double value) {
    cr_call c;
    cr_status st = cr_call_init(&c, CR_OP_FILL, 0, 1);
    c.out[0] = t;
    c.f[0] = value;
    return st ? st : cr_dispatch(&c);
}

cr_status cr_full_on(cr_tensor **out, int ndim, const int64_t *shape, double value, cr_dtype dt,
                     cr_device dev) {
    *out = NULL;
    cr_status st = cr_check_shape_arg("full", ndim, shape);
    if (!st && (unsigned)dt < CR_DT_COUNT) st = cr_check_value("full", dt, value);
    if (st) return st;
    if ((st = cr_tensor_alloc(out, ndim, shape, dt, dev))) return st;
    if ((st = run_fill(*out, value))) {
        cr_tensor_free(*out);
        *out = NULL;
    }
    return st;
}

cr_status cr_op_full(cr_tensor **out, int ndim, const int64_t *shape, double value,
                     cr_dtype dt, cr_devtype dev, int dev_index) {
    return cr_full_on(out, ndim, shape, value, dt, (cr_device){dev, dev_index});
}

cr_status cr_op_fill_(cr_tensor *t, double value) {
    CR_CHECK_TENSOR("fill_", t, "self");
    cr_status st = cr_check_value("fill_", t->dtype, value);
    if (!st) st = cr_check_inplace("fill_", t);
    if (st) return st;
    if ((st = run_fill(t, value))) return st;
    cr_tensor_bump_version(t);
    return CR_OK;
}
