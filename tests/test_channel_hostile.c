/* A hostile peer: a child that writes raw frames on the socket. Each lie
 * gives the right status within the receive timeout, and every fd it sent
 * is closed (the fd count is back to where it was). */
#include <poll.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <time.h>

#include "check.h"
#include "cucore.h"
#include "device/device.h"
#include "channel/channel.h"
#include "wire/records.h"

static double now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* ---- the hostile child ---- */

static int sock = -1;

/* Sends header h, data, and nfds fresh /dev/null fds in one datagram. */
static void raw_send(const struct cuc__frame *h, const void *data, size_t len, int nfds)
{
    union {
        struct cmsghdr c;
        char buf[CMSG_SPACE(CUC__FRAME_MAX_FDS * sizeof(int))];
    } cm;
    int fds[CUC__FRAME_MAX_FDS], i;
    uint8_t hdr[CUC__FRAME_HDR];
    struct iovec iov[2];
    struct msghdr mh;

    CHECK(nfds <= (int)CUC__FRAME_MAX_FDS);
    cuc__frame_write(hdr, h);
    iov[0].iov_base = hdr;
    iov[0].iov_len = sizeof(hdr);
    iov[1].iov_base = (void *)data;
    iov[1].iov_len = len;
    memset(&mh, 0, sizeof(mh));
    mh.msg_iov = iov;
    mh.msg_iovlen = 2;
    for (i = 0; i < nfds; i++)
        CHECK((fds[i] = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0);
    if (nfds) {
        memset(&cm, 0, sizeof(cm));
        mh.msg_control = cm.buf;
        mh.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
        cm.c.cmsg_level = SOL_SOCKET;
        cm.c.cmsg_type = SCM_RIGHTS;
        cm.c.cmsg_len = CMSG_LEN(nfds * sizeof(int));
        memcpy(CMSG_DATA(&cm.c), fds, nfds * sizeof(int));
    }
    CHECK(sendmsg(sock, &mh, MSG_NOSIGNAL) == (ssize_t)(sizeof(hdr) + len));
    for (i = 0; i < nfds; i++)
        close(fds[i]);
}

static void raw_bytes(const void *b, size_t len)
{
    CHECK(send(sock, b, len, MSG_NOSIGNAL) == (ssize_t)len);
}

/* The encoding of a message with nfd fd records (and one device). */
static uint8_t *encoded(int nfd, size_t *len)
{
    const int *fds;
    size_t nfds;
    cuc_device *d;
    uint8_t *b;
    cuc_msg *m;
    int i, null = open("/dev/null", O_RDONLY | O_CLOEXEC);

    CHECK(null >= 0);
    CHECK_OK(cuc_device_get(0, &d));
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_device(m, d));
    for (i = 0; i < nfd; i++)
        CHECK_OK(cuc_msg_add_fd(m, null, (uint32_t)i));
    CHECK_OK(cuc__msg_encode(m, &b, len, &fds, &nfds));
    cuc_msg_destroy(m);
    close(null);
    return b;
}

/* A single-frame header for a message of len bytes and nfds fds. */
static struct cuc__frame one_frame(uint32_t seq, size_t len, uint32_t nfds)
{
    struct cuc__frame f = {seq, 0, 1, (uint32_t)len, nfds, (uint32_t)len, nfds};

    return f;
}

/* Sends part `part` of a message of msg_len bytes and msg_nfds fds, as the
 * split rule says, with data from b. */
static void send_part(uint32_t seq, const uint8_t *b, uint32_t msg_len, uint32_t msg_nfds,
                      uint32_t part)
{
    struct cuc__frame f;
    uint32_t off, plen, fo, pn;

    cuc__frame_slice(msg_len, msg_nfds, part, &off, &plen, &fo, &pn);
    f.seq = seq;
    f.part = part;
    f.nparts = cuc__frame_parts(msg_len, msg_nfds);
    f.len = plen;
    f.nfds = pn;
    f.msg_len = msg_len;
    f.msg_nfds = msg_nfds;
    raw_send(&f, b + off, plen, (int)pn);
}

