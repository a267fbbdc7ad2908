// normalize.cu — L2 normalisation along one dim on the GPU, computing what
// ops/normalize.c computes: per (outer, inner) pair the f64 sum of squares over the L
// elements, y = x / max(||x||, eps), and in the backward the f64 sum of g * y. Rows
// (inner == 1, the embeddings SwAV, MoCo and SimCLR normalise) take a warp each, the
// sums added over the warp in a fixed order; with inner > 1 a thread takes a column.
#include <math.h>
#include <stdint.h>

#include "normalize.h"

namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65535 * 16;

__device__ double warp_sum(double v) {
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// One warp per row of L elements (inner == 1).
template <typename T, bool Backward>
__global__ void __launch_bounds__(kThreads) rows_kernel(crk_normalize p) {
    const int lane = threadIdx.x % 32;
    const int64_t step = (int64_t)gridDim.x * blockDim.x / 32;
    for (int64_t r = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32; r < p.outer; r += step) {
        const T *xr = (const T *)p.x + r * p.L;
        T *outr = (T *)p.out + r * p.L;
        double s = 0;
        if (!Backward) {
            for (int64_t l = lane; l < p.L; l += 32) {
                const double v = xr[l];
                s += v * v;
            }
            const double nrm = sqrt(warp_sum(s));
            if (lane == 0) ((T *)p.nrm)[r] = (T)nrm;
            const double inv = 1.0 / (nrm > p.eps ? nrm : p.eps);
            for (int64_t l = lane; l < p.L; l += 32) outr[l] = (T)(xr[l] * inv);
        } else {
            const T *yr = (const T *)p.y + r * p.L;
            for (int64_t l = lane; l < p.L; l += 32) s += (double)xr[l] * yr[l];
            const double dot = warp_sum(s), nrm = ((const T *)p.nrm)[r];
            for (int64_t l = lane; l < p.L; l += 32) {
                const double gv = xr[l];
                outr[l] = (T)(nrm >= p.eps ? (gv - yr[l] * dot) / nrm : gv / p.eps);
            }
        }
    }
}

// One thread per (outer, inner) column, walking its L elements inner apart.
template <typename T, bool Backward>
__global__ void __launch_bounds__(kThreads) columns_kernel(crk_normalize p) {
    const int64_t n = p.outer * p.inner, step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        const int64_t o = i / p.inner, k = i % p.inner, base = o * p.L * p.inner + k;
        const T *xs = (const T *)p.x + base;
        T *outs = (T *)p.out + base;
        double s = 0;
        if (!Backward) {
            for (int64_t l = 0; l < p.L; l++) {
                const double v = xs[l * p.inner];
                s += v * v;
            }
            const double nrm = sqrt(s);
            ((T *)p.nrm)[i] = (T)nrm;
            const double inv = 1.0 / (nrm > p.eps ? nrm : p.eps);
            for (int64_t l = 0; l < p.L; l++) outs[l * p.inner] = (T)(xs[l * p.inner] * inv);
        } else {
            const T *ys = (const T *)p.y + base;
            for (int64_t l = 0; l < p.L; l++) s += (double)xs[l * p.inner] * ys[l * p.inner];
            const double nrm = ((const T *)p.nrm)[i];
            for (int64_t l = 0; l < p.L; l++) {
                const double gv = xs[l * p.inner];
                outs[l * p.inner] = (T)(nrm >= p.eps ? (gv - ys[l * p.inner] * s) / nrm : gv / p.eps);
            }
        }
    }
}

unsigned blocks_for(int64_t threads_needed) {
    const int64_t b = (threads_needed + kThreads - 1) / kThreads;
    return (unsigned)(b < 1 ? 1 : b > kMaxBlocks ? kMaxBlocks : b);
}

template <typename T, bool Backward> cudaError_t launch(const crk_normalize *p, cudaStream_t s) {
    if (p->inner == 1)
        rows_kernel<T, Backward><<<blocks_for(p->outer * 32), kThreads, 0, s>>>(*p);
    else
        columns_kernel<T, Backward><<<blocks_for(p->outer * p->inner), kThreads, 0, s>>>(*p);
    return cudaGetLastError();
}

} // namespace

extern "C" int crk_normalize_forward(const crk_normalize *p, cudaStream_t stream) {
    if (p->outer == 0 || p->inner == 0) return 0;
    return p->f64 ? launch<double, false>(p, stream) : launch<float, false>(p, stream);
}

extern "C" int crk_normalize_backward(const crk_normalize *p, cudaStream_t stream) {
    if (p->outer == 0 || p->inner == 0) return 0;
    return p->f64 ? launch<double, true>(p, stream) : launch<float, true>(p, stream);
}
