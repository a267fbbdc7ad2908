/* safetensors.c — the safetensors reader (the format is in crescent_io.h) and the dtype
 * table shared with the writer. Everything about the file is checked before tensor data
 * is read: the header length against the file size, the JSON, every entry's keys and
 * values, and that the entries tile the data section exactly. Only then are tensors
 * allocated (their total is bounded by the file's real size) and read with pread. */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io_impl.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the safetensors reader and writer copy little-endian data as is"
#endif

/* The reference implementation refuses longer headers too. */
static const int64_t ST_MAX_HEADER = 100000000;

static const cr_st_dtype st_dtypes[] = {
    {"F64", CR_DT_F64}, {"F32", CR_DT_F32},   {"F16", CR_DT_F16}, {"BF16", CR_DT_BF16},
    {"I64", CR_DT_I64}, {"I32", CR_DT_I32},   {"U8", CR_DT_U8},   {"BOOL", CR_DT_BOOL},
    {"I16", -1},        {"I8", -1},           {"U16", -1},        {"U32", -1},
    {"U64", -1},        {"F8_E4M3", -1},      {"F8_E5M2", -1},    {"F8_E8M0", -1},
    {"F6_E2M3", -1},    {"F6_E3M2", -1},      {"F4", -1},         {"C64", -1},
};
static const size_t st_ndtypes = sizeof st_dtypes / sizeof st_dtypes[0];

const cr_st_dtype *cr_st_dtype_find(const char *name) {
    for (size_t i = 0; i < st_ndtypes; i++)
        if (strcmp(st_dtypes[i].name, name) == 0) return &st_dtypes[i];
    return NULL;
}

const char *cr_st_dtype_name(cr_dtype dt) {
    for (size_t i = 0; i < st_ndtypes; i++)
        if (st_dtypes[i].dt == (int)dt) return st_dtypes[i].name;
    return NULL;
}

/* ---- the loaded file -------------------------------------------------------------- */
struct cr_io_file {
    int64_t n;
    char **names;
    cr_tensor **tensors;
    cr_str_map meta;
    char *meta_json;
};

int64_t cr_io_file_count(const cr_io_file *f) { return f ? f->n : 0; }

const char *cr_io_file_name(const cr_io_file *f, int64_t i) {
    return f && i >= 0 && i < f->n ? f->names[i] : NULL;
}

cr_tensor *cr_io_file_tensor(const cr_io_file *f, int64_t i) {
    if (!f || i < 0 || i >= f->n) return NULL;
    cr_tensor_retain(f->tensors[i]);
    return f->tensors[i];
}

const char *cr_io_file_metadata_json(const cr_io_file *f) {
    return f && f->meta_json ? f->meta_json : "{}";
}
int64_t cr_io_file_metadata_count(const cr_io_file *f) { return f ? f->meta.n : 0; }
const char *cr_io_file_metadata_key(const cr_io_file *f, int64_t i) {
    return f && i >= 0 && i < f->meta.n ? f->meta.keys[i] : NULL;
}
const char *cr_io_file_metadata_value(const cr_io_file *f, int64_t i) {
    return f && i >= 0 && i < f->meta.n ? f->meta.values[i] : NULL;
}

void cr_io_file_free(cr_io_file *f) {
    if (!f) return;
    for (int64_t i = 0; i < f->n; i++) {
        free(f->names[i]);
        if (f->tensors[i]) cr_tensor_free(f->tensors[i]);
    }
    free(f->names);
    free(f->tensors);
    cr_str_map_free(&f->meta);
    free(f->meta_json);
    free(f);
}

/* ---- header entries ----------------------------------------------------------------- */
typedef struct {
    char *name;
    cr_dtype dt;
    int ndim;
    int64_t shape[CR_MAX_DIMS];
    int64_t begin, end;
} st_entry;

typedef struct {
    st_entry *e;
    int64_t n, cap;
} st_entries;

static void entries_free(st_entries *es) {
    for (int64_t i = 0; i < es->n; i++) free(es->e[i].name);
    free(es->e);
}

/* An array of non-negative integers into out[0..max), its length in *count. `key` names
 * it in messages; max_msg explains the limit. */
