/* `cucore pack` | `cucore inspect`: the device packed as ordinal 0 shows up
 * at its ordinal under another CUDA_VISIBLE_DEVICES; a GPU the inspector
 * cannot see gives the not-visible text (exit 1: it did not resolve);
 * streams, launch configs, kernels and events; --json; malformed input and
 * bad arguments.
 *
 * Every record type: one message holds a record of each type that plain
 * bytes can carry (every type of CUC__RECORD_SHAPES without fds: the test
 * walks the list, so a new type fails here until it is added), made by the
 * library on the simulator; inspect --json lists each with its fields, and
 * its text names no type it does not know.
 *
 * The size limit is the library's: a message of exactly CUC_MSG_MAX_BYTES
 * is decoded (its kernel record then malformed), one of 8 bytes more is
 * CUC_E_BADMSG, as cuc_msg_from_bytes says of the same bytes. */
#include <stdio.h>
#include <sys/mman.h>

#include "cucore.h"
#include "check.h"
#include "driver_warm.h"
#include "json_check.h"
#include "ptx_kernels.h"
#include "driver/driver.h"
#include "wire/record_types.h"
#include "wire/records.h"

static int sh(const char *cmd, char *out, size_t n)
{
    const char *argv[] = {"/bin/sh", "-c", cmd, NULL};

    return run_capture(argv, NULL, out, n);
}

/* Exit status of `cucore pack device 0` with stdout on a terminal. */
static int pack_to_terminal(void)
{
    int master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC), st;
    pid_t pid;

    CHECK(master >= 0 && grantpt(master) == 0 && unlockpt(master) == 0);
    pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        int slave = open(ptsname(master), O_RDWR | O_NOCTTY);
        if (slave < 0 || dup2(slave, 1) < 0)
            _exit(126);
        execl(CUC_CLI_PATH, CUC_CLI_PATH, "pack", "device", "0", (char *)NULL);
        _exit(127);
    }
    st = wait_child(pid);
    close(master);
    return st;
}

static void want(const char *out, const char *s)
{
    if (!strstr(out, s)) {
        fprintf(stderr, "output lacks \"%s\":\n%s\n", s, out);
        exit(1);
    }
}

/* ---- every record type ---- */

static void hex_of(const uint8_t *b, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", b[i]);
}

/* What inspect --json must print for the record of one type. */
struct type_want {
    int type;
    char json[2][512]; /* fragments, each found in the record's object */
};

static struct type_want wants[32];
static size_t nwants;

static struct type_want *want_type(const cuc_msg *m, int type)
{
    struct type_want *w = &wants[nwants++];

    CHECK(nwants <= CUC_ARRAY_LEN(wants));
    CHECK(cuc_msg_record_count(m) == nwants);
    w->type = type;
    return w;
}

/* Objects the message names, alive while inspect reads it. */
struct every {
    cuc_pool *pool;
    cuc_buffer *buf, *view, *wrapped;
    cuc_event *ev;
    cuc_kernel *k;
    CUdeviceptr mem;
};

/* The records that need the library's objects: device, stream, event,
 * launch config, kernel, buffer, buffer view, ipc buffer. */
