/* sigbus_handler.c - a program that handles SIGBUS itself.
 *
 * A tool that finds misaligned accesses by turning them into SIGBUS must not
 * break programs that use SIGBUS for their own purposes.  This one:
 *   1. installs a SIGBUS handler with sigaction(SA_SIGINFO);
 *   2. makes `reads` misaligned 4-byte reads (default 3) at one line, which
 *      are harmless natively and must be invisible to the program when traced;
 *   3. triggers a REAL bus error: it maps two pages of a one-page temporary
 *      file and reads the second page, which lies beyond end of file
 *      (si_code BUS_ADRERR = 2);
 *   4. its handler records si_code and siglongjmp()s back.
 * It prints "handler ran: si_code=N" and exits 0 only if its handler ran for
 * the real bus error (exit 1 otherwise; exit 3 if the handler saw a SIGBUS
 * before the provoked one).  The handler itself makes no
 * misaligned access (a fault while SIGBUS is blocked would be fatal).
 *
 * Usage: sigbus_handler [reads]    (default 3 => 3 faults)
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static sigjmp_buf recover;
static volatile sig_atomic_t armed;
static volatile sig_atomic_t handler_ran;
static volatile sig_atomic_t handler_code;

static void on_sigbus(int sig, siginfo_t *si, void *uctx)
{
    (void)sig;
    (void)uctx;
    handler_code = si->si_code;
    handler_ran = 1;
    if (!armed) {
        /* Not the bus error we provoke: e.g. an alignment-check SIGBUS
         * (BUS_ADRALN) that a tracer let through.  Nowhere to jump to. */
        static const char msg[] = "sigbus_handler: unexpected SIGBUS\n";
        write(STDERR_FILENO, msg, sizeof msg - 1);
        _exit(3);
    }
    siglongjmp(recover, 1);
}

_Alignas(16) static unsigned char words[64];

/* Out of line so gcc emits plain 4-byte loads through the odd pointer. */
__attribute__((noipa)) static uint32_t sum_words(const unsigned char *p, int n)
{
    const uint32_t *w = (const uint32_t *)p;
    uint32_t sum = 0;
    for (int i = 0; i < n; i++)
        sum += w[i % 8]; /* misaligned 4-byte read */
    return sum;
}

int main(int argc, char **argv)
{
    int reads = argc > 1 ? atoi(argv[1]) : 3;
    long page = sysconf(_SC_PAGESIZE);
    struct sigaction sa;

    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGBUS, &sa, NULL) != 0) {
        perror("sigaction");
        return 2;
    }

    for (int i = 0; i < 64; i++)
        words[i] = (unsigned char)i;
    printf("sigbus_handler: misaligned p=%p\n", (void *)(words + 1));
    printf("sigbus_handler: sum=%u\n", sum_words(words + 1, reads));
    fflush(stdout);

    /* A one-page file mapped as two pages: touching the second page is
     * beyond EOF, which the kernel reports as SIGBUS/BUS_ADRERR. */
    /* The name is built by snprintf (in libc), not `char path[] = "..."`:
     * gcc initialises such a stack array with overlapping 8-byte stores, two
     * of them misaligned, which would add faults to this line. */
    const char *dir = getenv("TMPDIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/sigbus_handler.XXXXXX", dir && *dir ? dir : "/tmp");
    int fd = mkstemp(path);
    if (fd < 0) {
        perror("mkstemp");
        return 2;
    }
    unlink(path);
    if (ftruncate(fd, page) != 0) {
        perror("ftruncate");
        return 2;
    }
    volatile unsigned char *map = mmap(NULL, 2 * page, PROT_READ, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) {
        perror("mmap");
        return 2;
    }

    unsigned char got = 0;
    if (sigsetjmp(recover, 1) == 0) {
        armed = 1;
        got = map[page]; /* the real bus error: beyond end of file */
    }
    armed = 0;
    munmap((void *)map, 2 * page);
    close(fd);

    if (!handler_ran) {
        printf("sigbus_handler: no SIGBUS (read %u)\n", got);
        return 1;
    }
    printf("handler ran: si_code=%d\n", (int)handler_code);
    return handler_code == BUS_ADRERR ? 0 : 1;
}