static cr_status int_array(cr_json_reader *r, const char *name, const char *key, int64_t *out,
                           int max, const char *max_msg, int *count) {
    *count = 0;
    if (!cr_json_accept(r, '['))
        return cr_json_unexpected(r, "tensor '%.200s': %s must be an array of integers", name, key);
    if (cr_json_accept(r, ']')) return CR_OK;
    for (;;) {
        if (cr_json_peek(r) != '-' && (cr_json_peek(r) < '0' || cr_json_peek(r) > '9'))
            return cr_json_unexpected(r, "tensor '%.200s': %s must hold integers", name, key);
        int64_t v;
        const char *text;
        int len;
        cr_status st = cr_json_number(r, &v, &text, &len);
        if (st) return st;
        if (v == -1)
            return cr_fail(CR_ERR_ARG,
                           "%s: tensor '%.200s': %s holds %.*s; it must hold non-negative integers",
                           r->ctx, name, key, len, text);
        if (v == -2)
            return cr_fail(CR_ERR_ARG, "%s: tensor '%.200s': %s holds %.*s, out of range", r->ctx,
                           name, key, len, text);
        if (*count == max)
            return cr_fail(CR_ERR_ARG, "%s: tensor '%.200s': %s has more than %d entries; %s",
                           r->ctx, name, key, max, max_msg);
        out[(*count)++] = v;
        if (cr_json_accept(r, ',')) continue;
        if (cr_json_accept(r, ']')) return CR_OK;
        return cr_json_syntax(r, "expected ',' or ']' in an array");
    }
}

static cr_status parse_dtype(cr_json_reader *r, st_entry *e) {
    if (cr_json_peek(r) != '"')
        return cr_json_unexpected(r, "tensor '%.200s': dtype must be a string", e->name);
    char *s = NULL;
    cr_status st = cr_json_string(r, &s);
    if (st) return st;
    const cr_st_dtype *d = cr_st_dtype_find(s);
    if (!d)
        st = cr_fail(CR_ERR_ARG,
                     "%s: tensor '%.200s': unknown dtype '%.40s' (the format's dtypes: F64 F32 F16 "
                     "BF16 I64 I32 I16 I8 U8 BOOL and more; crescent reads F64 F32 F16 BF16 I64 "
                     "I32 U8 BOOL)",
                     r->ctx, e->name, s);
    else if (d->dt < 0)
        st = cr_fail(CR_ERR_ARG,
                     "%s: tensor '%.200s' has dtype %s, which crescent does not have (it reads F64 "
                     "F32 F16 BF16 I64 I32 U8 BOOL); convert the tensor before saving it",
                     r->ctx, e->name, d->name);
    else
        e->dt = (cr_dtype)d->dt;
    free(s);
    return st;
}

/* Checks that end - begin is what dtype and shape need (no overflow on absurd shapes). */
static cr_status check_extent(cr_json_reader *r, const st_entry *e) {
    char dims[200];
    cr_dims_str(e->ndim, e->shape, dims, sizeof dims);
    if (e->end < e->begin)
        return cr_fail(CR_ERR_ARG,
                       "%s: tensor '%.200s': data_offsets [%lld, %lld] end before they begin",
                       r->ctx, e->name, (long long)e->begin, (long long)e->end);
    int64_t bytes = (int64_t)cr_dtype_size(e->dt);
    for (int d = 0; d < e->ndim; d++)
        if (__builtin_mul_overflow(bytes, e->shape[d], &bytes) || bytes > ((int64_t)1 << 62))
            return cr_fail(CR_ERR_ARG, "%s: tensor '%.200s': shape %s is absurd (more than 2^62 "
                                       "bytes)",
                           r->ctx, e->name, dims);
    if (e->end - e->begin != bytes)
        return cr_fail(CR_ERR_ARG,
                       "%s: tensor '%.200s': data_offsets [%lld, %lld] span %lld bytes, but shape "
                       "%s of %s needs %lld",
                       r->ctx, e->name, (long long)e->begin, (long long)e->end,
                       (long long)(e->end - e->begin), dims, cr_st_dtype_name(e->dt),
                       (long long)bytes);
    return CR_OK;
}

