/* dnnl_engine.h — the one oneDNN CPU engine and stream that every oneDNN fast path
 * (matmul, conv, batch norm) shares. Private to csrc/ops. */
#ifndef CR_DNNL_ENGINE_H
#define CR_DNNL_ENGINE_H
#ifdef CR_HAVE_DNNL
#include <stdbool.h>

#include <oneapi/dnnl/dnnl.h>

/* Created once, thread-safely; false (and the callers stay on their reference paths)
 * when oneDNN cannot start. */
bool cr_dnnl_engine(dnnl_engine_t *engine, dnnl_stream_t *stream);
#endif
#endif
