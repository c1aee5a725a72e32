/* step_outside.c - THREADS threads call f0..f3, g_rip, g_call, g_jmp and g_jrcxz N times each, all at once, while one
 * more thread spins OUTSIDE every scope and never makes a system call. Each call makes exactly one
 * misaligned 8-byte read. f3 calls `outside` (never in scope), so a call leaves the scope and
 * comes back to a return site. g_rip starts with a RIP-relative load, g_call with a call (rel32)
 * out of every scope, g_jmp with a short jump (rel8), g_jrcxz with a jrcxz (rel8, no longer
 * form) (hand-written, so the entry instruction is known). At the end main prints how many times the
 * spinning thread was switched out voluntarily (a ptrace stop is one): with the step engine it
 * must stay near zero whatever the scope, as the program alone. It also prints where a block
 * malloc gets from mmap landed: where it does without the step engine (which maps its own
 * page out of the way).
 * Expected: THREADS * N at the misaligned read of each function.
 * Usage: step_outside THREADS N */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static int n;
_Alignas(64) static unsigned char slots[64][64];
static volatile int stop_spinning;
static volatile uint64_t spins;
static volatile pid_t spinner_tid;

uint64_t g_rip(unsigned char *p);
uint64_t g_jmp(unsigned char *p);
uint64_t g_call(unsigned char *p);
uint64_t g_jrcxz(unsigned char *p);
uint64_t rip_data = 7;
__asm__(".text\n"
        ".globl g_rip\n.type g_rip, @function\n"
        "g_rip:\n"
        "    movq rip_data(%rip), %rax\n"  /* the entry: RIP-relative */
        "    addq 3(%rdi), %rax\n"         /* misaligned 8-byte read */
        "    ret\n"
        ".size g_rip, .-g_rip\n"
        ".globl g_jmp\n.type g_jmp, @function\n"
        "g_jmp:\n"
        "    jmp 1f\n"                     /* the entry: a relative jump */
        "1:  movq 5(%rdi), %rax\n"         /* misaligned 8-byte read */
        "    ret\n"
        ".size g_jmp, .-g_jmp\n"
        ".globl g_call\n.type g_call, @function\n"
        "g_call:\n"
        "    call g_leaf\n"               /* the entry: a relative call, out of the scope */
        "    addq 1(%rdi), %rax\n"        /* misaligned 8-byte read */
        "    ret\n"
        ".size g_call, .-g_call\n"
        ".type g_leaf, @function\n"
        "g_leaf:\n"
        "    movq %rdi, %rax\n"
        "    ret\n"
        ".size g_leaf, .-g_leaf\n"
        ".globl g_jrcxz\n.type g_jrcxz, @function\n"
        "g_jrcxz:\n"
        "    jrcxz 1f\n"                  /* the entry: taken or not, on to the next line */
        "1:  movq 6(%rdi), %rax\n"        /* misaligned 8-byte read */
        "    ret\n"
        ".size g_jrcxz, .-g_jrcxz\n");

__attribute__((noipa)) uint64_t outside(uint64_t x) { return x * 3 + 1; }
__attribute__((noipa)) uint64_t f0(unsigned char *p) { return *(volatile uint64_t *)(p + 1); }
__attribute__((noipa)) uint64_t f1(unsigned char *p) { return *(volatile uint64_t *)(p + 3); }
__attribute__((noipa)) uint64_t f2(unsigned char *p) { return *(volatile uint64_t *)(p + 5); }
__attribute__((noipa)) uint64_t f3(unsigned char *p) { return outside(*(volatile uint64_t *)(p + 7)) + 1; }

static void *worker(void *arg)
{
    unsigned char *mine = slots[(uintptr_t)arg];
    uint64_t sum = 0;
    for (int i = 0; i < n; i++)
        sum += f0(mine) + f1(mine) + f2(mine) + f3(mine) + g_rip(mine) + g_call(mine) + g_jmp(mine) + g_jrcxz(mine);
    return (void *)(uintptr_t)sum;
}

static void *spinner(void *arg)
{
    (void)arg;
    spinner_tid = (pid_t)syscall(SYS_gettid);
    while (!stop_spinning)  /* no system call in here */
        spins++;
    return NULL;
}

static long voluntary_switches(pid_t tid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/self/task/%d/status", (int)tid);
    FILE *f = fopen(path, "r");
    long v = -1;
    if (!f)
        return -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "voluntary_ctxt_switches: %ld", &v) == 1)
            break;
    fclose(f);
    return v;
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 8;
    n = argc > 2 ? atoi(argv[2]) : 1000;
    if (threads < 1 || threads > 64)
        return 2;
    pthread_t spin, t[64];
    pthread_create(&spin, NULL, spinner, NULL);
    while (!spinner_tid || !spins)
        ;
    long before = voluntary_switches(spinner_tid);
    for (int i = 0; i < threads; i++)
        pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)i);
    uint64_t total = 0;
    for (int i = 0; i < threads; i++) {
        void *r;
        pthread_join(t[i], &r);
        total += (uintptr_t)r;
    }
    long after = voluntary_switches(spinner_tid);
    stop_spinning = 1;
    pthread_join(spin, NULL);
    void *block = malloc(1 << 20);
    printf("step_outside: threads=%d n=%d total=%llu block=%p\n", threads, n, (unsigned long long)total, block);
    free(block);
    printf("spinner voluntary switches: %ld\n", after - before);
    return 0;
}
