// batch_norm.cu — batch norm forward and backward, channels-last or NCHW, f32 or f64, with
// the CPU reference's semantics (ops/batch_norm.c): batch statistics summed in f64,
// biased variance for normalising and unbiased for the running estimate (momentum as in
// PyTorch), saved mean and 1/sqrt(var + eps) for backward, an optional fused relu.
// Per-channel sums: each block folds a tile of rows for 32 channels into f64 partials and
// adds them atomically into a [2, C] f64 scratch.
#include <stdint.h>

#include "common.cuh"
#include "kernels.h"

namespace {

constexpr int CH = 32, ROWS = 8; // block: 32 channels x 8 row lanes

__device__ __forceinline__ int64_t index_of(int64_t m, int64_t c, int64_t C, int64_t S, int cl) {
    return cl ? m * C + c : (m / S) * C * S + c * S + (m % S);
}

template <typename T> __device__ __forceinline__ double param(const void *p, int64_t c, double dflt) {
    return p ? (double)((const T *)p)[c] : dflt;
}

// acc[c] += sum x, acc[C + c] += sum x^2 over the block's rows
template <typename T>
__global__ void stats_kernel(const T *x, int64_t M, int64_t C, int64_t S, int cl, int64_t rows_per_block,
                             double *acc) {
    __shared__ double s1[ROWS][CH], s2[ROWS][CH];
    int64_t c = (int64_t)blockIdx.x * CH + threadIdx.x;
    int64_t m0 = (int64_t)blockIdx.y * rows_per_block;
    int64_t m1 = m0 + rows_per_block < M ? m0 + rows_per_block : M;
    double a = 0, b = 0;
    if (c < C)
        for (int64_t m = m0 + threadIdx.y; m < m1; m += ROWS) {
            double v = (double)x[index_of(m, c, C, S, cl)];
            a += v;
            b += v * v;
        }
    s1[threadIdx.y][threadIdx.x] = a;
    s2[threadIdx.y][threadIdx.x] = b;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        for (int r = 1; r < ROWS; r++) {
            a += s1[r][threadIdx.x];
            b += s2[r][threadIdx.x];
        }
        atomicAdd(&acc[c], a);
        atomicAdd(&acc[C + c], b);
    }
}

template <typename T> __global__ void finalize_kernel(crk_bn p) {
    int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= p.C) return;
    double mean, var;
    if (p.use_batch) {
        mean = p.acc[c] / (double)p.M;
        var = p.acc[p.C + c] / (double)p.M - mean * mean;
        if (var < 0) var = 0;
        if (p.update_running) {
            T *rm = (T *)p.running_mean, *rv = (T *)p.running_var;
            double unbiased = p.M > 1 ? var * (double)p.M / (double)(p.M - 1) : var;
            rm[c] = (T)((1 - p.momentum) * (double)rm[c] + p.momentum * mean);
            rv[c] = (T)((1 - p.momentum) * (double)rv[c] + p.momentum * unbiased);
        }
    } else {
        mean = (double)((const T *)p.running_mean)[c];
        var = (double)((const T *)p.running_var)[c];
    }
    ((T *)p.mean)[c] = (T)mean;
    ((T *)p.invstd)[c] = (T)(1.0 / sqrt(var + p.eps));
}

template <typename T> __global__ void apply_kernel(crk_bn p) {
    const int64_t n = p.M * p.C, step = (int64_t)gridDim.x * blockDim.x;
    const T *x = (const T *)p.x;
    T *y = (T *)p.y;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        int64_t c = p.channels_last ? i % p.C : (i / p.S) % p.C;
        double scale = param<T>(p.w, c, 1.0) * (double)((const T *)p.invstd)[c];
        double v = ((double)x[i] - (double)((const T *)p.mean)[c]) * scale + param<T>(p.b, c, 0.0);
        if (p.relu && v < 0) v = 0;
        y[i] = (T)v;
    }
}

// acc[c] += sum g', acc[C + c] += sum g' * xhat
template <typename T>
__global__ void backward_sums_kernel(crk_bn_backward p, int64_t rows_per_block) {
    __shared__ double s1[ROWS][CH], s2[ROWS][CH];
    int64_t c = (int64_t)blockIdx.x * CH + threadIdx.x;
    int64_t m0 = (int64_t)blockIdx.y * rows_per_block;
    int64_t m1 = m0 + rows_per_block < p.M ? m0 + rows_per_block : p.M;
    double a = 0, b = 0;
    if (c < p.C) {
        double mean = (double)((const T *)p.mean)[c], inv = (double)((const T *)p.invstd)[c];
        for (int64_t m = m0 + threadIdx.y; m < m1; m += ROWS) {
            int64_t i = index_of(m, c, p.C, p.S, p.channels_last);
            double g = (double)((const T *)p.g)[i];
            if (p.y && ((const T *)p.y)[i] <= (T)0) g = 0;
            a += g;
            b += g * ((double)((const T *)p.x)[i] - mean) * inv;
        }
    }
    s1[threadIdx.y][threadIdx.x] = a;
    s2[threadIdx.y][threadIdx.x] = b;
    __syncthreads();
    if (threadIdx.y == 0 && c < p.C) {
        for (int r = 1; r < ROWS; r++) {
            a += s1[r][threadIdx.x];
            b += s2[r][threadIdx.x];
        }
        atomicAdd(&p.acc[c], a);
        atomicAdd(&p.acc[p.C + c], b);
    }
}

