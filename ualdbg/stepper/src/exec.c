/* exec.c - the exec helper: execve a program with exactly the argv (argv[0] included),
 * environment and ASLR setting of a spec file, and optionally die with a given parent.
 *
 * Why: gdb can neither set argv[0] (it execs its absolute path) nor keep its shell (dash adds
 * PWD, bash `_` and SHLVL) and itself (LINES, COLUMNS) from editing the environment. Set as
 * gdb's `exec-wrapper`, the helper runs between gdb's shell and the program; the words the shell
 * appends after it (the program and its arguments as gdb knows them) are ignored.
 *
 * usage: ualdbg-exec [-p PARENT] SPEC [ignored...]
 *   -p PARENT  PR_SET_PDEATHSIG(SIGKILL) for the program, which keeps it across the exec, and
 *              die now if PARENT is no longer the parent (it died before the prctl).
 *   SPEC: MAGIC\0 ASLR(0|1)\0 STDIN\0 STDOUT\0 STDERR\0 PATH\0 ARGC\0 ARGV...\0 ENV...\0
 *         (an empty STDIN/STDOUT/STDERR keeps what the helper inherited)
 * A failed exec exits as a shell does: 127 when the file is not found, 126 otherwise.
 */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/personality.h>
#include <unistd.h>

/* Declared here, not from <errno.h> and <sys/prctl.h>: stackcheck builds this file with -m32 too,
 * and where the i386 kernel headers (asm/errno.h) are not installed those two do not compile. */
extern int *__errno_location(void);
extern int prctl(int option, ...);
#define PR_SET_PDEATHSIG 1
#define ENOENT 2

static int redirect(const char *path, int fd, int flags, const char *same_as, int same_fd)
{
    if (!*path) return 0;
    if (same_as && strcmp(path, same_as) == 0) return dup2(same_fd, fd) < 0 ? -1 : 0;
    int f = open(path, flags, 0644);
    if (f < 0) { perror(path); return -1; }
    if (f != fd && (dup2(f, fd) < 0 || close(f) < 0)) return -1;
    return 0;
}

int main(int argc, char **argv)
{
    int first = 1;
    if (argc > 3 && strcmp(argv[1], "-p") == 0) {
        long parent = strtol(argv[2], NULL, 10);
        if (prctl(PR_SET_PDEATHSIG, (unsigned long)SIGKILL, 0UL, 0UL, 0UL) != 0 || getppid() != (pid_t)parent)
            kill(getpid(), SIGKILL);
        first = 3;
    }
    if (argc <= first) { fputs("ualdbg-exec: usage: ualdbg-exec [-p PARENT] SPEC\n", stderr); return 127; }
    const char *spec = argv[first];
    int fd = open(spec, O_RDONLY);
    if (fd < 0) { perror(spec); return 127; }
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (len == cap && !(buf = realloc(buf, cap *= 2))) return 127;
        ssize_t n = read(fd, buf + len, cap - len);
        if (n < 0) { perror(spec); return 127; }
        if (n == 0) break;
        len += (size_t)n;
    }
    close(fd);
    size_t n = 0;
    for (size_t i = 0; i < len; i++) n += buf[i] == 0;
    char **s = calloc(n + 1, sizeof *s);
    size_t k = 0;
    for (size_t i = 0; i < len && k < n; i += strlen(buf + i) + 1) s[k++] = buf + i;
    if (k < 7 || strcmp(s[0], "ualdbg-exec-1") != 0) { fprintf(stderr, "ualdbg-exec: %s: not a spec\n", spec); return 127; }
    long ac = strtol(s[6], 0, 10);
    if (ac < 0 || (size_t)(7 + ac) > k) { fprintf(stderr, "ualdbg-exec: %s: bad argc\n", spec); return 127; }
    if (redirect(s[2], 0, O_RDONLY, NULL, -1) || redirect(s[3], 1, O_WRONLY | O_CREAT | O_TRUNC, NULL, -1)
        || redirect(s[4], 2, O_WRONLY | O_CREAT | O_TRUNC, s[3], 1))
        return 127;
    int pers = personality(0xffffffff);
    if (pers != -1) personality(s[1][0] == '1' ? (pers & ~ADDR_NO_RANDOMIZE) : (pers | ADDR_NO_RANDOMIZE));
    /* argv and envp point into the spec's own buffer: NULL-terminated slices of s. */
    char **av = calloc((size_t)ac + 1, sizeof *av);
    for (long i = 0; i < ac; i++) av[i] = s[7 + i];
    s[k] = NULL;
    execve(s[5], av, s + 7 + ac);
    int err = *__errno_location();
    fprintf(stderr, "ualdbg: %s: cannot execute: %s\n", ac ? av[0] : s[5], strerror(err));
    return err == ENOENT ? 127 : 126;
}
