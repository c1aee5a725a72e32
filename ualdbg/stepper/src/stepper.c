/* ualdbg-stepper: the native single-step engine of `ualdbg trace --engine step`.
 *
 * One ptrace tracer, pinned to one CPU; each thread is moved to that CPU while it steps inside
 * the scope and gets its own CPU mask back when it leaves (tracer and tracee on one CPU step
 * 3-5x faster in this VM: docs PLATFORM.md). Outside the scope threads run at full speed; int3
 * breakpoints at the scope's entries (and at the return address of each call that leaves it)
 * bring them back. The Python side (ualdbg/engines/stepnative.py) decodes the scope once with
 * capstone and sends a table of operand recipes per PC, plus a bitmap per operand class of the
 * addresses (mod 4096) the alignment policy rejects, so the hot loop evaluates base + index *
 * scale + disp from the saved registers and never decodes. A PC in scope that the table lacks
 * is sent to Python to decode, once.
 *
 * usage: ualdbg-stepper CMD_FD EVT_FD OUT_FILE RECORDS NO_ASLR PROG ARGS...
 * Protocol (little-endian): messages are u32 type, u32 length, payload; see stepnative.py.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/ptrace.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { EVT_EXEC = 1, EVT_ARMED = 2, EVT_DECODE = 3, EVT_DONE = 4, EVT_EXIT_EARLY = 5 };
enum { CMD_ARM = 1, CMD_TABLE = 2, CMD_RECIPE = 3, CMD_KILL = 4 };
enum { FLOW_NEXT, FLOW_JUMP, FLOW_CALL, FLOW_RET, FLOW_COND, FLOW_OTHER };
/* RF_DISPLACE: the instruction runs the same from another address once its 32-bit RIP-relative
   field (a memory displacement, a branch's rel32), at offset `disp_off` (0: none), is re-aimed
   and, for a call, the return address it pushed is put right; disp_off with SHORT_BRANCH set: a
   branch's rel8 there, which a 2-byte jmp/jcc copied as its rel32 form can reach. Python works that out for the
   entries and return sites (RF_DISPLACE_KNOWN); for another PC the stepper asks. */
enum { RF_REP = 1, RF_REP_ADDR4 = 2, RF_UNMODELLED = 4, RF_RETSITE = 8, RF_DISPLACE = 16, RF_DISPLACE_KNOWN = 32 };
#define SHORT_BRANCH 0x80
#define MAX_RETS 64
#define MAX_OPS 8
#define NO_CHECK 0xffff

struct op { /* 32 bytes on the wire */
    int64_t disp;
    int8_t base; uint8_t base_shift, base_bits;
    int8_t index; uint8_t index_shift, index_bits, scale;
    uint8_t seg, addr4, kind;
    int8_t bit_reg; uint8_t bit_bits, bit_shift, pad0;
    uint16_t size, check, pad1;
    uint32_t pad2;
} __attribute__((packed));

struct recipe {
    uint64_t pc;
    uint8_t len, flow, nops, flags, disp_off;
    struct op ops[MAX_OPS];
};

/* slot: where the original instruction is copied for displaced steps (1 + its index in the
   scratch area), 0 not yet, -1 it cannot be displaced (stepped over with the others stopped);
   copy_len: the copy's length (a short branch's is longer) */
struct bp { uint64_t addr; uint8_t orig; int inserted; int lifted; int slot; uint8_t copy_len; };

struct thread {
    pid_t tid;
    int used, stepping, pinned, seen;
    /* running: resumed by us and not yet reported stopped (reported stops may wait in `evq`).
       stopping: sent a SIGSTOP by stop_others and not yet reported; held: stopped by it, to be
       resumed by resume_others; stop_pending: that SIGSTOP is still to come (the thread
       reported something else first), and is swallowed when it does. */
    int running, stopping, held, stop_pending;
    cpu_set_t saved;
    struct recipe *last;       /* the instruction just stepped */
    uint64_t resume_pc;        /* a handler runs before the instruction here: come back to it */
    /* A displaced step under way: the instruction at disp_from, disp_len bytes long, runs from
       its copy at disp_slot. */
    uint64_t disp_from, disp_slot;
    uint8_t disp_len, disp_copy_len, disp_call;
    uint64_t entered_ns;       /* when it last entered the scope */
    /* In-scope return addresses of calls that left the scope, innermost last: with debug
       registers the innermost one is this thread's own DR3 breakpoint (no shared int3 to lift
       while another thread steps over it). */
    uint64_t rets[MAX_RETS];
    int nrets;
    /* The access the instruction being stepped breaks the policy with: counted when its step
       completes, dropped when a signal handler preempts the instruction (it runs again later). */
    int pending;
    uint64_t p_pc, p_va;
    uint16_t p_size;
    uint8_t p_kind;
};

/* line, page: of `count`, the accesses that spanned two 64-byte lines, and of those two 4 KiB pages
   (their cost class: ualdbg/core/cost.py) */
struct site { uint64_t pc, count; uint32_t kinds; uint16_t sizes[4]; uint64_t line, page; } __attribute__((packed));
struct record { uint64_t seq, time_ns, pc, va; uint32_t pid, tid; uint16_t size; uint8_t kind, cpu; uint32_t pad; } __attribute__((packed));

static int cmd_fd, evt_fd;
static pid_t child;
static int cpu = -1;
static int everywhere;
static uint64_t step_ns;  /* thread-nanoseconds spent inside the scope (the bench's rate) */
/* Debug registers: DR0-DR2 hold up to three scope entries in every thread, DR3 a thread's
   innermost pending return. A debug register is per thread and changes no code. More entries
   than three: int3s for the entries, stepped over by running a copy of the instruction
   (displace), or where that cannot be, with the byte lifted for one step and every other thread
   stopped meanwhile (step_over). */
static int hw_ok;
static uint64_t hw_entry[3];
static int n_hw_entry;
static uint64_t (*ranges)[2];
static size_t nranges;
static uint8_t (*checks)[512];
static size_t nchecks;

static struct recipe **rtab; static size_t rcap, rcount;   /* pc -> recipe, open addressing */
static struct bp *bps; static size_t bpcap, bpcount;
static struct thread *threads; static size_t tcap;
static struct site *sites; static size_t scap, scount;
static struct record *ring; static uint64_t ring_cap, total, steps, entries, unmodelled, decode_misses;
static pid_t early[1024]; static int nearly;  /* stops of new tasks seen before their creation event */
/* Wait statuses reaped while every thread but one was held stopped (step_over), handled by the
   main loop before it waits again, in the order they came. */
