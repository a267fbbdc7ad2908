/* shape.c — views (view, reshape, permute, transpose, expand, squeeze, unsqueeze,
 * flatten, slice/narrow/select), clone/contiguous, and cat/stack. A view is an alias of
 * its input's storage with new geometry; its derivative maps the grad back through the
 * inverse geometry. */
#include "elementwise_impl.h"

cr_status cr_cpu_view(cr_call *c) { /* the geometry was set by the op; nothing to compute */
    (void)c;
    return CR_OK;
}

/* Records a view: out aliases in with the given geometry. */
static cr_status make_view(cr_tensor **out, cr_op op, cr_tensor *t, int ndim,
                           const int64_t *shape, const int64_t *stride, int64_t offset,
                           const int64_t *iparams, int niparams) {
    int64_t numel = 1;
    for (int d = 0; d < ndim; d++)
        if (__builtin_mul_overflow(numel, shape[d], &numel)) {
            char b[160];
            return cr_fail(CR_ERR_ARG, "%s: a view of shape %s would have more than 2^63 elements",
                           cr_op_name(op), cr_dims_str(ndim, shape, b, sizeof b));
        }
    cr_call c;
    cr_status st = cr_call_init(&c, op, 1, 1);
    if (st) return st;
    c.in[0] = t;
    for (int k = 0; k < niparams; k++) c.i[k] = iparams[k];
    c.out[0] = cr_tensor_alias(t, ndim, shape, stride, offset);
    c.out[0]->is_view = true;
    return cr_call_finish(out, &c, 0, 0);
}

/* Resolves one -1 entry and checks the element count. */
static cr_status infer_shape(const char *op, const cr_tensor *t, int ndim, const int64_t *in,
                             int64_t *shape) {
    if (ndim < 0 || ndim > CR_MAX_DIMS || (ndim > 0 && !in))
        return cr_fail(CR_ERR_ARG, "%s: a shape of %d dims; give 0..%d sizes", op, ndim,
                       CR_MAX_DIMS);
    int infer = -1;
    int64_t known = 1;
    for (int d = 0; d < ndim; d++) {
        if (in[d] == -1) {
            if (infer >= 0)
                return cr_fail(CR_ERR_ARG, "%s: only one dimension can be -1", op);
            infer = d;
        } else if (in[d] < 0) {
            return cr_fail(CR_ERR_ARG, "%s: invalid size %lld at dim %d", op, (long long)in[d], d);
        } else {
            known *= in[d];
        }
        shape[d] = in[d];
    }
    if (infer >= 0) {
        if (known == 0 || t->numel % known) {
            char b[160];
            return cr_fail(CR_ERR_ARG, "%s: cannot infer the -1 size: %lld elements do not "
                           "divide into shape %s", op, (long long)t->numel,
                           cr_dims_str(ndim, in, b, sizeof b));
        }
        shape[infer] = t->numel / known;
        known *= shape[infer];
    }
    if (known != t->numel) {
        char a[160], b[160];
        return cr_fail(CR_ERR_ARG, "%s: shape %s is invalid for a tensor of shape %s (%lld "
                       "elements)", op, cr_dims_str(ndim, shape, a, sizeof a),
                       cr_shape_str(t, b, sizeof b), (long long)t->numel);
    }
    return CR_OK;
}

/* Strides that make `shape` a view of t, or false (PyTorch's chunk-wise rule). */
static bool view_strides(const cr_tensor *t, int ndim, const int64_t *shape, int64_t *stride) {
    if (t->numel == 0 || cr_tensor_is_contiguous(t)) {
        cr_contiguous_strides(ndim, shape, stride);
        return true;
    }
    int on = t->ndim;
    const int64_t *os = t->shape, *ost = t->stride;
    int view_d = ndim - 1;
    int64_t chunk_base = ost[on - 1], tensor_numel = 1, view_numel = 1;
    for (int td = on - 1; td >= 0; td--) {
        tensor_numel *= os[td];
        if (td == 0 || (os[td - 1] != 1 && ost[td - 1] != tensor_numel * chunk_base)) {
            while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
                stride[view_d] = view_numel * chunk_base;
                view_numel *= shape[view_d];
                view_d--;
            }
            if (view_numel != tensor_numel) return false;
            if (td > 0) {
                chunk_base = ost[td - 1];
                tensor_numel = 1;
                view_numel = 1;
            }
        }
    }
    return view_d == -1;
}

