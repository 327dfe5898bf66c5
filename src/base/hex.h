/* Lower-case hex of raw bytes (hex.c), for the identities named in error
 * messages and by the tools: pool ids, SHA-256 digests. */
#ifndef CUC_BASE_HEX_H
#define CUC_BASE_HEX_H

#include <stddef.h>
#include <stdint.h>

/* Writes 2n digits and a NUL to out. */
void cuc__hex(const uint8_t *bytes, size_t n, char *out);

/* A 16-byte identity (a pool id) as 32 digits, returned by value so that
 * it can stand in a printf argument list:
 *     cuc__seterr(..., "pool %s ...", cuc__id16_hex(id).s); */
struct cuc__hex16 {
    char s[33];
};
struct cuc__hex16 cuc__id16_hex(const uint8_t id[16]);

#endif
