/* unary.c — neg, dtype conversion (to), and the in-place writes (copy_, add_, mul_,
 * zero_) the engine and optimizers rely on; the unary entry and runner are
 * elementwise_run.c's. */
#include <math.h>

#include "elementwise_impl.h"


/* ---- neg ---- */
static void loop_neg(char **p, const int64_t *s, int64_t n, const void *ctx) {
    const cr_call *c = ctx;
    switch (c->in[0]->dtype) {
    case CR_DT_F32:
        for (int64_t i = 0; i < n; i++)
            *(float *)(p[0] + i * s[0]) = -*(const float *)(p[1] + i * s[1]);
        break;
    case CR_DT_F64:
        for (int64_t i = 0; i < n; i++)
            *(double *)(p[0] + i * s[0]) = -*(const double *)(p[1] + i * s[1]);
        break;
    default: {
        cr_dtype dt = c->in[0]->dtype;
        for (int64_t i = 0; i < n; i++)
            cr_store_f64(p[0] + i * s[0], dt, -cr_load_f64(p[1] + i * s[1], dt));
    }
    }
}
cr_status cr_cpu_neg(cr_call *c) { return cr_run_unary(c, loop_neg); }
cr_status cr_op_neg(cr_tensor **out, cr_tensor *t) {
    CR_CHECK_TENSOR("neg", t, "self");
    if (t->dtype == CR_DT_BOOL)
        return cr_fail(CR_ERR_ARG, "neg: negating a bool tensor is not defined; use "
                       "logical_not");
    return cr_unary_op(out, CR_OP_NEG, t, t->dtype, NULL, 0, 0, 0);
}
cr_status cr_grad_neg(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    (void)n;
    return cr_op_neg(&gin[0], gout[0]);
}

/* ---- to(dtype) ---- */
/* One conversion loop between f32 and a half type, with a dense run apart. */
#define HALF_CAST(TI, TO, CONVERT)                                                   \
    do {                                                                             \
        if (s[0] == (int64_t)sizeof(TO) && s[1] == (int64_t)sizeof(TI)) {          \
            TO *o = (TO *)p[0];                                                      \
            const TI *x = (const TI *)p[1];                                          \
            for (int64_t i = 0; i < n; i++) o[i] = CONVERT(x[i]);                    \
        } else {                                                                     \
            for (int64_t i = 0; i < n; i++)                                          \
                *(TO *)(p[0] + i * s[0]) = CONVERT(*(const TI *)(p[1] + i * s[1]));  \
        }                                                                            \
    } while (0)

static void loop_cast(char **p, const int64_t *s, int64_t n, const void *ctx) {
    const cr_call *c = ctx;
    cr_dtype from = c->in[0]->dtype, to = c->out[0]->dtype;
    if (from == CR_DT_F32 && to == CR_DT_F64) {
        for (int64_t i = 0; i < n; i++)
            *(double *)(p[0] + i * s[0]) = *(const float *)(p[1] + i * s[1]);
    } else if (from == CR_DT_F64 && to == CR_DT_F32) {
        for (int64_t i = 0; i < n; i++)
            *(float *)(p[0] + i * s[0]) = (float)*(const double *)(p[1] + i * s[1]);
    } else if (from == to) {
        /* copies (clone, contiguous, copy_): one memcpy for a dense run, else typed moves
         * of the bits; a memcpy call per element made a ViT's permute copies 14% of its
         * DINO step */
        const size_t es = cr_dtype_size(from);
        if (s[0] == (int64_t)es && s[1] == (int64_t)es) {
            memcpy(p[0], p[1], (size_t)n * es);
        } else if (es == 4) {
            for (int64_t i = 0; i < n; i++) *(uint32_t *)(p[0] + i * s[0]) = *(const uint32_t *)(p[1] + i * s[1]);
        } else if (es == 8) {
            for (int64_t i = 0; i < n; i++) *(uint64_t *)(p[0] + i * s[0]) = *(const uint64_t *)(p[1] + i * s[1]);
        } else if (es == 2) {
            for (int64_t i = 0; i < n; i++) *(uint16_t *)(p[0] + i * s[0]) = *(const uint16_t *)(p[1] + i * s[1]);
        } else { /* u8, bool: every dtype is 1, 2, 4 or 8 bytes */
            for (int64_t i = 0; i < n; i++) *(uint8_t *)(p[0] + i * s[0]) = *(const uint8_t *)(p[1] + i * s[1]);
        }
    } else if (from == CR_DT_F32 && to == CR_DT_BF16) { /* autocast's casts: typed, so they vectorise */
        HALF_CAST(float, uint16_t, cr_f32_to_bf16);
    } else if (from == CR_DT_BF16 && to == CR_DT_F32) {
        HALF_CAST(uint16_t, float, cr_bf16_to_f32);
    } else if (from == CR_DT_F32 && to == CR_DT_F16) {
        HALF_CAST(float, uint16_t, cr_f32_to_f16);
    } else if (from == CR_DT_F16 && to == CR_DT_F32) {
        HALF_CAST(uint16_t, float, cr_f16_to_f32);
    } else if (!cr_dtype_is_float(from) && !cr_dtype_is_float(to)) {
        for (int64_t i = 0; i < n; i++) /* integers exactly; narrower ones wrap */
            cr_store_i64(p[0] + i * s[0], to, cr_load_i64(p[1] + i * s[1], from));
    } else {
        for (int64_t i = 0; i < n; i++)
            cr_store_f64(p[0] + i * s[0], to, cr_load_f64(p[1] + i * s[1], from));
    }
}
cr_status cr_cpu_cast(cr_call *c) { return cr_run_unary(c, loop_cast); }
cr_status cr_op_to(cr_tensor **out, cr_tensor *t, cr_dtype dt) {
    CR_CHECK_TENSOR("to", t, "self");
    if ((unsigned)dt >= CR_DT_COUNT)
        return cr_fail(CR_ERR_ARG, "to: invalid dtype %d; use one of f32, f64, f16, bf16, i64, "
                       "i32, u8, bool", (int)dt);
    if (t->dtype == dt) {
        cr_tensor_retain(t);
        *out = t;
        return CR_OK;
    }
    return cr_unary_op(out, CR_OP_CAST, t, dt, NULL, 0, 0, 0);
}
/* The grad goes back to the source dtype (none for integer sources). */
cr_status cr_grad_cast(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    return cr_op_to(&gin[0], gout[0], n->in_meta[0].dtype);
}

