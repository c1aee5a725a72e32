/* cfi.c - where the return address of the function holding a PC is, from .eh_frame; and the
 * extent and LSDA of every function (FDE) of a module.
 *
 * The agent disarms alignment checking inside out-of-scope string routines until they return
 * (one trap per call instead of one per access): it swaps the return address for a trampoline
 * that re-arms. The slot is CFA + ra_off, the CFA being a register plus an offset at that PC;
 * this is the DWARF call-frame interpreter for exactly that question. The hot-site patcher reads
 * every FDE's range and LSDA (codemap.c). It runs in the signal handler (once per PC) and at
 * initialisation; no allocation, no libc beyond memcpy.
 *
 * The tables are the program's, and may be wrong (a mutated .eh_frame, hand-written CFI): with
 * bounds, every byte read lies in [lo, hi) (the readable memory the tables were found in), and
 * a pointer out of it is a parse failure, never a read (issue 29: a wrong byte in .eh_frame made
 * the patcher read an unmapped address in the program's signal handler).
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

/* Where the tables may be read (see the header); the default trusts them (system libraries). */
static const struct cfi_bounds TRUST = {0, UINT64_MAX};

static int inside(const struct cfi_bounds *b, const void *p, uint64_t n)
{
    uint64_t a = (uint64_t)(uintptr_t)p;
    return a >= b->lo && a <= b->hi && n <= b->hi - a;
}

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

/* Reads one encoded pointer; returns 0 on an encoding this reader does not know, or on a
 * pointer read through (DW_EH_PE_indirect) that lies outside the bounds. */
static int read_ptr(const uint8_t **p, const uint8_t *end, uint8_t enc, uint64_t datarel, uint64_t *out,
                    const struct cfi_bounds *b)
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
        if (!inside(b, (const void *)(uintptr_t)v, 8))
            return 0;
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
    uint8_t lsda_enc; /* DW_EH_PE_omit: no LSDA */
    int has_z;
    const uint8_t *insns, *end;
};

/* One CIE or FDE record at p: its length field read and bounded. Returns its end, or NULL. */
static const uint8_t *record_end(const uint8_t *p, const struct cfi_bounds *b)
{
    uint32_t len;
    if (!inside(b, p, 8))
        return NULL;
    memcpy(&len, p, 4);
    if (len < 4 || len == 0xffffffffu || !inside(b, p, (uint64_t)len + 4))
        return NULL;
    return p + 4 + len;
}

static int parse_cie(const uint8_t *p, struct cie *c, const struct cfi_bounds *b)
{
    const uint8_t *end = record_end(p, b);
    if (!end || end - p < 10)
        return 0;
    p += 8; /* length, CIE id */
    uint8_t version = *p++;
    const char *aug = (const char *)p;
    size_t alen = strnlen(aug, (size_t)(end - p));
    if (alen == (size_t)(end - p))
        return 0;
    p += alen + 1;
    if (aug[0] == 'e' && aug[1] == 'h')
        p += 8;
    if (p >= end)
        return 0;
    c->code_align = uleb(&p, end);
    c->data_align = sleb(&p, end);
    if (p >= end)
        return 0;
    c->ra_reg = version == 1 ? *p++ : uleb(&p, end);
    c->fde_enc = DW_EH_PE_absptr;
    c->lsda_enc = DW_EH_PE_omit;
    c->has_z = aug[0] == 'z';
    if (c->has_z) {
        uint64_t zlen = uleb(&p, end);
        if (zlen > (uint64_t)(end - p))
            return 0;
        const uint8_t *zend = p + zlen;
        for (const char *a = aug + 1; *a && p < zend; a++) {
            if (*a == 'R') {
                c->fde_enc = *p++;
            } else if (*a == 'P') {
                uint8_t enc = *p++;
                uint64_t dummy;
                if (!read_ptr(&p, zend, enc & 0x7f, 0, &dummy, b))
                    return 0;
            } else if (*a == 'L') {
                c->lsda_enc = *p++;
            } else if (*a == 'S' || *a == 'B') {
                /* signal frame / BTI: no data */
            } else {
                return 0;
            }
        }
        p = zend;
    }
    if (p > end)
        return 0;
    c->insns = p;
    c->end = end;
    return 1;
}

#define STACK_DEPTH 16

/* Runs CFA instructions until the location passes `pc`. Returns 0 on an unknown opcode. */
static int run(const uint8_t *p, const uint8_t *end, const struct cie *c, uint64_t loc, uint64_t pc,
               struct row *row, const struct row *initial, const struct cfi_bounds *b)
{
    struct row stack[STACK_DEPTH];
    int depth = 0;
#define HAVE(n) do { if (end - p < (n)) return 0; } while (0)
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
            if (!read_ptr(&p, end, c->fde_enc, 0, &to, b)) return 0;
            if (to > pc) return 1;
            loc = to;
            continue;
        }
        case 0x02: HAVE(1); delta = *p++ * c->code_align; goto advance;
        case 0x03: { uint16_t t; HAVE(2); memcpy(&t, p, 2); p += 2; delta = t * c->code_align; goto advance; }
        case 0x04: { uint32_t t; HAVE(4); memcpy(&t, p, 4); p += 4; delta = t * c->code_align; goto advance; }
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
            if (n > (uint64_t)(end - p)) return 0;
            p += n;
            row->cfa_ok = 0;
            continue;
        }
        case 0x10: case 0x16: { /* expression, val_expression */
            reg = uleb(&p, end);
            uint64_t n = uleb(&p, end);
            if (n > (uint64_t)(end - p)) return 0;
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
#undef HAVE
    return 1;
}

