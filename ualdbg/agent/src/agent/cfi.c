/* cfi.c - where the return address of the function holding a PC is, from .eh_frame.
 *
 * The agent disarms alignment checking inside out-of-scope string routines until they return
 * (one trap per call instead of one per access): it swaps the return address for a trampoline
 * that re-arms. The slot is CFA + ra_off, the CFA being a register plus an offset at that PC;
 * this is the DWARF call-frame interpreter for exactly that question. It runs in the signal
 * handler (once per PC) and at initialisation; no allocation, no libc beyond memcpy.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "cfi.h"

#define DW_EH_PE_omit 0xff
#define DW_EH_PE_absptr 0x00
#define DW_EH_PE_uleb128 0x01
#define DW_EH_PE_udata2 0x02
#define DW_EH_PE_udata4 0x03
#define DW_EH_PE_udata8 0x04
#define DW_EH_PE_sleb128 0x09
#define DW_EH_PE_sdata2 0x0a
#define DW_EH_PE_sdata4 0x0b
#define DW_EH_PE_sdata8 0x0c
#define DW_EH_PE_pcrel 0x10
#define DW_EH_PE_datarel 0x30
#define DW_EH_PE_indirect 0x80

static uint64_t uleb(const uint8_t **p, const uint8_t *end)
{
    uint64_t v = 0;
    unsigned shift = 0;
    while (*p < end) {
        uint8_t b = *(*p)++;
        if (shift < 64)
            v |= (uint64_t)(b & 0x7f) << shift;
        shift += 7;
        if (!(b & 0x80))
            break;
    }
    return v;
}

static int64_t sleb(const uint8_t **p, const uint8_t *end)
{
    int64_t v = 0;
    unsigned shift = 0;
    uint8_t b = 0;
    while (*p < end) {
        b = *(*p)++;
        if (shift < 64)
            v |= (int64_t)(b & 0x7f) << shift;
        shift += 7;
        if (!(b & 0x80))
            break;
    }
    if (shift < 64 && (b & 0x40))
        v |= -((int64_t)1 << shift);
    return v;
}

/* Reads one encoded pointer; returns 0 on an encoding this reader does not know. */
static int read_ptr(const uint8_t **p, const uint8_t *end, uint8_t enc, uint64_t datarel, uint64_t *out)
{
    const uint8_t *start = *p;
    uint64_t v;
    if (enc == DW_EH_PE_omit)
        return 0;
    switch (enc & 0x0f) {
    case DW_EH_PE_absptr: case DW_EH_PE_udata8: case DW_EH_PE_sdata8:
        if (end - *p < 8) return 0;
        memcpy(&v, *p, 8); *p += 8; break;
    case DW_EH_PE_udata4: {
        uint32_t t; if (end - *p < 4) return 0;
        memcpy(&t, *p, 4); *p += 4; v = t; break;
    }
    case DW_EH_PE_sdata4: {
        int32_t t; if (end - *p < 4) return 0;
        memcpy(&t, *p, 4); *p += 4; v = (uint64_t)(int64_t)t; break;
    }
    case DW_EH_PE_udata2: {
        uint16_t t; if (end - *p < 2) return 0;
        memcpy(&t, *p, 2); *p += 2; v = t; break;
    }
    case DW_EH_PE_sdata2: {
        int16_t t; if (end - *p < 2) return 0;
        memcpy(&t, *p, 2); *p += 2; v = (uint64_t)(int64_t)t; break;
    }
    case DW_EH_PE_uleb128: v = uleb(p, end); break;
    case DW_EH_PE_sleb128: v = (uint64_t)sleb(p, end); break;
    default: return 0;
    }
    switch (enc & 0x70) {
    case 0: break;
    case DW_EH_PE_pcrel: v += (uint64_t)(uintptr_t)start; break;
    case DW_EH_PE_datarel: v += datarel; break;
    default: return 0;
    }
    if (enc & DW_EH_PE_indirect) {
        uint64_t t;
        memcpy(&t, (const void *)(uintptr_t)v, 8);
        v = t;
    }
    *out = v;
    return 1;
}

