/* crescent_ops.h — the op list. One X-macro per family (in ops/<family>.h) lists
 * X(ENUM, "name", cpu_kernel, cuda_kernel, derivative_rule, autocast_class); this file
 * joins them into CR_OPS and generates the cr_op enum. ops/registry.c generates the names, the CPU column
 * of the dispatch table [op][device] and the table of derivative rules from the same
 * list, and the CUDA backend its column (cuda/kernel_column.c), so a reader sees every kernel
 * and every gradient in one place. An op that needs no GPU arithmetic (views, cat,
 * to_device) names its CPU function in both columns; one without a GPU kernel yet names
 * cr_gpu_none. The autocast class says what an op does under cr.autocast (f16/bf16):
 * HALF casts f32 inputs down (matrix products, convolutions), F32 casts half inputs up
 * (reductions, softmax, losses, norms), KEEP runs in the inputs' dtypes. The typed entry points (cr_op_*) are
 * declared beside each family's list. */
#ifndef CRESCENT_OPS_H
#define CRESCENT_OPS_H

#include "ops/shape.h"
#include "ops/creation.h"
#include "ops/elementwise.h"
#include "ops/reduce.h"
#include "ops/loss.h"
#include "ops/linalg.h"
#include "ops/conv.h"
#include "ops/norm.h"
#include "ops/index.h"

#define CR_OPS(X)                                                                    \
    CR_OPS_SHAPE(X)                                                                  \
    CR_OPS_CREATION(X)                                                               \
    CR_OPS_ELEMENTWISE(X)                                                            \
    CR_OPS_REDUCE(X)                                                                 \
    CR_OPS_LOSS(X)                                                                   \
    CR_OPS_LINALG(X)                                                                 \
    CR_OPS_CONV(X)                                                                   \
    CR_OPS_NORM(X)                                                                   \
    CR_OPS_INDEX(X)

#define CR_OP_ENUM_ENTRY(E, name, kernel, cuda, rule, amp) CR_OP_##E,
typedef enum { CR_OPS(CR_OP_ENUM_ENTRY) CR_OP_COUNT } cr_op;
#undef CR_OP_ENUM_ENTRY

/* The autocast class of the op list's last column. */
typedef enum { CR_AMP_KEEP = 0, CR_AMP_HALF, CR_AMP_F32 } cr_amp_class;
/* An op's autocast class (CR_AMP_KEEP for an op out of range). */
cr_amp_class cr_op_autocast_class(cr_op op);

/* Fast paths (oneDNN, fused kernels) on by default; specs turn them off to compare
 * against the plain reference kernels. Returns the previous value. */
bool cr_set_fast_paths(bool enabled);
bool cr_fast_paths_enabled(void);
/* Whether the cpu computes bf16 convolutions and matrix products natively (oneDNN on a CPU
 * with AVX512-BF16, fast paths on); otherwise they run on f32 copies. */
bool cr_cpu_bf16_native(void);

#endif