cr_status cr_op_view(cr_tensor **out, cr_tensor *t, int ndim, const int64_t *shape_in) {
    CR_CHECK_TENSOR("view", t, "self");
    int64_t shape[CR_MAX_DIMS], stride[CR_MAX_DIMS];
    cr_status st = infer_shape("view", t, ndim, shape_in, shape);
    if (st) return st;
    if (!view_strides(t, ndim, shape, stride)) {
        char a[160], b[160];
        return cr_fail(CR_ERR_ARG, "view: a non-contiguous tensor of shape %s cannot be viewed "
                       "as %s; use :reshape() (copies) or :contiguous() first",
                       cr_shape_str(t, a, sizeof a), cr_dims_str(ndim, shape, b, sizeof b));
    }
    return make_view(out, CR_OP_VIEW, t, ndim, shape, stride, t->offset, NULL, 0);
}
cr_status cr_grad_view(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    return cr_op_reshape(&gin[0], gout[0], n->in_meta[0].ndim, n->in_meta[0].shape);
}

cr_status cr_op_reshape(cr_tensor **out, cr_tensor *t, int ndim, const int64_t *shape_in) {
    CR_CHECK_TENSOR("reshape", t, "self");
    int64_t shape[CR_MAX_DIMS], stride[CR_MAX_DIMS];
    cr_status st = infer_shape("reshape", t, ndim, shape_in, shape);
    if (st) return st;
    if (view_strides(t, ndim, shape, stride)) return cr_op_view(out, t, ndim, shape);
    cr_tensor *c;
    if ((st = cr_op_clone(&c, t))) return st;
    st = cr_op_view(out, c, ndim, shape);
    cr_tensor_free(c);
    return st;
}

cr_status cr_op_permute(cr_tensor **out, cr_tensor *t, int ndim, const int64_t *dims) {
    CR_CHECK_TENSOR("permute", t, "self");
    if (ndim != t->ndim || (ndim && !dims))
        return cr_fail(CR_ERR_ARG, "permute: %d dims given for a %d-dim tensor; give each dim "
                       "once", ndim, t->ndim);
    int64_t shape[CR_MAX_DIMS], stride[CR_MAX_DIMS], norm[CR_MAX_DIMS];
    bool seen[CR_MAX_DIMS] = {false};
    for (int d = 0; d < ndim; d++) {
        int64_t s = dims[d];
        cr_status st = cr_check_dim("permute", &s, ndim, false);
        if (st) return st;
        if (seen[s]) return cr_fail(CR_ERR_ARG, "permute: dim %lld repeated", (long long)s);
        seen[s] = true;
        norm[d] = s;
        shape[d] = t->shape[s];
        stride[d] = t->stride[s];
    }
    return make_view(out, CR_OP_PERMUTE, t, ndim, shape, stride, t->offset, norm, ndim);
}
cr_status cr_grad_permute(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    int nd = n->in_meta[0].ndim;
    int64_t inv[CR_MAX_DIMS];
    for (int d = 0; d < nd; d++) inv[n->call.i[d]] = d;
    return cr_op_permute(&gin[0], gout[0], nd, inv);
}

