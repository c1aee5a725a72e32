/* step_affinity.c - prints its CPU mask size before and after calling work() (a misaligned read),
 * from main and from a thread it starts inside work(): stepping work() must not leave the
 * program, or a thread started while work() was stepped, pinned to the stepper's CPU.
 * Usage: step_affinity */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>

_Alignas(64) static unsigned char buf[64];
static int in_thread;

static int cpus(void)
{
    cpu_set_t set;
    return sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : -1;
}

static void *thread_main(void *arg)
{
    (void)arg;
    in_thread = cpus();
    return NULL;
}

__attribute__((noipa)) static uint64_t work(pthread_t *t)
{
    pthread_create(t, NULL, thread_main, NULL); /* a thread born while work() is stepped */
    return *(volatile uint64_t *)(buf + 1);      /* misaligned 8-byte read */
}

int main(void)
{
    int before = cpus();
    pthread_t t;
    uint64_t v = work(&t);
    pthread_join(t, NULL);
    printf("step_affinity: before=%d after=%d thread=%d v=%llu\n", before, cpus(), in_thread, (unsigned long long)v);
    return 0;
}
