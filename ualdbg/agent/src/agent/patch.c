/* patch.c - hot-site patching (issue 21): a site that has trapped `patch_after` times is
 * rewritten in place to jump to a per-site trampoline, so that later executions never trap.
 *
 * The trampoline computes the instruction's effective address with a LEA of the same operand
 * and counts the execution exactly when the trap would have happened: the address has one of
 * the low bits of its AC rule set AND the thread has AC set (an unarmed thread never traps).
 * It then runs a relocated copy of the instruction with AC clear for that one instruction (its
 * flags are the program's: pushfq/popfq around the test, AC set again with or-only popfq after),
 * and jumps back. When the test says "aligned" the copy runs with the thread's own AC: if the
 * rule tested too few bits the hardware still traps, the handler counts that fault at the
 * site's PC and widens the tested bits (patch_widen_mask): counts cannot go over, and cannot go
 * under. The counter lives in the shared buffer's patch table (ualdbg_agent.h), reached through
 * a pointer in a MADV_WIPEONFORK page: a forked child reads 0 there until it has a buffer of
 * its own, and its trampolines then take the trapping path, so its counts are its own.
 *
 * What is patched: one instruction whose AC rule is known (integer and SSE/AVX moves and
 * arithmetic on memory; not rep/string, stack, fs/gs), in a private read-only file mapping of
 * an ELF (never anonymous or writable code: JIT, self-modifying code). The 5-byte jmp rel32 is
 * written with one atomic store (8 or 16 bytes) so that a thread running the code sees the old
 * or the new instruction; a jmp that would cross a 16-byte line is written only when the process
 * has one thread. An instruction shorter than 5 bytes takes the instructions after it along
 * (moved to the trampoline) only when no thread can be inside them: one thread, not inside the
 * program's signal handler, no direct branch of the module lands after it and its function has
 * no indirect jump. Everything else is refused and keeps trapping; the patch table says why.
 */
#include "patch.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "cfi.h"
#include "insn.h"

#ifndef MADV_WIPEONFORK
#define MADV_WIPEONFORK 18
#endif

#define PPOOL_SIZE (64u << 10)
#define PSLOT 1024u
#define PSLOTS ((PPOOL_SIZE - 4096u) / PSLOT)
#define MAX_PPOOLS 128
#define MAX_COPIES 6
#define MAX_PATCHES 4096
#define MAX_MODIDX 64
#define HDR_SIZE 64u

struct pslot {
    uint64_t origin;   /* the patched PC */
    uint32_t entry;    /* its patch-table index in this process */
    uint8_t mask_off;  /* the test's imm8 */
    uint8_t ncopies;
    uint16_t copy_a, copy_b; /* the instruction at origin: run with AC clear / with the thread's AC */
    uint16_t copy_s;         /* the instruction rewritten to use the scratch copy of its operand */
    struct {
        uint16_t off;
        uint8_t from; /* bytes after origin */
        uint8_t len;
    } copies[MAX_COPIES];  /* the instructions moved along with a short one */
};
_Static_assert(sizeof(struct pslot) <= HDR_SIZE, "slot header");

struct ppool {
    uint8_t *base; /* page 0: counter pointers (one per slot, wiped on fork); then the slots */
    uint32_t used;
};

struct patch_priv {
    uint64_t pc;
    uint8_t *slot;
    uint64_t **ptr;
    struct ualdbg_patch e; /* as written in the table, for fork children */
    uint8_t orig[5];       /* the code the jump replaced: put back when an injected agent leaves */
};

struct modidx {
    const void *hdr;
    uint64_t *targets;
    size_t n, cap;
    int ok;
};

static struct ppool ppools[MAX_PPOOLS];
static int nppools;
static struct patch_priv plist[MAX_PATCHES];
static uint32_t nplist;
static volatile int patch_lock;
static struct modidx modidx[MAX_MODIDX];
static int nmodidx;

static struct ualdbg_patch *table(void)
{
    if (!G.hdr || !G.hdr->patches_offset)
        return NULL;
    return (struct ualdbg_patch *)(void *)((char *)G.hdr + G.hdr->patches_offset);
}

static int64_t dist(uint64_t a, uint64_t b) { return a > b ? (int64_t)(a - b) : (int64_t)(b - a); }

/* ------------------------------------------------------------------------------------------ */
/* What the AC rule checks: the operand's size for the instructions the patcher knows, 0 for
 * the rest (they keep trapping). x86 checks a 2/4/8-byte integer operand at its size; vector
 * operands are checked at 16 on the CPUs measured (PLATFORM.md): the trampoline starts with 8
 * for them and widens on evidence (a trap on its "aligned" path). */

static int vex_pp_l(const struct x86_insn *d, const uint8_t *code, int *l)
{
    uint8_t b = d->vex == 2 ? code[d->nprefix + 1] : code[d->nprefix + 2];
    *l = (b >> 2) & 1;
    return b & 3;
}

enum { K_LOAD = 1, K_STORE = 2, K_RMW = 3 };

/* The operand's size (0: not known here, the site keeps trapping), how the instruction uses
 * it (*kind), and whether ModRM.reg names a general register (*gpr_reg: it must not be rsp,
 * which the trampoline moves while the instruction runs). Locked instructions and xchg are
 * left alone: the trampoline reads and writes the operand a byte at a time. */
