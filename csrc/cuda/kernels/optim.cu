// optim.cu — the fused optimizer updates and the per-chunk norms behind LARS and
// gradient clipping: one block per chunk of one tensor (the chunks and their plans are
// cut on the host by optim/, the same way as on the cpu), every element updated with the
// cpu's arithmetic in the parameter's own precision.
#include <math.h>
#include <stdint.h>

#include "kernels.h"

namespace {

constexpr int THREADS = 256;

template <typename T> __device__ void sgd(const cr_gpu_optim_chunk &c) {
    T *p = (T *)c.p, *buf = (T *)c.buf1;
    const T *g = (const T *)c.g;
    const T lr = (T)c.lr, gsc = (T)c.gscale, wd = (T)c.wd, m = (T)c.momentum, damp1 = (T)c.damp1;
    for (int64_t i = threadIdx.x; i < c.n; i += blockDim.x) {
        T d = g[i] * gsc + wd * p[i];
        if (c.momentum == 0.0) {
            p[i] -= lr * d;
            continue;
        }
        T v = c.first ? d : m * buf[i] + damp1 * d;
        buf[i] = v;
        p[i] -= lr * (c.nesterov ? d + m * v : v);
    }
}

template <typename T> __device__ void adamw(const cr_gpu_optim_chunk &c) {
    T *p = (T *)c.p, *m = (T *)c.buf1, *v = (T *)c.buf2;
    const T *g = (const T *)c.g;
    const T decay = (T)c.decay, step_size = (T)c.step_size, bc2 = (T)c.bc2_sqrt, eps = (T)c.eps;
    const T gs = (T)c.gscale, w1 = (T)c.w1, b2 = (T)c.b2, w2 = (T)c.w2;
    for (int64_t i = threadIdx.x; i < c.n; i += blockDim.x) {
        T gi = g[i] * gs;
        T mi = m[i] + w1 * (gi - m[i]);
        T vi = b2 * v[i] + w2 * (gi * gi);
        T pi = p[i] * decay;
        m[i] = mi;
        v[i] = vi;
        p[i] = pi - step_size * (mi / (sqrt(vi) / bc2 + eps));
    }
}

__global__ void update_kernel(const cr_gpu_optim_chunk *chunks) {
    const cr_gpu_optim_chunk &c = chunks[blockIdx.x];
    if (c.adamw) {
        if (c.f64) adamw<double>(c);
        else adamw<float>(c);
    } else {
        if (c.f64) sgd<double>(c);
        else sgd<float>(c);
    }
}

__device__ double fold(double acc, double a, double p) {
    if (isinf(p)) return (a > acc || a != a || acc != acc) ? (acc != acc ? acc : a) : acc;
    if (p == 2.0) return acc + a * a;
    if (p == 1.0) return acc + a;
    return acc + pow(a, p);
}

__global__ void pow_sums_kernel(const cr_gpu_norm_chunk *chunks, double p, double *out) {
    __shared__ double part[THREADS];
    const cr_gpu_norm_chunk &c = chunks[blockIdx.x];
    double acc = 0;
    for (int64_t i = threadIdx.x; i < c.n; i += blockDim.x) {
        double a = c.f64 ? fabs(((const double *)c.x)[i]) : fabs((double)((const float *)c.x)[i]);
        acc = fold(acc, a, p);
    }
    part[threadIdx.x] = acc;
    __syncthreads();
    for (int w = THREADS / 2; w > 0; w >>= 1) {
        if (threadIdx.x < w) {
            double a = part[threadIdx.x], b = part[threadIdx.x + w];
            part[threadIdx.x] = isinf(p) ? fold(a, b, p) : a + b;
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = part[0];
}

} // namespace

// The chunk lists are in device memory (copied there by the glue, csrc/cuda/backend.c).
extern "C" int crk_optim_update(const cr_gpu_optim_chunk *chunks, int64_t n, cudaStream_t s) {
    if (n == 0) return 0;
    update_kernel<<<(unsigned)n, THREADS, 0, s>>>(chunks);
    return cudaGetLastError();
}

extern "C" int crk_pow_sums(const cr_gpu_norm_chunk *chunks, int64_t n, double p, double *out, cudaStream_t s) {
    if (n == 0) return 0;
    pow_sums_kernel<<<(unsigned)n, THREADS, 0, s>>>(chunks, p, out);
    return cudaGetLastError();
}