static struct { pid_t tid; int st; } *evq; static size_t evq_head, evq_len, evq_cap;
static int exit_status = -1, exit_signal = -1, armed, detached_exec;
/* Displaced stepping: a private page range mapped into the program at its exec stop, holding a
   copy of the instruction at each int3 of ours (one 16-byte slot per breakpoint, written once);
   a thread steps over our int3 by running the copy, so the byte is never lifted and no other
   thread is ever stopped. Placed just below the executable's lowest mapping, so a RIP-relative
   operand of the program's code can be re-aimed from the copy (a 32-bit displacement). */
#define SCRATCH_SIZE (64 * 1024)
#define SLOT_SIZE 16
static uint64_t scratch;
static int nslots;
static uint64_t displaced, stopped_all;  /* steps over int3s either way */
static char note[256];

static void die(const char *what)
{
    fprintf(stderr, "ualdbg-stepper: %s: %s\n", what, strerror(errno));
    if (child > 0) kill(child, SIGKILL);
    _exit(3);
}

static void *xcalloc(size_t n, size_t s)
{
    void *p = calloc(n ? n : 1, s);
    if (!p) die("out of memory");
    return p;
}

static void write_full(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) die("write to ualdbg");
        p += n; len -= (size_t)n;
    }
}

static int read_full(int fd, void *buf, size_t len)
{
    char *p = buf;
    while (len) {
        ssize_t n = read(fd, p, len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        p += n; len -= (size_t)n;
    }
    return 0;
}

static void send_evt(uint32_t type, const void *payload, uint32_t len)
{
    uint32_t hdr[2] = {type, len};
    write_full(evt_fd, hdr, sizeof hdr);
    if (len) write_full(evt_fd, payload, len);
}

/* The next command; its payload in a malloc'd buffer. Python gone: kill the program, stop. */
static uint32_t recv_cmd(char **payload, uint32_t *len)
{
    uint32_t hdr[2];
    if (read_full(cmd_fd, hdr, sizeof hdr)) { kill(child, SIGKILL); _exit(3); }
    *payload = xcalloc(hdr[1] + 1, 1);
    if (hdr[1] && read_full(cmd_fd, *payload, hdr[1])) { kill(child, SIGKILL); _exit(3); }
    *len = hdr[1];
    return hdr[0];
}

static inline size_t hash64(uint64_t x) { x ^= x >> 33; x *= 0xff51afd7ed558ccdULL; x ^= x >> 33; return (size_t)x; }

/* -- tables ----------------------------------------------------------------------------- */

static struct recipe *rfind(uint64_t pc)
{
    if (!rcap) return NULL;
    for (size_t i = hash64(pc) & (rcap - 1);; i = (i + 1) & (rcap - 1)) {
        if (!rtab[i]) return NULL;
        if (rtab[i]->pc == pc) return rtab[i];
    }
}

static void rput(struct recipe *r)
{
    if ((rcount + 1) * 2 > rcap) {
        size_t ocap = rcap; struct recipe **old = rtab;
        rcap = rcap ? rcap * 2 : 1024;
        rtab = xcalloc(rcap, sizeof *rtab);
        rcount = 0;
        for (size_t i = 0; i < ocap; i++) if (old[i]) rput(old[i]);
        free(old);
    }
    size_t i = hash64(r->pc) & (rcap - 1);
    while (rtab[i] && rtab[i]->pc != r->pc) i = (i + 1) & (rcap - 1);
    if (!rtab[i]) rcount++;
    rtab[i] = r;
}

/* One recipe from the wire: u64 pc, u8 len, flow, nops, flags, u32 0, then nops * 32 bytes. */
static const char *parse_recipe(const char *p, struct recipe *r)
{
    memcpy(&r->pc, p, 8);
    r->len = (uint8_t)p[8]; r->flow = (uint8_t)p[9]; r->nops = (uint8_t)p[10]; r->flags = (uint8_t)p[11];
    r->disp_off = (uint8_t)p[12];
    p += 16;
    if (r->nops > MAX_OPS) r->nops = MAX_OPS;
    memcpy(r->ops, p, r->nops * sizeof(struct op));
    return p + r->nops * sizeof(struct op);
}

static struct bp *bpfind(uint64_t addr)
{
    if (!bpcap) return NULL;
    for (size_t i = hash64(addr) & (bpcap - 1);; i = (i + 1) & (bpcap - 1)) {
        if (!bps[i].addr) return NULL;
        if (bps[i].addr == addr) return &bps[i];
    }
}

static struct bp *bpadd(uint64_t addr)
{
    struct bp *b = bpfind(addr);
    if (b) return b;
    if ((bpcount + 1) * 2 > bpcap) {
        size_t ocap = bpcap; struct bp *old = bps;
        bpcap = bpcap ? bpcap * 2 : 256;
        bps = xcalloc(bpcap, sizeof *bps);
        bpcount = 0;
        for (size_t i = 0; i < ocap; i++)
            if (old[i].addr) { struct bp *n = bpadd(old[i].addr); *n = old[i]; }
        free(old);
    }
    size_t i = hash64(addr) & (bpcap - 1);
    while (bps[i].addr) i = (i + 1) & (bpcap - 1);
    bps[i].addr = addr;
    bpcount++;
    return &bps[i];
}

static struct thread *tfind(pid_t tid, int create)
{
    for (size_t i = 0; i < tcap; i++) if (threads[i].used && threads[i].tid == tid) return &threads[i];
    if (!create) return NULL;
    for (size_t i = 0; i < tcap; i++)
        if (!threads[i].used) { memset(&threads[i], 0, sizeof threads[i]); threads[i].used = 1; threads[i].tid = tid; return &threads[i]; }
    size_t o = tcap;
    tcap = tcap ? tcap * 2 : 16;
    threads = realloc(threads, tcap * sizeof *threads);
    if (!threads) die("out of memory");
    memset(threads + o, 0, (tcap - o) * sizeof *threads);
    threads[o].used = 1; threads[o].tid = tid;
    return &threads[o];
}

static int in_scope(uint64_t pc)
{
    if (everywhere) return 1;
    size_t lo = 0, hi = nranges;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (pc < ranges[mid][0]) hi = mid;
        else if (pc >= ranges[mid][1]) lo = mid + 1;
        else return 1;
    }
    return 0;
}

/* -- memory and breakpoints ------------------------------------------------------------- */

