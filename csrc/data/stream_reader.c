/* stream_reader.c — archive members read front to back for the loader's workers (tar
 * shards with a shuffle buffer, data_impl.h): the rows of an epoch are read in the
 * order the archives hold them, through one buffered FILE per archive, and each row's
 * bytes wait in memory until the worker whose batch uses them takes them. The epoch's
 * order comes from cr_data_buffer_shuffle over this same stream, so what waits is
 * bounded by the shuffle buffer plus the batches in flight. Rows the remaining batches
 * do not use are skipped with a forward seek, not read. One mutex guards everything;
 * reads happen under it (one stream, one reader at a time), decoding outside it. */
#include <pthread.h>

#include "data_impl.h"

enum { READ_BUFFER = 1 << 20 }; /* stdio buffer per archive: small members coalesce */

typedef struct {
    uint8_t *bytes; /* read and not yet taken by every batch that uses the row */
    int64_t len;
    int64_t pos;  /* the row's place in the stream, -1 when absent */
    int32_t need; /* takes still to come */
} row_state;

struct cr_stream_reader {
    pthread_mutex_t mu;
    const cr_data_paths *paths; /* the pipeline's reference keeps it alive */
    int64_t *stream, nstream, cursor;
    row_state *rows;
    int64_t nrows;
    FILE *file;
    const char *file_path; /* the path table's string of the open archive */
    char *file_buf;
    cr_data_stream_stats stats;
    int64_t held_bytes, held_members;
};

cr_status cr_stream_reader_new(cr_stream_reader **out, const cr_data_paths *paths, const int64_t *stream,
                               int64_t nstream, const int32_t *need) {
    *out = NULL;
    int64_t n = cr_data_paths_count(paths);
    cr_stream_reader *r = calloc(1, sizeof *r);
    if (!r) return cr_fail(CR_ERR_OOM, "stream_reader: out of memory");
    pthread_mutex_init(&r->mu, NULL);
    r->paths = paths;
    r->nrows = n;
    r->nstream = nstream;
    r->rows = calloc((size_t)(n > 0 ? n : 1), sizeof *r->rows);
    r->stream = malloc(sizeof(int64_t) * (size_t)(nstream > 0 ? nstream : 1));
    if (!r->rows || !r->stream) {
        cr_stream_reader_free(r);
        return cr_fail(CR_ERR_OOM, "stream_reader: out of memory for %lld rows", (long long)n);
    }
    for (int64_t i = 0; i < n; i++) {
        r->rows[i].pos = -1;
        r->rows[i].need = need[i];
    }
    for (int64_t t = 0; t < nstream; t++) {
        int64_t row = stream[t];
        if (row < 0 || row >= n || r->rows[row].pos >= 0) {
            cr_stream_reader_free(r);
            return cr_fail(CR_ERR_ARG, "stream_reader: stream entry %lld is row %lld: %s", (long long)t,
                           (long long)row, row < 0 || row >= n ? "out of range" : "listed twice");
        }
        r->stream[t] = row;
        r->rows[row].pos = t;
    }
    *out = r;
    return CR_OK;
}

static void close_file(cr_stream_reader *r) {
    if (r->file) fclose(r->file);
    free(r->file_buf);
    r->file = NULL;
    r->file_buf = NULL;
    r->file_path = NULL;
}

/* Reads the member of `row` through the open archive (opening its archive when another is
 * open): *bytes malloc'd, or -1 when the read failed (the caller's own read reports it). */
static int read_row(cr_stream_reader *r, int64_t row, uint8_t **bytes, int64_t *len) {
    int64_t offset = 0, length = -1;
    const char *path = cr_data_paths_get(r->paths, row);
    if (!cr_data_paths_member(r->paths, row, &offset, &length) || length <= 0) return -1;
    if (r->file_path != path && (!r->file_path || strcmp(r->file_path, path))) {
        close_file(r);
        r->file = fopen(path, "rb");
        if (!r->file) return -1;
        r->file_path = path;
        if ((r->file_buf = malloc(READ_BUFFER))) setvbuf(r->file, r->file_buf, _IOFBF, READ_BUFFER);
    }
    off_t at = ftello(r->file);
    if (at != (off_t)offset) {
        if (at > (off_t)offset) r->stats.backward_seeks++;
        if (fseeko(r->file, (off_t)offset, SEEK_SET)) return -1;
    }
    uint8_t *b = malloc((size_t)length);
    if (!b) return -1;
    if ((int64_t)fread(b, 1, (size_t)length, r->file) != length) {
        free(b);
        close_file(r); /* the position is unknown now */
        return -1;
    }
    r->stats.members++;
    r->stats.bytes += length;
    *bytes = b;
    *len = length;
    return 0;
}

/* Hands one use of a held row out: the bytes themselves on its last use, else a copy. */
static int hand_out(cr_stream_reader *r, row_state *s, uint8_t **buf, int64_t *len) {
    if (s->need <= 1) {
        *buf = s->bytes;
        *len = s->len;
        r->held_bytes -= s->len;
        r->held_members--;
        s->bytes = NULL;
        s->need = 0;
        return 1;
    }
    uint8_t *copy = malloc((size_t)s->len);
    if (!copy) return 0;
    memcpy(copy, s->bytes, (size_t)s->len);
    s->need--;
    *buf = copy;
    *len = s->len;
    return 1;
}

int cr_stream_reader_take(cr_stream_reader *r, int64_t row, uint8_t **buf, int64_t *len) {
    *buf = NULL;
    *len = 0;
    if (!r || row < 0 || row >= r->nrows) return 0;
    pthread_mutex_lock(&r->mu);
    row_state *s = &r->rows[row];
    int got = 0;
    if (s->bytes) {
        got = hand_out(r, s, buf, len);
    } else if (s->pos >= r->cursor) {
        while (r->cursor <= s->pos) {
            int64_t next = r->stream[r->cursor++];
            row_state *ns = &r->rows[next];
            if (ns->need <= 0) continue; /* no batch left uses it: skipped by the next seek */
            uint8_t *b;
            int64_t l;
            if (read_row(r, next, &b, &l)) continue; /* its taker reads it itself and reports */
            ns->bytes = b;
            ns->len = l;
            r->held_bytes += l;
            r->held_members++;
            if (r->held_bytes > r->stats.peak_bytes) r->stats.peak_bytes = r->held_bytes;
            if (r->held_members > r->stats.peak_members) r->stats.peak_members = r->held_members;
        }
        if (s->bytes) got = hand_out(r, s, buf, len);
    }
    pthread_mutex_unlock(&r->mu);
    return got;
}

void cr_stream_reader_stats_get(cr_stream_reader *r, cr_data_stream_stats *out) {
    memset(out, 0, sizeof *out);
    if (!r) return;
    pthread_mutex_lock(&r->mu);
    *out = r->stats;
    pthread_mutex_unlock(&r->mu);
}

void cr_stream_reader_free(cr_stream_reader *r) {
    if (!r) return;
    if (r->rows)
        for (int64_t i = 0; i < r->nrows; i++) free(r->rows[i].bytes);
    pthread_mutex_destroy(&r->mu);
    close_file(r);
    free(r->rows);
    free(r->stream);
    free(r);
}
