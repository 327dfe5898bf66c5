/* What docs/wire-format.md says about channel frames, on a real socket
 * pair: sequence numbers wrap from 4294967295 to 0 (and an old number is
 * refused after the wrap); a message's fds arrive in its fd-table order,
 * within a frame and across frames; the fds of several SCM_RIGHTS control
 * messages of one datagram are taken in order; an empty message travels;
 * a message the decoder refuses (an unknown record type with fds, 1001
 * release records) is dropped with its fds closed and the channel goes
 * on. Every fd is accounted for. */
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "cucore.h"
#include "check.h"
#include "msg_hex.h"
#include "channel/channel.h"
#include "wire/records.h"

#define NFILES 3

static int files[NFILES];        /* distinct memfds, told apart by inode */
static ino_t inos[NFILES];

static void make_files(void)
{
    struct stat st;

    for (int i = 0; i < NFILES; i++) {
        CHECK((files[i] = memfd_create("order", MFD_CLOEXEC)) >= 0);
        CHECK(fstat(files[i], &st) == 0);
        inos[i] = st.st_ino;
    }
}

static int file_of(int fd)
{
    struct stat st;

    CHECK(fstat(fd, &st) == 0);
    for (int i = 0; i < NFILES; i++)
        if (st.st_ino == inos[i])
            return i;
    return -1;
}

/* Which file record i of a message of n fd records carries: not a
 * pattern that survives a reordering. */
static int pick(size_t i)
{
    return (int)((i * 7 + i / 5) % NFILES);
}

/* Takes every fd record of m and checks record i holds file pick(i) with
 * tag i. */
static void check_fd_order(cuc_msg *m, size_t n)
{
    CHECK(cuc_msg_record_count(m) == n && cuc_msg_fd_count(m) == n);
    for (size_t i = 0; i < n; i++) {
        uint32_t tag;
        int fd;
        CHECK_OK(cuc_msg_take_fd(m, i, &fd, &tag));
        if (tag != i || file_of(fd) != pick(i)) {
            fprintf(stderr, "record %zu: tag %u, file %d; wanted tag %zu, file %d\n", i, tag,
                    file_of(fd), i, pick(i));
            exit(1);
        }
        close(fd);
    }
}

static cuc_msg *fd_msg(size_t n)
{
    cuc_msg *m;

    CHECK_OK(cuc_msg_create(&m));
    for (size_t i = 0; i < n; i++)
        CHECK_OK(cuc_msg_add_fd(m, files[pick(i)], (uint32_t)i));
    return m;
}

/* One datagram: header f, data, and the fds in groups (one SCM_RIGHTS
 * control message per group of ngroup[g] fds). */
static void raw_send(int sock, const struct cuc__frame *f, const void *data, size_t len,
                     const int *fds, const size_t *ngroup, size_t ngroups)
{
    union {
        struct cmsghdr c;
        char buf[4 * CMSG_SPACE(CUC__FRAME_MAX_FDS * sizeof(int))];
    } cm;
    uint8_t hdr[CUC__FRAME_HDR];
    struct iovec iov[2] = {{hdr, sizeof(hdr)}, {(void *)data, len}};
    struct msghdr mh;
    struct cmsghdr *c;
    size_t g, used = 0, space = 0;

    cuc__frame_write(hdr, f);
    memset(&mh, 0, sizeof(mh));
    memset(&cm, 0, sizeof(cm));
    mh.msg_iov = iov;
    mh.msg_iovlen = 2;
    for (g = 0; g < ngroups; g++)
        space += CMSG_SPACE(ngroup[g] * sizeof(int));
    CHECK(space <= sizeof(cm.buf));
    if (ngroups) {
        mh.msg_control = cm.buf;
        mh.msg_controllen = space;
    }
    for (g = 0, c = ngroups ? CMSG_FIRSTHDR(&mh) : NULL; g < ngroups; g++) {
        CHECK(c != NULL);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(ngroup[g] * sizeof(int));
        memcpy(CMSG_DATA(c), fds + used, ngroup[g] * sizeof(int));
        used += ngroup[g];
        c = CMSG_NXTHDR(&mh, c);
    }
    CHECK(sendmsg(sock, &mh, MSG_NOSIGNAL) == (ssize_t)(sizeof(hdr) + len));
}

