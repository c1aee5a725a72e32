/* codemap.c - what the hot-site patcher must know of a module's code before it moves more than
 * one instruction: where each function starts and ends, and every address control can enter the
 * code at. A patch that moves the instructions after (or before) a short one overwrites the
 * start of the next one with its jump: a branch that lands there, a return to there, an
 * exception's landing pad there, would run the middle of the jump (issue 29: a program with one
 * wrong byte in .eh_frame died under the patcher).
 *
 * Nothing here is taken on one source's word. A function's extent is what .eh_frame (its FDE)
 * and the ELF symbol table (read from the module's file) agree on, and it must decode from its
 * start to its end, through the site; the entry points are every direct branch and call target
 * and return address of a linear sweep of every executable section of the file (restarted at
 * every FDE and symbol start, which must each fall on an instruction boundary), every symbol,
 * every FDE start and every landing pad of every LSDA. Every table is read within the memory it
 * was found in (cfi.c's bounds); when anything does not hold, the module or the function is
 * refused, and the site keeps trapping. It runs in the signal handler, under maps_lock: no
 * allocation but the agent's own zone (process.c), no stdio.
 *
 * A function with an indirect jump (a switch's jump table, a computed goto: CPython's eval loop)
 * may be entered wherever a code address the program can compute points. Those are taken as
 * entry points too, over-approximated: every code address a RIP-relative LEA takes, every code
 * address the module's relocations write (R_X86_64_RELATIVE, IRELATIVE, 64), in a module not
 * built position-independent every 8 bytes of its data and every immediate that read as a code
 * address, and for every table a LEA takes in the module's data (gcc's and clang's PIC jump
 * tables: 32-bit offsets from the table's own address), every 32-bit word from there that lands
 * in code as an offset from it, up to the first that does not or the next such address. A spurious entry point only keeps a
 * site trapping; a missing one would break the program, so a module whose data cannot be read
 * keeps its functions with indirect jumps refused.
 *
 * A map is the same for every process that maps the same file: the first process of a run to
 * build one writes it to the run's directory (codemap.DEV.INO.cm, addresses relative to the
 * module's load address), and later processes read it instead of building again (xxHash's test
 * suite: 245 processes, each spent about 20 ms on the map of a 57 KiB program). It is also kept
 * beside the agent's library for later runs (kept_dir: python3's interpreter and the C library
 * took 0.1 s of every run to sweep). Only a map whose code is understood is kept; the file is ours
 * (owner, no group or other write, one link), named by the module file's device and inode and
 * checked against its size, mtime and ctime, and every count in it is checked against the file's
 * length before anything is read.
 *
 * Calls process.c, insn.c and cfi.c (the order: process.h).
 */
#include "codemap.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cfi.h"
#include "insn.h"

#define MAX_CODEMAPS 128
#define MAX_XSECS 32
#define MAX_DSECS 64 /* non-executable PT_LOAD segments */
#define MAX_TABLE_WORDS 65536 /* a jump table's words read at most (a switch of 64k cases) */
#define MAX_SHDRS 1024
#define MAX_PATCHED 32768

struct xsec {
    uint64_t lo, hi; /* in memory */
    uint64_t off;    /* in the file */
};

struct codemap {
    uint64_t map_start;
    int why;
    int computed_known; /* every code address the module can compute is an entry point */
    int fixed;          /* ET_EXEC: absolute code addresses need no relocation */
    char path[512];
    struct stat file; /* the module's file when the map was built */
    struct xsec xs[MAX_XSECS];
    int nxs;
    struct xsec ds[MAX_DSECS]; /* data segments, their file-backed part */
    int nds;
    struct code_fn *fdes; /* sorted by start */
    size_t nfdes;
    struct code_fn *funcs; /* FUNC symbols with a size, sorted by start */
    size_t nfuncs;
    struct code_fn *data; /* OBJECT symbols inside executable sections: not code */
    size_t ndata;
    uint64_t *entries; /* sorted, unique */
    size_t nentries;
};

static struct codemap maps[MAX_CODEMAPS];
static int nmaps;

/* The header's counts of maps built, read from the run's folder, read from an earlier run's. */
#define COUNT_MAP(field)                                                    \
    do {                                                                    \
        if (G.hdr)                                                          \
            __atomic_add_fetch(&G.hdr->field, 1, __ATOMIC_RELAXED);         \
    } while (0)

/* ------------------------------------------------------------------------------------------ */
/* Growable arrays in the agent's own zone (never where the program's mappings go). */

struct vec {
    void *p;
    size_t n, cap, size;
};

static int vec_push(struct vec *v, const void *item)
{
    if (v->n == v->cap) {
        size_t ncap = v->cap ? v->cap * 2 : 4096;
        void *p = zone_map(ncap * v->size);
        if (!p)
            return 0;
        if (v->p) {
            memcpy(p, v->p, v->n * v->size);
            zone_unmap(v->p, v->cap * v->size);
        }
        v->p = p;
        v->cap = ncap;
    }
    memcpy((char *)v->p + v->n * v->size, item, v->size);
    v->n++;
    return 1;
}

static void heapsort_u64(uint64_t *a, size_t n)
{
    /* no allocation at all: the fallback when the zone has no room for radix_u64's copy */
    for (size_t start = n / 2; start-- > 0;) {
        size_t root = start;
        for (size_t c; (c = 2 * root + 1) < n; root = c) {
            if (c + 1 < n && a[c] < a[c + 1])
                c++;
            if (a[root] >= a[c])
                break;
            uint64_t t = a[root]; a[root] = a[c]; a[c] = t;
        }
    }
    for (size_t end = n; end-- > 1;) {
        uint64_t t = a[0]; a[0] = a[end]; a[end] = t;
        size_t root = 0;
        for (size_t c; (c = 2 * root + 1) < end; root = c) {
            if (c + 1 < end && a[c] < a[c + 1])
                c++;
            if (a[root] >= a[c])
                break;
            t = a[root]; a[root] = a[c]; a[c] = t;
        }
    }
}

/* Sorts ascending. A map's entry points are a module's code addresses (python3's interpreter: some
 * 400,000 of them within 3 MiB), so they differ in their low 22 bits or so: a least-significant-
 * digit radix sort of each value less the smallest, 11 bits a pass, takes two or three passes
 * over them where heapsort's scattered reads took a third of the agent's time in a patched run
 * (perf, bench/realworld.py's python3). Its copy is in the agent's zone (no malloc: it runs in
 * the signal handler); without room for it, heapsort. */