static int classify(const struct x86_insn *d, const uint8_t *code, int *kind, int *gpr_reg)
{
    *kind = 0;
    *gpr_reg = 0;
    if (!d->mem || d->string || d->flow != X86_FLOW_NEXT || d->seg || d->addr32 || d->vex == 4 || d->lock)
        return 0;
    int v = d->w ? 8 : d->opsize16 ? 2 : 4;
    int sub = (d->modrm >> 3) & 7;
    uint8_t op = d->opcode;
    if (!d->vex && d->map == 0) {
        if (op < 0x40 && (op & 7) <= 3) { /* add or adc sbb and sub xor cmp */
            *gpr_reg = 1;
            *kind = (op & 2) || (op >> 3) == 7 ? K_LOAD : K_RMW;
            return (op & 1) ? v : 1;
        }
        switch (op) {
        case 0x63: *gpr_reg = 1, *kind = K_LOAD; return d->opsize16 ? 2 : 4; /* movsxd */
        case 0x85: *gpr_reg = 1, *kind = K_LOAD; return v;                   /* test */
        case 0x89: *gpr_reg = 1, *kind = K_STORE; return v;
        case 0x8b: *gpr_reg = 1, *kind = K_LOAD; return v;
        case 0x81: case 0x83: *kind = sub == 7 ? K_LOAD : K_RMW; return v;
        case 0xc1: case 0xd1: case 0xd3: *kind = K_RMW; return v;
        case 0xc7: *kind = K_STORE; return sub == 0 ? v : 0;
        case 0xf7: *kind = sub == 0 ? K_LOAD : K_RMW; return (sub == 0 || sub == 2 || sub == 3) ? v : 0;
        case 0xff: *kind = K_RMW; return sub <= 1 ? v : 0;
        default: return 0;
        }
    }
    if (!d->vex && d->map == 1) {
        *kind = K_LOAD;
        if (op >= 0x40 && op <= 0x4f) {
            *gpr_reg = 1;
            return v; /* cmovcc loads whatever the condition */
        }
        switch (op) {
        case 0xb7: case 0xbf: *gpr_reg = 1; return 2;
        case 0xaf: *gpr_reg = 1; return v;
        case 0x10: return d->rep == 0xf3 ? 4 : d->rep == 0xf2 ? 8 : 16;
        case 0x11: *kind = K_STORE; return d->rep == 0xf3 ? 4 : d->rep == 0xf2 ? 8 : 16;
        case 0x12: case 0x16: return d->rep ? 0 : 8;
        case 0x13: case 0x17: *kind = K_STORE; return d->rep ? 0 : 8;
        case 0x6f: return d->rep == 0xf3 ? 16 : (!d->rep && !d->opsize16) ? 8 : 0;
        case 0x7f: *kind = K_STORE; return d->rep == 0xf3 ? 16 : (!d->rep && !d->opsize16) ? 8 : 0;
        case 0x6e: return d->rep ? 0 : (d->w ? 8 : 4);
        case 0x7e:
            if (d->rep == 0xf3)
                return 8;
            *kind = K_STORE;
            return d->rep ? 0 : (d->w ? 8 : 4);
        case 0xd6: *kind = K_STORE; return (d->opsize16 && !d->rep) ? 8 : 0;
        case 0x51: case 0x58: case 0x59: case 0x5c: case 0x5d: case 0x5e: case 0x5f:
            return d->rep == 0xf3 ? 4 : d->rep == 0xf2 ? 8 : 0;
        case 0x2e: case 0x2f: return d->rep ? 0 : d->opsize16 ? 8 : 4;
        default: return 0;
        }
    }
    if ((d->vex == 2 || d->vex == 3) && d->map == 1) {
        int l, pp = vex_pp_l(d, code, &l);
        *kind = K_LOAD;
        switch (op) {
        case 0x11: *kind = K_STORE; /* fall through */
        case 0x10: return pp <= 1 ? (l ? 32 : 16) : pp == 2 ? 4 : 8;
        case 0x7f: *kind = K_STORE; /* fall through */
        case 0x6f: return pp == 2 ? (l ? 32 : 16) : 0;
        case 0x6e: return pp == 1 && !l ? (d->w ? 8 : 4) : 0;
        case 0x7e:
            if (pp == 2 && !l)
                return 8;
            *kind = K_STORE;
            return pp == 1 && !l ? (d->w ? 8 : 4) : 0;
        case 0xd6: *kind = K_STORE; return pp == 1 && !l ? 8 : 0;
        default: return 0;
        }
    }
    return 0;
}

/* The instruction with its memory operand replaced by (%rsp): same prefixes, opcode, ModRM.reg
 * and immediate. Returns its length. */
static int rewrite_to_rsp(const struct x86_insn *d, const uint8_t *code, uint8_t *out)
{
    int n = 0;
    int legacy = d->nprefix - (d->rex ? 1 : 0);
    for (int i = 0; i < legacy; i++)
        out[n++] = code[i];
    if (d->rex)
        out[n++] = (uint8_t)(d->rex & ~0x03); /* X = B = 0: base rsp, no index */
    int op_start = d->nprefix;
    for (int i = op_start; i < d->modrm_off; i++)
        out[n++] = code[i];
    if (d->vex == 3)
        out[n - (d->modrm_off - op_start) + 1] |= 0x60; /* VEX.~X = VEX.~B = 1 */
    out[n++] = (uint8_t)((d->modrm & 0x38) | 0x04); /* mod 00, rm 100: SIB */
    out[n++] = 0x24;                                  /* base rsp, no index */
    for (int i = 0; i < d->imm_size; i++)
        out[n++] = code[d->imm_off + i];
    return n;
}

/* ------------------------------------------------------------------------------------------ */
/* Branch targets: no thread may be sent into the middle of the jump. */

static void sort_u64(uint64_t *a, size_t n)
{
    /* heapsort: no allocation, runs in a signal handler */
    for (size_t start = n / 2; start-- > 0;) {
        size_t root = start;
        for (size_t c; (c = 2 * root + 1) < n; root = c) {
            if (c + 1 < n && a[c] < a[c + 1])
                c++;
            if (a[root] >= a[c])
                break;
            uint64_t t = a[root]; a[root] = a[c]; a[c] = t;
        }
    }
    for (size_t end = n; end-- > 1;) {
        uint64_t t = a[0]; a[0] = a[end]; a[end] = t;
        size_t root = 0;
        for (size_t c; (c = 2 * root + 1) < end; root = c) {
            if (c + 1 < end && a[c] < a[c + 1])
                c++;
            if (a[root] >= a[c])
                break;
            t = a[root]; a[root] = a[c]; a[c] = t;
        }
    }
}

/* The target of a direct branch, or 0. */
static uint64_t branch_target(const struct x86_insn *d, uint64_t pc, const uint8_t *code)
{
    int rel = 0;
    if (!d->vex && d->map == 0 && ((d->opcode >= 0x70 && d->opcode <= 0x7f) || d->opcode == 0xeb ||
                                   (d->opcode >= 0xe0 && d->opcode <= 0xe3)))
        rel = 1;
    else if (!d->vex && ((d->map == 0 && (d->opcode == 0xe8 || d->opcode == 0xe9)) ||
                         (d->map == 1 && d->opcode >= 0x80 && d->opcode <= 0x8f) ||
                         (d->map == 0 && d->opcode == 0xc7 && d->modrm == 0xf8)))
        rel = 4;
    if (!rel)
        return 0;
    int32_t v;
    if (rel == 1)
        v = (int8_t)code[d->imm_off];
    else
        memcpy(&v, code + d->imm_off, 4);
    return pc + d->len + (uint64_t)(int64_t)v;
}

