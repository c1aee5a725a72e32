/* records.c - the JSON lines of the agent's ring records, for ualdbg itself (not the agent:
 * this is loaded into ualdbg's Python process with ctypes, never into the traced program).
 *
 * One record's line is exactly what Python's json.dumps writes for the record object of the
 * trace document (ualdbg/engines/records.py, RecordTable.__getitem__):
 *
 *   {"seq": S, "time": T, "cpu": C, "pid": P, "tid": T, "pc": "0x..", "va": "0x.."|null,
 *    "size": N|null, "access": "..."|null}
 *
 * The per-site part (from "pc" to the end) comes from Python as a "shape": the text before the
 * VA, whether there is a VA, and the text after it. "time" is repr(round(time_ns / 1e9 -
 * started, 6)), computed here exactly (see fmt_time); a value this file cannot write exactly
 * makes the call fail (-2) and Python writes the records itself.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define RECORD_SIZE 176

struct rec_head { /* the first 40 bytes of struct ualdbg_record (ualdbg_agent.h) */
    uint64_t seq;
    uint64_t time_ns;
    uint64_t pc;
    uint32_t pid;
    uint32_t tid;
    int32_t cpu;
    uint32_t flags;
};

static char *put_u64(char *p, uint64_t v)
{
    char tmp[24];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n)
        *p++ = tmp[--n];
    return p;
}

static char *put_hex(char *p, uint64_t v) /* Python's f"{v:#x}" */
{
    static const char digits[] = "0123456789abcdef";
    char tmp[16];
    int n = 0;
    *p++ = '0';
    *p++ = 'x';
    do {
        tmp[n++] = digits[v & 15];
        v >>= 4;
    } while (v);
    while (n)
        *p++ = tmp[--n];
    return p;
}

/* repr(round(x, 6)) for |x| < 2^30. CPython rounds correctly (half to even) from the exact
 * binary value of x (float.__round__ goes through _Py_dg_dtoa mode 3), so round(x, 6) is the
 * double nearest to D = k / 10^6 with k = round_half_even(x * 10^6), computed here exactly in
 * 128-bit integers. Below 2^30 a double's ulp is under 10^-6, so no other decimal of at most
 * six places falls within the rounding interval of that double, and repr (the shortest string
 * that reads back as the same double) is D without trailing zeros: "I.F" when |D| >= 1e-4
 * (".0" when integral), "Ke-06" / "K.Le-05" below (repr switches to an exponent under 1e-4),
 * with the sign of x (round(-1e-9, 6) is -0.0). Returns NULL when |x| is out of range. */
static char *fmt_time(char *p, double x)
{
    if (!isfinite(x) || fabs(x) >= 1073741824.0)
        return NULL;
    int neg = signbit(x) != 0;
    double ax = fabs(x);
    uint64_t k = 0;
    if (ax != 0.0) {
        int e2;
        double f = frexp(ax, &e2);                       /* ax = f * 2^e2, f in [0.5, 1) */
        uint64_t m = (uint64_t)ldexp(f, 53);             /* exact: 53 bits */
        int shift = 53 - e2;                              /* ax = m / 2^shift, shift >= 23 here */
        unsigned __int128 num = (unsigned __int128)m * 1000000u; /* < 2^73 */
        if (shift >= 100) {
            k = 0; /* num / 2^shift < 2^-27: rounds to 0 */
        } else {
            unsigned __int128 one = 1;
            unsigned __int128 q = num >> shift;
            unsigned __int128 rem = num & ((one << shift) - 1);
            unsigned __int128 half = one << (shift - 1);
            if (rem > half || (rem == half && (q & 1)))
                q++;
            k = (uint64_t)q;
        }
    }
    if (neg)
        *p++ = '-';
    if (k == 0) {
        memcpy(p, "0.0", 3);
        return p + 3;
    }
    if (k < 100) { /* below 1e-4: exponent notation, as repr */
        if (k < 10) {
            *p++ = (char)('0' + k);
            memcpy(p, "e-06", 4);
            return p + 4;
        }
        *p++ = (char)('0' + k / 10);
        if (k % 10) {
            *p++ = '.';
            *p++ = (char)('0' + k % 10);
        }
        memcpy(p, "e-05", 4);
        return p + 4;
    }
    p = put_u64(p, k / 1000000u);
    *p++ = '.';
    uint64_t frac = k % 1000000u;
    if (frac == 0) {
        *p++ = '0';
        return p;
    }
    char digits[6];
    for (int i = 5; i >= 0; i--) {
        digits[i] = (char)('0' + frac % 10);
        frac /= 10;
    }
    int len = 6;
    while (digits[len - 1] == '0')
        len--;
    memcpy(p, digits, (size_t)len);
    return p + len;
}

