/* One program for the gate's contract (tests/gate): N misaligned 8-byte read-modify-writes in
 * touch(), then what argv[2] asks:
 *   exit:S     exit with status S             signal:N   die of signal N
 *   rmdir:DIR  remove DIR (an output's folder) bin        write bytes 0..255 N times to stdout
 *   term       fault until SIGTERM; its handler prints and the program exits 42
 *   kill       SIGKILL itself right after the N accesses                                       */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t termed;
static void on_term(int sig) { (void)sig; termed = 1; }

__attribute__((noinline)) void touch(char *buf, long n) {
    for (long i = 0; i < n; i++) {
        int64_t *p = (int64_t *)(buf + 1); /* misaligned */
        __asm__ volatile("" : : "r"(p) : "memory");
        (*p)++;
    }
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1;
    const char *what = argc > 2 ? argv[2] : "exit:0";
    char *buf = calloc(1, 64);
    if (strcmp(what, "term") == 0) {
        signal(SIGTERM, on_term);
        printf("gate: waiting\n");
        fflush(stdout);
        while (!termed) { touch(buf, 1); usleep(1000); }
        printf("gate: got SIGTERM\n");
        return 42;
    }
    touch(buf, n);
    if (strncmp(what, "exit:", 5) == 0) { printf("gate: %ld\n", n); return atoi(what + 5); }
    if (strncmp(what, "signal:", 7) == 0) { fflush(stdout); raise(atoi(what + 7)); return 99; }
    if (strncmp(what, "rmdir:", 6) == 0) { return rmdir(what + 6) == 0 ? 0 : 3; }
    if (strcmp(what, "kill") == 0) { raise(SIGKILL); }
    if (strcmp(what, "bin") == 0) {
        unsigned char b[256];
        for (int i = 0; i < 256; i++) b[i] = (unsigned char)i;
        for (long i = 0; i < n; i++) fwrite(b, 1, sizeof b, stdout);
        return 0;
    }
    return 2;
}
