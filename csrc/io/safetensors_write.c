/* safetensors_write.c — the safetensors writer (the format is in crescent_io.h). Files
 * are byte-reproducible (names sorted bytewise, data in that order, compact JSON with
 * sorted metadata, space padding to a multiple of 8) and replace the target atomically:
 * a crash leaves the old file or the new one, never a torn one. */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io_impl.h"

static bool write_all(int fd, const void *buf, int64_t n) {
    const char *p = buf;
    while (n > 0) {
        size_t chunk = n > (1 << 30) ? (size_t)1 << 30 : (size_t)n;
        ssize_t w = write(fd, p, chunk);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        p += w;
        n -= w;
    }
    return true;
}

/* fsync of the directory that holds path, so the rename itself is durable. Filesystems
 * that cannot sync directories (EINVAL) are fine. */
static cr_status sync_dir(const char *ctx, const char *path) {
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
    if (!dir) return cr_fail(CR_ERR_OOM, "%s: out of memory", ctx);
    cr_status st = CR_OK;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        if (fsync(fd) != 0 && errno != EINVAL && errno != ENOTSUP)
            st = cr_fail(CR_ERR_ARG, "%s: the file is written but syncing its directory '%s' "
                                     "failed: %s",
                         ctx, dir, strerror(errno));
        close(fd);
    }
    free(dir);
    return st;
}

static int index_cmp(const void *a, const void *b, void *names) {
    const char *const *nm = names;
    return strcmp(nm[*(const int64_t *)a], nm[*(const int64_t *)b]);
}

static cr_status check_inputs(const char *ctx, const char *const *names, cr_tensor *const *tensors,
                              int64_t n) {
    if (n < 0) return cr_fail(CR_ERR_ARG, "%s: tensor count %lld is negative", ctx, (long long)n);
    if (n > 0 && (!names || !tensors))
        return cr_fail(CR_ERR_ARG, "%s: names or tensors is NULL for %lld tensors", ctx,
                       (long long)n);
    for (int64_t i = 0; i < n; i++) {
        const char *name = names[i];
        if (!name) return cr_fail(CR_ERR_ARG, "%s: the name of tensor %lld is NULL", ctx, (long long)i);
        if (!cr_utf8_valid(name, strlen(name)))
            return cr_fail(CR_ERR_ARG, "%s: tensor name '%.200s' is not valid UTF-8", ctx, name);
        if (strcmp(name, "__metadata__") == 0)
            return cr_fail(CR_ERR_ARG,
                           "%s: '__metadata__' is reserved for the metadata; rename that tensor",
                           ctx);
        const cr_tensor *t = tensors[i];
        if (!t) return cr_fail(CR_ERR_ARG, "%s: tensor '%.200s' is NULL", ctx, name);
        if (cr_tensor_device(t) != CR_DEV_CPU)
            return cr_fail(CR_ERR_DEVICE,
                           "%s: tensor '%.200s' is not on the CPU; copy it to the CPU first", ctx,
                           name);
        if (!cr_st_dtype_name(t->dtype))
            return cr_fail(CR_ERR_ARG, "%s: tensor '%.200s' has dtype %s, which the format lacks",
                           ctx, name, cr_dtype_name(t->dtype));
    }
    return CR_OK;
}

static cr_status parse_metadata(const char *ctx, const char *json, cr_str_map *meta) {
    memset(meta, 0, sizeof *meta);
    if (!json || !*json) return CR_OK;
    cr_json_reader r = {json, strlen(json), 0, ctx, "metadata"};
    cr_status st = cr_json_str_map(&r, meta, "the metadata");
    if (st) return st;
    cr_json_skip_ws(&r);
    if (r.pos < r.n) {
        cr_str_map_free(meta);
        return cr_json_syntax(&r, "unexpected text after the object");
    }
    return CR_OK;
}

