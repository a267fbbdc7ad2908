/* arange.c — the deterministic creation ops: arange (evenly spaced values) and eye
 * (identity matrices). Values are computed from the index, never accumulated, so a long
 * range has no drift and threads need no coordination. */
#include <math.h>

#include "internal.h"

/* ---- arange ---------------------------------------------------------------------------- */
cr_status cr_cpu_arange(cr_call *c) {
    cr_tensor *o = c->out[0];
    int64_t n = o->numel;
    double start = c->f[0], step = c->f[1];
    char *base = cr_tensor_ptr(o);
    bool par = n >= CR_PAR_GRAIN;
    switch (o->dtype) {
    case CR_DT_F32: {
        float *x = (float *)base;
#pragma omp parallel for if (par) schedule(static)
        for (int64_t i = 0; i < n; i++) x[i] = (float)(start + (double)i * step);
        break;
    }
    case CR_DT_F64: {
        double *x = (double *)base;
#pragma omp parallel for if (par) schedule(static)
        for (int64_t i = 0; i < n; i++) x[i] = start + (double)i * step;
        break;
    }
    case CR_DT_I64: { /* integer arguments are exact in i64 even past 2^53 */
        int64_t *x = (int64_t *)base, s0 = c->i[0], st = c->i[1];
        if (c->i[2]) {
#pragma omp parallel for if (par) schedule(static)
            for (int64_t i = 0; i < n; i++) x[i] = s0 + i * st;
        } else {
#pragma omp parallel for if (par) schedule(static)
            for (int64_t i = 0; i < n; i++) x[i] = (int64_t)(start + (double)i * step);
        }
        break;
    }
    default: {
        size_t es = cr_dtype_size(o->dtype);
        for (int64_t i = 0; i < n; i++)
            cr_store_f64(base + i * (int64_t)es, o->dtype, start + (double)i * step);
    }
    }
    return CR_OK;
}

cr_status cr_op_arange(cr_tensor **out, double start, double end, double step, cr_dtype dt,
                       cr_devtype dev, int dev_index) {
    *out = NULL;
    if ((unsigned)dt >= CR_DT_COUNT)
        return cr_fail(CR_ERR_ARG, "arange: invalid dtype %d", (int)dt);
    if (!isfinite(start) || !isfinite(end) || !isfinite(step))
        return cr_fail(CR_ERR_ARG, "arange: start %g, end %g and step %g must be finite", start,
                       end, step);
    if (step == 0)
        return cr_fail(CR_ERR_ARG, "arange: step must be nonzero (start %g, end %g)", start, end);
    double count = ceil((end - start) / step);
    if (count < 0)
        return cr_fail(CR_ERR_ARG, "arange: step %g goes away from end %g (start %g); use a "
                       "step of the other sign", step, end, start);
    if (count > 9.0e15)
        return cr_fail(CR_ERR_ARG, "arange: %.3g elements (start %g, end %g, step %g) is beyond "
                       "any memory; check the arguments", count, start, end, step);
    int64_t shape[1] = {(int64_t)count};
    cr_status st = cr_check_shape_arg("arange", 1, shape);
    if (st) return st;
    cr_call c;
    if ((st = cr_call_init(&c, CR_OP_ARANGE, 0, 1))) return st;
    c.f[0] = start;
    c.f[1] = step;
    c.i[2] = start == floor(start) && step == floor(step) && fabs(start) < 9.2e18 &&
             fabs(step) < 9.2e18;
    c.i[0] = c.i[2] ? (int64_t)start : 0;
    c.i[1] = c.i[2] ? (int64_t)step : 0;
    if ((st = cr_tensor_alloc(&c.out[0], 1, shape, dt, (cr_device){dev, dev_index}))) return st;
    if ((st = cr_dispatch(&c))) {
        cr_call_drop_outs(&c);
        return st;
    }
    *out = c.out[0];
    return CR_OK;
}

/* ---- eye --------------------------------------------------------------------------------- */
cr_status cr_cpu_eye(cr_call *c) {
    cr_tensor *o = c->out[0];
    int64_t n = o->shape[0], m = o->shape[1];
    size_t es = cr_dtype_size(o->dtype);
    char *base = cr_tensor_ptr(o);
    memset(base, 0, (size_t)o->numel * es);
    char one[8];
    cr_store_f64(one, o->dtype, 1.0);
    for (int64_t i = 0; i < n && i < m; i++) memcpy(base + (i * m + i) * (int64_t)es, one, es);
    return CR_OK;
}

cr_status cr_op_eye(cr_tensor **out, int64_t n, int64_t m, cr_dtype dt, cr_devtype dev,
                    int dev_index) {
    *out = NULL;
    if ((unsigned)dt >= CR_DT_COUNT) return cr_fail(CR_ERR_ARG, "eye: invalid dtype %d", (int)dt);
    if (n < 0 || m < 0)
        return cr_fail(CR_ERR_ARG, "eye: sizes n = %lld and m = %lld must be >= 0", (long long)n,
                       (long long)m);
    int64_t shape[2] = {n, m};
    cr_status st = cr_check_shape_arg("eye", 2, shape);
    if (st) return st;
    cr_call c;
    if ((st = cr_call_init(&c, CR_OP_EYE, 0, 1))) return st;
    if ((st = cr_tensor_alloc(&c.out[0], 2, shape, dt, (cr_device){dev, dev_index}))) return st;
    if ((st = cr_dispatch(&c))) {
        cr_call_drop_outs(&c);
        return st;
    }
    *out = c.out[0];
    return CR_OK;
}
