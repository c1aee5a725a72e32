/* lines.c - a DWARF line program decoded as gdb 13 records it, for ualdbg itself (loaded into
 * ualdbg's Python process with ctypes, never into the traced program).
 *
 * This is ualdbg/symbols/lineprogram.py's decode_lines, statement for statement, in C: a unit's
 * line program can hold hundreds of thousands of rows (sqlite3's amalgamation, CPython's eval
 * loop), and the Python loop took half of naming a run's sites (issue 34). The Python version
 * stays the reference: tests/unit/test_line_programs.py requires the same tables from both on
 * every unit of real binaries and on fuzzed programs.
 *
 * Python's integers have no width; these do. Where a value would not fit (an address past
 * 2^127, a line past 2^62, a LEB128 operand past 64 bits that is used) the call returns -2 and
 * Python decodes the unit itself, so that both always agree.
 *
 * Output: the recorded entries of every subfile, sorted by (the subfile's first use, address * 2
 * + (line != 0), order): Python's tables, each in the order Python's sort puts it, as columns (an
 * address past 64 bits there: -2 as well).
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

typedef unsigned __int128 u128;

struct ualdbg_line_params {
    uint64_t min_len;
    uint64_t max_ops;
    int64_t line_base;
    uint64_t line_range;
    uint64_t opcode_base;
    uint64_t address_size;
    uint64_t low_pc;
    int32_t default_stmt;
    int32_t big_endian;
    const uint8_t *std_lengths;
    uint64_t n_std_lengths;
};

struct entry {
    u128 key; /* address * 2 + (line != 0) */
    uint64_t order;
    int64_t line;
    int32_t subfile;
    uint8_t stmt;
};

/* What Python reads back (ualdbg_lines_free releases it). Entry i: addr[i], order[i], line[i],
 * stmt[i] (its key is addr * 2 + (line != 0)). Subfile ids below n_known are the caller's
 * file_map values; id n_known + k is the k-th file index the map did not know (unknown[k]).
 * touched lists the subfiles in the order their tables were first created, counts their entries. */
struct ualdbg_lines_out {
    uint64_t n;
    uint64_t *addr;
    uint64_t *order;
    int64_t *line;
    uint8_t *stmt;
    uint64_t n_unknown;
    uint64_t *unknown;
    uint64_t n_touched;
    int32_t *touched;
    uint64_t *counts; /* per touched subfile, its entries (they come in that order) */
};

/* One subfile's table: indices into the entry pool, as a stack (gdb pops entries at an end). */
struct table {
    uint64_t *idx;
    uint64_t n, cap;
    int64_t rank; /* -1: not created yet */
};

struct state {
    const uint8_t *code;
    uint64_t size;
    struct entry *pool;
    uint64_t n_pool, cap_pool;
    struct table *tables;
    uint64_t n_tables, cap_tables;
    uint64_t n_known;
    uint64_t *unknown;
    uint64_t n_unknown, cap_unknown, last_unknown;
    int32_t *touched;
    uint64_t n_touched, cap_touched;
    uint64_t order;
};

enum { OK = 0, NOMEM = -1, WIDE = -2, END = 1 };

static int grow(void **p, uint64_t *cap, uint64_t need, size_t elem)
{
    if (need <= *cap)
        return OK;
    uint64_t cap2 = *cap ? *cap : 16;
    while (cap2 < need)
        cap2 *= 2;
    void *q = realloc(*p, cap2 * elem);
    if (!q)
        return NOMEM;
    *p = q;
    *cap = cap2;
    return OK;
}

/* An unsigned LEB128 at *pos. END: the program ends inside it (Python's IndexError). WIDE: the
 * value has bits past 64 (only when `need`: a skipped operand's value is never used); *pos is
 * then after it all the same. */
static int uleb(struct state *s, uint64_t *pos, uint64_t *value, int need)
{
    uint64_t v = 0;
    unsigned shift = 0;
    int wide = 0;
    for (;;) {
        if (*pos >= s->size)
            return END;
        uint8_t byte = s->code[(*pos)++];
        uint64_t bits = byte & 0x7F;
        if (shift < 64) {
            if (shift > 57 && (bits >> (64 - shift)))
                wide = 1;
            v |= bits << shift;
        } else if (bits) {
            wide = 1;
        }
        if (shift < 64)
            shift += 7;
        if (byte < 0x80)
            break;
    }
    *value = v;
    return need && wide ? WIDE : OK;
}

