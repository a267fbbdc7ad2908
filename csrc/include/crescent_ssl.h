/* crescent_ssl.h — numerical core of the self-supervised methods: SwAV's Sinkhorn-Knopp
 * (whole, and in steps so that a distributed run can all-reduce the sums between them)
 * and the fused momentum (EMA) update of a key/target encoder. Losses, queues and the
 * kNN classifier are composed from ops in lua/crescent/ssl/.
 *
 * ---- Sinkhorn-Knopp (SwAV's distributed_sinkhorn) ---------------------------------
 * scores [B, K] (the prototypes' outputs; f32/f64/f16/bf16, any strides) give the
 * codes q [B, K] in the scores' dtype, with every sample's row summing to 1 and every
 * prototype's column summing to B/K (B = Bglobal when distributed: the sum over ranks):
 *
 *   Q = exp(scores / eps)               (SwAV keeps it as K x B; here it stays B x K)
 *   Q /= sum(Q)                         [all-reduce: the total]
 *   repeat iters times:
 *     Q[:, k] /= sum_b Q[b, k] * K      [all-reduce: the K prototype sums]
 *     Q[b, :] /= sum_k Q[b, k] * Bglobal (each sample is on one rank: no reduction)
 *   return Q * Bglobal
 *
 * Stability: SwAV exponentiates the raw scores, which overflows (inf/inf = NaN) once a
 * score exceeds ~88 * eps in f32. Here each prototype's scores are shifted by that
 * prototype's max over the batch [all-reduce: MAX over ranks] before exp. The prototype
 * normalisation that follows divides that factor out exactly, so the result is SwAV's
 * in exact arithmetic, for any number of iterations (with 0 iterations one common shift,
 * the global max, is used instead). Q is kept in f64: every entry
 * lies in (0, 1] and each prototype has an entry 1, so prototype sums are >= 1. A sample
 * whose every score is more than ~700 * eps below each prototype's best underflows to an
 * all-zero row; its codes are then 0 (documented, never NaN). NaN or inf in the scores
 * propagate (the output has NaN), as in any op.
 * Sums accumulate in f64 over fixed blocks of rows, added in block order: results do
 * not depend on the thread count. GPU scores are copied to the host for the whole
 * algorithm and the codes copied back (the stepwise calls below take cpu tensors). Nothing is recorded by autograd (SwAV runs it under
 * no_grad); the output never requires grad. */
#ifndef CRESCENT_SSL_H
#define CRESCENT_SSL_H

/* Single process: the whole algorithm. out: [B, K] in the scores' dtype. */
cr_status cr_ssl_sinkhorn(cr_tensor **out, cr_tensor *scores, double eps, int iters);

/* The steps, for a distributed caller (world = 1 reproduces cr_ssl_sinkhorn):
 *   cr_ssl_sinkhorn_colmax(scores, m)          m[K] = max over the local batch
 *   (all-reduce MAX of m over ranks; with 0 iterations set every m[k] to max_k m[k])
 *   cr_ssl_sinkhorn_exp(&q, scores, m, eps, &t) q = exp((scores - m) / eps), f64 [B, K];
 *                                              t = sum(q)
 *   (all-reduce SUM of t)   cr_ssl_sinkhorn_scale(q, 1 / t)
 *   iters times:
 *     cr_ssl_sinkhorn_colsum(q, s)             s[K] = local prototype sums
 *     (all-reduce SUM of s)
 *     cr_ssl_sinkhorn_normalize(q, s, Bglobal) q[:, k] /= s[k] * K, then each row
 *                                              q[b, :] /= its sum * Bglobal
 *   cr_ssl_sinkhorn_finish(&out, q, Bglobal, dtype)   out = q * Bglobal in dtype
 * m and s are caller-owned arrays of K doubles. */
cr_status cr_ssl_sinkhorn_colmax(cr_tensor *scores, double *colmax);
cr_status cr_ssl_sinkhorn_exp(cr_tensor **q, cr_tensor *scores, const double *colmax,
                              double eps, double *total);
cr_status cr_ssl_sinkhorn_scale(cr_tensor *q, double factor);
cr_status cr_ssl_sinkhorn_colsum(cr_tensor *q, double *colsum);
cr_status cr_ssl_sinkhorn_normalize(cr_tensor *q, const double *colsum, double batch_global);
cr_status cr_ssl_sinkhorn_finish(cr_tensor **out, cr_tensor *q, double batch_global,
                                 cr_dtype dtype);

/* ---- momentum (EMA) update -----------------------------------------------------------
 * For every pair i: target[i] = m * target[i] + (1 - m) * source[i] (MoCo's key encoder,
 * BYOL's target network), in one call: the elements of all tensors are cut into fixed
 * chunks shared by OpenMP (on a GPU: two elementwise passes per pair). Contiguous f32/f64
 * tensors of equal shape, dtype and device; the
 * targets are written in place (their versions are bumped), nothing is recorded by
 * autograd. m in [0, 1]. Errors name the pair ("pair 3"); the binding puts the name in. */
cr_status cr_ssl_ema_update(cr_tensor **target, cr_tensor **source, int n, double m);
/* target[i] = source[i] exactly, for any dtype (buffers: BN running stats, counters). */
cr_status cr_ssl_copy_tensors(cr_tensor **target, cr_tensor **source, int n);

#endif
