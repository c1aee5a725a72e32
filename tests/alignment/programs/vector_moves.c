/* vector_moves: unaligned SSE / AVX / AVX-512 moves at several misalignments, plus one
 * misaligned 8-byte integer load and an x87 tword load as controls. Whether the vector moves
 * raise #AC depends on the CPU (AMD Zen 3: 16-byte moves checked at 16; the Intel Xeon these
 * machines report: never), so the expected counts come from the acprobe's table, not from a
 * table written here. Usage: vector_moves REPS; prints which vector units ran. */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>

static _Alignas(64) char buf[256];
static _Alignas(64) volatile __m128i sink128;
static _Alignas(64) volatile __m256i sink256;
static _Alignas(64) volatile __m512i sink512;
static volatile long sink64;
static volatile long double sink80;

/* One pass: each line is one load or store whose address mod 64 is in the comment. */
__attribute__((noinline)) static void sse_moves(char *b) {
    sink128 = _mm_loadu_si128((const __m128i *)(b + 1));   /* movdqu load at 1 */
    sink128 = _mm_loadu_si128((const __m128i *)(b + 4));   /* at 4 */
    sink128 = _mm_loadu_si128((const __m128i *)(b + 8));   /* at 8 */
    sink128 = _mm_loadu_si128((const __m128i *)(b + 16));  /* at 16: aligned */
    _mm_storeu_si128((__m128i *)(b + 8), sink128);         /* movdqu store at 8 */
    _mm_storeu_ps((float *)(b + 4), _mm_castsi128_ps(sink128)); /* movups store at 4 */
    sink64 = *(volatile long *)(b + 4);                    /* 8-byte integer at 4: #AC everywhere */
    sink80 = *(volatile long double *)(b + 4);             /* fld tword at 4: #AC everywhere */
}

__attribute__((noinline, target("avx2"))) static void avx_moves(char *b) {
    sink128 = _mm_loadu_si128((const __m128i *)(b + 8));      /* vmovdqu xmm at 8 */
    sink256 = _mm256_loadu_si256((const __m256i *)(b + 8));   /* vmovdqu ymm at 8 */
    sink256 = _mm256_loadu_si256((const __m256i *)(b + 16));  /* at 16 */
    _mm256_storeu_si256((__m256i *)(b + 8), sink256);         /* store at 8 */
}

__attribute__((noinline, target("avx512f"))) static void avx512_moves(char *b) {
    sink512 = _mm512_loadu_si512((const void *)(b + 8));   /* vmovdqu64 zmm at 8 */
    sink512 = _mm512_loadu_si512((const void *)(b + 32));  /* at 32 */
    _mm512_storeu_si512((void *)(b + 16), sink512);        /* store at 16 */
}

__attribute__((noinline)) void moves(char *b, int avx, int avx512) {
    sse_moves(b);
    if (avx)
        avx_moves(b);
    if (avx512)
        avx512_moves(b);
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 10;
    __builtin_cpu_init();
    int avx = __builtin_cpu_supports("avx2"), avx512 = __builtin_cpu_supports("avx512f");
    for (int i = 0; i < reps; i++)
        moves(buf + 64, avx, avx512);
    printf("vector_moves: reps=%d avx2=%d avx512f=%d\n", reps, avx != 0, avx512 != 0);
    return 0;
}
