/* access.c - what the AC rule checks for an x86-64 instruction's memory operand, as the hot-site
 * patcher counts it (patch.c): the operand's size, whether it is read, written or both, and how
 * a trampoline can run it without trapping (through an aligned scratch copy of the operand, or
 * with AC cleared around it). Also why not, for every instruction that keeps trapping.
 *
 * The rule as measured on this project's machines (PLATFORM.md): a 2/4/8-byte integer, x87 or
 * SSE scalar operand is checked at its size; 16- and 32-byte vector operands at 16 (the
 * trampoline starts testing 8 and widens on evidence, patch.c); byte operands never fault;
 * movaps/movdqa-style aligned forms and legacy SSE m128 arithmetic give #GP (SIGSEGV), not #AC,
 * and gathers and vmaskmov never fault. Locked instructions and xchg are atomic: the byte copy
 * of the scratch path would not be, so they run on the operand itself with AC cleared.
 * Calls nothing but insn.h's types (the order: process.h).
 */
#include "access.h"

#include <string.h>

/* VEX: the pp (implied prefix), L and vvvv fields. */
static void vex_fields(const struct x86_insn *d, const uint8_t *code, int *pp, int *l, int *vvvv)
{
    uint8_t b = d->vex == 2 ? code[d->nprefix + 1] : code[d->nprefix + 2];
    *pp = b & 3;
    *l = (b >> 2) & 1;
    *vvvv = (~b >> 3) & 15;
}

static int vec(int l) { return l ? 32 : 16; }

/* Legacy (no VEX) one-byte opcodes. */
static int map0(const struct x86_insn *d, struct access *a, int v, int sub, int *gpr)
{
    uint8_t op = d->opcode;
    if (op < 0x40 && (op & 7) <= 3) { /* add or adc sbb and sub xor cmp */
        *gpr = 1;
        a->kind = (op & 2) || (op >> 3) == 7 ? K_LOAD : K_RMW;
        return (op & 1) ? v : 1;
    }
    if (op >= 0xd8 && op <= 0xdf) { /* x87: the size by opcode and ModRM.reg */
        static const int8_t size[8][8] = {
            {4, 4, 4, 4, 4, 4, 4, 4},    /* d8: m32fp arithmetic */
            {4, 0, -4, -4, 0, 2, 0, -2}, /* d9: fld, fst, fstp m32; fldcw; fnstcw */
            {4, 4, 4, 4, 4, 4, 4, 4},    /* da: m32int arithmetic */
            {4, -4, -4, -4, 0, 0, 0, 0}, /* db: fild, fisttp, fist, fistp m32 (m80: not known) */
            {8, 8, 8, 8, 8, 8, 8, 8},    /* dc: m64fp arithmetic */
            {8, -8, -8, -8, 0, 0, 0, -2},/* dd: fld, fisttp, fst, fstp m64; fnstsw */
            {2, 2, 2, 2, 2, 2, 2, 2},    /* de: m16int arithmetic */
            {2, -2, -2, -2, 0, 8, 0, -8},/* df: fild, fisttp, fist, fistp m16; fild, fistp m64 */
        };
        int s = size[op - 0xd8][sub];
        a->kind = s < 0 ? K_STORE : K_LOAD;
        return s < 0 ? -s : s;
    }
    switch (op) {
    case 0x63: *gpr = 1, a->kind = K_LOAD; return d->opsize16 ? 2 : 4; /* movsxd */
    case 0x69: case 0x6b: *gpr = 1, a->kind = K_LOAD; return v;       /* imul r, r/m, imm */
    case 0x85: *gpr = 1, a->kind = K_LOAD; return v;                   /* test */
    case 0x87: *gpr = 1, a->kind = K_RMW, a->method = M_TOGGLE; return v; /* xchg: atomic */
    case 0x89: *gpr = 1, a->kind = K_STORE; return v;
    case 0x8b: *gpr = 1, a->kind = K_LOAD; return v;
    case 0x8c: a->kind = K_STORE, a->method = M_TOGGLE; return 2;      /* mov r/m16, Sreg */
    case 0x8e: a->kind = K_LOAD, a->method = M_TOGGLE; return 2;       /* mov Sreg, r/m16 */
    case 0x81: case 0x83: a->kind = sub == 7 ? K_LOAD : K_RMW; return v;
    case 0xc1: case 0xd1: case 0xd3: a->kind = K_RMW; return v;
    case 0xc7: a->kind = K_STORE; return sub == 0 ? v : 0;
    case 0xf7: a->kind = sub == 2 || sub == 3 ? K_RMW : K_LOAD; return v; /* test not neg mul imul div idiv */
    case 0xff: a->kind = K_RMW; return sub <= 1 ? v : 0;               /* inc dec */
    default: return 0;
    }
}

