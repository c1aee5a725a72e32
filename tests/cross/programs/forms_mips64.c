/* MIPS64 (n64) loads and stores ualdbg performs, on misaligned addresses, in and out of the
 * delay slots of branches (tests/cross/test_cross_mips64el.py): ld/sd, lwu (zero-extended), lw
 * (sign-extended to 64 bits), lh, sh, and the FPU's ldc1/sdc1 and lwc1/swc1 on 64-bit
 * registers (FR=1). Each result is checked against memcpy: the program prints
 * "forms_mips64: ok" and exits 0 only if every performed access was right. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int64_t ld_jr(const void *p);             /* jr ra; ld v0 in its slot */
int64_t ld_beq(const void *p, long x);    /* beq a1,zero taken (x == 0) or not, ld in its slot */
int64_t ld_bgez(const void *p, long x);   /* bgez a1 (REGIMM) taken (x >= 0) or not, lwu in its slot */
int64_t lw_j(const void *p);              /* j; lw (sign-extended) in its slot */
void sd_jalr(void *p, int64_t v, void (*f)(void)); /* jalr t9; sd a1 in its slot */
int64_t ld_lh(const void *p);             /* lh, no slot */
void st_sh(void *p, long v);              /* sh, no slot */
void cp_lwc1(const void *from, void *to); /* lwc1; jr; swc1 in the slot */
void cp_ldc1(const void *from, void *to); /* ldc1; jr; sdc1 in the slot */
#define FN(name, code) ".globl " #name "\n.type " #name ", @function\n.ent " #name "\n" #name ":\n" code ".end " #name "\n"
__asm__(".text\n.set noreorder\n.set nomacro\n"
        FN(ld_jr, " jr $ra\n ld $v0,0($a0)\n")
        FN(ld_beq, " beq $a1,$zero,1f\n ld $v0,0($a0)\n daddiu $v0,$zero,55\n1: jr $ra\n daddiu $v0,$v0,1\n")
        FN(ld_bgez, " bgez $a1,1f\n lwu $v0,0($a0)\n daddiu $v0,$zero,55\n1: jr $ra\n daddiu $v0,$v0,1\n")
        FN(lw_j, " j 1f\n lw $v0,0($a0)\n daddiu $v0,$zero,9\n1: jr $ra\n nop\n")
        FN(sd_jalr, " daddiu $sp,$sp,-16\n sd $ra,8($sp)\n move $t9,$a2\n jalr $t9\n sd $a1,0($a0)\n"
                    " ld $ra,8($sp)\n jr $ra\n daddiu $sp,$sp,16\n")
        FN(ld_lh, " lh $v0,0($a0)\n jr $ra\n nop\n")
        FN(st_sh, " sh $a1,0($a0)\n jr $ra\n nop\n")
        FN(cp_lwc1, " lwc1 $f4,0($a0)\n jr $ra\n swc1 $f4,0($a1)\n")
        FN(cp_ldc1, " ldc1 $f6,0($a0)\n jr $ra\n sdc1 $f6,0($a1)\n")
        ".set macro\n.set reorder\n");

static void nothing(void) {}

static int64_t dword(const unsigned char *p) { int64_t v; memcpy(&v, p, 8); return v; }
static int32_t word(const unsigned char *p) { int32_t v; memcpy(&v, p, 4); return v; }
static int16_t half(const unsigned char *p) { int16_t v; memcpy(&v, p, 2); return v; }

static int bad;
static void check(const char *what, int64_t got, int64_t want) {
    if (got != want) {
        printf("forms_mips64: %s: %#llx, want %#llx\n", what, (long long)got, (long long)want);
        bad = 1;
    }
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 1;
    unsigned char *buf = malloc(64), *out = malloc(64);
    for (int r = 0; r < rounds; r++) {
        for (int i = 0; i < 64; i++) buf[i] = (unsigned char)(i * 7 + r + 0x80);
        unsigned char *p = buf + 1; /* misaligned for 2, 4 and 8 bytes; the top bits are set */
        check("ld_jr", ld_jr(p), dword(p));
        check("ld_beq taken", ld_beq(p, 0), dword(p) + 1);
        check("ld_beq not taken", ld_beq(p, 1), 56);
        check("ld_bgez taken", ld_bgez(p, 5), (int64_t)(uint32_t)word(p) + 1);
        check("ld_bgez not taken", ld_bgez(p, -5), 56);
        check("lw_j", lw_j(buf + 3), word(buf + 3));
        sd_jalr(out + 3, 0x123456789abcdef0LL + r, nothing);
        check("sd_jalr", dword(out + 3), 0x123456789abcdef0LL + r);
        check("ld_lh", ld_lh(buf + 5), half(buf + 5));
        st_sh(out + 13, 0xBEEF);
        check("st_sh", (uint16_t)half(out + 13), 0xBEEF);
        cp_lwc1(buf + 13, out + 17);
        check("cp_lwc1", word(out + 17), word(buf + 13));
        cp_ldc1(buf + 21, out + 33);
        check("cp_ldc1", memcmp(out + 33, buf + 21, 8), 0);
    }
    printf("forms_mips64: %s rounds=%d\n", bad ? "FAILED" : "ok", rounds);
    return bad;
}
