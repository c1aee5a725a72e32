/* mpi_status.c - the SGI MPT MPI_Status case.
 *
 * MPI_Status is a block of C ints in the user's memory (4-byte alignment;
 * modelled here as `int status[5]`).  The library stored a 64-bit byte count into two of those ints with one
 * 8-byte store, `*(int64_t *)&status[1] = count`, and read it back the same
 * way in MPI_Get_count.  Here the status sits after an 8-byte field, so
 * status[] starts at offset 8 and &status[1] is at offset 12 = 4 mod 8: each
 * store and each load of the count is a misaligned 8-byte access.
 *
 * Faults with the default argument (messages=50):
 *   fake_recv():     50 misaligned 8-byte writes
 *   fake_get_count(): 50 misaligned 8-byte reads
 *
 * Usage: mpi_status [messages]
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

enum { STATUS_SOURCE, STATUS_COUNT_LO, STATUS_COUNT_HI, STATUS_TAG, STATUS_ERROR, STATUS_SIZE };

struct request {
    int64_t id;              /* makes the struct 8-aligned, status[] at +8 */
    int status[STATUS_SIZE]; /* MPI_Status: plain ints, 4-byte aligned     */
};

/* The "library" side: compiled as if in another object (noipa), so gcc
 * knows only that it got an int *, and emits one 8-byte mov. */
__attribute__((noipa)) static void fake_recv(int *status, int source, int64_t count)
{
    status[STATUS_SOURCE] = source;
    *(int64_t *)&status[STATUS_COUNT_LO] = count; /* misaligned 8-byte write */
    status[STATUS_TAG] = 7;
    status[STATUS_ERROR] = 0;
}

__attribute__((noipa)) static int64_t fake_get_count(const int *status)
{
    return *(const int64_t *)&status[STATUS_COUNT_LO]; /* misaligned 8-byte read */
}

int main(int argc, char **argv)
{
    int messages = argc > 1 ? atoi(argv[1]) : 50;
    static struct request req; /* static: same alignment (mod 4096) every run */
    int64_t bytes = 0;

    printf("mpi_status: &status[1]=%p (mod 8 = %lu)\n", (void *)&req.status[STATUS_COUNT_LO],
           (unsigned long)(uintptr_t)&req.status[STATUS_COUNT_LO] % 8);
    for (int m = 0; m < messages; m++) {
        req.id = m;
        fake_recv(req.status, m % 4, 1000 + m);
        bytes += fake_get_count(req.status);
    }
    printf("mpi_status: messages=%d bytes=%lld\n", messages, (long long)bytes);
    return 0;
}
