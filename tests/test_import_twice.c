/* One allocation named twice by a lying exporter (the parent), imported by
 * an exec'd child, for a device pool and a pinned host pool. One message
 * carries, each leased:
 *   1 the buffer's true record;
 *   2 the same record with byte 60 of its export data changed (one of the
 *     16 bytes the driver leaves unwritten): it resolves to the buffer of
 *     record 1, one object, whose free is the only one (before, a second
 *     import of the same pointer gave a second buffer that the first
 *     one's free unmapped: its reads failed and its lease was kept);
 *   3 the record with byte 40 changed (a byte the driver writes, which
 *     the simulator does not check): refused (CUC_E_BADMSG: the driver
 *     mapped it at the first import's address; or the driver's own
 *     refusal, CUC_E_DRIVER), no object made, record 1's buffer intact;
 *   4 a view record of a part of the buffer with the tail forged, and
 *   5 the view's true record: one view of record 1's allocation.
 * Every lease but record 3's (never taken) is released once the child has
 * dropped what it got; the child's exit ends that one and the memory is
 * freed. In the exporter's own process a record with a forged tail is
 * the allocation itself. Runs as well on a real GPU as on the simulator. */
#include <signal.h>

#include "pool_test.h"
#include "memory/buffer.h"
#include "wire/records.h"
#include "channel_test.h"

#define SIZE 4096
#define VOFF 64
#define VSIZE 128
#define TAIL_AT (40 + 60)   /* payload offset of export data byte 60 */
#define DRIVER_AT (40 + 40) /* of export data byte 40 */

static uint64_t seed_of(int kind)
{
    return 77 + (uint64_t)kind;
}

/* 1 if the n bytes at ptr are the pattern of seed at off. */
static int holds_at(const cuc_buffer *b, size_t off, size_t n, uint64_t seed)
{
    uint8_t *all = malloc(off + n), *got = malloc(n);
    int same;

    CHECK(all && got);
    test_pattern(seed, all, off + n);
    CHECK_OK(cuc_memcpy(got, cuc_buffer_ptr(b), n, pt_stream(b)));
    same = memcmp(got, all + off, n) == 0;
    free(all);
    free(got);
    return same;
}

/* ---- the importer (child) ---- */

static void import_one(cuc_channel *ch, int kind)
{
    cuc_msg *m = ct_recv(ch);
    cuc_buffer *b1, *b2, *v1, *v2, *none = (cuc_buffer *)0x1;
    cuc_pool *p;
    int rc;

    CHECK(cuc_msg_record_count(m) == 6);
    CHECK_OK(cuc_msg_get_pool(m, 0, &p));
    CHECK_OK(cuc_msg_get_buffer(m, 1, &b1));
    CHECK(cuc_buffer_is_imported(b1) && holds_at(b1, 0, SIZE, seed_of(kind)));
    CHECK_OK(cuc_msg_get_buffer(m, 2, &b2));
    CHECK(b2 == b1); /* the forged tail names the same allocation: merged */
    rc = cuc_msg_get_buffer(m, 3, &none);
    if (rc != CUC_E_BADMSG && rc != CUC_E_DRIVER) {
        fprintf(stderr, "record 3: %s (%s)\n", cuc_errname(rc), cuc_errmsg());
        exit(1);
    }
    if (rc == CUC_E_BADMSG)
        CHECK_ERRMSG("named two ways");
    CHECK(none == (cuc_buffer *)0x1);
    CHECK_OK(cuc_msg_get_buffer(m, 4, &v1));
    CHECK(v1->root == b1 && cuc_buffer_size(v1) == VSIZE);
    CHECK((char *)cuc_buffer_ptr(v1) == (char *)cuc_buffer_ptr(b1) + VOFF);
    CHECK_OK(cuc_msg_get_buffer(m, 5, &v2));
    CHECK(v2 == v1);
    cuc_msg_destroy(m);
    /* the first free leaves the second reference's memory mapped */
    CHECK_OK(cuc_buffer_unref_async(b1, NULL));
    CHECK(holds_at(b2, 0, SIZE, seed_of(kind)));
    CHECK_OK(cuc_buffer_unref_async(b2, NULL));
    CHECK(holds_at(v1, VOFF, VSIZE, seed_of(kind)));
    CHECK_OK(cuc_buffer_unref_async(v1, NULL));
    CHECK_OK(cuc_buffer_unref_async(v2, NULL));
    cuc_pool_unref(p);
    ct_send_empty(ch);
}

static int child_importer(void)
{
    cuc_channel *ch = ct_child_channel();

    import_one(ch, CUC_POOL_DEVICE);
    import_one(ch, CUC_POOL_PINNED_HOST);
    cuc_channel_destroy(ch);
    return test_finish();
}

/* ---- the lying exporter (parent) ---- */

