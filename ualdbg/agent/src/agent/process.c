/* process.c - what the agent's other C files build on: its configuration and per-process and
 * per-thread state, arming, the /proc/self/maps snapshots, free memory near code, a PC's site
 * slot, buffer marks, the environment for the programs the process starts, and the real libc
 * entry points. It calls no other file of the agent (the order: process.h).
 */
#include "process.h"

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>

#include "insn.h"

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif
#define MAX_MAPPINGS 8192

struct agent_config CFG;
struct agent_state G;
/* Threads inside the agent's SIGBUS/SIGTRAP handlers (agent.c): ualdbg detaching from an injected
 * agent waits for none to be in one before it gives the program its signal actions back, and the
 * patcher writes no jump while another thread is in one (it may resume into the code moved). */
EXPORT volatile int ualdbg_in_handler;
__thread struct thread_state TS __attribute__((tls_model("initial-exec")));

/* ------------------------------------------------------------------------------------------ */
/* Small helpers that are safe in a signal handler. */

void spin_lock(volatile int *l)
{
    while (__atomic_exchange_n(l, 1, __ATOMIC_ACQUIRE))
        while (__atomic_load_n(l, __ATOMIC_RELAXED))
            __builtin_ia32_pause();
}
void spin_unlock(volatile int *l) { __atomic_store_n(l, 0, __ATOMIC_RELEASE); }

uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

char *put_str(char *p, char *end, const char *s)
{
    while (*s && p < end)
        *p++ = *s++;
    return p;
}
char *put_u64(char *p, char *end, uint64_t v)
{
    char tmp[24];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n && p < end)
        *p++ = tmp[--n];
    return p;
}

/* Block every signal around agent work outside a handler that takes a lock a handler could
 * also want (a program's handler may fault while armed and enter the agent). */
uint64_t block_all(void)
{
    uint64_t all = ~0ull, old = 0;
    raw_sigprocmask(SIG_SETMASK, &all, &old);
    return old;
}
void unblock_all(uint64_t old) { raw_sigprocmask(SIG_SETMASK, &old, NULL); }

/* ------------------------------------------------------------------------------------------ */
/* Arming. */

int armable(void)
{
    /* want_armed: 1 past its arming point, -1 in libc's thread exit path, 0 neither (every thread
     * of a process the agent was injected into is armed) */
    return G.active && G.armed && (TS.want_armed > 0 || (G.injected && TS.want_armed == 0));
}

/* Set AC in this thread if it should be armed and SIGBUS is not blocked; clear it otherwise
 * (a fault with SIGBUS blocked kills the process: PLATFORM.md). */
void rearm(void)
{
    if (armable() && !sigbus_blocked_now())
        ac_set();
    else
        ac_clear();
}

/* ------------------------------------------------------------------------------------------ */
/* The address space, from /proc/self/maps snapshots kept in the buffer. */

static struct mapping maps_cache[MAX_MAPPINGS];
static int maps_n;
volatile int maps_lock;
static char private_maps[1 << 20]; /* used when the buffer's maps area is full */

static uint64_t hex(const char **p, const char *end)
{
    uint64_t v = 0;
    while (*p < end) {
        char c = **p;
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0)
            break;
        v = v * 16 + (uint64_t)d;
        (*p)++;
    }
    return v;
}

static void maps_parse(const char *text, size_t len)
{
    const char *p = text, *end = text + len;
    int n = 0;
    while (p < end && n < MAX_MAPPINGS) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (!eol)
            eol = end;
        if (*p != '#') {
            struct mapping m = {0};
            const char *q = p;
            m.start = hex(&q, eol);
            if (q < eol && *q == '-') {
                q++;
                m.end = hex(&q, eol);
                if (q + 4 < eol) {
                    m.read = q[1] == 'r';
                    m.write = q[2] == 'w';
                    m.exec = q[3] == 'x';
                    m.priv = q[4] == 'p';
                }
                /* perms offset dev inode path: skip four fields */
                for (int f = 0; f < 5 && q < eol; f++) {
                    while (q < eol && *q == ' ')
                        q++;
                    if (f == 4)
                        break;
                    while (q < eol && *q != ' ')
                        q++;
                }
                m.path = q;
                m.plen = (uint16_t)(eol - q);
                maps_cache[n++] = m;
            }
        }
        p = eol + 1;
    }
    maps_n = n;
}