static void sort_u64(uint64_t *a, size_t n)
{
    if (n < 64) {
        heapsort_u64(a, n);
        return;
    }
    uint64_t lo = a[0], hi = a[0];
    for (size_t i = 1; i < n; i++) {
        if (a[i] < lo)
            lo = a[i];
        if (a[i] > hi)
            hi = a[i];
    }
    uint64_t span = hi - lo;
    int bits = 0;
    while (bits < 64 && (span >> bits))
        bits++;
    if (!bits)
        return; /* all equal */
    uint64_t *tmp = zone_map(n * 8);
    if (!tmp) {
        heapsort_u64(a, n);
        return;
    }
    static size_t count[1 << 11];
    uint64_t *src = a, *dst = tmp;
    for (int shift = 0; shift < bits; shift += 11) {
        memset(count, 0, sizeof count);
        for (size_t i = 0; i < n; i++)
            count[((src[i] - lo) >> shift) & 2047]++;
        size_t sum = 0;
        for (size_t d = 0; d < 2048; d++) {
            size_t c = count[d];
            count[d] = sum;
            sum += c;
        }
        for (size_t i = 0; i < n; i++)
            dst[count[((src[i] - lo) >> shift) & 2047]++] = src[i];
        uint64_t *t = src;
        src = dst;
        dst = t;
    }
    if (src != a)
        memcpy(a, src, n * 8);
    zone_unmap(tmp, n * 8);
}

/* Ranges sorted by start (insertion into a heap of starts would need pairs: a simple shell sort). */
static void sort_fns(struct code_fn *a, size_t n)
{
    static const size_t gaps[] = {1750, 701, 301, 132, 57, 23, 10, 4, 1};
    for (size_t g = 0; g < sizeof gaps / sizeof *gaps; g++)
        for (size_t i = gaps[g]; i < n; i++) {
            struct code_fn t = a[i];
            size_t j = i;
            for (; j >= gaps[g] && (a[j - gaps[g]].start > t.start ||
                                    (a[j - gaps[g]].start == t.start && a[j - gaps[g]].end > t.end)); j -= gaps[g])
                a[j] = a[j - gaps[g]];
            a[j] = t;
        }
}

/* ------------------------------------------------------------------------------------------ */
/* The original code: memory, with the bytes under the patches' jumps put back. */

static struct {
    uint64_t addr;
    uint8_t n;
    uint8_t orig[15];
} patched[MAX_PATCHED];
static size_t npatched;

void code_patched(uint64_t addr, const uint8_t *orig, size_t n)
{
    if (npatched >= MAX_PATCHED || n > sizeof patched[0].orig)
        return; /* the caller checked there is room (patch.c: a full table refuses first) */
    size_t i = npatched;
    while (i > 0 && patched[i - 1].addr > addr) {
        patched[i] = patched[i - 1];
        i--;
    }
    patched[i].addr = addr;
    patched[i].n = (uint8_t)n;
    memcpy(patched[i].orig, orig, n);
    npatched++;
}

void codemap_forget_patches(void) { npatched = 0; }

