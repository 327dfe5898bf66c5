/* Hostile bytes: every malformed message gives the right code, a message
 * naming the field, and closes every fd it was handed. */
#include <fcntl.h>
#include <stdint.h>

#include "check.h"
#include "cucore.h"
#include "device/device.h"
#include "wire/records.h"

#define HDR 24
#define RH 16

static int null_fd = -1;

/* The valid message every case mutates: device, fd, odd-length record,
 * fd, release. rec_off[i] is the offset of record i. */
static uint8_t *base;
static size_t base_len;
static size_t rec_off[5];
static int odd_type;

static void find_odd_type(void)
{
    static const uint16_t types[] = {CUC_RECORD_KERNEL, CUC_RECORD_STREAM, CUC_RECORD_EVENT,
                                     CUC_RECORD_LAUNCH_CONFIG, CUC_RECORD_BUFFER,
                                     CUC_RECORD_POOL, CUC_RECORD_VMM};
    uint8_t p[13] = {0};
    size_t i;
    cuc_msg *m;

    CHECK_OK(cuc_msg_create(&m));
    for (i = 0; i < CUC_ARRAY_LEN(types) && !odd_type; i++)
        if (cuc__msg_add_record(m, types[i], 1, p, 13, NULL, 0) == 0)
            odd_type = types[i];
    cuc_msg_destroy(m);
    CHECK(odd_type != 0); /* some record type takes a 13-byte payload */
}

static void build_base(void)
{
    uint8_t odd[13], rel[16];
    const int *fds;
    size_t nfds, off, i;
    cuc_device *d;
    cuc_msg *m;

    memset(odd, 0xab, sizeof(odd));
    cuc__put64(rel, 7);
    cuc__put64(rel + 8, 9);
    CHECK_OK(cuc_device_get(0, &d));
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_device(m, d));
    CHECK_OK(cuc_msg_add_fd(m, null_fd, 1));
    CHECK_OK(cuc__msg_add_record(m, (uint16_t)odd_type, 1, odd, sizeof(odd), NULL, 0));
    CHECK_OK(cuc_msg_add_fd(m, null_fd, 2));
    CHECK_OK(cuc__msg_add_record(m, CUC_RECORD_RELEASE, 1, rel, sizeof(rel), NULL, 0));
    CHECK_OK(cuc__msg_encode(m, &base, &base_len, &fds, &nfds));
    CHECK(nfds == 2);
    cuc_msg_destroy(m);
    off = HDR;
    for (i = 0; i < 5; i++) {
        rec_off[i] = off;
        off += RH + ((cuc__get32(base + off + 4) + 7u) & ~7u);
    }
    CHECK(off == base_len);
}

/* Decodes bytes with nfds fresh fds; checks the status, that the fd array
 * was consumed and that no fd is left open. Returns the message on success
 * (or NULL). */
static int decode_n(const uint8_t *b, size_t len, size_t nfds, cuc_msg **out)
{
    int before = test_fd_count(), fds[8];
    cuc_msg *m = NULL;
    size_t i;
    int rc;

    CHECK(nfds <= 8);
    for (i = 0; i < nfds; i++)
        CHECK((fds[i] = fcntl(null_fd, F_DUPFD_CLOEXEC, 0)) >= 0);
    rc = cuc__msg_decode(b, len, fds, nfds, &m);
    for (i = 0; i < nfds; i++)
        CHECK(fds[i] == -1);
    if (rc == 0) {
        CHECK(cuc_msg_fd_count(m) == nfds);
        if (out) {
            *out = m;
            return 0;
        }
        cuc_msg_destroy(m);
    } else {
        CHECK(m == NULL);
    }
    CHECK(test_fd_count() == before);
    return rc;
}

static void check_text_(const char *file, int line, const char *text)
{
    if (text && !strstr(cuc_errmsg(), text)) {
        fprintf(stderr, "%s:%d: message \"%s\" lacks \"%s\"\n", file, line,
                cuc_errmsg(), text);
        exit(1);
    }
}

