/* Stream records: a default stream as its kind and its device's UUID.
 * Payload (24 bytes): kind u32 (1 legacy, 2 per-thread), reserved u32 = 0
 * (checked by the decoder: its shape in wire.h), device UUID[16]. */
#include "objects.h"

#include <string.h>

_Static_assert(CUC__STREAM_PAYLOAD == 24u, "update the stream shape in wire.h");

int cuc_msg_add_stream(cuc_msg *m, const cuc_stream *s)
{
    uint8_t p[CUC__STREAM_PAYLOAD];

    if (!m || !s)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_add_stream: NULL argument");
    if (s->kind == CUC_STREAM_CREATED)
        return cuc__seterr(CUC_E_NOT_SERIALIZABLE,
                           "a created stream (on device %s) is a handle valid only in "
                           "its process and cannot be sent: send an IPC event instead "
                           "(cuc_event_create with CUC_EVENT_IPC, record it on this "
                           "stream, cuc_msg_add_event) and have the receiver create "
                           "its own stream (cuc_stream_create) and wait on the event "
                           "(cuc_stream_wait_event)", cuc_device_uuid_string(s->dev));
    /* The kind of the object is already resolved: "default" was turned into
     * legacy or per-thread by cuc_stream_default, so 0 never goes out. */
    cuc__put32(p, (uint32_t)s->kind);
    cuc__put32(p + 4, 0);
    memcpy(p + 8, cuc_device_uuid(s->dev)->bytes, 16);
    return cuc__msg_add_record(m, CUC_RECORD_STREAM, CUC_RECORD_STREAM_VERSION, p,
                               sizeof(p), NULL, 0);
}

int cuc__stream_rec_parse(const cuc_msg *m, size_t index, struct cuc__stream_rec *out)
{
    struct cuc__record r;
    uint32_t kind;
    int rc;

    rc = cuc__msg_record_of(m, index, CUC_RECORD_STREAM, &r);
    if (rc)
        return rc;
    if (r.len != CUC__STREAM_PAYLOAD)
        return cuc__seterr(CUC_E_BADMSG, "stream record %zu has a %u-byte payload, "
                           "not %u", index, r.len, CUC__STREAM_PAYLOAD);
    kind = cuc__get32(r.payload);
    if (kind != CUC_STREAM_LEGACY_DEFAULT && kind != CUC_STREAM_PER_THREAD_DEFAULT)
        return cuc__seterr(CUC_E_BADMSG, "stream record %zu: kind %u (payload offset "
                           "0) is neither legacy (1) nor per-thread (2)%s", index, kind,
                           kind == 0 ? "; the \"default\" stream is never sent as 0" : "");
    out->kind = kind;
    memcpy(out->uuid.bytes, r.payload + 8, 16);
    return 0;
}

int cuc_msg_get_stream(const cuc_msg *m, size_t index, cuc_stream **stream)
{
    struct cuc__stream_rec rec;
    cuc_device *dev;
    int rc;

    if (!m || !stream)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_get_stream: NULL argument");
    rc = cuc__stream_rec_parse(m, index, &rec);
    if (rc)
        return rc;
    rc = cuc_device_get_by_uuid(&rec.uuid, &dev);
    if (rc)
        return rc;
    if (rec.kind == CUC_STREAM_LEGACY_DEFAULT)
        return cuc_stream_legacy(dev, stream);
    return cuc_stream_per_thread(dev, stream);
}