/* DWARF register numbers (x86-64 psABI) -> x86 encoding numbers (rax=0 ... r15=15). */
static const int8_t dwarf_to_x86[17] = {0, 2, 1, 3, 6, 7, 5, 4, 8, 9, 10, 11, 12, 13, 14, 15, -1};

struct row {
    int64_t cfa_reg; /* DWARF number */
    int64_t cfa_off;
    int cfa_ok;
    int ra_ok;
    int64_t ra_off;
};

struct cie {
    uint64_t code_align;
    int64_t data_align;
    uint64_t ra_reg;
    uint8_t fde_enc;
    int has_z;
    const uint8_t *insns, *end;
};

static int parse_cie(const uint8_t *p, struct cie *c)
{
    uint32_t len;
    memcpy(&len, p, 4);
    if (len == 0 || len == 0xffffffffu)
        return 0;
    const uint8_t *end = p + 4 + len;
    p += 8; /* length, CIE id */
    uint8_t version = *p++;
    const char *aug = (const char *)p;
    size_t alen = strnlen(aug, (size_t)(end - p));
    p += alen + 1;
    if (aug[0] == 'e' && aug[1] == 'h')
        p += 8;
    c->code_align = uleb(&p, end);
    c->data_align = sleb(&p, end);
    c->ra_reg = version == 1 ? *p++ : uleb(&p, end);
    c->fde_enc = DW_EH_PE_absptr;
    c->has_z = aug[0] == 'z';
    if (c->has_z) {
        uint64_t zlen = uleb(&p, end);
        const uint8_t *zend = p + zlen;
        for (const char *a = aug + 1; *a && p < zend; a++) {
            if (*a == 'R') {
                c->fde_enc = *p++;
            } else if (*a == 'P') {
                uint8_t enc = *p++;
                uint64_t dummy;
                if (!read_ptr(&p, zend, enc & 0x7f, 0, &dummy))
                    return 0;
            } else if (*a == 'L') {
                p++;
            } else if (*a == 'S' || *a == 'B') {
                /* signal frame / BTI: no data */
            } else {
                return 0;
            }
        }
        p = zend;
    }
    c->insns = p;
    c->end = end;
    return 1;
}

#define STACK_DEPTH 16

