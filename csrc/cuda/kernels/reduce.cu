// reduce.cu — sums over a reduction plan (ops/reduce_impl.h) on the GPU, accumulated in
// f64 like the CPU reference. Few long reductions (a loss, a norm, the sum over a batch of a
// small tensor) get one block per output with a tree in shared memory; many short ones (a
// bias gradient, sums over channels) get one thread per output, so that neighbouring
// threads read neighbouring kept elements.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "kernels.h"

namespace {

enum { F32 = 0, F64, F16, BF16, I64, I32, U8, BOOL };

__device__ __forceinline__ double load(const char *p, int dt) {
    switch (dt) {
    case F32: return *(const float *)p;
    case F64: return *(const double *)p;
    case F16: return __half2float(*(const __half *)p);
    case BF16: return __bfloat162float(*(const __nv_bfloat16 *)p);
    case I64: return (double)*(const int64_t *)p;
    case I32: return *(const int32_t *)p;
    case U8: return *(const uint8_t *)p;
    default: return *(const uint8_t *)p != 0;
    }
}

__device__ __forceinline__ void store(char *p, int dt, double v) {
    switch (dt) {
    case F32: *(float *)p = (float)v; break;
    case F64: *(double *)p = v; break;
    case F16: *(__half *)p = __float2half_rn((float)v); break;
    case BF16: *(__nv_bfloat16 *)p = __float2bfloat16_rn((float)v); break;
    default: *(int64_t *)p = (int64_t)v; break; // integer sums are i64
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
        acc += load(base + split(r.nr, r.rshape, r.rstride, j) * es_in, r.in_dtype);
    store(r.out + k * es_out, r.out_dtype, acc * scale);
}

constexpr int BLOCK = 256;

__global__ void sum_per_block(const crk_reduce r, double scale, int es_in, int es_out) {
    __shared__ double part[BLOCK];
    for (int64_t k = blockIdx.x; k < r.K; k += gridDim.x) {
        const char *base = r.in + split(r.nk, r.kshape, r.kstride, k) * es_in;
        double acc = 0;
        for (int64_t j = threadIdx.x; j < r.R; j += BLOCK)
            acc += load(base + split(r.nr, r.rshape, r.rstride, j) * es_in, r.in_dtype);
        part[threadIdx.x] = acc;
        __syncthreads();
        for (int w = BLOCK / 2; w > 0; w >>= 1) {
            if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
            __syncthreads();
        }
        if (threadIdx.x == 0) store(r.out + k * es_out, r.out_dtype, part[0] * scale);
        __syncthreads();
    }
}

int dtype_size(int dt) {
    switch (dt) {
    case F64: case I64: return 8;
    case F32: case I32: return 4;
    case F16: case BF16: return 2;
    default: return 1;
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
