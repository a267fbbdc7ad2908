/* threads.c — the OpenMP thread count (oneDNN shares the same runtime), version and
 * build features. */
#include <omp.h>

#include "core.h"

#ifndef CR_VERSION
#define CR_VERSION "0.1.0"
#endif

static int num_threads = 0;

void cr_set_num_threads(int n) {
    if (n < 1) n = 1;
    num_threads = n;
    omp_set_num_threads(n);
}

int cr_get_num_threads(void) { return num_threads > 0 ? num_threads : omp_get_max_threads(); }
int cr_threads(void) { return cr_get_num_threads(); }

const char *cr_version(void) { return CR_VERSION; }

const char *cr_build_features(void) {
    return "onednn="
#ifdef CR_HAVE_DNNL
           "1"
#else
           "0"
#endif
           " cuda="
#ifdef CR_HAVE_CUDA
           "1"
#else
           "0"
#endif
        ; /* MPI is a library of its own (libcrescent_mpi.so): cr.features() in Lua adds it */
}