/* Runs CFA instructions until the location passes `pc`. Returns 0 on an unknown opcode. */
static int run(const uint8_t *p, const uint8_t *end, const struct cie *c, uint64_t loc, uint64_t pc,
               struct row *row, const struct row *initial)
{
    struct row stack[STACK_DEPTH];
    int depth = 0;
    while (p < end) {
        uint8_t op = *p++;
        uint64_t delta = 0, reg;
        int64_t off;
        switch (op >> 6) {
        case 1: /* advance_loc */
            delta = (op & 0x3f) * c->code_align;
            goto advance;
        case 2: /* offset */
            reg = op & 0x3f;
            off = (int64_t)uleb(&p, end) * c->data_align;
            if (reg == c->ra_reg) { row->ra_ok = 1; row->ra_off = off; }
            continue;
        case 3: /* restore */
            reg = op & 0x3f;
            if (reg == c->ra_reg && initial) { row->ra_ok = initial->ra_ok; row->ra_off = initial->ra_off; }
            continue;
        }
        switch (op) {
        case 0x00: continue; /* nop */
        case 0x01: { /* set_loc */
            uint64_t to;
            if (!read_ptr(&p, end, c->fde_enc, 0, &to)) return 0;
            if (to > pc) return 1;
            loc = to;
            continue;
        }
        case 0x02: delta = *p++ * c->code_align; goto advance;
        case 0x03: { uint16_t t; memcpy(&t, p, 2); p += 2; delta = t * c->code_align; goto advance; }
        case 0x04: { uint32_t t; memcpy(&t, p, 4); p += 4; delta = t * c->code_align; goto advance; }
        case 0x05: /* offset_extended */
            reg = uleb(&p, end);
            off = (int64_t)uleb(&p, end) * c->data_align;
            if (reg == c->ra_reg) { row->ra_ok = 1; row->ra_off = off; }
            continue;
        case 0x06: /* restore_extended */
            reg = uleb(&p, end);
            if (reg == c->ra_reg && initial) { row->ra_ok = initial->ra_ok; row->ra_off = initial->ra_off; }
            continue;
        case 0x07: case 0x08: /* undefined, same_value */
            reg = uleb(&p, end);
            if (reg == c->ra_reg) row->ra_ok = 0;
            continue;
        case 0x09: /* register */
            reg = uleb(&p, end);
            (void)uleb(&p, end);
            if (reg == c->ra_reg) row->ra_ok = 0;
            continue;
        case 0x0a: /* remember_state */
            if (depth == STACK_DEPTH) return 0;
            stack[depth++] = *row;
            continue;
        case 0x0b: /* restore_state */
            if (depth == 0) return 0;
            *row = stack[--depth];
            continue;
        case 0x0c: /* def_cfa */
            row->cfa_reg = (int64_t)uleb(&p, end);
            row->cfa_off = (int64_t)uleb(&p, end);
            row->cfa_ok = 1;
            continue;
        case 0x0d: row->cfa_reg = (int64_t)uleb(&p, end); continue;
        case 0x0e: row->cfa_off = (int64_t)uleb(&p, end); continue;
        case 0x0f: { /* def_cfa_expression */
            uint64_t n = uleb(&p, end);
            p += n;
            row->cfa_ok = 0;
            continue;
        }
        case 0x10: case 0x16: { /* expression, val_expression */
            reg = uleb(&p, end);
            uint64_t n = uleb(&p, end);
            p += n;
            if (reg == c->ra_reg) row->ra_ok = 0;
            continue;
        }
        case 0x11: /* offset_extended_sf */
            reg = uleb(&p, end);
            off = sleb(&p, end) * c->data_align;
            if (reg == c->ra_reg) { row->ra_ok = 1; row->ra_off = off; }
            continue;
        case 0x12: /* def_cfa_sf */
            row->cfa_reg = (int64_t)uleb(&p, end);
            row->cfa_off = sleb(&p, end) * c->data_align;
            row->cfa_ok = 1;
            continue;
        case 0x13: row->cfa_off = sleb(&p, end) * c->data_align; continue;
        case 0x14: case 0x15: /* val_offset(_sf): the RA is not in a slot */
            reg = uleb(&p, end);
            if (op == 0x14) (void)uleb(&p, end); else (void)sleb(&p, end);
            if (reg == c->ra_reg) row->ra_ok = 0;
            continue;
        case 0x2e: (void)uleb(&p, end); continue; /* GNU_args_size */
        case 0x2f: /* GNU_negative_offset_extended */
            reg = uleb(&p, end);
            off = -(int64_t)uleb(&p, end) * c->data_align;
            if (reg == c->ra_reg) { row->ra_ok = 1; row->ra_off = off; }
            continue;
        default:
            return 0;
        }
    advance:
        if (loc + delta > pc)
            return 1;
        loc += delta;
    }
    return 1;
}

/* The FDE for pc through the .eh_frame_hdr binary search table. */
static const uint8_t *find_fde(const uint8_t *hdr, uint64_t pc)
{
    if (!hdr || hdr[0] != 1)
        return NULL;
    uint8_t ptr_enc = hdr[1], count_enc = hdr[2], table_enc = hdr[3];
    const uint8_t *p = hdr + 4, *big = hdr + (1u << 30);
    uint64_t eh_frame, count;
    uint64_t base = (uint64_t)(uintptr_t)hdr;
    if (!read_ptr(&p, big, ptr_enc, base, &eh_frame) || !read_ptr(&p, big, count_enc, base, &count))
        return NULL;
    if (table_enc != (DW_EH_PE_datarel | DW_EH_PE_sdata4) || count == 0)
        return NULL;
    const int32_t *table = (const int32_t *)(const void *)p;
    uint64_t lo = 0, hi = count;
    while (hi - lo > 1) {
        uint64_t mid = (lo + hi) / 2;
        if (base + (uint64_t)(int64_t)table[2 * mid] <= pc)
            lo = mid;
        else
            hi = mid;
    }
    if (base + (uint64_t)(int64_t)table[2 * lo] > pc)
        return NULL;
    return (const uint8_t *)(uintptr_t)(base + (uint64_t)(int64_t)table[2 * lo + 1]);
}

