/* sort.c (cuda) — sort and topk on the GPU (kernels/sort.cu), in ops/sort.c's order:
 * stable, ties by lower position, NaN last ascending and first descending, -0 equal to
 * +0. topk sorts whole rows and keeps the first k, which is the CPU's answer whichever
 * of its paths (full sort or heap selection) it takes. The scratch (keys, positions and
 * CUB's storage) comes from the caching allocator. */
#include "cuda_impl.h"
#include "kernels/sort.h"

/* c: in[0] the tensor, i[0] dim, i[1] k, i[2] descending; out[0] values, out[1] indices. */
cr_status cr_gpu_sort_rows(cr_call *c) {
    int device;
    cr_status st = cr_gpu_call_device(c, &device);
    if (st) return st;
    const cr_tensor *t = c->in[0];
    int dim = (int)c->i[0];
    crk_sort p;
    memset(&p, 0, sizeof p);
    p.in = cr_tensor_ptr(t);
    p.dtype = t->dtype;
    p.n = t->ndim ? t->shape[dim] : 1;
    p.stride = t->ndim ? t->stride[dim] : 0;
    p.rows = p.n ? t->numel / p.n : 0;
    p.k = c->i[1];
    p.inner = 1;
    for (int d = dim + 1; d < t->ndim; d++) p.inner *= t->shape[d];
    /* the other dims, row-major: size-1 dims dropped, neighbours merged where they allow */
    for (int d = 0; d < t->ndim; d++) {
        if (d == dim || t->shape[d] == 1) continue;
        if (p.nr > 0 && p.rstride[p.nr - 1] == t->stride[d] * t->shape[d]) {
            p.rshape[p.nr - 1] *= t->shape[d];
            p.rstride[p.nr - 1] = t->stride[d];
            continue;
        }
        p.rshape[p.nr] = t->shape[d];
        p.rstride[p.nr++] = t->stride[d];
    }
    p.descending = c->i[2] != 0;
    p.values = cr_tensor_ptr(c->out[0]);
    p.indices = (int64_t *)cr_tensor_ptr(c->out[1]);
    size_t bytes = crk_sort_workspace(&p);
    if (bytes == 0) return CR_OK;
    void *ws = NULL;
    if ((st = cr_gpu_alloc(device, bytes, &ws))) return st;
    st = cr_gpu_check(crk_sort_rows(&p, ws, bytes, cr_gpu_stream(device)), cr_op_name(c->op));
    cr_gpu_release(device, ws, bytes); /* stream-ordered: reused only after the kernels */
    return st;
}

