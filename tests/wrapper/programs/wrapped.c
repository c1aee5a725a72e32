/* wrapped.c - what a program sees of the wrapper it runs under (tests/wrapper).
 *
 * Every mode calls touch() (the step engine's scope, --in touch).
 *
 *   wrapped show ARGS...   print its argv, the SigIgn and SigBlk lines of /proc/self/status and
 *                          its environment, make one misaligned access, exit 0
 *   wrapped ignterm [busy] ignore SIGTERM, print "up", then make misaligned accesses until killed
 *                          (every 20 ms; busy: one after the other, so a debugger is nearly always
 *                          at one of its stops)
 *   wrapped wait FILE      print "up", wait (at most 60 s) for FILE to exist, print "done", exit 0
 *   wrapped sigint         print "up", count SIGINTs for up to 20 s (ending 0.3 s after the
 *                          first), print "sigint N", exit 42 when it got one, else 0
 *   wrapped sleep S        print "up", sleep S seconds, exit 0
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

extern char **environ;
static char buf[64];
static volatile sig_atomic_t ints;

__attribute__((noinline)) static void touch(int i)
{
    volatile uint64_t *p = (volatile uint64_t *)(void *)(buf + 1 + (i & 7));
    *p += 1;
}

static void on_int(int s) { (void)s; ints++; }

static void up(void) { touch(0); puts("up"); fflush(stdout); }

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "show";
    if (!strcmp(mode, "show")) {
        for (int i = 0; i < argc; i++) printf("argv[%d]=%s\n", i, argv[i]);
        FILE *f = fopen("/proc/self/status", "r");
        char line[256];
        while (f && fgets(line, sizeof line, f))
            if (!strncmp(line, "SigIgn:", 7) || !strncmp(line, "SigBlk:", 7)) fputs(line, stdout);
        if (f) fclose(f);
        for (char **e = environ; *e; e++) printf("env=%s\n", *e);
        fflush(stdout);  /* before a strict CPU's SIGBUS */
        touch(0);
        return 0;
    }
    if (!strcmp(mode, "ignterm")) {
        signal(SIGTERM, SIG_IGN);
        up();
        int busy = argc > 2 && !strcmp(argv[2], "busy");
        for (int i = 0;; i++) {
            touch(i);
            if (!busy)
                usleep(20000);
        }
    }
    if (!strcmp(mode, "wait") && argc > 2) {
        up();
        struct stat st;
        for (int i = 0; i < 6000 && stat(argv[2], &st) != 0; i++) usleep(10000);
        puts("done");
        return 0;
    }
    if (!strcmp(mode, "sigint")) {
        signal(SIGINT, on_int);
        up();
        for (int i = 0; i < 2000 && !ints; i++) usleep(10000);
        usleep(300000);
        printf("sigint %d\n", (int)ints);
        return ints ? 42 : 0;
    }
    if (!strcmp(mode, "sleep") && argc > 2) {
        up();
        sleep((unsigned)atoi(argv[2]));
        return 0;
    }
    fprintf(stderr, "wrapped: unknown mode %s\n", mode);
    return 2;
}
