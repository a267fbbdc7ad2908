/* profile.c — the op profiler (crescent.h, "the profiler"): spans kept in a growing
 * array while it is on, with a stack of open spans for nesting and self time. In GPU
 * mode each span also records a timing event on a device's compute stream at its start
 * and end; the stop waits for the device and replaces the spans' host times by the GPU
 * times between their events. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda_backend.h"

typedef struct {
    const char *name;
    double start, dur, child; /* microseconds; child: the time of the spans nested directly in it */
    int depth;
    void *gpu_start, *gpu_end; /* GPU mode: the span's timing events (NULL if not made) */
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
    int gpu;                   /* GPU mode: the device; -1 otherwise */
    const cr_cuda_backend *be; /* GPU mode: the backend that makes the events */
    void *gpu_t0;              /* GPU mode: the event at the start */
} prof = {.gpu = -1};

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + 1e-3 * (double)ts.tv_nsec;
}

static void free_record(void) {
    if (prof.be) {
        for (int64_t i = 0; i < prof.n; i++) {
            prof.be->event_free(prof.ev[i].gpu_start);
            prof.be->event_free(prof.ev[i].gpu_end);
        }
        prof.be->event_free(prof.gpu_t0);
    }
    prof.gpu_t0 = NULL;
    prof.be = NULL;
    prof.gpu = -1;
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

cr_status cr_profile_start_gpu(int device) {
    const cr_cuda_backend *be;
    cr_status st = cr_cuda_backend_for(&be, device, false);
    if (st) return st;
    cr_profile_start();
    prof.be = be;
    prof.gpu = device;
    if ((st = be->event_record(device, &prof.gpu_t0))) {
        prof.on = false;
        free_record();
    }
    return st;
}

/* A GPU timing event of the current session on its device (NULL when it fails). */
static void *gpu_event(void) {
    void *e = NULL;
    if (prof.gpu >= 0 && prof.be->event_record(prof.gpu, &e)) e = NULL;
    return e;
}

/* GPU mode, after the device finished: each span's GPU start and duration, then the
 * children's sums again (spans are in start order, so a span's parent is the last one
 * before it one level up). */
static void use_gpu_times(void) {
    if (prof.be->synchronize(prof.gpu)) return; /* the host times stay */
    for (int64_t i = 0; i < prof.n; i++) {
        prof_event *e = &prof.ev[i];
        double at, dur;
        if (e->gpu_start && e->gpu_end && !prof.be->event_elapsed(prof.gpu_t0, e->gpu_start, &at) &&
            !prof.be->event_elapsed(e->gpu_start, e->gpu_end, &dur)) {
            e->start = 1e3 * at;
            e->dur = 1e3 * dur;
        }
        e->child = 0;
    }
    int64_t parent[PROF_MAX_DEPTH];
    for (int64_t i = 0; i < prof.n; i++) {
        prof_event *e = &prof.ev[i];
        if (e->depth > 0) prof.ev[parent[e->depth - 1]].child += e->dur;
        parent[e->depth] = i;
    }
}

void cr_profile_stop(void) {
    if (!prof.on) return;
    double t = now_us();
    while (prof.depth > 0) { /* spans still open: closed at the stop */
        prof_event *e = &prof.ev[prof.stack[--prof.depth]];
        e->dur = t - prof.t0 - e->start;
        if (!e->gpu_end) e->gpu_end = gpu_event();
    }
    prof.on = false;
    if (prof.gpu >= 0) use_gpu_times();
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
    prof.ev[i] = (prof_event){name, now_us() - prof.t0, 0, 0, prof.depth, gpu_event(), NULL};
    prof.stack[prof.depth++] = i;
    return i;
}

void cr_profile_pop(int64_t i) {
    if (i < 0 || !cr_profile_active() || prof.depth == 0 || prof.stack[prof.depth - 1] != i) return;
    prof.depth--;
    prof_event *e = &prof.ev[i];
    e->dur = now_us() - prof.t0 - e->start;
    e->gpu_end = gpu_event();
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
