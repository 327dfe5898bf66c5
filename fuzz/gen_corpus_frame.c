/* Writes the seed corpus of fuzz_channel_frame into the directory given:
 * frame sequences as cuc_channel_send() produces them (one frame, fds, a
 * message split by fds and by bytes) and the lies tests/test_channel_hostile.c
 * tells. Format: see fuzz_channel_frame.c.
 *
 *   CUCORE_DRIVER=sim CUCORE_SIM_GPUS=4 fuzz_gen_corpus_frame fuzz/corpus/channel_frame
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cucore.h"
#include "device/device.h"
#include "frame/frame.h"
#include "wire/records.h"

static const char *dir;
static uint8_t out[4u << 20];
static size_t out_len;

static void die(const char *what)
{
    fprintf(stderr, "gen_corpus_frame: %s: %s\n", what, cuc_errmsg());
    exit(1);
}

static void flush(const char *name)
{
    char path[4096];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    f = fopen(path, "wb");
    if (!f || fwrite(out, 1, out_len, f) != out_len || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
    out_len = 0;
}

static uint8_t fd_code(uint32_t nfds)
{
    if (nfds > CUC__FRAME_MAX_FDS)
        die("fd count not expressible");
    return (uint8_t)nfds;
}

static void frame(const struct cuc__frame *f, const uint8_t *data, uint32_t data_len)
{
    if (out_len + 5 + CUC__FRAME_HDR + data_len > sizeof(out))
        die("corpus entry too big");
    out[out_len] = fd_code(f->nfds);
    cuc__put32(out + out_len + 1, CUC__FRAME_HDR + data_len);
    cuc__frame_write(out + out_len + 5, f);
    if (data_len)
        memcpy(out + out_len + 5 + CUC__FRAME_HDR, data, data_len);
    out_len += 5 + CUC__FRAME_HDR + data_len;
}

/* All frames of an encoded message, as the sender splits it. */
static uint32_t frames_of(uint32_t seq, const uint8_t *b, uint32_t len, uint32_t nfds)
{
    uint32_t parts = cuc__frame_parts(len, nfds), p;

    for (p = 0; p < parts; p++) {
        struct cuc__frame f = {seq + p, p, parts, 0, 0, len, nfds};
        uint32_t off, fo;
        cuc__frame_slice(len, nfds, p, &off, &f.len, &fo, &f.nfds);
        frame(&f, b + off, f.len);
    }
    return parts;
}

static uint8_t *encode(cuc_msg *m, size_t *len, size_t *nfds)
{
    const int *fds;
    uint8_t *b;

    if (cuc__msg_encode(m, &b, len, &fds, nfds))
        die("encode");
    cuc_msg_destroy(m);
    return b;
}

static uint8_t *msg_with(int ndev, int nfd, size_t *len, size_t *nfds)
{
    int null = open("/dev/null", O_RDONLY | O_CLOEXEC), i;
    cuc_device *d;
    cuc_msg *m;

    if (null < 0 || cuc_msg_create(&m))
        die("msg");
    for (i = 0; i < ndev; i++)
        if (cuc_device_get(i % 4, &d) || cuc_msg_add_device(m, d))
            die("device");
    for (i = 0; i < nfd; i++)
        if (cuc_msg_add_fd(m, null, (uint32_t)i))
            die("fd");
    close(null);
    return encode(m, len, nfds);
}

