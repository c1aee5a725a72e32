/* ualdbg_agent.h - the shared-memory trace buffer the agent writes and ualdbg reads.
 *
 * One file per process image, <dir>/<pid>.<gen>.buf (gen counts the images a pid has run:
 * 0, then 1 after an execve, ...). The file is mapped MAP_SHARED by the agent and read by
 * ualdbg while the program runs (live progress: header counters only) and after it exits.
 * All integers are little-endian; offsets below are in bytes. ualdbg/agent/buffer.py reads
 * exactly this layout; tests/unit/test_agent_buffer.py checks both sides agree.
 *
 * Layout:  [header: UALDBG_HEADER_SIZE] [sites: site_capacity * UALDBG_SITE_SIZE]
 *          [records: record_capacity * UALDBG_RECORD_SIZE] [maps: maps_capacity bytes]
 *
 * - sites: an open-addressing hash table keyed by PC (linear probing, hash = pc * golden
 *   ratio >> shift), one entry per exception PC ever trapped, with its EXACT count. Out of
 *   scope PCs are counted too (flag UALDBG_SITE_IN_SCOPE clear). Each site keeps up to
 *   UALDBG_VARIANTS register snapshots with distinct alignment keys (the low 4 bits of every
 *   address the instruction can use), so the reader can tell which operand faulted, its size
 *   and read/write however many faults the site had.
 * - records: a ring of the last record_capacity IN-SCOPE faults. A record's slot is
 *   (seq - 1) % record_capacity; `seq` (1-based, unique per buffer) is written last with
 *   release order: a slot whose seq does not match is being written or was overwritten.
 * - maps: snapshots of /proc/self/maps text, appended (each starts with "#snapshot NS\n")
 *   at arming, whenever a new PC lies outside the last snapshot, and at exit/exec.
 * - patches (at patches_offset, patch_capacity entries; patches_offset 0: none): the hot sites
 *   the agent rewrote to jump to a counting trampoline after patch_after traps (patch.c), and
 *   the sites it found it could not patch (state UALDBG_PATCH_REFUSED, with a reason). A patched
 *   site's exact count is its site entry's count (the traps before the patch, each with a ring
 *   record) plus the patch entry's count (the executions the trampoline found misaligned with
 *   AC set: the faults it would have taken, counted without a record).
 * - cost classes (issue 33): each site and each patch entry also counts which of its faults
 *   spanned two 64-byte lines and two 4 KiB pages (the handler and the trampoline know the
 *   address and the size); site_size and patch_size in the header say whether they are there.
 */
#ifndef UALDBG_AGENT_H
#define UALDBG_AGENT_H

#include <stdint.h>

#define UALDBG_MAGIC "UALDBGA1"
#define UALDBG_VERSION 1
#define UALDBG_HEADER_SIZE 4096
#define UALDBG_SITE_SIZE 664 /* 640 before issue 33 (no cost-class counters): readers take both */
#define UALDBG_RECORD_SIZE 176
#define UALDBG_VARIANTS 4
#define UALDBG_STEP_SLOTS 32 /* header.step_tids */
#define UALDBG_NREGS 16 /* rax rcx rdx rbx rsp rbp rsi rdi r8..r15: x86 encoding order */

/* header.state */
enum { UALDBG_RUNNING = 1, UALDBG_EXITED = 2, UALDBG_EXECED = 3 };

/* header.flags */
#define UALDBG_F_ARMED 0x1u      /* the arming point (main or the constructor) was reached */
#define UALDBG_F_FOLLOW 0x2u     /* children are traced */
#define UALDBG_F_AT_START 0x4u   /* armed in the constructor, not at main */
#define UALDBG_F_ALL 0x8u        /* --all-modules */
#define UALDBG_F_STRIPPED 0x10u  /* this image exec'd a program without the agent in LD_PRELOAD */
#define UALDBG_F_NOSKIP 0x20u    /* out-of-scope routines are trapped at every access */
#define UALDBG_F_INJECTED 0x40u  /* loaded into a running process by ualdbg trace --pid */
#define UALDBG_F_DETACHED 0x80u  /* ualdbg detached from it: end_ns is the end of the trace */
#define UALDBG_F_SYSTEM 0x100u   /* a system program the root started: never armed (out of scope) */

