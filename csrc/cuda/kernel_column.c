/* kernel_column.c (cuda) — the CUDA column of the op list (crescent_ops.h), generated from
 * the rows' cuda names: backend.c copies it into cr_kernel_table[op][CR_DEV_CUDA] when the
 * backend opens. Exported, so that spec/cuda_probe_spec.lua can check it on a machine
 * without a GPU. */
#include "cuda_impl.h"

#define GPU_KERNEL_ENTRY(E, name, kernel, cuda, rule, amp) [CR_OP_##E] = cuda,
const cr_kernel_fn cr_gpu_kernels[CR_OP_COUNT] = {CR_OPS(GPU_KERNEL_ENTRY)};
#undef GPU_KERNEL_ENTRY

/* What a row names for an op without a GPU kernel; backend.c leaves its entry empty, so
 * dispatch reports the op as missing. */
cr_status cr_gpu_none(cr_call *c) {
    return cr_fail(CR_ERR_DEVICE, "%s has no CUDA kernel", cr_op_name(c->op));
}
