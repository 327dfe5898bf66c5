/* Writes the seed corpus of fuzz_msg_decode into the directory given:
 * valid messages of every record type cucore's wire module owns, and the
 * edge cases tests/test_wire_hostile.c checks (every type's shape and
 * reserved bytes, the release limits, unknown types with fds, no records). Each file is one control
 * byte (fd count, see fuzz_msg_decode.c) + the message.
 *
 *   CUCORE_DRIVER=sim CUCORE_SIM_GPUS=4 fuzz_gen_corpus_msg fuzz/corpus/msg_decode
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cucore.h"
#include "device/device.h"
#include "wire/records.h"

static const char *dir;
static int null_fd;

static void die(const char *what)
{
    fprintf(stderr, "gen_corpus_msg: %s: %s\n", what, cuc_errmsg());
    exit(1);
}

static void put(const char *name, const uint8_t *b, size_t len, unsigned nfds)
{
    char path[4096];
    uint8_t ctl = (uint8_t)nfds;
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    f = fopen(path, "wb");
    if (!f || fwrite(&ctl, 1, 1, f) != 1 || (len && fwrite(b, 1, len, f) != len) ||
        fclose(f) != 0) {
        perror(path);
        exit(1);
    }
}

static uint8_t *enc(cuc_msg *m, size_t *len, size_t *nfds)
{
    const int *fds;
    uint8_t *b;

    if (cuc__msg_encode(m, &b, len, &fds, nfds))
        die("encode");
    return b;
}

static void put_msg(const char *name, cuc_msg *m)
{
    size_t len, nfds;
    uint8_t *b = enc(m, &len, &nfds);

    put(name, b, len, (unsigned)nfds);
    free(b);
    cuc_msg_destroy(m);
}

static cuc_msg *new_msg(void)
{
    cuc_msg *m;

    if (cuc_msg_create(&m))
        die("create");
    return m;
}

/* Device, fd, a record of odd length (a kernel record's 53 bytes: the
 * decoder checks its shape and reserved word only), fd, release. */
#define ODD_LEN 53

static cuc_msg *mixed(void)
{
    uint8_t odd[ODD_LEN], rel[16];
    cuc_device *d;
    cuc_msg *m = new_msg();

    memset(odd, 0x5a, sizeof(odd));
    memset(odd + 12, 0, 4); /* reserved */
    cuc__put64(rel, 1);
    cuc__put64(rel + 8, 2);
    if (cuc_device_get(0, &d) || cuc_msg_add_device(m, d) ||
        cuc_msg_add_fd(m, null_fd, 7) ||
        cuc__msg_add_record(m, CUC_RECORD_KERNEL, 1, odd, sizeof(odd), NULL, 0) ||
        cuc_msg_add_fd(m, null_fd, 8) ||
        cuc__msg_add_record(m, CUC_RECORD_RELEASE, 1, rel, sizeof(rel), NULL, 0))
        die("mixed");
    return m;
}

/* The mixed message with one field overwritten. */
static void put_patched(const char *name, size_t at, int width, uint32_t v, unsigned nfds)
{
    cuc_msg *m = mixed();
    size_t len, n;
    uint8_t *b = enc(m, &len, &n);

    if (at + (size_t)width <= len) {
        if (width == 2)
            cuc__put16(b + at, (uint16_t)v);
        else if (width == 4)
            cuc__put32(b + at, v);
        else
            b[at] = (uint8_t)v;
        put(name, b, len, nfds);
    }
    free(b);
    cuc_msg_destroy(m);
}

/* A message of n records built byte by byte (add would refuse some):
 * each record i of type types[i], header length lens[i] over body_lens[i]
 * bytes of fill (zero where the type has its reserved field), nfds[i] fds. */
struct rec {
    uint16_t type;
    uint32_t len, body_len, nfds;
    uint8_t fill;
};

