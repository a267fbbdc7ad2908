/* ops/shape.h — views and joins: ops that move or share elements without arithmetic.
 * Views share storage with their input (and its version counter); their gradients
 * scatter back through the inverse geometry. */
#ifndef CR_OPS_SHAPE_H
#define CR_OPS_SHAPE_H

#define CR_OPS_SHAPE(X)                                                                                       \
    X(VIEW, "view", cr_cpu_view, cr_cpu_view, cr_grad_view, KEEP)                                             \
    X(PERMUTE, "permute", cr_cpu_view, cr_cpu_view, cr_grad_permute, KEEP)                                    \
    X(EXPAND, "expand", cr_cpu_view, cr_cpu_view, cr_grad_expand, KEEP)                                       \
    X(SLICE, "slice", cr_cpu_view, cr_cpu_view, cr_grad_slice, KEEP)                                          \
    X(CLONE, "clone", cr_cpu_clone, cr_gpu_clone, cr_grad_clone, KEEP)                                        \
    X(CAT, "cat", cr_cpu_cat, cr_cpu_cat, cr_grad_cat, KEEP)                                                  \
    X(TO_DEVICE, "to_device", cr_copy_to_device, cr_copy_to_device, cr_grad_to_device, KEEP)

/* view: same elements, new shape; one entry may be -1. Fails on a non-contiguous
 * input that cannot be viewed (use reshape). */
cr_status cr_op_view(cr_tensor **out, cr_tensor *t, int ndim, const int64_t *shape);
/* reshape: view when possible, else a contiguous copy. */
cr_status cr_op_reshape(cr_tensor **out, cr_tensor *t, int ndim, const int64_t *shape);
cr_status cr_op_permute(cr_tensor **out, cr_tensor *t, int ndim, const int64_t *dims);
cr_status cr_op_transpose(cr_tensor **out, cr_tensor *t, int64_t dim0, int64_t dim1);
/* expand: size-1 dims (or new leading dims) grow to `shape`; -1 keeps a size. */
cr_status cr_op_expand(cr_tensor **out, cr_tensor *t, int ndim, const int64_t *shape);
cr_status cr_op_squeeze(cr_tensor **out, cr_tensor *t, int64_t dim); /* dim<-ndim: all */
cr_status cr_op_unsqueeze(cr_tensor **out, cr_tensor *t, int64_t dim);
cr_status cr_op_flatten(cr_tensor **out, cr_tensor *t, int64_t start_dim, int64_t end_dim);
/* slice: elements start, start+step, ... < stop along dim (python semantics for
 * negative start/stop, clamped). narrow and select are slices. */
cr_status cr_op_slice(cr_tensor **out, cr_tensor *t, int64_t dim, int64_t start,
                      int64_t stop, int64_t step);
cr_status cr_op_narrow(cr_tensor **out, cr_tensor *t, int64_t dim, int64_t start,
                       int64_t length);
cr_status cr_op_select(cr_tensor **out, cr_tensor *t, int64_t dim, int64_t index);
/* contiguous: a new reference to t when already contiguous, else a clone. */
cr_status cr_op_contiguous(cr_tensor **out, cr_tensor *t);
cr_status cr_op_clone(cr_tensor **out, cr_tensor *t);
/* The same elements on another device (cuda:dev_index or the cpu), row-major; a new
 * reference to t when it is already there. non_blocking: a copy from pinned host memory
 * to a GPU returns before it finishes (later GPU work waits for it). Differentiable: the
 * grad goes back to t's device. */
cr_status cr_op_to_device(cr_tensor **out, cr_tensor *t, cr_devtype dev, int dev_index,
                          bool non_blocking);
/* A copy of a cpu tensor in page-locked memory (the source of asynchronous copies to a
 * GPU); t itself when it is pinned already. Needs the CUDA backend. */
cr_status cr_op_pin_memory(cr_tensor **out, cr_tensor *t);
cr_status cr_op_cat(cr_tensor **out, cr_tensor **ts, int n, int64_t dim);
cr_status cr_op_stack(cr_tensor **out, cr_tensor **ts, int n, int64_t dim);

#endif
