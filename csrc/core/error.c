/* error.c — thread-local error messages: user mistakes set a message and return a
 * status; the Lua binding turns it into a Lua error. */
#include <stdarg.h>

#include "core.h"

static _Thread_local char last_error[2048];

const char *cr_last_error(void) { return last_error; }

cr_status cr_fail(cr_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return st;
}

const char *cr_dims_str(int ndim, const int64_t *shape, char *buf, size_t cap) {
    size_t n = 0;
    n += (size_t)snprintf(buf + n, cap - n, "[");
    for (int d = 0; d < ndim && n < cap; d++)
        n += (size_t)snprintf(buf + n, cap - n, d ? ", %lld" : "%lld", (long long)shape[d]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
    return buf;
}

const char *cr_shape_str(const cr_tensor *t, char *buf, size_t cap) {
    if (!t) {
        snprintf(buf, cap, "nil");
        return buf;
    }
    return cr_dims_str(t->ndim, t->shape, buf, cap);
}
