/* agent.c - the in-process alignment-fault tracer ualdbg preloads (engine `agent`).
 *
 * It arms EFLAGS.AC at main (or in its constructor with --at start) in every thread, handles
 * SIGBUS/BUS_ADRALN in the process and resumes with ONE signal per fault: the faulting
 * instruction runs once out of line with AC clear, from a per-PC trampoline that sets AC again
 * and jumps back (RIP-relative operands relocated; a rep string instruction does one element
 * per trap; call/jmp through memory and ret are emulated; anything else is single-stepped).
 * Every trap is counted exactly per PC in a shared-memory buffer (ualdbg_agent.h) that ualdbg
 * reads live and after exit; in-scope faults also go to a bounded ring of records with the
 * registers the decoder needs. Out-of-scope string routines (libc's are unaligned by design)
 * cost one trap per call, not per access: the agent disarms until they return.
 *
 * This file calls the other C files and none of them calls it (their order: process.h).
 */
#include "process.h"

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <link.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>

#include "access.h"
#include "cfi.h"
#include "codemap.h"
#include "insn.h"
#include "patch.h"
#include "signals.h"
#include "stopworld.h"
#include "trampolines.h"
#include "wrappers.h"

#ifndef MADV_WIPEONFORK
#define MADV_WIPEONFORK 18
#endif
#ifndef HWCAP2_FSGSBASE
#define HWCAP2_FSGSBASE (1 << 1)
#endif
#define ARCH_GET_FS 0x1003
#define ARCH_GET_GS 0x1004

#define SITE_CAPACITY 16384u
#define MAX_RANGES 256
#define PATCH_CAPACITY 4096u

/* Called from entry.S and by this file before their definitions. */
HIDDEN void on_sigbus_c(int sig, siginfo_t *si, void *ctx);
HIDDEN void on_sigtrap_c(int sig, siginfo_t *si, void *ctx);
HIDDEN void agent_new_process(int follow, int in_handler);
HIDDEN void strip_own_environment(void);

_Static_assert(sizeof(struct ualdbg_header) <= UALDBG_HEADER_SIZE, "header");
_Static_assert(offsetof(struct ualdbg_header, exe) == 208, "header layout");
_Static_assert(offsetof(struct ualdbg_header, note) == 1744, "header layout");
_Static_assert(offsetof(struct ualdbg_header, patches_offset) == 2256, "header layout");
_Static_assert(offsetof(struct ualdbg_header, step_tids) == 2280 && offsetof(struct ualdbg_header, step_pcs) == 2408, "header layout");
_Static_assert(offsetof(struct ualdbg_header, blind_ns) == 3584, "header layout");
_Static_assert(offsetof(struct ualdbg_header, blind_now) == 3644, "header layout");
_Static_assert(sizeof(struct ualdbg_patch) == UALDBG_PATCH_SIZE, "patch layout");
_Static_assert(sizeof(struct ualdbg_site) == UALDBG_SITE_SIZE, "site layout");
_Static_assert(offsetof(struct ualdbg_site, variants) == 64, "site layout");
_Static_assert(offsetof(struct ualdbg_site, line_splits) == 640, "site layout");
_Static_assert(offsetof(struct ualdbg_site, unclassed) == 656, "site layout");
_Static_assert(offsetof(struct ualdbg_patch, line_splits) == 64, "patch layout");
_Static_assert(sizeof(struct ualdbg_record) == UALDBG_RECORD_SIZE, "record layout");
_Static_assert(offsetof(struct ualdbg_record, regs) == 40, "record layout");

/* ------------------------------------------------------------------------------------------ */
/* Scope: the same rule as ualdbg.symbols.maps (ModuleMap.is_system, Scope.includes). */

static int all_of(const char *s, size_t n, const char *set)
{
    for (size_t i = 0; i < n; i++)
        if (!strchr(set, s[i]))
            return 0;
    return 1;
}

/* ^(ld-linux[^/]*\.so[.\d]*|ld\.so[.\d]*|ld64\.so[.\d]*|ld-musl-[^/]*\.so[.\d]*)$ */
HIDDEN int is_loader_name(const char *name, size_t n)
{
    static const char digits[] = ".0123456789";
    if (n >= 5 && !memcmp(name, "ld.so", 5))
        return all_of(name + 5, n - 5, digits);
    if (n >= 7 && !memcmp(name, "ld64.so", 7))
        return all_of(name + 7, n - 7, digits);
    size_t pre = (n >= 8 && !memcmp(name, "ld-linux", 8)) ? 8 : (n >= 8 && !memcmp(name, "ld-musl-", 8)) ? 8 : 0;
    if (!pre)
        return 0;
    for (size_t k = pre; k + 3 <= n; k++)
        if (!memcmp(name + k, ".so", 3) && all_of(name + k + 3, n - k - 3, digits))
            return 1;
    return 0;
}

static const char *const SYSTEM_DIRS[] = {"/lib/", "/lib32/", "/lib64/", "/libx32/", "/usr/lib/",
                                          "/usr/lib32/", "/usr/lib64/", "/usr/libx32/", "/usr/libexec/"};

/* Whether the module at `path` (as /proc/PID/maps names it) is the system's. */
EXPORT int ualdbg_agent_is_system_path(const char *path, size_t n)
{
    if (n && path[0] == '[')
        return 1;
    static const char deleted[] = " (deleted)";
    size_t dl = sizeof deleted - 1;
    if (n > dl && !memcmp(path + n - dl, deleted, dl))
        n -= dl;
    const char *base = path;
    for (size_t i = 0; i < n; i++)
        if (path[i] == '/')
            base = path + i + 1;
    if (is_loader_name(base, n - (size_t)(base - path)))
        return 1;
    for (size_t i = 0; i < sizeof SYSTEM_DIRS / sizeof *SYSTEM_DIRS; i++) {
        size_t l = strlen(SYSTEM_DIRS[i]);
        if (n >= l && !memcmp(path, SYSTEM_DIRS[i], l))
            return 1;
    }
    return 0;
}

static int path_is(const struct mapping *m, const char *s)
{
    size_t l = strlen(s);
    return l && m->plen == l && !memcmp(m->path, s, l);
}

static int in_scope(const struct mapping *m)
{
    if (CFG.all_modules || !m || (m->plen == 0) || (m->path[0] != '/' && m->path[0] != '['))
        return 1; /* no module: counted, as Scope.includes(None) does */
    const char *base = m->path;
    for (size_t i = 0; i < m->plen; i++)
        if (m->path[i] == '/')
            base = m->path + i + 1;
    size_t bl = m->plen - (size_t)(base - m->path);
    for (int i = 0; i < CFG.nmodules; i++) {
        size_t l = strlen(CFG.modules[i]);
        if ((l == bl && !memcmp(base, CFG.modules[i], l)) || path_is(m, CFG.modules[i]))
            return 1;
    }
    if (path_is(m, G.exe))
        return 1;
    if (path_is(m, G.interp))
        return 0;
    if (CFG.agent_path[0] && path_is(m, CFG.agent_path))
        return 0;
    return !ualdbg_agent_is_system_path(m->path, m->plen);
}

/* ------------------------------------------------------------------------------------------ */
/* Out-of-scope string routines: disarmed until they return. Found at start-up as the
 * functions (FDE ranges) the dynamic linker binds these names to; they never call back into
 * the program, never unwind, never change signal masks. */

struct range {
    uint64_t start, end;
    const void *eh_frame_hdr;
};
static struct range ranges[MAX_RANGES];
static int nranges;

static const char *const STRING_ROUTINES[] = {
    "memcpy", "memmove", "mempcpy", "memset", "memcmp", "bcmp", "memchr", "memrchr", "rawmemchr",
    "strlen", "strnlen", "strcmp", "strncmp", "strchr", "strchrnul", "strrchr", "strcpy", "stpcpy",
    "strncpy", "stpncpy", "strcat", "strncat", "strspn", "strcspn", "strpbrk", "strstr", "memmem",
    "wcslen", "wcsnlen", "wmemchr", "wmemset", "wmemcmp", "wcscmp", "wcsncmp", "wcschr", "wcsrchr",
    "wcscpy", "wcpcpy", "wcsncpy", "wcscat", "__memcpy_chk", "__memmove_chk", "__memset_chk",
    "__mempcpy_chk", "__strcpy_chk", "__stpcpy_chk", "__strcat_chk", "__strncpy_chk", "__stpncpy_chk",
    "__strncat_chk", "__wmemset_chk", "bzero", "explicit_bzero", "__explicit_bzero_chk",
};

#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35))
#define HAVE_DL_FIND_OBJECT 1
#endif

static void ranges_init(void)
{
#ifdef HAVE_DL_FIND_OBJECT
    int (*find)(void *, struct dl_find_object *) = (int (*)(void *, struct dl_find_object *))dlsym(RTLD_DEFAULT, "_dl_find_object");
    if (!find)
        return;
    for (size_t i = 0; i < sizeof STRING_ROUTINES / sizeof *STRING_ROUTINES && nranges < MAX_RANGES; i++) {
        void *fn = dlsym(RTLD_NEXT, STRING_ROUTINES[i]);
        struct dl_find_object dlfo;
        if (!fn || find(fn, &dlfo) != 0 || !dlfo.dlfo_eh_frame)
            continue;
        struct cfi_rule rule;
        ualdbg_cfi_lookup(dlfo.dlfo_eh_frame, (uint64_t)(uintptr_t)fn, &rule);
        if (rule.end <= rule.start || (uint64_t)(uintptr_t)fn < rule.start || (uint64_t)(uintptr_t)fn >= rule.end)
            continue;
        int dup = 0;
        for (int k = 0; k < nranges; k++)
            if (ranges[k].start == rule.start)
                dup = 1;
        if (!dup)
            ranges[nranges++] = (struct range){rule.start, rule.end, dlfo.dlfo_eh_frame};
    }
#endif
}