static int add_target(struct modidx *x, uint64_t t)
{
    if (x->n == x->cap) {
        size_t ncap = x->cap ? x->cap * 2 : 65536;
        /* Not mmap(NULL) or mremap: where the program's own mappings go, it would move them, and
         * a patched run would not be the same run as a --no-patch one (process.c, zone_map). */
        uint64_t *p = zone_map(ncap * 8);
        if (!p)
            return 0;
        if (x->targets) {
            memcpy(p, x->targets, x->n * 8);
            zone_unmap(x->targets, x->cap * 8);
        }
        x->targets = p;
        x->cap = ncap;
    }
    x->targets[x->n++] = t;
    return 1;
}

/* Every direct branch target of every function (FDE) of a module, sorted; built once. */
static const struct modidx *module_index(const void *hdr)
{
    for (int i = 0; i < nmodidx; i++)
        if (modidx[i].hdr == hdr)
            return &modidx[i];
    if (nmodidx >= MAX_MODIDX)
        return NULL;
    struct modidx *x = &modidx[nmodidx++];
    memset(x, 0, sizeof *x);
    x->hdr = hdr;
    x->ok = 1;
    int64_t count = ualdbg_cfi_fde_range(hdr, UINT64_MAX, NULL, NULL);
    if (count <= 0)
        x->ok = 0;
    for (int64_t i = 0; i < count && x->ok; i++) {
        uint64_t start, end;
        if (ualdbg_cfi_fde_range(hdr, (uint64_t)i, &start, &end) < 0) {
            x->ok = 0;
            break;
        }
        for (uint64_t a = start; a < end;) {
            struct x86_insn d;
            const uint8_t *code = (const uint8_t *)(uintptr_t)a;
            if (ualdbg_x86_decode(code, end - a < 15 ? end - a : 15, &d) != 0) {
                x->ok = 0; /* not all code can be read as code: its branches are unknown */
                break;
            }
            uint64_t t = branch_target(&d, a, code);
            if (t && !add_target(x, t)) {
                x->ok = 0;
                break;
            }
            a += d.len;
        }
    }
    if (x->ok)
        sort_u64(x->targets, x->n);
    return x;
}

/* No direct branch of the module lands in (pc, pc + len), and pc's own function has no
 * indirect jump (a jump table could land there) and decodes to pc. */
static int no_branch_into(uint64_t pc, uint32_t len)
{
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35))
    struct dl_find_object dlfo;
    if (_dl_find_object((void *)(uintptr_t)pc, &dlfo) != 0 || !dlfo.dlfo_eh_frame)
        return 0;
    struct cfi_rule rule;
    ualdbg_cfi_lookup(dlfo.dlfo_eh_frame, pc, &rule);
    if (!(rule.start <= pc && pc < rule.end))
        return 0;
    int hit = 0;
    for (uint64_t a = rule.start; a < rule.end;) {
        struct x86_insn d;
        const uint8_t *code = (const uint8_t *)(uintptr_t)a;
        if (ualdbg_x86_decode(code, rule.end - a < 15 ? rule.end - a : 15, &d) != 0)
            return 0;
        if (a == pc)
            hit = 1;
        if (!d.vex && d.map == 0 && d.opcode == 0xff && ((d.modrm >> 3) & 7) == 4)
            return 0;
        a += d.len;
    }
    if (!hit)
        return 0;
    const struct modidx *x = module_index(dlfo.dlfo_eh_frame);
    if (!x || !x->ok)
        return 0;
    size_t lo = 0, hi = x->n; /* first target > pc */
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (x->targets[mid] <= pc)
            lo = mid + 1;
        else
            hi = mid;
    }
    return !(lo < x->n && x->targets[lo] < pc + len);
#else
    (void)pc, (void)len;
    return 0;
#endif
}

/* [lo, hi) is padding between functions: in no function (FDE) of the module. */
static int padding_only(uint64_t lo, uint64_t hi)
{
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35))
    struct dl_find_object dlfo;
    if (_dl_find_object((void *)(uintptr_t)lo, &dlfo) != 0 || !dlfo.dlfo_eh_frame)
        return 0;
    uint64_t ends[2] = {lo, hi - 1};
    for (int i = 0; i < 2; i++) {
        struct cfi_rule rule;
        ualdbg_cfi_lookup(dlfo.dlfo_eh_frame, ends[i], &rule);
        if (rule.start <= ends[i] && ends[i] < rule.end)
            return 0;
        if (i == 1 && rule.start > lo)
            return 0; /* a function starts inside */
    }
    return 1;
#else
    (void)lo, (void)hi;
    return 0;
#endif
}

/* The process's threads now (/proc/self/stat, field 20); 0 if unknown. */
static int thread_count(void)
{
    char buf[1024];
    int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    if (!p)
        return 0;
    for (int field = 2; field < 20 && *p; p++)
        if (*p == ' ')
            field++;
    int v = 0;
    while (*p >= '0' && *p <= '9')
        v = v * 10 + (*p++ - '0');
    return v;
}

/* ------------------------------------------------------------------------------------------ */
/* Trampoline memory: 64 KiB pools within 1 GiB of the code; page 0 holds the counter pointers
 * (MADV_WIPEONFORK: zero in a fork child), the rest 256-byte slots (RWX). Caller holds
 * maps_lock and patch_lock. */