cr_status cr_op_transpose(cr_tensor **out, cr_tensor *t, int64_t d0, int64_t d1) {
    CR_CHECK_TENSOR("transpose", t, "self");
    cr_status st;
    if ((st = cr_check_dim("transpose", &d0, t->ndim, false)) ||
        (st = cr_check_dim("transpose", &d1, t->ndim, false)))
        return st;
    int64_t dims[CR_MAX_DIMS];
    for (int d = 0; d < t->ndim; d++) dims[d] = d;
    if (t->ndim == 0) {
        cr_tensor_retain(t);
        *out = t;
        return CR_OK;
    }
    dims[d0] = d1;
    dims[d1] = d0;
    return cr_op_permute(out, t, t->ndim, dims);
}

cr_status cr_op_expand(cr_tensor **out, cr_tensor *t, int ndim, const int64_t *shape_in) {
    CR_CHECK_TENSOR("expand", t, "self");
    if (ndim < t->ndim || ndim > CR_MAX_DIMS || (ndim && !shape_in)) {
        char a[160];
        return cr_fail(CR_ERR_ARG, "expand: %d sizes given for a tensor of shape %s; give at "
                       "least as many sizes as it has dims", ndim, cr_shape_str(t, a, sizeof a));
    }
    int64_t shape[CR_MAX_DIMS], stride[CR_MAX_DIMS];
    int lead = ndim - t->ndim;
    for (int d = 0; d < ndim; d++) {
        int ds = d - lead;
        int64_t want = shape_in[d];
        if (ds < 0) {
            if (want < 0)
                return cr_fail(CR_ERR_ARG, "expand: size -1 is not allowed for a new leading dim");
            shape[d] = want;
            stride[d] = 0;
            continue;
        }
        int64_t have = t->shape[ds];
        if (want == -1) want = have;
        if (want != have && have != 1) {
            char a[160], b[160];
            return cr_fail(CR_ERR_ARG, "expand: shape %s cannot expand to %s: dim %d has size "
                           "%lld, only size-1 dims expand", cr_shape_str(t, a, sizeof a),
                           cr_dims_str(ndim, shape_in, b, sizeof b), d, (long long)have);
        }
        if (want < 0) return cr_fail(CR_ERR_ARG, "expand: negative size %lld", (long long)want);
        shape[d] = want;
        stride[d] = have == want ? t->stride[ds] : 0;
    }
    return make_view(out, CR_OP_EXPAND, t, ndim, shape, stride, t->offset, NULL, 0);
}
cr_status cr_grad_expand(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    return cr_sum_to_shape(&gin[0], gout[0], n->in_meta[0].ndim, n->in_meta[0].shape);
}

cr_status cr_op_squeeze(cr_tensor **out, cr_tensor *t, int64_t dim) {
    CR_CHECK_TENSOR("squeeze", t, "self");
    int64_t shape[CR_MAX_DIMS];
    int n = 0;
    bool all = dim < -(int64_t)t->ndim - (t->ndim == 0);
    if (!all) {
        cr_status st = cr_check_dim("squeeze", &dim, t->ndim, false);
        if (st) return st;
    }
    for (int d = 0; d < t->ndim; d++)
        if (!(t->shape[d] == 1 && (all || d == dim))) shape[n++] = t->shape[d];
    return cr_op_view(out, t, n, shape);
}

cr_status cr_op_unsqueeze(cr_tensor **out, cr_tensor *t, int64_t dim) {
    CR_CHECK_TENSOR("unsqueeze", t, "self");
    cr_status st = cr_check_dim("unsqueeze", &dim, t->ndim, true);
    if (st) return st;
    if (t->ndim == CR_MAX_DIMS)
        return cr_fail(CR_ERR_ARG, "unsqueeze: the tensor already has the maximum %d dims",
                       CR_MAX_DIMS);
    int64_t shape[CR_MAX_DIMS];
    int n = 0;
    for (int d = 0; d <= t->ndim; d++) {
        if (d == dim) shape[n++] = 1;
        if (d < t->ndim) shape[n++] = t->shape[d];
    }
    return cr_op_view(out, t, n, shape);
}