/* The payload of b's record (a buffer or a view record), n bytes. */
static void record_of(cuc_buffer *b, uint8_t *pl, size_t n)
{
    struct cuc__record r;
    cuc_msg *tmp;

    CHECK_OK(cuc_msg_create(&tmp));
    CHECK_OK(cuc_msg_add_buffer(tmp, b));
    CHECK_OK(cuc__msg_record(tmp, 0, &r));
    CHECK(r.len == n);
    memcpy(pl, r.payload, n);
    cuc_msg_destroy(tmp);
}

/* Adds b's record with byte at (of the payload) changed, leased as
 * cuc_msg_add_buffer would lease it. */
static void add_forged(cuc_msg *m, cuc_buffer *b, int type, size_t len, size_t at)
{
    uint8_t pl[112];
    uint64_t id;

    record_of(b, pl, len);
    pl[at] ^= 0x5a;
    CHECK_OK(cuc__msg_lease_attach(m, &cuc__buffer_lease_ops, b, &id));
    cuc__put64(pl + 32, id);
    CHECK_OK(cuc__msg_add_record(m, (uint16_t)type, 1, pl, (uint32_t)len, NULL, 0));
}

/* In the exporting process a record with a forged tail is b itself. */
static void check_local(cuc_buffer *b)
{
    uint8_t pl[104];
    void *bytes;
    cuc_buffer *got;
    cuc_msg *m;
    size_t len;

    record_of(b, pl, sizeof(pl));
    pl[TAIL_AT] ^= 0x5a;
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc__msg_add_record(m, CUC_RECORD_BUFFER, 1, pl, sizeof(pl), NULL, 0));
    CHECK_OK(cuc_msg_to_bytes(m, &bytes, &len));
    cuc_msg_destroy(m);
    CHECK_OK(cuc_msg_from_bytes(bytes, len, &m));
    free(bytes);
    CHECK_OK(cuc_msg_get_buffer(m, 0, &got));
    CHECK(got == b);
    CHECK_OK(cuc_buffer_unref_async(got, NULL));
    cuc_msg_destroy(m);
}

static cuc_pool *send_one(cuc_channel *ch, int kind)
{
    cuc_pool *p = pt_new_pool(devs[0], kind, CUC_POOL_IPC);
    cuc_buffer *b, *v;
    size_t n = 999;
    cuc_msg *m;

    CHECK_OK(cuc_buffer_alloc_async(p, SIZE, NULL, &b));
    pt_fill(b, seed_of(kind));
    CHECK_OK(cuc_buffer_view(b, VOFF, VSIZE, &v));
    check_local(b);
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_pool(m, p));
    CHECK_OK(cuc_msg_add_buffer(m, b));
    add_forged(m, b, CUC_RECORD_BUFFER, 104, TAIL_AT);
    add_forged(m, b, CUC_RECORD_BUFFER, 104, DRIVER_AT);
    add_forged(m, v, CUC_RECORD_BUFFER_VIEW, 112, TAIL_AT);
    CHECK_OK(cuc_msg_add_buffer(m, v));
    CHECK_OK(cuc_channel_send(ch, m));
    cuc_msg_destroy(m);
    CHECK_OK(cuc_buffer_unref_async(v, NULL));
    CHECK_OK(cuc_buffer_unref_async(b, NULL));
    ct_wait_empty(ch);
    /* every lease the child took was released; record 3's stays */
    CHECK_OK(cuc_pool_lease_wait(p, ch, 1, CT_RECV_MS));
    CHECK_OK(cuc_pool_lease_count(p, &n));
    CHECK(n == 1);
    CHECK(pt_used(p) > 0);
    return p;
}

int main(int argc, char **argv)
{
    cuc_channel *ch;
    cuc_pool *p[2];
    char env[512];
    pid_t pid;

    if (argc >= 3 && !strcmp(argv[1], "--child")) {
        signal(SIGPIPE, SIG_IGN);
        return !strcmp(argv[2], "importer") ? child_importer() : 2;
    }
    unsetenv("CUDA_VISIBLE_DEVICES");
    pt_start(CUC_DEVICE_CAP_POOL_POSIX_FD, "cannot export pools as POSIX fds");
    FD_BASELINE();
    pt_child_cvd(env, sizeof(env));
    ch = ct_start("importer", NULL, env, &pid);
    p[0] = send_one(ch, CUC_POOL_DEVICE);
    p[1] = send_one(ch, CUC_POOL_PINNED_HOST);
    CHECK(wait_child(pid) == 0);
    for (int i = 0; i < 2; i++) { /* the child's exit ended record 3's lease */
        CHECK_OK(cuc_pool_lease_wait(p[i], ch, 0, CT_RECV_MS));
        CHECK(pt_used(p[i]) == 0);
        cuc_pool_unref(p[i]);
    }
    cuc_channel_destroy(ch);
    FD_CHECK_NO_LEAK();
    return test_finish();
}
