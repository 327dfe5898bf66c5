/* The lingering links of this process: a list of lease tables, read by one
 * pumping thread at a time. */
#include "lease/linger.h"
#include "base/array.h"
#include "base/error.h"
#include "os/clock.h"

#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdlib.h>

struct entry {
    struct cuc__leases *leases; /* a reference */
    int broken;                 /* the link's receive failed for good */
};

static pthread_mutex_t list_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t pump_lock = PTHREAD_MUTEX_INITIALIZER;
static struct entry *entries; /* list_lock; only the pumper removes */
static size_t nentries, cap;
static _Atomic size_t count; /* nentries, for a check without the lock */

size_t cuc__linger_count(void)
{
    return atomic_load(&count);
}

/* Reads everything that has arrived on e's link (pump_lock held). A
 * message other than a release is dropped: nobody can receive it now. */
static void drain(struct entry *e)
{
    struct cuc__leases *l = e->leases;

    for (;;) {
        cuc_msg *m;
        int rc = cuc__link_recv(l->link, 0, &m);

        if (rc == CUC_E_TIMEOUT)
            return;
        if (rc == CUC_E_PEER_CLOSED) {
            cuc__leases_end_all(l, CUC__LEASE_PEER_CLOSED);
            return;
        }
        if (rc == CUC_E_BADMSG || rc == CUC_E_VERSION || rc == CUC_E_LIMIT) {
            if (l->link->recv_err.status) {
                /* A framing error: releases can no longer be told apart,
                 * so the leases stay (the memory is kept, never freed
                 * under the peer) until this process exits. */
                e->broken = 1;
                return;
            }
            continue; /* one bad message, dropped */
        }
        if (rc) {
            e->broken = 1;
            return;
        }
        if (cuc__leases_take_release(l, m) == 0)
            cuc_msg_destroy(m);
    }
}

/* 1 when e needs no more reading: its leases ended. */
static int done(const struct entry *e)
{
    return cuc__leases_count(e->leases) == 0;
}

int cuc__linger_add(struct cuc__leases *l)
{
    struct entry e = {l, 0};
    struct cuc__err_saved saved;
    int rc;

    /* What has arrived is read first (no other thread reads this link
     * now: its channel is being destroyed, and the pump knows it not):
     * releases end their leases, and a peer that has gone ends them all,
     * so that a channel destroyed after its peer died keeps neither its
     * socket nor the frees its leases defer until some later wait or
     * pump. The caller's error stays its own. */
    cuc__err_save(&saved, 0);
    drain(&e);
    cuc__err_restore(&saved);
    if (!e.broken && done(&e))
        return 0;
    pthread_mutex_lock(&list_lock);
    rc = cuc__array_reserve((void **)&entries, &cap, nentries + 1, sizeof(*entries), 0,
                            NULL);
    if (!rc) {
        cuc__leases_ref(l);
        entries[nentries++] = e;
        atomic_store(&count, nentries);
    }
    pthread_mutex_unlock(&list_lock);
    return rc;
}

/* Waits for input on the links not broken (pump_lock held); fills ready. */
static void wait_input(size_t n, int timeout_ms, char *ready)
{
    struct pollfd stack[32], *p = n <= 32 ? stack : calloc(n, sizeof(*p));
    int64_t deadline = cuc__deadline(timeout_ms);
    size_t i;

    for (i = 0; i < n; i++)
        ready[i] = 1;
    if (!p)
        return; /* out of memory: look at every link without waiting */
    pthread_mutex_lock(&list_lock);
    for (i = 0; i < n; i++)
        p[i] = (struct pollfd){entries[i].broken ? -1 : entries[i].leases->link->fd,
                               POLLIN, 0};
    pthread_mutex_unlock(&list_lock);
    for (;;) {
        int r = poll(p, n, cuc__remaining(deadline));
        if (r >= 0 || errno != EINTR)
            break;
    }
    for (i = 0; i < n; i++)
        ready[i] = p[i].revents != 0;
    if (p != stack)
        free(p);
}

/* Takes the finished entries out of the list (pump_lock held). */
static void sweep(void)
{
    struct cuc__leases *gone[64];
    size_t i = 0, k;

    do {
        k = 0;
        pthread_mutex_lock(&list_lock);
        while (i < nentries && k < CUC_ARRAY_LEN(gone)) {
            if (!entries[i].broken && done(&entries[i])) {
                gone[k++] = entries[i].leases;
                entries[i] = entries[--nentries];
            } else {
                i++;
            }
        }
        atomic_store(&count, nentries);
        if (nentries == 0) { /* nothing left for a leak checker to see */
            free(entries);
            entries = NULL;
            cap = 0;
        }
        pthread_mutex_unlock(&list_lock);
        for (size_t j = 0; j < k; j++)
            cuc__leases_unref(gone[j]); /* the last one closes the socket */
    } while (k == CUC_ARRAY_LEN(gone));
}

int cuc__linger_pump(int timeout_ms)
{
    char stack[32], *ready;
    size_t n;

    if (atomic_load(&count) == 0)
        return CUC_E_NOT_FOUND;
    if (pthread_mutex_trylock(&pump_lock) != 0)
        return CUC_E_BUSY;
    pthread_mutex_lock(&list_lock);
    n = nentries; /* entries added meanwhile wait for the next pump */
    pthread_mutex_unlock(&list_lock);
    ready = n <= sizeof(stack) ? stack : malloc(n);
    if (ready) {
        wait_input(n, timeout_ms, ready);
        for (size_t i = 0; i < n; i++) {
            struct entry *e;
            pthread_mutex_lock(&list_lock);
            e = &entries[i]; /* stable: only this pumper moves entries */
            pthread_mutex_unlock(&list_lock);
            if (ready[i] && !e->broken)
                drain(e);
        }
        if (ready != stack)
            free(ready);
    }
    sweep();
    pthread_mutex_unlock(&pump_lock);
    return 0;
}
