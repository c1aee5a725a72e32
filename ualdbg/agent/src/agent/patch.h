/* patch.h - hot-site patching (patch.c), for trampolines.c, signals.c and agent.c. */
#ifndef UALDBG_AGENT_PATCH_H
#define UALDBG_AGENT_PATCH_H

#include "process.h"

/* agent.c: the fault handler. */
HIDDEN uint64_t patch_consider(struct ualdbg_site *s, const struct x86_insn *d, uint64_t pc);
HIDDEN int patch_ac_fault(uint64_t rip, uint64_t *origin, uint8_t code[16], uint32_t *len);
HIDDEN void patch_trapped(uint64_t rip, uint64_t ea, const struct ualdbg_site *origin_site);
HIDDEN int patch_is_ours(uint64_t pc);
HIDDEN uint64_t patch_stepped_in(uint64_t rip);
HIDDEN void patch_after_fork(const struct ualdbg_site *old_sites, uint32_t old_mask);
HIDDEN void patch_disarm(void);
HIDDEN void patch_release(void);
HIDDEN void patch_orphan(void (*or_off)(uint8_t *code, size_t n));
HIDDEN int patch_int3_hit(greg_t *g);
/* wrappers.c: a thread is about to start. */
HIDDEN void patch_threads_started(void);
/* signals.c and agent.c: the program's handlers, and the agent's that patching can interleave with. */
HIDDEN int patch_fault_context(greg_t *g, int *at_insn);
HIDDEN int patch_fix_resume(greg_t *g);
/* trampolines.c */
HIDDEN uint64_t patch_origin(uint64_t rip, int *at_insn);

#endif
