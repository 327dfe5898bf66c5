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

/* A message of one record written by hand, as a peer could send it: the
 * headers say type, version, the payload length len, the record's fd count
 * rec_nfds and the message's hdr_nfds; payload (body_len bytes, zero
 * padded to 8) follows. out has room for 40 + body_len + 7 bytes; returns
 * the message's length. */
static inline size_t test_raw_record(uint8_t *out, uint16_t type, uint16_t version,
                                     uint32_t len, uint32_t rec_nfds, uint32_t hdr_nfds,
                                     const void *body, size_t body_len)
{
    size_t padded = (body_len + 7) & ~(size_t)7, n = 24 + 16 + padded;

    memset(out, 0, n);
    cuc__put32(out, 0x4d435543u); /* "CUCM" */
    cuc__put16(out + 4, 1);
    cuc__put32(out + 8, 1);
    cuc__put32(out + 12, hdr_nfds);
    cuc__put32(out + 16, (uint32_t)n);
    cuc__put16(out + 24, type);
    cuc__put16(out + 26, version);
    cuc__put32(out + 28, len);
    cuc__put32(out + 36, rec_nfds);
    memcpy(out + 40, body, body_len);
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
