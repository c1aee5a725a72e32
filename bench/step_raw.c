/* step_raw.c - the physical floor of any single-step engine: PTRACE_SINGLESTEP + waitpid and
 * nothing else, tracer and tracee pinned to one CPU (as the native stepper runs).
 * usage: step_raw STEPS CPU PROG ARGS...   (PROG is step_loop raw ...; CPU -1: the one it starts
 * on, as the stepper chooses). Prints the steps and the seconds they took. */
#define _GNU_SOURCE
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc < 4) { fputs("usage: step_raw STEPS CPU PROG ARGS...\n", stderr); return 2; }
    long steps = atol(argv[1]);
    cpu_set_t one;
    CPU_ZERO(&one);
    int cpu = atoi(argv[2]);
    CPU_SET(cpu < 0 ? sched_getcpu() : cpu, &one);
    if (sched_setaffinity(0, sizeof one, &one) < 0) { perror("sched_setaffinity"); return 2; }
    pid_t child = fork();
    if (child == 0) {
        execv(argv[3], argv + 3);
        _exit(127);
    }
    int st;
    if (waitpid(child, &st, 0) < 0 || !WIFSTOPPED(st)) { fputs("step_raw: the program did not stop\n", stderr); return 2; }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long i = 0; i < steps; i++) {
        if (ptrace(PTRACE_SINGLESTEP, child, 0, 0) < 0 || waitpid(child, &st, 0) < 0 || !WIFSTOPPED(st)) {
            fprintf(stderr, "step_raw: the program ended after %ld steps\n", i);
            return 2;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    kill(child, SIGKILL);
    waitpid(child, &st, 0);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    printf("%ld %.9f\n", steps, secs);
    return 0;
}
