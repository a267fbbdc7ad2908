/* tee.c — the run folder's log.txt: stdout and stderr go through pipes that a thread
 * copies to the original descriptors and to the log file (see crescent_io.h). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "crescent_io.h"

enum { TEE_LINE_MAX = 1 << 16 };

static struct {
    int active;
    int saved[2];    /* the original stdout and stderr */
    int read_end[2]; /* the pipes' read ends, one per stream */
    int file;
    pthread_t thread;
    char line[2][TEE_LINE_MAX]; /* each stream's current line for the file (a '\r' empties it) */
    size_t len[2];
} copier;

static void write_all(int fd, const char *p, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return; /* a closed terminal: the bytes have nowhere to go */
        }
        p += w;
        n -= (size_t)w;
    }
}

/* The bytes of stream s for the file: whole lines, so lines of stdout and stderr never
 * mix; '\r' starts the line again. */
static void to_file(int s, const char *p, size_t n) {
    char *line = copier.line[s];
    size_t *len = &copier.len[s];
    for (size_t i = 0; i < n; i++) {
        char ch = p[i];
        if (ch == '\r') {
            *len = 0;
        } else {
            if (*len < TEE_LINE_MAX) line[(*len)++] = ch;
            if (ch == '\n' || *len == TEE_LINE_MAX) {
                write_all(copier.file, line, *len);
                *len = 0;
            }
        }
    }
}

static void *tee_main(void *arg) {
    (void)arg;
    struct pollfd fds[2] = {{copier.read_end[0], POLLIN, 0}, {copier.read_end[1], POLLIN, 0}};
    int open_ends = 2;
    char buf[8192];
    while (open_ends > 0) {
        if (poll(fds, 2, -1) < 0) {
            if (errno == EINTR) continue;
            break;
        }
        for (int s = 0; s < 2; s++) {
            if (fds[s].fd < 0 || !(fds[s].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            ssize_t r = read(fds[s].fd, buf, sizeof buf);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) { /* every write end closed */
                fds[s].fd = -1;
                open_ends--;
                continue;
            }
            write_all(copier.saved[s], buf, (size_t)r);
            to_file(s, buf, (size_t)r);
        }
    }
    for (int s = 0; s < 2; s++) { /* a last line without '\n' */
        if (copier.len[s] > 0) write_all(copier.file, copier.line[s], copier.len[s]);
        copier.len[s] = 0;
    }
    return NULL;
}

void cr_tee_stop(void) {
    if (!copier.active) return;
    copier.active = 0;
    fflush(NULL);
    /* fds 1 and 2 back to the originals: the pipes' last write ends close, the thread
     * drains them and sees their ends */
    dup2(copier.saved[0], 1);
    dup2(copier.saved[1], 2);
    /* a child that outlives us (a daemon) still holds a write end: give the copier 2 s to
     * drain, then leave it (and its descriptors) to the exit rather than hang */
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 2;
    if (pthread_timedjoin_np(copier.thread, NULL, &until) != 0) {
        pthread_detach(copier.thread);
        return;
    }
    for (int s = 0; s < 2; s++) {
        close(copier.read_end[s]);
        close(copier.saved[s]);
    }
    close(copier.file);
}

int cr_tee_original_fd(int fd) {
    if (copier.active && (fd == 1 || fd == 2)) return copier.saved[fd - 1];
    return fd;
}

cr_status cr_tee_start(const char *path) {
    static int registered;
    if (!path || !*path) return cr_fail(CR_ERR_ARG, "tee: give the path of the log file");
    cr_tee_stop();
    int file = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (file < 0) return cr_fail(CR_ERR_ARG, "tee: cannot open '%s' (%s)", path, strerror(errno));
    int pipes[2][2];
    if (pipe2(pipes[0], O_CLOEXEC) != 0) {
        close(file);
        return cr_fail(CR_ERR_ARG, "tee: pipe failed (%s)", strerror(errno));
    }
    if (pipe2(pipes[1], O_CLOEXEC) != 0) {
        close(pipes[0][0]);
        close(pipes[0][1]);
        close(file);
        return cr_fail(CR_ERR_ARG, "tee: pipe failed (%s)", strerror(errno));
    }
    fflush(NULL);
    /* stdout becomes a pipe: keep it line-buffered where it was a terminal, so lines
     * still show as they are printed */
    if (isatty(1)) setvbuf(stdout, NULL, _IOLBF, BUFSIZ);
    copier.file = file;
    copier.len[0] = copier.len[1] = 0;
    for (int s = 0; s < 2; s++) {
        copier.saved[s] = fcntl(s + 1, F_DUPFD_CLOEXEC, 3);
        copier.read_end[s] = pipes[s][0];
        dup2(pipes[s][1], s + 1); /* fds 1 and 2 (inherited by children) write into the pipes */
        close(pipes[s][1]);
    }
    if (pthread_create(&copier.thread, NULL, tee_main, NULL) != 0) {
        for (int s = 0; s < 2; s++) {
            dup2(copier.saved[s], s + 1);
            close(copier.saved[s]);
            close(copier.read_end[s]);
        }
        close(file);
        return cr_fail(CR_ERR_ARG, "tee: cannot start its thread");
    }
    copier.active = 1;
    if (!registered) {
        atexit(cr_tee_stop);
        registered = 1;
    }
    return CR_OK;
}