#define EXPECT_RC(b, len, nfds, want, text)                                    \
    do {                                                                       \
        int got_ = decode_n((b), (len), (nfds), NULL);                         \
        if (got_ != (want)) {                                                  \
            fprintf(stderr, "%s:%d: got %s, wanted %s: %s\n", __FILE__,        \
                    __LINE__, cuc_errname(got_), cuc_errname(want),            \
                    cuc_errmsg());                                             \
            exit(1);                                                           \
        }                                                                      \
        check_text_(__FILE__, __LINE__, (text));                               \
    } while (0)

static uint8_t *copy_base(void)
{
    uint8_t *c = malloc(base_len);

    CHECK(c);
    memcpy(c, base, base_len);
    return c;
}

/* Patch a 32- or 16-bit field of a copy and expect a status. */
static void patch32(size_t at, uint32_t v, size_t nfds, int want, const char *text)
{
    uint8_t *c = copy_base();

    cuc__put32(c + at, v);
    EXPECT_RC(c, base_len, nfds, want, text);
    free(c);
}

static void patch16(size_t at, uint16_t v, size_t nfds, int want, const char *text)
{
    uint8_t *c = copy_base();

    cuc__put16(c + at, v);
    EXPECT_RC(c, base_len, nfds, want, text);
    free(c);
}

static void test_valid(void)
{
    cuc_device *d, *got;
    cuc_msg *m;
    int fd;

    CHECK_OK(decode_n(base, base_len, 2, &m));
    CHECK(cuc_msg_record_count(m) == 5);
    CHECK_OK(cuc_device_get(0, &d));
    CHECK_OK(cuc_msg_get_device(m, 0, &got));
    CHECK(got == d);
    CHECK_OK(cuc_msg_take_fd(m, 3, &fd, NULL));
    close(fd);
    cuc_msg_destroy(m);
}

/* Every prefix: as it is (the total length disagrees), and with the total
 * length patched to agree (the records are cut). */
static void test_truncation(void)
{
    uint8_t *c = copy_base();
    size_t n;

    for (n = 0; n < base_len; n++) {
        EXPECT_RC(c, n, 2, CUC_E_BADMSG, NULL);
        EXPECT_RC(c, n, 0, CUC_E_BADMSG, NULL);
        if (n >= HDR) {
            cuc__put32(c + 16, (uint32_t)n);
            EXPECT_RC(c, n, 2, CUC_E_BADMSG, NULL);
            cuc__put32(c + 16, (uint32_t)base_len);
        }
    }
    EXPECT_RC(c, 10, 2, CUC_E_BADMSG, "shorter than the 24-byte header");
    cuc__put32(c + 16, 40);
    EXPECT_RC(c, 40, 2, CUC_E_BADMSG, "offset");
    free(c);
}

static void test_lengths(void)
{
    static const uint32_t huge[] = {UINT32_MAX, UINT32_MAX - 1, UINT32_MAX - 6,
                                    UINT32_MAX - 7, 0x80000000u, CUC_MSG_MAX_BYTES,
                                    CUC_MSG_MAX_BYTES + 1};
    size_t i, r;

    for (i = 0; i < CUC_ARRAY_LEN(huge); i++) {
        patch32(16, huge[i], 2, CUC_E_BADMSG, "total length");
        for (r = 0; r < 5; r++)
            patch32(rec_off[r] + 4, huge[i], 2, CUC_E_BADMSG, "payload length");
    }
    /* a record one byte longer than it is */
    patch32(rec_off[4] + 4, 17, 2, CUC_E_BADMSG, "exceeds");
    /* trailing bytes after the records */
    {
        uint8_t *c = malloc(base_len + 8);
        CHECK(c);
        memcpy(c, base, base_len);
        memset(c + base_len, 0, 8);
        cuc__put32(c + 16, (uint32_t)base_len + 8);
        EXPECT_RC(c, base_len + 8, 2, CUC_E_BADMSG, "after the last record");
        free(c);
    }
}

