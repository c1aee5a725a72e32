/* stack_double.c - the NetBSD PR port-i386/21255 program.
 *
 * The PR reported that the speed of a loop over a stack array of doubles
 * changed with the size of the environment: the i386 ABI only promised
 * 4-byte stack alignment, so `double x[N]` was 8-aligned or not depending on
 * how much the kernel had pushed above main's frame (argv, environ).
 *
 * On x86-64 the ABI keeps %rsp 16-byte aligned at every call and gcc aligns a
 * double array to at least 8 (16 for an array this size), so the array is
 * ALWAYS naturally aligned here and this program makes ZERO misaligned
 * accesses.  What still moves with the environment and argv sizes (or
 * randomly with ASLR) is its position modulo 32, 64 or 4096 - cache-line and
 * page effects, not alignment faults.  The program prints the address modulo
 * 8, 16 and 64 so this can be seen; only the "mod 8" value matters for ualdbg.
 *
 * The i386 build (stack_double_m32: -m32 -mpreferred-stack-boundary=2, the
 * PR's 4-byte stack promise) still keeps x 8-aligned: gcc 12 realigns main's
 * frame ("and $-8, %esp") because x needs more than the incoming 4 bytes.
 *
 * Usage: stack_double [passes]    (default 100; always 0 faults)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define N 64

/* Out of line so the array really lives in memory, as in the PR. */
__attribute__((noipa)) static double relax(double *x, int passes)
{
    for (int p = 0; p < passes; p++)
        for (int i = 0; i < N; i++) {
            int j = (i + 1) % N;
            x[i] = 0.5 * (x[j] + x[i]); /* aligned 8-byte loads and store */
        }
    double s = 0;
    for (int i = 0; i < N; i++)
        s += x[i];
    return s;
}

int main(int argc, char **argv)
{
    int passes = argc > 1 ? atoi(argv[1]) : 100;
    double x[N];

    for (int i = 0; i < N; i++)
        x[i] = i;
    uintptr_t a = (uintptr_t)x;
    /* Hide the address from the optimiser: gcc would otherwise print the alignment it
       assumes for x (its DECL_ALIGN), not the one the running program has. */
    __asm__("" : "+r"(a));
    printf("stack_double: &x = %#lx\n", (unsigned long)a);
    printf("stack_double: &x mod 8 = %lu, mod 16 = %lu, mod 64 = %lu\n", (unsigned long)(a % 8),
           (unsigned long)(a % 16), (unsigned long)(a % 64));
    printf("stack_double: passes=%d sum=%.6f\n", passes, relax(x, passes));
    return 0;
}
