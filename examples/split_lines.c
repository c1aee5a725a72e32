/* split_lines.c - misaligned accesses that split a cache line, and some that do not.
 *
 * x86 only traps on misalignment with EFLAGS.AC set, but every load or store
 * that spans two 64-byte cache lines costs a second cache access (and one
 * that spans two 4 KiB pages a second TLB lookup) whether or not anything
 * traps.  The buffer below starts on a page boundary, so the offsets alone
 * decide what each access does.  Each access sits in its own out-of-line
 * function (noipa) so gcc -O1 emits one plain load or store for it, and each
 * runs a different number of times so its count names it:
 *
 *   function       access       offset  misaligned  splits a line  splits a page  runs
 *   read_split8    8-byte read  60      yes         yes (60..67)   no             N
 *   read_inside8   8-byte read   1      yes         no  (1..8)     no             2N
 *   write_split4   4-byte write 126     yes         yes (126..129) no             3N
 *   read_inside2   2-byte read  33      yes         no  (33..34)   no             4N
 *   read_page8     8-byte read  4092    yes         yes            yes (4092..4099) 5N
 *   read_aligned8  8-byte read  64      no          no             no             6N
 *
 * So `--policy cacheline` reports exactly the split lines (N, 3N, 5N),
 * `--policy natural` and `--policy ac` every misaligned one (N..5N),
 * `--policy page` only read_page8 (5N).
 *
 * Usage: split_lines [N]    (default 10)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

_Alignas(4096) static unsigned char buf[2 * 4096];

__attribute__((noipa)) static uint64_t read_split8(const unsigned char *p)
{
    return *(const volatile uint64_t *)(p + 60); /* 8 bytes over the line at 64 */
}

__attribute__((noipa)) static uint64_t read_inside8(const unsigned char *p)
{
    return *(const volatile uint64_t *)(p + 1); /* misaligned, inside one line */
}

__attribute__((noipa)) static void write_split4(unsigned char *p, uint32_t v)
{
    *(volatile uint32_t *)(p + 126) = v; /* 4 bytes over the line at 128 */
}

__attribute__((noipa)) static uint16_t read_inside2(const unsigned char *p)
{
    return *(const volatile uint16_t *)(p + 33); /* misaligned, inside one line */
}

__attribute__((noipa)) static uint64_t read_page8(const unsigned char *p)
{
    return *(const volatile uint64_t *)(p + 4092); /* 8 bytes over the page at 4096 */
}

__attribute__((noipa)) static uint64_t read_aligned8(const unsigned char *p)
{
    return *(const volatile uint64_t *)(p + 64); /* aligned: nothing to report */
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 10;
    uint64_t sum = 0;
    for (long i = 0; i < n; i++) {
        sum += read_split8(buf);
        for (int k = 0; k < 2; k++)
            sum += read_inside8(buf);
        for (int k = 0; k < 3; k++)
            write_split4(buf, (uint32_t)(i + k));
        for (int k = 0; k < 4; k++)
            sum += read_inside2(buf);
        for (int k = 0; k < 5; k++)
            sum += read_page8(buf);
        for (int k = 0; k < 6; k++)
            sum += read_aligned8(buf);
    }
    printf("split_lines: buf=%p n=%ld sum=%llu\n", (void *)buf, n, (unsigned long long)sum);
    return 0;
}
