/* spawn_loop.c - the per-process cost for bench/startup.py (issue 34): `spawn_loop N` starts
 * `spawn_loop 0` (itself, which does nothing) N times, one after the other (posix_spawn, then
 * wait), and exits. Run natively and under `ualdbg trace`, (t(N) - t(0)) / N of each is what one
 * process costs; their difference is what ualdbg adds per process that makes no fault in scope.
 */
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

extern char **environ;

int main(int argc, char **argv)
{
    long n = argc > 1 ? strtol(argv[1], NULL, 10) : 0;
    char *child[] = {argv[0], "0", NULL};
    for (long i = 0; i < n; i++) {
        pid_t pid;
        int status;
        if (posix_spawn(&pid, "/proc/self/exe", NULL, NULL, child, environ) != 0) {
            perror("spawn_loop: posix_spawn");
            return 1;
        }
        if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
            return 1;
    }
    return 0;
}
