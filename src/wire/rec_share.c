/* The records of detached messages and of the share point's protocol
 * (docs/wire-format.md, "Detached messages"):
 *   share    (176 bytes) point id[16], boot id[16], token[16], reserved
 *            u32, path_len u32, path[120] zero-padded: record 0 of
 *            detached bytes;
 *   held     type u16, version u16, nfds u32, len u32, reserved u32, then
 *            the len bytes of the payload of a record with fds, which the
 *            share point keeps;
 *   claim    token[16], flags u32, reserved u32: an importer takes (or
 *            gives back) a hold's leases;
 *   confirm  token[16], status i32, reserved u32: the share point's answer. */
#include "wire/records.h"
#include "wire/msg_impl.h"
#include "base/error.h"

#include <string.h>

_Static_assert(CUC__SHARE_PAYLOAD == 176u, "update the share shape in record_types.h");
_Static_assert(CUC__HELD_HDR + CUC__HELD_INNER_MAX == 16u + CUC__VMM_PAYLOAD_MAX,
               "a held record holds the longest record with fds (a vmm record)");

#define PATH_OFF 56u
#define PATH_ROOM (CUC__SHARE_PAYLOAD - PATH_OFF)

int cuc__share_rec_write(const struct cuc_share_record *r, uint8_t p[CUC__SHARE_PAYLOAD])
{
    size_t n = strnlen(r->path, sizeof(r->path));

    if (n == 0 || n > CUC_SHARE_PATH_MAX)
        return cuc__seterr(CUC_E_INVALID, "a share point path of %zu bytes (1..%u)", n,
                           CUC_SHARE_PATH_MAX);
    memset(p, 0, CUC__SHARE_PAYLOAD);
    memcpy(p, r->point, 16);
    memcpy(p + 16, r->boot_id, 16);
    memcpy(p + 32, r->token, 16);
    cuc__put32(p + 52, (uint32_t)n);
    memcpy(p + PATH_OFF, r->path, n);
    return 0;
}

int cuc__share_rec_put(cuc_msg *m, const struct cuc_share_record *r)
{
    uint8_t p[CUC__SHARE_PAYLOAD];
    int rc = cuc__share_rec_write(r, p);

    return rc ? rc : cuc__msg_add_record(m, CUC_RECORD_SHARE, CUC_RECORD_SHARE_VERSION, p,
                                         sizeof(p), NULL, 0);
}

int cuc_msg_read_share(const cuc_msg *m, size_t index, struct cuc_share_record *out)
{
    struct cuc__record r;
    uint32_t n;
    int rc;

    if (!m || !out)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_read_share: NULL argument");
    rc = cuc__msg_record_fixed(m, index, CUC_RECORD_SHARE, CUC__SHARE_PAYLOAD, 0, &r);
    if (rc)
        return rc;
    n = cuc__get32(r.payload + 52);
    if (n == 0 || n > CUC_SHARE_PATH_MAX)
        return cuc__badmsg("share record %zu: path length %u (payload offset 52) is not "
                           "1..%u", index, n, CUC_SHARE_PATH_MAX);
    if (memchr(r.payload + PATH_OFF, 0, n) || r.payload[PATH_OFF] != '/')
        return cuc__badmsg("share record %zu: the path (payload offset %u) is not an "
                           "absolute path of %u bytes without a NUL", index, PATH_OFF, n);
    if (!cuc__all_zero(r.payload + PATH_OFF + n, PATH_ROOM - n))
        return cuc__badmsg("share record %zu: bytes after the path (payload offset %u) "
                           "are not zero", index, PATH_OFF + n);
    memcpy(out->point, r.payload, 16);
    memcpy(out->boot_id, r.payload + 16, 16);
    memcpy(out->token, r.payload + 32, 16);
    memcpy(out->path, r.payload + PATH_OFF, n);
    out->path[n] = '\0';
    return 0;
}

int cuc__held_rec_put(cuc_msg *m, const struct cuc_held_record *h)
{
    uint8_t head[CUC__HELD_HDR];

    cuc__put16(head, (uint16_t)h->type);
    cuc__put16(head + 2, (uint16_t)h->version);
    cuc__put32(head + 4, (uint32_t)h->nfds);
    cuc__put32(head + 8, (uint32_t)h->len);
    cuc__put32(head + 12, 0);
    return cuc__msg_add_record_tail(m, CUC_RECORD_HELD, CUC_RECORD_HELD_VERSION, head,
                                    sizeof(head), h->payload, (uint32_t)h->len);
}