/* Legacy 0F opcodes. */
static int map1(const struct x86_insn *d, struct access *a, int v, int sub, int *gpr)
{
    uint8_t op = d->opcode;
    int none = !d->rep && !d->opsize16, p66 = d->opsize16 && !d->rep, f3 = d->rep == 0xf3, f2 = d->rep == 0xf2;
    int wd = d->w ? 8 : 4;
    a->kind = K_LOAD;
    if (op >= 0x40 && op <= 0x4f) {
        *gpr = 1;
        return v; /* cmovcc loads whatever the condition */
    }
    switch (op) {
    case 0xaf: case 0xb8: case 0xbc: case 0xbd: *gpr = 1; return v; /* imul, popcnt, bsf/tzcnt, bsr/lzcnt */
    case 0xb7: case 0xbf: *gpr = 1; return 2;                       /* movzx, movsx r, r/m16 */
    case 0xa3: case 0xab: case 0xb3: case 0xbb: a->reason = UALDBG_PATCH_R_BITSTRING; return 0;
    case 0xba: a->kind = sub == 4 ? K_LOAD : K_RMW; return sub >= 4 ? v : 0; /* bt bts btr btc, imm8 */
    case 0xa4: case 0xa5: case 0xac: case 0xad: *gpr = 1, a->kind = K_RMW; return v; /* shld, shrd */
    case 0xb1: case 0xc1: *gpr = 1, a->kind = K_RMW, a->method = M_TOGGLE; return v; /* cmpxchg, xadd */
    case 0xc7: a->kind = K_RMW, a->method = M_TOGGLE; return sub == 1 && !d->w ? 8 : 0; /* cmpxchg8b */
    case 0xc3: *gpr = 1, a->kind = K_STORE; return wd;              /* movnti */
    case 0xae: a->kind = sub == 3 ? K_STORE : K_LOAD; return none && (sub == 2 || sub == 3) ? 4 : 0; /* ldmxcsr, stmxcsr */
    case 0x10: case 0x11:
        a->kind = op == 0x11 ? K_STORE : K_LOAD;
        return f3 ? 4 : f2 ? 8 : 16; /* movss, movsd, movups, movupd */
    case 0x12: case 0x16: return none || p66 || (f2 && op == 0x12) ? 8 : 0; /* movlps/hps/lpd/hpd, movddup */
    case 0x13: case 0x17: a->kind = K_STORE; return none || p66 ? 8 : 0;
    case 0x2a: return f3 || f2 ? wd : 8;                                   /* cvtsi2ss/sd, cvtpi2ps/pd */
    case 0x2c: case 0x2d: return f3 ? 4 : f2 ? 8 : none ? 8 : 0;
    case 0x2e: case 0x2f: return none ? 4 : p66 ? 8 : 0;                   /* ucomiss/sd, comiss/sd */
    case 0x51: case 0x58: case 0x59: case 0x5c: case 0x5d: case 0x5e: case 0x5f: return f3 ? 4 : f2 ? 8 : 0;
    case 0x5a: return f3 ? 4 : f2 ? 8 : none ? 8 : 0;                     /* cvtss2sd, cvtsd2ss, cvtps2pd */
    case 0xc2: return f3 ? 4 : f2 ? 8 : 0;                                 /* cmpss, cmpsd */
    case 0xe6: return f3 ? 8 : 0;                                          /* cvtdq2pd */
    case 0xf0: return f2 ? 16 : 0;                                         /* lddqu */
    case 0xc4: return none || p66 ? 2 : 0;                                 /* pinsrw */
    case 0x6e: return none || p66 ? wd : 0;                                /* movd/movq mm/xmm, r/m */
    case 0x7e:
        if (f3)
            return 8; /* movq xmm, m64 */
        a->kind = K_STORE;
        return none || p66 ? wd : 0;
    case 0x6f: return f3 ? 16 : none ? 8 : 0;                              /* movdqu, movq mm */
    case 0x7f: a->kind = K_STORE; return f3 ? 16 : none ? 8 : 0;
    case 0xd6: a->kind = K_STORE; return p66 ? 8 : 0;
    case 0xe7: a->kind = K_STORE; return none ? 8 : 0;                     /* movntq */
    default: return 0;
    }
}

