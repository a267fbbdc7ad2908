/* device.c — the CUDA backend's per-device context: which device this thread has entered,
 * each device's compute and copy streams and cuBLAS handle (made on first use), and the
 * mapping of CUDA and cuBLAS errors to crescent statuses. The backend's other files call
 * this one; it calls none of them. */
#include <pthread.h>

#include "cuda_impl.h"

typedef struct {
    bool ready;
    cudaStream_t compute, copy;
    cublasHandle_t blas;
} device_ctx;

static device_ctx devices[CR_GPU_MAX_DEVICES];
static int device_count;
static pthread_mutex_t ctx_lock = PTHREAD_MUTEX_INITIALIZER;
static __thread int current_device = -1;

cr_status cr_gpu_check(cudaError_t err, const char *what) {
    if (err == cudaSuccess) return CR_OK;
    cudaGetLastError(); /* clear the sticky-free error state */
    if (err == cudaErrorMemoryAllocation)
        return cr_fail(CR_ERR_OOM, "%s: out of GPU memory (%s)", what, cudaGetErrorString(err));
    return cr_fail(CR_ERR_DEVICE, "%s: CUDA error %d (%s)", what, (int)err, cudaGetErrorString(err));
}

cr_status cr_gpu_check_cublas(cublasStatus_t st, const char *what) {
    if (st == CUBLAS_STATUS_SUCCESS) return CR_OK;
    if (st == CUBLAS_STATUS_ALLOC_FAILED)
        return cr_fail(CR_ERR_OOM, "%s: cuBLAS could not allocate GPU memory", what);
    return cr_fail(CR_ERR_DEVICE, "%s: cuBLAS error %d (%s)", what, (int)st, cublasGetStatusString(st));
}

int cr_gpu_device_count(void) { return device_count; }

int cr_gpu_tf32_setting(void) {
    static int setting = -2;
    if (setting == -2) {
        const char *e = getenv("CRESCENT_CUDA_TF32");
        setting = !e || !*e ? -1 : *e == '1' ? 1 : 0;
    }
    return setting;
}

static cr_status init_device(int device) {
    device_ctx *d = &devices[device];
    cr_status st = CR_OK;
    pthread_mutex_lock(&ctx_lock);
    if (!d->ready) {
        st = cr_gpu_check(cudaStreamCreateWithFlags(&d->compute, cudaStreamNonBlocking),
                          "creating the compute stream");
        if (!st)
            st = cr_gpu_check(cudaStreamCreateWithFlags(&d->copy, cudaStreamNonBlocking),
                              "creating the copy stream");
        if (!st) __atomic_store_n(&d->ready, true, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&ctx_lock);
    return st;
}

cr_status cr_gpu_enter(int device) {
    if (device < 0 || device >= device_count)
        return cr_fail(CR_ERR_DEVICE, "cuda:%d does not exist: this machine has %d CUDA device%s",
                       device, device_count, device_count == 1 ? "" : "s");
    if (device != current_device) {
        cr_status st = cr_gpu_check(cudaSetDevice(device), "selecting the GPU");
        if (st) return st;
        current_device = device;
    }
    return __atomic_load_n(&devices[device].ready, __ATOMIC_ACQUIRE) ? CR_OK : init_device(device);
}

cudaStream_t cr_gpu_stream(int device) { return devices[device].compute; }

cr_status cr_gpu_cublas(int device, cublasHandle_t *out) {
    device_ctx *d = &devices[device];
    cr_status st = CR_OK;
    pthread_mutex_lock(&ctx_lock);
    if (!d->blas) {
        st = cr_gpu_check_cublas(cublasCreate(&d->blas), "creating the cuBLAS handle");
        if (!st) st = cr_gpu_check_cublas(cublasSetStream(d->blas, d->compute), "cublasSetStream");
    }
    pthread_mutex_unlock(&ctx_lock);
    *out = d->blas;
    return st;
}

cr_status cr_gpu_call_device(const cr_call *c, int *device) {
    const cr_tensor *lead = c->nout && c->out[0] ? c->out[0] : c->in[0];
    *device = lead->storage->device_index;
    return cr_gpu_enter(*device);
}

int cr_gpu_devices_found(int n) {
    device_count = n < CR_GPU_MAX_DEVICES ? n : CR_GPU_MAX_DEVICES;
    return device_count;
}

int cr_gpu_current_device(void) { return current_device; }

bool cr_gpu_device_ready(int device) { return __atomic_load_n(&devices[device].ready, __ATOMIC_ACQUIRE); }

cudaStream_t cr_gpu_copy_stream(int device) { return devices[device].copy; }
