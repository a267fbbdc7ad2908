// layer_norm.cu — layer norm forward and backward on the GPU, computing what
// ops/layer_norm.c computes: per row a two-pass mean and biased variance in f64, the
// normalised row with weight and bias, and in the backward the row's two f64 means for
// gx. A row is handled by a warp when it is short (D <= 1024) and by a block of 512
// threads otherwise. gw and gb are column sums over the rows: each (column, chunk of
// rows) pair is summed by one thread into scratch, then the chunks are added in order.
#include <math.h>
#include <stdint.h>

#include "layer_norm.h"

namespace {

constexpr int kWarpRowThreads = 256; // block size when a warp takes a row
constexpr int kBlockRow = 512;       // threads on a row when a block takes it
constexpr int64_t kMaxBlocks = 65535 * 16;
constexpr int kColumnThreads = 256;
constexpr int64_t kMaxChunks = 1024;
constexpr int64_t kColumnThreadsWanted = 1 << 18; // enough to fill a GPU

// Sum of v over the G threads of a row (a warp, or the whole block when G > 32); every
// thread gets the total, added in a fixed order.
template <int G> __device__ double row_sum(double v, double *shared) {
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (G == 32) return v;
    const int warp = threadIdx.x / 32;
    if (threadIdx.x % 32 == 0) shared[warp] = v;
    __syncthreads();
    double total = 0;
    for (int w = 0; w < G / 32; w++) total += shared[w];
    __syncthreads(); // the next call may overwrite shared
    return total;
}

// The row this thread starts on, the step between its rows and its index within a row.
template <int G> struct row_walk {
    int64_t first, step;
    int tid;
    __device__ row_walk() {
        if (G == 32) {
            first = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
            step = (int64_t)gridDim.x * blockDim.x / 32;
            tid = threadIdx.x % 32;
        } else {
            first = blockIdx.x;
            step = gridDim.x;
            tid = threadIdx.x;
        }
    }
};

template <typename T, int G>
__global__ void __launch_bounds__(G == 32 ? kWarpRowThreads : kBlockRow)
forward_kernel(crk_layer_norm p) {
    __shared__ double shared[G > 32 ? G / 32 : 1];
    const row_walk<G> walk;
    const int64_t D = p.D;
    const T *w = (const T *)p.w, *b = (const T *)p.b;
    for (int64_t r = walk.first; r < p.rows; r += walk.step) {
        const T *xr = (const T *)p.x + r * D;
        T *yr = (T *)p.y + r * D;
        double s = 0, sq = 0;
        for (int64_t j = walk.tid; j < D; j += G) s += xr[j];
        const double m = row_sum<G>(s, shared) / (double)D;
        for (int64_t j = walk.tid; j < D; j += G) {
            double d = xr[j] - m;
            sq += d * d;
        }
        const double rstd = 1.0 / sqrt(row_sum<G>(sq, shared) / (double)D + p.eps);
        for (int64_t j = walk.tid; j < D; j += G) {
            double v = (xr[j] - m) * rstd;
            if (w) v *= w[j];
            if (b) v += b[j];
            yr[j] = (T)v;
        }
        if (walk.tid == 0) {
            ((T *)p.mean)[r] = (T)m;
            ((T *)p.rstd)[r] = (T)rstd;
        }
    }
}

template <typename T, int G>
__global__ void __launch_bounds__(G == 32 ? kWarpRowThreads : kBlockRow)
backward_rows_kernel(crk_layer_norm_grad p) {
    __shared__ double shared[G > 32 ? G / 32 : 1];
    const row_walk<G> walk;
    const int64_t D = p.D;
    const T *w = (const T *)p.w;
    for (int64_t r = walk.first; r < p.rows; r += walk.step) {
        const T *gr = (const T *)p.g + r * D, *xr = (const T *)p.x + r * D;
        T *gxr = (T *)p.gx + r * D;
        const double m = ((const T *)p.mean)[r], rs = ((const T *)p.rstd)[r];
        double a = 0, b = 0;
        for (int64_t j = walk.tid; j < D; j += G) {
            double gy = w ? (double)gr[j] * w[j] : (double)gr[j];
            a += gy;
            b += gy * (xr[j] - m) * rs;
        }
        a = row_sum<G>(a, shared) / (double)D;
        b = row_sum<G>(b, shared) / (double)D;
        for (int64_t j = walk.tid; j < D; j += G) {
            double gy = w ? (double)gr[j] * w[j] : (double)gr[j];
            gxr[j] = (T)(rs * (gy - a - (xr[j] - m) * rs * b));
        }
    }
}

// Thread (column j, chunk k) sums g * xhat and g over the chunk's rows.
template <typename T>
__global__ void __launch_bounds__(kColumnThreads)
column_chunks_kernel(crk_layer_norm_grad p, double *part_w, double *part_b, int64_t rows_per_chunk) {
    const int64_t D = p.D, k = blockIdx.y, step = (int64_t)gridDim.x * blockDim.x;
    const int64_t lo = k * rows_per_chunk, hi = lo + rows_per_chunk < p.rows ? lo + rows_per_chunk : p.rows;
    const T *g = (const T *)p.g, *x = (const T *)p.x;
    const T *mean = (const T *)p.mean, *rstd = (const T *)p.rstd;
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < D; j += step) {
        double aw = 0, ab = 0;
        for (int64_t r = lo; r < hi; r++) {
            const int64_t i = r * D + j;
            if (part_w) aw += (double)g[i] * (x[i] - (double)mean[r]) * (double)rstd[r];
            ab += g[i];
        }
        if (part_w) part_w[k * D + j] = aw;
        if (part_b) part_b[k * D + j] = ab;
    }
}

