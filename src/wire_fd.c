/* Plain fd records: an fd with a caller's tag, for anything that is not a
 * CUDA object (a socket, a memfd, an eventfd). */
#include "internal.h"
#include "wire.h"

#include <string.h>

int cuc_msg_add_fd(cuc_msg *m, int fd, uint32_t tag)
{
    uint8_t payload[8];

    if (!m || fd < 0)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_add_fd: %s", m ? "negative fd" : "msg is NULL");
    cuc__put32(payload, tag);
    cuc__put32(payload + 4, 0);
    return cuc__msg_add_record(m, CUC_RECORD_FD, 1, payload, sizeof(payload), &fd, 1);
}

int cuc_msg_take_fd(cuc_msg *m, size_t index, int *fd, uint32_t *tag)
{
    struct cuc__record r;
    int rc, got;

    if (!fd)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_take_fd: fd is NULL");
    rc = cuc__msg_record(m, index, &r);
    if (rc)
        return rc;
    if (r.type != CUC_RECORD_FD)
        return cuc__seterr(CUC_E_INVALID, "record %zu is not an fd (type %u)", index, r.type);
    rc = cuc__msg_take_record_fd(m, index, 0, &got);
    if (rc)
        return rc;
    *fd = got;
    if (tag)
        *tag = cuc__get32(r.payload);
    return 0;
}
