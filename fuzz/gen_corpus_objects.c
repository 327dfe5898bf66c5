/* Writes the seed corpus of fuzz_objects into the directory given: valid
 * stream, event, launch-config and kernel messages (PTX and, if given as
 * further arguments, cubin / fatbin files), and the hostile variants of
 * tests/test_objects_hostile.c. Each file is one message.
 *
 *   CUCORE_DRIVER=sim CUCORE_SIM_GPUS=4 fuzz_gen_corpus_objects fuzz/corpus/objects \
 *       [build/sim/test-images/sim_kernels.cubin ...]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "objects.h"

static const char *dir;

static const char ptx[] =
    ".version 7.0\n.target sm_70\n.address_size 64\n"
    ".visible .entry seed(.param .u64 p)\n{\n  ret;\n}\n"
    ".visible .entry other()\n{\n  ret;\n}\n";

static void die(const char *what)
{
    fprintf(stderr, "gen_corpus_objects: %s: %s\n", what, cuc_errmsg());
    exit(1);
}

static void put_msg(const char *name, cuc_msg *m)
{
    char path[4096];
    void *b;
    size_t len;
    FILE *f;

    if (cuc_msg_to_bytes(m, &b, &len))
        die(name);
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    f = fopen(path, "wb");
    if (!f || fwrite(b, 1, len, f) != len || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
    free(b);
    cuc_msg_destroy(m);
}

static cuc_msg *new_msg(void)
{
    cuc_msg *m;

    if (cuc_msg_create(&m))
        die("cuc_msg_create");
    return m;
}

/* One raw record of type with payload p. */
static void put_raw(const char *name, uint16_t type, const uint8_t *p, uint32_t len)
{
    cuc_msg *m = new_msg();

    if (cuc__msg_add_record(m, type, 1, p, len, NULL, 0))
        die(name);
    put_msg(name, m);
}

static void streams(cuc_device *d)
{
    cuc_stream *s;
    cuc_msg *m = new_msg();
    uint8_t p[24];

    if (cuc_stream_legacy(d, &s) || cuc_msg_add_stream(m, s) ||
        cuc_stream_per_thread(d, &s) || cuc_msg_add_stream(m, s) || cuc_msg_add_device(m, d))
        die("streams");
    put_msg("streams", m);
    memset(p, 0, sizeof(p));
    memcpy(p + 8, cuc_device_uuid(d)->bytes, 16);
    put_raw("stream_kind0", CUC_RECORD_STREAM, p, 24);
    cuc__put32(p, 3);
    put_raw("stream_kind3", CUC_RECORD_STREAM, p, 24);
    cuc__put32(p, 1);
    p[4] = 1;
    put_raw("stream_reserved", CUC_RECORD_STREAM, p, 24);
    p[4] = 0;
    memset(p + 8, 0xab, 16);
    put_raw("stream_unknown_uuid", CUC_RECORD_STREAM, p, 24);
    put_raw("stream_short", CUC_RECORD_STREAM, p, 23);
}

static void events(cuc_device *d)
{
    cuc_event *ev;
    cuc_msg *m = new_msg();
    uint8_t p[88];

    if (cuc_event_create(d, CUC_EVENT_IPC | CUC_EVENT_BLOCKING_SYNC, &ev) ||
        cuc_msg_add_event(m, ev))
        die("event");
    put_msg("event", m);
    cuc_event_destroy(ev); /* the handle is dead: opening it must fail cleanly */
    memset(p, 0, sizeof(p));
    cuc__put32(p, CUC_EVENT_IPC | CUC_EVENT_TIMING);
    memcpy(p + 8, cuc_device_uuid(d)->bytes, 16);
    put_raw("event_timing", CUC_RECORD_EVENT, p, 88);
    cuc__put32(p, CUC_EVENT_IPC);
    memset(p + 24, 0x5a, 64);
    put_raw("event_garbage_handle", CUC_RECORD_EVENT, p, 88);
}

