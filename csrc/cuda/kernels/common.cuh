// common.cuh — what crescent's CUDA kernels share (included by the .cu files only): the
// dtype codes in cr_dtype's order, the launch shape of grid-stride kernels, element sizes,
// and loads/stores of any dtype with the cpu's conversions (core/dtype.c's cr_load_f64 and
// cr_store_f64, core/half.h's f16/bf16 rounding), so GPU results keep the cpu's bits.
#ifndef CR_CUDA_KERNELS_COMMON_CUH
#define CR_CUDA_KERNELS_COMMON_CUH

#include <stdint.h>

#include "half.h"

namespace {

enum { F32 = 0, F64, F16, BF16, I64, I32, U8, BOOL }; // checked against crescent.h in elementwise.c

constexpr int THREADS = 256;

// Blocks for a grid-stride kernel over `work` items: at most 65535 * 8, the loops cover the rest.
inline unsigned grid_for(int64_t work, int threads = THREADS) {
    int64_t b = (work + threads - 1) / threads;
    return (unsigned)(b < 1 ? 1 : b > 65535 * 8 ? 65535 * 8 : b);
}

// Whether n elements (or offsets) index in 31 bits, so kernels may use 32-bit indices.
inline bool fits_32(int64_t n) { return n < ((int64_t)1 << 31); }

#define GRID_STRIDE(i, n)                                                              \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);          \
         i += (int64_t)gridDim.x * blockDim.x)

__host__ __device__ inline int dtype_size(int dt) {
    switch (dt) {
    case F64: case I64: return 8;
    case F32: case I32: return 4;
    case F16: case BF16: return 2;
    default: return 1;
    }
}

// The element at p as T (cr_load_f64's conversions).
template <typename T> __device__ __forceinline__ T load(const char *p, int dt) {
    switch (dt) {
    case F32: return (T) * (const float *)p;
    case F64: return (T) * (const double *)p;
    case F16: return (T)cr_f16_to_f32(*(const uint16_t *)p);
    case BF16: return (T)cr_bf16_to_f32(*(const uint16_t *)p);
    case I64: return (T) * (const int64_t *)p;
    case I32: return (T) * (const int32_t *)p;
    case U8: return (T) * (const uint8_t *)p;
    default: return (T)(*(const uint8_t *)p != 0);
    }
}

// An integer from v: a float truncated toward zero and saturated at [lo, hi] (hi_open the
// first double above hi), NaN 0; an integer as it is (a narrower store then wraps).
template <typename T>
__device__ __forceinline__ int64_t to_int(T v, double lo, double hi_open, int64_t lo_i, int64_t hi_i) {
    if constexpr ((T)0.5 != 0) {
        double d = (double)v;
        if (d != d) return 0;
        if (d <= lo) return lo_i;
        if (d >= hi_open) return hi_i;
        return (int64_t)d;
    } else {
        return (int64_t)v;
    }
}

// v stored at p in dtype dt (cr_store_f64's and cr_store_i64's rules, core/dtype.c:
// halves through f32; floats to integers toward zero, saturated, NaN 0; integers to
// narrower integers modulo 2^bits; nonzero to true).
template <typename T> __device__ __forceinline__ void store(char *p, int dt, T v) {
    switch (dt) {
    case F32: *(float *)p = (float)v; break;
    case F64: *(double *)p = (double)v; break;
    case F16: *(uint16_t *)p = cr_f32_to_f16((float)v); break;
    case BF16: *(uint16_t *)p = cr_f32_to_bf16((float)v); break;
    case I64: *(int64_t *)p = to_int(v, -9223372036854775808.0, 9223372036854775808.0, INT64_MIN, INT64_MAX); break;
    case I32:
        *(int32_t *)p = (int32_t)(uint32_t)to_int(v, -2147483648.0, 2147483648.0, INT32_MIN, INT32_MAX);
        break;
    case U8: *(uint8_t *)p = (uint8_t)to_int(v, 0.0, 256.0, 0, 255); break;
    default: *(uint8_t *)p = v != (T)0; break;
    }
}

} // namespace

#endif