static void add_objects(cuc_msg *m, cuc_device *d, struct every *e)
{
    struct cuc_pool_props props = {CUC_POOL_DEVICE, CUC_POOL_IPC, 0};
    cuc_launch_config c;
    struct type_want *w, *wb;
    cuc_stream *s;
    const char *u = cuc_device_uuid_string(d);
    char pool_hex[2 * CUC_POOL_ID_LEN + 1];
    struct cuc_buffer_record br;

    CHECK_OK(cuc_msg_add_device(m, d));
    w = want_type(m, CUC_RECORD_DEVICE);
    snprintf(w->json[0], sizeof(w->json[0]), "{\"index\":0,\"type\":\"device\",\"uuid\":"
             "\"%s\",\"ordinal\":0,\"resolved\":true}", u);
    CHECK_OK(cuc_stream_legacy(d, &s));
    CHECK_OK(cuc_msg_add_stream(m, s));
    w = want_type(m, CUC_RECORD_STREAM);
    snprintf(w->json[0], sizeof(w->json[0]), "{\"index\":1,\"type\":\"stream\",\"kind\":"
             "\"legacy\",\"uuid\":\"%s\",\"ordinal\":0,\"resolved\":true}", u);
    CHECK_OK(cuc_event_create(d, CUC_EVENT_IPC, &e->ev));
    CHECK_OK(cuc_msg_add_event(m, e->ev));
    w = want_type(m, CUC_RECORD_EVENT);
    snprintf(w->json[0], sizeof(w->json[0]), "{\"index\":2,\"type\":\"event\",\"uuid\":"
             "\"%s\",\"flags\":%d,\"ordinal\":0,\"resolved\":true}", u, CUC_EVENT_IPC);
    cuc_launch_config_init(&c);
    c.grid[0] = 8, c.grid[1] = 4, c.block[0] = 32;
    CHECK_OK(cuc_msg_add_launch_config(m, &c));
    w = want_type(m, CUC_RECORD_LAUNCH_CONFIG);
    snprintf(w->json[0], sizeof(w->json[0]), "{\"index\":3,\"type\":\"launch_config\","
             "\"grid\":[8,4,1],\"block\":[32,1,1]");
    CHECK_OK(cuc_kernel_load(CUC_IMAGE_PTX, ptx_twice, strlen(ptx_twice), "twice", &e->k));
    CHECK_OK(cuc_msg_add_kernel(m, e->k));
    w = want_type(m, CUC_RECORD_KERNEL);
    snprintf(w->json[0], sizeof(w->json[0]), "{\"index\":4,\"type\":\"kernel\",\"name\":"
             "\"twice\",\"kind\":\"ptx\",\"image_bytes\":%zu", strlen(ptx_twice));
    snprintf(w->json[1], sizeof(w->json[1]), "\"resolved\":true}");

    CHECK_OK(cuc_pool_create(d, &props, &e->pool));
    CHECK_OK(cuc_buffer_alloc_async(e->pool, 4096, NULL, &e->buf));
    CHECK_OK(cuc_buffer_view(e->buf, 512, 1024, &e->view));
    CHECK_OK(cuc_msg_add_buffer(m, e->buf));
    wb = want_type(m, CUC_RECORD_BUFFER);
    CHECK_OK(cuc_msg_add_buffer(m, e->view));
    w = want_type(m, CUC_RECORD_BUFFER_VIEW);
    /* the pool id as the record carries it */
    {
        void *bytes;
        size_t len;
        cuc_msg *back;
        CHECK_OK(cuc_msg_to_bytes(m, &bytes, &len));
        CHECK_OK(cuc_msg_from_bytes(bytes, len, &back));
        CHECK_OK(cuc_msg_read_buffer(back, 5, &br));
        hex_of(br.pool_id, CUC_POOL_ID_LEN, pool_hex);
        free(bytes);
        cuc_msg_destroy(back);
    }
    snprintf(wb->json[0], sizeof(wb->json[0]), "{\"index\":5,\"type\":\"buffer\","
             "\"payload_bytes\":104,\"fds\":0,\"pool_id\":\"%s\",\"size\":4096,\"lease_id\":", pool_hex);
    snprintf(wb->json[1], sizeof(wb->json[1]), "\"resolved\":false,\"why\":"
             "\"inspect does not import buffers");
    snprintf(w->json[0], sizeof(w->json[0]), "{\"index\":6,\"type\":\"buffer view\","
             "\"payload_bytes\":112,\"fds\":0,\"pool_id\":\"%s\",\"size\":1024,\"offset\":512,\"alloc_size\":4096,"
             "\"lease_id\":", pool_hex);
    snprintf(w->json[1], sizeof(w->json[1]), "\"resolved\":false,\"why\":"
             "\"inspect does not import buffer views");

    CHECK_OK(cuc_device_set_current(d));
    CHECK(CUC_DRV->cuMemAlloc(&e->mem, 8192) == CUDA_SUCCESS);
    CHECK_OK(cuc_buffer_wrap(d, (void *)(uintptr_t)(e->mem + 1024), 2048, &e->wrapped));
    CHECK_OK(cuc_msg_add_buffer(m, e->wrapped));
    w = want_type(m, CUC_RECORD_IPC_BUFFER);
    snprintf(w->json[0], sizeof(w->json[0]), "{\"index\":7,\"type\":\"ipc buffer\","
             "\"payload_bytes\":144,\"fds\":0,\"uuid\":\"%s\",\"exporter\":\"", u);
    snprintf(w->json[1], sizeof(w->json[1]), "\"base_size\":8192,\"offset\":1024,"
             "\"size\":2048,\"lease_id\":");
}

