/* softmax.c (cuda) — softmax and log-softmax forward on the GPU (kernels/softmax.cu); the
 * backward is composed of GPU ops by the derivative rule in ops/softmax.c. */
#include "cuda_impl.h"
#include "reduce_impl.h"

static cr_status gpu_softmax_any(cr_call *c, bool is_log) {
    int device;
    cr_status st = cr_gpu_call_device(c, &device);
    if (st) return st;
    cr_tensor *xc;
    if ((st = cr_reduce_contig_as(&xc, c->in[0], c->in[0]->dtype))) return st;
    int64_t dim = c->i[0], outer = 1, inner = 1, C = xc->ndim ? xc->shape[dim] : 1;
    for (int64_t d = 0; d < dim; d++) outer *= xc->shape[d];
    for (int64_t d = dim + 1; d < xc->ndim; d++) inner *= xc->shape[d];
    st = cr_gpu_check(crk_softmax(cr_tensor_ptr(xc), cr_tensor_ptr(c->out[0]), outer, C, inner,
                                  xc->dtype == CR_DT_F64, is_log, cr_gpu_stream(device)),
                      cr_op_name(c->op));
    cr_tensor_free(xc);
    return st;
}

cr_status cr_gpu_softmax(cr_call *c) { return gpu_softmax_any(c, false); }
cr_status cr_gpu_log_softmax(cr_call *c) { return gpu_softmax_any(c, true); }

