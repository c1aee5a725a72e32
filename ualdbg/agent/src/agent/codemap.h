/* codemap.h - what the hot-site patcher knows of a module's code (codemap.c), for patch.c. */
#ifndef UALDBG_AGENT_CODEMAP_H
#define UALDBG_AGENT_CODEMAP_H

#include "process.h"

/* Why a module's code, or a function in it, cannot host a patch that moves more than the
 * faulting instruction (the UALDBG_PATCH_R_* reason it becomes). */
enum {
    CODEMAP_OK = 0,
    CODEMAP_UNKNOWN,  /* the module's code cannot be read whole as code: its branches are unknown */
    CODEMAP_EXTENT,   /* .eh_frame and the symbol table disagree on the function, or neither has it */
    CODEMAP_INDIRECT, /* the function has an indirect jump (a jump table may land anywhere in it) */
    CODEMAP_FILE,     /* the module's file is not the code mapped (replaced since it was loaded) */
};

struct code_fn {
    uint64_t start, end;
};

struct codemap;

/* The code map of the module holding pc (built the first time, under maps_lock; NULL when the
 * module is not an ELF file mapping the agent can read), and whether its code is understood
 * (*why: CODEMAP_*). */
HIDDEN const struct codemap *codemap_of(uint64_t pc, int *why);
/* The function holding pc, its extent agreed by the module's .eh_frame, its symbol table and
 * decoding. CODEMAP_OK or why not. */
HIDDEN int codemap_function(const struct codemap *m, uint64_t pc, struct code_fn *fn);
/* Whether any entry point of the module's code lies in (lo, hi): a direct branch or call target,
 * a return address (the instruction after a call), a landing pad, a symbol, a function start. */
HIDDEN int codemap_entry_between(const struct codemap *m, uint64_t lo, uint64_t hi);
/* Whether [lo, hi) reads in the module's file as it reads in memory (*orig, the original code). */
HIDDEN int codemap_file_matches(const struct codemap *m, uint64_t lo, const uint8_t *orig, size_t n);
/* Code bytes as the program's file has them: memory, with the bytes of the patches' jumps put
 * back (the patcher registers each before writing it). */
HIDDEN void code_fetch(uint64_t addr, uint8_t *buf, size_t n);
HIDDEN void code_patched(uint64_t addr, const uint8_t *orig, size_t n);
/* Every module's code is read again (an injected agent left, the jumps are gone). */
HIDDEN void codemap_forget_patches(void);

#endif
