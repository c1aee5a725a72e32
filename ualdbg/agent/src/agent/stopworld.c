/* stopworld.c - writing a jump into code other threads may be running (for patch.c): the other
 * threads stopped in the process itself, or the jump written so that none can see it half-written.
 *
 * A single instruction's jump that fits an aligned 8 or 16 bytes is one atomic store (code_write,
 * W_ATOMIC). Anything else needs every other thread stopped (world_stop): each running thread gets
 * a queued SIGBUS (rt_tgsigqueueinfo, SI_QUEUE, the generation and its slot in si_value) and parks
 * in the agent's handler (patch_stop_request, called first by agent.c's SIGBUS handler) with every
 * signal blocked, saying where it stands; a thread asleep in a system call is left asleep (its
 * return PC read from /proc: outside the jump's bytes, and it must not block SIGTRAP); no thread
 * may have started meanwhile, nor be inside the agent's handlers. The jump is then written any way
 * when every thread is parked, else int3 first, then the last 4 bytes, then the first (the kernel's
 * text_poke_bp order: a thread that wakes and reaches the jump meanwhile stops at the int3, and
 * patch.c sends it on to the trampoline). This in-process stop-the-world, not text_poke_bp alone:
 * that order cannot see nor move a thread already inside a window of several instructions.
 *
 * Calls process.c only (the order: process.h).
 */
#include "stopworld.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#ifndef SI_QUEUE
#define SI_QUEUE -1
#endif
#define STOP_THREADS 512

/* One thread asked to stop. Its word is gen << 2 | state (sent, claimed by the thread, ready: it
 * has said where it stands, done: released, it has taken where it goes on); the request carries
 * gen and the slot's index, so that a request that arrives late (after its generation was given
 * up, the slot reused) changes nothing. */
enum { SL_SENT = 0, SL_CLAIMED = 1, SL_READY = 2, SL_DONE = 3 };

struct stop_slot {
    pid_t tid;
    volatile uint64_t word;
    uint64_t rip;
    uint64_t ool_origin; /* stopped in an out-of-line copy of the instruction at this PC */
    int ool_at_start;
    uint64_t new_rip;
};

/* Generation g uses bank g % BANKS of slots: a stop reuses a bank only once each thread parked
 * there BANKS stops before has taken where it goes on (its slot's new_rip). Reused before, a slot
 * lost a move: a thread parked inside the jump's bytes, released but not yet scheduled, went on
 * there (SIGSEGV, the hammer test under load: another thread patched the next window first). The
 * banks keep the next stop from waiting for threads that have not run since their release. */
#define BANKS 4
static struct {
    volatile uint32_t gen;
    volatile uint32_t release; /* the last generation released (the threads go on when >= theirs) */
    volatile int acks;         /* (a futex word: a thread that is ready adds 1) */
    int bank;                  /* the last stop's */
    int n[BANKS];
    struct stop_slot slots[BANKS][STOP_THREADS];
} stop;
#define NOW stop.slots[stop.bank]
#define NNOW stop.n[stop.bank]

static long futex(volatile void *addr, int op, int val, const struct timespec *ts)
{
    return raw_syscall4(SYS_futex, (long)addr, op | FUTEX_PRIVATE_FLAG, val, (long)ts);
}

/* A thread of this process, told to stop (agent.c's SIGBUS handler calls this first): parks until
 * the patcher releases it, reporting where it stands. 1 when the signal was the patcher's. */
