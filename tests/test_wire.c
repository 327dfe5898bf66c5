/* Messages: round trips of device and fd records; in-process a device
 * decodes to the identical singleton; fds refuse plain bytes. */
#include <fcntl.h>

#include "cucore.h"
#include "internal.h"
#include "wire.h"
#include "check.h"

static void device_round_trip(int n)
{
    cuc_msg *m, *r;
    void *bytes;
    size_t len;
    int type;

    CHECK_OK(cuc_msg_create(&m));
    for (int i = 0; i < n; i++) {
        cuc_device *d;
        CHECK_OK(cuc_device_get(i, &d));
        CHECK_OK(cuc_msg_add_device(m, d));
    }
    CHECK(cuc_msg_count(m) == (size_t)n);
    CHECK_OK(cuc_msg_to_bytes(m, &bytes, &len));
    CHECK(len == 32 + (size_t)n * 32);
    CHECK_OK(cuc_msg_from_bytes(bytes, len, &r));
    CHECK(cuc_msg_count(r) == (size_t)n);
    for (int i = 0; i < n; i++) {
        cuc_device *d, *got;
        CHECK_OK(cuc_device_get(i, &d));
        CHECK_OK(cuc_msg_record_type(r, (size_t)i, &type));
        CHECK(type == CUC_RECORD_DEVICE);
        CHECK_OK(cuc_msg_get_device(r, (size_t)i, &got));
        CHECK(got == d); /* the identical singleton */
    }
    CHECK_RC(cuc_msg_record_type(r, (size_t)n, &type), CUC_E_INVALID);
    free(bytes);
    cuc_msg_destroy(r);
    cuc_msg_destroy(m);
}

static void fd_records(void)
{
    const int *fds;
    size_t len, nfds;
    uint8_t *bytes;
    cuc_msg *m, *r;
    int p[2], in[2], fd = -1, type;
    uint32_t tag = 0;
    void *b2;
    size_t l2;
    char c = 0;
    cuc_device *d;

    CHECK(pipe2(p, O_CLOEXEC) == 0);
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_fd(m, p[1], 0xfeedu));
    CHECK(cuc_msg_fd_count(m) == 1);
    CHECK_RC(cuc_msg_to_bytes(m, &b2, &l2), CUC_E_NEEDS_CHANNEL);
    CHECK(strstr(cuc_errmsg(), "1 file descriptor") != NULL);
    CHECK_RC(cuc_msg_add_fd(m, -1, 0), CUC_E_INVALID);
    CHECK_OK(cuc__msg_encode(m, &bytes, &len, &fds, &nfds));
    CHECK(nfds == 1);
    /* What a channel would deliver: the bytes and fresh copies of the fds. */
    in[0] = fcntl(fds[0], F_DUPFD_CLOEXEC, 3);
    CHECK(in[0] >= 0);
    CHECK_OK(cuc__msg_decode(bytes, len, in, 1, &r));
    CHECK_OK(cuc_msg_record_type(r, 0, &type));
    CHECK(type == CUC_RECORD_FD);
    CHECK_RC(cuc_msg_get_device(r, 0, &d), CUC_E_INVALID);
    CHECK_OK(cuc_msg_take_fd(r, 0, &fd, &tag));
    CHECK(tag == 0xfeedu);
    CHECK_RC(cuc_msg_take_fd(r, 0, &fd, &tag), CUC_E_INVALID); /* once only */
    CHECK(write(fd, "x", 1) == 1);
    CHECK(read(p[0], &c, 1) == 1 && c == 'x'); /* the same pipe */
    close(fd);
    free(bytes);
    cuc_msg_destroy(r);
    cuc_msg_destroy(m); /* closes its dup of p[1] */
    close(p[0]);
    close(p[1]);
}

static void many_records(void)
{
    cuc_msg *m, *r;
    cuc_device *d, *got;
    void *bytes;
    size_t len;

    CHECK_OK(cuc_device_get(0, &d));
    CHECK_OK(cuc_msg_create(&m));
    for (int i = 0; i < 4096; i++)
        CHECK_OK(cuc_msg_add_device(m, d));
    CHECK_OK(cuc_msg_to_bytes(m, &bytes, &len));
    CHECK_OK(cuc_msg_from_bytes(bytes, len, &r));
    CHECK(cuc_msg_count(r) == 4096);
    CHECK_OK(cuc_msg_get_device(r, 4095, &got));
    CHECK(got == d);
    free(bytes);
    cuc_msg_destroy(r);
    cuc_msg_destroy(m);
}

int main(void)
{
    int n;

    CHECK_OK(cuc_device_count(&n));
    FD_BASELINE();
    device_round_trip(n);
    fd_records();
    many_records();
    cuc_msg_destroy(NULL);
    FD_CHECK_NO_LEAK();
    return 0;
}
