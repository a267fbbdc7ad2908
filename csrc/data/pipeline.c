/* pipeline.c — the loader's worker threads: an epoch's batches built ahead of the
 * consumer into a ring of `prefetch` slots (crescent_data.h). One mutex guards the claim
 * counter, the consumer's position and the slots; workers build outside it with the
 * serial entry points of batch.c and augment.c, so a worker never opens an OpenMP team
 * and the batches equal the synchronous ones bit for bit. Batch b goes to slot
 * b % prefetch and is started only once batch b - prefetch was taken, so the slot is
 * free when it lands and the ring never holds more than prefetch batches. */
#include <pthread.h>
#include <signal.h>

#include "augment_impl.h"

enum { CR_PIPE_MAX_WORKERS = 64, CR_PIPE_MAX_SLOTS = 1024, CR_PIPE_MAX_GROUPS = 64,
       CR_PIPE_MAX_OUT = CR_PIPE_MAX_GROUPS + 2, CR_PIPE_MSG = 2048 };

typedef enum { SLOT_EMPTY, SLOT_READY, SLOT_FAILED } slot_state;

/* Worker threads created and not yet joined, over all pipelines. */
static int64_t live_threads;

int64_t cr_data_pipeline_threads(void) { return __atomic_load_n(&live_threads, __ATOMIC_RELAXED); }

typedef struct {
    slot_state state;
    int64_t batch;
    cr_tensor *out[CR_PIPE_MAX_OUT];
    cr_status st;
    char msg[CR_PIPE_MSG];
} slot;

struct cr_data_pipeline {
    /* the job (read-only once the workers run) */
    cr_tensor *images, *labels, *order;
    cr_data_paths *paths; /* streamed instead of images */
    cr_stream_reader *reader; /* NULL, or the archives read front to back (job->stream) */
    int channels, height, width;
    bool skip_bad;
    int64_t skipped;               /* under mu: files replaced so far */
    char first_skip[CR_PIPE_MSG];  /* under mu: the first one's message */
    int64_t batch_size, num_batches, rows;
    double *mean, *std;
    cr_data_augment aug;
    bool has_aug;
    unsigned flags; /* CR_BATCH_PINNED or 0 (workers never enter OpenMP) */
    cr_data_crop_group *groups;
    int64_t ngroups; /* 0: plain batches */
    uint64_t seed, epoch;
    int nout;
    /* the ring, under mu */
    pthread_mutex_t mu;
    pthread_cond_t ready; /* a slot was filled: the consumer waits on it */
    pthread_cond_t space; /* a slot was taken, or stop: workers wait on it */
    int64_t next_claim, next_take;
    bool stopping, failed;
    int nslots;
    slot *slots;
    int nthreads;
    pthread_t *threads;
};

/* ---- building one batch (a worker, without the lock) ---- */

static void drop_outs(cr_tensor **out, int n) {
    for (int k = 0; k < n; k++) {
        cr_tensor_free(out[k]);
        out[k] = NULL;
    }
}

/* Entry i of the path table (a file, or an archive member) decoded: from the sequential
 * reader when it holds the row (reader non-NULL), else read on its own. */
static cr_status load_one(const cr_data_paths *paths, cr_stream_reader *reader, int64_t i, int channels, int th,
                          int tw, uint8_t **pix, int64_t *h, int64_t *w) {
    int64_t offset = 0, length = -1;
    const char *member = cr_data_paths_member(paths, i, &offset, &length);
    const char *path = cr_data_paths_get(paths, i);
    uint8_t *bytes;
    int64_t len;
    if (reader && member && cr_stream_reader_take(reader, i, &bytes, &len)) {
        char name[CR_PIPE_MSG];
        snprintf(name, sizeof name, "%.300s:%.200s", path, member);
        return cr_image_load_encoded(name, bytes, len, channels, th, tw, pix, h, w);
    }
    return cr_image_load(path, member, offset, length, channels, th, tw, pix, h, w);
}

/* Sample row's image: its file decoded, or with skip_bad the next readable file's (the
 * rows after it, wrapping round; *used says whose), the replacement counted. */
