/* signals.c - the program's signal actions, kept as the program set them.
 *
 * The kernel's SIGBUS action is always the agent's; the program's own SIGBUS action (set
 * before or after the agent, with sigaction, signal, sysv_signal, sigset...) is kept here,
 * reported back by sigaction, and called for every SIGBUS that is not an alignment fault the
 * agent made, with the program's mask and flags. The program's handlers for other signals are
 * entered through a dispatcher that decides EFLAGS.AC for the handler: armed when the thread
 * is, clear when the handler runs with SIGBUS blocked (a fault there would kill the process);
 * sigreturn restores the interrupted context's flags either way.
 */
#include "signals.h"

#include <dlfcn.h>
#include <errno.h>
#include <string.h>

#include "patch.h"
#include "trampolines.h"
#include "wrappers.h"

#define NSIGS 65

static struct sigaction user_act[NSIGS];
static unsigned char user_known[NSIGS];
static volatile int sigtrap_ours;
static volatile int sig_lock;

typedef int (*sigaction_fn)(int, const struct sigaction *, struct sigaction *);
static sigaction_fn p_sigaction;

void signals_init(void)
{
    if (!p_sigaction)
        p_sigaction = (sigaction_fn)real_fn("sigaction");
}

int real_sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
    if (!p_sigaction)
        signals_init();
    return p_sigaction(sig, act, old);
}

static void lock(void)
{
    while (__atomic_exchange_n(&sig_lock, 1, __ATOMIC_ACQUIRE))
        __builtin_ia32_pause();
}
static void unlock(void) { __atomic_store_n(&sig_lock, 0, __ATOMIC_RELEASE); }

void signals_after_fork(void) { sig_lock = 0; }

static void ensure_known(int sig)
{
    if (!user_known[sig]) {
        real_sigaction(sig, NULL, &user_act[sig]);
        user_known[sig] = 1;
    }
}

static int is_handler(const struct sigaction *a)
{
    return a->sa_handler != SIG_DFL && a->sa_handler != SIG_IGN;
}

/* What the kernel gets for `sig`, from the program's action and the agent's needs. */
void install_kernel_action(int sig)
{
    struct sigaction k;
    ensure_known(sig);
    const struct sigaction *u = &user_act[sig];
    memset(&k, 0, sizeof k);
    int ours = (sig == SIGBUS) || (sig == SIGTRAP && sigtrap_ours);
    if (ours) {
        k.sa_sigaction = sig == SIGBUS ? ualdbg_sigbus_entry : ualdbg_sigtrap_entry;
        if (is_handler(u)) {
            k.sa_mask = u->sa_mask;
            k.sa_flags = u->sa_flags & (SA_ONSTACK | SA_RESTART);
        } else {
            /* No handler of the program's: a SIGBUS the agent does not take kills the program,
             * so SA_RESTART changes nothing for it; and a system call that the patcher's own stop
             * request (patch.c) interrupts is restarted instead of failing with EINTR. */
            sigemptyset(&k.sa_mask);
            k.sa_flags = sig == SIGBUS ? SA_RESTART : 0;
        }
        k.sa_flags |= SA_SIGINFO;
    } else if (!is_handler(u) || G.orphaned) {
        k = *u;
    } else {
        k.sa_sigaction = ualdbg_signal_entry;
        k.sa_mask = u->sa_mask;
        k.sa_flags = (u->sa_flags | SA_SIGINFO) & ~SA_RESETHAND;
    }
    real_sigaction(sig, &k, NULL);
}

/* Handlers installed before the agent's constructor ran (other libraries' constructors) go
 * through the dispatcher from now on, like every later one. */
void signals_adopt_existing(void)
{
    for (int sig = 1; sig < NSIGS; sig++) {
        if (sig == SIGKILL || sig == SIGSTOP || sig == 32 || sig == 33 || sig == SIGBUS)
            continue;
        ensure_known(sig);
        if (is_handler(&user_act[sig]))
            install_kernel_action(sig);
    }
}

/* Detaching from a process the agent was injected into: the kernel gets back the program's own
 * action, exactly as read at the injection, for every signal the agent took over (SIGBUS,
 * SIGTRAP if it single-stepped, the handlers it dispatched); the next injection reads afresh. */
void signals_release(void)
{
    /* Every other thread is stopped: one stopped holding the lock (in sigaction) never lets go. */
    for (long spins = 0; __atomic_exchange_n(&sig_lock, 1, __ATOMIC_ACQUIRE) && spins < 1000000; spins++)
        __builtin_ia32_pause();
    for (int sig = 1; sig < NSIGS; sig++) {
        if (!user_known[sig])
            continue;
        struct sigaction cur;
        /* Only where the kernel's action is still the agent's: one the program set since (its
         * libc calls are not interposed in an injected agent) stays. */
        if (real_sigaction(sig, NULL, &cur) == 0 &&
            (cur.sa_sigaction == ualdbg_sigbus_entry || cur.sa_sigaction == ualdbg_sigtrap_entry ||
             cur.sa_sigaction == ualdbg_signal_entry))
            real_sigaction(sig, &user_act[sig], NULL);
        user_known[sig] = 0;
    }
    sigtrap_ours = 0;
    unlock();
}

