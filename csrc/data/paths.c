/* paths.c — the path table of a streamed data set (crescent_data.h): the strings packed
 * in one block with an offset per path, so a million files cost their bytes plus 8 per
 * path, shared by reference count between the data set and the pipelines reading it.
 * Archive members (tar shards) add a name, an offset and a length each; their archive's
 * name is stored once for a run of members of the same archive. */
#include "data_impl.h"

struct cr_data_paths {
    int64_t n, refs;
    int64_t *at;        /* n: where path i starts in text */
    char *text;
    int64_t *name_at;   /* members only (else NULL): where name i starts in names */
    char *names;
    int64_t *range;     /* members only: offset and length of member i, interleaved */
};

/* Packs n strings into one block (a string equal to the one before it shares its bytes):
 * *at[i] is where string i starts. */
static bool pack(const char *const *s, int64_t n, int64_t **at, char **text) {
    int64_t bytes = 0;
    for (int64_t i = 0; i < n; i++)
        if (i == 0 || strcmp(s[i], s[i - 1])) bytes += (int64_t)strlen(s[i]) + 1;
    *at = malloc(sizeof(int64_t) * (size_t)(n > 0 ? n : 1));
    *text = malloc((size_t)(bytes > 0 ? bytes : 1));
    if (!*at || !*text) return false;
    int64_t pos = 0;
    for (int64_t i = 0; i < n; i++) {
        if (i > 0 && !strcmp(s[i], s[i - 1])) {
            (*at)[i] = (*at)[i - 1];
            continue;
        }
        size_t len = strlen(s[i]) + 1;
        (*at)[i] = pos;
        memcpy(*text + pos, s[i], len);
        pos += (int64_t)len;
    }
    return true;
}

static cr_status check_list(const char *what, const char *const *s, int64_t n) {
    if (n > 0 && !s) return cr_fail(CR_ERR_ARG, "paths: %lld %s and no list", (long long)n, what);
    for (int64_t i = 0; i < n; i++)
        if (!s[i]) return cr_fail(CR_ERR_ARG, "paths: %s %lld is nil", what, (long long)i + 1);
    return CR_OK;
}

static void release(cr_data_paths *p) {
    if (!p) return;
    free(p->at);
    free(p->text);
    free(p->name_at);
    free(p->names);
    free(p->range);
    free(p);
}

static cr_status make(cr_data_paths **out, const char *const *files, const char *const *names,
                      const int64_t *offsets, const int64_t *lengths, int64_t n) {
    if (!out) return cr_fail(CR_ERR_ARG, "paths: out is nil");
    *out = NULL;
    if (n < 0) return cr_fail(CR_ERR_ARG, "paths: a count of %lld", (long long)n);
    cr_status st = check_list("path", files, n);
    if (!st && names) st = check_list("member name", names, n);
    if (st) return st;
    cr_data_paths *p = calloc(1, sizeof *p);
    bool ok = p && pack(files, n, &p->at, &p->text);
    if (ok && names) {
        ok = pack(names, n, &p->name_at, &p->names) && (p->range = malloc(sizeof(int64_t) * 2 * (size_t)(n ? n : 1)));
        for (int64_t i = 0; ok && i < n; i++) {
            if (offsets[i] < 0 || lengths[i] < 0) {
                release(p);
                return cr_fail(CR_ERR_ARG, "paths: member %lld has offset %lld and length %lld", (long long)i + 1,
                               (long long)offsets[i], (long long)lengths[i]);
            }
            p->range[2 * i] = offsets[i];
            p->range[2 * i + 1] = lengths[i];
        }
    }
    if (!ok) {
        release(p);
        return cr_fail(CR_ERR_OOM, "paths: out of memory for %lld paths", (long long)n);
    }
    p->n = n;
    p->refs = 1;
    *out = p;
    return CR_OK;
}

cr_status cr_data_paths_new(cr_data_paths **out, const char *const *paths, int64_t n) {
    return make(out, paths, NULL, NULL, NULL, n);
}

cr_status cr_data_paths_new_members(cr_data_paths **out, const char *const *files, const char *const *names,
                                    const int64_t *offsets, const int64_t *lengths, int64_t n) {
    if (n > 0 && (!names || !offsets || !lengths))
        return cr_fail(CR_ERR_ARG, "paths: members need names, offsets and lengths");
    return make(out, files, names, offsets, lengths, n);
}

int64_t cr_data_paths_count(const cr_data_paths *p) { return p ? p->n : 0; }

const char *cr_data_paths_get(const cr_data_paths *p, int64_t i) {
    if (!p || i < 0 || i >= p->n) return NULL;
    return p->text + p->at[i];
}

const char *cr_data_paths_member(const cr_data_paths *p, int64_t i, int64_t *offset, int64_t *length) {
    if (!p || !p->names || i < 0 || i >= p->n) return NULL;
    *offset = p->range[2 * i];
    *length = p->range[2 * i + 1];
    return p->names + p->name_at[i];
}

void cr_data_paths_retain(cr_data_paths *p) {
    if (p) __atomic_add_fetch(&p->refs, 1, __ATOMIC_RELAXED);
}

void cr_data_paths_free(cr_data_paths *p) {
    if (!p || __atomic_sub_fetch(&p->refs, 1, __ATOMIC_ACQ_REL) > 0) return;
    release(p);
}
