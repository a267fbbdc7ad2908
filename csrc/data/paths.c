/* paths.c — the path table of a streamed data set (crescent_data.h): the strings packed
 * in one block with an offset per path, so a million files cost their bytes plus 8 per
 * path, shared by reference count between the data set and the pipelines reading it. */
#include "data_impl.h"

struct cr_data_paths {
    int64_t n, refs;
    int64_t *offset; /* n + 1 entries into text */
    char *text;
};

cr_status cr_data_paths_new(cr_data_paths **out, const char *const *paths, int64_t n) {
    if (!out) return cr_fail(CR_ERR_ARG, "paths: out is nil");
    *out = NULL;
    if (n < 0 || (n > 0 && !paths)) return cr_fail(CR_ERR_ARG, "paths: %lld paths and no list", (long long)n);
    int64_t bytes = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!paths[i]) return cr_fail(CR_ERR_ARG, "paths: path %lld is nil", (long long)i + 1);
        bytes += (int64_t)strlen(paths[i]) + 1;
    }
    cr_data_paths *p = calloc(1, sizeof *p);
    if (p) p->offset = malloc(sizeof(int64_t) * (size_t)(n + 1));
    if (p && p->offset) p->text = malloc((size_t)(bytes > 0 ? bytes : 1));
    if (!p || !p->offset || !p->text) {
        if (p) free(p->offset);
        free(p);
        return cr_fail(CR_ERR_OOM, "paths: out of memory for %lld paths (%lld bytes)", (long long)n,
                       (long long)bytes);
    }
    int64_t at = 0;
    for (int64_t i = 0; i < n; i++) {
        size_t len = strlen(paths[i]) + 1;
        p->offset[i] = at;
        memcpy(p->text + at, paths[i], len);
        at += (int64_t)len;
    }
    p->offset[n] = at;
    p->n = n;
    p->refs = 1;
    *out = p;
    return CR_OK;
}

int64_t cr_data_paths_count(const cr_data_paths *p) { return p ? p->n : 0; }

const char *cr_data_paths_get(const cr_data_paths *p, int64_t i) {
    if (!p || i < 0 || i >= p->n) return NULL;
    return p->text + p->offset[i];
}

void cr_data_paths_retain(cr_data_paths *p) {
    if (p) __atomic_add_fetch(&p->refs, 1, __ATOMIC_RELAXED);
}

void cr_data_paths_free(cr_data_paths *p) {
    if (!p || __atomic_sub_fetch(&p->refs, 1, __ATOMIC_ACQ_REL) > 0) return;
    free(p->offset);
    free(p->text);
    free(p);
}
