/* Pool and buffer records in one process: what is refused (non-IPC pools),
 * the byte layout, the export data cached, round trips (a channel pair and
 * plain bytes give back the same objects here), and hostile records: every
 * field a peer controls, wrong, is refused with the status the headers
 * promise and a message that names it; lying lengths near UINT32_MAX,
 * unknown versions and wrong fd counts stop at decode; nothing leaks an
 * fd. On the simulator, a pool imported in its own process under another
 * id stands in for another process (the driver was not asked to do that). */
#include <fcntl.h>
#include <sys/mman.h>

#include "pool_test.h"
#include "msg_hex.h"
#include "memory/buffer.h"
#include "wire/records.h"

#define dev0 (devs[0])
#define dev_last (devs[n_dev - 1])
#define new_pool pt_new_pool

static void test_refused(void)
{
    cuc_pool *p = new_pool(dev0, CUC_POOL_DEVICE, 0);
    cuc_buffer *b;
    cuc_msg *m;

    CHECK_OK(cuc_msg_create(&m));
    CHECK_RC(cuc_msg_add_pool(m, p), CUC_E_NOT_SERIALIZABLE);
    CHECK_ERRMSG("CUC_POOL_IPC");
    CHECK_OK(cuc_buffer_alloc_async(p, 100, NULL, &b));
    CHECK_RC(cuc_msg_add_buffer(m, b), CUC_E_NOT_SERIALIZABLE);
    CHECK_ERRMSG("CUC_POOL_IPC");
    CHECK(cuc_msg_record_count(m) == 0);
    CHECK_RC(cuc_msg_add_pool(NULL, p), CUC_E_INVALID);
    CHECK_RC(cuc_msg_add_buffer(m, NULL), CUC_E_INVALID);
    cuc_msg_destroy(m);
    CHECK_OK(cuc_buffer_unref_async(b, NULL));
    cuc_pool_unref(p);
}

static void test_layout(void)
{
    cuc_pool *p = new_pool(dev_last, CUC_POOL_DEVICE, CUC_POOL_IPC);
    CUmemPoolPtrExportData direct;
    uint8_t id[CUC_POOL_ID_LEN];
    struct cuc__record r, r2;
    cuc_buffer *b;
    void *bytes;
    size_t len;
    cuc_msg *m;

    cuc_pool_id(p, id);
    CHECK_OK(cuc_buffer_alloc_async(p, 3000, NULL, &b));
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_pool(m, p));
    CHECK_OK(cuc__msg_record(m, 0, &r));
    CHECK(r.type == CUC_RECORD_POOL && r.len == 40 && r.nfds == 1 && r.fds[0] >= 0);
    CHECK(r.fds[0] != p->fd); /* the message has its own copy */
    CHECK(memcmp(r.payload, id, 16) == 0);
    CHECK(memcmp(r.payload + 16, cuc_device_uuid(dev_last)->bytes, 16) == 0);
    CHECK(cuc__get32(r.payload + 32) == CUC_POOL_DEVICE);
    CHECK(cuc__get32(r.payload + 36) == CUC_POOL_HANDLE_POSIX_FD);
    CHECK_RC(cuc_msg_to_bytes(m, &bytes, &len), CUC_E_NEEDS_CHANNEL);
    cuc_msg_destroy(m);

    CHECK(!b->have_export);
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_buffer(m, b));
    CHECK(b->have_export); /* computed once, kept */
    CHECK_OK(cuc_msg_add_buffer(m, b));
    CHECK_OK(cuc__msg_record(m, 0, &r));
    CHECK_OK(cuc__msg_record(m, 1, &r2));
    CHECK(r.type == CUC_RECORD_BUFFER && r.len == 104 && r.nfds == 0);
    CHECK(memcmp(r.payload, id, 16) == 0);
    CHECK(cuc__get64(r.payload + 16) == 3000);
    CHECK(cuc__get64(r.payload + 24) == 0);
    CHECK(cuc__get64(r.payload + 32) != 0);
    CHECK(cuc__get64(r2.payload + 32) != cuc__get64(r.payload + 32)); /* lease ids */
    CHECK(memcmp(r.payload + 40, r2.payload + 40, 64) == 0);
    CHECK_OK(cuc_device_set_current(dev_last));
    memset(&direct, 0, sizeof(direct));
    CHECK(CUC_DRV->cuMemPoolExportPointer(&direct, (CUdeviceptr)(uintptr_t)cuc_buffer_ptr(b)) ==
          CUDA_SUCCESS);
    /* The driver writes 48 of the 64 bytes and leaves the last 16 as the
     * caller had them (sim/FACTS.md F25): those must be zero on the wire,
     * never stack garbage. */
    CHECK(memcmp(r.payload + 40, direct.reserved, 48) == 0);
    CHECK(memcmp(r.payload + 40 + 48, (const uint8_t[16]){0}, 16) == 0);
    CHECK_OK(cuc_msg_to_bytes(m, &bytes, &len)); /* bytes only: fine */
    CHECK(len == CUC__WIRE_HDR + 2 * (CUC__WIRE_REC_HDR + 104));
    free(bytes);
    cuc_msg_destroy(m);
    CHECK_OK(cuc_buffer_unref_async(b, NULL));
    cuc_pool_unref(p);
}

