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

/* The part a kernel record and a kernel ref share: the fixed fields and
 * the name with its NUL (name_len bytes, checked by the caller). */
static void put_head(uint8_t *p, const struct cuc_kernel_record *r, size_t name_len)
{
    cuc__put32(p, (uint32_t)r->kind);
    cuc__put32(p + 4, (uint32_t)name_len);
    cuc__put32(p + 8, (uint32_t)r->image_len);
    cuc__put32(p + 12, 0);
    memcpy(p + 16, r->hash, CUC_KERNEL_HASH_LEN);
    memcpy(p + CUC__KERNEL_FIXED, r->name, name_len);
}

int cuc__kernel_rec_put(cuc_msg *m, const struct cuc_kernel_record *r)
{
    size_t name_len = strlen(r->name) + 1, total;
    uint8_t head[CUC__KERNEL_FIXED + CUC_KERNEL_NAME_MAX + 1];

    total = CUC__KERNEL_FIXED + name_len + r->image_len;
    if (total > CUC__WIRE_PAYLOAD_MAX)
        return cuc__seterr(CUC_E_LIMIT, "kernel \"%.256s\": its %zu-byte image does not "
                           "fit a message (at most %u bytes)", r->name, r->image_len,
                           CUC_MSG_MAX_BYTES);
    if (name_len < 2 || name_len > CUC_KERNEL_NAME_MAX + 1)
        return cuc__seterr(CUC_E_INVALID, "kernel record: a name of %zu bytes",
                           name_len - 1);
    put_head(head, r, name_len);
    /* the image straight from the caller's bytes: one copy, not two */
    return cuc__msg_add_record_tail(m, CUC_RECORD_KERNEL, CUC_RECORD_KERNEL_VERSION, head,
                                    (uint32_t)(CUC__KERNEL_FIXED + name_len), r->image,
                                    (uint32_t)r->image_len);
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

/* A record's name: name_len bytes at name, one NUL-terminated string. */
static int check_name(const char *name, uint32_t name_len, size_t index, const char *what)
{
    if (name[name_len - 1] != '\0' || memchr(name, '\0', name_len - 1))
        return cuc__seterr(CUC_E_BADMSG, "%s record %zu: the %u-byte name is not "
                           "one NUL-terminated string", what, index, name_len);
    return 0;
}

/* A kernel ref's fields: kind, name_len, image_len (reserved: the decoder's). */
static int read_ref(const struct cuc__record *r, size_t index, struct cuc_kernel_record *out)
{
    uint32_t kind = cuc__get32(r->payload), name_len = cuc__get32(r->payload + 4);
    uint32_t image_len = cuc__get32(r->payload + 8);
    const char *name = (const char *)r->payload + CUC__KERNEL_FIXED;
    int rc;

    if (kind < CUC_IMAGE_CUBIN || kind > CUC_IMAGE_FATBIN)
        return cuc__seterr(CUC_E_BADMSG, "kernel ref record %zu: image kind %u (payload "
                           "offset 0) is not cubin (1), PTX (2) or fatbin (3)", index, kind);
    if (name_len < 2 || name_len > CUC_KERNEL_NAME_MAX + 1 ||
        (uint64_t)CUC__KERNEL_FIXED + name_len != r->len)
        return cuc__seterr(CUC_E_BADMSG, "kernel ref record %zu: name length %u (payload "
                           "offset 4) is not its %u-byte payload less 48, within 2..%d",
                           index, name_len, r->len, CUC_KERNEL_NAME_MAX + 1);
    if (image_len == 0 || image_len > CUC__WIRE_PAYLOAD_MAX)
        return cuc__seterr(CUC_E_BADMSG, "kernel ref record %zu: image length %u (payload "
                           "offset 8) is outside 1..%u", index, image_len,
                           CUC__WIRE_PAYLOAD_MAX);
    rc = check_name(name, name_len, index, "kernel ref");
    if (rc)
        return rc;
    out->kind = (int)kind;
    memcpy(out->hash, r->payload + 16, CUC_KERNEL_HASH_LEN);
    out->name = name;
    out->image = NULL;
    out->image_len = image_len;
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
    if (cuc__msg_record(m, index, &r) == 0 && r.type == CUC_RECORD_KERNEL_REF)
        return read_ref(&r, index, out);
    rc = cuc__msg_record_of(m, index, CUC_RECORD_KERNEL, &r);
    if (!rc)
        rc = check_fixed(&r, index, &name_len, &image_len);
    if (rc)
        return rc;
    name = (const char *)r.payload + CUC__KERNEL_FIXED;
    rc = check_name(name, name_len, index, "kernel");
    if (rc)
        return rc;
    out->kind = (int)cuc__get32(r.payload);
    memcpy(out->hash, r.payload + 16, CUC_KERNEL_HASH_LEN);
    out->name = name;
    out->image = r.payload + CUC__KERNEL_FIXED + name_len;
    out->image_len = image_len;
    return 0;
}

/* ---- kernel refs and kernel held records (the channel's) ---- */

int cuc__kernel_ref_rec_put(cuc_msg *m, const struct cuc_kernel_record *r)
{
    size_t name_len = strlen(r->name) + 1;
    uint8_t p[CUC__KERNEL_FIXED + CUC_KERNEL_NAME_MAX + 1];

    if (name_len < 2 || name_len > CUC_KERNEL_NAME_MAX + 1)
        return cuc__seterr(CUC_E_INVALID, "kernel ref: a name of %zu bytes", name_len - 1);
    put_head(p, r, name_len);
    return cuc__msg_add_record(m, CUC_RECORD_KERNEL_REF, CUC_RECORD_KERNEL_REF_VERSION, p,
                               (uint32_t)(CUC__KERNEL_FIXED + name_len), NULL, 0);
}

int cuc__kernel_held_rec_put(cuc_msg *m, const struct cuc__kernel_id *id)
{
    uint8_t p[CUC__KERNEL_HELD_PAYLOAD];

    cuc__put32(p, (uint32_t)id->kind);
    cuc__put32(p + 4, id->image_len);
    memcpy(p + 8, id->hash, CUC_KERNEL_HASH_LEN);
    return cuc__msg_add_record(m, CUC_RECORD_KERNEL_HELD, CUC_RECORD_KERNEL_HELD_VERSION, p,
                               sizeof(p), NULL, 0);
}

int cuc__kernel_held_rec_read(const cuc_msg *m, size_t index, struct cuc__kernel_id *id)
{
    struct cuc__record r;
    uint32_t kind, image_len;
    int rc = cuc__msg_record_fixed(m, index, CUC_RECORD_KERNEL_HELD,
                                   CUC__KERNEL_HELD_PAYLOAD, 0, &r);

    if (rc)
        return rc;
    kind = cuc__get32(r.payload);
    image_len = cuc__get32(r.payload + 4);
    if (kind < CUC_IMAGE_CUBIN || kind > CUC_IMAGE_FATBIN || image_len == 0 ||
        image_len > CUC__WIRE_PAYLOAD_MAX)
        return cuc__seterr(CUC_E_BADMSG, "kernel held record %zu: image kind %u, %u bytes: "
                           "a kind 1..3 and 1..%u bytes expected", index, kind, image_len,
                           CUC__WIRE_PAYLOAD_MAX);
    id->kind = (int)kind;
    id->image_len = image_len;
    memcpy(id->hash, r.payload + 8, CUC_KERNEL_HASH_LEN);
    return 0;
}

size_t cuc__msg_count_type(const cuc_msg *m, unsigned type)
{
    size_t n = cuc_msg_record_count(m), k = 0;
    int t = 0;

    for (size_t i = 0; i < n; i++)
        k += cuc_msg_record_type(m, i, &t) == 0 && (unsigned)t == type;
    return k;
}

/* One record of m appended to out as it is (its fds duplicated), or as a
 * ref when it is a kernel the peer holds. */
static int copy_one(cuc_msg *out, const cuc_msg *m, size_t i,
                    int (*held)(void *, const struct cuc__kernel_id *), void *ctx, int *refs)
{
    struct cuc_kernel_record k;
    struct cuc__kernel_id id;
    struct cuc__record r;
    int rc = cuc__msg_record(m, i, &r);

    if (rc)
        return rc;
    if (r.type == CUC_RECORD_KERNEL && cuc_msg_read_kernel(m, i, &k) == 0) {
        id.kind = k.kind;
        id.image_len = (uint32_t)k.image_len;
        memcpy(id.hash, k.hash, CUC_KERNEL_HASH_LEN);
        if (held(ctx, &id)) {
            ++*refs;
            return cuc__kernel_ref_rec_put(out, &k);
        }
    }
    return cuc__msg_add_record(out, r.type, r.version, r.payload, r.len, r.fds, r.nfds);
}

int cuc__msg_kernel_refs(const cuc_msg *m, int (*held)(void *, const struct cuc__kernel_id *),
                         void *ctx, cuc_msg **out)
{
    size_t n = cuc_msg_record_count(m);
    cuc_msg *c;
    int rc, refs = 0;

    *out = NULL;
    rc = cuc_msg_create(&c);
    for (size_t i = 0; !rc && i < n; i++)
        rc = copy_one(c, m, i, held, ctx, &refs);
    if (rc || refs == 0) {
        cuc_msg_destroy(c);
        return rc;
    }
    *out = c;
    return 0;
}