/* The agent disarmed itself while the program runs (its ualdbg died, agent.c): the kernel gets
 * back the program's own action for each signal the agent only dispatched; from now on the
 * program's sigaction sets its own directly (install_kernel_action). SIGBUS and SIGTRAP stay the
 * agent's: a thread may still have AC set, a single-step or a patch's int3 may be in flight, and
 * the agent passes every one of them that is not its own to the program's action. */
void signals_unhook(void)
{
    /* Another thread in sigaction holds the lock for a few instructions, with every signal blocked. */
    long spins = 0;
    while (__atomic_exchange_n(&sig_lock, 1, __ATOMIC_ACQUIRE))
        if (++spins > 10000000)
            return;
    for (int sig = 1; sig < NSIGS; sig++) {
        struct sigaction cur;
        if (sig == SIGBUS || sig == SIGTRAP || !user_known[sig])
            continue;
        if (real_sigaction(sig, NULL, &cur) == 0 && cur.sa_sigaction == ualdbg_signal_entry)
            real_sigaction(sig, &user_act[sig], NULL);
    }
    unlock();
}

void ensure_sigtrap(void)
{
    if (sigtrap_ours)
        return;
    sigtrap_ours = 1;
    install_kernel_action(SIGTRAP);
}

static int synchronous(int sig, const siginfo_t *si)
{
    return si && si->si_code > 0 &&
           (sig == SIGSEGV || sig == SIGBUS || sig == SIGILL || sig == SIGFPE || sig == SIGTRAP);
}

static void kernel_default(int sig)
{
    struct sigaction d;
    memset(&d, 0, sizeof d);
    d.sa_handler = SIG_DFL;
    real_sigaction(sig, &d, NULL);
}

/* Deliver `sig` as the program asked. Runs in a signal handler with AC clear. */
void chain_signal(int sig, siginfo_t *si, ucontext_t *uc)
{
    if (sig <= 0 || sig >= NSIGS)
        return;
    ensure_known(sig);
    struct sigaction u = user_act[sig];
    greg_t *g = uc->uc_mcontext.gregs;
    if (u.sa_handler == SIG_IGN) {
        if (synchronous(sig, si))
            kernel_default(sig); /* the kernel forces a fault's signal through: re-fault, die */
        return;
    }
    if (u.sa_handler == SIG_DFL) {
        kernel_default(sig);
        if (!synchronous(sig, si)) /* sent, not raised by an instruction: send it again */
            raw_syscall4(SYS_tgkill, raw_getpid(), raw_gettid(), sig, 0);
        return; /* a fault re-executes and takes the default action */
    }
    if (u.sa_flags & SA_RESETHAND) {
        memset(&user_act[sig], 0, sizeof user_act[sig]);
        user_act[sig].sa_handler = SIG_DFL;
        install_kernel_action(sig);
    }
    /* A fault raised by an instruction the agent runs out of line: the program sees its PC (and,
     * inside a patch trampoline, its registers and stack pointer as they were there). */
    if (synchronous(sig, si)) {
        int at_insn = 0;
        if (!patch_fault_context(g, &at_insn)) {
            uint64_t origin = trampoline_origin((uint64_t)g[REG_RIP], &at_insn);
            if (origin && at_insn) {
                g[REG_RIP] = (greg_t)origin;
                if (at_insn == 1) /* it ran with AC cleared by the agent; 2: with the thread's own */
                    g[REG_EFL] |= (greg_t)AC_BIT;
            }
        }
    }
    int blocked = sigismember(&uc->uc_sigmask, SIGBUS) || sigismember(&u.sa_mask, SIGBUS) ||
                  (sig == SIGBUS && !(u.sa_flags & SA_NODEFER));
    if ((sig == SIGBUS || sig == SIGTRAP) && (u.sa_flags & SA_NODEFER)) {
        /* The agent's own action blocks the signal; the program's did not ask for that. */
        uint64_t one = 1ull << (sig - 1);
        raw_sigprocmask(SIG_UNBLOCK, &one, NULL);
    }
    /* A handler that runs with SIGBUS blocked runs unarmed in an armed thread: blind (issue 29). */
    int blind = blocked && armable() && G.hdr;
    uint64_t since = 0;
    if (blind) { /* counted before the call: a handler may longjmp out and never return here */
        __atomic_add_fetch(&G.hdr->handler_events, 1, __ATOMIC_RELAXED);
        since = now_ns();
    }
    if (!blocked && armable())
        ac_set();
    TS.in_program_handler++; /* the patcher does not move code this handler may return into */
    if (u.sa_flags & SA_SIGINFO)
        u.sa_sigaction(sig, si, uc);
    else
        u.sa_handler(sig);
    TS.in_program_handler--;
    if (blind && G.hdr)
        __atomic_add_fetch(&G.hdr->handler_ns, now_ns() - since, __ATOMIC_RELAXED);
    ac_clear();
    /* The context resumes where the handler left it: where the code was moved to a patch
     * trampoline since (or is shown moved, above), it resumes at the trampoline's copy. */
    patch_fix_resume(g);
}