/* In the allocating process, records resolve to the objects themselves. */
static void test_round_trip(void)
{
    cuc_pool *p = new_pool(dev0, CUC_POOL_DEVICE, CUC_POOL_IPC), *gp;
    cuc_channel *a, *c;
    cuc_buffer *b, *gb;
    cuc_msg *m, *got;
    void *bytes;
    size_t len;

    CHECK_OK(cuc_buffer_alloc_async(p, 64, NULL, &b));
    CHECK_OK(cuc_channel_pair(&a, &c));
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_pool(m, p));
    CHECK_OK(cuc_msg_add_buffer(m, b));
    CHECK_OK(cuc_channel_send(a, m));
    cuc_msg_destroy(m);
    CHECK_OK(cuc_channel_recv(c, 5000, &got));
    CHECK(cuc_msg_fd_count(got) == 1);
    CHECK_OK(cuc_msg_get_pool(got, 0, &gp));
    CHECK(gp == p);
    CHECK_OK(cuc_msg_get_buffer(got, 1, &gb));
    CHECK(gb == b);
    CHECK_RC(cuc_msg_get_pool(got, 1, &gp), CUC_E_INVALID);
    CHECK_ERRMSG("not a pool");
    CHECK_RC(cuc_msg_get_buffer(got, 0, &gb), CUC_E_INVALID);
    CHECK_ERRMSG("not a buffer");
    cuc_msg_destroy(got);
    cuc_pool_unref(gp);
    /* one more reference of b: its lease goes with the last of them */
    CHECK_OK(cuc_buffer_unref_async(gb, NULL));
    CHECK_RC(cuc_pool_lease_wait(p, a, 0, 20), CUC_E_TIMEOUT);
    /* plain bytes: no lease, no channel */
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_buffer(m, b));
    CHECK_OK(cuc_msg_to_bytes(m, &bytes, &len));
    cuc_msg_destroy(m);
    CHECK_OK(cuc_msg_from_bytes(bytes, len, &got));
    free(bytes);
    CHECK_OK(cuc_msg_get_buffer(got, 0, &gb));
    CHECK(gb == b);
    cuc_msg_destroy(got);
    CHECK_OK(cuc_buffer_unref_async(gb, NULL));
    CHECK_OK(cuc_buffer_unref_async(b, NULL)); /* the last: releases, on c */
    CHECK(pt_used(p) == 64);            /* a has not seen the release yet */
    CHECK_OK(cuc_pool_lease_wait(p, a, 0, 5000));
    CHECK(pt_used(p) == 0);
    cuc_channel_destroy(a);
    cuc_channel_destroy(c);
    cuc_pool_unref(p);
}

/* ---- hostile buffer records ---- */

static void buffer_payload(uint8_t p[104], const uint8_t id[16], uint64_t size)
{
    memset(p, 0, 104);
    memcpy(p, id, 16);
    cuc__put64(p + 16, size);
    cuc__put64(p + 32, 77);
    memset(p + 40, 0x5c, 64);
}