static cr_status load_sample(cr_data_pipeline *p, int64_t row, uint8_t **pix, int64_t *h, int64_t *w,
                             int64_t *used) {
    int64_t n = cr_data_paths_count(p->paths);
    int th = p->ngroups ? 0 : p->height, tw = p->ngroups ? 0 : p->width;
    *used = row;
    cr_status st = load_one(p->paths, p->reader, row, p->channels, th, tw, pix, h, w);
    if (!st || !p->skip_bad || st == CR_ERR_OOM) return st;
    char first[CR_PIPE_MSG];
    snprintf(first, sizeof first, "%s", cr_last_error());
    pthread_mutex_lock(&p->mu);
    if (p->skipped++ == 0) memcpy(p->first_skip, first, sizeof first);
    pthread_mutex_unlock(&p->mu);
    for (int64_t k = 1; k < n && st && st != CR_ERR_OOM; k++) {
        *used = (row + k) % n;
        st = load_one(p->paths, NULL, *used, p->channels, th, tw, pix, h, w);
    }
    if (st && st != CR_ERR_OOM)
        return cr_fail(CR_ERR_ARG, "pipeline: no file of the %lld decodes (the first: %s)", (long long)n, first);
    return st;
}

int64_t cr_data_pipeline_skipped(cr_data_pipeline *p, char *msg, int64_t cap) {
    if (!p) return 0;
    pthread_mutex_lock(&p->mu);
    int64_t n = p->skipped;
    if (msg && cap > 0) snprintf(msg, (size_t)cap, "%s", n ? p->first_skip : "");
    pthread_mutex_unlock(&p->mu);
    return n;
}

/* A streamed batch: each sample's file decoded in turn, then cropped (every group) or
 * resized into the plain batch, and freed, so a worker holds one decoded image. */
static cr_status build_streamed(cr_data_pipeline *p, const cr_tensor *index, cr_tensor **out) {
    int64_t B = index->shape[0], stride = index->stride[0], C = p->channels;
    const int64_t *ix = (const int64_t *)cr_tensor_ptr(index);
    int ng = p->ngroups ? (int)p->ngroups : 1;
    cr_tensor *plain = NULL, *local = NULL;
    int64_t *ids = malloc(sizeof(int64_t) * 2 * (size_t)B), *used = ids + B;
    if (!ids) return cr_fail(CR_ERR_OOM, "pipeline: out of memory for a batch of %lld", (long long)B);
    cr_status st = CR_OK;
    if (p->ngroups) {
        for (int g = 0; g < ng && !st; g++)
            st = cr_augment_crops_alloc(&out[g], B, C, &p->groups[g].spec, p->groups[g].ncrops, p->flags);
    } else {
        int64_t shape[4] = {B, C, p->height, p->width};
        st = cr_tensor_alloc(&plain, 4, shape, CR_DT_U8, CR_CPU);
    }
    const int64_t sample = C * (int64_t)p->height * p->width;
    for (int64_t b = 0; b < B && !st; b++) {
        int64_t row = ix[b * stride];
        ids[b] = row;
        if (row < 0 || row >= cr_data_paths_count(p->paths) || row > (int64_t)UINT32_MAX) {
            st = cr_fail(CR_ERR_ARG, "pipeline: row %lld is out of range for %lld files", (long long)row,
                         (long long)cr_data_paths_count(p->paths));
            break;
        }
        uint8_t *pix = NULL;
        int64_t h = 0, w = 0;
        st = load_sample(p, row, &pix, &h, &w, &used[b]);
        for (int g = 0; g < (int)p->ngroups && !st; g++)
            st = cr_augment_crops_sample(out[g], pix, h, w, b, (uint64_t)row, &p->groups[g].spec,
                                         p->groups[g].first_crop, p->seed, p->epoch);
        if (!st && !p->ngroups) memcpy((uint8_t *)cr_tensor_ptr(plain) + b * sample, pix, (size_t)sample);
        free(pix);
    }
    if (!st && !p->ngroups) { /* the plain batch: rows 0 .. B-1 of `plain`, draws keyed by ids */
        st = cr_tensor_alloc(&local, 1, &B, CR_DT_I64, CR_CPU);
        if (!st) {
            int64_t *lp = (int64_t *)cr_tensor_ptr(local);
            for (int64_t b = 0; b < B; b++) lp[b] = b;
            st = cr_batch_make(&out[0], NULL, plain, NULL, local, p->mean, p->std, p->has_aug ? &p->aug : NULL,
                               p->flags, ids);
        }
    }
    if (!st && p->labels) { /* the labels of the images used (a replaced file takes its stand-in's) */
        cr_tensor *rows = NULL;
        st = cr_tensor_alloc(&rows, 1, &B, CR_DT_I64, CR_CPU);
        if (!st) {
            memcpy(cr_tensor_ptr(rows), used, sizeof(int64_t) * (size_t)B);
            st = cr_batch_targets(&out[ng], p->labels, rows, p->flags);
        }
        cr_tensor_free(rows);
    }
    cr_tensor_free(plain);
    cr_tensor_free(local);
    free(ids);
    return st;
}

