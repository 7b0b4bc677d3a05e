/* run_signal.h - the signals that stop `zephon run` (run_signal.c). */
#ifndef CLI_RUN_SIGNAL_H
#define CLI_RUN_SIGNAL_H

/* Install the SIGINT/SIGTERM handlers of a run (sigaction; the handler
 * only sets a flag that the run loop checks; a second signal ends the
 * process at once). */
void cli_run_signals_install(void);
/* The signal that asked the run to stop, 0 if none. */
int cli_run_signal(void);
/* zp_storage_config's stop_requested hook: 1 once a signal asked the run to
 * stop (transfers and waits for downloads end at once; user unused). */
int cli_run_stop_requested(void *user);
/* "SIGINT", "SIGTERM", ... */
const char *cli_run_signal_name(int sig);

#endif
