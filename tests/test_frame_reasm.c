/* Rejoining split messages (frame/frame.c, cuc__reasm_push) and encoding
 * them a frame's part at a time (wire/encode.c):
 *  - a 3-frame message rejoins to the bytes sent (re-encoded equal), its
 *    records readable;
 *  - a rejoined message that fails to decode (a record's padding not zero,
 *    a record length lying past the end, near UINT32_MAX) is dropped with
 *    CUC_E_BADMSG and the next message is rejoined from the same state;
 *  - a message split by its fds whose length is shorter than the message
 *    header (all of it in the header part): CUC_E_BADMSG, its fds closed;
 *  - a message encoded a window at a time (cuc__msg_encode_part, as the
 *    sender writes each frame's part) equals its whole encoding, for the
 *    frame size and for odd windows that cut headers, payloads and
 *    padding; cuc__msg_encode_begin refuses a message whose fd was taken;
 *  - no fd left open (fd baseline). */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cucore.h"
#include "check.h"
#include "frame/frame.h"
#include "wire/records.h"

#define NIDS 20000 /* 3 release records: 160 KB, 3 frames */

static uint32_t seq;

/* Feeds bytes as the frames cuc__link_send makes of them; the last push's
 * result. */
static int feed(struct cuc__reasm *r, const uint8_t *bytes, uint32_t len, uint32_t nfds,
                cuc_msg **out, int *drc)
{
    uint32_t nparts = cuc__frame_parts(len, nfds);
    int rc = 0;

    *out = NULL;
    for (uint32_t part = 0; part < nparts && !rc; part++) {
        int fds[CUC__FRAME_MAX_FDS];
        struct cuc__frame f;
        uint32_t off, fd_off;

        cuc__frame_slice(len, nfds, part, &off, &f.len, &fd_off, &f.nfds);
        for (uint32_t i = 0; i < f.nfds; i++)
            CHECK((fds[i] = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0);
        f.seq = seq++;
        f.part = part;
        f.nparts = nparts;
        f.msg_len = len;
        f.msg_nfds = nfds;
        rc = cuc__reasm_push(r, &f, bytes + off, fds, f.nfds, out, drc);
        CHECK(part + 1 == nparts || (*out == NULL && *drc == 0));
    }
    return rc;
}

static uint8_t *big_message(size_t *len)
{
    static uint64_t ids[NIDS];
    const int *fds;
    size_t done = 0, nfds;
    uint8_t *bytes;
    cuc_msg *m;

    for (size_t i = 0; i < NIDS; i++)
        ids[i] = i + 1;
    CHECK_OK(cuc__release_msg_build(ids, NIDS, &done, &m));
    CHECK(done == NIDS && cuc_msg_record_count(m) == 3);
    CHECK_OK(cuc__msg_encode(m, &bytes, len, &fds, &nfds));
    CHECK(nfds == 0 && *len > 2 * CUC__FRAME_MAX_DATA);
    cuc_msg_destroy(m);
    return bytes;
}

static void check_same(cuc_msg *m, const uint8_t *bytes, size_t len)
{
    const int *fds;
    const uint8_t *ids;
    size_t n, k, nfds;
    uint8_t *again;

    CHECK(m != NULL);
    CHECK(cuc_msg_record_count(m) == 3);
    CHECK_OK(cuc__release_rec_read(m, 2, &ids, &k));
    CHECK(k == NIDS - 2 * CUC__RELEASE_MAX_IDS && cuc__get64(ids) == 2 * CUC__RELEASE_MAX_IDS + 1);
    CHECK_OK(cuc__msg_encode(m, &again, &n, &fds, &nfds));
    CHECK(n == len && memcmp(again, bytes, len) == 0);
    free(again);
}

static void test_rejoin(void)
{
    struct cuc__reasm r;
    size_t len;
    uint8_t *bytes = big_message(&len);
    cuc_msg *m;
    int drc;

    memset(&r, 0, sizeof(r));
    seq = 0;
    CHECK_OK(feed(&r, bytes, (uint32_t)len, 0, &m, &drc));
    CHECK(drc == 0);
    check_same(m, bytes, len);
    cuc_msg_destroy(m);
    /* the state rejoins the next one too */
    CHECK_OK(feed(&r, bytes, (uint32_t)len, 0, &m, &drc));
    check_same(m, bytes, len);
    cuc_msg_destroy(m);
    cuc__reasm_reset(&r);
    free(bytes);
}

static void test_bad_rejoined(void)
{
    struct cuc__reasm r;
    size_t len, last;
    uint8_t *bytes = big_message(&len), *bad = malloc(len);
    cuc_msg *m;
    int drc;

    CHECK(bad != NULL);
    memset(&r, 0, sizeof(r));
    seq = 0;
    /* the last record's payload is a multiple of 8: make its length lie by
     * 4, which the decoder finds as non-zero "padding" or a cut record */
    memcpy(bad, bytes, len);
    last = CUC__WIRE_HDR + 2 * (CUC__WIRE_REC_HDR + 8u * CUC__RELEASE_MAX_IDS);
    cuc__put32(bad + last + 4, cuc__get32(bad + last + 4) - 4);
    CHECK_OK(feed(&r, bad, (uint32_t)len, 0, &m, &drc));
    CHECK(m == NULL && drc == CUC_E_BADMSG);
    /* a length near UINT32_MAX */
    memcpy(bad, bytes, len);
    cuc__put32(bad + last + 4, UINT32_MAX - 3);
    CHECK_OK(feed(&r, bad, (uint32_t)len, 0, &m, &drc));
    CHECK(m == NULL && drc == CUC_E_BADMSG);
    CHECK_ERRMSG("exceeds");
    /* padding after the first record (none there: its payload is 64 KiB)
     * replaced by a record header that claims more than is left */
    memcpy(bad, bytes, len);
    cuc__put32(bad + 8, 4); /* four records in a message of three */
    CHECK_OK(feed(&r, bad, (uint32_t)len, 0, &m, &drc));
    CHECK(m == NULL && drc == CUC_E_BADMSG);
    /* the good one after them */
    CHECK_OK(feed(&r, bytes, (uint32_t)len, 0, &m, &drc));
    check_same(m, bytes, len);
    cuc_msg_destroy(m);
    cuc__reasm_reset(&r);
    free(bad);
    free(bytes);
}

static void test_short_split_by_fds(void)
{
    static const uint8_t bytes[10] = {0x43, 0x55, 0x43, 0x4d};
    struct cuc__reasm r;
    cuc_msg *m;
    int drc;

    memset(&r, 0, sizeof(r));
    seq = 0;
    /* 254 fds: two frames, all 10 bytes in the first */
    CHECK_OK(feed(&r, bytes, sizeof(bytes), CUC__FRAME_MAX_FDS + 1, &m, &drc));
    CHECK(m == NULL && drc == CUC_E_BADMSG);
    CHECK_ERRMSG("shorter than the 24-byte header");
    cuc__reasm_reset(&r);
}

/* A message of records of odd sizes (padding), encoded in windows of w. */
static void check_windows(const cuc_msg *m, size_t w)
{
    struct cuc__enc_cursor cur = {0, 0};
    const int *fds, *fds2;
    size_t len, len2, nfds, nfds2;
    uint8_t *whole, *parts;

    CHECK_OK(cuc__msg_encode(m, &whole, &len, &fds, &nfds));
    CHECK_OK(cuc__msg_encode_begin(m, &len2, &fds2, &nfds2));
    CHECK(len2 == len && fds2 == fds && nfds2 == nfds);
    parts = malloc(len);
    CHECK(parts != NULL);
    memset(parts, 0xa5, len);
    for (size_t off = 0; off < len; off += w)
        cuc__msg_encode_part(m, off, len - off < w ? len - off : w, parts + off, &cur);
    CHECK(memcmp(parts, whole, len) == 0);
    free(parts);
    free(whole);
}

static void test_encode_parts(void)
{
    static const size_t windows[] = {1, 7, 16, 24, 25, 1000, 4096, CUC__FRAME_MAX_DATA};
    uint8_t payload[8 * 3];
    const int *fds;
    size_t len, nfds;
    uint8_t *bytes = big_message(&len);
    cuc_msg *m, *big;
    int fd, rc;

    CHECK_OK(cuc_msg_from_bytes(bytes, len, &big));
    for (size_t i = 0; i < sizeof(windows) / sizeof(windows[0]); i++)
        check_windows(big, windows[i]);
    cuc_msg_destroy(big);
    free(bytes);
    /* records with padding (fd records: 4-byte payloads) and fds */
    CHECK_OK(cuc_msg_create(&m));
    CHECK((fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0);
    for (int i = 0; i < 5; i++)
        CHECK_OK(cuc_msg_add_fd(m, fd, (uint32_t)i));
    memset(payload, 0, sizeof(payload));
    cuc__put64(payload, 7);
    CHECK_OK(cuc__msg_add_record(m, CUC_RECORD_RELEASE, CUC_RECORD_RELEASE_VERSION, payload,
                                 8, NULL, 0));
    for (size_t i = 0; i < sizeof(windows) / sizeof(windows[0]); i++)
        check_windows(m, windows[i]);
    close(fd); /* the message has its own copies */
    /* a taken fd: nothing to encode */
    rc = cuc_msg_take_fd(m, 2, &fd, NULL);
    CHECK(rc == 0);
    CHECK_RC(cuc__msg_encode_begin(m, &len, &fds, &nfds), CUC_E_INVALID);
    CHECK_ERRMSG("taken");
    close(fd);
    cuc_msg_destroy(m);
}

int main(void)
{
    FD_BASELINE();
    test_encode_parts();
    test_rejoin();
    test_bad_rejoined();
    test_short_split_by_fds();
    FD_CHECK_NO_LEAK();
    return test_finish();
}