/* site.flags */
#define UALDBG_SITE_IN_SCOPE 0x1u
#define UALDBG_SITE_TRAMPOLINE 0x2u /* resumed by running the instruction out of line */
#define UALDBG_SITE_EMULATED 0x4u   /* resumed by emulating it (call/jmp/ret) */
#define UALDBG_SITE_STEPPED 0x8u    /* resumed by a single-step (undecodable, far transfers) */
#define UALDBG_SITE_SKIP 0x10u      /* out of scope, in a string routine: disarm until it returns */
#define UALDBG_SITE_REP 0x20u       /* a rep string instruction: one element per trap */
#define UALDBG_SITE_PATCHED 0x40u   /* rewritten to jump to a counting trampoline (patch table) */
#define UALDBG_SITE_UNPATCHABLE 0x80u /* the patcher refused it (the patch table says why) */
#define UALDBG_SITE_SHADOW 0x100u   /* a copy inside a patch trampoline: counted at its origin, not a site */

/* header.blind_flags: what the agent could not watch (issue 29) */
#define UALDBG_B_SIGBUS_TAKEN 0x1u  /* the kernel's SIGBUS action was not the agent's at an exit, exec or detach */
#define UALDBG_B_EXEC_FOREIGN 0x2u  /* this image exec'd an ELF the agent cannot be loaded into */

/* patch.state */
enum { UALDBG_PATCH_EMPTY = 0, UALDBG_PATCH_ACTIVE = 1, UALDBG_PATCH_REFUSED = 2 };
/* patch.reason (UALDBG_PATCH_REFUSED): why a site keeps trapping at every fault (the text ualdbg
 * shows is in ualdbg/agent/buffer.py, PATCH_REASONS) */
enum {
    UALDBG_PATCH_R_KIND = 1,       /* an access whose AC rule the patcher does not know */
    UALDBG_PATCH_R_MAPPING = 2,    /* not in a private, read-only, file-backed executable mapping of an ELF */
    UALDBG_PATCH_R_NEIGHBOUR = 3,  /* shorter than a jump, and an instruction next to it cannot be moved */
    UALDBG_PATCH_R_THREADS = 4,    /* other threads could not be stopped outside the code a patch moves */
    UALDBG_PATCH_R_TARGET = 5,     /* a branch, return or landing pad may land in the code a patch moves */
    UALDBG_PATCH_R_STRADDLE = 6,   /* (not used since issue 34: such a jump is written with threads stopped) */
    UALDBG_PATCH_R_REACH = 7,      /* no trampoline memory within a rel32 of it (and of its operand) */
    UALDBG_PATCH_R_PROTECT = 8,    /* mprotect refused to make the code writable */
    UALDBG_PATCH_R_FULL = 9,       /* the patch table is full */
    UALDBG_PATCH_R_CODE = 10,      /* its module's code does not read whole as code: branch targets unknown */
    UALDBG_PATCH_R_EXTENT = 11,    /* .eh_frame, the symbol table and decoding disagree on its function */
    UALDBG_PATCH_R_INDIRECT = 12,  /* its function has an indirect jump (a jump table may land anywhere) */
    UALDBG_PATCH_R_FILE = 13,      /* the module's file is not the code in memory */
    UALDBG_PATCH_R_OVERLAP = 14,   /* the code a patch would move overlaps another patch */
    UALDBG_PATCH_R_REP = 15,       /* rep cmps/scas: one trap per element (stop at a compare) */
    UALDBG_PATCH_R_TRANSFER = 16,  /* call, jmp or ret through memory or the stack: emulated at each trap */
    UALDBG_PATCH_R_STEPPED = 17,   /* not decoded, or a far transfer: single-stepped at each trap */
    UALDBG_PATCH_R_SKIPPED = 18,   /* (no longer given: an out-of-scope site is patched after 16x patch_after traps) */
    UALDBG_PATCH_R_SEGMENT = 19,   /* an fs/gs-relative or 32-bit address */
    UALDBG_PATCH_R_STACK = 20,     /* push, pop, enter, leave: the stack pointer is the operand */
    UALDBG_PATCH_R_BITSTRING = 21, /* bt* with a register bit offset: the address moves with it */
    UALDBG_PATCH_R_MASKED = 22,    /* an AVX-512 masked access: the bytes it touches vary */
    UALDBG_PATCH_R_RELOCATE = 23,  /* a moved instruction's copy did not decode to the same one on the same memory */
};

