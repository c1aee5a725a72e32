/* singlestep_floor.c - the physical floor of any single-stepping engine (bench/step_debugger.py):
 * a tracer that PTRACE_SINGLESTEPs a child through a loop of plain instructions, nothing else
 * (no register reads, no decoding). Prints `steps N seconds S`.
 *
 *   singlestep_floor N
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile unsigned long sink;

static void spin(void)
{
    for (;;)
        sink = sink * 3 + 1;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 100000;
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return 2;
    }
    if (pid == 0) {
        ptrace(PTRACE_TRACEME, 0, 0, 0);
        raise(SIGSTOP);
        spin();
    }
    int status;
    waitpid(pid, &status, 0);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < n; i++) {
        if (ptrace(PTRACE_SINGLESTEP, pid, 0, 0) != 0) {
            perror("PTRACE_SINGLESTEP");
            return 2;
        }
        waitpid(pid, &status, 0);
        if (!WIFSTOPPED(status) || WSTOPSIG(status) != SIGTRAP) {
            fprintf(stderr, "unexpected stop %#x\n", status);
            return 2;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    printf("steps %ld seconds %.6f\n", n, (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9);
    return 0;
}