/* Decodes a one-buffer message around p and resolves it: the first
 * failure; *decoded says whether the decoder took it. */
static int get_buffer_at(const uint8_t *p, int *decoded)
{
    cuc_buffer *b = (cuc_buffer *)0x1;
    cuc_msg *m;
    int rc = msg_decode_one(CUC_RECORD_BUFFER, p, 104, &m);

    *decoded = rc == 0;
    if (rc)
        return rc;
    rc = cuc_msg_get_buffer(m, 0, &b);

    if (rc)
        CHECK(b == (cuc_buffer *)0x1);
    else
        CHECK_OK(cuc_buffer_unref_async(b, NULL));
    cuc_msg_destroy(m);
    return rc;
}

/* get_buffer_at, for a record the decoder must take. */
static int get_buffer(const uint8_t *p)
{
    int decoded, rc = get_buffer_at(p, &decoded);

    CHECK(decoded);
    return rc;
}

/* Bytes of a message with one record whose header says len, version and
 * nfds, followed by body (body_len bytes, zero padded to 8). */
static uint8_t *raw(uint16_t type, uint16_t version, uint32_t len, uint32_t nfds,
                    const uint8_t *body, size_t body_len, size_t *total)
{
    uint8_t *b = malloc(CUC__WIRE_HDR + CUC__WIRE_REC_HDR + body_len + 7);

    CHECK(b != NULL);
    *total = test_raw_record(b, type, version, len, nfds, nfds, body, body_len);
    return b;
}

static int decode_raw(uint16_t type, uint16_t version, uint32_t len, uint32_t nfds,
                      const uint8_t *body, size_t body_len)
{
    int fds[2] = {-1, -1};
    size_t n;
    uint8_t *b = raw(type, version, len, nfds, body, body_len, &n);
    cuc_msg *m = NULL;
    int rc;

    for (uint32_t i = 0; i < nfds && i < 2; i++) {
        fds[i] = memfd_create("hostile", MFD_CLOEXEC);
        CHECK(fds[i] >= 0);
    }
    rc = cuc__msg_decode(b, n, fds, nfds, &m); /* takes the fds either way */
    CHECK(fds[0] == -1 && fds[1] == -1);
    free(b);
    cuc_msg_destroy(m);
    return rc;
}

