/* Channels (channel.c): the public object over a link (frame/link.h) and a
 * lease table (lease/lease.h), and the queue of messages that a pump
 * received for cuc_channel_recv(). listen.c makes channels from socket
 * paths; lease_wait.c waits for leases to end, pumping a channel. */
#ifndef CUC_CHANNEL_CHANNEL_H
#define CUC_CHANNEL_CHANNEL_H

#include <pthread.h>

#include "cucore/channel.h"
#include "channel/kernel_refs.h"
#include "frame/link.h"
#include "lease/lease.h"

struct cuc__qnode {
    cuc_msg *m;
    struct cuc__qnode *next;
};

struct cuc_channel {
    struct cuc__link *link;     /* a reference */
    struct cuc__leases *leases; /* a reference */
    /* One thread at a time reads the link (reading), with no lock held
     * while it waits; the others wait on cond with their own deadlines.
     * lock guards reading, taken and the queue. */
    pthread_mutex_t lock;
    pthread_cond_t cond; /* the reader is done, or it took a message */
    int reading;
    unsigned long taken; /* messages the readers took (pump waiters look) */
    struct cuc__qnode *qhead, *qtail;
    size_t qlen;
    struct cuc__kernel_refs krefs; /* images the peer holds */
};

/* A channel over a connected SEQPACKET socket (taken: closed on failure). */
int cuc__channel_wrap(int fd, cuc_channel **out);

#endif
