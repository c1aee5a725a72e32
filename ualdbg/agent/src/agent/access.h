/* access.h - the AC rule of an instruction's memory operand (access.c), for patch.c. */
#ifndef UALDBG_AGENT_ACCESS_H
#define UALDBG_AGENT_ACCESS_H

#include <stdint.h>

#include "insn.h"
#include "ualdbg_agent.h"

enum { K_LOAD = 1, K_STORE = 2, K_RMW = 3 };
enum {
    M_SCRATCH = 1, /* through an aligned scratch copy of the operand, the instruction rewritten to use it */
    M_TOGGLE = 2,  /* on the operand itself, with AC cleared around it (atomic, or not rewritable) */
    M_STRING = 3,  /* movs, stos, lods (rep or not): its elements counted by ualdbg_agent_string_count,
                    * then run with AC cleared */
};

struct access {
    int size;   /* the bytes the AC rule checks the address at: the operand's size */
    int kind;   /* K_*: how the instruction uses the operand */
    int method; /* M_* */
    int scale;  /* a disp8 is disp8 * scale (EVEX compressed displacement); 1 otherwise */
    int writes_flags; /* it sets every status flag (some "undefined") and reads none: a trampoline
                       * need not keep the program's flags before it */
    int reason; /* why not (UALDBG_PATCH_R_*), when access_of returns 0 */
};

/* 1 when the patcher can count the instruction's faults (and how), 0 with a->reason otherwise. */
int access_of(const struct x86_insn *d, const uint8_t *code, struct access *a);

/* An EVEX disp8's scale N for the address computation (1 for anything else, or not known). */
int access_disp8_scale(const struct x86_insn *d, const uint8_t *code);

#endif
