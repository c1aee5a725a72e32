/* MIPS32 loads and stores ualdbg performs, on misaligned addresses, in and out of the delay
 * slots of every kind of branch (tests/cross/test_cross_mips.py). Each result is checked against
 * memcpy: the program prints "forms_mips: ok" and exits 0 only if every performed access was
 * right. Built for mips and mipsel alike (the same source, either byte order). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ld_jr(const void *p);            /* jr ra; lw v0 in its slot */
int ld_beq(const void *p, int x);    /* beq a1,zero taken (x == 0) or not, lw in its slot */
int ld_beql(const void *p, int x);   /* beql: the slot runs only when taken */
int ld_bgez(const void *p, int x);   /* bgez a1 (REGIMM) taken (x >= 0) or not */
int ld_j(const void *p);             /* j; lh (sign-extended) in its slot */
void st_jalr(void *p, int v, void (*f)(void)); /* jalr t9; sw a1 in its slot */
int ld_lhu(const void *p);           /* lhu, no slot */
void st_sh(void *p, int v);          /* sh, no slot */
void cp_lwc1(const void *from, void *to); /* lwc1; jr; swc1 in the slot */
void cp_ldc1(const void *from, void *to); /* ldc1; jr; sdc1 in the slot */
#define FN(name, code) ".globl " #name "\n.type " #name ", @function\n.ent " #name "\n" #name ":\n" code ".end " #name "\n"
__asm__(".text\n.set noreorder\n.set nomacro\n"
        FN(ld_jr, " jr $ra\n lw $v0,0($a0)\n")
        FN(ld_beq, " beq $a1,$zero,1f\n lw $v0,0($a0)\n addiu $v0,$zero,55\n1: jr $ra\n addiu $v0,$v0,1\n")
        FN(ld_beql, " beql $a1,$zero,1f\n lw $v0,0($a0)\n addiu $v0,$zero,55\n1: jr $ra\n addiu $v0,$v0,1\n")
        FN(ld_bgez, " bgez $a1,1f\n lw $v0,0($a0)\n addiu $v0,$zero,55\n1: jr $ra\n addiu $v0,$v0,1\n")
        FN(ld_j, " j 1f\n lh $v0,0($a0)\n addiu $v0,$zero,9\n1: jr $ra\n nop\n")
        FN(st_jalr, " addiu $sp,$sp,-8\n sw $ra,4($sp)\n move $t9,$a2\n jalr $t9\n sw $a1,0($a0)\n"
                    " lw $ra,4($sp)\n jr $ra\n addiu $sp,$sp,8\n")
        FN(ld_lhu, " lhu $v0,0($a0)\n jr $ra\n nop\n")
        FN(st_sh, " sh $a1,0($a0)\n jr $ra\n nop\n")
        FN(cp_lwc1, " lwc1 $f4,0($a0)\n jr $ra\n swc1 $f4,0($a1)\n")
        FN(cp_ldc1, " ldc1 $f6,0($a0)\n jr $ra\n sdc1 $f6,0($a1)\n")
        ".set macro\n.set reorder\n");

static void nothing(void) {}

static int word(const unsigned char *p) { int v; memcpy(&v, p, 4); return v; }
static short half(const unsigned char *p) { short v; memcpy(&v, p, 2); return v; }

static int bad;
static void check(const char *what, long got, long want) {
    if (got != want) {
        printf("forms_mips: %s: %#lx, want %#lx\n", what, got, want);
        bad = 1;
    }
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 1;
    unsigned char *buf = malloc(64), *out = malloc(64);
    for (int r = 0; r < rounds; r++) {
        for (int i = 0; i < 64; i++) buf[i] = (unsigned char)(i * 7 + r + 0x80);
        unsigned char *p = buf + 1; /* misaligned for 2, 4 and 8 bytes */
        check("ld_jr", ld_jr(p), word(p));
        check("ld_beq taken", ld_beq(p, 0), word(p) + 1);
        check("ld_beq not taken", ld_beq(p, 1), 56);
        check("ld_beql taken", ld_beql(p, 0), word(p) + 1);
        check("ld_beql not taken", ld_beql(p, 1), 56); /* slot annulled: no access */
        check("ld_bgez taken", ld_bgez(p, 5), word(p) + 1);
        check("ld_bgez not taken", ld_bgez(p, -5), 56);
        check("ld_j", ld_j(p), half(p));
        st_jalr(out + 3, 0x12345678 + r, nothing);
        check("st_jalr", word(out + 3), 0x12345678 + r);
        check("ld_lhu", ld_lhu(buf + 5), (unsigned short)half(buf + 5));
        st_sh(out + 9, 0xBEEF);
        check("st_sh", (unsigned short)half(out + 9), 0xBEEF);
        cp_lwc1(buf + 13, out + 17);
        check("cp_lwc1", word(out + 17), word(buf + 13));
        cp_ldc1(buf + 21, out + 33);
        check("cp_ldc1", memcmp(out + 33, buf + 21, 8), 0);
    }
    printf("forms_mips: %s rounds=%d\n", bad ? "FAILED" : "ok", rounds);
    return bad;
}