static const struct range *range_of(uint64_t pc)
{
    for (int i = 0; i < nranges; i++)
        if (pc >= ranges[i].start && pc < ranges[i].end)
            return &ranges[i];
    return NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* Trampolines: per-PC code that runs the faulting instruction with AC clear, then sets AC
 * and jumps back, written into the slots of trampolines.c. */

static uint8_t *emit(uint8_t *p, const void *bytes, size_t n)
{
    memcpy(p, bytes, n);
    return p + n;
}
static uint8_t *emit_set_ac(uint8_t *p)
{
    /* lea -128(%rsp),%rsp (skip the red zone); pushfq; orl $AC,(%rsp); popfq; lea 128(%rsp),%rsp */
    static const uint8_t code[] = {0x48, 0x8d, 0x64, 0x24, 0x80, 0x9c, 0x81, 0x0c, 0x24, 0x00, 0x00,
                                   0x04, 0x00, 0x9d, 0x48, 0x8d, 0xa4, 0x24, 0x80, 0x00, 0x00, 0x00};
    return emit(p, code, sizeof code);
}
/* jmp *lit(%rip) through an 8-byte literal kept aligned at the end of the slot: the jump runs
 * with AC set, and a misaligned literal would fault. `lit` is 0 or 1 (two literals a slot). */
static uint8_t *emit_jmp_abs(uint8_t *p, uint8_t *slot, int lit, uint64_t to)
{
    uint8_t *where = slot + TRAMP_SLOT - 16 + 8 * lit;
    memcpy(where, &to, 8);
    int32_t rel = (int32_t)(where - (p + 6));
    p[0] = 0xff;
    p[1] = 0x25;
    memcpy(p + 2, &rel, 4);
    return p + 6;
}

/* Builds the out-of-line copy. Returns the code address or 0 when it cannot. */
static uint64_t build_trampoline(uint64_t pc, const uint8_t *code, const struct x86_insn *d)
{
    uint64_t next = pc + d->len;
    uint64_t target = 0;
    if (d->rip_rel) {
        if (d->addr32)
            return 0;
        target = next + (uint64_t)(int64_t)d->disp;
    }
    uint8_t *slot = tramp_alloc(target);
    if (!slot)
        return 0;
    memcpy(slot, &pc, 8);
    uint8_t *p = slot + 8, *insn_at = p;
    if (d->string && d->rep) {
        /* One element, then: rcx -= 1; AC on; done if rcx == 0 (or the repe/repne condition
         * ends it); else back to the instruction for the next element. */
        for (int i = 0; i < d->len; i++)
            if (i >= d->nprefix || (code[i] != 0xf2 && code[i] != 0xf3))
                *p++ = code[i];
        static const uint8_t dec_rcx[] = {0x48, 0x8d, 0x49, 0xff};       /* lea -1(%rcx),%rcx */
        static const uint8_t dec_ecx[] = {0x67, 0x48, 0x8d, 0x49, 0xff}; /* lea -1(%ecx),%rcx */
        p = d->addr32 ? emit(p, dec_ecx, sizeof dec_ecx) : emit(p, dec_rcx, sizeof dec_rcx);
        p = emit_set_ac(p);
        int cond = (d->opcode == 0xa6 || d->opcode == 0xa7 || d->opcode == 0xae || d->opcode == 0xaf);
        uint8_t *jrcxz = p;
        if (d->addr32)
            *p++ = 0x67;
        *p++ = 0xe3;
        *p++ = 0;
        uint8_t *jcc = NULL;
        if (cond) {
            jcc = p;
            *p++ = d->rep == 0xf3 ? 0x75 : 0x74; /* repe: stop on ZF=0 (jne); repne: on ZF=1 (je) */
            *p++ = 0;
        }
        p = emit_jmp_abs(p, slot, 0, pc);
        uint8_t *done = p;
        p = emit_jmp_abs(p, slot, 1, next);
        uint8_t *jrcxz_next = jrcxz + (d->addr32 ? 3 : 2);
        jrcxz[d->addr32 ? 2 : 1] = (uint8_t)(done - jrcxz_next);
        if (jcc)
            jcc[1] = (uint8_t)(done - (jcc + 2));
    } else {
        p = emit(p, code, d->len);
        if (d->rip_rel) {
            int64_t nd = (int64_t)target - (int64_t)(uintptr_t)(insn_at + d->len);
            if (nd != (int32_t)nd)
                return 0;
            int32_t v = (int32_t)nd;
            memcpy(insn_at + d->disp_off, &v, 4);
        }
        p = emit_set_ac(p);
        p = emit_jmp_abs(p, slot, 1, next);
    }
    if (p > slot + TRAMP_SLOT - 16)
        abort(); /* cannot happen: at most 15 + 5 + 22 + 3 + 2 + 12 bytes of code */
    return (uint64_t)(uintptr_t)insn_at;
}

/* ------------------------------------------------------------------------------------------ */
/* Registers. */

static const int GREG_OF[16] = {REG_RAX, REG_RCX, REG_RDX, REG_RBX, REG_RSP, REG_RBP, REG_RSI, REG_RDI,
                                REG_R8,  REG_R9,  REG_R10, REG_R11, REG_R12, REG_R13, REG_R14, REG_R15};

static inline uint64_t reg(const greg_t *g, int x86) { return (uint64_t)g[GREG_OF[x86]]; }

static uint64_t seg_base(int seg)
{
    uint64_t v = 0;
    if (seg == 0x64) {
        if (G.have_fsgsbase)
            __asm__ volatile("rdfsbase %0" : "=r"(v));
        else
            raw_syscall4(SYS_arch_prctl, ARCH_GET_FS, (long)&v, 0, 0);
    } else if (seg == 0x65) {
        if (G.have_fsgsbase)
            __asm__ volatile("rdgsbase %0" : "=r"(v));
        else
            raw_syscall4(SYS_arch_prctl, ARCH_GET_GS, (long)&v, 0, 0);
    }
    return v;
}

static uint64_t effective_address(const struct x86_insn *d, const greg_t *g, uint64_t pc, uint64_t segb)
{
    uint64_t ea = (uint64_t)((int64_t)d->disp * (d->disp_size == 1 && d->disp8_scale > 1 ? d->disp8_scale : 1));
    if (d->base == X86_RIP)
        ea += pc + d->len;
    else if (d->base >= 0)
        ea += reg(g, d->base);
    if (d->index >= 0)
        ea += reg(g, d->index) * d->scale;
    if (d->addr32)
        ea &= 0xffffffffu;
    return ea + segb;
}

/* The low bits of every address the instruction may use: faults with the same key fault on
 * the same operand, with the same size and direction. */
static uint64_t alignment_key(const struct x86_insn *d, const greg_t *g, uint64_t pc, uint64_t segb)
{
    uint64_t k = 0;
    if (d->mem) {
        k |= effective_address(d, g, pc, segb) & 15;
        if (d->map == 1 && (d->opcode == 0xa3 || d->opcode == 0xab || d->opcode == 0xb3 || d->opcode == 0xbb))
            k |= ((reg(g, d->reg) >> 3) & 15) << 20; /* bt* m, r: the bit offset moves the address */
    }
    if (d->string)
        k |= (reg(g, 6) & 15) << 4 | (reg(g, 7) & 15) << 8;
    if (uses_stack(d))
        k |= (reg(g, 4) & 15) << 12 | (reg(g, 5) & 15) << 16;
    return k | 1ull << 63;
}

/* Issue 33: whether [ea, ea + size) spans two 64-byte lines (bit 0) and two 4 KiB pages (bit 1). */
static int spans(uint64_t ea, int size)
{
    uint64_t last = ea + (uint64_t)size - 1;
    return size > 1 && (ea >> 6) != (last >> 6) ? 1 | ((ea >> 12) != (last >> 12)) << 1 : 0;
}

/* A trap's cost class, counted at its site: whether an access of the instruction spans two lines
 * or two pages (the reader decodes whether it is locked). The operands the agent can size: a
 * ModRM operand whose AC rule access.c knows, the stack slot of a push, pop, call or ret, the
 * elements of a string instruction. Anything else is counted as unclassed. */
static void count_class(struct ualdbg_site *s, const struct x86_insn *d, const greg_t *g, uint64_t pc, uint64_t segb)
{
    int how = 0, known = 0;
    if (d->string) {
        uint8_t op = d->opcode;
        int size = !(op & 1) ? 1 : d->w ? 8 : d->opsize16 ? 2 : 4;
        int src = op == 0xa4 || op == 0xa5 || op == 0xa6 || op == 0xa7 || op == 0xac || op == 0xad;
        int dst = op != 0xac && op != 0xad;
        uint64_t mask = d->addr32 ? 0xffffffffu : ~0ull;
        known = !d->vex && d->map == 0 && op >= 0xa4 && op <= 0xaf;
        if (known && src)
            how |= spans((reg(g, 6) & mask) + segb, size);
        if (known && dst)
            how |= spans(reg(g, 7) & mask, size);
    } else if (uses_stack(d)) {
        uint8_t op = d->opcode;
        int pushes = d->map == 0 ? ((op >= 0x50 && op <= 0x57) || op == 0x68 || op == 0x6a || op == 0x9c || op == 0xe8 ||
                                    (op == 0xff && ((d->modrm >> 3) & 7) != 4))
                                 : (op == 0xa0 || op == 0xa8);
        known = !(d->map == 0 && (op == 0xc8 || op == 0xc9 || op == 0xca || op == 0xcb || op == 0xcf)) && !d->opsize16;
        if (known)
            how |= spans(reg(g, 4) - (pushes ? 8 : 0), 8);
        if (known && d->mem) /* push/call through memory: the operand too */
            how |= spans(effective_address(d, g, pc, segb), 8);
    } else if (d->mem) {
        struct access a;
        const uint8_t *code = s->insn;
        if (access_of(d, code, &a)) {
            known = 1;
            how = spans(effective_address(d, g, pc, segb), a.size);
        } else if (d->flow == X86_FLOW_CALL_RM || d->flow == X86_FLOW_JMP_RM) {
            known = 1;
            how = spans(effective_address(d, g, pc, segb), 8);
        }
    }
    if (!known)
        __atomic_add_fetch(&s->unclassed, 1, __ATOMIC_RELAXED);
    if (how & 1)
        __atomic_add_fetch(&s->line_splits, 1, __ATOMIC_RELAXED);
    if (how & 2)
        __atomic_add_fetch(&s->page_splits, 1, __ATOMIC_RELAXED);
}

static void snapshot_regs(struct ualdbg_regs *r, const greg_t *g, uint64_t segb)
{
    for (int i = 0; i < 16; i++)
        r->gpr[i] = reg(g, i);
    r->seg_base = segb;
}

/* ------------------------------------------------------------------------------------------ */
/* Sites: the per-PC table. */

/* Each site's decoded instruction, process-local (the shared table keeps only its bytes). */
static struct x86_insn site_insn[SITE_CAPACITY];

static int code_matches(const struct ualdbg_site *s, uint64_t pc)
{
    const volatile uint8_t *code = (const volatile uint8_t *)(uintptr_t)pc;
    for (uint32_t i = 0; i < s->insn_len; i++)
        if (code[i] != s->insn[i] && !(i == 0 && code[0] == 0xcc))
            return 0;
    /* (An int3 where the instruction starts is a debugger's breakpoint, written there after the
     * instruction faulted: gdb steps over the SIGBUS it passes by one. An int3 takes no #AC.) */
    return 1;
}

/* Decide how to resume from faults at this PC and whether they count. Runs once per PC. `orig`:
 * the instruction's bytes when they are not at pc any more (moved to a patch trampoline). */
static void site_build_from(struct ualdbg_site *s, uint64_t pc, const uint8_t *orig)
{
    uint8_t code[16] = {0};
    size_t avail = 15;
    uint32_t flags = 0;
    spin_lock(&maps_lock);
    const struct mapping *m = maps_lookup_locked(pc);
    if (m && m->end - pc < avail)
        avail = (size_t)(m->end - pc);
    memcpy(code, orig ? orig : (const uint8_t *)(uintptr_t)pc, avail);
    if (in_scope(m))
        flags |= UALDBG_SITE_IN_SCOPE;
    struct x86_insn d;
    int ok = ualdbg_x86_decode(code, avail, &d) == 0;
    if (ok)
        d.disp8_scale = (uint8_t)access_disp8_scale(&d, code); /* the fault's address, right */
    site_insn[s - G.sites] = d;
    s->insn_len = ok ? d.len : 0;
    memcpy(s->insn, code, sizeof s->insn); /* all of it: the reader decodes even what this cannot */
    s->trampoline = 0;
    if (!ok) {
        flags |= UALDBG_SITE_STEPPED;
    } else if (orig) {
        /* its copy in the trampoline runs out of line (a SHADOW site); this site only counts */
    } else if (d.flow == X86_FLOW_NEXT) {
        uint64_t t = build_trampoline(pc, code, &d);
        if (t) {
            s->trampoline = t;
            struct access a; /* (movs, stos and lods count their elements in a patch: access.c) */
            flags |= UALDBG_SITE_TRAMPOLINE | (d.string && d.rep && !access_of(&d, code, &a) ? UALDBG_SITE_REP : 0);
        } else {
            flags |= UALDBG_SITE_STEPPED;
        }
    } else if (d.flow == X86_FLOW_OTHER || d.addr32 || d.opsize16 || G.shadow_stack) {
        /* with a shadow stack, an emulated call or ret would desynchronise it */
        flags |= UALDBG_SITE_STEPPED;
    } else {
        flags |= UALDBG_SITE_EMULATED;
    }
    if (!(flags & UALDBG_SITE_IN_SCOPE) && !CFG.noskip) {
        const struct range *r = range_of(pc);
        struct cfi_rule rule;
        if (r && ualdbg_cfi_lookup(r->eh_frame_hdr, pc, &rule) && rule.ok && rule.cfa_reg >= 0 &&
            rule.cfa_off == (int16_t)rule.cfa_off && rule.ra_off == (int16_t)rule.ra_off) {
            s->cfa_reg = rule.cfa_reg;
            s->cfa_off = (int16_t)rule.cfa_off;
            s->ra_off = (int16_t)rule.ra_off;
            flags |= UALDBG_SITE_SKIP;
        }
    }
    spin_unlock(&maps_lock);
    if (flags & UALDBG_SITE_STEPPED)
        ensure_sigtrap();
    s->flags = flags;
    __atomic_add_fetch(&G.hdr->sites_used, 1, __ATOMIC_RELAXED);
    __atomic_store_n(&s->state, UALDBG_SITE_READY, __ATOMIC_RELEASE);
}

static void site_build(struct ualdbg_site *s, uint64_t pc) { site_build_from(s, pc, NULL); }

static void add_variant(struct ualdbg_site *s, uint64_t key, const greg_t *g, uint64_t segb)
{
    uint32_t n = __atomic_load_n(&s->nvariants, __ATOMIC_ACQUIRE);
    for (uint32_t i = 0; i < n && i < UALDBG_VARIANTS; i++)
        if (s->variants[i].key == key)
            return;
    while (n < UALDBG_VARIANTS) {
        if (__atomic_compare_exchange_n(&s->nvariants, &n, n + 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
            snapshot_regs(&s->variants[n].regs, g, segb);
            __atomic_store_n(&s->variants[n].key, key, __ATOMIC_RELEASE);
            return;
        }
    }
}

static pid_t my_tid(void)
{
    if (TS.tid_gen != G.fork_gen + 1 || !TS.tid) {
        TS.tid = raw_gettid();
        TS.tid_gen = G.fork_gen + 1;
    }
    return TS.tid;
}

/* A slot's seq while a thread writes it: the writer's seq with this bit (readers take it for no
 * record: it matches no sequence number). */
#define RECORD_BUSY (1ull << 63)

/* Whether this thread may write record `seq` into slot r: it claims the slot from an older record
 * (or none). Threads that share a slot are record_capacity faults apart: one preempted between
 * taking its number and writing could otherwise write its older record over the newer one that
 * another thread wrote meanwhile, and the ring lost its newest record (8 threads, a ring of 500,
 * under load: 499 records). A newer record there, or being written: this one is out of the
 * ring's window already, and is not written. An older one being written: it is waited for (its
 * thread is preempted mid-write: a bounded wait, then the slot is taken anyway). */
static int claim_record(struct ualdbg_record *r, uint64_t seq)
{
    for (long spins = 0;; spins++) {
        uint64_t cur = __atomic_load_n(&r->seq, __ATOMIC_ACQUIRE);
        if ((cur & ~RECORD_BUSY) >= seq)
            return 0;
        if ((cur & RECORD_BUSY) && spins < 100000) {
            if (spins > 64)
                sched_yield();
            continue;
        }
        if (__atomic_compare_exchange_n(&r->seq, &cur, seq | RECORD_BUSY, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            return 1;
    }
}

static void add_record(uint64_t pc, const greg_t *g, uint64_t segb, uint32_t flags)
{
    uint64_t seq = __atomic_add_fetch(&G.hdr->head, 1, __ATOMIC_ACQ_REL);
    uint32_t cap = G.hdr->record_capacity;
    struct ualdbg_record *r = &G.records[(seq - 1) % cap];
    if (!claim_record(r, seq))
        return;
    __atomic_thread_fence(__ATOMIC_RELEASE);
    r->time_ns = now_ns();
    r->pc = pc;
    r->pid = (uint32_t)G.pid;
    r->tid = (uint32_t)my_tid();
    r->cpu = sched_getcpu();
    r->flags = flags;
    snapshot_regs(&r->regs, g, segb);
    __atomic_store_n(&r->seq, seq, __ATOMIC_RELEASE);
}

/* ------------------------------------------------------------------------------------------ */
/* Resuming. */

static int looks_like_return_address(uint64_t ra)
{
    const struct mapping *m = maps_find(ra);
    if (!m || !m->exec || ra < m->start + 7)
        return 0;
    const uint8_t *p = (const uint8_t *)(uintptr_t)ra;
    if (p[-5] == 0xe8)
        return 1; /* call rel32 */
    for (int n = 2; n <= 7; n++) /* call r/m64: FF /2 with up to a SIB and disp32 */
        if (p[-n] == 0xff && ((p[-n + 1] >> 3) & 7) == 2)
            return 1;
    return 0;
}

/* Disarm until the routine returns: swap its return address for ualdbg_skip_return. */
static int skip_routine(const struct ualdbg_site *s, greg_t *g)
{
    if (TS.skip_n >= SKIP_DEPTH) {
        memmove(TS.skip_slot, TS.skip_slot + 1, (SKIP_DEPTH - 1) * sizeof TS.skip_slot[0]);
        memmove(TS.skip_ra, TS.skip_ra + 1, (SKIP_DEPTH - 1) * sizeof TS.skip_ra[0]);
        TS.skip_n--;
    }
    uint64_t slot = reg(g, s->cfa_reg) + (uint64_t)(int64_t)s->cfa_off + (uint64_t)(int64_t)s->ra_off;
    if (slot & 7 || slot < reg(g, 4))
        return 0;
    uint64_t ra;
    memcpy(&ra, (const void *)(uintptr_t)slot, 8);
    if (ra == (uint64_t)(uintptr_t)ualdbg_skip_return)
        return 0;
    spin_lock(&maps_lock);
    int plausible = looks_like_return_address(ra);
    spin_unlock(&maps_lock);
    if (!plausible)
        return 0;
    TS.skip_slot[TS.skip_n] = slot;
    TS.skip_ra[TS.skip_n] = ra;
    TS.skip_n++;
    uint64_t t = (uint64_t)(uintptr_t)ualdbg_skip_return;
    memcpy((void *)(uintptr_t)slot, &t, 8);
    g[REG_EFL] &= ~(greg_t)AC_BIT; /* re-run the instruction natively, unarmed */
    __atomic_add_fetch(&G.hdr->skipped_calls, 1, __ATOMIC_RELAXED);
    return 1;
}

struct skip_pair {
    uint64_t ra, arm;
};

/* Called by ualdbg_skip_return with the routine's rsp after its ret. */
__attribute__((target("general-regs-only"), used)) HIDDEN struct skip_pair ualdbg_skip_pop(uint64_t rsp)
{
    uint64_t slot = rsp - 8;
    for (int i = TS.skip_n - 1; i >= 0; i--) {
        if (TS.skip_slot[i] == slot) {
            struct skip_pair r = {TS.skip_ra[i], 0};
            TS.skip_n = i;
            r.arm = armable() && !G.detaching && !sigbus_blocked_now();
            return r;
        }
    }
    /* Cannot happen: the slot is ours. Nothing sensible to return to. */
    abort();
}

/* How many times patch_after an out-of-scope site traps before it is patched: until then each
 * trap runs the rest of its routine unarmed, which a few traps pay for better than a patch. */
#define OUT_OF_SCOPE_PATCH_AFTER 16u

static void emulate(const struct ualdbg_site *s, greg_t *g, uint64_t pc)
{
    struct x86_insn d;
    ualdbg_x86_decode(s->insn, s->insn_len, &d);
    uint64_t next = pc + d.len, rsp = (uint64_t)g[REG_RSP], target = 0;
    switch (d.flow) {
    case X86_FLOW_CALL_REL: {
        int32_t rel;
        memcpy(&rel, s->insn + d.imm_off, 4);
        target = next + (uint64_t)(int64_t)rel;
        goto push;
    }
    case X86_FLOW_CALL_RM:
        if (d.mem)
            memcpy(&target, (const void *)(uintptr_t)effective_address(&d, g, pc, seg_base(d.seg)), 8);
        else
            target = reg(g, d.rm_reg);
    push:
        rsp -= 8;
        memcpy((void *)(uintptr_t)rsp, &next, 8);
        g[REG_RSP] = (greg_t)rsp;
        g[REG_RIP] = (greg_t)target;
        break;
    case X86_FLOW_JMP_RM:
        memcpy(&target, (const void *)(uintptr_t)effective_address(&d, g, pc, seg_base(d.seg)), 8);
        g[REG_RIP] = (greg_t)target;
        break;
    case X86_FLOW_RET: {
        uint16_t imm = 0;
        if (d.opcode == 0xc2)
            memcpy(&imm, s->insn + d.imm_off, 2);
        memcpy(&target, (const void *)(uintptr_t)rsp, 8);
        g[REG_RSP] = (greg_t)(rsp + 8 + imm);
        g[REG_RIP] = (greg_t)target;
        break;
    }
    }
    __atomic_add_fetch(&G.hdr->emulated, 1, __ATOMIC_RELAXED);
}

/* This thread's step in the header's table (step_tids), for a debugger that may take its trap;
 * its slot freed when the agent takes the trap itself. A full table: not listed (32 threads
 * stepping at once). */
static void step_listed(uint64_t pc, int on)
{
    uint32_t me = (uint32_t)my_tid(), *tids = G.hdr->step_tids;
    int slot = -1;
    for (int i = 0; i < UALDBG_STEP_SLOTS && slot < 0; i++)
        if (__atomic_load_n(&tids[i], __ATOMIC_ACQUIRE) == me)
            slot = i;
    if (!on) {
        if (slot >= 0)
            __atomic_store_n(&tids[slot], 0, __ATOMIC_RELEASE);
        return;
    }
    if (slot >= 0) {
        __atomic_store_n(&G.hdr->step_pcs[slot], pc, __ATOMIC_RELEASE);
        return;
    }
    for (int i = 0; i < UALDBG_STEP_SLOTS; i++) {
        uint32_t free_ = 0;
        if (__atomic_load_n(&tids[i], __ATOMIC_RELAXED) == 0 &&
            __atomic_compare_exchange_n(&tids[i], &free_, UINT32_MAX, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
            __atomic_store_n(&G.hdr->step_pcs[i], pc, __ATOMIC_RELEASE);
            __atomic_store_n(&tids[i], me, __ATOMIC_RELEASE); /* (the PC first: a reader takes both) */
            return;
        }
    }
}

static void single_step(greg_t *g)
{
    g[REG_EFL] = (g[REG_EFL] & ~(greg_t)AC_BIT) | (greg_t)TF_BIT;
    TS.step_pending = 1;
    step_listed((uint64_t)g[REG_RIP], 1);
    __atomic_add_fetch(&G.hdr->stepped, 1, __ATOMIC_RELAXED);
}

/* ------------------------------------------------------------------------------------------ */
/* The SIGBUS handler. AC is already clear (entry.S). */

/* An alignment fault in a patch trampoline (patch.c). At the copy of an instruction that runs
 * with the thread's AC (the tested bits were too few for this address, its counter is not set up
 * yet, or it is a moved instruction the patcher does not count): counted at the instruction's
 * original PC like any trap there (a record too; its site made from its original bytes, the code
 * at that PC being the patch's now). Elsewhere (`count` 0: the trampoline's own stack accesses
 * with a misaligned stack pointer) not the program's fault. Either way resumed through an
 * out-of-line copy of the trampoline's instruction (a SHADOW site, not reported). */
static int patch_trampoline_fault(greg_t *g, uint64_t pc, uint64_t origin, const uint8_t *code, int count)
{
    int created;
    struct ualdbg_site *os = count ? site_slot(origin, &created) : NULL;
    if (os && created)
        site_build_from(os, origin, code);
    if (os) {
        while (__atomic_load_n(&os->state, __ATOMIC_ACQUIRE) != UALDBG_SITE_READY)
            sched_yield();
        const struct x86_insn *d = &site_insn[os - G.sites];
        __atomic_add_fetch(&os->count, 1, __ATOMIC_RELAXED);
        uint64_t segb = os->insn_len ? seg_base(d->seg) : 0;
        if (os->insn_len)
            count_class(os, d, g, origin, segb);
        else
            __atomic_add_fetch(&os->unclassed, 1, __ATOMIC_RELAXED);
        if (os->flags & UALDBG_SITE_IN_SCOPE) {
            __atomic_add_fetch(&G.hdr->total, 1, __ATOMIC_RELAXED);
            add_variant(os, os->insn_len ? alignment_key(d, g, origin, segb) : 1ull << 63, g, segb);
            add_record(origin, g, segb, os->flags);
        } else {
            __atomic_add_fetch(&G.hdr->ignored, 1, __ATOMIC_RELAXED);
        }
        if (os->insn_len && CFG.patch_after)
            patch_trapped(pc, effective_address(d, g, origin, segb), os);
    } else if (count) {
        __atomic_add_fetch(&G.hdr->dropped_sites, 1, __ATOMIC_RELAXED);
    }
    struct ualdbg_site *s = site_slot(pc, &created);
    if (s && created) {
        site_build(s, pc);
        __atomic_or_fetch(&s->flags, UALDBG_SITE_SHADOW, __ATOMIC_RELEASE);
    } else if (s) {
        while (__atomic_load_n(&s->state, __ATOMIC_ACQUIRE) != UALDBG_SITE_READY)
            sched_yield();
    }
    if (s && (s->flags & UALDBG_SITE_TRAMPOLINE) && s->trampoline) {
        g[REG_EFL] &= ~(greg_t)AC_BIT;
        g[REG_RIP] = (greg_t)s->trampoline;
    } else {
        single_step(g);
        ensure_sigtrap();
    }
    return 1;
}

static void owner_check(void);
static void orphan_recheck(void);

static int handle_alignment_fault(ucontext_t *uc)
{
    greg_t *g = uc->uc_mcontext.gregs;
    uint64_t pc = (uint64_t)g[REG_RIP];
    if (G.watching && !G.detaching)
        owner_check();
    if (G.detaching) { /* an AC left over from before ualdbg_agent_disarm: clear it, run on */
        g[REG_EFL] &= ~(greg_t)AC_BIT;
        if (G.orphaned)
            orphan_recheck();
        return 1;
    }
    if (!G.active || !G.hdr || !G.armed)
        return 0; /* AC set by the program itself: its own business */
    if (TS.step_pending) {
        /* This thread's last single step ended without its trap reaching us: a debugger took it
         * as a step of its own (and finished it: agentlink.finish_steps). Forgotten, so that a
         * trace trap the program makes itself later is the program's. */
        TS.step_pending = 0;
        step_listed(0, 0);
    }
    if (!*G.fork_token) {
        /* A child forked without pthread_atfork handlers (_Fork, clone, syscall). */
        agent_new_process(CFG.follow, 1);
        if (!G.active) {
            g[REG_EFL] &= ~(greg_t)AC_BIT;
            return 1;
        }
    }
    uint64_t origin = 0;
    uint8_t ocode[16];
    uint32_t olen;
    int in_patch = patch_ac_fault(pc, &origin, ocode, &olen);
    if (in_patch)
        return patch_trampoline_fault(g, pc, origin, ocode, in_patch == 1);
    int created;
    struct ualdbg_site *s = site_slot(pc, &created);
    if (!s) {
        __atomic_add_fetch(&G.hdr->dropped_sites, 1, __ATOMIC_RELAXED);
        single_step(g);
        ensure_sigtrap();
        return 1;
    }
    if (created) {
        site_build(s, pc);
    } else {
        while (__atomic_load_n(&s->state, __ATOMIC_ACQUIRE) != UALDBG_SITE_READY)
            sched_yield();
        if (!code_matches(s, pc) && !patch_is_ours(pc)) {
            /* new code at this PC (dlclose/dlopen, JIT): rebuild. Not a site another thread
             * patched after this one trapped there: its jump is the new code; the trap is
             * counted and resumed as before (the copy out of line returns after the jump).
             * The jump is known by its bytes and its slot (whose origin is set before the jump
             * is stored), never by UALDBG_SITE_PATCHED, which is set only after the store: a
             * thread that trapped just before the store and reads the code between the two
             * would otherwise rebuild the site from the jump (single-stepped: flow OTHER), step
             * into the trampoline with AC set again and be counted there a second time. */
            __atomic_store_n(&s->state, UALDBG_SITE_BUILDING, __ATOMIC_RELEASE);
            s->nvariants = 0;
            site_build(s, pc);
        }
    }
    uint32_t flags = s->flags;
    __atomic_add_fetch(&s->count, 1, __ATOMIC_RELAXED);
    if (s->insn_len)
        count_class(s, &site_insn[s - G.sites], g, pc, seg_base(site_insn[s - G.sites].seg));
    else
        __atomic_add_fetch(&s->unclassed, 1, __ATOMIC_RELAXED);
    if (flags & UALDBG_SITE_IN_SCOPE) {
        const struct x86_insn *d = &site_insn[s - G.sites];
        uint64_t segb = 0;
        __atomic_add_fetch(&G.hdr->total, 1, __ATOMIC_RELAXED);
        if (s->insn_len) {
            segb = seg_base(d->seg);
            add_variant(s, alignment_key(d, g, pc, segb), g, segb);
        } else {
            add_variant(s, 1ull << 63, g, 0);
        }
        add_record(pc, g, segb, flags);
    } else {
        __atomic_add_fetch(&G.hdr->ignored, 1, __ATOMIC_RELAXED);
    }
    /* An out-of-scope routine that faults is run unarmed to its return (skip_routine); a site of
     * one that keeps trapping (libc's memcpy under CPython: 222,000 traps, most of its run) is
     * patched instead, as an in-scope site is, once it has trapped OUT_OF_SCOPE_PATCH_AFTER
     * times as often: from then on it costs its trampoline, and counts every access there. */
    int skip = !(flags & UALDBG_SITE_IN_SCOPE) && (flags & UALDBG_SITE_SKIP);
    uint32_t after = skip ? CFG.patch_after * OUT_OF_SCOPE_PATCH_AFTER : CFG.patch_after;
    if (CFG.patch_after && s->count >= after &&
        !(flags & (UALDBG_SITE_PATCHED | UALDBG_SITE_UNPATCHABLE | UALDBG_SITE_SHADOW))) {
        uint64_t resume = patch_consider(s, &site_insn[s - G.sites], pc);
        if (resume) { /* patched: this fault (counted above) runs the trampoline's unchecked copy */
            g[REG_EFL] &= ~(greg_t)AC_BIT;
            g[REG_RIP] = (greg_t)resume;
            return 1;
        }
    }
    if (skip && skip_routine(s, g))
        return 1;
    if (flags & UALDBG_SITE_TRAMPOLINE) {
        g[REG_EFL] &= ~(greg_t)AC_BIT;
        g[REG_RIP] = (greg_t)s->trampoline;
    } else if (flags & UALDBG_SITE_EMULATED) {
        emulate(s, g, pc);
    } else {
        single_step(g);
    }
    return 1;
}


void on_sigbus_c(int sig, siginfo_t *si, void *ctx)
{
    ucontext_t *uc = ctx;
    int saved = errno;
    __atomic_add_fetch(&ualdbg_in_handler, 1, __ATOMIC_SEQ_CST);
    if (si && si->si_code == SI_QUEUE) {
        /* the patcher stopping every thread while it writes a window (patch.c); parked here, the
         * thread counts as inside the handler (a detach waits for it to leave) */
        int at_start = 0;
        uint64_t ool = outofline_origin((uint64_t)uc->uc_mcontext.gregs[REG_RIP], &at_start);
        if (patch_stop_request(si, uc, ool, at_start)) {
            patch_fix_resume(uc->uc_mcontext.gregs); /* (a window written while it sat under this frame) */
            errno = saved;
            __atomic_sub_fetch(&ualdbg_in_handler, 1, __ATOMIC_SEQ_CST);
            return;
        }
    }
    if (G.injected && si && si->si_code == BUS_ADRALN && !(uc->uc_mcontext.gregs[REG_EFL] & (greg_t)AC_BIT)) {
        /* An alignment fault raised before ualdbg stopped the thread and changed its registers
         * (cleared AC, or made a call in it): the instruction runs again with its own registers
         * (and faults again if it still has AC). Not the program's business. */
        errno = saved;
        __atomic_sub_fetch(&ualdbg_in_handler, 1, __ATOMIC_SEQ_CST);
        return;
    }
    if (si && si->si_code == BUS_ADRALN && (uc->uc_mcontext.gregs[REG_EFL] & (greg_t)AC_BIT) &&
        handle_alignment_fault(uc)) {
        if (G.detaching)
            uc->uc_mcontext.gregs[REG_EFL] &= ~(greg_t)AC_BIT;
        errno = saved;
        __atomic_sub_fetch(&ualdbg_in_handler, 1, __ATOMIC_SEQ_CST);
        return;
    }
    errno = saved;
    __atomic_sub_fetch(&ualdbg_in_handler, 1, __ATOMIC_SEQ_CST);
    chain_signal(sig, si, uc);
}

void on_sigtrap_c(int sig, siginfo_t *si, void *ctx)
{
    ucontext_t *uc = ctx;
    if (si && si->si_code == SI_KERNEL && patch_int3_hit(uc->uc_mcontext.gregs))
        return; /* the int3 of a jump being written (patch.c): on at the trampoline */
    if (TS.step_pending && si && si->si_code == TRAP_TRACE) {
        greg_t *g = uc->uc_mcontext.gregs;
        __atomic_add_fetch(&ualdbg_in_handler, 1, __ATOMIC_SEQ_CST);
        TS.step_pending = 0;
        if (G.hdr)
            step_listed(0, 0);
        g[REG_EFL] &= ~(greg_t)TF_BIT;
        uint64_t copy_a = patch_stepped_in((uint64_t)g[REG_RIP]);
        if (copy_a) {
            /* The stepped instruction was a patch's jump (written after this thread trapped
             * there and was counted): it has not run. Its trampoline's copy that runs with AC
             * clear runs it and sets AC again; entered with AC set, the trampoline would count
             * this fault a second time. */
            g[REG_RIP] = (greg_t)copy_a;
        } else if (!G.detaching) {
            /* Re-arm the interrupted context: it was armed when it faulted. */
            g[REG_EFL] |= (greg_t)AC_BIT;
        }
        /* A stop request can land on this frame before it runs: the thread parked, a window was
         * written, and the step's resume PC may now be inside the jump. */
        patch_fix_resume(g);
        __atomic_sub_fetch(&ualdbg_in_handler, 1, __ATOMIC_SEQ_CST);
        return;
    }
    chain_signal(sig, si, uc);
}

/* ------------------------------------------------------------------------------------------ */
/* Buffers: one per process image. */

static void fill_cmdline(char *dst, size_t cap)
{
    int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    ssize_t n = read(fd, dst, cap - 1);
    close(fd);
    if (n > 0)
        dst[n] = 0;
}

static int buffer_create(void)
{
    char path[700];
    int fd = -1;
    uint32_t gen;
    for (gen = 0; gen < 10000; gen++) {
        char *p = path, *end = path + sizeof path - 1;
        p = put_str(p, end, CFG.dir);
        p = put_str(p, end, "/");
        p = put_u64(p, end, (uint64_t)G.pid);
        p = put_str(p, end, ".");
        p = put_u64(p, end, gen);
        p = put_str(p, end, ".buf");
        *p = 0;
        /* O_EXCL makes the file new (a name planted first is skipped: EEXIST), O_NOFOLLOW says
         * so twice: the directory may be one its user can write in (root's --pid: rundir.py) */
        fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd >= 0 || errno != EEXIST)
            break;
    }
    if (fd < 0)
        return -1;
    uint32_t rc = CFG.records ? CFG.records : 100000;
    uint64_t sites_off = UALDBG_HEADER_SIZE;
    uint64_t rec_off = sites_off + (uint64_t)SITE_CAPACITY * UALDBG_SITE_SIZE;
    uint64_t patch_off = (rec_off + (uint64_t)rc * UALDBG_RECORD_SIZE + 63) & ~63ull;
    uint64_t maps_off = patch_off + (uint64_t)PATCH_CAPACITY * UALDBG_PATCH_SIZE;
    maps_off = (maps_off + 4095) & ~4095ull;
    uint64_t size = maps_off + MAPS_CAPACITY;
    /* The file is sparse: its pages are allocated as the agent first writes them, and a write
     * that finds the filesystem full raises SIGBUS in the program (a 16 KiB tmpfs killed the
     * traced shell). Only where every page of it could be allocated: else this process is not
     * traced, and ualdbg says so (its buffer is missing). */
    struct statvfs vfs;
    if (fstatvfs(fd, &vfs) != 0 || (uint64_t)vfs.f_bavail * vfs.f_frsize < size || ftruncate(fd, (off_t)size) != 0) {
        close(fd);
        unlink(path);
        return -1;
    }
    void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED)
        return -1;
    struct ualdbg_header *h = m;
    memcpy(h->magic, UALDBG_MAGIC, 8);
    h->version = UALDBG_VERSION;
    h->header_size = UALDBG_HEADER_SIZE;
    h->site_size = UALDBG_SITE_SIZE;
    h->record_size = UALDBG_RECORD_SIZE;
    h->site_capacity = SITE_CAPACITY;
    h->record_capacity = rc;
    h->maps_capacity = MAPS_CAPACITY;
    h->sites_offset = sites_off;
    h->records_offset = rec_off;
    h->maps_offset = maps_off;
    h->patches_offset = patch_off;
    h->patch_capacity = PATCH_CAPACITY;
    h->patch_size = UALDBG_PATCH_SIZE;
    h->patch_after = CFG.patch_after;
    h->pid = G.pid;
    h->ppid = getppid();
    h->gen = gen;
    h->start_ns = now_ns();
    h->exit_status = -1;
    h->flags = (CFG.follow == 1 ? UALDBG_F_FOLLOW : 0) | (CFG.at_start ? UALDBG_F_AT_START : 0) |
               (CFG.all_modules ? UALDBG_F_ALL : 0) | (CFG.noskip ? UALDBG_F_NOSKIP : 0) |
               (G.system_unarmed ? UALDBG_F_SYSTEM : 0);
    strncpy(h->exe, G.exe, sizeof h->exe - 1);
    fill_cmdline(h->cmdline, sizeof h->cmdline);
    G.hdr = h;
    G.map_len = size;
    G.sites = (struct ualdbg_site *)((char *)m + sites_off);
    G.records = (struct ualdbg_record *)((char *)m + rec_off);
    G.maps = (char *)m + maps_off;
    G.site_mask = SITE_CAPACITY - 1;
    __atomic_store_n(&h->state, UALDBG_RUNNING, __ATOMIC_RELEASE);
    return 0;
}

static void fork_token_init(void)
{
    void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return;
    if (madvise(p, 4096, MADV_WIPEONFORK) != 0) {
        munmap(p, 4096);
        return;
    }
    G.fork_token = p;
    *G.fork_token = 1;
}

/* A new process (a fork child): its own buffer when following children (follow=1); otherwise
 * nothing is traced in it and the programs it runs do not get the agent. */
void agent_new_process(int follow, int in_handler)
{
    /* The child has one thread: a lock another thread held at the fork is held by no one. */
    maps_lock = 0;
    pool_lock = 0;
    signals_after_fork();
    pid_t parent = G.pid;
    G.pid = raw_getpid();
    G.fork_gen++;
    TS.tid = 0;
    TS.skip_n = 0;
    G.root_line = 0;
    if (G.fork_token)
        *G.fork_token = 1;
    if (follow != 1) {
        G.active = 0;
        ac_clear();
        if (!in_handler)
            strip_own_environment();
        return;
    }
    void *old = G.hdr;
    size_t old_len = G.map_len;
    /* Counted in the parent's buffer (still mapped, shared): a child that cannot make a buffer of
     * its own (a seccomp filter, no memory) is then missing from the run, and ualdbg says so. */
    if (old)
        __atomic_add_fetch(&((struct ualdbg_header *)old)->children, 1, __ATOMIC_RELAXED);
    const struct ualdbg_site *old_sites = G.sites;
    uint32_t old_mask = G.site_mask;
    if (buffer_create() != 0) {
        G.active = 0;
        G.hdr = NULL;
        ac_clear();
        return;
    }
    G.hdr->ppid = parent; /* not getppid(): the parent may be gone already */
    if (G.armed) {
        G.hdr->flags |= UALDBG_F_ARMED;
        G.hdr->armed_ns = now_ns();
    }
    maps_snapshot_for_names();
    if (old)
        patch_after_fork(old_sites, old_mask); /* the patches are inherited: their sites and fresh counters */
    if (old)
        munmap(old, old_len);
}

/* ------------------------------------------------------------------------------------------ */
/* Initialisation, the arming point, exit. */

static void percent_decode(char *dst, size_t cap, const char *src, size_t n)
{
    size_t o = 0;
    for (size_t i = 0; i < n && o + 1 < cap; i++) {
        if (src[i] == '%' && i + 2 < n) {
            char h[3] = {src[i + 1], src[i + 2], 0};
            dst[o++] = (char)strtol(h, NULL, 16);
            i += 2;
        } else {
            dst[o++] = src[i];
        }
    }
    dst[o] = 0;
}

/* UALDBG_AGENT=1;dir=D;at=main|start;follow=0|1;all=0|1;noskip=0|1;records=N;ualdbg=PID;
 *              preload=VALUE|-;modules=A,B;patch=K;sys=0|1;sysdirs=D1,D2   (values percent-
 *              encoded; patch=0 or absent: no hot-site patching) */
static int parse_config(const char *s)
{
    if (!s || s[0] != '1')
        return 0;
    const char *p = s + 1;
    while (*p) {
        if (*p == ';')
            p++;
        const char *eq = strchr(p, '='), *semi = strchr(p, ';');
        if (!semi)
            semi = p + strlen(p);
        if (!eq || eq > semi) {
            p = semi;
            continue;
        }
        size_t kl = (size_t)(eq - p), vl = (size_t)(semi - eq - 1);
        const char *v = eq + 1;
        char val[2048];
        percent_decode(val, sizeof val, v, vl);
        if (kl == 3 && !memcmp(p, "dir", 3))
            strncpy(CFG.dir, val, sizeof CFG.dir - 1);
        else if (kl == 2 && !memcmp(p, "at", 2))
            CFG.at_start = !strcmp(val, "start");
        else if (kl == 6 && !memcmp(p, "follow", 6))
            CFG.follow = val[0] == '1' ? 1 : val[0] == '2' ? 2 : 0;
        else if (kl == 3 && !memcmp(p, "all", 3))
            CFG.all_modules = val[0] == '1';
        else if (kl == 6 && !memcmp(p, "noskip", 6))
            CFG.noskip = val[0] == '1';
        else if (kl == 5 && !memcmp(p, "patch", 5))
            CFG.patch_after = (uint32_t)strtoul(val, NULL, 10);
        else if (kl == 7 && !memcmp(p, "records", 7))
            CFG.records = (uint32_t)strtoul(val, NULL, 10);
        else if (kl == 6 && !memcmp(p, "ualdbg", 6))
            CFG.ualdbg_pid = strtol(val, NULL, 10);
        else if (kl == 3 && !memcmp(p, "sys", 3))
            CFG.system = val[0] == '1';
        else if (kl == 7 && !memcmp(p, "sysdirs", 7))
            strncpy(CFG.sysdirs, val, sizeof CFG.sysdirs - 1);
        else if (kl == 5 && !memcmp(p, "watch", 5))
            CFG.watch = val[0] == '1';
        else if (kl == 7 && !memcmp(p, "preload", 7)) {
            CFG.had_preload = strcmp(val, "-") != 0;
            if (CFG.had_preload)
                strncpy(CFG.preload_orig, val, sizeof CFG.preload_orig - 1);
        } else if (kl == 7 && !memcmp(p, "modules", 7)) {
            char *q = val;
            while (*q && CFG.nmodules < MAX_MODULES) {
                char *c = strchr(q, ',');
                size_t l = c ? (size_t)(c - q) : strlen(q);
                if (l && l < sizeof CFG.modules[0]) {
                    memcpy(CFG.modules[CFG.nmodules], q, l);
                    CFG.modules[CFG.nmodules++][l] = 0;
                }
                q += l + (c ? 1 : 0);
            }
        }
        p = semi;
    }
    return CFG.dir[0] != 0;
}

static void find_interp(void)
{
    const ElfW(Phdr) *ph = (const ElfW(Phdr) *)getauxval(AT_PHDR);
    unsigned long n = getauxval(AT_PHNUM);
    uint64_t bias = 0;
    const char *interp = NULL;
    if (!ph)
        return;
    for (unsigned long i = 0; i < n; i++)
        if (ph[i].p_type == PT_PHDR)
            bias = (uint64_t)(uintptr_t)ph - ph[i].p_vaddr;
    for (unsigned long i = 0; i < n; i++)
        if (ph[i].p_type == PT_INTERP)
            interp = (const char *)(uintptr_t)(bias + ph[i].p_vaddr);
    if (interp && !realpath(interp, G.interp))
        G.interp[0] = 0;
}

/* Remove the agent from this process's environment, for programs it starts. */
void strip_own_environment(void)
{
    unsetenv("UALDBG_AGENT");
    if (CFG.had_preload)
        setenv("LD_PRELOAD", CFG.preload_orig, 1);
    else
        unsetenv("LD_PRELOAD");
}

static void on_exit_cb(int status, void *arg)
{
    (void)arg;
    blind_flush();
    blind_check_sigbus();
    process_exited(status);
}

static void atfork_child(void)
{
    uint64_t was = ac_save_clear(); /* the child inherited the forking thread's AC */
    /* A trap in glibc's fork before its child handlers run has already made this process
     * its own buffer (the wiped fork token): a second one would list the child twice. */
    if (G.active && G.pid != raw_getpid())
        agent_new_process(CFG.follow, 0);
    if (G.active)
        ac_restore(was);
}

static int agent_start(void);
static void agent_init(void);

/* The ualdbg process tracing with this agent and that has not removed it (0: none): > 0 injected
 * it (`--pid`), < 0 preloaded it at launch. Read from outside (agent/presence.py) and by another
 * copy of the agent (other_agent_owner): one tracer per process. */
EXPORT volatile long ualdbg_agent_owner;
/* The ualdbg that injected this agent and died without detaching (killed): the agent saw it go
 * and disarmed itself (below, "Orphaned"); 0 otherwise. A later `--pid` removes such an agent
 * and traces afresh (cli/attach.py); presence.py reads it. */
EXPORT volatile long ualdbg_agent_orphan;
static void owner_watch_start(void);
static void owner_watch_stop(void);

__attribute__((constructor(101))) static void agent_init(void)
{
    signals_init(); /* the real libc entry points, whatever happens next */
    wrappers_init();
    if (getauxval(AT_SECURE) || !parse_config(getenv("UALDBG_AGENT")))
        return;
    if (agent_start() != 0)
        return;
    ualdbg_agent_owner = -CFG.ualdbg_pid;
    if (CFG.at_start)
        arm_here();
}

/* Tracing starts in this process image: the buffer, the program's signal actions adopted, the
 * SIGBUS handler installed. 0 on success. */
/* The agent's executable segments, from its program headers (at start: dl_iterate_phdr is no
 * handler's business). */
static int self_text_segment(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    const Dl_info *self = data;
    if ((uint64_t)(uintptr_t)self->dli_fbase != info->dlpi_addr)
        return 0;
    uint64_t lo = UINT64_MAX, hi = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X))
            continue;
        uint64_t a = info->dlpi_addr + ph->p_vaddr;
        lo = a < lo ? a : lo;
        hi = a + ph->p_memsz > hi ? a + ph->p_memsz : hi;
    }
    if (hi)
        world_set_self_text(lo, hi);
    return 1;
}

