// reduce_dim.cu — max/min with positions, variance, p-norms and logsumexp over a reduction
// plan (ops/reduce_impl.h), with the cpu's semantics (ops/reduce_minmax.c and
// ops/reduce_stats.c). Max/min keep the first position among equal values, let the first
// NaN win over any number, and write the input's own element; the statistics accumulate in
// f64. Each output's reduced range may be cut into slices. A group of G threads (one, a
// warp or a block) reduces one slice into an accumulator state; with several slices, a
// second kernel merges the slices' states. States merge associatively (max/min exactly,
// since ties are broken by position), so the cut changes at most the last bits of a
// statistic and never a max/min. Nothing uses atomics: results are the same from run to run.
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "common.cuh"
#include "reduce_dim.h"

namespace {

constexpr int BLOCK = 256;

// The element types, the policies and the index arithmetic are host code too, so that they
// can be exercised on a machine without a GPU.

// ---- element types: T as stored, Key for exact comparisons, f64 as the cpu's cr_load_f64
struct LoadF32 {
    using T = float;
    using Key = float;
    static __host__ __device__ Key key(T v) { return v; }
    static __host__ __device__ double f64(T v) { return v; }
};
struct LoadF64 {
    using T = double;
    using Key = double;
    static __host__ __device__ Key key(T v) { return v; }
    static __host__ __device__ double f64(T v) { return v; }
};
struct LoadF16 {
    using T = unsigned short;
    using Key = float;
    static __host__ __device__ Key key(T v) { return cr_f16_to_f32(v); }
    static __host__ __device__ double f64(T v) { return key(v); }
};
struct LoadBF16 {
    using T = unsigned short;
    using Key = float;
    static __host__ __device__ Key key(T v) { return cr_bf16_to_f32(v); }
    static __host__ __device__ double f64(T v) { return key(v); }
};
struct LoadI64 {
    using T = int64_t;
    using Key = int64_t;
    static __host__ __device__ Key key(T v) { return v; }
    static __host__ __device__ double f64(T v) { return (double)v; }
};
struct LoadI32 {
    using T = int32_t;
    using Key = int;
    static __host__ __device__ Key key(T v) { return v; }
    static __host__ __device__ double f64(T v) { return v; }
};
struct LoadU8 {
    using T = uint8_t;
    using Key = int;
    static __host__ __device__ Key key(T v) { return v; }
    static __host__ __device__ double f64(T v) { return v; }
};
struct LoadBool { // max/min compare the bytes, as the cpu; statistics read 0 or 1
    using T = uint8_t;
    using Key = int;
    static __host__ __device__ Key key(T v) { return v; }
    static __host__ __device__ double f64(T v) { return v ? 1.0 : 0.0; }
};

// Element offset of flat index i over n dims (row-major).
__host__ __device__ __forceinline__ int64_t offset_of(int n, const int64_t *shape, const int64_t *stride,
                                             int64_t i) {
    if (n == 0) return 0;
    int64_t off = 0;
    for (int d = n - 1; d > 0; d--) {
        int64_t q = i / shape[d];
        off += (i - q * shape[d]) * stride[d];
        i = q;
    }
    return off + i * stride[0];
}

// A double rounded into a float output as the cpu's cr_store_f64 (halves through f32).
__host__ __device__ __forceinline__ void store_f64(char *out, int dt, int64_t k, double v) {
    switch (dt) {
    case F32: ((float *)out)[k] = (float)v; break;
    case F64: ((double *)out)[k] = v; break;
    case F16: ((uint16_t *)out)[k] = cr_f32_to_f16((float)v); break;
    default: ((uint16_t *)out)[k] = cr_f32_to_bf16((float)v); break;
    }
}

// ---- accumulator policies: init (the identity), add one element at reduced position j,
// merge a later state into an earlier one, finish (write output k) ----

// Max or min: the best key so far and its position (-1: nothing yet). a beats b when it
// is a NaN and b is not, else when it is strictly better, else on equal values (or two
// NaNs) when it comes first: the cpu's sequential scan gives the same winner.
template <class L, bool IS_MAX>
struct MinMax {
    using T = typename L::T;
    using Key = typename L::Key;
    struct State {
        Key v;
        int64_t pos;
    };
    int64_t *indices; // NULL for amax/amin

