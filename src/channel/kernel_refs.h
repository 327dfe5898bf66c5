/* Kernels by reference (kernel_refs.c): per channel, the images the peer
 * said it holds (kernel held records, which it sends when it loads a
 * kernel record received on the channel and keeps the image for the
 * channel's life). A later send of such a kernel carries a kernel ref
 * record (hash and name) instead of the image. */
#ifndef CUC_CHANNEL_KERNEL_REFS_H
#define CUC_CHANNEL_KERNEL_REFS_H

#include <pthread.h>

#include "cucore/msg.h"
#include "base/htab.h"

/* Most images a channel remembers the peer holds; held records past it
 * are ignored (those kernels keep travelling with their image). */
#define CUC__KERNEL_REFS_MAX 4096u

struct cuc__kernel_refs {
    pthread_mutex_t lock;
    struct cuc__htab held; /* struct held (kernel_refs.c) by SHA-256 */
};

void cuc__kernel_refs_init(struct cuc__kernel_refs *k);
void cuc__kernel_refs_free(struct cuc__kernel_refs *k);

/* A received message: 1 if it held kernel held records (consumed: the
 * images noted, m destroyed), 0 if it held none (m untouched), or
 * CUC_E_BADMSG (m destroyed) when held records come with other records or
 * fds, or one names no valid image. */
int cuc__kernel_refs_take_held(struct cuc__kernel_refs *k, cuc_msg *m);

/* What to send for m: *sent is m itself, or a new message (the caller
 * destroys it) in which each kernel the peer holds is a kernel ref. */
int cuc__kernel_refs_for_send(struct cuc__kernel_refs *k, const cuc_msg *m,
                              const cuc_msg **sent);

/* How many images the peer said it holds (for tests and the CLI). */
size_t cuc__kernel_refs_count(struct cuc__kernel_refs *k);

#endif