static void self_text(void)
{
    Dl_info self;
    if (dladdr((void *)self_text, &self))
        dl_iterate_phdr(self_text_segment, &self);
}

/* follow=2: whether this image is the run's first process, or an exec of it: the run's
 * directory holds no buffer yet, or one of this pid's. */
static int root_image(void)
{
    int fd = open(CFG.dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return 1;
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return 1;
    }
    char mine[32], *e = put_u64(mine, mine + sizeof mine - 2, (uint64_t)raw_getpid());
    *e++ = '.';
    *e = 0;
    size_t n = (size_t)(e - mine);
    int others = 0, own = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        size_t len = strlen(de->d_name);
        if (len < 5 || strcmp(de->d_name + len - 4, ".buf"))
            continue;
        if (!strncmp(de->d_name, mine, n))
            own = 1;
        else
            others = 1;
    }
    closedir(d);
    return own || !others;
}

/* sys=1 (a run from the shell, whose root's parent is ualdbg): whether this image is a system
 * program (its executable in one of sysdirs) that the root started, with no module named and
 * not --all-modules. Every fault of such a process is out of scope (engines/agent.py,
 * out_of_scope_program), so it runs unarmed: a test suite's shells, greps and seds took a
 * hundred and more traps each in the C library for nothing (issue 34). The agent stays, to
 * follow what it starts. */
