/* Little-endian loads and stores for the byte formats (wire records,
 * frame headers, image headers): a memcpy and a byte-order conversion
 * compile to one load or store (byte-at-a-time loops did not, and cost a
 * device round trip half its time). */
#ifndef CUC_BASE_BYTES_H
#define CUC_BASE_BYTES_H

#include <endian.h>
#include <stdint.h>
#include <string.h>

static inline void cuc__put16(uint8_t *p, uint16_t v) { v = htole16(v); memcpy(p, &v, 2); }
static inline void cuc__put32(uint8_t *p, uint32_t v) { v = htole32(v); memcpy(p, &v, 4); }
static inline void cuc__put64(uint8_t *p, uint64_t v) { v = htole64(v); memcpy(p, &v, 8); }
static inline uint16_t cuc__get16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return le16toh(v); }
static inline uint32_t cuc__get32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return le32toh(v); }
static inline uint64_t cuc__get64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return le64toh(v); }

/* 1 if the n bytes at p are all zero. */
static inline int cuc__all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return 0;
    return 1;
}

#endif
