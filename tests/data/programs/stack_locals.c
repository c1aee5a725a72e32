/* stack_locals.c - misaligned accesses to stack variables, for naming the data: a caller's
 * local array read through a pointer (frame #1 holds it), the faulting frame's own local
 * struct, and a parameter the callee's caller passed by address.
 * Usage: stack_locals [n] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct rec {
    char tag;
    char pad[3];
    uint32_t words[4];
};

__attribute__((noipa)) static uint64_t read8(const unsigned char *p)
{
    return *(const uint64_t *)p; /* misaligned 8-byte read of the caller's buffer */
}

__attribute__((noipa)) static uint32_t own_local(int n)
{
    volatile struct rec r;
    memset((void *)&r, n, sizeof r);
    return *(volatile uint32_t *)((volatile char *)&r.words[1] + 1); /* misaligned 4-byte read of r */
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 3;
    _Alignas(16) unsigned char buf[64];
    uint64_t sum = 0;
    for (int i = 0; i < 64; i++)
        buf[i] = (unsigned char)i;
    for (int i = 0; i < n; i++)
        sum += read8(buf + 3);
    sum += own_local(n);
    printf("stack_locals: sum=%llu\n", (unsigned long long)sum);
    return 0;
}
