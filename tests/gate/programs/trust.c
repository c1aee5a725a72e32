/* Sites whose keys must survive edits (tests/gate/test_trust.py, issue 31): bump() reads and
 * writes *p on one line (two faulting PCs), sum() calls an inlined read helper twice (two call
 * chains); the tests insert lines at the markers. It prints a line of its own that looks like JSON. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static inline uint32_t read32(const unsigned char *p) {
    return *(const volatile uint32_t *)p; /* volatile: each call loads, in its own place */
}

__attribute__((noinline)) uint32_t sum(const unsigned char *b, int n) {
    uint32_t s = 0;
    for (int i = 0; i < n; i++) {
        s += read32(b + 1);
        s ^= read32(b + 5);
        /* NEWCALL */
    }
    return s;
}

__attribute__((noinline)) void bump(volatile int64_t *p, int n) {
    for (int i = 0; i < n; i++) {
        *p = *p + 3;
        /* NEWLINE */
    }
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 3;
    unsigned char *buf = calloc(1, 128);
    bump((volatile int64_t *)(buf + 1), n);
    printf("{\"program\": \"its own output\", \"sum\": %u}\n", sum(buf, n));
    return 0;
}
