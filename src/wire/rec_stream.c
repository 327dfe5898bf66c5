/* Stream records: a default stream as its kind and its device's UUID.
 * Payload (24 bytes): kind u32 (1 legacy, 2 per-thread), reserved u32 = 0
 * (checked by the decoder: its shape in record_types.h), device UUID[16]. */
#include "wire/records.h"
#include "base/error.h"

#include <string.h>

_Static_assert(CUC__STREAM_PAYLOAD == 24u, "update the stream shape in record_types.h");

int cuc__stream_rec_put(cuc_msg *m, const struct cuc_stream_record *r)
{
    uint8_t p[CUC__STREAM_PAYLOAD];

    cuc__put32(p, (uint32_t)r->kind);
    cuc__put32(p + 4, 0);
    memcpy(p + 8, r->device.bytes, 16);
    return cuc__msg_add_record(m, CUC_RECORD_STREAM, CUC_RECORD_STREAM_VERSION, p,
                               sizeof(p), NULL, 0);
}

int cuc_msg_read_stream(const cuc_msg *m, size_t index, struct cuc_stream_record *out)
{
    struct cuc__record r;
    uint32_t kind;
    int rc;

    if (!m || !out)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_read_stream: NULL argument");
    rc = cuc__msg_record_fixed(m, index, CUC_RECORD_STREAM, CUC__STREAM_PAYLOAD, 0, &r);
    if (rc)
        return rc;
    kind = cuc__get32(r.payload);
    if (kind != CUC_STREAM_LEGACY_DEFAULT && kind != CUC_STREAM_PER_THREAD_DEFAULT)
        return cuc__seterr(CUC_E_BADMSG, "stream record %zu: kind %u (payload offset "
                           "0) is neither legacy (1) nor per-thread (2)%s", index, kind,
                           kind == 0 ? "; the \"default\" stream is never sent as 0" : "");
    out->kind = (int)kind;
    memcpy(out->device.bytes, r.payload + 8, 16);
    return 0;
}