/* A signed LEB128 (advance_line's operand); WIDE past int64, or encoded in more than 10 bytes. */
static int sleb(struct state *s, uint64_t *pos, int64_t *value)
{
    uint64_t v = 0;
    unsigned shift = 0;
    uint8_t byte;
    int wide = 0;
    for (;;) {
        if (*pos >= s->size)
            return END;
        byte = s->code[(*pos)++];
        if (shift >= 63) {
            if (byte >= 0x80 || (byte != 0 && byte != 0x7F))
                wide = 1;
            v |= (uint64_t)(byte & 1) << 63;
        } else {
            v |= (uint64_t)(byte & 0x7F) << shift;
        }
        if (shift < 63)
            shift += 7;
        else
            shift = 64;
        if (byte < 0x80)
            break;
    }
    if (wide)
        return WIDE;
    if ((byte & 0x40) && shift < 64)
        v |= ~(uint64_t)0 << shift;
    *value = (int64_t)v;
    return OK;
}

/* The subfile of a file index: the caller's map, else one id per distinct index it did not map
 * (in the order of first use). More than MAX_UNKNOWN of those: WIDE (Python's dict takes them). */
#define MAX_UNKNOWN 4096

static int32_t subfile_of(struct state *s, const int32_t *file_map, uint64_t n_map, uint64_t index, int *rc)
{
    if (index < n_map && file_map[index] >= 0)
        return file_map[index];
    if (s->n_unknown && s->unknown[s->last_unknown] == index)
        return (int32_t)(s->n_known + s->last_unknown);
    for (uint64_t k = 0; k < s->n_unknown; k++)
        if (s->unknown[k] == index) {
            s->last_unknown = k;
            return (int32_t)(s->n_known + k);
        }
    if (s->n_unknown >= MAX_UNKNOWN || s->n_known >= INT32_MAX - MAX_UNKNOWN) {
        *rc = WIDE;
        return -1;
    }
    if (grow((void **)&s->unknown, &s->cap_unknown, s->n_unknown + 1, sizeof(uint64_t))) {
        *rc = NOMEM;
        return -1;
    }
    s->unknown[s->n_unknown] = index;
    s->last_unknown = s->n_unknown;
    return (int32_t)(s->n_known + s->n_unknown++);
}

static struct table *table_of(struct state *s, int32_t subfile)
{
    uint64_t need = (uint64_t)subfile + 1;
    if (need > s->n_tables) {
        if (grow((void **)&s->tables, &s->cap_tables, need, sizeof(struct table)))
            return NULL;
        for (uint64_t i = s->n_tables; i < need; i++) {
            memset(&s->tables[i], 0, sizeof(struct table));
            s->tables[i].rank = -1;
        }
        s->n_tables = need;
    }
    struct table *t = &s->tables[subfile];
    if (t->rank < 0) {
        if (grow((void **)&s->touched, &s->cap_touched, s->n_touched + 1, sizeof(int32_t)))
            return NULL;
        t->rank = (int64_t)s->n_touched;
        s->touched[s->n_touched++] = subfile;
    }
    return t;
}

static int append(struct state *s, struct table *t, int32_t subfile, u128 addr, int64_t line, int stmt)
{
    if (grow((void **)&s->pool, &s->cap_pool, s->n_pool + 1, sizeof(struct entry)) ||
        grow((void **)&t->idx, &t->cap, t->n + 1, sizeof(uint64_t)))
        return NOMEM;
    struct entry *e = &s->pool[s->n_pool];
    e->key = addr * 2 + (line != 0);
    e->order = ++s->order;
    e->line = line;
    e->subfile = subfile;
    e->stmt = (uint8_t)(stmt != 0);
    t->idx[t->n++] = s->n_pool++;
    return OK;
}

/* gdb's record_line: an end (line 0) first drops the file's entries at its address. */
static int record(struct state *s, int32_t subfile, int64_t line, u128 addr, int stmt)
{
    struct table *t = table_of(s, subfile);
    if (!t)
        return NOMEM;
    if (line == 0) {
        int have = 0;
        int64_t last_line = 0;
        while (t->n) {
            struct entry *e = &s->pool[t->idx[t->n - 1]];
            last_line = e->line;
            have = 1;
            if (e->key >> 1 != addr)
                break;
            t->n--; /* the pool keeps it; only the table's entries are output */
        }
        if (!have || last_line == 0)
            return OK;
    }
    return append(s, t, subfile, addr, line, stmt);
}

static int by_table(const void *a, const void *b, void *arg)
{
    const struct state *sort_state = arg;
    const struct entry *x = &sort_state->pool[*(const uint64_t *)a], *y = &sort_state->pool[*(const uint64_t *)b];
    int64_t rx = sort_state->tables[x->subfile].rank, ry = sort_state->tables[y->subfile].rank;
    if (rx != ry)
        return rx < ry ? -1 : 1;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order;
}

#define TOO_BIG(a) ((a) >> 126) /* keep address * 2 + 1 inside 128 bits */

