/* half.h — f16 and bf16 to and from f32, bit for bit the same on the cpu and in CUDA
 * kernels (static inline, __host__ __device__ under nvcc): round to nearest even,
 * overflow to inf, gradual underflow, quiet NaNs that keep their sign. One definition,
 * so a GPU cast or sum stores the bits the cpu stores, NaNs included. */
#ifndef CR_HALF_H
#define CR_HALF_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define CR_HD __host__ __device__
#else
#define CR_HD
#endif

static inline CR_HD uint32_t cr_f32_bits(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    return x;
}
static inline CR_HD float cr_bits_f32(uint32_t x) {
    float f;
    memcpy(&f, &x, 4);
    return f;
}

static inline CR_HD float cr_f16_to_f32(uint16_t h) {
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
    return cr_bits_f32(bits);
}

static inline CR_HD uint16_t cr_f32_to_f16(float f) {
    uint32_t x = cr_f32_bits(f);
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

static inline CR_HD float cr_bf16_to_f32(uint16_t h) { return cr_bits_f32((uint32_t)h << 16); }

/* Branch-free, so loops over it vectorise: a NaN keeps its top bits and is made quiet. */
static inline CR_HD uint16_t cr_f32_to_bf16(float f) {
    const uint32_t x = cr_f32_bits(f);
    const uint32_t rounded = x + 0x7fffu + ((x >> 16) & 1u);
    const uint32_t quiet_nan = x | 0x00400000u;
    return (uint16_t)(((x & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded) >> 16);
}

#endif
