/* The decoder's quick path against its checked path: for valid messages
 * of every shape the quick path takes (fixed-shape records only, a
 * variable or fd-carrying record first or later, more records or bytes
 * than a message's inline storage, none) and for every mutation of them
 * (each byte, each 32-bit word set to the boundary values, truncations,
 * extensions, the wrong fd count), cuc__msg_decode and
 * cuc__msg_decode_checked must give the same status, the same message,
 * and close every fd they were given. The quick path checks without naming
 * and decodes again on the checked path when it refuses: a message it
 * accepted that the checks refuse would show here. */
#include <fcntl.h>
#include <stdint.h>

#include "check.h"
#include "cucore.h"
#include "device/device.h"
#include "wire/records.h"

static int null_fd = -1;
static long accepted, refused;

static void fresh_fds(int *fds, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        fds[i] = fcntl(null_fd, F_DUPFD_CLOEXEC, 0);
        CHECK(fds[i] >= 0);
    }
}

/* Both decodes of b (len bytes, nfds fds each); EXPECTs they agree. */
static void same_answer(const uint8_t *b, size_t len, size_t nfds, const char *what,
                        size_t at)
{
    int fq[8], fc[8];
    cuc_msg *q = NULL, *c = NULL;
    int rq, rcheck;

    CHECK(nfds <= 8);
    fresh_fds(fq, nfds);
    fresh_fds(fc, nfds);
    rq = cuc__msg_decode(b, len, fq, nfds, &q);
    rcheck = cuc__msg_decode_checked(b, len, fc, nfds, &c);
    for (size_t i = 0; i < nfds; i++)
        CHECK(fq[i] == -1 && fc[i] == -1);
    if (rq != rcheck)
        fprintf(stderr, "%s at %zu: quick %d, checked %d (%s)\n", what, at, rq, rcheck,
                cuc_errmsg());
    EXPECT(rq == rcheck);
    if (rq == 0 && rcheck == 0) {
        const int *fds;
        size_t qlen, clen, qn, cn;
        uint8_t *qb, *cb;

        CHECK_OK(cuc__msg_encode(q, &qb, &qlen, &fds, &qn));
        CHECK_OK(cuc__msg_encode(c, &cb, &clen, &fds, &cn));
        EXPECT(qlen == len && clen == len && qn == nfds && cn == nfds);
        EXPECT(memcmp(qb, b, len) == 0 && memcmp(cb, b, len) == 0);
        EXPECT(cuc_msg_record_count(q) == cuc_msg_record_count(c));
        EXPECT(cuc__release_rec_count(q) == cuc__release_rec_count(c));
        for (unsigned t = 1; t < 16; t++)
            EXPECT(cuc__msg_has_type(q, t) == cuc__msg_has_type(c, t));
        free(qb);
        free(cb);
        accepted++;
    } else if (rq != 0) {
        EXPECT(rq == CUC_E_BADMSG || rq == CUC_E_VERSION);
        EXPECT(cuc_errmsg()[0] != '\0');
        refused++;
    }
    cuc_msg_destroy(q);
    cuc_msg_destroy(c);
}

static const uint32_t word_values[] = {0,          1,          7,          8,
                                       15,         16,         17,         0x7fffffffu,
                                       0xfffffff0u, 0xfffffff8u, 0xffffffffu};

/* Every mutation of the valid message b. */
static void mutate_all(const uint8_t *b, size_t len, size_t nfds, const char *name)
{
    uint8_t *m = malloc(len + 16);
    const uint8_t byte_values[] = {0x00, 0x01, 0x08, 0x10, 0x80, 0xff};

    CHECK(m);
    same_answer(b, len, nfds, name, 0);
    for (size_t i = 0; i < len; i++) {
        for (size_t k = 0; k < sizeof(byte_values); k++) {
            memcpy(m, b, len);
            if (m[i] == byte_values[k])
                continue;
            m[i] = byte_values[k];
            same_answer(m, len, nfds, name, i);
        }
        memcpy(m, b, len);
        m[i] ^= 0x01;
        same_answer(m, len, nfds, name, i);
    }
    for (size_t i = 0; i + 4 <= len; i += 4) {
        for (size_t k = 0; k < CUC_ARRAY_LEN(word_values); k++) {
            memcpy(m, b, len);
            cuc__put32(m + i, word_values[k]);
            same_answer(m, len, nfds, name, i);
        }
        memcpy(m, b, len);
        cuc__put32(m + i, cuc__get32(b + i) + 8);
        same_answer(m, len, nfds, name, i);
        memcpy(m, b, len);
        cuc__put32(m + i, cuc__get32(b + i) - 8);
        same_answer(m, len, nfds, name, i);
    }
    for (size_t cut = 0; cut < len; cut++) {
        memcpy(m, b, len);
        same_answer(m, cut, nfds, name, cut);
        if (cut >= 24) { /* the total length told truthfully */
            cuc__put32(m + 16, (uint32_t)cut);
            same_answer(m, cut, nfds, name, cut);
        }
    }
    for (size_t extra = 8; extra <= 16; extra += 8) {
        memcpy(m, b, len);
        memset(m + len, 0, extra);
        same_answer(m, len + extra, nfds, name, len);
        cuc__put32(m + 16, (uint32_t)(len + extra));
        same_answer(m, len + extra, nfds, name, len);
    }
    same_answer(b, len, nfds + 1, name, 12);
    if (nfds)
        same_answer(b, len, nfds - 1, name, 12);
    free(m);
}

