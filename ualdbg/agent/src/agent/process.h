/* process.h - what the agent's C files share: configuration, per-process and per-thread state,
 * EFLAGS.AC primitives, raw system calls that bypass the wrapped libc entry points, and
 * process.c's functions. The files are in one order, each calling only those before it:
 * process.c <- codemap.c <- stopworld.c <- patch.c <- trampolines.c <- wrappers.c <- signals.c <- agent.c
 * (insn.c, cfi.c and access.c call none of them); each offers the ones after it its own header. */
#ifndef UALDBG_AGENT_INTERNAL_H
#define UALDBG_AGENT_INTERNAL_H

#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <ucontext.h>
#include <unistd.h>

#include "ualdbg_agent.h"

#define AC_BIT 0x40000ULL
#define TF_BIT 0x100ULL
#define HIDDEN __attribute__((visibility("hidden")))
#define EXPORT __attribute__((visibility("default")))
#define MAX_MODULES 32
#define SKIP_DEPTH 32

struct agent_config {
    int configured;      /* UALDBG_AGENT was present and valid */
    int follow;
    int at_start;
    int all_modules;
    int noskip;
    uint32_t patch_after; /* traps at a site before the patcher rewrites it (patch.c); 0: never */
    uint32_t records;
    long ualdbg_pid;     /* the ualdbg process: an image whose parent it is runs the program */
    int watch;           /* injected: watch ualdbg_pid, disarm when it is gone (agent.c, "Orphaned") */
    char dir[512];
    char preload_orig[2048]; /* the user's own LD_PRELOAD, restored for children when not following */
    int had_preload;
    int nmodules;
    char modules[MAX_MODULES][256];
    char agent_path[1024];
    int system;               /* sys=1: a system program (sysdirs) that is not the root runs unarmed */
    char sysdirs[512];        /* the system program folders, comma-separated, each ending in '/' */
};

struct agent_state {
    volatile int active;  /* tracing this process image */
    volatile int armed;   /* the arming point was reached */
    int system_unarmed;   /* a system program the run's root started: its faults are all out of scope,
                           * so it is never armed (engines/agent.py, out_of_scope_program) */
    int root_line;        /* the program ualdbg started (its pid), in any image */
    pid_t pid;
    uint32_t fork_gen;
    struct ualdbg_header *hdr;
    struct ualdbg_site *sites;
    struct ualdbg_record *records;
    char *maps;
    size_t map_len;
    uint32_t site_mask;
    volatile uint64_t *fork_token; /* MADV_WIPEONFORK: reads 0 in a forked child */
    char exe[512];
    char interp[512];
    int have_fsgsbase;
    int shadow_stack; /* CET user shadow stack enabled: no emulated call/ret, no return-address swap */
    int injected;         /* loaded into a running process (ualdbg trace --pid): every thread counts as armed */
    volatile int detaching; /* ualdbg_agent_disarm ran: AC faults are swallowed, nothing sets AC again */
    volatile int orphaned;  /* the ualdbg that injected the agent died first: disarmed by the agent itself */
    int watching;           /* owner_fd is a pidfd of CFG.ualdbg_pid (owner_dev, owner_ino: which one) */
    int owner_fd;
    uint64_t owner_dev, owner_ino;
    uint64_t owner_check_ns; /* when the owner is looked at next (at most every OWNER_CHECK_NS) */
};

struct thread_state {
    int want_armed;       /* this thread passed its arming point (main, or its start routine) */
    int step_pending;     /* a single-step re-arm is outstanding */
    uint32_t tid_gen;
    pid_t tid;
    int skip_n;
    uint64_t skip_slot[SKIP_DEPTH];
    uint64_t skip_ra[SKIP_DEPTH];
    int in_program_handler; /* depth of the program's signal handlers running on this thread */
    uint64_t blind_since;   /* armed, with SIGBUS blocked by the program, since (0: not blind; wrappers.c) */
    uint32_t blind_gen;     /* G.fork_gen when blind_since was set: a fork child counts afresh */
    int blind_counted;      /* this thread is in the buffer's blind_threads */
};

extern struct agent_config CFG HIDDEN;
extern volatile int ualdbg_in_handler EXPORT;
extern struct agent_state G HIDDEN;
extern __thread struct thread_state TS __attribute__((tls_model("initial-exec"))) HIDDEN;

