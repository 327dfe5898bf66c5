/* A reproducible byte pattern (xorshift64 of a seed), for the tests that
 * fill memory in one process and check it in another. */
#ifndef CUC_TEST_PATTERN_H
#define CUC_TEST_PATTERN_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

/* n bytes of the pattern of seed. */
static inline void test_pattern(uint64_t seed, void *buf, size_t n)
{
    uint8_t *p = buf;
    uint64_t x = seed ? seed : 0x9e3779b97f4a7c15ull;

    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        p[i] = (uint8_t)(x >> 24);
    }
}

/* 1 if the n bytes at got are the pattern of seed. */
static inline int test_pattern_is(uint64_t seed, const void *got, size_t n)
{
    uint8_t *want = malloc(n ? n : 1);
    int same;

    CHECK(want != NULL);
    test_pattern(seed, want, n);
    same = memcmp(want, got, n) == 0;
    free(want);
    return same;
}

#endif
