/* trampolines.c - the pools of per-PC trampoline slots near the code they return to, and the
 * origin of a slot (a signal that arrives in one is reported at the instruction it stands for).
 * What goes into a slot is agent.c's. */
#include "trampolines.h"

#include <string.h>
#include <sys/mman.h>

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

/* ------------------------------------------------------------------------------------------ */
/* Trampolines: per-PC code that runs the faulting instruction with AC clear, then sets AC
 * and jumps back. Slots of TRAMP_SLOT bytes: the original PC, then the code. */

struct pool pools[MAX_POOLS];
int npools;
volatile int pool_lock;

static int64_t distance(uint64_t a, uint64_t b) { return a > b ? (int64_t)(a - b) : (int64_t)(b - a); }

/* A free 64 KiB region within 1 GiB of `near`, found in the gaps of the maps. */
static uint8_t *pool_map_near(uint64_t near)
{
    for (int attempt = 0; attempt < 4; attempt++) {
        uint64_t best = 0;
        int64_t best_d = INT64_MAX;
        uint64_t prev_end = 0x10000;
        for (int i = 0; i <= maps_n; i++) {
            uint64_t gap_lo = prev_end, gap_hi = i < maps_n ? maps_cache[i].start : 0x7ffffffff000ull;
            if (i < maps_n)
                prev_end = maps_cache[i].end > prev_end ? maps_cache[i].end : prev_end;
            gap_lo = (gap_lo + 0xffff) & ~0xffffull;
            gap_hi &= ~0xffffull;
            if (gap_hi < gap_lo + POOL_SIZE + 0x20000) /* keep a guard gap either side */
                continue;
            uint64_t lo = gap_lo + 0x10000, hi = gap_hi - POOL_SIZE - 0x10000;
            uint64_t cand = near < lo ? lo : near > hi ? hi : (near & ~0xffffull);
            int64_t d = distance(cand, near);
            if (d < best_d) {
                best_d = d;
                best = cand;
            }
        }
        if (!best || best_d > (1ll << 30))
            return NULL;
        void *p = mmap((void *)(uintptr_t)best, POOL_SIZE, PROT_READ | PROT_WRITE | PROT_EXEC,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        if (p != MAP_FAILED && (uint64_t)(uintptr_t)p == best)
            return p;
        if (p != MAP_FAILED)
            munmap(p, POOL_SIZE);
        maps_snapshot_locked(); /* the maps moved under us: look again */
    }
    return NULL;
}

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
        uint8_t *base = target ? pool_map_near(target) : NULL;
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

uint64_t trampoline_origin(uint64_t rip, int *at_insn)
{
    for (int i = 0; i < npools; i++) {
        uint64_t b = (uint64_t)(uintptr_t)pools[i].base;
        if (rip >= b && rip < b + POOL_SIZE) {
            uint64_t slot = b + ((rip - b) & ~(uint64_t)(TRAMP_SLOT - 1));
            uint64_t origin;
            memcpy(&origin, (const void *)(uintptr_t)slot, 8);
            if (at_insn)
                *at_insn = rip == slot + 8;
            return origin;
        }
    }
    return 0;
}