template <typename T> __global__ void backward_params_kernel(crk_bn_backward p) {
    int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= p.C) return;
    if (p.gb) ((T *)p.gb)[c] = (T)p.acc[c];
    if (p.gw) ((T *)p.gw)[c] = (T)p.acc[p.C + c];
}

template <typename T> __global__ void backward_input_kernel(crk_bn_backward p) {
    const int64_t n = p.M * p.C, step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        int64_t c = p.channels_last ? i % p.C : (i / p.S) % p.C;
        double inv = (double)((const T *)p.invstd)[c], w = param<T>(p.w, c, 1.0);
        double g = (double)((const T *)p.g)[i];
        if (p.y && ((const T *)p.y)[i] <= (T)0) g = 0;
        double r;
        if (p.use_batch) {
            double xhat = ((double)((const T *)p.x)[i] - (double)((const T *)p.mean)[c]) * inv;
            r = w * inv * (g - p.acc[c] / (double)p.M - xhat * p.acc[p.C + c] / (double)p.M);
        } else {
            r = w * inv * g;
        }
        ((T *)p.gx)[i] = (T)r;
    }
}


// Blocks along the rows: enough to fill the GPU, each at least 64 rows.
dim3 sums_grid(int64_t M, int64_t C, int64_t *rows_per_block) {
    int64_t cblocks = (C + CH - 1) / CH;
    int64_t want = 1024 / (cblocks > 0 ? cblocks : 1);
    if (want < 1) want = 1;
    int64_t rows = (M + want - 1) / want;
    if (rows < 64) rows = 64;
    *rows_per_block = rows;
    int64_t mblocks = (M + rows - 1) / rows;
    return dim3((unsigned)cblocks, (unsigned)(mblocks < 1 ? 1 : mblocks > 65535 ? 65535 : mblocks));
}

template <typename T> cudaError_t forward(const crk_bn *p, cudaStream_t s) {
    if (p->use_batch) {
        cudaError_t e = cudaMemsetAsync(p->acc, 0, sizeof(double) * 2 * p->C, s);
        if (e) return e;
        int64_t rows;
        dim3 grid = sums_grid(p->M, p->C, &rows);
        if (grid.y == 65535) rows = (p->M + 65534) / 65535;
        stats_kernel<T><<<grid, dim3(CH, ROWS), 0, s>>>((const T *)p->x, p->M, p->C, p->S,
                                                       p->channels_last, rows, p->acc);
    }
    finalize_kernel<T><<<grid_for(p->C), THREADS, 0, s>>>(*p);
    apply_kernel<T><<<grid_for(p->M * p->C), THREADS, 0, s>>>(*p);
    return cudaGetLastError();
}

template <typename T> cudaError_t backward(const crk_bn_backward *p, cudaStream_t s) {
    cudaError_t e = cudaMemsetAsync(p->acc, 0, sizeof(double) * 2 * p->C, s);
    if (e) return e;
    if (p->gw || p->gb || (p->gx && p->use_batch)) {
        int64_t rows;
        dim3 grid = sums_grid(p->M, p->C, &rows);
        if (grid.y == 65535) rows = (p->M + 65534) / 65535;
        backward_sums_kernel<T><<<grid, dim3(CH, ROWS), 0, s>>>(*p, rows);
        backward_params_kernel<T><<<grid_for(p->C), THREADS, 0, s>>>(*p);
    }
    if (p->gx) backward_input_kernel<T><<<grid_for(p->M * p->C), THREADS, 0, s>>>(*p);
    return cudaGetLastError();
}

} // namespace

extern "C" int crk_batch_norm_forward(const crk_bn *p, cudaStream_t stream) {
    if (p->C == 0) return 0;
    return p->f64 ? forward<double>(p, stream) : forward<float>(p, stream);
}

extern "C" int crk_batch_norm_backward(const crk_bn_backward *p, cudaStream_t stream) {
    if (p->C == 0) return 0;
    return p->f64 ? backward<double>(p, stream) : backward<float>(p, stream);
}
