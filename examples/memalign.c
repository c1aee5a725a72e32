/* memalign.c - the SPARC "memory address not aligned" case.
 *
 * An array of `struct pair { int a; int b; }` (4-byte alignment) is placed at
 * malloc() + 1, as code that packs records into a byte buffer does.  Every
 * int field is then at an odd address, so each 4-byte load and store of a
 * field is misaligned.  The array is filled once and summed REPS times.
 *
 * Faults with the default arguments (count=100, reps=5):
 *   fill():  one 4-byte write per field      -> 100 (a) + 100 (b)
 *   total(): one 4-byte read per field/pass  -> 5 * 100 * 2 = 1000
 * Built with -DALIGNED the array starts at malloc() itself: no fault at all.
 *
 * Usage: memalign [count [reps]]
 */
#include <stdio.h>
#include <stdlib.h>

struct pair {
    int a;
    int b;
};

/* The helpers are out of line: gcc does not know where `v` points, so it uses
 * plain 4-byte moves (gcc would split the access into bytes if it could see
 * the misalignment; real code gets such pointers from elsewhere).  noipa, not
 * just noinline: with noinline alone gcc still finds that total() is pure and
 * calls it once for all REPS passes, which would make 1/REPS of the faults. */
__attribute__((noipa)) static void fill(struct pair *v, int count)
{
    for (int i = 0; i < count; i++) {
        v[i].a = i;     /* misaligned 4-byte write */
        v[i].b = 2 * i; /* misaligned 4-byte write */
    }
}

__attribute__((noipa)) static long total(const struct pair *v, int count)
{
    long sum = 0;
    for (int i = 0; i < count; i++)
        sum += v[i].a + v[i].b; /* two misaligned 4-byte reads */
    return sum;
}

int main(int argc, char **argv)
{
    int count = argc > 1 ? atoi(argv[1]) : 100;
    int reps = argc > 2 ? atoi(argv[2]) : 5;
    char *raw = malloc(count * sizeof(struct pair) + 1);
    if (raw == NULL)
        return 1;
#ifdef ALIGNED
    struct pair *v = (struct pair *)raw; /* malloc: aligned for any type */
#else
    struct pair *v = (struct pair *)(raw + 1); /* 1 mod 4: every field is off */
#endif

    printf("memalign: v=%p (mod 4 = %lu)\n", (void *)v, (unsigned long)v % 4);
    fill(v, count);
    long sum = 0;
    for (int r = 0; r < reps; r++)
        sum += total(v, count);
    printf("memalign: count=%d reps=%d sum=%ld\n", count, reps, sum);
    free(raw);
    return 0;
}