static void test_hostile_buffers(void)
{
    cuc_pool *p = new_pool(dev0, CUC_POOL_DEVICE, CUC_POOL_IPC);
    uint8_t id[CUC_POOL_ID_LEN], other[CUC_POOL_ID_LEN], pl[112];
    char hex[33];
    cuc_msg *m;

    cuc_pool_id(p, id);
    /* a pool nobody imported here: named */
    memcpy(other, id, 16);
    other[15] ^= 0xff;
    buffer_payload(pl, other, 100);
    CHECK_RC(get_buffer(pl), CUC_E_POOL_NOT_IMPORTED);
    cuc__hex(other, 16, hex);
    CHECK_ERRMSG(hex);
    CHECK_ERRMSG("cuc_msg_get_pool");
    /* fields */
    buffer_payload(pl, id, 0);
    CHECK_RC(get_buffer(pl), CUC_E_BADMSG);
    CHECK_ERRMSG("size 0 (payload offset 16)");
    /* the offset is reserved in record version 1: the decoder's check */
    for (int i = 24; i < 32; i++) {
        int decoded;
        buffer_payload(pl, id, 100);
        pl[i] = 1;
        CHECK_RC(get_buffer_at(pl, &decoded), CUC_E_BADMSG);
        CHECK(!decoded);
        CHECK_ERRMSG("reserved buffer record field at offset 64 (payload offset 24, 8 bytes)");
    }
    buffer_payload(pl, id, 100);
    cuc__put64(pl + 32, 0);
    CHECK_RC(get_buffer(pl), CUC_E_BADMSG);
    CHECK_ERRMSG("lease id 0");
    /* export data naming nothing of a pool created here */
    buffer_payload(pl, id, 100);
    CHECK_RC(get_buffer(pl), CUC_E_NOT_FOUND);
    CHECK_ERRMSG("freed");
    /* lengths: refused when added, and at decode */
    CHECK_OK(cuc_msg_create(&m));
    CHECK_RC(cuc__msg_add_record(m, CUC_RECORD_BUFFER, 1, pl, 103, NULL, 0), CUC_E_INVALID);
    CHECK_RC(cuc__msg_add_record(m, CUC_RECORD_BUFFER, 1, pl, 112, NULL, 0), CUC_E_INVALID);
    cuc_msg_destroy(m);
    buffer_payload(pl, id, 100);
    CHECK_RC(decode_raw(CUC_RECORD_BUFFER, 1, 103, 0, pl, 104), CUC_E_BADMSG);
    CHECK_ERRMSG("payload length 103");
    CHECK_RC(decode_raw(CUC_RECORD_BUFFER, 1, 96, 0, pl, 96), CUC_E_BADMSG);
    CHECK_RC(decode_raw(CUC_RECORD_BUFFER, 1, 0xffffffffu, 0, pl, 104), CUC_E_BADMSG);
    CHECK_ERRMSG("exceeds");
    CHECK_RC(decode_raw(CUC_RECORD_BUFFER, 1, 0xfffffff8u, 0, pl, 104), CUC_E_BADMSG);
    CHECK_RC(decode_raw(CUC_RECORD_BUFFER, 1, UINT32_MAX - 103, 0, pl, 104), CUC_E_BADMSG);
    CHECK_RC(decode_raw(CUC_RECORD_BUFFER, 2, 104, 0, pl, 104), CUC_E_VERSION);
    CHECK_RC(decode_raw(CUC_RECORD_BUFFER, 0, 104, 0, pl, 104), CUC_E_BADMSG);
    CHECK_RC(decode_raw(CUC_RECORD_BUFFER, 1, 104, 1, pl, 104), CUC_E_BADMSG);
    CHECK_ERRMSG("fds");
    CHECK_OK(decode_raw(CUC_RECORD_BUFFER, 1, 104, 0, pl, 104));
    cuc_pool_unref(p);
}

/* ---- hostile pool records (built in memory: they carry an fd) ---- */

static void pool_payload(uint8_t p[40], const uint8_t id[16], const cuc_uuid *owner,
                         uint32_t kind, uint32_t ht)
{
    memcpy(p, id, 16);
    memcpy(p + 16, owner->bytes, 16);
    cuc__put32(p + 32, kind);
    cuc__put32(p + 36, ht);
}

static int get_pool_fd(const uint8_t *pl, int fd, cuc_pool **out)
{
    cuc_pool *p = (cuc_pool *)0x1;
    cuc_msg *m;
    int rc;

    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc__msg_add_record(m, CUC_RECORD_POOL, 1, pl, 40, &fd, 1));
    rc = cuc_msg_get_pool(m, 0, &p);
    if (rc)
        CHECK(p == (cuc_pool *)0x1);
    else if (out)
        *out = p;
    else
        cuc_pool_unref(p);
    cuc_msg_destroy(m);
    return rc;
}

