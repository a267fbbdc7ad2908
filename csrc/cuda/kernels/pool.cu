// pool.cu — max, average and adaptive average pooling on row-major planes (max pooling
// also on channels-last tensors, in any float dtype), forward and backward, with
// ops/pool.c's windows: NaN and the first maximum win, windows clipped to
// the input (and its padding for the average's divisor), PyTorch's adaptive bins. The
// backward kernels gather (one thread per input element reads the outputs whose windows
// hold it), so they need no atomics and give the same bits on every run.
#include <math.h>
#include <stdint.h>

#include "common.cuh"
#include "kernels.h"

namespace {

// Plane k, row r, column q of a stack of h x w planes: its element offset, and the
// reverse for a flat index in memory order (row-major, or channels-last). I: the index
// type (32 bits where the tensor fits).
template <typename I> __device__ __forceinline__ I offset_of(const crk_pool &g, I k, I r, I q, I h, I w) {
    if (!g.channels_last) return (k * h + r) * w + q;
    const I C = (I)g.channels;
    return ((k / C * h + r) * w + q) * C + k % C;
}

template <typename I> __device__ __forceinline__ void position_of(const crk_pool &g, I i, I h, I w, I *k, I *r, I *q) {
    if (!g.channels_last) {
        *q = i % w;
        *r = (i / w) % h;
        *k = i / (w * h);
        return;
    }
    const I C = (I)g.channels, c = i % C, rest = i / C;
    *q = rest % w;
    *r = (rest / w) % h;
    *k = rest / (w * h) * C + c;
}

// A max-pooling element of dtype code DT: stored as S, compared and summed as A (f32 for
// halves, which is exact for the comparisons and what the cpu's f32 backward does).
template <int DT> struct elem;
template <> struct elem<F32> {
    typedef float S, A;
    static __device__ __forceinline__ A get(S v) { return v; }
    static __device__ __forceinline__ S put(A v) { return v; }
};
template <> struct elem<F64> {
    typedef double S, A;
    static __device__ __forceinline__ A get(S v) { return v; }
    static __device__ __forceinline__ S put(A v) { return v; }
};
template <> struct elem<F16> {
    typedef uint16_t S;
    typedef float A;
    static __device__ __forceinline__ A get(S v) { return cr_f16_to_f32(v); }
    static __device__ __forceinline__ S put(A v) { return cr_f32_to_f16(v); }
};
template <> struct elem<BF16> {
    typedef uint16_t S;
    typedef float A;
    static __device__ __forceinline__ A get(S v) { return cr_bf16_to_f32(v); }
    static __device__ __forceinline__ S put(A v) { return cr_f32_to_bf16(v); }
};

// Index math in I throughout (32 bits where the tensors fit: the 64-bit divisions of the
// first version were most of a ResNet stem's pooling time).
template <int DT, typename I>
__global__ void max_fwd(crk_pool g, const typename elem<DT>::S *x, typename elem<DT>::S *y, int64_t *ind) {
    typedef elem<DT> E;
    typedef typename E::A A;
    const I n = (I)(g.planes * g.oh * g.ow), H = (I)g.h, W = (I)g.w;
    const I sh = (I)g.sh, sw = (I)g.sw, ph = (I)g.ph, pw = (I)g.pw, dh = (I)g.dh, dw = (I)g.dw;
    const I span_h = ((I)g.kh - 1) * dh + 1, span_w = ((I)g.kw - 1) * dw + 1;
    for (I i = (I)(blockIdx.x * blockDim.x + threadIdx.x); i < n; i += (I)(gridDim.x * blockDim.x)) {
        I k, oh, ow;
        position_of<I>(g, i, (I)g.oh, (I)g.ow, &k, &oh, &ow);
        I h0 = oh * sh - ph, h1 = h0 + span_h;
        if (h1 > H) h1 = H;
        while (h0 < 0) h0 += dh;
        I w0 = ow * sw - pw, w1 = w0 + span_w;
        if (w1 > W) w1 = W;
        while (w0 < 0) w0 += dw;
        A best = -INFINITY;
        I at = h0 < h1 && w0 < w1 ? h0 * W + w0 : -1;
        for (I ih = h0; ih < h1; ih += dh)
            for (I iw = w0; iw < w1; iw += dw) {
                A v = E::get(x[offset_of<I>(g, k, ih, iw, H, W)]);
                if (v > best || isnan(v)) {
                    best = v;
                    at = ih * W + iw;
                }
            }
        y[i] = E::put(best);
        ind[i] = at;
    }
}

// The outputs along one axis whose windows (start o*s - p, extent (k-1)*d + 1) hold i.
template <typename I>
__device__ __forceinline__ void covering(I i, I k, I s, I p, I d, I out, I *lo, I *hi) {
    I top = i + p, a = top - (k - 1) * d;
    *lo = a <= 0 ? 0 : (a + s - 1) / s;
    *hi = top / s;
    if (*hi > out - 1) *hi = out - 1;
}

template <int DT, typename I>
__global__ void max_bwd(crk_pool g, const typename elem<DT>::S *gy, const int64_t *ind, typename elem<DT>::S *gx) {
    typedef elem<DT> E;
    typedef typename E::A A;
    const I n = (I)(g.planes * g.h * g.w), H = (I)g.h, W = (I)g.w, OH = (I)g.oh, OW = (I)g.ow;
    for (I i = (I)(blockIdx.x * blockDim.x + threadIdx.x); i < n; i += (I)(gridDim.x * blockDim.x)) {
        I k, ih, iw, oh0, oh1, ow0, ow1;
        position_of<I>(g, i, H, W, &k, &ih, &iw);
        const int64_t flat = (int64_t)ih * W + iw;
        covering<I>(ih, (I)g.kh, (I)g.sh, (I)g.ph, (I)g.dh, OH, &oh0, &oh1);
        covering<I>(iw, (I)g.kw, (I)g.sw, (I)g.pw, (I)g.dw, OW, &ow0, &ow1);
        A acc = 0;
        for (I oh = oh0; oh <= oh1; oh++)
            for (I ow = ow0; ow <= ow1; ow++) {
                I o = offset_of<I>(g, k, oh, ow, OH, OW);
                if (ind[o] == flat) acc += E::get(gy[o]);
            }
        gx[i] = E::put(acc);
    }
}

template <int DT, typename I> void launch_max_fwd(const crk_pool *g, const void *x, void *y, int64_t *ind, cudaStream_t s) {
    typedef typename elem<DT>::S S;
    max_fwd<DT, I><<<grid_for(g->planes * g->oh * g->ow), THREADS, 0, s>>>(*g, (const S *)x, (S *)y, ind);
}

template <int DT, typename I>
void launch_max_bwd(const crk_pool *g, const void *gy, const int64_t *ind, void *gx, cudaStream_t s) {
    typedef typename elem<DT>::S S;
    max_bwd<DT, I><<<grid_for(g->planes * g->h * g->w), THREADS, 0, s>>>(*g, (const S *)gy, ind, (S *)gx);
}

// The launcher of dtype code g->dtype (f32, f64, f16, bf16) with index type I.
template <typename I> void max_fwd_of(const crk_pool *g, const void *x, void *y, int64_t *ind, cudaStream_t s) {
    switch (g->dtype) {
    case F64: launch_max_fwd<F64, I>(g, x, y, ind, s); break;
    case F16: launch_max_fwd<F16, I>(g, x, y, ind, s); break;
    case BF16: launch_max_fwd<BF16, I>(g, x, y, ind, s); break;
    default: launch_max_fwd<F32, I>(g, x, y, ind, s); break;
    }
}

template <typename I>
void max_bwd_of(const crk_pool *g, const void *gy, const int64_t *ind, void *gx, cudaStream_t s) {
    switch (g->dtype) {
    case F64: launch_max_bwd<F64, I>(g, gy, ind, gx, s); break;
    case F16: launch_max_bwd<F16, I>(g, gy, ind, gx, s); break;
    case BF16: launch_max_bwd<BF16, I>(g, gy, ind, gx, s); break;
    default: launch_max_bwd<F32, I>(g, gy, ind, gx, s); break;
    }
}

__device__ __forceinline__ int64_t avg_window(const crk_pool &g, int64_t oh, int64_t ow, int64_t *h0,
                                              int64_t *h1, int64_t *w0, int64_t *w1) {
    int64_t a0 = oh * g.sh - g.ph, b0 = ow * g.sw - g.pw;
    int64_t a1 = a0 + g.kh, b1 = b0 + g.kw;
    if (a1 > g.h + g.ph) a1 = g.h + g.ph;
    if (b1 > g.w + g.pw) b1 = g.w + g.pw;
    int64_t padded = (a1 - a0) * (b1 - b0);
    if (a0 < 0) a0 = 0;
    if (b0 < 0) b0 = 0;
    if (a1 > g.h) a1 = g.h;
    if (b1 > g.w) b1 = g.w;
    *h0 = a0, *h1 = a1, *w0 = b0, *w1 = b1;
    if (a0 >= a1 || b0 >= b1) return 0;
    return g.count_include_pad ? padded : (a1 - a0) * (b1 - b0);
}

template <typename T> __global__ void avg_fwd(crk_pool g, const T *x, T *y) {
    GRID_STRIDE(i, g.planes * g.oh * g.ow) {
        int64_t ow = i % g.ow, oh = (i / g.ow) % g.oh, k = i / (g.ow * g.oh);
        int64_t h0, h1, w0, w1, div = avg_window(g, oh, ow, &h0, &h1, &w0, &w1);
        const T *xp = x + k * g.h * g.w;
        double sum = 0;
        for (int64_t ih = h0; ih < h1; ih++)
            for (int64_t iw = w0; iw < w1; iw++) sum += (double)xp[ih * g.w + iw];
        y[i] = (T)(div ? sum / (double)div : 0.0);
    }
}

template <typename T> __global__ void avg_bwd(crk_pool g, const T *gy, T *gx) {
    GRID_STRIDE(i, g.planes * g.h * g.w) {
        int64_t iw = i % g.w, ih = (i / g.w) % g.h, k = i / (g.w * g.h);
        int64_t oh0, oh1, ow0, ow1;
        covering<int64_t>(ih, g.kh, g.sh, g.ph, 1, g.oh, &oh0, &oh1);
        covering<int64_t>(iw, g.kw, g.sw, g.pw, 1, g.ow, &ow0, &ow1);
        const int64_t base = k * g.oh * g.ow;
        double acc = 0;
        for (int64_t oh = oh0; oh <= oh1; oh++)
            for (int64_t ow = ow0; ow <= ow1; ow++) {
                int64_t h0, h1, w0, w1, div = avg_window(g, oh, ow, &h0, &h1, &w0, &w1);
                if (div && ih >= h0 && ih < h1 && iw >= w0 && iw < w1)
                    acc += (double)gy[base + oh * g.ow + ow] / (double)div;
            }
        gx[i] = (T)acc;
    }
}

__device__ __forceinline__ int64_t bin_start(int64_t i, int64_t n, int64_t out) { return i * n / out; }
__device__ __forceinline__ int64_t bin_end(int64_t i, int64_t n, int64_t out) {
    return ((i + 1) * n + out - 1) / out;
}

template <typename T> __global__ void adaptive_fwd(crk_pool g, const T *x, T *y) {
    GRID_STRIDE(i, g.planes * g.oh * g.ow) {
        int64_t ow = i % g.ow, oh = (i / g.ow) % g.oh, k = i / (g.ow * g.oh);
        int64_t h0 = bin_start(oh, g.h, g.oh), h1 = bin_end(oh, g.h, g.oh);
        int64_t w0 = bin_start(ow, g.w, g.ow), w1 = bin_end(ow, g.w, g.ow);
        const T *xp = x + k * g.h * g.w;
        double sum = 0;
        for (int64_t ih = h0; ih < h1; ih++)
            for (int64_t iw = w0; iw < w1; iw++) sum += (double)xp[ih * g.w + iw];
        y[i] = (T)(sum / (double)((h1 - h0) * (w1 - w0)));
    }
}

template <typename T> __global__ void adaptive_bwd(crk_pool g, const T *gy, T *gx) {
    GRID_STRIDE(i, g.planes * g.h * g.w) {
        int64_t iw = i % g.w, ih = (i / g.w) % g.h, k = i / (g.w * g.h);
        const int64_t base = k * g.oh * g.ow;
        double acc = 0;
        for (int64_t oh = 0; oh < g.oh; oh++) {
            int64_t h0 = bin_start(oh, g.h, g.oh), h1 = bin_end(oh, g.h, g.oh);
            if (ih < h0 || ih >= h1) continue;
            for (int64_t ow = 0; ow < g.ow; ow++) {
                int64_t w0 = bin_start(ow, g.w, g.ow), w1 = bin_end(ow, g.w, g.ow);
                if (iw < w0 || iw >= w1) continue;
                acc += (double)gy[base + oh * g.ow + ow] / (double)((h1 - h0) * (w1 - w0));
            }
        }
        gx[i] = (T)acc;
    }
}

} // namespace


