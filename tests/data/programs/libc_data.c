/* libc_data.c - a misaligned read inside libc's stdout FILE: data of a system library, named by
 * its symbol table (its DWARF, when a debug file is installed, is not read in the fault path). */
#include <stdio.h>
#include <stdint.h>
int main(void) {
    /* read 8 bytes at an odd offset inside libc's stdout FILE */
    volatile uint64_t v = *(volatile uint64_t *)((char *)stdout + 1);
    printf("%llu\n", (unsigned long long)v);
    return 0;
}