/* Append a snapshot of /proc/self/maps to the buffer and parse it. Caller holds maps_lock. */
void maps_snapshot_locked(void)
{
    if (!G.hdr)
        return;
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    uint64_t used = G.hdr->maps_len;
    char *base = G.maps + used;
    size_t room = used < MAPS_CAPACITY ? MAPS_CAPACITY - used : 0;
    char header[48], *h = header;
    h = put_str(h, header + sizeof header, "#snapshot ");
    h = put_u64(h, header + sizeof header, now_ns());
    *h++ = '\n';
    size_t hl = (size_t)(h - header);
    int shared = room > hl + 65536;
    char *dst = shared ? base : private_maps;
    size_t cap = shared ? room : sizeof private_maps;
    memcpy(dst, header, hl);
    size_t len = hl;
    for (;;) {
        if (len >= cap)
            break;
        ssize_t r = read(fd, dst + len, cap - len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        len += (size_t)r;
    }
    close(fd);
    if (len >= cap && shared) { /* did not fit: keep only what parsed fully */
        while (len > hl && dst[len - 1] != '\n')
            len--;
    }
    maps_parse(dst + hl, len - hl);
    if (shared)
        __atomic_store_n(&G.hdr->maps_len, used + len, __ATOMIC_RELEASE);
}

/* The snapshot an image's end or a fork child leaves for naming its faults later, signals
 * blocked by the caller: none in an unarmed system program, which has no fault to name. */
void maps_snapshot_for_names(void)
{
    if (G.system_unarmed)
        return;
    spin_lock(&maps_lock);
    maps_snapshot_locked();
    spin_unlock(&maps_lock);
}

/* A snapshot from outside a handler (exec): signals blocked, so that a program's handler that
 * faults cannot want the lock this thread holds. */
void maps_snapshot(void)
{
    uint64_t mask = block_all();
    maps_snapshot_for_names();
    unblock_all(mask);
}

const struct mapping *maps_find(uint64_t addr)
{
    int lo = 0, hi = maps_n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (addr < maps_cache[mid].start)
            hi = mid - 1;
        else if (addr >= maps_cache[mid].end)
            lo = mid + 1;
        else
            return &maps_cache[mid];
    }
    return NULL;
}

/* The mapping of a code address, re-reading the maps once when it is not in a known file
 * mapping (a library loaded since), as ModuleMap.find does. Caller holds maps_lock. */
const struct mapping *maps_lookup_locked(uint64_t pc)
{
    const struct mapping *m = maps_find(pc);
    if (!m || (m->plen && m->path[0] == '/' && !m->exec) || (!m->plen && !m->exec)) {
        maps_snapshot_locked();
        m = maps_find(pc);
    } else if (m->plen == 0 || m->path[0] != '/') {
        /* anonymous executable memory (JIT, trampolines): stays moduleless */
    }
    return m;
}

/* ------------------------------------------------------------------------------------------ */
/* Free memory near an address, for trampoline pools (trampolines.c, patch.c). */

int64_t distance(uint64_t a, uint64_t b) { return a > b ? (int64_t)(a - b) : (int64_t)(b - a); }

/* A free region of `size` bytes (RWX) within 1 GiB of `near`, found in the gaps of the maps.
 * Caller holds maps_lock. */
static int mapping_named(const struct mapping *m, const char *name)
{
    size_t l = strlen(name);
    return l && m->plen == l && !memcmp(m->path, name, l);
}

/* Where the program's own mappings never go, so that a pool the agent maps there does not move
 * them (a patched run and a --no-patch run then have one address space, and count the same):
 * [lo, hi), above mmap's base and below the main stack's reach. The kernel puts mmap's base at
 * least max(128 MiB, RLIMIT_STACK + the stack guard gap) below the top of the user address space
 * (more with ASLR) and maps nothing above it without an address hint; the stack grows down to
 * RLIMIT_STACK below its top. 0 when there is no such place (no [stack], an unlimited stack: the
 * legacy bottom-up layout). Caller holds maps_lock. */
