/* signals.c — the preemption signal handlers of the step loop (signals.h).
 *
 * The handler is async-signal-safe: it reads and writes volatile sig_atomic_t flags,
 * saves and restores errno, and on a second SIGINT calls only write(2) and _exit(2).
 * Everything else (setting task.signal, the message, the checkpoint) happens in the loop
 * at the next step boundary, in ordinary code. */
#include "signals.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

/* the stop signals, then SIGUSR2 (attach) */
static const int cr_loop_handled[] = {SIGTERM, SIGINT, SIGUSR1, SIGUSR2};
enum { CR_LOOP_NHANDLED = (int)(sizeof cr_loop_handled / sizeof cr_loop_handled[0]) };

static volatile sig_atomic_t cr_loop_pending;     /* first stop signal recorded, or 0 */
static volatile sig_atomic_t cr_loop_sigint_seen; /* a SIGINT arrived: the next one exits */
static volatile sig_atomic_t cr_loop_attach;      /* a SIGUSR2 arrived, not yet taken */
static struct sigaction cr_loop_previous[CR_LOOP_NHANDLED];
static int cr_loop_installed[CR_LOOP_NHANDLED];
static int cr_loop_depth; /* nested loop.run calls (Lua runs them on one thread) */

static void cr_loop_on_signal(int sig) {
    int saved_errno = errno;
    if (sig == SIGUSR2) {
        cr_loop_attach = 1;
        errno = saved_errno;
        return;
    }
    if (sig == SIGINT) {
        if (cr_loop_sigint_seen) {
            static const char msg[] = "crescent: second SIGINT, exiting now without a checkpoint\n";
            ssize_t written = write(STDERR_FILENO, msg, sizeof msg - 1);
            (void)written;
            _exit(130);
        }
        cr_loop_sigint_seen = 1;
    }
    if (!cr_loop_pending) cr_loop_pending = sig;
    errno = saved_errno;
}

int cr_loop_signals_install(int stops, int attach) {
    if (cr_loop_depth++ > 0) return 0;
    cr_loop_pending = 0;
    cr_loop_sigint_seen = 0;
    cr_loop_attach = 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = cr_loop_on_signal;
    sa.sa_flags = SA_RESTART;
    /* the handler never interrupts itself with another of ours on the same thread */
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < CR_LOOP_NHANDLED; i++) sigaddset(&sa.sa_mask, cr_loop_handled[i]);
    for (int i = 0; i < CR_LOOP_NHANDLED; i++) {
        int wanted = cr_loop_handled[i] == SIGUSR2 ? attach : stops;
        cr_loop_installed[i] = 0;
        if (!wanted) continue;
        if (sigaction(cr_loop_handled[i], &sa, &cr_loop_previous[i]) != 0) {
            int e = errno;
            while (i-- > 0)
                if (cr_loop_installed[i]) sigaction(cr_loop_handled[i], &cr_loop_previous[i], NULL);
            cr_loop_depth = 0;
            errno = e;
            return -1;
        }
        cr_loop_installed[i] = 1;
    }
    return 0;
}

void cr_loop_signals_restore(void) {
    if (cr_loop_depth <= 0 || --cr_loop_depth > 0) return;
    for (int i = 0; i < CR_LOOP_NHANDLED; i++)
        if (cr_loop_installed[i]) sigaction(cr_loop_handled[i], &cr_loop_previous[i], NULL);
    cr_loop_pending = 0;
    cr_loop_sigint_seen = 0;
    cr_loop_attach = 0;
}

int cr_loop_attach_take(void) {
    if (!cr_loop_attach) return 0;
    cr_loop_attach = 0;
    return 1;
}

int cr_loop_signal_pending(void) { return cr_loop_depth > 0 ? (int)cr_loop_pending : 0; }

const char *cr_loop_signal_name(int sig) {
    switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGUSR1: return "SIGUSR1";
    default: return "signal";
    }
}

/* The REPL's SIGINT guard: between runs, a SIGINT only sets a flag that the REPL reads
 * at its prompt and between the instructions of a command (an interrupted command); a
 * second one before the first was read exits. A run's own handlers (above) take over
 * while it runs and give SIGINT back after. No SA_RESTART: a read at the prompt returns
 * EINTR, so the REPL sees the Ctrl-C at once. */
static volatile sig_atomic_t cr_loop_guard_hit;
static struct sigaction cr_loop_guard_previous;
static int cr_loop_guard_installed;

/* A second SIGINT before the REPL took the first: the command does not stop (compiled
 * code runs no hooks), so the process ends rather than hang. */
static void cr_loop_on_guarded_sigint(int sig) {
    (void)sig;
    if (cr_loop_guard_hit) {
        static const char msg[] = "\ncrescent: second Ctrl-C and the command did not stop (a loop compiled by "
                                  "the JIT runs no interrupt checks); exiting\n";
        ssize_t written = write(STDERR_FILENO, msg, sizeof msg - 1);
        (void)written;
        _exit(130);
    }
    cr_loop_guard_hit = 1;
}

int cr_loop_sigint_guard(int on) {
    if (on == cr_loop_guard_installed) return 0;
    if (!on) {
        cr_loop_guard_installed = 0;
        return sigaction(SIGINT, &cr_loop_guard_previous, NULL);
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = cr_loop_on_guarded_sigint;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGINT, &sa, &cr_loop_guard_previous) != 0) return -1;
    cr_loop_guard_hit = 0;
    cr_loop_guard_installed = 1;
    return 0;
}

int cr_loop_sigint_taken(void) {
    if (!cr_loop_guard_hit) return 0;
    cr_loop_guard_hit = 0;
    return 1;
}