static cr_status build(cr_data_pipeline *p, int64_t b, cr_tensor **out) {
    int64_t first = b * p->batch_size;
    int64_t size = p->rows - first < p->batch_size ? p->rows - first : p->batch_size;
    int64_t stride = p->order->stride[0];
    cr_tensor *index = cr_tensor_alias(p->order, 1, &size, &stride, p->order->offset + first * stride);
    int ng = p->ngroups ? (int)p->ngroups : 1;
    cr_status st = CR_OK;
    if (p->paths) {
        st = build_streamed(p, index, out);
    } else if (p->ngroups) {
        for (int g = 0; g < ng && !st; g++) {
            const cr_data_crop_group *grp = &p->groups[g];
            st = cr_augment_crops(&out[g], p->images, index, &grp->spec, grp->ncrops, grp->first_crop,
                                  p->seed, p->epoch, p->flags);
        }
        if (!st && p->labels) st = cr_batch_targets(&out[ng], p->labels, index, p->flags);
    } else {
        st = cr_batch_make(&out[0], p->labels ? &out[1] : NULL, p->images, p->labels, index, p->mean,
                           p->std, p->has_aug ? &p->aug : NULL, p->flags, NULL);
    }
    out[ng + 1] = index;
    if (st) drop_outs(out, p->nout);
    return st;
}

