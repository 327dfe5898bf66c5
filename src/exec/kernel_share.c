/* Kernels in messages: a kernel travels as its image, kind, name and
 * SHA-256 (wire/rec_kernel.c); the receiver checks the image's shape
 * before the driver sees it, its hash while the driver loads it (before
 * the cache keeps it), and loads it through kernel.c's cache, where the
 * hash of an image already loaded is its identity. A receiver on a
 * channel says it holds the image (a kernel held record back) and keeps it for the channel's
 * life; the channel then sends that kernel as a kernel ref record (hash
 * and name, no image), resolved here from the cache. */
#include "exec/kernel.h"
#include "exec/kernel_image.h"
#include "base/hex.h"
#include "wire/records.h"

#include <string.h>

int cuc_msg_add_kernel(cuc_msg *m, const cuc_kernel *k)
{
    struct cuc_kernel_record rec;

    if (!m || !k)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_add_kernel: NULL argument");
    rec.kind = (int)cuc_kernel_kind(k);
    memcpy(rec.hash, cuc_kernel_hash(k), CUC_KERNEL_HASH_LEN);
    rec.name = k->name;
    rec.image = cuc_kernel_image(k, &rec.image_len);
    return cuc__kernel_rec_put(m, &rec);
}

/* A record's image the cache does not have: its shape checked before the
 * driver sees it (its hash is checked during the load: kernel.c). */
static int check_new_image(const struct cuc_kernel_record *rec, size_t index)
{
    char why[256];
    size_t len = rec->image_len;

    if (cuc__image_check(rec->kind, rec->image, &len, why, sizeof(why)))
        return cuc__seterr(CUC_E_BADMSG, "kernel record %zu (\"%.256s\"): the %s image "
                           "is malformed: %s", index, rec->name,
                           cuc__image_kind_name(rec->kind), why);
    if (len != rec->image_len)
        return cuc__seterr(CUC_E_BADMSG, "kernel record %zu (\"%.256s\"): the PTX "
                           "image ends in NUL bytes, which a sender never includes",
                           index, rec->name);
    return 0;
}

static int bad_hash(const struct cuc_kernel_record *rec, size_t index)
{
    char hex[2 * CUC__SHA256_LEN + 1];

    cuc__hex(rec->hash, sizeof(rec->hash), hex);
    return cuc__seterr(CUC_E_BADMSG, "kernel record %zu (\"%.256s\"): the %zu image "
                       "bytes do not hash to the record's sha256 %s", index, rec->name,
                       rec->image_len, hex);
}

/* A reference to an image this process does not hold. */
static int not_held(const struct cuc_kernel_record *rec, size_t index)
{
    char hex[2 * CUC__SHA256_LEN + 1];

    cuc__hex(rec->hash, sizeof(rec->hash), hex);
    return cuc__seterr(CUC_E_NOT_FOUND, "kernel ref record %zu (\"%.256s\") names the "
                       "%zu-byte %s image sha256 %s, which this process has not loaded: "
                       "the sender may refer only to images this process said it holds "
                       "on that channel", index, rec->name, rec->image_len,
                       cuc__image_kind_name(rec->kind), hex);
}

/* Tells the channel m came on that this process holds k's image, kept
 * for the channel's life: once per image and channel. Best effort: a
 * peer that hears nothing sends the image again. */
static void say_held(const cuc_msg *m, const cuc_kernel *k)
{
    struct cuc__kernel_id id;
    cuc_msg *reply;
    void *lib;
    size_t len;

    if (!cuc__msg_origin(m))
        return;
    lib = cuc__kernel_lib_keep(k);
    if (cuc__msg_origin_keep(m, lib, cuc__kernel_lib_drop) != 0) {
        cuc__kernel_lib_drop(lib); /* kept already, or cannot be */
        return;
    }
    id.kind = (int)cuc_kernel_kind(k);
    cuc_kernel_image(k, &len);
    id.image_len = (uint32_t)len;
    memcpy(id.hash, cuc_kernel_hash(k), CUC_KERNEL_HASH_LEN);
    if (cuc_msg_create(&reply) == 0 && cuc__kernel_held_rec_put(reply, &id) == 0)
        (void)cuc__msg_origin_reply(m, reply);
    cuc_msg_destroy(reply);
}

int cuc_msg_get_kernel(const cuc_msg *m, size_t index, cuc_kernel **kernel)
{
    struct cuc_kernel_record rec;
    int rc;

    if (!m || !kernel)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_get_kernel: NULL argument");
    rc = cuc_msg_read_kernel(m, index, &rec);
    if (rc)
        return rc;
    /* The hash is the identity of a cached image (checked when it was
     * loaded): a hit reads none of the record's image bytes. */
    rc = cuc__kernel_load_checked(rec.kind, NULL, rec.image_len, rec.hash, rec.name,
                                  kernel);
    if (rc == 1 && !rec.image)
        return not_held(&rec, index);
    if (rc == 1) {
        rc = check_new_image(&rec, index);
        if (!rc)
            rc = cuc__kernel_load_claimed(rec.kind, rec.image, rec.image_len, rec.hash,
                                          rec.name, kernel);
        if (rc == 2)
            rc = bad_hash(&rec, index);
    }
    if (!rc && rec.image)
        say_held(m, *kernel);
    return rc;
}