void code_fetch(uint64_t addr, uint8_t *buf, size_t n)
{
    memcpy(buf, (const void *)(uintptr_t)addr, n);
    size_t lo = 0, hi = npatched; /* the first patch that ends after addr */
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (patched[mid].addr + patched[mid].n <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (size_t i = lo; i < npatched && patched[i].addr < addr + n; i++)
        for (size_t k = 0; k < patched[i].n; k++) {
            uint64_t a = patched[i].addr + k;
            if (a >= addr && a < addr + n)
                buf[a - addr] = patched[i].orig[k];
        }
}

/* ------------------------------------------------------------------------------------------ */
/* Decoding. */

/* The target of a direct branch or call (jcc, jmp, call, loop, jrcxz, xbegin), or 0. */
static uint64_t branch_target(const struct x86_insn *d, uint64_t pc, const uint8_t *code)
{
    int rel = 0;
    if (!d->vex && d->map == 0 && ((d->opcode >= 0x70 && d->opcode <= 0x7f) || d->opcode == 0xeb ||
                                   (d->opcode >= 0xe0 && d->opcode <= 0xe3)))
        rel = 1;
    else if (!d->vex && ((d->map == 0 && (d->opcode == 0xe8 || d->opcode == 0xe9)) ||
                         (d->map == 1 && d->opcode >= 0x80 && d->opcode <= 0x8f) ||
                         (d->map == 0 && d->opcode == 0xc7 && d->modrm == 0xf8)))
        rel = d->imm_size == 2 ? 2 : 4;
    if (!rel)
        return 0;
    int32_t v;
    if (rel == 1) {
        v = (int8_t)code[d->imm_off];
    } else if (rel == 2) {
        int16_t w;
        memcpy(&w, code + d->imm_off, 2);
        v = w;
    } else {
        memcpy(&v, code + d->imm_off, 4);
    }
    return pc + d->len + (uint64_t)(int64_t)v;
}

static int is_call(const struct x86_insn *d)
{
    return d->flow == X86_FLOW_CALL_REL || d->flow == X86_FLOW_CALL_RM ||
           (!d->vex && d->map == 0 && d->opcode == 0xff && ((d->modrm >> 3) & 7) == 3);
}

/* jmp through a register or memory (a jump table, a computed goto), or a far jump. */
static int is_indirect_jump(const struct x86_insn *d)
{
    return !d->vex && d->map == 0 && d->opcode == 0xff && (((d->modrm >> 3) & 7) == 4 || ((d->modrm >> 3) & 7) == 5);
}

static int decode_at(uint64_t a, uint64_t limit, struct x86_insn *d, uint8_t code[16])
{
    size_t avail = limit - a < 15 ? (size_t)(limit - a) : 15;
    code_fetch(a, code, avail);
    return ualdbg_x86_decode(code, avail, d);
}

/* ------------------------------------------------------------------------------------------ */
/* The module's file: its executable sections and its symbols. */

static int read_at(int fd, void *buf, size_t n, uint64_t off)
{
    size_t done = 0;
    while (done < n) {
        ssize_t r = pread(fd, (char *)buf + done, n - done, (off_t)(off + done));
        if (r <= 0)
            return 0;
        done += (size_t)r;
    }
    return 1;
}

/* [lo, hi) lies in one readable, executable mapping of the module's file. */
/* Whether [lo, hi) is mapped readable and executable from the module's file, in one mapping or in
 * several back to back: patching a site splits the module's code mapping where it changed a
 * page's protection, and a code map built after that (a later site's neighbours) found the section
 * spread over several mappings and refused the whole module (sqlite3's shell: 88 sites). */
static int mapped_code(const struct codemap *cm, uint64_t lo, uint64_t hi)
{
    size_t pl = strlen(cm->path);
    for (uint64_t a = lo; a < hi;) {
        const struct mapping *m = maps_find(a);
        if (!m || m->end <= a || !m->read || !m->exec || m->plen != pl || memcmp(m->path, cm->path, pl))
            return 0;
        a = m->end;
    }
    return 1;
}

static const struct xsec *xsec_of(const struct codemap *cm, uint64_t a)
{
    for (int i = 0; i < cm->nxs; i++)
        if (a >= cm->xs[i].lo && a < cm->xs[i].hi)
            return &cm->xs[i];
    return NULL;
}

static const struct xsec *dsec_of(const struct codemap *cm, uint64_t a)
{
    for (int i = 0; i < cm->nds; i++)
        if (a >= cm->ds[i].lo && a < cm->ds[i].hi)
            return &cm->ds[i];
    return NULL;
}

/* A code address found in data or an immediate: an entry point. */
static int code_address(const struct codemap *cm, uint64_t v, struct vec *entries)
{
    return !xsec_of(cm, v) || vec_push(entries, &v);
}

/* The file offset of `n` bytes at link-time address `va`, in the module's data segments. */
static int data_offset(const struct codemap *cm, uint64_t bias, uint64_t va, uint64_t n, uint64_t *off)
{
    const struct xsec *x = dsec_of(cm, va + bias);
    if (!x || n > x->hi - (va + bias))
        return 0;
    *off = x->off + (va + bias - x->lo);
    return 1;
}

/* The code addresses the module's data holds: what its relocations write (a position-independent
 * module's pointers to code: function pointers, computed-goto tables, non-PIC jump tables), and in
 * a module linked at a fixed address every 8 bytes of its data at every 4-byte offset. The
 * relocations are those the dynamic loader applied (PT_DYNAMIC's DT_RELA), not what the section
 * headers, which nothing loads, say they are. 0 when they could not all be read (functions with
 * indirect jumps stay refused). */
static int data_code_addresses(const struct codemap *cm, int fd, uint64_t bias, const Elf64_Phdr *dyn,
                               struct vec *entries)
{
    static Elf64_Rela rel[512];
    static Elf64_Dyn dents[256];
    static uint8_t buf[65536 + 8];
    uint64_t rela = 0, relasz = 0, relaent = sizeof(Elf64_Rela), symtab = 0;
    int have_rela = 0;
    if (dyn) {
        uint64_t n = dyn->p_filesz / sizeof(Elf64_Dyn);
        if (n > 256 || !read_at(fd, dents, n * sizeof(Elf64_Dyn), dyn->p_offset))
            return 0;
        for (uint64_t i = 0; i < n && dents[i].d_tag != DT_NULL; i++)
            switch (dents[i].d_tag) {
            case DT_RELA: rela = dents[i].d_un.d_ptr, have_rela = 1; break;
            case DT_RELASZ: relasz = dents[i].d_un.d_val; break;
            case DT_RELAENT: relaent = dents[i].d_un.d_val; break;
            case DT_SYMTAB: symtab = dents[i].d_un.d_ptr; break;
            case DT_REL: return 0; /* not x86-64's: a module not understood */
            }
    }
    uint64_t rel_off = 0;
    if (have_rela && (relaent != sizeof(Elf64_Rela) || !data_offset(cm, bias, rela, relasz, &rel_off)))
        return 0;
    uint64_t n = have_rela ? relasz / sizeof(Elf64_Rela) : 0;
    for (uint64_t k = 0; k < n;) {
        size_t chunk = n - k < 512 ? (size_t)(n - k) : 512;
        if (!read_at(fd, rel, chunk * sizeof(Elf64_Rela), rel_off + k * sizeof(Elf64_Rela)))
            return 0;
        for (size_t j = 0; j < chunk; j++) {
            uint32_t type = (uint32_t)ELF64_R_TYPE(rel[j].r_info), sym = (uint32_t)ELF64_R_SYM(rel[j].r_info);
            uint64_t v, sym_off;
            if (type == R_X86_64_RELATIVE || type == R_X86_64_IRELATIVE) {
                v = (uint64_t)rel[j].r_addend + bias;
            } else if (type == R_X86_64_64 && sym) {
                Elf64_Sym y;
                if (!symtab || !data_offset(cm, bias, symtab + (uint64_t)sym * sizeof y, sizeof y, &sym_off) ||
                    !read_at(fd, &y, sizeof y, sym_off))
                    return 0;
                if (y.st_shndx == SHN_UNDEF || y.st_shndx >= SHN_LORESERVE)
                    continue; /* another module's: not code of this one */
                v = y.st_value + (uint64_t)rel[j].r_addend + bias;
            } else {
                continue;
            }
            if (!code_address(cm, v, entries))
                return 0;
        }
        k += chunk;
    }
    if (!cm->fixed)
        return 1;
    for (int i = 0; i < cm->nds; i++) {
        uint64_t size = cm->ds[i].hi - cm->ds[i].lo;
        for (uint64_t off = 0; off + 8 <= size; off += 65536) {
            size_t want = size - off < 65536 + 8 ? (size_t)(size - off) : 65536 + 8;
            if (!read_at(fd, buf, want, cm->ds[i].off + off))
                return 0;
            for (size_t b = 0; b + 8 <= want && b < 65536; b += 4) {
                uint64_t v;
                memcpy(&v, buf + b, 8);
                if (!code_address(cm, v, entries))
                    return 0;
            }
        }
    }
    return 1;
}

static int read_file(struct codemap *cm, uint64_t bias, struct vec *funcs, struct vec *data, struct vec *entries)
{
    static Elf64_Shdr sh[MAX_SHDRS];
    static Elf64_Sym syms[2048];
    int fd = open(cm->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return CODEMAP_FILE;
    int why = CODEMAP_UNKNOWN;
    struct stat st;
    Elf64_Ehdr eh;
    if (fstat(fd, &st) != 0)
        goto out;
    cm->file = st;
    if (!read_at(fd, &eh, sizeof eh, 0) || memcmp(eh.e_ident, ELFMAG, SELFMAG) ||
        eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_machine != EM_X86_64 || eh.e_shentsize != sizeof(Elf64_Shdr) ||
        eh.e_shnum == 0 || eh.e_shnum > MAX_SHDRS || eh.e_shoff > (uint64_t)st.st_size ||
        (uint64_t)st.st_size - eh.e_shoff < (uint64_t)eh.e_shnum * sizeof(Elf64_Shdr) ||
        !read_at(fd, sh, (size_t)eh.e_shnum * sizeof(Elf64_Shdr), eh.e_shoff))
        goto out;
    int symtab = -1, dynsym = -1;
    cm->fixed = eh.e_type == ET_EXEC;
    cm->computed_known = 1;
    /* The data the loader maps from the file (non-executable PT_LOAD segments, their file part:
     * what is zero-filled holds no code address), and PT_DYNAMIC: the loader's view, not the
     * section headers'. */
    static Elf64_Phdr ph[64];
    const Elf64_Phdr *dyn = NULL;
    if (eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phnum > 64 || eh.e_phoff > (uint64_t)st.st_size ||
        !read_at(fd, ph, (size_t)eh.e_phnum * sizeof(Elf64_Phdr), eh.e_phoff))
        cm->computed_known = 0;
    for (int i = 0; cm->computed_known && i < eh.e_phnum; i++) {
        if (ph[i].p_offset > (uint64_t)st.st_size || ph[i].p_filesz > (uint64_t)st.st_size - ph[i].p_offset)
            cm->computed_known = 0;
        else if (ph[i].p_type == PT_DYNAMIC)
            dyn = &ph[i];
        else if (ph[i].p_type == PT_LOAD && !(ph[i].p_flags & PF_X) && ph[i].p_filesz) {
            uint64_t lo = ph[i].p_vaddr + bias, hi = lo + ph[i].p_filesz;
            if (cm->nds >= MAX_DSECS || hi < lo)
                cm->computed_known = 0;
            else
                cm->ds[cm->nds++] = (struct xsec){lo, hi, ph[i].p_offset};
        }
    }
    for (int i = 0; i < eh.e_shnum; i++) {
        if (sh[i].sh_type == SHT_PROGBITS && (sh[i].sh_flags & SHF_EXECINSTR) && sh[i].sh_size) {
            uint64_t lo = sh[i].sh_addr + bias, hi = lo + sh[i].sh_size;
            if (cm->nxs >= MAX_XSECS || hi < lo || sh[i].sh_offset > (uint64_t)st.st_size ||
                sh[i].sh_size > (uint64_t)st.st_size - sh[i].sh_offset || !mapped_code(cm, lo, hi))
                goto out; /* code the agent cannot read whole: its branches would be unknown */
            cm->xs[cm->nxs++] = (struct xsec){lo, hi, sh[i].sh_offset};
        }
        if (sh[i].sh_type == SHT_SYMTAB)
            symtab = i;
        if (sh[i].sh_type == SHT_DYNSYM)
            dynsym = i;
    }
    if (!cm->nxs)
        goto out;
    why = CODEMAP_OK;
    for (int pass = 0; pass < 2; pass++) {
        int s = pass == 0 ? symtab : dynsym;
        if (s < 0 || sh[s].sh_entsize != sizeof(Elf64_Sym) || sh[s].sh_offset > (uint64_t)st.st_size ||
            sh[s].sh_size > (uint64_t)st.st_size - sh[s].sh_offset)
            continue;
        uint64_t n = sh[s].sh_size / sizeof(Elf64_Sym);
        for (uint64_t i = 0; i < n;) {
            size_t chunk = n - i < 2048 ? (size_t)(n - i) : 2048;
            if (!read_at(fd, syms, chunk * sizeof(Elf64_Sym), sh[s].sh_offset + i * sizeof(Elf64_Sym))) {
                why = CODEMAP_UNKNOWN;
                goto out;
            }
            for (size_t k = 0; k < chunk; k++) {
                const Elf64_Sym *y = &syms[k];
                int type = ELF64_ST_TYPE(y->st_info);
                if (y->st_shndx == SHN_UNDEF || y->st_shndx >= SHN_LORESERVE || type == STT_SECTION ||
                    type == STT_FILE || type == STT_TLS)
                    continue;
                uint64_t v = y->st_value + bias;
                if (!xsec_of(cm, v))
                    continue;
                struct code_fn r = {v, v + y->st_size};
                if (r.end < r.start)
                    r.end = r.start;
                if (type == STT_OBJECT && y->st_size) {
                    if (!vec_push(data, &r))
                        why = CODEMAP_UNKNOWN;
                    continue;
                }
                if ((type == STT_FUNC || type == STT_GNU_IFUNC) && y->st_size && !vec_push(funcs, &r))
                    why = CODEMAP_UNKNOWN;
                if (!vec_push(entries, &v))
                    why = CODEMAP_UNKNOWN;
            }
            i += chunk;
        }
        if (pass == 0 && symtab >= 0)
            break; /* .symtab holds .dynsym's symbols too */
    }
    if (why == CODEMAP_OK && cm->computed_known)
        cm->computed_known = data_code_addresses(cm, fd, bias, dyn, entries);
out:
    close(fd);
    return why;
}

/* ------------------------------------------------------------------------------------------ */
/* Landing pads (.gcc_except_table): the unwinder jumps there, in the middle of functions. */

static uint64_t uleb(const uint8_t **p, const uint8_t *end, int *ok)
{
    uint64_t v = 0;
    unsigned shift = 0;
    for (;;) {
        if (*p >= end) {
            *ok = 0;
            return 0;
        }
        uint8_t b = *(*p)++;
        if (shift < 64)
            v |= (uint64_t)(b & 0x7f) << shift;
        shift += 7;
        if (!(b & 0x80))
            return v;
    }
}

/* An encoded pointer of the LSDA (absolute or pc-relative, fixed size or leb128). */
static int lsda_ptr(const uint8_t **p, const uint8_t *end, uint8_t enc, uint64_t *out)
{
    const uint8_t *start = *p;
    int ok = 1;
    uint64_t v;
    switch (enc & 0x0f) {
    case 0x00: case 0x04: case 0x0c:
        if (end - *p < 8) return 0;
        memcpy(&v, *p, 8); *p += 8; break;
    case 0x03: { uint32_t t; if (end - *p < 4) return 0; memcpy(&t, *p, 4); *p += 4; v = t; break; }
    case 0x0b: { int32_t t; if (end - *p < 4) return 0; memcpy(&t, *p, 4); *p += 4; v = (uint64_t)(int64_t)t; break; }
    case 0x02: { uint16_t t; if (end - *p < 2) return 0; memcpy(&t, *p, 2); *p += 2; v = t; break; }
    case 0x0a: { int16_t t; if (end - *p < 2) return 0; memcpy(&t, *p, 2); *p += 2; v = (uint64_t)(int64_t)t; break; }
    case 0x01: v = uleb(p, end, &ok); break;
    default: return 0;
    }
    if ((enc & 0x70) == 0x10)
        v += (uint64_t)(uintptr_t)start;
    else if (enc & 0x70)
        return 0;
    if (enc & 0x80)
        return 0; /* indirect: not for call-site tables */
    *out = v;
    return ok;
}

/* Every landing pad of the LSDA at `at` for the function starting at fn_start. */
static int landing_pads(uint64_t at, uint64_t fn_start, uint64_t fn_end, struct vec *entries)
{
    const struct mapping *m = maps_find(at);
    if (!m || !m->read)
        return 0;
    const uint8_t *p = (const uint8_t *)(uintptr_t)at, *end = (const uint8_t *)(uintptr_t)m->end;
    int ok = 1;
    if (p >= end)
        return 0;
    uint8_t lpstart_enc = *p++;
    uint64_t lpstart = fn_start;
    if (lpstart_enc != 0xff && !lsda_ptr(&p, end, lpstart_enc, &lpstart))
        return 0;
    if (p >= end)
        return 0;
    uint8_t ttype_enc = *p++;
    if (ttype_enc != 0xff)
        (void)uleb(&p, end, &ok);
    if (!ok || p >= end)
        return 0;
    uint8_t cs_enc = *p++;
    uint64_t cs_len = uleb(&p, end, &ok);
    if (!ok || cs_len > (uint64_t)(end - p))
        return 0;
    const uint8_t *cs_end = p + cs_len;
    while (p < cs_end) {
        uint64_t start, len, lp;
        if (!lsda_ptr(&p, cs_end, cs_enc, &start) || !lsda_ptr(&p, cs_end, cs_enc, &len) ||
            !lsda_ptr(&p, cs_end, cs_enc, &lp))
            return 0;
        (void)uleb(&p, cs_end, &ok);
        if (!ok)
            return 0;
        if (lp) {
            uint64_t pad = lpstart + lp;
            if (pad < fn_start || pad >= fn_end)
                return 0; /* not where a landing pad can be: the table is not this function's */
            if (!vec_push(entries, &pad))
                return 0;
        }
    }
    return 1;
}

/* ------------------------------------------------------------------------------------------ */
/* Building a module's map. */

static int eh_frame(struct codemap *cm, const void *hdr, struct vec *fdes, struct vec *entries)
{
    if (!hdr)
        return CODEMAP_OK; /* no FDE: every function is refused by codemap_function */
    const struct mapping *m = maps_find((uint64_t)(uintptr_t)hdr);
    size_t pl = strlen(cm->path);
    if (!m || !m->read || m->plen != pl || memcmp(m->path, cm->path, pl))
        return CODEMAP_OK;
    struct cfi_bounds b = {m->start, m->end};
    int64_t n = ualdbg_cfi_fde_count(hdr, &b);
    for (int64_t i = 0; i < n; i++) {
        struct cfi_fde f;
        if (!ualdbg_cfi_fde_at(hdr, &b, (uint64_t)i, &f))
            continue; /* a function without a readable FDE is refused: its extent is unknown */
        const struct xsec *x = xsec_of(cm, f.start);
        if (f.table_start != f.start || f.end <= f.start || !x || f.end > x->hi) {
            /* the search table and the FDE disagree, or the FDE is not over code: both starts are
             * entry points for all the agent knows, and neither extent is believed */
            if (!vec_push(entries, &f.table_start) || !vec_push(entries, &f.start))
                return CODEMAP_UNKNOWN;
            continue;
        }
        struct code_fn r = {f.start, f.end};
        if (!vec_push(fdes, &r) || !vec_push(entries, &f.start))
            return CODEMAP_UNKNOWN;
        if (f.lsda && !landing_pads(f.lsda, f.start, f.end, entries))
            return CODEMAP_UNKNOWN; /* landing pads unknown */
    }
    return CODEMAP_OK;
}

/* Records a decoded instruction's entry points: its branch or call target, the return address
 * after a call, and a code address it computes (a RIP-relative LEA of code; in a module at a fixed
 * address an immediate or absolute displacement that reads as one). A LEA of the module's data is
 * kept in `refs`: a jump table may start there. */
static int note_entries(const struct codemap *cm, const struct x86_insn *d, uint64_t a, const uint8_t *code,
                        struct vec *entries, struct vec *refs)
{
    uint64_t t = branch_target(d, a, code), ret = a + d->len;
    if (!((!t || vec_push(entries, &t)) && (!is_call(d) || vec_push(entries, &ret))))
        return 0;
    if (!cm->computed_known)
        return 1;
    if (d->rip_rel && !d->vex && d->map == 0 && d->opcode == 0x8d) {
        uint64_t v = a + d->len + (uint64_t)(int64_t)d->disp;
        if (xsec_of(cm, v))
            return vec_push(entries, &v);
        if (dsec_of(cm, v))
            return vec_push(refs, &v);
        return 1;
    }
    if (cm->fixed) {
        if (d->imm_size >= 4 && !branch_target(d, a, code)) {
            uint64_t v = 0;
            memcpy(&v, code + d->imm_off, d->imm_size >= 8 ? 8 : 4);
            if (!code_address(cm, v, entries))
                return 0;
        }
        if (d->mem && !d->rip_rel && d->disp_size == 4 && !code_address(cm, (uint64_t)(uint32_t)d->disp, entries))
            return 0;
    }
    return 1;
}

/* gcc's and clang's position-independent jump tables: 32-bit offsets from the table's address,
 * which a LEA takes. Every word from each such address, up to the next one (or its segment's
 * end) and the first that does not land in code as an offset from it, is an entry point. */
static int table_entries(struct codemap *cm, struct vec *refs, struct vec *entries)
{
    if (!refs->n)
        return 1;
    uint64_t *r = refs->p;
    sort_u64(r, refs->n);
    for (size_t i = 0; i < refs->n; i++) {
        if (i && r[i] == r[i - 1])
            continue;
        const struct xsec *x = dsec_of(cm, r[i]);
        const struct mapping *m = maps_find(r[i]);
        if (!x || !m || !m->read)
            continue; /* not mapped readable: nothing can be read from it as a table either */
        uint64_t end = x->hi < m->end ? x->hi : m->end;
        for (size_t j = i + 1; j < refs->n; j++)
            if (r[j] > r[i]) {
                if (r[j] < end)
                    end = r[j];
                break;
            }
        /* Every word of a jump table lands in code: the first one that does not ends it (and
         * ends the reading of whatever else a LEA takes there: strings, constants). */
        size_t words = 0;
        for (uint64_t a = r[i]; a + 4 <= end && words < MAX_TABLE_WORDS; a += 4, words++) {
            int32_t off;
            memcpy(&off, (const void *)(uintptr_t)a, 4);
            uint64_t t = r[i] + (uint64_t)(int64_t)off;
            if (!xsec_of(cm, t))
                break;
            if (!vec_push(entries, &t))
                return 0;
        }
    }
    return 1;
}

/* A linear sweep of every executable section, restarted after data symbols. A known start (FDE,
 * symbol) inside an instruction of the sweep (glibc's signal-return FDE starts a byte early, for
 * unwinders that look up pc - 1) is read from too, up to the next known start: the entry points of
 * both readings are kept. Anything that does not read as code makes every entry point unknown. */
static int sweep(struct codemap *cm, struct vec *entries, struct vec *refs)
{
    size_t nk = entries->n;
    uint64_t *known = zone_map((nk + 1) * 8);
    if (!known)
        return CODEMAP_UNKNOWN;
    memcpy(known, entries->p, nk * 8);
    sort_u64(known, nk);
    int why = CODEMAP_OK;
    for (int s = 0; s < cm->nxs && why == CODEMAP_OK; s++) {
        uint64_t a = cm->xs[s].lo, hi = cm->xs[s].hi;
        size_t k = 0, dk = 0;
        while (k < nk && known[k] <= a)
            k++;
        while (a < hi && why == CODEMAP_OK) {
            while (dk < cm->ndata && cm->data[dk].end <= a)
                dk++;
            if (dk < cm->ndata && cm->data[dk].start <= a) {
                a = cm->data[dk].end; /* a data symbol: not code */
                while (k < nk && known[k] <= a)
                    k++;
                continue;
            }
            struct x86_insn d;
            uint8_t code[16];
            if (decode_at(a, hi, &d, code) != 0 || !note_entries(cm, &d, a, code, entries, refs)) {
                why = CODEMAP_UNKNOWN; /* code that does not read as code */
                break;
            }
            a += d.len;
            for (; k < nk && known[k] < a; k++) {
                /* a start inside that instruction: read from there too, until a known start */
                uint64_t b = known[k], stop = k + 1 < nk && known[k + 1] < hi ? known[k + 1] : hi;
                for (int n = 0; b < stop && n < 64; n++) {
                    struct x86_insn x;
                    uint8_t c[16];
                    if (decode_at(b, hi, &x, c) != 0)
                        break; /* not code that way */
                    if (!note_entries(cm, &x, b, c, entries, refs)) {
                        why = CODEMAP_UNKNOWN;
                        break;
                    }
                    b += x.len;
                }
            }
            while (k < nk && known[k] <= a)
                k++;
        }
    }
    zone_unmap(known, (nk + 1) * 8);
    return why;
}

/* ------------------------------------------------------------------------------------------ */
/* The run's copy of a map, shared by the processes of one run. */

#define CACHE_MAGIC 0x3270616d63646c61ull /* "aldcmap2" */

struct cache_head {
    uint64_t magic;
    uint64_t dev, ino, size, mtime_s, mtime_ns, ctime_s, ctime_ns;
    int32_t fixed, computed_known, nxs, nds;
    uint64_t nfdes, nfuncs, ndata, nentries;
};

/* Where maps are kept beyond the run: the folder "codemaps" beside the agent's library, in the
 * agent's private build folder (agent/build.py: one per version of these sources, so a map is
 * only ever read by the code that built it). It is made here, 0700, and used only when it and the
 * folder above it are this user's and no one else can write to them. A map read from there saves
 * each later run the sweep (python3's interpreter and the C library: some 0.1 s a run); the
 * file's ctime in its key means any change to the module (which the kernel stamps, whatever its
 * mtime says) makes it built again. "" when there is no such folder. */
static const char *kept_dir(void)
{
    static char dir[sizeof CFG.agent_path + 16];
    static int state; /* 0: not looked at yet, 1: dir, -1: none */
    if (state)
        return state > 0 ? dir : "";
    state = -1;
    const char *slash = strrchr(CFG.agent_path, '/');
    if (!slash || slash == CFG.agent_path || (size_t)(slash - CFG.agent_path) + 10 >= sizeof dir)
        return "";
    memcpy(dir, CFG.agent_path, (size_t)(slash - CFG.agent_path));
    dir[slash - CFG.agent_path] = 0;
    uid_t me = geteuid();
    struct stat st;
    int pfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (pfd < 0)
        return "";
    int ok = fstat(pfd, &st) == 0 && st.st_uid == me && !(st.st_mode & 022);
    if (ok && mkdirat(pfd, "codemaps", 0700) != 0 && errno != EEXIST)
        ok = 0;
    int fd = ok ? openat(pfd, "codemaps", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
    close(pfd);
    if (fd < 0)
        return "";
    ok = fstat(fd, &st) == 0 && st.st_uid == me && !(st.st_mode & 077);
    close(fd);
    if (!ok)
        return "";
    put_str(dir + strlen(dir), dir + sizeof dir - 1, "/codemaps");
    state = 1;
    return dir;
}

static int cache_name(const char *dir, const struct stat *st, char *out, size_t cap, int tmp)
{
    if (!dir[0])
        return 0;
    char *p = out, *end = out + cap - 1;
    p = put_str(p, end, dir);
    p = put_str(p, end, "/codemap.");
    p = put_u64(p, end, (uint64_t)st->st_dev);
    p = put_str(p, end, ".");
    p = put_u64(p, end, (uint64_t)st->st_ino);
    if (tmp) {
        p = put_str(p, end, ".");
        p = put_u64(p, end, (uint64_t)getpid());
        p = put_str(p, end, ".tmp");
    } else {
        p = put_str(p, end, ".cm");
    }
    *p = 0;
    return p < end;
}

static int write_all(int fd, const void *buf, size_t n)
{
    const char *c = buf;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w <= 0) {
            if (w < 0 && errno == EINTR)
                continue;
            return 0;
        }
        c += w;
        n -= (size_t)w;
    }
    return 1;
}

/* n values of 8 bytes, less `bias` (ranges: both ends). */
static int write_rel(int fd, const uint64_t *v, size_t n, uint64_t bias)
{
    static uint64_t chunk[512];
    for (size_t i = 0; i < n;) {
        size_t k = n - i < 512 ? n - i : 512;
        for (size_t j = 0; j < k; j++)
            chunk[j] = v[i + j] - bias;
        if (!write_all(fd, chunk, k * 8))
            return 0;
        i += k;
    }
    return 1;
}

static void cache_store_in(const char *dir, const struct codemap *cm, uint64_t bias)
{
    char tmp[1200], name[1200];
    if (!cache_name(dir, &cm->file, tmp, sizeof tmp, 1) || !cache_name(dir, &cm->file, name, sizeof name, 0))
        return;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return;
    struct cache_head h = {CACHE_MAGIC, (uint64_t)cm->file.st_dev, (uint64_t)cm->file.st_ino,
                           (uint64_t)cm->file.st_size, (uint64_t)cm->file.st_mtim.tv_sec,
                           (uint64_t)cm->file.st_mtim.tv_nsec, (uint64_t)cm->file.st_ctim.tv_sec,
                           (uint64_t)cm->file.st_ctim.tv_nsec, cm->fixed, cm->computed_known, cm->nxs, cm->nds,
                           cm->nfdes, cm->nfuncs, cm->ndata, cm->nentries};
    struct xsec xs[MAX_XSECS + MAX_DSECS];
    for (int i = 0; i < cm->nxs; i++)
        xs[i] = (struct xsec){cm->xs[i].lo - bias, cm->xs[i].hi - bias, cm->xs[i].off};
    for (int i = 0; i < cm->nds; i++)
        xs[cm->nxs + i] = (struct xsec){cm->ds[i].lo - bias, cm->ds[i].hi - bias, cm->ds[i].off};
    int ok = write_all(fd, &h, sizeof h) && write_all(fd, xs, (size_t)(cm->nxs + cm->nds) * sizeof *xs) &&
             write_rel(fd, (const uint64_t *)cm->fdes, cm->nfdes * 2, bias) &&
             write_rel(fd, (const uint64_t *)cm->funcs, cm->nfuncs * 2, bias) &&
             write_rel(fd, (const uint64_t *)cm->data, cm->ndata * 2, bias) &&
             write_rel(fd, cm->entries, cm->nentries, bias);
    close(fd);
    if (!ok || rename(tmp, name) != 0)
        unlink(tmp);
}

/* The run's copy, and the one kept beyond it. */
static void cache_store(const struct codemap *cm, uint64_t bias)
{
    cache_store_in(CFG.dir, cm, bias);
    cache_store_in(kept_dir(), cm, bias);
}

/* Reads n values of 8 bytes into the zone, plus `bias`; NULL when n is 0 (or on failure: *ok). */
static uint64_t *read_rel(int fd, uint64_t n, uint64_t *off, uint64_t bias, int *ok)
{
    if (!n || !*ok)
        return NULL;
    uint64_t *v = zone_map(n * 8);
    if (!v || !read_at(fd, v, n * 8, *off)) {
        *ok = 0;
        return NULL;
    }
    for (uint64_t i = 0; i < n; i++)
        v[i] += bias;
    *off += n * 8;
    return v;
}

/* The copy of this module's map in `dir`, when there is one for this very file: 1 and cm filled. */
static int cache_load_from(const char *dir, struct codemap *cm, uint64_t bias, const struct stat *modp)
{
    struct stat mod = *modp, st;
    char name[1200];
    if (!cache_name(dir, &mod, name, sizeof name, 0))
        return 0;
    int fd = open(name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return 0;
    struct cache_head h;
    int ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() && !(st.st_mode & 022) &&
             read_at(fd, &h, sizeof h, 0) && h.magic == CACHE_MAGIC && h.dev == (uint64_t)mod.st_dev &&
             h.ino == (uint64_t)mod.st_ino && h.size == (uint64_t)mod.st_size &&
             h.mtime_s == (uint64_t)mod.st_mtim.tv_sec && h.mtime_ns == (uint64_t)mod.st_mtim.tv_nsec &&
             h.ctime_s == (uint64_t)mod.st_ctim.tv_sec && h.ctime_ns == (uint64_t)mod.st_ctim.tv_nsec &&
             st.st_nlink == 1 &&
             h.nxs > 0 && h.nxs <= MAX_XSECS && h.nds >= 0 && h.nds <= MAX_DSECS;
    if (ok) {
        /* each count below the file's length first: their sum cannot wrap */
        uint64_t limit = (uint64_t)st.st_size;
        ok = h.nfdes < limit && h.nfuncs < limit && h.ndata < limit && h.nentries < limit;
        uint64_t words = (h.nfdes + h.nfuncs + h.ndata) * 2 + h.nentries;
        ok = ok && sizeof h + (uint64_t)(h.nxs + h.nds) * sizeof(struct xsec) + words * 8 == limit;
    }
    struct xsec xs[MAX_XSECS + MAX_DSECS];
    uint64_t off = sizeof h;
    if (ok && read_at(fd, xs, (size_t)(h.nxs + h.nds) * sizeof *xs, off)) {
        off += (uint64_t)(h.nxs + h.nds) * sizeof *xs;
        for (int i = 0; i < h.nxs; i++)
            cm->xs[i] = (struct xsec){xs[i].lo + bias, xs[i].hi + bias, xs[i].off};
        for (int i = 0; i < h.nds; i++)
            cm->ds[i] = (struct xsec){xs[h.nxs + i].lo + bias, xs[h.nxs + i].hi + bias, xs[h.nxs + i].off};
        cm->nxs = h.nxs, cm->nds = h.nds;
        for (int i = 0; i < cm->nxs && ok; i++)
            ok = cm->xs[i].lo < cm->xs[i].hi && mapped_code(cm, cm->xs[i].lo, cm->xs[i].hi);
    } else {
        ok = 0;
    }
    cm->fdes = (struct code_fn *)read_rel(fd, h.nfdes * 2, &off, bias, &ok);
    cm->funcs = (struct code_fn *)read_rel(fd, h.nfuncs * 2, &off, bias, &ok);
    cm->data = (struct code_fn *)read_rel(fd, h.ndata * 2, &off, bias, &ok);
    cm->entries = read_rel(fd, h.nentries, &off, bias, &ok);
    if (ok)
        futimens(fd, NULL); /* used now: the last to be removed when the kept ones are pruned (agent/build.py) */
    close(fd);
    if (!ok) {
        /* (the zone's pieces of a half-read copy stay: rare, and the zone is the agent's) */
        cm->fdes = cm->funcs = cm->data = NULL;
        cm->entries = NULL;
        cm->nxs = cm->nds = 0;
        return 0;
    }
    cm->nfdes = h.nfdes, cm->nfuncs = h.nfuncs, cm->ndata = h.ndata, cm->nentries = h.nentries;
    cm->fixed = h.fixed, cm->computed_known = h.computed_known;
    cm->file = mod;
    return 1;
}

/* The run's copy of this module's map, else the one kept from an earlier run (then also left in
 * the run's folder: the run's later processes look there first). */
static int cache_load(struct codemap *cm, uint64_t bias)
{
    struct stat mod;
    if (stat(cm->path, &mod) != 0)
        return 0;
    if (cache_load_from(CFG.dir, cm, bias, &mod)) {
        COUNT_MAP(codemaps_read);
        return 1;
    }
    if (!cache_load_from(kept_dir(), cm, bias, &mod))
        return 0;
    cache_store_in(CFG.dir, cm, bias);
    COUNT_MAP(codemaps_kept);
    return 1;
}

static int build(struct codemap *cm, uint64_t pc)
{
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35))
    struct dl_find_object dlfo;
    if (_dl_find_object((void *)(uintptr_t)pc, &dlfo) != 0 || !dlfo.dlfo_link_map)
        return CODEMAP_UNKNOWN;
    cm->map_start = (uint64_t)(uintptr_t)dlfo.dlfo_map_start;
    const struct mapping *m = maps_lookup_locked(pc);
    if (!m || !m->plen || m->path[0] != '/' || m->plen >= sizeof cm->path)
        return CODEMAP_UNKNOWN;
    memcpy(cm->path, m->path, m->plen);
    cm->path[m->plen] = 0;
    uint64_t bias = (uint64_t)dlfo.dlfo_link_map->l_addr;
    if (cache_load(cm, bias))
        return CODEMAP_OK;
    struct vec funcs = {0, 0, 0, sizeof(struct code_fn)}, data = funcs, fdes = funcs;
    struct vec entries = {0, 0, 0, 8};
    int why = read_file(cm, bias, &funcs, &data, &entries);
    if (why == CODEMAP_OK)
        why = eh_frame(cm, dlfo.dlfo_eh_frame, &fdes, &entries);
    cm->funcs = funcs.p, cm->nfuncs = funcs.n;
    cm->data = data.p, cm->ndata = data.n;
    cm->fdes = fdes.p, cm->nfdes = fdes.n;
    if (cm->funcs)
        sort_fns(cm->funcs, cm->nfuncs);
    if (cm->data)
        sort_fns(cm->data, cm->ndata);
    if (cm->fdes)
        sort_fns(cm->fdes, cm->nfdes);
    struct vec refs = {0, 0, 0, 8};
    if (why == CODEMAP_OK)
        why = sweep(cm, &entries, &refs);
    if (why == CODEMAP_OK && cm->computed_known && !table_entries(cm, &refs, &entries))
        cm->computed_known = 0;
    if (refs.p)
        zone_unmap(refs.p, refs.cap * refs.size);
    if (why == CODEMAP_OK && entries.n) {
        uint64_t *e = entries.p;
        sort_u64(e, entries.n);
        size_t u = 0;
        for (size_t i = 0; i < entries.n; i++)
            if (!u || e[u - 1] != e[i])
                e[u++] = e[i];
        cm->entries = e, cm->nentries = u;
    }
    if (why == CODEMAP_OK)
        cache_store(cm, bias);
    COUNT_MAP(codemaps_built);
    return why;
#else
    (void)cm, (void)pc;
    return CODEMAP_UNKNOWN;
#endif
}

