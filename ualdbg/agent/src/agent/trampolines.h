/* trampolines.h - the pools of trampoline slots (trampolines.c), for signals.c and agent.c. */
#ifndef UALDBG_AGENT_TRAMPOLINES_H
#define UALDBG_AGENT_TRAMPOLINES_H

#include "process.h"

#define POOL_SIZE (64u << 10)
#define TRAMP_SLOT 128u
#define MAX_POOLS 256

struct pool {
    uint8_t *base;
    size_t used;
};
extern struct pool pools[MAX_POOLS] HIDDEN;
extern int npools HIDDEN;
extern volatile int pool_lock HIDDEN;

HIDDEN uint8_t *tramp_alloc(uint64_t target);
HIDDEN uint64_t trampoline_origin(uint64_t rip, int *at_insn);
HIDDEN uint64_t outofline_origin(uint64_t rip, int *at_start);
HIDDEN void outofline_redirect(uint64_t from, uint64_t to);

#endif
