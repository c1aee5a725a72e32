/* wrappers.c - the libc entry points the agent interposes to keep the program unchanged:
 * arming at main; threads that start unarmed and arm in their start routine once signals are
 * unblocked (a new pthread starts with every signal blocked and faults in libc at once:
 * PLATFORM.md); masks that block SIGBUS disarm the thread; longjmp re-decides; fork, vfork,
 * posix_spawn, system, popen and exec keep or drop the agent for children (--no-follow), and
 * run libc's child-starting code unarmed (it blocks every signal while it runs). What the agent
 * cannot see is counted (issue 29): armed threads that block SIGBUS run blind, and every process
 * started with the agent must report in (the children counter), else ualdbg says it was not traced.
 */
#include "wrappers.h"

#include <aio.h>
#include <errno.h>
#include <mqueue.h>
#include <netdb.h>
#include <pthread.h>
#include <setjmp.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "patch.h"

/* The libc functions behind the wrappers, resolved in the constructor (wrappers_init) and on
 * first use by a library constructor that runs before it. */
#define REAL(name) (real_##name ? real_##name : (real_##name = (__typeof__(real_##name))real_fn(#name)))

typedef int (*main_fn)(int, char **, char **);
static int (*real___libc_start_main)(main_fn, int, char **, void (*)(void), void (*)(void), void (*)(void), void *);
static int (*real_pthread_create)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
static int (*real_pthread_sigmask)(int, const sigset_t *, sigset_t *);
static int (*real_sigprocmask)(int, const sigset_t *, sigset_t *);
static void (*real_longjmp)(struct __jmp_buf_tag *, int);
static void (*real__longjmp)(struct __jmp_buf_tag *, int);
static void (*real_siglongjmp)(struct __jmp_buf_tag *, int);
static void (*real___longjmp_chk)(struct __jmp_buf_tag *, int);
static void (*real__exit)(int);
static void (*real__Exit)(int);
static int (*real_execve)(const char *, char *const[], char *const[]);
static int (*real_execvpe)(const char *, char *const[], char *const[]);
static int (*real_fexecve)(int, char *const[], char *const[]);
static int (*real_posix_spawn)(pid_t *, const char *, const posix_spawn_file_actions_t *, const posix_spawnattr_t *,
                               char *const[], char *const[]);
static int (*real_posix_spawnp)(pid_t *, const char *, const posix_spawn_file_actions_t *, const posix_spawnattr_t *,
                                char *const[], char *const[]);

HIDDEN void wrappers_init(void)
{
    REAL(__libc_start_main);
    REAL(pthread_create);
    REAL(pthread_sigmask);
    REAL(sigprocmask);
    REAL(longjmp);
    REAL(_longjmp);
    REAL(siglongjmp);
    REAL(__longjmp_chk);
    REAL(execve);
    REAL(execvpe);
    REAL(fexecve);
    REAL(posix_spawn);
    REAL(posix_spawnp);
}

/* ------------------------------------------------------------------------------------------ */
/* Blind spots: where a fault is neither trapped nor counted. */

/* Re-decide whether this thread runs blind (past its arming point, SIGBUS blocked by the program,
 * so AC is clear: a fault there would kill the process) after its mask may have changed, and
 * count the start of a blind period (an event, the thread) and the time of one that ends. */
