/* wrappers.h - the interposed libc entry points (wrappers.c), for signals.c and agent.c. */
#ifndef UALDBG_AGENT_WRAPPERS_H
#define UALDBG_AGENT_WRAPPERS_H

#include "process.h"

HIDDEN void wrappers_init(void);
HIDDEN void blind_update(void);
HIDDEN void blind_flush(void);
HIDDEN void blind_check_sigbus(void);

#endif
