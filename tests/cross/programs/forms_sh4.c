/* SH-4 moves in every form ualdbg performs, on misaligned addresses, in and out of delay
 * slots (tests/cross/test_cross_sh4.py). Each result is checked against memcpy: the program
 * prints "forms_sh4: ok" and exits 0 only if every performed access was right. Under plain
 * qemu-sh4 (no ualdbg) the accesses are fixed up silently, with the same output. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ld_rts(const void *p);           /* rts; mov.l @r4,r0 (slot of rts) */
int ld_bts(const void *p, int x);    /* bt.s taken (x == 0) or not, mov.l in its slot */
int ld_bra(const void *p);           /* bra; mov.l in its slot */
void st_jsr(void *p, int v, void (*f)(void)); /* jsr @r6; mov.l r5,@r4 in its slot */
int ld_post(const void *p);          /* mov.l @r4+,r0; mov.l @r4+,r1: two words, r4 moves */
void st_pre(void *end, int a, int b); /* mov.l r5,@-r4; mov.l r6,@-r4 */
int ld_idx(const void *base, int off); /* mov.l @(r0,r4),r0 */
int ld_w(const void *p);             /* rts; mov.w @r4,r0: sign-extended */
int ld_disp(const void *p);          /* mov.l @(4,r4),r0 */
#define FN(name, code) ".global " #name "\n.type " #name ", @function\n" #name ":\n" code ".size " #name ", .-" #name "\n"
__asm__(".text\n"
        FN(ld_rts, " rts\n mov.l @r4,r0\n")
        FN(ld_bts, " tst r5,r5\n bt.s 1f\n mov.l @r4,r0\n mov #55,r0\n1: rts\n add #1,r0\n")
        FN(ld_bra, " bra 2f\n mov.l @r4,r0\n mov #9,r0\n2: rts\n nop\n")
        FN(st_jsr, " sts.l pr,@-r15\n jsr @r6\n mov.l r5,@r4\n lds.l @r15+,pr\n rts\n nop\n")
        FN(ld_post, " mov.l @r4+,r0\n mov.l @r4+,r1\n add r1,r0\n rts\n nop\n")
        FN(st_pre, " mov.l r5,@-r4\n mov.l r6,@-r4\n rts\n nop\n")
        FN(ld_idx, " mov r5,r0\n mov.l @(r0,r4),r0\n rts\n nop\n")
        FN(ld_w, " rts\n mov.w @r4,r0\n")
        FN(ld_disp, " mov.l @(4,r4),r0\n rts\n nop\n"));

static void nothing(void) {}

static int word(const unsigned char *p) { int v; memcpy(&v, p, 4); return v; }

static int bad;
static void check(const char *what, long got, long want) {
    if (got != want) {
        printf("forms_sh4: %s: %#lx, want %#lx\n", what, got, want);
        bad = 1;
    }
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 1;
    unsigned char *buf = malloc(64);
    for (int r = 0; r < rounds; r++) {
        for (int i = 0; i < 64; i++) buf[i] = (unsigned char)(i * 7 + r + 0x80);
        unsigned char *p = buf + 1; /* misaligned for 2 and 4 bytes */
        check("ld_rts", ld_rts(p), word(p));
        check("ld_bts taken", ld_bts(p, 0), word(p) + 1);
        check("ld_bts not taken", ld_bts(p, 1), 56);
        check("ld_bra", ld_bra(p), word(p));
        st_jsr(p + 8, 0x11223344 + r, nothing);
        check("st_jsr", word(p + 8), 0x11223344 + r);
        check("ld_post", ld_post(p + 16), word(p + 16) + word(p + 20));
        st_pre(p + 32, 0x55667788, 0x0a0b0c0d);
        check("st_pre a", word(p + 28), 0x55667788);
        check("st_pre b", word(p + 24), 0x0a0b0c0d);
        check("ld_idx", ld_idx(p, 36), word(p + 36));
        short h;
        memcpy(&h, p + 40, 2);
        check("ld_w", ld_w(p + 40), h);
        check("ld_disp", ld_disp(p + 44), word(p + 48));
    }
    printf("forms_sh4: %s rounds=%d\n", bad ? "WRONG" : "ok", rounds);
    return bad;
}
