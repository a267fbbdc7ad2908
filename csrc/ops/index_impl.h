/* index_impl.h — what the index ops (index.c) share with their GPU kernels
 * (csrc/cuda/index.c): the words of the out-of-range error, so that a bad index reads the
 * same on every device. Private to crescent's C layers. */
#ifndef CR_INDEX_IMPL_H
#define CR_INDEX_IMPL_H

#include "internal.h"

/* What the index values of `op` range over, for the message: "dim 1" (index_select),
 * "dim 1 of self" (gather, scatter_add, index_add), "the weight's rows" (embedding),
 * "num_classes 10" (one_hot). arg: the dim, or num_classes for one_hot. */
const char *cr_index_range_name(cr_op op, int64_t arg, char *buf, size_t cap);

/* The error for index value `value` at flat (row-major) position `pos`, outside
 * [0, size) of `what`. */
cr_status cr_index_out_of_range(const char *op, int64_t value, int64_t pos, int64_t size,
                                const char *what);

#endif