static int system_program(void)
{
    if (!CFG.system || G.root_line || G.injected || CFG.all_modules || CFG.nmodules || !G.exe[0])
        return 0;
    for (const char *d = CFG.sysdirs; *d;) {
        const char *c = strchr(d, ',');
        size_t l = c ? (size_t)(c - d) : strlen(d);
        if (l && !strncmp(G.exe, d, l))
            return 1;
        d += l + (c ? 1 : 0);
    }
    return 0;
}

static int agent_start(void)
{
    static int registered;
    Dl_info info;
    if (dladdr((void *)agent_init, &info) && info.dli_fname)
        strncpy(CFG.agent_path, info.dli_fname, sizeof CFG.agent_path - 1);
    char real[PATH_MAX];
    if (CFG.agent_path[0] && realpath(CFG.agent_path, real))
        strncpy(CFG.agent_path, real, sizeof CFG.agent_path - 1);
    CFG.configured = 1;
    G.pid = raw_getpid();
    G.root_line = CFG.ualdbg_pid && getppid() == CFG.ualdbg_pid;
    G.have_fsgsbase = (getauxval(AT_HWCAP2) & HWCAP2_FSGSBASE) != 0;
    uint64_t shstk = 0; /* ARCH_SHSTK_STATUS (Linux 6.6): swapping return addresses would fault */
    if (raw_syscall4(SYS_arch_prctl, 0x5005, (long)&shstk, 0, 0) == 0 && (shstk & 1)) {
        G.shadow_stack = 1;
        CFG.noskip = 1;
    }
    ssize_t n = readlink("/proc/self/exe", G.exe, sizeof G.exe - 1);
    G.exe[n > 0 ? n : 0] = 0;
    G.system_unarmed = system_program();
    find_interp();
    if (CFG.follow == 2 && !G.injected && !root_image()) {
        /* follow=2 (a debugger's run): the process the debugger runs, across its own execs,
         * and nothing it starts (a posix_spawn child inherits the environment, not the
         * fork handler): this is such a program. Untraced, and its own children too. */
        strip_own_environment();
        CFG.configured = 0;
        return -1;
    }
    if (!CFG.follow && !G.injected)
        strip_own_environment();
    if (!G.fork_token)
        fork_token_init();
    if (!G.fork_token || buffer_create() != 0) {
        CFG.configured = 0;
        return -1;
    }
    if (!CFG.all_modules && !CFG.noskip && !G.system_unarmed)
        ranges_init();
    G.active = 1;
    install_kernel_action(SIGBUS);
    patch_set_sigtrap_hook(ensure_sigtrap); /* the patcher asks for SIGTRAP before it writes an int3 */
    world_set_outofline_hooks(outofline_origin, outofline_redirect); /* copies that jump back under a jump */
    self_text(); /* a thread asleep in the agent's code stops no patch from waiting for it */
    signals_adopt_existing();
    if (!registered) { /* once: an injected agent may be started again by a later attach */
        registered = 1;
        pthread_atfork(NULL, NULL, atfork_child);
        on_exit(on_exit_cb, NULL);
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Injected into a running process (`ualdbg trace --pid`): ualdbg stops the process with ptrace,
 * calls dlopen and then these functions in one of its threads, and sets or clears EFLAGS.AC in
 * every thread's registers itself. Nothing is interposed (the program's calls are bound
 * already): threads inherit AC from the thread that creates them, fork children inherit the
 * agent (pthread_atfork gives them a buffer of their own). */

/* Start tracing with `config` (UALDBG_AGENT's syntax) and arm: from now on a SIGBUS with AC set
 * is the agent's. 0 on success, -1 when the buffer cannot be made. */
static void got_patch_all(void);

/* Other copies of the agent loaded in this process: another user's build, root's copy for
 * `--pid`, another version (each has its own state: G.active says nothing of theirs). */
struct agent_copies {
    uintptr_t self;
    int n;
    char names[4][512];
};

static int note_copy(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    struct agent_copies *c = data;
    const char *name = info->dlpi_name ? info->dlpi_name : "";
    const char *base = strrchr(name, '/') ? strrchr(name, '/') + 1 : name;
    if (info->dlpi_addr != c->self && !strncmp(base, "ualdbg_agent", 12) && c->n < 4 &&
        strlen(name) < sizeof c->names[0])
        strcpy(c->names[c->n++], name);
    return 0;
}

/* The ualdbg tracing this process through another copy of the agent (its ualdbg_agent_owner),
 * 0 if none. RTLD_NOLOAD finds a loaded copy by its name, even once its file is deleted. */
static long other_agent_owner(void)
{
    Dl_info self;
    struct agent_copies c = {0};
    if (!dladdr((void *)other_agent_owner, &self))
        return 0;
    c.self = (uintptr_t)self.dli_fbase;
    dl_iterate_phdr(note_copy, &c); /* names only: no dlopen under the loader's lock */
    long owner = 0;
    for (int i = 0; i < c.n && !owner; i++) {
        void *h = dlopen(c.names[i], RTLD_NOW | RTLD_NOLOAD);
        if (!h)
            continue;
        volatile long *o = dlsym(h, "ualdbg_agent_owner");
        if (o)
            owner = *o;
        dlclose(h);
    }
    return owner;
}

EXPORT int ualdbg_agent_inject(const char *config)
{
    uint64_t was = ac_save_clear();
    /* Still tracing (a second ualdbg attached without the first detaching), or another copy of
     * the agent is: one tracer per process. */
    if (G.active || other_agent_owner()) {
        ac_restore(was);
        return -2;
    }
    memset(&CFG, 0, sizeof CFG);
    G.hdr = NULL;
    G.injected = 1;
    G.detaching = 0;
    G.orphaned = 0;
    ualdbg_agent_orphan = 0;
    G.armed = 0;
    if (!parse_config(config) || agent_start() != 0) {
        ac_restore(was);
        return -1;
    }
    owner_watch_start();
    got_patch_all();
    uint64_t mask = block_all();
    G.armed = 1;
    G.hdr->armed_ns = now_ns();
    __atomic_or_fetch(&G.hdr->flags, UALDBG_F_ARMED | UALDBG_F_INJECTED, __ATOMIC_RELEASE);
    ualdbg_agent_owner = CFG.ualdbg_pid;
    spin_lock(&maps_lock);
    maps_snapshot_locked();
    spin_unlock(&maps_lock);
    unblock_all(mask);
    ac_restore(was);
    return 0;
}

/* The program's calls are bound already: its modules' GOT slots for the functions the agent
 * wraps (a new thread must start unarmed, blocking SIGBUS must disarm, its SIGBUS action is
 * the agent's to keep) are pointed at the wrappers, and pointed back at release. Not libc's own
 * nor the loader's; modules loaded after the injection keep theirs. */
static const char *const GOT_WRAPPED[] = {"pthread_create", "pthread_sigmask", "sigprocmask", "sigaction", "signal"};
#define MAX_GOT_PATCHES 1024
static struct {
    uint64_t *slot;
    uint64_t orig;
    uint64_t relro_lo, relro_hi;
} got_patches[MAX_GOT_PATCHES];
static int ngot;
static void *got_wrappers[sizeof GOT_WRAPPED / sizeof *GOT_WRAPPED];

static void got_write(uint64_t *slot, uint64_t value, uint64_t relro_lo, uint64_t relro_hi)
{
    uint64_t a = (uint64_t)(uintptr_t)slot;
    int ro = a >= relro_lo && a < relro_hi;
    void *page = (void *)(uintptr_t)(a & ~4095ull);
    if (ro && mprotect(page, 4096, PROT_READ | PROT_WRITE) != 0)
        return;
    __atomic_store_n(slot, value, __ATOMIC_RELEASE);
    if (ro)
        mprotect(page, 4096, PROT_READ);
}

static uint64_t relro_lo_of(struct dl_phdr_info *info, uint64_t *hi)
{
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_GNU_RELRO) {
            uint64_t lo = info->dlpi_addr + info->dlpi_phdr[i].p_vaddr;
            *hi = (lo + info->dlpi_phdr[i].p_memsz + 4095) & ~4095ull;
            return lo & ~4095ull;
        }
    *hi = 0;
    return 0;
}

