/* Kernel records: the image bytes, their kind and SHA-256, and the symbol.
 * Payload: kind u32, name_len u32 (with the NUL, 2..4096), image_len u32,
 * reserved u32 = 0 (checked by the decoder: its shape in record_types.h),
 * sha256[32], name[name_len], image[image_len]; the payload is exactly
 * 48 + name_len + image_len bytes. */
#include "wire/records.h"
#include "base/error.h"

#include <stdlib.h>
#include <string.h>

/* the shape in record_types.h: 48 bytes, a name of at least one character
 * and its NUL, an image of at least one byte */
_Static_assert(CUC__KERNEL_FIXED + 2u + 1u == 51u, "update the kernel shape in record_types.h");

int cuc__kernel_rec_put(cuc_msg *m, const struct cuc_kernel_record *r)
{
    size_t name_len = strlen(r->name) + 1, total;
    uint8_t *p;
    int rc;

    total = CUC__KERNEL_FIXED + name_len + r->image_len;
    if (total > CUC__WIRE_PAYLOAD_MAX)
        return cuc__seterr(CUC_E_LIMIT, "kernel \"%.256s\": its %zu-byte image does not "
                           "fit a message (at most %u bytes)", r->name, r->image_len,
                           CUC_MSG_MAX_BYTES);
    p = malloc(total);
    if (!p)
        return cuc__seterr(CUC_E_NOMEM, "out of memory for a %zu-byte kernel record", total);
    cuc__put32(p, (uint32_t)r->kind);
    cuc__put32(p + 4, (uint32_t)name_len);
    cuc__put32(p + 8, (uint32_t)r->image_len);
    cuc__put32(p + 12, 0);
    memcpy(p + 16, r->hash, CUC_KERNEL_HASH_LEN);
    memcpy(p + CUC__KERNEL_FIXED, r->name, name_len);
    memcpy(p + CUC__KERNEL_FIXED + name_len, r->image, r->image_len);
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

/* The fixed fields: kind, lengths, reserved. */
static int check_fixed(const struct cuc__record *r, size_t index, uint32_t *name_len,
                       uint32_t *image_len)
{
    uint32_t kind;

    if (r->len < CUC__KERNEL_FIXED)
        return bad(index, "payload length", r->len, r->len);
    kind = cuc__get32(r->payload);
    *name_len = cuc__get32(r->payload + 4);
    *image_len = cuc__get32(r->payload + 8);
    if (kind < CUC_IMAGE_CUBIN || kind > CUC_IMAGE_FATBIN)
        return cuc__seterr(CUC_E_BADMSG, "kernel record %zu: image kind %u (payload "
                           "offset 0) is not cubin (1), PTX (2) or fatbin (3)", index, kind);
    if (*name_len < 2 || *name_len > CUC_KERNEL_NAME_MAX + 1)
        return cuc__seterr(CUC_E_BADMSG, "kernel record %zu: name length %u (payload "
                           "offset 4) is outside 2..%d (with the NUL)", index, *name_len,
                           CUC_KERNEL_NAME_MAX + 1);
    if (*name_len > r->len - CUC__KERNEL_FIXED)
        return bad(index, "name length", *name_len, r->len);
    if (*image_len == 0 || *image_len > r->len - CUC__KERNEL_FIXED - *name_len)
        return bad(index, "image length", *image_len, r->len);
    if ((uint64_t)CUC__KERNEL_FIXED + *name_len + *image_len != r->len)
        return cuc__seterr(CUC_E_BADMSG, "kernel record %zu: 48 + name %u + image %u "
                           "bytes is not its %u-byte payload", index, *name_len,
                           *image_len, r->len);
    return 0;
}

int cuc_msg_read_kernel(const cuc_msg *m, size_t index, struct cuc_kernel_record *out)
{
    uint32_t name_len = 0, image_len = 0;
    struct cuc__record r;
    const char *name;
    int rc;

    if (!m || !out)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_read_kernel: NULL argument");
    rc = cuc__msg_record_of(m, index, CUC_RECORD_KERNEL, &r);
    if (!rc)
        rc = check_fixed(&r, index, &name_len, &image_len);
    if (rc)
        return rc;
    name = (const char *)r.payload + CUC__KERNEL_FIXED;
    if (name[name_len - 1] != '\0' || memchr(name, '\0', name_len - 1))
        return cuc__seterr(CUC_E_BADMSG, "kernel record %zu: the %u-byte name is not "
                           "one NUL-terminated string", index, name_len);
    out->kind = (int)cuc__get32(r.payload);
    memcpy(out->hash, r.payload + 16, CUC_KERNEL_HASH_LEN);
    out->name = name;
    out->image = r.payload + CUC__KERNEL_FIXED + name_len;
    out->image_len = image_len;
    return 0;
}