/* The same, for tests: writes repr(round(x, 6)) and a NUL into out (32 bytes); 0, or -1 when
 * this file cannot write it. */
__attribute__((visibility("default"))) int ualdbg_format_time(double x, char *out)
{
    char *end = fmt_time(out, x);
    if (end == NULL)
        return -1;
    *end = '\0';
    return 0;
}

/* Writes the lines of records [first, first + count) of `recs` (consecutive 176-byte agent
 * records) into out: each line is `indent` then the record's JSON, lines joined by ",\n" (no
 * separator before the first line nor after the last). seq[i] replaces the record's own
 * sequence number when seq is not NULL; shape[i] picks the per-site text (pre[s], then the VA
 * va[i] in quotes when has_va[s], else null, then post[s]). Returns the bytes written; -1 when
 * `cap` is too small (nothing useful written), -2 when a time cannot be written exactly. */
__attribute__((visibility("default"))) long ualdbg_records_json(
    const unsigned char *recs, size_t first, size_t count, double started, const uint64_t *seq,
    const uint64_t *va, const uint32_t *shape, const char *const *pre, const uint8_t *has_va,
    const char *const *post, const char *indent, char *out, size_t cap)
{
    size_t indent_len = strlen(indent);
    char *p = out, *end = out + cap;
    for (size_t i = first; i < first + count; i++) {
        struct rec_head r;
        memcpy(&r, recs + i * RECORD_SIZE, sizeof r);
        uint32_t s = shape[i];
        size_t pre_len = strlen(pre[s]), post_len = strlen(post[s]);
        /* the fixed text is under 120 bytes, numbers under 25 each */
        if ((size_t)(end - p) < indent_len + pre_len + post_len + 256)
            return -1;
        if (i != first) {
            *p++ = ',';
            *p++ = '\n';
        }
        memcpy(p, indent, indent_len);
        p += indent_len;
        memcpy(p, "{\"seq\": ", 8);
        p = put_u64(p + 8, seq ? seq[i] : r.seq);
        memcpy(p, ", \"time\": ", 10);
        p = fmt_time(p + 10, (double)r.time_ns / 1e9 - started);
        if (p == NULL)
            return -2;
        memcpy(p, ", \"cpu\": ", 9);
        p += 9;
        if (r.cpu < 0) {
            memcpy(p, "null", 4);
            p += 4;
        } else {
            p = put_u64(p, (uint64_t)r.cpu);
        }
        memcpy(p, ", \"pid\": ", 9);
        p = put_u64(p + 9, r.pid);
        memcpy(p, ", \"tid\": ", 9);
        p = put_u64(p + 9, r.tid);
        memcpy(p, ", \"pc\": \"", 9);
        p = put_hex(p + 9, r.pc);
        *p++ = '"';
        memcpy(p, pre[s], pre_len);
        p += pre_len;
        if (has_va[s]) {
            *p++ = '"';
            p = put_hex(p, va[i]);
            *p++ = '"';
        } else {
            memcpy(p, "null", 4);
            p += 4;
        }
        memcpy(p, post[s], post_len);
        p += post_len;
    }
    return (long)(p - out);
}
