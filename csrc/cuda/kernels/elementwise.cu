// elementwise.cu — every elementwise op of crescent on the GPU: one grid-stride kernel per
// compute type, operands read and written in their own dtypes (converted on load/store, so
// casts, mixed dtypes and bool outputs need no extra pass), broadcast and strided through
// the merged dims of ops/iter.c. Dense f32 operands take a vectorised path (float4), and
// dense operands of one half dtype another (eight halves per 16-byte load where aligned,
// else four per 8 bytes; f32 arithmetic, core/half.h's rounding on store, the same bits as
// the general path; the hot ops compiled in), and so do dense casts between f32 and a
// half. Strided work indexes in 32 bits where it fits. The
// results follow the CPU reference loops (csrc/ops/elementwise.c, unary_math.c, compare.c):
// NaN propagation in maximum/minimum/relu/clamp, integer wrap-around in the operand type,
// zero for non-finite floats stored into integers.
#include <stdint.h>

#include "common.cuh"
#include "kernels.h"

namespace {

struct Params {
    double p[4];
};

__device__ __forceinline__ int64_t ipow(int64_t a, int64_t b) {
    if (b < 0) return a == 1 ? 1 : a == -1 ? ((b & 1) ? -1 : 1) : 0;
    int64_t r = 1;
    while (b) {
        if (b & 1) r *= a;
        a *= a;
        b >>= 1;
    }
    return r;
}

template <typename T> __device__ __forceinline__ T fpow(T a, T b) {
    if constexpr (sizeof(T) == 8) return pow(a, b);
    else return powf(a, b);
}

// The exact gelu and its derivative, as the CPU reference (erfc form).
template <typename T> __device__ __forceinline__ T phi_cdf(T x) {
    if constexpr (sizeof(T) == 8) return 0.5 * erfc(-x * 0.70710678118654752440);
    else return 0.5f * erfcf(-x * 0.70710678118654752f);
}

template <typename T>
__device__ __forceinline__ T apply(int op, T o, T a, T b, T c, const Params &q) {
    constexpr bool is_float = (T)0.5 != (T)0;
    switch (op) {
    case CRK_COPY: return a;
    case CRK_FILL: return (T)q.p[0];
    case CRK_AXPY: return o + (T)q.p[0] * a;
    case CRK_SCALE: return o * a;
    case CRK_ADD: return a + b;
    case CRK_SUB: return a - b;
    case CRK_MUL: return a * b;
    case CRK_DIV: return b != (T)0 || is_float ? a / b : (T)0;
    case CRK_POW:
        if constexpr (is_float) return fpow(a, b);
        else return (T)ipow((int64_t)a, (int64_t)b);
    case CRK_MAXIMUM: return (a > b || a != a) ? a : b;
    case CRK_MINIMUM: return (a < b || a != a) ? a : b;
    case CRK_EQ: return (T)(a == b);
    case CRK_NE: return (T)(a != b);
    case CRK_LT: return (T)(a < b);
    case CRK_LE: return (T)(a <= b);
    case CRK_GT: return (T)(a > b);
    case CRK_GE: return (T)(a >= b);
    case CRK_LOGICAL_AND: return (T)(a != (T)0 && b != (T)0);
    case CRK_LOGICAL_OR: return (T)(a != (T)0 || b != (T)0);
    case CRK_LOGICAL_NOT: return (T)(a == (T)0);
    case CRK_NEG: return -a;
    case CRK_ABS: return a < (T)0 ? -a : a;
    case CRK_SIGN: return (T)((a > (T)0) - (a < (T)0));
    case CRK_RELU: return a < (T)0 ? (T)0 : a;
    case CRK_CLAMP: {
        T lo = (T)q.p[0], hi = (T)q.p[1];
        T r = (q.p[2] != 0 && a < lo) ? lo : a;
        return (q.p[3] != 0 && r > hi) ? hi : r;
    }
    case CRK_WHERE: return a != (T)0 ? b : c;
    case CRK_MASKED_FILL: return b != (T)0 ? (T)q.p[0] : a;
    case CRK_ADD_RELU: return a + b < (T)0 ? (T)0 : a + b;
    case CRK_RELU_BACKWARD: return b > (T)0 ? a : (T)0; // a = grad, b = saved output
    default: break;
    }
    if constexpr (is_float) {
        switch (op) {
        case CRK_EXP: return exp(a);
        case CRK_LOG: return log(a);
        case CRK_SQRT: return sqrt(a);
        case CRK_RSQRT: return (T)1 / sqrt(a);
        case CRK_SIGMOID: return (T)1 / ((T)1 + exp(-a));
        case CRK_TANH: return tanh(a);
        case CRK_GELU: return a * phi_cdf(a);
        case CRK_GELU_TANH: // x/2 (1 + tanh(u)) as x sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3)
            return a / ((T)1 + exp((T)-1.5957691216057307 * (a + (T)0.044715 * a * a * a)));
        case CRK_POW_SCALAR: return fpow(a, (T)q.p[0]);
        case CRK_SIGMOID_BACKWARD: return a * ((T)1 - b) * b;
        case CRK_TANH_BACKWARD: return a * ((T)1 - b * b);
        case CRK_GELU_BACKWARD: // a = grad, b = x
            return a * (phi_cdf(b) + b * (T)0.39894228040143267794 * exp((T)-0.5 * b * b));
        case CRK_GELU_TANH_BACKWARD: { // a = grad, b = x; s = sigmoid(2u)
            const T k = (T)0.79788456080286535588, c = (T)0.044715;
            const T sg = (T)1 / ((T)1 + exp((T)-2 * k * (b + c * b * b * b)));
            return a * (sg + (T)2 * b * sg * ((T)1 - sg) * k * ((T)1 + (T)3 * c * b * b));
        }
        default: break;
        }
    }
    return (T)0;
}

// The offsets of flat index i in each operand (bytes), through the merged dims. I: the
// index type, U: its unsigned twin for the divisions (32 bits where every index and
// offset fits: 64-bit division is emulated and was most of a strided copy's time).
template <int NARGS, typename I, typename U>
__device__ __forceinline__ void offsets(const crk_iter &it, U i, I *off) {
#pragma unroll
    for (int k = 0; k < NARGS; k++) off[k] = 0;
    for (int d = it.ndim - 1; d >= 0; d--) {
        U n = (U)it.shape[d], c = i % n;
        i /= n;
#pragma unroll
        for (int k = 0; k < NARGS; k++) off[k] += (I)c * (I)it.stride[k][d];
    }
}

template <typename T, int NARGS, typename I, typename U>
__global__ void elementwise_kernel(const crk_iter it, int op, const Params q, bool reads_out) {
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < it.numel; i += step) {
        I off[NARGS];
        offsets<NARGS, I, U>(it, (U)i, off);
        T v[4] = {(T)0, (T)0, (T)0, (T)0};
#pragma unroll
        for (int k = 1; k < NARGS; k++)
            v[k] = (it.host_scalar >> k) & 1 ? (T)it.scalar[k] : load<T>(it.base[k] + off[k], it.dtype[k]);
        if (reads_out) v[0] = load<T>(it.base[0] + off[0], it.dtype[0]);
        store<T>(it.base[0] + off[0], it.dtype[0], apply<T>(op, v[0], v[1], v[2], v[3], q));
    }
}

