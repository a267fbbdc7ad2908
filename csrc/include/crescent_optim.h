/* crescent_optim.h — fused optimizer updates: one C call per optimizer step over every
 * parameter (SGD, LARS/LARC, AdamW), gradient norms, clipping and zeroing.
 *
 * The caller (lua/crescent/optim/) keeps one cr_optim_slot per parameter: the tensor,
 * its state buffers, its step count and its group's hyper-parameters. A step walks all
 * slots at once: the elements of every tensor are cut into fixed chunks and OpenMP
 * shares the chunks, so small tensors (biases) and big ones (conv weights) balance, and
 * the chunking (hence every f64 norm) does not depend on the thread count.
 *
 * Contract of every step function:
 *   - param: a contiguous CPU f32 or f64 tensor, written in place; its version counter
 *     is bumped. Nothing is recorded by autograd (the update is not an op).
 *   - grad: NULL means "the param's own .grad"; a slot whose grad is NULL is skipped
 *     (stepped = 0, step count unchanged). Grads must be contiguous, of the param's
 *     shape and dtype. grad_scale multiplies every grad as it is read (1/k for k
 *     accumulated micro-batches); grads themselves are never written.
 *   - buf1/buf2: state buffers (SGD/LARS: buf1 = momentum buffer; AdamW: buf1 = exp_avg,
 *     buf2 = exp_avg_sq). A NULL buffer that the update needs is allocated here and the
 *     slot then holds a new reference that the caller owns (release with cr_tensor_free).
 *   - step: incremented for each slot that was stepped.
 * Errors name the slot ("parameter 3"); the binding replaces that with the name. */
#ifndef CRESCENT_OPTIM_H
#define CRESCENT_OPTIM_H

typedef enum {
    CR_OPTIM_NESTEROV = 1,   /* SGD/LARS: Nesterov momentum */
    CR_OPTIM_LARS_ADAPT = 2, /* LARS: this tensor gets the trust ratio (else plain SGD) */
    CR_OPTIM_LARS_CLIP = 4   /* LARS: LARC clip mode, adaptive lr = min(ratio / lr, 1) */
} cr_optim_flag;

typedef struct {
    cr_tensor *param;
    cr_tensor *grad; /* NULL: param's .grad */
    cr_tensor *buf1;
    cr_tensor *buf2;
    int64_t step;
    double lr;
    double weight_decay;
    double momentum;          /* SGD/LARS */
    double dampening;         /* SGD/LARS */
    double beta1, beta2;      /* AdamW */
    double eps;               /* AdamW: added to sqrt(v_hat); LARS: in the ratio's denominator */
    double trust_coefficient; /* LARS */
    int32_t flags;            /* cr_optim_flag bits */
    int32_t stepped;          /* out: 1 when this slot was updated */
    double trust_ratio;       /* out (LARS): the adaptive multiplier applied, 1 if none */
} cr_optim_slot;

/* SGD, PyTorch semantics: d = g + wd*p; with momentum m: buf = d on the first step
 * (buf1 NULL), else buf = m*buf + (1 - dampening)*d; d = nesterov ? d + m*buf : buf;
 * p -= lr*d. */
cr_status cr_optim_sgd_step(cr_optim_slot *slots, int n, double grad_scale);

/* LARS in apex LARC form (SwAV/VISSL). For a slot with CR_OPTIM_LARS_ADAPT and
 * ||p|| != 0 and ||g|| != 0 (norms accumulated in f64):
 *   ratio = trust_coefficient * ||p|| / (||g|| + wd*||p|| + eps)
 *   clip mode: ratio = min(ratio / lr, 1)
 *   d = ratio * (g + wd*p), then SGD momentum on d with weight decay 0.
 * When a norm is zero, d = g (apex adds no weight decay then). A slot without the flag
 * (biases and norm weights when excluded) is a plain SGD slot: d = g + wd*p. */
cr_status cr_optim_lars_step(cr_optim_slot *slots, int n, double grad_scale);

/* AdamW, PyTorch semantics: step += 1; p *= 1 - lr*wd; m = m + (1 - b1)*(g - m);
 * v = b2*v + (1 - b2)*g*g; p -= lr/(1 - b1^step) * m / (sqrt(v)/sqrt(1 - b2^step) + eps).
 * Moments start at zero (buf1/buf2 NULL: allocated and zeroed). */
cr_status cr_optim_adamw_step(cr_optim_slot *slots, int n, double grad_scale);

/* Total norm of the grads of params[0..n) (params without a grad are skipped), each
 * grad scaled by grad_scale; norm_type > 0, or INFINITY for the max-abs norm. f64
 * accumulation, deterministic for any thread count. */
cr_status cr_optim_grad_norm(double *out, cr_tensor **params, int n, double norm_type,
                             double grad_scale);
/* PyTorch's clip_grad_norm_: total = grad_norm(...); when max_norm / (total + 1e-6) < 1
 * every grad is multiplied in place by that factor. *total receives the norm before
 * clipping (NaN/Inf pass through: the grads then become NaN, as in PyTorch). */
cr_status cr_optim_clip_grad_norm(double *total, cr_tensor **params, int n, double max_norm,
                                  double norm_type, double grad_scale);
/* Clamps every grad in place to [-clip, clip]. */
cr_status cr_optim_clip_grad_value(cr_tensor **params, int n, double clip);
/* Multiplies every grad in place by `scale`. */
cr_status cr_optim_scale_grads(cr_tensor **params, int n, double scale);
/* Sets every grad to zero in place (keeps the buffers; .grad = nil is done in Lua). */
cr_status cr_optim_zero_grads(cr_tensor **params, int n);

#endif
