/* step_loop.c - the hot loop of bench/step.py. `spin N MODE` runs N iterations of a loop of a
 * few instructions with one 8-byte load each: at 1 mod 8 (MODE "misaligned": every iteration
 * is a violation the stepper records) or aligned (MODE "aligned": it only checks).
 * `step_loop raw N MODE` first stops itself for the raw ptrace floor (bench/step_raw.c), which
 * then single-steps it with nothing else to do. */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>

_Alignas(64) static unsigned char buf[128];

__attribute__((noipa)) static uint64_t spin(long n, const unsigned char *p)
{
    uint64_t s = 0;
    for (long i = 0; i < n; i++)
        s += *(const volatile uint64_t *)(p + ((i & 7) << 3));
    return s;
}

int main(int argc, char **argv)
{
    int raw = argc > 1 && strcmp(argv[1], "raw") == 0;
    if (raw) {
        argv++;
        argc--;
    }
    long n = argc > 1 ? atol(argv[1]) : 1000;
    const unsigned char *p = argc > 2 && strcmp(argv[2], "aligned") == 0 ? buf : buf + 1;
    if (raw) {
        if (ptrace(PTRACE_TRACEME, 0, 0, 0) < 0)
            return 3;
        raise(SIGSTOP);
    }
    printf("step_loop: %llu\n", (unsigned long long)spin(n, p));
    return 0;
}
