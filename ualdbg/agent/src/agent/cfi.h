/* cfi.h - the CFA rule at a PC, and every function's extent and LSDA, from the .eh_frame_hdr of
 * its module (see cfi.c). */
#ifndef UALDBG_CFI_H
#define UALDBG_CFI_H

#include <stdint.h>

struct cfi_rule {
    int ok;          /* the CFA is register + offset and the return address is in a slot */
    int cfa_reg;     /* x86 register encoding number (rsp = 4) */
    int64_t cfa_off;
    int64_t ra_off;  /* the return address is at CFA + ra_off (-8 on x86-64) */
    uint64_t start, end; /* the FDE's address range: the function */
};

/* Where the tables may be read: [lo, hi). NULL trusts them (the system's libraries). */
struct cfi_bounds {
    uint64_t lo, hi;
};

struct cfi_fde {
    uint64_t table_start; /* what the search table says the FDE starts at */
    uint64_t start, end;  /* what the FDE says */
    uint64_t lsda;        /* its language-specific data (landing pads), 0: none */
};

int ualdbg_cfi_lookup(const void *eh_frame_hdr, uint64_t pc, struct cfi_rule *out);
int ualdbg_cfi_lookup_in(const void *eh_frame_hdr, const struct cfi_bounds *b, uint64_t pc, struct cfi_rule *out);
/* The number of FDEs in the search table (0: none, or the table cannot be read). */
int64_t ualdbg_cfi_fde_count(const void *eh_frame_hdr, const struct cfi_bounds *b);
/* The i-th FDE of the search table; 0 when it cannot be read within the bounds. */
int ualdbg_cfi_fde_at(const void *eh_frame_hdr, const struct cfi_bounds *b, uint64_t i, struct cfi_fde *out);

#endif
