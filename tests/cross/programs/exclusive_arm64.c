/* exclusive_arm64.c - what arm64 traps on although it tolerates plain misaligned accesses:
 * acquire/release (ldar/stlr) and exclusive (ldxr/stxr) accesses to a misaligned address raise
 * SIGBUS (BUS_ADRALN) even in user mode.
 *   exclusive_arm64 acqrel N    N x (one plain misaligned load: no trap; one ldar; one stlr),
 *                               prints "flag=N plain=..." and exits 0
 *   exclusive_arm64 exclusive   one ldxr on a misaligned address: dies of SIGBUS, as it would
 *                               on arm64 hardware (no kernel emulates a load-exclusive) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__attribute__((noipa)) static uint64_t plain(const uint64_t *p) { return *p; }

__attribute__((noipa)) static uint64_t acquire(const uint64_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }

__attribute__((noipa)) static void release(uint64_t *p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }

__attribute__((noipa)) static void increment(uint64_t *p)
{
    uint64_t v;
    uint32_t failed;
    do {
        __asm__ volatile("ldxr %0, [%2]\n\tadd %0, %0, #1\n\tstxr %w1, %0, [%2]"
                         : "=&r"(v), "=&r"(failed) : "r"(p) : "memory");
    } while (failed);
}

int main(int argc, char **argv)
{
    unsigned char *raw = calloc(1, 64);
    uint64_t *flag = (uint64_t *)(raw + 17);
    if (argc > 1 && strcmp(argv[1], "exclusive") == 0) {
        increment(flag);
        return 0;
    }
    long n = argc > 2 ? atol(argv[2]) : 10;
    uint64_t sum = 0;
    for (long i = 0; i < n; i++) {
        sum += plain(flag);
        release(flag, acquire(flag) + 1);
    }
    printf("flag=%lu plain=%lu\n", (unsigned long)plain(flag), (unsigned long)sum);
    return 0;
}
