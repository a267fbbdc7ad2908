// index.cu — the index family on the GPU with ops/index.c's semantics: the range check of
// index values, gathers (index_select, gather, embedding), scatters (scatter_add,
// index_add) and one_hot.
//
// Gathers run one thread per output element. Scatters use no atomics: the (destination
// element, source position) pairs are radix-sorted with CUB, which is stable, so the
// contributions to one destination element form one run in increasing position along the
// dim. One thread then adds its run to the destination from first to last, rounding to the
// dtype after each add: the CPU's sequence of operations, so the result equals the CPU's
// bit for bit on every run. A destination element hit by many indices is summed serially
// by its one thread.
#include <cub/cub.cuh>
#include <stdint.h>

#include "common.cuh"
#include "index.h"

namespace {

// ---- index values ---------------------------------------------------------------------
__device__ __forceinline__ int64_t index_at_offset(const crk_index &x, int64_t off) {
    return x.is_i32 ? (int64_t)((const int32_t *)x.data)[off] : ((const int64_t *)x.data)[off];
}

// The value at flat (row-major) position k.
__device__ __forceinline__ int64_t index_at(const crk_index &x, int64_t k) {
    int64_t off = 0;
    for (int d = x.ndim - 1; d >= 0; d--) {
        off += (k % x.shape[d]) * x.stride[d];
        k /= x.shape[d];
    }
    return index_at_offset(x, off);
}

__global__ void check_kernel(const crk_index x, int64_t size, unsigned long long *first_bad) {
    GRID_STRIDE(k, x.numel) {
        if ((uint64_t)index_at(x, k) >= (uint64_t)size) atomicMin(first_bad, (unsigned long long)k);
    }
}

// ---- domain geometry ------------------------------------------------------------------
// Adds the offsets of position x, row-major over dims [lo, hi), for dst and src.
__device__ __forceinline__ void add_offsets(const crk_move &m, int lo, int hi, int64_t x,
                                            int64_t &od, int64_t &os) {
    for (int d = hi - 1; d >= lo; d--) {
        int64_t c = x % m.shape[d];
        x /= m.shape[d];
        od += c * m.dst_stride[d];
        os += c * m.src_stride[d];
    }
}

// ---- gathers --------------------------------------------------------------------------
template <typename E> __global__ void gather_kernel(const crk_move m, int64_t n) {
    GRID_STRIDE(p, n) {
        int64_t q = p, od = 0, os = 0, oi = 0, j = 0;
        for (int d = m.nd - 1; d >= 0; d--) {
            int64_t c = q % m.shape[d];
            q /= m.shape[d];
            od += c * m.dst_stride[d];
            oi += c * m.idx_stride[d];
            if (d == m.dim) j = c;
            else os += c * m.src_stride[d];
        }
        int64_t v = m.full ? index_at_offset(m.index, oi) : index_at(m.index, j);
        ((E *)m.dst)[od] = ((const E *)m.src)[os + v * m.src_stride[m.dim]];
    }
}

// ---- the adds of the scatters, as ops/index.c's add_into does them (halves: core/half.h) ----
template <int DT> struct Sum;
template <> struct Sum<F32> {
    typedef float T;
    static __device__ __forceinline__ T add(T a, T b) { return __fadd_rn(a, b); }
};
template <> struct Sum<F64> {
    typedef double T;
    static __device__ __forceinline__ T add(T a, T b) { return __dadd_rn(a, b); }
};
template <> struct Sum<I64> { // wrapping, as the cpu's two's-complement adds
    typedef int64_t T;
    static __device__ __forceinline__ T add(T a, T b) { return (T)((uint64_t)a + (uint64_t)b); }
};
template <> struct Sum<I32> {
    typedef int32_t T;
    static __device__ __forceinline__ T add(T a, T b) { return (T)((uint32_t)a + (uint32_t)b); }
};
template <> struct Sum<U8> {
    typedef uint8_t T;
    static __device__ __forceinline__ T add(T a, T b) { return (T)(a + b); }
};
template <> struct Sum<BOOL> { // cr_store_f64(bool, a + b): nonzero is true
    typedef uint8_t T;
    static __device__ __forceinline__ T add(T a, T b) { return (a != 0 || b != 0) ? 1 : 0; }
};
template <> struct Sum<F16> { // the sum in f64, stored through f32 (cr_store_f64)
    typedef uint16_t T;
    static __device__ __forceinline__ T add(T a, T b) {
        return cr_f32_to_f16(__double2float_rn(__dadd_rn((double)cr_f16_to_f32(a), (double)cr_f16_to_f32(b))));
    }
};
template <> struct Sum<BF16> {
    typedef uint16_t T;
    static __device__ __forceinline__ T add(T a, T b) {
        return cr_f32_to_bf16(__double2float_rn(__dadd_rn((double)cr_bf16_to_f32(a), (double)cr_bf16_to_f32(b))));
    }
};

// ---- scatters: sort keys, then one thread per run ------------------------------------
// index_add: key = index value v[j], payload j.
template <typename K> __global__ void keys_per_position(const crk_index x, K *keys, K *vals) {
    GRID_STRIDE(j, x.numel) {
        keys[j] = (K)index_at(x, j);
        vals[j] = (K)j;
    }
}

// scatter_add: key = the destination element (o, v, i) as (o * dst_size + v) * inner + i,
// payload the domain position e = (o * along + j) * inner + i.
template <typename K> __global__ void keys_full(const crk_move m, int64_t n, K *keys, K *vals) {
    GRID_STRIDE(e, n) {
        int64_t q = e, oi = 0;
        for (int d = m.nd - 1; d >= 0; d--) {
            oi += (q % m.shape[d]) * m.idx_stride[d];
            q /= m.shape[d];
        }
        int64_t v = index_at_offset(m.index, oi);
        int64_t i = e % m.inner, o = e / (m.along * m.inner);
        keys[e] = (K)((o * m.dst_size + v) * m.inner + i);
        vals[e] = (K)e;
    }
}

// index_add: thread (o, p, i) over the sorted positions p; the first of each run of equal
// index values adds the run's source rows, in position order, into dst[o, v, i].
template <int DT, typename K>
__global__ void walk_per_position(const crk_move m, const K *keys, const K *vals) {
    typedef typename Sum<DT>::T T;
    const int64_t n = m.along, total = m.outer * n * m.inner;
    GRID_STRIDE(t, total) {
        int64_t i = t % m.inner, p = (t / m.inner) % n, o = t / (m.inner * n);
        K r = keys[p];
        if (p > 0 && keys[p - 1] == r) continue;
        int64_t od = 0, os = 0;
        add_offsets(m, 0, m.dim, o, od, os);
        add_offsets(m, m.dim + 1, m.nd, i, od, os);
        T *d = (T *)m.dst + od + (int64_t)r * m.dst_stride[m.dim];
        const T *s = (const T *)m.src + os;
        const int64_t ss = m.src_stride[m.dim];
        T acc = *d;
        for (int64_t q = p; q < n && keys[q] == r; q++) acc = Sum<DT>::add(acc, s[(int64_t)vals[q] * ss]);
        *d = acc;
    }
}

// scatter_add: one thread per run of equal destination keys, adding in position order.
template <int DT, typename K>
__global__ void walk_full(const crk_move m, int64_t n, const K *keys, const K *vals) {
    typedef typename Sum<DT>::T T;
    GRID_STRIDE(q, n) {
        K key = keys[q];
        if (q > 0 && keys[q - 1] == key) continue;
        int64_t k = (int64_t)key;
        int64_t i = k % m.inner, r = (k / m.inner) % m.dst_size, o = k / (m.inner * m.dst_size);
        int64_t od = 0, os = 0;
        add_offsets(m, 0, m.dim, o, od, os);
        add_offsets(m, m.dim + 1, m.nd, i, od, os);
        T *d = (T *)m.dst + od + r * m.dst_stride[m.dim];
        const T *s = (const T *)m.src + os;
        const int64_t ss = m.src_stride[m.dim];
        T acc = *d;
        for (int64_t q2 = q; q2 < n && keys[q2] == key; q2++) {
            int64_t j = ((int64_t)vals[q2] / m.inner) % m.along;
            acc = Sum<DT>::add(acc, s[j * ss]);
        }
        *d = acc;
    }
}

size_t align256(size_t b) { return (b + 255) & ~(size_t)255; }

int bits_for(uint64_t max_value) {
    int b = 1;
    while (b < 64 && (max_value >> b) != 0) b++;
    return b;
}

// The pairs of one scatter: how many, the largest key, and whether 32-bit words hold both.
struct scatter_plan {
    int64_t n;
    uint64_t max_key;
    bool narrow;
};

scatter_plan plan_of(const crk_move *m) {
    scatter_plan p;
    p.n = m->full ? m->outer * m->along * m->inner : m->along;
    p.max_key = m->full ? (uint64_t)(m->outer * m->dst_size * m->inner) - 1 : (uint64_t)m->dst_size - 1;
    p.narrow = p.max_key <= UINT32_MAX && (uint64_t)p.n <= UINT32_MAX;
    return p;
}

template <typename K> size_t cub_bytes(int64_t n, int end_bit) {
    size_t temp = 0;
    cub::DoubleBuffer<K> keys(nullptr, nullptr), vals(nullptr, nullptr);
    if (cub::DeviceRadixSort::SortPairs(nullptr, temp, keys, vals, n, 0, end_bit) != cudaSuccess)
        return 0;
    return temp;
}

template <typename K> size_t workspace_of(const scatter_plan &p) {
    return align256(cub_bytes<K>(p.n, bits_for(p.max_key))) + 4 * align256(sizeof(K) * (size_t)p.n);
}

template <int DT, typename K>
void launch_walk(const crk_move *m, int64_t n, const K *keys, const K *vals, cudaStream_t s) {
    if (m->full) walk_full<DT, K><<<grid_for(n), THREADS, 0, s>>>(*m, n, keys, vals);
    else walk_per_position<DT, K><<<grid_for(m->outer * n * m->inner), THREADS, 0, s>>>(*m, keys, vals);
}

template <typename K>
int scatter_with(const crk_move *m, const scatter_plan &p, void *workspace, size_t bytes,
                 cudaStream_t s) {
    int end_bit = bits_for(p.max_key);
    size_t temp = cub_bytes<K>(p.n, end_bit), words = align256(sizeof(K) * (size_t)p.n);
    if (bytes < align256(temp) + 4 * words) return (int)cudaErrorInvalidValue;
    char *w = (char *)workspace;
    K *k0 = (K *)(w + align256(temp)), *k1 = (K *)((char *)k0 + words);
    K *v0 = (K *)((char *)k1 + words), *v1 = (K *)((char *)v0 + words);
    if (m->full) keys_full<K><<<grid_for(p.n), THREADS, 0, s>>>(*m, p.n, k0, v0);
    else keys_per_position<K><<<grid_for(p.n), THREADS, 0, s>>>(m->index, k0, v0);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return (int)err;
    cub::DoubleBuffer<K> keys(k0, k1), vals(v0, v1);
    err = cub::DeviceRadixSort::SortPairs(w, temp, keys, vals, p.n, 0, end_bit, s);
    if (err != cudaSuccess) return (int)err;
    const K *sk = keys.Current(), *sv = vals.Current();
    switch (m->dtype) {
    case F32: launch_walk<F32>(m, p.n, sk, sv, s); break;
    case F64: launch_walk<F64>(m, p.n, sk, sv, s); break;
    case F16: launch_walk<F16>(m, p.n, sk, sv, s); break;
    case BF16: launch_walk<BF16>(m, p.n, sk, sv, s); break;
    case I64: launch_walk<I64>(m, p.n, sk, sv, s); break;
    case I32: launch_walk<I32>(m, p.n, sk, sv, s); break;
    case U8: launch_walk<U8>(m, p.n, sk, sv, s); break;
    case BOOL: launch_walk<BOOL>(m, p.n, sk, sv, s); break;
    default: return (int)cudaErrorInvalidValue;
    }
    return (int)cudaGetLastError();
}

__global__ void one_hot_kernel(const crk_index x, int64_t classes, int64_t *out) {
    GRID_STRIDE(k, x.numel) { out[k * classes + index_at(x, k)] = 1; }
}

} // namespace

