/* misaligned_double.c - the REAL*8-in-a-REAL*4-COMMON case in C: doubles at OFFSET mod 8 of a
 * malloc'd buffer (OFFSET 4: word-aligned, as a 32-bit ABI packs them; 1: byte-misaligned).
 * scale() loads and stores each element once, total() loads it once: on SPARC the float loads
 * and stores (lddf/stdf) trap. Usage: misaligned_double N OFFSET -> prints the sum, exits 0 */
#include <stdio.h>
#include <stdlib.h>

__attribute__((noipa)) static void scale(double *x, int n)
{
    for (int i = 0; i < n; i++)
        x[i] = x[i] * 1.5; /* one float load and one float store */
}

__attribute__((noipa)) static double total(const double *x, int n)
{
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += x[i]; /* one float load */
    return sum;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 10;
    int offset = argc > 2 ? atoi(argv[2]) : 4;
    unsigned char *raw = malloc(n * sizeof(double) + 8);
    double *x = (double *)(raw + offset);
    for (int i = 0; i < n; i++) {
        double v = i + 0.25;
        __builtin_memcpy(&x[i], &v, sizeof v); /* byte copies: no trap */
    }
    scale(x, n);
    printf("misaligned_double: n=%d offset=%d sum=%.3f\n", n, offset, total(x, n));
    return 0;
}
