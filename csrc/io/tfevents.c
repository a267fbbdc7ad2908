/* tfevents.c — TensorBoard event files (the format is in crescent_io.h): TFRecord framing
 * with masked CRC-32C, and Event / Summary protobufs written by hand (varints and field
 * tags), one scalar, one text (the text plugin's string tensor) or one HParams session
 * record per record. Records collect in a buffer that goes to the file when it fills, on
 * cr_tb_flush and on cr_tb_close; every write error names the file. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include "io_impl.h"

enum { TB_BUF_CAP = 1 << 16, TB_TAG_MAX = 1024, TB_TEXT_MAX = 1 << 15, TB_NAME_TRIES = 100 };

struct cr_tb_writer {
    int fd;
    char *path;
    unsigned char *buf;
    size_t n; /* bytes buffered */
};

/* ---- CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) ---- */
static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_table_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[i] = c;
    }
}

uint32_t cr_crc32c(const void *data, size_t n) {
    pthread_once(&crc_once, crc_table_init);
    const unsigned char *p = data;
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) c = crc_table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

static uint32_t masked_crc(const void *data, size_t n) {
    uint32_t c = cr_crc32c(data, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

/* ---- protobuf encoding into a small byte array ---- */
typedef struct {
    unsigned char *p;
    size_t n;
} pb_out;

static void put_u8(pb_out *o, unsigned v) { o->p[o->n++] = (unsigned char)v; }
static void put_le(pb_out *o, uint64_t v, int bytes) {
    for (int k = 0; k < bytes; k++) put_u8(o, (unsigned)(v >> (8 * k)) & 0xFF);
}
static void put_varint(pb_out *o, uint64_t v) {
    while (v >= 0x80) {
        put_u8(o, (unsigned)(v & 0x7F) | 0x80);
        v >>= 7;
    }
    put_u8(o, (unsigned)v);
}
static size_t varint_size(uint64_t v) {
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}
/* field number and wire type: 0 varint, 1 64-bit, 2 length-delimited, 5 32-bit */
static void put_key(pb_out *o, unsigned field, unsigned wire) { put_varint(o, (field << 3) | wire); }
static void put_bytes(pb_out *o, unsigned field, const void *s, size_t n) {
    put_key(o, field, 2);
    put_varint(o, n);
    memcpy(o->p + o->n, s, n);
    o->n += n;
}
static void put_double(pb_out *o, unsigned field, double v) {
    uint64_t bits;
    memcpy(&bits, &v, 8);
    put_key(o, field, 1);
    put_le(o, bits, 8);
}

/* ---- the file ---- */
static bool write_all(int fd, const unsigned char *p, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            if (w == 0) errno = EIO;
            return false;
        }
        p += w;
        n -= (size_t)w;
    }
    return true;
}

static cr_status drain(cr_tb_writer *w, const char *what) {
    if (w->n == 0) return CR_OK;
    bool ok = write_all(w->fd, w->buf, w->n);
    w->n = 0; /* a failed write drops the buffer: the next call starts clean */
    if (!ok)
        return cr_fail(CR_ERR_ARG, "tensorboard %s: writing '%.500s' failed: %s", what, w->path,
                       strerror(errno));
    return CR_OK;
}

