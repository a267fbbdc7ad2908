// attention.cu — fused scaled dot-product attention on the GPU, computing what
// ops/attention.c computes on the cpu. A block takes R query rows of one head (forward,
// dQ) or Bc keys of one head (dK, dV) and walks the other side tile by tile through shared
// memory: the threads of the block share out the (row, key) pairs of a tile for the
// scores, a warp per row does the online softmax, and each thread owns output elements of
// the accumulators, so nothing is written by two threads and no atomics are needed. The
// backward's two passes are two kernels, as on the cpu. Dropout draws the cpu's Philox
// words (core/rng.h). Tile sizes shrink until a kernel's tiles fit 48 KiB of shared memory.
#include <math.h>
#include <stdint.h>

#include "attention.h"
#include "rng.h"

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr size_t kSharedBytes = 48 * 1024;
constexpr int kMaskBool = 1; // else kind 2, additive

template <typename T> __device__ inline T exp_of(T x);
template <> __device__ inline float exp_of<float>(float x) { return expf(x); }
template <> __device__ inline double exp_of<double>(double x) { return exp(x); }
template <typename T> __device__ inline T log_of(T x);
template <> __device__ inline float log_of<float>(float x) { return logf(x); }
template <> __device__ inline double log_of<double>(double x) { return log(x); }

// Query rows per block (R) and keys per tile (Bc), the same for the three kernels.
struct tiles {
    int R, Bc;
};

// Shared elements of each kernel for a tiling (the k and v tiles' rows padded by one).
inline int64_t shared_elems(const crk_attention &p, int R, int Bc) {
    const int64_t kd = p.d + 1, vd = p.dv + 1;
    const int64_t fwd = R * p.d + Bc * (kd + vd) + R * Bc + R * p.dv + 3 * R;
    const int64_t kv = Bc * (kd + vd) + R * (p.d + p.dv) + 2 * R * Bc + Bc * (p.d + p.dv) + 2 * R;
    const int64_t q = R * (p.d + p.dv) + Bc * (kd + vd) + R * Bc + R * p.d + 2 * R;
    return fwd > kv ? (fwd > q ? fwd : q) : (kv > q ? kv : q);
}

// The largest tiling (from 16 rows and 32 keys down) that fits; R = 0 when none does.
inline tiles choose_tiles(const crk_attention &p) {
    const size_t es = p.f64 ? 8 : 4;
    tiles t{16, 32};
    while ((size_t)shared_elems(p, t.R, t.Bc) * es > kSharedBytes) {
        if (t.Bc > 8) t.Bc /= 2;
        else if (t.R > 1) t.R /= 2;
        else if (t.Bc > 1) t.Bc /= 2;
        else return tiles{0, 0};
    }
    return t;
}

// The scale * q_r . k_c score of query i = i0 + r and key j = j0 + c of head n, with the
// masks; q rows have stride d, the k tile stride d + 1.
template <typename T>
__device__ T score(const crk_attention &p, int64_t n, const T *q, const T *k, int r, int c, int64_t i, int64_t j) {
    const int64_t d = p.d, kd = d + 1;
    T s = 0;
    for (int64_t e = 0; e < d; e++) s += q[r * d + e] * k[c * kd + e];
    s *= (T)p.scale;
    if (p.causal && j > i) return (T)-INFINITY;
    if (p.mask_kind) {
        const int64_t *ms = p.mask_strides;
        const int64_t off = ms[0] * (n / p.H) + ms[1] * (n % p.H) + ms[2] * i + ms[3] * j;
        if (p.mask_kind == kMaskBool) {
            if (!((const uint8_t *)p.mask)[off]) return (T)-INFINITY;
        } else {
            s += ((const T *)p.mask)[off];
        }
    }
    return s;
}

// 1 / (1 - p) when weight (n, i, j) survives dropout, else 0 (1 without dropout).
template <typename T> __device__ T keep_factor(const crk_attention &p, int64_t n, int64_t i, int64_t j) {
    if (p.p <= 0) return 1;
    const int64_t idx = (n * p.Tq + i) * p.Tk + j;
    uint32_t w[4];
    cr_philox_block(p.seed, p.counter + (uint64_t)(idx >> 2), w);
    return cr_uniform_f32(w[idx & 3]) >= (float)p.p ? (T)(1.0 / (1.0 - p.p)) : (T)0;
}

// Copies rows [first, first + count) of a [*, width] matrix into shared rows of stride ld.
template <typename T> __device__ void load_rows(T *dst, int64_t ld, const T *src, int64_t width, int64_t first, int count) {
    for (int64_t idx = threadIdx.x; idx < (int64_t)count * width; idx += blockDim.x) {
        const int64_t r = idx / width, e = idx % width;
        dst[r * ld + e] = src[(first + r) * width + e];
    }
}