extern "C" int crk_index_check(const crk_index *ix, int64_t size, unsigned long long *first_bad,
                               cudaStream_t stream) {
    cudaError_t err = cudaMemsetAsync(first_bad, 0xff, sizeof *first_bad, stream);
    if (err != cudaSuccess || ix->numel == 0) return (int)err;
    check_kernel<<<grid_for(ix->numel), THREADS, 0, stream>>>(*ix, size, first_bad);
    return (int)cudaGetLastError();
}

extern "C" int crk_index_gather(const crk_move *m, cudaStream_t stream) {
    int64_t n = m->outer * m->along * m->inner;
    if (n == 0) return 0;
    switch (dtype_size(m->dtype)) {
    case 8: gather_kernel<uint64_t><<<grid_for(n), THREADS, 0, stream>>>(*m, n); break;
    case 4: gather_kernel<uint32_t><<<grid_for(n), THREADS, 0, stream>>>(*m, n); break;
    case 2: gather_kernel<uint16_t><<<grid_for(n), THREADS, 0, stream>>>(*m, n); break;
    default: gather_kernel<uint8_t><<<grid_for(n), THREADS, 0, stream>>>(*m, n); break;
    }
    return (int)cudaGetLastError();
}

extern "C" size_t crk_index_scatter_workspace(const crk_move *m) {
    if (m->outer * m->along * m->inner == 0) return 0;
    scatter_plan p = plan_of(m);
    return p.narrow ? workspace_of<uint32_t>(p) : workspace_of<unsigned long long>(p);
}

extern "C" int crk_index_scatter(const crk_move *m, void *workspace, size_t bytes,
                                 cudaStream_t stream) {
    if (m->outer * m->along * m->inner == 0) return 0;
    scatter_plan p = plan_of(m);
    return p.narrow ? scatter_with<uint32_t>(m, p, workspace, bytes, stream)
                    : scatter_with<unsigned long long>(m, p, workspace, bytes, stream);
}

extern "C" int crk_one_hot(const crk_index *ix, int64_t classes, int64_t *out, cudaStream_t stream) {
    cudaError_t err = cudaMemsetAsync(out, 0, sizeof *out * (size_t)(ix->numel * classes), stream);
    if (err != cudaSuccess || ix->numel == 0 || classes == 0) return (int)err;
    one_hot_kernel<<<grid_for(ix->numel), THREADS, 0, stream>>>(*ix, classes, out);
    return (int)cudaGetLastError();
}
