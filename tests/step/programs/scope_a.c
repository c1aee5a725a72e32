/* scope_a.c + scope_b.c: a `static int helper` in each unit, and `scale`, which gcc -O2 clones
 * (scale.constprop.0) because every caller passes the same factor. For tests of step scopes. */
#include <stdio.h>
#include <stdlib.h>

int from_b(int x);

static __attribute__((noinline)) int helper(int x) { return x * 3 + 1; }

__attribute__((noinline)) static long scale(long *p, int n, long factor)
{
    long s = 0;
    for (int i = 0; i < n; i++)
        s += p[i] * factor;
    return s;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 4;
    long *p = calloc((size_t)n + 1, sizeof *p);
    for (int i = 0; i < n; i++)
        p[i] = i;
    printf("%d %d %ld %ld\n", helper(n), from_b(n), scale(p, n, 7), scale(p + 1, n - 1, 7));
    free(p);
    return 0;
}
