/* costprobe.c - what an unaligned access costs on this CPU, per cost class (issue 33;
 * ualdbg/core/cost.py): the time of one 8-byte access aligned, misaligned inside a 64-byte line,
 * across a line, across a 4 KiB page, and of a locked add aligned and across a line (a split
 * lock). Built and run by ualdbg/agent/costprobe.py, once per CPU (its output is cached).
 *
 * Each figure is the best of ROUNDS runs of ITERS iterations of UNROLL accesses to one address
 * (the same line, always in L1: the price of the misalignment, not of the memory), timed with
 * clock_gettime(CLOCK_MONOTONIC) around the loop, pinned to the CPU it started on. Loads are
 * dependent (latency: each address waits for the last load's data); a locked add is serialising by
 * itself. The split lock runs in a
 * forked child: a kernel whose split-lock detection is fatal (split_lock_detect=fatal) kills it
 * with SIGBUS, which is reported ("split-lock killed") instead of killing the probe; argv[1]
 * "nolock" skips it (ualdbg decides from /proc/cpuinfo and the kernel command line).
 *
 * Output, one line each:  <class> <ns per access>   then   meta <key> <value>
 */
#define _GNU_SOURCE
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define ITERS 200000L
#define ROUNDS 7
#define UNROLL 8

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Dependent loads: each one's address needs the value the last one read (0: the buffer is
 * zero), so the figure is a load's latency, what a split adds to code that waits for its data. */
static __attribute__((noinline)) void loads(char *p, long n)
{
    long v = 0;
    for (long i = 0; i < n; i++)
        __asm__ volatile("movq (%1,%0), %0\n\tmovq (%1,%0), %0\n\tmovq (%1,%0), %0\n\tmovq (%1,%0), %0\n\t"
                         "movq (%1,%0), %0\n\tmovq (%1,%0), %0\n\tmovq (%1,%0), %0\n\tmovq (%1,%0), %0"
                         : "+r"(v) : "r"(p) : "memory");
}

static __attribute__((noinline)) void locked_adds(char *p, long n)
{
    for (long i = 0; i < n; i++)
        __asm__ volatile("lock addq $1, (%0)\n\tlock addq $1, (%0)\n\tlock addq $1, (%0)\n\tlock addq $1, (%0)\n\t"
                         "lock addq $1, (%0)\n\tlock addq $1, (%0)\n\tlock addq $1, (%0)\n\tlock addq $1, (%0)"
                         : : "r"(p) : "memory", "cc");
}

/* An empty loop of the same trip count: its time is taken off every figure. */
static __attribute__((noinline)) void empty(const char *p, long n)
{
    for (long i = 0; i < n; i++)
        __asm__ volatile("" : : "r"(p) : "memory");
}

static double best(void (*fn)(char *, long), char *p, long iters)
{
    double low = 1e30;
    fn(p, iters / 10); /* warm: the line in L1, the page in the TLB */
    for (int r = 0; r < ROUNDS; r++) {
        uint64_t t0 = now_ns();
        fn(p, iters);
        uint64_t t1 = now_ns();
        double ns = (double)(t1 - t0) / (double)(iters * UNROLL);
        if (ns < low)
            low = ns;
    }
    return low;
}

int main(int argc, char **argv)
{
    int lock_ok = !(argc > 1 && !strcmp(argv[1], "nolock"));
    cpu_set_t one;
    int cpu = sched_getcpu();
    CPU_ZERO(&one);
    CPU_SET(cpu < 0 ? 0 : cpu, &one);
    int pinned = sched_setaffinity(0, sizeof one, &one) == 0;
    char *mem = mmap(NULL, 3 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED)
        return 1;
    memset(mem, 0, 3 * 4096);
    char *base = mem + 4096; /* page-aligned, with a mapped page on each side */
    double floor_ns = best((void (*)(char *, long))empty, base, ITERS);
    static const struct { const char *name; int off; } plain[] = {
        {"aligned", 0}, {"inside-line", 4}, {"line-split", 60}, {"page-split", 4092},
    };
    for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++) {
        double ns = best(loads, base + plain[i].off, ITERS) - floor_ns;
        printf("%s %.4f\n", plain[i].name, ns > 0 ? ns : 0.0);
    }
    double locked = best(locked_adds, base, ITERS / 4) - floor_ns;
    printf("locked-aligned %.4f\n", locked > 0 ? locked : 0.0);
    if (lock_ok) {
        int fds[2];
        if (pipe(fds) != 0)
            return 1;
        fflush(stdout);
        pid_t child = fork();
        if (child == 0) {
            close(fds[0]);
            double ns = best(locked_adds, base + 60, ITERS / 40) - floor_ns;
            dprintf(fds[1], "%.4f", ns > 0 ? ns : 0.0);
            _exit(0);
        }
        close(fds[1]);
        char buf[64] = {0};
        ssize_t got = read(fds[0], buf, sizeof buf - 1);
        int status = 0;
        waitpid(child, &status, 0);
        if (WIFSIGNALED(status))
            printf("meta split-lock-killed %d\n", WTERMSIG(status));
        else if (got > 0)
            printf("split-lock %s\n", buf);
    } else {
        printf("meta split-lock-skipped 1\n");
    }
    printf("meta iterations %ld\nmeta rounds %d\nmeta unroll %d\nmeta cpu %d\nmeta pinned %d\nmeta loop-ns %.4f\n",
           ITERS, ROUNDS, UNROLL, cpu, pinned, floor_ns);
    return 0;
}
