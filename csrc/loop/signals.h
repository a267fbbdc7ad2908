/* signals.h — signals for the step loop (signals.c): while loop.run runs with
 * opts.handle_signals, SIGTERM, SIGINT and SIGUSR1 only record their number; the loop
 * reads it at step and phase boundaries and stops after the current step. A second
 * SIGINT exits the process at once (status 130). With opts.attach (train.repl_on_signal),
 * SIGUSR2 asks the loop to open a REPL at the next step boundary. Private to csrc/loop/. */
#ifndef CR_LOOP_SIGNALS_H
#define CR_LOOP_SIGNALS_H

/* Installs the handlers (sigaction, SA_RESTART) and keeps the previous ones: the stop
 * signals when `stops`, SIGUSR2 when `attach`. Nested calls count: only the outermost
 * installs, and it clears any signal recorded before (one that arrived before the run is
 * not the run's). Returns 0, or -1 with errno set (and nothing installed). */
int cr_loop_signals_install(int stops, int attach);
/* Undoes one install; the outermost puts the previous handlers back and forgets the
 * recorded signal. */
void cr_loop_signals_restore(void);
/* The first signal recorded since the outermost install (SIGTERM, SIGINT, SIGUSR1), or 0.
 * Reading does not consume it: every nested run sees it and stops. */
int cr_loop_signal_pending(void);
/* Whether a SIGUSR2 arrived since the last call (and forgets it). */
int cr_loop_attach_take(void);
/* The REPL's SIGINT guard: on (1) a SIGINT only sets a flag (a second one before the
 * flag was taken exits with status 130), off (0) puts the previous handler back.
 * Returns 0, or -1 with errno set. */
int cr_loop_sigint_guard(int on);
/* Whether a guarded SIGINT arrived since the last call (and forgets it). */
int cr_loop_sigint_taken(void);
/* "SIGTERM", "SIGINT", "SIGUSR1", or "signal" for any other number. */
const char *cr_loop_signal_name(int sig);

#endif
