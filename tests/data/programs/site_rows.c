/* issue 31, problem 5: two sites on one line (the read and the write of *p = *p + 3) and a loop over
 * table[0..3].stamp, whose rows and data range the report must tell apart. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

struct entry {
    char tag;
    uint64_t stamp;
} __attribute__((packed));

static struct entry table[4];

__attribute__((noipa)) static void bump(volatile uint64_t *p, int n)
{
    for (int i = 0; i < n; i++)
        *p = *p + 3; /* two sites on one line: the read and the write */
}

__attribute__((noipa)) static uint64_t stamps(int n)
{
    uint64_t sum = 0;
    for (int i = 0; i < n; i++)
        sum += table[i % 4].stamp + (uint64_t)table[i % 4].tag; /* table[0..3].stamp */
    return sum;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 10;
    for (int i = 0; i < 4; i++)
        table[i].tag = (char)argc;
    unsigned char *block = malloc(64);
    bump((volatile uint64_t *)(block + 1), n);
    printf("%llu %llu\n", (unsigned long long)stamps(n), (unsigned long long)*(volatile uint64_t *)(block + 1));
    free(block);
    return 0;
}
