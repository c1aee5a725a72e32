/* argv_fields.c - a quick parser that reads binary fields straight out of
 * its argument string, as small tools and benchmarks do with a packed record
 * passed on the command line or in the environment.
 *
 * The record is argv[1]: a 4-byte tag, then an 8-byte value, read in place
 * through pointer casts.  argv strings have no alignment: the kernel copies
 * them one after another (argv[0] lowest, then argv[1], ..., then the
 * environment strings, then the program's path at the top), so where argv[1]
 * starts depends on the length of every string above it: the later
 * arguments, every environment string and the path - but not argv[0].
 * The 4-byte read of the tag is misaligned exactly when argv[1] mod 4 != 0;
 * the 8-byte read of the value exactly when (argv[1] + 4) mod 8 != 0.  Grow
 * the environment by one byte and the fault count changes: `ualdbg
 * stackcheck --trace` names the variants that misalign it.
 *
 * If ARGV_FIELDS is set in the environment, its value is read the same way
 * (one 4-byte field at the start of the value).  The reads are volatile so
 * that each of the `reps` iterations really loads (gcc would hoist them).
 *
 * Usage: argv_fields RECORD [reps]    (RECORD: at least 12 characters;
 *        each of the reads happens reps times, default 10)
 * Prints the address of argv[1] (and of the ARGV_FIELDS value) so tests can
 * check the tool's addresses against the program's own.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef uint32_t __attribute__((may_alias)) u32_alias;
typedef uint64_t __attribute__((may_alias)) u64_alias;

__attribute__((noipa)) static uint64_t parse(const char *rec, int reps)
{
    uint64_t sum = 0;
    for (int r = 0; r < reps; r++) {
        uint32_t tag = *(const volatile u32_alias *)rec;          /* 4-byte read at rec */
        uint64_t value = *(const volatile u64_alias *)(rec + 4);  /* 8-byte read at rec+4 */
        sum += tag ^ value;
    }
    return sum;
}

__attribute__((noipa)) static uint32_t env_field(const char *val, int reps)
{
    uint32_t x = 0;
    for (int r = 0; r < reps; r++)
        x += *(const volatile u32_alias *)val;                    /* 4-byte read at the value */
    return x;
}

int main(int argc, char **argv)
{
    if (argc < 2 || strlen(argv[1]) < 12) {
        fprintf(stderr, "usage: argv_fields RECORD(12+ chars) [reps]\n");
        return 2;
    }
    int reps = argc > 2 ? atoi(argv[2]) : 10;
    uintptr_t a = (uintptr_t)argv[1];
    printf("argv_fields: argv[1] = %#lx mod 4 = %lu, +4 mod 8 = %lu\n", (unsigned long)a,
           (unsigned long)(a % 4), (unsigned long)((a + 4) % 8));
    printf("argv_fields: sum=%llu\n", (unsigned long long)parse(argv[1], reps));
    const char *env = getenv("ARGV_FIELDS");
    if (env != NULL && strlen(env) >= 4) {
        printf("argv_fields: ARGV_FIELDS value = %#lx mod 4 = %lu\n", (unsigned long)(uintptr_t)env,
               (unsigned long)((uintptr_t)env % 4));
        printf("argv_fields: env=%u\n", env_field(env, reps));
    }
    return 0;
}