static int mmap_free_zone(uint64_t *lo, uint64_t *hi)
{
    const uint64_t task_top = 0x7ffffffff000ull, guard = 1ull << 20, margin = 16ull << 20;
    uint64_t stack_lo = 0, stack_top = 0;
    for (int i = 0; i < maps_n; i++)
        if (mapping_named(&maps_cache[i], "[stack]")) {
            stack_lo = maps_cache[i].start;
            stack_top = maps_cache[i].end;
        }
    struct rlimit r;
    if (!stack_top || getrlimit(RLIMIT_STACK, &r) != 0 || r.rlim_cur == RLIM_INFINITY || r.rlim_cur > (1ull << 40))
        return 0;
    uint64_t gap = r.rlim_cur + guard;
    if (gap < (128ull << 20))
        gap = 128ull << 20;
    *lo = task_top - gap;
    *hi = stack_top - r.rlim_cur - guard - margin;
    if (stack_lo < margin)
        return 0;
    if (*hi > stack_lo - margin)
        *hi = stack_lo - margin;
    return *hi > *lo;
}

/* The nearest free place of `size` bytes to `near` (within 1 GiB, 64 KiB-aligned, a 64 KiB
 * guard either side) inside [zlo, zhi), never in the gap after the executable or its [heap],
 * where brk grows the heap. 0 if none. */
static uint64_t gap_near(uint64_t near, size_t size, uint64_t zlo, uint64_t zhi)
{
    uint64_t best = 0, prev_end = 0x10000, exe_end = 0;
    int64_t best_d = INT64_MAX;
    for (int i = 0; i < maps_n; i++) /* the executable's end, and the anonymous .bss after it */
        if (mapping_named(&maps_cache[i], G.exe) || (exe_end && maps_cache[i].start == exe_end && !maps_cache[i].plen))
            exe_end = maps_cache[i].end;
    for (int i = 0; i <= maps_n; i++) {
        uint64_t gap_lo = prev_end, gap_hi = i < maps_n ? maps_cache[i].start : 0x7ffffffff000ull;
        int brk_side = i > 0 && (mapping_named(&maps_cache[i - 1], "[heap]") || maps_cache[i - 1].end == exe_end);
        if (i < maps_n)
            prev_end = maps_cache[i].end > prev_end ? maps_cache[i].end : prev_end;
        if (brk_side)
            continue;
        gap_lo = gap_lo > zlo ? gap_lo : zlo;
        gap_hi = gap_hi < zhi ? gap_hi : zhi;
        gap_lo = (gap_lo + 0xffff) & ~0xffffull;
        gap_hi &= ~0xffffull;
        if (gap_hi < gap_lo + size + 0x20000) /* keep a guard gap either side */
            continue;
        uint64_t lo = gap_lo + 0x10000, hi = gap_hi - size - 0x10000;
        uint64_t cand = near < lo ? lo : near > hi ? hi : (near & ~0xffffull);
        int64_t d = distance(cand, near);
        if (d < best_d) {
            best_d = d;
            best = cand;
        }
    }
    return best_d <= (1ll << 30) ? best : 0;
}

/* A pool of `size` bytes (rwx) within reach of a rel32 jump from `near`: where the program's own
 * mappings never go if that is near enough (mmap_free_zone), else in the nearest gap (not brk's),
 * where a later mmap of the program's may then land elsewhere than without the agent's pool
 * (docs/AGENT.md, "Limits"). Caller holds maps_lock. */
