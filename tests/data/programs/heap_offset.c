/* issue 31: a uint64_t read at malloc()+1, the simplest bug there is: advice is to keep 8-byte data at
 * multiples of 8 in the block (or memcpy a byte stream). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__attribute__((noinline)) static uint64_t sum_at(const unsigned char *buf, int n) {
    uint64_t sum = 0;
    for (int i = 0; i < n; i++) {
        const uint64_t *q = (const uint64_t *)(buf + 1 + (i % 4) * 8);
        sum += *q; /* the misaligned read at malloc()+1 */
    }
    return sum;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 10;
    unsigned char *buf = malloc(64);
    memset(buf, argc, 64);
    printf("%llu\n", (unsigned long long)sum_at(buf, n));
    free(buf);
    return 0;
}
