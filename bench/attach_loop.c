/* attach_loop.c - for bench/attach.py: one thread making misaligned 8-byte read-modify-writes
 * until DIR/stop exists (checked every 4096 iterations), then printing how many it made.
 *   attach_loop DIR
 * Each iteration is one fault while a tracer has AC set, none otherwise. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

__attribute__((noipa)) static void bump(volatile int64_t *p) { __asm__ volatile("incq %0" : "+m"(*p)); }

int main(int argc, char **argv) {
  char stopfile[4096];
  snprintf(stopfile, sizeof stopfile, "%s/stop", argc > 1 ? argv[1] : ".");
  char *buf = malloc(64);
  volatile int64_t *p = (volatile int64_t *)(buf + 3);
  printf("ready\n");
  fflush(stdout);
  unsigned long n = 0;
  for (;;) {
    bump(p);
    if ((++n & 4095) == 0 && access(stopfile, F_OK) == 0) break;
  }
  printf("iterations %lu\n", n);
  return 0;
}
