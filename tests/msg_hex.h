/* Messages for the wire tests: as hex text, to hand them to an exec'd child
 * on its command line; and parsed back from bytes, as a receiver gets them. */
#ifndef CUC_TEST_MSG_HEX_H
#define CUC_TEST_MSG_HEX_H

#include <stdlib.h>
#include <string.h>

#include "cucore.h"
#include "check.h"
#include "wire/records.h"

/* The message's bytes as a malloc'd hex string. */
static inline char *msg_to_hex(const cuc_msg *m)
{
    static const char digits[] = "0123456789abcdef";
    void *bytes;
    size_t len, i;
    char *hex;

    CHECK_OK(cuc_msg_to_bytes(m, &bytes, &len));
    hex = malloc(2 * len + 1);
    CHECK(hex != NULL);
    for (i = 0; i < len; i++) {
        hex[2 * i] = digits[((const unsigned char *)bytes)[i] >> 4];
        hex[2 * i + 1] = digits[((const unsigned char *)bytes)[i] & 0xf];
    }
    hex[2 * len] = '\0';
    free(bytes);
    return hex;
}

static inline int hex_nibble(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* Parses hex into a message; the status of cuc_msg_from_bytes (or
 * CUC_E_INVALID for bad hex). */
static inline int msg_from_hex(const char *hex, cuc_msg **m)
{
    size_t n = strlen(hex), i;
    unsigned char *b;
    int rc;

    if (n % 2)
        return CUC_E_INVALID;
    b = malloc(n / 2 + 1);
    CHECK(b != NULL);
    for (i = 0; i < n / 2; i++) {
        int hi = hex_nibble(hex[2 * i]), lo = hex_nibble(hex[2 * i + 1]);
        if (hi < 0 || lo < 0) {
            free(b);
            return CUC_E_INVALID;
        }
        b[i] = (unsigned char)(hi << 4 | lo);
    }
    rc = cuc_msg_from_bytes(b, n / 2, m);
    free(b);
    return rc;
}

/* A message parsed from bytes that hold one record of type with payload
 * (version 1, no fds): what a receiver of such a record gets. */
static inline cuc_msg *msg_received(uint16_t type, const void *payload, uint32_t len)
{
    cuc_msg *m, *r;
    void *bytes;
    size_t n;

    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc__msg_add_record(m, type, 1, payload, len, NULL, 0));
    CHECK_OK(cuc_msg_to_bytes(m, &bytes, &n));
    CHECK_OK(cuc_msg_from_bytes(bytes, n, &r));
    free(bytes);
    cuc_msg_destroy(m);
    return r;
}

/* A record of a message built byte by byte, as a hostile or foreign peer
 * could send it: none of cuc__msg_add_record's checks apply. */
struct raw_rec {
    uint16_t type, version;
    uint32_t len;           /* the record header's payload length */
    const void *payload;    /* body_len bytes (padded to 8 with zeros) */
    uint32_t body_len;
    uint32_t nfds;          /* the record's fd count; fd indexes follow */
};

/* Bytes of a message of n records (header counts as the records say,
 * fds contiguous in record order); malloc'd, length in *len. */
static inline uint8_t *raw_msg(const struct raw_rec *recs, size_t n, size_t *len)
{
    size_t total = 24, off, i;
    uint32_t nfds = 0;
    uint8_t *b;

    for (i = 0; i < n; i++)
        total += 16 + ((recs[i].body_len + 7u) & ~(size_t)7u);
    b = calloc(1, total);
    CHECK(b != NULL);
    off = 24;
    for (i = 0; i < n; i++) {
        cuc__put16(b + off, recs[i].type);
        cuc__put16(b + off + 2, recs[i].version);
        cuc__put32(b + off + 4, recs[i].len);
        cuc__put32(b + off + 8, recs[i].nfds ? nfds : 0);
        cuc__put32(b + off + 12, recs[i].nfds);
        if (recs[i].body_len)
            memcpy(b + off + 16, recs[i].payload, recs[i].body_len);
        nfds += recs[i].nfds;
        off += 16 + ((recs[i].body_len + 7u) & ~(size_t)7u);
    }
    cuc__put32(b, 0x4d435543u);
    cuc__put16(b + 4, 1);
    cuc__put32(b + 8, (uint32_t)n);
    cuc__put32(b + 12, nfds);
    cuc__put32(b + 16, (uint32_t)total);
    *len = total;
    return b;
}