static int poke_byte(pid_t tid, uint64_t addr, uint8_t value, uint8_t *old)
{
    errno = 0;
    long word = ptrace(PTRACE_PEEKDATA, tid, (void *)addr, 0);
    if (errno) return -1;
    if (old) *old = (uint8_t)word;
    word = (word & ~0xffL) | value;
    return ptrace(PTRACE_POKEDATA, tid, (void *)addr, (void *)word) < 0 ? -1 : 0;
}

static void insert_bp(pid_t tid, uint64_t addr)
{
    struct bp *b = bpadd(addr);
    if (b->inserted) return;
    if (poke_byte(tid, addr, 0xcc, &b->orig) == 0) b->inserted = 1;
}

/* Code bytes as the program has them: our int3s replaced by the original bytes. */
static void read_code(pid_t tid, uint64_t addr, uint8_t out[16])
{
    memset(out, 0, 16);
    for (int i = 0; i < 16; i += 8) {
        errno = 0;
        long word = ptrace(PTRACE_PEEKDATA, tid, (void *)(addr + (uint64_t)i), 0);
        if (errno) break;
        memcpy(out + i, &word, 8);
    }
    for (int i = 0; i < 16; i++) {
        struct bp *b = bpfind(addr + (uint64_t)i);
        if (b && b->inserted && !b->lifted) out[i] = b->orig;
    }
}

/* -- pinning ------------------------------------------------------------------------------ */

static void pin(struct thread *t)
{
    if (t->pinned || cpu < 0) return;
    if (sched_getaffinity(t->tid, sizeof t->saved, &t->saved) < 0) return;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    if (sched_setaffinity(t->tid, sizeof one, &one) == 0) t->pinned = 1;
}

static void unpin(struct thread *t)
{
    if (!t->pinned) return;
    sched_setaffinity(t->tid, sizeof t->saved, &t->saved);
    t->pinned = 0;
}

/* -- recording ---------------------------------------------------------------------------- */

static struct site *site_for(uint64_t pc)
{
    if ((scount + 1) * 2 > scap) {
        size_t ocap = scap; struct site *old = sites;
        scap = scap ? scap * 2 : 256;
        sites = xcalloc(scap, sizeof *sites);
        scount = 0;
        for (size_t i = 0; i < ocap; i++)
            if (old[i].pc) { struct site *n = site_for(old[i].pc); *n = old[i]; }
        free(old);
    }
    size_t i = hash64(pc) & (scap - 1);
    while (sites[i].pc && sites[i].pc != pc) i = (i + 1) & (scap - 1);
    if (!sites[i].pc) { sites[i].pc = pc; scount++; }
    return &sites[i];
}

static void record(pid_t tid, uint64_t pc, uint64_t va, uint16_t size, uint8_t kind)
{
    total++;
    struct site *s = site_for(pc);
    s->count++;
    if (size && (va >> 6) != ((va + size - 1) >> 6)) {
        s->line++;
        if ((va >> 12) != ((va + size - 1) >> 12)) s->page++;
    }
    s->kinds |= 1u << kind;
    for (int i = 0; i < 4; i++) {
        if (s->sizes[i] == size) break;
        if (!s->sizes[i]) { s->sizes[i] = size; break; }
    }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    struct record *r = &ring[(total - 1) % ring_cap];
    r->seq = total;
    r->time_ns = (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
    r->pc = pc; r->va = va; r->pid = (uint32_t)child; r->tid = (uint32_t)tid;
    r->size = size; r->kind = kind; r->cpu = (uint8_t)(cpu < 0 ? 255 : cpu);
}

static inline uint64_t field(const struct user_regs_struct *regs, int idx, int shift, int bits)
{
    uint64_t v = ((const unsigned long long *)regs)[idx] >> shift;
    return bits >= 64 ? v : v & ((1ULL << bits) - 1);
}

/* The instruction at regs->rip is about to execute: it counts once if one of its accesses
   breaks the policy (the first such access is the one recorded, as Session.analyse picks). */
static void evaluate(struct thread *t, const struct recipe *r, const struct user_regs_struct *regs)
{
    t->pending = 0;
    if (r->flags & RF_UNMODELLED) unmodelled++;
    if (r->flags & RF_REP) {
        uint64_t count = regs->rcx;
        if (r->flags & RF_REP_ADDR4) count &= 0xffffffffULL;
        if (!count) return;
    }
    for (int i = 0; i < r->nops; i++) {
        const struct op *o = &r->ops[i];
        if (o->check == NO_CHECK) continue;
        uint64_t ea = (uint64_t)o->disp;
        if (o->base >= 0) ea += field(regs, o->base, o->base_shift, o->base_bits);
        if (o->index >= 0) ea += field(regs, o->index, o->index_shift, o->index_bits) * o->scale;
        if (o->bit_reg >= 0) {
            uint64_t raw = field(regs, o->bit_reg, 0, o->bit_bits);
            int64_t off = o->bit_bits >= 64 ? (int64_t)raw : (int64_t)(raw << (64 - o->bit_bits)) >> (64 - o->bit_bits);
            ea += (uint64_t)((int64_t)o->size * (off >> o->bit_shift));
        }
        if (o->addr4) ea &= 0xffffffffULL;
        if (o->seg == 1) ea += regs->fs_base;
        else if (o->seg == 2) ea += regs->gs_base;
        unsigned low = (unsigned)(ea & 4095);
        if (checks[o->check][low >> 3] >> (low & 7) & 1) {
            t->pending = 1;
            t->p_pc = r->pc; t->p_va = ea; t->p_size = o->size; t->p_kind = o->kind;
            return;
        }
    }
}

/* `u32 count` + count bitmaps of 512 bytes, appended to the check classes; returns past them. */
static const char *add_checks(const char *p)
{
    uint32_t n;
    memcpy(&n, p, 4);
    p += 4;
    if (n) {
        checks = realloc(checks, (nchecks + n) * sizeof *checks);
        if (!checks) die("out of memory");
        memcpy(checks + nchecks, p, n * sizeof *checks);
        nchecks += n;
    }
    return p + n * sizeof *checks;
}

static struct recipe *decode_remote(pid_t tid, uint64_t pc, int miss)
{
    uint8_t msg[24];
    memcpy(msg, &pc, 8);
    read_code(tid, pc, msg + 8);
    send_evt(EVT_DECODE, msg, sizeof msg);
    char *payload; uint32_t len;
    uint32_t type = recv_cmd(&payload, &len);
    if (type != CMD_RECIPE || len < 20) { kill(child, SIGKILL); _exit(3); }
    struct recipe *r = xcalloc(1, sizeof *r);
    parse_recipe(add_checks(payload), r);
    free(payload);
    r->pc = pc;
    rput(r);
    decode_misses += (uint64_t)miss;
    return r;
}

/* -- the step loop ------------------------------------------------------------------------ */

static void resume(struct thread *t, int sig)
{
    long req = t->stepping ? PTRACE_SINGLESTEP : PTRACE_CONT;
    if (ptrace(req, t->tid, 0, (void *)(long)sig) == 0) t->running = 1;
    else if (errno != ESRCH) die("ptrace resume");
}

static void evq_push(pid_t tid, int st)
{
    if (evq_head + evq_len == evq_cap) {
        if (evq_head) { memmove(evq, evq + evq_head, evq_len * sizeof *evq); evq_head = 0; }
        else {
            evq_cap = evq_cap ? evq_cap * 2 : 64;
            evq = realloc(evq, evq_cap * sizeof *evq);
            if (!evq) die("out of memory");
        }
    }
    evq[evq_head + evq_len].tid = tid;
    evq[evq_head + evq_len].st = st;
    evq_len++;
}

/* Whether the thread-group leader has exited while other threads live: it never stops again,
   and its exit is reported only with the last thread's. */
static int leader_gone(void)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)child);
    FILE *f = fopen(path, "r");
    if (!f) return 1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *close = strrchr(buf, ')');
    return !close || close[1] != ' ' || close[2] == 'Z' || close[2] == 'X';
}

