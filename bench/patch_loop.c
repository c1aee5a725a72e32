/* patch_loop.c - loops for bench/patching.py (issue 21: hot-site patching), written in plain C so
 * that the same source builds plain and with UBSan (-fsanitize=alignment), which checks each
 * access it compiles.
 *
 *   patch_loop hot N       N misaligned 8-byte loads at one instruction (a hot loop). Prints
 *                          `hot NS`: ns per iteration, timed inside the program.
 *   patch_loop many R      512 different instructions, each a misaligned 8-byte load made R
 *                          times (many sites, each hit a few times). Prints `many NS`: ns per
 *                          access.
 * Each mode makes exactly the number of misaligned accesses it says, all in main's module.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

/* One load per call of a distinct function: 512 sites. */
#define SITE(i)                                                                                        \
    __attribute__((noinline)) static uint64_t site##i(const unsigned char *p)                         \
    {                                                                                                  \
        return *(const volatile uint64_t *)(const void *)(p + (i % 7));                               \
    }
#define S8(i) SITE(i##0) SITE(i##1) SITE(i##2) SITE(i##3) SITE(i##4) SITE(i##5) SITE(i##6) SITE(i##7)
#define S64(i) S8(i##0) S8(i##1) S8(i##2) S8(i##3) S8(i##4) S8(i##5) S8(i##6) S8(i##7)
S64(1) S64(2) S64(3) S64(4) S64(5) S64(6) S64(7) S64(10)
#define R8(i) site##i##0, site##i##1, site##i##2, site##i##3, site##i##4, site##i##5, site##i##6, site##i##7
#define R64(i) R8(i##0), R8(i##1), R8(i##2), R8(i##3), R8(i##4), R8(i##5), R8(i##6), R8(i##7)
static uint64_t (*const sites[512])(const unsigned char *) = {R64(1), R64(2), R64(3), R64(4),
                                                               R64(5), R64(6), R64(7), R64(10)};

__attribute__((noinline)) static uint64_t hot(const unsigned char *p, long n)
{
    uint64_t sum = 0;
    for (long i = 0; i < n; i++)
        sum += *(const volatile uint64_t *)(const void *)p;
    return sum;
}

int main(int argc, char **argv)
{
    static unsigned char buf[64] __attribute__((aligned(64)));
    const char *mode = argc > 1 ? argv[1] : "hot";
    long n = argc > 2 ? atol(argv[2]) : 1000000;
    unsigned char *volatile p = buf + 1; /* 1 mod 8; the sites add 0-6: never 0 mod 8 */
    memset(buf, 1, sizeof buf);
    uint64_t sink;
    if (!strcmp(mode, "hot")) {
        double t0 = now_ns();
        sink = hot(p, n);
        double per = (now_ns() - t0) / n;
        printf("hot %.2f\n", per);
        const char *also = getenv("PATCH_LOOP_OUT"); /* bench/frida_probe.py: frida loses stdout */
        FILE *f = also ? fopen(also, "w") : NULL;
        if (f) {
            fprintf(f, "hot %.2f\n", per);
            fclose(f);
        }
    } else if (!strcmp(mode, "many")) {
        double t0 = now_ns();
        sink = 0;
        for (long r = 0; r < n; r++)
            for (int i = 0; i < 512; i++)
                sink += sites[i](p);
        printf("many %.2f\n", (now_ns() - t0) / (n * 512.0));
    } else {
        return 2;
    }
    return sink == 42; /* never: keeps the loads */
}