const struct codemap *codemap_of(uint64_t pc, int *why)
{
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35))
    struct dl_find_object dlfo;
    if (_dl_find_object((void *)(uintptr_t)pc, &dlfo) != 0) {
        *why = CODEMAP_UNKNOWN;
        return NULL;
    }
    uint64_t start = (uint64_t)(uintptr_t)dlfo.dlfo_map_start;
    for (int i = 0; i < nmaps; i++)
        if (maps[i].map_start == start) {
            *why = maps[i].why;
            return &maps[i];
        }
    if (nmaps >= MAX_CODEMAPS) {
        *why = CODEMAP_UNKNOWN;
        return NULL;
    }
    struct codemap *cm = &maps[nmaps++];
    memset(cm, 0, sizeof *cm);
    cm->why = build(cm, pc);
    cm->map_start = start;
    *why = cm->why;
    return cm;
#else
    (void)pc;
    *why = CODEMAP_UNKNOWN;
    return NULL;
#endif
}

/* ------------------------------------------------------------------------------------------ */
/* Questions. */

/* The last range starting at or before pc (ranges sorted by start), or NULL. */
static const struct code_fn *last_at_or_before(const struct code_fn *a, size_t n, uint64_t pc, size_t *index)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (a[mid].start <= pc)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (!lo)
        return NULL;
    *index = lo - 1;
    return &a[lo - 1];
}

