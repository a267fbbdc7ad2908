// batch_norm.cu — batch norm forward and backward, channels-last or NCHW, with the CPU
// reference's semantics (ops/batch_norm.c): batch statistics summed in f64, biased
// variance for normalising and unbiased for the running estimate (momentum as in
// PyTorch), saved mean and 1/sqrt(var + eps) for backward, an optional fused relu.
// x, y, g and gx are f32, f64, f16 or bf16 (TX); weight, bias, statistics and their grads
// f32 (f64 with f64 x) (TP), which is also the type of the per-element arithmetic: halves
// are read and written as halves, as cuDNN's mixed-precision batch norm does.
// Per-channel sums: each block folds a tile of rows for 32 channels into f64 partials and
// adds them atomically into a [2, C] f64 scratch.
// Rows of channels (channels-last, or [N, C] with no spatial dims) of f32 or a half with
// C a multiple of the vector width and 16-byte aligned tensors take the row kernels: 16
// bytes per load (8 halves or 4 floats), each thread on the same channels throughout, so
// their statistics and params stay in registers; the other cases (NCHW, f64, odd widths)
// take the element kernels. The first, per element, ran at about a quarter of the H200's
// memory bandwidth on a ResNet-50's bf16 activations. The row kernels' input-grad sums
// are f32 per thread and f64 from there on; the forward's statistics f64 throughout.
// A row forward is three launches (zeroing, sums, apply: the statistics are derived in
// the apply kernel) and so is a row backward (zeroing, sums, input grad with the weight
// and bias grads).
#include <stdint.h>

#include <algorithm>
#include <initializer_list>

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

// Channel c's mean and 1/sqrt(var + eps) (batch or running statistics), as the params'
// dtype; when `owner`, also written to the saved statistics and folded into the running
// ones (exactly one thread per channel is the owner).
template <typename TP> __device__ __forceinline__ void channel_stats(const crk_bn &p, int64_t c, bool owner,
                                                                   TP *mean_out, TP *inv_out) {
    double mean, var;
    if (p.use_batch) {
        mean = p.acc[c] / (double)p.M;
        var = p.acc[p.C + c] / (double)p.M - mean * mean;
        if (var < 0) var = 0;
        if (owner && p.update_running) {
            TP *rm = (TP *)p.running_mean, *rv = (TP *)p.running_var;
            double unbiased = p.M > 1 ? var * (double)p.M / (double)(p.M - 1) : var;
            rm[c] = (TP)((1 - p.momentum) * (double)rm[c] + p.momentum * mean);
            rv[c] = (TP)((1 - p.momentum) * (double)rv[c] + p.momentum * unbiased);
        }
    } else {
        mean = (double)((const TP *)p.running_mean)[c];
        var = (double)((const TP *)p.running_var)[c];
    }
    *mean_out = (TP)mean;
    *inv_out = (TP)(1.0 / sqrt(var + p.eps));
    if (owner) {
        ((TP *)p.mean)[c] = *mean_out;
        ((TP *)p.invstd)[c] = *inv_out;
    }
}

template <typename TP> __global__ void finalize_kernel(crk_bn p) {
    int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= p.C) return;
    TP mean, inv;
    channel_stats<TP>(p, c, true, &mean, &inv);
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

// ---- the row kernels: 16-byte vectors of V channels, a block of 256 threads as
// tile_cols vector columns x row_lanes rows over a tile of rows ----
constexpr int BLOCK = 256;
template <typename TX> struct vec_width { static constexpr int V = 8; }; // halves
template <> struct vec_width<float> { static constexpr int V = 4; };

template <typename TX> __device__ __forceinline__ void unpack(uint4 u, float *f) {
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
    if constexpr (sizeof(TX) == 4) {
#pragma unroll
        for (int k = 0; k < 4; k++) f[k] = __uint_as_float(w[k]);
    } else {
#pragma unroll
        for (int k = 0; k < 4; k++) {
            f[2 * k] = value(TX{(uint16_t)(w[k] & 0xffffu)});
            f[2 * k + 1] = value(TX{(uint16_t)(w[k] >> 16)});
        }
    }
}