/* Frames one Event as a TFRecord into the buffer (draining it first when full). */
static cr_status put_record(cr_tb_writer *w, const unsigned char *data, size_t n, const char *what) {
    size_t need = 8 + 4 + n + 4;
    if (w->n + need > TB_BUF_CAP) {
        cr_status st = drain(w, what);
        if (st) return st;
    }
    pb_out o = {w->buf + w->n, 0};
    put_le(&o, (uint64_t)n, 8);
    put_le(&o, masked_crc(o.p, 8), 4);
    memcpy(o.p + o.n, data, n);
    o.n += n;
    put_le(&o, masked_crc(data, n), 4);
    w->n += o.n;
    return CR_OK;
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* events.out.tfevents.<seconds>.<host> in dir, created exclusively: when that name is
 * taken (two writers in one second), a ".<k>" suffix; TensorBoard reads any name that
 * holds "tfevents". */
static cr_status create_file(cr_tb_writer *w, const char *dir, double t) {
    char host[256];
    if (gethostname(host, sizeof host) != 0 || !host[0]) strcpy(host, "localhost");
    host[sizeof host - 1] = 0;
    for (char *h = host; *h; h++)
        if (*h == '/') *h = '_';
    size_t cap = strlen(dir) + strlen(host) + 64;
    w->path = malloc(cap);
    if (!w->path) return cr_fail(CR_ERR_OOM, "tensorboard: out of memory");
    const char *sep = dir[strlen(dir) - 1] == '/' ? "" : "/";
    for (int k = 0; k < TB_NAME_TRIES; k++) {
        int len = snprintf(w->path, cap, "%s%sevents.out.tfevents.%lld.%s", dir, sep, (long long)t, host);
        if (k > 0) snprintf(w->path + len, cap - (size_t)len, ".%d", k);
        w->fd = open(w->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (w->fd >= 0) return CR_OK;
        if (errno != EEXIST) break;
    }
    int err = errno;
    const char *hint = err == ENOENT    ? "; create the folder first"
                       : err == EACCES  ? "; check the folder's permissions"
                       : err == ENOTDIR ? "; the path must be a folder"
                                        : "";
    return cr_fail(CR_ERR_ARG, "tensorboard: cannot create an event file in '%.500s': %s%s", dir,
                   strerror(err), hint);
}

cr_status cr_tb_open(cr_tb_writer **out, const char *dir) {
    if (!out) return cr_fail(CR_ERR_ARG, "tensorboard open: out is NULL");
    *out = NULL;
    if (!dir || !*dir) return cr_fail(CR_ERR_ARG, "tensorboard: the folder is empty; pass dir = 'runs/name'");
    cr_tb_writer *w = calloc(1, sizeof *w);
    if (w) w->buf = malloc(TB_BUF_CAP);
    if (!w || !w->buf) {
        if (w) free(w);
        return cr_fail(CR_ERR_OOM, "tensorboard: out of memory");
    }
    w->fd = -1;
    double t = now_seconds();
    cr_status st = create_file(w, dir, t);
    if (!st) {
        /* the first record: wall_time and file_version, no step */
        static const char version[] = "brain.Event:2";
        unsigned char ev[64];
        pb_out o = {ev, 0};
        put_double(&o, 1, t);
        put_bytes(&o, 3, version, sizeof version - 1);
        st = put_record(w, ev, o.n, "open");
        if (!st) st = drain(w, "open");
    }
    if (st) {
        if (w->fd >= 0) {
            close(w->fd);
            unlink(w->path);
        }
        free(w->path);
        free(w->buf);
        free(w);
        return st;
    }
    *out = w;
    return CR_OK;
}

const char *cr_tb_path(const cr_tb_writer *w) { return w ? w->path : NULL; }

cr_status cr_tb_add_scalar(cr_tb_writer *w, const char *tag, double value, int64_t step,
                           double wall_time) {
    if (!w) return cr_fail(CR_ERR_ARG, "tensorboard add_scalar: the writer is closed");
    if (!tag || !*tag) return cr_fail(CR_ERR_ARG, "tensorboard add_scalar: the tag is empty; pass a name such as 'loss'");
    size_t tn = strlen(tag);
    if (tn > TB_TAG_MAX)
        return cr_fail(CR_ERR_ARG, "tensorboard add_scalar: tag '%.60s...' is %zu bytes long; the limit is %d",
                       tag, tn, TB_TAG_MAX);
    if (!cr_utf8_valid(tag, tn))
        return cr_fail(CR_ERR_ARG, "tensorboard add_scalar: tag '%.200s' is not valid UTF-8", tag);
    if (wall_time <= 0) wall_time = now_seconds();
    float v = (float)value;
    uint32_t vbits;
    memcpy(&vbits, &v, 4);

    /* Value: 1 tag, 2 simple_value; Summary: 1 value; Event: 1 wall_time, 2 step, 5 summary */
    size_t value_len = 1 + varint_size(tn) + tn + 1 + 4;
    size_t summary_len = 1 + varint_size(value_len) + value_len;
    unsigned char ev[TB_TAG_MAX + 64];
    pb_out o = {ev, 0};
    put_double(&o, 1, wall_time);
    put_key(&o, 2, 0);
    put_varint(&o, (uint64_t)step); /* int64: negative steps take ten bytes, as protobuf has it */
    put_key(&o, 5, 2);
    put_varint(&o, summary_len);
    put_key(&o, 1, 2);
    put_varint(&o, value_len);
    put_bytes(&o, 1, tag, tn);
    put_key(&o, 2, 5);
    put_le(&o, vbits, 4);
    return put_record(w, ev, o.n, "add_scalar");
}

/* The text plugin's event: Value {1 tag, 9 metadata {1 plugin_data {1 plugin_name
 * "text"}}, 8 tensor {1 dtype DT_STRING (7), 8 string_val}}; a scalar string tensor, as
 * tf.summary.text writes it. */
cr_status cr_tb_add_text(cr_tb_writer *w, const char *tag, const char *text, int64_t step, double wall_time) {
    if (!w) return cr_fail(CR_ERR_ARG, "tensorboard add_text: the writer is closed");
    if (!tag || !*tag) return cr_fail(CR_ERR_ARG, "tensorboard add_text: the tag is empty; pass a name such as 'config'");
    if (!text) return cr_fail(CR_ERR_ARG, "tensorboard add_text: the text is NULL");
    size_t tn = strlen(tag), xn = strlen(text);
    if (tn > TB_TAG_MAX)
        return cr_fail(CR_ERR_ARG, "tensorboard add_text: tag '%.60s...' is %zu bytes long; the limit is %d", tag, tn,
                       TB_TAG_MAX);
    if (xn > TB_TEXT_MAX)
        return cr_fail(CR_ERR_ARG, "tensorboard add_text: the text of '%.200s' is %zu bytes long; the limit is %d",
                       tag, xn, TB_TEXT_MAX);
    if (!cr_utf8_valid(tag, tn) || !cr_utf8_valid(text, xn))
        return cr_fail(CR_ERR_ARG, "tensorboard add_text: the tag or text of '%.200s' is not valid UTF-8", tag);
    if (wall_time <= 0) wall_time = now_seconds();
    static const char plugin[] = "text";
    size_t pd_len = 1 + varint_size(4) + 4;                   /* PluginData */
    size_t md_len = 1 + varint_size(pd_len) + pd_len;         /* SummaryMetadata */
    size_t tensor_len = 2 + 1 + varint_size(xn) + xn;         /* TensorProto */
    size_t value_len = 1 + varint_size(tn) + tn + 1 + varint_size(md_len) + md_len + 1 + varint_size(tensor_len) +
                       tensor_len;
    size_t summary_len = 1 + varint_size(value_len) + value_len;
    unsigned char *ev = malloc(64 + summary_len);
    if (!ev) return cr_fail(CR_ERR_OOM, "tensorboard add_text: out of memory for %zu bytes", summary_len);
    pb_out o = {ev, 0};
    put_double(&o, 1, wall_time);
    put_key(&o, 2, 0);
    put_varint(&o, (uint64_t)step);
    put_key(&o, 5, 2);
    put_varint(&o, summary_len);
    put_key(&o, 1, 2);
    put_varint(&o, value_len);
    put_bytes(&o, 1, tag, tn);
    put_key(&o, 9, 2); /* metadata */
    put_varint(&o, md_len);
    put_key(&o, 1, 2); /* plugin_data */
    put_varint(&o, pd_len);
    put_bytes(&o, 1, plugin, 4);
    put_key(&o, 8, 2); /* tensor */
    put_varint(&o, tensor_len);
    put_key(&o, 1, 0);
    put_varint(&o, 7); /* DT_STRING */
    put_bytes(&o, 8, text, xn);
    cr_status st = put_record(w, ev, o.n, "add_text");
    free(ev);
    return st;
}

/* ---- TensorBoard's HParams plugin ----
 * An Event whose one Value is {1 tag, 9 metadata {1 plugin_data {1 plugin_name "hparams",
 * 2 content}}, 8 tensor (the plugin's empty f32 tensor: 1 dtype DT_FLOAT, 2 tensor_shape
 * {2 dim {}})}, content an HParamsPluginData (tensorboard/plugins/hparams/plugin_data.proto:
 * 1 version 0, 3 session_start_info or 4 session_end_info), as the plugin's own
 * summary_v2.hparams_pb writes it. Nested messages are encoded inside out, each into a
 * buffer with room for what it wraps and its own fields. */
static void put_message(pb_out *o, unsigned field, const pb_out *inner) { put_bytes(o, field, inner->p, inner->n); }

static cr_status put_hparams_event(cr_tb_writer *w, const char *tag, const pb_out *plugin_data,
                                   const char *what) {
    static const unsigned char null_tensor[] = {0x08, 0x01, 0x12, 0x02, 0x12, 0x00};
    const size_t cap = plugin_data->n + strlen(tag) + 128;
    unsigned char *mem = malloc(4 * cap);
    if (!mem) return cr_fail(CR_ERR_OOM, "tensorboard %s: out of memory for %zu bytes", what, 4 * cap);
    pb_out pd = {mem, 0}, md = {mem + cap, 0}, value = {mem + 2 * cap, 0}, ev = {mem + 3 * cap, 0};
    put_bytes(&pd, 1, "hparams", 7);
    put_message(&pd, 2, plugin_data);
    put_message(&md, 1, &pd);
    put_bytes(&value, 1, tag, strlen(tag));
    put_message(&value, 9, &md);
    put_bytes(&value, 8, null_tensor, sizeof null_tensor);
    pb_out summary = pd; /* pd's bytes are inside value now: reuse its space */
    summary.n = 0;
    put_message(&summary, 1, &value);
    put_double(&ev, 1, now_seconds());
    put_message(&ev, 5, &summary);
    cr_status st = put_record(w, ev.p, ev.n, what);
    free(mem);
    return st;
}

cr_status cr_tb_add_hparams(cr_tb_writer *w, const cr_tb_hparam *hp, int n, double start_time) {
    if (!w) return cr_fail(CR_ERR_ARG, "tensorboard add_hparams: the writer is closed");
    if (n < 0 || (n > 0 && !hp)) return cr_fail(CR_ERR_ARG, "tensorboard add_hparams: give n >= 0 hyper-parameters");
    size_t cap = 64; /* the bytes of the largest of the four messages below, bounded */
    for (int i = 0; i < n; i++) {
        const char *name = hp[i].name, *text = hp[i].string;
        if (!name || !*name) return cr_fail(CR_ERR_ARG, "tensorboard add_hparams: hyper-parameter %d has no name", i + 1);
        size_t nn = strlen(name), tn = hp[i].kind == CR_TB_HPARAM_STRING && text ? strlen(text) : 0;
        if (hp[i].kind == CR_TB_HPARAM_STRING && !text)
            return cr_fail(CR_ERR_ARG, "tensorboard add_hparams: '%.200s' is a string hyper-parameter without its text",
                           name);
        if (hp[i].kind < CR_TB_HPARAM_NUMBER || hp[i].kind > CR_TB_HPARAM_BOOL)
            return cr_fail(CR_ERR_ARG, "tensorboard add_hparams: '%.200s' has kind %d; use CR_TB_HPARAM_NUMBER, "
                           "_STRING or _BOOL", name, hp[i].kind);
        if (!cr_utf8_valid(name, nn) || !cr_utf8_valid(text ? text : "", tn))
            return cr_fail(CR_ERR_ARG, "tensorboard add_hparams: the name or text of '%.200s' is not valid UTF-8", name);
        cap += nn + tn + 48;
    }
    unsigned char *mem = malloc(4 * cap);
    if (!mem) return cr_fail(CR_ERR_OOM, "tensorboard add_hparams: out of memory for %zu bytes", 4 * cap);
    pb_out value = {mem, 0}, entry = {mem + cap, 0}, info = {mem + 2 * cap, 0}, data = {mem + 3 * cap, 0};
    for (int i = 0; i < n; i++) { /* map<string, google.protobuf.Value> hparams = 1 */
        value.n = entry.n = 0;
        if (hp[i].kind == CR_TB_HPARAM_NUMBER) put_double(&value, 2, hp[i].number);
        else if (hp[i].kind == CR_TB_HPARAM_STRING) put_bytes(&value, 3, hp[i].string, strlen(hp[i].string));
        else {
            put_key(&value, 4, 0);
            put_varint(&value, hp[i].number != 0);
        }
        put_bytes(&entry, 1, hp[i].name, strlen(hp[i].name));
        put_message(&entry, 2, &value);
        put_message(&info, 1, &entry);
    }
    put_double(&info, 5, start_time > 0 ? start_time : now_seconds()); /* start_time_secs */
    put_message(&data, 3, &info);
    cr_status st = put_hparams_event(w, "_hparams_/session_start_info", &data, "add_hparams");
    free(mem);
    return st;
}

cr_status cr_tb_end_session(cr_tb_writer *w, int status, double end_time) {
    if (!w) return cr_fail(CR_ERR_ARG, "tensorboard end_session: the writer is closed");
    if (status < CR_TB_STATUS_SUCCESS || status > CR_TB_STATUS_RUNNING)
        return cr_fail(CR_ERR_ARG, "tensorboard end_session: status %d; use CR_TB_STATUS_SUCCESS, _FAILURE or "
                       "_RUNNING", status);
    unsigned char mem[64];
    pb_out info = {mem, 0}, data = {mem + 32, 0};
    put_key(&info, 1, 0);
    put_varint(&info, (uint64_t)status);
    put_double(&info, 2, end_time > 0 ? end_time : now_seconds());
    put_message(&data, 4, &info);
    return put_hparams_event(w, "_hparams_/session_end_info", &data, "end_session");
}

cr_status cr_tb_flush(cr_tb_writer *w) {
    if (!w) return cr_fail(CR_ERR_ARG, "tensorboard flush: the writer is closed");
    return drain(w, "flush");
}

cr_status cr_tb_close(cr_tb_writer *w) {
    if (!w) return CR_OK;
    cr_status st = drain(w, "close");
    if (close(w->fd) != 0 && !st)
        st = cr_fail(CR_ERR_ARG, "tensorboard close: closing '%.500s' failed: %s", w->path, strerror(errno));
    free(w->path);
    free(w->buf);
    free(w);
    return st;
}
