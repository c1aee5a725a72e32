/* uses_gone.c - a program that needs libgone.so (gone.c), which the tests delete: the dynamic
 * loader cannot start it, and a shell gives 127. */
#include <stdio.h>

int gone_value(int x);

int main(void)
{
    printf("%d\n", gone_value(1));
    return 0;
}