int main(int argc, char **argv)
{
    struct cuc__frame f;
    size_t len, nfds;
    uint8_t *b, *b2;
    uint32_t seq;
    int n;

    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    dir = argv[1];
    if (cuc_device_count(&n) || n < 4)
        die("needs 4 devices (CUCORE_DRIVER=sim CUCORE_SIM_GPUS=4)");

    b = msg_with(1, 0, &len, &nfds);
    frames_of(0, b, (uint32_t)len, 0);
    flush("one_device");
    seq = frames_of(0, b, (uint32_t)len, 0);
    frames_of(seq, b, (uint32_t)len, 0);
    flush("two_messages");

    b2 = msg_with(1, 2, &len, &nfds);
    frames_of(0, b2, (uint32_t)len, 2);
    flush("two_fds");
    free(b2);

    b2 = msg_with(1, 600, &len, &nfds); /* 3 frames by fds */
    frames_of(0, b2, (uint32_t)len, 600);
    flush("split_fds");
    /* the first frame alone: the sender stopped */
    f = (struct cuc__frame){0, 0, 3, 0, 253, (uint32_t)len, 600};
    cuc__frame_slice((uint32_t)len, 600, 0, &(uint32_t){0}, &f.len, &(uint32_t){0}, &f.nfds);
    frame(&f, b2, f.len);
    flush("split_fds_cut");
    free(b2);

    b2 = msg_with(4000, 0, &len, &nfds); /* 128 KiB: 2 frames by bytes */
    frames_of(0, b2, (uint32_t)len, 0);
    flush("split_bytes");
    /* rejoined, then refused by the decoder (an unknown record type in its
     * second frame), then the good one on the same state */
    {
        size_t last = CUC__WIRE_HDR;
        for (uint32_t i = 0; i + 1 < cuc__get32(b2 + 8); i++)
            last += CUC__WIRE_REC_HDR + ((cuc__get32(b2 + last + 4) + 7u) & ~7u);
        b2[last] = 0xee; /* its type (the low byte) */
        seq = frames_of(0, b2, (uint32_t)len, 0);
        b2[last] = CUC_RECORD_DEVICE;
        frames_of(seq, b2, (uint32_t)len, 0);
    }
    flush("split_bytes_bad_then_good");
    free(b2);

    /* split by its fds, yet shorter than the message header: all of it in
     * the header part of the rejoining */
    f = (struct cuc__frame){0, 0, 2, 10, 253, 10, 254};
    frame(&f, (const uint8_t *)"CUCM\1\0\0\0\0\0", 10);
    f = (struct cuc__frame){1, 1, 2, 0, 1, 10, 254};
    frame(&f, NULL, 0);
    flush("split_fds_short");

    /* lies, each on the one-device message */
    b2 = msg_with(1, 0, &len, &nfds);
    f = (struct cuc__frame){0, 0, 1, (uint32_t)len, 0, (uint32_t)len, 0};
    f.nfds = 1;
    frame(&f, b2, (uint32_t)len);
    flush("nfds_lie");
    f = (struct cuc__frame){0, 0, 1, (uint32_t)len, 0, UINT32_MAX, 0};
    frame(&f, b2, (uint32_t)len);
    flush("msg_len_max");
    f = (struct cuc__frame){0, 0, 1, UINT32_MAX, 0, (uint32_t)len, 0};
    frame(&f, b2, (uint32_t)len);
    flush("len_max");
    f = (struct cuc__frame){0, 0, 20, 0, 0, 0, 5000};
    frame(&f, NULL, 0);
    flush("msg_nfds_over_cap");
    f = (struct cuc__frame){0, 0, 1, (uint32_t)len, 0, (uint32_t)len, 0};
    frame(&f, b2, (uint32_t)len);
    f.seq = 5;
    frame(&f, b2, (uint32_t)len);
    flush("seq_gap");
    f = (struct cuc__frame){0, 1, 1, (uint32_t)len, 0, (uint32_t)len, 0};
    frame(&f, b2, (uint32_t)len);
    flush("part_out_of_range");
    f = (struct cuc__frame){0, 0, 1, (uint32_t)len, 0, (uint32_t)len, 0};
    frame(&f, b2, (uint32_t)len);
    cuc__put32(out + 5, 0x12345678); /* magic */
    flush("bad_magic");
    frame(&f, b2, (uint32_t)len);
    cuc__put16(out + 5 + 4, 2); /* version */
    flush("version_2");
    frame(&f, b2, (uint32_t)len);
    cuc__put32(out + 5 + 36, 1); /* reserved */
    flush("reserved");
    frame(&f, b2, (uint32_t)len);
    out[5 + CUC__FRAME_HDR + CUC__WIRE_HDR] = 200; /* unknown record type */
    flush("bad_content");
    free(b2);
    free(b);
    return 0;
}
