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

float cr_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    uint32_t bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: renormalise */
            exp = 127 - 15 + 1;
            while (!(man & 0x400)) {
                man <<= 1;
                exp--;
            }
            man &= 0x3ff;
            bits = sign | (exp << 23) | (man << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* Round to nearest even, with overflow to inf and gradual underflow. */
uint16_t cr_f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t absx = x & 0x7fffffffu;
    if (absx >= 0x7f800000u) /* inf or nan */
        return (uint16_t)(sign | 0x7c00 | (absx > 0x7f800000u ? 0x200 : 0));
    if (absx >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* rounds past 65504 */
    if (absx < 0x38800000u) {                                   /* subnormal or zero */
        if (absx < 0x33000000u) return (uint16_t)sign;
        uint32_t e = absx >> 23, m = (absx & 0x7fffff) | 0x800000;
        int shift = 126 - (int)e; /* value = m 2^(e - 150): bits dropped to reach 2^-24 units */
        uint32_t half = m >> shift, rem = m & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t e = (absx >> 23) - 127 + 15, m = absx & 0x7fffff;
    uint32_t h = (e << 10) | (m >> 13), rem = m & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
    return (uint16_t)(sign | h);
}

float cr_bf16_to_f32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t cr_f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40); /* quiet nan */
    x += 0x7fff + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
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