/* Reap one wait status while threads are being held. A SIGSTOP that stop_others asked for
   marks its thread held and returns 1; anything else is queued for the main loop (a thread
   that reported something else first still has that SIGSTOP coming) and returns 1 when it
   answers such a SIGSTOP all the same. The tid in *tid. */
static int reap_held(pid_t *tid)
{
    int st;
    while ((*tid = waitpid(-1, &st, __WALL)) < 0)
        if (errno != EINTR) die("waitpid");
    struct thread *o = tfind(*tid, 0);
    int answer = 0;
    if (o) {
        o->running = 0;
        if (o->stopping) {
            o->stopping = 0;
            answer = 1;
            if (WIFSTOPPED(st) && WSTOPSIG(st) == SIGSTOP && !(st >> 16)) {
                o->held = 1;
                o->stop_pending = 0;  /* a SIGSTOP still pending from before merged with it */
                return 1;
            }
            if (WIFSTOPPED(st)) o->stop_pending = 1;
        }
    }
    evq_push(*tid, st);
    return answer;
}

/* Stop every other running thread of the program: none may run through a lifted int3. */
static void stop_others(struct thread *t)
{
    size_t waiting = 0;
    for (size_t i = 0; i < tcap; i++) {
        struct thread *o = &threads[i];
        if (!o->used || o == t || !o->running) continue;
        if (o->tid == child && leader_gone()) continue;
        if (syscall(SYS_tgkill, child, o->tid, SIGSTOP) < 0) continue;
        o->stopping = 1;
        waiting++;
    }
    pid_t tid;
    while (waiting) waiting -= (size_t)reap_held(&tid);
}

static int caught(pid_t tid, int sig);

/* Step `t` over our own int3 at b: the original byte for one step, with every other thread
   of the program stopped meanwhile (a thread running through the lifted byte would run the
   function unstepped). The step's own stop is queued for the main loop like any other. */
static void step_over(struct thread *t, struct bp *b)
{
    uint64_t addr = b->addr;
    stopped_all++;
    stop_others(t);
    b->lifted = 1;
    poke_byte(t->tid, addr, b->orig, NULL);
    resume(t, 0);
    pid_t by = t->tid;
    while (t->running) {
        pid_t tid;
        do reap_held(&tid); while (tid != t->tid);
        int st = evq[evq_head + evq_len - 1].st;  /* its stop, queued last */
        if (!WIFSTOPPED(st)) { by = 0; break; }
        int sig = WSTOPSIG(st);
        if (sig == SIGTRAP || (st >> 16)) break;  /* the step */
        /* a signal before the instruction ran: one with a handler preempts it (the main loop
           sees to that; the thread comes back here through the int3), our own SIGSTOP of an
           earlier stop_others is dropped, and any other one is delivered now, the byte still
           lifted, as it does not keep the instruction from running */
        if (sig == SIGSTOP && t->stop_pending) { t->stop_pending = 0; sig = 0; }
        else if (caught(t->tid, sig)) break;
        evq_len--;
        resume(t, sig);
    }
    /* the byte goes back through any stopped thread of the program (the stepper's may be gone) */
    if (!by)
        for (size_t i = 0; i < tcap && !by; i++)
            if (threads[i].used && threads[i].held) by = threads[i].tid;
    if (by) poke_byte(by, addr, 0xcc, NULL);
    b = bpfind(addr);
    if (b) b->lifted = 0;
    for (size_t i = 0; i < tcap; i++)
        if (threads[i].used && threads[i].held) { threads[i].held = 0; resume(&threads[i], 0); }
}

/* The slot holding a copy of the instruction `r` at our int3 `b`, written on first use; 0 when
   it cannot run elsewhere (a relative branch or a call, a RIP-relative operand too far from the
   scratch area, no scratch area, no free slot). */
static uint64_t slot_for(pid_t tid, struct bp *b, const struct recipe *r)
{
    if (b->slot > 0) return scratch + (uint64_t)(b->slot - 1) * SLOT_SIZE;
    if (b->slot < 0) return 0;
    b->slot = -1;
    if (scratch && !(r->flags & RF_DISPLACE_KNOWN)) r = decode_remote(tid, b->addr, 0);
    if (!scratch || !(r->flags & RF_DISPLACE) || !r->len || r->len > 15
        || nslots >= SCRATCH_SIZE / SLOT_SIZE) return 0;
    uint64_t at = scratch + (uint64_t)nslots * SLOT_SIZE;
    uint8_t code[16];
    read_code(tid, b->addr, code);  /* the original bytes, our int3s taken out */
    uint8_t len = r->len;
    if (r->disp_off & SHORT_BRANCH) {
        /* jmp rel8 (eb) -> jmp rel32 (e9), jcc rel8 (7x) -> jcc rel32 (0f 8x): same target */
        if (len != 2 || (r->disp_off & ~SHORT_BRANCH) != 1) return 0;
        int64_t target = (int64_t)(b->addr + 2) + (int8_t)code[1];
        if (code[0] == 0xeb) { code[0] = 0xe9; len = 5; }
        else if (code[0] >= 0x70 && code[0] <= 0x7f) { code[1] = (uint8_t)(0x80 + (code[0] & 0xf)); code[0] = 0x0f; len = 6; }
        else return 0;  /* loop, jrcxz: no rel32 form */
        int64_t rel = target - (int64_t)(at + len);
        if (rel < INT32_MIN || rel > INT32_MAX) return 0;
        int32_t rel32 = (int32_t)rel;
        memcpy(code + len - 4, &rel32, 4);
    } else if (r->disp_off) {
        /* rel32 is relative to the next instruction: the copy's is (at + len), not (addr + len) */
        if (r->disp_off + 4 > r->len) return 0;
        int32_t d;
        memcpy(&d, code + r->disp_off, 4);
        int64_t nd = (int64_t)d + (int64_t)(b->addr - at);
        if (nd < INT32_MIN || nd > INT32_MAX) return 0;
        d = (int32_t)nd;
        memcpy(code + r->disp_off, &d, 4);
    }
    memset(code + len, 0xcc, 16 - len);
    for (int i = 0; i < 16; i += 8) {
        long word;
        memcpy(&word, code + i, 8);
        if (ptrace(PTRACE_POKEDATA, tid, (void *)(at + (uint64_t)i), (void *)word) < 0) return 0;
    }
    b->slot = ++nslots;
    b->copy_len = len;
    return at;
}