/* Legacy 0F 38 and 0F 3A opcodes. */
static int map23(const struct x86_insn *d, struct access *a, int v, int *gpr)
{
    uint8_t op = d->opcode;
    int p66 = d->opsize16 && !d->rep, wd = d->w ? 8 : 4;
    a->kind = K_LOAD;
    if (d->map == 2) {
        if (op == 0xf0 || op == 0xf1) {
            *gpr = 1;
            if (d->rep == 0xf2) /* crc32 r, r/m16/32/64 (f0: r/m8) */
                return op == 0xf1 ? v : 0;
            a->kind = op == 0xf1 ? K_STORE : K_LOAD; /* movbe */
            return d->rep ? 0 : v;
        }
        if (p66 && ((op >= 0x20 && op <= 0x25) || (op >= 0x30 && op <= 0x35))) { /* pmovsx, pmovzx */
            static const int8_t size[6] = {8, 4, 2, 8, 4, 8};
            return size[op & 7];
        }
        return 0;
    }
    if (!p66)
        return 0;
    switch (op) {
    case 0x15: a->kind = K_STORE; return 2;  /* pextrw m16 */
    case 0x16: *gpr = 1, a->kind = K_STORE; return wd; /* pextrd/q */
    case 0x17: a->kind = K_STORE; return 4;  /* extractps */
    case 0x21: return 4;                     /* insertps m32 */
    case 0x22: *gpr = 1; return wd;          /* pinsrd/q */
    default: return 0;
    }
}

/* VEX-encoded (AVX, AVX2, FMA, BMI): none of these need an aligned operand but the vmovap/vmovdqa/
 * vmovnt forms, so the AC rule applies to all the others. */
