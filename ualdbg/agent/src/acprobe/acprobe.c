/* acprobe: measures which x86 instruction classes raise #AC (alignment check) on this CPU.
 *
 * Each probe runs in its own forked child: the child installs a SIGBUS handler, sets
 * EFLAGS.AC, executes ONE instruction on a buffer at a chosen offset from a 64-byte-aligned
 * base, clears AC and exits 0. The handler clears AC first (signal delivery does not) and
 * exits 10 for BUS_ADRALN (an #AC), 11 for any other SIGBUS. A #GP kills the child with
 * SIGSEGV, an unsupported instruction with SIGILL. Probes whose CPUID feature is missing are
 * reported as "skip" and never executed.
 *
 * Output, one line per probe:  <class> <load|store>/<mnemonic> <offset> <ok|ac|bus|gp|ill|sigN|skip>
 * where <class> is the key the Python policy uses (ualdbg/isa/alignment.py AcRules):
 * gp2/gp4/gp8 integer, sse4/sse8 SSE scalar, sse16 SSE 16-byte unaligned moves, vex16/vex32
 * (vmovdqu xmm/ymm), vex64 (vmovdqu64 zmm), x87_4/x87_8/x87_10 (fld dword/qword/tword).
 * Built and run by ualdbg/agent/acprobe.py for ualdbg/isa/alignment.py; not part of the agent. */
#define _GNU_SOURCE
#include <cpuid.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define AC_ON "pushfq\n\torl $0x40000,(%%rsp)\n\tpopfq\n\t"
#define AC_OFF "\n\tpushfq\n\tandl $0xfffbffff,(%%rsp)\n\tpopfq"
#define PROBE(fn, insn, ...) \
    static void fn(char *p) { __asm__ volatile(AC_ON insn AC_OFF :: "r"(p) : "memory", "cc", "rax", "xmm0" __VA_ARGS__); }

PROBE(ld_gp2, "movw (%0), %%ax")
PROBE(ld_gp4, "movl (%0), %%eax")
PROBE(ld_gp8, "movq (%0), %%rax")
PROBE(st_gp8, "movq %%rax, (%0)")
PROBE(ld_sse4, "movss (%0), %%xmm0")
PROBE(st_sse4, "movss %%xmm0, (%0)")
PROBE(ld_sse8, "movsd (%0), %%xmm0")
PROBE(st_sse8, "movsd %%xmm0, (%0)")
PROBE(ld_movups, "movups (%0), %%xmm0")
PROBE(st_movups, "movups %%xmm0, (%0)")
PROBE(ld_movdqu, "movdqu (%0), %%xmm0")
PROBE(st_movdqu, "movdqu %%xmm0, (%0)")
PROBE(ld_vex16, "vmovdqu (%0), %%xmm0")
PROBE(st_vex16, "vmovdqu %%xmm0, (%0)")
PROBE(ld_vex32, "vmovdqu (%0), %%ymm0\n\tvzeroupper")
PROBE(st_vex32, "vmovdqu %%ymm0, (%0)\n\tvzeroupper")
PROBE(ld_vex64, "vmovdqu64 (%0), %%zmm0\n\tvzeroupper")
PROBE(st_vex64, "vmovdqu64 %%zmm0, (%0)\n\tvzeroupper")
PROBE(ld_x87_4, "flds (%0)\n\tfstp %%st(0)", , "st")
PROBE(ld_x87_8, "fldl (%0)\n\tfstp %%st(0)", , "st")
PROBE(ld_x87_10, "fldt (%0)\n\tfstp %%st(0)", , "st")

enum { F_NONE, F_X87, F_SSE, F_SSE2, F_AVX, F_AVX512F };

struct probe {
    const char *cls;
    const char *kind;
    void (*fn)(char *);
    int feature;
    int offsets[6];  /* from a 64-byte-aligned base; -1 ends the list */
};