/* Step `t` over our own int3 at b without lifting it: the thread runs the copy of the
   instruction in its slot, and its next stop is moved back to the program's code (undisplace).
   Nothing else stops. 0: not possible, step_over must. */
static int displace(struct thread *t, struct bp *b, const struct recipe *r, struct user_regs_struct *regs)
{
    uint64_t at = slot_for(t->tid, b, r);
    if (!at) return 0;
    uint64_t pc = regs->rip;
    regs->rip = at;
    int ok = ptrace(PTRACE_SETREGS, t->tid, 0, regs) == 0;
    regs->rip = pc;
    if (!ok) return 0;
    t->disp_from = pc;
    t->disp_slot = at;
    t->disp_len = r->len;
    t->disp_copy_len = b->copy_len;
    t->disp_call = r->flow == FLOW_CALL;
    displaced++;
    resume(t, 0);
    return 1;
}

/* A thread that ran (or was about to run) a displaced copy has stopped: its PC back in the
   program's code, as if it had run the original. `regs` are its registers, set again if moved.
   A PC the instruction itself chose (ret, an indirect jump) stays. */
static void undisplace(struct thread *t, struct user_regs_struct *regs)
{
    uint64_t from = t->disp_from, at = t->disp_slot;
    t->disp_slot = 0;
    if (t->disp_call && regs->rip != at) {
        /* the call ran and pushed the copy's return address: the program's instead */
        errno = 0;
        uint64_t ret = (uint64_t)ptrace(PTRACE_PEEKDATA, t->tid, (void *)regs->rsp, 0);
        if (!errno && ret == at + t->disp_copy_len)
            ptrace(PTRACE_POKEDATA, t->tid, (void *)regs->rsp, (void *)(from + t->disp_len));
    }
    if (regs->rip == at + t->disp_copy_len) regs->rip = from + t->disp_len;
    else if (regs->rip == at) regs->rip = from;
    else return;
    if (ptrace(PTRACE_SETREGS, t->tid, 0, regs) < 0 && errno != ESRCH) die("PTRACE_SETREGS");
}

/* A stepping thread stands at in-scope `pc`: check the instruction and step it. */
static void step_at(struct thread *t, struct user_regs_struct *regs)
{
    uint64_t pc = regs->rip;
    struct recipe *r = rfind(pc);
    if (!r) r = decode_remote(t->tid, pc, 1);
    evaluate(t, r, regs);
    t->last = r;
    steps++;
    struct bp *b = bpfind(pc);
    if (b && b->inserted) { if (!displace(t, b, r, regs)) step_over(t, b); }
    else resume(t, 0);
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static int set_dr(pid_t tid, int i, uint64_t value)
{
    return ptrace(PTRACE_POKEUSER, tid, (void *)offsetof(struct user, u_debugreg[i]), (void *)value) < 0 ? -1 : 0;
}

/* A thread about to run free: its entries and its innermost pending return armed. */
static void hw_arm(struct thread *t)
{
    if (!hw_ok) return;
    uint64_t dr7 = 0;
    for (int i = 0; i < n_hw_entry; i++) dr7 |= 1ULL << (2 * i);  /* Li: execute, length 1 */
    if (t->nrets) {
        set_dr(t->tid, 3, t->rets[t->nrets - 1]);
        dr7 |= 1ULL << 6;
    }
    set_dr(t->tid, 7, dr7);
}

static void hw_init(struct thread *t)
{
    if (!hw_ok) return;
    for (int i = 0; i < n_hw_entry; i++) set_dr(t->tid, i, hw_entry[i]);
    hw_arm(t);
}

static void push_ret(struct thread *t, uint64_t addr)
{
    if (!hw_ok) { insert_bp(t->tid, addr); return; }
    if (t->nrets && t->rets[t->nrets - 1] == addr) return;
    if (t->nrets == MAX_RETS) {  /* frames abandoned by longjmp: forget the oldest */
        memmove(t->rets, t->rets + 1, (MAX_RETS - 1) * sizeof t->rets[0]);
        t->nrets--;
    }
    t->rets[t->nrets++] = addr;
}

static void enter(struct thread *t, struct user_regs_struct *regs)
{
    if (hw_ok) set_dr(t->tid, 7, 0);  /* a stepping thread needs no breakpoints */
    t->entered_ns = now_ns();
    t->stepping = 1;
    entries++;
    pin(t);
    step_at(t, regs);
}

static void leave(struct thread *t, const struct user_regs_struct *regs)
{
    struct recipe *prev = t->last;
    if (prev && prev->flow == FLOW_CALL && in_scope(prev->pc + prev->len)) {
        push_ret(t, prev->pc + prev->len);  /* the callee runs at full speed */
    } else if (prev && prev->flow != FLOW_RET && !t->resume_pc) {
        /* Jumped out: a PLT stub in scope or a tail call. What it runs returns to [rsp] (to
           [rsp+16] from a lazy-binding PLT0, which pushed two words); when that is a return site
           in scope, stepping resumes there. (Any in-scope instruction is a correct place to
           resume stepping: a stale stack word that happens to name one costs nothing.) */
        for (int k = 0; k < 3; k++) {
            errno = 0;
            uint64_t ret = (uint64_t)ptrace(PTRACE_PEEKDATA, t->tid, (void *)(regs->rsp + 8 * (uint64_t)k), 0);
            struct recipe *r = errno ? NULL : rfind(ret);
            if (r && (r->flags & RF_RETSITE) && in_scope(ret)) { push_ret(t, ret); break; }
        }
    }
    hw_arm(t);
    t->stepping = 0;
    step_ns += now_ns() - t->entered_ns;
    t->last = NULL;
    t->resume_pc = 0;
    unpin(t);
    resume(t, 0);
}

static void on_trap(struct thread *t)
{
    struct user_regs_struct regs;
    if (ptrace(PTRACE_GETREGS, t->tid, 0, &regs) < 0) { if (errno == ESRCH) return; die("PTRACE_GETREGS"); }
    if (t->disp_slot) undisplace(t, &regs);
    if (t->stepping) {
        if (t->pending) {
            record(t->tid, t->p_pc, t->p_va, t->p_size, t->p_kind);
            t->pending = 0;
        }
        if (in_scope(regs.rip)) {
            if (regs.rip == t->resume_pc) t->resume_pc = 0;  /* back from the handler */
            step_at(t, &regs);
        }
        else leave(t, &regs);
        return;
    }
    if (hw_ok && armed) {
        errno = 0;
        long dr6 = ptrace(PTRACE_PEEKUSER, t->tid, (void *)offsetof(struct user, u_debugreg[6]), 0);
        if (!errno && (dr6 & 0xf)) {  /* a debug-register breakpoint: before the instruction */
            set_dr(t->tid, 6, 0);
            if (t->nrets && regs.rip == t->rets[t->nrets - 1]) t->nrets--;  /* back from a call */
            if (in_scope(regs.rip)) { enter(t, &regs); return; }
            set_dr(t->tid, 7, 0);  /* not ours to stop at (cannot happen): never again */
            resume(t, 0);
            return;
        }
    }
    struct bp *b = bpfind(regs.rip - 1);
    if (b && b->inserted && armed) {
        regs.rip -= 1;
        if (ptrace(PTRACE_SETREGS, t->tid, 0, &regs) < 0) die("PTRACE_SETREGS");
        enter(t, &regs);
        return;
    }
    resume(t, SIGTRAP);  /* the program's own */
}

/* Whether the thread's process has a handler for `sig` (SigCgt in /proc/TID/status). */
static int caught(pid_t tid, int sig)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)tid);
    FILE *f = fopen(path, "r");
    if (!f) return 1;
    unsigned long long mask = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "SigCgt: %llx", &mask) == 1) break;
    fclose(f);
    return (int)(mask >> (sig - 1) & 1);
}