    static __host__ __device__ bool beats(const State &a, const State &b) {
        if (a.pos < 0) return false;
        if (b.pos < 0) return true;
        bool an = a.v != a.v, bn = b.v != b.v;
        if (an != bn) return an;
        if (!an && a.v != b.v) return IS_MAX ? a.v > b.v : a.v < b.v;
        return a.pos < b.pos;
    }
    __host__ __device__ State init() const {
        State s;
        s.v = Key();
        s.pos = -1;
        return s;
    }
    __host__ __device__ void add(State &s, T x, int64_t j) const {
        State c;
        c.v = L::key(x);
        c.pos = j;
        if (beats(c, s)) s = c;
    }
    __host__ __device__ void merge(State &a, const State &b) const {
        if (beats(b, a)) a = b;
    }
    // The value is the winning element's own bits (exact for every dtype, NaN payloads too).
    __host__ __device__ void finish(const State &s, int64_t k, int64_t kbase, const crk_reduce &r) const {
        if (indices) indices[k] = s.pos;
        if (r.out)
            ((T *)r.out)[k] = ((const T *)r.in)[kbase + offset_of(r.nr, r.rshape, r.rstride, s.pos)];
    }
};

// Variance: (count, mean, M2), Welford per element and Chan's formula between states.
template <class L>
struct Var {
    using T = typename L::T;
    struct State {
        double n, mean, m2;
    };
    double correction;

    __host__ __device__ State init() const { return State{0, 0, 0}; }
    __host__ __device__ void add(State &s, T x, int64_t) const {
        double v = L::f64(x);
        s.n += 1;
        double d = v - s.mean;
        s.mean += d / s.n;
        s.m2 += d * (v - s.mean);
    }
    __host__ __device__ void merge(State &a, const State &b) const {
        if (b.n == 0) return;
        if (a.n == 0) {
            a = b;
            return;
        }
        double n = a.n + b.n, delta = b.mean - a.mean;
        a.mean += delta * b.n / n;
        a.m2 += b.m2 + delta * delta * a.n * b.n / n;
        a.n = n;
    }
    __host__ __device__ void finish(const State &s, int64_t k, int64_t, const crk_reduce &r) const {
        double denom = s.n - correction;
        store_f64(r.out, r.out_dtype, k, s.m2 / (denom > 0 ? denom : 0.0));
    }
};

// p-norms: sum of |x|^p (p = 2, 1, 0 (count of non-zeros) or general), or max / min |x|
// for p = +-inf with NaN sticking; the kind is chosen once on the host, as the cpu tests p.
enum NormKind { NORM_2 = 0, NORM_1, NORM_0, NORM_INF, NORM_NEG_INF, NORM_P };

template <class L>
struct Norm {
    using T = typename L::T;
    struct State {
        double v;
    };
    int kind;
    double p;

    __host__ __device__ State init() const { return State{kind == NORM_NEG_INF ? (double)INFINITY : 0.0}; }
    __host__ __device__ void add(State &s, T x, int64_t) const {
        double v = L::f64(x);
        switch (kind) {
        case NORM_2: s.v += v * v; break;
        case NORM_1: s.v += fabs(v); break;
        case NORM_0: s.v += v != 0 ? 1.0 : 0.0; break;
        case NORM_INF: {
            double a = fabs(v);
            if (a != a || a > s.v) s.v = a;
            break;
        }
        case NORM_NEG_INF: {
            double a = fabs(v);
            if (a != a || a < s.v) s.v = a;
            break;
        }
        default: s.v += pow(fabs(v), p); break;
        }
    }
    __host__ __device__ void merge(State &a, const State &b) const {
        if (kind == NORM_INF) {
            if (b.v != b.v || b.v > a.v) a.v = b.v;
        } else if (kind == NORM_NEG_INF) {
            if (b.v != b.v || b.v < a.v) a.v = b.v;
        } else {
            a.v += b.v;
        }
    }
    __host__ __device__ void finish(const State &s, int64_t k, int64_t, const crk_reduce &r) const {
        double v = s.v;
        if (kind == NORM_2) v = sqrt(v);
        else if (kind == NORM_P) v = pow(v, 1.0 / p);
        store_f64(r.out, r.out_dtype, k, v);
    }
};

// logsumexp: a running (max, sum of exp(x - max)) pair and a NaN flag; +inf sticks, -inf
// elements add nothing (the cpu's lse_add, one element at a time).
template <class L>
struct Lse {
    using T = typename L::T;
    struct State {
        double mx, sum, nan;
    };

