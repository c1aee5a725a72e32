/* AArch64 addressing forms for the step engine's decoder, one misaligned access each (tests/cross/
 * test_cross_arm64_step.py): a load pair, post-index stores, a scaled register offset, SIMD
 * structure load/store, a sign-extended w index, and an aligned pair that must not count.
 * Inline asm so the instruction is the one named, whatever gcc's version. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

__attribute__((noipa)) static uint64_t pair(const unsigned char *p)
{
    uint64_t a, b;
    __asm__ volatile("ldp %0, %1, [%2]" : "=r"(a), "=r"(b) : "r"(p) : "memory"); /* L:pair */
    return a + b;
}

__attribute__((noipa)) static void post(unsigned char *p, int n)
{
    for (int i = 0; i < n; i++)
        __asm__ volatile("str %w1, [%0], #4" : "+r"(p) : "r"(i) : "memory"); /* L:post */
}

__attribute__((noipa)) static uint32_t regoff(const unsigned char *p, long k)
{
    uint32_t v;
    __asm__ volatile("ldr %w0, [%1, %2, lsl #2]" : "=r"(v) : "r"(p), "r"(k) : "memory"); /* L:regoff */
    return v;
}

__attribute__((noipa)) static uint32_t sxtw(const unsigned char *p, int k)
{
    uint32_t v;
    __asm__ volatile("ldr %w0, [%1, %w2, sxtw #2]" : "=r"(v) : "r"(p), "r"(k) : "memory"); /* L:sxtw */
    return v;
}

__attribute__((noipa)) static void vec(unsigned char *p)
{
    __asm__ volatile("ld1 {v0.4s}, [%0]" : : "r"(p) : "v0", "memory"); /* L:ld1 */
    __asm__ volatile("st1 {v0.4s}, [%0]" : : "r"(p) : "v0", "memory"); /* L:st1 */
}

__attribute__((noipa)) static uint64_t aligned_pair(const unsigned char *p)
{
    uint64_t a, b;
    __asm__ volatile("ldp %0, %1, [%2]" : "=r"(a), "=r"(b) : "r"(p) : "memory"); /* L:aligned */
    return a + b;
}

int main(void)
{
    unsigned char *buf = aligned_alloc(64, 256);
    if (!buf)
        return 1;
    for (int i = 0; i < 256; i++)
        buf[i] = (unsigned char)i;
    unsigned char *p = buf + 65; /* odd: misaligned for every size above 1 */
    printf("forms: p=%p\n", (void *)p);
    uint64_t s = pair(p);
    post(p, 3);
    s += regoff(p, 5);
    s += sxtw(p + 16, -2); /* p + 16 - 8 */
    vec(p);
    s += aligned_pair(buf);
    printf("forms: sum=%llu\n", (unsigned long long)s);
    return 0;
}