static uint8_t *pslot_alloc(uint64_t near, uint64_t ***ptr)
{
    struct ppool *pp = NULL;
    for (int i = 0; i < nppools && !pp; i++)
        if (ppools[i].used < PSLOTS && dist((uint64_t)(uintptr_t)ppools[i].base, near) < (1ll << 30) + (1ll << 29))
            pp = &ppools[i];
    if (!pp) {
        if (nppools >= MAX_PPOOLS)
            return NULL;
        uint8_t *base = pool_map_near(near, PPOOL_SIZE);
        if (!base)
            return NULL;
        if (mprotect(base, 4096, PROT_READ | PROT_WRITE) != 0 || madvise(base, 4096, MADV_WIPEONFORK) != 0) {
            munmap(base, PPOOL_SIZE);
            return NULL; /* without a wiped page a fork child would count into its parent's buffer */
        }
        pp = &ppools[nppools++];
        pp->base = base;
        pp->used = 0;
    }
    uint32_t i = pp->used++;
    *ptr = (uint64_t **)(void *)pp->base + i;
    return pp->base + 4096 + i * PSLOT;
}

static struct pslot *slot_of(uint64_t rip)
{
    for (int i = 0; i < nppools; i++) {
        uint64_t b = (uint64_t)(uintptr_t)ppools[i].base + 4096;
        if (rip >= b && rip < b + (uint64_t)ppools[i].used * PSLOT) {
            struct pslot *s = (struct pslot *)(uintptr_t)(b + (rip - b) / PSLOT * PSLOT);
            return s->origin ? s : NULL;
        }
    }
    return NULL;
}

static uint64_t **ptr_of(const struct pslot *s)
{
    for (int i = 0; i < nppools; i++) {
        uint64_t b = (uint64_t)(uintptr_t)ppools[i].base + 4096, a = (uint64_t)(uintptr_t)s;
        if (a >= b && a < b + PSLOTS * PSLOT)
            return (uint64_t **)(void *)ppools[i].base + (a - b) / PSLOT;
    }
    return NULL;
}

/* The patched PC of a fault inside a trampoline, for the program's handler (signals.c):
 * *at_insn 1 at the copy that runs with AC clear (the thread had AC set), 2 at the copy that
 * runs with the thread's own flags; 0 elsewhere (the moved instructions after a short one:
 * their PCs lie under the jump, the program could not resume there). */
uint64_t patch_origin(uint64_t rip, int *at_insn)
{
    struct pslot *s = slot_of(rip);
    if (!s)
        return 0;
    uint64_t off = rip - (uint64_t)(uintptr_t)s;
    int k = off == s->copy_a ? 1 : off == s->copy_b ? 2 : 0;
    if (at_insn)
        *at_insn = k;
    return k ? s->origin : 0;
}

/* Whether the code at pc is this agent's jump to the trampoline of a patch of pc (and not new
 * code loaded at that address since, or code the program rewrote). */
int patch_is_ours(uint64_t pc)
{
    const volatile uint8_t *c = (const volatile uint8_t *)(uintptr_t)pc;
    if (c[0] != 0xe9)
        return 0;
    int32_t rel;
    uint8_t b[4] = {c[1], c[2], c[3], c[4]};
    memcpy(&rel, b, 4);
    uint64_t to = pc + 5 + (uint64_t)(int64_t)rel;
    struct pslot *s = slot_of(to);
    return s && s->origin == pc && to == (uint64_t)(uintptr_t)s + HDR_SIZE;
}

/* The patched PC when an alignment fault comes from a trampoline: only its copy that runs with
 * the thread's AC can take one (the tested bits were too few, or the counter is not set up). */
uint64_t patch_copy_origin(uint64_t rip)
{
    struct pslot *s = slot_of(rip);
    return s && rip - (uint64_t)(uintptr_t)s == s->copy_b ? s->origin : 0;
}

/* A single step that ended at a trampoline's entry executed the patch's jump in place of the
 * instruction it replaced (the thread trapped there, was counted, and was resumed in place):
 * where to resume it, the trampoline's copy that runs with AC clear and sets it again; 0 if rip
 * is no trampoline's entry. */
uint64_t patch_stepped_in(uint64_t rip)
{
    struct pslot *s = slot_of(rip);
    return s && rip == (uint64_t)(uintptr_t)s + HDR_SIZE && s->copy_a ? (uint64_t)(uintptr_t)s + s->copy_a : 0;
}

/* The hardware trapped at an address the trampoline tested as aligned: test more bits (up to
 * 16), enough that this address counts. `ea` is the faulting address. */
void patch_widen_mask(uint64_t rip, uint64_t ea)
{
    struct pslot *s = slot_of(rip);
    uint64_t **ptr = s ? ptr_of(s) : NULL;
    if (!s || !ptr || !*ptr)
        return; /* the counter was not set up: the trapping path, not evidence */
    volatile uint8_t *imm = (volatile uint8_t *)s + s->mask_off;
    uint8_t m = *imm;
    while (!(ea & m) && m < 15)
        m = (uint8_t)(m << 1 | 1);
    *imm = m;
    struct ualdbg_patch *t = table();
    if (t && s->entry < G.hdr->patch_capacity)
        t[s->entry].mask = m;
}

/* ------------------------------------------------------------------------------------------ */
/* Emitting a trampoline. */

static uint8_t *put(uint8_t *p, const void *b, size_t n)
{
    memcpy(p, b, n);
    return p + n;
}

/* The instruction at `from` copied to p, a RIP-relative displacement relocated. */
static uint8_t *put_copy(uint8_t *p, uint64_t from, const uint8_t *code, const struct x86_insn *d, int *ok)
{
    memcpy(p, code, d->len);
    if (d->rip_rel) {
        uint64_t target = from + d->len + (uint64_t)(int64_t)d->disp;
        int64_t nd = (int64_t)target - (int64_t)(uintptr_t)(p + d->len);
        if (nd != (int32_t)nd)
            *ok = 0;
        int32_t v = (int32_t)nd;
        memcpy(p + d->disp_off, &v, 4);
    }
    return p + d->len;
}

