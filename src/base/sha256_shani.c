/* The SHA-256 compression function on the x86 SHA extensions (SHA-NI):
 * about ten times the portable code's speed, which is what a receiver pays
 * to check a kernel image it has not seen. sha256.c uses it when the CPU has
 * the extensions; the two must agree on every input (test_kernel). The
 * state is kept in the instructions' ABEF / CDGH lane order between
 * blocks; the message schedule is computed four words at a time. */
#include "base/sha256.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>

#define SHANI __attribute__((target("sha,sse4.1,ssse3")))

SHANI void cuc__sha256_blocks_shani(uint32_t h[8], const uint8_t *p, size_t nblocks,
                                    const uint32_t k[64])
{
    const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bll, 0x0405060700010203ll);
    __m128i s0, s1, t, abef, cdgh, w[4];

    t = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)&h[0]), 0xb1); /* CDAB */
    s1 = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)&h[4]), 0x1b); /* EFGH */
    s0 = _mm_alignr_epi8(t, s1, 8);                                        /* ABEF */
    s1 = _mm_blend_epi16(s1, t, 0xf0);                                     /* CDGH */
    for (; nblocks; nblocks--, p += 64) {
        abef = s0;
        cdgh = s1;
        for (int g = 0; g < 4; g++)
            w[g] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 16 * g)), bswap);
        for (int g = 0; g < 16; g++) {
            __m128i m = _mm_add_epi32(w[g & 3], _mm_loadu_si128((const __m128i *)&k[4 * g]));
            s1 = _mm_sha256rnds2_epu32(s1, s0, m);
            s0 = _mm_sha256rnds2_epu32(s0, s1, _mm_shuffle_epi32(m, 0x0e));
            if (g < 12) { /* w[g + 4] replaces w[g], no longer needed */
                t = _mm_add_epi32(_mm_sha256msg1_epu32(w[g & 3], w[(g + 1) & 3]),
                                  _mm_alignr_epi8(w[(g + 3) & 3], w[(g + 2) & 3], 4));
                w[g & 3] = _mm_sha256msg2_epu32(t, w[(g + 3) & 3]);
            }
        }
        s0 = _mm_add_epi32(s0, abef);
        s1 = _mm_add_epi32(s1, cdgh);
    }
    t = _mm_shuffle_epi32(s0, 0x1b);        /* FEBA */
    s1 = _mm_shuffle_epi32(s1, 0xb1);       /* DCHG */
    s0 = _mm_blend_epi16(t, s1, 0xf0);      /* DCBA */
    s1 = _mm_alignr_epi8(s1, t, 8);         /* HGFE */
    _mm_storeu_si128((__m128i *)&h[0], s0);
    _mm_storeu_si128((__m128i *)&h[4], s1);
}

/* CPUID directly: clang 14's __builtin_cpu_supports does not know "sha".
 * Leaf 7 EBX bit 29 is SHA; leaf 1 ECX bits 19 and 9 are SSE4.1 and SSSE3. */
int cuc__sha256_have_shani(void)
{
    unsigned a, b, c, d;

    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 19)) || !(c & (1u << 9)))
        return 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return 0;
    return (b >> 29) & 1;
}

#else

void cuc__sha256_blocks_shani(uint32_t h[8], const uint8_t *p, size_t nblocks,
                              const uint32_t k[64])
{
    (void)h, (void)p, (void)nblocks, (void)k;
}

int cuc__sha256_have_shani(void)
{
    return 0;
}

#endif
