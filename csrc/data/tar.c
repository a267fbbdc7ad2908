/* tar.c — the index of a tar archive (crescent_data.h's cr_tar_index): the name, offset
 * and length of every regular file, read from the 512-byte headers alone (ustar, GNU
 * long names 'L', pax 'x' path records; other entries are skipped), each header's
 * checksum verified, so a streamed data set can read any member of a webdataset shard
 * directly. */
#include <errno.h>
#include <sys/types.h>

#include "data_impl.h"

enum { TAR_BLOCK = 512, TAR_MAX_NAME = 4096 };

/* An octal (or GNU base-256) number field; -1 when malformed. */
static int64_t tar_number(const unsigned char *f, int len) {
    if (f[0] & 0x80) { /* base-256, big-endian, for sizes of 8 GiB and more */
        int64_t v = f[0] & 0x7f;
        for (int i = 1; i < len; i++) {
            if (v > (INT64_MAX >> 8)) return -1;
            v = (v << 8) | f[i];
        }
        return v;
    }
    int64_t v = 0;
    int i = 0;
    while (i < len && (f[i] == ' ' || f[i] == 0)) i++;
    bool any = false;
    for (; i < len && f[i] >= '0' && f[i] <= '7'; i++) {
        if (v > (INT64_MAX >> 3)) return -1;
        v = v * 8 + (f[i] - '0');
        any = true;
    }
    for (; i < len; i++)
        if (f[i] != ' ' && f[i] != 0) return -1;
    return any ? v : 0;
}

static bool all_zero(const unsigned char *b) {
    for (int i = 0; i < TAR_BLOCK; i++)
        if (b[i]) return false;
    return true;
}

static bool checksum_ok(const unsigned char *h) {
    int64_t want = tar_number(h + 148, 8), sum = 0;
    for (int i = 0; i < TAR_BLOCK; i++) sum += (i >= 148 && i < 156) ? ' ' : h[i];
    return want == sum;
}

/* The growing outputs of one index. */
typedef struct {
    char *names;
    int64_t names_len, names_cap;
    int64_t *ranges;
    int64_t count, cap;
} tar_out;

static bool add_member(tar_out *o, const char *name, int64_t offset, int64_t length) {
    int64_t len = (int64_t)strlen(name) + 1;
    if (o->names_len + len > o->names_cap) {
        int64_t cap = o->names_cap ? o->names_cap * 2 : 4096;
        while (cap < o->names_len + len) cap *= 2;
        char *n = realloc(o->names, (size_t)cap);
        if (!n) return false;
        o->names = n, o->names_cap = cap;
    }
    if (o->count == o->cap) {
        int64_t cap = o->cap ? o->cap * 2 : 256;
        int64_t *r = realloc(o->ranges, sizeof(int64_t) * 2 * (size_t)cap);
        if (!r) return false;
        o->ranges = r, o->cap = cap;
    }
    memcpy(o->names + o->names_len, name, (size_t)len);
    o->names_len += len;
    o->ranges[2 * o->count] = offset;
    o->ranges[2 * o->count + 1] = length;
    o->count++;
    return true;
}

/* The value of the "path" record of a pax header's data, into name (empty when none). */
static void pax_path(const char *data, int64_t len, char *name, size_t cap) {
    name[0] = 0;
    int64_t i = 0;
    while (i < len) { /* records: "<length> <key>=<value>\n" */
        int64_t rlen = 0, j = i;
        while (j < len && data[j] >= '0' && data[j] <= '9') rlen = rlen * 10 + (data[j++] - '0');
        if (rlen <= 0 || i + rlen > len || j >= len || data[j] != ' ') return;
        const char *kv = data + j + 1;
        int64_t kvlen = i + rlen - (j + 1) - 1; /* without the newline */
        if (kvlen > 5 && !memcmp(kv, "path=", 5)) {
            int64_t vlen = kvlen - 5 < (int64_t)cap - 1 ? kvlen - 5 : (int64_t)cap - 1;
            memcpy(name, kv + 5, (size_t)vlen);
            name[vlen] = 0;
        }
        i += rlen;
    }
}