static void wait_parent_close(void)
{
    char c;

    while (recv(sock, &c, 1, 0) > 0)
        ;
}

static int child_main(const char *role)
{
    size_t len;
    uint8_t *b;
    struct cuc__frame f;
    int n;

    CHECK_OK(cuc_device_count(&n));
    CHECK(getenv("CUC_TEST_FD"));
    sock = atoi(getenv("CUC_TEST_FD"));
    if (!strcmp(role, "fds_more")) { /* header: 1 fd; 3 arrive */
        b = encoded(1, &len);
        f = one_frame(0, len, 1);
        raw_send(&f, b, len, 3);
    } else if (!strcmp(role, "fds_fewer")) { /* header: 2 fds; 1 arrives */
        b = encoded(2, &len);
        f = one_frame(0, len, 2);
        raw_send(&f, b, len, 1);
    } else if (!strcmp(role, "fds_none")) { /* header: 2 fds; none arrive */
        b = encoded(2, &len);
        f = one_frame(0, len, 2);
        raw_send(&f, b, len, 0);
    } else if (!strcmp(role, "msg_fds_lie")) { /* frame right, message wrong */
        b = encoded(2, &len);
        cuc__put32(b + 12, 3); /* the message header's fd count */
        f = one_frame(0, len, 2);
        raw_send(&f, b, len, 2);
    } else if (!strcmp(role, "short_frame")) { /* header says more than follows */
        b = encoded(0, &len);
        f = one_frame(0, len + 100, 0);
        raw_send(&f, b, len, 0);
    } else if (!strcmp(role, "stub")) { /* 20 bytes, then close */
        b = encoded(0, &len);
        raw_bytes("CUCF\1\0\0\0\0\0\0\0\0\0\0\0\1\0\0\0", 20);
        free(b);
        return 0;
    } else if (!strcmp(role, "huge")) { /* a message of UINT32_MAX bytes */
        b = encoded(0, &len);
        f = one_frame(0, len, 0);
        f.msg_len = UINT32_MAX;
        raw_send(&f, b, len, 0);
    } else if (!strcmp(role, "huge_len")) { /* a frame of UINT32_MAX bytes */
        b = encoded(0, &len);
        f = one_frame(0, len, 0);
        f.len = UINT32_MAX;
        raw_send(&f, b, len, 0);
    } else if (!strcmp(role, "huge_parts")) { /* claims 64 MiB in parts */
        struct cuc__frame h = {0, 0, CUC__FRAME_MAX_PARTS, CUC__FRAME_MAX_DATA, 0,
                               CUC_MSG_MAX_BYTES, 0};
        static uint8_t chunk[CUC__FRAME_MAX_DATA];
        b = encoded(0, &len);
        raw_send(&h, chunk, sizeof(chunk), 0);
    } else if (!strcmp(role, "oversize")) { /* a datagram bigger than a frame */
        static uint8_t big[CUC__FRAME_HDR + CUC__FRAME_MAX_DATA + 4096];
        b = encoded(0, &len);
        memcpy(big, "CUCF", 4);
        raw_bytes(big, sizeof(big));
    } else if (!strcmp(role, "fd_cap")) { /* 253 fds of a claimed 5000 */
        struct cuc__frame h = {0, 0, 20, 0, CUC__FRAME_MAX_FDS, 0, 5000};
        b = encoded(0, &len);
        raw_send(&h, NULL, 0, CUC__FRAME_MAX_FDS);
    } else if (!strcmp(role, "garbage")) {
        b = encoded(0, &len);
        raw_bytes("this is not a cucore frame, not at all: 0123456789", 50);
    } else if (!strcmp(role, "bad_seq")) { /* a good message, then seq 5 */
        b = encoded(0, &len);
        f = one_frame(0, len, 0);
        raw_send(&f, b, len, 0);
        f = one_frame(5, len, 0);
        raw_send(&f, b, len, 0);
    } else if (!strcmp(role, "bad_content")) { /* unknown type, then good */
        b = encoded(0, &len);
        cuc__put16(b + CUC__WIRE_HDR, 200);
        f = one_frame(0, len, 0);
        raw_send(&f, b, len, 0);
        cuc__put16(b + CUC__WIRE_HDR, CUC_RECORD_DEVICE);
        f = one_frame(1, len, 0);
        raw_send(&f, b, len, 0);
    } else if (!strcmp(role, "part_disagree")) { /* part 1 changes the totals */
        b = encoded(600, &len);
        send_part(0, b, (uint32_t)len, 600, 0);
        f.seq = 1;
        f.part = 1;
        f.nparts = 3;
        f.len = 0;
        f.nfds = 253;
        f.msg_len = (uint32_t)len + 8;
        f.msg_nfds = 600;
        raw_send(&f, NULL, 0, 253);
    } else if (!strcmp(role, "half_then_close")) { /* part 0 of 3, close */
        b = encoded(600, &len);
        send_part(0, b, (uint32_t)len, 600, 0);
        free(b);
        return 0;
    } else if (!strcmp(role, "half_then_hang")) { /* part 0 of 3, then nothing */
        b = encoded(600, &len);
        send_part(0, b, (uint32_t)len, 600, 0);
        free(b);
        for (;;)
            pause(); /* until SIGKILL */
    } else {
        return 2;
    }
    free(b);
    wait_parent_close();
    return 0;
}