static int vex(const struct x86_insn *d, const uint8_t *code, struct access *a, int *gpr)
{
    int pp, l, vvvv;
    vex_fields(d, code, &pp, &l, &vvvv);
    uint8_t op = d->opcode;
    int wd = d->w ? 8 : 4, sc = pp == 2 ? 4 : pp == 3 ? 8 : vec(l);
    a->kind = K_LOAD;
    if (d->map == 1) {
        if (pp == 1 && ((op >= 0x60 && op <= 0x6d) || (op >= 0x74 && op <= 0x76) || (op >= 0xd1 && op <= 0xd5) ||
                        (op >= 0xd8 && op <= 0xdf) || (op >= 0xe0 && op <= 0xe5) || (op >= 0xe8 && op <= 0xef) ||
                        (op >= 0xf1 && op <= 0xf6) || (op >= 0xf8 && op <= 0xfe)))
            return vec(l); /* packed integer arithmetic */
        switch (op) {
        case 0x11: a->kind = K_STORE; /* fall through */
        case 0x10: return sc;                                  /* vmovups/upd/ss/sd */
        case 0x13: case 0x17: a->kind = K_STORE; return pp <= 1 && !l ? 8 : 0;
        case 0x12: case 0x16: return pp <= 1 && !l ? 8 : pp == 2 ? vec(l) : (pp == 3 && op == 0x12) ? (l ? 32 : 8) : 0;
        case 0x14: case 0x15: case 0x54: case 0x55: case 0x56: case 0x57: case 0xc6: return pp <= 1 ? vec(l) : 0;
        case 0x2a: return pp >= 2 ? wd : 0;                    /* vcvtsi2ss/sd */
        case 0x2c: case 0x2d: *gpr = 1; return pp == 2 ? 4 : pp == 3 ? 8 : 0;
        case 0x2e: case 0x2f: return pp == 0 ? 4 : pp == 1 ? 8 : 0;
        case 0x51: case 0x58: case 0x59: case 0x5c: case 0x5d: case 0x5e: case 0x5f: case 0xc2: return sc;
        case 0x5a: return pp == 0 ? (l ? 16 : 8) : sc;
        case 0x5b: return pp <= 2 ? vec(l) : 0;
        case 0x6e: *gpr = 0; return pp == 1 && !l ? wd : 0;
        case 0x7e:
            if (pp == 2 && !l)
                return 8;
            a->kind = K_STORE;
            return pp == 1 && !l ? wd : 0;
        case 0x7f: a->kind = K_STORE; /* fall through */
        case 0x6f: return pp == 2 ? vec(l) : 0;                /* vmovdqu (vmovdqa: #GP) */
        case 0x70: return pp >= 1 ? vec(l) : 0;                /* vpshufd/hw/lw */
        case 0xd6: a->kind = K_STORE; return pp == 1 && !l ? 8 : 0;
        case 0xe6: return pp == 2 ? (l ? 16 : 8) : pp != 0 ? vec(l) : 0;
        case 0xf0: return pp == 3 ? vec(l) : 0;                /* vlddqu */
        default: return 0;
        }
    }
    if (d->map == 2) {
        if (pp == 0 || pp == 2 || pp == 3) { /* BMI1/BMI2 on general registers */
            *gpr = 1;
            if (vvvv == 4)
                a->method = M_TOGGLE; /* a source in rsp, which the scratch path moves */
            if ((op == 0xf2 && pp == 0) || (op == 0xf3 && pp == 0) || op == 0xf5 || (op == 0xf6 && pp == 3) || op == 0xf7)
                return wd;
            return 0;
        }
        if ((op >= 0x20 && op <= 0x25) || (op >= 0x30 && op <= 0x35)) {
            static const int8_t size[6] = {8, 4, 2, 8, 4, 8};
            return size[op & 7] * (l ? 2 : 1);
        }
        if ((op <= 0x0f) || (op >= 0x16 && op <= 0x17) || (op >= 0x1c && op <= 0x1e) || (op >= 0x28 && op <= 0x29) ||
            op == 0x2b || (op >= 0x36 && op <= 0x40) || (op >= 0x45 && op <= 0x47))
            return vec(l);
        switch (op) {
        case 0x13: return l ? 16 : 8;            /* vcvtph2ps */
        case 0x18: case 0x58: return 4;          /* vbroadcastss, vpbroadcastd */
        case 0x19: case 0x59: return 8;          /* vbroadcastsd, vpbroadcastq */
        case 0x1a: case 0x5a: return 16;         /* vbroadcastf128, vbroadcasti128 */
        case 0x79: return 2;                     /* vpbroadcastw */
        default: break;
        }
        if (op >= 0x96 && op <= 0xbf && (op & 0xf) >= 6) /* FMA: packed even, scalar odd from 0x99 */
            return (op & 1) && op >= 0x99 ? wd : vec(l);
        return 0;
    }
    if (d->map == 3) {
        if (pp == 3 && op == 0xf0) { /* rorx */
            *gpr = 1;
            return wd;
        }
        if (pp != 1)
            return 0;
        switch (op) {
        case 0x00: case 0x01: case 0x02: case 0x04: case 0x05: case 0x06: case 0x08: case 0x09: case 0x0c:
        case 0x0d: case 0x0e: case 0x0f: case 0x40: case 0x41: case 0x42: case 0x44: case 0x46: case 0x4a:
        case 0x4b: case 0x4c:
            return vec(l);
        case 0x0a: return 4;
        case 0x0b: return 8;
        case 0x18: case 0x38: return 16;                       /* vinsertf128, vinserti128 */
        case 0x19: case 0x39: a->kind = K_STORE; return 16;    /* vextractf128, vextracti128 */
        case 0x1d: a->kind = K_STORE; return l ? 16 : 8;       /* vcvtps2ph */
        case 0x15: a->kind = K_STORE; return 2;
        case 0x16: *gpr = 1, a->kind = K_STORE; return wd;
        case 0x17: a->kind = K_STORE; return 4;
        case 0x21: return 4;
        case 0x22: *gpr = 1; return wd;
        default: return 0;
        }
    }
    return 0;
}

/* EVEX (AVX-512): the unmasked moves, and the full-vector compares, tests and integer arithmetic of
 * libc's string routines (vpcmpb and the like into a mask register). Their disp8 is scaled by the
 * operand's tuple (disp8*N): the trampoline's address computation needs N (the vector's size, or
 * the element's when broadcast). Run with AC cleared (no scratch rewrite of EVEX). */