void on_signal_c(int sig, siginfo_t *si, void *ctx)
{
    chain_signal(sig, si, ctx);
}

/* ------------------------------------------------------------------------------------------ */
/* The program's interface. */

static int passthrough(int sig)
{
    /* glibc reserves 32 and 33 (SIGCANCEL, SIGSETXID) and rejects them itself. */
    return !CFG.configured || sig <= 0 || sig >= NSIGS || sig == SIGKILL || sig == SIGSTOP || sig == 32 || sig == 33;
}

EXPORT int sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
    if (passthrough(sig))
        return real_sigaction(sig, act, old);
    uint64_t was = ac_save_clear();
    uint64_t all = ~0ull, mask;
    raw_sigprocmask(SIG_SETMASK, &all, &mask);
    lock();
    ensure_known(sig);
    struct sigaction prev = user_act[sig];
    if (act) {
        user_act[sig] = *act;
        install_kernel_action(sig);
    }
    unlock();
    raw_sigprocmask(SIG_SETMASK, &mask, NULL);
    if (old)
        *old = prev;
    ac_restore(was);
    return 0;
}

EXPORT int __sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
    return sigaction(sig, act, old);
}

static __sighandler_t set_handler(int sig, __sighandler_t h, int flags, int mask_self)
{
    struct sigaction a, o;
    if (sig <= 0 || sig >= NSIGS || h == SIG_ERR) {
        errno = EINVAL;
        return SIG_ERR;
    }
    uint64_t was = ac_save_clear();
    memset(&a, 0, sizeof a);
    a.sa_handler = h;
    sigemptyset(&a.sa_mask);
    if (mask_self)
        sigaddset(&a.sa_mask, sig);
    a.sa_flags = flags;
    int r = sigaction(sig, &a, &o);
    ac_restore(was);
    return r < 0 ? SIG_ERR : o.sa_handler;
}

/* glibc's signal() has BSD semantics: the signal blocked in its handler, SA_RESTART. */
EXPORT __sighandler_t signal(int sig, __sighandler_t h)
{
    if (passthrough(sig)) {
        static __sighandler_t (*real)(int, __sighandler_t);
        if (!real)
            real = (__sighandler_t(*)(int, __sighandler_t))real_fn("signal");
        return real(sig, h);
    }
    return set_handler(sig, h, SA_RESTART, 1);
}

EXPORT __sighandler_t bsd_signal(int sig, __sighandler_t h)
{
    return signal(sig, h);
}

EXPORT __sighandler_t sysv_signal(int sig, __sighandler_t h)
{
    if (passthrough(sig)) {
        static __sighandler_t (*real)(int, __sighandler_t);
        if (!real)
            real = (__sighandler_t(*)(int, __sighandler_t))real_fn("sysv_signal");
        return real(sig, h);
    }
    return set_handler(sig, h, SA_RESETHAND | SA_NODEFER, 0);
}

EXPORT __sighandler_t __sysv_signal(int sig, __sighandler_t h)
{
    return sysv_signal(sig, h);
}

EXPORT int sigignore(int sig)
{
    return set_handler(sig, SIG_IGN, 0, 0) == SIG_ERR ? -1 : 0;
}

EXPORT __sighandler_t sigset(int sig, __sighandler_t h)
{
    if (passthrough(sig)) {
        static __sighandler_t (*real)(int, __sighandler_t);
        if (!real)
            real = (__sighandler_t(*)(int, __sighandler_t))real_fn("sigset");
        return real(sig, h);
    }
    sigset_t one, old;
    sigemptyset(&one);
    sigaddset(&one, sig);
    if (h == SIG_HOLD) {
        struct sigaction o;
        if (sigaction(sig, NULL, &o) < 0 || pthread_sigmask(SIG_BLOCK, &one, &old) != 0)
            return SIG_ERR;
        return sigismember(&old, sig) ? SIG_HOLD : o.sa_handler;
    }
    __sighandler_t prev = set_handler(sig, h, 0, 0);
    if (prev == SIG_ERR || pthread_sigmask(SIG_UNBLOCK, &one, &old) != 0)
        return SIG_ERR;
    return sigismember(&old, sig) ? SIG_HOLD : prev;
}
