/* image.c — JPEG (libturbojpeg) and PNG (libpng) decoding for image-folder data sets:
 * one file, or a list of files into the rows of a u8 batch [N, C, H, W] with OpenMP over
 * the files; bilinear resizing; encoders so tests can make their own files; and a
 * directory lister (crescent_images.h documents the conversions). A file is read whole,
 * its format told by its first bytes. The decoders run inside OpenMP workers, so they
 * never call cr_fail (its message is thread-local): they write "'<path>': <problem>"
 * into a caller's buffer, and the public functions turn the first failure into the
 * error. Hostile headers are refused before any large allocation. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <png.h>
#include <pthread.h>
#include <setjmp.h>
#include <sys/stat.h>
#include <turbojpeg.h>

#include "data_impl.h"

enum { IMG_MAX_SIDE = 1 << 16, IMG_ERRCAP = 512, IMG_PROBE_BYTES = 1 << 18 };
static const int64_t IMG_MAX_PIXELS = (int64_t)1 << 28;
static const int64_t IMG_MAX_FILE = (int64_t)1 << 31;

/* A decoded image: h x w pixels of c interleaved 8-bit channels (HWC). */
typedef struct {
    uint8_t *pix;
    int h, w, c;
} raw_image;

/* One per thread, for the thread's life (a loader worker decodes thousands of files):
 * the TurboJPEG handle is made on first use and destroyed when the thread exits. */
typedef struct {
    tjhandle tj;
} decoder;

static pthread_key_t decoder_key;
static pthread_once_t decoder_once = PTHREAD_ONCE_INIT;
static bool decoder_key_ok;

static void decoder_destroy(void *p) {
    decoder *d = p;
    if (d->tj) tjDestroy(d->tj);
    free(d);
}

static void decoder_key_init(void) { decoder_key_ok = pthread_key_create(&decoder_key, decoder_destroy) == 0; }

/* This thread's decoder; NULL when out of memory or out of thread keys (jpeg_handle then
 * says so). */
static decoder *thread_decoder(void) {
    pthread_once(&decoder_once, decoder_key_init);
    if (!decoder_key_ok) return NULL;
    decoder *d = pthread_getspecific(decoder_key);
    if (!d && (d = calloc(1, sizeof *d)) && pthread_setspecific(decoder_key, d)) {
        free(d);
        d = NULL;
    }
    return d;
}

/* ---- files ------------------------------------------------------------------------ */

/* Reads at most `max` bytes (0 = all) of path into *buf (malloc'd), *len; *full = 1 when
 * that was the whole file. Returns 0, or -1 with a message in err. */
static int slurp(const char *path, int64_t max, uint8_t **buf, size_t *len, int *full,
                 char *err, size_t cap) {
    *buf = NULL;
    struct stat sb;
    if (stat(path, &sb) != 0) {
        snprintf(err, cap, "'%s': cannot open: %s", path, strerror(errno));
        return -1;
    }
    if (S_ISDIR(sb.st_mode)) {
        snprintf(err, cap, "'%s': is a directory, not an image file", path);
        return -1;
    }
    int64_t size = (int64_t)sb.st_size;
    if (size == 0) {
        snprintf(err, cap, "'%s': is empty, not an image", path);
        return -1;
    }
    if (size > IMG_MAX_FILE) {
        snprintf(err, cap, "'%s': %lld bytes, more than the %lld-byte limit for one image", path,
                 (long long)size, (long long)IMG_MAX_FILE);
        return -1;
    }
    int64_t want = max > 0 && max < size ? max : size;
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, cap, "'%s': cannot open: %s", path, strerror(errno));
        return -1;
    }
    uint8_t *b = malloc((size_t)want);
    if (!b) {
        fclose(f);
        snprintf(err, cap, "'%s': out of memory for %lld bytes", path, (long long)want);
        return -1;
    }
    size_t got = fread(b, 1, (size_t)want, f);
    fclose(f);
    if ((int64_t)got != want) {
        free(b);
        snprintf(err, cap, "'%s': read %lld of %lld bytes", path, (long long)got, (long long)want);
        return -1;
    }
    *buf = b;
    *len = got;
    *full = want == size;
    return 0;
}

