/* structs_arm.c - the 32-bit ARM accesses that ualdbg's fix-up performs besides ldrd/ldm/vldr
 * (tests/cross/test_cross_arm_structs.py): NEON vld2..vld4/vst2..vst4 (interleaved structures),
 * single-lane and all-lanes forms, vld1 of whole registers, with and without an alignment hint
 * and with writeback by `!` and by a register; ldr/ldrh/str/ldrd/strd whose base moves by a
 * register (`[rn], rm`, `[rn, rm]!`, `[rn, -rm]!`); and loads into the PC (ldm, pop, ldr), which branch to
 * ARM or Thumb code by bit 0 of the loaded word. ARM and Thumb(-2) state alike.
 *
 * Each form runs at a misaligned address and then at an aligned copy of the same bytes, where
 * the CPU (qemu) performs it without a fault: the registers (d0-d7 dumped, the writeback) and
 * the memory after the misaligned run must equal the aligned run's, or the program prints what
 * differs and exits 1. It counts per form the calls whose address is misaligned to what ARMv7
 * checks under Linux (SCTLR.A clear: the hint, a word for ldrd/ldm, nothing otherwise) and to
 * the element size (what a CPU with SCTLR.A set traps; the natural policy), and prints
 *   structs_arm: FORM trap=T elem=E either=N
 * then `structs_arm: digest=...` over every result, which `aligned` (all calls aligned: nothing
 * traps, it runs under qemu alone) prints alike. Before ARMv7 (armel) only the ARM-state integer
 * forms and Thumb-1's pop.
 *
 * Usage: structs_arm [rounds] [aligned]   (default 16)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FN(name, mode, code) ".globl " #name "\n.type " #name ", %function\n" mode "\n" #name ":\n" code ".size " #name ", .-" #name "\n"
#define ARM ".arm"
#define THUMB ".thumb\n.thumb_func"
/* d0-d7 from `preset` (r2), the instruction on r0 (and r3), d0-d7 to `dump` (r1); returns how far r0 moved. */
#define NEON(name, mode, insn) FN(name, mode, " mov r12, r0\n vld1.8 {d0-d3}, [r2]!\n vld1.8 {d4-d7}, [r2]\n " insn "\n" \
                                  " vst1.8 {d0-d3}, [r1]!\n vst1.8 {d4-d7}, [r1]\n sub r0, r0, r12\n bx lr\n")
/* r4, r5 from io[0..1] (r1), the instruction on r0 and r2, r4, r5 to io[0..1]; returns how far r0 moved. */
#define INT(name, insn) FN(name, ARM, " push {r4, r5}\n mov r12, r0\n ldr r4, [r1]\n ldr r5, [r1, #4]\n " insn "\n" \
                               " str r4, [r1]\n str r5, [r1, #4]\n sub r0, r0, r12\n pop {r4, r5}\n bx lr\n")
/* p holds r4's value then where to go; the target records r4, r0 and sp moved, and its state. */
#define PC_PRE " push {r4, r5, lr}\n movs r2, r0\n mov r5, sp\n"
#define TARGET(name, marker) FN(name, THUMB, " str r4, [r1]\n subs r3, r0, r2\n str r3, [r1, #4]\n mov r3, sp\n" \
                                       " subs r3, r3, r2\n str r3, [r1, #8]\n mov sp, r5\n movs r3, #" #marker "\n" \
                                       " str r3, [r1, #12]\n pop {r4, r5, pc}\n")

typedef uint32_t neon_fn(void *p, uint8_t *dump, const uint8_t *preset, int inc);
typedef uint32_t int_fn(void *p, uint32_t io[2], int inc);
typedef void pc_fn(void *p, uint32_t out[4]);

#define DECL(name) extern neon_fn name;
#define IDECL(name) extern int_fn name;
#define PDECL(name) extern pc_fn name;
void to_thumb(void);
void to_arm(void);

