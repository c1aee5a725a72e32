/* wrappers.h - the interposed libc entry points (wrappers.c), for signals.c and agent.c. */
#ifndef UALDBG_AGENT_WRAPPERS_H
#define UALDBG_AGENT_WRAPPERS_H

#include "process.h"

HIDDEN void wrappers_init(void);

#endif