extern "C" int crk_max_pool2d(const crk_pool *g, const void *x, void *y, int64_t *ind, cudaStream_t s) {
    int64_t n = g->planes * g->oh * g->ow, in = g->planes * g->h * g->w;
    if (!n) return 0;
    if (fits_32(n) && fits_32(in)) max_fwd_of<int32_t>(g, x, y, ind, s);
    else max_fwd_of<int64_t>(g, x, y, ind, s);
    return cudaGetLastError();
}

extern "C" int crk_max_pool2d_backward(const crk_pool *g, const void *gy, const int64_t *ind, void *gx,
                                       cudaStream_t s) {
    int64_t n = g->planes * g->h * g->w;
    if (!n) return 0;
    if (fits_32(n) && fits_32(g->planes * g->oh * g->ow)) max_bwd_of<int32_t>(g, gy, ind, gx, s);
    else max_bwd_of<int64_t>(g, gy, ind, gx, s);
    return cudaGetLastError();
}

extern "C" int crk_avg_pool2d(const crk_pool *g, const void *x, void *y, cudaStream_t s) {
    int64_t n = g->planes * g->oh * g->ow;
    if (!n) return 0;
    if (g->dtype == F64) avg_fwd<double><<<grid_for(n), THREADS, 0, s>>>(*g, (const double *)x, (double *)y);
    else avg_fwd<float><<<grid_for(n), THREADS, 0, s>>>(*g, (const float *)x, (float *)y);
    return cudaGetLastError();
}

