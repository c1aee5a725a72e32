/* insn.h - the x86-64 length decoder's result (see insn.c). */
#ifndef UALDBG_INSN_H
#define UALDBG_INSN_H

#include <stddef.h>
#include <stdint.h>

#define X86_RIP 16

enum {
    X86_FLOW_NEXT = 0,  /* falls through: can run out of line */
    X86_FLOW_CALL_REL,  /* call rel32: emulated */
    X86_FLOW_CALL_RM,   /* call r/m64: emulated */
    X86_FLOW_JMP_RM,    /* jmp r/m64: emulated */
    X86_FLOW_RET,       /* ret, ret imm16: emulated */
    X86_FLOW_OTHER,     /* relative branches, far transfers, interrupts: single-stepped */
};

struct x86_insn {
    uint8_t len;
    uint8_t nprefix;   /* legacy prefix and REX bytes before the opcode (or VEX/EVEX) */
    uint8_t rep;       /* 0xf2 / 0xf3 when present */
    uint8_t seg;       /* 0x64 (fs) / 0x65 (gs) when in effect */
    uint8_t opsize16, addr32, lock, rex;
    uint8_t w, r, x, b;
    uint8_t vex;       /* 0, 2 (C5), 3 (C4), 4 (EVEX) */
    uint8_t map;       /* 0 one-byte, 1 0F, 2 0F38, 3 0F3A, 5/6 EVEX maps */
    uint8_t opcode, opcode_off;
    int8_t modrm_off;  /* -1: no ModRM */
    uint8_t modrm, reg, rm_reg;
    uint8_t has_sib, sib, scale;
    uint8_t mem;       /* ModRM names memory */
    uint8_t rip_rel;
    int8_t base, index; /* register numbers (x86 encoding), X86_RIP, or -1 */
    int8_t disp_off;   /* -1: no displacement */
    uint8_t disp_size;
    uint8_t imm_off, imm_size;
    uint8_t string;    /* movs/cmps/stos/lods/scas/ins/outs */
    uint8_t flow;
    int32_t disp;
    uint8_t disp8_scale; /* an EVEX disp8's N (compressed displacement) where the agent knows it
                          * (access.c, set at a site's decoding); 0 or 1: unscaled */
};

int ualdbg_x86_decode(const uint8_t *code, size_t avail, struct x86_insn *out);

#endif
