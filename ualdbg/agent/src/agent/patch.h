/* patch.h - hot-site patching (patch.c), for trampolines.c and agent.c. */
#ifndef UALDBG_AGENT_PATCH_H
#define UALDBG_AGENT_PATCH_H

#include "process.h"

HIDDEN uint64_t patch_consider(struct ualdbg_site *s, const struct x86_insn *d, uint64_t pc);
HIDDEN uint64_t patch_origin(uint64_t rip, int *at_insn);
HIDDEN uint64_t patch_copy_origin(uint64_t rip);
HIDDEN uint64_t patch_stepped_in(uint64_t rip);
HIDDEN int patch_is_ours(uint64_t pc);
HIDDEN void patch_widen_mask(uint64_t rip, uint64_t ea);
HIDDEN void patch_after_fork(const struct ualdbg_site *old_sites, uint32_t old_mask);
HIDDEN void patch_disarm(void);
HIDDEN void patch_release(void);

#endif
