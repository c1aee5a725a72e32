/* pair_stream.c - pair_t records reached through a char buffer.
 *
 * A message stream packs records back to back, `stride` bytes apart (13 by
 * default: a length-prefixed wire format), and the code casts `stream + off`
 * to `pair_t *`.  That compiles everywhere and runs on x86, but each record
 * lands at another address modulo 4 and 8, and the fields are then
 * misaligned as often as not.  What traps depends on the CPU:
 *   MIPS: every misaligned lw/sw (key), ldc1/sdc1 (weight), and each of the
 *         two lw/sw of an int64_t (total);
 *   ARMv7 (armhf) and ARMv5 (armel): vldr/vstr or ldrd/strd (weight) and
 *         ldrd/strd (total) off a word boundary; a plain ldr/str (key) only on
 *         ARMv5 or Cortex-M (the step engine's natural policy shows those);
 *   RISC-V: nothing traps under qemu; the natural policy shows all.
 * Each access is one line of its own function.  The program counts the
 * misaligned records itself, so a tool's per-line counts can be checked:
 *   key4    records whose key is not 4-aligned        (= weight4 = total4)
 *   weight8 records whose weight is not 8-aligned
 *   total8  records whose total is not 8-aligned
 *
 * Usage: pair_stream [records] [stride]   (default 40 13)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct {
    int32_t key;
    int32_t hits;
    double weight;
    int64_t total;
} pair_t;

#define NOINLINE __attribute__((noinline))
#define MAX_RECORDS 4096

_Alignas(16) static unsigned char stream[MAX_RECORDS * 64 + 64];

NOINLINE void put_key(unsigned char *at, int32_t key) {
    ((pair_t *)at)->key = key;
}
NOINLINE void put_weight(unsigned char *at, double w) {
    ((pair_t *)at)->weight = w;
}
NOINLINE void put_total(unsigned char *at, int64_t t) {
    ((pair_t *)at)->total = t;
}
NOINLINE int32_t get_key(const unsigned char *at) {
    return ((const pair_t *)at)->key;
}
NOINLINE double get_weight(const unsigned char *at) {
    return ((const pair_t *)at)->weight;
}
NOINLINE int64_t get_total(const unsigned char *at) {
    return ((const pair_t *)at)->total;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 40;
    int stride = argc > 2 ? atoi(argv[2]) : 13;
    if (n < 0 || n > MAX_RECORDS || stride < 1 || stride > 64) {
        fprintf(stderr, "usage: pair_stream [records<=%d] [stride 1..64]\n", MAX_RECORDS);
        return 2;
    }
    int key4 = 0, weight8 = 0, total8 = 0;
    int64_t keys = 0, totals = 0;
    double weights = 0;
    for (int i = 0; i < n; i++) {
        unsigned char *at = stream + (size_t)i * stride;
        uintptr_t a = (uintptr_t)at;
        key4 += a % 4 != 0;
        weight8 += (a + 8) % 8 != 0;
        total8 += (a + 16) % 8 != 0;
        put_key(at, i * 3);
        put_weight(at, i * 0.5);
        put_total(at, (int64_t)i << 33);
        keys += get_key(at);
        weights += get_weight(at);
        totals += get_total(at);
    }
    printf("pair_stream: records=%d stride=%d key4=%d weight8=%d total8=%d\n", n, stride, key4, weight8, total8);
    printf("pair_stream: keys=%lld weights=%.1f totals=%lld\n", (long long)keys, weights, (long long)totals);
    return 0;
}
