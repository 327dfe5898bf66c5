/* SHA-256 (sha256.c, sha256_shani.c): the content hash that keys the kernel
 * image cache and checks kernel records. */
#ifndef CUC_BASE_SHA256_H
#define CUC_BASE_SHA256_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define CUC__SHA256_LEN 32

void cuc__sha256(const void *data, size_t len, uint8_t out[CUC__SHA256_LEN]);
/* The same with the portable compression function only, whatever the CPU
 * (for the tests that compare the two). */
void cuc__sha256_portable(const void *data, size_t len, uint8_t out[CUC__SHA256_LEN]);

/* A SHA-256 computed beside other work (a kernel image hashed while the
 * driver loads it): cuc__sha256_start hashes on a thread of its own when
 * the input is at least CUC__SHA256_THREAD_MIN bytes and a thread can be
 * had, else at once on the caller's; out is valid after cuc__sha256_finish,
 * which every started job must reach. data must stay unchanged until then. */
#define CUC__SHA256_THREAD_MIN (128u * 1024u)

struct cuc__sha256_job {
    const void *data;
    size_t len;
    uint8_t out[CUC__SHA256_LEN];
    pthread_t thread;
    int threaded;
};

void cuc__sha256_start(struct cuc__sha256_job *j, const void *data, size_t len);
void cuc__sha256_finish(struct cuc__sha256_job *j);

/* sha256_shani.c: nblocks 64-byte blocks through the SHA extensions; only
 * where cuc__sha256_have_shani() says the CPU has them. */
void cuc__sha256_blocks_shani(uint32_t h[8], const uint8_t *p, size_t nblocks,
                              const uint32_t k[64]);
int cuc__sha256_have_shani(void);

#endif
