/* sort.c — sort (stable, values + i64 indices) and topk along one dim, and the key sort
 * they share with randperm (sort_impl.h). Each row along the dim is turned into (key,
 * position) pairs and ordered by key, ties by position; rows run in parallel. Their
 * gradient scatters g back through the indices. */
#include <omp.h>

#include "sort_impl.h"

/* ---- the pair sort ------------------------------------------------------------------- */
static bool pair_less(const cr_sort_pair *a, const cr_sort_pair *b) {
    return a->key < b->key || (a->key == b->key && a->idx < b->idx);
}

static void insertion_sort(cr_sort_pair *a, int64_t n) {
    for (int64_t i = 1; i < n; i++) {
        cr_sort_pair x = a[i];
        int64_t j = i;
        for (; j > 0 && pair_less(&x, &a[j - 1]); j--) a[j] = a[j - 1];
        a[j] = x;
    }
}

/* The reference: top-down merge sort under pair_less, which for pairs listed in position
 * order is exactly the stable order by key. */
static void merge_sort(cr_sort_pair *a, cr_sort_pair *tmp, int64_t n) {
    if (n <= 16) {
        insertion_sort(a, n);
        return;
    }
    int64_t h = n / 2;
    merge_sort(a, tmp, h);
    merge_sort(a + h, tmp, n - h);
    int64_t i = 0, j = h, k = 0;
    while (i < h && j < n) tmp[k++] = pair_less(&a[j], &a[i]) ? a[j++] : a[i++];
    while (i < h) tmp[k++] = a[i++];
    while (j < n) tmp[k++] = a[j++];
    memcpy(a, tmp, sizeof *a * (size_t)n);
}

/* Fast path: LSD radix sort on 11-bit digits of the key (stable), skipping digits all
 * keys share: 3 passes for 32-bit keys, 6 for 64-bit ones. */
enum { RADIX_BITS = 11, RADIX_SIZE = 1 << RADIX_BITS };
static void radix_sort(cr_sort_pair *a, cr_sort_pair *tmp, int64_t n) {
    cr_sort_pair *src = a, *dst = tmp;
    uint64_t differ = 0; /* bits where some key differs from the first */
    for (int64_t i = 1; i < n; i++) differ |= a[i].key ^ a[0].key;
    const uint64_t mask = RADIX_SIZE - 1;
    for (int shift = 0; shift < 64; shift += RADIX_BITS) {
        if (((differ >> shift) & mask) == 0) continue;
        int64_t count[RADIX_SIZE + 1] = {0};
        for (int64_t i = 0; i < n; i++) count[((src[i].key >> shift) & mask) + 1]++;
        for (int b = 0; b < RADIX_SIZE; b++) count[b + 1] += count[b];
        for (int64_t i = 0; i < n; i++) dst[count[(src[i].key >> shift) & mask]++] = src[i];
        cr_sort_pair *t = src;
        src = dst;
        dst = t;
    }
    if (src != a) memcpy(a, src, sizeof *a * (size_t)n);
}

void cr_sort_pairs(cr_sort_pair *a, cr_sort_pair *tmp, int64_t n, bool fast) {
    if (n < 2) return;
    if (fast && n >= 2 * RADIX_SIZE) radix_sort(a, tmp, n);
    else merge_sort(a, tmp, n);
}

/* The k smallest pairs (under pair_less) of a[n], sorted, into a[0..k): a bounded
 * max-heap, O(n log k), for k much smaller than n. */
static void heap_sift(cr_sort_pair *h, int64_t k, int64_t i) {
    for (;;) {
        int64_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < k && pair_less(&h[m], &h[l])) m = l;
        if (r < k && pair_less(&h[m], &h[r])) m = r;
        if (m == i) return;
        cr_sort_pair t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}
static void select_smallest(cr_sort_pair *a, cr_sort_pair *tmp, int64_t n, int64_t k) {
    for (int64_t i = k / 2 - 1; i >= 0; i--) heap_sift(a, k, i);
    for (int64_t i = k; i < n; i++)
        if (pair_less(&a[i], &a[0])) {
            a[0] = a[i];
            heap_sift(a, k, 0);
        }
    merge_sort(a, tmp, k);
}

/* ---- rows along a dim ------------------------------------------------------------------- */
/* Element offset of row r (row-major over every dim but `dim`) of a strided tensor. */
static int64_t row_offset(const cr_tensor *t, int dim, int64_t r) {
    int64_t off = t->offset;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (d == dim) continue;
        off += (r % t->shape[d]) * t->stride[d];
        r /= t->shape[d];
    }
    return off;
}

/* Sorts every row of in[0] along c->i[0] and writes the first k (c->i[1]) pairs of each
 * to out[0] (values) and out[1] (indices). descending: c->i[2]. */