__asm__(".text\n.syntax unified\n"
        ".p2align 2\n"
        TARGET(to_thumb, 2)
        ".p2align 2\n"
        FN(to_arm, ARM, " str r4, [r1]\n sub r3, r0, r2\n str r3, [r1, #4]\n sub r3, sp, r2\n str r3, [r1, #8]\n"
           " mov sp, r5\n mov r3, #1\n str r3, [r1, #12]\n pop {r4, r5, pc}\n")
        INT(a_ldrd_postreg, "ldrd r4, r5, [r0], r2")
        INT(a_strd_prereg, "strd r4, r5, [r0, r2]!")
        INT(a_ldrd_preneg, "ldrd r4, r5, [r0, -r2]!")
        INT(a_ldr_postreg, "ldr r4, [r0], r2")
        INT(a_str_prereg, "str r4, [r0, r2, lsl #1]!")
        INT(a_ldrh_postreg, "ldrh r4, [r0], -r2")
        FN(a_ldm_pc, ARM, PC_PRE " ldm r0, {r4, pc}\n")
        FN(a_pop_pc, ARM, PC_PRE " mov sp, r0\n pop {r4, pc}\n")
        FN(a_ldr_pc, ARM, PC_PRE " ldr r4, [r0]\n ldr pc, [r0, #4]\n")
        ".p2align 2\n"
        FN(t_pop_pc, THUMB, PC_PRE " mov sp, r0\n pop {r4, pc}\n")
#if __ARM_ARCH >= 7
        ".fpu neon\n"
        FN(t_ldm_pc, THUMB, PC_PRE " ldm.w r0!, {r4, pc}\n")
        FN(t_ldr_pc, THUMB, PC_PRE " ldr r4, [r0]\n ldr.w pc, [r0, #4]\n")
        ".arm\n"
        NEON(a_vld2_16, ARM, "vld2.16 {d0, d1}, [r0:128]")
        NEON(a_vld3_32_wb, ARM, "vld3.32 {d0, d2, d4}, [r0]!")
        NEON(a_vld4_8_reg, ARM, "vld4.8 {d0, d1, d2, d3}, [r0:64], r3")
        NEON(a_vst2_32_wb, ARM, "vst2.32 {d0, d1, d2, d3}, [r0:256]!")
        NEON(a_vst3_16_reg, ARM, "vst3.16 {d1, d3, d5}, [r0], r3")
        NEON(a_vld1_lane32_wb, ARM, "vld1.32 {d1[1]}, [r0:32]!")
        NEON(a_vld1_dup16_reg, ARM, "vld1.16 {d2[], d3[]}, [r0:16], r3")
        NEON(a_vld2_lane8, ARM, "vld2.8 {d4[6], d5[6]}, [r0:16]")
        NEON(a_vld2_dup16_wb, ARM, "vld2.16 {d0[], d2[]}, [r0:32]!")
        ".p2align 2\n"
        NEON(t_vld2_32_reg, THUMB, "vld2.32 {d0, d2}, [r0:64], r3")
        NEON(t_vld3_lane16_wb, THUMB, "vld3.16 {d1[2], d3[2], d5[2]}, [r0]!")
        NEON(t_vld4_lane8, THUMB, "vld4.8 {d0[5], d1[5], d2[5], d3[5]}, [r0:32]")
        NEON(t_vld4_dup32_wb, THUMB, "vld4.32 {d0[], d1[], d2[], d3[]}, [r0:128]!")
        NEON(t_vst4_16_reg, THUMB, "vst4.16 {d0, d2, d4, d6}, [r0:64], r3")
        NEON(t_vst2_lane16, THUMB, "vst2.16 {d4[3], d5[3]}, [r0:32]")
        NEON(t_vst4_lane32_wb, THUMB, "vst4.32 {d0[1], d2[1], d4[1], d6[1]}, [r0:128]!")
        NEON(t_vld1_32_wb, THUMB, "vld1.32 {d0, d1}, [r0:128]!")
#endif
        ".arm\n");

IDECL(a_ldrd_postreg) IDECL(a_strd_prereg) IDECL(a_ldrd_preneg) IDECL(a_ldr_postreg) IDECL(a_str_prereg) IDECL(a_ldrh_postreg)
PDECL(a_ldm_pc) PDECL(a_pop_pc) PDECL(a_ldr_pc) PDECL(t_pop_pc)
#if __ARM_ARCH >= 7
PDECL(t_ldm_pc) PDECL(t_ldr_pc)
DECL(a_vld2_16) DECL(a_vld3_32_wb) DECL(a_vld4_8_reg) DECL(a_vst2_32_wb) DECL(a_vst3_16_reg) DECL(a_vld1_lane32_wb)
DECL(a_vld1_dup16_reg) DECL(a_vld2_lane8) DECL(a_vld2_dup16_wb) DECL(t_vld2_32_reg) DECL(t_vld3_lane16_wb)
DECL(t_vld4_lane8) DECL(t_vld4_dup32_wb) DECL(t_vst4_16_reg) DECL(t_vst2_lane16) DECL(t_vst4_lane32_wb)
DECL(t_vld1_32_wb)
#endif