/* A detached message's share and held records, a claim and its answer. */
static void add_share_records(cuc_msg *m)
{
    struct cuc_share_record sr = {{0}, {0}, {0}, "/tmp/cucore-1/cucore-share-ab.sock"};
    uint8_t pool[40] = {0}, token[16];
    struct type_want *w;

    memset(sr.point, 0x11, 16);
    memset(sr.boot_id, 0x22, 16);
    memset(sr.token, 0x33, 16);
    CHECK_OK(cuc__share_rec_put(m, &sr));
    w = want_type(m, CUC_RECORD_SHARE);
    snprintf(w->json[0], sizeof(w->json[0]), "{\"index\":12,\"type\":\"share\","
             "\"payload_bytes\":176,\"fds\":0,\"point\":\"%s\",\"boot_id\":\"%s\","
             "\"token\":\"%s\",\"path\":\"/tmp/cucore-1/cucore-share-ab.sock\","
             "\"resolved\":false", "11111111111111111111111111111111",
             "22222222222222222222222222222222", "33333333333333333333333333333333");
    memset(pool, 0x44, 16);
    pool[32] = 1; /* kind: device */
    pool[36] = 1; /* handle type: POSIX fd */
    CHECK_OK(cuc__held_rec_put(m, &(struct cuc_held_record){CUC_RECORD_POOL, 1, 1, pool, 40}));
    w = want_type(m, CUC_RECORD_HELD);
    snprintf(w->json[0], sizeof(w->json[0]), "{\"index\":13,\"type\":\"held\","
             "\"payload_bytes\":56,\"fds\":0,\"holds\":\"pool\",\"version\":1,"
             "\"held_fds\":1,\"held_bytes\":40,\"pool_id\":\"%s\",\"resolved\":false",
             "44444444444444444444444444444444");
    memset(token, 0x55, sizeof(token));
    CHECK_OK(cuc__claim_rec_put(m, token, 1));
    w = want_type(m, CUC_RECORD_CLAIM);
    snprintf(w->json[0], sizeof(w->json[0]), "{\"index\":14,\"type\":\"claim\","
             "\"payload_bytes\":24,\"fds\":0,\"token\":\"%s\",\"flags\":1,"
             "\"resolved\":false", "55555555555555555555555555555555");
    CHECK_OK(cuc__confirm_rec_put(m, token, CUC_E_NOT_FOUND));
    w = want_type(m, CUC_RECORD_CONFIRM);
    snprintf(w->json[0], sizeof(w->json[0]), "{\"index\":15,\"type\":\"confirm\","
             "\"payload_bytes\":24,\"fds\":0,\"token\":\"%s\",\"status\":"
             "\"CUC_E_NOT_FOUND\",\"resolved\":false", "55555555555555555555555555555555");
}

/* The records only a channel's peer or a share point writes, as bytes:
 * release, kernel ref, kernel held, refused, share, held, claim, confirm. */