/* The .eh_frame_hdr's search table: its address and entry count, each entry read in bounds. */
static const int32_t *hdr_table(const uint8_t *hdr, const struct cfi_bounds *b, uint64_t *count)
{
    if (!hdr || !inside(b, hdr, 4) || hdr[0] != 1)
        return NULL;
    uint8_t ptr_enc = hdr[1], count_enc = hdr[2], table_enc = hdr[3];
    const uint8_t *p = hdr + 4;
    const uint8_t *end = b->hi == UINT64_MAX ? hdr + 64 : (const uint8_t *)(uintptr_t)b->hi;
    if (end - p > 64)
        end = p + 64;
    uint64_t eh_frame, n;
    uint64_t base = (uint64_t)(uintptr_t)hdr;
    if (!read_ptr(&p, end, ptr_enc, base, &eh_frame, b) || !read_ptr(&p, end, count_enc, base, &n, b))
        return NULL;
    if (table_enc != (DW_EH_PE_datarel | DW_EH_PE_sdata4) || n > (1ull << 28) || !inside(b, p, n * 8))
        return NULL;
    *count = n;
    return (const int32_t *)(const void *)p;
}

/* The FDE for pc through the .eh_frame_hdr binary search table. */
static const uint8_t *find_fde(const uint8_t *hdr, uint64_t pc, const struct cfi_bounds *b)
{
    uint64_t count;
    const int32_t *table = hdr_table(hdr, b, &count);
    if (!table || count == 0)
        return NULL;
    uint64_t base = (uint64_t)(uintptr_t)hdr;
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

/* An FDE's CIE, its range, its LSDA (0: none) and where its instructions are. */
static int parse_fde(const uint8_t *fde, const struct cfi_bounds *b, struct cie *c, uint64_t *start, uint64_t *range,
                     uint64_t *lsda, const uint8_t **insns, const uint8_t **end)
{
    const uint8_t *fde_end = record_end(fde, b);
    if (!fde_end)
        return 0;
    uint32_t cie_ptr;
    memcpy(&cie_ptr, fde + 4, 4);
    if (cie_ptr == 0 || (uint64_t)(uintptr_t)(fde + 4) < cie_ptr)
        return 0; /* a CIE, not an FDE; or a pointer before the address space */
    if (!parse_cie(fde + 4 - cie_ptr, c, b))
        return 0;
    const uint8_t *p = fde + 8;
    if (!read_ptr(&p, fde_end, c->fde_enc, 0, start, b) || !read_ptr(&p, fde_end, c->fde_enc & 0x0f, 0, range, b))
        return 0;
    *lsda = 0;
    if (c->has_z) {
        uint64_t zlen = uleb(&p, fde_end);
        if (zlen > (uint64_t)(fde_end - p))
            return 0;
        const uint8_t *q = p;
        if (c->lsda_enc != DW_EH_PE_omit && zlen && !read_ptr(&q, p + zlen, c->lsda_enc, 0, lsda, b))
            *lsda = 0;
        p += zlen;
    }
    *insns = p;
    *end = fde_end;
    return 1;
}

int ualdbg_cfi_lookup_in(const void *eh_frame_hdr, const struct cfi_bounds *b, uint64_t pc, struct cfi_rule *out)
{
    memset(out, 0, sizeof *out);
    if (!b)
        b = &TRUST;
    const uint8_t *fde = find_fde(eh_frame_hdr, pc, b);
    struct cie c;
    uint64_t start, range, lsda;
    const uint8_t *p, *fde_end;
    if (!fde || !parse_fde(fde, b, &c, &start, &range, &lsda, &p, &fde_end))
        return 0;
    out->start = start;
    out->end = start + range;
    if (pc < start || pc >= start + range)
        return 0;
    struct row row = {0}, initial;
    if (!run(c.insns, c.end, &c, start, UINT64_MAX, &row, NULL, b))
        return 0;
    initial = row;
    if (!run(p, fde_end, &c, start, pc, &row, &initial, b))
        return 0;
    if (!row.cfa_ok || !row.ra_ok || row.cfa_reg < 0 || row.cfa_reg > 15)
        return 0;
    out->cfa_reg = dwarf_to_x86[row.cfa_reg];
    out->cfa_off = row.cfa_off;
    out->ra_off = row.ra_off;
    out->ok = 1;
    return 1;
}

int ualdbg_cfi_lookup(const void *eh_frame_hdr, uint64_t pc, struct cfi_rule *out)
{
    return ualdbg_cfi_lookup_in(eh_frame_hdr, NULL, pc, out);
}

int64_t ualdbg_cfi_fde_count(const void *eh_frame_hdr, const struct cfi_bounds *b)
{
    uint64_t count;
    return hdr_table(eh_frame_hdr, b ? b : &TRUST, &count) ? (int64_t)count : 0;
}

int ualdbg_cfi_fde_at(const void *eh_frame_hdr, const struct cfi_bounds *b, uint64_t i, struct cfi_fde *out)
{
    memset(out, 0, sizeof *out);
    if (!b)
        b = &TRUST;
    uint64_t count;
    const int32_t *table = hdr_table(eh_frame_hdr, b, &count);
    if (!table || i >= count)
        return 0;
    uint64_t base = (uint64_t)(uintptr_t)eh_frame_hdr;
    const uint8_t *fde = (const uint8_t *)(uintptr_t)(base + (uint64_t)(int64_t)table[2 * i + 1]);
    struct cie c;
    uint64_t start, range, lsda;
    const uint8_t *p, *end;
    if (!parse_fde(fde, b, &c, &start, &range, &lsda, &p, &end))
        return 0;
    out->table_start = base + (uint64_t)(int64_t)table[2 * i];
    out->start = start;
    out->end = start + range;
    out->lsda = lsda;
    return 1;
}
