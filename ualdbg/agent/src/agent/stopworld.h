/* stopworld.h - writing a jump into code other threads may be running (stopworld.c), for patch.c
 * and agent.c. */
#ifndef UALDBG_AGENT_STOPWORLD_H
#define UALDBG_AGENT_STOPWORLD_H

#include "process.h"

enum {
    W_ATOMIC = 0, /* one aligned 8- or 16-byte atomic store: other threads run */
    W_ANYHOW = 1, /* any store: one thread, or every other one parked */
    W_INT3 = 2,   /* int3, the last 4 bytes, the first: the threads not parked are asleep */
};

/* patch.c */
HIDDEN int thread_count(void);
HIDDEN int atomic_fit(uint64_t pc);
HIDDEN int world_can_int3(void);
HIDDEN int world_stop(uint64_t a, int *all_parked);
HIDDEN int world_parked(void);
HIDDEN void world_where(int i, uint64_t *rip, uint64_t *ool_origin);
HIDDEN void world_move(int i, uint64_t to);
HIDDEN void world_release(void);
HIDDEN void world_after_fork(void);
HIDDEN int code_write(uint64_t pc, const uint8_t jmp[5], int how, uint64_t to);
HIDDEN uint64_t world_int3_target(uint64_t at);
HIDDEN void world_redirect_outofline(uint64_t from, uint64_t to);
/* agent.c */
HIDDEN int patch_stop_request(const siginfo_t *si, ucontext_t *uc, uint64_t ool_origin, int ool_at_start);
HIDDEN void patch_set_sigtrap_hook(void (*ensure)(void));
HIDDEN void world_set_self_text(uint64_t lo, uint64_t hi);
HIDDEN void world_own_thread(pid_t tid, pid_t was);
HIDDEN void world_set_outofline_hooks(uint64_t (*origin)(uint64_t rip, int *at_start), void (*redirect)(uint64_t from, uint64_t to));

#endif
