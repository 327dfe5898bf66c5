/* Writes the seed corpus of fuzz_objects into the directory given: valid
 * stream, event, launch-config, kernel (PTX and, if given as further
 * arguments, cubin / fatbin files) and vmm messages, and the hostile
 * variants of tests/test_objects_hostile.c and tests/test_vmm_wire.c. Each
 * file is one message; a vmm message's fds are left out (the target
 * supplies them: chunks of 2 and 4 MiB, in turn).
 *
 *   CUCORE_DRIVER=sim CUCORE_SIM_GPUS=4 fuzz_gen_corpus_objects fuzz/corpus/objects \
 *       [build/sim/test-images/sim_kernels.cubin ...]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cucore.h"
#include "device/device.h"
#include "exec/kernel.h"
#include "wire/records.h"
#include "fuzz_pool.h"

static const char *dir;

static const char ptx[] =
    ".version 7.0\n.target sm_70\n.address_size 64\n"
    ".visible .entry seed(.param .u64 p)\n{\n  ret;\n}\n"
    ".visible .entry other()\n{\n  ret;\n}\n";

static void die(const char *what) __attribute__((noreturn));
static void die(const char *what)
{
    fprintf(stderr, "gen_corpus_objects: %s: %s\n", what, cuc_errmsg());
    exit(1);
}

static void put_file(const char *name, const void *b, size_t len)
{
    char path[4096];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    f = fopen(path, "wb");
    if (!f || fwrite(b, 1, len, f) != len || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
}

static void put_msg(const char *name, cuc_msg *m)
{
    void *b;
    size_t len;

    if (cuc_msg_to_bytes(m, &b, &len))
        die(name);
    put_file(name, b, len);
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

/* One record of type with payload p (len bytes) and nfds fds (in the
 * header and the record), built by hand: cuc__msg_add_record's shape and
 * reserved-field checks would refuse some of these. */
static void put_raw_rec(const char *name, uint16_t type, uint16_t version,
                        const uint8_t *p, uint32_t len, uint32_t nfds)
{
    static uint8_t b[24 + 16 + 16384];
    size_t padded = (len + 7u) & ~(size_t)7u, total = 24 + 16 + padded;

    if (padded > 16384)
        die(name);
    memset(b, 0, total);
    cuc__put32(b, 0x4d435543u);
    cuc__put16(b + 4, 1);
    cuc__put32(b + 8, 1);
    cuc__put32(b + 12, nfds);
    cuc__put32(b + 16, (uint32_t)total);
    cuc__put16(b + 24, type);
    cuc__put16(b + 26, version);
    cuc__put32(b + 28, len);
    cuc__put32(b + 36, nfds);
    memcpy(b + 40, p, len);
    put_file(name, b, total);
}

/* One raw record of type with payload p, no fds. */
static void put_raw(const char *name, uint16_t type, const uint8_t *p, uint32_t len)
{
    put_raw_rec(name, type, 1, p, len, 0);
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
    cuc_event_unref(ev); /* the handle is dead: opening it must fail cleanly */
    memset(p, 0, sizeof(p));
    cuc__put32(p, CUC_EVENT_IPC | CUC_EVENT_TIMING);
    memcpy(p + 8, cuc_device_uuid(d)->bytes, 16);
    put_raw("event_timing", CUC_RECORD_EVENT, p, 88);
    cuc__put32(p, CUC_EVENT_IPC);
    memset(p + 24, 0x5a, 64);
    put_raw("event_garbage_handle", CUC_RECORD_EVENT, p, 88);
    cuc__put32(p + 4, 0x10000);
    put_raw("event_reserved", CUC_RECORD_EVENT, p, 88);
    put_raw("event_short", CUC_RECORD_EVENT, p, 80);
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
    cuc__put32(p + 24, 1);
    cuc__put32(p + 60, 1);
    put_raw("config_reserved", CUC_RECORD_LAUNCH_CONFIG, p, 64);
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
    cuc__put32(p, CUC_IMAGE_PTX);
    cuc__put32(p + 12, 1);
    put_raw("kernel_reserved", CUC_RECORD_KERNEL, p, (uint32_t)(53 + n));
    cuc__put32(p + 12, 0);
    put_raw("kernel_shorter_than_51", CUC_RECORD_KERNEL, p, 50);
}