/* {"dtype": .., "shape": [..], "data_offsets": [b, e]}, each key exactly once. */
static cr_status parse_entry(cr_json_reader *r, st_entry *e) {
    if (!cr_json_accept(r, '{'))
        return cr_json_unexpected(r, "tensor '%.200s': expected an object {dtype, shape, "
                                     "data_offsets}",
                                  e->name);
    bool seen[3] = {false, false, false};
    static const char *keys[3] = {"dtype", "shape", "data_offsets"};
    cr_status st = CR_OK;
    if (!cr_json_accept(r, '}')) {
        for (;;) {
            char *key = NULL;
            if ((st = cr_json_string(r, &key))) return st;
            int k = 0;
            while (k < 3 && strcmp(key, keys[k]) != 0) k++;
            if (k == 3)
                st = cr_fail(CR_ERR_ARG,
                             "%s: tensor '%.200s': unknown key '%.100s' (an entry holds dtype, "
                             "shape and data_offsets)",
                             r->ctx, e->name, key);
            else if (seen[k])
                st = cr_fail(CR_ERR_ARG, "%s: tensor '%.200s': key '%s' appears twice", r->ctx,
                             e->name, key);
            free(key);
            if (st) return st;
            seen[k] = true;
            if (!cr_json_accept(r, ':')) return cr_json_syntax(r, "expected ':' after a key");
            int count = 0;
            int64_t offs[2] = {0, 0};
            if (k == 0) st = parse_dtype(r, e);
            else if (k == 1) {
                st = int_array(r, e->name, "shape", e->shape, CR_MAX_DIMS,
                               "crescent tensors have at most 8 dims", &count);
                e->ndim = count;
            } else {
                st = int_array(r, e->name, "data_offsets", offs, 2,
                               "it must be [begin, end]", &count);
                if (!st && count != 2)
                    st = cr_fail(CR_ERR_ARG,
                                 "%s: tensor '%.200s': data_offsets has %d entries; it must be "
                                 "[begin, end]",
                                 r->ctx, e->name, count);
                e->begin = offs[0];
                e->end = offs[1];
            }
            if (st) return st;
            if (cr_json_accept(r, ',')) continue;
            if (cr_json_accept(r, '}')) break;
            return cr_json_syntax(r, "expected ',' or '}' in an object");
        }
    }
    for (int k = 0; k < 3; k++)
        if (!seen[k])
            return cr_fail(CR_ERR_ARG, "%s: tensor '%.200s' has no '%s'", r->ctx, e->name, keys[k]);
    return check_extent(r, e);
}

static int entry_name_cmp(const void *a, const void *b) {
    return strcmp(((const st_entry *)a)->name, ((const st_entry *)b)->name);
}

