/* Kernel records: the image bytes, their kind and SHA-256, and the symbol.
 * Payload: kind u32, name_len u32 (with the NUL, 2..4096), image_len u32,
 * reserved u32 = 0 (checked by the decoder: its shape in wire.h),
 * sha256[32], name[name_len], image[image_len]; the payload is exactly
 * 48 + name_len + image_len bytes. */
#include "objects.h"

#include <stdlib.h>
#include <string.h>

/* the shape in wire.h: 48 bytes, a name of at least one character and its
 * NUL, an image of at least one byte */
_Static_assert(CUC__KERNEL_FIXED + 2u + 1u == 51u, "update the kernel shape in wire.h");

int cuc_msg_add_kernel(cuc_msg *m, const cuc_kernel *k)
{
    size_t name_len, image_len, total;
    const void *image;
    uint8_t *p;
    int rc;

    if (!m || !k)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_add_kernel: NULL argument");
    image = cuc_kernel_image(k, &image_len);
    name_len = strlen(k->name) + 1;
    total = CUC__KERNEL_FIXED + name_len + image_len;
    if (total > CUC_MSG_MAX_BYTES - CUC__WIRE_HDR - CUC__WIRE_REC_HDR)
        return cuc__seterr(CUC_E_LIMIT, "kernel \"%.256s\": its %zu-byte image does not "
                           "fit a message (at most %u bytes)", k->name, image_len,
                           CUC_MSG_MAX_BYTES);
    p = malloc(total);
    if (!p)
        return cuc__seterr(CUC_E_NOMEM, "out of memory for a %zu-byte kernel record", total);
    cuc__put32(p, (uint32_t)cuc_kernel_kind(k));
    cuc__put32(p + 4, (uint32_t)name_len);
    cuc__put32(p + 8, (uint32_t)image_len);
    cuc__put32(p + 12, 0);
    memcpy(p + 16, cuc_kernel_hash(k), CUC__SHA256_LEN);
    memcpy(p + CUC__KERNEL_FIXED, k->name, name_len);
    memcpy(p + CUC__KERNEL_FIXED + name_len, image, image_len);
    rc = cuc__msg_add_record(m, CUC_RECORD_KERNEL, CUC_RECORD_KERNEL_VERSION, p,
                             (uint32_t)total, NULL, 0);
    free(p);
    return rc;
}

static int bad(size_t index, const char *what, uint32_t v, uint32_t len)
{
    return cuc__seterr(CUC_E_BADMSG, "kernel record %zu: %s %u does not fit its "
                       "%u-byte payload", index, what, v, len);
}

int cuc__kernel_rec_parse(const cuc_msg *m, size_t index, struct cuc__kernel_rec *out)
{
    struct cuc__record r;
    uint32_t kind, name_len, image_len;
    const char *name;
    int rc;

    rc = cuc__msg_record_of(m, index, CUC_RECORD_KERNEL, &r);
    if (rc)
        return rc;
    if (r.len < CUC__KERNEL_FIXED)
        return bad(index, "payload length", r.len, r.len);
    kind = cuc__get32(r.payload);
    name_len = cuc__get32(r.payload + 4);
    image_len = cuc__get32(r.payload + 8);
    if (kind < CUC_IMAGE_CUBIN || kind > CUC_IMAGE_FATBIN)
        return cuc__seterr(CUC_E_BADMSG, "kernel record %zu: image kind %u (payload "
                           "offset 0) is not cubin (1), PTX (2) or fatbin (3)", index, kind);
    if (name_len < 2 || name_len > CUC_KERNEL_NAME_MAX + 1)
        return cuc__seterr(CUC_E_BADMSG, "kernel record %zu: name length %u (payload "
                           "offset 4) is outside 2..%d (with the NUL)", index, name_len,
                           CUC_KERNEL_NAME_MAX + 1);
    if (name_len > r.len - CUC__KERNEL_FIXED)
        return bad(index, "name length", name_len, r.len);
    if (image_len == 0 || image_len > r.len - CUC__KERNEL_FIXED - name_len)
        return bad(index, "image length", image_len, r.len);
    if ((uint64_t)CUC__KERNEL_FIXED + name_len + image_len != r.len)
        return cuc__seterr(CUC_E_BADMSG, "kernel record %zu: 48 + name %u + image %u "
                           "bytes is not its %u-byte payload", index, name_len,
                           image_len, r.len);
    name = (const char *)r.payload + CUC__KERNEL_FIXED;
    if (name[name_len - 1] != '\0' || memchr(name, '\0', name_len - 1))
        return cuc__seterr(CUC_E_BADMSG, "kernel record %zu: the %u-byte name is not "
                           "one NUL-terminated string", index, name_len);
    out->kind = kind;
    memcpy(out->hash, r.payload + 16, CUC__SHA256_LEN);
    out->name = name;
    out->name_len = name_len - 1;
    out->image = r.payload + CUC__KERNEL_FIXED + name_len;
    out->image_len = image_len;
    return 0;
}

int cuc_msg_get_kernel(const cuc_msg *m, size_t index, cuc_kernel **kernel)
{
    struct cuc__kernel_rec rec;
    uint8_t hash[CUC__SHA256_LEN];
    char why[256], hex[2 * CUC__SHA256_LEN + 1];
    size_t len;
    int rc;

    if (!m || !kernel)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_get_kernel: NULL argument");
    rc = cuc__kernel_rec_parse(m, index, &rec);
    if (rc)
        return rc;
    /* Sent again: the bytes equal a cached image's, which proves the hash
     * and passed the image checks when it was first loaded. */
    if (cuc__kernel_cache_has((int)rec.kind, rec.image, rec.image_len, rec.hash))
        return cuc__kernel_load_checked((int)rec.kind, rec.image, rec.image_len, rec.hash,
                                        rec.name, kernel);
    cuc__sha256(rec.image, rec.image_len, hash);
    if (memcmp(hash, rec.hash, sizeof(hash))) {
        cuc__hex(rec.hash, sizeof(rec.hash), hex);
        return cuc__seterr(CUC_E_BADMSG, "kernel record %zu (\"%.256s\"): the %u image "
                           "bytes do not hash to the record's sha256 %s", index,
                           rec.name, rec.image_len, hex);
    }
    len = rec.image_len;
    if (cuc__image_check((int)rec.kind, rec.image, &len, why, sizeof(why)))
        return cuc__seterr(CUC_E_BADMSG, "kernel record %zu (\"%.256s\"): the %s image "
                           "is malformed: %s", index, rec.name,
                           cuc__image_kind_name((int)rec.kind), why);
    if (len != rec.image_len)
        return cuc__seterr(CUC_E_BADMSG, "kernel record %zu (\"%.256s\"): the PTX "
                           "image ends in NUL bytes, which a sender never includes",
                           index, rec.name);
    return cuc__kernel_load_checked((int)rec.kind, rec.image, len, hash, rec.name, kernel);
}
