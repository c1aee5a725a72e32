/* rep_string.c - misaligned string instructions.
 *
 * `rep movsq` copies K quadwords, each an 8-byte read at [rsi] and an 8-byte
 * write at [rdi], advancing both by 8.  With both buffers misaligned every
 * element is misaligned, and alignment checking applies to each element:
 * a tracer that lets the CPU do one element per trap (the instruction is
 * restartable: rcx/rsi/rdi say how far it got) sees K faults, all at the one
 * `rep movsq` instruction, with a different address each time.
 *
 * `rep movsb` then copies the same bytes between the same misaligned
 * buffers: byte moves are never misaligned (and "fast string" rep movsb is
 * not alignment-checked at all on this CPU), so it makes 0 faults.
 *
 * Usage: rep_string [K]    (default 5 => 5 faults, all on the movsq line)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_Q 512

_Alignas(64) static unsigned char src_buf[MAX_Q * 8 + 64];
_Alignas(64) static unsigned char dst_buf[MAX_Q * 8 + 64];
_Alignas(64) static unsigned char dst2_buf[MAX_Q * 8 + 64];

__attribute__((noipa)) static void copy_quads(void *dst, const void *src, size_t k)
{
    __asm__ volatile("rep movsq" /* K misaligned 8-byte read+write pairs */
                     : "+D"(dst), "+S"(src), "+c"(k)
                     :
                     : "memory");
}

__attribute__((noipa)) static void copy_bytes(void *dst, const void *src, size_t n)
{
    __asm__ volatile("rep movsb" /* byte granular: never faults */
                     : "+D"(dst), "+S"(src), "+c"(n)
                     :
                     : "memory");
}

int main(int argc, char **argv)
{
    long k = argc > 1 ? atol(argv[1]) : 5;
    if (k < 0 || k > MAX_Q)
        return 2;
    unsigned char *src = src_buf + 1; /* 1 mod 8 */
    unsigned char *dst = dst_buf + 3; /* 3 mod 8 */
    unsigned char *dst2 = dst2_buf + 5; /* 5 mod 8 */

    for (long i = 0; i < k * 8; i++)
        src[i] = (unsigned char)(i * 7 + 1);
    printf("rep_string: movsq src=%p dst=%p quads=%ld\n", (void *)src, (void *)dst, k);
    copy_quads(dst, src, (size_t)k);
    printf("rep_string: movsb src=%p dst=%p bytes=%ld\n", (void *)src, (void *)dst2, k * 8);
    copy_bytes(dst2, src, (size_t)k * 8);
    int ok = memcmp(dst, src, (size_t)k * 8) == 0 && memcmp(dst2, src, (size_t)k * 8) == 0;
    printf("rep_string: copies %s\n", ok ? "match" : "DIFFER");
    return ok ? 0 : 1;
}