/* ---- in-place writes ---- */
static cr_status inplace_check(const char *op, cr_tensor *dst, cr_tensor *src) {
    CR_CHECK_TENSOR(op, dst, "self");
    CR_CHECK_TENSOR(op, src, "src");
    cr_status st = cr_is_host_scalar(src) ? CR_OK : cr_check_same_device(op, dst, src);
    if (st) return st;
    int ndim;
    int64_t shape[CR_MAX_DIMS];
    if ((st = cr_broadcast_shapes(op, dst, src, &ndim, shape))) return st;
    if (ndim != dst->ndim || memcmp(shape, dst->shape, sizeof(int64_t) * (size_t)ndim)) {
        char a[160], b[160];
        return cr_fail(CR_ERR_ARG, "%s: source of shape %s does not broadcast to the "
                       "destination's shape %s", op, cr_shape_str(src, a, sizeof a),
                       cr_shape_str(dst, b, sizeof b));
    }
    return cr_check_inplace(op, dst);
}

cr_status cr_cpu_copy_(cr_call *c) {
    /* out[0] is the destination; in[0] the source cast to its dtype */
    cr_call u = *c;
    u.in = u.in_small;
    u.in_small[0] = c->in[0];
    return cr_run_unary(&u, loop_cast);
}

cr_status cr_copy_into(cr_tensor *dst, cr_tensor *src) {
    cr_call u;
    cr_call_init(&u, CR_OP_COPY_, 1, 1);
    u.in[0] = src;
    u.out[0] = dst;
    /* both on the cpu: straight to the kernel; otherwise dispatch checks the devices */
    return cr_tensor_on_cpu(dst) && cr_tensor_on_cpu(src) ? cr_cpu_copy_(&u) : cr_dispatch(&u);
}

static cr_status run_inplace(cr_op op, cr_tensor *dst, cr_tensor *src, double alpha) {
    cr_call c;
    cr_status st = cr_call_init(&c, op, 1, 1);
    c.in[0] = src;
    c.out[0] = dst;
    c.f[0] = alpha;
    if ((st = cr_dispatch(&c))) return st;
    cr_tensor_bump_version(dst);
    return CR_OK;
}

/* A source on another device is moved to dst's first (loading cpu weights into a GPU
 * model, as PyTorch's copy_ does). */
