/* sigbus_floor.c - the floor for any trap-based design: one in-process SIGBUS round trip.
 *
 * Each iteration sets EFLAGS.AC (pushf / or / popf) and makes one misaligned 8-byte load.
 * With AC set the load raises #AC, delivered as SIGBUS/BUS_ADRALN; the handler clears AC in
 * the saved context (uc_mcontext.gregs[REG_EFL]) and returns, so the load re-executes without
 * AC and the next iteration sets AC again. The baseline runs the same instructions with an OR
 * mask of 0 (AC never set, no trap), so `ac - noac` is what the trap alone costs.
 *
 * Usage: sigbus_floor N REPS
 * Prints one line per repetition and mode: `ac NS`, `noac NS`, `getpid NS` (ns per iteration).
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#define AC 0x40000UL

static volatile unsigned long faults;

static void on_sigbus(int sig, siginfo_t *si, void *ctx)
{
    (void)sig;
    (void)si;
    /* No libc before AC is clear: signal delivery does not clear AC (PLATFORM.md). */
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

/* noipa: the mask is a run-time value, so both modes run the very same code. */
__attribute__((noipa)) static double loop(const unsigned char *p, unsigned long mask, long n)
{
    uint64_t v, sink = 0;
    double t0 = now_ns();
    for (long i = 0; i < n; i++) {
        __asm__ volatile("pushfq\n\t"
                         "orq %1, (%%rsp)\n\t"
                         "popfq\n\t"
                         "movq (%2), %0"
                         : "=r"(v)
                         : "r"(mask), "r"(p)
                         : "memory", "cc");
        sink += v;
    }
    double t1 = now_ns();
    __asm__ volatile("" ::"r"(sink));
    return (t1 - t0) / n;
}

__attribute__((noipa)) static double getpid_loop(long n)
{
    double t0 = now_ns();
    for (long i = 0; i < n; i++)
        syscall(SYS_getpid);
    return (now_ns() - t0) / n;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 100000;
    int reps = argc > 2 ? atoi(argv[2]) : 5;
    static unsigned char buf[64] __attribute__((aligned(64)));
    struct sigaction sa = {0};
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGBUS, &sa, NULL) != 0)
        return 2;
    loop(buf + 1, AC, n / 10 + 1); /* warm up: page in, train the predictors */
    for (int r = 0; r < reps; r++) {
        faults = 0;
        double ac = loop(buf + 1, AC, n);
        if (faults != (unsigned long)n) {
            fprintf(stderr, "sigbus_floor: expected %ld faults, got %lu\n", n, faults);
            return 1;
        }
        printf("ac %.1f\n", ac);
        printf("noac %.1f\n", loop(buf + 1, 0, n));
        printf("getpid %.1f\n", getpid_loop(n));
    }
    return 0;
}
