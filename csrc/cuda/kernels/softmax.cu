// softmax.cu — softmax and log-softmax along one dim of a contiguous [outer, C, inner]
// tensor: the max is subtracted before exp, sums are f64 (the cpu reference's choice).
// Rows along the last dim (inner == 1, the classifier case) get one warp each, reading
// coalesced; other layouts get one thread per (outer, inner) position.
#include <math.h>
#include <stdint.h>

#include "common.cuh"
#include "kernels.h"

namespace {

__device__ __forceinline__ float ex(float v) { return expf(v); }
__device__ __forceinline__ double ex(double v) { return exp(v); }

template <typename T>
__global__ void rows_kernel(const T *x, T *y, int64_t rows, int64_t C, int is_log) {
    const int lane = threadIdx.x % 32;
    const int64_t warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const int64_t warps = (int64_t)gridDim.x * blockDim.x / 32;
    for (int64_t r = warp; r < rows; r += warps) {
        const T *xr = x + r * C;
        T *yr = y + r * C;
        T mx = -INFINITY;
        bool nan = false;
        for (int64_t c = lane; c < C; c += 32) {
            T v = xr[c];
            nan |= v != v;
            mx = v > mx ? v : mx;
        }
        for (int o = 16; o; o >>= 1) {
            T other = __shfl_xor_sync(0xffffffffu, mx, o);
            mx = other > mx ? other : mx;
            nan |= __shfl_xor_sync(0xffffffffu, (int)nan, o) != 0;
        }
        if (nan) mx = (T)NAN;
        double sum = 0;
        for (int64_t c = lane; c < C; c += 32) sum += (double)ex(xr[c] - mx);
        for (int o = 16; o; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        if (is_log) {
            T shift = mx + (T)log(sum);
            for (int64_t c = lane; c < C; c += 32) yr[c] = xr[c] - shift;
        } else {
            T inv = (T)(1.0 / sum);
            for (int64_t c = lane; c < C; c += 32) yr[c] = ex(xr[c] - mx) * inv;
        }
    }
}

template <typename T>
__global__ void strided_kernel(const T *x, T *y, int64_t outer, int64_t C, int64_t inner, int is_log) {
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t q = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; q < outer * inner; q += step) {
        const int64_t base = (q / inner) * C * inner + q % inner;
        T mx = -INFINITY;
        bool nan = false;
        for (int64_t c = 0; c < C; c++) {
            T v = x[base + c * inner];
            nan |= v != v;
            mx = v > mx ? v : mx;
        }
        if (nan) mx = (T)NAN;
        double sum = 0;
        for (int64_t c = 0; c < C; c++) sum += (double)ex(x[base + c * inner] - mx);
        if (is_log) {
            T shift = mx + (T)log(sum);
            for (int64_t c = 0; c < C; c++) y[base + c * inner] = x[base + c * inner] - shift;
        } else {
            T inv = (T)(1.0 / sum);
            for (int64_t c = 0; c < C; c++) y[base + c * inner] = ex(x[base + c * inner] - mx) * inv;
        }
    }
}


template <typename T>
cudaError_t run(const void *x, void *y, int64_t outer, int64_t C, int64_t inner, int is_log, cudaStream_t s) {
    if (inner == 1)
        rows_kernel<T><<<grid_for(outer * 32), THREADS, 0, s>>>((const T *)x, (T *)y, outer, C, is_log);
    else
        strided_kernel<T><<<grid_for(outer * inner), THREADS, 0, s>>>((const T *)x, (T *)y, outer, C, inner,
                                                                    is_log);
    return cudaGetLastError();
}

} // namespace

extern "C" int crk_softmax(const void *x, void *y, int64_t outer, int64_t C, int64_t inner, int f64,
                           int is_log, cudaStream_t stream) {
    if (outer * C * inner == 0) return 0;
    return f64 ? run<double>(x, y, outer, C, inner, is_log, stream)
               : run<float>(x, y, outer, C, inner, is_log, stream);
}
