/* Plain fd records: an fd with the caller's tag, for what is not a CUDA
 * object (a socket, a memfd, an eventfd). Payload: tag u32, reserved u32
 * (0, checked by the decoder: the shape in record_types.h). No object
 * stands behind them, so the public add and take live here. */
#include "wire/records.h"
#include "base/error.h"

int cuc_msg_add_fd(cuc_msg *m, int fd, uint32_t tag)
{
    uint8_t payload[8];

    if (!m)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_add_fd: msg is NULL");
    if (fd < 0)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_add_fd: fd %d is negative", fd);
    cuc__put32(payload, tag);
    cuc__put32(payload + 4, 0);
    return cuc__msg_add_record(m, CUC_RECORD_FD, CUC_RECORD_FD_VERSION, payload,
                               sizeof(payload), &fd, 1);
}

int cuc_msg_take_fd(cuc_msg *m, size_t index, int *fd, uint32_t *tag)
{
    struct cuc__record r;
    int rc, got;

    if (!m || !fd)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_take_fd: NULL argument");
    rc = cuc__msg_record_fixed(m, index, CUC_RECORD_FD, 8, 1, &r);
    if (!rc)
        rc = cuc__msg_take_record_fd(m, index, 0, &got);
    if (rc)
        return rc;
    *fd = got;
    if (tag)
        *tag = cuc__get32(r.payload);
    return 0;
}