extern "C" int crk_avg_pool2d_backward(const crk_pool *g, const void *gy, void *gx, cudaStream_t s) {
    int64_t n = g->planes * g->h * g->w;
    if (!n) return 0;
    if (g->dtype == F64) avg_bwd<double><<<grid_for(n), THREADS, 0, s>>>(*g, (const double *)gy, (double *)gx);
    else avg_bwd<float><<<grid_for(n), THREADS, 0, s>>>(*g, (const float *)gy, (float *)gx);
    return cudaGetLastError();
}

extern "C" int crk_adaptive_avg_pool2d(const crk_pool *g, const void *x, void *y, cudaStream_t s) {
    int64_t n = g->planes * g->oh * g->ow;
    if (!n) return 0;
    if (g->dtype == F64) adaptive_fwd<double><<<grid_for(n), THREADS, 0, s>>>(*g, (const double *)x, (double *)y);
    else adaptive_fwd<float><<<grid_for(n), THREADS, 0, s>>>(*g, (const float *)x, (float *)y);
    return cudaGetLastError();
}

extern "C" int crk_adaptive_avg_pool2d_backward(const crk_pool *g, const void *gy, void *gx,
                                                cudaStream_t s) {
    int64_t n = g->planes * g->h * g->w;
    if (!n) return 0;
    if (g->dtype == F64) adaptive_bwd<double><<<grid_for(n), THREADS, 0, s>>>(*g, (const double *)gy, (double *)gx);
    else adaptive_bwd<float><<<grid_for(n), THREADS, 0, s>>>(*g, (const float *)gy, (float *)gx);
    return cudaGetLastError();
}
