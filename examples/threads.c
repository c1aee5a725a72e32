/* threads.c - misaligned accesses from several threads.
 *
 * Three pthreads each run their own worker function over their own
 * misaligned pointer, so every thread's faults come from a distinct source
 * line and have a distinct, known count (set by `rounds`):
 *   worker_a: 1 * rounds misaligned 4-byte writes   (p = buf_a + 1)
 *   worker_b: 2 * rounds misaligned 8-byte reads    (p = buf_b + 2)
 *   worker_c: 3 * rounds misaligned 2-byte read-modify-writes (p = buf_c + 1)
 * A tracer must arm alignment checking in every thread (AC is inherited from
 * the creating thread by clone()).  main joins the threads, then prints one
 * line per thread with its misaligned address, always in the same order.
 *
 * Usage: threads [rounds]    (default 10 => 10 + 20 + 30 = 60 faults)
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define SLOTS 8

struct job {
    const char *name;
    unsigned char *p; /* the misaligned pointer the worker uses */
    int accesses;     /* how many misaligned accesses it makes  */
    long result;
};

/* Static, 64-aligned buffers with room for SLOTS wide elements past the
 * offset: the misalignment is the same every run and no worker touches
 * another's buffer. */
_Alignas(64) static unsigned char buf_a[128], buf_b[128], buf_c[128];

/* Each worker is out of line and takes a plain pointer, so gcc emits full
 * width loads and stores for the accesses it cannot prove misaligned. */
__attribute__((noipa)) static void *worker_a(void *arg)
{
    struct job *j = arg;
    uint32_t *v = (uint32_t *)j->p;
    for (int i = 0; i < j->accesses; i++)
        v[i % SLOTS] = (uint32_t)i; /* misaligned 4-byte write */
    j->result = j->p[0]; /* a byte read: never misaligned */
    return NULL;
}

__attribute__((noipa)) static void *worker_b(void *arg)
{
    struct job *j = arg;
    /* volatile: every iteration really loads, even when it rereads a slot */
    const volatile uint64_t *v = (const uint64_t *)j->p;
    long sum = 0;
    for (int i = 0; i < j->accesses; i++)
        sum += (long)v[i % SLOTS]; /* misaligned 8-byte read */
    j->result = sum;
    return NULL;
}

__attribute__((noipa)) static void *worker_c(void *arg)
{
    struct job *j = arg;
    uint16_t *v = (uint16_t *)j->p;
    for (int i = 0; i < j->accesses; i++)
        v[i % SLOTS] += 1; /* misaligned 2-byte read-modify-write (one addw) */
    long sum = 0;
    for (int i = 0; i < SLOTS; i++)
        sum += j->p[2 * i]; /* byte reads: never misaligned */
    j->result = sum;
    return NULL;
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 10;
    struct job jobs[3] = {
        {"worker_a", buf_a + 1, 1 * rounds, 0},
        {"worker_b", buf_b + 2, 2 * rounds, 0},
        {"worker_c", buf_c + 1, 3 * rounds, 0},
    };
    void *(*fn[3])(void *) = {worker_a, worker_b, worker_c};
    pthread_t tid[3];

    for (int k = 0; k < 3; k++)
        if (pthread_create(&tid[k], NULL, fn[k], &jobs[k]) != 0) {
            perror("pthread_create");
            return 1;
        }
    for (int k = 0; k < 3; k++)
        pthread_join(tid[k], NULL);
    for (int k = 0; k < 3; k++)
        printf("threads: thread %d %s p=%p accesses=%d result=%ld\n", k + 1, jobs[k].name,
               (void *)jobs[k].p, jobs[k].accesses, jobs[k].result);
    return 0;
}