    static __host__ __device__ void add_pair(State &a, double mb, double sb) {
        if (mb == -INFINITY) return;
        if (mb == INFINITY || a.mx == INFINITY) {
            a.mx = INFINITY;
            return;
        }
        if (mb > a.mx) {
            a.sum = a.sum * exp(a.mx - mb) + sb;
            a.mx = mb;
        } else {
            a.sum += sb * exp(mb - a.mx);
        }
    }
    __host__ __device__ State init() const { return State{-INFINITY, 0, 0}; }
    __host__ __device__ void add(State &s, T x, int64_t) const {
        double v = L::f64(x);
        if (v != v) s.nan = 1;
        else add_pair(s, v, 1.0);
    }
    __host__ __device__ void merge(State &a, const State &b) const {
        if (b.nan != 0) a.nan = 1;
        add_pair(a, b.mx, b.sum);
    }
    __host__ __device__ void finish(const State &s, int64_t k, int64_t, const crk_reduce &r) const {
        double v = s.nan != 0 ? (double)NAN : isinf(s.mx) ? s.mx : s.mx + log(s.sum);
        store_f64(r.out, r.out_dtype, k, v);
    }
};

// ---- the kernels ----

// A state moved down a warp as 32-bit words.
template <class S>
__device__ __forceinline__ S shfl_down(const S &v, int offset) {
    static_assert(sizeof(S) % 4 == 0, "states are made of 32-bit words");
    constexpr int W = sizeof(S) / 4;
    unsigned w[W];
    memcpy(w, &v, sizeof(S));
#pragma unroll
    for (int i = 0; i < W; i++) w[i] = __shfl_down_sync(0xffffffffu, w[i], offset);
    S out;
    memcpy(&out, w, sizeof(S));
    return out;
}

// The merge of the G states of a group (G = 1, 32 or BLOCK), each lane's state merged with
// the following lanes' (slice order kept); the result is valid in the group's first lane.
// G = BLOCK must be reached by the whole block.
template <int G, class P>
__device__ __forceinline__ typename P::State group_merge(const P &pol, typename P::State st) {
    using State = typename P::State;
    if constexpr (G > 1) {
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) pol.merge(st, shfl_down(st, o));
    }
    if constexpr (G == BLOCK) {
        __shared__ State part[BLOCK / 32];
        const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
        if (lane == 0) part[warp] = st;
        __syncthreads();
        if (warp == 0) {
            st = lane < BLOCK / 32 ? part[lane] : pol.init();
#pragma unroll
            for (int o = BLOCK / 64; o > 0; o >>= 1) pol.merge(st, shfl_down(st, o));
        }
        __syncthreads(); // part[] is written again by the next item
    }
    return st;
}

// Work item w = (slice s, output k), k fastest so that neighbouring items read neighbouring
// kept elements. Slice s covers reduced positions [s*L, min(R, (s+1)*L)). One slice per
// output (S == 1) writes the output; otherwise the item's state goes to partial[w].
template <int G, class P>
__global__ void __launch_bounds__(BLOCK)
    reduce_slices(const crk_reduce r, const P pol, int64_t S, int64_t L,
                  typename P::State *partial) {
    using T = typename P::T;
    using State = typename P::State;
    constexpr int PER_BLOCK = BLOCK / G;
    const int lane = threadIdx.x % G;
    const T *in = (const T *)r.in;
    const int64_t items = S * r.K, step = (int64_t)gridDim.x * PER_BLOCK;
    // w is the same for the whole group (a warp or the block when G > 1)
    for (int64_t w = (int64_t)blockIdx.x * PER_BLOCK + threadIdx.x / G; w < items; w += step) {
        const int64_t k = w % r.K, s = w / r.K;
        const int64_t kbase = offset_of(r.nk, r.kshape, r.kstride, k);
        const int64_t j0 = s * L, j1 = r.R - j0 < L ? r.R : j0 + L;
        State st = pol.init();
        for (int64_t j = j0 + lane; j < j1; j += G)
            pol.add(st, in[kbase + offset_of(r.nr, r.rshape, r.rstride, j)], j);
        st = group_merge<G>(pol, st);
        if (lane == 0) {
            if (S == 1) pol.finish(st, k, kbase, r);
            else partial[w] = st;
        }
    }
}