static void test_hostile_pools(void)
{
    cuc_pool *p = new_pool(dev0, CUC_POOL_DEVICE, CUC_POOL_IPC), *got;
    uint8_t id[CUC_POOL_ID_LEN], fresh[CUC_POOL_ID_LEN], pl[40];
    cuc_uuid nobody;
    int memfd = memfd_create("not-a-pool", MFD_CLOEXEC);
    cuc_msg *m;
    int fd;

    CHECK(memfd >= 0 && ftruncate(memfd, 65536) == 0);
    cuc_pool_id(p, id);
    memcpy(fresh, id, 16);
    fresh[0] ^= 0x5a;
    memset(nobody.bytes, 0xab, 16);
    /* the record of our own pool gives our pool, whatever fd rides along */
    pool_payload(pl, id, cuc_device_uuid(dev0), CUC_POOL_DEVICE, CUC_POOL_HANDLE_POSIX_FD);
    CHECK_OK(get_pool_fd(pl, memfd, &got));
    CHECK(got == p);
    cuc_pool_unref(got);
    /* enums */
    pool_payload(pl, fresh, cuc_device_uuid(dev0), 0, CUC_POOL_HANDLE_POSIX_FD);
    CHECK_RC(get_pool_fd(pl, p->fd, NULL), CUC_E_BADMSG);
    CHECK_ERRMSG("kind 0 (payload offset 32)");
    pool_payload(pl, fresh, cuc_device_uuid(dev0), 3, CUC_POOL_HANDLE_POSIX_FD);
    CHECK_RC(get_pool_fd(pl, p->fd, NULL), CUC_E_BADMSG);
    pool_payload(pl, fresh, cuc_device_uuid(dev0), CUC_POOL_DEVICE, 0);
    CHECK_RC(get_pool_fd(pl, p->fd, NULL), CUC_E_BADMSG);
    CHECK_ERRMSG("handle type 0 (payload offset 36)");
    pool_payload(pl, fresh, cuc_device_uuid(dev0), CUC_POOL_DEVICE, 2);
    CHECK_RC(get_pool_fd(pl, p->fd, NULL), CUC_E_BADMSG);
    /* an owner nobody here sees */
    pool_payload(pl, fresh, &nobody, CUC_POOL_DEVICE, CUC_POOL_HANDLE_POSIX_FD);
    CHECK_RC(get_pool_fd(pl, p->fd, NULL), CUC_E_NOT_VISIBLE);
    CHECK_ERRMSG("GPU-abababab-abab-abab-abab-abababababab");
    /* a known id with another owner, or another kind */
    if (n_dev > 1) {
        pool_payload(pl, id, cuc_device_uuid(dev_last), CUC_POOL_DEVICE,
                     CUC_POOL_HANDLE_POSIX_FD);
        CHECK_RC(get_pool_fd(pl, p->fd, NULL), CUC_E_BADMSG);
        CHECK_ERRMSG(cuc_device_uuid_string(dev_last));
    }
    pool_payload(pl, id, cuc_device_uuid(dev0), CUC_POOL_PINNED_HOST, CUC_POOL_HANDLE_POSIX_FD);
    CHECK_RC(get_pool_fd(pl, p->fd, NULL), CUC_E_BADMSG);
    CHECK_ERRMSG("pinned host");
    /* an fd that is no pool's */
    pool_payload(pl, fresh, cuc_device_uuid(dev0), CUC_POOL_DEVICE, CUC_POOL_HANDLE_POSIX_FD);
    CHECK_RC(get_pool_fd(pl, memfd, NULL), CUC_E_DRIVER);
    CHECK_ERRMSG("cuMemPoolImportFromShareableHandle");
    CHECK_RC(cuc_pool_get_by_id(fresh, &got), CUC_E_POOL_NOT_IMPORTED);
    /* the fd taken out of the message */
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc__msg_add_record(m, CUC_RECORD_POOL, 1, pl, 40, &memfd, 1));
    CHECK_OK(cuc__msg_take_record_fd(m, 0, 0, &fd));
    close(fd);
    CHECK_RC(cuc_msg_get_pool(m, 0, &got), CUC_E_INVALID);
    CHECK_ERRMSG("taken");
    /* lengths and fd counts */
    CHECK_RC(cuc__msg_add_record(m, CUC_RECORD_POOL, 1, pl, 39, &memfd, 1), CUC_E_INVALID);
    CHECK_RC(cuc__msg_add_record(m, CUC_RECORD_POOL, 1, pl, 40, NULL, 0), CUC_E_INVALID);
    cuc_msg_destroy(m);
    CHECK_RC(decode_raw(CUC_RECORD_POOL, 1, 40, 0, pl, 40), CUC_E_BADMSG);
    CHECK_RC(decode_raw(CUC_RECORD_POOL, 1, 40, 2, pl, 40), CUC_E_BADMSG);
    CHECK_RC(decode_raw(CUC_RECORD_POOL, 1, 0xffffffffu, 1, pl, 40), CUC_E_BADMSG);
    CHECK_RC(decode_raw(CUC_RECORD_POOL, 1, 36, 1, pl, 40), CUC_E_BADMSG);
    CHECK_RC(decode_raw(CUC_RECORD_POOL, 3, 40, 1, pl, 40), CUC_E_VERSION);
    CHECK_OK(decode_raw(CUC_RECORD_POOL, 1, 40, 1, pl, 40));
    close(memfd);
    cuc_pool_unref(p);
}