static int evex(const struct x86_insn *d, const uint8_t *code, struct access *a)
{
    uint8_t p1 = code[d->nprefix + 2], p2 = code[d->nprefix + 3];
    int pp = p1 & 3, ll = (p2 >> 5) & 3, bcst = (p2 >> 4) & 1, aaa = p2 & 7;
    int vl = 16 << ll, wd = d->w ? 8 : 4;
    uint8_t op = d->opcode;
    a->method = M_TOGGLE;
    a->kind = K_LOAD;
    if (aaa) {
        a->reason = UALDBG_PATCH_R_MASKED;
        return 0;
    }
    if (ll == 3)
        return 0;
    int full = 0; /* a full-vector operation on integers: dword/qword forms may broadcast */
    if (pp == 1 && d->map == 1)
        full = (op >= 0x64 && op <= 0x66) || (op >= 0x74 && op <= 0x76) || (op >= 0xd8 && op <= 0xdf) ||
               op == 0xeb || op == 0xef || (op >= 0xf8 && op <= 0xfe) || (op >= 0xe0 && op <= 0xe5);
    else if (pp == 1 && d->map == 3)
        full = op == 0x1e || op == 0x1f || op == 0x3e || op == 0x3f; /* vpcmp(u)b/w/d/q, imm8 */
    else if ((pp == 1 || pp == 2) && d->map == 2)
        full = op == 0x26 || op == 0x27 || (op >= 0x38 && op <= 0x3f); /* vptest(n)m, vpmin/vpmax */
    if (full) {
        int dq = (d->map == 3 && (op == 0x1e || op == 0x1f)) || (d->map == 2 && op == 0x27) ||
                 (d->map == 1 && (op == 0x66 || op == 0x76 || op == 0xdb || op == 0xdf || op == 0xeb || op == 0xef ||
                                  op == 0xfa || op == 0xfb || op == 0xfe || op == 0xd4));
        if (bcst && !dq)
            return 0; /* byte and word elements do not broadcast */
        a->scale = bcst ? wd : vl;
        return bcst ? wd : vl;
    }
    if (bcst || d->map != 1)
        return 0;
    int size = 0;
    switch (op) {
    case 0x11: a->kind = K_STORE; /* fall through */
    case 0x10: size = pp <= 1 ? vl : pp == 2 ? 4 : 8; break;            /* vmovups/upd, vmovss/sd */
    case 0x7f: a->kind = K_STORE; /* fall through */
    case 0x6f: size = pp >= 2 ? vl : 0; break;                           /* vmovdqu8/16/32/64 */
    case 0x13: case 0x17: a->kind = K_STORE; /* fall through */
    case 0x12: case 0x16: size = pp <= 1 && ll == 0 ? 8 : 0; break;     /* vmovlps/hps/lpd/hpd */
    case 0x6e: size = pp == 1 && ll == 0 ? wd : 0; break;               /* vmovd/q xmm, m */
    case 0x7e:
        if (pp == 2 && ll == 0) {
            size = 8; /* vmovq xmm, m64 */
            break;
        }
        a->kind = K_STORE;
        size = pp == 1 && ll == 0 ? wd : 0;
        break;
    case 0xd6: a->kind = K_STORE; size = pp == 1 && ll == 0 ? 8 : 0; break;
    default: break;
    }
    a->scale = size; /* full-vector and scalar (T1S) moves: N is the operand's size */
    return size;
}

/* Whether the instruction sets all six status flags (the ISA's "undefined" included: no program
 * can read those) and reads none (adc, sbb, cmov, inc/dec keeping CF, shifts and rotates by a
 * count that may be 0, bt* keeping ZF do not). */