// Dense f32 operands (no broadcast, no host scalar): four elements per thread.
template <int NARGS>
__global__ void dense_f32_kernel(float *out, const float *x, const float *y, int64_t n, int op,
                                 const Params q, bool reads_out) {
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    const int64_t n4 = n / 4;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += step) {
        float4 a = reinterpret_cast<const float4 *>(x)[i];
        float4 b = NARGS > 2 ? reinterpret_cast<const float4 *>(y)[i] : a;
        float4 o = reads_out ? reinterpret_cast<const float4 *>(out)[i] : a;
        float4 r;
        r.x = apply<float>(op, o.x, a.x, b.x, 0.f, q);
        r.y = apply<float>(op, o.y, a.y, b.y, 0.f, q);
        r.z = apply<float>(op, o.z, a.z, b.z, 0.f, q);
        r.w = apply<float>(op, o.w, a.w, b.w, 0.f, q);
        reinterpret_cast<float4 *>(out)[i] = r;
    }
    for (int64_t i = n4 * 4 + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        float a = x[i], b = NARGS > 2 ? y[i] : a, o = reads_out ? out[i] : a;
        out[i] = apply<float>(op, o, a, b, 0.f, q);
    }
}

// Dense operands of one half dtype (BF: bf16, else f16), computed in f32 as the general
// kernel does.
template <bool BF> __device__ __forceinline__ float half_value(uint32_t h) {
    return BF ? cr_bf16_to_f32((uint16_t)h) : cr_f16_to_f32((uint16_t)h);
}
template <bool BF> __device__ __forceinline__ uint32_t half_bits(float v) {
    return BF ? cr_f32_to_bf16(v) : cr_f32_to_f16(v);
}

