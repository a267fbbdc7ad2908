/* index.c (cuda) — index_select, gather, scatter_add, index_add, embedding and one_hot on
 * the GPU (kernels/index.cu), with ops/index.c's semantics. The index lives on the data's
 * device. Its values are checked on the GPU before anything moves: the kernel leaves the
 * first bad flat position in a word of scratch memory, which comes back to the host (one
 * synchronisation per call), and a bad value is the CPU's error, in the CPU's words.
 * Scatters are deterministic and add in the CPU's order, so they match it bit for bit. */
#include "cuda_impl.h"
#include "index_impl.h"
#include "kernels/index.h"

static const int64_t no_strides[CR_MAX_DIMS];

/* A tensor's strides over its own dims; a 0-dim tensor acts as [1]. */
static const int64_t *strides_of(const cr_tensor *t) { return t->ndim ? t->stride : no_strides; }

/* idx as the kernels read it: dims of size 1 dropped and neighbours merged where the
 * strides allow (a contiguous index becomes 1-D), flat positions unchanged. */
static void index_desc(const cr_tensor *idx, crk_index *x) {
    memset(x, 0, sizeof *x);
    x->data = cr_tensor_ptr(idx);
    x->is_i32 = idx->dtype == CR_DT_I32;
    x->numel = idx->numel;
    int nd = 0;
    for (int d = 0; d < idx->ndim; d++) {
        int64_t n = idx->shape[d], s = idx->stride[d];
        if (n == 1) continue;
        if (nd > 0 && x->stride[nd - 1] == s * n) {
            x->shape[nd - 1] *= n;
            x->stride[nd - 1] = s;
            continue;
        }
        x->shape[nd] = n;
        x->stride[nd++] = s;
    }
    if (nd == 0) x->shape[nd++] = 1; /* one element (or a 0-dim index) */
    x->ndim = nd;
}

/* The domain (ndim, shape) split at dim, with dst, src and idx (strides over the domain;
 * idx may be NULL) addressed over it. Dims of size 1 other than dim are dropped and
 * neighbours on the same side of dim merged where every operand allows. */
static void move_desc(crk_move *m, int ndim, const int64_t *shape, int dim, const int64_t *dst,
                      const int64_t *src, const int64_t *idx) {
    memset(m, 0, sizeof *m);
    const int64_t *in[3] = {dst, src, idx ? idx : no_strides};
    int64_t *out[3] = {m->dst_stride, m->src_stride, m->idx_stride};
    int nd = 0, n = ndim ? ndim : 1;
    m->dim = -1;
    for (int d = 0; d < n; d++) {
        int64_t size = ndim ? shape[d] : 1;
        bool is_dim = d == dim;
        if (!is_dim && size == 1) continue;
        if (!is_dim && nd > 0 && nd - 1 != m->dim) {
            bool merges = true;
            for (int k = 0; k < 3; k++) merges = merges && out[k][nd - 1] == in[k][d] * size;
            if (merges) {
                m->shape[nd - 1] *= size;
                for (int k = 0; k < 3; k++) out[k][nd - 1] = in[k][d];
                continue;
            }
        }
        if (is_dim) m->dim = nd;
        m->shape[nd] = size;
        for (int k = 0; k < 3; k++) out[k][nd] = in[k][d];
        nd++;
    }
    m->nd = nd;
    m->outer = m->inner = 1;
    for (int d = 0; d < m->dim; d++) m->outer *= m->shape[d];
    for (int d = m->dim + 1; d < nd; d++) m->inner *= m->shape[d];
    m->along = m->shape[m->dim];
}

/* Every value of idx in [0, size), or the CPU's error naming the first that is not. */
static cr_status check_range(int device, cudaStream_t s, cr_op op, int64_t arg, const cr_tensor *idx,
                             const crk_index *x, int64_t size) {
    if (idx->numel == 0) return CR_OK;
    const char *name = cr_op_name(op);
    unsigned long long *bad = NULL, pos = 0;
    cr_status st = cr_gpu_alloc(device, sizeof *bad, (void **)&bad);
    if (st) return st;
    st = cr_gpu_check(crk_index_check(x, size, bad, s), name);
    if (!st) st = cr_gpu_check(cudaMemcpyAsync(&pos, bad, sizeof pos, cudaMemcpyDeviceToHost, s), name);
    if (!st) st = cr_gpu_check(cudaStreamSynchronize(s), name);
    cr_gpu_release(device, bad, sizeof *bad);
    if (st || pos == ~0ULL) return st;
    /* read the bad value itself, for the message */
    size_t es = cr_dtype_size(idx->dtype);
    const char *at = (const char *)idx->storage->data + cr_flat_offset(idx, (int64_t)pos) * (int64_t)es;
    int64_t v64 = 0;
    int32_t v32 = 0;
    st = cr_gpu_check(cudaMemcpyAsync(es == 4 ? (void *)&v32 : (void *)&v64, at, es,
                                      cudaMemcpyDeviceToHost, s), name);
    if (!st) st = cr_gpu_check(cudaStreamSynchronize(s), name);
    if (st) return st;
    char what[64];
    cr_index_range_name(op, arg, what, sizeof what);
    return cr_index_out_of_range(name, es == 4 ? v32 : v64, (int64_t)pos, size, what);
}

#define ENTER(c)                                                                     \
    int device;                                                                      \
    cr_status st = cr_gpu_call_device(c, &device);                                   \
    if (st) return st;                                                               \
    cudaStream_t s = cr_gpu_stream(device)

/* Extent of t along dim; a 0-dim tensor has one element. */
static int64_t size_along(const cr_tensor *t, int dim) { return t->ndim ? t->shape[dim] : 1; }