static int entry_offset_cmp(const void *a, const void *b) {
    const st_entry *x = *(const st_entry *const *)a, *y = *(const st_entry *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

/* The whole header: entries sorted by name, names distinct, metadata. */
static cr_status parse_header(cr_json_reader *r, st_entries *es, cr_str_map *meta, bool *has_meta) {
    *has_meta = false;
    if (!cr_json_accept(r, '{'))
        return cr_fail(CR_ERR_ARG, "%s: the header is not a JSON object (it starts with %s)", r->ctx,
                       cr_json_kind(r));
    cr_status st = CR_OK;
    if (!cr_json_accept(r, '}')) {
        for (;;) {
            char *key = NULL;
            if ((st = cr_json_string(r, &key))) return st;
            if (!cr_json_accept(r, ':')) {
                free(key);
                return cr_json_syntax(r, "expected ':' after a key");
            }
            if (strcmp(key, "__metadata__") == 0) {
                free(key);
                if (*has_meta)
                    return cr_fail(CR_ERR_ARG, "%s: the header has '__metadata__' twice", r->ctx);
                if ((st = cr_json_str_map(r, meta, "__metadata__"))) return st;
                *has_meta = true;
            } else {
                if (es->n == es->cap) {
                    int64_t cap = es->cap ? 2 * es->cap : 64;
                    st_entry *p = realloc(es->e, (size_t)cap * sizeof *p);
                    if (!p) {
                        free(key);
                        return cr_fail(CR_ERR_OOM, "%s: out of memory reading the header", r->ctx);
                    }
                    es->e = p;
                    es->cap = cap;
                }
                st_entry *e = &es->e[es->n++];
                memset(e, 0, sizeof *e);
                e->name = key;
                if ((st = parse_entry(r, e))) return st;
            }
            if (cr_json_accept(r, ',')) continue;
            if (cr_json_accept(r, '}')) break;
            return cr_json_syntax(r, "expected ',' or '}' in an object");
        }
    }
    cr_json_skip_ws(r);
    if (r->pos < r->n)
        return cr_fail(CR_ERR_ARG,
                       "%s: unexpected bytes after the header's JSON object (at header byte %zu; "
                       "only spaces may pad it)",
                       r->ctx, r->pos);
    if (es->n > 1) qsort(es->e, (size_t)es->n, sizeof *es->e, entry_name_cmp);
    for (int64_t i = 1; i < es->n; i++)
        if (strcmp(es->e[i - 1].name, es->e[i].name) == 0)
            return cr_fail(CR_ERR_ARG, "%s: the header names tensor '%.200s' twice", r->ctx,
                           es->e[i].name);
    return CR_OK;
}

/* The entries must cover data bytes [0, data_bytes) exactly once. */
static cr_status check_tiling(const char *ctx, const st_entries *es, int64_t data_bytes) {
    const st_entry **by_offset = malloc((size_t)(es->n ? es->n : 1) * sizeof *by_offset);
    if (!by_offset) return cr_fail(CR_ERR_OOM, "%s: out of memory checking the offsets", ctx);
    for (int64_t i = 0; i < es->n; i++) by_offset[i] = &es->e[i];
    qsort(by_offset, (size_t)es->n, sizeof *by_offset, entry_offset_cmp);
    cr_status st = CR_OK;
    int64_t cur = 0;
    const st_entry *prev = NULL;
    for (int64_t i = 0; i < es->n && !st; i++) {
        const st_entry *e = by_offset[i];
        if (e->begin < cur)
            st = cr_fail(CR_ERR_ARG,
                         "%s: the data of tensor '%.200s' [%lld, %lld) overlaps that of '%.200s' "
                         "[%lld, %lld)",
                         ctx, e->name, (long long)e->begin, (long long)e->end, prev->name,
                         (long long)prev->begin, (long long)prev->end);
        else if (e->begin > cur)
            st = cr_fail(CR_ERR_ARG,
                         "%s: data bytes [%lld, %lld) belong to no tensor (a hole before tensor "
                         "'%.200s'); the offsets must tile the data section",
                         ctx, (long long)cur, (long long)e->begin, e->name);
        else if (e->end > data_bytes)
            st = cr_fail(CR_ERR_ARG,
                         "%s: tensor '%.200s' needs data bytes [%lld, %lld), but the file holds "
                         "only %lld bytes after the header: it is truncated",
                         ctx, e->name, (long long)e->begin, (long long)e->end,
                         (long long)data_bytes);
        cur = e->end;
        prev = e;
    }
    if (!st && cur < data_bytes)
        st = cr_fail(CR_ERR_ARG,
                     "%s: %lld bytes of trailing garbage after the last tensor's data (the tensors "
                     "end at data byte %lld, the file at %lld)",
                     ctx, (long long)(data_bytes - cur), (long long)cur, (long long)data_bytes);
    free(by_offset);
    return st;
}

/* Reads exactly n bytes at offset off; false on error or end of file (errno kept). */
static bool pread_all(int fd, void *buf, int64_t n, int64_t off) {
    char *p = buf;
    while (n > 0) {
        size_t chunk = n > (1 << 30) ? (size_t)1 << 30 : (size_t)n;
        ssize_t got = pread(fd, p, chunk, (off_t)off);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) {
            if (got == 0) errno = 0;
            return false;
        }
        p += got;
        off += got;
        n -= got;
    }
    return true;
}

static cr_status read_tensors(const char *ctx, int fd, int64_t data_start, const st_entries *es,
                              cr_io_file *f) {
    for (int64_t i = 0; i < es->n; i++) {
        const st_entry *e = &es->e[i];
        cr_tensor *t = NULL;
        cr_status st = cr_tensor_alloc(&t, e->ndim, e->shape, e->dt, CR_CPU);
        if (st) return st;
        f->tensors[i] = t;
        f->names[i] = e->name;
        f->n = i + 1;
        int64_t nbytes = e->end - e->begin;
        if (nbytes && !pread_all(fd, cr_tensor_ptr(t), nbytes, data_start + e->begin))
            return cr_fail(CR_ERR_ARG, "%s: reading tensor '%.200s' failed: %s", ctx, e->name,
                           errno ? strerror(errno) : "the file ended early (truncated while read?)");
        if (e->dt == CR_DT_BOOL) {
            const unsigned char *b = (const unsigned char *)cr_tensor_ptr(t);
            for (int64_t k = 0; k < nbytes; k++)
                if (b[k] > 1)
                    return cr_fail(CR_ERR_ARG,
                                   "%s: tensor '%.200s' is BOOL but its byte %lld is %d, not 0 "
                                   "or 1",
                                   ctx, e->name, (long long)k, b[k]);
        }
    }
    return CR_OK;
}

cr_status cr_io_load_safetensors(cr_io_file **out, const char *path) {
    if (!out) return cr_fail(CR_ERR_ARG, "load: the output pointer is NULL");
    *out = NULL;
    if (!path) return cr_fail(CR_ERR_ARG, "load: path is nil; pass a file name");
    char ctx[600];
    snprintf(ctx, sizeof ctx, "load: '%.500s'", path);

    /* O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused below (a
     * regular file reads as it would without the flag) */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return cr_fail(CR_ERR_ARG, "%s: cannot open: %s", ctx, strerror(errno));
    cr_status st = CR_OK;
    char *header = NULL;
    st_entries es = {0};
    cr_str_map meta = {0};
    bool has_meta = false;
    cr_io_file *f = NULL;
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        st = cr_fail(CR_ERR_ARG, "%s: cannot stat: %s", ctx, strerror(errno));
        goto done;
    }
    if (!S_ISREG(sb.st_mode)) {
        st = cr_fail(CR_ERR_ARG, "%s: %s, not a safetensors file", ctx,
                     S_ISDIR(sb.st_mode) ? "a directory" : "not a regular file");
        goto done;
    }
    int64_t size = (int64_t)sb.st_size;
    unsigned char len8[8];
    if (size < 8 || !pread_all(fd, len8, 8, 0)) {
        st = cr_fail(CR_ERR_ARG,
                     "%s: %lld bytes, too short for a safetensors file (8 bytes of header length, "
                     "then the header)",
                     ctx, (long long)size);
        goto done;
    }
    uint64_t hlen = 0;
    for (int k = 7; k >= 0; k--) hlen = (hlen << 8) | len8[k];
    if (hlen > (uint64_t)ST_MAX_HEADER) {
        st = cr_fail(CR_ERR_ARG,
                     "%s: absurd header length %llu (the format allows at most %lld bytes); the "
                     "file is corrupt or not safetensors",
                     ctx, (unsigned long long)hlen, (long long)ST_MAX_HEADER);
        goto done;
    }
    if ((int64_t)hlen > size - 8) {
        st = cr_fail(CR_ERR_ARG,
                     "%s: the header length is %llu bytes but the file has only %lld after it: "
                     "truncated, or not safetensors",
                     ctx, (unsigned long long)hlen, (long long)(size - 8));
        goto done;
    }
    header = malloc(hlen ? hlen : 1);
    if (!header) {
        st = cr_fail(CR_ERR_OOM, "%s: out of memory for a %llu-byte header", ctx,
                     (unsigned long long)hlen);
        goto done;
    }
    if (hlen && !pread_all(fd, header, (int64_t)hlen, 8)) {
        st = cr_fail(CR_ERR_ARG, "%s: reading the header failed: %s", ctx,
                     errno ? strerror(errno) : "the file ended early");
        goto done;
    }
    cr_json_reader r = {header, hlen, 0, ctx, "header"};
    if ((st = parse_header(&r, &es, &meta, &has_meta))) goto done;
    if ((st = check_tiling(ctx, &es, size - 8 - (int64_t)hlen))) goto done;

    f = calloc(1, sizeof *f);
    if (f) {
        f->names = calloc((size_t)(es.n ? es.n : 1), sizeof *f->names);
        f->tensors = calloc((size_t)(es.n ? es.n : 1), sizeof *f->tensors);
    }
    if (!f || !f->names || !f->tensors) {
        st = cr_fail(CR_ERR_OOM, "%s: out of memory", ctx);
        goto done;
    }
    st = read_tensors(ctx, fd, 8 + (int64_t)hlen, &es, f);
    /* the names now belong to f (those it took) */
    for (int64_t i = 0; i < f->n; i++) es.e[i].name = NULL;
    if (st) goto done;
    f->meta = meta;
    memset(&meta, 0, sizeof meta);
    cr_strbuf sb_meta = {0};
    cr_sb_json_str_map(&sb_meta, &f->meta);
    if (sb_meta.oom) {
        free(sb_meta.p);
        st = cr_fail(CR_ERR_OOM, "%s: out of memory", ctx);
        goto done;
    }
    f->meta_json = sb_meta.p;
    *out = f;
    f = NULL;
done:
    close(fd);
    free(header);
    entries_free(&es);
    cr_str_map_free(&meta);
    cr_io_file_free(f);
    return st;
}
