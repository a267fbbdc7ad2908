/* json.c — the JSON that safetensors headers need, read strictly and written
 * canonically. Not a general JSON library: values are read by the caller, who knows what
 * each key must hold, so a value of the wrong kind is an error naming the key rather
 * than something skipped. Every read checks bounds first; no input crashes it. */
#include <stdarg.h>

#include "io_impl.h"

/* ---- UTF-8 ---------------------------------------------------------------------- */
/* RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF. */
bool cr_utf8_valid(const char *str, size_t n) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        int len;
        unsigned lo = 0x80, hi = 0xBF; /* range of the second byte */
        if (c >= 0xC2 && c <= 0xDF) len = 2;
        else if (c >= 0xE0 && c <= 0xEF) {
            len = 3;
            if (c == 0xE0) lo = 0xA0;
            if (c == 0xED) hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            len = 4;
            if (c == 0xF0) lo = 0x90;
            if (c == 0xF4) hi = 0x8F;
        } else return false;
        if (n - i < (size_t)len) return false;
        if (s[i + 1] < lo || s[i + 1] > hi) return false;
        for (int k = 2; k < len; k++)
            if (s[i + k] < 0x80 || s[i + k] > 0xBF) return false;
        i += (size_t)len;
    }
    return true;
}

/* ---- reading -------------------------------------------------------------------- */
cr_status cr_json_syntax(cr_json_reader *r, const char *detail) {
    return cr_fail(CR_ERR_ARG, "%s: the %s is not valid JSON: %s (at %s byte %zu)", r->ctx,
                   r->doc, detail, r->doc, r->pos);
}