static cr_status gather_into(cudaStream_t s, crk_move *m, const char *op) {
    return cr_gpu_check(crk_index_gather(m, s), op);
}

/* dst holds the base values already; adds src at the index (m describes the rest). */
static cr_status scatter_into(int device, cudaStream_t s, crk_move *m, const char *op) {
    size_t bytes = crk_index_scatter_workspace(m);
    if (bytes == 0) return CR_OK;
    void *ws = NULL;
    cr_status st = cr_gpu_alloc(device, bytes, &ws);
    if (st) return st;
    st = cr_gpu_check(crk_index_scatter(m, ws, bytes, s), op);
    cr_gpu_release(device, ws, bytes); /* stream-ordered: reused only after the kernels */
    return st;
}

/* ---- gathers ------------------------------------------------------------------------- */
cr_status cr_gpu_index_select(cr_call *c) {
    ENTER(c);
    cr_tensor *t = c->in[0], *idx = c->in[1], *o = c->out[0];
    int dim = (int)c->i[0];
    crk_index x;
    index_desc(idx, &x);
    if ((st = check_range(device, s, CR_OP_INDEX_SELECT, dim, idx, &x, size_along(t, dim)))) return st;
    crk_move m;
    move_desc(&m, o->ndim, o->shape, dim, strides_of(o), strides_of(t), NULL);
    m.dst = cr_tensor_ptr(o);
    m.src = cr_tensor_ptr(t);
    m.dtype = o->dtype;
    m.index = x;
    return gather_into(s, &m, "index_select");
}

cr_status cr_gpu_gather(cr_call *c) {
    ENTER(c);
    cr_tensor *t = c->in[0], *idx = c->in[1], *o = c->out[0];
    int dim = (int)c->i[0];
    crk_index x;
    index_desc(idx, &x);
    if ((st = check_range(device, s, CR_OP_GATHER, dim, idx, &x, size_along(t, dim)))) return st;
    crk_move m; /* the domain is the index's shape, which out shares */
    move_desc(&m, o->ndim, o->shape, dim, strides_of(o), strides_of(t), strides_of(idx));
    m.dst = cr_tensor_ptr(o);
    m.src = cr_tensor_ptr(t);
    m.dtype = o->dtype;
    m.full = 1;
    m.index = x;
    return gather_into(s, &m, "gather");
}

/* weight [V, D] rows at every index value: out viewed as [numel, D], row-major. */
cr_status cr_gpu_embedding(cr_call *c) {
    ENTER(c);
    cr_tensor *w = c->in[0], *idx = c->in[1], *o = c->out[0];
    crk_index x;
    index_desc(idx, &x);
    if ((st = check_range(device, s, CR_OP_EMBEDDING, 0, idx, &x, w->shape[0]))) return st;
    int64_t shape[2] = {idx->numel, w->shape[1]}, ostride[2];
    cr_contiguous_strides(2, shape, ostride);
    crk_move m;
    move_desc(&m, 2, shape, 0, ostride, w->stride, NULL);
    m.dst = cr_tensor_ptr(o);
    m.src = cr_tensor_ptr(w);
    m.dtype = w->dtype;
    m.index = x;
    return gather_into(s, &m, "embedding");
}

/* ---- scatters ------------------------------------------------------------------------ */
cr_status cr_gpu_scatter_add(cr_call *c) {
    ENTER(c);
    cr_tensor *t = c->in[0], *idx = c->in[1], *src = c->in[2], *o = c->out[0];
    int dim = (int)c->i[0];
    crk_index x;
    index_desc(idx, &x);
    if ((st = check_range(device, s, CR_OP_SCATTER_ADD, dim, idx, &x, size_along(t, dim))) ||
        (st = cr_gpu_copy_into(o, t)))
        return st;
    crk_move m; /* the domain is the index's shape */
    move_desc(&m, idx->ndim, idx->shape, dim, strides_of(o), strides_of(src), strides_of(idx));
    m.dst = cr_tensor_ptr(o);
    m.src = cr_tensor_ptr(src);
    m.dtype = o->dtype;
    m.full = 1;
    m.index = x;
    m.dst_size = size_along(t, dim);
    return scatter_into(device, s, &m, "scatter_add");
}

cr_status cr_gpu_index_add(cr_call *c) {
    ENTER(c);
    cr_tensor *t = c->in[0], *idx = c->in[1], *src = c->in[2], *o = c->out[0];
    int dim = (int)c->i[0];
    crk_index x;
    index_desc(idx, &x);
    if ((st = check_range(device, s, CR_OP_INDEX_ADD, dim, idx, &x, size_along(t, dim))) ||
        (st = cr_gpu_copy_into(o, t)))
        return st;
    crk_move m; /* the domain is src's shape; position j along dim reads index value j */
    move_desc(&m, src->ndim, src->shape, dim, strides_of(o), strides_of(src), NULL);
    m.dst = cr_tensor_ptr(o);
    m.src = cr_tensor_ptr(src);
    m.dtype = o->dtype;
    m.index = x;
    m.dst_size = size_along(t, dim);
    return scatter_into(device, s, &m, "index_add");
}

/* ---- one_hot --------------------------------------------------------------------------- */
cr_status cr_gpu_one_hot(cr_call *c) {
    ENTER(c);
    cr_tensor *idx = c->in[0], *o = c->out[0];
    int64_t classes = c->i[0];
    crk_index x;
    index_desc(idx, &x);
    if ((st = check_range(device, s, CR_OP_ONE_HOT, classes, idx, &x, classes))) return st;
    return cr_gpu_check(crk_one_hot(&x, classes, (int64_t *)cr_tensor_ptr(o), s), "one_hot");
}

