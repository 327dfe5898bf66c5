/* The message container: round trips of every record this module owns, the
 * in-process device singleton, fd records, limits and the byte layout. */
#include <fcntl.h>
#include <sys/stat.h>

#include "check.h"
#include "cucore.h"
#include "device/device.h"
#include "wire/records.h"
#include "wire/wire.h"

static cuc_msg *roundtrip_bytes(const cuc_msg *m)
{
    cuc_msg *r;
    size_t len;
    void *b;

    CHECK_OK(cuc_msg_to_bytes(m, &b, &len));
    CHECK_OK(cuc_msg_from_bytes(b, len, &r));
    free(b);
    return r;
}

static void test_empty(void)
{
    cuc_msg *m, *r;
    size_t len;
    void *b;

    CHECK_OK(cuc_msg_create(&m));
    CHECK(cuc_msg_record_count(m) == 0);
    CHECK_OK(cuc_msg_to_bytes(m, &b, &len));
    CHECK(len == CUC__WIRE_HDR);
    CHECK(memcmp(b, "CUCM", 4) == 0);
    CHECK_OK(cuc_msg_from_bytes(b, len, &r));
    CHECK(cuc_msg_record_count(r) == 0);
    free(b);
    cuc_msg_destroy(r);
    cuc_msg_destroy(m);
    cuc_msg_destroy(NULL);
}

/* Every device round-trips to the very same singleton. */
static void test_devices(void)
{
    cuc_device *d, *got;
    cuc_msg *m, *r;
    int n, i, type;

    CHECK_OK(cuc_device_count(&n));
    CHECK_OK(cuc_msg_create(&m));
    for (i = 0; i < n; i++) {
        CHECK_OK(cuc_device_get(i, &d));
        CHECK_OK(cuc_msg_add_device(m, d));
    }
    r = roundtrip_bytes(m);
    CHECK(cuc_msg_record_count(r) == (size_t)n);
    for (i = 0; i < n; i++) {
        CHECK_OK(cuc_device_get(i, &d));
        CHECK_OK(cuc_msg_record_type(r, (size_t)i, &type));
        CHECK(type == CUC_RECORD_DEVICE);
        CHECK_OK(cuc_msg_get_device(r, (size_t)i, &got));
        CHECK(got == d);
    }
    CHECK_RC(cuc_msg_get_device(r, (size_t)n, &got), CUC_E_INVALID);
    CHECK_RC(cuc_msg_record_type(r, (size_t)n, &type), CUC_E_INVALID);
    cuc_msg_destroy(r);
    cuc_msg_destroy(m);
}

/* The exact bytes of a one-device message: the layout docs/wire-format.md
 * promises. */
static void test_layout(void)
{
    cuc_device *d;
    cuc_msg *m;
    uint8_t *b;
    size_t len;

    CHECK_OK(cuc_device_get(0, &d));
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_device(m, d));
    CHECK_OK(cuc_msg_to_bytes(m, (void **)&b, &len));
    CHECK(len == 24 + 16 + 16);
    CHECK(cuc__get32(b) == 0x4d435543u);
    CHECK(cuc__get16(b + 4) == 1);  /* format */
    CHECK(cuc__get16(b + 6) == 0);  /* flags */
    CHECK(cuc__get32(b + 8) == 1);  /* records */
    CHECK(cuc__get32(b + 12) == 0); /* fds */
    CHECK(cuc__get32(b + 16) == len);
    CHECK(cuc__get32(b + 20) == 0);
    CHECK(cuc__get16(b + 24) == CUC_RECORD_DEVICE);
    CHECK(cuc__get16(b + 26) == 1);
    CHECK(cuc__get32(b + 28) == 16);
    CHECK(cuc__get32(b + 32) == 0 && cuc__get32(b + 36) == 0);
    CHECK(memcmp(b + 40, cuc_device_uuid(d)->bytes, 16) == 0);
    free(b);
    cuc_msg_destroy(m);
}

/* A payload whose length is not a multiple of 8 is padded with zeros and
 * comes back exactly (kernel payloads: any length from 51 bytes, reserved
 * word at offset 12 zero). */
static void test_generic_records(void)
{
    uint8_t payload[51 + 40 * 7];
    struct cuc__record rec;
    cuc_msg *m, *r;
    size_t i;

    for (i = 0; i < sizeof(payload); i++)
        payload[i] = (uint8_t)(i * 7 + 1);
    memset(payload + 12, 0, 4);
    CHECK_OK(cuc_msg_create(&m));
    for (i = 0; i < 40; i++)
        CHECK_OK(cuc__msg_add_record(m, CUC_RECORD_KERNEL, 1, payload, (uint32_t)(51 + i * 7),
                                     NULL, 0));
    r = roundtrip_bytes(m);
    CHECK(cuc_msg_record_count(r) == 40);
    for (i = 0; i < 40; i++) {
        CHECK_OK(cuc__msg_record(r, i, &rec));
        CHECK(rec.type == CUC_RECORD_KERNEL && rec.version == 1);
        CHECK(rec.len == 51 + i * 7 && rec.nfds == 0);
        CHECK(memcmp(rec.payload, payload, rec.len) == 0);
        CHECK(((uintptr_t)rec.payload & 7) == 0);
    }
    cuc_msg_destroy(r);
    cuc_msg_destroy(m);
}

