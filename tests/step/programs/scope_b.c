/* scope_b.c: the second unit's own `static int helper` (see scope_a.c). */
static __attribute__((noinline)) int helper(int x) { return x * 5 - 2; }

int from_b(int x) { return helper(x) + helper(x + 1); }
