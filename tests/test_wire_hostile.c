/* Hostile bytes: every malformed message gives the right code, a message
 * naming the field, and closes every fd it was handed. */
#include <fcntl.h>
#include <stdint.h>

#include "check.h"
#include "cucore.h"
#include "device/device.h"
#include "msg_hex.h"
#include "wire/records.h"

#define HDR 24
#define RH 16

static int null_fd = -1;

/* The valid message every case mutates: device, fd, odd-length record (a
 * kernel record's 53 bytes: the decoder checks its shape and reserved
 * word, not what the resolver checks), fd, release. rec_off[i] is the
 * offset of record i. */
#define ODD_LEN 53
static uint8_t *base;
static size_t base_len;
static size_t rec_off[5];

static void build_base(void)
{
    uint8_t odd[ODD_LEN], rel[16];
    const int *fds;
    size_t nfds, off, i;
    cuc_device *d;
    cuc_msg *m;

    memset(odd, 0xab, sizeof(odd));
    memset(odd + 12, 0, 4); /* the kernel record's reserved word */
    cuc__put64(rel, 7);
    cuc__put64(rel + 8, 9);
    CHECK_OK(cuc_device_get(0, &d));
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_device(m, d));
    CHECK_OK(cuc_msg_add_fd(m, null_fd, 1));
    CHECK_OK(cuc__msg_add_record(m, CUC_RECORD_KERNEL, 1, odd, sizeof(odd), NULL, 0));
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
    /* padding after the 53-byte payload */
    c = copy_base();
    c[rec_off[2] + RH + ODD_LEN] = 1;
    EXPECT_RC(c, base_len, 2, CUC_E_BADMSG, "padding");
    free(c);
    c = copy_base();
    c[rec_off[2] + RH + ODD_LEN + 2] = 0x80;
    EXPECT_RC(c, base_len, 2, CUC_E_BADMSG, "padding");
    free(c);
    /* reserved word of the fd record, of the kernel record */
    patch32(rec_off[1] + RH + 4, 1, 2, CUC_E_BADMSG, "reserved fd record field");
    patch32(rec_off[2] + RH + 12, 0x100, 2, CUC_E_BADMSG, "reserved kernel record field");
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
    uint8_t p[16] = {0}, *b;
    const int *fds;
    size_t len, nfds;
    cuc_msg *m, *r;
    int i;

    CHECK_OK(cuc_msg_create(&m));
    for (i = 0; i < 4096; i++)
        CHECK_OK(cuc__msg_add_record(m, CUC_RECORD_DEVICE, 1, p, 16, NULL, 0));
    CHECK_OK(cuc__msg_encode(m, &b, &len, &fds, &nfds));
    CHECK_OK(decode_n(b, len, 0, &r));
    CHECK(cuc_msg_record_count(r) == 4096);
    cuc_msg_destroy(r);
    b[len - 1] = 1; /* no padding here: it is the last UUID's last byte */
    CHECK_OK(decode_n(b, len, 0, NULL));
    cuc__put32(b + 8, 4095);
    EXPECT_RC(b, len, 0, CUC_E_BADMSG, "after the last record");
    free(b);
    cuc_msg_destroy(m);
}

/* ---- every type's shape, as docs/wire-format.md's table gives it ---- */

struct shape {
    uint16_t type;
    const char *name;
    uint32_t min, max, mul, min_fds, max_fds, rsv_off, rsv_len;
};

/* The numbers of the doc, written out here (not taken from wire.h). */
static const struct shape doc_shapes[] = {
    {CUC_RECORD_DEVICE, "device", 16, 16, 8, 0, 0, 0, 0},
    {CUC_RECORD_STREAM, "stream", 24, 24, 8, 0, 0, 4, 4},
    {CUC_RECORD_EVENT, "event", 88, 88, 8, 0, 0, 4, 4},
    {CUC_RECORD_LAUNCH_CONFIG, "launch config", 64, 64, 8, 0, 0, 44, 20},
    {CUC_RECORD_KERNEL, "kernel", 51, (64u << 20) - 40, 1, 0, 0, 12, 4},
    {CUC_RECORD_POOL, "pool", 40, 40, 8, 1, 1, 0, 0},
    {CUC_RECORD_BUFFER, "buffer", 104, 104, 8, 0, 0, 24, 8},
    {CUC_RECORD_VMM, "vmm", 48, 9256, 8, 1, 1024, 12, 4},
    {CUC_RECORD_FD, "fd", 8, 8, 8, 1, 1, 4, 4},
    {CUC_RECORD_RELEASE, "release", 8, 65536, 8, 0, 0, 0, 0},
    {CUC_RECORD_KERNEL_REF, "kernel ref", 50, 4144, 1, 0, 0, 12, 4},
    {CUC_RECORD_KERNEL_HELD, "kernel held", 40, 40, 8, 0, 0, 0, 0},
};

/* One record of type s with a header length of len over body_len zero
 * bytes (body[rsv] patched by the caller through *body), nfds fds. */