enum { NEON_FORM, INT_FORM, PC_FORM };
struct form {
    const char *name;
    int type;
    void *fn;
    int trap;   /* the alignment ARMv7 checks under Linux (the hint; 4 for ldrd/ldm); 0: none */
    int elem;   /* the element's size: what SCTLR.A checks */
    int inc;    /* r3 (NEON) or r2 (integer): the register added to the base */
    int pre;    /* the address is base + inc * pre (`[r0, r2, lsl #1]!`: 2); inc * pre keeps alignment */
    void *target; /* PC forms: where the loaded word goes */
    long trapped, misaligned, either;
};

#define F(name, type, trap, elem, inc, pre, target) {#name, type, (void *)name, trap, elem, inc, pre, (void *)(target), 0, 0, 0}
static struct form forms[] = {
    F(a_ldrd_postreg, INT_FORM, 4, 4, 12, 0, 0),
    F(a_strd_prereg, INT_FORM, 4, 4, 8, 1, 0),
    F(a_ldrd_preneg, INT_FORM, 4, 4, 16, -1, 0),
    F(a_ldr_postreg, INT_FORM, 0, 4, -3, 0, 0),
    F(a_str_prereg, INT_FORM, 0, 4, -4, 2, 0),
    F(a_ldrh_postreg, INT_FORM, 0, 2, 7, 0, 0),
    F(a_ldm_pc, PC_FORM, 4, 4, 0, 0, to_thumb),
    F(a_pop_pc, PC_FORM, 4, 4, 0, 0, to_arm),
    F(a_ldr_pc, PC_FORM, 0, 4, 0, 0, to_thumb),
    F(t_pop_pc, PC_FORM, 4, 4, 0, 0, to_thumb),
#if __ARM_ARCH >= 7
    F(t_ldm_pc, PC_FORM, 4, 4, 0, 0, to_arm),
    F(t_ldr_pc, PC_FORM, 0, 4, 0, 0, to_arm),
    F(a_vld2_16, NEON_FORM, 16, 2, 0, 0, 0),
    F(a_vld3_32_wb, NEON_FORM, 0, 4, 0, 0, 0),
    F(a_vld4_8_reg, NEON_FORM, 8, 1, -7, 0, 0),
    F(a_vst2_32_wb, NEON_FORM, 32, 4, 0, 0, 0),
    F(a_vst3_16_reg, NEON_FORM, 0, 2, 9, 0, 0),
    F(a_vld1_lane32_wb, NEON_FORM, 4, 4, 0, 0, 0),
    F(a_vld1_dup16_reg, NEON_FORM, 2, 2, 100, 0, 0),
    F(a_vld2_lane8, NEON_FORM, 2, 1, 0, 0, 0),
    F(a_vld2_dup16_wb, NEON_FORM, 4, 2, 0, 0, 0),
    F(t_vld2_32_reg, NEON_FORM, 8, 4, 3, 0, 0),
    F(t_vld3_lane16_wb, NEON_FORM, 0, 2, 0, 0, 0),
    F(t_vld4_lane8, NEON_FORM, 4, 1, 0, 0, 0),
    F(t_vld4_dup32_wb, NEON_FORM, 16, 4, 0, 0, 0),
    F(t_vst4_16_reg, NEON_FORM, 8, 2, -32, 0, 0),
    F(t_vst2_lane16, NEON_FORM, 4, 2, 0, 0, 0),
    F(t_vst4_lane32_wb, NEON_FORM, 16, 4, 0, 0, 0),
    F(t_vld1_32_wb, NEON_FORM, 16, 4, 0, 0, 0),
#endif
};
#define NFORMS (sizeof forms / sizeof forms[0])

#define WINDOW 96   /* bytes around the address compared after a store */
#define BEFORE 16
_Alignas(64) static uint8_t arena[256], ref_arena[256];
static uint64_t digest = 1469598103934665603ULL;
static int bad;

static void mix(const void *data, size_t n) {
    const uint8_t *b = data;
    for (size_t i = 0; i < n; i++) digest = (digest ^ b[i]) * 1099511628211ULL;
}

