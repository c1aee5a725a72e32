/* insn.c - an x86-64 instruction length decoder for the agent's signal handler.
 *
 * What the agent needs to run a faulting instruction out of line: its length, where its
 * ModRM/SIB/displacement bytes are (to relocate a RIP-relative operand), its prefixes (rep,
 * fs/gs, address size), and enough of the opcode to know the few instructions that cannot
 * simply be copied (call, jmp through memory, ret, far transfers). No allocation, no libc:
 * it runs inside a SIGBUS handler. tests/agent/test_insn_decoder.py checks it against capstone
 * on every instruction of several system libraries.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "insn.h"

/* Immediate kinds. */
enum { I_NONE, I_B, I_Z, I_W, I_WB, I_V, I_MOFFS, I_REL8, I_REL32, I_BB, I_BAD };

/* Per opcode: whether a ModRM byte follows, and the kind of immediate (I_BAD: invalid in
 * 64-bit mode, or a prefix/escape the caller handles). */
struct opinfo {
    uint8_t modrm;
    uint8_t imm;
};

static struct opinfo map0(uint8_t op)
{
    struct opinfo r = {0, I_NONE};
    if (op < 0x40) {
        uint8_t lo = op & 7;
        if (lo <= 3)
            return (struct opinfo){1, I_NONE};
        if (lo == 4)
            return (struct opinfo){0, I_B};
        if (lo == 5)
            return (struct opinfo){0, I_Z};
        return (struct opinfo){0, I_BAD}; /* push/pop seg, daa, das, aaa, aas; prefixes handled before */
    }
    if (op >= 0x50 && op <= 0x5f)
        return r;
    if (op >= 0x70 && op <= 0x7f)
        return (struct opinfo){0, I_REL8};
    if (op >= 0x84 && op <= 0x8f)
        return (struct opinfo){1, I_NONE};
    if (op >= 0x90 && op <= 0x99)
        return r;
    if (op >= 0xb0 && op <= 0xb7)
        return (struct opinfo){0, I_B};
    if (op >= 0xb8 && op <= 0xbf)
        return (struct opinfo){0, I_V};
    if (op >= 0xd8 && op <= 0xdf)
        return (struct opinfo){1, I_NONE};
    switch (op) {
    case 0x63: return (struct opinfo){1, I_NONE};
    case 0x68: return (struct opinfo){0, I_Z};
    case 0x69: return (struct opinfo){1, I_Z};
    case 0x6a: return (struct opinfo){0, I_B};
    case 0x6b: return (struct opinfo){1, I_B};
    case 0x6c: case 0x6d: case 0x6e: case 0x6f: return r;
    case 0x80: case 0x83: return (struct opinfo){1, I_B};
    case 0x81: return (struct opinfo){1, I_Z};
    case 0x9b: case 0x9c: case 0x9d: case 0x9e: case 0x9f: return r;
    case 0xa0: case 0xa1: case 0xa2: case 0xa3: return (struct opinfo){0, I_MOFFS};
    case 0xa4: case 0xa5: case 0xa6: case 0xa7: return r;
    case 0xa8: return (struct opinfo){0, I_B};
    case 0xa9: return (struct opinfo){0, I_Z};
    case 0xaa: case 0xab: case 0xac: case 0xad: case 0xae: case 0xaf: return r;
    case 0xc0: case 0xc1: return (struct opinfo){1, I_B};
    case 0xc2: return (struct opinfo){0, I_W};
    case 0xc3: return r;
    case 0xc6: return (struct opinfo){1, I_B};
    case 0xc7: return (struct opinfo){1, I_Z};
    case 0xc8: return (struct opinfo){0, I_WB};
    case 0xc9: return r;
    case 0xca: return (struct opinfo){0, I_W};
    case 0xcb: case 0xcc: return r;
    case 0xcd: return (struct opinfo){0, I_B};
    case 0xcf: return r;
    case 0xd0: case 0xd1: case 0xd2: case 0xd3: return (struct opinfo){1, I_NONE};
    case 0xd7: return r;
    case 0xe0: case 0xe1: case 0xe2: case 0xe3: return (struct opinfo){0, I_REL8};
    case 0xe4: case 0xe5: case 0xe6: case 0xe7: return (struct opinfo){0, I_B};
    case 0xe8: case 0xe9: return (struct opinfo){0, I_REL32};
    case 0xeb: return (struct opinfo){0, I_REL8};
    case 0xec: case 0xed: case 0xee: case 0xef: return r;
    case 0xf1: case 0xf4: case 0xf5: return r;
    case 0xf6: case 0xf7: return (struct opinfo){1, I_NONE}; /* test /0 /1 add an immediate */
    case 0xf8: case 0xf9: case 0xfa: case 0xfb: case 0xfc: case 0xfd: return r;
    case 0xfe: case 0xff: return (struct opinfo){1, I_NONE};
    default: return (struct opinfo){0, I_BAD};
    }
}