HIDDEN void blind_update(void)
{
    struct ualdbg_header *h = G.hdr;
    if (!h || !CFG.configured)
        return;
    if (TS.blind_since && TS.blind_gen != G.fork_gen) { /* a fork child: its own buffer counts afresh */
        TS.blind_since = 0;
        TS.blind_counted = 0;
        if (sigbus_blocked_now() && armable()) {
            TS.blind_since = h->start_ns ? h->start_ns : now_ns();
            TS.blind_gen = G.fork_gen;
            TS.blind_counted = 1;
            __atomic_add_fetch(&h->blind_events, 1, __ATOMIC_RELAXED);
            __atomic_add_fetch(&h->blind_threads, 1, __ATOMIC_RELAXED);
            __atomic_add_fetch(&h->blind_now, 1, __ATOMIC_RELAXED);
            return;
        }
    }
    int blind = armable() && sigbus_blocked_now();
    if (blind && !TS.blind_since) {
        TS.blind_since = now_ns();
        TS.blind_gen = G.fork_gen;
        __atomic_add_fetch(&h->blind_events, 1, __ATOMIC_RELAXED);
        __atomic_add_fetch(&h->blind_now, 1, __ATOMIC_RELAXED);
        if (!TS.blind_counted) {
            TS.blind_counted = 1;
            __atomic_add_fetch(&h->blind_threads, 1, __ATOMIC_RELAXED);
        }
    } else if (!blind && TS.blind_since) {
        __atomic_add_fetch(&h->blind_ns, now_ns() - TS.blind_since, __ATOMIC_RELAXED);
        __atomic_sub_fetch(&h->blind_now, 1, __ATOMIC_RELAXED);
        TS.blind_since = 0;
    }
}

/* This thread (or the process) ends: a blind period still open is counted up to now. */
HIDDEN void blind_flush(void)
{
    struct ualdbg_header *h = G.hdr;
    if (!h || !TS.blind_since || TS.blind_gen != G.fork_gen)
        return;
    __atomic_add_fetch(&h->blind_ns, now_ns() - TS.blind_since, __ATOMIC_RELAXED);
    __atomic_sub_fetch(&h->blind_now, 1, __ATOMIC_RELAXED);
    TS.blind_since = 0;
}

/* Whether the kernel's SIGBUS action is still the agent's: a program can take it over without
 * libc's sigaction (a raw rt_sigaction, a module dlopen'ed after an injection), and then faults
 * reach the program, not the agent. Marked in the buffer when not. */
HIDDEN void blind_check_sigbus(void)
{
    struct {
        void *handler;
        unsigned long flags;
        void *restorer;
        uint64_t mask;
    } k;
    if (!G.hdr || !G.active || G.detaching)
        return;
    if (raw_syscall4(SYS_rt_sigaction, SIGBUS, 0, (long)&k, 8) == 0 && k.handler != (void *)ualdbg_sigbus_entry)
        __atomic_or_fetch(&G.hdr->blind_flags, UALDBG_B_SIGBUS_TAKEN, __ATOMIC_RELAXED);
}

/* ------------------------------------------------------------------------------------------ */
/* main */

static main_fn program_main;

static int main_trampoline(int argc, char **argv, char **envp)
{
    arm_here();
    return program_main(argc, argv, envp);
}

EXPORT int __libc_start_main(main_fn main, int argc, char **argv, void (*init)(void), void (*fini)(void),
                             void (*rtld_fini)(void), void *stack_end)
{
    REAL(__libc_start_main);
    if (CFG.configured && G.active && !CFG.at_start) {
        program_main = main;
        main = main_trampoline;
    }
    return real___libc_start_main(main, argc, argv, init, fini, rtld_fini, stack_end);
}

/* ------------------------------------------------------------------------------------------ */
/* Threads */

struct start {
    void *(*fn)(void *);
    void *arg;
};

static void thread_done(void *unused)
{
    (void)unused;
    blind_flush();
    /* libc's thread exit path blocks every signal: leave it unarmed. */
    TS.want_armed = -1;
    ac_clear();
}

static void *thread_trampoline(void *p)
{
    struct start s = *(struct start *)p;
    free(p);
    void *ret;
    pthread_cleanup_push(thread_done, NULL);
    if (G.active && G.armed) {
        TS.want_armed = 1;
        if (G.hdr)
            __atomic_add_fetch(&G.hdr->threads, 1, __ATOMIC_RELAXED);
        if (sigbus_blocked_now() && G.hdr)
            __atomic_add_fetch(&G.hdr->unarmed_threads, 1, __ATOMIC_RELAXED);
        rearm();
        blind_update(); /* started with SIGBUS blocked (its creator's mask): blind from here */
    }
    ret = s.fn(s.arg);
    thread_done(NULL);
    pthread_cleanup_pop(0);
    return ret;
}

