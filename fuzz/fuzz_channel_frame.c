/* libFuzzer target: channel frame headers (cuc__frame_parse) and the
 * rejoining of split messages (cuc__reasm_push), as the receive path runs
 * them, without a socket.
 *
 * Input: a sequence of frames, each [fd code u8][length u32 LE][length
 * bytes]. The fd code says how many fds (dups of /dev/null) "arrive" with
 * the frame: 0..253 as is, 254 and 255 mean 0 and 1.
 * Like the channel, the first framing error ends the sequence. Every fd
 * handed in must be closed or owned by a message, and closed once the
 * message is destroyed. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cucore.h"
#include "device/device.h"
#include "frame/frame.h"
#include "wire/records.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_TRACKED 2048

static int null_fd = -1;
static int given[MAX_TRACKED];
static size_t ngiven;

static size_t fd_count_for(uint8_t code)
{
    return code <= CUC__FRAME_MAX_FDS ? code : code & 1u;
}

static void consume(cuc_msg *m)
{
    size_t i, n = cuc_msg_record_count(m);

    for (i = 0; i < n; i++) {
        struct cuc__record r;
        cuc_device *d;
        int fd;
        if (cuc__msg_record(m, i, &r))
            abort();
        if (r.type == CUC_RECORD_DEVICE)
            (void)cuc_msg_get_device(m, i, &d);
        else if (r.type == CUC_RECORD_FD && cuc_msg_take_fd(m, i, &fd, NULL) == 0)
            close(fd);
    }
    cuc_msg_destroy(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct cuc__reasm r;
    size_t off = 0, i;

    if (null_fd < 0 && (null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0)
        abort();
    memset(&r, 0, sizeof(r));
    ngiven = 0;
    while (size - off >= 5) {
        int fds[CUC__FRAME_MAX_FDS];
        struct cuc__frame f;
        size_t nfds = fd_count_for(data[off]), len = cuc__get32(data + off + 1);
        cuc_msg *m;
        int rc, drc;

        off += 5;
        if (len > size - off)
            len = size - off;
        if (ngiven + nfds > MAX_TRACKED)
            break;
        for (i = 0; i < nfds; i++) {
            fds[i] = given[ngiven++] = fcntl(null_fd, F_DUPFD_CLOEXEC, 0);
            if (fds[i] < 0)
                abort();
        }
        rc = cuc__frame_parse(data + off, len, &f);
        if (rc) {
            if (rc != CUC_E_BADMSG && rc != CUC_E_VERSION)
                abort();
            for (i = 0; i < nfds; i++)
                close(fds[i]);
            break;
        }
        if (f.len != len - CUC__FRAME_HDR || f.len > CUC__FRAME_MAX_DATA ||
            f.nfds > CUC__FRAME_MAX_FDS || f.part >= f.nparts)
            abort(); /* parse let through what it promises to refuse */
        rc = cuc__reasm_push(&r, &f, data + off + CUC__FRAME_HDR, fds, nfds, &m, &drc);
        off += len;
        if (rc)
            break;
        if (m)
            consume(m);
        else if (drc && drc != CUC_E_BADMSG && drc != CUC_E_VERSION && drc != CUC_E_NOMEM)
            abort();
    }
    cuc__reasm_reset(&r);
    for (i = 0; i < ngiven; i++)
        if (fcntl(given[i], F_GETFD) != -1 || errno != EBADF)
            abort(); /* an fd that arrived is still open */
    return 0;
}