template <typename T> __global__ void __launch_bounds__(kThreads) forward_kernel(crk_attention p, tiles t) {
    extern __shared__ unsigned char smem[];
    const int R = t.R, Bc = t.Bc;
    const int64_t d = p.d, dv = p.dv, Tq = p.Tq, Tk = p.Tk, kd = d + 1, vd = dv + 1;
    const int64_t nqb = (Tq + R - 1) / R, n = blockIdx.x / nqb, i0 = blockIdx.x % nqb * R;
    const int nr = (int)(Tq - i0 < R ? Tq - i0 : R);
    T *q = (T *)smem, *k = q + R * d, *v = k + Bc * kd, *s = v + Bc * vd, *acc = s + R * Bc, *m = acc + R * dv,
      *l = m + R, *corr = l + R;
    const T ninf = (T)-INFINITY;
    load_rows(q, d, (const T *)p.q + n * Tq * d, d, i0, nr);
    for (int64_t idx = threadIdx.x; idx < (int64_t)nr * dv; idx += blockDim.x) acc[idx] = 0;
    for (int r = threadIdx.x; r < nr; r += blockDim.x) m[r] = ninf, l[r] = 0;
    const int64_t jend = p.causal ? (i0 + nr < Tk ? i0 + nr : Tk) : Tk;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int64_t j0 = 0; j0 < jend; j0 += Bc) {
        const int nc = (int)(jend - j0 < Bc ? jend - j0 : Bc);
        __syncthreads(); // the previous tile is used up
        load_rows(k, kd, (const T *)p.k + n * Tk * d, d, j0, nc);
        load_rows(v, vd, (const T *)p.v + n * Tk * dv, dv, j0, nc);
        __syncthreads();
        for (int pr = threadIdx.x; pr < nr * nc; pr += blockDim.x) {
            const int r = pr / nc, c = pr % nc;
            s[r * Bc + c] = score(p, n, q, k, r, c, i0 + r, j0 + c);
        }
        __syncthreads();
        for (int r = warp; r < nr; r += kWarps) { // the online softmax, a warp per row
            T *sr = s + r * Bc, mx = ninf;
            for (int c = lane; c < nc; c += 32) mx = sr[c] > mx ? sr[c] : mx;
            for (int o = 16; o; o >>= 1) {
                const T other = __shfl_xor_sync(0xffffffffu, mx, o);
                mx = other > mx ? other : mx;
            }
            const T mold = m[r], mnew = mx > mold ? mx : mold;
            T sum = 0;
            for (int c = lane; c < nc; c += 32) {
                const T e = mnew == ninf ? (T)0 : exp_of(sr[c] - mnew);
                sum += e;
                sr[c] = e * keep_factor<T>(p, n, i0 + r, j0 + c);
            }
            for (int o = 16; o; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
            if (lane == 0) {
                const T cf = mnew == ninf ? (T)1 : exp_of(mold - mnew);
                corr[r] = cf;
                l[r] = l[r] * cf + sum;
                m[r] = mnew;
            }
        }
        __syncthreads();
        for (int64_t idx = threadIdx.x; idx < (int64_t)nr * dv; idx += blockDim.x) {
            const int64_t r = idx / dv, e = idx % dv;
            T a = acc[idx] * corr[r];
            for (int c = 0; c < nc; c++) a += s[r * Bc + c] * v[c * vd + e];
            acc[idx] = a;
        }
    }
    __syncthreads();
    T *o = (T *)p.o + (n * Tq + i0) * dv;
    for (int64_t idx = threadIdx.x; idx < (int64_t)nr * dv; idx += blockDim.x) {
        const T lr = l[idx / dv];
        o[idx] = lr > 0 ? acc[idx] / lr : (T)0;
    }
    for (int r = threadIdx.x; r < nr; r += blockDim.x)
        ((T *)p.lse)[n * Tq + i0 + r] = l[r] > 0 ? m[r] + log_of(l[r]) : ninf;
}

// D_i = dO_i . O_i, a warp per row.
template <typename T> __global__ void __launch_bounds__(kThreads) row_dots_kernel(crk_attention p, T *D) {
    const int64_t rows = p.B * p.H * p.Tq, dv = p.dv;
    const int lane = threadIdx.x % 32;
    for (int64_t r = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32; r < rows;
         r += (int64_t)gridDim.x * blockDim.x / 32) {
        const T *a = (const T *)p.go + r * dv, *b = (const T *)p.o + r * dv;
        T s = 0;
        for (int64_t e = lane; e < dv; e += 32) s += a[e] * b[e];
        for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (lane == 0) D[r] = s;
    }
}