/* The header, padded with spaces so that 8 + its length is a multiple of 8. */
static void build_header(cr_strbuf *h, const char *const *names, cr_tensor *const *tensors,
                         const int64_t *order, int64_t n, const cr_str_map *meta) {
    cr_sb_put(h, "{", 1);
    if (meta->n > 0) {
        cr_sb_puts(h, "\"__metadata__\":");
        cr_sb_json_str_map(h, meta);
    }
    int64_t offset = 0;
    for (int64_t k = 0; k < n; k++) {
        const cr_tensor *t = tensors[order[k]];
        if (k > 0 || meta->n > 0) cr_sb_put(h, ",", 1);
        cr_sb_json_string(h, names[order[k]]);
        cr_sb_printf(h, ":{\"dtype\":\"%s\",\"shape\":[", cr_st_dtype_name(t->dtype));
        for (int d = 0; d < t->ndim; d++) cr_sb_printf(h, d ? ",%lld" : "%lld", (long long)t->shape[d]);
        int64_t nbytes = t->numel * (int64_t)cr_dtype_size(t->dtype);
        cr_sb_printf(h, "],\"data_offsets\":[%lld,%lld]}", (long long)offset,
                     (long long)(offset + nbytes));
        offset += nbytes;
    }
    cr_sb_put(h, "}", 1);
    while ((8 + h->n) % 8) cr_sb_put(h, " ", 1);
}

/* Writes t's elements, row-major, from a contiguous copy when t is a strided view. */
static bool write_tensor(int fd, const cr_tensor *t) {
    int64_t nbytes = t->numel * (int64_t)cr_dtype_size(t->dtype);
    if (nbytes == 0) return true;
    if (cr_tensor_is_contiguous(t)) return write_all(fd, cr_tensor_ptr(t), nbytes);
    cr_tensor *alias = cr_tensor_alias(t, t->ndim, t->shape, t->stride, t->offset);
    cr_tensor *dense = NULL;
    cr_status st = alias ? cr_op_contiguous(&dense, alias) : CR_ERR_OOM;
    if (alias) cr_tensor_free(alias);
    if (st) {
        errno = ENOMEM;
        return false;
    }
    bool ok = write_all(fd, cr_tensor_ptr(dense), nbytes);
    cr_tensor_free(dense);
    return ok;
}

cr_status cr_io_save_safetensors(const char *path, const char *const *names,
                                 cr_tensor *const *tensors, int64_t n,
                                 const char *metadata_json) {
    if (!path) return cr_fail(CR_ERR_ARG, "save: path is nil; pass a file name");
    char ctx[600];
    snprintf(ctx, sizeof ctx, "save: '%.500s'", path);
    cr_status st = check_inputs(ctx, names, tensors, n);
    if (st) return st;

    int64_t *order = malloc((size_t)(n ? n : 1) * sizeof *order);
    if (!order) return cr_fail(CR_ERR_OOM, "%s: out of memory", ctx);
    for (int64_t i = 0; i < n; i++) order[i] = i;
    qsort_r(order, (size_t)n, sizeof *order, index_cmp, (void *)names);
    for (int64_t k = 1; k < n; k++)
        if (strcmp(names[order[k - 1]], names[order[k]]) == 0) {
            st = cr_fail(CR_ERR_ARG, "%s: two tensors are named '%.200s'", ctx, names[order[k]]);
            free(order);
            return st;
        }

    cr_str_map meta;
    if ((st = parse_metadata(ctx, metadata_json, &meta))) {
        free(order);
        return st;
    }
    cr_strbuf h = {0};
    build_header(&h, names, tensors, order, n, &meta);
    cr_str_map_free(&meta);
    char *tmp = malloc(strlen(path) + 32);
    if (h.oom || !tmp) {
        free(order);
        free(h.p);
        free(tmp);
        return cr_fail(CR_ERR_OOM, "%s: out of memory building the header", ctx);
    }
    sprintf(tmp, "%s.tmp.%ld", path, (long)getpid());

    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0) {
        st = cr_fail(CR_ERR_ARG, "%s: cannot create '%.500s': %s", ctx, tmp, strerror(errno));
    } else {
        unsigned char len8[8];
        for (int k = 0; k < 8; k++) len8[k] = (unsigned char)((uint64_t)h.n >> (8 * k));
        bool ok = write_all(fd, len8, 8) && write_all(fd, h.p, (int64_t)h.n);
        for (int64_t k = 0; ok && k < n; k++) ok = write_tensor(fd, tensors[order[k]]);
        if (ok && fsync(fd) != 0) ok = false;
        int err = errno;
        if (close(fd) != 0 && ok) {
            ok = false;
            err = errno;
        }
        if (!ok) st = cr_fail(CR_ERR_ARG, "%s: writing '%.500s' failed: %s", ctx, tmp, strerror(err));
        else if (rename(tmp, path) != 0)
            st = cr_fail(CR_ERR_ARG, "%s: cannot replace the file with '%.500s': %s", ctx, tmp,
                         strerror(errno));
        if (st) unlink(tmp);
        else st = sync_dir(ctx, path);
    }
    free(tmp);
    free(h.p);
    free(order);
    return st;
}
