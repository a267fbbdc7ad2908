// loss.cu — nll_loss and cross_entropy on the GPU, computing what ops/loss.c computes
// (its reference path, in f64): per position of the [N, C, inner] input, the loss from
// a class index (ignore_index skipped, label smoothing) or from class probabilities;
// cross entropy's log-sum-exp subtracts the max first (NaN in a row gives NaN). The
// positions' losses and non-ignored counts are summed per block and then by one block,
// each in a fixed order, so the sum and mean do not depend on timing. A class target out
// of range is recorded as the smallest such position for the host to report.
// A position's classes are walked by L lanes: a warp for [N, C] cross entropy (classes
// contiguous, read coalesced), one thread otherwise (neighbouring threads read
// neighbouring positions).
#include <math.h>
#include <stdint.h>

#include "loss.h"

namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxForwardBlocks = 4096; // partial sums in scratch, one per block
constexpr int64_t kMaxBlocks = 65535 * 16;

template <int L> __device__ __forceinline__ double lane_sum(double v) {
    if (L > 1)
        for (int o = L / 2; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// The max of the lanes' values, NaN when any is NaN (ops/loss.c's ce_lse).
template <int L> __device__ __forceinline__ double lane_max(double v) {
    if (L > 1)
        for (int o = L / 2; o; o >>= 1) {
            double other = __shfl_xor_sync(0xffffffffu, v, o);
            if (other > v || other != other) v = other;
        }
    return v;
}

// Sums a and b over the block; the totals are valid in thread 0. Called once per kernel.
__device__ void block_sum2(double &a, double &b) {
    __shared__ double sa[kThreads / 32], sb[kThreads / 32];
    for (int o = 16; o; o >>= 1) {
        a += __shfl_xor_sync(0xffffffffu, a, o);
        b += __shfl_xor_sync(0xffffffffu, b, o);
    }
    const int warp = threadIdx.x / 32;
    if (threadIdx.x % 32 == 0) {
        sa[warp] = a;
        sb[warp] = b;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        a = b = 0;
        for (int w = 0; w < (int)blockDim.x / 32; w++) {
            a += sa[w];
            b += sb[w];
        }
    }
}

// Element offset of class 0 of position q.
__device__ __forceinline__ int64_t position_base(const crk_loss &p, int64_t q) {
    return (q / p.inner) * p.C * p.inner + q % p.inner;
}

// log-sum-exp over the classes of the position at `base` relative to their max, log sum
// exp(x_k - mx), with mx in *mxo and (xsum non-NULL) sum (x_k - mx) in *xsum; every lane
// gets all three (ops/loss.c's ce_lse: huge logits keep their exact differences).
template <typename T, int L>
__device__ double log_sum_exp(const crk_loss &p, int64_t base, int lane, double *mxo, double *xsum) {
    const T *x = (const T *)p.x;
    const int64_t is = p.inner;
    double mx = -INFINITY;
    for (int64_t k = lane; k < p.C; k += L) {
        double v = (double)x[base + k * is];
        if (v > mx || v != v) mx = v;
    }
    mx = lane_max<L>(mx);
    double sum = 0, xs = 0;
    for (int64_t k = lane; k < p.C; k += L) {
        double v = (double)x[base + k * is];
        sum += exp(v - mx);
        xs += v - mx;
    }
    sum = lane_sum<L>(sum);
    if (xsum) *xsum = lane_sum<L>(xs);
    *mxo = mx;
    return log(sum);
}

// The class target of position q, or false when it is ignored or out of range (the
// latter recorded in *bad).
__device__ __forceinline__ bool class_of(const crk_loss &p, int64_t q, int lane, int64_t *y,
                                         bool *ignored, unsigned long long *bad) {
    *y = p.t[q];
    *ignored = *y == p.ignore;
    if (*ignored) return false;
    if (*y < 0 || *y >= p.C) {
        if (lane == 0) atomicMin(bad, (unsigned long long)q);
        return false;
    }
    return true;
}

template <typename T>
__device__ double nll_position(const crk_loss &p, int64_t q, bool *ignored, unsigned long long *bad) {
    int64_t y;
    if (!class_of(p, q, 0, &y, ignored, bad)) return 0;
    return -(double)((const T *)p.x)[position_base(p, q) + y * p.inner];
}

template <typename T, int L>
__device__ double ce_position(const crk_loss &p, int64_t q, int lane, bool *ignored,
                              unsigned long long *bad) {
    const int64_t base = position_base(p, q), is = p.inner;
    const T *x = (const T *)p.x;
    const double eps = p.eps, C = (double)p.C;
    if (p.t) {
        int64_t y;
        if (!class_of(p, q, lane, &y, ignored, bad)) return 0;
        double mx, xsum = 0;
        double lse = log_sum_exp<T, L>(p, base, lane, &mx, eps == 0 ? nullptr : &xsum);
        double nll = lse - ((double)x[base + y * is] - mx);
        return eps == 0 ? nll : (1 - eps) * nll + eps * (lse - xsum / C);
    }
    *ignored = false;
    double mx, xsum;
    double lse = log_sum_exp<T, L>(p, base, lane, &mx, &xsum);
    const T *pr = (const T *)p.p;
    double acc = 0;
    for (int64_t k = lane; k < p.C; k += L)
        acc += (double)pr[base + k * is] * (lse - ((double)x[base + k * is] - mx));
    acc = lane_sum<L>(acc);
    return (1 - eps) * acc + eps * (lse - xsum / C);
}

template <typename T, int L, bool CE>
__global__ void __launch_bounds__(kThreads)
forward_kernel(crk_loss p, double *part_loss, double *part_count, unsigned long long *bad) {
    const int lane = L > 1 ? (int)(threadIdx.x % L) : 0;
    const int64_t npos = p.N * p.inner;
    const int64_t units = (int64_t)gridDim.x * blockDim.x / L;
    double loss = 0, count = 0;
    for (int64_t q = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / L; q < npos; q += units) {
        bool ignored;
        double v;
        if constexpr (CE) v = ce_position<T, L>(p, q, lane, &ignored, bad);
        else v = nll_position<T>(p, q, &ignored, bad);
        if (lane == 0) {
            if (p.reduction == 0) ((T *)p.out)[q] = (T)v;
            loss += v;
            count += !ignored;
        }
    }
    block_sum2(loss, count);
    if (threadIdx.x == 0) {
        part_loss[blockIdx.x] = loss;
        part_count[blockIdx.x] = count;
    }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
finish_kernel(const double *part_loss, const double *part_count, int64_t nparts, int reduction,
              T *out, crk_loss_result *res) {
    double loss = 0, count = 0;
    for (int64_t i = threadIdx.x; i < nparts; i += blockDim.x) {
        loss += part_loss[i];
        count += part_count[i];
    }
    block_sum2(loss, count);
    if (threadIdx.x == 0) {
        if (reduction == 1) *out = (T)(loss / count);
        else if (reduction == 2) *out = (T)loss;
        res->count = count;
    }
}

// The incoming grad of position q: g[q] (none), g (sum) or g / count (mean).
__device__ __forceinline__ double grad_of(const crk_loss &p, int64_t q) {
    double g = p.g ? p.g[p.reduction == 0 ? q : 0] : p.g_value;
    if (p.reduction == 1) g /= p.count;
    return g;
}

// dx was zeroed; -g lands on each non-ignored position's target class.
template <typename T>
__global__ void __launch_bounds__(kThreads) nll_backward_kernel(crk_loss p) {
    const int64_t npos = p.N * p.inner, step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t q = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; q < npos; q += step) {
        int64_t y = p.t[q];
        if (y == p.ignore || y < 0 || y >= p.C) continue;
        ((T *)p.dx)[position_base(p, q) + y * p.inner] = (T)(-grad_of(p, q));
    }
}

// dx_c = g * (softmax_c * sum(q) - q_c), q = (1 - eps) * target + eps / C; zero at
// ignored positions. dp_c = -g * (1 - eps) * logp_c.
template <typename T, int L>
__global__ void __launch_bounds__(kThreads) ce_backward_kernel(crk_loss p) {
    const int lane = L > 1 ? (int)(threadIdx.x % L) : 0;
    const int64_t npos = p.N * p.inner, is = p.inner;
    const int64_t units = (int64_t)gridDim.x * blockDim.x / L;
    const T *x = (const T *)p.x, *pr = (const T *)p.p;
    T *dx = (T *)p.dx, *dp = (T *)p.dp;
    const double eps = p.eps, off = eps / (double)p.C;
    for (int64_t q = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / L; q < npos; q += units) {
        const int64_t base = position_base(p, q);
        const int64_t y = p.t ? p.t[q] : -1;
        if (p.t && y == p.ignore) {
            if (dx)
                for (int64_t k = lane; k < p.C; k += L) dx[base + k * is] = (T)0;
            continue;
        }
        const double g = grad_of(p, q);
        double mx;
        const double lse = log_sum_exp<T, L>(p, base, lane, &mx, nullptr);
        double psum = 1;
        if (!p.t) {
            psum = 0;
            for (int64_t k = lane; k < p.C; k += L) psum += (double)pr[base + k * is];
            psum = (1 - eps) * lane_sum<L>(psum) + eps;
        }
        for (int64_t k = lane; k < p.C; k += L) {
            const int64_t i = base + k * is;
            const double v = (double)x[i] - mx - lse; // log softmax
            if (dx) {
                double qk = off;
                if (!p.t) qk += (1 - eps) * (double)pr[i];
                else if (k == y) qk += 1 - eps;
                dx[i] = (T)(g * (exp(v) * psum - qk));
            }
            if (dp) dp[i] = (T)(-g * (1 - eps) * v);
        }
    }
}

int lanes_of(const crk_loss *p) { return p->cross_entropy && p->inner == 1 ? 32 : 1; }

int64_t blocks_for(int64_t threads_needed, int64_t cap) {
    int64_t b = (threads_needed + kThreads - 1) / kThreads;
    return b < 1 ? 1 : b > cap ? cap : b;
}

// Blocks of the forward's first kernel (0 when there is no position).
int64_t forward_blocks(const crk_loss *p) {
    const int64_t npos = p->N * p->inner;
    return npos == 0 ? 0 : blocks_for(npos * lanes_of(p), kMaxForwardBlocks);
}

template <typename T>
cudaError_t forward(const crk_loss *p, void *scratch, cudaStream_t s) {
    crk_loss_result *res = (crk_loss_result *)scratch;
    const int64_t blocks = forward_blocks(p);
    double *part_loss = (double *)(res + 1), *part_count = part_loss + blocks;
    unsigned long long *bad = &res->bad_position;
    cudaError_t err = cudaMemsetAsync(bad, 0xff, sizeof *bad, s);
    if (err) return err;
    if (blocks > 0) {
        if (!p->cross_entropy)
            forward_kernel<T, 1, false><<<(unsigned)blocks, kThreads, 0, s>>>(*p, part_loss, part_count, bad);
        else if (lanes_of(p) == 32)
            forward_kernel<T, 32, true><<<(unsigned)blocks, kThreads, 0, s>>>(*p, part_loss, part_count, bad);
        else
            forward_kernel<T, 1, true><<<(unsigned)blocks, kThreads, 0, s>>>(*p, part_loss, part_count, bad);
        if ((err = cudaGetLastError())) return err;
    }
    finish_kernel<T><<<1, kThreads, 0, s>>>(part_loss, part_count, blocks, p->reduction, (T *)p->out, res);
    return cudaGetLastError();
}

template <typename T>
cudaError_t backward(const crk_loss *p, cudaStream_t s) {
    const int64_t npos = p->N * p->inner;
    if (!p->cross_entropy) {
        cudaError_t err = cudaMemsetAsync(p->dx, 0, (size_t)(npos * p->C) * sizeof(T), s);
        if (err || npos == 0) return err;
        nll_backward_kernel<T><<<(unsigned)blocks_for(npos, kMaxBlocks), kThreads, 0, s>>>(*p);
    } else {
        if (npos == 0 || (!p->dx && !p->dp)) return cudaSuccess;
        if (lanes_of(p) == 32)
            ce_backward_kernel<T, 32><<<(unsigned)blocks_for(npos * 32, kMaxBlocks), kThreads, 0, s>>>(*p);
        else
            ce_backward_kernel<T, 1><<<(unsigned)blocks_for(npos, kMaxBlocks), kThreads, 0, s>>>(*p);
    }
    return cudaGetLastError();
}

} // namespace

extern "C" size_t crk_loss_scratch_bytes(const crk_loss *p) {
    return sizeof(crk_loss_result) + 2 * sizeof(double) * (size_t)forward_blocks(p);
}

extern "C" int crk_loss_forward(const crk_loss *p, void *scratch, cudaStream_t stream) {
    return p->f64 ? forward<double>(p, scratch, stream) : forward<float>(p, scratch, stream);
}

extern "C" int crk_loss_backward(const crk_loss *p, cudaStream_t stream) {
    return p->f64 ? backward<double>(p, stream) : backward<float>(p, stream);
}