static int decode_one(const struct shape *s, uint32_t len, uint32_t body_len, uint32_t nfds,
                      const uint8_t *body)
{
    struct raw_rec r = {s->type, 1, len, body, body_len, nfds};
    size_t n;
    uint8_t *b = raw_msg(&r, 1, &n);
    int rc = decode_n(b, n, nfds, NULL);

    free(b);
    return rc;
}

static void expect_one(const struct shape *s, uint32_t len, uint32_t body_len, uint32_t nfds,
                       const uint8_t *body, int want, const char *text)
{
    int rc = decode_one(s, len, body_len, nfds, body);

    if (rc != want || (text && !strstr(cuc_errmsg(), text))) {
        fprintf(stderr, "%s record, length %u, %u fds: got %s (%s), wanted %s with "
                "\"%s\"\n", s->name, len, nfds, cuc_errname(rc), cuc_errmsg(),
                cuc_errname(want), text ? text : "");
        exit(1);
    }
}

static void test_every_shape(void)
{
    static uint8_t body[65536 + 16];
    static const uint32_t lies[] = {UINT32_MAX, UINT32_MAX - 1, UINT32_MAX - 7,
                                    UINT32_MAX - 8, 0x80000000u};
    char text[128];
    size_t t, k;

    for (t = 0; t < CUC_ARRAY_LEN(doc_shapes); t++) {
        const struct shape *s = &doc_shapes[t];
        uint32_t fds = s->min_fds, top = s->max < 65536 ? s->max : 65536;

        memset(body, 0, sizeof(body));
        expect_one(s, s->min, s->min, fds, body, 0, NULL);
        if (s->max <= 65536)
            expect_one(s, s->max, s->max, fds, body, 0, NULL);
        snprintf(text, sizeof(text), "%s payload length %u outside %u..%u", s->name,
                 s->min - 1, s->min, s->max);
        expect_one(s, s->min - 1, s->min - 1, fds, body, CUC_E_BADMSG,
                   s->type == CUC_RECORD_RELEASE ? NULL : text);
        expect_one(s, 0, 0, fds, body, CUC_E_BADMSG, "payload length 0 outside");
        if (s->max < 65536 && s->type != CUC_RECORD_RELEASE) {
            snprintf(text, sizeof(text), "%s payload length %u outside", s->name, s->max + 1);
            expect_one(s, s->max + 1, s->max + 1, fds, body, CUC_E_BADMSG, text);
            expect_one(s, s->max + 8, s->max + 8, fds, body, CUC_E_BADMSG, "outside");
        }
        if (s->mul > 1 && s->min + 1 < s->max)
            expect_one(s, s->min + 1, s->min + 1, fds, body, CUC_E_BADMSG, "multiple of 8");
        /* a length that lies, near UINT32_MAX: refused before the shape */
        for (k = 0; k < CUC_ARRAY_LEN(lies); k++)
            expect_one(s, lies[k], s->min, fds, body, CUC_E_BADMSG, "exceeds");
        /* fd counts one past either end */
        if (s->min_fds)
            expect_one(s, s->min, s->min, s->min_fds - 1, body, CUC_E_BADMSG, "fds (it carries");
        if (s->max_fds < 8)
            expect_one(s, s->min, s->min, s->max_fds + 1, body, CUC_E_BADMSG, "fds (it carries");
        /* each reserved byte, alone */
        for (k = s->rsv_off; k < s->rsv_off + s->rsv_len; k++) {
            snprintf(text, sizeof(text), "reserved %s record field at offset %u (payload "
                     "offset %u, %u bytes) is not 0", s->name, 24 + 16 + s->rsv_off,
                     s->rsv_off, s->rsv_len);
            body[k] = k & 1 ? 0x80 : 0x01;
            expect_one(s, s->min, s->min, fds, body, CUC_E_BADMSG, text);
            body[k] = 0;
        }
        /* ...and the bytes around it are free at decode */
        memset(body, 0xa5, top);
        memset(body + s->rsv_off, 0, s->rsv_len);
        expect_one(s, s->min, s->min, fds, body, 0, NULL);
    }
}

/* A message of no records is the 24-byte header alone. */
static void test_zero_records(void)
{
    uint8_t want[24] = {'C', 'U', 'C', 'M', 1, 0, 0, 0, 0, 0, 0, 0,
                        0, 0, 0, 0, 24, 0, 0, 0, 0, 0, 0, 0};
    uint8_t longer[32] = {0};
    cuc_msg *m, *r;
    void *b;
    size_t len;

    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_to_bytes(m, &b, &len));
    CHECK(len == 24 && memcmp(b, want, 24) == 0);
    free(b);
    cuc_msg_destroy(m);
    CHECK_OK(decode_n(want, 24, 0, &r));
    CHECK(cuc_msg_record_count(r) == 0 && cuc_msg_fd_count(r) == 0);
    cuc_msg_destroy(r);
    /* with an fd, nothing references it; with bytes after the header, they
     * are after the last record */
    want[12] = 1;
    EXPECT_RC(want, 24, 1, CUC_E_BADMSG, "fds 0..0 arrived with the message but no record");
    want[12] = 0;
    memcpy(longer, want, 24);
    longer[16] = 32;
    EXPECT_RC(longer, 32, 0, CUC_E_BADMSG, "8 bytes after the last record (offset 24)");
}

