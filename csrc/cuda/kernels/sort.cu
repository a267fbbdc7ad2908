// sort.cu — sort and topk along one dim on the GPU with ops/sort.c's order. Every element
// gets ops/sort_impl.h's order-preserving key (in 32 bits where the dtype allows: the
// same order and the same ties as the CPU's 64-bit keys), complemented within its width
// for a descending sort, and its position e = row * n + j as payload. Two stable radix
// sorts (CUB) then give each row's order: first by key over all elements, then by row. The
// second keeps the first's order within a row, and the first keeps position order among
// equal keys, so every row ends up sorted by (key, position), exactly as the CPU's merge
// sort and heap selection order it. topk writes the first k of each sorted row.
#include <cub/cub.cuh>
#include <stdint.h>

#include "common.cuh"
#include "sort.h"

namespace {

// Bits of a dtype's key: its unsigned order is the value order.
int key_bits(int dt) {
    switch (dt) {
    case F64: case I64: return 64;
    case U8: return 8;
    case BOOL: return 1;
    default: return 32;
    }
}

// ---- keys, as cr_sort_key: NaN above everything, -0 as +0 --------------------------------
__device__ __forceinline__ uint64_t key_f32(float v) {
    if (v != v) return 0xffffffffu;
    uint32_t b = v == 0.0f ? 0u : __float_as_uint(v); // -0 as +0
    return (b >> 31) ? (uint32_t)~b : b | 0x80000000u;
}

__device__ __forceinline__ uint64_t key_f64(double v) {
    if (v != v) return ~0ull;
    uint64_t b = v == 0.0 ? 0ull : (uint64_t)__double_as_longlong(v); // -0 as +0
    return (b >> 63) ? ~b : b | (1ull << 63);
}

__device__ __forceinline__ uint64_t key_of(const char *in, int64_t off, int dt) {
    switch (dt) {
    case F32: return key_f32(((const float *)in)[off]);
    case F64: return key_f64(((const double *)in)[off]);
    case F16: return key_f32(cr_f16_to_f32(((const uint16_t *)in)[off]));
    case BF16: return key_f32(cr_bf16_to_f32(((const uint16_t *)in)[off]));
    case I64: return (uint64_t)((const int64_t *)in)[off] ^ (1ull << 63);
    case I32: return (uint32_t)((const int32_t *)in)[off] ^ 0x80000000u;
    case U8: return ((const uint8_t *)in)[off];
    default: return ((const uint8_t *)in)[off] != 0;
    }
}

__device__ __forceinline__ int64_t row_offset(const crk_sort &p, int64_t r) {
    int64_t off = 0;
    for (int d = p.nr - 1; d >= 0; d--) {
        off += (r % p.rshape[d]) * p.rstride[d];
        r /= p.rshape[d];
    }
    return off;
}

// keys[e], vals[e] = e for e = r * n + j; `flip` complements the key within its width.
template <typename K, typename V>
__global__ void make_keys(const crk_sort p, int64_t total, uint64_t flip, K *keys, V *vals) {
    GRID_STRIDE(e, total) {
        int64_t r = e / p.n, j = e - r * p.n;
        keys[e] = (K)(key_of(p.in, row_offset(p, r) + j * p.stride, p.dtype) ^ flip);
        vals[e] = (V)e;
    }
}

template <typename K, typename V>
__global__ void row_keys(int64_t total, int64_t n, const V *vals, K *keys) {
    GRID_STRIDE(q, total) { keys[q] = (K)((int64_t)vals[q] / n); }
}

template <typename E, typename V> __global__ void write_rows(const crk_sort p, const V *vals) {
    GRID_STRIDE(t, p.rows * p.k) {
        int64_t r = t / p.k, j = t - r * p.k;
        int64_t pos = (int64_t)vals[r * p.n + j] - r * p.n;
        int64_t o = (r / p.inner) * p.k * p.inner + r % p.inner + j * p.inner;
        ((E *)p.values)[o] = ((const E *)p.in)[row_offset(p, r) + pos * p.stride];
        p.indices[o] = pos;
    }
}

size_t align256(size_t b) { return (b + 255) & ~(size_t)255; }

int bits_for(uint64_t max_value) {
    int b = 1;
    while (b < 64 && (max_value >> b) != 0) b++;
    return b;
}

template <typename K, typename V> size_t cub_bytes(int64_t n, int end_bit) {
    size_t temp = 0;
    cub::DoubleBuffer<K> keys(nullptr, nullptr);
    cub::DoubleBuffer<V> vals(nullptr, nullptr);
    if (cub::DeviceRadixSort::SortPairs(nullptr, temp, keys, vals, n, 0, end_bit) != cudaSuccess)
        return 0;
    return temp;
}

// The scratch of one sort: CUB's temporary storage, then two key and two payload buffers.
template <typename K, typename V> struct layout {
    size_t temp, kbytes, vbytes, total;
    explicit layout(const crk_sort *p) {
        int64_t n = p->rows * p->n;
        size_t t1 = cub_bytes<K, V>(n, key_bits(p->dtype));
        size_t t2 = p->rows > 1 ? cub_bytes<K, V>(n, bits_for((uint64_t)(p->rows - 1))) : 0;
        temp = t1 > t2 ? t1 : t2;
        kbytes = align256(sizeof(K) * (size_t)n);
        vbytes = align256(sizeof(V) * (size_t)n);
        total = align256(temp) + 2 * kbytes + 2 * vbytes;
    }
};

template <typename V> void launch_write(const crk_sort *p, const V *vals, cudaStream_t s) {
    unsigned g = grid_for(p->rows * p->k);
    switch (dtype_size(p->dtype)) {
    case 8: write_rows<uint64_t, V><<<g, THREADS, 0, s>>>(*p, vals); break;
    case 4: write_rows<uint32_t, V><<<g, THREADS, 0, s>>>(*p, vals); break;
    case 2: write_rows<uint16_t, V><<<g, THREADS, 0, s>>>(*p, vals); break;
    default: write_rows<uint8_t, V><<<g, THREADS, 0, s>>>(*p, vals); break;
    }
}

template <typename K, typename V>
int sort_with(const crk_sort *p, void *workspace, size_t bytes, cudaStream_t s) {
    layout<K, V> L(p);
    if (bytes < L.total) return (int)cudaErrorInvalidValue;
    const int64_t total = p->rows * p->n;
    const int bits = key_bits(p->dtype);
    char *w = (char *)workspace;
    K *k0 = (K *)(w + align256(L.temp)), *k1 = (K *)((char *)k0 + L.kbytes);
    V *v0 = (V *)((char *)k1 + L.kbytes), *v1 = (V *)((char *)v0 + L.vbytes);
    uint64_t flip = p->descending ? (bits == 64 ? ~0ull : (1ull << bits) - 1) : 0;
    make_keys<K, V><<<grid_for(total), THREADS, 0, s>>>(*p, total, flip, k0, v0);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return (int)err;
    cub::DoubleBuffer<K> keys(k0, k1);
    cub::DoubleBuffer<V> vals(v0, v1);
    size_t temp = L.temp;
    err = cub::DeviceRadixSort::SortPairs(w, temp, keys, vals, total, 0, bits, s);
    if (err != cudaSuccess) return (int)err;
    if (p->rows > 1) { // regroup by row; stable, so each row keeps its (key, position) order
        row_keys<K, V><<<grid_for(total), THREADS, 0, s>>>(total, p->n, vals.Current(), keys.Current());
        if ((err = cudaGetLastError()) != cudaSuccess) return (int)err;
        temp = L.temp;
        err = cub::DeviceRadixSort::SortPairs(w, temp, keys, vals, total, 0,
                                              bits_for((uint64_t)(p->rows - 1)), s);
        if (err != cudaSuccess) return (int)err;
    }
    launch_write<V>(p, vals.Current(), s);
    return (int)cudaGetLastError();
}

// Payloads in 32 bits when positions fit; keys in 32 bits when the dtype's keys and (for
// the regrouping) the row numbers fit too.
enum kind { K32_V32, K64_V32, K64_V64 };
kind kind_of(const crk_sort *p) {
    bool v32 = (uint64_t)(p->rows * p->n) <= UINT32_MAX;
    if (!v32) return K64_V64;
    return key_bits(p->dtype) <= 32 ? K32_V32 : K64_V32;
}

} // namespace

extern "C" size_t crk_sort_workspace(const crk_sort *p) {
    if (p->rows * p->n == 0 || p->k == 0) return 0;
    switch (kind_of(p)) {
    case K32_V32: return layout<uint32_t, uint32_t>(p).total;
    case K64_V32: return layout<unsigned long long, uint32_t>(p).total;
    default: return layout<unsigned long long, unsigned long long>(p).total;
    }
}

extern "C" int crk_sort_rows(const crk_sort *p, void *workspace, size_t bytes, cudaStream_t stream) {
    if (p->rows * p->n == 0 || p->k == 0) return 0;
    switch (kind_of(p)) {
    case K32_V32: return sort_with<uint32_t, uint32_t>(p, workspace, bytes, stream);
    case K64_V32: return sort_with<unsigned long long, uint32_t>(p, workspace, bytes, stream);
    default: return sort_with<unsigned long long, unsigned long long>(p, workspace, bytes, stream);
    }
}