// Output k = the merge of partial[s*K + k] over the S slices.
template <int G, class P>
__global__ void __launch_bounds__(BLOCK)
    merge_slices(const crk_reduce r, const P pol, int64_t S, const typename P::State *partial) {
    using State = typename P::State;
    constexpr int PER_BLOCK = BLOCK / G;
    const int lane = threadIdx.x % G;
    const int64_t step = (int64_t)gridDim.x * PER_BLOCK;
    for (int64_t k = (int64_t)blockIdx.x * PER_BLOCK + threadIdx.x / G; k < r.K; k += step) {
        State st = pol.init();
        for (int64_t s = lane; s < S; s += G) pol.merge(st, partial[s * r.K + k]);
        st = group_merge<G>(pol, st);
        if (lane == 0) pol.finish(st, k, offset_of(r.nk, r.kshape, r.kstride, k), r);
    }
}

// ---- the launch: dims merged, then the group size and the slices ----

// Drops size-1 dims and merges neighbours that step through memory as one dim; the flat
// (row-major) positions over the dims stay the same.
void merge_dims(int *n, int64_t *shape, int64_t *stride) {
    int m = 0;
    for (int d = 0; d < *n; d++) {
        if (shape[d] == 1) continue;
        if (m > 0 && stride[m - 1] == stride[d] * shape[d]) {
            shape[m - 1] *= shape[d];
            stride[m - 1] = stride[d];
        } else {
            shape[m] = shape[d];
            stride[m] = stride[d];
            m++;
        }
    }
    *n = m;
}

crk_reduce canonical(const crk_reduce &in) {
    crk_reduce r = in;
    merge_dims(&r.nk, r.kshape, r.kstride);
    merge_dims(&r.nr, r.rshape, r.rstride);
    return r;
}

unsigned blocks_for(int64_t n) { return (unsigned)(n < 1 ? 1 : n > (1 << 20) ? (1 << 20) : n); }

struct Config {
    int G, merge_G;
    int64_t S, L;
    unsigned blocks, merge_blocks;
};

// One thread per output when the reduced range is short or the kept dim is the contiguous
// one (neighbouring threads then read neighbouring elements), a warp for mid-sized ranges,
// a block for long ones. When outputs x group size leaves the GPU underfilled (fewer than
// TARGET threads), each range is cut into slices of at least 64 elements per thread.
Config configure(const crk_reduce &r) {
    const int64_t TARGET = (int64_t)1 << 18;
    const int64_t K = r.K, R = r.R;
    const bool kept_inner = r.nk > 0 && r.kstride[r.nk - 1] == 1;
    const bool red_inner = r.nr > 0 && r.rstride[r.nr - 1] == 1;
    Config c;
    c.G = (R <= 32 || (kept_inner && !red_inner)) ? 1 : R <= 4096 ? 32 : BLOCK;
    c.S = 1;
    if (K < TARGET / c.G) {
        int64_t want = TARGET / (K * c.G), most = R / ((int64_t)c.G * 64);
        c.S = want < most ? want : most;
        if (c.S < 1) c.S = 1;
    }
    c.L = c.S > 1 ? (R + c.S - 1) / c.S : R;
    if (c.S > 1) c.S = (R + c.L - 1) / c.L; // no empty slice
    const int64_t per_block = BLOCK / c.G;
    c.blocks = blocks_for((c.S * K + per_block - 1) / per_block);
    c.merge_G = c.S >= 64 ? 32 : 1;
    const int64_t merge_per_block = BLOCK / c.merge_G;
    c.merge_blocks = blocks_for((K + merge_per_block - 1) / merge_per_block);
    return c;
}

template <class P>
int64_t scratch_bytes(const crk_reduce &r, const P &) {
    Config c = configure(r);
    return c.S > 1 ? c.S * r.K * (int64_t)sizeof(typename P::State) : 0;
}