// W halves (4: 8 bytes, 8: 16 bytes) as one aligned load or store.
template <int W> struct half_vec;
template <> struct half_vec<4> { typedef uint2 T; };
template <> struct half_vec<8> { typedef uint4 T; };

template <int W> __device__ __forceinline__ void load_halves(const uint16_t *p, int64_t i, uint32_t *h) {
    typedef typename half_vec<W>::T T;
    const T v = reinterpret_cast<const T *>(p)[i];
    const uint32_t *words = reinterpret_cast<const uint32_t *>(&v);
#pragma unroll
    for (int k = 0; k < W / 2; k++) {
        h[2 * k] = words[k] & 0xffffu;
        h[2 * k + 1] = words[k] >> 16;
    }
}

template <int W> __device__ __forceinline__ void store_halves(uint16_t *p, int64_t i, const uint32_t *h) {
    typedef typename half_vec<W>::T T;
    T v;
    uint32_t *words = reinterpret_cast<uint32_t *>(&v);
#pragma unroll
    for (int k = 0; k < W / 2; k++) words[k] = h[2 * k] | (h[2 * k + 1] << 16);
    reinterpret_cast<T *>(p)[i] = v;
}

// W per thread (8 where every operand is 16-byte aligned: PyTorch's width for halves;
// the 4-wide first version moved 8 bytes per load and ran at ~2.6 TB/s on an H200). OP:
// the op when it is fixed at compile time (the hot ones of a training step), so that
// apply's switch folds away; -1: `op`, switched on per element (ncu: that switch made
// the first version compute-bound).
template <int NARGS, bool BF, int W, int OP>
__global__ void dense_half_kernel(uint16_t *out, const uint16_t *x, const uint16_t *y, int64_t n, int op_,
                                  const Params q, bool reads_out) {
    const int op = OP >= 0 ? OP : op_;
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    const int64_t nv = n / W;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < nv; i += step) {
        uint32_t av[W], bv[W], ov[W], r[W];
        load_halves<W>(x, i, av);
        if (NARGS > 2) load_halves<W>(y, i, bv);
        if (reads_out) load_halves<W>(out, i, ov);
#pragma unroll
        for (int k = 0; k < W; k++) {
            const float a = half_value<BF>(av[k]);
            const float b = NARGS > 2 ? half_value<BF>(bv[k]) : a;
            const float o = reads_out ? half_value<BF>(ov[k]) : a;
            r[k] = half_bits<BF>(apply<float>(op, o, a, b, 0.f, q));
        }
        store_halves<W>(out, i, r);
    }
    for (int64_t i = nv * W + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        float a = half_value<BF>(x[i]), b = NARGS > 2 ? half_value<BF>(y[i]) : a;
        float o = reads_out ? half_value<BF>(out[i]) : a;
        out[i] = (uint16_t)half_bits<BF>(apply<float>(op, o, a, b, 0.f, q));
    }
}

// Whether every operand is dense (one merged dim, unit stride), of dtype dt, aligned to
// `align` bytes, with no broadcast or host scalar.
bool dense_of(const crk_iter *it, int dt, int64_t elem, uintptr_t align) {
    if (it->ndim != 1 || it->nargs > 3 || it->host_scalar) return false;
    for (int k = 0; k < it->nargs; k++) {
        if (it->dtype[k] != dt || it->stride[k][0] != elem) return false;
        if (((uintptr_t)it->base[k]) % align) return false;
    }
    return true;
}

template <bool BF, int W, int OP>
void launch_dense_half_w(const crk_iter *it, int op, const Params &q, bool reads_out, cudaStream_t s) {
    const uint16_t *x = (const uint16_t *)it->base[1];
    const uint16_t *y = it->nargs > 2 ? (const uint16_t *)it->base[2] : x;
    uint16_t *out = (uint16_t *)it->base[0];
    unsigned grid = grid_for((it->numel + W - 1) / W);
    if (it->nargs == 2) dense_half_kernel<2, BF, W, OP><<<grid, THREADS, 0, s>>>(out, x, y, it->numel, op, q, reads_out);
    else dense_half_kernel<3, BF, W, OP><<<grid, THREADS, 0, s>>>(out, x, y, it->numel, op, q, reads_out);
}

