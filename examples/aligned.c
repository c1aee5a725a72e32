/* aligned.c - a program with no misaligned access at all.
 *
 * It counts primes with a sieve and sums 64-bit values in a malloc()ed
 * array of structs: every object is at an address that is a multiple of its
 * size (malloc memory, properly typed pointers, no casts of byte buffers),
 * so alignment checking never fires in this program's own code.  A tracer
 * must report 0 faults here (libc and ld.so may still make some of their own).
 *
 * Usage: aligned [n]    (default 10000; always 0 faults)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct sample {
    int64_t value;
    int32_t weight;
    int16_t tag;
    /* 2 bytes of padding keep the next element's value 8-aligned */
};

__attribute__((noipa)) static long count_primes(unsigned char *composite, long n)
{
    long count = 0;
    for (long i = 2; i <= n; i++) {
        if (composite[i])
            continue;
        count++;
        for (long j = i * i; j <= n; j += i)
            composite[j] = 1;
    }
    return count;
}

__attribute__((noipa)) static int64_t weighted_sum(const struct sample *s, long n)
{
    int64_t sum = 0;
    for (long i = 0; i < n; i++)
        sum += s[i].value * s[i].weight + s[i].tag; /* all naturally aligned */
    return sum;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 10000;
    if (n < 2)
        n = 2;
    unsigned char *composite = calloc((size_t)n + 1, 1);
    struct sample *s = malloc((size_t)n * sizeof *s);
    if (composite == NULL || s == NULL)
        return 1;
    for (long i = 0; i < n; i++) {
        s[i].value = i * 3;
        s[i].weight = (int32_t)(i % 7);
        s[i].tag = (int16_t)(i % 5);
    }
    printf("aligned: primes<=%ld: %ld\n", n, count_primes(composite, n));
    printf("aligned: weighted sum: %lld\n", (long long)weighted_sum(s, n));
    free(composite);
    free(s);
    return 0;
}
