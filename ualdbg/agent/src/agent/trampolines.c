/* trampolines.c - the pools of trampoline slots: per-PC code that runs the faulting
 * instruction with AC clear, then sets AC and jumps back (agent.c writes the code). Calls
 * process.c and patch.c (a PC in a patch trampoline), nothing after them (the order: process.h).
 */
#include "trampolines.h"

#include <string.h>
#include <sys/mman.h>

#include "patch.h"

/* ------------------------------------------------------------------------------------------ */
/* Trampolines: per-PC code that runs the faulting instruction with AC clear, then sets AC
 * and jumps back. Slots of TRAMP_SLOT bytes: the original PC, then the code. */

struct pool pools[MAX_POOLS];
int npools;
volatile int pool_lock;

/* A trampoline slot whose code can reach `target` with a rel32 (target 0: anywhere). Caller
 * holds maps_lock. */
uint8_t *tramp_alloc(uint64_t target)
{
    uint8_t *slot = NULL;
    spin_lock(&pool_lock);
    for (int i = 0; i < npools && !slot; i++) {
        if (pools[i].used + TRAMP_SLOT > POOL_SIZE)
            continue;
        if (target && distance((uint64_t)(uintptr_t)pools[i].base, target) > (1ll << 30) + (1ll << 29))
            continue;
        slot = pools[i].base + pools[i].used;
        pools[i].used += TRAMP_SLOT;
    }
    if (!slot && npools < MAX_POOLS) {
        uint8_t *base = target ? pool_map_near(target, POOL_SIZE) : NULL;
        if (!base && !target) {
            void *p = mmap(NULL, POOL_SIZE, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            base = p == MAP_FAILED ? NULL : p;
        }
        if (base) {
            pools[npools].base = base;
            pools[npools].used = TRAMP_SLOT;
            npools++;
            slot = base;
        }
    }
    spin_unlock(&pool_lock);
    return slot;
}

/* The PC an out-of-line copy at rip stands for (0: rip is in none), *at_start: rip is its start. */
uint64_t outofline_origin(uint64_t rip, int *at_start)
{
    for (int i = 0; i < npools; i++) {
        uint64_t b = (uint64_t)(uintptr_t)pools[i].base;
        if (rip >= b && rip < b + POOL_SIZE) {
            uint64_t slot = b + ((rip - b) & ~(uint64_t)(TRAMP_SLOT - 1));
            uint64_t origin;
            memcpy(&origin, (const void *)(uintptr_t)slot, 8);
            *at_start = rip == slot + 8;
            return origin;
        }
    }
    return 0;
}

uint64_t trampoline_origin(uint64_t rip, int *at_insn)
{
    int at_start = 0;
    uint64_t origin = outofline_origin(rip, &at_start);
    if (!origin)
        return patch_origin(rip, at_insn);
    if (at_insn)
        *at_insn = at_start;
    return origin;
}

/* A patch's jump now covers `from`, an instruction it moved (patch.c, through stopworld.c): an
 * out-of-line copy that jumps back there (that of the instruction before it, a thread still
 * inside it: asleep, stopped by a tracer, or resumed there by a handler that decided before the
 * jump was written) would land in the jump's bytes. Its literal (emit_jmp_abs: read when the
 * jump back runs) now says `to`, the same instruction in the patch's trampoline. */
void outofline_redirect(uint64_t from, uint64_t to)
{
    int n = __atomic_load_n(&npools, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n; i++) {
        uint8_t *b = pools[i].base;
        size_t used = __atomic_load_n(&pools[i].used, __ATOMIC_ACQUIRE);
        for (size_t off = 0; off + TRAMP_SLOT <= used; off += TRAMP_SLOT) {
            uint64_t *lit = (uint64_t *)(uintptr_t)(b + off + TRAMP_SLOT - 16);
            for (int k = 0; k < 2; k++)
                if (__atomic_load_n(&lit[k], __ATOMIC_ACQUIRE) == from)
                    __atomic_store_n(&lit[k], to, __ATOMIC_SEQ_CST);
        }
    }
}
