/* sort_impl.h — the stable key sort shared by sort, topk (index family) and randperm
 * (random.c). Every value is mapped to a uint64 key whose unsigned order is the value
 * order, so one sort serves every dtype; the payload is the element's position. Private
 * to csrc/ops. */
#ifndef CR_SORT_IMPL_H
#define CR_SORT_IMPL_H

#include "internal.h"

typedef struct {
    uint64_t key;
    int64_t idx;
} cr_sort_pair;

/* Stable ascending sort of a[n] by key; tmp has room for n pairs. With fast = true an
 * LSD radix sort on bytes, else (the reference) a merge sort; both give the same order. */
void cr_sort_pairs(cr_sort_pair *a, cr_sort_pair *tmp, int64_t n, bool fast);

/* Order-preserving keys. Floats: -0 equals +0, every NaN is above +inf (PyTorch puts NaN
 * last in an ascending sort). Signed integers: the sign bit flipped. */
static inline uint64_t cr_sort_key_f64(double v) {
    if (v != v) return UINT64_MAX;
    if (v == 0) v = 0.0;
    uint64_t b;
    memcpy(&b, &v, sizeof b);
    return (b >> 63) ? ~b : b | ((uint64_t)1 << 63);
}
static inline uint64_t cr_sort_key(const char *p, cr_dtype dt) {
    switch (dt) {
    case CR_DT_F32: return cr_sort_key_f64(*(const float *)p);
    case CR_DT_F64: return cr_sort_key_f64(*(const double *)p);
    case CR_DT_I64: return (uint64_t)*(const int64_t *)p ^ ((uint64_t)1 << 63);
    case CR_DT_I32: return (uint64_t)(int64_t)*(const int32_t *)p ^ ((uint64_t)1 << 63);
    case CR_DT_U8: return *(const uint8_t *)p;
    case CR_DT_BOOL: return *(const uint8_t *)p != 0;
    default: return cr_sort_key_f64(cr_load_f64(p, dt)); /* f16, bf16 */
    }
}

#endif