static void test_add_checks(void)
{
    uint8_t p[16] = {0};
    int fd = 0;
    cuc_msg *m;

    CHECK_OK(cuc_msg_create(&m));
    CHECK_RC(cuc__msg_add_record(m, 0, 1, p, 16, NULL, 0), CUC_E_INVALID);
    CHECK_RC(cuc__msg_add_record(m, 999, 1, p, 16, NULL, 0), CUC_E_INVALID);
    CHECK_RC(cuc__msg_add_record(m, CUC_RECORD_DEVICE, 2, p, 16, NULL, 0), CUC_E_INVALID);
    CHECK_RC(cuc__msg_add_record(m, CUC_RECORD_DEVICE, 0, p, 16, NULL, 0), CUC_E_INVALID);
    CHECK_RC(cuc__msg_add_record(m, CUC_RECORD_DEVICE, 1, p, 15, NULL, 0), CUC_E_INVALID);
    CHECK_RC(cuc__msg_add_record(m, CUC_RECORD_DEVICE, 1, p, 16, &fd, 1), CUC_E_INVALID);
    CHECK_RC(cuc__msg_add_record(m, CUC_RECORD_RELEASE, 1, p, 12, NULL, 0), CUC_E_INVALID);
    /* each type's shape, as on decode: a 23-byte stream, a 0-byte kernel */
    CHECK_RC(cuc__msg_add_record(m, CUC_RECORD_STREAM, 1, p, 16, NULL, 0), CUC_E_INVALID);
    CHECK_ERRMSG("outside 24..24");
    CHECK_RC(cuc__msg_add_record(m, CUC_RECORD_KERNEL, 1, NULL, 0, NULL, 0), CUC_E_INVALID);
    /* a reserved field that is not 0: the fd record's tag is free, the
     * word after it is not */
    p[0] = 0xff;
    p[4] = 1;
    CHECK_RC(cuc__msg_add_record(m, CUC_RECORD_FD, 1, p, 8, &fd, 1), CUC_E_INVALID);
    CHECK_ERRMSG("reserved field (payload offset 4, 4 bytes)");
    memset(p, 0, sizeof(p));
    CHECK_RC(cuc__msg_add_record(m, CUC_RECORD_KERNEL, 1, NULL, 4, NULL, 0), CUC_E_INVALID);
    CHECK_RC(cuc_msg_add_device(m, NULL), CUC_E_INVALID);
    CHECK_RC(cuc_msg_add_fd(m, -1, 0), CUC_E_INVALID);
    CHECK(cuc_msg_record_count(m) == 0);
    cuc_msg_destroy(m);
}

/* Limits: adding past CUC_MSG_MAX_RECORDS / _FDS / _BYTES is CUC_E_LIMIT. */
static void test_limits(void)
{
    static uint8_t big[1u << 20];
    uint32_t i;
    cuc_msg *m;

    CHECK_OK(cuc_msg_create(&m));
    for (i = 0; i < CUC_MSG_MAX_RECORDS; i++)
        CHECK_OK(cuc__msg_add_record(m, CUC_RECORD_DEVICE, 1, big, 16, NULL, 0));
    CHECK_RC(cuc__msg_add_record(m, CUC_RECORD_DEVICE, 1, big, 16, NULL, 0), CUC_E_LIMIT);
    cuc_msg_destroy(m);

    CHECK_OK(cuc_msg_create(&m));
    for (i = 0; i < 63; i++)
        CHECK_OK(cuc__msg_add_record(m, CUC_RECORD_KERNEL, 1, big, sizeof(big), NULL, 0));
    CHECK_RC(cuc__msg_add_record(m, CUC_RECORD_KERNEL, 1, big, sizeof(big), NULL, 0), CUC_E_LIMIT);
    CHECK(strstr(cuc_errmsg(), "maximum") != NULL);
    cuc_msg_destroy(m);
}

