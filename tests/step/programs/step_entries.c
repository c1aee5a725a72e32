/* step_entries.c - THREADS threads call four functions, N times each, all at once; each call makes
 * exactly one misaligned 8-byte read. `--in f0 --in f1 --in f2 --in f3` is a scope of four
 * entries: more than the three debug registers the stepper has for entries, so they are int3
 * bytes in code every thread runs through, and each entry is stepped over while other threads
 * hit it. Expected: THREADS * N at the read of each function.
 * Usage: step_entries THREADS N */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static int n;
_Alignas(64) static unsigned char slots[64][64];

__attribute__((noipa)) uint64_t f0(unsigned char *p) { return *(volatile uint64_t *)(p + 1); }
__attribute__((noipa)) uint64_t f1(unsigned char *p) { return *(volatile uint64_t *)(p + 3); }
__attribute__((noipa)) uint64_t f2(unsigned char *p) { return *(volatile uint64_t *)(p + 5); }
__attribute__((noipa)) uint64_t f3(unsigned char *p) { return *(volatile uint64_t *)(p + 7); }

static void *worker(void *arg)
{
    unsigned char *mine = slots[(uintptr_t)arg];
    uint64_t sum = 0;
    for (int i = 0; i < n; i++)
        sum += f0(mine) + f1(mine) + f2(mine) + f3(mine);
    return (void *)(uintptr_t)sum;
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 8;
    n = argc > 2 ? atoi(argv[2]) : 1000;
    if (threads < 1 || threads > 64)
        return 2;
    pthread_t t[64];
    for (int i = 0; i < threads; i++)
        pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)i);
    uint64_t total = 0;
    for (int i = 0; i < threads; i++) {
        void *r;
        pthread_join(t[i], &r);
        total += (uintptr_t)r;
    }
    printf("step_entries: threads=%d n=%d total=%llu\n", threads, n, (unsigned long long)total);
    return 0;
}