static const uint8_t PNG_SIG[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

static cr_image_format sniff(const uint8_t *b, size_t len) {
    if (len >= 3 && b[0] == 0xff && b[1] == 0xd8 && b[2] == 0xff) return CR_IMAGE_JPEG;
    if (len >= 8 && memcmp(b, PNG_SIG, 8) == 0) return CR_IMAGE_PNG;
    return CR_IMAGE_UNKNOWN;
}

static int not_image(const char *path, const uint8_t *b, size_t len, char *err, size_t cap) {
    char head[40] = "";
    for (size_t k = 0; k < len && k < 8; k++)
        snprintf(head + 3 * k, sizeof head - 3 * k, k ? " %02x" : "%02x", b[k]);
    snprintf(err, cap,
             "'%s': not a JPEG or PNG file (it starts with bytes %s; JPEG starts ff d8 ff, PNG "
             "89 50 4e 47)",
             path, head);
    return -1;
}

static int check_dims(const char *path, const char *fmt, int64_t h, int64_t w, char *err,
                      size_t cap) {
    if (h < 1 || w < 1 || h > IMG_MAX_SIDE || w > IMG_MAX_SIDE || h * w > IMG_MAX_PIXELS) {
        snprintf(err, cap,
                 "'%s': %s header declares %lld x %lld pixels; crescent reads 1 to %d per side "
                 "and at most %lld pixels (the file is corrupt?)",
                 path, fmt, (long long)h, (long long)w, (int)IMG_MAX_SIDE,
                 (long long)IMG_MAX_PIXELS);
        return -1;
    }
    return 0;
}

/* ---- JPEG ------------------------------------------------------------------------- */

static int jpeg_handle(decoder *d, const char *path, char *err, size_t cap) {
    if (!d) {
        snprintf(err, cap, "'%s': cannot keep a JPEG decoder for this thread (out of memory or of "
                 "thread-local keys)", path);
        return -1;
    }
    if (!d->tj) d->tj = tjInitDecompress();
    if (!d->tj) {
        snprintf(err, cap, "'%s': cannot start the JPEG decoder (%s)", path, tjGetErrorStr2(NULL));
        return -1;
    }
    return 0;
}

/* A handle that met an error or a warning is not reused: TurboJPEG 2.1 then read the
 * next truncated file's header as 0 x 0 pixels instead of failing. */
static void jpeg_drop(decoder *d) {
    tjDestroy(d->tj);
    d->tj = NULL;
}

/* libjpeg warnings that still give the whole image (PIL accepts these files too); every
 * other warning — a premature end, a corrupt segment — is a bad file. */
static bool benign_jpeg_warning(const char *msg) { return strstr(msg, "extraneous bytes") != NULL; }

/* Decodes to `want_c` channels (1: libjpeg's grey from the luma plane, 3: RGB). */
static int decode_jpeg(decoder *d, const char *path, const uint8_t *buf, size_t len, int want_c,
                       raw_image *out, char *err, size_t cap) {
    if (jpeg_handle(d, path, err, cap)) return -1;
    int w, h, subsamp, cs;
    if (tjDecompressHeader3(d->tj, buf, (unsigned long)len, &w, &h, &subsamp, &cs) != 0) {
        snprintf(err, cap, "'%s': corrupt JPEG header (%s)", path, tjGetErrorStr2(d->tj));
        jpeg_drop(d);
        return -1;
    }
    if (check_dims(path, "JPEG", h, w, err, cap)) return -1;
    if (cs == TJCS_CMYK || cs == TJCS_YCCK) {
        snprintf(err, cap, "'%s': a CMYK JPEG; crescent reads grey and colour JPEGs (convert it "
                 "to RGB)", path);
        return -1;
    }
    uint8_t *pix = malloc((size_t)h * (size_t)w * (size_t)want_c);
    if (!pix) {
        snprintf(err, cap, "'%s': out of memory for %d x %d pixels", path, h, w);
        return -1;
    }
    int pf = want_c == 1 ? TJPF_GRAY : TJPF_RGB;
    if (tjDecompress2(d->tj, buf, (unsigned long)len, pix, w, 0, h, pf, 0) != 0) {
        const char *msg = tjGetErrorStr2(d->tj);
        bool benign = tjGetErrorCode(d->tj) == TJERR_WARNING && benign_jpeg_warning(msg);
        if (!benign) snprintf(err, cap, "'%s': truncated or corrupt JPEG (%s)", path, msg);
        jpeg_drop(d);
        if (!benign) {
            free(pix);
            return -1;
        }
    }
    *out = (raw_image){pix, h, w, want_c};
    return 0;
}

/* ---- PNG -------------------------------------------------------------------------- */

typedef struct {
    const uint8_t *p;
    size_t len, pos;
    const char *path;
    char *err;
    size_t cap;
    jmp_buf jb;
} png_src;

static void png_fail(png_structp png, png_const_charp msg) {
    png_src *s = png_get_error_ptr(png);
    snprintf(s->err, s->cap, "'%s': truncated or corrupt PNG (%s)", s->path, msg);
    longjmp(s->jb, 1);
}
static void png_quiet(png_structp png, png_const_charp msg) { (void)png, (void)msg; }

static void png_read_mem(png_structp png, png_bytep dst, png_size_t n) {
    png_src *s = png_get_io_ptr(png);
    if (n > s->len - s->pos) png_error(png, "unexpected end of file");
    memcpy(dst, s->p + s->pos, n);
    s->pos += n;
}

/* Decodes to the file's own channels (1..4), 8 bits each. */
static int decode_png(const char *path, const uint8_t *buf, size_t len, raw_image *out, char *err,
                      size_t cap) {
    png_src src = {.p = buf, .len = len, .pos = 0, .path = path, .err = err, .cap = cap};
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, png_fail, png_quiet);
    if (!png) {
        snprintf(err, cap, "'%s': cannot start the PNG decoder", path);
        return -1;
    }
    png_infop info = png_create_info_struct(png);
    uint8_t *volatile pix = NULL;
    png_bytep *volatile rows = NULL;
    if (!info || setjmp(src.jb)) {
        if (!info) snprintf(err, cap, "'%s': cannot start the PNG decoder", path);
        png_destroy_read_struct(&png, info ? &info : NULL, NULL);
        free(pix);
        free(rows);
        return -1;
    }
    png_set_read_fn(png, &src, png_read_mem);
    png_set_crc_action(png, PNG_CRC_DEFAULT, PNG_CRC_WARN_DISCARD);
    png_read_info(png, info);
    png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
    if (check_dims(path, "PNG", h, w, err, cap)) longjmp(src.jb, 1);
    int depth = png_get_bit_depth(png, info), ct = png_get_color_type(png, info);
    if (ct == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (ct == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
    if (png_get_valid(png, info, PNG_INFO_tRNS)) png_set_tRNS_to_alpha(png);
    if (depth == 16) png_set_strip_16(png);
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    int c = png_get_channels(png, info);
    size_t rowbytes = png_get_rowbytes(png, info);
    if (c < 1 || c > 4 || rowbytes != (size_t)w * (size_t)c) png_error(png, "unexpected layout");
    pix = malloc((size_t)h * rowbytes);
    rows = malloc(sizeof(png_bytep) * h);
    if (!pix || !rows) {
        snprintf(err, cap, "'%s': out of memory for %u x %u pixels", path, h, w);
        longjmp(src.jb, 1);
    }
    for (png_uint_32 y = 0; y < h; y++) rows[y] = pix + (size_t)y * rowbytes;
    png_read_image(png, rows);
    png_read_end(png, NULL);
    png_destroy_read_struct(&png, &info, NULL);
    free(rows);
    *out = (raw_image){pix, (int)h, (int)w, c};
    return 0;
}

/* ---- decode + convert + resize ---------------------------------------------------- */

/* Maps the raw image's channels to want_c (1 or 3) in place or into a new buffer. */
static int to_channels(raw_image *r, int want_c, const char *path, char *err, size_t cap) {
    if (r->c == want_c) return 0;
    int64_t n = (int64_t)r->h * r->w;
    const uint8_t *s = r->pix;
    uint8_t *d = want_c > r->c ? malloc((size_t)n * (size_t)want_c) : r->pix;
    if (!d) {
        snprintf(err, cap, "'%s': out of memory", path);
        return -1;
    }
    int c = r->c;
    for (int64_t i = 0; i < n; i++) {
        const uint8_t *p = s + i * c;
        if (want_c == 3) {
            uint8_t v0 = p[0], v1 = c >= 3 ? p[1] : p[0], v2 = c >= 3 ? p[2] : p[0];
            d[3 * i] = v0, d[3 * i + 1] = v1, d[3 * i + 2] = v2;
        } else {
            d[i] = c >= 3 ? (uint8_t)((19595u * p[0] + 38470u * p[1] + 7471u * p[2] + 32768u) >> 16)
                          : p[0];
        }
    }
    if (d != r->pix) free(r->pix);
    r->pix = d;
    r->c = want_c;
    return 0;
}

/* Bilinear resize (crescent_images.h gives the formula) of C channels from a strided
 * source (element (c, y, x) at src[c * sc + y * sy + x * sx]) into CHW dst [C, oh, ow].
 * Same size: a plain copy. */
static void resize_into(const uint8_t *src, int C, int H, int W, int64_t sc, int64_t sy,
                        int64_t sx, uint8_t *dst, int oh, int ow) {
    if (oh == H && ow == W) {
        for (int c = 0; c < C; c++)
            for (int y = 0; y < H; y++) {
                const uint8_t *s = src + c * sc + y * sy;
                uint8_t *d = dst + ((int64_t)c * oh + y) * ow;
                if (sx == 1) memcpy(d, s, (size_t)W);
                else
                    for (int x = 0; x < W; x++) d[x] = s[x * sx];
            }
        return;
    }
    double scale_y = (double)H / oh, scale_x = (double)W / ow;
    int64_t *x0 = malloc(sizeof(int64_t) * 2 * (size_t)ow);
    double *lx = malloc(sizeof(double) * (size_t)ow);
    if (!x0 || !lx) { /* tiny; treat as unreachable but keep the output defined */
        memset(dst, 0, (size_t)C * oh * ow);
        free(x0);
        free(lx);
        return;
    }
    int64_t *x1 = x0 + ow;
    for (int x = 0; x < ow; x++) {
        double s = (x + 0.5) * scale_x - 0.5;
        if (s < 0) s = 0;
        int64_t i0 = (int64_t)s;
        if (i0 > W - 1) i0 = W - 1;
        x0[x] = i0 * sx;
        x1[x] = (i0 < W - 1 ? i0 + 1 : i0) * sx;
        lx[x] = s - (double)i0;
    }
    for (int y = 0; y < oh; y++) {
        double s = (y + 0.5) * scale_y - 0.5;
        if (s < 0) s = 0;
        int64_t y0 = (int64_t)s;
        if (y0 > H - 1) y0 = H - 1;
        int64_t y1 = y0 < H - 1 ? y0 + 1 : y0;
        double ly = s - (double)y0;
        for (int c = 0; c < C; c++) {
            const uint8_t *r0 = src + c * sc + y0 * sy, *r1 = src + c * sc + y1 * sy;
            uint8_t *d = dst + ((int64_t)c * oh + y) * ow;
            for (int x = 0; x < ow; x++) {
                double a = r0[x0[x]], b = r0[x1[x]], e = r1[x0[x]], f = r1[x1[x]];
                double top = a + lx[x] * (b - a), bot = e + lx[x] * (f - e);
                double v = floor(top + ly * (bot - top) + 0.5);
                d[x] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
            }
        }
    }
    free(x0);
    free(lx);
}

/* Decodes the encoded bytes of the image called `path` (in messages) to want_c channels
 * (HWC); frees buf. */
static int decode_bytes(decoder *d, const char *path, uint8_t *buf, size_t len, int want_c, raw_image *r,
                        char *err, size_t cap) {
    int rc;
    switch (sniff(buf, len)) {
    case CR_IMAGE_JPEG: rc = decode_jpeg(d, path, buf, len, want_c, r, err, cap); break;
    case CR_IMAGE_PNG:
        rc = decode_png(path, buf, len, r, err, cap);
        if (!rc && (rc = to_channels(r, want_c, path, err, cap))) free(r->pix);
        break;
    default: rc = not_image(path, buf, len, err, cap);
    }
    free(buf);
    return rc;
}

/* Reads and decodes one file to want_c channels (HWC). */
static int decode_file(decoder *d, const char *path, int want_c, raw_image *r, char *err,
                       size_t cap) {
    uint8_t *buf;
    size_t len;
    int full;
    if (slurp(path, 0, &buf, &len, &full, err, cap)) return -1;
    return decode_bytes(d, path, buf, len, want_c, r, err, cap);
}

/* Reads `length` bytes at `offset` of the archive `file` (a member called name). */
static int read_member(const char *file, const char *name, int64_t offset, int64_t length, uint8_t **buf,
                       char *err, size_t cap) {
    *buf = NULL;
    if (length <= 0 || length > IMG_MAX_FILE) {
        snprintf(err, cap, "'%.400s': a member of %lld bytes is not an image", name, (long long)length);
        return -1;
    }
    FILE *f = fopen(file, "rb");
    if (!f) {
        snprintf(err, cap, "'%.400s': cannot open: %s", file, strerror(errno));
        return -1;
    }
    uint8_t *b = malloc((size_t)length);
    size_t got = 0;
    if (b && fseeko(f, (off_t)offset, SEEK_SET) == 0) got = fread(b, 1, (size_t)length, f);
    fclose(f);
    if (!b || (int64_t)got != length) {
        free(b);
        snprintf(err, cap, "'%.300s': read %lld of its %lld bytes (the archive is shorter than its index says)",
                 name, (long long)got, (long long)length);
        return -1;
    }
    *buf = b;
    return 0;
}

/* Decodes path into dst, a CHW block [want_c, oh, ow]. */
static int decode_into(decoder *d, const char *path, int want_c, int oh, int ow, uint8_t *dst,
                       char *err, size_t cap) {
    raw_image r;
    if (decode_file(d, path, want_c, &r, err, cap)) return -1;
    resize_into(r.pix, want_c, r.h, r.w, 1, (int64_t)r.w * want_c, want_c, dst, oh, ow);
    free(r.pix);
    return 0;
}

/* A decoded image at its size, or resized to height x width (0: its own), in a new
 * malloc'd CHW block. */
static cr_status finish_load(const char *name, raw_image *r, int channels, int height, int width, uint8_t **pix,
                             int64_t *h, int64_t *w) {
    int oh = height ? height : r->h, ow = width ? width : r->w;
    uint8_t *out = malloc((size_t)channels * (size_t)oh * (size_t)ow);
    if (!out) {
        free(r->pix);
        return cr_fail(CR_ERR_OOM, "'%s': out of memory for a %d x %d image", name, oh, ow);
    }
    resize_into(r->pix, channels, r->h, r->w, 1, (int64_t)r->w * channels, channels, out, oh, ow);
    free(r->pix);
    *pix = out;
    *h = oh;
    *w = ow;
    return CR_OK;
}

/* An archive member's name in messages: "<archive>:<member>". */
static void member_name(char *dst, size_t cap, const char *path, const char *member) {
    snprintf(dst, cap, "%.300s:%.200s", path, member);
}

cr_status cr_image_load(const char *path, const char *member, int64_t offset, int64_t length, int channels,
                        int height, int width, uint8_t **pix, int64_t *h, int64_t *w) {
    *pix = NULL;
    char err[IMG_ERRCAP];
    decoder *d = thread_decoder();
    raw_image r;
    int rc;
    if (member) {
        char name[IMG_ERRCAP];
        member_name(name, sizeof name, path, member);
        uint8_t *buf;
        rc = read_member(path, name, offset, length, &buf, err, sizeof err);
        if (!rc) rc = decode_bytes(d, name, buf, (size_t)length, channels, &r, err, sizeof err);
    } else {
        rc = decode_file(d, path, channels, &r, err, sizeof err);
    }
    if (rc) return cr_fail(CR_ERR_ARG, "%s", err);
    return finish_load(path, &r, channels, height, width, pix, h, w);
}

cr_status cr_image_load_encoded(const char *name, uint8_t *buf, int64_t len, int channels, int height, int width,
                                uint8_t **pix, int64_t *h, int64_t *w) {
    *pix = NULL;
    char err[IMG_ERRCAP];
    raw_image r;
    if (decode_bytes(thread_decoder(), name, buf, (size_t)len, channels, &r, err, sizeof err))
        return cr_fail(CR_ERR_ARG, "%s", err);
    return finish_load(name, &r, channels, height, width, pix, h, w);
}

/* ---- public: probe, read, decode_files, resize ------------------------------------ */

cr_status cr_image_probe(cr_image_info *info, const char *path) {
    memset(info, 0, sizeof *info);
    if (!path) return cr_fail(CR_ERR_ARG, "probe_image: path is nil; pass a file name");
    char err[IMG_ERRCAP];
    uint8_t *buf;
    size_t len;
    int full;
    if (slurp(path, IMG_PROBE_BYTES, &buf, &len, &full, err, sizeof err))
        return cr_fail(CR_ERR_ARG, "probe_image: %s", err);
    cr_status st = CR_OK;
    cr_image_format fmt = sniff(buf, len);
    if (fmt == CR_IMAGE_PNG) {
        /* signature, then the IHDR chunk: length 13, "IHDR", w, h, depth, colour type */
        if (len < 33 || memcmp(buf + 12, "IHDR", 4) != 0) {
            st = cr_fail(CR_ERR_ARG, "probe_image: '%s': corrupt PNG (no IHDR chunk after the "
                         "signature)", path);
        } else {
            const uint8_t *p = buf + 16;
            int64_t w = ((int64_t)p[0] << 24) | (p[1] << 16) | (p[2] << 8) | p[3];
            int64_t h = ((int64_t)p[4] << 24) | (p[5] << 16) | (p[6] << 8) | p[7];
            int ct = p[9];
            int ch = ct == 0 ? 1 : ct == 2 ? 3 : ct == 3 ? 3 : ct == 4 ? 2 : ct == 6 ? 4 : -1;
            if (ch < 0) {
                st = cr_fail(CR_ERR_ARG, "probe_image: '%s': corrupt PNG (colour type %d)", path, ct);
            } else if (check_dims(path, "PNG", h, w, err, sizeof err)) {
                st = cr_fail(CR_ERR_ARG, "probe_image: %s", err);
            } else {
                *info = (cr_image_info){CR_IMAGE_PNG, (int)h, (int)w, ch};
            }
        }
    } else if (fmt == CR_IMAGE_JPEG) {
        decoder *d = thread_decoder();
        int w, h, subsamp, cs;
        if (jpeg_handle(d, path, err, sizeof err)) {
            st = cr_fail(CR_ERR_ARG, "probe_image: %s", err);
        } else {
            int bad = tjDecompressHeader3(d->tj, buf, (unsigned long)len, &w, &h, &subsamp, &cs);
            if (bad && !full) { /* the frame header lies beyond the first bytes: read all */
                free(buf);
                buf = NULL;
                jpeg_drop(d);
                if (slurp(path, 0, &buf, &len, &full, err, sizeof err) || jpeg_handle(d, path, err, sizeof err))
                    st = cr_fail(CR_ERR_ARG, "probe_image: %s", err);
                else
                    bad = tjDecompressHeader3(d->tj, buf, (unsigned long)len, &w, &h, &subsamp, &cs);
            }
            if (st) {
            } else if (bad) {
                st = cr_fail(CR_ERR_ARG, "probe_image: '%s': corrupt JPEG header (%s)", path,
                             tjGetErrorStr2(d->tj));
                jpeg_drop(d);
            } else if (check_dims(path, "JPEG", h, w, err, sizeof err)) {
                st = cr_fail(CR_ERR_ARG, "probe_image: %s", err);
            } else {
                *info = (cr_image_info){CR_IMAGE_JPEG, h, w, cs == TJCS_GRAY ? 1 : 3};
            }
        }
    } else {
        not_image(path, buf, len, err, sizeof err);
        st = cr_fail(CR_ERR_ARG, "probe_image: %s", err);
    }
    free(buf);
    return st;
}

static cr_status check_size_args(const char *op, int channels, int height, int width) {
    if (channels != 1 && channels != 3)
        return cr_fail(CR_ERR_ARG, "%s: channels must be 1 (grey) or 3 (RGB), got %d", op, channels);
    if (height < 0 || width < 0 || height > IMG_MAX_SIDE || width > IMG_MAX_SIDE ||
        (height == 0) != (width == 0))
        return cr_fail(CR_ERR_ARG,
                       "%s: size %d x %d: give both height and width in 1..%d, or neither", op,
                       height, width, (int)IMG_MAX_SIDE);
    return CR_OK;
}

cr_status cr_image_read(cr_tensor **out, const char *path, int channels, int height,
                        int width) {
    *out = NULL;
    if (!path) return cr_fail(CR_ERR_ARG, "read_image: path is nil; pass a file name");
    cr_status st = check_size_args("read_image", channels, height, width);
    if (st) return st;
    char err[IMG_ERRCAP];
    decoder *d = thread_decoder();
    raw_image r;
    int rc = decode_file(d, path, channels, &r, err, sizeof err);
    if (rc) return cr_fail(CR_ERR_ARG, "read_image: %s", err);
    int oh = height ? height : r.h, ow = width ? width : r.w;
    int64_t shape[3] = {channels, oh, ow};
    st = cr_tensor_alloc(out, 3, shape, CR_DT_U8, CR_CPU);
    if (!st)
        resize_into(r.pix, channels, r.h, r.w, 1, (int64_t)r.w * channels, channels,
                    (uint8_t *)cr_tensor_ptr(*out), oh, ow);
    free(r.pix);
    return st;
}

cr_status cr_image_decode_files(cr_tensor *out, int64_t row0, const char *const *paths,
                                int64_t n, uint8_t *ok, char *errors, int64_t errcap) {
    char buf[160];
    if (!out || cr_tensor_device(out) != CR_DEV_CPU || out->dtype != CR_DT_U8 || out->ndim != 4 ||
        !cr_tensor_is_contiguous(out) || (out->shape[1] != 1 && out->shape[1] != 3))
        return cr_fail(CR_ERR_ARG,
                       "decode_images: the output must be a contiguous CPU u8 tensor [N, C, H, W] "
                       "with C 1 or 3, got %s %s",
                       out ? cr_dtype_name(out->dtype) : "nil", cr_shape_str(out, buf, sizeof buf));
    if (n < 0 || row0 < 0 || row0 + n > out->shape[0])
        return cr_fail(CR_ERR_ARG, "decode_images: rows %lld .. %lld do not fit an output of %lld rows",
                       (long long)row0, (long long)(row0 + n - 1), (long long)out->shape[0]);
    if (n > 0 && !paths) return cr_fail(CR_ERR_ARG, "decode_images: paths is nil");
    if (ok && errors && errcap < 1)
        return cr_fail(CR_ERR_ARG, "decode_images: errcap must be >= 1 with an errors buffer");
    for (int64_t i = 0; i < n; i++)
        if (!paths[i]) return cr_fail(CR_ERR_ARG, "decode_images: path %lld is nil", (long long)i + 1);
    int C = (int)out->shape[1], oh = (int)out->shape[2], ow = (int)out->shape[3];
    int64_t sample = (int64_t)C * oh * ow;
    uint8_t *base = (uint8_t *)cr_tensor_ptr(out) + row0 * sample;
    int64_t first_bad = n;
    char first_err[IMG_ERRCAP] = "";
    bool par = n > 1 && cr_threads() > 1;

#pragma omp parallel if (par)
    {
        decoder *d = thread_decoder();
        char err[IMG_ERRCAP];
#pragma omp for schedule(dynamic, 1)
        for (int64_t i = 0; i < n; i++) {
            int64_t stop;
#pragma omp atomic read
            stop = first_bad;
            if (!ok && stop < i) continue; /* the call fails anyway */
            uint8_t *dst = base + i * sample;
            if (decode_into(d, paths[i], C, oh, ow, dst, err, sizeof err) == 0) {
                if (ok) ok[i] = 1;
                continue;
            }
            memset(dst, 0, (size_t)sample);
            if (ok) {
                ok[i] = 0;
                if (errors) snprintf(errors + i * errcap, (size_t)errcap, "%s", err);
                continue;
            }
#pragma omp critical(cr_image_first_bad)
            if (i < first_bad) {
                memcpy(first_err, err, sizeof err);
#pragma omp atomic write
                first_bad = i;
            }
        }
    }
    if (!ok && first_bad < n)
        return cr_fail(CR_ERR_ARG, "decode_images: %s (file %lld of %lld)", first_err,
                       (long long)first_bad + 1, (long long)n);
    return CR_OK;
}

cr_status cr_image_resize(cr_tensor **out, const cr_tensor *img, int height, int width) {
    *out = NULL;
    char buf[160];
    if (!img || cr_tensor_device(img) != CR_DEV_CPU || img->dtype != CR_DT_U8 ||
        (img->ndim != 3 && img->ndim != 4))
        return cr_fail(CR_ERR_ARG, "resize_image: expected a CPU u8 tensor [C, H, W] or [N, C, H, W], got %s %s",
                       img ? cr_dtype_name(img->dtype) : "nil", cr_shape_str(img, buf, sizeof buf));
    if (height < 1 || width < 1 || height > IMG_MAX_SIDE || width > IMG_MAX_SIDE)
        return cr_fail(CR_ERR_ARG, "resize_image: size %d x %d must be in 1..%d per side", height,
                       width, (int)IMG_MAX_SIDE);
    int nd = img->ndim;
    int64_t N = nd == 4 ? img->shape[0] : 1, C = img->shape[nd - 3];
    int64_t H = img->shape[nd - 2], W = img->shape[nd - 1];
    if (H < 1 || W < 1 || H > IMG_MAX_SIDE || W > IMG_MAX_SIDE || C > INT32_MAX)
        return cr_fail(CR_ERR_ARG, "resize_image: input %s has an empty or oversized plane",
                       cr_shape_str(img, buf, sizeof buf));
    int64_t shape[4] = {N, C, height, width};
    cr_status st = cr_tensor_alloc(out, nd, nd == 4 ? shape : shape + 1, CR_DT_U8, CR_CPU);
    if (st) return st;
    const uint8_t *src = (const uint8_t *)cr_tensor_ptr(img);
    uint8_t *dst = (uint8_t *)cr_tensor_ptr(*out);
    int64_t sn = nd == 4 ? img->stride[0] : 0, sc = img->stride[nd - 3];
    int64_t sy = img->stride[nd - 2], sx = img->stride[nd - 1];
    int64_t osample = C * height * width;
    bool par = N > 1 && N * osample >= CR_PAR_GRAIN && cr_threads() > 1;
#pragma omp parallel for if (par) schedule(static)
    for (int64_t i = 0; i < N; i++)
        resize_into(src + i * sn, (int)C, (int)H, (int)W, sc, sy, sx, dst + i * osample, height,
                    width);
    return CR_OK;
}

/* ---- encoders ----------------------------------------------------------------------- */

/* Copies a u8 [C, H, W] view into a malloc'd HWC buffer. */
static uint8_t *gather_hwc(const cr_tensor *img) {
    int64_t C = img->shape[0], H = img->shape[1], W = img->shape[2];
    uint8_t *b = malloc((size_t)(C * H * W));
    if (!b) return NULL;
    const uint8_t *s = (const uint8_t *)cr_tensor_ptr(img);
    for (int64_t y = 0; y < H; y++)
        for (int64_t x = 0; x < W; x++)
            for (int64_t c = 0; c < C; c++)
                b[(y * W + x) * C + c] =
                    s[c * img->stride[0] + y * img->stride[1] + x * img->stride[2]];
    return b;
}

static cr_status check_encode_arg(const char *op, const cr_tensor *img, const char *path,
                                  int cmin, int cmax) {
    char buf[160];
    if (!path) return cr_fail(CR_ERR_ARG, "%s: path is nil; pass a file name", op);
    if (!img || cr_tensor_device(img) != CR_DEV_CPU || img->dtype != CR_DT_U8 || img->ndim != 3 ||
        img->shape[0] < cmin || img->shape[0] > cmax || img->shape[1] < 1 || img->shape[2] < 1 ||
        img->shape[1] > IMG_MAX_SIDE || img->shape[2] > IMG_MAX_SIDE)
        return cr_fail(CR_ERR_ARG, "%s: expected a CPU u8 image [C, H, W] with C in %d..%d and "
                       "sides 1..%d, got %s %s",
                       op, cmin, cmax, (int)IMG_MAX_SIDE, img ? cr_dtype_name(img->dtype) : "nil",
                       cr_shape_str(img, buf, sizeof buf));
    return CR_OK;
}

cr_status cr_image_write_jpeg(const cr_tensor *img, const char *path, int quality) {
    cr_status st = check_encode_arg("write_jpeg", img, path, 1, 3);
    if (st) return st;
    if (img->shape[0] == 2) return cr_fail(CR_ERR_ARG, "write_jpeg: C must be 1 or 3, got 2");
    if (quality < 1 || quality > 100)
        return cr_fail(CR_ERR_ARG, "write_jpeg: quality %d must be in 1..100", quality);
    int C = (int)img->shape[0], H = (int)img->shape[1], W = (int)img->shape[2];
    uint8_t *hwc = gather_hwc(img);
    tjhandle tj = tjInitCompress();
    unsigned char *jpg = NULL;
    unsigned long size = 0;
    if (!hwc || !tj) {
        st = cr_fail(CR_ERR_OOM, "write_jpeg: cannot start the encoder");
    } else if (tjCompress2(tj, hwc, W, 0, H, C == 1 ? TJPF_GRAY : TJPF_RGB, &jpg, &size,
                           C == 1 ? TJSAMP_GRAY : TJSAMP_444, quality, 0) != 0) {
        st = cr_fail(CR_ERR_ARG, "write_jpeg: '%s': %s", path, tjGetErrorStr2(tj));
    } else {
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(jpg, 1, size, f) != size)
            st = cr_fail(CR_ERR_ARG, "write_jpeg: cannot write '%s': %s", path, strerror(errno));
        if (f && fclose(f) != 0 && !st)
            st = cr_fail(CR_ERR_ARG, "write_jpeg: cannot write '%s': %s", path, strerror(errno));
    }
    if (jpg) tjFree(jpg);
    if (tj) tjDestroy(tj);
    free(hwc);
    return st;
}

typedef struct {
    char err[IMG_ERRCAP];
    jmp_buf jb;
} png_sink;

static void png_write_fail(png_structp png, png_const_charp msg) {
    png_sink *s = png_get_error_ptr(png);
    snprintf(s->err, sizeof s->err, "%s", msg);
    longjmp(s->jb, 1);
}

cr_status cr_image_write_png(const cr_tensor *img, const char *path, int palette) {
    cr_status st = check_encode_arg("write_png", img, path, 1, 4);
    if (st) return st;
    int C = (int)img->shape[0], H = (int)img->shape[1], W = (int)img->shape[2];
    if (palette && C != 3) return cr_fail(CR_ERR_ARG, "write_png: a palette PNG needs C = 3, got %d", C);
    uint8_t *hwc = gather_hwc(img);
    if (!hwc) return cr_fail(CR_ERR_OOM, "write_png: out of memory");
    /* palette: the distinct colours in order of appearance, each pixel its index */
    png_color pal[256];
    int npal = 0;
    if (palette) {
        for (int64_t i = 0; i < (int64_t)H * W; i++) {
            const uint8_t *p = hwc + 3 * i;
            int k = 0;
            while (k < npal && (pal[k].red != p[0] || pal[k].green != p[1] || pal[k].blue != p[2])) k++;
            if (k == npal) {
                if (npal == 256) {
                    free(hwc);
                    return cr_fail(CR_ERR_ARG, "write_png: more than 256 colours for a palette PNG");
                }
                pal[npal++] = (png_color){p[0], p[1], p[2]};
            }
            hwc[i] = (uint8_t)k; /* i <= 3 i: never overwrites an unread pixel */
        }
    }
    FILE *f = fopen(path, "wb");
    if (!f) {
        free(hwc);
        return cr_fail(CR_ERR_ARG, "write_png: cannot write '%s': %s", path, strerror(errno));
    }
    png_sink sink;
    sink.err[0] = 0;
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &sink, png_write_fail, png_quiet);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    png_bytep *volatile rows = NULL;
    if (!png || !info || setjmp(sink.jb)) {
        if (png) png_destroy_write_struct(&png, info ? &info : NULL);
        free(rows);
        free(hwc);
        fclose(f);
        return cr_fail(CR_ERR_ARG, "write_png: '%s': %s", path, sink.err[0] ? sink.err : "cannot start the encoder");
    }
    png_init_io(png, f);
    static const int types[5] = {0, PNG_COLOR_TYPE_GRAY, PNG_COLOR_TYPE_GRAY_ALPHA,
                                 PNG_COLOR_TYPE_RGB, PNG_COLOR_TYPE_RGB_ALPHA};
    png_set_IHDR(png, info, (png_uint_32)W, (png_uint_32)H, 8, palette ? PNG_COLOR_TYPE_PALETTE : types[C],
                 PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    if (palette) png_set_PLTE(png, info, pal, npal);
    rows = malloc(sizeof(png_bytep) * (size_t)H);
    if (!rows) png_error(png, "out of memory");
    int64_t rowbytes = palette ? W : (int64_t)W * C;
    for (int y = 0; y < H; y++) rows[y] = hwc + y * rowbytes;
    png_set_rows(png, info, rows);
    png_write_png(png, info, PNG_TRANSFORM_IDENTITY, NULL);
    png_destroy_write_struct(&png, &info);
    free(rows);
    free(hwc);
    if (fclose(f) != 0)
        return cr_fail(CR_ERR_ARG, "write_png: cannot write '%s': %s", path, strerror(errno));
    return CR_OK;
}

/* ---- directories -------------------------------------------------------------------- */

cr_status cr_dir_list(char **out, int64_t *len, const char *path) {
    *out = NULL;
    *len = 0;
    if (!path) return cr_fail(CR_ERR_ARG, "list_dir: path is nil; pass a folder name");
    DIR *dir = opendir(path);
    if (!dir) return cr_fail(CR_ERR_ARG, "list_dir: cannot open the folder '%s': %s", path, strerror(errno));
    size_t cap = 4096, n = 0, plen = strlen(path);
    char *buf = malloc(cap), *full = NULL;
    size_t fullcap = 0;
    cr_status st = CR_OK;
    if (!buf) st = cr_fail(CR_ERR_OOM, "list_dir: out of memory");
    struct dirent *e;
    while (!st && (e = readdir(dir)) != NULL) {
        const char *name = e->d_name;
        if (!strcmp(name, ".") || !strcmp(name, "..")) continue;
        size_t nl = strlen(name);
        char kind = 0;
        if (e->d_type == DT_DIR) kind = 'd';
        else if (e->d_type == DT_REG) kind = 'f';
        else if (e->d_type == DT_LNK || e->d_type == DT_UNKNOWN) {
            if (plen + nl + 2 > fullcap) {
                fullcap = 2 * (plen + nl + 2);
                char *nf = realloc(full, fullcap);
                if (!nf) {
                    st = cr_fail(CR_ERR_OOM, "list_dir: out of memory");
                    break;
                }
                full = nf;
            }
            snprintf(full, fullcap, "%s/%s", path, name);
            struct stat sb;
            if (stat(full, &sb) == 0) kind = S_ISDIR(sb.st_mode) ? 'd' : S_ISREG(sb.st_mode) ? 'f' : 0;
        }
        if (!kind) continue;
        if (n + nl + 2 > cap) {
            while (n + nl + 2 > cap) cap *= 2;
            char *nb = realloc(buf, cap);
            if (!nb) {
                st = cr_fail(CR_ERR_OOM, "list_dir: out of memory");
                break;
            }
            buf = nb;
        }
        buf[n++] = kind;
        memcpy(buf + n, name, nl + 1);
        n += nl + 1;
    }
    closedir(dir);
    free(full);
    if (st) {
        free(buf);
        return st;
    }
    *out = buf;
    *len = (int64_t)n;
    return CR_OK;
}

void cr_dir_list_free(char *list) { free(list); }