static void test_counts(void)
{
    patch32(8, CUC_MSG_MAX_RECORDS + 1, 2, CUC_E_BADMSG, "record count");
    patch32(8, UINT32_MAX, 2, CUC_E_BADMSG, "record count");
    patch32(8, 6, 2, CUC_E_BADMSG, NULL);              /* one more than there is */
    patch32(8, 1000, 2, CUC_E_BADMSG, "needs at least"); /* more than the bytes hold */
    patch32(8, 4, 2, CUC_E_BADMSG, "after the last record"); /* one fewer */
    patch32(8, 0, 2, CUC_E_BADMSG, NULL);
    patch32(12, CUC_MSG_MAX_FDS + 1, 2, CUC_E_BADMSG, "fd count");
    patch32(12, UINT32_MAX, 2, CUC_E_BADMSG, "fd count");
    /* header fd count != fds that arrived, both ways */
    EXPECT_RC(base, base_len, 1, CUC_E_BADMSG, "but 1 fds arrived");
    EXPECT_RC(base, base_len, 3, CUC_E_BADMSG, "but 3 fds arrived");
    EXPECT_RC(base, base_len, 0, CUC_E_BADMSG, "but 0 fds arrived");
    patch32(12, 3, 3, CUC_E_BADMSG, "no record references");
    patch32(12, 1, 1, CUC_E_BADMSG, "outside");
}

static void test_versions(void)
{
    patch16(4, 2, 2, CUC_E_VERSION, "newer");
    patch16(4, 0xffff, 2, CUC_E_VERSION, "newer");
    patch16(4, 0, 2, CUC_E_BADMSG, "version 0");
    patch16(rec_off[0] + 2, 2, 2, CUC_E_VERSION, "version 2");
    patch16(rec_off[3] + 2, 0xffff, 2, CUC_E_VERSION, "newer");
    patch16(rec_off[1] + 2, 0, 2, CUC_E_BADMSG, "version 0");
    patch16(rec_off[2], 200, 2, CUC_E_VERSION, "unknown record type 200");
    patch16(rec_off[4], 0, 2, CUC_E_VERSION, "unknown record type 0");
    patch16(rec_off[0], 0xffff, 2, CUC_E_VERSION, "unknown");
}

static void test_reserved(void)
{
    uint8_t *c;

    patch32(0, 0x4d435544u, 2, CUC_E_BADMSG, "magic");
    patch32(0, 0, 2, CUC_E_BADMSG, "magic");
    patch16(6, 1, 2, CUC_E_BADMSG, "flags");
    patch32(20, 1, 2, CUC_E_BADMSG, "offset 20");
    /* padding after the 13-byte payload */
    c = copy_base();
    c[rec_off[2] + RH + 13] = 1;
    EXPECT_RC(c, base_len, 2, CUC_E_BADMSG, "padding");
    free(c);
    c = copy_base();
    c[rec_off[2] + RH + 15] = 0x80;
    EXPECT_RC(c, base_len, 2, CUC_E_BADMSG, "padding");
    free(c);
    /* reserved word of the fd record */
    patch32(rec_off[1] + RH + 4, 1, 2, CUC_E_BADMSG, "reserved");
}

