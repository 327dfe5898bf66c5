/* Refused records: a receiver dropped a message unread because it had no
 * room for its fds (RLIMIT_NOFILE). Payload: u32 seq (the first frame's
 * sequence number of the refused message), u32 reserved 0. */
#include "wire/records.h"
#include "base/error.h"

int cuc__refused_msg_build(uint32_t seq, cuc_msg **out)
{
    uint8_t payload[8];
    cuc_msg *m;
    int rc = cuc_msg_create(&m);

    if (rc)
        return rc;
    cuc__put32(payload, seq);
    cuc__put32(payload + 4, 0);
    rc = cuc__msg_add_record(m, CUC_RECORD_REFUSED, CUC_RECORD_REFUSED_VERSION, payload,
                             sizeof(payload), NULL, 0);
    if (rc) {
        cuc_msg_destroy(m);
        return rc;
    }
    *out = m;
    return 0;
}

size_t cuc__refused_rec_count(const cuc_msg *m)
{
    size_t n = cuc_msg_record_count(m), k = 0;
    int type = 0;

    if (!cuc__msg_has_type(m, CUC_RECORD_REFUSED)) /* O(1): most messages */
        return 0;
    for (size_t i = 0; i < n; i++)
        k += cuc_msg_record_type(m, i, &type) == 0 && type == CUC_RECORD_REFUSED;
    return k;
}

int cuc__refused_rec_read(const cuc_msg *m, size_t index, uint32_t *seq)
{
    struct cuc__record r;
    int rc = cuc__msg_record_of(m, index, CUC_RECORD_REFUSED, &r);

    if (rc)
        return rc;
    *seq = cuc__get32(r.payload);
    return 0;
}