/* lea EA, %rax for the instruction's memory operand, run with rsp lowered by `adj`. */
static uint8_t *put_lea(uint8_t *p, uint64_t pc, const struct x86_insn *d, int64_t adj, int *ok)
{
    if (d->rip_rel) {
        uint64_t target = pc + d->len + (uint64_t)(int64_t)d->disp;
        *p++ = 0x48, *p++ = 0x8d, *p++ = 0x05;
        int64_t nd = (int64_t)target - (int64_t)(uintptr_t)(p + 4);
        if (nd != (int32_t)nd)
            *ok = 0;
        int32_t v = (int32_t)nd;
        return put(p, &v, 4);
    }
    int base = d->base, index = d->index;
    int64_t disp = (int64_t)d->disp + (base == 4 ? adj : 0);
    if (disp != (int32_t)disp)
        *ok = 0;
    uint8_t ss = d->scale == 8 ? 3 : d->scale == 4 ? 2 : d->scale == 2 ? 1 : 0;
    uint8_t idx = index >= 0 ? (uint8_t)(index & 7) : 4;
    *p++ = (uint8_t)(0x48 | (index >= 8 ? 2 : 0) | (base >= 8 ? 1 : 0));
    *p++ = 0x8d;
    if (base < 0) {
        *p++ = 0x04;
        *p++ = (uint8_t)(ss << 6 | idx << 3 | 5);
    } else {
        *p++ = 0x84;
        *p++ = (uint8_t)(ss << 6 | idx << 3 | (base & 7));
    }
    int32_t v = (int32_t)disp;
    return put(p, &v, 4);
}

static const uint8_t SET_AC[] = {0x48, 0x8d, 0x64, 0x24, 0x80, 0x9c, 0x81, 0x0c, 0x24, 0x00, 0x00,
                                 0x04, 0x00, 0x9d, 0x48, 0x8d, 0xa4, 0x24, 0x80, 0x00, 0x00, 0x00};
static const uint8_t OR_AC[] = {0x9c, 0x81, 0x0c, 0x24, 0x00, 0x00, 0x04, 0x00, 0x9d};

/* ------------------------------------------------------------------------------------------ */
/* Writing the jump. */

static int cas16(volatile void *p, uint64_t olo, uint64_t ohi, uint64_t nlo, uint64_t nhi)
{
    uint8_t ok;
    __asm__ volatile("lock cmpxchg16b %1\n\tsete %0"
                     : "=q"(ok), "+m"(*(volatile unsigned __int128 *)p), "+a"(olo), "+d"(ohi)
                     : "b"(nlo), "c"(nhi)
                     : "memory", "cc");
    return ok;
}

/* 5 bytes at pc, seen whole by a thread running there: one aligned 8- or 16-byte atomic store
 * (any store when `alone`). Returns a refusal reason or 0. */
