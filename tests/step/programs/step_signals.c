/* step_signals.c - a loop in scope interrupted by its own SIGALRM handler, also in scope, for
 * the step engine: the loop makes one misaligned 8-byte read per iteration (N in all) and each
 * handler run one misaligned 4-byte read-modify-write (as many as the `alarms=` it prints).
 * Exits with the status given as its second argument, after echoing one line of stdin.
 * Usage: step_signals N STATUS < input */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

_Alignas(64) static unsigned char buf[64];
static volatile sig_atomic_t alarms;

__attribute__((noipa)) static void on_alarm(int sig)
{
    (void)sig;
    *(volatile uint32_t *)(buf + 33) += 1; /* misaligned 4-byte read-modify-write */
    alarms++;
}

__attribute__((noipa)) static uint64_t work(long n)
{
    uint64_t s = 0;
    for (long i = 0; i < n; i++)
        s += *(volatile uint64_t *)(buf + 3); /* misaligned 8-byte read */
    return s;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 1000;
    int status = argc > 2 ? atoi(argv[2]) : 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = {{0, 500}, {0, 500}};
    setitimer(ITIMER_REAL, &it, NULL);
    uint64_t s = work(n);
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    char line[128] = "";
    if (!fgets(line, sizeof line, stdin))
        strcpy(line, "(no input)\n");
    printf("step_signals: n=%ld alarms=%d sum=%llu input=%s", n, (int)alarms, (unsigned long long)s, line);
    return status;
}