static int got_patch_module(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size, (void)data;
    const char *name = info->dlpi_name ? info->dlpi_name : "";
    const char *base_name = strrchr(name, '/') ? strrchr(name, '/') + 1 : name;
    Dl_info self;
    if (dladdr((void *)got_patch_all, &self) && (uint64_t)(uintptr_t)self.dli_fbase == info->dlpi_addr)
        return 0;
    if (!strcmp(name, CFG.agent_path) || !strncmp(base_name, "libc.so", 7) || !strncmp(base_name, "ld-linux", 8) ||
        !strncmp(base_name, "linux-vdso", 10) || !strncmp(base_name, "ld-", 3))
        return 0;
    uint64_t bias = info->dlpi_addr;
    const ElfW(Dyn) *dyn = NULL;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
            dyn = (const ElfW(Dyn) *)(uintptr_t)(bias + info->dlpi_phdr[i].p_vaddr);
    if (!dyn)
        return 0;
    uint64_t symtab = 0, strtab = 0, jmprel = 0, pltrelsz = 0, rela = 0, relasz = 0;
    for (; dyn->d_tag != DT_NULL; dyn++) {
        switch (dyn->d_tag) {
        case DT_SYMTAB: symtab = dyn->d_un.d_ptr; break;
        case DT_STRTAB: strtab = dyn->d_un.d_ptr; break;
        case DT_JMPREL: jmprel = dyn->d_un.d_ptr; break;
        case DT_PLTRELSZ: pltrelsz = dyn->d_un.d_val; break;
        case DT_RELA: rela = dyn->d_un.d_ptr; break;
        case DT_RELASZ: relasz = dyn->d_un.d_val; break;
        }
    }
    /* The loader made these absolute in place (x86-64); a pointer below the bias was not. */
#define ABS(p) ((p) && (p) < bias ? (p) + bias : (p))
    symtab = ABS(symtab), strtab = ABS(strtab), jmprel = ABS(jmprel), rela = ABS(rela);
#undef ABS
    if (!symtab || !strtab)
        return 0;
    uint64_t relro_hi, relro_lo = relro_lo_of(info, &relro_hi);
    const ElfW(Sym) *syms = (const ElfW(Sym) *)(uintptr_t)symtab;
    struct { uint64_t at, size; } tables[2] = {{jmprel, pltrelsz}, {rela, relasz}};
    for (int t = 0; t < 2; t++) {
        const ElfW(Rela) *r = (const ElfW(Rela) *)(uintptr_t)tables[t].at;
        for (size_t k = 0; r && k < tables[t].size / sizeof *r; k++) {
            uint32_t type = ELF64_R_TYPE(r[k].r_info);
            if (type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT)
                continue;
            const char *sym = (const char *)(uintptr_t)strtab + syms[ELF64_R_SYM(r[k].r_info)].st_name;
            for (size_t w = 0; w < sizeof GOT_WRAPPED / sizeof *GOT_WRAPPED; w++) {
                if (strcmp(sym, GOT_WRAPPED[w]) || !got_wrappers[w] || ngot >= MAX_GOT_PATCHES)
                    continue;
                uint64_t *slot = (uint64_t *)(uintptr_t)(bias + r[k].r_offset);
                got_patches[ngot].slot = slot;
                got_patches[ngot].orig = *slot;
                got_patches[ngot].relro_lo = relro_lo;
                got_patches[ngot].relro_hi = relro_hi;
                ngot++;
                got_write(slot, (uint64_t)(uintptr_t)got_wrappers[w], relro_lo, relro_hi);
            }
        }
    }
    return 0;
}

