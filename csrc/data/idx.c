/* idx.c — the IDX reader (MNIST, Fashion-MNIST, EMNIST, KMNIST ship in it). zlib's
 * gzread reads gzip and plain files alike, so one path serves both. The header is
 * checked before anything large is allocated: a corrupt or hostile header must give a
 * message naming the file and the problem, never a crash or a huge allocation. */
#include <errno.h>
#include <sys/stat.h>
#include <zlib.h>

#include "internal.h"

/* No IDX data set comes near this; a header beyond it is corrupt (or not IDX at all). */
static const int64_t IDX_MAX_BYTES = (int64_t)1 << 36; /* 64 GiB */
/* Deflate cannot expand better than ~1032:1, so a .gz of s bytes holds at most this. */
static const int64_t GZ_MAX_RATIO = 1040;

typedef struct {
    unsigned char code;
    const char *name;
    int size;   /* bytes per item in the file */
    cr_dtype dt; /* what the tensor holds */
} idx_type;

static const idx_type idx_types[] = {
    {0x08, "u8", 1, CR_DT_U8},   {0x09, "i8", 1, CR_DT_I32},  {0x0B, "i16", 2, CR_DT_I32},
    {0x0C, "i32", 4, CR_DT_I32}, {0x0D, "f32", 4, CR_DT_F32}, {0x0E, "f64", 8, CR_DT_F64},
};

/* Reads exactly n bytes; returns how many it got (short at end of file), -1 on error. */
static int64_t gz_read_all(gzFile gz, void *buf, int64_t n) {
    int64_t got = 0;
    while (got < n) {
        int64_t chunk = n - got > (1 << 30) ? (1 << 30) : n - got;
        int r = gzread(gz, (char *)buf + got, (unsigned)chunk);
        if (r < 0) return -1;
        if (r == 0) break;
        got += r;
    }
    return got;
}

/* zlib's message without the "path: " it puts in front (ours names the file already). */
static const char *gz_msg(gzFile gz, const char *path) {
    int err = 0;
    const char *m = gzerror(gz, &err);
    if (err == Z_ERRNO) return strerror(errno);
    if (!m || !*m) return "read error";
    size_t n = strlen(path);
    if (strncmp(m, path, n) == 0 && m[n] == ':' && m[n + 1] == ' ') m += n + 2;
    return m;
}

/* Converts n big-endian items of file type t in place into the tensor's dtype. For the
 * widened types (i8, i16 -> i32) the raw bytes sit at the front of `dst` and are
 * expanded back to front, so no second buffer is needed. */
static void idx_convert(void *dst, int64_t n, const idx_type *t) {
    unsigned char *b = dst;
    switch (t->code) {
    case 0x08: break;
    case 0x09:
        for (int64_t i = n - 1; i >= 0; i--) ((int32_t *)dst)[i] = (int8_t)b[i];
        break;
    case 0x0B:
        for (int64_t i = n - 1; i >= 0; i--)
            ((int32_t *)dst)[i] = (int16_t)(uint16_t)((b[2 * i] << 8) | b[2 * i + 1]);
        break;
    case 0x0C:
    case 0x0D:
        for (int64_t i = 0; i < n; i++) {
            uint32_t v = ((uint32_t)b[4 * i] << 24) | ((uint32_t)b[4 * i + 1] << 16) |
                         ((uint32_t)b[4 * i + 2] << 8) | b[4 * i + 3];
            memcpy(b + 4 * i, &v, 4);
        }
        break;
    case 0x0E:
        for (int64_t i = 0; i < n; i++) {
            uint64_t v = 0;
            for (int k = 0; k < 8; k++) v = (v << 8) | b[8 * i + k];
            memcpy(b + 8 * i, &v, 8);
        }
        break;
    }
}