/* Simulator: the pool imported under another id, as another process
 * would: it cannot allocate; its buffers map the same memory, once; bad
 * export data is the driver's refusal. */
static void test_sim_import(void)
{
    cuc_pool *p, *ip, *again;
    uint8_t id[CUC_POOL_ID_LEN], fake[CUC_POOL_ID_LEN], pl[104];
    CUmemPoolPtrExportData d;
    cuc_buffer *b, *ib, *ib2;
    cuc_msg *m;

    if (!test_on_sim())
        return; /* the real driver imports pools only from other processes */
    p = new_pool(dev_last, CUC_POOL_DEVICE, CUC_POOL_IPC);
    cuc_pool_id(p, id);
    memcpy(fake, id, 16);
    fake[3] ^= 1;
    pool_payload(pl, fake, cuc_device_uuid(dev_last), CUC_POOL_DEVICE, CUC_POOL_HANDLE_POSIX_FD);
    CHECK_OK(get_pool_fd(pl, p->fd, &ip));
    CHECK(ip != p && cuc_pool_is_imported(ip) && cuc_pool_is_ipc(ip));
    CHECK(cuc_uuid_equal(cuc_device_uuid(cuc_pool_device(ip)), cuc_device_uuid(dev_last)));
    CHECK_OK(get_pool_fd(pl, p->fd, &again));
    CHECK(again == ip); /* registered by id */
    cuc_pool_unref(again);
    CHECK_RC(cuc_buffer_alloc_async(ip, 64, NULL, &b), CUC_E_INVALID);
    CHECK_ERRMSG("imported");
    CHECK_OK(cuc_buffer_alloc_async(p, 4096, NULL, &b));
    pt_fill(b, 99);
    CHECK_OK(cuc__buffer_export(b, &d));
    buffer_payload(pl, fake, 4096);
    memcpy(pl + 40, d.reserved, 64);
    m = msg_received(CUC_RECORD_BUFFER, pl, 104);
    CHECK_OK(cuc_msg_get_buffer(m, 0, &ib));
    CHECK_OK(cuc_msg_get_buffer(m, 0, &ib2));
    CHECK(ib == ib2 && ib != b && cuc_buffer_is_imported(ib));
    CHECK(cuc_buffer_ptr(ib) != cuc_buffer_ptr(b));
    CHECK(pt_holds(ib, 99)); /* the same memory */
    cuc_msg_destroy(m);
    /* a size that differs from the one the first import gave */
    cuc__put64(pl + 16, 8192);
    m = msg_received(CUC_RECORD_BUFFER, pl, 104);
    CHECK_RC(cuc_msg_get_buffer(m, 0, &ib2), CUC_E_BADMSG);
    CHECK_ERRMSG("8192");
    cuc_msg_destroy(m);
    CHECK_OK(cuc_buffer_unref_async(ib, NULL));
    CHECK_OK(cuc_buffer_unref_async(ib, NULL));
    /* export data that names nothing */
    buffer_payload(pl, fake, 4096);
    CHECK_RC(get_buffer(pl), CUC_E_DRIVER);
    CHECK_ERRMSG("cuMemPoolImportPointer");
    cuc_pool_unref(ip);
    CHECK_OK(cuc_buffer_unref_async(b, NULL));
    cuc_pool_unref(p);
}

int main(void)
{
    pt_start(CUC_DEVICE_CAP_POOL_POSIX_FD, "cannot export pools as POSIX fds");
    FD_BASELINE();
    /* Each part on its own leaks nothing. */
    test_refused();
    FD_CHECK_NO_LEAK();
    test_layout();
    FD_CHECK_NO_LEAK();
    test_round_trip();
    FD_CHECK_NO_LEAK();
    test_hostile_buffers();
    FD_CHECK_NO_LEAK();
    test_hostile_pools();
    FD_CHECK_NO_LEAK();
    test_sim_import();
    FD_CHECK_NO_LEAK();
    return test_finish();
}