// The 16-byte path with the op fixed for the ops a training step runs most.
template <bool BF>
void launch_dense_half_8(const crk_iter *it, int op, const Params &q, bool reads_out, cudaStream_t s) {
    switch (op) {
    case CRK_ADD: launch_dense_half_w<BF, 8, CRK_ADD>(it, op, q, reads_out, s); break;
    case CRK_MUL: launch_dense_half_w<BF, 8, CRK_MUL>(it, op, q, reads_out, s); break;
    case CRK_ADD_RELU: launch_dense_half_w<BF, 8, CRK_ADD_RELU>(it, op, q, reads_out, s); break;
    case CRK_RELU_BACKWARD: launch_dense_half_w<BF, 8, CRK_RELU_BACKWARD>(it, op, q, reads_out, s); break;
    case CRK_AXPY: launch_dense_half_w<BF, 8, CRK_AXPY>(it, op, q, reads_out, s); break;
    default: launch_dense_half_w<BF, 8, -1>(it, op, q, reads_out, s); break;
    }
}

// Dense operands of one half dtype, 8-byte aligned (dense_of): 8 per thread where they
// are all 16-byte aligned, else 4.
template <bool BF>
cudaError_t launch_dense_half(const crk_iter *it, int op, const Params &q, bool reads_out, cudaStream_t s) {
    bool aligned16 = true;
    for (int k = 0; k < it->nargs; k++) aligned16 = aligned16 && ((uintptr_t)it->base[k]) % 16 == 0;
    if (aligned16) launch_dense_half_8<BF>(it, op, q, reads_out, s);
    else launch_dense_half_w<BF, 4, -1>(it, op, q, reads_out, s);
    return cudaGetLastError();
}

bool dense_f32(const crk_iter *it) { return dense_of(it, F32, 4, 16); }

// Whether every flat index and every operand's byte offset fits in 31 bits.
bool offsets_fit_32(const crk_iter *it) {
    const int64_t lim = ((int64_t)1 << 31) - 1;
    if (it->numel > lim) return false;
    for (int k = 0; k < it->nargs; k++) {
        int64_t reach = 0;
        for (int d = 0; d < it->ndim; d++) {
            int64_t st = it->stride[k][d] < 0 ? -it->stride[k][d] : it->stride[k][d];
            if (st > lim) return false;
            reach += (it->shape[d] - 1) * st;
            if (reach > lim) return false;
        }
    }
    return true;
}

template <typename T, typename I, typename U>
void launch_indexed(const crk_iter *it, int op, const Params &q, bool reads_out, cudaStream_t s) {
    unsigned grid = grid_for(it->numel);
    switch (it->nargs) {
    case 1: elementwise_kernel<T, 1, I, U><<<grid, THREADS, 0, s>>>(*it, op, q, reads_out); break;
    case 2: elementwise_kernel<T, 2, I, U><<<grid, THREADS, 0, s>>>(*it, op, q, reads_out); break;
    case 3: elementwise_kernel<T, 3, I, U><<<grid, THREADS, 0, s>>>(*it, op, q, reads_out); break;
    default: elementwise_kernel<T, 4, I, U><<<grid, THREADS, 0, s>>>(*it, op, q, reads_out); break;
    }
}

template <typename T>
cudaError_t launch(const crk_iter *it, int op, const Params &q, bool reads_out, cudaStream_t s) {
    if (offsets_fit_32(it)) launch_indexed<T, int32_t, uint32_t>(it, op, q, reads_out, s);
    else launch_indexed<T, int64_t, uint64_t>(it, op, q, reads_out, s);
    return cudaGetLastError();
}