cr_status cr_data_read_idx(cr_tensor **out, const char *path) {
    *out = NULL;
    if (!path) return cr_fail(CR_ERR_ARG, "read_idx: path is nil; pass a file name");
    struct stat sb;
    if (stat(path, &sb) != 0)
        return cr_fail(CR_ERR_ARG, "read_idx: cannot open '%s': %s", path, strerror(errno));
    if (S_ISDIR(sb.st_mode))
        return cr_fail(CR_ERR_ARG, "read_idx: '%s' is a directory, not an IDX file", path);
    gzFile gz = gzopen(path, "rb");
    if (!gz) return cr_fail(CR_ERR_ARG, "read_idx: cannot open '%s': %s", path, strerror(errno));
    gzbuffer(gz, 1 << 18);

    cr_status st = CR_OK;
    cr_tensor *t = NULL;
    unsigned char head[4 + 4 * 255];
    int64_t got = gz_read_all(gz, head, 4);
    if (got < 0) {
        st = cr_fail(CR_ERR_ARG, "read_idx: '%s': corrupt gzip data (%s)", path, gz_msg(gz, path));
        goto done;
    }
    if (got < 4) {
        st = cr_fail(CR_ERR_ARG,
                     "read_idx: '%s' is truncated: %lld bytes, shorter than the 4-byte IDX magic",
                     path, (long long)got);
        goto done;
    }
    if (head[0] != 0 || head[1] != 0) {
        st = cr_fail(CR_ERR_ARG,
                     "read_idx: '%s' is not an IDX file: bad magic %02x %02x %02x %02x (an IDX "
                     "file starts 00 00 <type> <ndim>)",
                     path, head[0], head[1], head[2], head[3]);
        goto done;
    }
    const idx_type *type = NULL;
    for (size_t k = 0; k < sizeof idx_types / sizeof idx_types[0]; k++)
        if (idx_types[k].code == head[2]) type = &idx_types[k];
    if (!type) {
        st = cr_fail(CR_ERR_ARG,
                     "read_idx: '%s': unknown IDX data type 0x%02x (known: 0x08 u8, 0x09 i8, "
                     "0x0B i16, 0x0C i32, 0x0D f32, 0x0E f64)",
                     path, head[2]);
        goto done;
    }
    int ndim = head[3];
    if (ndim < 1 || ndim > CR_MAX_DIMS) {
        st = cr_fail(CR_ERR_ARG, "read_idx: '%s': header declares %d dims; crescent reads 1 to %d",
                     path, ndim, (int)CR_MAX_DIMS);
        goto done;
    }
    got = gz_read_all(gz, head + 4, 4 * ndim);
    if (got < 4 * ndim) {
        st = cr_fail(CR_ERR_ARG,
                     "read_idx: '%s' is truncated inside its header: %d dims need %d bytes of "
                     "sizes, the file has %lld",
                     path, ndim, 4 * ndim, (long long)(got < 0 ? 0 : got));
        goto done;
    }
    int64_t shape[CR_MAX_DIMS], n = 1;
    for (int d = 0; d < ndim; d++) {
        const unsigned char *p = head + 4 + 4 * d;
        shape[d] = ((int64_t)p[0] << 24) | ((int64_t)p[1] << 16) | ((int64_t)p[2] << 8) | p[3];
        /* checked before multiplying, so the product never overflows */
        if (shape[d] > 0 && n > IDX_MAX_BYTES / type->size / shape[d]) {
            char buf[160];
            st = cr_fail(CR_ERR_ARG,
                         "read_idx: '%s': absurd header: dims %s of %s would be more than %lld "
                         "GiB; the file is corrupt or not IDX",
                         path, cr_dims_str(ndim, shape, buf, sizeof buf), type->name,
                         (long long)(IDX_MAX_BYTES >> 30));
            goto done;
        }
        n *= shape[d];
    }
    int64_t need = n * type->size, header = 4 + 4 * (int64_t)ndim;
    char dims[160];
    cr_dims_str(ndim, shape, dims, sizeof dims);
    /* Bound the size before allocating: exact for a plain file, deflate's ratio for gzip. */
    if (gzdirect(gz)) {
        if ((int64_t)sb.st_size != header + need) {
            st = cr_fail(CR_ERR_ARG,
                         "read_idx: '%s': header declares %s %s = %lld data bytes, but the file "
                         "holds %lld after its %lld-byte header (%s)",
                         path, dims, type->name, (long long)need,
                         (long long)sb.st_size - header, (long long)header,
                         (int64_t)sb.st_size < header + need ? "truncated" : "extra bytes");
            goto done;
        }
    } else if (need > (int64_t)sb.st_size * GZ_MAX_RATIO) {
        st = cr_fail(CR_ERR_ARG,
                     "read_idx: '%s': header declares %s %s = %lld bytes, more than a %lld-byte "
                     "gzip file can hold; the file is truncated or corrupt",
                     path, dims, type->name, (long long)need, (long long)sb.st_size);
        goto done;
    }
    st = cr_tensor_alloc(&t, ndim, shape, type->dt, CR_CPU);
    if (st) goto done;
    got = gz_read_all(gz, cr_tensor_ptr(t), need);
    if (got < 0) {
        st = cr_fail(CR_ERR_ARG, "read_idx: '%s': corrupt gzip data after the header (%s)", path,
                     gz_msg(gz, path));
        goto done;
    }
    if (got < need) {
        st = cr_fail(CR_ERR_ARG,
                     "read_idx: '%s' is truncated: header declares %s %s = %lld data bytes, the "
                     "file holds %lld",
                     path, dims, type->name, (long long)need, (long long)got);
        goto done;
    }
    unsigned char extra[64];
    got = gz_read_all(gz, extra, sizeof extra);
    if (got != 0) {
        st = cr_fail(CR_ERR_ARG,
                     "read_idx: '%s': %s after the %lld data bytes its header declares (%s %s)",
                     path, got < 0 ? "corrupt gzip data" : "extra bytes", (long long)need,
                     dims, type->name);
        goto done;
    }
    idx_convert(cr_tensor_ptr(t), n, type);

done:
    gzclose(gz);
    if (st) {
        if (t) cr_tensor_free(t);
        return st;
    }
    *out = t;
    return CR_OK;
}
