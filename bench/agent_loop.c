/* agent_loop.c - timing loops for bench/agent.py (the in-process agent's costs).
 *
 *   agent_loop floor N   the floor for any trap design (as bench/sigbus_floor.c): each
 *                        iteration sets EFLAGS.AC (pushf/or/popf) and makes one misaligned
 *                        8-byte load; the program's own SIGBUS handler only clears AC in the
 *                        saved context. Prints `ac NS` and `noac NS` (the same loop with an OR
 *                        mask of 0): ns per iteration; ac - noac is one SIGBUS round trip.
 *   agent_loop loads N   N misaligned 8-byte loads, nothing else: run under the agent each one
 *                        is a fault; run alone none is. Prints `loads NS` per iteration.
 *   agent_loop work N    N rounds of aligned integer work (no misaligned access at all), for
 *                        the agent's cost on a program that never faults. Prints `work NS` total.
 * Times are measured inside the program (CLOCK_MONOTONIC), so start-up is not in them.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <ucontext.h>

#define AC 0x40000UL

static volatile unsigned long faults;

static void on_sigbus(int sig, siginfo_t *si, void *ctx)
{
    (void)sig;
    (void)si;
    ucontext_t *uc = ctx;
    uc->uc_mcontext.gregs[REG_EFL] &= ~(greg_t)AC;
    faults++;
}

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

__attribute__((noipa)) static double floor_loop(const unsigned char *p, unsigned long mask, long n)
{
    uint64_t v, sink = 0;
    double t0 = now_ns();
    for (long i = 0; i < n; i++) {
        __asm__ volatile("pushfq\n\torq %1, (%%rsp)\n\tpopfq\n\tmovq (%2), %0"
                         : "=r"(v)
                         : "r"(mask), "r"(p)
                         : "memory", "cc");
        sink += v;
    }
    double t1 = now_ns();
    __asm__ volatile("" ::"r"(sink));
    return (t1 - t0) / n;
}

__attribute__((noipa)) static double load_loop(const unsigned char *p, long n)
{
    uint64_t v, sink = 0;
    double t0 = now_ns();
    for (long i = 0; i < n; i++) {
        __asm__ volatile("movq (%1), %0" : "=r"(v) : "r"(p) : "memory");
        sink += v;
    }
    double t1 = now_ns();
    __asm__ volatile("" ::"r"(sink));
    return (t1 - t0) / n;
}

__attribute__((noipa)) static double work_loop(long n)
{
    static uint64_t table[4096];
    uint64_t x = 88172645463325252ull, sum = 0;
    double t0 = now_ns();
    for (long r = 0; r < n; r++) {
        for (int i = 0; i < 4096; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            table[i] += x;
            sum += table[(i * 7) & 4095];
        }
    }
    double t1 = now_ns();
    __asm__ volatile("" ::"r"(sum));
    return t1 - t0;
}

int main(int argc, char **argv)
{
    static unsigned char buf[64] __attribute__((aligned(64)));
    const char *mode = argc > 1 ? argv[1] : "loads";
    long n = argc > 2 ? atol(argv[2]) : 100000;
    if (!strcmp(mode, "floor")) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_sigbus;
        sa.sa_flags = SA_SIGINFO;
        sigemptyset(&sa.sa_mask);
        if (sigaction(SIGBUS, &sa, NULL) != 0)
            return 2;
        floor_loop(buf + 1, AC, n / 10 + 1);
        faults = 0;
        double ac = floor_loop(buf + 1, AC, n);
        if (faults != (unsigned long)n) {
            fprintf(stderr, "agent_loop: expected %ld faults, got %lu\n", n, faults);
            return 1;
        }
        printf("ac %.1f\nnoac %.1f\n", ac, floor_loop(buf + 1, 0, n));
    } else if (!strcmp(mode, "loads")) {
        printf("loads %.1f\n", load_loop(buf + 1, n));
    } else if (!strcmp(mode, "work")) {
        printf("work %.0f\n", work_loop(n));
    } else {
        return 2;
    }
    return 0;
}