/* site.state */
enum { UALDBG_SITE_EMPTY = 0, UALDBG_SITE_BUILDING = 1, UALDBG_SITE_READY = 2 };

struct ualdbg_regs {
    uint64_t gpr[UALDBG_NREGS];
    uint64_t seg_base; /* fs or gs base when the instruction has that prefix, else 0 */
};

struct ualdbg_variant { /* 144 bytes */
    uint64_t key;
    struct ualdbg_regs regs;
};

struct ualdbg_site { /* UALDBG_SITE_SIZE bytes */
    uint64_t pc;          /*   0 */
    uint64_t count;       /*   8: every trap at this PC, exactly */
    uint32_t state;       /*  16 */
    uint32_t flags;       /*  20 */
    uint32_t nvariants;   /*  24 */
    uint32_t insn_len;    /*  28: its length, 0 when the agent could not decode it */
    uint8_t insn[16];     /*  32: the code bytes at pc */
    uint64_t trampoline;  /*  48: process-local */
    int32_t cfa_reg;      /*  56: SKIP sites: CFA = gpr[cfa_reg] + cfa_off; RA at CFA + ra_off */
    int16_t cfa_off;      /*  60 */
    int16_t ra_off;       /*  62 */
    struct ualdbg_variant variants[UALDBG_VARIANTS]; /* 64 */
    /* Of `count`, the traps whose access spanned two 64-byte lines, and of those, two 4 KiB
     * pages (issue 33: their cost class, ualdbg/core/cost.py; whether the instruction is
     * locked the reader decodes). Counted when the agent knows the operand's address and size. */
    uint64_t line_splits; /* 640 */
    uint64_t page_splits; /* 648 */
    uint64_t unclassed;   /* 656: traps whose operand the agent could not size (their class unknown) */
};

struct ualdbg_record { /* UALDBG_RECORD_SIZE bytes */
    uint64_t seq;     /*   0: 1-based; written last */
    uint64_t time_ns; /*   8: CLOCK_MONOTONIC */
    uint64_t pc;      /*  16 */
    uint32_t pid;     /*  24 */
    uint32_t tid;     /*  28 */
    int32_t cpu;      /*  32: -1 unknown */
    uint32_t flags;   /*  36: site flags at the time */
    struct ualdbg_regs regs; /* 40: 16 GPRs then seg_base */
};