static void test_fd_records(void)
{
    const int *fds;
    uint8_t *b;
    size_t len, nfds;
    uint32_t tag;
    cuc_msg *m, *r;
    int fd, got, in[3], i, type;
    struct stat a, c;
    void *vb;

    fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    CHECK(fd >= 0);
    CHECK_OK(cuc_msg_create(&m));
    for (i = 0; i < 3; i++)
        CHECK_OK(cuc_msg_add_fd(m, fd, 100u + (uint32_t)i));
    CHECK(cuc_msg_fd_count(m) == 3);
    CHECK_RC(cuc_msg_to_bytes(m, &vb, &len), CUC_E_NEEDS_CHANNEL);
    CHECK(strstr(cuc_errmsg(), "cuc_channel_send") != NULL);
    CHECK_OK(cuc__msg_encode(m, &b, &len, &fds, &nfds));
    CHECK(nfds == 3);
    /* decode wants fds it owns: hand it dups, as recvmsg would */
    for (i = 0; i < 3; i++) {
        CHECK(fds[i] != fd);
        CHECK((fcntl(fds[i], F_GETFD) & FD_CLOEXEC) != 0);
        in[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 0);
        CHECK(in[i] >= 0);
    }
    CHECK_OK(cuc__msg_decode(b, len, in, 3, &r));
    free(b);
    for (i = 0; i < 3; i++)
        CHECK(in[i] == -1);
    CHECK(cuc_msg_record_count(r) == 3 && cuc_msg_fd_count(r) == 3);
    CHECK_OK(cuc_msg_record_type(r, 1, &type));
    CHECK(type == CUC_RECORD_FD);
    CHECK_OK(cuc_msg_take_fd(r, 1, &got, &tag));
    CHECK(tag == 101);
    CHECK(fstat(got, &a) == 0 && fstat(fd, &c) == 0);
    CHECK(a.st_ino == c.st_ino && a.st_dev == c.st_dev);
    CHECK_RC(cuc_msg_take_fd(r, 1, &got, &tag), CUC_E_INVALID);
    CHECK(strstr(cuc_errmsg(), "already taken") != NULL);
    CHECK(cuc_msg_fd_count(r) == 2);
    close(got);
    /* a message with a taken fd cannot be re-sent */
    CHECK_RC(cuc__msg_encode(r, &b, &len, &fds, &nfds), CUC_E_INVALID);
    /* the other two are closed by destroy (the leak check says so) */
    cuc_msg_destroy(r);
    cuc_msg_destroy(m);
    close(fd);
}

/* A device record and an fd record are different things. */
static void test_wrong_type(void)
{
    cuc_device *d;
    cuc_msg *m;
    int fd, null = open("/dev/null", O_RDONLY | O_CLOEXEC);

    CHECK(null >= 0);
    CHECK_OK(cuc_device_get(0, &d));
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_device(m, d));
    CHECK_OK(cuc_msg_add_fd(m, null, 5));
    close(null);
    CHECK_RC(cuc_msg_take_fd(m, 0, &fd, NULL), CUC_E_INVALID);
    CHECK_RC(cuc_msg_get_device(m, 1, &d), CUC_E_INVALID);
    CHECK_OK(cuc_msg_take_fd(m, 1, &fd, NULL));
    close(fd);
    cuc_msg_destroy(m);
}

/* Many records: O(n) growth, all come back in order. */
static void test_many(void)
{
    struct cuc__record rec;
    uint8_t p[16] = {0};
    cuc_msg *m, *r;
    uint32_t i;

    CHECK_OK(cuc_msg_create(&m));
    for (i = 0; i < 4096; i++) {
        cuc__put64(p, i);
        CHECK_OK(cuc__msg_add_record(m, CUC_RECORD_DEVICE, 1, p, 16, NULL, 0));
    }
    r = roundtrip_bytes(m);
    CHECK(cuc_msg_record_count(r) == 4096);
    for (i = 0; i < 4096; i++) {
        CHECK_OK(cuc__msg_record(r, i, &rec));
        CHECK(cuc__get64(rec.payload) == i);
    }
    cuc_msg_destroy(r);
    cuc_msg_destroy(m);
}

/* Encoding into the caller's buffer gives the same bytes as to_bytes,
 * refuses a buffer one byte short without writing, and fds as to_bytes. */
static void test_to_buffer(void)
{
    uint8_t buf[512], want_untouched[512];
    cuc_device *d;
    size_t len = 7, blen;
    cuc_msg *m;
    void *b;

    CHECK_OK(cuc_device_get(0, &d));
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_device(m, d));
    CHECK_OK(cuc_msg_add_device(m, d));
    CHECK_OK(cuc_msg_to_bytes(m, &b, &blen));
    CHECK(cuc_msg_wire_size(m) == blen);
    memset(buf, 0xee, sizeof(buf));
    memcpy(want_untouched, buf, sizeof(buf));
    CHECK_RC(cuc_msg_to_buffer(m, buf, blen - 1, &len), CUC_E_LIMIT);
    CHECK(len == 7 && memcmp(buf, want_untouched, sizeof(buf)) == 0);
    CHECK(strstr(cuc_errmsg(), "needs") != NULL);
    CHECK_OK(cuc_msg_to_buffer(m, buf, sizeof(buf), &len));
    CHECK(len == blen && memcmp(buf, b, blen) == 0);
    CHECK(buf[blen] == 0xee);
    CHECK_RC(cuc_msg_to_buffer(NULL, buf, sizeof(buf), &len), CUC_E_INVALID);
    CHECK(cuc_msg_wire_size(NULL) == 0);
    free(b);
    CHECK_OK(cuc_msg_add_fd(m, 0, 1));
    CHECK_RC(cuc_msg_to_buffer(m, buf, sizeof(buf), &len), CUC_E_NEEDS_CHANNEL);
    cuc_msg_destroy(m);
}

