/* cifar.c — the CIFAR-10 / CIFAR-100 binary reader (crescent_images.h describes the
 * format). Every file is checked before anything is allocated (exists, not a directory,
 * non-empty, a whole number of records), then the records are read in chunks and
 * scattered into the image and label tensors, each label checked against its range. A
 * failure names the file and the problem, never crashes. */
#include <errno.h>
#include <sys/stat.h>

#include "internal.h"

enum { CIFAR_PIXELS = 3 * 32 * 32, CIFAR_CHUNK = 1024 };

typedef struct {
    int label_bytes; /* 1 (CIFAR-10) or 2 (CIFAR-100: coarse, fine) */
    int fine_max;    /* largest valid (fine) label */
    int coarse_max;  /* CIFAR-100 coarse labels */
    const char *name;
} cifar_layout;

static cr_status file_records(const char *path, const cifar_layout *lay, int64_t *nrec) {
    struct stat sb;
    int64_t rec = lay->label_bytes + CIFAR_PIXELS;
    if (stat(path, &sb) != 0)
        return cr_fail(CR_ERR_ARG, "%s: cannot open '%s': %s", lay->name, path, strerror(errno));
    if (S_ISDIR(sb.st_mode))
        return cr_fail(CR_ERR_ARG, "%s: '%s' is a directory, not a CIFAR batch file", lay->name,
                       path);
    int64_t size = (int64_t)sb.st_size;
    if (size == 0)
        return cr_fail(CR_ERR_ARG, "%s: '%s' is empty; a CIFAR batch file holds %lld-byte records",
                       lay->name, path, (long long)rec);
    if (size % rec != 0)
        return cr_fail(CR_ERR_ARG,
                       "%s: '%s' has %lld bytes, not a multiple of the %lld-byte record (%d "
                       "label byte%s + 3072 pixels): %lld whole records and %lld bytes over; the "
                       "file is truncated or not %s binary data",
                       lay->name, path, (long long)size, (long long)rec, lay->label_bytes,
                       lay->label_bytes == 1 ? "" : "s", (long long)(size / rec),
                       (long long)(size % rec), lay->label_bytes == 1 ? "CIFAR-10" : "CIFAR-100");
    *nrec = size / rec;
    return CR_OK;
}

/* Reads `count` records of `path` into rows [row, row + count). */
static cr_status read_file(const char *path, const cifar_layout *lay, int64_t row, int64_t count,
                           uint8_t *img, int64_t *fine, int64_t *coarse, uint8_t *buf) {
    int64_t rec = lay->label_bytes + CIFAR_PIXELS;
    FILE *f = fopen(path, "rb");
    if (!f) return cr_fail(CR_ERR_ARG, "%s: cannot open '%s': %s", lay->name, path, strerror(errno));
    cr_status st = CR_OK;
    for (int64_t r0 = 0; r0 < count && !st; r0 += CIFAR_CHUNK) {
        int64_t m = count - r0 < CIFAR_CHUNK ? count - r0 : CIFAR_CHUNK;
        size_t got = fread(buf, (size_t)rec, (size_t)m, f);
        if ((int64_t)got != m) {
            st = cr_fail(CR_ERR_ARG, "%s: '%s' is truncated: read %lld records of %lld (%s)",
                         lay->name, path, (long long)(r0 + (int64_t)got), (long long)count,
                         ferror(f) ? strerror(errno) : "the file shrank while being read");
            break;
        }
        for (int64_t k = 0; k < m; k++) {
            const uint8_t *r = buf + k * rec;
            int64_t i = row + r0 + k;
            int lf = r[lay->label_bytes - 1];
            if (lay->label_bytes == 2) {
                if (r[0] > lay->coarse_max) {
                    st = cr_fail(CR_ERR_ARG,
                                 "%s: '%s': record %lld has coarse label %d, outside 0..%d; the "
                                 "file is corrupt or not CIFAR-100 binary data",
                                 lay->name, path, (long long)(r0 + k), r[0], lay->coarse_max);
                    break;
                }
                if (coarse) coarse[i] = r[0];
            }
            if (lf > lay->fine_max) {
                st = cr_fail(CR_ERR_ARG,
                             "%s: '%s': record %lld has %slabel %d, outside 0..%d; the file is "
                             "corrupt or not %s binary data",
                             lay->name, path, (long long)(r0 + k),
                             lay->label_bytes == 2 ? "fine " : "", lf, lay->fine_max,
                             lay->label_bytes == 2 ? "CIFAR-100" : "CIFAR-10");
                break;
            }
            fine[i] = lf;
            memcpy(img + i * CIFAR_PIXELS, r + lay->label_bytes, CIFAR_PIXELS);
        }
    }
    fclose(f);
    return st;
}