uint8_t *pool_map_near(uint64_t near, size_t size)
{
    for (int attempt = 0; attempt < 4; attempt++) {
        uint64_t zlo, zhi, best = 0;
        if (mmap_free_zone(&zlo, &zhi))
            best = gap_near(near, size, zlo, zhi);
        if (!best)
            best = gap_near(near, size, 0, UINT64_MAX);
        if (!best)
            return NULL;
        void *p = mmap((void *)(uintptr_t)best, size, PROT_READ | PROT_WRITE | PROT_EXEC,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        if (p != MAP_FAILED && (uint64_t)(uintptr_t)p == best)
            return p;
        if (p != MAP_FAILED)
            munmap(p, size);
        maps_snapshot_locked(); /* the maps moved under us: look again */
    }
    return NULL;
}

/* `size` bytes (rw) for the agent's own tables, where the program's own mappings never go if
 * there is room (mmap_free_zone: at its top, away from the pools near code), else anywhere.
 * NULL if none. Caller holds maps_lock. */
/* A zone just mapped, entered in the parsed maps as if a snapshot had seen it: the next zone_map
 * then looks past it instead of choosing the same place, failing, and reading /proc/self/maps
 * again (the code map grows its tables one zone after another: every process of a program
 * recorded snapshots of its own, tests/agent/test_agent_many_processes.py). */
static void note_zone(uint64_t at, size_t size)
{
    if (maps_n >= MAX_MAPPINGS)
        return;
    int i = maps_n;
    while (i > 0 && maps_cache[i - 1].start > at) {
        maps_cache[i] = maps_cache[i - 1];
        i--;
    }
    maps_cache[i] = (struct mapping){.start = at, .end = at + size, .path = "", .plen = 0, .read = 1, .write = 1, .priv = 1};
    maps_n++;
}

void *zone_map(size_t size)
{
    size = (size + 0xffff) & ~(size_t)0xffff;
    for (int attempt = 0; attempt < 4; attempt++) {
        uint64_t zlo, zhi, at;
        if (!mmap_free_zone(&zlo, &zhi) || !(at = gap_near(zhi, size, zlo, zhi)))
            break;
        void *p = mmap((void *)(uintptr_t)at, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
                       -1, 0);
        if (p != MAP_FAILED && (uint64_t)(uintptr_t)p == at) {
            note_zone(at, size);
            return p;
        }
        if (p != MAP_FAILED)
            munmap(p, size);
        maps_snapshot_locked();
    }
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

void zone_unmap(void *p, size_t size)
{
    munmap(p, (size + 0xffff) & ~(size_t)0xffff);
}

/* ------------------------------------------------------------------------------------------ */
/* Decoded instructions (insn.h). */

int uses_stack(const struct x86_insn *d)
{
    if (d->vex)
        return 0;
    if (d->map == 0) {
        uint8_t o = d->opcode;
        if ((o >= 0x50 && o <= 0x5f) || o == 0x68 || o == 0x6a || o == 0x8f || o == 0x9c || o == 0x9d ||
            o == 0xc2 || o == 0xc3 || o == 0xc8 || o == 0xc9 || o == 0xe8 || o == 0xca || o == 0xcb || o == 0xcf)
            return 1;
        if (o == 0xff) {
            int sub = (d->modrm >> 3) & 7;
            return sub == 2 || sub == 3 || sub == 6;
        }
    }
    if (d->map == 1 && (d->opcode == 0xa0 || d->opcode == 0xa1 || d->opcode == 0xa8 || d->opcode == 0xa9))
        return 1;
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Sites: a PC's slot in the per-PC table (its use: agent.c). */

struct ualdbg_site *site_slot(uint64_t pc, int *created)
{
    uint32_t mask = G.site_mask;
    uint32_t h = (uint32_t)((pc * 0x9e3779b97f4a7c15ull) >> 40) & mask;
    *created = 0;
    for (uint32_t probe = 0; probe <= mask; probe++) {
        struct ualdbg_site *s = &G.sites[(h + probe) & mask];
        uint64_t cur = __atomic_load_n(&s->pc, __ATOMIC_ACQUIRE);
        if (cur == pc)
            return s;
        if (cur == 0) {
            uint64_t zero = 0;
            if (__atomic_compare_exchange_n(&s->pc, &zero, pc, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
                *created = 1;
                return s;
            }
            if (zero == pc)
                return s;
        }
    }
    return NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* The buffer's state. */

void buffer_mark(uint32_t state, const char *note)
{
    if (!G.hdr)
        return;
    if (note) {
        strncpy(G.hdr->note, note, sizeof G.hdr->note - 1);
        G.hdr->note[sizeof G.hdr->note - 1] = 0;
    }
    G.hdr->end_ns = state == UALDBG_RUNNING ? 0 : now_ns();
    __atomic_store_n(&G.hdr->state, state, __ATOMIC_RELEASE);
}

/* The process ends with `status`: from libc's exit handlers, or from the program's own _exit or
 * _Exit (which skip them: a fork child that ends so is then "exited", not "ended without exit").
 * Nothing in a vfork child or a child without a buffer of its own yet: the buffer is the parent's. */
void process_exited(int status)
{
    uint64_t was = ac_save_clear();
    if (G.hdr && G.active && G.pid == raw_getpid() && G.hdr->pid == (int64_t)G.pid) {
        uint64_t mask = block_all();
        maps_snapshot_for_names();
        G.hdr->exit_status = status;
        buffer_mark(UALDBG_EXITED, NULL);
        unblock_all(mask);
    }
    ac_restore(was);
}

/* ------------------------------------------------------------------------------------------ */
/* The arming point. */

void arm_here(void)
{
    if (G.system_unarmed)
        return; /* its faults are all out of scope (agent.c, system_program) */
    uint64_t mask = block_all();
    G.armed = 1;
    if (G.hdr) {
        G.hdr->armed_ns = now_ns();
        __atomic_or_fetch(&G.hdr->flags, UALDBG_F_ARMED, __ATOMIC_RELEASE);
    }
    spin_lock(&maps_lock);
    maps_snapshot_locked();
    spin_unlock(&maps_lock);
    unblock_all(mask);
    TS.want_armed = 1;
    rearm();
}

/* ------------------------------------------------------------------------------------------ */
/* Environment and exec targets. */

static int preload_has_agent(const char *v)
{
    size_t l = strlen(CFG.agent_path);
    if (!l)
        return 0;
    for (const char *p = v; (p = strstr(p, CFG.agent_path)); p += l) {
        int start = p == v || p[-1] == ':' || p[-1] == ' ';
        int end = p[l] == 0 || p[l] == ':' || p[l] == ' ';
        if (start && end)
            return 1;
    }
    return 0;
}

int env_has_agent(char *const envp[])
{
    int preload = 0, conf = 0;
    for (int i = 0; envp && envp[i]; i++) {
        if (!strncmp(envp[i], "LD_PRELOAD=", 11) && preload_has_agent(envp[i] + 11))
            preload = 1;
        else if (!strncmp(envp[i], "UALDBG_AGENT=", 13))
            conf = 1;
    }
    return preload && conf;
}

/* A copy of envp without the agent (the user's own LD_PRELOAD restored); malloc'ed. */
char **env_without_agent(char *const envp[])
{
    int n = 0;
    while (envp && envp[n])
        n++;
    char **out = malloc(sizeof(char *) * (size_t)(n + 2));
    if (!out)
        return NULL;
    int o = 0;
    for (int i = 0; i < n; i++) {
        if (!strncmp(envp[i], "UALDBG_AGENT=", 13))
            continue;
        if (!strncmp(envp[i], "LD_PRELOAD=", 11) && preload_has_agent(envp[i] + 11)) {
            if (CFG.had_preload) {
                size_t l = strlen(CFG.preload_orig) + 12;
                char *e = malloc(l);
                if (e) {
                    memcpy(e, "LD_PRELOAD=", 11);
                    memcpy(e + 11, CFG.preload_orig, l - 11);
                    out[o++] = e;
                }
            }
            continue;
        }
        out[o++] = envp[i];
    }
    out[o] = NULL;
    return out;
}

/* An ELF the preloaded agent cannot be loaded into (32-bit, another machine): ld.so would
 * print an error about LD_PRELOAD into the program's stderr. */
int elf_is_foreign(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    unsigned char e[20];
    ssize_t n = read(fd, e, sizeof e);
    close(fd);
    if (n < 20 || memcmp(e, ELFMAG, SELFMAG) != 0)
        return 0; /* a script: its interpreter is checked when it runs */
    uint16_t machine = (uint16_t)(e[18] | e[19] << 8);
    return e[EI_CLASS] != ELFCLASS64 || machine != EM_X86_64;
}

/* ------------------------------------------------------------------------------------------ */
/* The real libc entry points, past the agent's own. */

void *real_fn(const char *name)
{
    return dlsym(RTLD_NEXT, name);
}
