/* device_copy.c — tensors between the cpu and GPUs: to(device) and pin_memory. The one
 * op whose input and output sit on different devices, so it runs its copy itself rather
 * than through the dispatch table; the bytes move through the CUDA backend. */
#include "cuda_backend.h"
#include "elementwise_impl.h"

static cr_status check_target(cr_devtype dev, int index) {
    if (dev == CR_DEV_CPU && index == 0) return CR_OK;
    if (dev == CR_DEV_CUDA && index >= 0) return CR_OK;
    return cr_fail(CR_ERR_ARG, "to_device: invalid device (type %d, index %d); use 'cpu' or "
                   "'cuda:N' with N >= 0", (int)dev, index);
}

/* Kernel: c->in[0] (contiguous) -> c->out[0] (fresh, contiguous, on the target device);
 * c->i[2] is non_blocking. */
cr_status cr_copy_to_device(cr_call *c) {
    cr_tensor *src = c->in[0], *dst = c->out[0];
    size_t bytes = (size_t)src->numel * cr_dtype_size(src->dtype);
    if (!bytes) return CR_OK;
    const cr_cuda_backend *be = cr_cuda_backend_get();
    if (!be) return CR_ERR_DEVICE;
    int sd = cr_tensor_on_cpu(src) ? -1 : src->storage->device_index;
    int dd = cr_tensor_on_cpu(dst) ? -1 : dst->storage->device_index;
    return be->copy(cr_tensor_ptr(dst), dd, cr_tensor_ptr(src), sd, bytes, c->i[2] != 0);
}

cr_status cr_op_to_device(cr_tensor **out, cr_tensor *t, cr_devtype dev, int dev_index,
                          bool non_blocking) {
    *out = NULL;
    CR_CHECK_TENSOR("to_device", t, "self");
    cr_status st = check_target(dev, dev_index);
    if (st) return st;
    cr_device target = {dev, dev_index};
    if (t->storage->device == dev && t->storage->device_index == dev_index) {
        cr_tensor_retain(t);
        *out = t;
        return CR_OK;
    }
    cr_tensor *src;
    if ((st = cr_op_contiguous(&src, t))) return st;
    cr_call c;
    cr_call_init(&c, CR_OP_TO_DEVICE, 1, 1);
    c.in[0] = src;
    c.i[0] = src->storage->device; /* where the grad goes back to */
    c.i[1] = src->storage->device_index;
    c.i[2] = non_blocking && src->storage->pinned;
    st = cr_tensor_alloc(&c.out[0], t->ndim, t->shape, t->dtype, target);
    if (!st) st = cr_copy_to_device(&c);
    if (!st) st = cr_autograd_record(&c, 0, 0);
    cr_tensor_free(src);
    if (st) {
        cr_call_drop_outs(&c);
        return st;
    }
    *out = c.out[0];
    return CR_OK;
}

cr_status cr_grad_to_device(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    return cr_op_to_device(&gin[0], gout[0], (cr_devtype)n->call.i[0], (int)n->call.i[1], false);
}

cr_status cr_op_pin_memory(cr_tensor **out, cr_tensor *t) {
    *out = NULL;
    CR_CHECK_TENSOR("pin_memory", t, "self");
    if (!cr_tensor_on_cpu(t)) {
        char b[32];
        return cr_fail(CR_ERR_DEVICE, "pin_memory: the tensor is on %s; only cpu tensors can be "
                       "pinned", cr_device_str(cr_tensor_dev(t), b, sizeof b));
    }
    if (t->storage->pinned) {
        cr_tensor_retain(t);
        *out = t;
        return CR_OK;
    }
    cr_status st = cr_tensor_alloc_pinned(out, t->ndim, t->shape, t->dtype);
    if (!st) st = cr_copy_into(*out, t);
    if (st) {
        cr_tensor_free(*out);
        *out = NULL;
    }
    return st;
}