static int decode(struct state *s, const struct ualdbg_line_params *p, const int32_t *file_map, uint64_t n_map)
{
    const uint64_t min_len = p->min_len, max_ops = p->max_ops, line_range = p->line_range;
    const uint64_t opcode_base = p->opcode_base;
    uint64_t pos = 0;
    int rc = OK;
    while (pos < s->size) {
        u128 address = 0;
        uint64_t op_index = 0, file_reg = 1;
        int64_t line = 1;
        int is_stmt = p->default_stmt != 0, disc = 0, has_disc = 0;
        int32_t last_subfile = -1;
        int64_t last_line = 0;
        u128 last_address = 0;
        int stmt_at_address = 0, recording = 1, end = 0;
        while (pos < s->size && !end) {
            uint64_t op = s->code[pos++];
            int row = 0;
            uint64_t v;
            if (op >= opcode_base) {
                uint64_t adj = op - opcode_base, advance = adj / line_range;
                address += (u128)min_len * ((op_index + advance) / max_ops);
                op_index = (op_index + advance) % max_ops;
                int64_t delta = p->line_base + (int64_t)(adj % line_range);
                if (__builtin_add_overflow(line, delta, &line))
                    return WIDE;
                if (delta)
                    has_disc = disc != 0;
                row = 1;
            } else if (op == 0) { /* extended */
                uint64_t length;
                rc = uleb(s, &pos, &length, 1);
                if (rc == WIDE) /* Python's `after` is past the program: the loop ends there */
                    length = UINT64_MAX;
                else if (rc)
                    return rc;
                rc = OK;
                uint64_t after = length > s->size ? UINT64_MAX : pos + length;
                uint64_t sub = 0;
                if (length) {
                    if (pos >= s->size)
                        return END;
                    sub = s->code[pos];
                }
                if (sub == 1) { /* end_sequence */
                    end = row = 1;
                } else if (sub == 2) { /* set_address: the bytes there, as many as there are */
                    uint64_t start = pos + 1, n = p->address_size;
                    if (start > s->size)
                        n = 0;
                    else if (n > s->size - start)
                        n = s->size - start;
                    if (n > 15)
                        return WIDE;
                    u128 a = 0;
                    for (uint64_t i = 0; i < n; i++) {
                        uint8_t b = s->code[start + (p->big_endian ? i : n - 1 - i)];
                        a = (a << 8) | b;
                    }
                    address = a;
                    op_index = 0;
                    /* gdb ignores sequences of functions the linker dropped (PR 12528). */
                    if ((a == 0 && p->low_pc > 0) || a == (u128)UINT64_MAX || a == (u128)(UINT64_MAX - 1))
                        recording = 0;
                } else if (sub == 4) { /* set_discriminator */
                    uint64_t dpos = pos + 1;
                    if ((rc = uleb(s, &dpos, &v, 0)))
                        return rc;
                    /* nonzero iff any payload bit is set */
                    int nz = 0;
                    for (uint64_t i = pos + 1; i < dpos; i++)
                        nz |= (s->code[i] & 0x7F) != 0;
                    disc = nz;
                    has_disc |= nz;
                }
                pos = after;
            } else if (op == 1) { /* copy */
                row = 1;
            } else if (op == 5) { /* set_column */
                if ((rc = uleb(s, &pos, &v, 0)))
                    return rc;
            } else if (op == 2) { /* advance_pc */
                uint64_t advance;
                if ((rc = uleb(s, &pos, &advance, 1)))
                    return rc;
                u128 sum = (u128)op_index + advance;
                address += (u128)min_len * (sum / max_ops);
                op_index = (uint64_t)(sum % max_ops);
            } else if (op == 3) { /* advance_line */
                int64_t delta;
                if ((rc = sleb(s, &pos, &delta)))
                    return rc;
                if (__builtin_add_overflow(line, delta, &line))
                    return WIDE;
                if (delta)
                    has_disc = disc != 0;
            } else if (op == 4) { /* set_file */
                if ((rc = uleb(s, &pos, &file_reg, 1)))
                    return rc;
                has_disc = disc != 0;
            } else if (op == 6) { /* negate_stmt */
                is_stmt = !is_stmt;
            } else if (op == 8) { /* const_add_pc */
                uint64_t advance = (255 - opcode_base) / line_range;
                address += (u128)min_len * ((op_index + advance) / max_ops);
                op_index = (op_index + advance) % max_ops;
            } else if (op == 9) { /* fixed_advance_pc: the bytes there, as many as there are */
                uint64_t n = pos >= s->size ? 0 : s->size - pos < 2 ? s->size - pos : 2, a = 0;
                for (uint64_t i = 0; i < n; i++)
                    a = (a << 8) | s->code[pos + (p->big_endian ? i : n - 1 - i)];
                address += a;
                op_index = 0;
                pos += 2;
            } else { /* column, basic_block, prologue/epilogue, isa, unknown: skip operands */
                uint64_t k = op - 1 < p->n_std_lengths ? p->std_lengths[op - 1] : 0;
                for (uint64_t i = 0; i < k; i++)
                    if ((rc = uleb(s, &pos, &v, 0)))
                        return rc;
            }
            if (TOO_BIG(address) || line > ((int64_t)1 << 62) || line < -((int64_t)1 << 62))
                return WIDE;
            if (!row)
                continue;
            /* gdb's record_line */
            if (op_index == 0 || end) {
                int32_t subfile = subfile_of(s, file_map, n_map, file_reg, &rc);
                if (rc)
                    return rc;
                int changed = last_subfile != subfile;
                int ignore = (changed && !end && last_address == address && !is_stmt && stmt_at_address) ||
                             (!end && line == 0);
                /* gdb turns recording back on at the end of a sequence, before its end marker. */
                if (((changed && !ignore) || end) && last_subfile >= 0 && (recording || end))
                    if ((rc = record(s, last_subfile, 0, address, 1)))
                        return rc;
                if (!end && !ignore && (changed || line != last_line || !has_disc)) {
                    last_subfile = subfile;
                    if (recording) {
                        struct table *t = table_of(s, subfile);
                        if (!t || append(s, t, subfile, address, line, is_stmt))
                            return NOMEM;
                    }
                    last_line = line;
                }
            }
            if (last_address != address) {
                stmt_at_address = 0;
                last_address = address;
            }
            stmt_at_address |= is_stmt;
            disc = 0;
        }
    }
    return OK;
}

