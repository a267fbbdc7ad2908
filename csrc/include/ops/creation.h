/* ops/creation.h — tensors made from nothing: constants, ranges and random draws.
 * Random ops draw from the global Philox generator (seed, offset); each call takes the
 * next counters, so the same seed gives the same numbers on CPU and GPU, for
 * any thread count. Which words make which element is specified in csrc/core/rng.h; the
 * entry records its reservation in the call (c->i[0] = seed, c->i[1] = first counter),
 * so a kernel for another device draws the same words. Every entry makes its tensor on
 * device (dev, dev_index): CR_DEV_CPU with 0, or CR_DEV_CUDA with the GPU's index. */
#ifndef CR_OPS_CREATION_H
#define CR_OPS_CREATION_H

#define CR_OPS_CREATION(X)                                                                                    \
    X(FILL, "fill_", cr_cpu_fill, cr_gpu_fill, cr_grad_none, KEEP)                                            \
    X(ARANGE, "arange", cr_cpu_arange, cr_gpu_arange, cr_grad_none, KEEP)                                     \
    X(EYE, "eye", cr_cpu_eye, cr_gpu_eye, cr_grad_none, KEEP)                                                 \
    X(RAND, "rand", cr_cpu_rand, cr_gpu_rand, cr_grad_none, KEEP)                                             \
    X(RANDN, "randn", cr_cpu_randn, cr_gpu_randn, cr_grad_none, KEEP)                                         \
    X(RANDINT, "randint", cr_cpu_randint, cr_gpu_randint, cr_grad_none, KEEP)                                 \
    X(RANDPERM, "randperm", cr_cpu_randperm, cr_gpu_randperm, cr_grad_none, KEEP)                             \
    X(BERNOULLI, "bernoulli", cr_cpu_bernoulli, cr_gpu_bernoulli, cr_grad_none, KEEP)                         \

cr_status cr_op_full(cr_tensor **out, int ndim, const int64_t *shape, double value,
                     cr_dtype dt, cr_devtype dev, int dev_index);
/* In place: every element of t becomes value (t may be a strided view). */
cr_status cr_op_fill_(cr_tensor *t, double value);
/* start, start+step, ... below end (above it for a negative step): ceil((end-start)/step)
 * values, each start + i*step (exact in i64 for integer arguments). */
cr_status cr_op_arange(cr_tensor **out, double start, double end, double step, cr_dtype dt,
                       cr_devtype dev, int dev_index);
/* n x m, ones on the diagonal. */
cr_status cr_op_eye(cr_tensor **out, int64_t n, int64_t m, cr_dtype dt, cr_devtype dev,
                    int dev_index);
/* Uniform [0, 1); float dtypes only. */
cr_status cr_op_rand(cr_tensor **out, int ndim, const int64_t *shape, cr_dtype dt,
                     cr_devtype dev, int dev_index);
/* Standard normal (Box-Muller on pairs of uniforms); float dtypes only. */
cr_status cr_op_randn(cr_tensor **out, int ndim, const int64_t *shape, cr_dtype dt,
                      cr_devtype dev, int dev_index);
/* Integers uniform in [low, high), in any dtype that holds the range exactly. */
cr_status cr_op_randint(cr_tensor **out, int64_t low, int64_t high, int ndim,
                        const int64_t *shape, cr_dtype dt, cr_devtype dev, int dev_index);
/* A random permutation of 0..n-1 (a stable sort of random keys). */
cr_status cr_op_randperm(cr_tensor **out, int64_t n, cr_dtype dt, cr_devtype dev, int dev_index);
/* Each element 1 with probability p[i] (a float tensor in [0,1]), else 0; same shape and
 * dtype as p. No gradient flows to p. */
cr_status cr_op_bernoulli(cr_tensor **out, cr_tensor *p);
/* Same, with one probability for all elements of the given shape. */
cr_status cr_op_bernoulli_scalar(cr_tensor **out, double p, int ndim, const int64_t *shape,
                                 cr_dtype dt, cr_devtype dev, int dev_index);

#endif
