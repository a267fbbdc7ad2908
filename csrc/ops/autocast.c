/* autocast.c — the mixed-precision policy: while autocast is set to f16 or
 * bf16, the ops that profit from half precision (matrix products, convolutions) cast f32
 * inputs down, and the ops that need range or accuracy (softmax, losses, norms,
 * reductions) cast half inputs up to f32, as each op's row in the op list says (its
 * autocast class, HALF or F32). The entries of those ops call the two helpers below; everything else runs in its inputs' dtypes, and mixed operands promote as usual
 * (bf16 + f32 gives f32). The casts are ordinary recorded ops, so grads flow back to the
 * f32 parameters in f32. cr_call_via_f32 serves the CPU kernels that compute bf16
 * natively but meet a problem their fast path declines. */
#include "elementwise_impl.h"

static __thread cr_dtype autocast_dtype = CR_DT_F32;

/* The weight cast cache: the half copy of an f32 leaf that requires grad (a parameter),
 * made once per autocast region and reused by its later uses (a trunk run on each crop
 * size of a multi-crop batch casts each weight once, and autograd sums the grads of its
 * uses before the one cast back), as PyTorch's autocast does. An entry holds the source
 * (retained, so its address names it) at one storage version, dtype and grad mode; the
 * cache empties when autocast is switched off, so it lives no longer than the region. */
enum { CAST_CACHE_SLOTS = 256 };
typedef struct {
    cr_tensor *src, *half;
    uint64_t version;
    cr_dtype dt;
    bool grad;
} cast_entry;
static __thread cast_entry cast_cache[CAST_CACHE_SLOTS];
static __thread int cast_cache_used;

static void cast_cache_clear(void) {
    for (int i = 0; i < cast_cache_used; i++) {
        cr_tensor_free(cast_cache[i].src);
        cr_tensor_free(cast_cache[i].half);
    }
    memset(cast_cache, 0, sizeof(cast_entry) * (size_t)cast_cache_used);
    cast_cache_used = 0;
}

/* *out: a new reference to t's cached half copy in dt, made on a miss (a full cache casts
 * without caching). */
static cr_status cached_cast(cr_tensor **out, cr_tensor *t, cr_dtype dt) {
    const bool grad = cr_grad_is_enabled();
    const uint64_t version = t->storage->version;
    for (int i = 0; i < cast_cache_used; i++) {
        cast_entry *e = &cast_cache[i];
        if (e->src == t && e->dt == dt && e->grad == grad && e->version == version) {
            cr_tensor_retain(e->half);
            *out = e->half;
            return CR_OK;
        }
    }
    cr_status st = cr_op_to(out, t, dt);
    if (st || cast_cache_used == CAST_CACHE_SLOTS) return st;
    cast_entry *e = &cast_cache[cast_cache_used++];
    cr_tensor_retain(t);
    cr_tensor_retain(*out);
    *e = (cast_entry){t, *out, version, dt, grad};
    return CR_OK;
}

cr_dtype cr_autocast_set(cr_dtype dt) {
    cr_dtype old = autocast_dtype;
    autocast_dtype = cr_dtype_is_half(dt) ? dt : CR_DT_F32;
    if (autocast_dtype != old) cast_cache_clear();
    return old;
}

cr_dtype cr_autocast_get(void) { return autocast_dtype; }

static cr_status cast_one(cr_tensor **out, cr_tensor *t, bool down, cr_dtype amp) {
    bool half = t && cr_dtype_is_half(t->dtype);
    if (t && down && t->dtype == CR_DT_F32 && t->requires_grad && !t->grad_fn && !t->is_view)
        return cached_cast(out, t, amp);
    if (t && down && t->dtype == CR_DT_F32) return cr_op_to(out, t, amp);
    if (t && !down && half) return cr_op_to(out, t, CR_DT_F32);
    cr_tensor_retain(t);
    *out = t;
    return CR_OK;
}

cr_status cr_autocast_begin(cr_autocast_scope *s, cr_op op, cr_tensor *a, cr_tensor *b, cr_tensor *c) {
    cr_tensor *in[3] = {a, b, c};
    cr_status st = CR_OK;
    bool down = cr_op_autocast_class(op) == CR_AMP_HALF;
    CR_ASSERT(cr_op_autocast_class(op) != CR_AMP_KEEP); /* the op's row must say HALF or F32 */
    s->prev = autocast_dtype;
    for (int k = 0; k < 3; k++) s->t[k] = NULL;
    for (int k = 0; k < 3 && !st; k++) st = cast_one(&s->t[k], in[k], down, s->prev);
    autocast_dtype = CR_DT_F32;
    return st;
}

void cr_autocast_end(cr_autocast_scope *s) {
    autocast_dtype = s->prev;
    for (int k = 0; k < 3; k++) cr_tensor_free(s->t[k]);
}

/* An f32 tensor in a half tensor's layout, holding its values when `copy` (t itself,
 * retained, when t is not half). */
static cr_status f32_copy(cr_tensor **out, cr_tensor *t, bool copy) {
    *out = NULL;
    if (!t) return CR_OK;
    if (t->dtype != CR_DT_F16 && t->dtype != CR_DT_BF16) {
        cr_tensor_retain(t);
        *out = t;
        return CR_OK;
    }
    cr_status st = cr_tensor_alloc_as(out, t->ndim, t->shape, CR_DT_F32, cr_tensor_dev(t), t);
    return st || !copy ? st : cr_copy_into(*out, t);
}

cr_status cr_call_via_f32(cr_call *c, cr_kernel_fn kernel) {
    enum { MAX_IN = 8 }; /* batch norm's backward has six */
    cr_call f = *c;
    cr_tensor *in[MAX_IN] = {0};
    if (c->nin > MAX_IN)
        return cr_fail(CR_ERR_UNSUPPORTED, "%s: no f32 route for %d inputs (crescent bug)",
                       cr_op_name(c->op), c->nin);
    f.in = in;
    cr_status st = CR_OK;
    for (int i = 0; i < c->nin && !st; i++) st = f32_copy(&in[i], c->in[i], true);
    for (int i = 0; i < c->nout; i++) f.out[i] = NULL;
    for (int i = 0; i < c->nout && !st; i++) st = f32_copy(&f.out[i], c->out[i], false);
    if (!st) st = kernel(&f);
    for (int i = 0; i < c->nout && !st; i++)
        if (f.out[i] && f.out[i] != c->out[i]) st = cr_copy_into(c->out[i], f.out[i]);
    for (int i = 0; i < c->nin; i++) cr_tensor_free(in[i]);
    for (int i = 0; i < c->nout; i++) cr_tensor_free(f.out[i]);
    return st;
}
