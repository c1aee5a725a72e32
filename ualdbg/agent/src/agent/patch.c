/* patch.c - hot-site patching (issues 21, 34): a site that has trapped `patch_after` times is
 * rewritten in place to jump to a trampoline, so that later executions never trap.
 *
 * The trampoline stands for a window of code [a, b): the faulting instruction alone when it is 5
 * bytes or more (the jump fits in it), else with its neighbours, after it or before it, moved
 * along until the 5 bytes of the jump are covered (as frida-gum's relocator and Dyninst do):
 * branches rewritten to reach their targets from the trampoline, calls made to push their
 * original return address, RIP-relative operands relocated. Every instruction of the window with
 * a memory operand whose AC rule is known (access.c) gets its own block: the operand's address
 * with a LEA of the same operand, and one fault counted exactly when the trap would have happened
 * (the address has one of the low bits of its rule set AND the thread has AC set), then the
 * instruction run without trapping (through an aligned scratch copy of the operand, or with AC
 * cleared around it), each with its own counter at its own PC: adjacent unaligned sites are
 * patched together. When the test says "aligned" the instruction runs with the thread's own AC:
 * should the rule have tested too few bits the hardware still traps, the handler counts that
 * fault at the instruction's PC and widens the test. Counts never go over, never under.
 *
 * A window of more than one instruction is moved only when it is proved that nothing enters it
 * but at a (codemap.c: every branch, return and landing pad of the module, every function's
 * extent agreed by .eh_frame, the symbol table and decoding) and that no thread is inside it:
 * in a process with other threads, they are stopped first (a queued SIGBUS parks each in the
 * agent's handler, a thread asleep in a system call is left asleep and its PC read from /proc);
 * a thread stopped inside the window is moved to the same instruction in the trampoline, and a
 * signal frame that returns inside it is moved there when its handler returns (signals.c). The
 * jump is written with one atomic store when it fits an aligned 8 or 16 bytes, else with every
 * thread stopped (stopworld.c). Everything else is refused and keeps trapping; the patch table says
 * why.
 *
 * The counter lives in the shared buffer's patch table (ualdbg_agent.h), reached through a
 * pointer in a MADV_WIPEONFORK page: a forked child reads 0 there until it has a buffer of its
 * own, and its trampolines then take the trapping path, so its counts are its own.
 *
 * Calls process.c, codemap.c, stopworld.c, access.c, insn.c (the order: process.h).
 */
#include "patch.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>

#include "access.h"
#include "codemap.h"
#include "insn.h"
#include "stopworld.h"

#ifndef MADV_WIPEONFORK
#define MADV_WIPEONFORK 18
#endif

#define PPOOL_SIZE (64u << 10)
#define PPTRS (4096u / 8u)      /* counter pointers per pool (page 0) */
#define MAX_PPOOLS 1024
#define MAX_SLOTS_PER_POOL 128
#define MAX_WIN 8               /* instructions a window may hold: 5 bytes, and a window it took in */
#define MAX_CTX 128
#define MAX_COUNTED 16384
#define MAX_WINDOWS 16384
#define HDR_SIZE 1024u
#define SLOT_MAX (8u << 10)

/* ------------------------------------------------------------------------------------------ */
/* A trampoline slot: a header, then the code. */

/* How a position of the trampoline maps to the program's context at the instruction it stands
 * for (a fault there is shown to the program's handler as the instruction's). The registers the
 * trampoline saves are laid out by a frame shape: FS_NONE [rsp] rdx, [+8] rcx, [+16] rax;
 * FS_LAHF and FS_PUSHF the same 8 bytes higher, under the program's status flags (lahf + seto
 * into rax's low 16 bits, or pushfq). */
enum {
    CX_PROG = 1,   /* the program's registers; rsp + adj */
    CX_SAVED,      /* saved at [rsp] (shape in adj) */
    CX_FRAME,      /* the aligned frame: saved at F = [rsp+32] */
    CX_FRAME_REGS, /* the program's registers and flags, rsp the aligned frame: rsp from [rsp+32] */
    CX_OUT,        /* writing a result back: [rsp] rcx, [rsp+8] rax, the rest the program's; rsp + 144 */
    CX_FRAME_OUT,  /* the same from the aligned frame: F = [rsp+48] */
    CX_SAVED16,    /* rsi saved at [rsp], the rest saved above it */
};
enum { FS_NONE = 0, FS_LAHF = 1, FS_PUSHF = 2 };

static int fs_depth(int shape) { return shape == FS_NONE ? 24 : 32; }

struct pins {
    uint64_t cell;     /* where its counter pointer is (a pool's page 0); 0: not counted */
    uint16_t block;    /* the code standing for the instruction: a thread at its PC moves here */
    uint16_t copy_a;   /* it, run with AC clear, then AC set (0: none) */
    uint16_t copy_b;   /* where it runs with the thread's own AC: an #AC there is its fault */
    uint16_t mask_off; /* the test's mask immediate (0: not counted) */
    uint8_t from, len; /* its offset from the window's start, its length */
    uint8_t size;      /* the operand's AC size (0: not counted here) */
    uint8_t pad;
    uint32_t entry;    /* its patch-table index; UINT32_MAX: not counting yet */
};

/* From `lo` to the next entry's (or the code's end): ins, kind (CX_*), rsp adjust / 8. */
struct pctx {
    uint16_t lo;
    uint8_t ins_kind;
    int8_t adj8;
};

struct pslot {
    uint64_t origin;  /* a, the window's first byte; 0: not in use */
    uint16_t size;    /* bytes of the slot, header included */
    uint8_t nins, wlen;
    uint8_t nctx;
    uint8_t pad[3];
    uint8_t orig[32]; /* the window's original bytes */
    struct pins ins[MAX_WIN];
    struct pctx ctx[MAX_CTX];
};
_Static_assert(sizeof(struct pslot) <= HDR_SIZE, "slot header");

struct ppool {
    uint8_t *base; /* page 0: counter pointers (wiped on fork); then the slots */
    uint32_t used; /* bytes of slots */
    uint32_t nptrs;
    uint16_t nslots;
    uint16_t slot_off[MAX_SLOTS_PER_POOL]; /* in 64-byte units from base */
};

static struct ppool ppools[MAX_PPOOLS];
static int nppools;

/* A counted instruction, for fork children (their copy of the table) and release. */
struct counted {
    uint64_t pc;
    struct pslot *slot;
    int ins;
    uint64_t **ptr;
    struct ualdbg_patch e;
};
static struct counted clist[MAX_COUNTED];
static uint32_t nclist;

/* The windows, sorted by start. */
struct win {
    uint64_t a, b;
    struct pslot *slot;
    uint8_t orig[5]; /* the code the jump replaced: put back when an injected agent leaves */
};
static struct win wins[MAX_WINDOWS];
static uint32_t nwins;

static volatile int patch_lock;
static uint8_t patch_mt; /* the process has (had) more than one thread: counts are locked increments */

static struct ualdbg_patch *table(void)
{
    if (!G.hdr || !G.hdr->patches_offset)
        return NULL;
    return (struct ualdbg_patch *)(void *)((char *)G.hdr + G.hdr->patches_offset);
}

/* ------------------------------------------------------------------------------------------ */
/* Pools and slots: 64 KiB pools within 1 GiB of the code, mapped where the program's own mappings
 * never go when that is near enough (process.c, pool_map_near). Caller holds maps_lock and
 * patch_lock. */

static uint8_t *slot_alloc(uint64_t near, int nptrs, struct ppool **pool)
{
    struct ppool *pp = NULL;
    for (int i = 0; i < nppools && !pp; i++)
        if (ppools[i].used + SLOT_MAX <= PPOOL_SIZE - 4096 && ppools[i].nptrs + (uint32_t)nptrs <= PPTRS &&
            ppools[i].nslots < MAX_SLOTS_PER_POOL &&
            distance((uint64_t)(uintptr_t)ppools[i].base, near) < (1ll << 30) + (1ll << 29))
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
        memset(pp, 0, sizeof *pp);
        pp->base = base;
        pp->nptrs = 1; /* word 0: the "more than one thread" byte (wiped on fork: a child has one) */
        base[0] = patch_mt; /* (under patch_lock, as set_mt) */
    }
    *pool = pp;
    return pp->base + 4096 + pp->used;
}

/* The slot just written is `size` bytes (64-byte aligned): it is the pool's now. */
static void slot_commit(struct ppool *pp, uint8_t *slot, uint32_t size)
{
    size = (size + 63) & ~63u;
    pp->slot_off[pp->nslots++] = (uint16_t)((uint32_t)(slot - pp->base) / 64);
    pp->used += size;
}

static uint64_t **ptr_alloc(struct ppool *pp)
{
    return (uint64_t **)(void *)pp->base + pp->nptrs++;
}

static struct ppool *pool_of(uint64_t rip)
{
    for (int i = 0; i < nppools; i++) {
        uint64_t b = (uint64_t)(uintptr_t)ppools[i].base;
        if (rip >= b + 4096 && rip < b + PPOOL_SIZE)
            return &ppools[i];
    }
    return NULL;
}

static struct pslot *slot_of(uint64_t rip)
{
    struct ppool *pp = pool_of(rip);
    if (!pp)
        return NULL;
    uint32_t off = (uint32_t)(rip - (uint64_t)(uintptr_t)pp->base) / 64;
    for (int i = pp->nslots - 1; i >= 0; i--)
        if (pp->slot_off[i] <= off) {
            struct pslot *s = (struct pslot *)(void *)(pp->base + (uint32_t)pp->slot_off[i] * 64);
            return s->origin && rip < (uint64_t)(uintptr_t)s + s->size ? s : NULL;
        }
    return NULL;
}

static uint64_t **ptr_of(const struct pslot *s, int ins)
{
    return (uint64_t **)(uintptr_t)s->ins[ins].cell;
}

/* The process has more than one thread from now on (or may have: a count of them above 1): every
 * trampoline counts with locked increments. */
static void set_mt(void)
{
    if (patch_mt)
        return;
    patch_mt = 1;
    for (int i = 0; i < nppools; i++)
        __atomic_store_n(ppools[i].base, 1, __ATOMIC_SEQ_CST);
}

/* (pthread_create, before the thread starts: a pool made meanwhile is made under the lock.) */
void patch_threads_started(void)
{
    if (__atomic_load_n(&patch_mt, __ATOMIC_ACQUIRE))
        return;
    while (__atomic_exchange_n(&patch_lock, 1, __ATOMIC_ACQUIRE))
        sched_yield(); /* (signals open: a patcher stopping the world parks this thread) */
    set_mt();
    __atomic_store_n(&patch_lock, 0, __ATOMIC_RELEASE);
}

/* ------------------------------------------------------------------------------------------ */
/* Windows. */