struct ualdbg_header { /* UALDBG_HEADER_SIZE bytes */
    char magic[8];             /*    0 */
    uint32_t version;          /*    8 */
    uint32_t header_size;      /*   12 */
    uint32_t site_size;        /*   16 */
    uint32_t record_size;      /*   20 */
    uint32_t site_capacity;    /*   24: a power of two */
    uint32_t record_capacity;  /*   28 */
    uint64_t maps_capacity;    /*   32 */
    uint64_t sites_offset;     /*   40 */
    uint64_t records_offset;   /*   48 */
    uint64_t maps_offset;      /*   56 */
    int64_t pid;               /*   64 */
    int64_t ppid;              /*   72 */
    uint32_t gen;              /*   80 */
    uint32_t state;            /*   84 */
    uint32_t flags;            /*   88 */
    uint32_t sites_used;       /*   92 */
    uint64_t start_ns;         /*   96: the agent's initialisation */
    uint64_t armed_ns;         /*  104: the arming point, 0 if never */
    uint64_t end_ns;           /*  112: exit or exec */
    uint64_t total;            /*  120: faults in scope */
    uint64_t ignored;          /*  128: traps out of scope */
    uint64_t head;             /*  136: records written (the last seq) */
    uint64_t skipped_calls;    /*  144: out-of-scope routine calls run disarmed */
    uint64_t emulated;         /*  152 */
    uint64_t stepped;          /*  160 */
    uint64_t maps_len;         /*  168 */
    int64_t exit_status;       /*  176: from on_exit, -1 unknown */
    uint64_t dropped_sites;    /*  184: faults at PCs that found no free site (table full) */
    uint64_t threads;          /*  192: threads started through pthread_create */
    uint64_t unarmed_threads;  /*  200: threads that started with SIGBUS blocked */
    char exe[512];             /*  208 */
    char cmdline[1024];        /*  720: NUL-separated argv, truncated */
    char note[512];            /* 1744: e.g. the program an exec without the agent ran */
    uint64_t patches_offset;   /* 2256: 0: this agent does not patch */
    uint32_t patch_capacity;   /* 2264 */
    uint32_t patch_size;       /* 2268 */
    uint32_t patches_used;     /* 2272: entries written (patched and refused) */
    uint32_t patch_after;      /* 2276: traps at a site before it is patched; 0: --no-patch */
    /* 2280: the threads the agent single-steps now (EFLAGS.TF set by its SIGBUS handler, the step's
     * SIGTRAP not taken yet) and the PC each faulted at. A debugger that steps the faulting
     * instruction itself takes that SIGTRAP as its own (gdb steps over a passed signal by a
     * breakpoint at the instruction, then a step of it): at its next stop ualdbg finishes the
     * agent's step (TF cleared, AC set: engines/stops.py). A tid of 0 is a free slot. */
    uint32_t step_tids[UALDBG_STEP_SLOTS]; /* 2280 */
    uint64_t step_pcs[UALDBG_STEP_SLOTS];  /* 2408 */
    /* 2664: the hot-site patcher's code maps (codemap.c): built by a sweep of the module, read from
     * the run's folder (another process of the run built it), read from an earlier run's */
    uint32_t codemaps_built;   /* 2664 */
    uint32_t codemaps_read;    /* 2668 */
    uint32_t codemaps_kept;    /* 2672 */
    uint8_t reserved[3584 - 2676]; /* room for other fields; the blind-spot counters stay at 3584 */
    /* What the agent knows it did not see (issue 29; docs/AGENT.md, "Blind spots"): a fault
     * there is neither trapped nor counted, so a gate cannot call the run clean. */
    uint64_t blind_ns;         /* 3584: thread time past the arming point with SIGBUS blocked by the program */
    uint64_t blind_events;     /* 3592: times an armed thread blocked SIGBUS (a mask call, a longjmp's mask,
                                *       a thread started with it blocked) */
    uint64_t blind_threads;    /* 3600: threads that did so at least once */
    uint64_t handler_ns;       /* 3608: time in the program's signal handlers run with SIGBUS blocked */
    uint64_t handler_events;   /* 3616: such handler runs in armed threads */
    uint64_t children;         /* 3624: processes this image started with the agent: each must report in */
    uint64_t children_untraced; /* 3632: processes it started without the agent (an ELF the agent cannot be
                                 *       loaded into, an environment the program stripped of it) */
    uint32_t blind_flags;      /* 3640: UALDBG_B_* */
    uint32_t blind_now;        /* 3644: threads blind right now */
};

#define UALDBG_PATCH_SIZE 80 /* 64 before issue 33 (no cost-class counters): readers take both */
struct ualdbg_patch { /* UALDBG_PATCH_SIZE bytes */
    uint64_t pc;         /*  0 */
    uint64_t count;      /*  8: faults counted by the trampoline in this process (no records) */
    uint64_t traps;      /* 16: the site's traps when it was patched */
    uint32_t state;      /* 24 */
    uint32_t reason;     /* 28 */
    uint32_t length;     /* 32: bytes of code moved to the trampoline (the jump needs 5) */
    uint32_t mask;       /* 36: the address bits the trampoline tests */
    uint64_t patched_ns; /* 40 */
    uint64_t trampoline; /* 48: process-local */
    uint32_t site_flags; /* 56: the site's flags when patched (UALDBG_SITE_IN_SCOPE: live progress) */
    uint32_t reserved;   /* 60 */
    uint64_t line_splits; /* 64: of `count`, the accesses that spanned two 64-byte lines (issue 33) */
    uint64_t page_splits; /* 72: of those, the ones that spanned two 4 KiB pages */
};

#endif
