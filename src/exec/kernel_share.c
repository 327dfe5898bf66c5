/* Kernels in messages: a kernel travels as its image, kind, name and
 * SHA-256 (wire/rec_kernel.c); the receiver checks the image (hash, then
 * shape) and loads it through kernel.c's cache, where an image already
 * loaded proves its hash by its bytes. */
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

/* A record's image the cache does not have: its hash and shape checked. */
static int check_new_image(const struct cuc_kernel_record *rec, size_t index)
{
    uint8_t hash[CUC__SHA256_LEN];
    char why[256], hex[2 * CUC__SHA256_LEN + 1];
    size_t len = rec->image_len;

    cuc__sha256(rec->image, rec->image_len, hash);
    if (memcmp(hash, rec->hash, sizeof(hash))) {
        cuc__hex(rec->hash, sizeof(rec->hash), hex);
        return cuc__seterr(CUC_E_BADMSG, "kernel record %zu (\"%.256s\"): the %zu image "
                           "bytes do not hash to the record's sha256 %s", index,
                           rec->name, rec->image_len, hex);
    }
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

int cuc_msg_get_kernel(const cuc_msg *m, size_t index, cuc_kernel **kernel)
{
    struct cuc_kernel_record rec;
    int rc;

    if (!m || !kernel)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_get_kernel: NULL argument");
    rc = cuc_msg_read_kernel(m, index, &rec);
    if (rc)
        return rc;
    /* Sent again: the bytes equal a cached image's, which proves the hash
     * and passed the image checks when it was first loaded. */
    if (!cuc__kernel_cache_has(rec.kind, rec.image, rec.image_len, rec.hash)) {
        rc = check_new_image(&rec, index);
        if (rc)
            return rc;
    }
    return cuc__kernel_load_checked(rec.kind, rec.image, rec.image_len, rec.hash,
                                    rec.name, kernel);
}