/* A message that carries fds, as its bytes alone. */
static void put_encoded(const char *name, cuc_msg *m)
{
    const int *fds;
    size_t len, nfds;
    uint8_t *b;

    if (cuc__msg_encode(m, &b, &len, &fds, &nfds))
        die(name);
    put_file(name, b, len);
    free(b);
    cuc_msg_destroy(m);
}

/* One vmm record of payload p, with nfds fds. */
static void put_raw_vmm(const char *name, uint16_t version, const uint8_t *p,
                        uint32_t len, uint32_t nfds)
{
    put_raw_rec(name, CUC_RECORD_VMM, version, p, len, nfds);
}

static void vmms(void)
{
    size_t sizes[2] = {(size_t)2 << 20, (size_t)4 << 20};
    cuc_device *d0, *d1;
    const cuc_device *peers[1];
    struct cuc__record r;
    uint8_t p[128], q[128];
    cuc_vmm *v, *w;
    cuc_msg *m;
    uint32_t len;

    if (cuc_device_get(0, &d0) || cuc_device_get(1, &d1))
        die("vmm devices (run with CUCORE_SIM_GPUS=4)");
    peers[0] = d1;
    if (cuc_vmm_create(d0, peers, 1, sizes, 2, &v) || cuc_vmm_create(d0, NULL, 0, sizes, 1, &w))
        die("cuc_vmm_create");
    m = new_msg();
    if (cuc_msg_add_vmm(m, v) || cuc__msg_record(m, 0, &r) || r.len > sizeof(p))
        die("vmm");
    memcpy(p, r.payload, r.len);
    len = r.len;
    put_encoded("vmm", m);
    m = new_msg();
    if (cuc_msg_add_vmm(m, w))
        die("vmm_one_chunk");
    put_encoded("vmm_one_chunk", m);
    m = new_msg();
    if (cuc_msg_add_vmm(m, v) || cuc_msg_add_device(m, d1) || cuc_msg_add_vmm(m, v))
        die("vmm_two_records");
    put_encoded("vmm_two_records", m);
    cuc_vmm_unref(w);
    cuc_vmm_unref(v);

    /* payload: type 0, chunks 4, peers 8, reserved 12, lease 16, owner 24,
     * peer 40, sizes 56 and 64 */
    memcpy(q, p, len);
    cuc__put32(q, 2);
    put_raw_vmm("vmm_handle_type2", 1, q, len, 2);
    memcpy(q, p, len);
    put_raw_vmm("vmm_one_fd_two_chunks", 1, q, len, 1);
    put_raw_vmm("vmm_three_fds", 1, q, len, 3);
    put_raw_vmm("vmm_version2", 2, q, len, 2);
    put_raw_vmm("vmm_short", 1, q, 40, 2);
    cuc__put32(q + 4, 0xffffffffu);
    put_raw_vmm("vmm_chunk_count_lie", 1, q, len, 2);
    memcpy(q, p, len);
    cuc__put32(q + 8, 0xffffffffu);
    put_raw_vmm("vmm_peer_count_lie", 1, q, len, 2);
    memcpy(q, p, len);
    cuc__put64(q + 56, (uint64_t)4 << 20);
    put_raw_vmm("vmm_size_not_the_fds", 1, q, len, 2);
    cuc__put64(q + 56, UINT64_MAX);
    put_raw_vmm("vmm_size_overflow", 1, q, len, 2);
    cuc__put64(q + 56, 0xffffffffu);
    put_raw_vmm("vmm_size_not_granular", 1, q, len, 2);
    memcpy(q, p, len);
    cuc__put64(q + 16, 0);
    put_raw_vmm("vmm_lease0", 1, q, len, 2);
    memcpy(q, p, len);
    memset(q + 24, 0xab, 16);
    put_raw_vmm("vmm_unknown_owner", 1, q, len, 2);
    memcpy(q, p, len);
    memset(q + 40, 0xcd, 16);
    put_raw_vmm("vmm_unknown_peer", 1, q, len, 2);
    memcpy(q + 40, q + 24, 16);
    put_raw_vmm("vmm_peer_is_owner", 1, q, len, 2);
    memcpy(q, p, len);
    cuc__put32(q + 12, 1);
    put_raw_vmm("vmm_reserved", 1, q, len, 2);
}