/* A decode that adopts its buffer (a channel's rejoined frames): a large
 * message reads its records in place and frees the buffer with itself,
 * and still grows (its data moves out); a small one is copied (the
 * buffer stays the caller's); a refused one leaves the buffer alone. */
static void test_adopt(void)
{
    static const char name[] = "big";
    size_t img = 200 * 1024, len, len2;
    uint8_t *rec = malloc(48 + sizeof(name) + img), *buf;
    struct cuc_record_view v;
    cuc_msg *m, *r;
    cuc_device *d;
    cuc_uuid u;
    int adopted = -1;

    CHECK(rec != NULL);
    memset(rec, 0, 48);
    cuc__put32(rec, CUC_IMAGE_PTX);
    cuc__put32(rec + 4, sizeof(name));
    cuc__put32(rec + 8, (uint32_t)img);
    memcpy(rec + 48, name, sizeof(name));
    for (size_t i = 0; i < img; i++)
        rec[48 + sizeof(name) + i] = (uint8_t)('a' + i % 26);
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc__msg_add_record(m, CUC_RECORD_KERNEL, 1, rec,
                                (uint32_t)(48 + sizeof(name) + img), NULL, 0));
    CHECK_OK(cuc_msg_to_bytes(m, (void **)&buf, &len));
    cuc_msg_destroy(m);
    CHECK_OK(cuc__msg_decode_adopt(buf, len, NULL, 0, &r, &adopted));
    CHECK(adopted == 1); /* buf is r's now */
    CHECK_OK(cuc_msg_record(r, 0, &v));
    CHECK(v.type == CUC_RECORD_KERNEL && v.len == 48 + sizeof(name) + img);
    CHECK(v.payload == buf + 24 + 16); /* read in place */
    CHECK(memcmp(v.payload, rec, v.len) == 0);
    CHECK_OK(cuc_device_get(0, &d));
    CHECK_OK(cuc_msg_add_device(r, d)); /* grows: the data leaves buf */
    CHECK_OK(cuc_msg_record(r, 0, &v));
    CHECK(memcmp(v.payload, rec, v.len) == 0);
    CHECK_OK(cuc_msg_read_device(r, 1, &u));
    CHECK(cuc_uuid_equal(&u, cuc_device_uuid(d)));
    cuc_msg_destroy(r); /* frees what buf became */

    /* small: copied, the buffer stays the caller's */
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_device(m, d));
    CHECK_OK(cuc_msg_to_bytes(m, (void **)&buf, &len2));
    cuc_msg_destroy(m);
    CHECK_OK(cuc__msg_decode_adopt(buf, len2, NULL, 0, &r, &adopted));
    CHECK(adopted == 0);
    memset(buf, 0xff, len2); /* the message has its own copy */
    CHECK_OK(cuc_msg_read_device(r, 0, &u));
    CHECK(cuc_uuid_equal(&u, cuc_device_uuid(d)));
    cuc_msg_destroy(r);
    free(buf);

    /* refused: nothing adopted */
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc__msg_add_record(m, CUC_RECORD_KERNEL, 1, rec,
                                (uint32_t)(48 + sizeof(name) + img), NULL, 0));
    CHECK_OK(cuc_msg_to_bytes(m, (void **)&buf, &len));
    cuc_msg_destroy(m);
    buf[len - 1] = 1; /* the padding after the record: not zero */
    r = NULL;
    CHECK_RC(cuc__msg_decode_adopt(buf, len, NULL, 0, &r, &adopted), CUC_E_BADMSG);
    CHECK(adopted == 0 && r == NULL);
    free(buf);
    free(rec);
}

int main(void)
{
    int n;

    CHECK_OK(cuc_device_count(&n));
    FD_BASELINE();
    test_empty();
    test_devices();
    test_layout();
    test_generic_records();
    test_add_checks();
    test_limits();
    test_fd_records();
    test_wrong_type();
    test_many();
    test_to_buffer();
    test_adopt();
    FD_CHECK_NO_LEAK();
    return test_finish();
}