/* Without the loader's lock (dl_iterate_phdr): another thread, stopped, may hold it. */
static void got_restore_all(void)
{
    for (int i = 0; i < ngot; i++)
        if (got_patches[i].slot)
            got_write(got_patches[i].slot, got_patches[i].orig, got_patches[i].relro_lo, got_patches[i].relro_hi);
    ngot = 0;
}

static void got_patch_all(void)
{
    void *self = dlopen(CFG.agent_path, RTLD_NOW | RTLD_NOLOAD);
    if (!self)
        return;
    for (size_t w = 0; w < sizeof GOT_WRAPPED / sizeof *GOT_WRAPPED; w++)
        got_wrappers[w] = dlsym(self, GOT_WRAPPED[w]); /* the agent's own: its handle's scope starts with it */
    dlclose(self);
    ngot = 0;
    dl_iterate_phdr(got_patch_module, NULL);
}

/* The trampolines' "orl $AC,(%rsp)" becomes a 7-byte nop, so that a thread in
 * the middle of one does not set AC again. Called with every other thread stopped. */
static void trampolines_disarm(void)
{
    static const uint8_t or_ac[] = {0x9c, 0x81, 0x0c, 0x24, 0x00, 0x00, 0x04, 0x00, 0x9d};
    static const uint8_t nop7[] = {0x0f, 0x1f, 0x80, 0x00, 0x00, 0x00, 0x00};
    for (int i = 0; i < npools; i++)
        for (uint32_t off = 0; off + TRAMP_SLOT <= pools[i].used; off += TRAMP_SLOT) {
            uint8_t *slot = pools[i].base + off;
            for (uint32_t j = 8; j + sizeof or_ac <= TRAMP_SLOT - 16; j++)
                if (!memcmp(slot + j, or_ac, sizeof or_ac))
                    memcpy(slot + j + 1, nop7, sizeof nop7);
        }
}