static void test_fd_indexes(void)
{
    /* out of range */
    patch32(rec_off[3] + 8, 2, 2, CUC_E_BADMSG, "outside");
    patch32(rec_off[3] + 8, UINT32_MAX, 2, CUC_E_BADMSG, "outside");
    patch32(rec_off[3] + 12, UINT32_MAX, 2, CUC_E_BADMSG, "outside");
    /* duplicated: record 3 references fd 0 like record 1 */
    patch32(rec_off[3] + 8, 0, 2, CUC_E_BADMSG, "already referenced");
    /* unreferenced: record 1 skips fd 0 */
    patch32(rec_off[1] + 8, 1, 2, CUC_E_BADMSG, "skips");
    /* an index with no fds */
    patch32(rec_off[0] + 8, 1, 2, CUC_E_BADMSG, "fd count 0");
    /* an fd on a record that carries none */
    {
        uint8_t *c = copy_base();
        cuc__put32(c + rec_off[0] + 12, 1);
        cuc__put32(c + rec_off[1] + 8, 1);
        cuc__put32(c + 12, 3);
        /* fds: device 0, fd rec 1, fd rec 2 */
        cuc__put32(c + rec_off[3] + 8, 2);
        EXPECT_RC(c, base_len, 3, CUC_E_BADMSG, "device record with 1 fds");
        free(c);
    }
    /* an fd record without its fd */
    patch32(rec_off[1] + 12, 0, 2, CUC_E_BADMSG, NULL);
}

static void test_shapes(void)
{
    /* device payload shorter than a UUID (still fits its padding) */
    patch32(rec_off[0] + 4, 15, 2, CUC_E_BADMSG, NULL);
    patch32(rec_off[0] + 4, 8, 2, CUC_E_BADMSG, NULL);
    /* release payload not a whole number of ids */
    patch32(rec_off[4] + 4, 12, 2, CUC_E_BADMSG, NULL);
}

/* Every single-bit flip of the valid message: any status but a crash or a
 * leak (decode_n checks the fds). */
static void test_bitflips(void)
{
    uint8_t *c = copy_base();
    size_t i, ok = 0, badmsg = 0, version = 0;
    int bit;

    for (i = 0; i < base_len; i++) {
        for (bit = 0; bit < 8; bit++) {
            int rc;
            c[i] ^= (uint8_t)(1u << bit);
            rc = decode_n(c, base_len, 2, NULL);
            c[i] ^= (uint8_t)(1u << bit);
            if (rc == 0)
                ok++;
            else if (rc == CUC_E_BADMSG)
                badmsg++;
            else if (rc == CUC_E_VERSION)
                version++;
            else
                CHECK(!"unexpected status");
        }
    }
    /* payload bits (UUID, tags, lease ids, the odd record) may flip freely;
     * the header and record headers may not */
    CHECK(ok > 0 && badmsg > 0 && version > 0);
    free(c);
}

/* 4096 records decode in one pass. */
static void test_big(void)
{
    uint8_t p[8] = {0}, *b;
    const int *fds;
    size_t len, nfds;
    cuc_msg *m, *r;
    int i;

    CHECK_OK(cuc_msg_create(&m));
    for (i = 0; i < 4096; i++)
        CHECK_OK(cuc__msg_add_record(m, CUC_RECORD_RELEASE, 1, p, 8, NULL, 0));
    CHECK_OK(cuc__msg_encode(m, &b, &len, &fds, &nfds));
    CHECK_OK(decode_n(b, len, 0, &r));
    CHECK(cuc_msg_record_count(r) == 4096);
    cuc_msg_destroy(r);
    b[len - 1] = 1; /* no padding here: it is the last id's top byte */
    CHECK_OK(decode_n(b, len, 0, NULL));
    cuc__put32(b + 8, 4095);
    EXPECT_RC(b, len, 0, CUC_E_BADMSG, "after the last record");
    free(b);
    cuc_msg_destroy(m);
}

int main(void)
{
    int n;

    CHECK_OK(cuc_device_count(&n));
    FD_BASELINE();
    null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    CHECK(null_fd >= 0);
    find_odd_type();
    build_base();
    test_valid();
    test_truncation();
    test_lengths();
    test_counts();
    test_versions();
    test_reserved();
    test_fd_indexes();
    test_shapes();
    test_bitflips();
    test_big();
    free(base);
    close(null_fd);
    FD_CHECK_NO_LEAK();
    return test_finish();
}