cr_status cr_op_flatten(cr_tensor **out, cr_tensor *t, int64_t start, int64_t end) {
    CR_CHECK_TENSOR("flatten", t, "self");
    if (t->ndim == 0) {
        int64_t one = 1;
        return cr_op_reshape(out, t, 1, &one);
    }
    cr_status st;
    if ((st = cr_check_dim("flatten", &start, t->ndim, false)) ||
        (st = cr_check_dim("flatten", &end, t->ndim, false)))
        return st;
    if (start > end)
        return cr_fail(CR_ERR_ARG, "flatten: start_dim %lld comes after end_dim %lld",
                       (long long)start, (long long)end);
    int64_t shape[CR_MAX_DIMS];
    int n = 0;
    for (int d = 0; d < t->ndim; d++) {
        if (d <= start || d > end) shape[n++] = t->shape[d];
        else shape[n - 1] *= t->shape[d];
    }
    return cr_op_reshape(out, t, n, shape);
}

cr_status cr_op_slice(cr_tensor **out, cr_tensor *t, int64_t dim, int64_t start, int64_t stop,
                      int64_t step) {
    CR_CHECK_TENSOR("slice", t, "self");
    cr_status st = cr_check_dim("slice", &dim, t->ndim, false);
    if (st) return st;
    if (t->ndim == 0) return cr_fail(CR_ERR_ARG, "slice: cannot slice a 0-dim tensor");
    if (step <= 0)
        return cr_fail(CR_ERR_ARG, "slice: step must be positive (got %lld)", (long long)step);
    int64_t n = t->shape[dim];
    if (start < 0) start += n;
    if (stop < 0) stop += n;
    start = start < 0 ? 0 : start > n ? n : start;
    stop = stop < start ? start : stop > n ? n : stop;
    int64_t shape[CR_MAX_DIMS], stride[CR_MAX_DIMS];
    memcpy(shape, t->shape, sizeof shape);
    memcpy(stride, t->stride, sizeof stride);
    int64_t span = stop - start;
    shape[dim] = span / step + (span % step != 0);
    /* one element or none: the stride is never stepped, so a huge step cannot overflow it */
    if (__builtin_mul_overflow(t->stride[dim], step, &stride[dim])) stride[dim] = t->stride[dim];
    int64_t p[3] = {dim, start, step};
    return make_view(out, CR_OP_SLICE, t, t->ndim, shape, stride,
                     t->offset + start * t->stride[dim], p, 3);
}
/* The grad of a slice is zeros with the grad copied into the sliced region. */
cr_status cr_grad_slice(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    const cr_input_meta *m = &n->in_meta[0];
    cr_tensor *z, *region;
    cr_status st = cr_full_on(&z, m->ndim, m->shape, 0.0, gout[0]->dtype, m->device);
    if (st) return st;
    int64_t dim = n->call.i[0], start = n->call.i[1], step = n->call.i[2];
    int64_t stop = start + gout[0]->shape[dim] * step;
    if (stop > m->shape[dim]) stop = m->shape[dim];
    if ((st = cr_op_slice(&region, z, dim, start, stop, step))) {
        cr_tensor_free(z);
        return st;
    }
    st = cr_op_copy_(region, gout[0]);
    cr_tensor_free(region);
    if (st) {
        cr_tensor_free(z);
        return st;
    }
    gin[0] = z;
    return CR_OK;
}

cr_status cr_op_narrow(cr_tensor **out, cr_tensor *t, int64_t dim, int64_t start,
                       int64_t length) {
    CR_CHECK_TENSOR("narrow", t, "self");
    cr_status st = cr_check_dim("narrow", &dim, t->ndim, false);
    if (st) return st;
    int64_t n = t->ndim ? t->shape[dim] : 0;
    if (start < 0) start += n;
    if (start < 0 || length < 0 || start > n || length > n - start)
        return cr_fail(CR_ERR_ARG, "narrow: start %lld and length %lld do not fit dim %lld of "
                       "size %lld", (long long)start, (long long)length, (long long)dim,
                       (long long)n);
    return cr_op_slice(out, t, dim, start, start + length, 1);
}