static void put_raw(const char *name, const struct rec *r, size_t n)
{
    static uint8_t b[1 << 17];
    size_t off = 24, i;
    uint32_t fds = 0;

    memset(b, 0, sizeof(b));
    for (i = 0; i < n; i++) {
        size_t padded = (r[i].body_len + 7u) & ~(size_t)7u;
        if (off + 16 + padded > sizeof(b))
            die(name);
        cuc__put16(b + off, r[i].type);
        cuc__put16(b + off + 2, 1);
        cuc__put32(b + off + 4, r[i].len);
        cuc__put32(b + off + 8, r[i].nfds ? fds : 0);
        cuc__put32(b + off + 12, r[i].nfds);
        memset(b + off + 16, r[i].fill, r[i].body_len);
        fds += r[i].nfds;
        off += 16 + padded;
    }
    cuc__put32(b, 0x4d435543u);
    cuc__put16(b + 4, 1);
    cuc__put32(b + 8, (uint32_t)n);
    cuc__put32(b + 12, fds);
    cuc__put32(b + 16, (uint32_t)off);
    put(name, b, off, fds);
}

/* The shape edges of every record type (tests/test_wire_hostile.c). */
static void shapes(void)
{
    static const struct {
        const char *name;
        uint16_t type;
        uint32_t min, fds;
    } t[] = {{"device", CUC_RECORD_DEVICE, 16, 0},  {"stream", CUC_RECORD_STREAM, 24, 0},
             {"event", CUC_RECORD_EVENT, 88, 0},    {"launch", CUC_RECORD_LAUNCH_CONFIG, 64, 0},
             {"kernel", CUC_RECORD_KERNEL, 51, 0},  {"pool", CUC_RECORD_POOL, 40, 1},
             {"buffer", CUC_RECORD_BUFFER, 104, 0}, {"vmm", CUC_RECORD_VMM, 48, 1},
             {"fd", CUC_RECORD_FD, 8, 1},           {"release", CUC_RECORD_RELEASE, 8, 0}};
    char name[64];

    for (size_t i = 0; i < CUC_ARRAY_LEN(t); i++) {
        struct rec r = {t[i].type, t[i].min, t[i].min, t[i].fds, 0};
        snprintf(name, sizeof(name), "shape_%s_min", t[i].name);
        put_raw(name, &r, 1);
        r.len = r.body_len = t[i].min - 1;
        snprintf(name, sizeof(name), "shape_%s_short", t[i].name);
        put_raw(name, &r, 1);
        r.len = r.body_len = t[i].min + 1;
        snprintf(name, sizeof(name), "shape_%s_long", t[i].name);
        put_raw(name, &r, 1);
        r.len = r.body_len = t[i].min;
        r.fill = 0xff; /* every reserved byte set */
        snprintf(name, sizeof(name), "shape_%s_reserved", t[i].name);
        put_raw(name, &r, 1);
        r.fill = 0;
        r.len = UINT32_MAX - 3;
        snprintf(name, sizeof(name), "shape_%s_len_lie", t[i].name);
        put_raw(name, &r, 1);
    }
}

/* Release limits, both edges; unknown types that carry fds; no records
 * but an fd ("empty" is the valid message of no records). */
static void limits(void)
{
    static struct rec many[1001];
    struct rec one = {CUC_RECORD_RELEASE, 8 * 8192, 8 * 8192, 0, 0x11};
    struct rec unknown[3] = {{CUC_RECORD_FD, 8, 8, 1, 0},
                             {200, 24, 24, 2, 0x77},
                             {CUC_RECORD_FD, 8, 8, 1, 0}};
    size_t i;

    put_raw("release_8192_ids", &one, 1);
    one.len = one.body_len = 8 * 8193;
    put_raw("release_8193_ids", &one, 1);
    for (i = 0; i < 1001; i++)
        many[i] = (struct rec){CUC_RECORD_RELEASE, 8, 8, 0, (uint8_t)i};
    put_raw("release_1000_records", many, 1000);
    put_raw("release_1001_records", many, 1001);
    put_raw("unknown_type_with_fds", unknown, 3);
    unknown[1].type = CUC_RECORD_FD;
    unknown[1].len = unknown[1].body_len = 8;
    put_raw("fd_record_v1_3", unknown, 3);
    {
        uint8_t b[24] = {'C', 'U', 'C', 'M', 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 24};
        put("zero_records_one_fd", b, sizeof(b), 1);
    }
}