static void differ(const struct form *f, int round, const char *what, const void *got, const void *want, size_t n) {
    if (memcmp(got, want, n) == 0) return;
    printf("structs_arm: %s round %d: %s differs:", f->name, round, what);
    for (size_t i = 0; i < n; i++) printf(" %02x/%02x", ((const uint8_t *)got)[i], ((const uint8_t *)want)[i]);
    printf("\n");
    bad = 1;
}

/* The window [base - BEFORE, base - BEFORE + WINDOW) holds the same bytes whatever base is. */
static void fill(uint8_t *base, int round, int salt) {
    for (int i = 0; i < WINDOW; i++) base[i - BEFORE] = (uint8_t)(i * 29 + round * 7 + salt * 13 + 1);
}

static void run(struct form *f, int round, int off) {
    uint8_t *p = arena + 64 + off, *q = ref_arena + 64;
    int salt = (int)(f - forms);
    fill(p, round, salt);
    fill(q, round, salt);
    uint32_t moved, ref_moved;
    if (f->type == NEON_FORM) {
        _Alignas(16) uint8_t preset[64], dump[64], ref_dump[64];
        for (int i = 0; i < 64; i++) preset[i] = (uint8_t)(i * 131 + round * 17 + salt);
        moved = ((neon_fn *)f->fn)(p, dump, preset, f->inc);
        ref_moved = ((neon_fn *)f->fn)(q, ref_dump, preset, f->inc);
        differ(f, round, "d0-d7", dump, ref_dump, 64);
        mix(dump, 64);
    } else if (f->type == INT_FORM) {
        uint32_t io[2] = {0x11223344u * (uint32_t)(round + 1), 0x55667788u + (uint32_t)round}, ref_io[2];
        memcpy(ref_io, io, sizeof io);
        moved = ((int_fn *)f->fn)(p, io, f->inc);
        ref_moved = ((int_fn *)f->fn)(q, ref_io, f->inc);
        differ(f, round, "r4, r5", io, ref_io, sizeof io);
        mix(io, sizeof io);
    } else {
        uint32_t word[2] = {0xa5a50000u + (uint32_t)round, (uint32_t)(uintptr_t)f->target}, out[4], ref_out[4];
        memcpy(p, word, 8);
        memcpy(q, word, 8);
        ((pc_fn *)f->fn)(p, out);
        ((pc_fn *)f->fn)(q, ref_out);
        if (f->name[2] != 'p') /* sp moved: a pop's only */
            out[2] = ref_out[2] = 0;
        differ(f, round, "r4, r0 moved, sp moved, state", out, ref_out, sizeof out);
        if (out[0] != word[0] || out[3] != (((uintptr_t)f->target & 1) ? 2u : 1u)) {
            printf("structs_arm: %s round %d: r4 %#x state %u\n", f->name, round, (unsigned)out[0], (unsigned)out[3]);
            bad = 1;
        }
        mix(out, sizeof out);
        moved = ref_moved = 0;
    }
    differ(f, round, "writeback", &moved, &ref_moved, sizeof moved);
    differ(f, round, "memory", p - BEFORE, q - BEFORE, WINDOW);
    mix(&moved, sizeof moved);
    mix(p - BEFORE, WINDOW);
    uintptr_t addr = (uintptr_t)p + (uintptr_t)(f->inc * f->pre);
    int trapped = f->trap && addr % (uintptr_t)f->trap, misaligned = addr % (uintptr_t)f->elem != 0;
    f->trapped += trapped;
    f->misaligned += misaligned;
    f->either += trapped || misaligned;
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 16;
    int aligned = argc > 2 && strcmp(argv[2], "aligned") == 0;
    for (int r = 0; r < rounds; r++)
        for (unsigned k = 0; k < NFORMS; k++) {
            int off = aligned ? 0 : (int)((r * 5 + k * 3) % 8);
            run(&forms[k], r, off);
        }
    for (unsigned k = 0; k < NFORMS; k++)
        printf("structs_arm: %s trap=%ld elem=%ld either=%ld\n", forms[k].name, forms[k].trapped, forms[k].misaligned,
               forms[k].either);
    printf("structs_arm: digest=%016llx %s\n", (unsigned long long)digest, bad ? "FAILED" : "ok");
    return bad;
}
