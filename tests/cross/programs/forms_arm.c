/* 32-bit ARM loads and stores that ARMv7 traps when misaligned and ualdbg performs, in the ARM
 * and the Thumb-2 instruction sets (tests/cross/test_cross_arm.py). Each result is checked against
 * memcpy: the program prints "forms_arm: ok" and exits 0 only if every performed access was
 * right. Needs VFP/NEON (armhf). `forms_arm N x` ends with a misaligned ldrex: nothing can
 * perform an exclusive access for the program, which then gets its SIGBUS. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void a_ldrd_post(const void *p, int out[3]); /* ARM: ldrd r2,r3,[r0],#8; out = r2, r3, r0 - p */
void a_stm_db(void *end, int a, int b);      /* ARM: stmdb r0!,{r1,r2} */
void a_vldm(const void *p, void *q);         /* ARM: vldmia r0!,{d0-d1}; vstr d0,[r1]; vstr d1,[r1,#8] */
void t_ldm(const void *p, int out[3]);       /* Thumb: ldm r0,{r1,r2,r3}, stored aligned */
void t_strd_pre(void *p, int a, int b);      /* Thumb: strd r1,r2,[r0,#4]! */
void t_vst1(void *p, const void *aligned);   /* Thumb: vld1.8 {d0,d1},[r1:128]; vst1.8 {d0,d1},[r0:64] */
void t_vldr_s(const void *p, void *q);       /* Thumb: vldr s0,[r0]; vstr s0,[r1] */
int a_ldrex(const void *p);                  /* ARM: ldrex r0,[r0] */
#define FN(name, mode, code) ".globl " #name "\n.type " #name ", %function\n" mode "\n" #name ":\n" code ".size " #name ", .-" #name "\n"
__asm__(".text\n.syntax unified\n.fpu neon\n"
        FN(a_ldrd_post, ".arm", " mov r12, r0\n ldrd r2, r3, [r0], #8\n str r2, [r1]\n str r3, [r1, #4]\n sub r0, r0, r12\n"
           " str r0, [r1, #8]\n bx lr\n")
        FN(a_stm_db, ".arm", " stmdb r0!, {r1, r2}\n bx lr\n")
        FN(a_vldm, ".arm", " vldmia r0!, {d0-d1}\n vstr d0, [r1]\n vstr d1, [r1, #8]\n bx lr\n")
        ".p2align 2\n"
        FN(t_ldm, ".thumb\n.thumb_func", " push {r4}\n ldm r0, {r2, r3, r4}\n str r2, [r1]\n str r3, [r1, #4]\n"
           " str r4, [r1, #8]\n pop {r4}\n bx lr\n")
        FN(t_strd_pre, ".thumb\n.thumb_func", " strd r1, r2, [r0, #4]!\n bx lr\n")
        FN(t_vst1, ".thumb\n.thumb_func", " vld1.8 {d0, d1}, [r1:128]\n vst1.8 {d0, d1}, [r0:64]\n bx lr\n")
        FN(t_vldr_s, ".thumb\n.thumb_func", " vldr s0, [r0]\n vstr s0, [r1]\n bx lr\n")
        ".arm\n"
        FN(a_ldrex, ".arm", " ldrex r0, [r0]\n bx lr\n"));

static int word(const unsigned char *p) { int v; memcpy(&v, p, 4); return v; }

static int bad;
static void check(const char *what, long got, long want) {
    if (got != want) {
        printf("forms_arm: %s: %#lx, want %#lx\n", what, got, want);
        bad = 1;
    }
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 1;
    unsigned char *buf = malloc(128), *out = malloc(128);
    _Alignas(16) unsigned char vec[16];
    for (int r = 0; r < rounds; r++) {
        for (int i = 0; i < 128; i++) buf[i] = (unsigned char)(i * 7 + r + 0x80);
        for (int i = 0; i < 16; i++) vec[i] = (unsigned char)(i * 3 + r);
        int o[3];
        a_ldrd_post(buf + 1, o);
        check("a_ldrd_post lo", o[0], word(buf + 1));
        check("a_ldrd_post hi", o[1], word(buf + 5));
        check("a_ldrd_post writeback", o[2], 8);
        a_stm_db(out + 11, 0x11111111 * (r + 1), 0x2222222 + r);
        check("a_stm_db", word(out + 3), 0x11111111 * (r + 1));
        check("a_stm_db 2", word(out + 7), 0x2222222 + r);
        unsigned char d[16];
        a_vldm(buf + 2, d);
        check("a_vldm", memcmp(d, buf + 2, 16), 0);
        t_ldm(buf + 3, o);
        check("t_ldm", o[0] == word(buf + 3) && o[1] == word(buf + 7) && o[2] == word(buf + 11), 1);
        t_strd_pre(out + 17, 0x33333333 + r, 0x44444444 + r);
        check("t_strd_pre", word(out + 21), 0x33333333 + r);
        check("t_strd_pre 2", word(out + 25), 0x44444444 + r);
        t_vst1(out + 36, vec); /* 4-aligned, not 8: the :64 hint fails */
        check("t_vst1", memcmp(out + 36, vec, 16), 0);
        t_vldr_s(buf + 6, out + 58);
        check("t_vldr_s", word(out + 58), word(buf + 6));
    }
    printf("forms_arm: %s rounds=%d\n", bad ? "FAILED" : "ok", rounds);
    fflush(stdout);
    if (argc > 2)
        return a_ldrex(buf + 1);
    return bad;
}