static void add_channel_records(cuc_msg *m, const struct every *e)
{
    struct cuc_kernel_record kr;
    struct cuc__kernel_id id = {CUC_IMAGE_PTX, (uint32_t)strlen(ptx_twice), {0}};
    char hash[2 * CUC_KERNEL_HASH_LEN + 1];
    uint8_t ids[16], refused[8] = {0x78, 0x56, 0x34, 0x12};
    struct type_want *w;

    cuc__put64(ids, 1);
    cuc__put64(ids + 8, UINT64_MAX);
    CHECK_OK(cuc__msg_add_record(m, CUC_RECORD_RELEASE, CUC_RECORD_RELEASE_VERSION, ids,
                                 sizeof(ids), NULL, 0));
    w = want_type(m, CUC_RECORD_RELEASE);
    snprintf(w->json[0], sizeof(w->json[0]), "{\"index\":8,\"type\":\"release\","
             "\"payload_bytes\":16,\"fds\":0,\"lease_ids\":[1,18446744073709551615],"
             "\"resolved\":false,\"why\":\"a release ends leases");

    memcpy(id.hash, cuc_kernel_hash(e->k), CUC_KERNEL_HASH_LEN);
    hex_of(id.hash, CUC_KERNEL_HASH_LEN, hash);
    memset(&kr, 0, sizeof(kr));
    kr.kind = CUC_IMAGE_PTX;
    kr.name = "twice";
    kr.image_len = strlen(ptx_twice);
    memcpy(kr.hash, id.hash, CUC_KERNEL_HASH_LEN);
    CHECK_OK(cuc__kernel_ref_rec_put(m, &kr));
    w = want_type(m, CUC_RECORD_KERNEL_REF);
    snprintf(w->json[0], sizeof(w->json[0]), "{\"index\":9,\"type\":\"kernel ref\","
             "\"payload_bytes\":54,\"fds\":0,\"name\":\"twice\",\"kind\":\"ptx\",\"image_bytes\":%zu,\"sha256\":\"%s\","
             "\"resolved\":false", strlen(ptx_twice), hash);
    CHECK_OK(cuc__kernel_held_rec_put(m, &id));
    w = want_type(m, CUC_RECORD_KERNEL_HELD);
    snprintf(w->json[0], sizeof(w->json[0]), "{\"index\":10,\"type\":\"kernel held\","
             "\"payload_bytes\":40,\"fds\":0,\"kind\":\"ptx\",\"image_bytes\":%zu,"
             "\"sha256\":\"%s\",\"resolved\":false", strlen(ptx_twice), hash);
    CHECK_OK(cuc__msg_add_record(m, CUC_RECORD_REFUSED, CUC_RECORD_REFUSED_VERSION, refused,
                                 sizeof(refused), NULL, 0));
    w = want_type(m, CUC_RECORD_REFUSED);
    snprintf(w->json[0], sizeof(w->json[0]), "{\"index\":11,\"type\":\"refused\","
             "\"payload_bytes\":8,\"fds\":0,\"seq\":305419896,\"resolved\":false");
    add_share_records(m);
}

/* Every type without fds in CUC__RECORD_SHAPES (the decoder's list, keyed
 * by CUC_RECORD_TYPE_MAP) has its record in the message. */
static void check_every_type_made(void)
{
#define SHAPE_FDS_(name, v, lo, hi, mult, min_fds, max_fds, ro, rl) {CUC_RECORD_##name, min_fds},
    static const struct {
        int type;
        unsigned min_fds;
    } shapes[] = {CUC__RECORD_SHAPES(SHAPE_FDS_)};
#undef SHAPE_FDS_
    size_t i, k, n = 0;

    for (i = 0; i < CUC_ARRAY_LEN(shapes); i++) {
        for (k = 0; k < nwants && wants[k].type != shapes[i].type; k++)
            ;
        if (shapes[i].min_fds == 0 && k == nwants) {
            fprintf(stderr, "record type %d (%s) carries no fds but is not in the test's "
                    "message: add it, and what inspect prints for it\n", shapes[i].type,
                    cuc_record_type_name(shapes[i].type));
            exit(1);
        }
        CHECK(shapes[i].min_fds == 0 || k == nwants); /* fds: no file holds one */
        n += shapes[i].min_fds == 0;
    }
    CHECK(n == nwants);
}

