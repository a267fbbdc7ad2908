/* save_async.c — cr_io_save_safetensors on a thread of its own (crescent_io.h): the job
 * owns copies of the names, path and metadata and a reference to each tensor, released
 * by cr_io_save_wait. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "crescent_io.h"

struct cr_io_save_job {
    pthread_t thread;
    char *path, *meta;
    char **names;
    cr_tensor **tensors;
    int64_t n;
    cr_status status;
    char message[2048]; /* the write's error message (errors are thread-local) */
    atomic_int done;
};

static void job_free(cr_io_save_job *j) {
    for (int64_t i = 0; i < j->n; i++) {
        free(j->names ? j->names[i] : NULL);
        if (j->tensors && j->tensors[i]) cr_tensor_free(j->tensors[i]);
    }
    free(j->names);
    free(j->tensors);
    free(j->path);
    free(j->meta);
    free(j);
}

static void *job_main(void *arg) {
    cr_io_save_job *j = arg;
    j->status = cr_io_save_safetensors(j->path, (const char *const *)j->names, j->tensors, j->n, j->meta);
    if (j->status) snprintf(j->message, sizeof j->message, "%s", cr_last_error());
    /* the references go back in cr_io_save_wait, on the caller's thread: the allocator's
     * caches are that thread's to touch */
    atomic_store(&j->done, 1);
    return NULL;
}

cr_status cr_io_save_async(cr_io_save_job **out, const char *path, const char *const *names,
                           cr_tensor *const *tensors, int64_t n, const char *metadata_json) {
    *out = NULL;
    if (!path) return cr_fail(CR_ERR_ARG, "save: path is nil; pass a file name");
    if (n < 0 || (n > 0 && (!names || !tensors))) return cr_fail(CR_ERR_ARG, "save: bad tensor list");
    cr_io_save_job *j = calloc(1, sizeof *j);
    if (!j) return cr_fail(CR_ERR_OOM, "save: out of memory");
    j->names = calloc((size_t)(n ? n : 1), sizeof *j->names);
    j->tensors = calloc((size_t)(n ? n : 1), sizeof *j->tensors);
    j->path = strdup(path);
    j->meta = metadata_json ? strdup(metadata_json) : NULL;
    j->n = n;
    bool oom = !j->names || !j->tensors || !j->path || (metadata_json && !j->meta);
    for (int64_t i = 0; !oom && i < n; i++) {
        if (!names[i] || !tensors[i]) {
            job_free(j);
            return cr_fail(CR_ERR_ARG, "save: entry %lld has no name or no tensor", (long long)i + 1);
        }
        /* the writer thread only reads memory: no copies, no allocations off this thread */
        if (tensors[i]->storage->device != CR_DEV_CPU || !cr_tensor_is_contiguous(tensors[i])) {
            job_free(j);
            return cr_fail(CR_ERR_ARG, "save (async): '%.200s' must be a contiguous cpu tensor; pass a copy "
                           "(t:contiguous():cpu())", names[i]);
        }
        j->names[i] = strdup(names[i]);
        oom = !j->names[i];
        if (!oom) {
            cr_tensor_retain(tensors[i]);
            j->tensors[i] = tensors[i];
        }
    }
    if (oom) {
        job_free(j);
        return cr_fail(CR_ERR_OOM, "save: out of memory");
    }
    if (pthread_create(&j->thread, NULL, job_main, j) != 0) {
        job_free(j);
        return cr_fail(CR_ERR_ARG, "save: cannot start the writer thread for '%.500s'", path);
    }
    *out = j;
    return CR_OK;
}

bool cr_io_save_done(cr_io_save_job *job) { return !job || atomic_load(&job->done); }

cr_status cr_io_save_wait(cr_io_save_job *job) {
    if (!job) return CR_OK;
    pthread_join(job->thread, NULL);
    cr_status st = job->status;
    if (st) cr_fail(st, "%s", job->message);
    job_free(job);
    return st;
}
