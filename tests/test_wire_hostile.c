/* Hostile bytes: every truncation, lying lengths near UINT32_MAX, unknown
 * types and versions, bad fd references. Each gives the right code and no
 * fd survives a failed decode. */
#include <fcntl.h>

#include "cucore.h"
#include "internal.h"
#include "wire.h"
#include "check.h"

static uint8_t good[4096];
static size_t good_len;

static void build_good(void)
{
    const int *fds;
    size_t nfds;
    uint8_t *b;
    cuc_msg *m;
    cuc_device *d;
    int p[2];

    CHECK(pipe2(p, O_CLOEXEC) == 0);
    CHECK_OK(cuc_device_get(0, &d));
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_device(m, d));
    CHECK_OK(cuc_msg_add_fd(m, p[0], 7));
    CHECK_OK(cuc_msg_add_device(m, d));
    CHECK_OK(cuc_msg_add_fd(m, p[1], 8));
    CHECK_OK(cuc__msg_encode(m, &b, &good_len, &fds, &nfds));
    CHECK(nfds == 2 && good_len <= sizeof(good));
    memcpy(good, b, good_len);
    free(b);
    cuc_msg_destroy(m);
    close(p[0]);
    close(p[1]);
}

/* Decodes bytes with nfds fresh fds; returns the status, checks that a
 * failure closed every fd. */
static int decode(const uint8_t *b, size_t len, size_t nfds)
{
    int fds[8];
    cuc_msg *m = NULL;
    int rc, before = test_fd_count();

    for (size_t i = 0; i < nfds; i++)
        CHECK((fds[i] = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0);
    rc = cuc__msg_decode(b, len, fds, nfds, &m);
    if (rc == 0) {
        CHECK(m != NULL);
        cuc_msg_destroy(m);
    }
    CHECK(test_fd_count() == before);
    return rc;
}

static void mutate32(uint8_t *b, size_t off, uint32_t v) { cuc__put32(b + off, v); }

int main(void)
{
    uint8_t b[4096];
    int n;

    CHECK_OK(cuc_device_count(&n));
    FD_BASELINE();
    build_good();
    CHECK_OK(decode(good, good_len, 2));

    for (size_t len = 0; len < good_len; len++) /* every truncation */
        CHECK_RC(decode(good, len, 2), CUC_E_BADMSG);

    /* Header: magic, versions, reserved, lengths, counts. */
    memcpy(b, good, good_len); b[0] ^= 1;
    CHECK_RC(decode(b, good_len, 2), CUC_E_BADMSG);
    memcpy(b, good, good_len); cuc__put16(b + 4, 2);
    CHECK_RC(decode(b, good_len, 2), CUC_E_VERSION);
    memcpy(b, good, good_len); cuc__put16(b + 4, 0);
    CHECK_RC(decode(b, good_len, 2), CUC_E_BADMSG);
    memcpy(b, good, good_len); b[6] = 1;
    CHECK_RC(decode(b, good_len, 2), CUC_E_BADMSG);
    memcpy(b, good, good_len); b[31] = 1;
    CHECK_RC(decode(b, good_len, 2), CUC_E_BADMSG);
    for (uint32_t lie = UINT32_MAX - 8; lie != 0; lie++) { /* total near UINT32_MAX */
        memcpy(b, good, good_len); mutate32(b, 8, lie);
        CHECK_RC(decode(b, good_len, 2), CUC_E_BADMSG);
    }
    memcpy(b, good, good_len); mutate32(b, 12, UINT32_MAX);
    CHECK_RC(decode(b, good_len, 2), CUC_E_BADMSG);
    memcpy(b, good, good_len); mutate32(b, 12, 5); /* more records than present */
    CHECK_RC(decode(b, good_len, 2), CUC_E_BADMSG);
    memcpy(b, good, good_len); mutate32(b, 12, 3); /* fewer: trailing bytes */
    CHECK_RC(decode(b, good_len, 2), CUC_E_BADMSG);
    CHECK_RC(decode(good, good_len, 1), CUC_E_BADMSG); /* fds: fewer arrived */
    CHECK_RC(decode(good, good_len, 3), CUC_E_BADMSG); /* more arrived */
    memcpy(b, good, good_len); mutate32(b, 16, UINT32_MAX);
    CHECK_RC(decode(b, good_len, 2), CUC_E_BADMSG);

    /* First record (device) at offset 32. */
    for (uint32_t lie = UINT32_MAX - 16; lie != 0; lie++) { /* payload length */
        memcpy(b, good, good_len); mutate32(b, 32 + 4, lie);
        CHECK_RC(decode(b, good_len, 2), CUC_E_BADMSG);
    }
    memcpy(b, good, good_len); mutate32(b, 36, 15); /* device of 15 bytes */
    CHECK_RC(decode(b, good_len, 2), CUC_E_BADMSG);
    memcpy(b, good, good_len); cuc__put16(b + 32, 999); /* unknown type */
    CHECK_RC(decode(b, good_len, 2), CUC_E_VERSION);
    memcpy(b, good, good_len); cuc__put16(b + 32, 0);
    CHECK_RC(decode(b, good_len, 2), CUC_E_VERSION);
    memcpy(b, good, good_len); cuc__put16(b + 34, 2); /* newer record version */
    CHECK_RC(decode(b, good_len, 2), CUC_E_VERSION);
    memcpy(b, good, good_len); cuc__put16(b + 34, 0);
    CHECK_RC(decode(b, good_len, 2), CUC_E_BADMSG);
    memcpy(b, good, good_len); mutate32(b, 44, 1); /* device claims an fd */
    CHECK_RC(decode(b, good_len, 2), CUC_E_BADMSG);

    /* Second record (fd) at offset 64: fd index out of range, reused,
     * skipped; its padding and reserved bytes. */
    memcpy(b, good, good_len); mutate32(b, 64 + 8, 1);
    CHECK_RC(decode(b, good_len, 2), CUC_E_BADMSG);
    memcpy(b, good, good_len); mutate32(b, 64 + 8, UINT32_MAX);
    CHECK_RC(decode(b, good_len, 2), CUC_E_BADMSG);
    memcpy(b, good, good_len); mutate32(b, 64 + 12, UINT32_MAX);
    CHECK_RC(decode(b, good_len, 2), CUC_E_BADMSG);
    memcpy(b, good, good_len); mutate32(b, 64 + 12, 0);
    CHECK_RC(decode(b, good_len, 2), CUC_E_BADMSG);
    memcpy(b, good, good_len); mutate32(b, 64 + 16 + 4, 1); /* reserved in fd payload */
    CHECK_RC(decode(b, good_len, 2), CUC_E_BADMSG);
    memcpy(b, good, good_len); mutate32(b, 64 + 4, 4); /* shorter payload, nonzero pad */
    CHECK_RC(decode(b, good_len, 2), CUC_E_BADMSG);

    CHECK_RC(decode(NULL, 0, 2), CUC_E_INVALID);
    FD_CHECK_NO_LEAK();
    return 0;
}
