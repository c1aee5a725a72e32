/* cfi.h - the CFA rule at a PC, from the .eh_frame_hdr of its module (see cfi.c). */
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

int ualdbg_cfi_lookup(const void *eh_frame_hdr, uint64_t pc, struct cfi_rule *out);
int64_t ualdbg_cfi_fde_range(const void *eh_frame_hdr, uint64_t i, uint64_t *start, uint64_t *end);

#endif