cr_status cr_op_select(cr_tensor **out, cr_tensor *t, int64_t dim, int64_t index) {
    CR_CHECK_TENSOR("select", t, "self");
    cr_status st = cr_check_dim("select", &dim, t->ndim, false);
    if (st) return st;
    if (t->ndim == 0) return cr_fail(CR_ERR_ARG, "select: cannot index a 0-dim tensor");
    int64_t n = t->shape[dim];
    if (index < -n || index >= n)
        return cr_fail(CR_ERR_ARG, "select: index %lld out of range for dim %lld of size %lld",
                       (long long)index, (long long)dim, (long long)n);
    if (index < 0) index += n;
    cr_tensor *s;
    if ((st = cr_op_slice(&s, t, dim, index, index + 1, 1))) return st;
    st = cr_op_squeeze(out, s, dim);
    cr_tensor_free(s);
    return st;
}

/* ---- clone / contiguous ---- */
cr_status cr_cpu_clone(cr_call *c) {
    cr_call u = *c;
    u.in = u.in_small;
    u.op = CR_OP_COPY_;
    return cr_cpu_copy_(&u);
}
cr_status cr_op_clone(cr_tensor **out, cr_tensor *t) {
    CR_CHECK_TENSOR("clone", t, "self");
    return cr_unary_op(out, CR_OP_CLONE, t, t->dtype, NULL, 0, 0, 0);
}
cr_status cr_grad_clone(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    (void)n;
    cr_tensor_retain(gout[0]);
    gin[0] = gout[0];
    return CR_OK;
}
cr_status cr_op_contiguous(cr_tensor **out, cr_tensor *t) {
    CR_CHECK_TENSOR("contiguous", t, "self");
    if (cr_tensor_is_contiguous(t)) {
        cr_tensor_retain(t);
        *out = t;
        return CR_OK;
    }
    return cr_op_clone(out, t);
}

/* ---- cat / stack ---- */
cr_status cr_cpu_cat(cr_call *c) {
    int64_t dim = c->i[0], pos = 0;
    for (int k = 0; k < c->nin; k++) {
        cr_tensor *src = c->in[k];
        if (src->ndim == 1 && src->shape[0] == 0 && c->out[0]->ndim > 1) continue;
        cr_tensor *dst = cr_tensor_alias(c->out[0], c->out[0]->ndim, c->out[0]->shape,
                                         c->out[0]->stride,
                                         c->out[0]->offset + pos * c->out[0]->stride[dim]);
        dst->shape[dim] = src->shape[dim];
        dst->numel = cr_shape_numel(dst->ndim, dst->shape);
        cr_status st = cr_copy_into(dst, src);
        cr_tensor_free(dst);
        if (st) return st;
        pos += src->shape[dim];
    }
    return CR_OK;
}