cr_status cr_op_copy_(cr_tensor *dst, cr_tensor *src) {
    if (dst && src && !cr_same_device(dst, src) && !cr_is_host_scalar(src)) {
        cr_tensor *moved;
        bool was = cr_grad_set_enabled(false);
        cr_status st = cr_op_to_device(&moved, src, dst->storage->device,
                                       dst->storage->device_index, false);
        cr_grad_set_enabled(was);
        if (st) return st;
        st = cr_op_copy_(dst, moved);
        cr_tensor_free(moved);
        return st;
    }
    cr_status st = inplace_check("copy_", dst, src);
    if (st) return st;
    if (dst->storage == src->storage && dst->offset == src->offset &&
        !memcmp(dst->stride, src->stride, sizeof dst->stride) && cr_same_shape(dst, src) &&
        dst->dtype == src->dtype)
        return CR_OK;
    cr_tensor *s = src;
    if (dst->storage == src->storage) { /* overlapping views: copy through a temporary */
        if ((st = cr_op_clone(&s, src))) return st;
    } else {
        cr_tensor_retain(s);
    }
    st = run_inplace(CR_OP_COPY_, dst, s, 0);
    cr_tensor_free(s);
    return st;
}

static void loop_axpy(char **p, const int64_t *s, int64_t n, const void *ctx) {
    const cr_call *c = ctx;
    double alpha = c->f[0];
    cr_dtype dt = c->out[0]->dtype;
    if (dt == CR_DT_F32) {
        float a = (float)alpha;
        for (int64_t i = 0; i < n; i++)
            *(float *)(p[0] + i * s[0]) += a * *(const float *)(p[1] + i * s[1]);
    } else if (dt == CR_DT_F64) {
        for (int64_t i = 0; i < n; i++)
            *(double *)(p[0] + i * s[0]) += alpha * *(const double *)(p[1] + i * s[1]);
    } else if (dt == CR_DT_BF16 && c->in[0]->dtype == CR_DT_BF16) { /* grad sums under autocast */
        float a = (float)alpha;
        for (int64_t i = 0; i < n; i++) {
            uint16_t *o = (uint16_t *)(p[0] + i * s[0]);
            const float add = cr_bf16_to_f32(*(const uint16_t *)(p[1] + i * s[1]));
            *o = cr_f32_to_bf16(cr_bf16_to_f32(*o) + a * add);
        }
    } else {
        for (int64_t i = 0; i < n; i++)
            cr_store_f64(p[0] + i * s[0], dt,
                         cr_load_f64(p[0] + i * s[0], dt) + alpha * cr_load_f64(p[1] + i * s[1], dt));
    }
}
static void loop_scale(char **p, const int64_t *s, int64_t n, const void *ctx) {
    const cr_call *c = ctx;
    cr_dtype dt = c->out[0]->dtype;
    if (dt == CR_DT_F32) {
        for (int64_t i = 0; i < n; i++)
            *(float *)(p[0] + i * s[0]) *= *(const float *)(p[1] + i * s[1]);
    } else {
        for (int64_t i = 0; i < n; i++)
            cr_store_f64(p[0] + i * s[0], dt,
                         cr_load_f64(p[0] + i * s[0], dt) * cr_load_f64(p[1] + i * s[1], dt));
    }
}
cr_status cr_cpu_add_(cr_call *c) {
    cr_call u = *c;
    u.in = u.in_small;
    return cr_run_unary(&u, loop_axpy);
}
cr_status cr_cpu_mul_(cr_call *c) {
    cr_call u = *c;
    u.in = u.in_small;
    return cr_run_unary(&u, loop_scale);
}

static cr_status inplace_binary(cr_op op, const char *name, cr_tensor *dst, cr_tensor *src,
                                double alpha) {
    cr_status st = inplace_check(name, dst, src);
    if (st) return st;
    cr_tensor *s;
    bool prev = cr_grad_set_enabled(false);
    if (dst->storage == src->storage) st = cr_op_clone(&s, src);
    else st = cr_cast_if_needed(&s, src, dst->dtype);
    if (!st && s->dtype != dst->dtype) {
        cr_tensor *t;
        st = cr_op_to(&t, s, dst->dtype);
        cr_tensor_free(s);
        s = t;
    }
    cr_grad_set_enabled(prev);
    if (st) return st;
    st = run_inplace(op, dst, s, alpha);
    cr_tensor_free(s);
    return st;
}
cr_status cr_op_add_(cr_tensor *dst, cr_tensor *src, double alpha) {
    return inplace_binary(CR_OP_ADD_, "add_", dst, src, alpha);
}
cr_status cr_op_mul_(cr_tensor *dst, cr_tensor *src) {
    return inplace_binary(CR_OP_MUL_, "mul_", dst, src, 1.0);
}
cr_status cr_op_zero_(cr_tensor *t) { return cr_op_fill_(t, 0.0); }