cr_status cr_cifar_read(cr_tensor **images, cr_tensor **labels, cr_tensor **coarse,
                        const char *const *paths, int npaths, cr_cifar_kind kind,
                        int64_t limit) {
    *images = NULL;
    *labels = NULL;
    if (coarse) *coarse = NULL;
    cifar_layout lay;
    if (kind == CR_CIFAR_10)
        lay = (cifar_layout){1, 9, 0, "cifar10"};
    else if (kind == CR_CIFAR_100)
        lay = (cifar_layout){2, 99, 19, "cifar100"};
    else
        return cr_fail(CR_ERR_ARG, "cifar_read: kind must be 10 or 100, got %d", (int)kind);
    if (!paths || npaths < 1)
        return cr_fail(CR_ERR_ARG, "%s: no files given; pass at least one batch file", lay.name);
    if (limit < 0)
        return cr_fail(CR_ERR_ARG, "%s: limit %lld must be >= 0 (0 = all)", lay.name,
                       (long long)limit);

    /* every file is checked first, so a bad fifth file fails before 150 MB are read */
    int64_t *nrec = malloc(sizeof(int64_t) * (size_t)npaths), total = 0;
    if (!nrec) return cr_fail(CR_ERR_OOM, "%s: out of memory", lay.name);
    cr_status st = CR_OK;
    for (int i = 0; i < npaths && !st; i++) {
        if (!paths[i]) st = cr_fail(CR_ERR_ARG, "%s: file name %d is nil", lay.name, i + 1);
        else st = file_records(paths[i], &lay, &nrec[i]);
        if (!st) total += nrec[i];
    }
    int64_t n = limit > 0 && limit < total ? limit : total;
    cr_tensor *img = NULL, *fine = NULL, *crs = NULL;
    uint8_t *buf = NULL;
    if (!st) {
        int64_t ishape[4] = {n, 3, 32, 32};
        st = cr_tensor_alloc(&img, 4, ishape, CR_DT_U8, CR_CPU);
        if (!st) st = cr_tensor_alloc(&fine, 1, ishape, CR_DT_I64, CR_CPU);
        if (!st && coarse && kind == CR_CIFAR_100)
            st = cr_tensor_alloc(&crs, 1, ishape, CR_DT_I64, CR_CPU);
    }
    if (!st) {
        buf = malloc((size_t)CIFAR_CHUNK * (size_t)(lay.label_bytes + CIFAR_PIXELS));
        if (!buf) st = cr_fail(CR_ERR_OOM, "%s: out of memory for the read buffer", lay.name);
    }
    int64_t row = 0;
    for (int i = 0; i < npaths && !st && row < n; i++) {
        int64_t count = nrec[i] < n - row ? nrec[i] : n - row;
        st = read_file(paths[i], &lay, row, count, (uint8_t *)cr_tensor_ptr(img),
                       (int64_t *)cr_tensor_ptr(fine),
                       crs ? (int64_t *)cr_tensor_ptr(crs) : NULL, buf);
        row += count;
    }
    free(buf);
    free(nrec);
    if (st) {
        if (img) cr_tensor_free(img);
        if (fine) cr_tensor_free(fine);
        if (crs) cr_tensor_free(crs);
        return st;
    }
    *images = img;
    *labels = fine;
    if (coarse) *coarse = crs;
    return CR_OK;
}
