/* profile.c — the op profiler (crescent.h, "the profiler"): spans kept in a growing
 * array while it is on, with a stack of open spans for nesting and self time. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

typedef struct {
    const char *name;
    double start, dur, child; /* microseconds; child: the time of the spans nested directly in it */
    int depth;
} prof_event;

enum { PROF_MAX_DEPTH = 256 };

static struct {
    bool on;
    pthread_t thread;
    double t0;
    prof_event *ev;
    int64_t n, cap;
    int64_t stack[PROF_MAX_DEPTH];
    int depth;
    char **names; /* interned copies of the names given to cr_profile_begin */
    int64_t nnames, capnames;
} prof;

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + 1e-3 * (double)ts.tv_nsec;
}

static void free_record(void) {
    for (int64_t i = 0; i < prof.nnames; i++) free(prof.names[i]);
    free(prof.names);
    free(prof.ev);
    prof.names = NULL;
    prof.ev = NULL;
    prof.n = prof.cap = prof.nnames = prof.capnames = 0;
}

cr_status cr_profile_start(void) {
    free_record();
    prof.thread = pthread_self();
    prof.depth = 0;
    prof.t0 = now_us();
    prof.on = true;
    return CR_OK;
}

void cr_profile_stop(void) {
    double t = now_us();
    while (prof.depth > 0) { /* spans still open: closed at the stop */
        prof_event *e = &prof.ev[prof.stack[--prof.depth]];
        e->dur = t - prof.t0 - e->start;
    }
    prof.on = false;
}

bool cr_profile_active(void) { return prof.on && pthread_equal(prof.thread, pthread_self()); }

/* Opens a span named `name` (a static string): its index, or -1 (off, full, too deep). */
int64_t cr_profile_push(const char *name) {
    if (!cr_profile_active() || prof.depth >= PROF_MAX_DEPTH) return -1;
    if (prof.n == prof.cap) {
        int64_t cap = prof.cap ? 2 * prof.cap : 4096;
        prof_event *p = realloc(prof.ev, (size_t)cap * sizeof *p);
        if (!p) return -1; /* out of memory: the span goes unrecorded */
        prof.ev = p;
        prof.cap = cap;
    }
    int64_t i = prof.n++;
    prof.ev[i] = (prof_event){name, now_us() - prof.t0, 0, 0, prof.depth};
    prof.stack[prof.depth++] = i;
    return i;
}

void cr_profile_pop(int64_t i) {
    if (i < 0 || !cr_profile_active() || prof.depth == 0 || prof.stack[prof.depth - 1] != i) return;
    prof.depth--;
    prof_event *e = &prof.ev[i];
    e->dur = now_us() - prof.t0 - e->start;
    if (prof.depth > 0) prof.ev[prof.stack[prof.depth - 1]].child += e->dur;
}

int64_t cr_profile_begin(const char *name) {
    if (!cr_profile_active() || !name) return -1;
    const char *interned = NULL;
    for (int64_t k = 0; k < prof.nnames; k++)
        if (!strcmp(prof.names[k], name)) interned = prof.names[k];
    if (!interned) {
        if (prof.nnames == prof.capnames) {
            int64_t cap = prof.capnames ? 2 * prof.capnames : 16;
            char **p = realloc(prof.names, (size_t)cap * sizeof *p);
            if (!p) return -1;
            prof.names = p;
            prof.capnames = cap;
        }
        char *copy = strdup(name);
        if (!copy) return -1;
        prof.names[prof.nnames++] = copy;
        interned = copy;
    }
    return cr_profile_push(interned);
}

void cr_profile_end(int64_t index) { cr_profile_pop(index); }

int64_t cr_profile_count(void) { return prof.n; }

cr_status cr_profile_event(int64_t i, const char **name, double *start_us, double *dur_us, double *self_us,
                           int *depth) {
    if (i < 0 || i >= prof.n)
        return cr_fail(CR_ERR_ARG, "profile: event %lld of %lld does not exist", (long long)i, (long long)prof.n);
    const prof_event *e = &prof.ev[i];
    *name = e->name;
    *start_us = e->start;
    *dur_us = e->dur;
    *self_us = e->dur - e->child;
    *depth = e->depth;
    return CR_OK;
}