/* Detaching, step 1 (every thread stopped; ualdbg clears AC in their registers): nothing sets AC
 * again (the handlers, the trampolines, the return from a skipped routine), and an AC fault
 * still in flight is cleared and not counted. The trace's end is stamped in the buffer (maps
 * snapshots were taken whenever a new PC needed one). */
EXPORT void ualdbg_agent_disarm(void)
{
    blind_check_sigbus(); /* a module loaded since the attach may have taken SIGBUS over */
    G.detaching = 1;
    G.armed = 0;
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    trampolines_disarm();
    patch_disarm();
    /* No lock is taken here or in release: every other thread is stopped, anywhere. */
    if (G.hdr && G.active && !(G.hdr->flags & UALDBG_F_DETACHED)) {
        G.hdr->end_ns = now_ns();
        __atomic_or_fetch(&G.hdr->flags, UALDBG_F_DETACHED, __ATOMIC_RELEASE);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Orphaned (issue 29): the ualdbg that injected the agent is gone without detaching (SIGKILL, the
 * OOM killer, a CI timeout). Nobody reads the buffer any more and nobody will clear AC from
 * outside, so the agent disarms itself. At the injection it takes a pidfd of its ualdbg
 * (pidfd_open from inside the process: no pid-reuse race; not across pid namespaces, where
 * ualdbg's pid names another process: ualdbg asks for it with `watch=1` only in its own) and
 * starts one thread, "ualdbg-watch", asleep in poll(2) on it: it costs nothing until ualdbg
 * exits, and it wakes then whether or not the program still faults (a program whose unaligned
 * accesses are all at patched sites no longer traps at all). It blocks every signal but SIGTRAP
 * (a world stop, stopworld.c, leaves a thread asleep in a system call alone if it does not block
 * SIGTRAP) and SIGSEGV (watchdog_start), so that it is never armed and does not take the
 * program's signals (the kernel gives a process's signal to a thread that does not block it, its
 * main thread first); a clean detach
 * wakes it through an eventfd and it ends. Fork children have no such thread: there (and where
 * it could not be started) an alignment fault polls the pidfd at most every OWNER_CHECK_NS
 * (non-blocking, ~1 us against the ~8 us of the fault). Either way orphan_disarm
 * disarms the process as far as can be done while the other threads run. */

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#define OWNER_CHECK_NS 50000000ull

static struct {
    int wake_fd;     /* eventfd: the watchdog ends when it reads 1 (release, or disarmed at a fault) */
    pid_t in_pid;    /* the process the watchdog runs in (a fork child shares the eventfd: never written there) */
    uint32_t gen;    /* the watch the watchdog serves (a re-injection starts a new one) */
    volatile uint32_t running; /* generation of the watchdog that runs, 0: none */
} W = {-1, 0, 0, 0};

static int fd_is(int fd, uint64_t dev, uint64_t ino)
{
    struct stat st;
    /* The program may have closed the descriptor, or dup2'ed another file onto its number: on
     * pidfs (Linux 6.9) a pidfd's inode names its process, so dev and inode say it is ours. */
    return raw_syscall4(SYS_fstat, fd, (long)&st, 0, 0) == 0 && (uint64_t)st.st_dev == dev && (uint64_t)st.st_ino == ino;
}

static int owner_fd_is_ours(void) { return fd_is(G.owner_fd, G.owner_dev, G.owner_ino); }

/* A close-on-exec descriptor moved out of the way of the numbers the program hands out next (it
 * gets the lowest free one): high up, below the soft limit. */
static long fd_high(long fd)
{
    struct rlimit rl;
    if (fd < 0 || getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur <= 64)
        return fd;
    long base = rl.rlim_cur > 1024 ? 1000 : (long)rl.rlim_cur - 24;
    long hi = raw_syscall4(SYS_fcntl, fd, F_DUPFD_CLOEXEC, base, 0);
    if (hi < 0)
        return fd;
    raw_syscall4(SYS_close, fd, 0, 0, 0);
    return hi;
}

static void orphan_disarm(int in_handler);

struct watchdog_arg {
    int pidfd, wake_fd;
    uint64_t dev, ino;
    uint32_t gen;
};

static void *owner_watchdog(void *p)
{
    struct watchdog_arg a = *(struct watchdog_arg *)p;
    free(p);
    ac_clear();
    prctl(PR_SET_NAME, "ualdbg-watch", 0, 0, 0);
    pid_t me = raw_gettid();
    world_own_thread(me, 0); /* asleep in the agent's code, and no handler's: no patch waits for it */
    struct pollfd fds[2] = {{a.pidfd, POLLIN, 0}, {a.wake_fd, POLLIN, 0}};
    long n;
    do
        n = raw_syscall4(SYS_poll, (long)fds, 2, -1, 0);
    while (n == -EINTR);
    world_own_thread(0, me);
    /* The owner gone, and this watch still the process's: not ended by a release first. */
    if (n > 0 && !(fds[1].revents & POLLIN) && (fds[0].revents & POLLIN) && G.watching &&
        __atomic_load_n(&W.gen, __ATOMIC_ACQUIRE) == a.gen && fd_is(a.pidfd, a.dev, a.ino))
        orphan_disarm(0);
    __atomic_compare_exchange_n(&W.running, &a.gen, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
    raw_syscall4(SYS_close, a.wake_fd, 0, 0, 0);
    return NULL;
}

static void watchdog_start(void)
{
    typedef int (*create_fn)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
    create_fn create = (create_fn)real_fn("pthread_create"); /* not the wrapper: no arming, no count */
    struct watchdog_arg *arg = malloc(sizeof *arg);
    long efd = fd_high(raw_syscall4(SYS_eventfd2, 0, EFD_CLOEXEC, 0, 0));
    if (!create || !arg || efd < 0) {
        free(arg);
        if (efd >= 0)
            raw_syscall4(SYS_close, efd, 0, 0, 0);
        return;
    }
    *arg = (struct watchdog_arg){G.owner_fd, (int)efd, G.owner_dev, G.owner_ino, W.gen};
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 64 << 10);
    /* Its signal mask is its creator's at the clone: every signal blocked but SIGTRAP (below) and
     * SIGSEGV: a later --pid may make its ptrace calls in this thread, and a call ends with a
     * SIGSEGV, which the kernel forces through a blocked mask by resetting the program's SIGSEGV
     * action to SIG_DFL (force_sig_info_to_task). */
    uint64_t all = ~(1ull << (SIGTRAP - 1) | 1ull << (SIGSEGV - 1)), old;
    raw_sigprocmask(SIG_SETMASK, &all, &old);
    pthread_t t;
    W.wake_fd = (int)efd;
    W.in_pid = G.pid;
    W.running = W.gen;
    if (create(&t, &attr, owner_watchdog, arg) != 0) {
        W.running = 0;
        W.wake_fd = -1;
        free(arg);
        raw_syscall4(SYS_close, efd, 0, 0, 0);
    }
    raw_sigprocmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
}

static void owner_watch_start(void)
{
    G.watching = 0;
    if (!CFG.watch || CFG.ualdbg_pid <= 0)
        return;
    long fd = fd_high(raw_syscall4(SYS_pidfd_open, CFG.ualdbg_pid, 0, 0, 0)); /* close-on-exec by itself */
    if (fd < 0)
        return;
    struct stat st;
    if (raw_syscall4(SYS_fstat, fd, (long)&st, 0, 0) != 0) {
        raw_syscall4(SYS_close, fd, 0, 0, 0);
        return;
    }
    G.owner_fd = (int)fd;
    G.owner_dev = (uint64_t)st.st_dev;
    G.owner_ino = (uint64_t)st.st_ino;
    G.owner_check_ns = now_ns() + OWNER_CHECK_NS;
    __atomic_add_fetch(&W.gen, 1, __ATOMIC_ACQ_REL);
    G.watching = 1;
    watchdog_start();
}

/* The watch ends (a release, or the agent disarmed): the watchdog of this process woken to end,
 * and the pidfd closed while it is still ours (a number the program reused is the program's). */
static void owner_watch_stop(void)
{
    if (!G.watching)
        return;
    G.watching = 0;
    __atomic_add_fetch(&W.gen, 1, __ATOMIC_ACQ_REL);
    if (W.running && W.in_pid == G.pid && W.wake_fd >= 0) {
        uint64_t one = 1;
        raw_syscall4(SYS_write, W.wake_fd, (long)&one, 8, 0);
    }
    if (owner_fd_is_ours())
        raw_syscall4(SYS_close, G.owner_fd, 0, 0, 0);
}

/* Whether the owner has exited (a zombie counts: it will never detach). */
static int owner_gone(void)
{
    struct pollfd p = {G.owner_fd, POLLIN, 0};
    long n = raw_syscall4(SYS_poll, (long)&p, 1, 0, 0);
    if (n == 1 && !(p.revents & POLLNVAL) && owner_fd_is_ours())
        return (p.revents & POLLIN) != 0;
    if (n == 1) /* not a pidfd of the owner any more: the agent cannot tell now, and never says gone */
        G.watching = 0;
    return 0;
}

/* The AC-setting `orl $AC,(%rsp)` between pushfq and popfq in `n` bytes of trampoline code
 * becomes `orl $0,(%rsp)`: one byte of its immediate, stored at once, so that a thread running
 * the code meanwhile executes the old instruction or the new one, each whole, of the same length
 * (as a patch's jump is stored while threads run, patch.c); the old one at worst sets AC once
 * more, and that thread's next fault clears it. */
static void ac_or_off(uint8_t *code, size_t n)
{
    static const uint8_t or_ac[] = {0x9c, 0x81, 0x0c, 0x24, 0x00, 0x00, 0x04, 0x00, 0x9d};
    for (size_t j = 0; j + sizeof or_ac <= n; j++)
        if (!memcmp(code + j, or_ac, sizeof or_ac))
            __atomic_store_n(code + j + 6, (uint8_t)0, __ATOMIC_RELEASE);
}

/* Nothing sets AC again: the trampolines of sites and of patched windows (whose counters are
 * unhooked too: patch_orphan). Idempotent; run again by later faults (orphan_recheck) since a
 * thread that was building a trampoline when the agent disarmed may have finished it after. */
static void orphan_unhook(void)
{
    int n = __atomic_load_n(&npools, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n; i++)
        ac_or_off(pools[i].base, __atomic_load_n(&pools[i].used, __ATOMIC_ACQUIRE));
    patch_orphan(ac_or_off);
}

static volatile int orphan_rechecks;

/* `in_handler`: called from the agent's SIGBUS handler (1), or from the watchdog (0). */
static void orphan_disarm(int in_handler)
{
    if (__atomic_exchange_n(&G.orphaned, 1, __ATOMIC_SEQ_CST))
        return;
    orphan_rechecks = 0;
    ualdbg_agent_orphan = CFG.ualdbg_pid;
    /* As ualdbg_agent_disarm: from here every thread's next AC fault is cleared and run on (the
     * G.detaching path of handle_alignment_fault), nothing re-arms (a skipped routine's return, a
     * single-step, a new thread, the wrappers: ac_restore), and nothing more is counted. */
    G.detaching = 1;
    G.armed = 0;
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    ualdbg_agent_owner = 0; /* no tracer: a later --pid may have the process (one tracer per process) */
    /* Threads inside the handler may be building a trampoline: let them finish it first (bounded:
     * each finishes, or a patcher waiting on a world stop gives up, stopworld.c). */
    uint64_t until = now_ns() + 200000000ull;
    while (__atomic_load_n(&ualdbg_in_handler, __ATOMIC_ACQUIRE) > in_handler && now_ns() < until)
        sched_yield();
    orphan_unhook();
    /* The program's own actions back in the kernel for the signals the agent only dispatched;
     * SIGBUS and SIGTRAP stay the agent's (a thread may still have AC set, or a single-step or a
     * patch's int3 in flight), and pass everything that is not the agent's to the program's. */
    signals_unhook();
    if (G.hdr && !(G.hdr->flags & UALDBG_F_DETACHED)) {
        G.hdr->end_ns = now_ns();
        __atomic_or_fetch(&G.hdr->flags, UALDBG_F_DETACHED, __ATOMIC_RELEASE);
    }
    owner_watch_stop();
    /* What stays: the SIGBUS and SIGTRAP actions, the GOT slots of the wrappers (which pass
     * through now), the patched jumps (a trampoline runs each instruction as it is, with the
     * thread's own AC), and the buffer's mapping (a trampoline may still be reading a counter's
     * address): a later --pid removes them all (ualdbg_agent_release). */
}

static void owner_check(void)
{
    if (__atomic_load_n(&W.running, __ATOMIC_RELAXED) && W.in_pid == G.pid)
        return; /* the watchdog looks */
    uint64_t now = now_ns(), due = __atomic_load_n(&G.owner_check_ns, __ATOMIC_RELAXED);
    if (now < due || !__atomic_compare_exchange_n(&G.owner_check_ns, &due, now + OWNER_CHECK_NS, 0,
                                                  __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        return; /* one thread looks, at most every OWNER_CHECK_NS */
    if (owner_gone())
        orphan_disarm(1);
}

/* A fault after the agent disarmed itself: a trampoline finished since may have set AC. */
static void orphan_recheck(void)
{
    if (__atomic_add_fetch(&orphan_rechecks, 1, __ATOMIC_RELAXED) <= 1024)
        orphan_unhook();
}

/* Detaching, step 2 (no thread in the agent's handlers, every thread stopped): the program's own
 * signal actions back in the kernel, the buffer unmapped. The library stays loaded and inert:
 * return addresses it swapped may still be on stacks, and its trampolines' code may be running. */
EXPORT void ualdbg_agent_release(void)
{
    patch_release(); /* before the buffer goes: the trampolines stop counting into it */
    got_restore_all();
    signals_release();
    owner_watch_stop();
    G.active = 0;
    ualdbg_agent_owner = 0;
    ualdbg_agent_orphan = 0;
    if (G.hdr) {
        /* Not unmapped: private zero pages in its place. A thread the debugger stopped inside a
         * trampoline, between reading its counter's address (the buffer's patch table) and adding
         * to it, adds on when it runs again: to memory of its own now, never to an unmapped page
         * (SIGSEGV: 1 session in 12 of Ctrl-C, `ualdbg off`, detach in gdb under load). The shared
         * file is let go all the same; the range stays reserved, untouched pages cost nothing. */
        void *m = G.hdr;
        G.hdr = NULL;
        if (mmap(m, G.map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED)
            munmap(m, G.map_len);
    }
}

__attribute__((destructor)) static void agent_fini(void)
{
    uint64_t was = ac_save_clear();
    if (G.hdr && G.active && G.hdr->state == UALDBG_RUNNING) {
        uint64_t mask = block_all();
        maps_snapshot_for_names();
        buffer_mark(UALDBG_EXITED, NULL);
        unblock_all(mask);
    }
    ac_restore(was);
}

/* ------------------------------------------------------------------------------------------ */
/* Test entry points (tests/unit/test_agent_buffer.py): write a buffer without a handler. */

EXPORT int ualdbg_agent_test_open(const char *dir, uint32_t records)
{
    memset(&CFG, 0, sizeof CFG);
    strncpy(CFG.dir, dir, sizeof CFG.dir - 1);
    CFG.records = records;
    CFG.follow = 1;
    G.pid = raw_getpid();
    strncpy(G.exe, "/test/exe", sizeof G.exe - 1);
    return buffer_create();
}

EXPORT void ualdbg_agent_test_fault(uint64_t pc, const uint64_t *regs16, int in_scope, uint64_t key)
{
    greg_t g[NGREG] = {0};
    for (int i = 0; i < 16; i++)
        g[GREG_OF[i]] = (greg_t)regs16[i];
    int created;
    struct ualdbg_site *s = site_slot(pc, &created);
    if (!s)
        return;
    if (created) {
        s->flags = in_scope ? UALDBG_SITE_IN_SCOPE : 0;
        __atomic_store_n(&s->state, UALDBG_SITE_READY, __ATOMIC_RELEASE);
        G.hdr->sites_used++;
    }
    s->count++;
    s->unclassed++; /* no instruction: its class is not known */
    if (in_scope) {
        G.hdr->total++;
        add_variant(s, key | 1ull << 63, g, 0);
        add_record(pc, g, 0, s->flags);
    } else {
        G.hdr->ignored++;
    }
}

EXPORT void ualdbg_agent_test_maps(void)
{
    spin_lock(&maps_lock);
    maps_snapshot_locked();
    spin_unlock(&maps_lock);
}

EXPORT void ualdbg_agent_test_close(int status)
{
    G.hdr->exit_status = status;
    buffer_mark(UALDBG_EXITED, "closed by the test");
}

/* The AC rule the patcher counts an instruction's faults by (access.c): 1 and its operand's size,
 * use (1 read, 2 write, 3 both), way (1 scratch copy, 2 AC cleared) and displacement as the address
 * computation uses it (an EVEX disp8 scaled); 0 and the refusal reason otherwise. */
EXPORT int ualdbg_agent_test_access(const uint8_t *code, size_t n, int *size, int *kind, int *method, int64_t *disp)
{
    struct x86_insn d;
    struct access a;
    if (ualdbg_x86_decode(code, n, &d) != 0)
        return -1;
    int ok = access_of(&d, code, &a);
    *size = a.size;
    *kind = ok ? a.kind : a.reason;
    *method = a.method;
    *disp = (int64_t)d.disp * (d.disp_size == 1 ? a.scale : 1);
    return ok;
}

/* What the patcher knows of the code at pc (codemap.c): CODEMAP_OK (0) and the function's extent,
 * or why a patch there may move no more than the instruction itself. */
EXPORT int ualdbg_agent_test_codemap(uint64_t pc, uint64_t *start, uint64_t *end)
{
    struct code_fn fn = {0, 0};
    int why;
    spin_lock(&maps_lock);
    maps_snapshot_locked();
    const struct codemap *cm = codemap_of(pc, &why);
    if (!why)
        why = codemap_function(cm, pc, &fn);
    spin_unlock(&maps_lock);
    *start = fn.start;
    *end = fn.end;
    return why;
}

EXPORT int ualdbg_agent_test_decode(const uint8_t *code, size_t n, int *len, int *rip_rel, int *disp_off, int *flow)
{
    struct x86_insn d;
    int r = ualdbg_x86_decode(code, n, &d);
    *len = d.len;
    *rip_rel = d.rip_rel;
    *disp_off = d.disp_off;
    *flow = d.flow;
    return r;
}
