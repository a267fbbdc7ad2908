/* cuda_loader.c — finds and opens the CUDA backend (see cuda_backend.h) the first time a
 * tensor goes to a GPU, and the public cr_cuda_* calls that forward to it. The backend is
 * build/libcrescent_cuda.so beside libcrescent.so, or the file named by env
 * CRESCENT_CUDA_LIB. Before opening it, the driver probe (cuda_probe.c) names what is
 * missing when no GPU is usable, so the error says "no driver" rather than a dlopen
 * message about libcuda. */
#include <dlfcn.h>
#include <libgen.h>
#include <pthread.h>
#include <unistd.h>

#include "cuda_backend.h"

static pthread_once_t once = PTHREAD_ONCE_INIT;
static cr_cuda_backend backend;
static bool loaded;
static char why_not[3072];

static void backend_path(char *buf, size_t cap) {
    const char *env = getenv("CRESCENT_CUDA_LIB");
    if (env && *env) {
        snprintf(buf, cap, "%.1000s", env);
        return;
    }
    Dl_info info;
    char self[4096] = ".";
    if (dladdr((void *)cr_cuda_backend_get, &info) && info.dli_fname)
        snprintf(self, sizeof self, "%s", info.dli_fname);
    snprintf(buf, cap, "%.990s/libcrescent_cuda.so", dirname(self));
}

static void open_backend(void) {
    char why[400];
    if (cr_cuda_probe(why, sizeof why) < 0) {
        snprintf(why_not, sizeof why_not, "%s", why);
        return;
    }
    char path[1024];
    backend_path(path, sizeof path);
    if (access(path, R_OK) != 0) {
        snprintf(why_not, sizeof why_not, "this build has no CUDA backend: %s is missing "
                 "(nvcc was not found at build time; rebuild with CUDA_HOME=<toolkit> make)",
                 path);
        return;
    }
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(why_not, sizeof why_not, "the CUDA backend %s did not load: %s (are cuBLAS "
                 "and cuDNN on LD_LIBRARY_PATH?)", path, dlerror());
        return;
    }
    cr_cuda_backend_open_fn open_fn = (cr_cuda_backend_open_fn)dlsym(lib, "cr_cuda_backend_open");
    if (!open_fn) {
        snprintf(why_not, sizeof why_not, "%s lacks cr_cuda_backend_open: not a crescent "
                 "CUDA backend", path);
        return;
    }
    cr_cuda_backend be;
    memset(&be, 0, sizeof be);
    if (open_fn(&be, CR_CUDA_BACKEND_ABI, sizeof be) != CR_OK) {
        snprintf(why_not, sizeof why_not, "%s: %s", path, cr_last_error());
        return;
    }
    backend = be;
    loaded = true;
}

const cr_cuda_backend *cr_cuda_backend_get(void) {
    pthread_once(&once, open_backend);
    if (loaded) return &backend;
    cr_fail(CR_ERR_DEVICE, "no usable CUDA GPU: %s", why_not);
    return NULL;
}

cr_status cr_cuda_init(void) { return cr_cuda_backend_get() ? CR_OK : CR_ERR_DEVICE; }

int cr_cuda_device_count(void) {
    const cr_cuda_backend *be = cr_cuda_backend_get();
    return be ? be->device_count : 0;
}

cr_status cr_cuda_backend_for(const cr_cuda_backend **be, int device, bool any_ok) {
    if (!(*be = cr_cuda_backend_get())) return CR_ERR_DEVICE;
    int n = (*be)->device_count;
    if ((any_ok && device == -1) || (device >= 0 && device < n)) return CR_OK;
    return cr_fail(CR_ERR_DEVICE, "cuda:%d does not exist: this machine has %d CUDA device%s "
                   "(cuda:0 to cuda:%d)", device, n, n == 1 ? "" : "s", n - 1);
}

cr_status cr_cuda_memory_stats(int device, cr_cuda_memstats *out) {
    const cr_cuda_backend *be;
    cr_status st = cr_cuda_backend_for(&be, device, false);
    return st ? st : be->memory_stats(device, out);
}

cr_status cr_cuda_reset_peak(int device) {
    const cr_cuda_backend *be;
    cr_status st = cr_cuda_backend_for(&be, device, false);
    if (!st) be->reset_peak(device);
    return st;
}

cr_status cr_cuda_empty_cache(void) {
    const cr_cuda_backend *be = cr_cuda_backend_get();
    if (!be) return CR_ERR_DEVICE;
    be->empty_cache();
    return CR_OK;
}

cr_status cr_cuda_set_deterministic(bool on) {
    const cr_cuda_backend *be = cr_cuda_backend_get();
    if (!be) return CR_ERR_DEVICE;
    be->set_deterministic(on);
    return CR_OK;
}

cr_status cr_cuda_synchronize(int device) {
    const cr_cuda_backend *be;
    cr_status st = cr_cuda_backend_for(&be, device, true);
    return st ? st : be->synchronize(device);
}
