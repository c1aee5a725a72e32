/* Struct types that point to one another through a chain deeper than the type reader's depth
   bound (as sqlite3's and CPython's do), and a string: the string's type must not depend on
   whether the chain was read first (tests/data/test_data_unit.py). */
#include <stdio.h>

struct s0 { struct s1 *next; int v; };
struct s1 { struct s2 *next; int v; };
struct s2 { struct s3 *next; int v; };
struct s3 { struct s4 *next; int v; };
struct s4 { struct s5 *next; int v; };
struct s5 { struct s6 *next; int v; };
struct s6 { struct s7 *next; int v; };
struct s7 { struct s8 *next; int v; };
struct s8 { struct s9 *next; int v; };
struct s9 { struct s10 *next; int v; };
struct s10 { struct s11 *next; int v; };
struct s11 { struct s12 *next; int v; };
struct s12 { struct s13 *next; int v; };
struct s13 { struct s14 *next; int v; };
struct s14 { struct s15 *next; int v; };
struct s15 { const char *name; int v; };

struct s0 head;
const char msg[10] = "unaligned";

int main(void) {
    puts(msg);
    return head.v;
}