int ualdbg_cfi_lookup(const void *eh_frame_hdr, uint64_t pc, struct cfi_rule *out)
{
    memset(out, 0, sizeof *out);
    const uint8_t *fde = find_fde(eh_frame_hdr, pc);
    if (!fde)
        return 0;
    uint32_t len, cie_ptr;
    memcpy(&len, fde, 4);
    if (len == 0 || len == 0xffffffffu)
        return 0;
    memcpy(&cie_ptr, fde + 4, 4);
    const uint8_t *fde_end = fde + 4 + len;
    struct cie c;
    if (!parse_cie(fde + 4 - cie_ptr, &c))
        return 0;
    const uint8_t *p = fde + 8;
    uint64_t start, range;
    if (!read_ptr(&p, fde_end, c.fde_enc, 0, &start) || !read_ptr(&p, fde_end, c.fde_enc & 0x0f, 0, &range))
        return 0;
    out->start = start;
    out->end = start + range;
    if (pc < start || pc >= start + range)
        return 0;
    if (c.has_z) {
        uint64_t zlen = uleb(&p, fde_end);
        p += zlen;
    }
    struct row row = {0}, initial;
    if (!run(c.insns, c.end, &c, start, UINT64_MAX, &row, NULL))
        return 0;
    initial = row;
    if (!run(p, fde_end, &c, start, pc, &row, &initial))
        return 0;
    if (!row.cfa_ok || !row.ra_ok || row.cfa_reg < 0 || row.cfa_reg > 15)
        return 0;
    out->cfa_reg = dwarf_to_x86[row.cfa_reg];
    out->cfa_off = row.cfa_off;
    out->ra_off = row.ra_off;
    out->ok = 1;
    return 1;
}

/* The address range of the i-th FDE of the .eh_frame_hdr table (the hot-site patcher sweeps every
 * function of a module for branch targets). Returns the number of FDEs when `i` is out of range
 * or start/end are NULL, 0 when the table cannot be read; -1 when FDE `i` cannot be parsed. */
int64_t ualdbg_cfi_fde_range(const void *eh_frame_hdr, uint64_t i, uint64_t *start, uint64_t *end)
{
    const uint8_t *hdr = eh_frame_hdr;
    if (!hdr || hdr[0] != 1)
        return 0;
    uint8_t ptr_enc = hdr[1], count_enc = hdr[2], table_enc = hdr[3];
    const uint8_t *p = hdr + 4, *big = hdr + (1u << 30);
    uint64_t eh_frame, count;
    uint64_t base = (uint64_t)(uintptr_t)hdr;
    if (!read_ptr(&p, big, ptr_enc, base, &eh_frame) || !read_ptr(&p, big, count_enc, base, &count))
        return 0;
    if (table_enc != (DW_EH_PE_datarel | DW_EH_PE_sdata4))
        return 0;
    if (!start || !end || i >= count)
        return (int64_t)count;
    const int32_t *table = (const int32_t *)(const void *)p;
    const uint8_t *fde = (const uint8_t *)(uintptr_t)(base + (uint64_t)(int64_t)table[2 * i + 1]);
    uint32_t len, cie_ptr;
    memcpy(&len, fde, 4);
    if (len == 0 || len == 0xffffffffu)
        return -1;
    memcpy(&cie_ptr, fde + 4, 4);
    struct cie c;
    if (!parse_cie(fde + 4 - cie_ptr, &c))
        return -1;
    const uint8_t *q = fde + 8, *fde_end = fde + 4 + len;
    uint64_t s, range;
    if (!read_ptr(&q, fde_end, c.fde_enc, 0, &s) || !read_ptr(&q, fde_end, c.fde_enc & 0x0f, 0, &range))
        return -1;
    *start = s;
    *end = s + range;
    return (int64_t)count;
}
