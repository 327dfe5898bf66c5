/* libFuzzer target: the message decoder (cuc__msg_decode) over hostile
 * bytes with real fds.
 *
 * Input: byte 0's low 4 bits = how many fds arrive with the message (dups
 * of /dev/null, so that every close really happens); the rest = the
 * message. A message that decodes must re-encode to the very same bytes
 * (the format is canonical), every record is then resolved or taken, and
 * after destroy every fd handed in must be closed. The decoder's quick
 * path and its checked path (cuc__msg_decode_checked) must give the same
 * status and, on success, the same message. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cucore.h"
#include "device/device.h"
#include "wire/records.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int null_fd = -1;

static void walk(cuc_msg *m)
{
    size_t i, n = cuc_msg_record_count(m);

    for (i = 0; i < n; i++) {
        struct cuc__record r;
        cuc_device *d;
        int type, fd;

        if (cuc_msg_record_type(m, i, &type) || cuc__msg_record(m, i, &r))
            abort();
        if (r.len && !r.payload)
            abort();
        if (type == CUC_RECORD_DEVICE) {
            if (cuc_msg_get_device(m, i, &d) == 0 &&
                memcmp(cuc_device_uuid(d)->bytes, r.payload, 16) != 0)
                abort();
        } else if (type == CUC_RECORD_FD) {
            if (cuc_msg_take_fd(m, i, &fd, NULL) != 0)
                abort();
            close(fd);
            if (cuc_msg_take_fd(m, i, &fd, NULL) != CUC_E_INVALID)
                abort();
        }
    }
}

static void check_canonical(const cuc_msg *m, const uint8_t *bytes, size_t len, size_t nfds)
{
    const int *fds;
    size_t elen, enfds;
    uint8_t *enc;

    if (cuc__msg_encode(m, &enc, &elen, &fds, &enfds) != 0)
        abort();
    if (elen != len || enfds != nfds || memcmp(enc, bytes, len) != 0)
        abort();
    free(enc);
}

/* The status of the checked decode of the same input (with fds of its
 * own); on success its encoding must be the quick decode's. */
static int decode_checked_same(const uint8_t *bytes, size_t len, size_t nfds,
                               const cuc_msg *quick)
{
    int fds[16];
    const int *efds;
    size_t elen, enfds, i;
    uint8_t *enc;
    cuc_msg *m;
    int rc;

    for (i = 0; i < nfds; i++) {
        fds[i] = fcntl(null_fd, F_DUPFD_CLOEXEC, 0);
        if (fds[i] < 0)
            abort();
    }
    rc = cuc__msg_decode_checked(bytes, len, fds, nfds, &m);
    for (i = 0; i < nfds; i++)
        if (fds[i] != -1)
            abort();
    if (rc == 0) {
        if (!quick)
            abort(); /* the quick path refused what the checks accept */
        check_canonical(m, bytes, len, nfds);
        if (cuc__msg_encode(quick, &enc, &elen, &efds, &enfds) != 0)
            abort();
        if (elen != len || memcmp(enc, bytes, len) != 0 ||
            cuc_msg_record_count(m) != cuc_msg_record_count(quick))
            abort();
        free(enc);
        cuc_msg_destroy(m);
    }
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int fds[16], given[16];
    size_t nfds, i;
    cuc_msg *m;
    int rc;

    if (size < 1)
        return 0;
    if (null_fd < 0) {
        null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (null_fd < 0)
            abort();
    }
    nfds = data[0] & 15u;
    for (i = 0; i < nfds; i++) {
        fds[i] = given[i] = fcntl(null_fd, F_DUPFD_CLOEXEC, 0);
        if (fds[i] < 0)
            abort();
    }
    rc = cuc__msg_decode(data + 1, size - 1, fds, nfds, &m);
    for (i = 0; i < nfds; i++)
        if (fds[i] != -1)
            abort();
    if (decode_checked_same(data + 1, size - 1, nfds, rc == 0 ? m : NULL) != rc)
        abort(); /* the quick path and the checks disagree */
    if (rc == 0) {
        if (cuc_msg_fd_count(m) != nfds)
            abort();
        check_canonical(m, data + 1, size - 1, nfds);
        walk(m);
        cuc_msg_destroy(m);
    } else if (rc != CUC_E_BADMSG && rc != CUC_E_VERSION && rc != CUC_E_NOMEM) {
        abort();
    }
    for (i = 0; i < nfds; i++)
        if (fcntl(given[i], F_GETFD) != -1 || errno != EBADF)
            abort(); /* an fd the decoder was given is still open */
    return 0;
}
