/* not_aligned.c - the OpenVMS "not aligned" case.
 *
 * An array of quadwords (int64_t) is addressed through a pointer that is one
 * byte past an aligned malloc() block, so every element straddles an 8-byte
 * boundary.  The loop increments randomly chosen elements; `p[key]++` compiles
 * to a single read-modify-write instruction on memory (`addq $1,(p,key,8)`),
 * so each iteration makes exactly ONE misaligned 8-byte read-write access.
 *
 * The random keys come from a tiny fixed-seed LCG (not rand(), whose sequence
 * is libc's business), so the run is the same every time.  The misaligned base
 * is printed before the loop: a debugger reports VA = p + key * 8.
 *
 * Usage: not_aligned [iterations]    (default 1000 => 1000 faults)
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SLOTS 64

static uint32_t lcg_state = 12345;

/* Numerical Recipes LCG; keys are its high bits, which are the random ones. */
static uint32_t next_key(void)
{
    lcg_state = lcg_state * 1664525u + 1013904223u;
    return (lcg_state >> 16) % SLOTS;
}

/* Out of line, as in a real program: gcc cannot see that p is misaligned, so
 * it emits the plain quadword instruction a CPU must check (it would split the
 * access into bytes if it could prove the misalignment). */
__attribute__((noipa)) static void bump(int64_t *p, long iterations)
{
    for (long i = 0; i < iterations; i++) {
        uint32_t key = next_key();
        p[key]++; /* the misaligned access: one 8-byte RMW per iteration */
    }
}

/* Reads the counters back one byte at a time (volatile, so gcc cannot fuse
 * the bytes into a quadword load): this check adds no misaligned access.
 * Every iteration adds 1 somewhere, so the sum equals the iteration count. */
__attribute__((noipa)) static int64_t checksum(const volatile unsigned char *raw)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < SLOTS * sizeof(int64_t); i++)
        sum += (uint64_t)raw[1 + i] << (8 * (i % 8)); /* little-endian */
    return (int64_t)sum;
}

int main(int argc, char **argv)
{
    long iterations = argc > 1 ? atol(argv[1]) : 1000;
    /* malloc returns 16-byte aligned memory; +1 makes it 1 mod 8, always. */
    unsigned char *raw = calloc(1, SLOTS * sizeof(int64_t) + 1);
    if (raw == NULL)
        return 1;
    int64_t *p = (int64_t *)(raw + 1);

    printf("not_aligned: p=%p\n", (void *)p);
    fflush(stdout);
    bump(p, iterations);
    printf("not_aligned: iterations=%ld sum=%" PRId64 "\n", iterations, checksum(raw));
    free(raw);
    return 0;
}