static void test_every_type(cuc_device *d)
{
    char path[256], cmd[512];
    static char out[65536];
    struct every e = {0};
    void *bytes;
    size_t len;
    cuc_msg *m;
    FILE *f;

    CHECK_OK(cuc_msg_create(&m));
    add_objects(m, d, &e);
    add_channel_records(m, &e);
    check_every_type_made();
    CHECK_OK(cuc_msg_to_bytes(m, &bytes, &len));
    snprintf(path, sizeof(path), "/tmp/cuc_test_cli_every_%d.msg", (int)getpid());
    f = fopen(path, "wb");
    CHECK(f && fwrite(bytes, 1, len, f) == len && fclose(f) == 0);
    free(bytes);

    snprintf(cmd, sizeof(cmd), "%s inspect %s --json", CUC_CLI_PATH, path);
    CHECK(sh(cmd, out, sizeof(out)) == 0);
    if (!json_valid(out)) {
        fprintf(stderr, "inspect --json is not one JSON value:\n%s\n", out);
        exit(1);
    }
    for (size_t i = 0; i < nwants; i++) {
        const char *at = strstr(out, wants[i].json[0]), *next;
        char idx[32];
        if (!at) {
            fprintf(stderr, "record %zu (%s): inspect --json lacks\n  %s\nin\n%s\n", i,
                    cuc_record_type_name(wants[i].type), wants[i].json[0], out);
            exit(1);
        }
        snprintf(idx, sizeof(idx), "{\"index\":%zu,", i + 1);
        next = strstr(at, idx);
        if (wants[i].json[1][0]) {
            const char *more = strstr(at, wants[i].json[1]);
            if (!more || (next && more > next)) {
                fprintf(stderr, "record %zu (%s): inspect --json lacks %s in\n%s\n", i,
                        cuc_record_type_name(wants[i].type), wants[i].json[1], at);
                exit(1);
            }
        }
    }
    want(out, "],\"malformed\":false,\"failed\":0}");
    snprintf(cmd, sizeof(cmd), "%s inspect %s 2>&1", CUC_CLI_PATH, path);
    CHECK(sh(cmd, out, sizeof(out)) == 0);
    want(out, "message: ");
    want(out, "[11] refused");
    CHECK(strstr(out, "does not know") == NULL && strstr(out, "not a record type") == NULL);
    unlink(path);

    cuc_msg_destroy(m);
    CHECK_OK(cuc_buffer_unref_async(e.wrapped, NULL));
    CHECK(CUC_DRV->cuMemFree(e.mem) == CUDA_SUCCESS);
    CHECK_OK(cuc_buffer_unref_async(e.view, NULL));
    CHECK_OK(cuc_buffer_unref_async(e.buf, NULL));
    cuc_pool_unref(e.pool);
    cuc_kernel_destroy(e.k);
    cuc_event_unref(e.ev);
}

/* ---- the size limit ---- */

/* A file of len bytes: a message header saying len, one kernel record of
 * the rest, zeros (a sparse file). */
static void write_kernel_msg(const char *path, uint32_t len)
{
    uint8_t h[40] = {0};
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

    cuc__put32(h, 0x4d435543u);
    cuc__put16(h + 4, 1);
    cuc__put32(h + 8, 1);
    cuc__put32(h + 16, len);
    cuc__put16(h + 24, CUC_RECORD_KERNEL);
    cuc__put16(h + 26, 1);
    cuc__put32(h + 28, len - 40);
    CHECK(fd >= 0 && write(fd, h, sizeof(h)) == (ssize_t)sizeof(h));
    CHECK(ftruncate(fd, len) == 0 && close(fd) == 0);
}

/* The library's status for the whole file. */
static int library_says(const char *path, uint32_t len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC), rc;
    void *p;
    cuc_msg *m = NULL;

    CHECK(fd >= 0);
    p = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    CHECK(p != MAP_FAILED);
    rc = cuc_msg_from_bytes(p, len, &m);
    cuc_msg_destroy(m);
    CHECK(munmap(p, len) == 0 && close(fd) == 0);
    return rc;
}

static void test_size_limit(void)
{
    char path[256], cmd[512], out[16384];

    snprintf(path, sizeof(path), "/tmp/cuc_test_cli_big_%d.msg", (int)getpid());
    /* the largest message: decoded; its record of zeros is a malformed kernel */
    write_kernel_msg(path, CUC_MSG_MAX_BYTES);
    CHECK_OK(library_says(path, CUC_MSG_MAX_BYTES));
    snprintf(cmd, sizeof(cmd), "%s inspect %s --json", CUC_CLI_PATH, path);
    CHECK(sh(cmd, out, sizeof(out)) == 1);
    want(out, "{\"bytes\":67108864,\"records\":[{\"index\":0,\"type\":\"kernel\"");
    want(out, "\"malformed\":true");
    /* 8 bytes more: what the library says of those bytes, CUC_E_BADMSG */
    write_kernel_msg(path, CUC_MSG_MAX_BYTES + 8);
    CHECK_RC(library_says(path, CUC_MSG_MAX_BYTES + 8), CUC_E_BADMSG);
    CHECK_ERRMSG("exceeds the maximum");
    CHECK(sh(cmd, out, sizeof(out)) == 1);
    want(out, "{\"error\":{\"code\":\"CUC_E_BADMSG\",\"message\":");
    want(out, "holds more than 67108864 bytes");
    snprintf(cmd, sizeof(cmd), "%s inspect - < %s 2>&1", CUC_CLI_PATH, path);
    CHECK(sh(cmd, out, sizeof(out)) == 1);
    want(out, "not a valid cucore message");
    want(out, "(CUC_E_BADMSG)");
    unlink(path);
}

