// batch_norm.cu — batch norm forward and backward, channels-last or NCHW, with the CPU
// reference's semantics (ops/batch_norm.c): batch statistics summed in f64, biased
// variance for normalising and unbiased for the running estimate (momentum as in
// PyTorch), saved mean and 1/sqrt(var + eps) for backward, an optional fused relu.
// x, y, g and gx are f32, f64, f16 or bf16 (TX); weight, bias, statistics and their grads
// f32 (f64 with f64 x) (TP), which is also the type of the per-element arithmetic: halves
// are read and written as halves, as cuDNN's mixed-precision batch norm does.
// Per-channel sums: each block folds a tile of rows for 32 channels into f64 partials and
// adds them atomically into a [2, C] f64 scratch.
#include <stdint.h>

#include "common.cuh"
#include "kernels.h"

namespace {

constexpr int CH = 32, ROWS = 8; // block: 32 channels x 8 row lanes

// halves as stored: 16 bits, converted with core/half.h's rounding (the cpu's bits)
struct f16_t { uint16_t bits; };
struct bf16_t { uint16_t bits; };
__device__ __forceinline__ float value(float v) { return v; }
__device__ __forceinline__ double value(double v) { return v; }
__device__ __forceinline__ float value(f16_t v) { return cr_f16_to_f32(v.bits); }
__device__ __forceinline__ float value(bf16_t v) { return cr_bf16_to_f32(v.bits); }
template <typename T> __device__ __forceinline__ T stored(double v);
template <> __device__ __forceinline__ float stored<float>(double v) { return (float)v; }
template <> __device__ __forceinline__ double stored<double>(double v) { return v; }
template <> __device__ __forceinline__ f16_t stored<f16_t>(double v) { return {cr_f32_to_f16((float)v)}; }
template <> __device__ __forceinline__ bf16_t stored<bf16_t>(double v) { return {cr_f32_to_bf16((float)v)}; }

template <typename I> __device__ __forceinline__ I index_of(I m, I c, I C, I S, int cl) {
    return cl ? m * C + c : (m / S) * C * S + c * S + (m % S);
}

template <typename TP> __device__ __forceinline__ TP param(const void *p, int64_t c, TP dflt) {
    return p ? ((const TP *)p)[c] : dflt;
}

// acc[c] += sum x, acc[C + c] += sum x^2 over the block's rows
template <typename TX>
__global__ void stats_kernel(const TX *x, int64_t M, int64_t C, int64_t S, int cl, int64_t rows_per_block,
                             double *acc) {
    __shared__ double s1[ROWS][CH], s2[ROWS][CH];
    int64_t c = (int64_t)blockIdx.x * CH + threadIdx.x;
    int64_t m0 = (int64_t)blockIdx.y * rows_per_block;
    int64_t m1 = m0 + rows_per_block < M ? m0 + rows_per_block : M;
    double a = 0, b = 0;
    if (c < C)
        for (int64_t m = m0 + threadIdx.y; m < m1; m += ROWS) {
            double v = (double)value(x[index_of<int64_t>(m, c, C, S, cl)]);
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

template <typename TP> __global__ void finalize_kernel(crk_bn p) {
    int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= p.C) return;
    double mean, var;
    if (p.use_batch) {
        mean = p.acc[c] / (double)p.M;
        var = p.acc[p.C + c] / (double)p.M - mean * mean;
        if (var < 0) var = 0;
        if (p.update_running) {
            TP *rm = (TP *)p.running_mean, *rv = (TP *)p.running_var;
            double unbiased = p.M > 1 ? var * (double)p.M / (double)(p.M - 1) : var;
            rm[c] = (TP)((1 - p.momentum) * (double)rm[c] + p.momentum * mean);
            rv[c] = (TP)((1 - p.momentum) * (double)rv[c] + p.momentum * unbiased);
        }
    } else {
        mean = (double)((const TP *)p.running_mean)[c];
        var = (double)((const TP *)p.running_var)[c];
    }
    ((TP *)p.mean)[c] = (TP)mean;
    ((TP *)p.invstd)[c] = (TP)(1.0 / sqrt(var + p.eps));
}

// y = (x - mean) * invstd * w + b (then relu); I: the index type (32 bits when it fits)
template <typename TX, typename TP, typename I> __global__ void apply_kernel(crk_bn p) {
    const I n = (I)(p.M * p.C), step = (I)gridDim.x * blockDim.x, C = (I)p.C, S = (I)p.S;
    const TX *x = (const TX *)p.x;
    TX *y = (TX *)p.y;
    const TP *mean = (const TP *)p.mean, *inv = (const TP *)p.invstd;
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        I c = p.channels_last ? i % C : (i / S) % C;
        TP scale = param<TP>(p.w, c, (TP)1) * inv[c];
        TP v = ((TP)value(x[i]) - mean[c]) * scale + param<TP>(p.b, c, (TP)0);
        if (p.relu && v < 0) v = 0;
        y[i] = stored<TX>(v);
    }
}

// acc[c] += sum g', acc[C + c] += sum g' * xhat
template <typename TX, typename TP>
__global__ void backward_sums_kernel(crk_bn_backward p, int64_t rows_per_block) {
    __shared__ double s1[ROWS][CH], s2[ROWS][CH];
    int64_t c = (int64_t)blockIdx.x * CH + threadIdx.x;
    int64_t m0 = (int64_t)blockIdx.y * rows_per_block;
    int64_t m1 = m0 + rows_per_block < p.M ? m0 + rows_per_block : p.M;
    double a = 0, b = 0;
    if (c < p.C) {
        double mean = (double)((const TP *)p.mean)[c], inv = (double)((const TP *)p.invstd)[c];
        for (int64_t m = m0 + threadIdx.y; m < m1; m += ROWS) {
            int64_t i = index_of<int64_t>(m, c, p.C, p.S, p.channels_last);
            double g = (double)value(((const TX *)p.g)[i]);
            if (p.y && value(((const TX *)p.y)[i]) <= 0) g = 0;
            a += g;
            b += g * ((double)value(((const TX *)p.x)[i]) - mean) * inv;
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

template <typename TP> __global__ void backward_params_kernel(crk_bn_backward p) {
    int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= p.C) return;
    if (p.gb) ((TP *)p.gb)[c] = (TP)p.acc[c];
    if (p.gw) ((TP *)p.gw)[c] = (TP)p.acc[p.C + c];
}

template <typename TX, typename TP, typename I> __global__ void backward_input_kernel(crk_bn_backward p) {
    const I n = (I)(p.M * p.C), step = (I)gridDim.x * blockDim.x, C = (I)p.C, S = (I)p.S;
    const TP inv_m = (TP)(1.0 / (double)p.M);
    const TP *mean = (const TP *)p.mean, *invstd = (const TP *)p.invstd;
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        I c = p.channels_last ? i % C : (i / S) % C;
        TP inv = invstd[c], w = param<TP>(p.w, c, (TP)1);
        TP g = (TP)value(((const TX *)p.g)[i]);
        if (p.y && value(((const TX *)p.y)[i]) <= 0) g = 0;
        TP r;
        if (p.use_batch) {
            TP xhat = ((TP)value(((const TX *)p.x)[i]) - mean[c]) * inv;
            r = w * inv * (g - (TP)p.acc[c] * inv_m - xhat * (TP)p.acc[p.C + c] * inv_m);
        } else {
            r = w * inv * g;
        }
        ((TX *)p.gx)[i] = stored<TX>(r);
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

bool fits_32(int64_t n) { return n < ((int64_t)1 << 31); }

template <typename TX, typename TP> cudaError_t forward(const crk_bn *p, cudaStream_t s) {
    if (p->use_batch) {
        cudaError_t e = cudaMemsetAsync(p->acc, 0, sizeof(double) * 2 * p->C, s);
        if (e) return e;
        int64_t rows;
        dim3 grid = sums_grid(p->M, p->C, &rows);
        if (grid.y == 65535) rows = (p->M + 65534) / 65535;
        stats_kernel<TX><<<grid, dim3(CH, ROWS), 0, s>>>((const TX *)p->x, p->M, p->C, p->S,
                                                        p->channels_last, rows, p->acc);
    }
    finalize_kernel<TP><<<grid_for(p->C), THREADS, 0, s>>>(*p);
    if (fits_32(p->M * p->C)) apply_kernel<TX, TP, uint32_t><<<grid_for(p->M * p->C), THREADS, 0, s>>>(*p);
    else apply_kernel<TX, TP, int64_t><<<grid_for(p->M * p->C), THREADS, 0, s>>>(*p);
    return cudaGetLastError();
}

template <typename TX, typename TP> cudaError_t backward(const crk_bn_backward *p, cudaStream_t s) {
    cudaError_t e = cudaMemsetAsync(p->acc, 0, sizeof(double) * 2 * p->C, s);
    if (e) return e;
    if (p->gw || p->gb || (p->gx && p->use_batch)) {
        int64_t rows;
        dim3 grid = sums_grid(p->M, p->C, &rows);
        if (grid.y == 65535) rows = (p->M + 65534) / 65535;
        backward_sums_kernel<TX, TP><<<grid, dim3(CH, ROWS), 0, s>>>(*p, rows);
        backward_params_kernel<TP><<<grid_for(p->C), THREADS, 0, s>>>(*p);
    }
    if (p->gx) {
        if (fits_32(p->M * p->C))
            backward_input_kernel<TX, TP, uint32_t><<<grid_for(p->M * p->C), THREADS, 0, s>>>(*p);
        else
            backward_input_kernel<TX, TP, int64_t><<<grid_for(p->M * p->C), THREADS, 0, s>>>(*p);
    }
    return cudaGetLastError();
}

} // namespace

extern "C" int crk_batch_norm_forward(const crk_bn *p, cudaStream_t stream) {
    if (p->C == 0) return 0;
    if (p->f64) return forward<double, double>(p, stream);
    if (p->half == CRK_BN_F16) return forward<f16_t, float>(p, stream);
    if (p->half == CRK_BN_BF16) return forward<bf16_t, float>(p, stream);
    return forward<float, float>(p, stream);
}

extern "C" int crk_batch_norm_backward(const crk_bn_backward *p, cudaStream_t stream) {
    if (p->C == 0) return 0;
    if (p->f64) return backward<double, double>(p, stream);
    if (p->half == CRK_BN_F16) return backward<f16_t, float>(p, stream);
    if (p->half == CRK_BN_BF16) return backward<bf16_t, float>(p, stream);
    return backward<float, float>(p, stream);
}