int codemap_function(const struct codemap *cm, uint64_t pc, struct code_fn *fn)
{
    if (!cm || cm->why != CODEMAP_OK)
        return cm ? cm->why : CODEMAP_UNKNOWN;
    size_t i, j;
    const struct code_fn *f = last_at_or_before(cm->fdes, cm->nfdes, pc, &i);
    if (!f || pc >= f->end || (i > 0 && cm->fdes[i - 1].end > f->start) ||
        (i + 1 < cm->nfdes && cm->fdes[i + 1].start < f->end))
        return CODEMAP_EXTENT; /* no FDE holds pc, or two do */
    /* The symbol holding pc: the innermost FUNC symbol whose range holds it. */
    const struct code_fn *s = last_at_or_before(cm->funcs, cm->nfuncs, pc, &j);
    while (s && pc >= s->end) {
        if (j == 0 || cm->funcs[j - 1].end <= pc) {
            /* no enclosing symbol either (they are sorted by start; one may still enclose) */
            size_t k = j;
            s = NULL;
            while (k-- > 0)
                if (cm->funcs[k].end > pc) {
                    s = &cm->funcs[k];
                    break;
                }
            break;
        }
        s = &cm->funcs[--j];
    }
    if (s) {
        if (s->start != f->start || s->end != f->end)
            return CODEMAP_EXTENT;
    } else {
        /* No symbol (a stripped module): no symbol of a function may start inside the FDE. */
        size_t k;
        const struct code_fn *n = last_at_or_before(cm->funcs, cm->nfuncs, f->end - 1, &k);
        if (n && n->start > f->start)
            return CODEMAP_EXTENT;
    }
    /* It decodes from its start to its end, through pc, with no indirect jump. */
    int hit = 0;
    for (uint64_t a = f->start; a < f->end;) {
        struct x86_insn d;
        uint8_t code[16];
        if (decode_at(a, f->end, &d, code) != 0)
            return CODEMAP_EXTENT;
        if (is_indirect_jump(&d) && !cm->computed_known)
            return CODEMAP_INDIRECT;
        if (a == pc)
            hit = 1;
        a += d.len;
    }
    if (!hit)
        return CODEMAP_EXTENT;
    *fn = *f;
    return CODEMAP_OK;
}

int codemap_entry_between(const struct codemap *cm, uint64_t lo, uint64_t hi)
{
    if (!cm || cm->why != CODEMAP_OK)
        return 1;
    size_t l = 0, h = cm->nentries; /* the first entry > lo */
    while (l < h) {
        size_t mid = (l + h) / 2;
        if (cm->entries[mid] <= lo)
            l = mid + 1;
        else
            h = mid;
    }
    return l < cm->nentries && cm->entries[l] < hi;
}

int codemap_file_matches(const struct codemap *cm, uint64_t lo, const uint8_t *orig, size_t n)
{
    const struct xsec *x = cm ? xsec_of(cm, lo) : NULL;
    uint8_t buf[64];
    if (!x || n > sizeof buf || lo + n > x->hi)
        return 0;
    int fd = open(cm->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    int ok = read_at(fd, buf, n, x->off + (lo - x->lo)) && !memcmp(buf, orig, n);
    close(fd);
    return ok;
}
