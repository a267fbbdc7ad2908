/* dtype.c — dtype sizes, names, promotion, and the half-precision conversions. The
 * load/store-as-double helpers are the slow universal path used by reference kernels
 * for dtypes that have no typed loop. */
#include <math.h>

#include "internal.h"

static const char *dtype_names[CR_DT_COUNT] = {"f32", "f64", "f16", "bf16",
                                               "i64", "i32", "u8",  "bool"};
static const size_t dtype_sizes[CR_DT_COUNT] = {4, 8, 2, 2, 8, 4, 1, 1};

const char *cr_dtype_name(cr_dtype dt) {
    return (unsigned)dt < CR_DT_COUNT ? dtype_names[dt] : "invalid";
}
size_t cr_dtype_size(cr_dtype dt) { return (unsigned)dt < CR_DT_COUNT ? dtype_sizes[dt] : 0; }
bool cr_dtype_is_float(cr_dtype dt) {
    return dt == CR_DT_F32 || dt == CR_DT_F64 || dt == CR_DT_F16 || dt == CR_DT_BF16;
}

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

void cr_store_f64(void *p, cr_dtype dt, double v) {
    switch (dt) {
    case CR_DT_F32: *(float *)p = (float)v; break;
    case CR_DT_F64: *(double *)p = v; break;
    case CR_DT_F16: *(uint16_t *)p = cr_f32_to_f16((float)v); break;
    case CR_DT_BF16: *(uint16_t *)p = cr_f32_to_bf16((float)v); break;
    case CR_DT_I64: *(int64_t *)p = isfinite(v) ? (int64_t)v : 0; break;
    case CR_DT_I32: *(int32_t *)p = isfinite(v) ? (int32_t)v : 0; break;
    case CR_DT_U8: *(uint8_t *)p = isfinite(v) ? (uint8_t)(int64_t)v : 0; break;
    case CR_DT_BOOL: *(uint8_t *)p = v != 0; break;
    default: CR_ASSERT(!"bad dtype");
    }
}