static void configs(void)
{
    cuc_launch_config c;
    cuc_msg *m = new_msg();
    uint8_t p[64];
    int i;

    cuc_launch_config_init(&c);
    if (cuc_msg_add_launch_config(m, &c))
        die("config");
    c.grid[0] = 8, c.grid[1] = 4, c.block[0] = 128, c.cluster[0] = 2;
    c.shared_mem = 1024, c.cooperative = 1;
    if (cuc_msg_add_launch_config(m, &c))
        die("config");
    put_msg("launch_configs", m);
    memset(p, 0, sizeof(p));
    for (i = 0; i < 9; i++)
        cuc__put32(p + 4 * i, 1);
    cuc__put32(p + 4, 0);
    put_raw("config_zero_grid_y", CUC_RECORD_LAUNCH_CONFIG, p, 64);
    cuc__put32(p + 4, 1);
    cuc__put32(p, 4);
    cuc__put32(p + 24, 3);
    put_raw("config_cluster_not_dividing", CUC_RECORD_LAUNCH_CONFIG, p, 64);
}

static void kernel_msg(const char *name, int kind, const void *img, size_t len,
                       const char *sym)
{
    cuc_kernel *k;
    cuc_msg *m = new_msg();

    if (cuc_kernel_load((enum cuc_image_kind)kind, img, len, sym, &k) ||
        cuc_msg_add_kernel(m, k))
        die(name);
    cuc_kernel_destroy(k);
    put_msg(name, m);
}

static void kernels(void)
{
    uint8_t p[48 + 5 + sizeof(ptx)];
    size_t n = strlen(ptx);

    kernel_msg("kernel_ptx", CUC_IMAGE_PTX, ptx, n, "seed");
    memset(p, 0, sizeof(p));
    cuc__put32(p, CUC_IMAGE_PTX);
    cuc__put32(p + 4, 5);
    cuc__put32(p + 8, (uint32_t)n);
    cuc__sha256(ptx, n, p + 16);
    memcpy(p + 48, "seed", 5);
    memcpy(p + 53, ptx, n);
    p[16] ^= 1;
    put_raw("kernel_bad_hash", CUC_RECORD_KERNEL, p, (uint32_t)(53 + n));
    p[16] ^= 1;
    cuc__put32(p + 8, 0xfffffff0u);
    put_raw("kernel_image_len_lie", CUC_RECORD_KERNEL, p, (uint32_t)(53 + n));
    cuc__put32(p + 8, (uint32_t)n);
    p[52] = 'x';
    put_raw("kernel_name_unterminated", CUC_RECORD_KERNEL, p, (uint32_t)(53 + n));
    p[52] = 0;
    cuc__put32(p, 9);
    put_raw("kernel_bad_kind", CUC_RECORD_KERNEL, p, (uint32_t)(53 + n));
}

static void image_file(const char *path)
{
    const char *base = strrchr(path, '/');
    char name[256];
    uint8_t *b;
    long n;
    FILE *f = fopen(path, "rb");

    if (!f || fseek(f, 0, SEEK_END) || (n = ftell(f)) <= 0 || fseek(f, 0, SEEK_SET)) {
        perror(path);
        exit(1);
    }
    b = malloc((size_t)n);
    if (!b || fread(b, 1, (size_t)n, f) != (size_t)n) {
        perror(path);
        exit(1);
    }
    fclose(f);
    snprintf(name, sizeof(name), "kernel_%s", base ? base + 1 : path);
    kernel_msg(name, !memcmp(b, "\x7f" "ELF", 4) ? CUC_IMAGE_CUBIN : CUC_IMAGE_FATBIN, b,
               (size_t)n, "sim_add_one");
    free(b);
}

int main(int argc, char **argv)
{
    cuc_device *d;
    int i;

    if (argc < 2) {
        fprintf(stderr, "usage: fuzz_gen_corpus_objects DIR [CUBIN|FATBIN...]\n");
        return 2;
    }
    dir = argv[1];
    if (cuc_device_get(0, &d))
        die("cuc_device_get");
    streams(d);
    events(d);
    configs();
    kernels();
    for (i = 2; i < argc; i++)
        image_file(argv[i]);
    return 0;
}