template <typename TX> __device__ __forceinline__ uint4 pack(const float *f) {
    uint32_t w[4];
    if constexpr (sizeof(TX) == 4) {
#pragma unroll
        for (int k = 0; k < 4; k++) w[k] = __float_as_uint(f[k]);
    } else {
#pragma unroll
        for (int k = 0; k < 4; k++)
            w[k] = (uint32_t)stored<TX>(f[2 * k]).bits | ((uint32_t)stored<TX>(f[2 * k + 1]).bits << 16);
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
}

// Where a thread of a row kernel works: vector column `col` (channels col*V ..), rows
// m0 + lane_row, stepping row_lanes, below m1; active is false for the threads left over.
struct row_tile {
    int64_t col, m0, m1;
    int lane_row, row_lanes;
    bool active;
};

struct row_geometry {
    int64_t cols, rows_per_block;
    int tile_cols, row_lanes;
    dim3 grid;
};

__device__ __forceinline__ row_tile tile_of(const row_geometry &g, int64_t M) {
    row_tile t;
    int lane = threadIdx.x % g.tile_cols;
    t.lane_row = threadIdx.x / g.tile_cols;
    t.row_lanes = g.row_lanes;
    t.col = (int64_t)blockIdx.x * g.tile_cols + lane;
    t.m0 = (int64_t)blockIdx.y * g.rows_per_block;
    t.m1 = t.m0 + g.rows_per_block < M ? t.m0 + g.rows_per_block : M;
    t.active = t.lane_row < g.row_lanes && t.col < g.cols;
    return t;
}

// Adds the block's per-channel partials (a, b: V each per thread) into acc[c], acc[C + c].
// The partials go through shared memory as [k][row lane][vector column], so that the
// threads of a warp (consecutive columns) store and load consecutive doubles: the layout
// by channel that came first made every store a 16-way bank conflict.
template <int V, typename T>
__device__ __forceinline__ void block_sums_to(double *acc, int64_t C, const row_geometry &g, const row_tile &t,
                                              const T *a, const T *b) {
    __shared__ double s[2][BLOCK * V];
    const int plane = g.row_lanes * g.tile_cols, lane = threadIdx.x % g.tile_cols;
    if (t.lane_row < g.row_lanes) {
#pragma unroll
        for (int k = 0; k < V; k++) {
            s[0][k * plane + t.lane_row * g.tile_cols + lane] = (double)a[k];
            s[1][k * plane + t.lane_row * g.tile_cols + lane] = (double)b[k];
        }
    }
    __syncthreads();
    for (int j = threadIdx.x; j < g.tile_cols * V; j += BLOCK) {
        const int k = j / g.tile_cols, col = j % g.tile_cols;
        const int64_t c = ((int64_t)blockIdx.x * g.tile_cols + col) * V + k;
        if (c >= C) continue;
        double sa = 0, sb = 0;
        for (int r = 0; r < g.row_lanes; r++) {
            sa += s[0][k * plane + r * g.tile_cols + col];
            sb += s[1][k * plane + r * g.tile_cols + col];
        }
        atomicAdd(&acc[c], sa);
        atomicAdd(&acc[C + c], sb);
    }
}

template <typename TX> __global__ void stats_rows_kernel(const TX *x, int64_t M, int64_t C, row_geometry g, double *acc) {
    constexpr int V = vec_width<TX>::V;
    const row_tile t = tile_of(g, M);
    double a[V], b[V];
#pragma unroll
    for (int k = 0; k < V; k++) a[k] = b[k] = 0;
    if (t.active) {
        const uint4 *xv = reinterpret_cast<const uint4 *>(x) + t.col;
#pragma unroll 4
        for (int64_t m = t.m0 + t.lane_row; m < t.m1; m += t.row_lanes) {
            float f[V];
            unpack<TX>(xv[m * g.cols], f);
#pragma unroll
            for (int k = 0; k < V; k++) {
                a[k] += (double)f[k];
                b[k] += (double)f[k] * (double)f[k];
            }
        }
    }
    block_sums_to<V>(acc, C, g, t, a, b);
}

// The statistics of its channels come from the sums (finalize_kernel's work, done by
// every thread for its own V channels; the first row lane of the first row of blocks
// writes them out and moves the running statistics).
template <typename TX> __global__ void apply_rows_kernel(crk_bn p, row_geometry g) {
    constexpr int V = vec_width<TX>::V;
    const row_tile t = tile_of(g, p.M);
    if (!t.active) return;
    const int64_t c0 = t.col * V;
    const bool owner = blockIdx.y == 0 && t.lane_row == 0;
    float mean[V], scale[V], shift[V];
#pragma unroll
    for (int k = 0; k < V; k++) {
        float inv;
        channel_stats<float>(p, c0 + k, owner, &mean[k], &inv);
        scale[k] = param<float>(p.w, c0 + k, 1.f) * inv;
        shift[k] = param<float>(p.b, c0 + k, 0.f);
    }
    const uint4 *xv = reinterpret_cast<const uint4 *>(p.x) + t.col;
    uint4 *yv = reinterpret_cast<uint4 *>(p.y) + t.col;
#pragma unroll 4
    for (int64_t m = t.m0 + t.lane_row; m < t.m1; m += t.row_lanes) {
        float f[V];
        unpack<TX>(xv[m * g.cols], f);
#pragma unroll
        for (int k = 0; k < V; k++) {
            float v = (f[k] - mean[k]) * scale[k] + shift[k];
            f[k] = p.relu && v < 0 ? 0.f : v;
        }
        yv[m * g.cols] = pack<TX>(f);
    }
}

// The incoming grad of one vector, masked by the fused relu's output when there is one.
template <typename TX, int V>
__device__ __forceinline__ void grad_of(const crk_bn_backward &p, int64_t at, float *gf) {
    unpack<TX>(reinterpret_cast<const uint4 *>(p.g)[at], gf);
    if (p.y) {
        float yf[V];
        unpack<TX>(reinterpret_cast<const uint4 *>(p.y)[at], yf);
#pragma unroll
        for (int k = 0; k < V; k++)
            if (yf[k] <= 0) gf[k] = 0;
    }
}

// Each thread's partial sums are f32 over its rows (at most a few dozen in a ResNet:
// rows_for's tiles), as PyTorch's are over all of them; the block's and the grid's in f64.
// f64 partials took 98 registers and a quarter of the SM's threads.
template <typename TX>
__global__ void __launch_bounds__(BLOCK, 4) backward_sums_rows_kernel(crk_bn_backward p, row_geometry g) {
    constexpr int V = vec_width<TX>::V;
    const row_tile t = tile_of(g, p.M);
    float a[V], b[V];
#pragma unroll
    for (int k = 0; k < V; k++) a[k] = b[k] = 0;
    if (t.active) {
        const int64_t c0 = t.col * V;
        float mean[V], inv[V];
#pragma unroll
        for (int k = 0; k < V; k++) {
            mean[k] = ((const float *)p.mean)[c0 + k];
            inv[k] = ((const float *)p.invstd)[c0 + k];
        }
#pragma unroll 2
        for (int64_t m = t.m0 + t.lane_row; m < t.m1; m += t.row_lanes) {
            const int64_t at = m * g.cols + t.col;
            float gf[V], xf[V];
            grad_of<TX, V>(p, at, gf);
            unpack<TX>(reinterpret_cast<const uint4 *>(p.x)[at], xf);
#pragma unroll
            for (int k = 0; k < V; k++) {
                a[k] += gf[k];
                b[k] += gf[k] * ((xf[k] - mean[k]) * inv[k]);
            }
        }
    }
    block_sums_to<V>(p.acc, p.C, g, t, a, b);
}

template <typename TX>
__global__ void __launch_bounds__(BLOCK, 4) backward_input_rows_kernel(crk_bn_backward p, row_geometry g) {
    constexpr int V = vec_width<TX>::V;
    const row_tile t = tile_of(g, p.M);
    if (!t.active) return;
    const int64_t c0 = t.col * V;
    const float inv_m = (float)(1.0 / (double)p.M);
    if (blockIdx.y == 0 && t.lane_row == 0) { // backward_params_kernel's work, once per channel
#pragma unroll
        for (int k = 0; k < V; k++) {
            if (p.gb) ((float *)p.gb)[c0 + k] = (float)p.acc[c0 + k];
            if (p.gw) ((float *)p.gw)[c0 + k] = (float)p.acc[p.C + c0 + k];
        }
    }
    // gx = scale (g - sum_g / M - xhat sum_gxhat / M) = scale g - shift - (x - mean) slope
    float mean[V], scale[V], shift[V], slope[V];
#pragma unroll
    for (int k = 0; k < V; k++) {
        const float inv = ((const float *)p.invstd)[c0 + k];
        mean[k] = ((const float *)p.mean)[c0 + k];
        scale[k] = param<float>(p.w, c0 + k, 1.f) * inv;
        shift[k] = p.use_batch ? scale[k] * ((float)p.acc[c0 + k] * inv_m) : 0.f;
        slope[k] = p.use_batch ? scale[k] * inv * ((float)p.acc[p.C + c0 + k] * inv_m) : 0.f;
    }
#pragma unroll 2
    for (int64_t m = t.m0 + t.lane_row; m < t.m1; m += t.row_lanes) {
        const int64_t at = m * g.cols + t.col;
        float gf[V], xf[V];
        grad_of<TX, V>(p, at, gf);
        if (p.use_batch) {
            unpack<TX>(reinterpret_cast<const uint4 *>(p.x)[at], xf);
#pragma unroll
            for (int k = 0; k < V; k++) gf[k] = scale[k] * gf[k] - shift[k] - (xf[k] - mean[k]) * slope[k];
        } else {
#pragma unroll
            for (int k = 0; k < V; k++) gf[k] = scale[k] * gf[k];
        }
        reinterpret_cast<uint4 *>(p.gx)[at] = pack<TX>(gf);
    }
}

// The sums kernels' tiles: at least SUMS_MIN_ROWS rows per row lane and
// SUMS_MIN_BLOCK_ROWS rows per block. Each block ends in a shared-memory reduction and two
// atomic adds per channel: with 2048 blocks of 4 rows, a 2048-channel layer made 6.4M
// atomic adds for 25 MB of activations.
constexpr int64_t SUMS_MIN_ROWS = 16, SUMS_MIN_BLOCK_ROWS = 32;

// The row kernels' launch shape: a block spans min(cols, 256) vector columns and as many
// rows as its threads allow; about 2048 blocks in all, each over a tile of rows (for the
// sums kernels, at least their floor).
row_geometry rows_for(int64_t M, int64_t C, int V, bool sums) {
    row_geometry g;
    g.cols = C / V;
    g.tile_cols = (int)(g.cols < BLOCK ? g.cols : BLOCK);
    g.row_lanes = BLOCK / g.tile_cols;
    int64_t col_tiles = (g.cols + g.tile_cols - 1) / g.tile_cols;
    int64_t row_blocks = 2048 / col_tiles;
    if (row_blocks < 1) row_blocks = 1;
    if (row_blocks > 65535) row_blocks = 65535;
    if (row_blocks > M) row_blocks = M;
    g.rows_per_block = (M + row_blocks - 1) / row_blocks;
    const int64_t floor_rows = sums ? std::max<int64_t>(SUMS_MIN_ROWS * g.row_lanes, SUMS_MIN_BLOCK_ROWS) : 1;
    if (g.rows_per_block < floor_rows) g.rows_per_block = floor_rows;
    row_blocks = (M + g.rows_per_block - 1) / g.rows_per_block;
    g.grid = dim3((unsigned)col_tiles, (unsigned)(row_blocks < 1 ? 1 : row_blocks));
    return g;
}

bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

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

// Whether x's rows (and every other vector operand) suit the row kernels.
template <typename TX> bool rows_ok(int64_t M, int64_t C, int64_t S, int channels_last,
                                    std::initializer_list<const void *> ptrs) {
    if (sizeof(TX) == 8 || M < 1 || (!channels_last && S != 1) || C % vec_width<TX>::V) return false;
    for (const void *q : ptrs)
        if (q && !aligned16(q)) return false;
    return true;
}

template <typename TX> cudaError_t forward_rows(const crk_bn *p, cudaStream_t s) {
    constexpr int V = vec_width<TX>::V;
    if (p->use_batch) {
        cudaError_t e = cudaMemsetAsync(p->acc, 0, sizeof(double) * 2 * p->C, s);
        if (e) return e;
        row_geometry gs = rows_for(p->M, p->C, V, true);
        stats_rows_kernel<TX><<<gs.grid, BLOCK, 0, s>>>((const TX *)p->x, p->M, p->C, gs, p->acc);
    }
    row_geometry g = rows_for(p->M, p->C, V, false);
    apply_rows_kernel<TX><<<g.grid, BLOCK, 0, s>>>(*p, g);
    return cudaGetLastError();
}

// The sums (when weight, bias or a batch-statistics input grad need them), then the input
// grad, which also writes the weight and bias grads; without an input grad, those alone.
template <typename TX> cudaError_t backward_rows(const crk_bn_backward *p, cudaStream_t s) {
    constexpr int V = vec_width<TX>::V;
    cudaError_t e = cudaMemsetAsync(p->acc, 0, sizeof(double) * 2 * p->C, s);
    if (e) return e;
    if (p->gw || p->gb || (p->gx && p->use_batch)) {
        row_geometry gs = rows_for(p->M, p->C, V, true);
        backward_sums_rows_kernel<TX><<<gs.grid, BLOCK, 0, s>>>(*p, gs);
    }
    if (p->gx) {
        row_geometry g = rows_for(p->M, p->C, V, false);
        backward_input_rows_kernel<TX><<<g.grid, BLOCK, 0, s>>>(*p, g);
    } else if (p->gw || p->gb) {
        backward_params_kernel<float><<<grid_for(p->C), THREADS, 0, s>>>(*p);
    }
    return cudaGetLastError();
}

template <typename TX, typename TP> cudaError_t forward(const crk_bn *p, cudaStream_t s) {
    if constexpr (sizeof(TX) < 8)
        if (rows_ok<TX>(p->M, p->C, p->S, p->channels_last, {p->x, p->y})) return forward_rows<TX>(p, s);
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
    if constexpr (sizeof(TX) < 8)
        if (rows_ok<TX>(p->M, p->C, p->S, p->channels_last, {p->g, p->x, p->y, p->gx}))
            return backward_rows<TX>(p, s);
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