int main(void)
{
    char cmd[2048], out[16384], ptx_path[256];
    cuc_device *d0, *d1;
    int n;
    FILE *f;

    CHECK_OK(cuc_device_count(&n));
    CHECK_OK(cuc_device_get(0, &d0));
    d1 = d0;
    if (n > 1)
        CHECK_OK(cuc_device_get(1, &d1));
    test_warm_driver_fds(); /* the IPC event of the every-type message */
    FD_BASELINE();

    /* The acceptance case: ordinal 0 here is ordinal 1 under "3,0" (with
     * two or three GPUs "1,0"; one GPU has no other order). */
    snprintf(cmd, sizeof(cmd), "%s pack device 0 | CUDA_VISIBLE_DEVICES=%s %s inspect -",
             CUC_CLI_PATH, n >= 4 ? "3,0" : n >= 2 ? "1,0" : "0", CUC_CLI_PATH);
    CHECK(sh(cmd, out, sizeof(out)) == 0);
    want(out, cuc_device_uuid_string(d0));
    want(out, n >= 2 ? "local ordinal 1" : "local ordinal 0");

    /* Not visible to the inspector: the error text, exit 1. */
    snprintf(cmd, sizeof(cmd), "%s pack device 0 | CUDA_VISIBLE_DEVICES=%s %s inspect -",
             CUC_CLI_PATH, n >= 2 ? "1" : "", CUC_CLI_PATH);
    CHECK(sh(cmd, out, sizeof(out)) == 1);
    want(out, "CUC_E_NOT_VISIBLE");
    want(out, cuc_device_uuid_string(d0));
    want(out, "is not visible in this process");

    /* JSON, through a file. */
    snprintf(cmd, sizeof(cmd), "f=$(mktemp) && %s pack device 0 > $f && "
             "CUDA_VISIBLE_DEVICES=%s %s inspect $f --json; rc=$?; rm -f $f; exit $rc",
             CUC_CLI_PATH, n >= 4 ? "2,0" : n >= 2 ? "1,0" : "0", CUC_CLI_PATH);
    CHECK(sh(cmd, out, sizeof(out)) == 0);
    snprintf(cmd, sizeof(cmd), "\"uuid\":\"%s\",\"ordinal\":%d,\"resolved\":true",
             cuc_device_uuid_string(d0), n >= 2 ? 1 : 0);
    want(out, cmd);
    want(out, "\"malformed\":false");

    /* Streams resolve by UUID too (device 1, or 0 alone: at local 1 under
     * "3,1", at local 0 under "1,0"). */
    snprintf(cmd, sizeof(cmd), "%s pack stream per-thread %d | CUDA_VISIBLE_DEVICES=%s "
             "%s inspect -", CUC_CLI_PATH, n > 1 ? 1 : 0,
             n >= 4 ? "3,1" : n >= 2 ? "1,0" : "0", CUC_CLI_PATH);
    CHECK(sh(cmd, out, sizeof(out)) == 0);
    want(out, "kind=per-thread");
    want(out, cuc_device_uuid_string(d1));
    want(out, n >= 4 ? "per-thread default stream of local device 1"
                     : "per-thread default stream of local device 0");

    /* Launch config: the values. pack --json describes it on stderr. */
    snprintf(cmd, sizeof(cmd), "%s pack launch-config 8,4 32,2,1 4096 --json 2>&1 >/dev/null",
             CUC_CLI_PATH);
    CHECK(sh(cmd, out, sizeof(out)) == 0);
    want(out, "\"packed\":\"launch_config\",\"grid\":[8,4,1],\"block\":[32,2,1],"
              "\"shared_mem\":4096");
    snprintf(cmd, sizeof(cmd), "%s pack launch-config 8,4 32,2,1 4096 | %s inspect -",
             CUC_CLI_PATH, CUC_CLI_PATH);
    CHECK(sh(cmd, out, sizeof(out)) == 0);
    want(out, "grid 8x4x1, block 32x2x1, cluster 1x1x1, shared_mem 4096, cooperative 0");
    snprintf(cmd, sizeof(cmd), "%s pack launch-config 0 32 2>&1 >/dev/null", CUC_CLI_PATH);
    CHECK(sh(cmd, out, sizeof(out)) == 1);
    want(out, "grid.x is 0");

    /* Kernel: name, kind, size, hash, loadable. */
    snprintf(ptx_path, sizeof(ptx_path), "/tmp/cuc_test_cli_%d.ptx", (int)getpid());
    f = fopen(ptx_path, "w");
    CHECK(f && fputs(ptx_twice, f) >= 0 && fclose(f) == 0);
    snprintf(cmd, sizeof(cmd), "%s pack kernel %s twice | %s inspect -", CUC_CLI_PATH,
             ptx_path, CUC_CLI_PATH);
    CHECK(sh(cmd, out, sizeof(out)) == 0);
    want(out, "name=twice kind=ptx");
    snprintf(cmd, sizeof(cmd), "image_bytes=%zu", strlen(ptx_twice));
    want(out, cmd);
    want(out, "sha256=");
    want(out, "loadable here");
    snprintf(cmd, sizeof(cmd), "%s pack kernel %s nope 2>&1 >/dev/null", CUC_CLI_PATH, ptx_path);
    CHECK(sh(cmd, out, sizeof(out)) == 1);
    want(out, "\"nope\"");
    snprintf(cmd, sizeof(cmd), "%s pack kernel %s twice --kind cubin 2>&1 >/dev/null",
             CUC_CLI_PATH, ptx_path);
    CHECK(sh(cmd, out, sizeof(out)) == 1);
    want(out, "ELF magic");
    unlink(ptx_path);

    /* Event: the lifetime note; --hold keeps the packer alive for the
     * reader. */
    snprintf(cmd, sizeof(cmd), "%s pack event 0 2>&1 >/dev/null", CUC_CLI_PATH);
    CHECK(sh(cmd, out, sizeof(out)) == 0);
    want(out, "valid only while the process that created it lives");
    snprintf(cmd, sizeof(cmd), "%s pack event 0 --hold 1 2>/dev/null | %s inspect -",
             CUC_CLI_PATH, CUC_CLI_PATH);
    CHECK(sh(cmd, out, sizeof(out)) == 0);
    want(out, "event uuid=");
    want(out, "an IPC event opened on local device 0");

    /* Malformed input: a message, exit 1. */
    snprintf(cmd, sizeof(cmd), "echo garbage | %s inspect - 2>&1", CUC_CLI_PATH);
    CHECK(sh(cmd, out, sizeof(out)) == 1);
    want(out, "not a valid cucore message");
    want(out, "CUC_E_BADMSG");
    snprintf(cmd, sizeof(cmd), "%s pack device 0 | head -c 40 | %s inspect - 2>&1",
             CUC_CLI_PATH, CUC_CLI_PATH);
    CHECK(sh(cmd, out, sizeof(out)) == 1);
    want(out, "CUC_E_BADMSG");
    snprintf(cmd, sizeof(cmd), "%s inspect /nonexistent/file 2>&1", CUC_CLI_PATH);
    CHECK(sh(cmd, out, sizeof(out)) == 1);
    want(out, "cannot open");
    /* Binary never goes to a terminal. */
    CHECK(pack_to_terminal() == 1);
    /* Bad arguments: usage, exit 2. */
    snprintf(cmd, sizeof(cmd), "%s pack stream sideways 0 >/dev/null 2>&1", CUC_CLI_PATH);
    CHECK(sh(cmd, out, sizeof(out)) == 2);
    snprintf(cmd, sizeof(cmd), "%s pack >/dev/null 2>&1", CUC_CLI_PATH);
    CHECK(sh(cmd, out, sizeof(out)) == 2);
    snprintf(cmd, sizeof(cmd), "%s inspect >/dev/null 2>&1", CUC_CLI_PATH);
    CHECK(sh(cmd, out, sizeof(out)) == 2);
    snprintf(cmd, sizeof(cmd), "%s pack device 99 2>&1 >/dev/null", CUC_CLI_PATH);
    CHECK(sh(cmd, out, sizeof(out)) == 1);
    want(out, "out of range");
    test_every_type(d0);
    test_size_limit();
    FD_CHECK_NO_LEAK();
    return test_finish();
}
