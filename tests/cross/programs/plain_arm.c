/* plain_arm.c - plain misaligned loads and stores in ARM and Thumb state, counted.
 *
 * ARMv7-A in user mode (SCTLR.A clear) and qemu-arm let a misaligned ldr/str/ldrh/strh/ldrsh
 * through; an ARMv5 CPU or a Cortex-M traps them (or, ARMv5, rotates the loaded word).  Each
 * access below is the one statement of its own function; the a_ functions are built for ARM
 * state and the t_ ones for Thumb state (Thumb-2 on armhf, Thumb-1 on armel), so a debugger
 * has to switch instruction sets as the program calls them.  c_ functions store only when
 * their flag is 2: a conditional store (strne in ARM state, in an IT block in Thumb-2), or a
 * branch around it (Thumb-1).  d_ moves an int64_t, which
 * ARMv7 traps on (ldrd/strd) when it is not word-aligned.
 *
 * The program counts, per function, the calls whose access is misaligned to its own size
 * (the int64_t: to a word, as each of its two words is), and prints one line per function:
 *   plain_arm: FUNCTION=COUNT
 * then a checksum of the values read back, which is the same on any CPU that performs the
 * accesses.
 *
 * Usage: plain_arm [rounds] [stride]   (default 40 7)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define NOINLINE __attribute__((noinline))
#define ARM __attribute__((noinline, target("arm")))
#define THUMB __attribute__((noinline, target("thumb")))
#define MAX_ROUNDS 4096

_Alignas(16) static unsigned char buf[MAX_ROUNDS * 64 + 2048];

ARM void a_str(unsigned char *p, uint32_t v) {
    *(uint32_t *)p = v;
}
ARM uint32_t a_ldr(const unsigned char *p) {
    return *(const uint32_t *)p;
}
ARM void a_strh(unsigned char *p, uint16_t v) {
    *(uint16_t *)(p + 4) = v;
}
ARM int32_t a_ldrsh(const unsigned char *p) {
    return *(const int16_t *)(p + 4);
}
ARM void c_a_str(unsigned char *p, uint32_t v, int flag) {
    if (flag == 2) *(uint32_t *)(p + 8) = v;
}
THUMB void t_str(unsigned char *p, uint32_t v) {
    *(uint32_t *)p = v;
}
THUMB uint32_t t_ldr(const unsigned char *p) {
    return *(const uint32_t *)p;
}
THUMB void t_strh(unsigned char *p, uint16_t v) {
    *(uint16_t *)(p + 4) = v;
}
THUMB uint32_t t_ldrh(const unsigned char *p) {
    return *(const uint16_t *)(p + 4);
}
THUMB uint32_t t_ldr_far(const unsigned char *p) {
    return *(const uint32_t *)(p + 1000);
}
THUMB void c_t_str(unsigned char *p, uint32_t v, int flag) {
    if (flag == 2) *(uint32_t *)(p + 8) = v;
}
NOINLINE void d_str(unsigned char *p, int64_t v) {
    *(int64_t *)(p + 16) = v;
}

static int mis(const unsigned char *p, unsigned size) {
    return (uintptr_t)p % size != 0;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 40;
    int stride = argc > 2 ? atoi(argv[2]) : 7;
    if (n < 0 || n > MAX_ROUNDS || stride < 1 || stride > 64) {
        fprintf(stderr, "usage: plain_arm [rounds<=%d] [stride 1..64]\n", MAX_ROUNDS);
        return 2;
    }
    int c_a_str_n = 0, a_str_n = 0, a_ldr_n = 0, a_strh_n = 0, a_ldrsh_n = 0;
    int c_t_str_n = 0, t_str_n = 0, t_ldr_n = 0, t_strh_n = 0, t_ldrh_n = 0, t_ldr_far_n = 0, d_str_n = 0;
    uint64_t sum = 0;
    for (int i = 0; i < n; i++) {
        unsigned char *p = buf + (size_t)i * stride;
        int flag = i % 3;
        a_str_n += mis(p, 4);
        a_str(p, 0x01010101u * (uint32_t)i);
        a_ldr_n += mis(p, 4);
        sum += a_ldr(p);
        a_strh_n += mis(p + 4, 2);
        a_strh(p, (uint16_t)(i * 7));
        a_ldrsh_n += mis(p + 4, 2);
        sum += (uint32_t)a_ldrsh(p);
        c_a_str_n += (flag == 2 && mis(p + 8, 4));
        c_a_str(p, (uint32_t)i, flag);
        t_str_n += mis(p, 4);
        t_str(p, 0x02020202u * (uint32_t)i);
        t_ldr_n += mis(p, 4);
        sum += t_ldr(p);
        t_strh_n += mis(p + 4, 2);
        t_strh(p, (uint16_t)(i * 5));
        t_ldrh_n += mis(p + 4, 2);
        sum += t_ldrh(p);
        t_ldr_far_n += mis(p + 1000, 4);
        sum += t_ldr_far(p);
        c_t_str_n += (flag == 2 && mis(p + 8, 4));
        c_t_str(p, (uint32_t)i * 3, flag);
        d_str_n += mis(p + 16, 4);
        d_str(p, (int64_t)i << 33 | i);
        sum += *(volatile uint32_t *)(buf + 16 * ((size_t)i % 64));
    }
    printf("plain_arm: a_str=%d\nplain_arm: a_ldr=%d\nplain_arm: a_strh=%d\nplain_arm: a_ldrsh=%d\n"
           "plain_arm: c_a_str=%d\nplain_arm: t_str=%d\nplain_arm: t_ldr=%d\nplain_arm: t_strh=%d\n"
           "plain_arm: t_ldrh=%d\nplain_arm: t_ldr_far=%d\nplain_arm: c_t_str=%d\nplain_arm: d_str=%d\n",
           a_str_n, a_ldr_n, a_strh_n, a_ldrsh_n, c_a_str_n, t_str_n, t_ldr_n, t_strh_n, t_ldrh_n,
           t_ldr_far_n, c_t_str_n, d_str_n);
    printf("plain_arm: sum=%llu\n", (unsigned long long)sum);
    return 0;
}
