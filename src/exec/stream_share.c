/* Streams in messages: a default stream travels as its kind and its
 * device's UUID (wire/rec_stream.c); a created stream never travels. */
#include "exec/stream.h"
#include "wire/records.h"

int cuc_msg_add_stream(cuc_msg *m, const cuc_stream *s)
{
    struct cuc_stream_record rec;

    if (!m || !s)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_add_stream: NULL argument");
    if (s->kind == CUC_STREAM_CREATED)
        return cuc__seterr(CUC_E_NOT_SERIALIZABLE,
                           "a created stream (on device %s) is a handle valid only in "
                           "its process and cannot be sent: send an IPC event instead "
                           "(cuc_event_create with CUC_EVENT_IPC, record it on this "
                           "stream, cuc_msg_add_event) and have the receiver create "
                           "its own stream (cuc_stream_create) and wait on the event "
                           "(cuc_stream_wait_event)", s->dev->uuid_str);
    /* The kind of the object is already resolved: "default" was turned into
     * legacy or per-thread by cuc_stream_default, so 0 never goes out. */
    rec.kind = s->kind;
    rec.device = s->dev->uuid;
    return cuc__stream_rec_put(m, &rec);
}

int cuc_msg_get_stream(const cuc_msg *m, size_t index, cuc_stream **stream)
{
    struct cuc_stream_record rec;
    cuc_device *dev;
    int rc;

    if (!m || !stream)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_get_stream: NULL argument");
    rc = cuc_msg_read_stream(m, index, &rec);
    if (!rc)
        rc = cuc_device_get_by_uuid(&rec.device, &dev);
    if (rc)
        return rc;
    if (rec.kind == CUC_STREAM_LEGACY_DEFAULT)
        return cuc_stream_legacy(dev, stream);
    return cuc_stream_per_thread(dev, stream);
}