static int writes_all_flags(const struct x86_insn *d, const uint8_t *code, int sub)
{
    uint8_t op = d->opcode;
    if (d->vex == 2 || d->vex == 3) { /* andn, blsr/blsmsk/blsi, bzhi, bextr (not pdep, pext, mulx, shlx...) */
        int pp, l, vvvv;
        vex_fields(d, code, &pp, &l, &vvvv);
        return d->map == 2 && pp == 0 && (op == 0xf2 || op == 0xf3 || op == 0xf5 || op == 0xf7);
    }
    if (d->vex)
        return 0;
    if (d->map == 0) {
        if (op < 0x40 && (op & 7) <= 3)
            return (op >> 3) != 2 && (op >> 3) != 3; /* not adc, sbb */
        switch (op) {
        case 0x69: case 0x6b: case 0x85: return 1;                     /* imul, test */
        case 0x81: case 0x83: return sub != 2 && sub != 3;             /* not adc, sbb */
        case 0xf7: return sub != 2;                                     /* test neg mul imul div idiv; not not */
        default: return 0;
        }
    }
    if (d->map == 1) {
        switch (op) {
        case 0xaf: case 0xb8: case 0xbc: case 0xbd: return 1;          /* imul, popcnt, bsf/tzcnt, bsr/lzcnt */
        case 0x2e: case 0x2f: return 1;                                 /* (u)comiss/sd */
        default: return 0;
        }
    }
    return 0;
}

int access_of(const struct x86_insn *d, const uint8_t *code, struct access *a)
{
    memset(a, 0, sizeof *a);
    a->scale = 1;
    a->method = M_SCRATCH;
    a->reason = UALDBG_PATCH_R_KIND;
    if (d->string) {
        /* movs, stos, lods: every element of one faults alike (its operands move by the element's
         * size), so their faults are counted as --no-patch traps them, one per element; cmps and
         * scas stop at a compare (their elements are not known before), ins and outs are I/O. */
        uint8_t op = d->opcode;
        int counted = !d->vex && d->map == 0 && (op == 0xa5 || op == 0xab || op == 0xad);
        if (!counted) {
            a->reason = d->rep ? UALDBG_PATCH_R_REP : UALDBG_PATCH_R_KIND;
            return 0;
        }
        if (d->seg || d->addr32) {
            a->reason = UALDBG_PATCH_R_SEGMENT; /* a source segment, or esi/edi/ecx */
            return 0;
        }
        a->size = d->w ? 8 : d->opsize16 ? 2 : 4;
        a->kind = op == 0xa5 ? K_RMW : op == 0xab ? K_STORE : K_LOAD;
        a->method = M_STRING;
        a->reason = 0;
        return 1;
    }
    if (!d->vex && d->map == 0 && ((d->opcode >= 0x50 && d->opcode <= 0x5f) || d->opcode == 0x8f || d->opcode == 0x68 ||
                                   d->opcode == 0x6a || d->opcode == 0x9c || d->opcode == 0x9d || d->opcode == 0xc8 ||
                                   d->opcode == 0xc9 || (d->opcode == 0xff && ((d->modrm >> 3) & 7) == 6))) {
        a->reason = UALDBG_PATCH_R_STACK; /* push, pop, pushf, popf, enter, leave */
        return 0;
    }
    if (d->flow != X86_FLOW_NEXT) {
        a->reason = d->flow == X86_FLOW_OTHER ? UALDBG_PATCH_R_STEPPED : UALDBG_PATCH_R_TRANSFER;
        return 0;
    }
    if (!d->mem)
        return 0; /* a moffs mov, or no memory operand */
    if (d->seg || d->addr32) {
        a->reason = UALDBG_PATCH_R_SEGMENT;
        return 0;
    }
    int v = d->w ? 8 : d->opsize16 ? 2 : 4, sub = (d->modrm >> 3) & 7, gpr = 0, size;
    if (d->vex == 4)
        size = evex(d, code, a);
    else if (d->vex)
        size = vex(d, code, a, &gpr);
    else if (d->map == 0)
        size = map0(d, a, v, sub, &gpr);
    else if (d->map == 1)
        size = map1(d, a, v, sub, &gpr);
    else
        size = map23(d, a, v, &gpr);
    if (size < 2)
        return 0; /* no fault possible (a byte), or not known */
    if (d->lock || (gpr && d->reg == 4))
        a->method = M_TOGGLE; /* atomic; or a register operand in rsp, which the scratch path moves */
    a->size = size;
    a->writes_flags = writes_all_flags(d, code, sub);
    a->reason = 0;
    return 1;
}

int access_disp8_scale(const struct x86_insn *d, const uint8_t *code)
{
    struct access a;
    if (d->vex != 4 || d->disp_size != 1)
        return 1;
    access_of(d, code, &a);
    return a.scale > 1 ? a.scale : 1;
}