/* Reads `len` bytes at `offset` into a fresh '\0'-terminated buffer. */
static char *read_at(FILE *f, int64_t offset, int64_t len) {
    if (len < 0 || len > (int64_t)1 << 20) return NULL;
    char *b = malloc((size_t)len + 1);
    if (!b) return NULL;
    if (fseeko(f, (off_t)offset, SEEK_SET) != 0 || fread(b, 1, (size_t)len, f) != (size_t)len) {
        free(b);
        return NULL;
    }
    b[len] = 0;
    return b;
}

cr_status cr_tar_index(const char *path, char **names, int64_t *names_len, int64_t **ranges, int64_t *count) {
    if (!path || !names || !names_len || !ranges || !count) return cr_fail(CR_ERR_ARG, "tar_index: nil argument");
    *names = NULL, *ranges = NULL, *names_len = 0, *count = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return cr_fail(CR_ERR_ARG, "tar_index: cannot open '%s': %s", path, strerror(errno));
    tar_out o = {0};
    unsigned char h[TAR_BLOCK];
    char next_name[TAR_MAX_NAME] = ""; /* from a preceding 'L' or 'x' entry */
    int64_t at = 0;
    cr_status st = CR_OK;
    for (;;) {
        if (fseeko(f, (off_t)at, SEEK_SET) != 0) break;
        size_t got = fread(h, 1, TAR_BLOCK, f);
        if (got == 0) break; /* the end without the two zero blocks: accepted, as GNU tar does */
        if (got != TAR_BLOCK) {
            st = cr_fail(CR_ERR_ARG, "tar_index: '%s' ends inside the header at byte %lld; the archive is truncated",
                         path, (long long)at);
            break;
        }
        if (all_zero(h)) break;
        if (!checksum_ok(h)) {
            st = cr_fail(CR_ERR_ARG, "tar_index: '%s' has no valid tar header at byte %lld (bad checksum): not a "
                         "tar archive, or a corrupt one", path, (long long)at);
            break;
        }
        int64_t size = tar_number(h + 124, 12);
        if (size < 0) {
            st = cr_fail(CR_ERR_ARG, "tar_index: '%s' has a malformed size at byte %lld", path, (long long)at);
            break;
        }
        char type = (char)h[156];
        int64_t data = at + TAR_BLOCK;
        if (type == 'L' || type == 'x') { /* the next entry's name */
            char *b = read_at(f, data, size);
            if (!b) {
                st = cr_fail(CR_ERR_ARG, "tar_index: '%s': cannot read the long name at byte %lld", path,
                             (long long)data);
                break;
            }
            if (type == 'L') snprintf(next_name, sizeof next_name, "%s", b);
            else pax_path(b, size, next_name, sizeof next_name);
            free(b);
        } else if (type == '0' || type == 0 || type == '7') { /* a regular file */
            char name[TAR_MAX_NAME];
            if (next_name[0]) {
                snprintf(name, sizeof name, "%s", next_name);
            } else {
                char base[101], prefix[156];
                memcpy(base, h, 100), base[100] = 0;
                memcpy(prefix, h + 345, 155), prefix[155] = 0;
                bool ustar = !memcmp(h + 257, "ustar", 5);
                if (ustar && prefix[0]) snprintf(name, sizeof name, "%s/%s", prefix, base);
                else snprintf(name, sizeof name, "%s", base);
            }
            if (!add_member(&o, name, data, size)) {
                st = cr_fail(CR_ERR_OOM, "tar_index: out of memory for the index of '%s'", path);
                break;
            }
            next_name[0] = 0;
        } else {
            next_name[0] = 0; /* directories, links, global headers: no sample */
        }
        at = data + (size + TAR_BLOCK - 1) / TAR_BLOCK * TAR_BLOCK;
    }
    fclose(f);
    if (st) {
        free(o.names);
        free(o.ranges);
        return st;
    }
    *names = o.names, *names_len = o.names_len, *ranges = o.ranges, *count = o.count;
    return CR_OK;
}

void cr_tar_index_free(char *names, int64_t *ranges) {
    free(names);
    free(ranges);
}
