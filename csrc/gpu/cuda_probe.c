/* cuda_probe.c — whether a CUDA GPU is usable on this machine, and if not, why. The
 * driver library is opened at run time (dlopen of libcuda.so.1), so the same build loads
 * and runs on machines without a driver; the answer names the missing piece: no driver,
 * a driver older than the toolkit crescent was built with, or no device. */
#include <dlfcn.h>

#include "core.h"

#ifdef CR_HAVE_CUDA
#include <cuda.h> /* CUDA_VERSION: the toolkit this build was compiled against */
#define CR_BUILT_CUDA_VERSION CUDA_VERSION
#else
#define CR_BUILT_CUDA_VERSION 0
#endif

typedef int (*cu_init_fn)(unsigned);
typedef int (*cu_int_fn)(int *);

enum { CU_SUCCESS = 0, CU_ERROR_NO_DEVICE = 100, CU_ERROR_INSUFFICIENT_DRIVER = 35 };

static void version_text(int v, char *buf, size_t cap) {
    snprintf(buf, cap, "%d.%d", v / 1000, (v % 1000) / 10);
}

int cr_cuda_built_version(void) { return CR_BUILT_CUDA_VERSION; }

int cr_cuda_probe(char *why, size_t cap) {
    if (cap) why[0] = '\0';
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(why, cap, "no NVIDIA driver: libcuda.so.1 is not installed on this machine");
        return -1;
    }
    cu_init_fn cu_init = (cu_init_fn)dlsym(lib, "cuInit");
    cu_int_fn driver_version = (cu_int_fn)dlsym(lib, "cuDriverGetVersion");
    cu_int_fn device_count = (cu_int_fn)dlsym(lib, "cuDeviceGetCount");
    if (!cu_init || !driver_version || !device_count) {
        snprintf(why, cap, "the NVIDIA driver library libcuda.so.1 lacks cuInit or "
                           "cuDeviceGetCount: a broken driver install");
        return -1;
    }
    int driver = 0;
    char have[16], need[16];
    if (driver_version(&driver) == CU_SUCCESS && driver < CR_BUILT_CUDA_VERSION) {
        version_text(driver, have, sizeof have);
        version_text(CR_BUILT_CUDA_VERSION, need, sizeof need);
        snprintf(why, cap, "version mismatch: the NVIDIA driver supports CUDA %s, but crescent "
                           "was built with CUDA %s; update the driver or build against an "
                           "older toolkit (CUDA_HOME=...)", have, need);
        return -1;
    }
    int rc = cu_init(0);
    if (rc == CU_ERROR_NO_DEVICE) {
        snprintf(why, cap, "no CUDA device: the NVIDIA driver is installed but sees no GPU "
                           "(check CUDA_VISIBLE_DEVICES and nvidia-smi)");
        return -1;
    }
    if (rc == CU_ERROR_INSUFFICIENT_DRIVER) {
        version_text(driver, have, sizeof have);
        snprintf(why, cap, "version mismatch: the NVIDIA driver (CUDA %s) is too old for this "
                           "CUDA runtime; update the driver", have);
        return -1;
    }
    if (rc != CU_SUCCESS) {
        snprintf(why, cap, "the NVIDIA driver failed to initialise (cuInit error %d); see "
                           "nvidia-smi", rc);
        return -1;
    }
    int n = 0;
    if (device_count(&n) != CU_SUCCESS || n < 1) {
        snprintf(why, cap, "no CUDA device: the NVIDIA driver sees no GPU (check "
                           "CUDA_VISIBLE_DEVICES and nvidia-smi)");
        return -1;
    }
    return n; /* the library stays loaded: the backend will use it */
}