/* EFLAGS.AC. The agent is built with -mno-red-zone: pushfq below rsp is safe in any function. */
static inline uint64_t ac_get(void)
{
    uint64_t f;
    __asm__ volatile("pushfq\n\tpopq %0" : "=r"(f)::"memory");
    return f & AC_BIT;
}
static inline void ac_set(void)
{
    __asm__ volatile("pushfq\n\torl $0x40000,(%%rsp)\n\tpopfq" ::: "memory", "cc");
}
static inline void ac_clear(void)
{
    __asm__ volatile("pushfq\n\tandl $0xfffbffff,(%%rsp)\n\tpopfq" ::: "memory", "cc");
}
/* Clear AC on entry to agent code; returns the previous state for ac_restore. */
static inline uint64_t ac_save_clear(void)
{
    uint64_t was = ac_get();
    if (was)
        ac_clear();
    return was;
}
/* Detaching (or disarmed because ualdbg died), AC is not given back: a thread that runs into any
 * of the agent's entry points leaves it unarmed. */
static inline void ac_restore(uint64_t was)
{
    if (was && !G.detaching)
        ac_set();
}

static inline long raw_syscall4(long n, long a, long b, long c, long d)
{
    long ret;
    register long r10 __asm__("r10") = d;
    __asm__ volatile("syscall" : "=a"(ret) : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10) : "rcx", "r11", "memory");
    return ret;
}
static inline pid_t raw_getpid(void) { return (pid_t)raw_syscall4(SYS_getpid, 0, 0, 0, 0); }
static inline pid_t raw_gettid(void) { return (pid_t)raw_syscall4(SYS_gettid, 0, 0, 0, 0); }
/* The kernel's sigset is 8 bytes on x86-64. */
static inline int raw_sigprocmask(int how, const uint64_t *set, uint64_t *old)
{
    return (int)raw_syscall4(SYS_rt_sigprocmask, how, (long)set, (long)old, 8);
}
static inline int sigbus_blocked_now(void)
{
    uint64_t cur = 0;
    raw_sigprocmask(SIG_BLOCK, 0, &cur);
    return (int)((cur >> (SIGBUS - 1)) & 1);
}

struct mapping {
    uint64_t start, end;
    const char *path; /* in the snapshot text; NUL-free, length `plen` */
    uint16_t plen;
    uint8_t read;
    uint8_t exec;
    uint8_t write;
    uint8_t priv;
};

struct ualdbg_site;
struct x86_insn;

/* process.c */
#define MAPS_CAPACITY (16u << 20)

extern volatile int maps_lock HIDDEN;
HIDDEN void spin_lock(volatile int *l);
HIDDEN void spin_unlock(volatile int *l);
HIDDEN uint64_t now_ns(void);
HIDDEN char *put_str(char *p, char *end, const char *s);
HIDDEN char *put_u64(char *p, char *end, uint64_t v);
HIDDEN uint64_t block_all(void);
HIDDEN void unblock_all(uint64_t old);
HIDDEN int armable(void);
HIDDEN void rearm(void);
HIDDEN void maps_snapshot_locked(void);
HIDDEN void maps_snapshot(void);
HIDDEN void maps_snapshot_for_names(void);
HIDDEN const struct mapping *maps_find(uint64_t addr);
HIDDEN const struct mapping *maps_lookup_locked(uint64_t pc);
HIDDEN int64_t distance(uint64_t a, uint64_t b);
HIDDEN uint8_t *pool_map_near(uint64_t near, size_t size);
HIDDEN void *zone_map(size_t size);
HIDDEN void zone_unmap(void *p, size_t size);
HIDDEN int uses_stack(const struct x86_insn *d);
HIDDEN struct ualdbg_site *site_slot(uint64_t pc, int *created);
HIDDEN void buffer_mark(uint32_t state, const char *note);
HIDDEN void process_exited(int status);
HIDDEN void arm_here(void);
HIDDEN int env_has_agent(char *const envp[]);
HIDDEN char **env_without_agent(char *const envp[]);
HIDDEN int elf_is_foreign(const char *path);
HIDDEN void *real_fn(const char *name);

/* entry.S */
void ualdbg_sigbus_entry(int, siginfo_t *, void *) HIDDEN;
void ualdbg_sigtrap_entry(int, siginfo_t *, void *) HIDDEN;
void ualdbg_signal_entry(int, siginfo_t *, void *) HIDDEN;
void ualdbg_skip_return(void) HIDDEN;

#endif