static void encode_and_mutate(cuc_msg *msg, const char *name)
{
    const int *fds;
    size_t len, nfds;
    uint8_t *b;

    CHECK_OK(cuc__msg_encode(msg, &b, &len, &fds, &nfds));
    mutate_all(b, len, nfds, name);
    free(b);
    cuc_msg_destroy(msg);
}

int main(void)
{
    uint8_t stream[24] = {0}, event[88] = {0}, kernel[53], rel[16], rel1[8];
    cuc_device *d;
    cuc_msg *m;

    /* the driver's own fds, opened at its initialisation and kept, are
     * not the decoder's: counted from after it */
    CHECK_OK(cuc_device_get(0, &d));
    FD_BASELINE();
    null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    CHECK(null_fd >= 0);
    memset(kernel, 0xab, sizeof(kernel));
    memset(kernel + 12, 0, 4); /* the kernel record's reserved word */
    memset(stream, 0x5a, 4);
    memset(stream + 8, 0x33, 16);
    memset(event, 0x77, 4);
    memset(event + 8, 0x44, 80);
    cuc__put64(rel, 7);
    cuc__put64(rel + 8, 9);
    cuc__put64(rel1, 11);

    /* none */
    CHECK_OK(cuc_msg_create(&m));
    encode_and_mutate(m, "empty");

    /* one device record: the benchmark's */
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_device(m, d));
    encode_and_mutate(m, "device");

    /* fixed shapes with reserved fields */
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_device(m, d));
    CHECK_OK(cuc__msg_add_record(m, CUC_RECORD_STREAM, 1, stream, sizeof(stream), NULL, 0));
    CHECK_OK(cuc__msg_add_record(m, CUC_RECORD_EVENT, 1, event, sizeof(event), NULL, 0));
    encode_and_mutate(m, "device, stream, event");

    /* a fixed record, then fds, an odd length and releases (the rest of the
     * records on the field-by-field path) */
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_device(m, d));
    CHECK_OK(cuc_msg_add_fd(m, null_fd, 1));
    CHECK_OK(cuc__msg_add_record(m, CUC_RECORD_KERNEL, 1, kernel, sizeof(kernel), NULL, 0));
    CHECK_OK(cuc_msg_add_fd(m, null_fd, 2));
    CHECK_OK(cuc__msg_add_record(m, CUC_RECORD_RELEASE, 1, rel, sizeof(rel), NULL, 0));
    CHECK_OK(cuc__msg_add_record(m, CUC_RECORD_RELEASE, 1, rel1, sizeof(rel1), NULL, 0));
    encode_and_mutate(m, "device, fd, kernel, fd, release, release");

    /* a variable record first */
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc__msg_add_record(m, CUC_RECORD_KERNEL, 1, kernel, sizeof(kernel), NULL, 0));
    CHECK_OK(cuc_msg_add_device(m, d));
    encode_and_mutate(m, "kernel, device");

    /* more records and bytes than the inline storage */
    CHECK_OK(cuc_msg_create(&m));
    for (int i = 0; i < 9; i++)
        CHECK_OK(cuc_msg_add_device(m, d));
    encode_and_mutate(m, "9 devices");

    printf("%ld mutations accepted by both, %ld refused by both\n", accepted, refused);
    CHECK(accepted > 0 && refused > 0);
    close(null_fd);
    FD_CHECK_NO_LEAK();
    return test_finish();
}
