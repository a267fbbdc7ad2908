/* cuda_impl.h — what the files of the CUDA backend share (private to csrc/cuda/): the
 * device context (current device, streams, library handles), error mapping, and the
 * caching allocator. Everything here runs on the host; kernels live in kernels/. */
#ifndef CR_CUDA_IMPL_H
#define CR_CUDA_IMPL_H

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "cuda_backend.h"
#include "call.h"
#include "kernels/kernels.h"

enum { CR_GPU_MAX_DEVICES = 64 };

/* ---- the per-device context (device.c) ---- */
/* Records how many devices the runtime found (capped at CR_GPU_MAX_DEVICES); returns it. */
int cr_gpu_devices_found(int n);
/* The device this thread entered last, -1 before any. */
int cr_gpu_current_device(void);
/* Whether the device's streams exist (it was entered once). */
bool cr_gpu_device_ready(int device);
/* The device's copy stream: asynchronous host-to-device copies from pinned memory only. */
cudaStream_t cr_gpu_copy_stream(int device);
/* Makes `device` current on this thread (cudaSetDevice only when it changes). */
cr_status cr_gpu_enter(int device);
/* The device's compute stream: every kernel, library call and allocation runs on it. */
cudaStream_t cr_gpu_stream(int device);
/* The cuBLAS handle of the device, bound to its compute stream (made on first use). */
cr_status cr_gpu_cublas(int device, cublasHandle_t *out);
int cr_gpu_device_count(void);
/* Env CRESCENT_CUDA_TF32, read once: 1 on, 0 off, -1 unset (then each library keeps
 * PyTorch's default: TF32 off for matrix products, on for convolutions). */
int cr_gpu_tf32_setting(void);

/* A CUDA error as a crescent status with a message naming what failed; CR_OK for
 * cudaSuccess. Out-of-memory errors become CR_ERR_OOM. */
cr_status cr_gpu_check(cudaError_t err, const char *what);
cr_status cr_gpu_check_cublas(cublasStatus_t st, const char *what);

/* ---- the caching allocator (allocator.c) ---- */
cr_status cr_gpu_alloc(int device, size_t bytes, void **ptr);
void cr_gpu_release(int device, void *ptr, size_t bytes);
cr_status cr_gpu_memory_stats(int device, cr_cuda_memstats *out);
void cr_gpu_reset_peak(int device);
void cr_gpu_empty_cache(void);

/* ---- kernel glue ---- */
/* The device of a call's lead tensor (first output, else first input); enters it. */
cr_status cr_gpu_call_device(const cr_call *c, int *device);
/* The CUDA column of the op list (crescent_ops.h): every kernel a row names, defined in
 * this folder (a row naming a CPU function, for ops without GPU arithmetic, declares it
 * again with the same type). backend.c copies the column into cr_kernel_table when the
 * backend opens; cr_gpu_none marks an op without a GPU kernel (its entry stays empty). */
#define CR_GPU_DECLARE_KERNEL(E, name, kernel, cuda, rule, amp) cr_status cuda(cr_call *c);
CR_OPS(CR_GPU_DECLARE_KERNEL)
#undef CR_GPU_DECLARE_KERNEL
cr_status cr_gpu_none(cr_call *c);
/* The elementwise kernels for the backend's own use (elementwise.c), without an op entry:
 * no dispatch, no autograd. dst = src (converting the dtype); t = value; a fresh
 * row-major copy of t. */
cr_status cr_gpu_copy_into(cr_tensor *dst, cr_tensor *src);
cr_status cr_gpu_fill_value(cr_tensor *t, double value);
cr_status cr_gpu_contiguous_copy(cr_tensor **out, cr_tensor *t);
extern const cr_kernel_fn cr_gpu_kernels[CR_OP_COUNT];
void cr_gpu_set_deterministic(bool on);
/* Fills the NCCL entries of the table (nccl.c); leaves them NULL without CR_HAVE_NCCL. */
void cr_gpu_fill_nccl(cr_cuda_backend *be);

#endif