/* cuc_msg_from_bytes of a one-record message (no fds) of type with the len
 * bytes of payload, built by hand: the decoder's status, *m on success. */
static inline int msg_decode_one(uint16_t type, const void *payload, uint32_t len,
                                 cuc_msg **m)
{
    struct raw_rec r = {type, 1, len, payload, len, 0};
    size_t n;
    uint8_t *b = raw_msg(&r, 1, &n);
    int rc = cuc_msg_from_bytes(b, n, m);

    free(b);
    return rc;
}

/* A message of one record written by hand, as a peer could send it: the
 * headers say type, version, the payload length len, the record's fd count
 * rec_nfds and the message's hdr_nfds; payload (body_len bytes, zero
 * padded to 8) follows. out has room for 40 + body_len + 7 bytes; returns
 * the message's length. */
static inline size_t test_raw_record(uint8_t *out, uint16_t type, uint16_t version,
                                     uint32_t len, uint32_t rec_nfds, uint32_t hdr_nfds,
                                     const void *body, size_t body_len)
{
    struct raw_rec r = {type, version, len, body, (uint32_t)body_len, rec_nfds};
    size_t n;
    uint8_t *b = raw_msg(&r, 1, &n);

    cuc__put32(b + 12, hdr_nfds);
    memcpy(out, b, n);
    free(b);
    return n;
}

/* The ordinal that physical index phys gets in a process whose
 * CUDA_VISIBLE_DEVICES is the index list cvd ("3,1,2"), or -1. */
static inline int cvd_position(const char *cvd, int phys)
{
    int pos = 0;

    for (const char *p = cvd; *p; pos++) {
        if (atoi(p) == phys)
            return pos;
        p = strchr(p, ',');
        if (!p)
            break;
        p++;
    }
    return -1;
}

/* Hands m (as hex on its command line) to this binary's child role run
 * with CUDA_VISIBLE_DEVICES=cvd. With want, the child must print exactly
 * want; without (the child cannot see the device), CUC_E_NOT_VISIBLE
 * naming uuid. */
static inline void child_expect(const char *role, const cuc_msg *m, const char *cvd,
                                const char *uuid, const char *want)
{
    char env[128], out[8192];
    char *hex = msg_to_hex(m);
    const char *args[2] = {hex, NULL};

    snprintf(env, sizeof(env), "CUDA_VISIBLE_DEVICES=%s", cvd);
    CHECK(spawn_self_capture(role, args, (const char *const[]){env, NULL}, out,
                             sizeof(out)) == 0);
    if (want && strcmp(out, want)) {
        fprintf(stderr, "device %s, CUDA_VISIBLE_DEVICES=%s: got \"%s\", want \"%s\"\n",
                uuid, cvd, out, want);
        exit(1);
    }
    if (!want) {
        CHECK(strncmp(out, "ERR CUC_E_NOT_VISIBLE ", 22) == 0);
        CHECK(strstr(out, uuid) != NULL);
    }
    free(hex);
}

/* Calls check(dev, cvd, arg) for each physical device dev the wire tests
 * address (0..3 with four or more GPUs, else 0) under each visibility a
 * child gets: all reversed, a subset, one, none (the device is then not
 * visible, and the child must say so). */
static inline void for_each_visibility(int ndevices, void (*check)(int dev, const char *cvd, void *arg),
                                       void *arg)
{
    static const char *const four[] = {"3,2,1,0", "1,3", "2", ""};
    static const char *const one[] = {"0", ""};
    const char *const *lists = ndevices >= 4 ? four : one;
    size_t nl = ndevices >= 4 ? 4 : 2;

    for (size_t i = 0; i < nl; i++)
        for (int d = 0; d < (ndevices >= 4 ? 4 : 1); d++)
            check(d, lists[i], arg);
}

#endif