// For the pairs of a tile: Z = P keep into z, dS = P (dO . v keep - D) into ds.
template <typename T>
__device__ void tile_grads(const crk_attention &p, int64_t n, const T *q, const T *go, const T *k, const T *v,
                           const T *lse, const T *D, int64_t i0, int nr, int64_t j0, int nc, int Bc, T *z, T *ds) {
    const int64_t dv = p.dv, vd = dv + 1;
    for (int pr = threadIdx.x; pr < nr * nc; pr += blockDim.x) {
        const int r = pr / nc, c = pr % nc;
        const T sc = score(p, n, q, k, r, c, i0 + r, j0 + c), lr = lse[r];
        const T prob = (lr == (T)-INFINITY || sc == (T)-INFINITY) ? (T)0 : exp_of(sc - lr);
        const T keep = keep_factor<T>(p, n, i0 + r, j0 + c);
        T dp = 0;
        for (int64_t e = 0; e < dv; e++) dp += go[r * dv + e] * v[c * vd + e];
        if (z) z[r * Bc + c] = prob * keep;
        ds[r * Bc + c] = prob * (dp * keep - D[r]);
    }
}

template <typename T> __global__ void __launch_bounds__(kThreads) backward_kv_kernel(crk_attention p, tiles t, const T *D) {
    extern __shared__ unsigned char smem[];
    const int R = t.R, Bc = t.Bc;
    const int64_t d = p.d, dv = p.dv, Tq = p.Tq, Tk = p.Tk, kd = d + 1, vd = dv + 1;
    const int64_t nkb = (Tk + Bc - 1) / Bc, n = blockIdx.x / nkb, j0 = blockIdx.x % nkb * Bc;
    const int nc = (int)(Tk - j0 < Bc ? Tk - j0 : Bc);
    T *k = (T *)smem, *v = k + Bc * kd, *q = v + Bc * vd, *go = q + R * d, *z = go + R * dv, *ds = z + R * Bc,
      *gk = ds + R * Bc, *gv = gk + Bc * d, *lse = gv + Bc * dv, *Dr = lse + R;
    load_rows(k, kd, (const T *)p.k + n * Tk * d, d, j0, nc);
    load_rows(v, vd, (const T *)p.v + n * Tk * dv, dv, j0, nc);
    for (int64_t idx = threadIdx.x; idx < (int64_t)nc * d; idx += blockDim.x) gk[idx] = 0;
    for (int64_t idx = threadIdx.x; idx < (int64_t)nc * dv; idx += blockDim.x) gv[idx] = 0;
    const T scale = (T)p.scale;
    for (int64_t i0 = p.causal ? j0 : 0; i0 < Tq; i0 += R) {
        const int nr = (int)(Tq - i0 < R ? Tq - i0 : R);
        __syncthreads();
        load_rows(q, d, (const T *)p.q + n * Tq * d, d, i0, nr);
        load_rows(go, dv, (const T *)p.go + n * Tq * dv, dv, i0, nr);
        for (int r = threadIdx.x; r < nr; r += blockDim.x) {
            lse[r] = ((const T *)p.lse)[n * Tq + i0 + r];
            Dr[r] = D[n * Tq + i0 + r];
        }
        __syncthreads();
        tile_grads(p, n, q, go, k, v, lse, Dr, i0, nr, j0, nc, Bc, z, ds);
        __syncthreads();
        for (int64_t idx = threadIdx.x; idx < (int64_t)nc * d; idx += blockDim.x) {
            const int64_t c = idx / d, e = idx % d;
            T a = gk[idx];
            for (int r = 0; r < nr; r++) a += ds[r * Bc + c] * scale * q[r * d + e];
            gk[idx] = a;
        }
        for (int64_t idx = threadIdx.x; idx < (int64_t)nc * dv; idx += blockDim.x) {
            const int64_t c = idx / dv, e = idx % dv;
            T a = gv[idx];
            for (int r = 0; r < nr; r++) a += z[r * Bc + c] * go[r * dv + e];
            gv[idx] = a;
        }
    }
    __syncthreads();
    if (p.dk)
        for (int64_t idx = threadIdx.x; idx < (int64_t)nc * d; idx += blockDim.x)
            ((T *)p.dk)[(n * Tk + j0) * d + idx] = gk[idx];
    if (p.dv_)
        for (int64_t idx = threadIdx.x; idx < (int64_t)nc * dv; idx += blockDim.x)
            ((T *)p.dv_)[(n * Tk + j0) * dv + idx] = gv[idx];
}

