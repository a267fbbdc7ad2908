/* dnnl_engine.c — see dnnl_engine.h; and whether the CPU computes bf16 natively. */
#include "internal.h"

#ifdef CR_HAVE_DNNL
#include "dnnl_engine.h"

#include <pthread.h>

static dnnl_engine_t shared_engine;
static dnnl_stream_t shared_stream;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void create(void) {
    if (dnnl_engine_create(&shared_engine, dnnl_cpu, 0) != dnnl_success) {
        shared_engine = NULL;
        return;
    }
    if (dnnl_stream_create(&shared_stream, shared_engine, dnnl_stream_default_flags) !=
        dnnl_success) {
        dnnl_engine_destroy(shared_engine);
        shared_engine = NULL;
    }
}

bool cr_dnnl_engine(dnnl_engine_t *engine, dnnl_stream_t *stream) {
    pthread_once(&once, create);
    *engine = shared_engine;
    *stream = shared_stream;
    return shared_engine != NULL;
}

/* The ISA test once: it is asked at the entry of every half conv, product and batch norm. */
static bool isa_bf16;
static pthread_once_t isa_once = PTHREAD_ONCE_INIT;
static void read_isa(void) {
    const dnnl_cpu_isa_t bf16 = dnnl_cpu_isa_avx512_core_bf16;
    isa_bf16 = (dnnl_get_effective_cpu_isa() & bf16) == bf16;
}

bool cr_cpu_bf16_native(void) {
    if (!cr_fast_paths_enabled()) return false;
    pthread_once(&isa_once, read_isa);
    return isa_bf16;
}
#else
bool cr_cpu_bf16_native(void) { return false; }
#endif
