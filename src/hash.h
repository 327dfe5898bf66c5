/* Content hashing (hash.c): SHA-256, used to key the kernel image cache and
 * to check kernel records. */
#ifndef CUC_HASH_H
#define CUC_HASH_H

#include <stddef.h>
#include <stdint.h>

#define CUC__SHA256_LEN 32

void cuc__sha256(const void *data, size_t len, uint8_t out[CUC__SHA256_LEN]);

/* Lower-case hex of n bytes into out (2n + 1 bytes with the NUL). */
void cuc__hex(const uint8_t *bytes, size_t n, char *out);

#endif