EXPORT int pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
    /* AC is inherited by clone: the new thread must start with it clear. */
    uint64_t was = ac_save_clear();
    REAL(pthread_create);
    if (!CFG.configured) {
        int r = real_pthread_create(t, attr, fn, arg);
        ac_restore(was);
        return r;
    }
    struct start *s = malloc(sizeof *s);
    int r;
    patch_threads_started(); /* the patch trampolines count with locked increments from now on */
    if (!s) {
        r = real_pthread_create(t, attr, fn, arg);
    } else {
        s->fn = fn;
        s->arg = arg;
        r = real_pthread_create(t, attr, thread_trampoline, s);
        if (r != 0)
            free(s);
    }
    ac_restore(was);
    return r;
}

/* ------------------------------------------------------------------------------------------ */
/* Signal masks */

static void after_mask_change(uint64_t was)
{
    blind_update();
    if (armable())
        rearm();
    else
        ac_restore(was);
}

EXPORT int pthread_sigmask(int how, const sigset_t *set, sigset_t *old)
{
    uint64_t was = ac_save_clear();
    REAL(pthread_sigmask);
    if (!CFG.configured) {
        int r = real_pthread_sigmask(how, set, old);
        ac_restore(was);
        return r;
    }
    int r = real_pthread_sigmask(how, set, old);
    after_mask_change(was);
    return r;
}

EXPORT int sigprocmask(int how, const sigset_t *set, sigset_t *old)
{
    uint64_t was = ac_save_clear();
    REAL(sigprocmask);
    if (!CFG.configured) {
        int r = real_sigprocmask(how, set, old);
        ac_restore(was);
        return r;
    }
    int r = real_sigprocmask(how, set, old);
    int e = errno;
    after_mask_change(was);
    errno = e;
    return r;
}

EXPORT int sighold(int sig)
{
    sigset_t one;
    sigemptyset(&one);
    if (sigaddset(&one, sig) < 0)
        return -1;
    return sigprocmask(SIG_BLOCK, &one, NULL);
}

EXPORT int sigrelse(int sig)
{
    sigset_t one;
    sigemptyset(&one);
    if (sigaddset(&one, sig) < 0)
        return -1;
    return sigprocmask(SIG_UNBLOCK, &one, NULL);
}

/* longjmp out of a signal handler: the jump target decides, with the mask it restores. */
static void before_longjmp(struct __jmp_buf_tag *env)
{
    uint64_t was = ac_save_clear();
    if (!CFG.configured) {
        ac_restore(was);
        return;
    }
    if (armable()) {
        if (env->__mask_was_saved)
            raw_sigprocmask(SIG_SETMASK, (const uint64_t *)(const void *)&env->__saved_mask, NULL);
        blind_update();
        rearm();
    }
}

#define LONGJMP(name)                                                          \
    EXPORT __attribute__((noreturn)) void name(struct __jmp_buf_tag env[1], int val) \
    {                                                                          \
        before_longjmp(env);                                                   \
        REAL(name);                                                            \
        real_##name(env, val);                                                 \
        __builtin_unreachable();                                               \
    }

LONGJMP(longjmp)
LONGJMP(_longjmp)
LONGJMP(siglongjmp)
LONGJMP(__longjmp_chk)

/* ------------------------------------------------------------------------------------------ */
/* Children */

HIDDEN void ualdbg_vfork_parent(void)
{
    if (CFG.configured)
        rearm();
}

HIDDEN long ualdbg_vfork_error(long neg)
{
    errno = (int)-neg;
    if (CFG.configured)
        rearm();
    return -1;
}

