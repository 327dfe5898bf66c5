/* Kernels by reference: the set of images the peer holds, fed by its
 * kernel held records, and the substitution of kernel ref records for
 * those kernels when a message is sent. */
#include "channel/kernel_refs.h"
#include "base/error.h"
#include "wire/records.h"

#include <stdlib.h>
#include <string.h>

struct held {
    struct cuc__hnode node;
    struct cuc__kernel_id id;
};

static int same_image(const struct cuc__hnode *n, const void *key)
{
    const struct held *h = CUC_CONTAINER_OF(n, struct held, node);
    const struct cuc__kernel_id *id = key;

    return h->id.kind == id->kind && h->id.image_len == id->image_len &&
           !memcmp(h->id.hash, id->hash, sizeof(id->hash));
}

static uint64_t image_hash(const struct cuc__kernel_id *id)
{
    return cuc__hash_bytes(id->hash, sizeof(id->hash));
}

void cuc__kernel_refs_init(struct cuc__kernel_refs *k)
{
    pthread_mutex_init(&k->lock, NULL);
    k->held = (struct cuc__htab){NULL, 0, 0};
}

static void free_one(struct cuc__hnode *n, void *arg)
{
    (void)arg;
    free(CUC_CONTAINER_OF(n, struct held, node));
}

void cuc__kernel_refs_free(struct cuc__kernel_refs *k)
{
    cuc__htab_each(&k->held, free_one, NULL);
    cuc__htab_free(&k->held);
    pthread_mutex_destroy(&k->lock);
}

/* Notes one image (k->lock held); past the limit or out of memory it is
 * not noted, which only costs the image on the wire. */
static void note_locked(struct cuc__kernel_refs *k, const struct cuc__kernel_id *id)
{
    uint64_t hash = image_hash(id);
    struct held *h;

    if (k->held.count >= CUC__KERNEL_REFS_MAX ||
        cuc__htab_find(&k->held, hash, same_image, id))
        return;
    h = malloc(sizeof(*h));
    if (!h)
        return;
    h->id = *id;
    h->node.hash = hash;
    if (cuc__htab_insert(&k->held, &h->node))
        free(h);
}

int cuc__kernel_refs_take_held(struct cuc__kernel_refs *k, cuc_msg *m)
{
    size_t n = cuc_msg_record_count(m), nheld;
    struct cuc__kernel_id id;
    int rc = 0;

    if (!cuc__msg_has_type(m, CUC_RECORD_KERNEL_HELD))
        return 0;
    nheld = cuc__msg_count_type(m, CUC_RECORD_KERNEL_HELD);
    if (nheld != n || cuc_msg_fd_count(m))
        rc = cuc__seterr(CUC_E_BADMSG, "the peer sent a message mixing %zu kernel held "
                         "records with %zu other records and %zu fds: they travel alone "
                         "(message dropped)", nheld, n - nheld, cuc_msg_fd_count(m));
    for (size_t i = 0; !rc && i < n; i++)
        rc = cuc__kernel_held_rec_read(m, i, &id);
    for (size_t i = 0; !rc && i < n; i++) {
        cuc__kernel_held_rec_read(m, i, &id);
        pthread_mutex_lock(&k->lock);
        note_locked(k, &id);
        pthread_mutex_unlock(&k->lock);
    }
    cuc_msg_destroy(m);
    return rc ? rc : 1;
}

static int peer_holds(void *ctx, const struct cuc__kernel_id *id)
{
    struct cuc__kernel_refs *k = ctx;

    return cuc__htab_find(&k->held, image_hash(id), same_image, id) != NULL;
}

int cuc__kernel_refs_for_send(struct cuc__kernel_refs *k, const cuc_msg *m,
                              const cuc_msg **sent)
{
    cuc_msg *c = NULL;
    int rc = 0;

    *sent = m;
    pthread_mutex_lock(&k->lock);
    if (k->held.count && cuc__msg_has_type(m, CUC_RECORD_KERNEL))
        rc = cuc__msg_kernel_refs(m, peer_holds, k, &c);
    pthread_mutex_unlock(&k->lock);
    if (c)
        *sent = c;
    return rc;
}

size_t cuc__kernel_refs_count(struct cuc__kernel_refs *k)
{
    size_t n;

    pthread_mutex_lock(&k->lock);
    n = k->held.count;
    pthread_mutex_unlock(&k->lock);
    return n;
}
