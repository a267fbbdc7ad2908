// reduce.cu — sums over a reduction plan (ops/reduce_impl.h) on the GPU, accumulated in
// f64 like the CPU reference. Few long reductions (a loss, a norm, the sum over a batch of a
// small tensor) get one block per output with a tree in shared memory; many short ones (a
// bias gradient, sums over channels) get one thread per output, so that neighbouring
// threads read neighbouring kept elements.
#include <stdint.h>

#include "common.cuh"
#include "kernels.h"

namespace {

// a sum into its output dtype: integer sums are i64
__device__ __forceinline__ void store_sum(char *p, int dt, double v) {
    switch (dt) {
    case F32: *(float *)p = (float)v; break;
    case F64: *(double *)p = v; break;
    case F16: *(uint16_t *)p = cr_f32_to_f16((float)v); break;
    case BF16: *(uint16_t *)p = cr_f32_to_bf16((float)v); break;
    default: *(int64_t *)p = (int64_t)v; break;
    }
}

__device__ __forceinline__ int64_t split(int n, const int64_t *shape, const int64_t *stride,
                                         int64_t i) {
    int64_t off = 0;
    for (int d = n - 1; d >= 0; d--) {
        off += (i % shape[d]) * stride[d];
        i /= shape[d];
    }
    return off;
}

__global__ void sum_per_thread(const crk_reduce r, double scale, int es_in, int es_out) {
    int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= r.K) return;
    const char *base = r.in + split(r.nk, r.kshape, r.kstride, k) * es_in;
    double acc = 0;
    for (int64_t j = 0; j < r.R; j++)
        acc += load<double>(base + split(r.nr, r.rshape, r.rstride, j) * es_in, r.in_dtype);
    store_sum(r.out + k * es_out, r.out_dtype, acc * scale);
}

constexpr int BLOCK = 256;

__global__ void sum_per_block(const crk_reduce r, double scale, int es_in, int es_out) {
    __shared__ double part[BLOCK];
    for (int64_t k = blockIdx.x; k < r.K; k += gridDim.x) {
        const char *base = r.in + split(r.nk, r.kshape, r.kstride, k) * es_in;
        double acc = 0;
        for (int64_t j = threadIdx.x; j < r.R; j += BLOCK)
            acc += load<double>(base + split(r.nr, r.rshape, r.rstride, j) * es_in, r.in_dtype);
        part[threadIdx.x] = acc;
        __syncthreads();
        for (int w = BLOCK / 2; w > 0; w >>= 1) {
            if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
            __syncthreads();
        }
        if (threadIdx.x == 0) store_sum(r.out + k * es_out, r.out_dtype, part[0] * scale);
        __syncthreads();
    }
}

} // namespace

extern "C" int crk_sum(const crk_reduce *r, double scale, cudaStream_t stream) {
    if (r->K == 0) return 0;
    int es_in = dtype_size(r->in_dtype), es_out = dtype_size(r->out_dtype);
    if (r->R >= 512 || r->K < 1024) {
        int64_t grid = r->K < 65535 * 4 ? r->K : 65535 * 4;
        sum_per_block<<<(unsigned)grid, BLOCK, 0, stream>>>(*r, scale, es_in, es_out);
    } else {
        sum_per_thread<<<(unsigned)((r->K + BLOCK - 1) / BLOCK), BLOCK, 0, stream>>>(*r, scale, es_in,
                                                                                   es_out);
    }
    return cudaGetLastError();
}