static void remove_all_bps(pid_t pid)
{
    for (size_t i = 0; i < bpcap; i++)
        if (bps[i].addr && bps[i].inserted) poke_byte(pid, bps[i].addr, bps[i].orig, NULL);
}

static void wait_new(pid_t tid)
{
    for (int i = 0; i < nearly; i++)
        if (early[i] == tid) { early[i] = early[--nearly]; return; }
    for (size_t i = 0; i < evq_len; i++)  /* reaped while threads were held */
        if (evq[evq_head + i].tid == tid) {
            memmove(evq + evq_head + i, evq + evq_head + i + 1, (evq_len - i - 1) * sizeof *evq);
            evq_len--;
            return;
        }
    int st;
    while (waitpid(tid, &st, __WALL) < 0)
        if (errno != EINTR) return;
}

static void on_event(struct thread *t, int event)
{
    unsigned long msg = 0;
    ptrace(PTRACE_GETEVENTMSG, t->tid, 0, &msg);
    pid_t n = (pid_t)msg;
    if (event == PTRACE_EVENT_CLONE) {
        wait_new(n);
        pid_t creator = t->tid;
        struct thread *nt = tfind(n, 1);
        t = tfind(creator, 0);  /* the table may have grown (moved) to make room */
        nt->seen = 1;
        if (armed) hw_init(nt);  /* debug registers are per thread and not inherited */
        /* a thread started while its creator stepped inherited the pinned mask: give it the
           creator's own */
        if (t->pinned) sched_setaffinity(n, sizeof t->saved, &t->saved);
        if (everywhere && armed) {
            struct user_regs_struct regs;
            if (ptrace(PTRACE_GETREGS, n, 0, &regs) == 0) { enter(nt, &regs); goto parent; }
        }
        resume(nt, 0);
    } else if (event == PTRACE_EVENT_FORK || event == PTRACE_EVENT_VFORK) {
        wait_new(n);
        /* children are not followed; a fork's copy of memory gets its code back first (a vfork
           child shares ours and execs or exits at once) */
        if (event == PTRACE_EVENT_FORK) remove_all_bps(n);
        if (t->pinned) sched_setaffinity(n, sizeof t->saved, &t->saved);
        ptrace(PTRACE_DETACH, n, 0, 0);
    } else if (event == PTRACE_EVENT_EXEC) {
        /* a new program: the scope named the old one's code. Stop tracing, let it run. */
        if (armed) {
            snprintf(note, sizeof note, "the program exec'd another program after the scope was set: stepping stopped there");
            unpin(t);
            if (t->stepping) { step_ns += now_ns() - t->entered_ns; t->stepping = 0; }
            detached_exec = 1;
            ptrace(PTRACE_DETACH, t->tid, 0, 0);
            return;
        }
    }
parent:
    resume(t, 0);
}

static void write_out(const char *path)
{
    FILE *f = fopen(path, "wb");
    if (!f) die(path);
    uint64_t kept = total < ring_cap ? total : ring_cap;
    uint64_t hdr[16] = {0x31706574736c6175ULL, total, steps, entries, unmodelled, decode_misses, scount, kept,
                        (uint64_t)(int64_t)exit_status, (uint64_t)(int64_t)exit_signal, (uint64_t)cpu,
                        (uint64_t)armed, (uint64_t)detached_exec, step_ns, displaced, stopped_all};
    fwrite(hdr, sizeof hdr, 1, f);
    fwrite(note, sizeof note, 1, f);
    for (size_t i = 0; i < scap; i++)
        if (sites[i].pc) fwrite(&sites[i], sizeof sites[i], 1, f);
    for (uint64_t k = total - kept; k < total; k++) fwrite(&ring[k % ring_cap], sizeof(struct record), 1, f);
    if (fclose(f)) die(path);
}