static void *worker(void *arg) {
    cr_data_pipeline *p = arg;
    pthread_mutex_lock(&p->mu);
    while (!p->stopping && !p->failed && p->next_claim < p->num_batches) {
        int64_t b = p->next_claim++;
        /* slot b % nslots is free once batch b - nslots was taken */
        while (!p->stopping && b >= p->next_take + p->nslots) pthread_cond_wait(&p->space, &p->mu);
        if (p->stopping) break;
        pthread_mutex_unlock(&p->mu);
        cr_tensor *out[CR_PIPE_MAX_OUT] = {0};
        cr_status st = build(p, b, out);
        pthread_mutex_lock(&p->mu);
        slot *s = &p->slots[b % p->nslots];
        CR_ASSERT(s->state == SLOT_EMPTY);
        s->batch = b;
        s->st = st;
        if (st) {
            s->state = SLOT_FAILED;
            snprintf(s->msg, sizeof s->msg, "%s", cr_last_error()); /* this thread's message */
            p->failed = true; /* batches after a failure are never handed out */
        } else {
            s->state = SLOT_READY;
            memcpy(s->out, out, sizeof out);
        }
        pthread_cond_broadcast(&p->ready);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* ---- checks of the job (the caller's thread, so errors come at start) ---- */

static bool is_int_dtype(cr_dtype dt) {
    return dt == CR_DT_I64 || dt == CR_DT_I32 || dt == CR_DT_U8;
}

static cr_status check_job(const cr_data_pipeline_job *j) {
    char buf[160];
    if (!j) return cr_fail(CR_ERR_ARG, "pipeline: job is nil");
    if (j->workers < 1 || j->workers > CR_PIPE_MAX_WORKERS)
        return cr_fail(CR_ERR_ARG, "pipeline: workers = %d must be in [1, %d] (0 means no pipeline)",
                       (int)j->workers, CR_PIPE_MAX_WORKERS);
    if (j->prefetch < 1 || j->prefetch > CR_PIPE_MAX_SLOTS)
        return cr_fail(CR_ERR_ARG, "pipeline: prefetch = %d must be in [1, %d] (batches ready ahead)",
                       (int)j->prefetch, CR_PIPE_MAX_SLOTS);
    cr_status st;
    char buf2[160];
    int64_t nchan, n;
    if (j->paths) {
        if (j->images)
            return cr_fail(CR_ERR_ARG, "pipeline: a job has images or paths, not both");
        if (j->channels != 1 && j->channels != 3)
            return cr_fail(CR_ERR_ARG, "pipeline: channels = %d; streamed images are decoded to 1 or 3",
                           (int)j->channels);
        nchan = j->channels;
        n = cr_data_paths_count(j->paths);
    } else {
        st = j->groups ? cr_augment_check_images("pipeline", j->images)
                       : cr_batch_check(j->images, NULL, j->mean, j->std, j->aug);
        if (st) return st;
        nchan = j->images->ndim == 4 ? j->images->shape[1] : 1;
        n = j->images->shape[0];
    }
    if (j->groups) {
        if (j->ngroups < 1 || j->ngroups > CR_PIPE_MAX_GROUPS)
            return cr_fail(CR_ERR_ARG, "pipeline: %lld crop groups; pass 1 to %d", (long long)j->ngroups,
                           CR_PIPE_MAX_GROUPS);
        for (int64_t g = 0; g < j->ngroups; g++) {
            if (j->groups[g].ncrops < 1 || j->groups[g].first_crop < 0)
                return cr_fail(CR_ERR_ARG, "pipeline: group %lld has ncrops = %lld (need >= 1) and "
                               "first_crop = %lld (need >= 0)", (long long)g,
                               (long long)j->groups[g].ncrops, (long long)j->groups[g].first_crop);
            st = cr_augment_check_spec(&j->groups[g].spec, nchan);
            if (st) return st;
        }
    } else if (j->paths) {
        if (j->height < 1 || j->width < 1 || j->height > 65536 || j->width > 65536)
            return cr_fail(CR_ERR_ARG, "pipeline: plain batches of streamed images need the size they are "
                           "resized to: height and width in [1, 65536], got %d x %d", (int)j->height,
                           (int)j->width);
        if ((st = cr_batch_check_norm(nchan, j->mean, j->std, j->aug))) return st;
    }
    const cr_tensor *l = j->labels;
    if (l && (!is_int_dtype(l->dtype) || l->ndim != 1 || cr_tensor_device(l) != CR_DEV_CPU || l->shape[0] != n))
        return cr_fail(CR_ERR_ARG, "pipeline: labels must be a CPU integer tensor [N] with N = %lld (the number "
                       "of images), got %s %s", (long long)n, cr_dtype_name(l->dtype),
                       cr_shape_str(l, buf2, sizeof buf2));
    const cr_tensor *o = j->order;
    if (!o || o->dtype != CR_DT_I64 || o->ndim != 1 || cr_tensor_device(o) != CR_DEV_CPU)
        return cr_fail(CR_ERR_ARG, "pipeline: order must be a CPU i64 tensor [M] (the epoch's rows), "
                       "got %s", o ? cr_shape_str(o, buf, sizeof buf) : "nil");
    if (j->batch_size < 1)
        return cr_fail(CR_ERR_ARG, "pipeline: batch_size = %lld must be >= 1", (long long)j->batch_size);
    if (j->num_batches < 0 || j->num_batches > (o->shape[0] + j->batch_size - 1) / j->batch_size)
        return cr_fail(CR_ERR_ARG, "pipeline: %lld batches of %lld do not fit in %lld rows",
                       (long long)j->num_batches, (long long)j->batch_size, (long long)o->shape[0]);
    if (j->first_batch < 0 || j->first_batch > j->num_batches)
        return cr_fail(CR_ERR_ARG, "pipeline: first_batch = %lld must be in [0, %lld]",
                       (long long)j->first_batch, (long long)j->num_batches);
    if (j->pin_memory && cr_cuda_init()) {
        snprintf(buf, sizeof buf, "%s", cr_last_error()); /* cr_fail writes over that message */
        return cr_fail(CR_ERR_DEVICE, "pipeline: pin_memory puts batches in page-locked memory for copies to a "
                       "GPU, and there is none (%s); pass pin_memory = false", buf);
    }
    const cr_tensor *s = j->stream;
    if (s) {
        int64_t off, len;
        if (!j->paths || n == 0 || !cr_data_paths_member(j->paths, 0, &off, &len))
            return cr_fail(CR_ERR_ARG, "pipeline: a stream orders the reads of archive members (tar shards); "
                           "this job has %s", j->paths ? "plain files" : "images in memory");
        if (s->dtype != CR_DT_I64 || s->ndim != 1 || cr_tensor_device(s) != CR_DEV_CPU || !cr_tensor_is_contiguous(s))
            return cr_fail(CR_ERR_ARG, "pipeline: stream must be a contiguous CPU i64 tensor [S] (rows in read "
                           "order), got %s", cr_shape_str(s, buf, sizeof buf));
    }
    return CR_OK;
}

/* ---- lifetime ---- */

static void release_job(cr_data_pipeline *p) {
    cr_stream_reader_free(p->reader);
    cr_data_paths_free(p->paths);
    cr_tensor_free(p->images);
    cr_tensor_free(p->labels);
    cr_tensor_free(p->order);
    free(p->mean);
    free(p->groups);
    free(p->slots);
    free(p->threads);
    pthread_cond_destroy(&p->space);
    pthread_cond_destroy(&p->ready);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

/* The sequential reader of job->stream, told how often the remaining batches use each
 * row (so it skips the rows a resumed epoch has done). */
static cr_status start_reader(cr_data_pipeline *p, const cr_data_pipeline_job *job) {
    int64_t n = cr_data_paths_count(p->paths);
    int32_t *need = calloc((size_t)n, sizeof *need);
    if (!need) return cr_fail(CR_ERR_OOM, "pipeline: out of memory for the read plan of %lld rows", (long long)n);
    const int64_t *ord = (const int64_t *)cr_tensor_ptr(p->order);
    int64_t ostride = p->order->stride[0], end = p->num_batches * p->batch_size;
    if (end > p->rows) end = p->rows;
    for (int64_t t = job->first_batch * p->batch_size; t < end; t++) {
        int64_t row = ord[t * ostride];
        if (row >= 0 && row < n && need[row] < INT32_MAX) need[row]++;
    }
    cr_status st = cr_stream_reader_new(&p->reader, p->paths, (const int64_t *)cr_tensor_ptr(job->stream),
                                        job->stream->shape[0], need);
    free(need);
    return st;
}

void cr_data_pipeline_stream_stats(cr_data_pipeline *p, cr_data_stream_stats *out) {
    if (p) cr_stream_reader_stats_get(p->reader, out);
    else memset(out, 0, sizeof *out);
}

cr_status cr_data_pipeline_start(cr_data_pipeline **out, const cr_data_pipeline_job *job) {
    if (!out) return cr_fail(CR_ERR_ARG, "pipeline: out is nil");
    *out = NULL;
    cr_status st = check_job(job);
    if (st) return st;
    cr_data_pipeline *p = calloc(1, sizeof *p);
    if (!p) return cr_fail(CR_ERR_OOM, "pipeline: out of memory");
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->ready, NULL);
    pthread_cond_init(&p->space, NULL);
    p->images = (cr_tensor *)job->images;
    p->labels = (cr_tensor *)job->labels;
    p->order = (cr_tensor *)job->order;
    p->paths = (cr_data_paths *)job->paths;
    cr_data_paths_retain(p->paths);
    p->channels = job->channels;
    p->skip_bad = job->skip_bad != 0;
    p->height = job->height;
    p->width = job->width;
    p->flags = job->pin_memory ? CR_BATCH_PINNED : 0;
    cr_tensor_retain(p->images);
    cr_tensor_retain(p->labels);
    cr_tensor_retain(p->order);
    p->batch_size = job->batch_size;
    p->num_batches = job->num_batches;
    p->rows = job->order->shape[0];
    p->next_claim = p->next_take = job->first_batch;
    p->seed = job->seed;
    p->epoch = job->epoch;
    p->nslots = job->prefetch;
    p->ngroups = job->groups ? job->ngroups : 0;
    p->nout = (p->ngroups ? (int)p->ngroups : 1) + 2;
    int64_t nchan = job->paths ? job->channels : job->images->ndim == 4 ? job->images->shape[1] : 1;
    p->slots = calloc((size_t)p->nslots, sizeof *p->slots);
    p->threads = calloc((size_t)job->workers, sizeof *p->threads);
    bool ok = p->slots && p->threads;
    if (ok && p->ngroups) {
        p->groups = malloc(sizeof *p->groups * (size_t)p->ngroups);
        if ((ok = p->groups != NULL)) memcpy(p->groups, job->groups, sizeof *p->groups * (size_t)p->ngroups);
    } else if (ok) {
        p->mean = malloc(sizeof(double) * 2 * (size_t)nchan);
        if ((ok = p->mean != NULL)) {
            p->std = p->mean + nchan;
            memcpy(p->mean, job->mean, sizeof(double) * (size_t)nchan);
            memcpy(p->std, job->std, sizeof(double) * (size_t)nchan);
        }
        if (job->aug) p->aug = *job->aug, p->has_aug = true;
    }
    if (!ok) {
        release_job(p);
        return cr_fail(CR_ERR_OOM, "pipeline: out of memory for %d slots", job->prefetch);
    }
    if (job->stream && (st = start_reader(p, job))) {
        release_job(p);
        return st;
    }
    /* Workers block every signal (they inherit the mask): Ctrl-C and friends stay with
     * the threads that run Lua. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    for (int t = 0; t < job->workers; t++) {
        int e = pthread_create(&p->threads[t], NULL, worker, p);
        if (e) {
            pthread_sigmask(SIG_SETMASK, &old, NULL);
            cr_data_pipeline_free(p);
            return cr_fail(CR_ERR_OOM, "pipeline: could not start worker thread %d of %d (%s); use fewer "
                           "workers", t + 1, (int)job->workers, strerror(e));
        }
        p->nthreads = t + 1;
        __atomic_add_fetch(&live_threads, 1, __ATOMIC_RELAXED);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    *out = p;
    return CR_OK;
}

cr_status cr_data_pipeline_next(cr_data_pipeline *p, cr_tensor **outs) {
    if (!p || !outs) return cr_fail(CR_ERR_ARG, "pipeline_next: pipeline and outs are required");
    for (int k = 0; k < p->nout; k++) outs[k] = NULL;
    pthread_mutex_lock(&p->mu);
    if (p->stopping) {
        pthread_mutex_unlock(&p->mu);
        return cr_fail(CR_ERR_ARG, "pipeline_next: the pipeline was stopped; start a new one");
    }
    if (p->next_take >= p->num_batches) {
        pthread_mutex_unlock(&p->mu);
        return CR_OK;
    }
    slot *s = &p->slots[p->next_take % p->nslots];
    while (s->state == SLOT_EMPTY) pthread_cond_wait(&p->ready, &p->mu);
    CR_ASSERT(s->batch == p->next_take);
    if (s->state == SLOT_FAILED) {
        cr_status st = s->st;
        char msg[CR_PIPE_MSG];
        memcpy(msg, s->msg, sizeof msg);
        pthread_mutex_unlock(&p->mu);
        return cr_fail(st, "%s", msg);
    }
    memcpy(outs, s->out, sizeof(cr_tensor *) * (size_t)p->nout);
    memset(s->out, 0, sizeof s->out);
    s->state = SLOT_EMPTY;
    p->next_take++;
    pthread_cond_broadcast(&p->space);
    pthread_mutex_unlock(&p->mu);
    return CR_OK;
}

void cr_data_pipeline_stop(cr_data_pipeline *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stopping = true;
    pthread_cond_broadcast(&p->space);
    pthread_cond_broadcast(&p->ready);
    pthread_mutex_unlock(&p->mu);
    for (int t = 0; t < p->nthreads; t++) {
        pthread_join(p->threads[t], NULL);
        __atomic_sub_fetch(&live_threads, 1, __ATOMIC_RELAXED);
    }
    p->nthreads = 0;
    for (int k = 0; k < p->nslots; k++) {
        drop_outs(p->slots[k].out, p->nout);
        p->slots[k].state = SLOT_EMPTY;
    }
}

void cr_data_pipeline_free(cr_data_pipeline *p) {
    if (!p) return;
    cr_data_pipeline_stop(p);
    release_job(p);
}