static struct opinfo map1(uint8_t op)
{
    struct opinfo m = {1, I_NONE}, n = {0, I_NONE}, bad = {0, I_BAD};
    if (op >= 0x80 && op <= 0x8f)
        return (struct opinfo){0, I_REL32};
    if (op >= 0xc8 && op <= 0xcf)
        return n; /* bswap */
    if (op >= 0x70 && op <= 0x73)
        return (struct opinfo){1, I_B};
    switch (op) {
    case 0x04: case 0x0a: case 0x0c: case 0x0f: case 0x24: case 0x25: case 0x26: case 0x27:
    case 0x36: case 0x39: case 0x3b: case 0x3c: case 0x3d: case 0x3e: case 0x3f:
    case 0x7a: case 0x7b: case 0xa6: case 0xa7:
        return bad;
    case 0x05: case 0x06: case 0x07: case 0x08: case 0x09: case 0x0b: case 0x0e:
    case 0x30: case 0x31: case 0x32: case 0x33: case 0x34: case 0x35: case 0x37:
    case 0x77: case 0xa0: case 0xa1: case 0xa2: case 0xa8: case 0xa9: case 0xaa:
        return n;
    case 0xa4: case 0xac: case 0xba: case 0xc2: case 0xc4: case 0xc5: case 0xc6:
        return (struct opinfo){1, I_B};
    default:
        return m;
    }
}

static inline int is_legacy_prefix(uint8_t b)
{
    switch (b) {
    case 0xf0: case 0xf2: case 0xf3: case 0x2e: case 0x36: case 0x3e: case 0x26:
    case 0x64: case 0x65: case 0x66: case 0x67:
        return 1;
    default:
        return 0;
    }
}