template <class P>
int64_t launch(const crk_reduce &r, const P &pol, void *scratch, cudaStream_t stream) {
    using State = typename P::State;
    const Config c = configure(r);
    State *part = (State *)scratch;
    if (c.S > 1 && !part) return cudaErrorInvalidValue;
    switch (c.G) {
    case 1: reduce_slices<1, P><<<c.blocks, BLOCK, 0, stream>>>(r, pol, c.S, c.L, part); break;
    case 32: reduce_slices<32, P><<<c.blocks, BLOCK, 0, stream>>>(r, pol, c.S, c.L, part); break;
    default: reduce_slices<BLOCK, P><<<c.blocks, BLOCK, 0, stream>>>(r, pol, c.S, c.L, part); break;
    }
    if (c.S > 1) {
        if (c.merge_G == 1) merge_slices<1, P><<<c.merge_blocks, BLOCK, 0, stream>>>(r, pol, c.S, part);
        else merge_slices<32, P><<<c.merge_blocks, BLOCK, 0, stream>>>(r, pol, c.S, part);
    }
    return cudaGetLastError();
}

// f(element loader) for the input dtype; FLOATS_ONLY for var and norm (the cpu refuses
// other dtypes before dispatch). -1 for a dtype the op does not take.
template <bool FLOATS_ONLY, class F>
int64_t with_loader(int dt, F &&f) {
    switch (dt) {
    case F32: return f(LoadF32());
    case F64: return f(LoadF64());
    case F16: return f(LoadF16());
    case BF16: return f(LoadBF16());
    default: break;
    }
    if constexpr (FLOATS_ONLY) {
        return -1;
    } else {
        switch (dt) {
        case I64: return f(LoadI64());
        case I32: return f(LoadI32());
        case U8: return f(LoadU8());
        case BOOL: return f(LoadBool());
        default: return -1;
        }
    }
}

int norm_kind(double p) {
    if (p == 2) return NORM_2;
    if (p == 1) return NORM_1;
    if (p == 0) return NORM_0;
    if (p == INFINITY) return NORM_INF;
    if (p == -INFINITY) return NORM_NEG_INF;
    return NORM_P;
}

// f(policy) for the op and the input dtype; -1 for a combination the op does not take.
template <class F>
int64_t with_policy(const crk_reduce_dim_call &q, F &&f) {
    switch (q.op) {
    case CRK_RD_MAX:
        return with_loader<false>(q.r.in_dtype, [&](auto l) {
            return f(MinMax<decltype(l), true>{q.indices});
        });
    case CRK_RD_MIN:
        return with_loader<false>(q.r.in_dtype, [&](auto l) {
            return f(MinMax<decltype(l), false>{q.indices});
        });
    case CRK_RD_VAR:
        return with_loader<true>(q.r.in_dtype, [&](auto l) { return f(Var<decltype(l)>{q.param}); });
    case CRK_RD_NORM:
        return with_loader<true>(q.r.in_dtype, [&](auto l) {
            return f(Norm<decltype(l)>{norm_kind(q.param), q.param});
        });
    case CRK_RD_LOGSUMEXP:
        return with_loader<false>(q.r.in_dtype, [&](auto l) { return f(Lse<decltype(l)>{}); });
    }
    return -1;
}

} // namespace

extern "C" size_t crk_reduce_dim_scratch(const crk_reduce_dim_call *q) {
    const crk_reduce r = canonical(q->r);
    if (r.K == 0) return 0;
    int64_t n = with_policy(*q, [&](const auto &pol) { return scratch_bytes(r, pol); });
    return n > 0 ? (size_t)n : 0;
}

extern "C" int crk_reduce_dim(const crk_reduce_dim_call *q, void *scratch, cudaStream_t stream) {
    const crk_reduce r = canonical(q->r);
    if (r.K == 0) return 0;
    if (r.R == 0 && (q->op == CRK_RD_MAX || q->op == CRK_RD_MIN)) return cudaErrorInvalidValue;
    int64_t err = with_policy(*q, [&](const auto &pol) { return launch(r, pol, scratch, stream); });
    return err < 0 ? (int)cudaErrorInvalidValue : (int)err;
}