cr_status cr_op_cat(cr_tensor **out, cr_tensor **ts, int n, int64_t dim) {
    *out = NULL;
    if (n <= 0 || !ts) return cr_fail(CR_ERR_ARG, "cat: expected a non-empty list of tensors");
    for (int k = 0; k < n; k++)
        if (!ts[k]) return cr_fail(CR_ERR_ARG, "cat: tensor %d of the list is nil", k + 1);
    /* legacy rule: 1-D empty tensors are skipped */
    cr_tensor *ref = ts[0];
    for (int k = 0; k < n; k++)
        if (!(ts[k]->ndim == 1 && ts[k]->shape[0] == 0)) {
            ref = ts[k];
            break;
        }
    cr_status st = cr_check_dim("cat", &dim, ref->ndim, false);
    if (st) return st;
    if (ref->ndim == 0) return cr_fail(CR_ERR_ARG, "cat: 0-dim tensors cannot be joined; use stack");
    int64_t shape[CR_MAX_DIMS];
    memcpy(shape, ref->shape, sizeof shape);
    shape[dim] = 0;
    cr_dtype dt = ref->dtype;
    /* channels-last inputs give a channels-last result (as PyTorch's cat), so a split
     * BatchNorm's or a multi-crop batch's cat costs the next conv no layout change */
    bool channels_last = ref->ndim == 4;
    for (int k = 0; k < n; k++) {
        cr_tensor *t = ts[k];
        if (t->ndim == 1 && t->shape[0] == 0 && ref->ndim > 1) continue;
        channels_last = channels_last && cr_tensor_is_channels_last(t);
        if ((st = cr_check_same_device("cat", ref, t))) return st;
        bool ok = t->ndim == ref->ndim;
        for (int d = 0; ok && d < t->ndim; d++)
            if (d != dim && t->shape[d] != ref->shape[d]) ok = false;
        if (!ok) {
            char a[160], b[160];
            return cr_fail(CR_ERR_ARG, "cat: tensor %d has shape %s but tensor 1 has %s; all "
                           "sizes except dim %lld must match", k + 1, cr_shape_str(t, a, sizeof a),
                           cr_shape_str(ref, b, sizeof b), (long long)dim);
        }
        shape[dim] += t->shape[dim];
        dt = cr_dtype_promote(dt, t->dtype);
    }
    cr_call c;
    if ((st = cr_call_init(&c, CR_OP_CAT, n, 1))) return st;
    c.i[0] = dim;
    for (int k = 0; k < n && !st; k++) st = cr_cast_if_needed(&c.in[k], ts[k], dt);
    if (!st) st = cr_tensor_alloc_layout(&c.out[0], ref->ndim, shape, dt, cr_tensor_dev(ref), channels_last);
    if (st) cr_call_drop_outs(&c);
    else st = cr_call_finish(out, &c, 0, 0);
    for (int k = 0; k < n; k++) cr_tensor_free(c.in[k]);
    cr_call_release_ins(&c);
    return st;
}
cr_status cr_grad_cat(cr_node *n, cr_tensor **gout, cr_tensor **gin) {
    int64_t dim = n->call.i[0], pos = 0;
    for (int k = 0; k < n->call.nin; k++) {
        const cr_input_meta *m = &n->in_meta[k];
        if (m->ndim == 1 && m->shape[0] == 0 && gout[0]->ndim > 1) continue;
        int64_t len = m->shape[dim];
        if (n->edges[k].node) {
            cr_status st = cr_op_narrow(&gin[k], gout[0], dim, pos, len);
            if (st) return st;
        }
        pos += len;
    }
    return CR_OK;
}

cr_status cr_op_stack(cr_tensor **out, cr_tensor **ts, int n, int64_t dim) {
    *out = NULL;
    if (n <= 0 || !ts) return cr_fail(CR_ERR_ARG, "stack: expected a non-empty list of tensors");
    for (int k = 0; k < n; k++)
        if (!ts[k]) return cr_fail(CR_ERR_ARG, "stack: tensor %d of the list is nil", k + 1);
    cr_status st = cr_check_dim("stack", &dim, ts[0]->ndim, true);
    if (st) return st;
    for (int k = 1; k < n; k++)
        if (!cr_same_shape(ts[k], ts[0])) {
            char a[160], b[160];
            return cr_fail(CR_ERR_ARG, "stack: tensor %d has shape %s but tensor 1 has %s; "
                           "stack needs equal shapes", k + 1, cr_shape_str(ts[k], a, sizeof a),
                           cr_shape_str(ts[0], b, sizeof b));
        }
    cr_tensor **us = calloc((size_t)n, sizeof *us);
    if (!us) return cr_fail(CR_ERR_OOM, "stack: out of memory");
    for (int k = 0; k < n && !st; k++) st = cr_op_unsqueeze(&us[k], ts[k], dim);
    if (!st) st = cr_op_cat(out, us, n, dim);
    for (int k = 0; k < n; k++) cr_tensor_free(us[k]);
    free(us);
    return st;
}
