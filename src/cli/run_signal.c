/* run_signal.c - SIGINT/SIGTERM during `zephon run`: the handler only
 * records the signal; the run loop, the library's transfers (through
 * cli_run_stop_requested) and the MPI front end read it. */
#include "run_signal.h"

#include <signal.h>
#include <string.h>

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig)
{
    if (__atomic_load_n(&stop_signal, __ATOMIC_RELAXED)) {
        /* a second signal: end at once, as without a handler */
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    /* atomic: read by the library's threads too (cli_run_stop_requested) */
    __atomic_store_n(&stop_signal, sig, __ATOMIC_RELAXED);
}

void cli_run_signals_install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0; /* no SA_RESTART: a sleep returns at once */
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

int cli_run_signal(void) { return __atomic_load_n(&stop_signal, __ATOMIC_RELAXED); }

int cli_run_stop_requested(void *user)
{
    (void)user;
    return __atomic_load_n(&stop_signal, __ATOMIC_RELAXED) != 0; /* from any thread */
}

const char *cli_run_signal_name(int sig)
{
    switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    default: return "a signal";
    }
}

