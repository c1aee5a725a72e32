/* issue 31: a write (and a read) of a packed struct member through the struct: legal C; the advice
 * is the layout, not memcpy. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

struct __attribute__((packed)) rec {
    char tag;
    uint32_t value;
};

static struct rec recs[8];

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 10;
    for (int i = 0; i < n; i++)
        recs[i % 8].value = (uint32_t)i; /* a write to a packed member: legal C */
    printf("%u\n", recs[1].value);
    return 0;
}