/* ---- the parent ---- */

static cuc_channel *start(const char *role, pid_t *pid)
{
    cuc_channel *ch;
    int sv[2];

    CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) == 0);
    *pid = spawn_self(role, NULL, NULL, sv[1]);
    CHECK(*pid > 0);
    close(sv[1]);
    CHECK_OK(cuc_channel_from_fd(sv[0], &ch));
    return ch;
}

/* Waits (up to 30 s) until the peer's first frame is there. */
static void wait_readable(cuc_channel *ch)
{
    struct pollfd p = {cuc_channel_fd(ch), POLLIN, 0};

    CHECK(poll(&p, 1, 30000) == 1);
}

static void expect_recv(cuc_channel *ch, int timeout, int want, const char *text,
                        const char *role)
{
    double t0 = now_ms(), dt;
    cuc_msg *m = NULL;
    int rc;

    rc = cuc_channel_recv(ch, timeout, &m);
    dt = now_ms() - t0;
    if (rc != want || (text && !strstr(cuc_errmsg(), text))) {
        fprintf(stderr, "%s: recv gave %s (%s), wanted %s with \"%s\"\n", role,
                cuc_errname(rc), cuc_errmsg(), cuc_errname(want), text ? text : "");
        exit(1);
    }
    if (timeout >= 0 && dt > timeout + 250) {
        fprintf(stderr, "%s: recv took %.0f ms, past its %d ms timeout\n", role, dt,
                timeout);
        exit(1);
    }
    if (rc == 0)
        cuc_msg_destroy(m);
}

/* Runs a hostile child, expects want (then again, for a framing error that
 * sticks), and checks that nothing leaked. */
static void run(const char *role, int want, const char *text, int sticks)
{
    int before = test_fd_count();
    cuc_channel *ch;
    pid_t pid;
    char saved[1024];

    ch = start(role, &pid);
    expect_recv(ch, 5000, want, text, role);
    snprintf(saved, sizeof(saved), "%s", cuc_errmsg());
    if (sticks) {
        expect_recv(ch, 1000, want, text, role);
        CHECK(strcmp(saved, cuc_errmsg()) == 0); /* the same message */
    }
    cuc_channel_destroy(ch);
    CHECK(wait_child(pid) == 0);
    if (test_fd_count() != before) {
        fprintf(stderr, "%s: %d fds open before, %d after\n", role, before,
                test_fd_count());
        exit(1);
    }
}

static void test_bad_seq(void)
{
    int before = test_fd_count();
    cuc_channel *ch;
    pid_t pid;

    ch = start("bad_seq", &pid);
    expect_recv(ch, 5000, 0, NULL, "bad_seq");
    expect_recv(ch, 5000, CUC_E_BADMSG, "sequence number 5", "bad_seq");
    expect_recv(ch, 0, CUC_E_BADMSG, "sequence number 5", "bad_seq");
    cuc_channel_destroy(ch);
    CHECK(wait_child(pid) == 0);
    CHECK(test_fd_count() == before);
}

