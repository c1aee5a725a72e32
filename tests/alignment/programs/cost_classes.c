/* cost_classes.c - known numbers of unaligned accesses of each cost class (issue 33), for every
 * engine to count exactly: plain 8-byte loads, vector (SSE2 movsd, checked at 8 on every x86-64)
 * loads, locked adds and xchg (locked without a prefix), each inside a 64-byte line, across a
 * line and across a 4 KiB page. Each kind is one instruction (one site) run at every offset.
 *
 *   cost_classes            the table below (tests/alignment/test_cost_classes.py)
 *   cost_classes splitlock  one split lock, nothing else
 *   cost_classes lines N    N plain loads across a line, nothing else
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define INSIDE 4     /* 8 bytes at 4 of a line: misaligned, inside it */
#define LINE (64 - 4) /* 8 bytes at 60: across a line */
#define PAGE (4096 - 4) /* 8 bytes at 4092: across a page */

__attribute__((noinline)) static void plain(char *p, long n)
{
    for (long i = 0; i < n; i++)
        __asm__ volatile("movq (%0), %%rax" : : "r"(p) : "rax", "memory");
}

__attribute__((noinline)) static void vector(char *p, long n)
{
    for (long i = 0; i < n; i++)
        __asm__ volatile("movsd (%0), %%xmm0" : : "r"(p) : "xmm0", "memory");
}

__attribute__((noinline)) static void locked(char *p, long n)
{
    for (long i = 0; i < n; i++)
        __asm__ volatile("lock addq $1, (%0)" : : "r"(p) : "memory", "cc");
}

__attribute__((noinline)) static void exchange(char *p, long n)
{
    long v = 7;
    for (long i = 0; i < n; i++)
        __asm__ volatile("xchgq %0, (%1)" : "+r"(v) : "r"(p) : "memory");
}

int main(int argc, char **argv)
{
    char *mem = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED)
        return 1;
    memset(mem, 0, 8192);
    if (argc > 1 && !strcmp(argv[1], "splitlock")) {
        locked(mem + LINE, 1);
        printf("split locks 1\n");
        return 0;
    }
    if (argc > 2 && !strcmp(argv[1], "lines")) {
        long n = atol(argv[2]);
        plain(mem + LINE, n);
        printf("line splits %ld\n", n);
        return 0;
    }
    plain(mem + INSIDE, 3);
    plain(mem + LINE, 5);
    plain(mem + PAGE, 7);
    vector(mem + INSIDE, 11);
    vector(mem + LINE, 13);
    vector(mem + PAGE, 17);
    locked(mem + INSIDE, 19);
    locked(mem + LINE, 23);
    locked(mem + PAGE, 29);
    exchange(mem + INSIDE, 3);
    exchange(mem + LINE, 31);
    exchange(mem + PAGE, 1);
    printf("done %ld\n", *(long *)(mem + INSIDE) + *(long *)(mem + LINE));
    return 0;
}