int main(int argc, char **argv)
{
    cuc_device *d;
    uint8_t p[8];
    cuc_msg *m;
    int n = 0, i;

    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    dir = argv[1];
    null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null_fd < 0 || cuc_device_count(&n))
        die("setup");

    put_msg("empty", new_msg());
    m = new_msg();
    if (cuc_device_get(0, &d) || cuc_msg_add_device(m, d))
        die("device");
    put_msg("device", m);
    m = new_msg();
    for (i = 0; i < n; i++)
        if (cuc_device_get(i, &d) || cuc_msg_add_device(m, d))
            die("devices");
    put_msg("devices_all", m);
    m = new_msg();
    if (cuc_msg_add_fd(m, null_fd, 42))
        die("fd");
    put_msg("fd", m);
    m = new_msg();
    for (i = 0; i < 3; i++)
        if (cuc_msg_add_fd(m, null_fd, (uint32_t)i))
            die("fds");
    put_msg("fds_3", m);
    m = new_msg();
    cuc__put64(p, 0x1122334455667788ull);
    if (cuc__msg_add_record(m, CUC_RECORD_RELEASE, 1, p, 8, NULL, 0))
        die("release");
    put_msg("release", m);
    put_msg("mixed", mixed());
    m = new_msg();
    for (i = 0; i < 512; i++) {
        cuc__put64(p, (uint64_t)i);
        if (cuc__msg_add_record(m, CUC_RECORD_RELEASE, 1, p, 8, NULL, 0))
            die("many");
    }
    put_msg("many_records", m);

    /* edge cases, on the mixed message (records at 24, 56, 80, 152, 176) */
    put_patched("bad_magic", 0, 4, 0x4d435544u, 2);
    put_patched("format_v2", 4, 2, 2, 2);
    put_patched("flags", 6, 2, 1, 2);
    put_patched("nrecs_over_cap", 8, 4, CUC_MSG_MAX_RECORDS + 1, 2);
    put_patched("nrecs_lie", 8, 4, 6, 2);
    put_patched("nfds_over_cap", 12, 4, CUC_MSG_MAX_FDS + 1, 2);
    put_patched("nfds_mismatch", 0, 1, 0x43, 1);
    put_patched("total_len_max", 16, 4, UINT32_MAX, 2);
    put_patched("reserved", 20, 4, 1, 2);
    put_patched("rec_len_max", 24 + 4, 4, UINT32_MAX, 2);
    put_patched("rec_len_max_minus6", 24 + 4, 4, UINT32_MAX - 6, 2);
    put_patched("unknown_type", 24, 2, 200, 2);
    put_patched("rec_version_new", 24 + 2, 2, 9, 2);
    put_patched("fd_index_out", 152 + 8, 4, 5, 2);
    put_patched("fd_index_dup", 152 + 8, 4, 0, 2);
    put_patched("fd_index_skip", 56 + 8, 4, 1, 2);
    put_patched("padding", 80 + 16 + ODD_LEN, 1, 1, 2);
    put_patched("kernel_reserved", 80 + 16 + 12, 4, 1, 2);
    put_patched("fd_reserved", 56 + 16 + 4, 4, 1, 2);
    shapes();
    limits();
    {
        static const uint8_t short_hdr[] = {'C', 'U', 'C', 'M', 1, 0};
        put("short_header", short_hdr, sizeof(short_hdr), 0);
    }
    close(null_fd);
    return 0;
}
