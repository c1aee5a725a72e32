/* A static function (sum_pairs) the compiler inlines into main at -O2, calling header-only
 * helpers (inlined_rd.h, byteswap.h): `--in sum_pairs` must step exactly its inlined copy.
 * The program counts sum_pairs' misaligned reads itself, from their addresses, and prints
 * the count: tests expect that many, not a number of their own. */
#include <stdio.h>
#include <stdlib.h>
#include "inlined_rd.h"
struct hdr { uint16_t kind; uint32_t len; } __attribute__((packed));
static long sum_pairs(const unsigned char *b, int n) {
    long s = 0;
    for (int i = 0; i < n; i++) s += rd32(b + 1 + 6 * i) + rd16(b + 5 + 6 * i);
    return s;
}
int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 10;
    unsigned char *b = calloc(1, 6 * n + 8);
    struct hdr *h = (struct hdr *)(b + 1);
    h->len = n;
    printf("%ld %u\n", sum_pairs(b, n), h->len);
    int misaligned = 0;
    for (int i = 0; i < n; i++)
        misaligned += ((uintptr_t)(b + 1 + 6 * i) % 4 != 0) + ((uintptr_t)(b + 5 + 6 * i) % 2 != 0);
    printf("misaligned reads in sum_pairs: %d\n", misaligned);
    return 0;
}