// gw[j], gb[j]: the chunks' sums added in chunk order.
template <typename T>
__global__ void __launch_bounds__(kColumnThreads)
column_total_kernel(crk_layer_norm_grad p, const double *part_w, const double *part_b, int64_t chunks) {
    const int64_t D = p.D, step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < D; j += step) {
        if (part_w) {
            double s = 0;
            for (int64_t k = 0; k < chunks; k++) s += part_w[k * D + j];
            ((T *)p.gw)[j] = (T)s;
        }
        if (part_b) {
            double s = 0;
            for (int64_t k = 0; k < chunks; k++) s += part_b[k * D + j];
            ((T *)p.gb)[j] = (T)s;
        }
    }
}

unsigned blocks_for(int64_t threads_needed, int threads_per_block) {
    int64_t b = (threads_needed + threads_per_block - 1) / threads_per_block;
    return (unsigned)(b < 1 ? 1 : b > kMaxBlocks ? kMaxBlocks : b);
}

// The row kernel's grid: a warp or a block per row.
template <typename Kernel, typename Params>
cudaError_t launch_rows(Kernel warp_kernel, Kernel block_kernel, const Params &p, cudaStream_t s) {
    if (p.D <= 1024)
        warp_kernel<<<blocks_for(p.rows * 32, kWarpRowThreads), kWarpRowThreads, 0, s>>>(p);
    else
        block_kernel<<<blocks_for(p.rows * kBlockRow, kBlockRow), kBlockRow, 0, s>>>(p);
    return cudaGetLastError();
}

// Chunks of rows for the column sums: enough (column, chunk) threads to fill the GPU, at
// most one chunk per row and kMaxChunks in all (gridDim.y).
int64_t column_chunks(const crk_layer_norm_grad *p) {
    int64_t want = (kColumnThreadsWanted + p->D - 1) / (p->D > 0 ? p->D : 1);
    int64_t cap = p->rows < kMaxChunks ? p->rows : kMaxChunks;
    if (want > cap) want = cap;
    return want < 1 ? 1 : want;
}

template <typename T>
cudaError_t forward(const crk_layer_norm *p, cudaStream_t s) {
    return launch_rows(forward_kernel<T, 32>, forward_kernel<T, kBlockRow>, *p, s);
}

template <typename T>
cudaError_t backward(const crk_layer_norm_grad *p, double *scratch, cudaStream_t s) {
    if (p->gx && p->rows > 0) {
        cudaError_t err = launch_rows(backward_rows_kernel<T, 32>, backward_rows_kernel<T, kBlockRow>, *p, s);
        if (err) return err;
    }
    if (!p->gw && !p->gb) return cudaSuccess;
    const int64_t chunks = column_chunks(p);
    const int64_t rows_per_chunk = (p->rows + chunks - 1) / chunks;
    double *part_w = p->gw ? scratch : nullptr;
    double *part_b = p->gb ? scratch + (p->gw ? chunks * p->D : 0) : nullptr;
    const dim3 grid(blocks_for(p->D, kColumnThreads), (unsigned)chunks);
    column_chunks_kernel<T><<<grid, kColumnThreads, 0, s>>>(*p, part_w, part_b, rows_per_chunk);
    cudaError_t err = cudaGetLastError();
    if (err) return err;
    column_total_kernel<T><<<blocks_for(p->D, kColumnThreads), kColumnThreads, 0, s>>>(*p, part_w, part_b, chunks);
    return cudaGetLastError();
}

} // namespace

extern "C" int crk_layer_norm_forward(const crk_layer_norm *p, cudaStream_t stream) {
    if (p->rows == 0 || p->D == 0) return 0;
    return p->f64 ? forward<double>(p, stream) : forward<float>(p, stream);
}

extern "C" size_t crk_layer_norm_backward_scratch_bytes(const crk_layer_norm_grad *p) {
    const int64_t sums = (p->gw != NULL) + (p->gb != NULL);
    if (!sums || p->D == 0) return 0;
    return sizeof(double) * (size_t)(sums * column_chunks(p) * p->D);
}

extern "C" int crk_layer_norm_backward(const crk_layer_norm_grad *p, void *scratch, cudaStream_t stream) {
    if (p->D == 0) return 0;
    return p->f64 ? backward<double>(p, (double *)scratch, stream)
                  : backward<float>(p, (double *)scratch, stream);
}
