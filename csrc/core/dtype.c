/* dtype.c — dtype sizes, names, promotion, the half-precision conversions, and the cast
 * rules. The load/store-as-double helpers are the slow universal path used by reference
 * kernels for dtypes that have no typed loop.
 *
 * Cast rules (docs/internals/tensors.md, "Casts"): a value from Lua (cr.tensor, cr.full,
 * fill_, a number beside a tensor) that an integer dtype cannot hold (NaN, an infinity,
 * or outside its range) is an error, as in PyTorch; a fraction is truncated toward zero.
 * A float tensor cast to an integer dtype truncates toward zero and saturates at the
 * dtype's range, NaN giving 0 (PyTorch leaves these cases to the platform). An integer
 * tensor cast to a narrower integer dtype wraps modulo 2^bits, as in PyTorch and C. */
#include <math.h>

#include "core.h"

#define NAME_OF(e, name, bytes, is_float) [e] = name,
#define SIZE_OF(e, name, bytes, is_float) [e] = bytes,
#define FLOAT_OF(e, name, bytes, is_float) [e] = is_float,
static const char *const dtype_names[CR_DT_COUNT] = {CR_DTYPES(NAME_OF)};
static const size_t dtype_sizes[CR_DT_COUNT] = {CR_DTYPES(SIZE_OF)};
static const bool dtype_is_float[CR_DT_COUNT] = {CR_DTYPES(FLOAT_OF)};
#undef NAME_OF
#undef SIZE_OF
#undef FLOAT_OF

const char *cr_dtype_name(cr_dtype dt) {
    return (unsigned)dt < CR_DT_COUNT ? dtype_names[dt] : "invalid";
}
size_t cr_dtype_size(cr_dtype dt) { return (unsigned)dt < CR_DT_COUNT ? dtype_sizes[dt] : 0; }
bool cr_dtype_is_float(cr_dtype dt) { return (unsigned)dt < CR_DT_COUNT && dtype_is_float[dt]; }

/* Category rank: bool < integer < float. Within floats f16/bf16 < f32 < f64, and
 * f16 with bf16 gives f32, as in PyTorch. Within integers the wider wins. */
cr_dtype cr_dtype_promote(cr_dtype a, cr_dtype b) {
    if (a == b) return a;
    bool fa = cr_dtype_is_float(a), fb = cr_dtype_is_float(b);
    if (fa && fb) {
        if (a == CR_DT_F64 || b == CR_DT_F64) return CR_DT_F64;
        return CR_DT_F32; /* f32 with a half, or f16 with bf16 */
    }
    if (fa) return a;
    if (fb) return b;
    if (a == CR_DT_BOOL) return b;
    if (b == CR_DT_BOOL) return a;
    if (a == CR_DT_I64 || b == CR_DT_I64) return CR_DT_I64;
    if (a == CR_DT_I32 || b == CR_DT_I32) return CR_DT_I32;
    return CR_DT_U8;
}

double cr_load_f64(const void *p, cr_dtype dt) {
    switch (dt) {
    case CR_DT_F32: return *(const float *)p;
    case CR_DT_F64: return *(const double *)p;
    case CR_DT_F16: return cr_f16_to_f32(*(const uint16_t *)p);
    case CR_DT_BF16: return cr_bf16_to_f32(*(const uint16_t *)p);
    case CR_DT_I64: return (double)*(const int64_t *)p;
    case CR_DT_I32: return *(const int32_t *)p;
    case CR_DT_U8: return *(const uint8_t *)p;
    case CR_DT_BOOL: return *(const uint8_t *)p ? 1.0 : 0.0;
    default: CR_ASSERT(!"bad dtype"); return 0;
    }
}

/* The range of an integer dtype, as doubles: lo and hi are the smallest and largest
 * values; hi_open is the first double above hi (2^63 for i64, whose hi rounds up). */
static void int_range(cr_dtype dt, double *lo, double *hi_open) {
    switch (dt) {
    case CR_DT_I64: *lo = -9223372036854775808.0, *hi_open = 9223372036854775808.0; break;
    case CR_DT_I32: *lo = -2147483648.0, *hi_open = 2147483648.0; break;
    default: *lo = 0, *hi_open = 256.0; break; /* u8 */
    }
}

static bool is_int_dtype(cr_dtype dt) { return dt == CR_DT_I64 || dt == CR_DT_I32 || dt == CR_DT_U8; }

bool cr_dtype_holds(cr_dtype dt, double v) {
    if (!is_int_dtype(dt)) return true;
    double lo, hi_open;
    int_range(dt, &lo, &hi_open);
    return v > lo - 1 && v < hi_open; /* NaN fails both */
}

cr_status cr_check_value(const char *op, cr_dtype dt, double v) {
    if (cr_dtype_holds(dt, v)) return CR_OK;
    const char *range = dt == CR_DT_I64 ? "[-2^63, 2^63)" : dt == CR_DT_I32 ? "[-2^31, 2^31)" : "[0, 255]";
    char val[40];
    if (v != v) snprintf(val, sizeof val, "NaN");
    else snprintf(val, sizeof val, "%.17g", v);
    return cr_fail(CR_ERR_ARG, "%s: %s does not fit %s (integers in %s); give a value in range, or a float dtype", op,
                   val, cr_dtype_name(dt), range);
}

/* A float value cast to an integer dtype: toward zero, saturated, NaN 0. */
static int64_t saturate(cr_dtype dt, double v) {
    double lo, hi_open;
    int_range(dt, &lo, &hi_open);
    if (v != v) return 0;
    if (v <= lo) return dt == CR_DT_I64 ? INT64_MIN : (int64_t)lo;
    if (v >= hi_open) return dt == CR_DT_I64 ? INT64_MAX : (int64_t)hi_open - 1;
    return (int64_t)v;
}

void cr_store_f64(void *p, cr_dtype dt, double v) {
    switch (dt) {
    case CR_DT_F32: *(float *)p = (float)v; break;
    case CR_DT_F64: *(double *)p = v; break;
    case CR_DT_F16: *(uint16_t *)p = cr_f32_to_f16((float)v); break;
    case CR_DT_BF16: *(uint16_t *)p = cr_f32_to_bf16((float)v); break;
    case CR_DT_I64: *(int64_t *)p = saturate(dt, v); break;
    case CR_DT_I32: *(int32_t *)p = (int32_t)saturate(dt, v); break;
    case CR_DT_U8: *(uint8_t *)p = (uint8_t)saturate(dt, v); break;
    case CR_DT_BOOL: *(uint8_t *)p = v != 0; break;
    default: CR_ASSERT(!"bad dtype");
    }
}

void cr_store_i64(void *p, cr_dtype dt, int64_t v) {
    switch (dt) {
    case CR_DT_I64: *(int64_t *)p = v; break;
    case CR_DT_I32: *(int32_t *)p = (int32_t)(uint32_t)v; break; /* modulo 2^32 */
    case CR_DT_U8: *(uint8_t *)p = (uint8_t)v; break;
    case CR_DT_BOOL: *(uint8_t *)p = v != 0; break;
    default: cr_store_f64(p, dt, (double)v);
    }
}

int64_t cr_load_i64(const void *p, cr_dtype dt) {
    switch (dt) {
    case CR_DT_I64: return *(const int64_t *)p;
    case CR_DT_I32: return *(const int32_t *)p;
    case CR_DT_U8: return *(const uint8_t *)p;
    case CR_DT_BOOL: return *(const uint8_t *)p != 0;
    default: return saturate(CR_DT_I64, cr_load_f64(p, dt));
    }
}
