/* process.c - what the agent knows of this process, below everything else it does: the
 * configuration and state (CFG, G, TS), arming, the address space from /proc/self/maps
 * snapshots, the buffer's state marks, the environment and exec targets for children, and the
 * real libc entry points. It calls nothing in the agent's other files, whose order is
 * process.c <- trampolines.c <- wrappers.c <- signals.c <- agent.c (each calls only those
 * before it). */
#include "process.h"

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct agent_config CFG;
struct agent_state G;
__thread struct thread_state TS __attribute__((tls_model("initial-exec")));

/* ------------------------------------------------------------------------------------------ */
/* Small helpers that are safe in a signal handler. */

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

struct mapping maps_cache[MAX_MAPPINGS];
int maps_n;
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
                if (q + 4 < eol)
                    m.exec = q[3] == 'x';
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

/* A snapshot from outside a handler (exec, exit): signals blocked, so that a program's handler
 * that faults cannot want the lock this thread holds. */
void maps_snapshot(void)
{
    uint64_t mask = block_all();
    spin_lock(&maps_lock);
    maps_snapshot_locked();
    spin_unlock(&maps_lock);
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

void arm_here(void)
{
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
