/* signals.h - the program's signal actions kept by the agent (signals.c), for agent.c. */
#ifndef UALDBG_AGENT_SIGNALS_H
#define UALDBG_AGENT_SIGNALS_H

#include "process.h"

HIDDEN void signals_release(void);
HIDDEN void signals_unhook(void);
HIDDEN void signals_init(void);
HIDDEN void signals_after_fork(void);
HIDDEN void signals_adopt_existing(void);
HIDDEN void chain_signal(int sig, siginfo_t *si, ucontext_t *uc);
HIDDEN int real_sigaction(int sig, const struct sigaction *act, struct sigaction *old);
HIDDEN void install_kernel_action(int sig);
HIDDEN void ensure_sigtrap(void);
HIDDEN void on_signal_c(int sig, siginfo_t *si, void *ctx);

#endif
