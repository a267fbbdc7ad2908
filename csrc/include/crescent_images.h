/* crescent_images.h — image data sets on the C side: the CIFAR-10/100 binary reader
 * (csrc/data/cifar.c), and JPEG/PNG decoding for image folders (csrc/data/image.c:
 * libturbojpeg, libpng), with bilinear resizing, threaded batch decoding, encoders (so
 * tests can make their own files) and a directory lister. Included by crescent.h, so it
 * is FFI-clean like it: no macros in declarations, POD structs only. */
#ifndef CRESCENT_IMAGES_H
#define CRESCENT_IMAGES_H

/* ---- CIFAR-10 / CIFAR-100, the official binary format ---------------------------
 * A file is a run of fixed-size records: CIFAR-10 = 1 label byte (0..9) + 3072 pixel
 * bytes; CIFAR-100 = 1 coarse label byte (0..19) + 1 fine label byte (0..99) + 3072.
 * The pixels are the 32x32 red plane, then green, then blue (channel-major). */
typedef enum { CR_CIFAR_10 = 10, CR_CIFAR_100 = 100 } cr_cifar_kind;

/* Reads the records of paths[0..npaths-1], in that order, into *images u8 [N, 3, 32,
 * 32] and *labels i64 [N] (CIFAR-100: the fine labels) and, for CIFAR-100 when coarse
 * is not NULL, *coarse i64 [N]. limit > 0 keeps the first `limit` records (later files
 * are then not read). Every file must exist, be non-empty, and have a size that is a
 * multiple of the record size, and every label must be in range; a failure names the
 * file and the problem (and the record, for a bad label). */
cr_status cr_cifar_read(cr_tensor **images, cr_tensor **labels, cr_tensor **coarse,
                        const char *const *paths, int npaths, cr_cifar_kind kind,
                        int64_t limit);

/* ---- JPEG / PNG ---------------------------------------------------------------------
 * The format is told by the file's first bytes, never by its name. JPEG goes through
 * libturbojpeg (grey or colour; CMYK is refused); PNG through libpng: 1/2/4/8/16-bit
 * grey, grey+alpha, RGB, RGBA and palette (with tRNS), expanded to 8 bits. Like PIL's
 * convert(): alpha is dropped (not composited), grey becomes RGB by repeating it, RGB
 * becomes grey by L = (19595 R + 38470 G + 7471 B + 32768) >> 16 (PNG; a colour JPEG
 * asked for grey gives its decoded luma plane). No gamma correction is applied.
 * A truncated or corrupt file is an error naming its path (libjpeg's "premature end"
 * warning counts as an error). */
typedef enum { CR_IMAGE_UNKNOWN = 0, CR_IMAGE_JPEG = 1, CR_IMAGE_PNG = 2 } cr_image_format;

typedef struct {
    int format;   /* cr_image_format */
    int height;
    int width;
    int channels; /* in the file: 1 grey, 2 grey+alpha, 3 colour, 4 colour+alpha */
} cr_image_info;

/* Reads only the header: format, size and channels. */
cr_status cr_image_probe(cr_image_info *info, const char *path);

/* Decodes one file to u8 [channels, H, W] (channels 1 or 3) at its own size, or resized
 * to height x width when both are > 0. */
cr_status cr_image_read(cr_tensor **out, const char *path, int channels, int height,
                        int width);

/* Decodes n files into rows row0 .. row0+n-1 of `out`, a contiguous CPU u8 tensor [N, C,
 * H, W] (C 1 or 3): each file is resized to H x W when its size differs (bilinear, see
 * cr_image_resize). OpenMP over the files (one decoder per thread); the bytes do not
 * depend on the thread count.
 *   ok == NULL: the first bad file (lowest index) fails the call, naming its path.
 *   ok != NULL: ok[i] = 1 for a decoded file; 0 for a bad one, whose row is zeroed and
 *               whose message goes to errors + i * errcap (when errors is not NULL,
 *               truncated to errcap - 1 bytes). The call then succeeds. */
cr_status cr_image_decode_files(cr_tensor *out, int64_t row0, const char *const *paths,
                                int64_t n, uint8_t *ok, char *errors, int64_t errcap);

/* Bilinear resize of u8 images [C, H, W] or [N, C, H, W] to height x width, PyTorch's
 * interpolate(mode = 'bilinear', align_corners = False, antialias = False) in double
 * precision, rounded to nearest (halves up) and clamped to 0..255:
 *   sy = max(0, (y + 0.5) * H / height - 0.5); y0 = floor(sy); y1 = min(y0 + 1, H - 1);
 *   ly = sy - y0 (likewise x); top = a(y0,x0) + lx (a(y0,x1) - a(y0,x0)), bottom the
 *   same on row y1; value = top + ly (bottom - top).
 * The decoders resize with this same code. */
cr_status cr_image_resize(cr_tensor **out, const cr_tensor *img, int height, int width);

/* Encoders, for tests and tools. img: u8 [C, H, W] (any strides). JPEG: C = 1 (grey) or
 * 3 (RGB, 4:4:4 chroma), quality 1..100. PNG: C = 1 grey, 2 grey+alpha, 3 RGB, 4 RGBA;
 * palette != 0 (C = 3 only) writes a palette PNG (at most 256 distinct colours). */
cr_status cr_image_write_jpeg(const cr_tensor *img, const char *path, int quality);
cr_status cr_image_write_png(const cr_tensor *img, const char *path, int palette);

/* ---- directories --------------------------------------------------------------------
 * Lists a directory: *out = entries "<kind><name>\0" one after the other (kind 'd' a
 * directory, 'f' a regular file; symbolic links are followed, other entries and "." /
 * ".." left out), *len = total bytes, in the order the system gives (sort them). Free
 * *out with cr_dir_list_free. */
cr_status cr_dir_list(char **out, int64_t *len, const char *path);
void cr_dir_list_free(char *list);

#endif
