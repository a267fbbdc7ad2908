/* ops/index.h — gathers, scatters, embeddings, sorting and one-hot. Index tensors are
 * i64 (i32 accepted), any strides; every value is checked first, and one outside
 * [0, size) is an error naming it and the valid range, never a read or write out of
 * bounds. Scatters add repeated indices in index order on one thread, so results do not
 * depend on the thread count. Derivatives: index_select -> index_add into zeros; gather
 * -> scatter_add into zeros; scatter_add/index_add -> g for self, gather/index_select of
 * g for src; embedding -> index_add of rows; sort/topk -> g scattered at the indices. */
#ifndef CR_OPS_INDEX_H
#define CR_OPS_INDEX_H

#define CR_OPS_INDEX(X)                                                                                       \
    X(INDEX_SELECT, "index_select", cr_cpu_index_select, cr_gpu_index_select, cr_grad_index_select, KEEP)     \
    X(GATHER, "gather", cr_cpu_gather, cr_gpu_gather, cr_grad_gather, KEEP)                                   \
    X(SCATTER_ADD, "scatter_add", cr_cpu_scatter_add, cr_gpu_scatter_add, cr_grad_scatter_add, KEEP)          \
    X(INDEX_ADD, "index_add", cr_cpu_index_add, cr_gpu_index_add, cr_grad_index_add, KEEP)                    \
    X(EMBEDDING, "embedding", cr_cpu_embedding, cr_gpu_embedding, cr_grad_embedding, KEEP)                    \
    X(TOPK, "topk", cr_cpu_topk, cr_gpu_sort_rows, cr_grad_topk, KEEP)                                        \
    X(SORT, "sort", cr_cpu_sort, cr_gpu_sort_rows, cr_grad_sort, KEEP)                                        \
    X(ONE_HOT, "one_hot", cr_cpu_one_hot, cr_gpu_one_hot, cr_grad_none, KEEP)                                 \

/* t.index_select(dim, index[k]) */
cr_status cr_op_index_select(cr_tensor **out, cr_tensor *t, int64_t dim, cr_tensor *index);
/* out[i][j] = t[index[i][j]][j] for dim 0, etc.; index has t's ndim and is no larger
 * than t in the other dims; out has index's shape. */
cr_status cr_op_gather(cr_tensor **out, cr_tensor *t, int64_t dim, cr_tensor *index);
/* t + src[i][j] added at t[index[i][j]][j] for dim 0, etc.; index no larger than src in
 * any dim nor than t outside dim. Out of place. */
cr_status cr_op_scatter_add(cr_tensor **out, cr_tensor *t, int64_t dim, cr_tensor *index,
                            cr_tensor *src);
/* t + src rows added at index along dim. Out of place (grad of index_select). */
cr_status cr_op_index_add(cr_tensor **out, cr_tensor *t, int64_t dim, cr_tensor *index,
                          cr_tensor *src);
/* weight [V, D] rows picked by idx of any shape: out [..., D]. */
cr_status cr_op_embedding(cr_tensor **out, cr_tensor *weight, cr_tensor *idx);
/* The k largest (smallest) along dim, always in sorted order (`sorted` = false is
 * accepted); ties keep the lower index first; NaN counts as the largest. */
cr_status cr_op_topk(cr_tensor **values, cr_tensor **indices, cr_tensor *t, int64_t k,
                     int64_t dim, bool largest, bool sorted);
/* Stable sort along dim (NaN last ascending, first descending; -0 equals 0). */
cr_status cr_op_sort(cr_tensor **values, cr_tensor **indices, cr_tensor *t, int64_t dim,
                     bool descending);
/* idx (integer) -> i64 [..., num_classes]; num_classes < 0 means max(idx)+1. */
cr_status cr_op_one_hot(cr_tensor **out, cr_tensor *idx, int64_t num_classes);

#endif