// Dense casts between f32 and a half dtype (SRC, DST: dtype codes): four elements per
// thread, 16-byte f32 and 8-byte half accesses, store()'s conversions.
template <int SRC, int DST> __global__ void dense_cast_kernel(char *out, const char *x, int64_t n) {
    constexpr int SS = SRC == F32 ? 4 : 2, DS = DST == F32 ? 4 : 2;
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    const int64_t n4 = n / 4;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += step) {
        float v[4];
        if constexpr (SS == 4) {
            float4 a = reinterpret_cast<const float4 *>(x)[i];
            v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
        } else {
            uint2 a = reinterpret_cast<const uint2 *>(x)[i];
            uint32_t h[4] = {a.x & 0xffffu, a.x >> 16, a.y & 0xffffu, a.y >> 16};
#pragma unroll
            for (int k = 0; k < 4; k++) v[k] = half_value<SRC == BF16>(h[k]);
        }
        if constexpr (DS == 4) {
            reinterpret_cast<float4 *>(out)[i] = make_float4(v[0], v[1], v[2], v[3]);
        } else {
            uint32_t h[4];
#pragma unroll
            for (int k = 0; k < 4; k++) h[k] = half_bits<DST == BF16>(v[k]);
            reinterpret_cast<uint2 *>(out)[i] = make_uint2(h[0] | (h[1] << 16), h[2] | (h[3] << 16));
        }
    }
    for (int64_t i = n4 * 4 + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step)
        store<float>(out + i * DS, DST, load<float>(x + i * SS, SRC));
}

// A dense copy between f32 and a half dtype, aligned for dense_cast_kernel.
bool dense_cast(const crk_iter *it, int op) {
    if (op != CRK_COPY || it->ndim != 1 || it->nargs != 2 || it->host_scalar) return false;
    int d = it->dtype[0], x = it->dtype[1];
    bool f32_to_half = x == F32 && (d == BF16 || d == F16), half_to_f32 = d == F32 && (x == BF16 || x == F16);
    if (!f32_to_half && !half_to_f32) return false;
    for (int k = 0; k < 2; k++) {
        int size = it->dtype[k] == F32 ? 4 : 2;
        if (it->stride[k][0] != size || ((uintptr_t)it->base[k]) % (size * 4)) return false;
    }
    return true;
}

cudaError_t launch_dense_cast(const crk_iter *it, cudaStream_t s) {
    unsigned grid = grid_for((it->numel + 3) / 4);
    char *out = it->base[0];
    const char *x = it->base[1];
    int64_t n = it->numel;
    switch (it->dtype[1] * 8 + it->dtype[0]) {
    case F32 * 8 + BF16: dense_cast_kernel<F32, BF16><<<grid, THREADS, 0, s>>>(out, x, n); break;
    case F32 * 8 + F16: dense_cast_kernel<F32, F16><<<grid, THREADS, 0, s>>>(out, x, n); break;
    case BF16 * 8 + F32: dense_cast_kernel<BF16, F32><<<grid, THREADS, 0, s>>>(out, x, n); break;
    default: dense_cast_kernel<F16, F32><<<grid, THREADS, 0, s>>>(out, x, n); break;
    }
    return cudaGetLastError();
}

} // namespace

extern "C" int crk_elementwise(crk_op op, crk_compute compute, const crk_iter *it,
                               const double *params, cudaStream_t stream) {
    if (it->numel == 0) return 0;
    Params q = {{0, 0, 0, 0}};
    for (int k = 0; k < 4 && params; k++) q.p[k] = params[k];
    bool reads_out = op == CRK_AXPY || op == CRK_SCALE;
    if (compute == CRK_F32 && dense_f32(it) && it->nargs >= 2) {
        const float *x = (const float *)it->base[1];
        const float *y = it->nargs > 2 ? (const float *)it->base[2] : x;
        unsigned grid = grid_for((it->numel + 3) / 4);
        if (it->nargs == 2)
            dense_f32_kernel<2><<<grid, THREADS, 0, stream>>>((float *)it->base[0], x, y, it->numel,
                                                              op, q, reads_out);
        else
            dense_f32_kernel<3><<<grid, THREADS, 0, stream>>>((float *)it->base[0], x, y, it->numel,
                                                              op, q, reads_out);
        return cudaGetLastError();
    }
    if (dense_cast(it, op)) return launch_dense_cast(it, stream);
    if (compute == CRK_F32 && it->nargs >= 2 && dense_of(it, BF16, 2, 8))
        return launch_dense_half<true>(it, op, q, reads_out, stream);
    if (compute == CRK_F32 && it->nargs >= 2 && dense_of(it, F16, 2, 8))
        return launch_dense_half<false>(it, op, q, reads_out, stream);
    switch (compute) {
    case CRK_F64: return launch<double>(it, op, q, reads_out, stream);
    case CRK_I64: return launch<int64_t>(it, op, q, reads_out, stream);
    default: return launch<float>(it, op, q, reads_out, stream);
    }
}