static const struct probe PROBES[] = {
    {"gp2", "load/movw", ld_gp2, F_NONE, {0, 1, 2, -1}},
    {"gp4", "load/movl", ld_gp4, F_NONE, {0, 2, 4, -1}},
    {"gp8", "load/movq", ld_gp8, F_NONE, {0, 4, 8, -1}},
    {"gp8", "store/movq", st_gp8, F_NONE, {0, 4, 8, -1}},
    {"sse4", "load/movss", ld_sse4, F_SSE, {0, 2, 4, -1}},
    {"sse4", "store/movss", st_sse4, F_SSE, {0, 2, 4, -1}},
    {"sse8", "load/movsd", ld_sse8, F_SSE2, {0, 4, 8, -1}},
    {"sse8", "store/movsd", st_sse8, F_SSE2, {0, 4, 8, -1}},
    {"sse16", "load/movups", ld_movups, F_SSE, {0, 1, 4, 8, 16, -1}},
    {"sse16", "store/movups", st_movups, F_SSE, {0, 1, 4, 8, 16, -1}},
    {"sse16", "load/movdqu", ld_movdqu, F_SSE2, {0, 1, 4, 8, 16, -1}},
    {"sse16", "store/movdqu", st_movdqu, F_SSE2, {0, 1, 4, 8, 16, -1}},
    {"vex16", "load/vmovdqu", ld_vex16, F_AVX, {0, 1, 8, 16, -1}},
    {"vex16", "store/vmovdqu", st_vex16, F_AVX, {0, 1, 8, 16, -1}},
    {"vex32", "load/vmovdqu", ld_vex32, F_AVX, {0, 1, 8, 16, 32, -1}},
    {"vex32", "store/vmovdqu", st_vex32, F_AVX, {0, 1, 8, 16, 32, -1}},
    {"vex64", "load/vmovdqu64", ld_vex64, F_AVX512F, {0, 1, 8, 16, 32, -1}},
    {"vex64", "store/vmovdqu64", st_vex64, F_AVX512F, {0, 1, 8, 16, 32, -1}},
    {"x87_4", "load/flds", ld_x87_4, F_X87, {0, 2, 4, -1}},
    {"x87_8", "load/fldl", ld_x87_8, F_X87, {0, 4, 8, -1}},
    {"x87_10", "load/fldt", ld_x87_10, F_X87, {0, 2, 4, 8, 16, -1}},
};

static int has(int feature) {
    unsigned a, b, c, d;
    if (feature == F_NONE)
        return 1;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return 0;
    switch (feature) {
    case F_X87: return (d >> 0) & 1;
    case F_SSE: return (d >> 25) & 1;
    case F_SSE2: return (d >> 26) & 1;
    default: break;
    }
    if (!((c >> 27) & 1) || !((c >> 28) & 1))  /* OSXSAVE and AVX */
        return 0;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & 0x6) != 0x6)  /* the OS saves XMM and YMM state */
        return 0;
    if (feature == F_AVX)
        return 1;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !((b >> 16) & 1))
        return 0;
    return (lo & 0xe0) == 0xe0;  /* opmask, ZMM_Hi256, Hi16_ZMM state */
}

static void on_sigbus(int sig, siginfo_t *si, void *uc) {
    (void)sig;
    (void)uc;
    __asm__ volatile("pushfq\n\tandl $0xfffbffff,(%%rsp)\n\tpopfq" ::: "memory", "cc");
    _exit(si->si_code == BUS_ADRALN ? 10 : 11);
}

static _Alignas(64) char buffer[256];

static const char *run(const struct probe *pr, int offset) {
    static char other[16];
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0)
        return "fork";
    if (pid == 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_sigbus;
        sa.sa_flags = SA_SIGINFO;
        sigaction(SIGBUS, &sa, NULL);
        pr->fn(buffer + 64 + offset);
        _exit(0);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0) {
    }
    if (WIFEXITED(status))
        switch (WEXITSTATUS(status)) {
        case 0: return "ok";
        case 10: return "ac";
        case 11: return "bus";
        default: break;
        }
    if (WIFSIGNALED(status)) {
        if (WTERMSIG(status) == SIGSEGV)
            return "gp";
        if (WTERMSIG(status) == SIGILL)
            return "ill";
        snprintf(other, sizeof other, "sig%d", WTERMSIG(status));
        return other;
    }
    return "err";
}

int main(void) {
    for (size_t i = 0; i < sizeof PROBES / sizeof PROBES[0]; i++) {
        const struct probe *pr = &PROBES[i];
        int ok = has(pr->feature);
        for (const int *off = pr->offsets; *off >= 0; off++)
            printf("%s %s %d %s\n", pr->cls, pr->kind, *off, ok ? run(pr, *off) : "skip");
    }
    return 0;
}