template <typename T> __global__ void __launch_bounds__(kThreads) backward_q_kernel(crk_attention p, tiles t, const T *D) {
    extern __shared__ unsigned char smem[];
    const int R = t.R, Bc = t.Bc;
    const int64_t d = p.d, dv = p.dv, Tq = p.Tq, Tk = p.Tk, kd = d + 1, vd = dv + 1;
    const int64_t nqb = (Tq + R - 1) / R, n = blockIdx.x / nqb, i0 = blockIdx.x % nqb * R;
    const int nr = (int)(Tq - i0 < R ? Tq - i0 : R);
    T *q = (T *)smem, *go = q + R * d, *k = go + R * dv, *v = k + Bc * kd, *ds = v + Bc * vd, *gq = ds + R * Bc,
      *lse = gq + R * d, *Dr = lse + R;
    load_rows(q, d, (const T *)p.q + n * Tq * d, d, i0, nr);
    load_rows(go, dv, (const T *)p.go + n * Tq * dv, dv, i0, nr);
    for (int r = threadIdx.x; r < nr; r += blockDim.x) {
        lse[r] = ((const T *)p.lse)[n * Tq + i0 + r];
        Dr[r] = D[n * Tq + i0 + r];
    }
    for (int64_t idx = threadIdx.x; idx < (int64_t)nr * d; idx += blockDim.x) gq[idx] = 0;
    const T scale = (T)p.scale;
    const int64_t jend = p.causal ? (i0 + nr < Tk ? i0 + nr : Tk) : Tk;
    for (int64_t j0 = 0; j0 < jend; j0 += Bc) {
        const int nc = (int)(jend - j0 < Bc ? jend - j0 : Bc);
        __syncthreads();
        load_rows(k, kd, (const T *)p.k + n * Tk * d, d, j0, nc);
        load_rows(v, vd, (const T *)p.v + n * Tk * dv, dv, j0, nc);
        __syncthreads();
        tile_grads<T>(p, n, q, go, k, v, lse, Dr, i0, nr, j0, nc, Bc, nullptr, ds);
        __syncthreads();
        for (int64_t idx = threadIdx.x; idx < (int64_t)nr * d; idx += blockDim.x) {
            const int64_t r = idx / d, e = idx % d;
            T a = gq[idx];
            for (int c = 0; c < nc; c++) a += ds[r * Bc + c] * scale * k[c * kd + e];
            gq[idx] = a;
        }
    }
    __syncthreads();
    for (int64_t idx = threadIdx.x; idx < (int64_t)nr * d; idx += blockDim.x)
        ((T *)p.dq)[(n * Tq + i0) * d + idx] = gq[idx];
}

template <typename T> int forward(const crk_attention &p, cudaStream_t stream) {
    const tiles t = choose_tiles(p);
    const int64_t blocks = p.B * p.H * ((p.Tq + t.R - 1) / t.R);
    if (blocks == 0) return 0;
    const size_t bytes = (size_t)shared_elems(p, t.R, t.Bc) * sizeof(T);
    forward_kernel<T><<<(unsigned)blocks, kThreads, bytes, stream>>>(p, t);
    return (int)cudaGetLastError();
}

template <typename T> int backward(const crk_attention &p, T *D, cudaStream_t stream) {
    const tiles t = choose_tiles(p);
    const int64_t rows = p.B * p.H * p.Tq;
    if (rows == 0) return 0;
    const size_t bytes = (size_t)shared_elems(p, t.R, t.Bc) * sizeof(T);
    int64_t dot_blocks = (rows * 32 + kThreads - 1) / kThreads;
    row_dots_kernel<T><<<(unsigned)(dot_blocks > 65535 * 8 ? 65535 * 8 : dot_blocks), kThreads, 0, stream>>>(p, D);
    if (p.dk || p.dv_) {
        const int64_t blocks = p.B * p.H * ((p.Tk + t.Bc - 1) / t.Bc);
        if (blocks) backward_kv_kernel<T><<<(unsigned)blocks, kThreads, bytes, stream>>>(p, t, D);
    }
    if (p.dq) {
        const int64_t blocks = p.B * p.H * ((p.Tq + t.R - 1) / t.R);
        backward_q_kernel<T><<<(unsigned)blocks, kThreads, bytes, stream>>>(p, t, D);
    }
    return (int)cudaGetLastError();
}

} // namespace

extern "C" int crk_attention_fits(const crk_attention *p) { return choose_tiles(*p).R > 0; }

extern "C" int crk_attention_forward(const crk_attention *p, cudaStream_t stream) {
    return p->f64 ? forward<double>(*p, stream) : forward<float>(*p, stream);
}

extern "C" size_t crk_attention_backward_scratch_bytes(const crk_attention *p) {
    return (size_t)(p->B * p->H * p->Tq) * (p->f64 ? 8 : 4);
}

extern "C" int crk_attention_backward(const crk_attention *p, void *scratch, cudaStream_t stream) {
    return p->f64 ? backward<double>(*p, (double *)scratch, stream) : backward<float>(*p, (float *)scratch, stream);
}
