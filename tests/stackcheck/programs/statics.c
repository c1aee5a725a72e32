/* statics.c - static variables for `ualdbg stackcheck --var FUNC:NAME`: one in main, one in a
 * function that is never called (its address must come from DWARF, with no frame of its own
 * to stand in), one in a function that runs after main's entry. Prints every address. */
#include <stdio.h>

__attribute__((noipa)) static double *never(void)
{
    static double unused[2];
    return unused;
}

__attribute__((noipa)) static long later(int k)
{
    static long counts[3];
    counts[k % 3]++;
    printf("statics: &counts = %p\n", (void *)counts);
    return counts[k % 3];
}

int main(int argc, char **argv)
{
    static double table[4] = {1, 2, 3, 4};
    (void)argv;
    printf("statics: &table = %p\n", (void *)table);
    if (argc > 5)
        printf("statics: &unused = %p\n", (void *)never());
    return (int)later(argc) - 1 + (int)table[0] - 1;
}
