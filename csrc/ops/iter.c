/* iter.c — see iter.h. */
#include <omp.h>

#include "iter.h"

/* Every operand row-major with the output's element count, so of its shape (an operand
 * broadcasts to the output): one flat run, without the general setup below (strides per
 * dim, the sort by memory order, the merges), which was 8-9% of a 1-element add's time
 * in perf. */
static bool init_flat(cr_iter *it, int nargs, cr_tensor *const *args) {
    int64_t numel = args[0]->numel;
    for (int k = 0; k < nargs; k++)
        if (args[k]->numel != numel || !cr_tensor_is_contiguous(args[k])) return false;
    it->ndim = 1;
    it->shape[0] = numel > 0 ? numel : 1;
    for (int k = 0; k < nargs; k++) {
        it->base[k] = cr_tensor_ptr(args[k]);
        it->stride[k][0] = numel > 1 ? (int64_t)cr_dtype_size(args[k]->dtype) : 0;
    }
    return true;
}

void cr_iter_init(cr_iter *it, int nargs, cr_tensor *const *args) {
    CR_ASSERT(nargs <= CR_ITER_MAX_ARGS);
    const cr_tensor *out = args[0];
    int n = out->ndim;
    it->nargs = nargs;
    it->numel = out->numel;
    if (init_flat(it, nargs, args)) return;
    for (int k = 0; k < nargs; k++) {
        const cr_tensor *t = args[k];
        int64_t es = (int64_t)cr_dtype_size(t->dtype);
        it->base[k] = cr_tensor_ptr(t);
        for (int d = 0; d < n; d++) {
            int dt = d - (n - t->ndim);
            it->stride[k][d] = (dt >= 0 && t->shape[dt] != 1) ? t->stride[dt] * es : 0;
        }
    }
    /* visit dims in the output's memory order (largest stride first): a channels-last
     * output [N, C, H, W] with strides [HWC, 1, WC, C] runs as [N, H, W, C], so its
     * operands stream contiguously. Row-major outputs keep their order (the sort is
     * stable); every user of the iterator is elementwise, so the order is free. */
    int perm[CR_MAX_DIMS];
    for (int d = 0; d < n; d++) {
        int j = d;
        while (j > 0 && it->stride[0][perm[j - 1]] < it->stride[0][d]) {
            perm[j] = perm[j - 1];
            j--;
        }
        perm[j] = d;
    }
    /* drop size-1 dims, then merge dim d into d+1 when every operand is contiguous
     * across the pair */
    int m = 0;
    int64_t shape[CR_MAX_DIMS], stride[CR_ITER_MAX_ARGS][CR_MAX_DIMS];
    for (int q = 0; q < n; q++) {
        int d = perm[q];
        if (out->shape[d] == 1) continue;
        if (m > 0) {
            bool merge = true;
            for (int k = 0; k < nargs; k++)
                if (stride[k][m - 1] != it->stride[k][d] * out->shape[d]) merge = false;
            if (merge) {
                shape[m - 1] *= out->shape[d];
                for (int k = 0; k < nargs; k++) stride[k][m - 1] = it->stride[k][d];
                continue;
            }
        }
        shape[m] = out->shape[d];
        for (int k = 0; k < nargs; k++) stride[k][m] = it->stride[k][d];
        m++;
    }
    if (m == 0) { /* a single element */
        shape[0] = 1;
        for (int k = 0; k < nargs; k++) stride[k][0] = 0;
        m = 1;
    }
    it->ndim = m;
    for (int d = 0; d < m; d++) {
        it->shape[d] = shape[d];
        for (int k = 0; k < nargs; k++) it->stride[k][d] = stride[k][d];
    }
}

static void run_range(const cr_iter *it, cr_loop_fn fn, const void *ctx, int64_t begin,
                      int64_t end) {
    int nd = it->ndim, last = nd - 1;
    int64_t coord[CR_MAX_DIMS];
    int64_t rem = begin;
    for (int d = last; d >= 0; d--) {
        coord[d] = rem % it->shape[d];
        rem /= it->shape[d];
    }
    int64_t inner[CR_ITER_MAX_ARGS];
    for (int k = 0; k < it->nargs; k++) inner[k] = it->stride[k][last];
    int64_t pos = begin;
    while (pos < end) {
        char *ptrs[CR_ITER_MAX_ARGS];
        for (int k = 0; k < it->nargs; k++) {
            int64_t off = 0;
            for (int d = 0; d < nd; d++) off += coord[d] * it->stride[k][d];
            ptrs[k] = it->base[k] + off;
        }
        int64_t n = it->shape[last] - coord[last];
        if (n > end - pos) n = end - pos;
        fn(ptrs, inner, n, ctx);
        pos += n;
        coord[last] += n;
        for (int d = last; d > 0 && coord[d] >= it->shape[d]; d--) {
            coord[d] = 0;
            coord[d - 1]++;
        }
    }
}

void cr_iter_run(const cr_iter *it, cr_loop_fn fn, const void *ctx) {
    int64_t total = it->numel;
    if (total == 0) return;
    int nt = cr_threads();
    if (nt <= 1 || total < CR_PAR_GRAIN) {
        run_range(it, fn, ctx, 0, total);
        return;
    }
    if ((int64_t)nt > total / (CR_PAR_GRAIN / 4)) nt = (int)(total / (CR_PAR_GRAIN / 4));
#pragma omp parallel num_threads(nt)
    {
        int t = omp_get_thread_num(), tn = omp_get_num_threads();
        int64_t chunk = (total + tn - 1) / tn;
        int64_t b = (int64_t)t * chunk, e = b + chunk < total ? b + chunk : total;
        if (b < e) run_range(it, fn, ctx, b, e);
    }
}