static int write_jump(uint64_t pc, const uint8_t jmp[5], int alone)
{
    if (!alone && (pc & 15) > 11)
        return UALDBG_PATCH_R_STRADDLE;
    uint64_t lo = pc & ~4095ull, hi = (pc + 4) & ~4095ull;
    size_t len = (size_t)(hi - lo) + 4096;
    if (mprotect((void *)(uintptr_t)lo, len, PROT_READ | PROT_WRITE | PROT_EXEC) != 0)
        return UALDBG_PATCH_R_PROTECT;
    if (alone) {
        memcpy((void *)(uintptr_t)pc, jmp, 5);
    } else if ((pc & 7) <= 3) {
        volatile uint64_t *w = (volatile uint64_t *)(uintptr_t)(pc & ~7ull);
        uint64_t v = *w;
        memcpy((uint8_t *)&v + (pc & 7), jmp, 5);
        __atomic_store_n(w, v, __ATOMIC_SEQ_CST);
    } else {
        volatile uint64_t *w = (volatile uint64_t *)(uintptr_t)(pc & ~15ull);
        for (;;) {
            uint64_t o[2] = {w[0], w[1]}, n[2] = {o[0], o[1]};
            memcpy((uint8_t *)n + (pc & 15), jmp, 5);
            if (cas16(w, o[0], o[1], n[0], n[1]))
                break;
        }
    }
    mprotect((void *)(uintptr_t)lo, len, PROT_READ | PROT_EXEC);
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Deciding. */

/* The permissions of [lo, hi) now, from a fresh read of /proc/self/maps (the agent's snapshot
 * may predate an mprotect of the program's: code it made writable is its own, never patched).
 * 1 when one private r-x mapping holds it all. Called under patch_lock (the static buffer). */
static int fresh_rx(uint64_t lo, uint64_t hi)
{
    static char text[1 << 20];
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    size_t len = 0;
    for (;;) {
        ssize_t r = read(fd, text + len, sizeof text - 1 - len);
        if (r <= 0)
            break;
        len += (size_t)r;
    }
    close(fd);
    text[len] = 0;
    for (char *line = text; line && *line;) {
        char *eol = strchr(line, '\n');
        uint64_t start = strtoull(line, &line, 16);
        uint64_t end = *line == '-' ? strtoull(line + 1, &line, 16) : 0;
        if (start <= lo && lo < end)
            return hi <= end && line[0] == ' ' && !strncmp(line + 1, "r-xp", 4);
        line = eol ? eol + 1 : NULL;
    }
    return 0;
}

static int mapping_patchable(const struct mapping *m, uint64_t pc, uint64_t end)
{
    if (!m || !m->exec || m->write || !m->priv || !m->plen || m->path[0] != '/' || end > m->end)
        return 0;
    static const char deleted[] = " (deleted)";
    size_t dl = sizeof deleted - 1;
    if (m->plen > dl && !memcmp(m->path + m->plen - dl, deleted, dl))
        return 0;
    if (m->plen >= 7 && !memcmp(m->path, "/memfd:", 7))
        return 0;
    char path[512];
    if (m->plen >= sizeof path)
        return 0;
    memcpy(path, m->path, m->plen);
    path[m->plen] = 0;
    if (CFG.agent_path[0] && !strcmp(path, CFG.agent_path))
        return 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    char magic[4] = {0};
    ssize_t n = read(fd, magic, 4);
    close(fd);
    return n == 4 && !memcmp(magic, "\177ELF", 4) && fresh_rx(pc, end);
}

static void table_put(const struct ualdbg_patch *e, uint32_t *index)
{
    struct ualdbg_patch *t = table();
    if (!t)
        return;
    uint32_t i = G.hdr->patches_used;
    if (i >= G.hdr->patch_capacity)
        return;
    t[i] = *e;
    __atomic_store_n(&G.hdr->patches_used, i + 1, __ATOMIC_RELEASE);
    if (index)
        *index = i;
}

static void refuse(struct ualdbg_site *s, uint64_t pc, int reason)
{
    struct ualdbg_patch e;
    memset(&e, 0, sizeof e);
    e.pc = pc;
    e.traps = s->count;
    e.state = UALDBG_PATCH_REFUSED;
    e.reason = (uint32_t)reason;
    e.site_flags = s->flags;
    table_put(&e, NULL);
    __atomic_or_fetch(&s->flags, UALDBG_SITE_UNPATCHABLE, __ATOMIC_RELEASE);
}

/* Returns the address to resume at (the trampoline's copy that runs with AC clear) with the
 * site patched, 0 when it was not (a reason written in the table, or -1: try again later). */
static int try_patch(struct ualdbg_site *s, const struct x86_insn *d, uint64_t pc, uint64_t *resume)
{
    const uint8_t *code = s->insn;
    int kind, gpr_reg;
    int size = classify(d, code, &kind, &gpr_reg);
    if (size < 2 || (gpr_reg && d->reg == 4))
        return UALDBG_PATCH_R_KIND;
    struct ualdbg_patch *tab = table();
    if (!tab || G.hdr->patches_used >= G.hdr->patch_capacity || nplist >= MAX_PATCHES)
        return UALDBG_PATCH_R_FULL;
    int threads = thread_count();
    int alone = threads == 1;
    uint32_t len = d->len;
    struct x86_insn more[MAX_COPIES];
    uint8_t from[MAX_COPIES];
    int nmore = 0;
    const struct mapping *m = maps_lookup_locked(pc);
    if (!mapping_patchable(m, pc, pc + len))
        return UALDBG_PATCH_R_MAPPING;
    if (len < 5) {
        if (!alone)
            return UALDBG_PATCH_R_THREADS;
        if (TS.in_program_handler)
            return -1; /* the handler may have interrupted the code right after the instruction */
        uint32_t ret_end = 0; /* a ret moved along: nothing after it runs (the padding after it) */
        while (len < 5) {
            const uint8_t *c = (const uint8_t *)(uintptr_t)(pc + len);
            struct x86_insn x;
            if (nmore >= MAX_COPIES || pc + len >= m->end ||
                ualdbg_x86_decode(c, m->end - (pc + len) < 15 ? m->end - (pc + len) : 15, &x) != 0)
                return UALDBG_PATCH_R_SHORT;
            if (ret_end) {
                int nop = !x.vex && ((x.map == 0 && (x.opcode == 0x90 || x.opcode == 0xcc)) ||
                                     (x.map == 1 && x.opcode == 0x1f && ((x.modrm >> 3) & 7) == 0));
                if (!nop)
                    return UALDBG_PATCH_R_SHORT;
                len += x.len;
                continue;
            }
            if (!x.vex && x.map == 0 && (x.opcode == 0xc3 || x.opcode == 0xc2)) {
                more[nmore] = x; /* ret returns from the trampoline as from here */
                from[nmore++] = (uint8_t)len;
                len += x.len;
                ret_end = len;
                continue;
            }
            int lea = !x.vex && x.map == 0 && x.opcode == 0x8d;
            int sys = !x.vex && x.map == 1 && (x.opcode == 0x05 || x.opcode == 0x07 || x.opcode == 0x0b ||
                                               x.opcode == 0x34 || x.opcode == 0x35);
            if (x.flow != X86_FLOW_NEXT || x.string || (x.mem && !lea) || uses_stack(&x) || sys || x.vex == 4 ||
                (!x.vex && x.map == 0 && x.opcode == 0xf4))
                return UALDBG_PATCH_R_SHORT; /* it would need a counter too, or cannot move */
            more[nmore] = x;
            from[nmore++] = (uint8_t)len;
            len += x.len;
        }
        if (!mapping_patchable(m, pc, pc + len))
            return UALDBG_PATCH_R_SHORT;
        if (!no_branch_into(pc, len))
            return UALDBG_PATCH_R_TARGET;
        if (ret_end && ret_end < len && !padding_only(pc + ret_end, pc + len))
            return UALDBG_PATCH_R_SHORT;
    } else if (!alone && (pc & 15) > 11) {
        return UALDBG_PATCH_R_STRADDLE;
    }

    uint64_t **ptr;
    uint8_t *slot = pslot_alloc(pc, &ptr);
    if (!slot)
        return UALDBG_PATCH_R_REACH;
    struct pslot *h = (struct pslot *)(void *)slot;
    memset(slot, 0xcc, PSLOT);
    memset(h, 0, sizeof *h);
    int ok = 1;
    uint8_t mask = (uint8_t)(size >= 16 ? 7 : size - 1);
    if (size >= 16)
        for (uint32_t i = 0; i < s->nvariants && i < UALDBG_VARIANTS; i++)
            if ((s->variants[i].key & 15) == 8)
                mask = 15; /* the hardware trapped at an address aligned to 8: it checks 16 */
    uint8_t *p = slot + HDR_SIZE;
    /* Entry: flags, rax, rcx saved below the red zone; the address tested. */
    static const uint8_t pro[] = {0x48, 0x8d, 0x64, 0x24, 0x80, /* lea -128(%rsp),%rsp */
                                  0x9c, 0x50, 0x51};            /* pushfq; push %rax; push %rcx */
    p = put(p, pro, sizeof pro);
    p = put_lea(p, pc, d, 128 + 24, &ok);
    *p++ = 0xa8; /* test $mask,%al */
    h->mask_off = (uint8_t)(p - slot);
    *p++ = mask;
    uint8_t *j1 = p;
    p = put(p, "\x0f\x84\x00\x00\x00\x00", 6); /* jz aligned */
    static const uint8_t test_ac[] = {0xf6, 0x44, 0x24, 0x12, 0x04}; /* testb $4,18(%rsp): AC in the saved flags */
    p = put(p, test_ac, sizeof test_ac);
    uint8_t *j2 = p;
    p = put(p, "\x0f\x84\x00\x00\x00\x00", 6); /* jz aligned */
    p = put(p, "\x48\x8b\x0d", 3); /* mov ptr(%rip),%rcx */
    int32_t rel = (int32_t)((int64_t)(uintptr_t)ptr - (int64_t)(uintptr_t)(p + 4));
    p = put(p, &rel, 4);
    p = put(p, "\x48\x85\xc9", 3); /* test %rcx,%rcx */
    uint8_t *j3 = p;
    p = put(p, "\x0f\x84\x00\x00\x00\x00", 6); /* jz aligned */
    /* The fault it would have been: counted. AC stays as it is (changing it costs ~60 ns a
     * time); the operand goes through a 32-byte-aligned scratch copy, a byte at a time (a byte
     * access never takes #AC). A = the aligned rsp: [A, A+32) scratch, A+32 the frame, A+40
     * the program's flags, A+48 the address. */
    static const uint8_t frame[] = {0xf0, 0x48, 0xff, 0x01,             /* lock incq (%rcx) */
                                    0x48, 0x89, 0xe1,                   /* mov %rsp,%rcx */
                                    0x48, 0x8d, 0x64, 0x24, 0xb0,       /* lea -80(%rsp),%rsp */
                                    0x48, 0x83, 0xe4, 0xe0,             /* and $-32,%rsp */
                                    0x48, 0x89, 0x4c, 0x24, 0x20,       /* mov %rcx,32(%rsp) */
                                    0x48, 0x89, 0x44, 0x24, 0x30};      /* mov %rax,48(%rsp) */
    p = put(p, frame, sizeof frame);
    if (kind != K_STORE)
        for (int k = 0; k < size; k++) {
            uint8_t ld[] = {0x0f, 0xb6, 0x48, (uint8_t)k}, st[] = {0x88, 0x4c, 0x24, (uint8_t)k};
            p = put(p, ld, 4); /* movzbl k(%rax),%ecx */
            p = put(p, st, 4); /* mov %cl,k(%rsp) */
        }
    static const uint8_t regs_back[] = {0x48, 0x8b, 0x4c, 0x24, 0x20,   /* mov 32(%rsp),%rcx */
                                        0x48, 0x8b, 0x41, 0x10,         /* mov 16(%rcx),%rax */
                                        0x48, 0x89, 0x44, 0x24, 0x28,   /* mov %rax,40(%rsp) */
                                        0x48, 0x8b, 0x41, 0x08,         /* mov 8(%rcx),%rax */
                                        0x48, 0x8b, 0x09,               /* mov (%rcx),%rcx */
                                        0xff, 0x74, 0x24, 0x28,         /* pushq 40(%rsp) */
                                        0x9d};                          /* popfq: the program's flags */
    p = put(p, regs_back, sizeof regs_back);
    uint8_t rw[16];
    int rwn = rewrite_to_rsp(d, code, rw);
    h->copy_s = (uint16_t)(p - slot);
    p = put(p, rw, (size_t)rwn);
    if (kind != K_LOAD) {
        int b = kind == K_RMW ? 24 : 16;
        if (kind == K_RMW)
            *p++ = 0x9c; /* pushfq: the flags it produced */
        p = put(p, "\x50\x51", 2); /* push %rax; push %rcx */
        uint8_t ea[] = {0x48, 0x8b, 0x44, 0x24, (uint8_t)(b + 48)}; /* mov b+48(%rsp),%rax */
        p = put(p, ea, sizeof ea);
        for (int k = 0; k < size; k++) {
            uint8_t ld[] = {0x0f, 0xb6, 0x4c, 0x24, (uint8_t)(b + k)}, st[] = {0x88, 0x48, (uint8_t)k};
            p = put(p, ld, 5); /* movzbl b+k(%rsp),%ecx */
            p = put(p, st, 3); /* mov %cl,k(%rax) */
        }
        p = put(p, "\x59\x58", 2); /* pop %rcx; pop %rax */
        if (kind == K_RMW)
            *p++ = 0x9d;
    }
    static const uint8_t leave[] = {0x48, 0x8b, 0x64, 0x24, 0x20,                   /* mov 32(%rsp),%rsp */
                                    0x48, 0x8d, 0xa4, 0x24, 0x98, 0x00, 0x00, 0x00}; /* lea 152(%rsp),%rsp */
    p = put(p, leave, sizeof leave);
    uint8_t *j4 = p;
    p = put(p, "\xe9\x00\x00\x00\x00", 5);
    /* Not a fault (aligned, or AC clear in this thread, or no counter in this process yet): the
     * instruction with the thread's own flags; the hardware traps if the test was too weak. */
    uint8_t *aligned = p;
    static const uint8_t restore[] = {0x59, 0x58, 0x9d, 0x48, 0x8d, 0xa4, 0x24, 0x80, 0x00, 0x00, 0x00};
    p = put(p, restore, sizeof restore);
    h->copy_b = (uint16_t)(p - slot);
    p = put_copy(p, pc, code, d, &ok);
    uint8_t *rest = p;
    for (int i = 0; i < nmore; i++) {
        h->copies[i].off = (uint16_t)(p - slot);
        h->copies[i].from = from[i];
        h->copies[i].len = more[i].len;
        p = put_copy(p, pc + from[i], (const uint8_t *)(uintptr_t)(pc + from[i]), &more[i], &ok);
    }
    h->ncopies = (uint8_t)nmore;
    *p++ = 0xe9;
    int64_t back = (int64_t)(pc + len) - (int64_t)(uintptr_t)(p + 4);
    if (back != (int32_t)back)
        ok = 0;
    rel = (int32_t)back;
    p = put(p, &rel, 4);
    /* The trap that made the patch resumes here (AC cleared by the handler; counted already). */
    h->copy_a = (uint16_t)(p - slot);
    p = put_copy(p, pc, code, d, &ok);
    p = put(p, SET_AC, sizeof SET_AC);
    *p++ = 0xe9;
    rel = (int32_t)(rest - (p + 4));
    p = put(p, &rel, 4);
    if (p > slot + PSLOT)
        abort(); /* cannot happen: at most ~200 + 16 * 32 + 8 * 15 bytes */
    uint8_t *jz[] = {j1, j2, j3};
    for (int i = 0; i < 3; i++) {
        rel = (int32_t)(aligned - (jz[i] + 6));
        memcpy(jz[i] + 2, &rel, 4);
    }
    rel = (int32_t)(rest - (j4 + 5));
    memcpy(j4 + 1, &rel, 4);
    int64_t jd = (int64_t)(uintptr_t)(slot + HDR_SIZE) - (int64_t)(pc + 5);
    if (!ok || jd != (int32_t)jd) {
        h->origin = 0;
        return UALDBG_PATCH_R_REACH;
    }
    uint8_t jmp[5] = {0xe9};
    rel = (int32_t)jd;
    memcpy(jmp + 1, &rel, 4);

    struct patch_priv *pv = &plist[nplist];
    memset(&pv->e, 0, sizeof pv->e);
    pv->e.pc = pc;
    pv->e.traps = s->count;
    pv->e.state = UALDBG_PATCH_ACTIVE;
    pv->e.length = len;
    pv->e.mask = mask;
    pv->e.patched_ns = now_ns();
    pv->e.trampoline = (uint64_t)(uintptr_t)(slot + HDR_SIZE);
    pv->e.site_flags = s->flags;
    uint32_t index = UINT32_MAX;
    table_put(&pv->e, &index);
    if (index == UINT32_MAX) {
        h->origin = 0;
        return UALDBG_PATCH_R_FULL;
    }
    /* Before the jump is stored: the counter (a thread that takes the jump counts from its
     * first execution) and the slot's origin (patch_is_ours: a thread that trapped at pc just
     * before the store and reads the jump there knows it as this patch, not as new code). */
    h->entry = index;
    __atomic_store_n(&h->origin, pc, __ATOMIC_RELEASE);
    __atomic_store_n(ptr, &tab[index].count, __ATOMIC_RELEASE);
    memcpy(pv->orig, (const void *)(uintptr_t)pc, sizeof pv->orig);
    int why = write_jump(pc, jmp, alone);
    if (why) {
        __atomic_store_n(ptr, NULL, __ATOMIC_RELEASE);
        h->origin = 0;
        tab[index].state = UALDBG_PATCH_REFUSED;
        tab[index].reason = (uint32_t)why;
        __atomic_or_fetch(&s->flags, UALDBG_SITE_UNPATCHABLE, __ATOMIC_RELEASE);
        return -2;
    }
    pv->pc = pc;
    pv->slot = slot;
    pv->ptr = ptr;
    nplist++;
    __atomic_or_fetch(&s->flags, UALDBG_SITE_PATCHED, __ATOMIC_RELEASE);
    *resume = (uint64_t)(uintptr_t)(slot + h->copy_a);
    return 0;
}

/* After a trap at a site that has trapped patch_after times: patch it if it can be. Returns
 * the address to resume the faulting thread at with AC clear (the trampoline's unchecked copy,
 * then the trampoline re-arms and jumps back), or 0 to resume as before. Never waits: another
 * thread patching means this one tries at its next trap. */
uint64_t patch_consider(struct ualdbg_site *s, const struct x86_insn *d, uint64_t pc)
{
    uint64_t resume = 0;
    if (__atomic_exchange_n(&patch_lock, 1, __ATOMIC_ACQUIRE))
        return 0;
    if (!(s->flags & (UALDBG_SITE_PATCHED | UALDBG_SITE_UNPATCHABLE))) {
        spin_lock(&maps_lock);
        int why = try_patch(s, d, pc, &resume);
        spin_unlock(&maps_lock);
        if (why > 0)
            refuse(s, pc, why);
    }
    __atomic_store_n(&patch_lock, 0, __ATOMIC_RELEASE);
    return resume;
}

/* A fork child with a buffer of its own (the parent's is about to be unmapped): its patched
 * sites, with their instruction and operand snapshots, and fresh counters. */
void patch_after_fork(const struct ualdbg_site *old_sites, uint32_t old_mask)
{
    patch_lock = 0;
    struct ualdbg_patch *tab = table();
    for (uint32_t i = 0; i < nplist; i++) {
        struct patch_priv *pv = &plist[i];
        const struct ualdbg_site *old = NULL;
        uint32_t h = (uint32_t)((pv->pc * 0x9e3779b97f4a7c15ull) >> 40) & old_mask;
        for (uint32_t probe = 0; probe <= old_mask; probe++) {
            const struct ualdbg_site *o = &old_sites[(h + probe) & old_mask];
            if (o->pc == pv->pc) {
                old = o;
                break;
            }
            if (!o->pc)
                break;
        }
        int created;
        struct ualdbg_site *s = site_slot(pv->pc, &created);
        if (s && created && old) {
            memcpy((char *)s + 16, (const char *)old + 16, sizeof *s - 16); /* all but pc and count */
            s->count = 0;
            __atomic_add_fetch(&G.hdr->sites_used, 1, __ATOMIC_RELAXED);
            __atomic_store_n(&s->state, UALDBG_SITE_READY, __ATOMIC_RELEASE);
        }
        struct pslot *hs = (struct pslot *)(void *)pv->slot;
        pv->e.traps = 0;
        pv->e.count = 0;
        uint32_t index = UINT32_MAX;
        table_put(&pv->e, &index);
        if (index != UINT32_MAX && tab) {
            hs->entry = index;
            __atomic_store_n(pv->ptr, &tab[index].count, __ATOMIC_RELEASE);
        }
    }
}

/* Detaching (every thread stopped): a thread inside a trampoline does not set AC again. */
void patch_disarm(void)
{
    static const uint8_t nop7[] = {0x0f, 0x1f, 0x80, 0x00, 0x00, 0x00, 0x00};
    for (int i = 0; i < nppools; i++)
        for (uint32_t k = 0; k < ppools[i].used; k++) {
            uint8_t *slot = ppools[i].base + 4096 + k * PSLOT;
            for (uint32_t j = HDR_SIZE; j + sizeof OR_AC <= PSLOT; j++)
                if (!memcmp(slot + j, OR_AC, sizeof OR_AC))
                    memcpy(slot + j + 1, nop7, sizeof nop7);
        }
}

/* Released (an injected agent leaving a process that goes on; every thread stopped; the buffer
 * is about to be unmapped): the program's code as it was, each jump replaced by the bytes it
 * replaced; the trampolines stay, inert (a thread may be inside one, or a signal frame return
 * there): they stop counting and run each instruction with the thread's own AC, then jump back
 * after the code they stood for. */
void patch_release(void)
{
    for (int i = 0; i < nppools; i++)
        memset(ppools[i].base, 0, 4096);
    for (uint32_t i = 0; i < nplist; i++)
        write_jump(plist[i].pc, plist[i].orig, 1); /* was writable once: mprotect cannot fail now */
    nplist = 0;
}