/* Run libc's child-starting code with AC clear (it blocks every signal while it works). */
#define DISARMED(ret, name, params, args)             \
    EXPORT ret name params                            \
    {                                                 \
        static ret(*real_##name) params;              \
        uint64_t was = ac_save_clear();               \
        REAL(name);                                   \
        ret r = real_##name args;                     \
        int e = errno;                                \
        ac_restore(was);                              \
        errno = e;                                    \
        return r;                                     \
    }

DISARMED(int, timer_create, (clockid_t c, struct sigevent *ev, timer_t *t), (c, ev, t))
DISARMED(int, mq_notify, (mqd_t q, const struct sigevent *ev), (q, ev))
DISARMED(int, aio_read, (struct aiocb *a), (a))
DISARMED(int, aio_write, (struct aiocb *a), (a))
DISARMED(int, aio_fsync, (int op, struct aiocb *a), (op, a))
DISARMED(int, aio_read64, (struct aiocb64 *a), (a))
DISARMED(int, aio_write64, (struct aiocb64 *a), (a))
DISARMED(int, aio_fsync64, (int op, struct aiocb64 *a), (op, a))
DISARMED(int, lio_listio, (int m, struct aiocb *const l[], int n, struct sigevent *ev), (m, l, n, ev))
DISARMED(int, lio_listio64, (int m, struct aiocb64 *const l[], int n, struct sigevent *ev), (m, l, n, ev))
DISARMED(int, getaddrinfo_a, (int m, struct gaicb *l[], int n, struct sigevent *ev), (m, l, n, ev))

/* system() and popen() start /bin/sh through libc's internal posix_spawn. Without --follow the
 * agent took itself out of the environment at start-up, so the shell does not get it. */
DISARMED(int, system, (const char *cmd), (cmd))
DISARMED(FILE *, popen, (const char *cmd, const char *mode), (cmd, mode))

/* The program an exec or spawn will run, for the checks below; NULL when not found. */
static const char *resolve_path(const char *file, char *buf, size_t cap)
{
    if (!file || !*file)
        return NULL;
    if (strchr(file, '/'))
        return file;
    const char *path = getenv("PATH");
    if (!path)
        path = "/bin:/usr/bin";
    while (*path) {
        const char *c = strchr(path, ':');
        size_t l = c ? (size_t)(c - path) : strlen(path);
        if (l + strlen(file) + 2 < cap) {
            memcpy(buf, l ? path : ".", l ? l : 1);
            size_t o = l ? l : 1;
            buf[o++] = '/';
            strcpy(buf + o, file);
            if (access(buf, X_OK) == 0)
                return buf;
        }
        if (!c)
            break;
        path = c + 1;
    }
    return NULL;
}

/* The environment a child gets: unchanged, or without the agent (not following children, or
 * a program the agent cannot be loaded into). NULL: use envp as it is. */
static char **child_env(const char *file, char *const envp[], int *foreign)
{
    char buf[4096];
    *foreign = 0;
    if (!CFG.configured || !env_has_agent(envp))
        return NULL;
    const char *path = resolve_path(file, buf, sizeof buf);
    if (CFG.follow && path && elf_is_foreign(path))
        *foreign = 1;
    return CFG.follow && !*foreign ? NULL : env_without_agent(envp);
}

/* A process started with `envp`: one more that must report in (`children`), or one started
 * without the agent (`children_untraced`: an ELF it cannot be loaded into, or an environment the
 * program stripped of it). Nothing is counted when not following children (--no-follow). Returns
 * the counter bumped, for an exec that fails to take it back. */
static uint64_t *count_child(char *const envp[], int foreign)
{
    if (!CFG.configured || !CFG.follow || !G.hdr || !G.active)
        return NULL;
    uint64_t *c = foreign || !env_has_agent(envp) ? &G.hdr->children_untraced : &G.hdr->children;
    __atomic_add_fetch(c, 1, __ATOMIC_RELAXED);
    return c;
}

static void uncount_child(uint64_t *c)
{
    if (c)
        __atomic_sub_fetch(c, 1, __ATOMIC_RELAXED);
}

/* An exec: in a vfork child (the parent's buffer, shared) it starts a child process of the
 * parent's; in a process with its own buffer the image ends, and ualdbg sees whether the next
 * one reported in. */
static uint64_t *count_exec(char *const envp[], int foreign)
{
    if (!G.hdr || !G.active)
        return NULL;
    if (raw_getpid() != G.pid)
        return count_child(envp, foreign);
    if (foreign)
        __atomic_or_fetch(&G.hdr->blind_flags, UALDBG_B_EXEC_FOREIGN, __ATOMIC_RELAXED);
    return NULL;
}

static void free_env(char **env, char *const orig[])
{
    if (!env)
        return;
    /* Entries made by env_without_agent: the LD_PRELOAD replacement only. */
    for (int i = 0; env[i]; i++) {
        int found = 0;
        for (int j = 0; orig && orig[j]; j++)
            if (orig[j] == env[i])
                found = 1;
        if (!found)
            free(env[i]);
    }
    free(env);
}

/* Before an exec: the image ends here (maps saved, state EXECED). A program that drops the
 * agent from the environment of the program it execs escapes the trace: the buffer says so
 * (UALDBG_F_STRIPPED) and the exec goes on as the program asked. It is never cut short to be
 * run again under another engine: a program runs once under ualdbg (issue 29); ualdbg says in
 * one line that the rest ran untraced, and --engine trap traces it whole. */
static void before_exec(const char *file, char *const envp[], int foreign)
{
    /* A vfork child shares the parent's memory and buffer: it has nothing to end. */
    if (!CFG.configured || !G.hdr || !G.active || raw_getpid() != G.pid)
        return;
    char note[512], *p = note, *end = note + sizeof note - 1;
    int stripped = CFG.follow && !foreign && !env_has_agent(envp);
    const char *what = stripped ? "exec without the agent in LD_PRELOAD: "
                       : foreign ? "exec of a program the agent cannot load into: " : "exec: ";
    p = stpncpy(p, what, (size_t)(end - p));
    p = stpncpy(p, file ? file : "?", (size_t)(end - p));
    *p = 0;
    maps_snapshot();
    blind_flush();
    blind_check_sigbus();
    if (stripped)
        __atomic_or_fetch(&G.hdr->flags, UALDBG_F_STRIPPED, __ATOMIC_RELEASE);
    buffer_mark(UALDBG_EXECED, note);
}

static void exec_failed(uint64_t *counted)
{
    uncount_child(counted);
    if (CFG.configured && G.hdr && G.active && raw_getpid() == G.pid) {
        __atomic_and_fetch(&G.hdr->blind_flags, ~UALDBG_B_EXEC_FOREIGN, __ATOMIC_RELAXED);
        buffer_mark(UALDBG_RUNNING, "");
    }
}

/* _exit and _Exit skip libc's exit handlers, where the agent learns the status (a fork child
 * usually ends so): the status is noted here, then libc's own ends the process. */
EXPORT void _exit(int status)
{
    blind_flush();
    blind_check_sigbus();
    process_exited(status);
    REAL(_exit)(status);
    __builtin_unreachable();
}

EXPORT void _Exit(int status)
{
    blind_flush();
    blind_check_sigbus();
    process_exited(status);
    REAL(_Exit)(status);
    __builtin_unreachable();
}

EXPORT int execve(const char *path, char *const argv[], char *const envp[])
{
    uint64_t was = ac_save_clear();
    REAL(execve);
    int foreign;
    char **env = child_env(path, envp, &foreign);
    before_exec(path, envp, foreign);
    uint64_t *counted = count_exec(envp, foreign);
    int r = real_execve(path, argv, env ? env : envp);
    int e = errno;
    exec_failed(counted);
    free_env(env, envp);
    ac_restore(was);
    errno = e;
    return r;
}

EXPORT int execvpe(const char *file, char *const argv[], char *const envp[])
{
    uint64_t was = ac_save_clear();
    REAL(execvpe);
    int foreign;
    char **env = child_env(file, envp, &foreign);
    before_exec(file, envp, foreign);
    uint64_t *counted = count_exec(envp, foreign);
    int r = real_execvpe(file, argv, env ? env : envp);
    int e = errno;
    exec_failed(counted);
    free_env(env, envp);
    ac_restore(was);
    errno = e;
    return r;
}

extern char **environ;

EXPORT int execv(const char *path, char *const argv[])
{
    return execve(path, argv, environ);
}

EXPORT int execvp(const char *file, char *const argv[])
{
    return execvpe(file, argv, environ);
}

EXPORT int fexecve(int fd, char *const argv[], char *const envp[])
{
    uint64_t was = ac_save_clear();
    REAL(fexecve);
    int foreign;
    char **env = child_env(NULL, envp, &foreign);
    before_exec("(fexecve)", envp, foreign);
    uint64_t *counted = count_exec(envp, foreign);
    int r = real_fexecve(fd, argv, env ? env : envp);
    int e = errno;
    exec_failed(counted);
    free_env(env, envp);
    ac_restore(was);
    errno = e;
    return r;
}

#define COLLECT_ARGS(first, n)                 \
    do {                                       \
        va_list ap;                            \
        va_start(ap, first);                   \
        while (va_arg(ap, char *))             \
            n++;                               \
        va_end(ap);                            \
    } while (0)

/* argv[0..n] of an execl-style call: `first`, then the n strings after it (the NULL included). */
#define FILL_ARGV(argv, first, ap, n)              \
    do {                                           \
        (argv)[0] = (char *)(first);               \
        for (int i_ = 1; i_ <= (n); i_++)          \
            (argv)[i_] = va_arg(ap, char *);       \
    } while (0)

EXPORT int execl(const char *path, const char *arg, ...)
{
    int n = 1;
    COLLECT_ARGS(arg, n);
    char *argv[n + 1];
    va_list ap;
    va_start(ap, arg);
    FILL_ARGV(argv, arg, ap, n);
    va_end(ap);
    return execve(path, argv, environ);
}

EXPORT int execlp(const char *file, const char *arg, ...)
{
    int n = 1;
    COLLECT_ARGS(arg, n);
    char *argv[n + 1];
    va_list ap;
    va_start(ap, arg);
    FILL_ARGV(argv, arg, ap, n);
    va_end(ap);
    return execvpe(file, argv, environ);
}

EXPORT int execle(const char *path, const char *arg, ...)
{
    int n = 1;
    COLLECT_ARGS(arg, n);
    char *argv[n + 1];
    va_list ap;
    va_start(ap, arg);
    FILL_ARGV(argv, arg, ap, n);
    char *const *envp = va_arg(ap, char *const *);
    va_end(ap);
    return execve(path, argv, envp);
}

EXPORT int posix_spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa,
                       const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
    uint64_t was = ac_save_clear();
    REAL(posix_spawn);
    int foreign;
    char **env = child_env(path, envp, &foreign);
    int r = real_posix_spawn(pid, path, fa, attr, argv, env ? env : envp);
    if (r == 0)
        count_child(envp, foreign);
    free_env(env, envp);
    ac_restore(was);
    return r;
}

EXPORT int posix_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *fa,
                        const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
    uint64_t was = ac_save_clear();
    REAL(posix_spawnp);
    int foreign;
    char **env = child_env(file, envp, &foreign);
    int r = real_posix_spawnp(pid, file, fa, attr, argv, env ? env : envp);
    if (r == 0)
        count_child(envp, foreign);
    free_env(env, envp);
    ac_restore(was);
    return r;
}