/* The bytes of m (its fds, borrowed, in *fds). */
static uint8_t *bytes_of(const cuc_msg *m, size_t *len, const int **fds, size_t *nfds)
{
    uint8_t *b;

    CHECK_OK(cuc__msg_encode(m, &b, len, fds, nfds));
    return b;
}

static struct cuc__frame single(uint32_t seq, size_t len, uint32_t nfds)
{
    struct cuc__frame f = {seq, 0, 1, (uint32_t)len, nfds, (uint32_t)len, nfds};

    return f;
}

/* Sequence numbers across the wrap: a one-frame message numbered
 * 4294967294, a two-frame one numbered 4294967295 and 0 (300 fds: 253 in
 * the first frame, 47 in the second), an empty one numbered 1. */
static void test_wrap_and_order(void)
{
    cuc_channel *a, *b;
    cuc_msg *m, *got;
    cuc_device *d;
    struct cuc__frame f;
    uint8_t *bytes;
    const int *fds;
    size_t len, nfds;

    CHECK_OK(cuc_channel_pair(&a, &b));
    a->link->send_seq = UINT32_MAX - 1;
    b->link->rx.next_seq = UINT32_MAX - 1;

    CHECK_OK(cuc_device_get(0, &d));
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_device(m, d));
    CHECK_OK(cuc_channel_send(a, m));
    cuc_msg_destroy(m);
    CHECK(a->link->send_seq == UINT32_MAX);

    m = fd_msg(300);
    CHECK(cuc__frame_parts((uint32_t)cuc_msg_wire_size(m), 300) == 2);
    CHECK_OK(cuc_channel_send(a, m));
    cuc_msg_destroy(m);
    CHECK(a->link->send_seq == 1); /* 4294967295, then 0 */

    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_channel_send(a, m));
    cuc_msg_destroy(m);
    CHECK(a->link->send_seq == 2);

    CHECK_OK(cuc_channel_recv(b, 5000, &got));
    CHECK(cuc_msg_record_count(got) == 1);
    cuc_msg_destroy(got);
    CHECK(b->link->rx.next_seq == UINT32_MAX);
    CHECK_OK(cuc_channel_recv(b, 5000, &got));
    check_fd_order(got, 300);
    cuc_msg_destroy(got);
    CHECK(b->link->rx.next_seq == 1);
    CHECK_OK(cuc_channel_recv(b, 5000, &got));
    CHECK(cuc_msg_record_count(got) == 0 && cuc_msg_fd_count(got) == 0);
    cuc_msg_destroy(got);
    CHECK(b->link->rx.next_seq == 2);

    /* an old number after the wrap is not the next one: a framing error */
    CHECK_OK(cuc_msg_create(&m));
    bytes = bytes_of(m, &len, &fds, &nfds);
    f = single(UINT32_MAX, len, 0);
    raw_send(cuc_channel_fd(a), &f, bytes, len, NULL, NULL, 0);
    CHECK_RC(cuc_channel_recv(b, 5000, &got), CUC_E_BADMSG);
    CHECK_ERRMSG("sequence number 4294967295 at offset 8, expected 2");
    free(bytes);
    cuc_msg_destroy(m);
    cuc_channel_destroy(a);
    cuc_channel_destroy(b);
}

/* One datagram whose 3 fds come in two SCM_RIGHTS control messages; then
 * one whose control messages hold more fds than its header counts. */