int cuc_msg_read_held(const cuc_msg *m, size_t index, struct cuc_held_record *out)
{
    const struct cuc__rec_shape *s;
    struct cuc__record r;
    uint32_t type, ver, nfds, len;
    int rc;

    if (!m || !out)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_read_held: NULL argument");
    rc = cuc__msg_record_of(m, index, CUC_RECORD_HELD, &r);
    if (rc)
        return rc;
    type = cuc__get16(r.payload);
    ver = cuc__get16(r.payload + 2);
    nfds = cuc__get32(r.payload + 4);
    len = cuc__get32(r.payload + 8);
    s = cuc__rec_shape_of(type);
    if (!s || s->min_fds == 0)
        return cuc__badmsg("held record %zu: type %u (payload offset 0) is no record "
                           "type that carries fds", index, type);
    if (ver == 0 || ver > s->version)
        return cuc__seterr(ver ? CUC_E_VERSION : CUC_E_BADMSG, "held record %zu: %s "
                           "record version %u (payload offset 2) is not 1..%u", index,
                           cuc_record_type_name((int)type), ver, s->version);
    if (len != r.len - CUC__HELD_HDR || len < s->min_len || len > s->max_len ||
        len % s->multiple)
        return cuc__badmsg("held record %zu: a %s payload of %u bytes (payload offset "
                           "8) in a held record of %u", index,
                           cuc_record_type_name((int)type), len, r.len);
    if (nfds < s->min_fds || nfds > s->max_fds)
        return cuc__badmsg("held record %zu: %u fds (payload offset 4) for a %s record "
                           "(%u..%u)", index, nfds, cuc_record_type_name((int)type),
                           s->min_fds, s->max_fds);
    if (s->rsv_len && !cuc__all_zero(r.payload + CUC__HELD_HDR + s->rsv_off, s->rsv_len))
        return cuc__badmsg("held record %zu: the %s record's reserved bytes %u..%u are "
                           "not zero", index, cuc_record_type_name((int)type), s->rsv_off,
                           s->rsv_off + s->rsv_len - 1);
    out->type = (int)type;
    out->version = ver;
    out->nfds = nfds;
    out->payload = r.payload + CUC__HELD_HDR;
    out->len = len;
    return 0;
}

static int token_rec_put(cuc_msg *m, uint16_t type, uint16_t version,
                         const uint8_t token[16], uint32_t word)
{
    uint8_t p[CUC__CLAIM_PAYLOAD];

    memcpy(p, token, 16);
    cuc__put32(p + 16, word);
    cuc__put32(p + 20, 0);
    return cuc__msg_add_record(m, type, version, p, sizeof(p), NULL, 0);
}

static int token_rec_read(const cuc_msg *m, size_t index, unsigned type, uint8_t token[16],
                          uint32_t *word)
{
    struct cuc__record r;
    int rc = cuc__msg_record_fixed(m, index, type, CUC__CLAIM_PAYLOAD, 0, &r);

    if (rc)
        return rc;
    memcpy(token, r.payload, 16);
    *word = cuc__get32(r.payload + 16);
    return 0;
}

int cuc__claim_rec_put(cuc_msg *m, const uint8_t token[16], uint32_t flags)
{
    return token_rec_put(m, CUC_RECORD_CLAIM, CUC_RECORD_CLAIM_VERSION, token, flags);
}

int cuc__claim_rec_read(const cuc_msg *m, size_t index, uint8_t token[16], uint32_t *flags)
{
    int rc = token_rec_read(m, index, CUC_RECORD_CLAIM, token, flags);

    if (!rc && (*flags & ~(uint32_t)CUC__CLAIM_FLAGS))
        rc = cuc__badmsg("claim record %zu: flags 0x%x (payload offset 16) has bits "
                         "this cucore does not define", index, *flags);
    if (!rc && (*flags & CUC__CLAIM_FETCH) && (*flags & CUC__CLAIM_GIVE_BACK))
        rc = cuc__badmsg("claim record %zu: a claim both fetches and gives back", index);
    return rc;
}

int cuc__confirm_rec_put(cuc_msg *m, const uint8_t token[16], int status)
{
    return token_rec_put(m, CUC_RECORD_CONFIRM, CUC_RECORD_CONFIRM_VERSION, token,
                         (uint32_t)status);
}

int cuc__confirm_rec_read(const cuc_msg *m, size_t index, uint8_t token[16], int *status)
{
    uint32_t word;
    int rc = token_rec_read(m, index, CUC_RECORD_CONFIRM, token, &word);

    if (rc)
        return rc;
    *status = (int)word;
    if (*status > 0 || strcmp(cuc_errname(*status), "CUC_E_UNKNOWN") == 0)
        return cuc__badmsg("confirm record %zu: status %d (payload offset 16) is not 0 "
                           "or a CUC_E_* code", index, *status);
    return 0;
}