/* Release records: 8192 ids a record and 1000 records a message, enforced
 * when added and when decoded; both edges. */
static void test_release_limits(void)
{
    static uint8_t ids[8 * 8193];
    static struct raw_rec recs[1002];
    uint8_t dev[16] = {0}, *b;
    size_t i, len;
    cuc_msg *m;

    for (i = 0; i < 8193; i++)
        cuc__put64(ids + 8 * i, i + 1);
    /* one record: 8192 ids, 8193 */
    recs[0] = (struct raw_rec){CUC_RECORD_RELEASE, 1, 8 * 8192, ids, 8 * 8192, 0};
    b = raw_msg(recs, 1, &len);
    EXPECT_RC(b, len, 0, 0, NULL);
    free(b);
    recs[0].len = recs[0].body_len = 8 * 8193;
    b = raw_msg(recs, 1, &len);
    EXPECT_RC(b, len, 0, CUC_E_BADMSG, "release payload length 65544 is more than the "
              "8192 lease ids a release record holds");
    free(b);
    /* 1000 release records (and other records besides), 1001 */
    for (i = 0; i < 1001; i++)
        recs[i] = (struct raw_rec){CUC_RECORD_RELEASE, 1, 8, ids + 8 * i, 8, 0};
    recs[1001] = (struct raw_rec){CUC_RECORD_DEVICE, 1, 16, dev, 16, 0};
    recs[1000] = recs[1001];
    b = raw_msg(recs, 1001, &len);
    EXPECT_RC(b, len, 0, 0, NULL);
    free(b);
    recs[1000] = recs[0];
    b = raw_msg(recs, 1001, &len);
    EXPECT_RC(b, len, 0, CUC_E_BADMSG, "record 1000 at offset 24024: more than the 1000 "
              "release records a message holds");
    free(b);
    /* adding: the same limits */
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc__msg_add_record(m, CUC_RECORD_RELEASE, 1, ids, 8 * 8192, NULL, 0));
    CHECK_RC(cuc__msg_add_record(m, CUC_RECORD_RELEASE, 1, ids, 8 * 8193, NULL, 0),
             CUC_E_INVALID);
    for (i = 1; i < 1000; i++)
        CHECK_OK(cuc__msg_add_record(m, CUC_RECORD_RELEASE, 1, ids, 8, NULL, 0));
    CHECK_RC(cuc__msg_add_record(m, CUC_RECORD_RELEASE, 1, ids, 8, NULL, 0), CUC_E_LIMIT);
    CHECK_ERRMSG("1000 release records");
    CHECK_OK(cuc__msg_add_record(m, CUC_RECORD_DEVICE, 1, dev, 16, NULL, 0));
    CHECK(cuc_msg_record_count(m) == 1001);
    cuc_msg_destroy(m);
}

/* An unknown type, or a newer version, fails the whole message with
 * CUC_E_VERSION, whoever carries the fds: all of them are closed. */
static void test_unknown_with_fds(void)
{
    uint8_t fdp[8] = {0}, odd[24] = {0}, *b;
    struct raw_rec recs[3] = {
        {CUC_RECORD_FD, 1, 8, fdp, 8, 1},
        {200, 1, 24, odd, 24, 2},
        {CUC_RECORD_FD, 1, 8, fdp, 8, 1},
    };
    size_t len;

    b = raw_msg(recs, 3, &len);
    EXPECT_RC(b, len, 4, CUC_E_VERSION, "record 1 at offset 48: unknown record type 200");
    free(b);
    recs[1].type = CUC_RECORD_FD; /* known, but version 2 */
    recs[1].version = 2;
    recs[1].len = recs[1].body_len = 8;
    b = raw_msg(recs, 3, &len);
    EXPECT_RC(b, len, 4, CUC_E_VERSION, "fd record version 2 is newer");
    free(b);
    /* an unknown type whose length lies is a malformed message first */
    recs[1] = (struct raw_rec){200, 1, UINT32_MAX, odd, 24, 2};
    b = raw_msg(recs, 3, &len);
    EXPECT_RC(b, len, 4, CUC_E_BADMSG, "exceeds");
    free(b);
}

int main(void)
{
    int n;

    CHECK_OK(cuc_device_count(&n));
    FD_BASELINE();
    null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    CHECK(null_fd >= 0);
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
    test_every_shape();
    test_zero_records();
    test_release_limits();
    test_unknown_with_fds();
    free(base);
    close(null_fd);
    FD_CHECK_NO_LEAK();
    return test_finish();
}