int ualdbg_x86_decode(const uint8_t *code, size_t avail, struct x86_insn *d)
{
    size_t i = 0;
    struct opinfo info;
    memset(d, 0, sizeof *d);
    d->modrm_off = d->disp_off = -1;
    d->base = d->index = -1;
    if (avail > 15)
        avail = 15;
#define NEED(n) do { if (i + (n) > avail) return -1; } while (0)
    /* Legacy prefixes, then an optional REX (ignored when a legacy prefix follows it). */
    for (;;) {
        NEED(1);
        uint8_t b = code[i];
        if (is_legacy_prefix(b)) {
            if (b == 0xf2 || b == 0xf3)
                d->rep = b;
            else if (b == 0x64 || b == 0x65)
                d->seg = b;
            else if (b == 0x2e || b == 0x36 || b == 0x3e || b == 0x26)
                d->seg = 0; /* a later es/cs/ss/ds prefix overrides fs/gs; all have base 0 */
            else if (b == 0x66)
                d->opsize16 = 1;
            else if (b == 0x67)
                d->addr32 = 1;
            else if (b == 0xf0)
                d->lock = 1;
            d->rex = 0;
            i++;
            continue;
        }
        if ((b & 0xf0) == 0x40) {
            d->rex = b;
            i++;
            NEED(1);
            if (is_legacy_prefix(code[i]) || (code[i] & 0xf0) == 0x40)
                continue; /* REX not last: ignored (a later REX replaces it) */
            break;
        }
        break;
    }
    d->nprefix = (uint8_t)i;
    if (d->rex) {
        d->w = (d->rex >> 3) & 1;
        d->r = (d->rex >> 2) & 1;
        d->x = (d->rex >> 1) & 1;
        d->b = d->rex & 1;
    }
    NEED(1);
    uint8_t op = code[i];
    if (op == 0xc5 || op == 0xc4 || op == 0x62) {
        if (d->rex)
            return -1; /* #UD */
        if (op == 0xc5) {
            NEED(2);
            uint8_t p = code[i + 1];
            d->vex = 2;
            d->r = !(p & 0x80);
            d->map = 1;
            i += 2;
        } else if (op == 0xc4) {
            NEED(3);
            uint8_t p0 = code[i + 1], p1 = code[i + 2];
            d->vex = 3;
            d->r = !(p0 & 0x80);
            d->x = !(p0 & 0x40);
            d->b = !(p0 & 0x20);
            d->map = p0 & 0x1f;
            d->w = p1 >> 7;
            i += 3;
        } else {
            NEED(4);
            uint8_t p0 = code[i + 1], p1 = code[i + 2];
            d->vex = 4;
            d->r = !(p0 & 0x80);
            d->x = !(p0 & 0x40);
            d->b = !(p0 & 0x20);
            d->map = p0 & 0x07;
            d->w = p1 >> 7;
            i += 4;
        }
        if (d->map < 1 || d->map > 6 || d->map == 4 || (d->vex != 4 && d->map > 3))
            return -1;
        NEED(1);
        d->opcode_off = (uint8_t)i;
        d->opcode = code[i++];
        if (d->map == 1) {
            info.modrm = d->opcode != 0x77;
            info.imm = (d->opcode >= 0x70 && d->opcode <= 0x73) || d->opcode == 0xc2 ||
                               d->opcode == 0xc4 || d->opcode == 0xc5 || d->opcode == 0xc6
                           ? I_B
                           : I_NONE;
        } else if (d->map == 3) {
            info = (struct opinfo){1, I_B};
        } else {
            info = (struct opinfo){1, I_NONE};
        }
    } else if (op == 0x0f) {
        NEED(2);
        uint8_t op2 = code[i + 1];
        if (op2 == 0x38 || op2 == 0x3a) {
            NEED(3);
            d->map = op2 == 0x38 ? 2 : 3;
            d->opcode_off = (uint8_t)(i + 2);
            d->opcode = code[i + 2];
            i += 3;
            info = d->map == 2 ? (struct opinfo){1, I_NONE} : (struct opinfo){1, I_B};
        } else {
            d->map = 1;
            d->opcode_off = (uint8_t)(i + 1);
            d->opcode = op2;
            i += 2;
            info = map1(op2);
            /* SSE4a extrq/insertq (66/F2 0F 78 with mod=3): two byte immediates. */
            if (op2 == 0x78 && (d->opsize16 || d->rep == 0xf2))
                info.imm = I_BB;
        }
    } else {
        d->map = 0;
        d->opcode_off = (uint8_t)i;
        d->opcode = op;
        i += 1;
        if (op == 0x8f) { /* pop r/m, or an AMD XOP prefix (reg != 0) */
            NEED(1);
            if (((code[i] >> 3) & 7) != 0)
                return -1;
        }
        info = map0(op);
    }
    if (info.imm == I_BAD)
        return -1;
    if (info.modrm) {
        NEED(1);
        d->modrm_off = (int8_t)i;
        d->modrm = code[i++];
        uint8_t mod = d->modrm >> 6, rm = d->modrm & 7;
        d->reg = (uint8_t)(((d->modrm >> 3) & 7) | (d->r << 3));
        if (mod != 3) {
            d->mem = 1;
            if (rm == 4) {
                NEED(1);
                d->has_sib = 1;
                d->sib = code[i++];
                uint8_t base = d->sib & 7, index = (d->sib >> 3) & 7;
                d->scale = (uint8_t)(1u << (d->sib >> 6));
                int idx = index | (d->x << 3);
                d->index = (int8_t)(idx == 4 ? -1 : idx);
                if (base == 5 && mod == 0) {
                    d->base = -1;
                    d->disp_size = 4;
                } else {
                    d->base = (int8_t)(base | (d->b << 3));
                }
            } else if (rm == 5 && mod == 0) {
                d->base = X86_RIP;
                d->rip_rel = 1;
                d->disp_size = 4;
            } else {
                d->base = (int8_t)(rm | (d->b << 3));
            }
            if (mod == 1)
                d->disp_size = 1;
            else if (mod == 2)
                d->disp_size = 4;
            if (d->disp_size) {
                NEED(d->disp_size);
                d->disp_off = (int8_t)i;
                if (d->disp_size == 1)
                    d->disp = (int8_t)code[i];
                else {
                    int32_t v;
                    memcpy(&v, code + i, 4);
                    d->disp = v;
                }
                i += d->disp_size;
            }
        } else {
            d->rm_reg = (uint8_t)(rm | (d->b << 3));
        }
    }
    /* Immediates. */
    unsigned imm = 0;
    switch (info.imm) {
    case I_NONE:
        if (d->map == 0 && (d->opcode == 0xf6 || d->opcode == 0xf7) && ((d->modrm >> 3) & 7) < 2)
            imm = d->opcode == 0xf6 ? 1 : (d->opsize16 ? 2 : 4);
        break;
    case I_B: case I_REL8: imm = 1; break;
    case I_Z: imm = d->opsize16 ? 2 : 4; break;
    case I_REL32: imm = 4; break;
    case I_W: imm = 2; break;
    case I_WB: imm = 3; break;
    case I_V: imm = d->w ? 8 : (d->opsize16 ? 2 : 4); break;
    case I_MOFFS: imm = d->addr32 ? 4 : 8; break;
    case I_BB: imm = 2; break; /* extrq/insertq */
    default: return -1;
    }
    if (d->map == 0 && d->opcode == 0xc7 && d->modrm == 0xf8)
        d->flow = X86_FLOW_OTHER; /* xbegin rel: relative, never copied */
    NEED(imm);
    d->imm_off = (uint8_t)i;
    d->imm_size = (uint8_t)imm;
    i += imm;
    d->len = (uint8_t)i;

    /* What it does to control flow and the stack. */
    if (d->map == 0 && !d->vex) {
        uint8_t sub = (d->modrm >> 3) & 7;
        switch (d->opcode) {
        case 0xe8: d->flow = X86_FLOW_CALL_REL; break;
        case 0xc3: d->flow = X86_FLOW_RET; break;
        case 0xc2: d->flow = X86_FLOW_RET; break;
        case 0xca: case 0xcb: case 0xcf: case 0xcc: case 0xcd: case 0xf1:
            d->flow = X86_FLOW_OTHER; break;
        case 0xe9: case 0xeb: case 0xe0: case 0xe1: case 0xe2: case 0xe3:
            d->flow = X86_FLOW_OTHER; break;
        case 0xff:
            if (sub == 2)
                d->flow = X86_FLOW_CALL_RM;
            else if (sub == 4)
                d->flow = X86_FLOW_JMP_RM;
            else if (sub == 3 || sub == 5)
                d->flow = X86_FLOW_OTHER;
            break;
        case 0xa4: case 0xa5: case 0xa6: case 0xa7: case 0xaa: case 0xab:
        case 0xac: case 0xad: case 0xae: case 0xaf: case 0x6c: case 0x6d: case 0x6e: case 0x6f:
            d->string = 1;
            break;
        default:
            if (d->opcode >= 0x70 && d->opcode <= 0x7f)
                d->flow = X86_FLOW_OTHER;
        }
    } else if (d->map == 1 && !d->vex && d->opcode >= 0x80 && d->opcode <= 0x8f) {
        d->flow = X86_FLOW_OTHER;
    }
    return 0;
#undef NEED
}
