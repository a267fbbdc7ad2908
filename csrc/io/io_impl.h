/* io_impl.h — private helpers of csrc/io/: a strict reader for the JSON that safetensors
 * headers use (objects, arrays, strings, non-negative integers), a growable text buffer
 * that writes JSON strings, UTF-8 validation, and string maps (the "__metadata__"). */
#ifndef CR_IO_IMPL_H
#define CR_IO_IMPL_H

#include "internal.h"

/* ---- reading ---- */
typedef struct {
    const char *s; /* the text (not NUL-terminated) */
    size_t n, pos;
    const char *ctx; /* prefix of every message: "load: 'model.safetensors'" */
    const char *doc; /* what the text is, for messages: "header", "metadata" */
} cr_json_reader;

/* Fails with "<ctx>: the <doc> is not valid JSON: <detail> (at <doc> byte <pos>)". */
cr_status cr_json_syntax(cr_json_reader *r, const char *detail);
void cr_json_skip_ws(cr_json_reader *r);
/* After whitespace: consumes c and returns true, or returns false and consumes nothing. */
bool cr_json_accept(cr_json_reader *r, char c);
/* After whitespace: the character there, or 0 at the end of the text. */
char cr_json_peek(cr_json_reader *r);
/* What the value at the cursor is, for messages: "a string", "an object", "null", ... */
const char *cr_json_kind(cr_json_reader *r);
/* A value of the wrong kind at the cursor: fails with "<ctx>: <message>, got <kind>", or
 * as a syntax error when the text ends there or holds no JSON value. */
cr_status cr_json_unexpected(cr_json_reader *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* A string value: *out gets a malloc'd, NUL-terminated copy with escapes decoded (free
 * it). Invalid UTF-8, lone surrogates, raw control characters and NUL are refused. */
cr_status cr_json_string(cr_json_reader *r, char **out);
/* A number: *v = its value when it is a non-negative integer below 2^62, else *v = -1
 * (negative, fraction or exponent) or -2 (too large); text/len give the literal. */
cr_status cr_json_number(cr_json_reader *r, int64_t *v, const char **text, int *len);

/* ---- string maps: {"key": "value", ...} ---- */
typedef struct {
    int64_t n, cap;
    char **keys, **values; /* sorted by key (bytewise) once cr_str_map_sort has run */
} cr_str_map;

/* Parses an object whose values are all strings. `what` names it in messages
 * ("__metadata__"); duplicate keys and non-string values are errors. */
cr_status cr_json_str_map(cr_json_reader *r, cr_str_map *m, const char *what);
void cr_str_map_free(cr_str_map *m);

/* ---- writing ---- */
typedef struct {
    char *p;
    size_t n, cap;
    bool oom; /* an allocation failed: the text is incomplete */
} cr_strbuf;

void cr_sb_put(cr_strbuf *b, const char *s, size_t n);
void cr_sb_puts(cr_strbuf *b, const char *s);
void cr_sb_printf(cr_strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* s (valid UTF-8) as a quoted JSON string: only '"', '\\' and control characters are
 * escaped (\n \t \r \b \f, else \u00xx), as serde_json writes it. */
void cr_sb_json_string(cr_strbuf *b, const char *s);
/* {"k":"v",...} in the map's order. */
void cr_sb_json_str_map(cr_strbuf *b, const cr_str_map *m);

bool cr_utf8_valid(const char *s, size_t n);

/* ---- safetensors dtypes (safetensors.c) ---- */
typedef struct {
    const char *name; /* "F32" */
    int dt;           /* the cr_dtype, or -1 when crescent has no such dtype */
} cr_st_dtype;

/* The entry for a format dtype name, or NULL when the format has no such dtype. */
const cr_st_dtype *cr_st_dtype_find(const char *name);
/* The format's name of a crescent dtype. */
const char *cr_st_dtype_name(cr_dtype dt);

#endif