static cr_status sort_rows(cr_call *c, const char *op, bool allow_select) {
    cr_tensor *t = c->in[0], *vo = c->out[0], *io = c->out[1];
    int dim = (int)c->i[0];
    int64_t k = c->i[1];
    bool desc = c->i[2] != 0, fast = cr_fast_paths_enabled();
    int64_t n = t->ndim ? t->shape[dim] : 1, tstride = t->ndim ? t->stride[dim] : 0;
    int64_t rows = n ? t->numel / n : 0;
    int64_t inner = 1; /* output row r starts at (r / inner) * k * inner + r % inner */
    for (int d = dim + 1; d < t->ndim; d++) inner *= t->shape[d];
    size_t es = cr_dtype_size(t->dtype);
    const char *tb = (const char *)t->storage->data;
    char *vb = cr_tensor_ptr(vo);
    int64_t *ib = (int64_t *)cr_tensor_ptr(io);
    bool par = rows > 1 && rows * n >= CR_PAR_GRAIN / 4;
    int failed = 0;
    if (rows == 0 || k == 0) return CR_OK;
#pragma omp parallel if (par)
    {
        cr_sort_pair *a = malloc(sizeof *a * (size_t)n), *tmp = malloc(sizeof *tmp * (size_t)n);
        if (!a || !tmp) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; r++) {
            if (!a || !tmp) continue;
            const char *row = tb + row_offset(t, dim, r) * (int64_t)es;
            for (int64_t j = 0; j < n; j++) {
                uint64_t key = cr_sort_key(row + j * tstride * (int64_t)es, t->dtype);
                a[j].key = desc ? ~key : key;
                a[j].idx = j;
            }
            if (allow_select && fast && n >= 64 && k * 8 <= n) select_smallest(a, tmp, n, k);
            else cr_sort_pairs(a, tmp, n, fast);
            int64_t obase = (r / inner) * k * inner + r % inner;
            for (int64_t j = 0; j < k; j++) {
                int64_t o = obase + j * inner;
                memcpy(vb + o * (int64_t)es, row + a[j].idx * tstride * (int64_t)es, es);
                ib[o] = a[j].idx;
            }
        }
        free(a);
        free(tmp);
    }
    if (failed) return cr_fail(CR_ERR_OOM, "%s: out of memory for rows of %lld elements", op, (long long)n);
    return CR_OK;
}

static cr_status sort_like_op(cr_tensor **values, cr_tensor **indices, cr_op op, cr_tensor *t,
                              int64_t dim, int64_t k, bool descending) {
    cr_call c;
    cr_status st = cr_call_init(&c, op, 1, 2);
    if (st) return st;
    int64_t shape[CR_MAX_DIMS];
    memcpy(shape, t->shape, sizeof shape);
    if (t->ndim) shape[dim] = k;
    c.in[0] = t;
    c.i[0] = dim;
    c.i[1] = k;
    c.i[2] = descending;
    if ((st = cr_tensor_alloc(&c.out[0], t->ndim, shape, t->dtype, cr_tensor_dev(t))) ||
        (st = cr_tensor_alloc(&c.out[1], t->ndim, shape, CR_DT_I64, cr_tensor_dev(t)))) {
        cr_call_drop_outs(&c);
        return st;
    }
    if ((st = cr_call_finish(values, &c, 0, 1u << 1))) return st;
    *indices = c.out[1];
    return CR_OK;
}

/* Both rules: g scattered into zeros of the input's shape at the saved indices. */
static cr_status grad_scatter_back(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    const cr_input_meta *m = &n->in_meta[0];
    cr_tensor *idx, *z;
    cr_status st = cr_saved_out(n, 1, &idx);
    if (st) return st;
    if ((st = cr_full_on(&z, m->ndim, m->shape, 0.0, gout[0]->dtype, m->device))) return st;
    if (m->ndim == 0) { /* a 0-dim input: the one element's grad is g itself */
        cr_tensor_free(z);
        cr_tensor_retain(gout[0]);
        gin[0] = gout[0];
        return CR_OK;
    }
    st = cr_op_scatter_add(&gin[0], z, n->call.i[0], idx, gout[0]);
    cr_tensor_free(z);
    return st;
}

/* ---- sort ---------------------------------------------------------------------------------- */
cr_status cr_cpu_sort(cr_call *c) { return sort_rows(c, "sort", false); }
cr_status cr_op_sort(cr_tensor **values, cr_tensor **indices, cr_tensor *t, int64_t dim,
                     bool descending) {
    *values = *indices = NULL;
    CR_CHECK_TENSOR("sort", t, "self");
    cr_status st = cr_check_dim("sort", &dim, t->ndim, false);
    if (st) return st;
    return sort_like_op(values, indices, CR_OP_SORT, t, dim, t->ndim ? t->shape[dim] : 1,
                        descending);
}
cr_status cr_grad_sort(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    return grad_scatter_back(n, gout, gin);
}

/* ---- topk ---------------------------------------------------------------------------------- */
cr_status cr_cpu_topk(cr_call *c) { return sort_rows(c, "topk", true); }
cr_status cr_op_topk(cr_tensor **values, cr_tensor **indices, cr_tensor *t, int64_t k,
                     int64_t dim, bool largest, bool sorted) {
    (void)sorted; /* always sorted: the order costs little once the k are chosen */
    *values = *indices = NULL;
    CR_CHECK_TENSOR("topk", t, "self");
    cr_status st = cr_check_dim("topk", &dim, t->ndim, false);
    if (st) return st;
    int64_t n = t->ndim ? t->shape[dim] : 1;
    if (k < 0 || k > n || (t->ndim == 0 && k != 1)) {
        char b[160];
        return cr_fail(CR_ERR_ARG, "topk: k = %lld is out of range for dim %lld of size %lld "
                       "in shape %s (valid 0..%lld)", (long long)k, (long long)dim, (long long)n,
                       cr_shape_str(t, b, sizeof b), (long long)n);
    }
    return sort_like_op(values, indices, CR_OP_TOPK, t, dim, k, largest);
}
cr_status cr_grad_topk(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    return grad_scatter_back(n, gout, gin);
}