/* Buffer view records of b (the variants of tests/test_buffer_view.c):
 * parts that fit and parts that lie, near UINT64_MAX and UINT32_MAX. */
static void views(cuc_buffer *b)
{
    static const struct {
        const char *name;
        uint64_t size, off, alloc;
    } v[] = {
        {"view", 256, 1024, 4096},
        {"view_whole", 4096, 0, 4096},
        {"view_size0", 0, 0, 4096},
        {"view_alloc0", 1, 0, 0},
        {"view_past_end", 16, 4090, 4096},
        {"view_off_max", 2, UINT64_MAX, 4096},
        {"view_size_max", UINT64_MAX, 1, 4096},
        {"view_wrap", 16, UINT64_MAX - 7, UINT64_MAX},
        {"view_u32_edge", (uint64_t)UINT32_MAX + 2, UINT32_MAX, 2ull * UINT32_MAX},
        {"view_alloc_lie", 64, 0, 6400},
    };
    struct cuc__record r;
    cuc_buffer *part;
    uint8_t p[112];
    cuc_msg *m = new_msg();

    if (cuc_buffer_view(b, 1024, 256, &part) || cuc_msg_add_buffer(m, part) ||
        cuc__msg_record(m, 0, &r))
        die("view");
    memcpy(p, r.payload, sizeof(p));
    memcpy(p, FUZZ_POOL_ID, 16);
    cuc_msg_destroy(m);
    cuc_buffer_unref_async(part, NULL);
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        cuc__put64(p + 16, v[i].size);
        cuc__put64(p + 24, v[i].off);
        cuc__put64(p + 104, v[i].alloc);
        put_raw(v[i].name, CUC_RECORD_BUFFER_VIEW, p, 112);
    }
}

/* Pool and buffer records (the variants of tests/test_pool_wire.c). A
 * buffer names FUZZ_POOL_ID, the pool the target imports; its export data
 * is a real allocation's of this process (the target's pool has another
 * simulator uid: the import is refused, mutations reach the checks). */
static void pools_buffers(void)
{
    cuc_pool *local, *imported;
    struct cuc__record r;
    uint8_t p[104], q[104];
    cuc_buffer *b;
    cuc_msg *m;

    if (fuzz_pool_setup(&local, &imported) || cuc_buffer_alloc_async(local, 4096, NULL, &b))
        die("fuzz pool");
    m = new_msg();
    if (cuc_msg_add_pool(m, imported) || cuc_msg_add_buffer(m, b))
        die("pool and buffer");
    put_encoded("pool_buffer", m); /* the target gives its record a vmm fd */
    m = new_msg();
    if (cuc_msg_add_buffer(m, b) || cuc__msg_record(m, 0, &r))
        die("buffer");
    memcpy(p, r.payload, sizeof(p));
    memcpy(p, FUZZ_POOL_ID, 16);
    cuc_msg_destroy(m);
    put_raw("buffer", CUC_RECORD_BUFFER, p, 104);
    memcpy(q, p, 104);
    cuc__put64(q + 16, 0);
    put_raw("buffer_size0", CUC_RECORD_BUFFER, q, 104);
    memcpy(q, p, 104);
    cuc__put64(q + 24, 8);
    put_raw("buffer_offset", CUC_RECORD_BUFFER, q, 104);
    memcpy(q, p, 104);
    cuc__put64(q + 32, 0);
    put_raw("buffer_lease0", CUC_RECORD_BUFFER, q, 104);
    memcpy(q, p, 104);
    q[0] ^= 0xff;
    put_raw("buffer_unknown_pool", CUC_RECORD_BUFFER, q, 104);
    memcpy(q, p, 104);
    cuc__put64(q + 16, UINT64_MAX);
    put_raw("buffer_size_max", CUC_RECORD_BUFFER, q, 104);
    views(b);
    if (cuc_buffer_unref_async(b, NULL))
        die("cuc_buffer_unref_async");
    cuc_pool_unref(imported);
    cuc_pool_unref(local);
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
    vmms();
    pools_buffers();
    for (i = 2; i < argc; i++)
        image_file(argv[i]);
    return 0;
}
