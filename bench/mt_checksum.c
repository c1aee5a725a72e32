/* mt_checksum.c - a multi-threaded real-world-style workload for bench/realworld.py (issue 34):
 * a log of variable-length records packed back to back (a 2-byte length, a 4-byte id, an 8-byte
 * timestamp, then the payload), as a network capture or a write-ahead log stores them, so every
 * field after the first record sits at whatever offset the previous payloads left. T threads
 * each walk their share of the records R times, reading the header fields through pointers
 * (misaligned loads, as memcpy-free parsers do) and mixing the payload into a 64-bit checksum
 * eight bytes at a time. Prints the checksum: the same whatever the thread count or the tool.
 *
 *   mt_checksum THREADS RECORDS ROUNDS
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct job {
    const uint8_t *log;
    const size_t *start; /* offset of each record */
    size_t first, last, rounds;
    uint64_t sum;
};

static uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v * 0x9E3779B97F4A7C15ull;
    return (h << 27 | h >> 37) * 0xC2B2AE3D27D4EB4Full;
}

static void *work(void *arg)
{
    struct job *j = arg;
    uint64_t h = 0;
    for (size_t r = 0; r < j->rounds; r++) {
        for (size_t i = j->first; i < j->last; i++) {
            const uint8_t *rec = j->log + j->start[i];
            uint16_t len = *(const uint16_t *)rec;          /* misaligned when the offset is odd */
            uint32_t id = *(const uint32_t *)(rec + 2);
            uint64_t stamp = *(const uint64_t *)(rec + 6);
            h = mix(h, id ^ stamp);
            const uint8_t *p = rec + 14;
            size_t k = 0;
            for (; k + 8 <= len; k += 8)
                h = mix(h, *(const uint64_t *)(p + k));
            for (; k < len; k++)
                h = mix(h, p[k]);
        }
    }
    j->sum = h;
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: mt_checksum THREADS RECORDS ROUNDS\n");
        return 2;
    }
    size_t threads = strtoul(argv[1], NULL, 10), records = strtoul(argv[2], NULL, 10);
    size_t rounds = strtoul(argv[3], NULL, 10);
    if (threads < 1 || threads > 64 || records < threads)
        return 2;
    size_t *start = malloc(records * sizeof *start);
    uint8_t *log = malloc(records * (14 + 64));
    if (!start || !log)
        return 1;
    size_t off = 0;
    uint32_t seed = 12345;
    for (size_t i = 0; i < records; i++) {
        seed = seed * 1103515245u + 12345u;
        uint16_t len = (uint16_t)(17 + (seed >> 16) % 47); /* 17..63 bytes: offsets drift */
        uint32_t id = (uint32_t)i;
        uint64_t stamp = 1700000000000ull + i * 37;
        start[i] = off;
        memcpy(log + off, &len, 2);
        memcpy(log + off + 2, &id, 4);
        memcpy(log + off + 6, &stamp, 8);
        for (uint16_t k = 0; k < len; k++)
            log[off + 14 + k] = (uint8_t)(seed >> (k % 24));
        off += 14 + len;
    }
    pthread_t tid[64];
    struct job jobs[64];
    for (size_t t = 0; t < threads; t++) {
        jobs[t] = (struct job){log, start, records * t / threads, records * (t + 1) / threads, rounds, 0};
        if (pthread_create(&tid[t], NULL, work, &jobs[t]) != 0)
            return 1;
    }
    uint64_t total = 0;
    for (size_t t = 0; t < threads; t++) {
        pthread_join(tid[t], NULL);
        total ^= jobs[t].sum + t;
    }
    printf("mt_checksum: %zu records x %zu rounds, checksum %016llx\n", records, rounds, (unsigned long long)total);
    free(log);
    free(start);
    return 0;
}