void cr_json_skip_ws(cr_json_reader *r) {
    while (r->pos < r->n) {
        char c = r->s[r->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        r->pos++;
    }
}

char cr_json_peek(cr_json_reader *r) {
    cr_json_skip_ws(r);
    return r->pos < r->n ? r->s[r->pos] : 0;
}

bool cr_json_accept(cr_json_reader *r, char c) {
    if (cr_json_peek(r) != c || r->pos >= r->n) return false;
    r->pos++;
    return true;
}

const char *cr_json_kind(cr_json_reader *r) {
    char c = cr_json_peek(r);
    if (r->pos >= r->n) return "nothing (the text ends there)";
    switch (c) {
    case 0: return "a NUL byte";
    case '"': return "a string";
    case '{': return "an object";
    case '[': return "an array";
    case 't':
    case 'f': return "a boolean";
    case 'n': return "null";
    case '-':
    case '0': case '1': case '2': case '3': case '4':
    case '5': case '6': case '7': case '8': case '9': return "a number";
    default: return "an invalid character";
    }
}

cr_status cr_json_unexpected(cr_json_reader *r, const char *fmt, ...) {
    const char *kind = cr_json_kind(r);
    if (r->pos >= r->n) return cr_json_syntax(r, "the text ends inside a value");
    if (strcmp(kind, "an invalid character") == 0 || strcmp(kind, "a NUL byte") == 0)
        return cr_json_syntax(r, "expected a value");
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return cr_fail(CR_ERR_ARG, "%s: %s, got %s", r->ctx, msg, kind);
}

static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Four hex digits at s[j..j+3] (j + 4 <= end), or -1. */
static long hex4(const char *s, size_t j, size_t end) {
    if (j + 4 > end) return -1;
    long v = 0;
    for (int k = 0; k < 4; k++) {
        int h = hex_value(s[j + (size_t)k]);
        if (h < 0) return -1;
        v = v * 16 + h;
    }
    return v;
}

static size_t put_utf8(char *o, unsigned long cp) {
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

cr_status cr_json_string(cr_json_reader *r, char **out) {
    *out = NULL;
    if (cr_json_peek(r) != '"' || r->pos >= r->n) return cr_json_syntax(r, "expected a string");
    const char *s = r->s;
    size_t start = r->pos + 1, end = start;
    while (end < r->n && s[end] != '"') end += s[end] == '\\' ? 2 : 1;
    if (end >= r->n) return cr_json_syntax(r, "a string is not terminated");
    /* the decoded text is never longer than the escaped one */
    char *o = malloc(end - start + 1);
    if (!o) return cr_fail(CR_ERR_OOM, "%s: out of memory reading the %s", r->ctx, r->doc);
    size_t k = 0, j = start;
    const char *bad = NULL;
    while (j < end && !bad) {
        unsigned char c = (unsigned char)s[j];
        if (c < 0x20) {
            bad = "a raw control character in a string (JSON needs it escaped)";
            break;
        }
        if (c != '\\') {
            o[k++] = (char)c;
            j++;
            continue;
        }
        char e = s[j + 1]; /* j + 1 < end: the scan above stepped over pairs */
        j += 2;
        switch (e) {
        case '"': o[k++] = '"'; break;
        case '\\': o[k++] = '\\'; break;
        case '/': o[k++] = '/'; break;
        case 'b': o[k++] = '\b'; break;
        case 'f': o[k++] = '\f'; break;
        case 'n': o[k++] = '\n'; break;
        case 'r': o[k++] = '\r'; break;
        case 't': o[k++] = '\t'; break;
        case 'u': {
            long cp = hex4(s, j, end);
            if (cp < 0) {
                bad = "a \\u escape without four hex digits";
                break;
            }
            j += 4;
            if (cp >= 0xDC00 && cp <= 0xDFFF) {
                bad = "a lone low surrogate in a \\u escape";
                break;
            }
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                long lo = (j + 1 < end && s[j] == '\\' && s[j + 1] == 'u') ? hex4(s, j + 2, end) : -1;
                if (lo < 0xDC00 || lo > 0xDFFF) {
                    bad = "a high surrogate in a \\u escape without its low half";
                    break;
                }
                j += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            if (cp == 0) {
                bad = "a NUL character (\\u0000) in a string; crescent takes no names or "
                      "values with NUL";
                break;
            }
            k += put_utf8(o + k, (unsigned long)cp);
            break;
        }
        default: bad = "an unknown escape in a string"; break;
        }
    }
    if (!bad && !cr_utf8_valid(o, k)) bad = "a string that is not valid UTF-8";
    if (bad) {
        free(o);
        r->pos = j > 0 ? j - 1 : j;
        return cr_json_syntax(r, bad);
    }
    o[k] = 0;
    r->pos = end + 1;
    *out = o;
    return CR_OK;
}

cr_status cr_json_number(cr_json_reader *r, int64_t *v, const char **text, int *len) {
    cr_json_skip_ws(r);
    const char *s = r->s;
    size_t n = r->n, i = r->pos, start = r->pos;
    bool plain = true;
    if (i < n && s[i] == '-') {
        plain = false;
        i++;
    }
    if (i >= n || s[i] < '0' || s[i] > '9') return cr_json_syntax(r, "expected a number");
    if (s[i] == '0') i++;
    else
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
    if (i < n && s[i] == '.') {
        plain = false;
        i++;
        if (i >= n || s[i] < '0' || s[i] > '9') {
            r->pos = i;
            return cr_json_syntax(r, "a number with no digits after '.'");
        }
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        plain = false;
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-')) i++;
        if (i >= n || s[i] < '0' || s[i] > '9') {
            r->pos = i;
            return cr_json_syntax(r, "a number with no digits in its exponent");
        }
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
    }
    *text = s + start;
    *len = (int)(i - start > 40 ? 40 : i - start);
    r->pos = i;
    if (!plain) {
        *v = -1;
        return CR_OK;
    }
    const int64_t limit = (int64_t)1 << 62;
    int64_t x = 0;
    for (size_t k = start; k < i; k++) {
        if (x > (limit - (s[k] - '0')) / 10) {
            *v = -2;
            return CR_OK;
        }
        x = x * 10 + (s[k] - '0');
    }
    *v = x;
    return CR_OK;
}

/* ---- string maps ---------------------------------------------------------------- */
void cr_str_map_free(cr_str_map *m) {
    for (int64_t i = 0; i < m->n; i++) {
        free(m->keys[i]);
        free(m->values[i]);
    }
    free(m->keys);
    free(m->values);
    memset(m, 0, sizeof *m);
}

typedef struct {
    char *key, *value;
} str_pair;

static int pair_cmp(const void *a, const void *b) {
    return strcmp(((const str_pair *)a)->key, ((const str_pair *)b)->key);
}

static cr_status map_push(cr_str_map *m, char *key, char *value) {
    if (m->n == m->cap) {
        int64_t cap = m->cap ? 2 * m->cap : 8;
        char **k = realloc(m->keys, (size_t)cap * sizeof *k);
        if (k) m->keys = k;
        char **v = realloc(m->values, (size_t)cap * sizeof *v);
        if (v) m->values = v;
        if (!k || !v) return CR_ERR_OOM;
        m->cap = cap;
    }
    m->keys[m->n] = key;
    m->values[m->n] = value;
    m->n++;
    return CR_OK;
}

cr_status cr_json_str_map(cr_json_reader *r, cr_str_map *m, const char *what) {
    memset(m, 0, sizeof *m);
    if (!cr_json_accept(r, '{')) return cr_json_unexpected(r, "%s must be an object of strings", what);
    cr_status st = CR_OK;
    if (!cr_json_accept(r, '}')) {
        for (;;) {
            char *key = NULL, *value = NULL;
            if ((st = cr_json_string(r, &key))) break;
            if (!cr_json_accept(r, ':')) {
                free(key);
                st = cr_json_syntax(r, "expected ':' after a key");
                break;
            }
            if (cr_json_peek(r) != '"') {
                st = cr_json_unexpected(r,
                                        "%s: the value of '%.200s' must be a string (the format "
                                        "allows only strings; encode other values, e.g. as JSON)",
                                        what, key);
                free(key);
                break;
            }
            if ((st = cr_json_string(r, &value))) {
                free(key);
                break;
            }
            if (map_push(m, key, value)) {
                free(key);
                free(value);
                st = cr_fail(CR_ERR_OOM, "%s: out of memory reading %s", r->ctx, what);
                break;
            }
            if (cr_json_accept(r, ',')) continue;
            if (cr_json_accept(r, '}')) break;
            st = cr_json_syntax(r, "expected ',' or '}' in an object");
            break;
        }
    }
    if (st == CR_OK && m->n > 1) {
        str_pair *p = malloc((size_t)m->n * sizeof *p);
        if (!p) st = cr_fail(CR_ERR_OOM, "%s: out of memory reading %s", r->ctx, what);
        for (int64_t i = 0; p && i < m->n; i++) p[i] = (str_pair){m->keys[i], m->values[i]};
        if (p) qsort(p, (size_t)m->n, sizeof *p, pair_cmp);
        for (int64_t i = 0; p && i < m->n; i++) {
            m->keys[i] = p[i].key;
            m->values[i] = p[i].value;
        }
        free(p);
        for (int64_t i = 1; st == CR_OK && i < m->n; i++)
            if (strcmp(m->keys[i - 1], m->keys[i]) == 0)
                st = cr_fail(CR_ERR_ARG, "%s: %s has the key '%.200s' twice", r->ctx, what,
                             m->keys[i]);
    }
    if (st) cr_str_map_free(m);
    return st;
}

/* ---- writing -------------------------------------------------------------------- */
void cr_sb_put(cr_strbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void cr_sb_puts(cr_strbuf *b, const char *s) { cr_sb_put(b, s, strlen(s)); }

void cr_sb_printf(cr_strbuf *b, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    CR_ASSERT(n >= 0 && (size_t)n < sizeof tmp); /* only short numbers are printed */
    cr_sb_put(b, tmp, (size_t)n);
}

void cr_sb_json_string(cr_strbuf *b, const char *s) {
    cr_sb_put(b, "\"", 1);
    const char *run = s;
    for (const char *p = s; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        cr_sb_put(b, run, (size_t)(p - run));
        run = p + 1;
        switch (c) {
        case '"': cr_sb_puts(b, "\\\""); break;
        case '\\': cr_sb_puts(b, "\\\\"); break;
        case '\n': cr_sb_puts(b, "\\n"); break;
        case '\t': cr_sb_puts(b, "\\t"); break;
        case '\r': cr_sb_puts(b, "\\r"); break;
        case '\b': cr_sb_puts(b, "\\b"); break;
        case '\f': cr_sb_puts(b, "\\f"); break;
        default: cr_sb_printf(b, "\\u%04x", c); break;
        }
    }
    cr_sb_puts(b, run);
    cr_sb_put(b, "\"", 1);
}

void cr_sb_json_str_map(cr_strbuf *b, const cr_str_map *m) {
    cr_sb_put(b, "{", 1);
    for (int64_t i = 0; i < m->n; i++) {
        if (i) cr_sb_put(b, ",", 1);
        cr_sb_json_string(b, m->keys[i]);
        cr_sb_put(b, ":", 1);
        cr_sb_json_string(b, m->values[i]);
    }
    cr_sb_put(b, "}", 1);
}
