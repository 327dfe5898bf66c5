/* Writes the seed corpus of fuzz_msg_decode into the directory given:
 * valid messages of every record type cucore's wire module owns, and the
 * edge cases tests/test_wire_hostile.c checks. Each file is one control
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

static uint16_t odd_type(void)
{
    static const uint16_t types[] = {CUC_RECORD_KERNEL, CUC_RECORD_STREAM, CUC_RECORD_EVENT,
                                     CUC_RECORD_LAUNCH_CONFIG, CUC_RECORD_BUFFER};
    uint8_t p[13] = {0};
    cuc_msg *m = new_msg();
    uint16_t t = 0;

    for (size_t i = 0; i < CUC_ARRAY_LEN(types) && !t; i++)
        if (cuc__msg_add_record(m, types[i], 1, p, 13, NULL, 0) == 0)
            t = types[i];
    cuc_msg_destroy(m);
    return t;
}

static cuc_msg *mixed(void)
{
    uint8_t odd[13], rel[16];
    cuc_device *d;
    cuc_msg *m = new_msg();
    uint16_t t = odd_type();

    memset(odd, 0x5a, sizeof(odd));
    cuc__put64(rel, 1);
    cuc__put64(rel + 8, 2);
    if (cuc_device_get(0, &d) || cuc_msg_add_device(m, d) ||
        cuc_msg_add_fd(m, null_fd, 7) ||
        (t && cuc__msg_add_record(m, t, 1, odd, sizeof(odd), NULL, 0)) ||
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

    /* edge cases, on the mixed message (records at 24, 56, 80, 112, 136) */
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
    put_patched("fd_index_out", 112 + 8, 4, 5, 2);
    put_patched("fd_index_dup", 112 + 8, 4, 0, 2);
    put_patched("fd_index_skip", 56 + 8, 4, 1, 2);
    put_patched("padding", 80 + 16 + 13, 1, 1, 2);
    {
        static const uint8_t short_hdr[] = {'C', 'U', 'C', 'M', 1, 0};
        put("short_header", short_hdr, sizeof(short_hdr), 0);
    }
    close(null_fd);
    return 0;
}