int patch_stop_request(const siginfo_t *si, ucontext_t *uc, uint64_t ool_origin, int ool_at_start)
{
    if (si->si_code != SI_QUEUE || si->si_pid != G.pid)
        return 0;
    uint64_t v = (uint64_t)(uintptr_t)si->si_value.sival_ptr;
    if ((v >> 48) != 0x5a7d)
        return 0; /* not the patcher's */
    uint32_t g = (uint32_t)(v >> 16), i = (uint32_t)(v & 0xffff);
    if (i >= STOP_THREADS)
        return 1;
    struct stop_slot *sl = &stop.slots[g % BANKS][i];
    uint64_t all = ~0ull, mask;
    raw_sigprocmask(SIG_SETMASK, &all, &mask); /* nothing runs here until released */
    uint64_t expect = (uint64_t)g << 2 | SL_SENT;
    if (!__atomic_compare_exchange_n(&sl->word, &expect, (uint64_t)g << 2 | SL_CLAIMED, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE) ||
        sl->tid != raw_gettid()) {
        raw_sigprocmask(SIG_SETMASK, &mask, NULL);
        return 1; /* late, or twice: the patcher has moved on */
    }
    greg_t *gr = uc->uc_mcontext.gregs;
    sl->rip = (uint64_t)gr[REG_RIP];
    sl->ool_origin = ool_origin;
    sl->ool_at_start = ool_at_start;
    sl->new_rip = 0;
    __atomic_store_n(&sl->word, (uint64_t)g << 2 | SL_READY, __ATOMIC_RELEASE);
    __atomic_add_fetch(&stop.acks, 1, __ATOMIC_ACQ_REL);
    futex(&stop.acks, FUTEX_WAKE, 1, NULL);
    for (;;) {
        uint32_t r = __atomic_load_n(&stop.release, __ATOMIC_ACQUIRE);
        if ((int32_t)(r - g) >= 0)
            break;
        futex(&stop.release, FUTEX_WAIT, (int)r, NULL); /* (r read once: a release in between is seen) */
    }
    uint64_t ready = (uint64_t)g << 2 | SL_READY;
    if (sl->new_rip && __atomic_load_n(&sl->word, __ATOMIC_ACQUIRE) == ready)
        gr[REG_RIP] = (greg_t)sl->new_rip;
    /* (the slot may be reused from now on: a world_stop on this bank waits for this) */
    __atomic_compare_exchange_n(&sl->word, &ready, (uint64_t)g << 2 | SL_DONE, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    raw_sigprocmask(SIG_SETMASK, &mask, NULL);
    return 1;
}

static ssize_t read_file(const char *path, char *buf, size_t cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, cap - 1);
    close(fd);
    if (n >= 0)
        buf[n] = 0;
    return n;
}

static char *task_path(char *buf, pid_t tid, const char *leaf)
{
    char *p = buf, *end = buf + 63;
    p = put_str(p, end, "/proc/self/task/");
    p = put_u64(p, end, (uint64_t)tid);
    p = put_str(p, end, "/");
    p = put_str(p, end, leaf);
    *p = 0;
    return buf;
}