/* A message that does not decode is dropped; the channel goes on. */
static void test_bad_content(void)
{
    int before = test_fd_count();
    cuc_channel *ch;
    pid_t pid;

    ch = start("bad_content", &pid);
    expect_recv(ch, 5000, CUC_E_VERSION, "unknown record type 200", "bad_content");
    expect_recv(ch, 5000, 0, NULL, "bad_content");
    cuc_channel_destroy(ch);
    CHECK(wait_child(pid) == 0);
    CHECK(test_fd_count() == before);
}

/* Part 0 of a 64 MiB message, then nothing: what is buffered is what
 * arrived, not what was announced. */
static void test_claims_big(void)
{
    int before = test_fd_count();
    cuc_channel *ch;
    pid_t pid;

    ch = start("huge_parts", &pid);
    expect_recv(ch, 300, CUC_E_TIMEOUT, "1 of the 1024 frames", "huge_parts");
    CHECK(ch->link->rx.cap <= 2 * CUC__FRAME_MAX_DATA);
    cuc_channel_destroy(ch);
    CHECK(wait_child(pid) == 0);
    CHECK(test_fd_count() == before);
}

/* Part of a message, then the peer hangs: the receive times out on time,
 * keeps the part; SIGKILL ends it, and the part's fds are closed. */
static void test_half_then_kill(void)
{
    int before = test_fd_count(), mid;
    cuc_channel *ch;
    pid_t pid;

    ch = start("half_then_hang", &pid);
    /* the child starts the driver before it sends (cuInit can take longer
     * than the 300 ms below on a GPU machine): the short timeout is for
     * the frames that never come, not for that */
    wait_readable(ch);
    expect_recv(ch, 300, CUC_E_TIMEOUT, "1 of the 3 frames", "half_then_hang");
    mid = test_fd_count();
    CHECK(mid == before + 1 + 253); /* the channel, the part's fds */
    expect_recv(ch, 200, CUC_E_TIMEOUT, "1 of the 3 frames", "half_then_hang");
    CHECK(kill(pid, SIGKILL) == 0);
    expect_recv(ch, 5000, CUC_E_PEER_CLOSED, "in the middle of a message", "killed");
    CHECK(test_fd_count() == before + 1); /* only the channel */
    expect_recv(ch, 0, CUC_E_PEER_CLOSED, NULL, "killed");
    cuc_channel_destroy(ch);
    CHECK(wait_child(pid) == 128 + SIGKILL);
    CHECK(test_fd_count() == before);
}

int main(int argc, char **argv)
{
    int n;

    if (argc >= 3 && !strcmp(argv[1], "--child"))
        return child_main(argv[2]);
    CHECK_OK(cuc_device_count(&n));
    FD_BASELINE();
    run("fds_more", CUC_E_BADMSG, "but 3 arrived", 1);
    run("fds_fewer", CUC_E_BADMSG, "but 1 arrived", 1);
    run("fds_none", CUC_E_BADMSG, "but 0 arrived", 1);
    run("msg_fds_lie", CUC_E_BADMSG, "fd count 3 at offset 12", 0);
    run("short_frame", CUC_E_BADMSG, "offset 20", 1);
    run("stub", CUC_E_BADMSG, "shorter than the 40-byte frame header", 1);
    run("huge", CUC_E_BADMSG, "exceeds the maximum", 1);
    run("huge_len", CUC_E_BADMSG, "frame length 4294967295 at offset 20", 1);
    test_claims_big();
    run("oversize", CUC_E_BADMSG, "larger than", 1);
    run("fd_cap", CUC_E_BADMSG, "message fd count 5000", 1);
    run("garbage", CUC_E_BADMSG, "bad frame magic", 1);
    run("part_disagree", CUC_E_BADMSG, "its part 0 said", 1);
    run("half_then_close", CUC_E_PEER_CLOSED, "in the middle of a message", 1);
    test_bad_seq();
    test_bad_content();
    test_half_then_kill();
    FD_CHECK_NO_LEAK();
    return test_finish();
}