static void test_control_messages(void)
{
    cuc_channel *a, *b;
    cuc_msg *m, *got;
    struct cuc__frame f;
    uint8_t *bytes;
    const int *fds;
    size_t len, nfds, groups[2] = {1, 2}, more[2] = {2, 2};
    int four[4];
    int before;

    CHECK_OK(cuc_channel_pair(&a, &b));
    m = fd_msg(3);
    bytes = bytes_of(m, &len, &fds, &nfds);
    CHECK(nfds == 3);
    f = single(0, len, 3);
    raw_send(cuc_channel_fd(a), &f, bytes, len, fds, groups, 2);
    CHECK_OK(cuc_channel_recv(b, 5000, &got));
    check_fd_order(got, 3);
    cuc_msg_destroy(got);

    before = test_fd_count();
    memcpy(four, fds, 3 * sizeof(int));
    four[3] = files[0];
    f = single(1, len, 3);
    raw_send(cuc_channel_fd(a), &f, bytes, len, four, more, 2);
    CHECK_RC(cuc_channel_recv(b, 5000, &got), CUC_E_BADMSG);
    CHECK_ERRMSG("counts 3 fds (offset 24), but 4 arrived");
    CHECK(test_fd_count() == before); /* the 4 that arrived were closed */
    free(bytes);
    cuc_msg_destroy(m);
    cuc_channel_destroy(a);
    cuc_channel_destroy(b);
}

/* Messages the decoder refuses are dropped, their fds closed; the next
 * message arrives. */
static void test_dropped(void)
{
    static uint8_t ids[8];
    static struct raw_rec recs[1001];
    uint8_t odd[24] = {0}, fdp[8] = {0}, *bytes;
    struct raw_rec unknown[2] = {{CUC_RECORD_FD, 1, 8, fdp, 8, 1}, {200, 1, 24, odd, 24, 2}};
    cuc_channel *a, *b;
    cuc_msg *got;
    struct cuc__frame f;
    size_t len, one = 3, i;
    int three[3] = {files[0], files[1], files[2]}, before;

    CHECK_OK(cuc_channel_pair(&a, &b));
    before = test_fd_count();
    bytes = raw_msg(unknown, 2, &len);
    f = single(0, len, 3);
    raw_send(cuc_channel_fd(a), &f, bytes, len, three, &one, 1);
    free(bytes);
    CHECK_RC(cuc_channel_recv(b, 5000, &got), CUC_E_VERSION);
    CHECK_ERRMSG("unknown record type 200");
    CHECK(test_fd_count() == before);

    cuc__put64(ids, 5);
    for (i = 0; i < 1001; i++)
        recs[i] = (struct raw_rec){CUC_RECORD_RELEASE, 1, 8, ids, 8, 0};
    bytes = raw_msg(recs, 1001, &len);
    f = single(1, len, 0);
    raw_send(cuc_channel_fd(a), &f, bytes, len, NULL, NULL, 0);
    free(bytes);
    CHECK_RC(cuc_channel_recv(b, 5000, &got), CUC_E_BADMSG);
    CHECK_ERRMSG("more than the 1000 release records a message holds");

    /* the channel goes on: frame 2 is a good message */
    {
        cuc_msg *m = fd_msg(2);
        a->link->send_seq = 2; /* frames 0 and 1 went out by hand */
        CHECK_OK(cuc_channel_send(a, m));
        cuc_msg_destroy(m);
    }
    CHECK_OK(cuc_channel_recv(b, 5000, &got));
    check_fd_order(got, 2);
    cuc_msg_destroy(got);
    cuc_channel_destroy(a);
    cuc_channel_destroy(b);
}

int main(void)
{
    int n;

    CHECK_OK(cuc_device_count(&n));
    FD_BASELINE();
    make_files();
    test_wrap_and_order();
    test_control_messages();
    test_dropped();
    for (int i = 0; i < NFILES; i++)
        close(files[i]);
    FD_CHECK_NO_LEAK();
    return test_finish();
}