/* The lowest address the program has mapped (its executable, at the exec stop). */
static uint64_t lowest_mapping(pid_t pid)
{
    char path[64], line[512];
    snprintf(path, sizeof path, "/proc/%d/maps", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    uint64_t lo = 0;
    if (fgets(line, sizeof line, f)) lo = strtoull(line, NULL, 16);
    fclose(f);
    return lo;
}

/* At the exec stop, the only thread standing at the dynamic loader's first instruction: make the
   program run one mmap system call (the `syscall` instruction put at its PC for that one step,
   its registers and code back as they were after) for the displaced-stepping slots, read and
   execute only, at a fixed place below the executable: the mappings the program makes itself
   come out where they would without us. A signal that arrives meanwhile is kept in *sig for the
   program. Without it (no room there) every int3 is stepped over with the other threads held. */
static void map_scratch(pid_t pid, int *sig)
{
    struct user_regs_struct saved, regs;
    if (ptrace(PTRACE_GETREGS, pid, 0, &saved) < 0) return;
    uint64_t lo = lowest_mapping(pid);
    uint64_t want = (lo & ~0xfffULL) - SCRATCH_SIZE - 0x100000;
    if (lo < 0x1000000 + SCRATCH_SIZE && lo >= 0x400000) want = 0x200000;  /* a non-PIE at 0x400000 */
    if (!lo || want > lo || want < 0x100000) return;
    errno = 0;
    long word = ptrace(PTRACE_PEEKDATA, pid, (void *)saved.rip, 0);
    if (errno) return;
    if (ptrace(PTRACE_POKEDATA, pid, (void *)saved.rip, (void *)((word & ~0xffffL) | 0x050f)) < 0) return;
    regs = saved;
    regs.orig_rax = (unsigned long long)-1;
    regs.rax = SYS_mmap;
    regs.rdi = want;
    regs.rsi = SCRATCH_SIZE;
    regs.rdx = PROT_READ | PROT_EXEC;
    regs.r10 = MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE;
    regs.r8 = (unsigned long long)-1;
    regs.r9 = 0;
    uint64_t got = 0;
    for (int tries = 0; tries < 8 && ptrace(PTRACE_SETREGS, pid, 0, &regs) == 0; tries++) {
        int st;
        if (ptrace(PTRACE_SINGLESTEP, pid, 0, 0) < 0) break;
        while (waitpid(pid, &st, __WALL) < 0)
            if (errno != EINTR) die("waitpid");
        if (!WIFSTOPPED(st)) { child = 0; _exit(3); }  /* killed from outside: nothing to trace */
        if (WSTOPSIG(st) != SIGTRAP) { *sig = WSTOPSIG(st); continue; }  /* before the syscall ran */
        struct user_regs_struct after;
        if (ptrace(PTRACE_GETREGS, pid, 0, &after) < 0) break;
        if (after.rip == saved.rip + 2 && after.rax == want) got = after.rax;
        else if (after.rip == saved.rip + 2 && after.rax < (uint64_t)-4096) {
            /* an old kernel takes MAP_FIXED_NOREPLACE as a hint: keep it only if it is there */
            regs.rax = SYS_munmap; regs.rdi = after.rax; regs.r10 = 0;
            if (ptrace(PTRACE_SETREGS, pid, 0, &regs) == 0 && ptrace(PTRACE_SINGLESTEP, pid, 0, 0) == 0)
                while (waitpid(pid, &st, __WALL) < 0 && errno == EINTR) {}
        }
        break;
    }
    ptrace(PTRACE_POKEDATA, pid, (void *)saved.rip, (void *)word);
    if (ptrace(PTRACE_SETREGS, pid, 0, &saved) < 0) die("PTRACE_SETREGS");
    scratch = got;
}

static void load_table(const char *p, uint32_t len)
{
    uint32_t h[4];
    if (len < sizeof h) { errno = EINVAL; die("table"); }
    memcpy(h, p, sizeof h);
    p += sizeof h;
    everywhere = (int)(h[0] & 1);
    nranges = h[1];
    ranges = xcalloc(nranges, sizeof *ranges);
    memcpy(ranges, p, nranges * sizeof *ranges);
    p += nranges * sizeof *ranges;
    uint64_t *entry = xcalloc(h[2], 8);
    memcpy(entry, p, (size_t)h[2] * 8);
    p += (size_t)h[2] * 8;
    p = add_checks(p);
    struct recipe *all = xcalloc(h[3], sizeof *all);
    for (uint32_t i = 0; i < h[3]; i++) { p = parse_recipe(p, &all[i]); rput(&all[i]); }
    /* debug registers for the entries if they fit, else int3s; DR3 for returns either way */
    hw_ok = set_dr(child, 3, 0) == 0 && set_dr(child, 7, 0) == 0 && getenv("UALDBG_STEPPER_NO_DR") == NULL;
    if (hw_ok && h[2] <= 3) {
        n_hw_entry = (int)h[2];
        for (uint32_t i = 0; i < h[2]; i++) hw_entry[i] = entry[i];
    } else {
        for (uint32_t i = 0; i < h[2]; i++) insert_bp(child, entry[i]);
    }
    free(entry);
}

int main(int argc, char **argv)
{
    if (argc < 9) { fputs("usage: ualdbg-stepper CMD_FD EVT_FD OUT RECORDS NO_ASLR PARENT PATH ARGV0 ARGS...\n", stderr); return 3; }
    /* Nothing ualdbg starts outlives it (issue 29): the stepper dies with ualdbg (PARENT, which
       may have died before the prctl), and the program with the stepper (PTRACE_O_EXITKILL, and
       its own parent-death signal until then). */
    pid_t parent = (pid_t)strtol(argv[6], NULL, 10);
    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0 || getppid() != parent) return 3;
    cmd_fd = atoi(argv[1]);
    evt_fd = atoi(argv[2]);
    const char *out = argv[3];
    ring_cap = strtoull(argv[4], NULL, 10);
    if (!ring_cap) ring_cap = 1;
    ring = xcalloc(ring_cap, sizeof *ring);
    int no_aslr = atoi(argv[5]);
    fcntl(cmd_fd, F_SETFD, FD_CLOEXEC);
    fcntl(evt_fd, F_SETFD, FD_CLOEXEC);

    pid_t stepper = getpid();
    child = fork();
    if (child < 0) die("fork");
    if (child == 0) {
        if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0 || getppid() != stepper) _exit(127);
        if (no_aslr) { int p = personality(0xffffffff); if (p != -1) personality((unsigned long)p | ADDR_NO_RANDOMIZE); }
        if (ptrace(PTRACE_TRACEME, 0, 0, 0) < 0) { perror("ualdbg-stepper: PTRACE_TRACEME"); _exit(127); }
        /* PATH is what to exec, argv from ARGV0 on what the program gets: argv[0] as typed. */
        execv(argv[7], argv + 8);
        int err = errno;
        fprintf(stderr, "ualdbg: %s: cannot execute: %s\n", argv[8], strerror(err));
        _exit(err == ENOENT ? 127 : 126);
    }
    /* The terminal's ^C and ^\ go to the program, whose choice they are; the tracer stays. So
       for a SIGTERM or SIGHUP sent to the whole process group (timeout(1), a hang-up): ualdbg
       passes the program what it gets itself, and ends the stepper with SIGKILL if it must. */
    signal(SIGINT, SIG_IGN);
    signal(SIGQUIT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    /* Pinned after the fork: the program keeps the CPU mask it was started with. */
    cpu = sched_getcpu();
    if (cpu >= 0) {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(cpu, &one);
        if (sched_setaffinity(0, sizeof one, &one) < 0) cpu = -1;
    }

    int st;
    if (waitpid(child, &st, 0) < 0) die("waitpid");
    if (!WIFSTOPPED(st)) {  /* exec failed */
        exit_status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        exit_signal = WIFSIGNALED(st) ? WTERMSIG(st) : -1;
        write_out(out);
        send_evt(EVT_EXIT_EARLY, NULL, 0);
        return 0;
    }
    ptrace(PTRACE_SETOPTIONS, child, 0, (void *)(long)(PTRACE_O_TRACECLONE | PTRACE_O_TRACEFORK | PTRACE_O_TRACEVFORK |
                                                       PTRACE_O_TRACEEXEC | PTRACE_O_EXITKILL));
    struct thread *t0 = tfind(child, 1);
    t0->seen = 1;
    uint32_t pid32 = (uint32_t)child;
    send_evt(EVT_EXEC, &pid32, 4);
    char *payload; uint32_t len;
    uint32_t type = recv_cmd(&payload, &len);
    uint64_t arm_at = 0;
    if (type == CMD_KILL) { kill(child, SIGKILL); waitpid(child, &st, 0); return 4; }
    if (type == CMD_ARM && len >= 8) memcpy(&arm_at, payload, 8);
    free(payload);
    int first_sig = 0;
    if (arm_at && !getenv("UALDBG_STEPPER_NO_DISPLACE")) map_scratch(child, &first_sig);
    if (arm_at) insert_bp(child, arm_at);
    resume(t0, first_sig);

    for (;;) {
        pid_t tid;
        if (evq_len) {
            tid = evq[evq_head].tid;
            st = evq[evq_head].st;
            evq_head++;
            if (!--evq_len) evq_head = 0;
        } else {
            tid = waitpid(-1, &st, __WALL);
            if (tid < 0) {
                if (errno == EINTR) continue;
                if (errno == ECHILD) break;
                die("waitpid");
            }
        }
        if (WIFEXITED(st) || WIFSIGNALED(st)) {
            if (tid == child) {
                exit_status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
                exit_signal = WIFSIGNALED(st) ? WTERMSIG(st) : -1;
            }
            struct thread *t = tfind(tid, 0);
            if (t) {
                if (t->stepping) step_ns += now_ns() - t->entered_ns;
                t->used = 0;
            }
            continue;
        }
        if (!WIFSTOPPED(st)) continue;
        struct thread *t = tfind(tid, 0);
        if (!t) {  /* a new thread or child whose creator's event comes later */
            if (nearly < 1024) early[nearly++] = tid;
            continue;
        }
        t->running = 0;
        int sig = WSTOPSIG(st), event = st >> 16;
        if (sig == SIGTRAP && event) { on_event(t, event); continue; }
        if (sig == SIGTRAP && !armed && arm_at) {
            struct user_regs_struct regs;
            if (ptrace(PTRACE_GETREGS, tid, 0, &regs) == 0 && regs.rip - 1 == arm_at) {
                /* at main (or the entry): every library the program links is loaded now */
                regs.rip = arm_at;
                ptrace(PTRACE_SETREGS, tid, 0, &regs);
                struct bp *b = bpfind(arm_at);
                poke_byte(tid, arm_at, b->orig, NULL);
                b->inserted = 0;
                uint32_t tid32 = (uint32_t)tid;
                send_evt(EVT_ARMED, &tid32, 4);
                type = recv_cmd(&payload, &len);
                if (type != CMD_TABLE) { kill(child, SIGKILL); waitpid(child, &st, 0); return 4; }
                load_table(payload, len);
                free(payload);
                armed = 1;
                for (size_t i = 0; i < tcap; i++)
                    if (threads[i].used) hw_init(&threads[i]);
                if (in_scope(regs.rip)) enter(t, &regs);
                else resume(t, 0);
                continue;
            }
        }
        if (sig == SIGTRAP) { on_trap(t); continue; }
        siginfo_t si;
        if (ptrace(PTRACE_GETSIGINFO, tid, 0, &si) < 0) {  /* group-stop */
            resume(t, 0);
            continue;
        }
        if (sig == SIGSTOP && !t->seen) { t->seen = 1; resume(t, 0); continue; }
        if (sig == SIGSTOP && t->stop_pending) { t->stop_pending = 0; resume(t, 0); continue; }  /* ours */
        if (t->stepping && caught(tid, sig)) {
            /* The instruction at the PC was checked but has not run: the handler runs first,
               and the instruction is checked again when the program comes back to it. (A
               signal ignored or fatal does not preempt it: its check stands.) */
            struct user_regs_struct regs;
            if (ptrace(PTRACE_GETREGS, tid, 0, &regs) == 0) {
                /* a displaced instruction not run yet: the handler must see (and return to) the
                   program's own PC, not the copy's */
                if (t->disp_slot) undisplace(t, &regs);
                /* the handler returns here, through sigreturn: a pending return like a call's
                   (handlers interrupted by handlers stack up) */
                t->resume_pc = regs.rip;
                push_ret(t, regs.rip);
                if (regs.eflags & 0x10000) {
                    /* RF, left by the debug-register stop this thread entered by: the signal
                       frame would save it, and sigreturn would then run the instruction past
                       the breakpoint that is to bring the thread back */
                    regs.eflags &= ~0x10000ULL;
                    ptrace(PTRACE_SETREGS, tid, 0, &regs);
                }
            }
            t->pending = 0;
        }
        resume(t, sig);
    }
    write_out(out);
    send_evt(EVT_DONE, NULL, 0);
    return 0;
}
