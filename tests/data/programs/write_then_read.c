/* issue 31: the line before writes the address the next line reads, every iteration: copying the
 * data once to an aligned buffer would be wrong advice. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static unsigned char area[64];

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 10;
    volatile uint32_t *cell = (volatile uint32_t *)(area + 2);
    uint64_t sum = 0;
    for (int i = 0; i < n; i++) {
        *cell = (uint32_t)i;    /* the line before writes it on every iteration */
        sum += *cell;           /* ... and this line reads it back */
    }
    printf("%llu\n", (unsigned long long)sum);
    return 0;
}