/* The first window ending after addr. */
static uint32_t win_index(uint64_t addr)
{
    uint32_t lo = 0, hi = nwins;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (wins[mid].b <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static const struct win *win_holding(uint64_t addr)
{
    uint32_t i = win_index(addr);
    return i < nwins && wins[i].a <= addr ? &wins[i] : NULL;
}

static int win_overlaps(uint64_t a, uint64_t b)
{
    uint32_t i = win_index(a);
    return i < nwins && wins[i].a < b;
}

/* Every jump written, in order (an injected agent leaving puts their bytes back in reverse). */
static struct {
    uint64_t a;
    uint8_t orig[5];
} written[2 * MAX_WINDOWS];
static uint32_t nwritten;

/* Odd while wins[] changes (patch_fix_resume reads it from other threads' handlers). */
static volatile uint32_t win_seq;

static void win_change(void) { __atomic_add_fetch(&win_seq, 1, __ATOMIC_SEQ_CST); }

static void win_remove(uint64_t a)
{
    uint32_t i = win_index(a);
    if (i < nwins && wins[i].a == a) {
        win_change();
        memmove(&wins[i], &wins[i + 1], (nwins - i - 1) * sizeof wins[0]);
        nwins--;
        win_change();
    }
}

static void win_add(uint64_t a, uint64_t b, struct pslot *slot, const uint8_t orig[5])
{
    if (nwritten < sizeof written / sizeof written[0]) {
        written[nwritten].a = a;
        memcpy(written[nwritten++].orig, orig, 5);
    }
    uint32_t i = win_index(a);
    win_change();
    memmove(&wins[i + 1], &wins[i], (nwins - i) * sizeof wins[0]);
    wins[i].a = a;
    wins[i].b = b;
    wins[i].slot = slot;
    memcpy(wins[i].orig, orig, 5);
    nwins++;
    win_change();
}

/* The trampoline address standing for the original instruction at pc inside a window (0: pc is
 * not an instruction there). */
static uint64_t win_block(const struct win *w, uint64_t pc)
{
    for (int i = 0; i < w->slot->nins; i++)
        if (w->a + w->slot->ins[i].from == pc)
            return (uint64_t)(uintptr_t)w->slot + w->slot->ins[i].block;
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Emitting code. */

struct em {
    uint8_t *slot, *p, *limit;
    struct pslot *h;
    int ok;
    int ins;           /* the instruction whose code is being written, for the context table */
    const uint8_t *mt; /* the pool's "more than one thread" byte */
    int why;           /* when !ok: the refusal's reason if not UALDBG_PATCH_R_REACH */
};

static void put(struct em *e, const void *b, size_t n)
{
    if (e->p + n > e->limit) {
        e->ok = 0;
        return;
    }
    memcpy(e->p, b, n);
    e->p += n;
}

static void put1(struct em *e, uint8_t b) { put(e, &b, 1); }

static void put32(struct em *e, int32_t v) { put(e, &v, 4); }

/* A rel32 at `at` (its first byte) to `to`. */
static void fix32(struct em *e, uint8_t *at, uint64_t to)
{
    int64_t rel = (int64_t)to - (int64_t)(uintptr_t)(at + 4);
    if (rel != (int32_t)rel)
        e->ok = 0;
    int32_t v = (int32_t)rel;
    memcpy(at, &v, 4);
}

static uint64_t here(const struct em *e) { return (uint64_t)(uintptr_t)e->p; }

static void jmp_to(struct em *e, uint64_t to)
{
    put1(e, 0xe9);
    uint8_t *at = e->p;
    put32(e, 0);
    if (e->ok)
        fix32(e, at, to);
}

/* A jcc/jmp rel32 to a place not written yet: returns where its rel32 is. */
static uint8_t *jcc_fwd(struct em *e, uint8_t cc)
{
    if (cc == 0xff)
        put1(e, 0xe9);
    else
        put(e, (uint8_t[]){0x0f, (uint8_t)(0x80 | cc)}, 2);
    uint8_t *at = e->p;
    put32(e, 0);
    return e->ok ? at : NULL;
}

static void land(struct em *e, uint8_t *at)
{
    if (at && e->ok)
        fix32(e, at, here(e));
}

/* From here on, a fault at this position is shown to the program as described (CX_*). */
static void ctx(struct em *e, int kind, int adj)
{
    struct pslot *h = e->h;
    uint16_t off = (uint16_t)(e->p - e->slot);
    if (h->nctx && h->ctx[h->nctx - 1].lo == off)
        h->nctx--; /* nothing was written under the previous one */
    if (h->nctx >= MAX_CTX) {
        e->ok = 0;
        return;
    }
    /* CX_PROG: the stack pointer's adjustment / 8; the frame kinds: the frame's shape (FS_*) */
    h->ctx[h->nctx++] = (struct pctx){off, (uint8_t)(e->ins << 4 | kind), (int8_t)(kind == CX_PROG ? adj / 8 : adj)};
}

/* The instruction at `from` copied, a RIP-relative displacement relocated. RIP is the copy's end,
 * past an immediate that follows the displacement (`sbbl $-1,x(%rip)`, `movl $imm32,x(%rip)`):
 * fix32's "rel32 ends the instruction" would address the operand the immediate's size too far.
 * The copy is decoded again and must be the same instruction on the same memory, else the window
 * is refused (UALDBG_PATCH_R_RELOCATE). */
static void put_copy(struct em *e, uint64_t from, const uint8_t *code, const struct x86_insn *d)
{
    uint8_t *at = e->p;
    put(e, code, d->len);
    if (!e->ok || !d->rip_rel)
        return;
    uint64_t target = from + d->len + (uint64_t)(int64_t)d->disp;
    int64_t rel = (int64_t)target - (int64_t)(uintptr_t)(at + d->len);
    if (rel != (int32_t)rel) {
        e->ok = 0;
        return;
    }
    int32_t v = (int32_t)rel;
    memcpy(at + d->disp_off, &v, 4);
    struct x86_insn c;
    if (ualdbg_x86_decode(at, d->len, &c) != 0 || c.len != d->len || !c.rip_rel || c.imm_size != d->imm_size ||
        memcmp(at + c.imm_off, code + d->imm_off, d->imm_size) != 0 ||
        (uint64_t)(uintptr_t)at + c.len + (uint64_t)(int64_t)c.disp != target) {
        e->ok = 0;
        e->why = UALDBG_PATCH_R_RELOCATE;
    }
}

/* lea EA, %reg (rax 0, rcx 1) for the instruction's memory operand, run with rsp lowered by `adj`. */
static void put_lea(struct em *e, uint64_t pc, const struct x86_insn *d, const struct access *acc, int64_t adj, int reg)
{
    if (d->rip_rel) {
        put(e, (uint8_t[]){0x48, 0x8d, (uint8_t)(0x05 | reg << 3)}, 3);
        uint8_t *at = e->p;
        put32(e, 0);
        if (e->ok)
            fix32(e, at, pc + d->len + (uint64_t)(int64_t)d->disp);
        return;
    }
    int base = d->base, index = d->index;
    int64_t disp = (int64_t)d->disp * (d->disp_size == 1 ? acc->scale : 1) + (base == 4 ? adj : 0);
    if (disp != (int32_t)disp)
        e->ok = 0;
    uint8_t ss = d->scale == 8 ? 3 : d->scale == 4 ? 2 : d->scale == 2 ? 1 : 0;
    uint8_t idx = index >= 0 ? (uint8_t)(index & 7) : 4;
    put1(e, (uint8_t)(0x48 | (index >= 8 ? 2 : 0) | (base >= 8 ? 1 : 0)));
    put1(e, 0x8d);
    if (base < 0) {
        put1(e, (uint8_t)(0x04 | reg << 3));
        put1(e, (uint8_t)(ss << 6 | idx << 3 | 5));
    } else {
        put1(e, (uint8_t)(0x84 | reg << 3));
        put1(e, (uint8_t)(ss << 6 | idx << 3 | (base & 7)));
    }
    put32(e, (int32_t)disp);
}

/* The instruction with its memory operand replaced by (%rsp): same prefixes, opcode, ModRM.reg
 * and immediate. */
static void put_rewritten(struct em *e, const struct x86_insn *d, const uint8_t *code)
{
    uint8_t out[16];
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
    out[n++] = (uint8_t)((d->modrm & 0x38) | 0x04);      /* mod 00, rm 100: SIB */
    out[n++] = 0x24;                                      /* base rsp, no index */
    for (int i = 0; i < d->imm_size; i++)
        out[n++] = code[d->imm_off + i];
    put(e, out, (size_t)n);
}

static const uint8_t SET_AC[] = {0x48, 0x8d, 0x64, 0x24, 0x80, 0x9c, 0x81, 0x0c, 0x24, 0x00, 0x00,
                                 0x04, 0x00, 0x9d, 0x48, 0x8d, 0xa4, 0x24, 0x80, 0x00, 0x00, 0x00};
static const uint8_t OR_AC[] = {0x9c, 0x81, 0x0c, 0x24, 0x00, 0x00, 0x04, 0x00, 0x9d};

/* lea -128(%rsp),%rsp; pushfq; orl $AC,(%rsp); popfq; lea 128(%rsp),%rsp: AC set, other flags kept.
 * (Its pushfq is the only access that can fault, on the stack's guard page.) */
static void put_set_ac(struct em *e)
{
    ctx(e, CX_PROG, 128);
    put(e, SET_AC, sizeof SET_AC);
}

/* ------------------------------------------------------------------------------------------ */
/* The window's instructions. */

enum { W_COUNT = 1, W_COPY, W_JCC, W_JMP, W_CALL, W_END };

struct winsn {
    struct x86_insn d;
    uint8_t code[16];
    uint64_t pc;
    int what;
    struct access acc;
    uint64_t target;  /* W_JCC, W_JMP, W_CALL */
    struct pslot *was; /* the trampoline that stood for it (a window this one takes in), or NULL */
    int was_i;
};

struct window {
    uint64_t a, b;  /* the trampoline stands for [a, b) and jumps back to b */
    int n, k;       /* instructions; the one that trapped */
    int ends;       /* the last one ends the flow (ret, jmp, call): no jump back */
    struct winsn ins[MAX_WIN];
};

/* lahf/sahf in 64-bit mode (CPUID 8000_0001h ECX bit 0): the cheap way to keep the flags (popfq
 * costs ~9 ns here, measured; lahf, seto, add, sahf ~1 ns). */
static int have_lahf(void)
{
    static int known = -1;
    if (known < 0) {
        uint32_t a = 0x80000001u, b, c, d;
        __asm__ volatile("cpuid" : "+a"(a), "=b"(b), "=c"(c), "=d"(d));
        known = (int)(c & 1);
    }
    return known;
}

/* The registers (and the flags, unless the instruction sets them all) back from the frame at
 * rsp, rsp then 128 below the program's (past its red zone). */
static void put_unsave(struct em *e, int shape)
{
    ctx(e, CX_SAVED, shape);
    if (shape == FS_LAHF)
        put(e, (uint8_t[]){0x58, 0x04, 0x7f, 0x9e}, 4); /* pop %rax; add $0x7f,%al (OF); sahf */
    else if (shape == FS_PUSHF)
        put1(e, 0x9d); /* popfq */
    put(e, (uint8_t[]){0x5a, 0x59, 0x58}, 3); /* pop %rdx; pop %rcx; pop %rax */
    ctx(e, CX_PROG, 128);
}

/* The instruction with its memory operand replaced by disp8(%rsp). */
static void put_rewritten_at(struct em *e, const struct x86_insn *d, const uint8_t *code, int8_t disp)
{
    uint8_t *at = e->p;
    put_rewritten(e, d, code);
    if (!e->ok || !disp)
        return;
    uint8_t *modrm = at + (e->p - at) - d->imm_size - 2;
    uint8_t imm[8];
    memcpy(imm, modrm + 2, d->imm_size);
    modrm[0] |= 0x40; /* mod 01: disp8 */
    modrm[2] = (uint8_t)disp;
    e->p = modrm + 3;
    put(e, imm, d->imm_size);
}

/* SSE4.1 (pinsrq): CPUID 1 ECX bit 19. */
static int have_sse41(void)
{
    static int known = -1;
    if (known < 0) {
        uint32_t a = 1, b, c, d;
        __asm__ volatile("cpuid" : "+a"(a), "=b"(b), "=c"(c), "=d"(d));
        known = (int)((c >> 19) & 1);
    }
    return known;
}

/* A plain 16-byte load into an xmm register (movups, movupd, movdqu, lddqu; their VEX.128 forms):
 * the xmm register's number, with 16 added for a VEX form; -1 for anything else. */
static int xmm_load16(const struct x86_insn *d, const uint8_t *code, const struct access *acc)
{
    if (acc->size != 16 || acc->kind != K_LOAD || acc->method != M_SCRATCH || d->map != 1 || !have_sse41())
        return -1;
    uint8_t op = d->opcode;
    if (!d->vex)
        return ((op == 0x10 && d->rep == 0) || (op == 0x6f && d->rep == 0xf3) || (op == 0xf0 && d->rep == 0xf2)) ? d->reg
                                                                                                                  : -1;
    if (d->vex == 4)
        return -1;
    uint8_t b = d->vex == 2 ? code[d->nprefix + 1] : code[d->nprefix + 2];
    int pp = b & 3, l = (b >> 2) & 1;
    if (l || !((op == 0x10 && pp <= 1) || (op == 0x6f && pp == 2) || (op == 0xf0 && pp == 3)))
        return -1;
    return 16 + d->reg;
}

/* movq %rax,%xmmD; pinsrq $1,%rsi,%xmmD (VEX forms when the instruction was: they clear the
 * upper half of ymmD as it would). */
static void put_xmm_from_rax_rsi(struct em *e, int x)
{
    int v = x >= 16, dreg = x & 15, r = dreg >> 3;
    if (!v) {
        put(e, (uint8_t[]){0x66, (uint8_t)(0x48 | r << 2), 0x0f, 0x6e, (uint8_t)(0xc0 | (dreg & 7) << 3)}, 5);
        put(e, (uint8_t[]){0x66, (uint8_t)(0x48 | r << 2), 0x0f, 0x3a, 0x22, (uint8_t)(0xc6 | (dreg & 7) << 3), 1}, 7);
    } else {
        uint8_t rxb = (uint8_t)((!r) << 7 | 0x60);
        put(e, (uint8_t[]){0xc4, (uint8_t)(rxb | 0x01), 0xf9, 0x6e, (uint8_t)(0xc0 | (dreg & 7) << 3)}, 5);
        put(e, (uint8_t[]){0xc4, (uint8_t)(rxb | 0x03), (uint8_t)(0x81 | (~dreg & 15) << 3), 0x22,
                           (uint8_t)(0xc6 | (dreg & 7) << 3), 1}, 6);
    }
}

/* A counted block's tests, the saved registers at [rsp] and the operand's address in rax: to
 * not_counted[0..2] when the address passes the mask test (aligned), when AC is clear in this
 * thread, or when this process has no counter for the instruction yet; else on, &count in rcx. */
static void put_fault_tests(struct em *e, struct pins *pi, uint64_t **cell, uint8_t mask, uint8_t *not_counted[3])
{
    put1(e, 0xa8); /* test $mask,%al */
    pi->mask_off = (uint16_t)(e->p - e->slot);
    put1(e, mask);
    not_counted[0] = jcc_fwd(e, 0x4); /* jz aligned */
    put(e, (uint8_t[]){0x9c, 0xf6, 0x44, 0x24, 0x02, 0x04}, 6); /* pushfq; testb $4,2(%rsp): AC, now */
    put(e, (uint8_t[]){0x48, 0x8d, 0x64, 0x24, 0x08}, 5);       /* lea 8(%rsp),%rsp */
    not_counted[1] = jcc_fwd(e, 0x4);
    put(e, (uint8_t[]){0x48, 0x8b, 0x0d}, 3); /* mov cell(%rip),%rcx */
    uint8_t *at = e->p;
    put32(e, 0);
    if (e->ok)
        fix32(e, at, (uint64_t)(uintptr_t)cell);
    put(e, (uint8_t[]){0x48, 0x85, 0xc9}, 3); /* test %rcx,%rcx */
    not_counted[2] = jcc_fwd(e, 0x4);
}

/* A counted block's end. Counted (from to_toggle, or falling through): the instruction run on its
 * operand itself with AC cleared, then AC set again (copy_a). Not a fault (aligned, AC clear in
 * this thread, no counter yet: from not_counted): the instruction with the thread's own flags
 * (copy_b; the hardware traps if the test was too weak). Returns copy_a's jump to what follows
 * (copy_b falls through to it). */
static uint8_t *put_counted_tail(struct em *e, const struct winsn *w, struct pins *pi, int shape, uint8_t *to_toggle,
                                 uint8_t *const not_counted[3])
{
    land(e, to_toggle);
    put_unsave(e, shape);
    put(e, (uint8_t[]){0x9c, 0x81, 0x24, 0x24, 0xff, 0xff, 0xfb, 0xff, 0x9d}, 9); /* pushfq; andl $~AC,(%rsp); popfq */
    put(e, (uint8_t[]){0x48, 0x8d, 0xa4, 0x24, 0x80, 0x00, 0x00, 0x00}, 8);       /* lea 128(%rsp),%rsp */
    ctx(e, CX_PROG, 0);
    pi->copy_a = (uint16_t)(e->p - e->slot);
    put_copy(e, w->pc, w->code, &w->d);
    put_set_ac(e);
    uint8_t *done = jcc_fwd(e, 0xff);
    for (int i = 0; i < 3; i++)
        land(e, not_counted[i]);
    put_unsave(e, shape);
    put(e, (uint8_t[]){0x48, 0x8d, 0xa4, 0x24, 0x80, 0x00, 0x00, 0x00}, 8); /* lea 128(%rsp),%rsp */
    ctx(e, CX_PROG, 0);
    pi->copy_b = (uint16_t)(e->p - e->slot);
    put_copy(e, w->pc, w->code, &w->d);
    return done;
}

/* A counted block: the test, the count, the instruction run without trapping; then `next`.
 * `cell` is where the counter's address is (NULL: not counting yet), `mt` a byte that says the
 * process has more than one thread (the count is then a locked increment). */
static void put_counted(struct em *e, const struct winsn *w, struct pins *pi, uint64_t **cell, uint8_t mask,
                        const uint8_t *mt, uint8_t **to_next)
{
    const struct x86_insn *d = &w->d;
    const struct access *acc = &w->acc;
    int shape = acc->writes_flags ? FS_NONE : have_lahf() ? FS_LAHF : FS_PUSHF, depth = fs_depth(shape);
    int small = acc->method == M_SCRATCH && acc->size <= 8, xmm = xmm_load16(d, w->code, acc);
    ctx(e, CX_PROG, 0);
    put(e, (uint8_t[]){0x48, 0x8d, 0x64, 0x24, 0x80}, 5); /* lea -128(%rsp),%rsp */
    ctx(e, CX_PROG, 128);
    put1(e, 0x50); /* push %rax */
    ctx(e, CX_PROG, 136);
    put1(e, 0x51); /* push %rcx */
    ctx(e, CX_PROG, 144);
    put1(e, 0x52); /* push %rdx */
    put_lea(e, w->pc, d, acc, 128 + 24, 1); /* lea EA,%rcx: before lahf takes rax */
    if (shape == FS_LAHF) {
        ctx(e, CX_PROG, 152);
        put(e, (uint8_t[]){0x9f, 0x0f, 0x90, 0xc0, 0x50}, 5); /* lahf; seto %al; push %rax */
    } else if (shape == FS_PUSHF) {
        ctx(e, CX_PROG, 152);
        put1(e, 0x9c); /* pushfq */
    }
    ctx(e, CX_SAVED, shape);
    put(e, (uint8_t[]){0x48, 0x89, 0xc8}, 3); /* mov %rcx,%rax */
    uint8_t *not_counted[3];
    put_fault_tests(e, pi, cell, mask, not_counted);
    uint8_t *at;
    /* The fault it would have been: counted. One thread: a plain increment (a locked one costs
     * ~13 ns here, measured); more: locked. */
    put(e, (uint8_t[]){0x80, 0x3d}, 2); /* cmpb $0,mt(%rip) */
    at = e->p;
    put32(e, 0);
    put1(e, 0x00);
    if (e->ok)
        fix32(e, at, (uint64_t)(uintptr_t)mt - 1); /* (the rel32 is followed by the imm8) */
    put(e, (uint8_t[]){0x75, 0x05}, 2);             /* jne locked */
    put(e, (uint8_t[]){0x48, 0xff, 0x01}, 3);       /* incq (%rcx) */
    put(e, (uint8_t[]){0xeb, 0x04}, 2);             /* jmp counted */
    put(e, (uint8_t[]){0xf0, 0x48, 0xff, 0x01}, 4); /* locked: lock incq (%rcx) */
    /* counted: its cost class (issue 33), in the patch entry beside the count (%rcx is
     * &entry.count, entry + 8): whether [EA, EA + size) spans two 64-byte lines (line_splits,
     * entry + 64) and two 4 KiB pages (page_splits, entry + 72). Locked: a split costs far more
     * than the increment, and a thread started meanwhile then counts it rightly. */
    put(e, (uint8_t[]){0x48, 0x8d, 0x50, (uint8_t)(acc->size - 1)}, 4); /* lea size-1(%rax),%rdx */
    put(e, (uint8_t[]){0x48, 0x31, 0xc2}, 3);                          /* xor %rax,%rdx */
    put(e, (uint8_t[]){0x48, 0xf7, 0xc2, 0xc0, 0xff, 0xff, 0xff}, 7);  /* test $~63,%rdx */
    put(e, (uint8_t[]){0x74, 0x13}, 2);                                /* jz classed */
    put(e, (uint8_t[]){0xf0, 0x48, 0xff, 0x41, 0x38}, 5);              /* lock incq 56(%rcx) */
    put(e, (uint8_t[]){0x48, 0xf7, 0xc2, 0x00, 0xf0, 0xff, 0xff}, 7);  /* test $~4095,%rdx */
    put(e, (uint8_t[]){0x74, 0x05}, 2);                                /* jz classed */
    put(e, (uint8_t[]){0xf0, 0x48, 0xff, 0x41, 0x40}, 5);              /* lock incq 64(%rcx) */
    uint8_t *to_toggle = NULL;
    if (acc->method == M_SCRATCH) {
        /* An access that crosses a page goes the toggle way: the copies below then never fault
         * half-way (a store would be half written: the instruction's is all or nothing). */
        put(e, (uint8_t[]){0x48, 0x8d, 0x48, (uint8_t)(acc->size - 1)}, 4); /* lea size-1(%rax),%rcx */
        put(e, (uint8_t[]){0x48, 0x31, 0xc1}, 3);                          /* xor %rax,%rcx */
        put(e, (uint8_t[]){0x48, 0xc1, 0xe9, 0x0c}, 4);                    /* shr $12,%rcx */
        to_toggle = jcc_fwd(e, 0x5);                                       /* jnz toggle */
    }
    if (small) {
        /* AC stays as it is (changing it costs ~60 ns a time): the operand is read with two
         * aligned 8-byte loads (the access's own bytes' words: no other page) and shrd, and
         * put in a scratch word in the red zone the trampoline skipped, where the instruction,
         * rewritten to address it, reads or writes it. Scratch at R - depth - 8, the address at
         * R - depth - 16 (R: rsp once the registers are back). */
        int8_t scr = (int8_t)-(depth + 8);
        put(e, (uint8_t[]){0x48, 0x89, 0x44, 0x24, 0xf0}, 5); /* mov %rax,-16(%rsp) */
        if (acc->kind != K_STORE) {
            static const uint8_t compose[] = {0x48, 0x89, 0xc1,             /* mov %rax,%rcx */
                                              0x48, 0x83, 0xe0, 0xf8,       /* and $-8,%rax */
                                              0x48, 0x8b, 0x10,             /* mov (%rax),%rdx */
                                              0x48, 0x8d, 0x41, 0x00,       /* lea size-1(%rcx),%rax */
                                              0x48, 0x83, 0xe0, 0xf8,       /* and $-8,%rax */
                                              0x48, 0x8b, 0x00,             /* mov (%rax),%rax */
                                              0xc1, 0xe1, 0x03,             /* shl $3,%ecx */
                                              0x48, 0x0f, 0xad, 0xc2,       /* shrd %cl,%rax,%rdx */
                                              0x48, 0x89, 0x54, 0x24, 0xf8};/* mov %rdx,-8(%rsp) */
            uint8_t c[sizeof compose];
            memcpy(c, compose, sizeof c);
            c[13] = (uint8_t)(acc->size - 1);
            put(e, c, sizeof c);
        }
        put_unsave(e, shape);
        put_rewritten_at(e, d, w->code, scr);
        if (acc->kind != K_LOAD) {
            /* the result back, a byte at a time (a byte access never takes #AC; no flag changes) */
            put(e, (uint8_t[]){0x50, 0x51}, 2); /* push %rax; push %rcx */
            ctx(e, CX_OUT, 0);
            put(e, (uint8_t[]){0x48, 0x8b, 0x44, 0x24, (uint8_t)(int8_t)(16 - depth - 16)}, 5); /* mov EA,%rax */
            for (int k = 0; k < acc->size; k++) {
                put(e, (uint8_t[]){0x0f, 0xb6, 0x4c, 0x24, (uint8_t)(int8_t)(16 + scr + k)}, 5); /* movzbl scr+k */
                put(e, (uint8_t[]){0x88, 0x48, (uint8_t)k}, 3);                                 /* mov %cl,k(%rax) */
            }
            put(e, (uint8_t[]){0x59, 0x58}, 2); /* pop %rcx; pop %rax */
            ctx(e, CX_PROG, 128);
        }
        put(e, (uint8_t[]){0x48, 0x8d, 0xa4, 0x24, 0x80, 0x00, 0x00, 0x00}, 8); /* lea 128(%rsp),%rsp */
        *to_next = jcc_fwd(e, 0xff);
    } else if (xmm >= 0) {
        /* A 16-byte move into an xmm register: the two halves read with three aligned 8-byte
         * loads (the access's own bytes' words) and shrd, and moved into the register. */
        put1(e, 0x56); /* push %rsi */
        ctx(e, CX_SAVED16, shape);
        static const uint8_t compose[] = {0x48, 0x89, 0xc1,       /* mov %rax,%rcx */
                                          0x48, 0x83, 0xe0, 0xf8, /* and $-8,%rax */
                                          0x48, 0x8d, 0x51, 0x0f, /* lea 15(%rcx),%rdx */
                                          0x48, 0x83, 0xe2, 0xf8, /* and $-8,%rdx */
                                          0x48, 0x8b, 0x12,       /* mov (%rdx),%rdx: q2 */
                                          0x48, 0x8b, 0x70, 0x08, /* mov 8(%rax),%rsi: q1 */
                                          0x48, 0x8b, 0x00,       /* mov (%rax),%rax: q0 */
                                          0xc1, 0xe1, 0x03,       /* shl $3,%ecx */
                                          0x48, 0x0f, 0xad, 0xf0, /* shrd %cl,%rsi,%rax: low half */
                                          0x48, 0x0f, 0xad, 0xd6};/* shrd %cl,%rdx,%rsi: high half */
        put(e, compose, sizeof compose);
        put_xmm_from_rax_rsi(e, xmm);
        put1(e, 0x5e); /* pop %rsi */
        put_unsave(e, shape);
        put(e, (uint8_t[]){0x48, 0x8d, 0xa4, 0x24, 0x80, 0x00, 0x00, 0x00}, 8); /* lea 128(%rsp),%rsp */
        *to_next = jcc_fwd(e, 0xff);
    } else if (acc->method == M_SCRATCH) {
        /* 16 and 32 bytes: through a 32-byte-aligned scratch area below, a byte at a time.
         * A = the aligned rsp: [A, A+32) scratch, A+32 the frame (the saved registers), A+48 the
         * address. */
        int size = acc->size > 32 ? 32 : acc->size;
        put(e, (uint8_t[]){0x48, 0x89, 0xe1}, 3);             /* mov %rsp,%rcx */
        put(e, (uint8_t[]){0x48, 0x8d, 0x64, 0x24, 0xb0}, 5); /* lea -80(%rsp),%rsp */
        put(e, (uint8_t[]){0x48, 0x83, 0xe4, 0xe0}, 4);       /* and $-32,%rsp */
        put(e, (uint8_t[]){0x48, 0x89, 0x4c, 0x24, 0x20}, 5); /* mov %rcx,32(%rsp) */
        ctx(e, CX_FRAME, shape);
        put(e, (uint8_t[]){0x48, 0x89, 0x44, 0x24, 0x30}, 5); /* mov %rax,48(%rsp) */
        if (acc->kind != K_STORE)
            for (int k = 0; k < size; k++) {
                put(e, (uint8_t[]){0x0f, 0xb6, 0x48, (uint8_t)k}, 4); /* movzbl k(%rax),%ecx */
                put(e, (uint8_t[]){0x88, 0x4c, 0x24, (uint8_t)k}, 4); /* mov %cl,k(%rsp) */
            }
        int o = shape == FS_NONE ? 0 : 8; /* the saved registers at F + o */
        put(e, (uint8_t[]){0x48, 0x8b, 0x4c, 0x24, 0x20}, 5); /* mov 32(%rsp),%rcx: F */
        if (shape == FS_LAHF)
            put(e, (uint8_t[]){0x48, 0x8b, 0x01, 0x04, 0x7f, 0x9e}, 6); /* mov (%rcx),%rax; add $0x7f,%al; sahf */
        else if (shape == FS_PUSHF)
            put(e, (uint8_t[]){0xff, 0x31, 0x9d}, 3); /* pushq (%rcx); popfq */
        put(e, (uint8_t[]){0x48, 0x8b, 0x51, (uint8_t)o}, 4);        /* mov o(%rcx),%rdx */
        put(e, (uint8_t[]){0x48, 0x8b, 0x41, (uint8_t)(o + 16)}, 4); /* mov o+16(%rcx),%rax */
        put(e, (uint8_t[]){0x48, 0x8b, 0x49, (uint8_t)(o + 8)}, 4);  /* mov o+8(%rcx),%rcx */
        ctx(e, CX_FRAME_REGS, shape);
        put_rewritten(e, d, w->code);
        if (acc->kind != K_LOAD) {
            put(e, (uint8_t[]){0x50, 0x51}, 2); /* push %rax; push %rcx (no flag changes below) */
            ctx(e, CX_FRAME_OUT, shape);
            put(e, (uint8_t[]){0x48, 0x8b, 0x44, 0x24, 16 + 48}, 5); /* mov 64(%rsp),%rax */
            for (int k = 0; k < size; k++) {
                put(e, (uint8_t[]){0x0f, 0xb6, 0x4c, 0x24, (uint8_t)(16 + k)}, 5); /* movzbl 16+k(%rsp),%ecx */
                put(e, (uint8_t[]){0x88, 0x48, (uint8_t)k}, 3);                   /* mov %cl,k(%rax) */
            }
            put(e, (uint8_t[]){0x59, 0x58}, 2); /* pop %rcx; pop %rax */
            ctx(e, CX_FRAME_REGS, shape);
        }
        put(e, (uint8_t[]){0x48, 0x8b, 0x64, 0x24, 0x20}, 5);                           /* mov 32(%rsp),%rsp */
        put(e, (uint8_t[]){0x48, 0x8d, 0xa4, 0x24, (uint8_t)(depth + 128), 0x00, 0x00, 0x00}, 8); /* lea */
        ctx(e, CX_PROG, 0);
        *to_next = jcc_fwd(e, 0xff);
    }
    uint8_t *j4 = put_counted_tail(e, w, pi, shape, to_toggle, not_counted);
    if (!*to_next)
        *to_next = j4;
    else
        to_next[1] = j4;
}

/* Of n elements of `size` bytes from a (upwards, or downwards when `down`), how many span two
 * `g`-byte blocks (64: lines, 4096: pages). Every element is at a + k*size or a - k*size, so all
 * sit at a's offset modulo size, and where that is not 0 exactly one offset in each block spans
 * it (g - size + a % size): one element in every g / size, from the first at that offset. */
static uint64_t spanning(uint64_t a, uint64_t n, uint64_t size, int down, uint64_t g)
{
    uint64_t m = a % size, r = a % g, t = g - size + m;
    if (!m || !n)
        return 0;
    uint64_t j0 = ((down ? r - t : t - r) % g) / size, period = g / size;
    return n > j0 ? (n - 1 - j0) / period + 1 : 0;
}

/* What count_class counts for the traps of these elements (one per element, --no-patch): those
 * where either operand spans two blocks. Both misaligned, the two operands' spanning elements
 * are the same ones or never the same (one each period, at fixed positions). */
static uint64_t string_spans(uint64_t src, uint64_t dst, uint64_t n, uint64_t how, int down, uint64_t g)
{
    uint64_t size = how & 0xff;
    int use_src = (how & 0x100) && src % size, use_dst = (how & 0x200) && dst % size;
    uint64_t a = use_src ? spanning(src, n, size, down, g) : 0, b = use_dst ? spanning(dst, n, size, down, g) : 0;
    if (use_src && use_dst) {
        uint64_t ts = g - size + src % size, td = g - size + dst % size, rs = src % g, rd = dst % g;
        uint64_t js = ((down ? rs - ts : ts - rs) % g) / size, jd = ((down ? rd - td : td - rd) % g) / size;
        if (js == jd)
            return a;
    }
    return a + b;
}

/* Called by a counted string instruction's block (put_counted_string), with AC clear and the
 * program's registers saved: `count` is its patch entry's count (entry + 8), src and dst its
 * operands (rsi, rdi), n its elements (rcx with rep, else 1), `flags` the thread's (DF: downwards),
 * `how` the element's size | 0x100 when it reads at src | 0x200 when it writes at dst. Adds what
 * --no-patch would count, one fault per element (an element faults where either operand is
 * misaligned, and both stay so, moving by the size), and their cost classes (issue 33). Integer
 * code only: the program's vector registers are not saved. */
__attribute__((target("general-regs-only"), noinline, used)) static void string_count(uint64_t *count, uint64_t src,
                                                                                      uint64_t dst, uint64_t n,
                                                                                      uint64_t flags, uint64_t how)
{
    int down = (flags & 0x400) != 0;
    if (!n)
        return;
    uint64_t lines = string_spans(src, dst, n, how, down, 64), pages = string_spans(src, dst, n, how, down, 4096);
    __atomic_add_fetch(&count[0], n, __ATOMIC_RELAXED);
    if (lines)
        __atomic_add_fetch(&count[7], lines, __ATOMIC_RELAXED); /* entry + 64: line_splits */
    if (pages)
        __atomic_add_fetch(&count[8], pages, __ATOMIC_RELAXED); /* entry + 72: page_splits */
}

/* (tests/unit: string_count's counts against element-by-element ones) */
EXPORT void ualdbg_agent_test_string_count(uint64_t src, uint64_t dst, uint64_t n, uint64_t flags, uint64_t how,
                                           uint64_t out[9])
{
    memset(out, 0, 9 * sizeof out[0]);
    string_count(out, src, dst, n, flags, how);
}

/* A counted string instruction (movs, stos, lods; rep or not: access.c, M_STRING). When an operand
 * is misaligned (the test), AC is set in the thread and its counter is set up, string_count adds
 * its elements' faults; then it runs with AC clear, and AC is set again. Otherwise it runs with
 * the thread's own flags: the hardware traps its elements, counted as traps. (A thread that
 * trapped at it when it was patched is not resumed here: agent.c runs that element out of line
 * and comes back through the jump, and this block counts the rest.) */
static void put_counted_string(struct em *e, const struct winsn *w, struct pins *pi, uint64_t **cell, uint8_t mask,
                               uint8_t **to_next)
{
    const struct x86_insn *d = &w->d;
    uint8_t op = d->opcode;
    int shape = have_lahf() ? FS_LAHF : FS_PUSHF; /* (these set no flag: theirs are kept) */
    int src = op == 0xa5 || op == 0xad, dst = op != 0xad;
    ctx(e, CX_PROG, 0);
    put(e, (uint8_t[]){0x48, 0x8d, 0x64, 0x24, 0x80}, 5); /* lea -128(%rsp),%rsp */
    ctx(e, CX_PROG, 128);
    put1(e, 0x50); /* push %rax */
    ctx(e, CX_PROG, 136);
    put1(e, 0x51); /* push %rcx */
    ctx(e, CX_PROG, 144);
    put1(e, 0x52); /* push %rdx */
    ctx(e, CX_PROG, 152);
    if (shape == FS_LAHF)
        put(e, (uint8_t[]){0x9f, 0x0f, 0x90, 0xc0, 0x50}, 5); /* lahf; seto %al; push %rax */
    else
        put1(e, 0x9c); /* pushfq */
    /* (from here to the call's return a synchronous fault can only be the stack's overflow) */
    ctx(e, CX_SAVED, shape);
    if (src && dst)
        put(e, (uint8_t[]){0x48, 0x89, 0xf0, 0x48, 0x09, 0xf8}, 6); /* mov %rsi,%rax; or %rdi,%rax */
    else if (src)
        put(e, (uint8_t[]){0x48, 0x89, 0xf0}, 3); /* mov %rsi,%rax */
    else
        put(e, (uint8_t[]){0x48, 0x89, 0xf8}, 3); /* mov %rdi,%rax */
    uint8_t *not_counted[3];
    put_fault_tests(e, pi, cell, mask, not_counted);
    /* string_count(&count, rsi, rdi, n, flags, how) on a 16-byte aligned stack, AC clear */
    put(e, (uint8_t[]){0x56, 0x57, 0x41, 0x50, 0x41, 0x51, 0x41, 0x52, 0x41, 0x53}, 10); /* push rsi rdi r8-r11 */
    put(e, (uint8_t[]){0x48, 0x8b, 0x54, 0x24, 0x20}, 5); /* mov 32(%rsp),%rdx: the program's rdi */
    put(e, (uint8_t[]){0x48, 0x89, 0xcf}, 3);             /* mov %rcx,%rdi */
    if (d->rep)
        put(e, (uint8_t[]){0x48, 0x8b, 0x4c, 0x24, 0x40}, 5); /* mov 64(%rsp),%rcx: the program's rcx */
    else
        put(e, (uint8_t[]){0xb9, 0x01, 0x00, 0x00, 0x00}, 5); /* mov $1,%ecx */
    put(e, (uint8_t[]){0x9c, 0x41, 0x58}, 3); /* pushfq; pop %r8 */
    uint32_t how = (uint32_t)w->acc.size | (src ? 0x100u : 0) | (dst ? 0x200u : 0);
    put(e, (uint8_t[]){0x41, 0xb9}, 2); /* mov $how,%r9d */
    put(e, &how, 4);
    put(e, (uint8_t[]){0x9c, 0x81, 0x24, 0x24, 0xff, 0xff, 0xfb, 0xff, 0x9d}, 9); /* AC off */
    put(e, (uint8_t[]){0x48, 0x89, 0xe0, 0x48, 0x83, 0xe4, 0xf0, 0x50, 0x50}, 9); /* mov %rsp,%rax; and $-16; push x2 */
    put(e, (uint8_t[]){0x48, 0xb8}, 2); /* movabs $string_count,%rax */
    uint64_t fn = (uint64_t)(uintptr_t)&string_count;
    put(e, &fn, 8);
    put(e, (uint8_t[]){0xff, 0xd0}, 2);             /* call *%rax */
    put(e, (uint8_t[]){0x48, 0x8b, 0x24, 0x24}, 4); /* mov (%rsp),%rsp */
    put(e, (uint8_t[]){0x41, 0x5b, 0x41, 0x5a, 0x41, 0x59, 0x41, 0x58, 0x5f, 0x5e}, 10); /* pop r11-r8 rdi rsi */
    /* counted: on into the run with AC clear */
    *to_next = put_counted_tail(e, w, pi, shape, NULL, not_counted);
}

/* call target: push the original return address, then jump. The push is the call's own access
 * (the same 8 bytes at the same address: its #AC is the call's fault, and a stack overflow shows
 * at the call with the program's registers); the high half then written over it cannot fault
 * but for #AC on the same misalignment, which is not the program's. */
static void put_call(struct em *e, const struct winsn *w, struct pins *pi)
{
    uint64_t ret = w->pc + w->d.len;
    uint32_t lo = (uint32_t)ret, hi = (uint32_t)(ret >> 32);
    ctx(e, CX_PROG, 0);
    pi->copy_b = (uint16_t)(e->p - e->slot);
    put1(e, 0x68); /* push $lo (sign-extended) */
    put(e, &lo, 4);
    ctx(e, CX_PROG, 8);
    put(e, (uint8_t[]){0xc7, 0x44, 0x24, 0x04}, 4); /* movl $hi,4(%rsp) */
    put(e, &hi, 4);
    jmp_to(e, w->target);
}

/* Writes the trampoline for the window into the slot. */
static void emit_window(struct em *e, const struct window *w, uint64_t **ptrs[MAX_WIN], const uint8_t masks[MAX_WIN])
{
    struct pslot *h = e->h;
    uint8_t *pending[MAX_WIN][2] = {{0}}; /* jumps to the next block */
    for (int i = 0; i < w->n; i++) {
        const struct winsn *x = &w->ins[i];
        struct pins *pi = &h->ins[i];
        e->ins = i;
        pi->block = (uint16_t)(e->p - e->slot);
        if (i > 0) {
            land(e, pending[i - 1][0]);
            land(e, pending[i - 1][1]);
        }
        switch (x->what) {
        case W_COUNT:
            if (x->acc.method == M_STRING)
                put_counted_string(e, x, pi, ptrs[i], masks[i], pending[i]);
            else
                put_counted(e, x, pi, ptrs[i], masks[i], e->mt, pending[i]);
            break;
        case W_COPY: case W_END:
            ctx(e, CX_PROG, 0);
            pi->copy_b = (uint16_t)(e->p - e->slot);
            put_copy(e, x->pc, x->code, &x->d);
            break;
        case W_JCC: {
            ctx(e, CX_PROG, 0);
            uint8_t cc = (uint8_t)((x->d.map == 0 ? x->d.opcode : x->d.opcode) & 0x0f);
            put(e, (uint8_t[]){0x0f, (uint8_t)(0x80 | cc)}, 2);
            uint8_t *at = e->p;
            put32(e, 0);
            if (e->ok)
                fix32(e, at, x->target);
            break;
        }
        case W_JMP:
            ctx(e, CX_PROG, 0);
            jmp_to(e, x->target);
            break;
        case W_CALL:
            put_call(e, x, pi);
            break;
        }
    }
    e->ins = w->n - 1;
    land(e, pending[w->n - 1][0]);
    land(e, pending[w->n - 1][1]);
    ctx(e, CX_PROG, 0);
    if (!w->ends)
        jmp_to(e, w->b);
    /* The copies that run with AC clear and set it again (the thread that trapped resumes there,
     * and so does one stopped in an out-of-line copy of an instruction of the window). */
    for (int i = 0; i < w->n; i++) {
        const struct winsn *x = &w->ins[i];
        if (x->what != W_COPY || !(x->d.mem || x->d.string))
            continue;
        e->ins = i;
        ctx(e, CX_PROG, 0);
        h->ins[i].copy_a = (uint16_t)(e->p - e->slot);
        put_copy(e, x->pc, x->code, &x->d);
        put_set_ac(e);
        ctx(e, CX_PROG, 0);
        jmp_to(e, i + 1 < w->n ? (uint64_t)(uintptr_t)e->slot + h->ins[i + 1].block : w->b);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Planning a window. */

static int is_padding(const struct x86_insn *d)
{
    return !d->vex && ((d->map == 0 && (d->opcode == 0x90 || d->opcode == 0xcc)) ||
                       (d->map == 1 && d->opcode == 0x1f && ((d->modrm >> 3) & 7) == 0));
}

/* What the instruction at pc becomes in a trampoline (W_*), or 0 when it cannot move. */
static int relocatable(struct winsn *x)
{
    const struct x86_insn *d = &x->d;
    const uint8_t *c = x->code;
    if (d->vex == 4 && d->rip_rel)
        return 0; /* not an issue in itself, but not run on this project's machines: kept out */
    if (d->addr32 && d->rip_rel)
        return 0;
    if (!d->vex && d->map == 0) {
        uint8_t op = d->opcode;
        if ((op >= 0x70 && op <= 0x7f) || op == 0xeb || op == 0xe9 || op == 0xe8) {
            int32_t rel;
            if (d->imm_size == 1)
                rel = (int8_t)c[d->imm_off];
            else
                memcpy(&rel, c + d->imm_off, 4);
            x->target = x->pc + d->len + (uint64_t)(int64_t)rel;
            if (d->opsize16)
                return 0; /* a 16-bit branch truncates RIP */
            return op == 0xe8 ? (G.shadow_stack ? 0 : W_CALL) : op >= 0xe9 ? W_JMP : W_JCC;
        }
        if (op >= 0xe0 && op <= 0xe3)
            return 0; /* loop, jrcxz: rel8 only */
        if (op == 0xc3 || op == 0xc2 || (op == 0xff && ((d->modrm >> 3) & 7) == 4))
            return W_END; /* ret, jmp through a register or memory: copied */
        if (op == 0xff && ((d->modrm >> 3) & 7) == 2)
            return 0; /* call through memory: its return address would be the trampoline's */
        if (op == 0xcc || op == 0xcd || op == 0xce || op == 0xf1 || op == 0xf4 || op == 0xca || op == 0xcb ||
            op == 0xcf || (op == 0xc7 && d->modrm == 0xf8) || op == 0x9a || op == 0xea)
            return 0; /* int3, int, hlt, far transfers, xbegin: where they trap or go matters */
    }
    if (!d->vex && d->map == 1) {
        uint8_t op = d->opcode;
        if (op >= 0x80 && op <= 0x8f) {
            int32_t rel;
            memcpy(&rel, c + d->imm_off, 4);
            x->target = x->pc + d->len + (uint64_t)(int64_t)rel;
            return d->opsize16 ? 0 : W_JCC;
        }
        if (op == 0x05 || op == 0x07 || op == 0x34 || op == 0x35 || op == 0x0b || op == 0x01)
            return 0; /* syscall, sysret, sysenter, sysexit, ud2, system instructions */
    }
    if (d->flow != X86_FLOW_NEXT)
        return 0;
    return W_COPY;
}

static int decode_pc(uint64_t pc, uint64_t limit, struct winsn *x)
{
    size_t avail = limit - pc < 15 ? (size_t)(limit - pc) : 15;
    memset(x->code, 0, sizeof x->code);
    code_fetch(pc, x->code, avail);
    x->pc = pc;
    return ualdbg_x86_decode(x->code, avail, &x->d);
}

/* The window starting at a (an instruction of fn, at or before pc) covering at least 5 bytes and
 * pc. Returns 0, or the reason it cannot be. */
static int try_window(const struct codemap *cm, const struct code_fn *fn, uint64_t a, uint64_t pc,
                      struct window *w)
{
    memset(w, 0, sizeof *w);
    w->a = a;
    w->k = -1;
    uint64_t cur = a;
    int ended = 0;
    while (cur < a + 5 || cur <= pc) { /* the jump's 5 bytes, and the instruction that trapped */
        if (ended) {
            /* after a ret or jmp: what follows up to the jump's end must be padding, never run */
            struct winsn pad;
            if (decode_pc(cur, fn->end + 16 > cur + 15 ? cur + 15 : fn->end + 16, &pad) != 0 || !is_padding(&pad.d))
                return UALDBG_PATCH_R_NEIGHBOUR;
            cur += pad.d.len;
            continue;
        }
        if (w->n >= MAX_WIN || cur >= fn->end)
            return UALDBG_PATCH_R_NEIGHBOUR;
        struct winsn *x = &w->ins[w->n];
        if (decode_pc(cur, fn->end, x) != 0)
            return UALDBG_PATCH_R_NEIGHBOUR;
        x->what = relocatable(x);
        if (!x->what)
            return UALDBG_PATCH_R_NEIGHBOUR;
        if (x->what == W_COPY && access_of(&x->d, x->code, &x->acc))
            x->what = W_COUNT;
        if (cur == pc)
            w->k = w->n;
        if (x->what == W_CALL && cur + x->d.len < a + 5)
            return UALDBG_PATCH_R_TARGET; /* its return address would be inside the jump */
        ended = x->what == W_JMP || x->what == W_END || x->what == W_CALL;
        cur += x->d.len;
        w->n++;
    }
    w->b = cur;
    w->ends = ended;
    if (w->k < 0)
        return UALDBG_PATCH_R_NEIGHBOUR;
    /* A window already patched that starts inside this one (an adjacent site patched first) is
     * taken in: this one extends to its end, and its instructions keep their counters. */
    uint32_t wi = win_index(a);
    if (wi < nwins && wins[wi].a < a)
        return UALDBG_PATCH_R_OVERLAP; /* a is inside it */
    for (; wi < nwins && wins[wi].a < w->b; wi++) {
        const struct win *o = &wins[wi];
        if (ended)
            return UALDBG_PATCH_R_OVERLAP;
        while (cur < o->b) {
            if (w->n >= MAX_WIN)
                return UALDBG_PATCH_R_OVERLAP;
            struct winsn *x = &w->ins[w->n];
            if (decode_pc(cur, o->b, x) != 0 || !(x->what = relocatable(x)))
                return UALDBG_PATCH_R_OVERLAP;
            if (x->what == W_COPY && access_of(&x->d, x->code, &x->acc))
                x->what = W_COUNT;
            ended = x->what == W_JMP || x->what == W_END || x->what == W_CALL;
            cur += x->d.len;
            w->n++;
        }
        int boundary = cur == o->b;
        for (int i = 0; i < w->n && !boundary; i++)
            boundary = w->ins[i].pc == o->b;
        if (!boundary)
            return UALDBG_PATCH_R_OVERLAP;
        for (int i = 0; i < w->n; i++) {
            struct winsn *x = &w->ins[i];
            if (x->pc < o->a || x->pc >= o->b)
                continue;
            for (int j = 0; j < o->slot->nins && !x->was; j++)
                if (o->a + o->slot->ins[j].from == x->pc) {
                    x->was = o->slot;
                    x->was_i = j;
                }
            if (!x->was)
                return UALDBG_PATCH_R_OVERLAP; /* not the same instructions */
        }
        w->b = cur;
        w->ends = ended;
    }
    if (w->b > fn->end && !ended)
        return UALDBG_PATCH_R_EXTENT;
    /* Only the jump's 5 bytes change: code from a + 5 on is intact, and a branch, a return or a
     * thread may go on there (an instruction there traps as before and is counted so). What
     * starts inside the jump must be entered from a only. */
    if (codemap_entry_between(cm, a, a + 5))
        return UALDBG_PATCH_R_TARGET;
    uint8_t orig[32];
    if (w->b - a > sizeof orig)
        return UALDBG_PATCH_R_OVERLAP;
    code_fetch(a, orig, w->b - a);
    if (!codemap_file_matches(cm, a, orig, w->b - a))
        return UALDBG_PATCH_R_FILE;
    return 0;
}

static int codemap_reason(int why)
{
    switch (why) {
    case CODEMAP_EXTENT: return UALDBG_PATCH_R_EXTENT;
    case CODEMAP_INDIRECT: return UALDBG_PATCH_R_INDIRECT;
    case CODEMAP_FILE: return UALDBG_PATCH_R_FILE;
    default: return UALDBG_PATCH_R_CODE;
    }
}

/* The window for the site at pc. Returns 0 or a refusal reason. */
static int plan_window(uint64_t pc, const struct x86_insn *d, const uint8_t *code, struct window *w)
{
    if (d->len >= 5) {
        memset(w, 0, sizeof *w);
        w->a = pc;
        w->b = pc + d->len;
        w->n = 1;
        w->k = 0;
        w->ins[0].d = *d;
        memcpy(w->ins[0].code, code, 16);
        w->ins[0].pc = pc;
        w->ins[0].what = W_COUNT;
        access_of(d, code, &w->ins[0].acc);
        return win_overlaps(pc, pc + d->len) ? UALDBG_PATCH_R_OVERLAP : 0;
    }
    int why;
    const struct codemap *cm = codemap_of(pc, &why);
    if (why)
        return codemap_reason(why);
    struct code_fn fn;
    why = codemap_function(cm, pc, &fn);
    if (why)
        return codemap_reason(why);
    /* The instructions before pc (up to 4), from the function's start. */
    uint64_t before[4] = {0};
    int nb = 0;
    for (uint64_t a = fn.start; a < pc;) {
        struct winsn x;
        if (decode_pc(a, fn.end, &x) != 0)
            return UALDBG_PATCH_R_EXTENT;
        memmove(before + 1, before, 3 * sizeof before[0]);
        before[0] = a;
        if (nb < 4)
            nb++;
        a += x.d.len;
    }
    int first = 0;
    for (int j = -1; j < nb; j++) {
        uint64_t a = j < 0 ? pc : before[j];
        if (pc - a > 16)
            break; /* too far back: a window holds at most 32 bytes */
        int r = try_window(cm, &fn, a, pc, w);
        if (!r)
            return 0;
        if (!first)
            first = r;
    }
    return first;
}

/* A SIGTRAP from an int3 (rip just after it): when it is a jump's int3, the thread goes on at the
 * trampoline. 1 when it was. */
int patch_int3_hit(greg_t *g)
{
    uint64_t at = (uint64_t)g[REG_RIP] - 1;
    uint64_t to = world_int3_target(at);
    if (!to && patch_is_ours(at))
        to = at + 5 + (uint64_t)(int64_t)*(const int32_t *)(uintptr_t)(at + 1);
    if (!to) {
        /* the int3 of a window a later window has taken in since (its trap handled late: the
         * thread was parked on its way into this handler): the same instruction in the new
         * trampoline. Returned to at + 1 it ran the new jump's bytes (SIGSEGV, the hammer test). */
        const struct win *w = win_holding(at);
        if (w && at != w->a)
            to = win_block(w, at);
    }
    if (!to)
        return 0;
    g[REG_RIP] = (greg_t)to;
    return 1;
}

/* ------------------------------------------------------------------------------------------ */
/* Deciding. */

/* The permissions of [lo, hi) now, from a fresh read of /proc/self/maps (the agent's snapshot
 * may predate an mprotect of the program's: code it made writable is its own, never patched).
 * 1 when one private r-x mapping holds it all. Called under patch_lock (the static buffer). */
/* Linux 6.11's PROCMAP_QUERY (include/uapi/linux/fs.h; this build's headers may predate it): the
 * one mapping that holds an address, without the kernel writing out every line of the maps. */
struct procmap_query_v1 {
    uint64_t size, query_flags, query_addr, vma_start, vma_end, vma_flags, vma_page_size, vma_offset, inode;
    uint32_t dev_major, dev_minor, vma_name_size, build_id_size;
    uint64_t vma_name_addr, build_id_addr;
};
_Static_assert(sizeof(struct procmap_query_v1) == 104, "procmap_query");
#define PROCMAP_QUERY_V1 _IOWR('f', 17, struct procmap_query_v1)
enum { PQ_READ = 1, PQ_WRITE = 2, PQ_EXEC = 4, PQ_SHARED = 8 };

static int fresh_rx(uint64_t lo, uint64_t hi)
{
    static char text[1 << 20];
    static int no_query; /* the kernel has no PROCMAP_QUERY: the maps are read whole */
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    if (!no_query) {
        struct procmap_query_v1 q;
        memset(&q, 0, sizeof q);
        q.size = sizeof q;
        q.query_addr = lo;
        if (ioctl(fd, PROCMAP_QUERY_V1, &q) == 0) {
            close(fd);
            return q.vma_start <= lo && hi <= q.vma_end && (q.vma_flags & 15) == (PQ_READ | PQ_EXEC);
        }
        if (errno == ENOENT) {
            close(fd);
            return 0; /* nothing mapped there */
        }
        no_query = 1; /* ENOTTY, EINVAL: an older kernel */
    }
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

/* A refusal entry of pc in the table (the latest reason of a site that keeps trapping). */
static struct ualdbg_patch *refusal_of(uint64_t pc)
{
    struct ualdbg_patch *t = table();
    if (!t)
        return NULL;
    for (uint32_t i = G.hdr->patches_used; i-- > 0;)
        if (t[i].pc == pc && t[i].state == UALDBG_PATCH_REFUSED)
            return &t[i];
    return NULL;
}

static void refuse(struct ualdbg_site *s, uint64_t pc, int reason, int final)
{
    struct ualdbg_patch *old = refusal_of(pc);
    if (old) {
        old->reason = (uint32_t)reason;
        old->traps = s->count;
    } else {
        struct ualdbg_patch e;
        memset(&e, 0, sizeof e);
        e.pc = pc;
        e.traps = s->count;
        e.state = UALDBG_PATCH_REFUSED;
        e.reason = (uint32_t)reason;
        e.site_flags = s->flags;
        table_put(&e, NULL);
    }
    if (final)
        __atomic_or_fetch(&s->flags, UALDBG_SITE_UNPATCHABLE, __ATOMIC_RELEASE);
}

/* The site of pc, if the table has one (never made here). */
static struct ualdbg_site *site_find(uint64_t pc, const struct ualdbg_site *sites, uint32_t mask)
{
    uint32_t h = (uint32_t)((pc * 0x9e3779b97f4a7c15ull) >> 40) & mask;
    for (uint32_t probe = 0; probe <= mask; probe++) {
        const struct ualdbg_site *c = &sites[(h + probe) & mask];
        if (c->pc == pc)
            return (struct ualdbg_site *)c;
        if (!c->pc)
            break;
    }
    return NULL;
}

/* The instruction at pc now counts through its trampoline block: its table entry and its
 * pointer. Caller holds patch_lock. */
static int start_counting(struct pslot *h, int i, uint64_t traps, uint32_t site_flags)
{
    if (nclist >= MAX_COUNTED)
        return 0;
    uint64_t pc = h->origin + h->ins[i].from;
    struct counted *c = &clist[nclist];
    memset(&c->e, 0, sizeof c->e);
    c->e.pc = pc;
    c->e.traps = traps;
    c->e.state = UALDBG_PATCH_ACTIVE;
    c->e.length = h->wlen;
    c->e.mask = *((uint8_t *)h + h->ins[i].mask_off);
    c->e.patched_ns = now_ns();
    c->e.trampoline = (uint64_t)(uintptr_t)h + h->ins[i].block;
    c->e.site_flags = site_flags;
    uint32_t index = UINT32_MAX;
    table_put(&c->e, &index);
    if (index == UINT32_MAX)
        return 0;
    struct ualdbg_patch *old = refusal_of(pc);
    if (old)
        old->state = UALDBG_PATCH_EMPTY; /* it was refused before: not any more */
    c->pc = pc;
    c->slot = h;
    c->ins = i;
    c->ptr = ptr_of(h, i);
    h->ins[i].entry = index;
    nclist++;
    __atomic_store_n(c->ptr, &table()[index].count, __ATOMIC_RELEASE);
    return 1;
}

/* Returns 0 with *resume set (the trampoline's copy that runs with AC clear) when the site was
 * patched; a reason (> 0, final) when it cannot be; -reason when it may be later. */
static int try_patch(struct ualdbg_site *s, const struct x86_insn *d, uint64_t pc, uint64_t *resume)
{
    const uint8_t *code = s->insn;
    struct access acc;
    if (!access_of(d, code, &acc))
        return acc.reason;
    struct ualdbg_patch *tab = table();
    if (!tab || G.hdr->patches_used + MAX_WIN + 1 >= G.hdr->patch_capacity || nclist + MAX_WIN >= MAX_COUNTED ||
        nwins >= MAX_WINDOWS)
        return UALDBG_PATCH_R_FULL;
    const struct mapping *m = maps_lookup_locked(pc);
    if (!mapping_patchable(m, pc, pc + d->len))
        return UALDBG_PATCH_R_MAPPING;
    static struct window w;
    int why = plan_window(pc, d, code, &w);
    if (why)
        return why == UALDBG_PATCH_R_OVERLAP ? -why : why;
    m = maps_lookup_locked(pc); /* (the code map may have read the maps again: m moved) */
    if (!m || w.b - w.a > 32 || w.a < m->start || ((w.a != pc || w.b != pc + d->len) && !mapping_patchable(m, w.a, w.b)))
        return UALDBG_PATCH_R_MAPPING;

    /* The trampoline. */
    int ncount = 0;
    for (int i = 0; i < w.n; i++)
        ncount += w.ins[i].what == W_COUNT && !(w.ins[i].was && w.ins[i].was->ins[w.ins[i].was_i].cell);
    struct ppool *pp;
    uint8_t *slot = slot_alloc(pc, ncount, &pp);
    if (!slot)
        return UALDBG_PATCH_R_REACH;
    struct pslot *h = (struct pslot *)(void *)slot;
    memset(slot, 0xcc, SLOT_MAX);
    memset(h, 0, sizeof *h);
    h->nins = (uint8_t)w.n;
    h->wlen = (uint8_t)(w.b - w.a);
    code_fetch(w.a, h->orig, w.b - w.a);
    uint64_t **ptrs[MAX_WIN] = {0};
    uint8_t masks[MAX_WIN] = {0};
    int fresh[MAX_WIN] = {0};
    for (int i = 0; i < w.n; i++) {
        h->ins[i].from = (uint8_t)(w.ins[i].pc - w.a);
        h->ins[i].len = w.ins[i].d.len;
        h->ins[i].entry = UINT32_MAX;
        if (w.ins[i].what != W_COUNT)
            continue;
        const struct pins *was = w.ins[i].was ? &w.ins[i].was->ins[w.ins[i].was_i] : NULL;
        if (was && was->cell) {
            /* taken in from a window patched before: the same counter, the test as it is now */
            ptrs[i] = (uint64_t **)(uintptr_t)was->cell;
            h->ins[i].cell = was->cell;
            h->ins[i].entry = was->entry;
            h->ins[i].size = was->size;
            masks[i] = *((const uint8_t *)w.ins[i].was + was->mask_off);
            continue;
        }
        ptrs[i] = ptr_alloc(pp);
        h->ins[i].cell = (uint64_t)(uintptr_t)ptrs[i];
        fresh[i] = 1;
        *ptrs[i] = NULL;
        int size = w.ins[i].acc.size;
        h->ins[i].size = (uint8_t)size;
        masks[i] = (uint8_t)(size >= 16 ? 7 : size - 1);
        if (size >= 16 && i == w.k)
            for (uint32_t v = 0; v < s->nvariants && v < UALDBG_VARIANTS; v++)
                if ((s->variants[v].key & 15) == 8)
                    masks[i] = 15; /* the hardware trapped at an address aligned to 8: it checks 16 */
    }
    struct em e = {slot, slot + HDR_SIZE, slot + SLOT_MAX, h, 1, 0, pp->base};
    emit_window(&e, &w, ptrs, masks);
    int64_t jd = (int64_t)(uintptr_t)(slot + HDR_SIZE) - (int64_t)(w.a + 5);
    if (!e.ok || jd != (int32_t)jd)
        return e.why ? e.why : UALDBG_PATCH_R_REACH; /* the slot is not committed: the next one reuses it */
    h->size = (uint16_t)(e.p - slot);
    slot_commit(pp, slot, h->size);
    uint8_t jmp[5] = {0xe9};
    int32_t rel = (int32_t)jd;
    memcpy(jmp + 1, &rel, 4);

    /* The counters: the site that trapped, and every other instruction of the window that is a
     * site already (adjacent unaligned sites, patched together); the others count from their
     * first traps in the trampoline (patch_trapped). Set before the jump is stored: a thread that
     * takes the jump counts from its first execution. */
    uint32_t nclist_before = nclist;
    /* The slot's origin before the jump (patch_is_ours: a thread that trapped at a just before the
     * store and reads the jump there knows it as this patch, not as new code). */
    __atomic_store_n(&h->origin, w.a, __ATOMIC_RELEASE);
    for (int i = 0; i < w.n; i++) {
        if (w.ins[i].what != W_COUNT || h->ins[i].entry != UINT32_MAX)
            continue;
        struct ualdbg_site *o = i == w.k ? s : site_find(w.ins[i].pc, G.sites, G.site_mask);
        if (o && o != s && (__atomic_load_n(&o->state, __ATOMIC_ACQUIRE) != UALDBG_SITE_READY ||
                            o->count < CFG.patch_after || (o->flags & UALDBG_SITE_SHADOW)))
            o = NULL; /* counts from its own traps in the trampoline (patch_trapped) */
        if (o && !start_counting(h, i, o->count, o->flags)) {
            why = UALDBG_PATCH_R_FULL;
            goto undo;
        }
    }
    uint8_t orig5[5];
    code_fetch(w.a, orig5, 5);

    int threads = thread_count();
    if (threads != 1)
        set_mt();
    int single = w.n == 1 && w.a == pc;
    int how = threads == 1 ? W_ANYHOW : W_ATOMIC;
    int stopped = 0;
    if (how != W_ANYHOW && (!single || !atomic_fit(w.a))) {
        int all_parked, int3 = world_can_int3(); /* (it asks for the agent's SIGTRAP action) */
        spin_unlock(&maps_lock); /* a thread in the handler may need it before it can stop */
        why = world_stop(w.a, &all_parked);
        spin_lock(&maps_lock);
        if (why)
            goto undo;
        stopped = 1;
        how = all_parked ? W_ANYHOW : int3 ? W_INT3 : W_ATOMIC;
    }
    /* Copies out of line that jump back to an instruction under the jump go to its block of the
     * trampoline from now on, before the jump is written: a thread not parked (asleep at a PC
     * outside the window when the world stopped, awake since) that finishes such a copy while the
     * bytes change lands in the trampoline, never in the jump's bytes. (The trampoline is whole
     * and its counters set: the block is the same instruction.) Undone if the write fails. */
    for (int k = 0; k < w.n; k++)
        if (w.ins[k].pc > w.a && w.ins[k].pc < w.a + 5)
            world_redirect_outofline(w.ins[k].pc, (uint64_t)(uintptr_t)slot + h->ins[k].block);
    why = code_write(w.a, jmp, how, (uint64_t)(uintptr_t)slot + HDR_SIZE);
    for (int k = 0; why && k < w.n; k++)
        if (w.ins[k].pc > w.a && w.ins[k].pc < w.a + 5)
            world_redirect_outofline((uint64_t)(uintptr_t)slot + h->ins[k].block, w.ins[k].pc);
    for (int i = 0; stopped && !why && i < world_parked(); i++) {
        /* a parked thread inside the jump's bytes, or at the start of an out-of-line copy of one
         * of the window's instructions, goes on at the same instruction in the trampoline */
        uint64_t rip, ool;
        world_where(i, &rip, &ool);
        for (int k = 0; k < w.n; k++)
            if (rip > w.a && rip < w.a + 5 && w.ins[k].pc == rip)
                world_move(i, (uint64_t)(uintptr_t)slot + h->ins[k].block);
            else if (ool >= w.a && ool < w.b && w.ins[k].pc == ool && h->ins[k].copy_a &&
                     !(w.ins[k].d.string && w.ins[k].d.rep))
                world_move(i, (uint64_t)(uintptr_t)slot + h->ins[k].copy_a);
            /* (a rep string instruction's copy out of line runs one element and comes back through
             * the jump, or the redirect above: its block goes on with the rest, counted) */
    }
    if (!why) {
        /* Known as a window before any thread runs again: a thread whose handler resumes it inside
         * the jump's bytes (patch_fix_resume: a step's SIGTRAP frame under a parked thread's stop
         * request, decided before the jump was written) is sent to the trampoline from its first
         * instruction on. Registered after the release, such a thread ran the jump's bytes
         * (SIGSEGV, SIGBUS: the hammer test under load). */
        code_patched(w.a, orig5, 5);
        for (int i = 0; i < w.n; i++)
            if (w.ins[i].was) {
                win_remove(w.ins[i].was->origin); /* taken in */
                for (uint32_t c = 0; c < nclist; c++)
                    if (clist[c].slot == w.ins[i].was && clist[c].ins == w.ins[i].was_i)
                        clist[c].slot = h, clist[c].ins = i;
            }
        win_add(w.a, w.b, h, orig5);
    }
    if (stopped)
        world_release();
    if (why)
        goto undo;
    for (int i = 0; i < w.n; i++)
        if (h->ins[i].entry != UINT32_MAX) {
            struct ualdbg_site *o = i == w.k ? s : site_find(w.a + h->ins[i].from, G.sites, G.site_mask);
            if (o)
                __atomic_or_fetch(&o->flags, UALDBG_SITE_PATCHED, __ATOMIC_RELEASE);
        }
    /* A string instruction's trap counted one element: the rest are counted by its block, which
     * the thread reaches through the jump after that element out of line (agent.c). */
    *resume = w.ins[w.k].acc.method == M_STRING ? 0 : (uint64_t)(uintptr_t)slot + h->ins[w.k].copy_a;
    return 0;
undo:
    for (int i = 0; i < w.n; i++)
        if (fresh[i] && h->ins[i].entry != UINT32_MAX) {
            __atomic_store_n(ptr_of(h, i), NULL, __ATOMIC_RELEASE);
            tab[h->ins[i].entry].state = UALDBG_PATCH_EMPTY;
            h->ins[i].entry = UINT32_MAX;
        }
    nclist = nclist_before;
    h->origin = 0;
    return why == UALDBG_PATCH_R_THREADS ? -why : why;
}

/* A refusal that may not last (threads could not be stopped, an overlapping patch) is tried again
 * 64 traps later, 32 times, then at twice the traps each time. A small table of the sites waiting
 * (a full table: tried at every trap, which only costs the attempt). */
#define RETRY_SLOTS 1024
static struct {
    uint64_t pc, next;
    uint32_t tries;
} retry[RETRY_SLOTS];

static uint32_t retry_slot(uint64_t pc)
{
    uint32_t h = (uint32_t)((pc * 0x9e3779b97f4a7c15ull) >> 54) & (RETRY_SLOTS - 1);
    for (uint32_t k = 0; k < RETRY_SLOTS; k++) {
        uint32_t i = (h + k) & (RETRY_SLOTS - 1);
        if (retry[i].pc == pc || !retry[i].pc)
            return i;
    }
    return UINT32_MAX;
}

static int retry_due(uint64_t pc, uint64_t count)
{
    uint32_t i = retry_slot(pc);
    return i == UINT32_MAX || retry[i].pc != pc || count >= retry[i].next;
}

static void retry_later(uint64_t pc, uint64_t count)
{
    uint32_t i = retry_slot(pc);
    if (i == UINT32_MAX)
        return;
    retry[i].pc = pc;
    retry[i].tries++;
    retry[i].next = count + (retry[i].tries < 32 ? 64 : count);
}

/* Which sites never get a patch attempt, and why (their refusal is written once). */
static int never(uint32_t flags)
{
    if (flags & UALDBG_SITE_REP)
        return UALDBG_PATCH_R_REP;
    if (flags & UALDBG_SITE_EMULATED)
        return UALDBG_PATCH_R_TRANSFER;
    if (flags & UALDBG_SITE_STEPPED)
        return UALDBG_PATCH_R_STEPPED;
    return 0;
}

/* After a trap at a site that has trapped patch_after times or more: patch it if it can be.
 * Returns the address to resume the faulting thread at with AC clear (the trampoline's unchecked
 * copy, then the trampoline re-arms and goes on), or 0 to resume as before. Never waits: another
 * thread patching means this one tries at a later trap; so does a refusal that may not last
 * (threads inside, an overlapping patch), at the site's trap counts that are powers of two. */
uint64_t patch_consider(struct ualdbg_site *s, const struct x86_insn *d, uint64_t pc)
{
    uint64_t resume = 0;
    uint32_t flags = __atomic_load_n(&s->flags, __ATOMIC_ACQUIRE);
    if (flags & (UALDBG_SITE_PATCHED | UALDBG_SITE_UNPATCHABLE | UALDBG_SITE_SHADOW))
        return 0;
    if (!retry_due(pc, s->count))
        return 0;
    if (__atomic_exchange_n(&patch_lock, 1, __ATOMIC_ACQUIRE))
        return 0;
    if (!(s->flags & (UALDBG_SITE_PATCHED | UALDBG_SITE_UNPATCHABLE))) {
        int why = never(flags);
        if (!why && !s->insn_len)
            why = UALDBG_PATCH_R_STEPPED;
        if (!why) {
            spin_lock(&maps_lock);
            why = try_patch(s, d, pc, &resume);
            spin_unlock(&maps_lock);
        }
        if (why > 0) {
            refuse(s, pc, why, 1);
        } else if (why < 0) {
            refuse(s, pc, -why, 0);
            retry_later(pc, s->count);
        }
    }
    __atomic_store_n(&patch_lock, 0, __ATOMIC_RELEASE);
    return resume;
}

/* ------------------------------------------------------------------------------------------ */
/* Faults inside trampolines. */

static int ins_at(const struct pslot *h, uint64_t off, int which)
{
    for (int i = 0; i < h->nins; i++) {
        uint16_t at = which == 0 ? h->ins[i].copy_b : h->ins[i].copy_a;
        if (at && at == off)
            return i;
    }
    return -1;
}

/* An alignment fault at rip: 0 when rip is in no trampoline; 1 when it is the fault of the
 * instruction the trampoline runs there with the thread's AC (*origin, its original bytes and
 * length: count it there); 2 when it is a fault of the trampoline's own code (the stack pointer
 * misaligned: not the program's, resume it and count nothing). */
int patch_ac_fault(uint64_t rip, uint64_t *origin, uint8_t code[16], uint32_t *len)
{
    struct pslot *h = slot_of(rip);
    if (!h)
        return 0;
    int i = ins_at(h, rip - (uint64_t)(uintptr_t)h, 0);
    if (i < 0)
        return 2;
    *origin = h->origin + h->ins[i].from;
    memset(code, 0, 16);
    size_t n = (size_t)h->wlen - h->ins[i].from;
    memcpy(code, h->orig + h->ins[i].from, n < 16 ? n : 16);
    *len = h->ins[i].len;
    return 1;
}

/* The instruction at rip's copy trapped, and was counted at its origin (whose site is
 * `origin_site`): the test widens when it said "aligned" with a counter set up (the rule tested
 * too few bits); an instruction that was not counting yet starts now that its site has trapped
 * patch_after times (its sizes and direction known from its traps' snapshots). */
void patch_trapped(uint64_t rip, uint64_t ea, const struct ualdbg_site *origin_site)
{
    struct pslot *h = slot_of(rip);
    int i = h ? ins_at(h, rip - (uint64_t)(uintptr_t)h, 0) : -1;
    if (i < 0 || !h->ins[i].mask_off)
        return;
    uint64_t **ptr = ptr_of(h, i);
    if (ptr && *ptr) {
        volatile uint8_t *imm = (volatile uint8_t *)h + h->ins[i].mask_off;
        uint8_t m = *imm;
        while (!(ea & m) && m < h->ins[i].size - 1 && m < 0x7f)
            m = (uint8_t)(m << 1 | 1);
        *imm = m;
        struct ualdbg_patch *t = table();
        if (t && h->ins[i].entry < G.hdr->patch_capacity)
            t[h->ins[i].entry].mask = m;
        return;
    }
    if (ptr && h->ins[i].entry == UINT32_MAX && origin_site && origin_site->count >= CFG.patch_after &&
        !__atomic_exchange_n(&patch_lock, 1, __ATOMIC_ACQUIRE)) {
        if (h->ins[i].entry == UINT32_MAX && start_counting(h, i, origin_site->count, origin_site->flags))
            __atomic_or_fetch((uint32_t *)&origin_site->flags, UALDBG_SITE_PATCHED, __ATOMIC_RELEASE);
        __atomic_store_n(&patch_lock, 0, __ATOMIC_RELEASE);
    }
}

/* The registers (and flags) a counted block saved at f, in the shape it saved them. */
static void saved_regs(greg_t *g, const uint64_t *f, int shape)
{
    int o = shape == FS_NONE ? 0 : 1;
    g[REG_RDX] = (greg_t)f[o], g[REG_RCX] = (greg_t)f[o + 1], g[REG_RAX] = (greg_t)f[o + 2];
    if (shape == FS_PUSHF) {
        g[REG_EFL] = (greg_t)f[0];
    } else if (shape == FS_LAHF) { /* lahf: SF ZF AF PF CF in bits 8-15; seto: OF in bit 0 */
        uint64_t ah = (f[0] >> 8) & 0xd5, of = (f[0] & 0xff) ? 0x800 : 0;
        g[REG_EFL] = (greg_t)(((uint64_t)g[REG_EFL] & ~0x8d5ull) | ah | of);
    }
}

/* A synchronous signal raised inside a trampoline, for the program's handler: the context as it
 * was at the original instruction (its PC, its registers, its stack pointer). *at_insn: 1 when it
 * ran with AC cleared by the agent (the thread had AC set: shown set), 2 with the thread's own
 * flags, 3 elsewhere in the trampoline; 0 and nothing changed when rip is in no trampoline. */
int patch_fault_context(greg_t *g, int *at_insn)
{
    uint64_t rip = (uint64_t)g[REG_RIP];
    struct pslot *h = slot_of(rip);
    *at_insn = 0;
    if (!h)
        return 0;
    uint64_t off = rip - (uint64_t)(uintptr_t)h;
    int i;
    if ((i = ins_at(h, off, 0)) >= 0) {
        *at_insn = 2;
    } else if ((i = ins_at(h, off, 1)) >= 0) {
        *at_insn = 1;
    } else {
        *at_insn = 3;
        const struct pctx *c = NULL;
        for (int k = 0; k < h->nctx && h->ctx[k].lo <= off; k++)
            c = &h->ctx[k];
        if (!c)
            return 0;
        i = c->ins_kind >> 4;
        int64_t adj = (int64_t)c->adj8 * 8;
        int shape = c->adj8, depth = fs_depth(shape);
        uint64_t rsp = (uint64_t)g[REG_RSP];
        const uint64_t *f = (const uint64_t *)(uintptr_t)rsp;
        switch (c->ins_kind & 15) {
        case CX_PROG:
            g[REG_RSP] = (greg_t)(rsp + (uint64_t)adj);
            break;
        case CX_SAVED:
            saved_regs(g, f, shape);
            g[REG_RSP] = (greg_t)(rsp + (uint64_t)depth + 128);
            break;
        case CX_FRAME: case CX_FRAME_REGS: {
            uint64_t fr = f[4];
            if ((c->ins_kind & 15) == CX_FRAME)
                saved_regs(g, (const uint64_t *)(uintptr_t)fr, shape);
            g[REG_RSP] = (greg_t)(fr + (uint64_t)depth + 128);
            break;
        }
        case CX_SAVED16:
            g[REG_RSI] = (greg_t)f[0];
            saved_regs(g, f + 1, shape);
            g[REG_RSP] = (greg_t)(rsp + 8 + (uint64_t)depth + 128);
            break;
        case CX_OUT:
            g[REG_RCX] = (greg_t)f[0], g[REG_RAX] = (greg_t)f[1];
            g[REG_RSP] = (greg_t)(rsp + 16 + 128);
            break;
        case CX_FRAME_OUT:
            g[REG_RCX] = (greg_t)f[0], g[REG_RAX] = (greg_t)f[1];
            g[REG_RSP] = (greg_t)(f[6] + (uint64_t)depth + 128);
            break;
        }
    }
    g[REG_RIP] = (greg_t)(h->origin + h->ins[i].from);
    if (*at_insn == 1)
        g[REG_EFL] |= (greg_t)AC_BIT;
    return 1;
}

/* A context about to be resumed (a signal handler returning, its sigreturn next): at an
 * instruction inside a window, where the code is the jump's now, it goes on at that instruction's
 * block of the trampoline. Every signal is blocked from here until the sigreturn (which restores
 * the context's own mask): no jump is written between this look and the resume, since a patcher
 * waits for this thread to park; one written before it (while this thread sat in a frame under a
 * parked one, or in the program's handler) is known here. */
int patch_fix_resume(greg_t *g)
{
    uint64_t all = ~0ull;
    raw_sigprocmask(SIG_SETMASK, &all, NULL);
    uint64_t rip = (uint64_t)g[REG_RIP], to;
    for (;;) {
        uint32_t seq = __atomic_load_n(&win_seq, __ATOMIC_ACQUIRE);
        if (seq & 1) {
            sched_yield();
            continue;
        }
        const struct win *w = win_holding(rip);
        to = w && rip != w->a ? win_block(w, rip) : 0;
        if (__atomic_load_n(&win_seq, __ATOMIC_ACQUIRE) == seq)
            break;
    }
    if (!to)
        return 0;
    g[REG_RIP] = (greg_t)to;
    return 1;
}

/* The patched PC of a fault at one of a trampoline's copies, for trampolines.c. */
uint64_t patch_origin(uint64_t rip, int *at_insn)
{
    struct pslot *h = slot_of(rip);
    int k = 0, i = -1;
    if (h) {
        uint64_t off = rip - (uint64_t)(uintptr_t)h;
        if ((i = ins_at(h, off, 1)) >= 0)
            k = 1;
        else if ((i = ins_at(h, off, 0)) >= 0)
            k = 2;
    }
    if (at_insn)
        *at_insn = k;
    return k ? h->origin + h->ins[i].from : 0;
}

/* Whether the code at pc is this agent's jump to the trampoline of a window starting at pc (and
 * not new code loaded at that address since, or code the program rewrote). */
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

/* A single step that ended at a trampoline's entry executed the patch's jump in place of the
 * instruction it replaced (the thread trapped there, was counted, and was resumed in place):
 * where to resume it, the first instruction's copy that runs with AC clear and sets it again; 0
 * if rip is no trampoline's entry. */
uint64_t patch_stepped_in(uint64_t rip)
{
    struct pslot *s = slot_of(rip);
    return s && rip == (uint64_t)(uintptr_t)s + HDR_SIZE && s->ins[0].copy_a ? (uint64_t)(uintptr_t)s + s->ins[0].copy_a
                                                                            : 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Fork, detach. */

/* A fork child with a buffer of its own (the parent's is about to be unmapped): its counting
 * instructions, with their sites' instruction and operand snapshots, and fresh counters. */
void patch_after_fork(const struct ualdbg_site *old_sites, uint32_t old_mask)
{
    patch_lock = 0;
    patch_mt = 0; /* one thread: the pools' bytes were wiped with their page */
    memset(retry, 0, sizeof retry);
    world_after_fork();
    struct ualdbg_patch *tab = table();
    for (uint32_t i = 0; i < nclist; i++) {
        struct counted *c = &clist[i];
        const struct ualdbg_site *old = site_find(c->pc, old_sites, old_mask);
        int created;
        struct ualdbg_site *s = site_slot(c->pc, &created);
        if (s && created && old) {
            memcpy((char *)s + 16, (const char *)old + 16, sizeof *s - 16); /* all but pc and count */
            s->count = 0;
            s->line_splits = s->page_splits = s->unclassed = 0; /* the parent's, as its count */
            __atomic_add_fetch(&G.hdr->sites_used, 1, __ATOMIC_RELAXED);
            __atomic_store_n(&s->state, UALDBG_SITE_READY, __ATOMIC_RELEASE);
        }
        c->e.traps = 0;
        c->e.count = 0;
        c->e.line_splits = c->e.page_splits = 0;
        uint32_t index = UINT32_MAX;
        table_put(&c->e, &index);
        if (index != UINT32_MAX && tab) {
            c->slot->ins[c->ins].entry = index;
            __atomic_store_n(c->ptr, &tab[index].count, __ATOMIC_RELEASE);
        }
    }
}

/* Detaching (every thread stopped): a thread inside a trampoline does not set AC again. */
void patch_disarm(void)
{
    static const uint8_t nop7[] = {0x0f, 0x1f, 0x80, 0x00, 0x00, 0x00, 0x00};
    for (int i = 0; i < nppools; i++)
        for (int k = 0; k < ppools[i].nslots; k++) {
            struct pslot *h = (struct pslot *)(void *)(ppools[i].base + (uint32_t)ppools[i].slot_off[k] * 64);
            uint8_t *code = (uint8_t *)h;
            for (uint32_t j = HDR_SIZE; j + sizeof OR_AC <= h->size; j++)
                if (!memcmp(code + j, OR_AC, sizeof OR_AC))
                    memcpy(code + j + 1, nop7, sizeof nop7);
        }
}

/* Orphaned (agent.c: its ualdbg died; the other threads run): no counter any more (each cell's
 * address cleared with one store: a trampoline then runs the instruction with the thread's own
 * AC, and a thread that still has AC traps there once and has it cleared), and `or_off` takes the
 * AC-setting instruction out of each trampoline's code. The jumps stay until a later release. */
void patch_orphan(void (*or_off)(uint8_t *code, size_t n))
{
    int n = __atomic_load_n(&nppools, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n; i++) {
        uint64_t *cells = (uint64_t *)(void *)ppools[i].base;
        for (uint32_t k = 1; k < ppools[i].nptrs && k < PPTRS; k++) /* (word 0: the threads byte) */
            __atomic_store_n(&cells[k], 0, __ATOMIC_RELEASE);
        for (int k = 0; k < ppools[i].nslots; k++) {
            struct pslot *h = (struct pslot *)(void *)(ppools[i].base + (uint32_t)ppools[i].slot_off[k] * 64);
            if (h->size > HDR_SIZE)
                or_off((uint8_t *)h + HDR_SIZE, h->size - HDR_SIZE);
        }
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
    while (nwritten > 0) {
        nwritten--;
        code_write(written[nwritten].a, written[nwritten].orig, W_ANYHOW, 0); /* (was writable once) */
    }
    win_change();
    nwins = 0;
    win_change();
    nclist = 0;
    codemap_forget_patches();
}