EXPORT void ualdbg_lines_free(struct ualdbg_lines_out *out)
{
    free(out->addr);
    free(out->order);
    free(out->line);
    free(out->stmt);
    free(out->unknown);
    free(out->touched);
    free(out->counts);
    memset(out, 0, sizeof(*out));
}

/* 0: `out` holds the tables; -1: out of memory; -2: a value too wide, decode it in Python. A
 * program that ends inside an instruction keeps the rows read before (Python's IndexError). */
EXPORT long ualdbg_lines_decode(const uint8_t *code, uint64_t size, const struct ualdbg_line_params *p,
                                const int32_t *file_map, uint64_t n_map, uint64_t n_known, struct ualdbg_lines_out *out)
{
    struct state s;
    memset(&s, 0, sizeof(s));
    memset(out, 0, sizeof(*out));
    s.code = code;
    s.size = size;
    s.n_known = n_known;
    if (p->line_range == 0 || p->max_ops == 0)
        return 0;
    int rc = decode(&s, p, file_map, n_map);
    long result = rc == NOMEM ? -1 : rc == WIDE ? -2 : 0;
    uint64_t n = 0;
    for (uint64_t t = 0; t < s.n_tables; t++)
        n += s.tables[t].n;
    uint64_t *all = NULL;
    if (result == 0) {
        all = malloc((n ? n : 1) * sizeof(uint64_t));
        out->addr = malloc((n ? n : 1) * sizeof(uint64_t));
        out->order = malloc((n ? n : 1) * sizeof(uint64_t));
        out->line = malloc((n ? n : 1) * sizeof(int64_t));
        out->stmt = malloc(n ? n : 1);
        out->counts = malloc((s.n_touched ? s.n_touched : 1) * sizeof(uint64_t));
        if (!out->counts || !out->addr || !out->order || !out->line || !out->stmt)
            result = -1;
    }
    if (result == 0) {
        uint64_t k = 0;
        for (uint64_t t = 0; t < s.n_tables; t++)
            for (uint64_t i = 0; i < s.tables[t].n; i++)
                all[k++] = s.tables[t].idx[i];
        qsort_r(all, n, sizeof(uint64_t), by_table, &s);
        for (uint64_t i = 0; i < n; i++) {
            const struct entry *e = &s.pool[all[i]];
            if (e->key >> 65)
                result = -2;
            out->addr[i] = (uint64_t)(e->key >> 1);
            out->order[i] = e->order;
            out->line[i] = e->line;
            out->stmt[i] = e->stmt;
        }
        out->n = n;
    }
    if (result == 0) {
        out->unknown = s.unknown;
        out->n_unknown = s.n_unknown;
        out->touched = s.touched;
        out->n_touched = s.n_touched;
        for (uint64_t k = 0; k < s.n_touched; k++)
            out->counts[k] = s.tables[s.touched[k]].n;
        s.unknown = NULL;
        s.touched = NULL;
    } else {
        ualdbg_lines_free(out);
    }
    free(all);
    for (uint64_t t = 0; t < s.n_tables; t++)
        free(s.tables[t].idx);
    free(s.tables);
    free(s.pool);
    free(s.unknown);
    free(s.touched);
    return result;
}