/* The process's threads now; -1 if they cannot be listed (or too many). */
static int list_threads(pid_t *tids, int cap)
{
    int fd = open("/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    static char buf[8192];
    int n = 0;
    for (;;) {
        long r = raw_syscall4(SYS_getdents64, fd, (long)buf, sizeof buf, 0);
        if (r <= 0)
            break;
        for (long off = 0; off < r;) {
            const char *ent = buf + off;
            uint16_t reclen;
            memcpy(&reclen, ent + 16, 2);
            const char *name = ent + 19;
            if (name[0] >= '1' && name[0] <= '9') {
                if (n >= cap) {
                    close(fd);
                    return -1;
                }
                tids[n++] = (pid_t)strtol(name, NULL, 10);
            }
            off += reclen;
        }
    }
    close(fd);
    return n;
}

/* A thread's state letter (R, S, D, T, t, Z...) and whether it blocks SIGBUS; 0 if unknown. */
static char thread_state(pid_t tid, int *blocks_sigbus)
{
    char path[64], buf[2048];
    if (read_file(task_path(path, tid, "stat"), buf, sizeof buf) <= 0)
        return 0;
    char *p = strrchr(buf, ')');
    char state = p && p[1] == ' ' ? p[2] : 0;
    *blocks_sigbus = 1;
    if (read_file(task_path(path, tid, "status"), buf, sizeof buf) > 0) {
        char *q = strstr(buf, "\nSigBlk:");
        if (q)
            *blocks_sigbus = (int)((strtoull(q + 8, NULL, 16) >> (SIGBUS - 1)) & 1);
    }
    return state;
}

/* Whether a thread blocks SIGTRAP (an int3 would then kill the process: the kernel forces it). */
static int blocks_sigtrap(pid_t tid)
{
    char path[64], buf[2048];
    if (read_file(task_path(path, tid, "status"), buf, sizeof buf) <= 0)
        return 1;
    char *q = strstr(buf, "\nSigBlk:");
    return !q || ((strtoull(q + 8, NULL, 16) >> (SIGTRAP - 1)) & 1);
}

/* The user PC of a thread blocked in the kernel (/proc/.../syscall: "nr args... sp pc", or "-1
 * sp pc" when blocked outside a system call); 0 when it is running. */
static uint64_t blocked_pc(pid_t tid)
{
    char path[64], buf[512];
    if (read_file(task_path(path, tid, "syscall"), buf, sizeof buf) <= 0 || !strncmp(buf, "running", 7))
        return 0;
    char *last = strrchr(buf, ' ');
    return last ? strtoull(last + 1, NULL, 16) : 0;
}

static void wake_all(uint32_t g)
{
    __atomic_store_n(&stop.release, g, __ATOMIC_RELEASE);
    futex(&stop.release, FUTEX_WAKE, 1 << 30, NULL);
}

int world_parked(void) { return NNOW; }

void world_where(int i, uint64_t *rip, uint64_t *ool_origin)
{
    *rip = NOW[i].rip;
    *ool_origin = NOW[i].ool_origin;
}

void world_move(int i, uint64_t to) { NOW[i].new_rip = to; }

void world_release(void) { wake_all(stop.gen); }

void world_after_fork(void) { memset((void *)&stop, 0, sizeof stop); }

/* trampolines.c's outofline_origin and outofline_redirect (a later file: handed over by agent.c
 * at start). */
static uint64_t (*outofline_hook)(uint64_t rip, int *at_start);
static void (*redirect_hook)(uint64_t from, uint64_t to);

/* The agent's own executable code (agent.c, at start): a thread asleep there is inside one of its
 * handlers, about to decide where its context resumes. */
static uint64_t self_lo, self_hi;

void world_set_self_text(uint64_t lo, uint64_t hi)
{
    self_lo = lo;
    self_hi = hi;
}

/* The agent's own thread (its watchdog, asleep in poll in the agent's code for as long as ualdbg
 * lives): never the program's, never inside a handler. tid 0: none; `was` is cleared only. */
static volatile pid_t own_tid;

void world_own_thread(pid_t tid, pid_t was)
{
    if (tid)
        __atomic_store_n(&own_tid, tid, __ATOMIC_RELEASE);
    else
        __atomic_compare_exchange_n(&own_tid, &was, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
}

void world_set_outofline_hooks(uint64_t (*origin)(uint64_t rip, int *at_start), void (*redirect)(uint64_t from, uint64_t to))
{
    outofline_hook = origin;
    redirect_hook = redirect;
}

void world_redirect_outofline(uint64_t from, uint64_t to)
{
    if (redirect_hook)
        redirect_hook(from, to);
}

/* Stops every other thread (parked in the handler, or asleep at a known PC outside the jump's
 * bytes (a, a + 5), the jump then written atomically), and says where the parked ones stand. Returns 0, or a
 * refusal reason (the world is running again). *all_parked: no thread left asleep. */
static int slot_ready(const struct stop_slot *sl, uint32_t g)
{
    return __atomic_load_n(&sl->word, __ATOMIC_ACQUIRE) == ((uint64_t)g << 2 | SL_READY);
}

int world_stop(uint64_t a, int *all_parked)
{
    static pid_t tids[STOP_THREADS];
    pid_t self = raw_gettid(), pid = G.pid;
    int n = list_threads(tids, STOP_THREADS);
    if (n < 0)
        return UALDBG_PATCH_R_THREADS;
    uint32_t g = __atomic_add_fetch(&stop.gen, 1, __ATOMIC_ACQ_REL);
    /* This bank's threads of BANKS stops ago still writing where they stand, or released and not
     * yet scheduled to take where they go on: let them finish first. */
    stop.bank = (int)(g % BANKS);
    for (int i = 0; i < NNOW; i++)
        for (;;) {
            uint64_t st = __atomic_load_n(&NOW[i].word, __ATOMIC_ACQUIRE) & 3;
            if (st != SL_CLAIMED && st != SL_READY)
                break;
            sched_yield();
        }
    NNOW = 0;
    *all_parked = 1;
    for (int i = 0; i < n; i++) {
        if (tids[i] == self)
            continue;
        int blocks;
        char st = thread_state(tids[i], &blocks);
        if (st == 'Z' || st == 'X' || st == 0)
            continue; /* exiting: runs no user code */
        uint64_t pc = st == 'R' ? 0 : blocked_pc(tids[i]);
        /* Asleep in the agent's own code (a page of the record buffer, /proc, inside a handler):
         * parked like a running thread, not left asleep. It wakes within moments and resumes where
         * its handler decides (an out-of-line copy that jumps back under the jump, a step there),
         * perhaps after it has left the handler and before ualdbg_in_handler is read below: left
         * asleep, it ran on under the jump as it was written (the hammer test under load). Its
         * request waits until its handler returns, and it parks at the PC the handler chose. (Not
         * the agent's own watchdog, asleep in poll for as long as ualdbg lives.) */
        if (pc >= self_lo && pc < self_hi && tids[i] != __atomic_load_n(&own_tid, __ATOMIC_ACQUIRE))
            pc = 0;
        if (pc) {
            /* asleep in the kernel: it comes back at pc; should it wake and run to a while the jump
             * is written, the int3 written first stops it there. Not only a system call's return:
             * a thread stopped by a tracer (another ualdbg attaching, gdb) or waiting for a page is
             * asleep at any user PC, perhaps half-way through an out-of-line copy of an instruction
             * under the jump, which jumps back after that instruction, into the jump's bytes. Not
             * parked, it cannot be moved: refused (tried again later). */
            int at_start = 0;
            uint64_t ool = outofline_hook ? outofline_hook(pc, &at_start) : 0;
            if ((pc > a && pc < a + 5) || (ool >= a && ool < a + 5) || blocks_sigtrap(tids[i]))
                goto fail;
            *all_parked = 0;
            continue;
        }
        /* (One that blocks SIGBUS now is most often in the agent's own SIGBUS handler, and takes
         * the request when it returns; one that stays blocked makes this attempt fail.) */
        (void)blocks;
        struct stop_slot *sl = &NOW[NNOW++];
        sl->tid = tids[i];
        __atomic_store_n(&sl->word, (uint64_t)g << 2 | SL_SENT, __ATOMIC_RELEASE);
    }
    for (int round = 0; round < 400; round++) { /* up to 0.2 s: a thread may wait that long for a CPU */
        int ready = 0;
        for (int i = 0; i < NNOW; i++)
            ready += slot_ready(&NOW[i], g);
        if (ready == NNOW)
            break;
        if (round % 8 == 0) /* (again: a SIGBUS already pending in the thread swallows a new one) */
            for (int i = 0; i < NNOW; i++)
                if (!slot_ready(&NOW[i], g)) {
                    siginfo_t si;
                    memset(&si, 0, sizeof si);
                    si.si_signo = SIGBUS;
                    si.si_code = SI_QUEUE;
                    si.si_pid = pid;
                    si.si_uid = getuid();
                    si.si_value.sival_ptr = (void *)(uintptr_t)(0x5a7dull << 48 | (uint64_t)g << 16 | (uint64_t)i);
                    raw_syscall4(SYS_rt_tgsigqueueinfo, pid, NOW[i].tid, SIGBUS, (long)&si);
                }
        int seen = __atomic_load_n(&stop.acks, __ATOMIC_ACQUIRE);
        struct timespec ts = {0, 500000};
        futex(&stop.acks, FUTEX_WAIT, seen, &ts);
    }
    for (int i = 0; i < NNOW; i++)
        if (!slot_ready(&NOW[i], g))
            goto fail;
    /* No other thread inside the agent's handlers: one asleep there (reading /proc, say) would
     * resume where its handler decided, perhaps after an instruction now under the jump. */
    if (__atomic_load_n(&ualdbg_in_handler, __ATOMIC_ACQUIRE) > 1 + NNOW) /* (this one, the parked) */
        goto fail;
    /* No thread started meanwhile (one that did runs freely). */
    static pid_t again[STOP_THREADS];
    int m = list_threads(again, STOP_THREADS);
    for (int i = 0; i < m; i++) {
        int known = 0;
        for (int j = 0; j < n && !known; j++)
            known = again[i] == tids[j];
        if (!known)
            goto fail;
    }
    /* The parked threads: outside the jump's bytes, or at one of the window's instructions
     * (moved to the trampoline's), or at the start of an out-of-line copy of one (moved to its
     * copy that runs with AC clear). The trampoline's offsets are set by the caller. */
    for (int i = 0; i < NNOW; i++) {
        struct stop_slot *sl = &NOW[i];
        sl->new_rip = 0;
        if (sl->ool_origin >= a && sl->ool_origin < a + 5 && !sl->ool_at_start)
            goto fail; /* half-way through an out-of-line copy that returns under the jump */
    }
    return 0;
fail:
    wake_all(g);
    return UALDBG_PATCH_R_THREADS;
}

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

int atomic_fit(uint64_t pc) { return (pc & 15) <= 11; }

/* The window whose jump is being written with an int3 first: a thread that hits the int3 goes on
 * at the trampoline (patch_int3_hit). */
static volatile uint64_t int3_at, int3_to;
static void (*sigtrap_hook)(void);

void patch_set_sigtrap_hook(void (*ensure)(void)) { sigtrap_hook = ensure; }

int world_can_int3(void)
{
    if (!sigtrap_hook)
        return 0;
    sigtrap_hook();
    return 1;
}

uint64_t world_int3_target(uint64_t at)
{
    return at == __atomic_load_n(&int3_at, __ATOMIC_ACQUIRE) ? int3_to : 0;
}

/* 5 bytes at pc, `to` the trampoline's entry. W_ATOMIC: one aligned 8- or 16-byte atomic store (a
 * thread running there sees the old instruction or the jump); W_ANYHOW: any store (nothing else
 * runs: one thread, or every other one parked); W_INT3: the kernel's order for code other CPUs may
 * run (text_poke_bp): an int3 first, then the last 4 bytes, then the first byte (the only threads
 * not parked are asleep in system calls outside the 5 bytes: one that wakes and reaches pc
 * meanwhile stops at the int3, and goes on in the trampoline). Signals blocked meanwhile: the
 * program's handler could run the code half-written. Returns a refusal reason or 0. */
int code_write(uint64_t pc, const uint8_t jmp[5], int how, uint64_t to)
{
    if (how == W_ATOMIC && !atomic_fit(pc))
        return UALDBG_PATCH_R_THREADS;
    uint64_t lo = pc & ~4095ull, hi = (pc + 4) & ~4095ull;
    size_t len = (size_t)(hi - lo) + 4096;
    uint64_t mask = block_all();
    if (mprotect((void *)(uintptr_t)lo, len, PROT_READ | PROT_WRITE | PROT_EXEC) != 0) {
        unblock_all(mask);
        return UALDBG_PATCH_R_PROTECT;
    }
    volatile uint8_t *c = (volatile uint8_t *)(uintptr_t)pc;
    if (how == W_INT3) {
        int3_to = to;
        __atomic_store_n(&int3_at, pc, __ATOMIC_SEQ_CST);
        __atomic_store_n(c, 0xcc, __ATOMIC_SEQ_CST);
        for (int i = 1; i < 5; i++)
            c[i] = jmp[i];
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
        __atomic_store_n(c, jmp[0], __ATOMIC_SEQ_CST);
    } else if (how == W_ANYHOW) {
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
    unblock_all(mask);
    return 0;
}

/* The process's threads now (/proc/self/stat, field 20); 0 if unknown. */
int thread_count(void)
{
    char buf[1024];
    if (read_file("/proc/self/stat", buf, sizeof buf) <= 0)
        return 0;
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
