/* Pools and buffers across processes, with exec'd children whose
 * CUDA_VISIBLE_DEVICES reverses the parent's (the UUID form with one GPU):
 *  - reversed: a pool per device and its buffers arrive on the device with
 *    the parent's UUID (checked through the imported pool's device UUID,
 *    and its ordinal there), the bytes the parent wrote are the bytes the
 *    child reads and the child's writes come back; a buffer sent before its
 *    pool is CUC_E_POOL_NOT_IMPORTED naming the pool id; an imported pool
 *    cannot allocate; a second import is the same object; the parent's
 *    frees wait for the child's releases; for device and pinned host pools;
 *  - chain: A -> B -> C, B's own free waiting for C, A's for B;
 *  - one buffer added to two messages: the child gets one object (the
 *    sender exports the buffer once and sends the same bytes twice; the
 *    driver would give the same 48 bytes again anyway: sim/FACTS.md F25);
 *  - two children importing the same buffers at once;
 *  - four threads of one child importing the same records at once, and no
 *    fd or mapping left in that child after a round;
 *  - four threads of one child each getting and dropping one pool again
 *    and again, so that its imports and destroys interleave: serialized
 *    (the simulator aborts an import during a destroy, where the driver
 *    crashed: sim/FACTS.md F47), and no fd left after a round;
 *  - SIGKILL: a child killed while holding leases; the parent's deferred
 *    frees then happen, and no fd or mapping stays (counted in
 *    /proc/self/fd and /proc/self/maps, around a second round).
 * Runs as well on a real GPU as on the simulator. */
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>

#include "pool_test.h"
#include "memory/buffer.h"
#include "wire/records.h"
#include "channel_test.h"

#define RECV_MS 30000
#define MAXP 16
#define NBUF 2
#define NTHREADS 4
#define THREAD_BUFS 16

static const size_t sizes[NBUF] = {(1u << 20) + 13, 4097};

static uint64_t seed_of(int phase, int pool, int buf)
{
    return 1000003ull * (uint64_t)phase + 101ull * (uint64_t)pool + (uint64_t)buf + 1;
}

/* ---- helpers shared by both sides ---- */

static cuc_pool *new_pool(cuc_device *d, int kind)
{
    return pt_new_pool(d, kind, CUC_POOL_IPC);
}

static void pool_hex(const cuc_pool *p, char out[33])
{
    uint8_t id[CUC_POOL_ID_LEN];

    cuc_pool_id(p, id);
    cuc__hex(id, CUC_POOL_ID_LEN, out);
}

static size_t pool_leases(const cuc_pool *p)
{
    size_t n = 999;

    CHECK_OK(cuc_pool_lease_count(p, &n));
    return n;
}

/* The importing side's checks of one pool record. */
static cuc_pool *get_checked_pool(const cuc_msg *m, size_t i, const char *uuid, int ordinal)
{
    cuc_pool *p;
    cuc_buffer *b;

    CHECK_OK(cuc_msg_get_pool(m, i, &p));
    CHECK(cuc_pool_is_imported(p) && cuc_pool_is_ipc(p));
    if (strcmp(cuc_device_uuid_string(cuc_pool_device(p)), uuid) != 0) {
        fprintf(stderr, "pool arrived on %s, want %s\n",
                cuc_device_uuid_string(cuc_pool_device(p)), uuid);
        exit(1);
    }
    if (ordinal >= 0 && cuc_device_ordinal(cuc_pool_device(p)) != ordinal) {
        fprintf(stderr, "pool's device has ordinal %d here, want %d\n",
                cuc_device_ordinal(cuc_pool_device(p)), ordinal);
        exit(1);
    }
    CHECK_RC(cuc_buffer_alloc_async(p, 64, NULL, &b), CUC_E_INVALID);
    CHECK(strstr(cuc_errmsg(), "imported") != NULL);
    return p;
}

/* Waits (up to 30 s) until path exists. */
static void wait_file(const char *path)
{
    struct stat st;

    for (int i = 0; i < 6000 && stat(path, &st) != 0; i++)
        usleep(5000);
    CHECK(stat(path, &st) == 0);
}

/* ---- reversed: child ----
 * args: kind npools, then per pool: UUID, child ordinal, pool id hex; then
 * the path of the file the parent makes once it may see this child go. */
static int child_reversed(int argc, char **argv)
{
    cuc_channel *ch = ct_child_channel();
    int np = atoi(argv[1]), rc;
    cuc_pool *pools[MAXP];
    cuc_buffer *bufs[MAXP][NBUF], *again;
    cuc_msg *m, *ack;

    CHECK(argc == 3 + 3 * np && np <= MAXP);
    /* 1: a buffer before its pool */
    m = ct_recv(ch);
    rc = cuc_msg_get_buffer(m, 0, &again);
    CHECK_RC(rc, CUC_E_POOL_NOT_IMPORTED);
    CHECK(strstr(cuc_errmsg(), argv[4]) != NULL); /* pool 0's id */
    cuc_msg_destroy(m);
    ct_send_empty(ch);
    /* 2: the pools, each followed by its buffers */
    m = ct_recv(ch);
    CHECK(cuc_msg_record_count(m) == (size_t)np * (1 + NBUF));
    CHECK_OK(cuc_msg_create(&ack));
    for (int i = 0; i < np; i++) {
        size_t base = (size_t)i * (1 + NBUF);
        pools[i] = get_checked_pool(m, base, argv[2 + 3 * i], atoi(argv[3 + 3 * i]));
        CHECK_OK(cuc_msg_add_device(ack, cuc_pool_device(pools[i])));
        for (int j = 0; j < NBUF; j++) {
            CHECK_OK(cuc_msg_get_buffer(m, base + 1 + j, &bufs[i][j]));
            CHECK(cuc_buffer_is_imported(bufs[i][j]));
            CHECK(cuc_buffer_pool(bufs[i][j]) == pools[i]);
            CHECK(cuc_buffer_size(bufs[i][j]) == sizes[j]);
            CHECK(pt_holds(bufs[i][j], seed_of(1, i, j)));
            CHECK_OK(cuc_msg_get_buffer(m, base + 1 + j, &again));
            CHECK(again == bufs[i][j]); /* mapped once, counted */
            CHECK_OK(cuc_buffer_unref_async(again, NULL));
            pt_fill(bufs[i][j], seed_of(2, i, j));
        }
    }
    CHECK_OK(cuc_channel_send(ch, ack));
    cuc_msg_destroy(ack);
    /* 3: free everything, say so, wait for the end */
    ct_wait_empty(ch);
    for (int i = 0; i < np; i++)
        for (int j = 0; j < NBUF; j++)
            CHECK_OK(cuc_buffer_unref_async(bufs[i][j], NULL));
    /* the records' leases ended with those buffers: taken again, they are
     * refused by name (an import now could map memory the parent freed),
     * singly and as a range; so too once their pools are gone */
    for (int gone = 0; gone < 2; gone++) {
        for (int j = 0; j < NBUF; j++) {
            CHECK_RC(cuc_msg_get_buffer(m, 1 + (size_t)j, &again), CUC_E_NOT_FOUND);
            CHECK(strstr(cuc_errmsg(), "taken before") != NULL);
        }
        CHECK_RC(cuc_msg_get_buffers(m, 1, NBUF, bufs[0]), CUC_E_NOT_FOUND);
        CHECK(strstr(cuc_errmsg(), "lease") != NULL);
        for (int i = 0; i < np && !gone; i++)
            cuc_pool_unref(pools[i]);
    }
    cuc_msg_destroy(m);
    ct_send_empty(ch);
    /* the parent destroys its end while we live and hold a lease (it
     * lingers; our exit would end the lease at its destroy), then says
     * so: a message could not come, the channel being destroyed */
    wait_file(argv[2 + 3 * np]);
    cuc_channel_destroy(ch);
    return 0;
}

static void test_reversed(int kind)
{
    char env[512], uuids[MAXP][CUC_UUID_STRLEN], ords[MAXP][16], hexes[MAXP][33], kbuf[16],
        nbuf[16], mark[256];
    const char *args[3 + 3 * MAXP + 1];
    cuc_pool *pools[MAXP];
    cuc_buffer *bufs[MAXP][NBUF];
    int np = n_dev < MAXP ? n_dev : MAXP, na = 0, fd;
    cuc_channel *ch;
    cuc_msg *m;
    pid_t pid;

    pt_child_cvd(env, sizeof(env));
    snprintf(kbuf, sizeof(kbuf), "%d", kind);
    snprintf(nbuf, sizeof(nbuf), "%d", np);
    args[na++] = kbuf;
    args[na++] = nbuf;
    for (int i = 0; i < np; i++) {
        pools[i] = new_pool(devs[i], kind);
        snprintf(uuids[i], sizeof(uuids[i]), "%s", cuc_device_uuid_string(devs[i]));
        snprintf(ords[i], sizeof(ords[i]), "%d", pt_child_ordinal(i));
        pool_hex(pools[i], hexes[i]);
        args[na++] = uuids[i];
        args[na++] = ords[i];
        args[na++] = hexes[i];
        for (int j = 0; j < NBUF; j++) {
            CHECK_OK(cuc_buffer_alloc_async(pools[i], sizes[j], NULL, &bufs[i][j]));
            pt_fill(bufs[i][j], seed_of(1, i, j)); /* synchronous: complete when sent */
        }
    }
    snprintf(mark, sizeof(mark), "/tmp/cuc-reversed-%ld-%d", (long)getpid(), kind);
    unlink(mark);
    args[na++] = mark;
    args[na] = NULL;
    ch = ct_start("reversed", args, env, &pid);
    /* 1: buffer 0 of pool 0 alone */
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_buffer(m, bufs[0][0]));
    CHECK_OK(cuc_channel_send(ch, m));
    cuc_msg_destroy(m);
    ct_wait_empty(ch);
    /* 2: everything, pools first */
    CHECK_OK(cuc_msg_create(&m));
    for (int i = 0; i < np; i++) {
        CHECK_OK(cuc_msg_add_pool(m, pools[i]));
        for (int j = 0; j < NBUF; j++)
            CHECK_OK(cuc_msg_add_buffer(m, bufs[i][j]));
    }
    CHECK_OK(cuc_channel_send(ch, m));
    cuc_msg_destroy(m);
    m = ct_recv(ch);
    CHECK(cuc_msg_record_count(m) == (size_t)np);
    for (int i = 0; i < np; i++) {
        cuc_device *d;
        CHECK_OK(cuc_msg_get_device(m, (size_t)i, &d));
        CHECK(d == devs[i]); /* the child named the very GPU, by UUID */
        for (int j = 0; j < NBUF; j++)
            CHECK(pt_holds(bufs[i][j], seed_of(2, i, j))); /* the child's bytes */
    }
    cuc_msg_destroy(m);
    /* the first message's lease was never released (the child could not
     * import it): it ends when the child's end closes */
    CHECK(pool_leases(pools[0]) == 1 + NBUF);
    for (int i = 0; i < np; i++) {
        uint64_t used = pt_used(pools[i]);
        for (int j = 0; j < NBUF; j++)
            CHECK_OK(cuc_buffer_unref_async(bufs[i][j], NULL)); /* deferred */
        CHECK(pt_used(pools[i]) == used);
    }
    ct_send_empty(ch);
    ct_wait_empty(ch);
    for (int i = 0; i < np; i++) {
        CHECK_OK(cuc_pool_lease_wait(pools[i], ch, i == 0 ? 1 : 0, RECV_MS));
        CHECK(pt_used(pools[i]) == (i == 0 ? sizes[0] : 0));
    }
    cuc_channel_destroy(ch); /* the link lingers: a lease is held, the child lives */
    CHECK(pool_leases(pools[0]) == 1);
    fd = open(mark, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
    CHECK(fd >= 0);
    close(fd);
    CHECK(wait_child(pid) == 0);
    unlink(mark);
    CHECK_OK(cuc_pool_lease_wait(pools[0], NULL, 0, RECV_MS)); /* saw it exit */
    CHECK(pool_leases(pools[0]) == 0 && pt_used(pools[0]) == 0);
    for (int i = 0; i < np; i++)
        cuc_pool_unref(pools[i]);
}

/* ---- chain A -> B -> C ---- */

/* args: UUID of the pool's device, the CUDA_VISIBLE_DEVICES for C. */
static int child_relay(int argc, char **argv)
{
    cuc_channel *up = ct_child_channel(), *down;
    const char *cargs[2] = {argv[0], NULL};
    cuc_pool *p;
    cuc_buffer *b;
    cuc_msg *m, *fwd;
    pid_t pid;

    CHECK(argc == 2);
    m = ct_recv(up);
    p = get_checked_pool(m, 0, argv[0], -1);
    CHECK_OK(cuc_msg_get_buffer(m, 1, &b));
    CHECK(pt_holds(b, seed_of(1, 0, 0)));
    cuc_msg_destroy(m);
    down = ct_start("leaf", cargs, argv[1], &pid);
    CHECK_OK(cuc_msg_create(&fwd));
    CHECK_OK(cuc_msg_add_pool(fwd, p)); /* an imported pool, sent on */
    CHECK_OK(cuc_msg_add_buffer(fwd, b));
    CHECK_OK(cuc_channel_send(down, fwd));
    cuc_msg_destroy(fwd);
    CHECK_OK(cuc_buffer_unref_async(b, NULL)); /* deferred: C holds a lease */
    ct_wait_empty(down);                   /* C has read and written it */
    ct_send_empty(up);
    ct_wait_empty(up); /* A: go */
    ct_send_empty(down);
    CHECK_OK(cuc_pool_lease_wait(p, down, 0, RECV_MS)); /* C's release, then ours */
    cuc_pool_unref(p);
    cuc_channel_destroy(down); /* C waits for it */
    CHECK(wait_child(pid) == 0);
    CHECK_RC(cuc_channel_recv(up, RECV_MS, &m), CUC_E_PEER_CLOSED);
    cuc_channel_destroy(up);
    return 0;
}

/* args: UUID of the pool's device. */
static int child_leaf(int argc, char **argv)
{
    cuc_channel *ch = ct_child_channel();
    cuc_pool *p;
    cuc_buffer *b;
    cuc_msg *m;

    CHECK(argc == 1);
    m = ct_recv(ch);
    p = get_checked_pool(m, 0, argv[0], -1);
    CHECK_OK(cuc_msg_get_buffer(m, 1, &b));
    cuc_msg_destroy(m);
    CHECK(pt_holds(b, seed_of(1, 0, 0)));
    pt_fill(b, seed_of(3, 0, 0));
    ct_send_empty(ch);
    ct_wait_empty(ch);
    CHECK_OK(cuc_buffer_unref_async(b, NULL));
    cuc_pool_unref(p);
    CHECK_RC(cuc_channel_recv(ch, RECV_MS, &m), CUC_E_PEER_CLOSED);
    cuc_channel_destroy(ch);
    return 0;
}

/* C sees the devices rotated by one (the UUID form with one GPU). */
static void rotated_cvd(char *out, size_t outsz)
{
    size_t len;

    if (n_dev == 1) {
        snprintf(out, outsz, "CUDA_VISIBLE_DEVICES=%s", cuc_device_uuid_string(devs[0]));
        return;
    }
    len = (size_t)snprintf(out, outsz, "CUDA_VISIBLE_DEVICES=");
    for (int i = 0; i < n_dev && len < outsz; i++)
        len += (size_t)snprintf(out + len, outsz - len, "%d%s", (i + 1) % n_dev,
                                i + 1 < n_dev ? "," : "");
}

static void test_chain(void)
{
    cuc_device *d = devs[n_dev - 1];
    cuc_pool *p = new_pool(d, CUC_POOL_DEVICE);
    char env[512], cenv[512], uuid[CUC_UUID_STRLEN];
    const char *args[3] = {uuid, cenv, NULL};
    cuc_channel *ch;
    cuc_buffer *b;
    cuc_msg *m;
    pid_t pid;

    snprintf(uuid, sizeof(uuid), "%s", cuc_device_uuid_string(d));
    pt_child_cvd(env, sizeof(env));
    rotated_cvd(cenv, sizeof(cenv));
    CHECK_OK(cuc_buffer_alloc_async(p, sizes[0], NULL, &b));
    pt_fill(b, seed_of(1, 0, 0));
    ch = ct_start("relay", args, env, &pid);
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_pool(m, p));
    CHECK_OK(cuc_msg_add_buffer(m, b));
    CHECK_OK(cuc_channel_send(ch, m));
    cuc_msg_destroy(m);
    ct_wait_empty(ch); /* B forwarded, freed its reference; C wrote */
    CHECK(pt_holds(b, seed_of(3, 0, 0))); /* C's bytes, in A's allocation */
    /* B's lease stays while C maps the memory */
    CHECK_RC(cuc_pool_lease_wait(p, ch, 0, 300), CUC_E_TIMEOUT);
    CHECK(pool_leases(p) == 1);
    CHECK_OK(cuc_buffer_unref_async(b, NULL));
    CHECK(pt_used(p) == sizes[0]);
    ct_send_empty(ch);
    CHECK_OK(cuc_pool_lease_wait(p, ch, 0, RECV_MS));
    CHECK(pt_used(p) == 0);
    cuc_channel_destroy(ch);
    CHECK(wait_child(pid) == 0);
    cuc_pool_unref(p);
}

/* ---- one buffer in two messages ---- */

/* args: UUID of the pool's device. Message 1: the pool and a buffer;
 * message 2: the same buffer, added to a message of its own. */
static int child_twice(int argc, char **argv)
{
    cuc_channel *ch = ct_child_channel();
    struct cuc__record r1, r2;
    cuc_buffer *b1, *b2;
    cuc_msg *m1, *m2;
    cuc_pool *p;

    CHECK(argc == 1);
    m1 = ct_recv(ch);
    m2 = ct_recv(ch);
    p = get_checked_pool(m1, 0, argv[0], -1);
    CHECK_OK(cuc__msg_record(m1, 1, &r1));
    CHECK_OK(cuc__msg_record(m2, 0, &r2));
    CHECK(memcmp(r1.payload + 40, r2.payload + 40, 64) == 0); /* export data */
    CHECK(cuc__get64(r1.payload + 32) != cuc__get64(r2.payload + 32)); /* leases */
    CHECK_OK(cuc_msg_get_buffer(m1, 1, &b1));
    CHECK_OK(cuc_msg_get_buffer(m2, 0, &b2));
    CHECK(b2 == b1); /* one import, two references */
    CHECK(pt_holds(b2, seed_of(5, 0, 0)));
    cuc_msg_destroy(m1);
    cuc_msg_destroy(m2);
    CHECK_OK(cuc_buffer_unref_async(b1, NULL));
    CHECK(pt_holds(b2, seed_of(5, 0, 0))); /* still mapped */
    CHECK_OK(cuc_buffer_unref_async(b2, NULL));
    cuc_pool_unref(p);
    ct_send_empty(ch);
    CHECK_RC(cuc_channel_recv(ch, RECV_MS, &m1), CUC_E_PEER_CLOSED);
    cuc_channel_destroy(ch);
    return 0;
}

static void test_two_messages(void)
{
    cuc_device *d = devs[n_dev - 1];
    cuc_pool *p = new_pool(d, CUC_POOL_DEVICE);
    char env[512], uuid[CUC_UUID_STRLEN];
    const char *args[2] = {uuid, NULL};
    CUmemPoolPtrExportData direct;
    struct cuc__record r;
    cuc_channel *ch;
    cuc_buffer *b;
    cuc_msg *m;
    pid_t pid;

    snprintf(uuid, sizeof(uuid), "%s", cuc_device_uuid_string(d));
    pt_child_cvd(env, sizeof(env));
    CHECK_OK(cuc_buffer_alloc_async(p, sizes[1], NULL, &b));
    pt_fill(b, seed_of(5, 0, 0));
    ch = ct_start("twice", args, env, &pid);
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_pool(m, p));
    CHECK_OK(cuc_msg_add_buffer(m, b));
    /* what a second export would have sent: the same bytes (sim/FACTS.md
     * F25) */
    CHECK_OK(cuc__msg_record(m, 1, &r));
    CHECK_OK(cuc_device_set_current(d));
    memset(&direct, 0, sizeof(direct));
    CHECK(CUC_DRV->cuMemPoolExportPointer(&direct, (CUdeviceptr)(uintptr_t)cuc_buffer_ptr(b)) ==
          CUDA_SUCCESS);
    CHECK(memcmp(r.payload + 40, direct.reserved, 48) == 0);
    CHECK_OK(cuc_channel_send(ch, m));
    cuc_msg_destroy(m);
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_buffer(m, b));
    CHECK_OK(cuc_channel_send(ch, m));
    cuc_msg_destroy(m);
    CHECK(pool_leases(p) == 2);
    ct_wait_empty(ch);
    CHECK_OK(cuc_pool_lease_wait(p, ch, 0, RECV_MS));
    CHECK(pool_leases(p) == 0);
    cuc_channel_destroy(ch);
    CHECK(wait_child(pid) == 0);
    CHECK_OK(cuc_buffer_unref_async(b, NULL));
    CHECK(pt_used(p) == 0);
    cuc_pool_unref(p);
}

/* ---- two children at once; four threads in one child ---- */

/* args: UUID, number of buffers. Imports all, checks, frees, acks. */
static int child_reader(int argc, char **argv)
{
    cuc_channel *ch = ct_child_channel();
    int n = atoi(argv[1]);
    cuc_buffer *b;
    cuc_pool *p;
    cuc_msg *m;

    CHECK(argc == 2);
    m = ct_recv(ch);
    CHECK(cuc_msg_record_count(m) == (size_t)n + 1);
    p = get_checked_pool(m, 0, argv[0], -1);
    for (int j = 0; j < n; j++) {
        CHECK_OK(cuc_msg_get_buffer(m, (size_t)j + 1, &b));
        CHECK(pt_holds(b, seed_of(4, 0, j)));
        CHECK_OK(cuc_buffer_unref_async(b, NULL));
    }
    cuc_msg_destroy(m);
    cuc_pool_unref(p);
    ct_send_empty(ch);
    CHECK_RC(cuc_channel_recv(ch, RECV_MS, &m), CUC_E_PEER_CLOSED);
    cuc_channel_destroy(ch);
    return 0;
}

/* Imports n buffers (buffer 0 twice: two references) and frees them in
 * one cuc_buffer_unref_many_async, with a NULL in the list; buffer 0 keeps its
 * second reference, readable, until its own cuc_buffer_unref_async. */
static int child_batch(int argc, char **argv)
{
    cuc_channel *ch = ct_child_channel();
    int n = atoi(argv[1]);
    cuc_buffer *b[THREAD_BUFS + 1], *again;
    cuc_pool *p;
    cuc_msg *m;

    CHECK(argc == 2 && n <= THREAD_BUFS);
    m = ct_recv(ch);
    p = get_checked_pool(m, 0, argv[0], -1);
    for (int j = 0; j < n; j++) {
        CHECK_OK(cuc_msg_get_buffer(m, (size_t)j + 1, &b[j]));
        CHECK(pt_holds(b[j], seed_of(5, 0, j)));
    }
    CHECK_OK(cuc_msg_get_buffer(m, 1, &again));
    CHECK(again == b[0]);
    b[n] = NULL;
    CHECK_OK(cuc_buffer_unref_many_async(b, (size_t)n + 1, NULL));
    CHECK(pt_holds(again, seed_of(5, 0, 0)));
    CHECK_OK(cuc_buffer_unref_async(again, NULL));
    CHECK_RC(cuc_buffer_unref_many_async(NULL, 1, NULL), CUC_E_INVALID);
    CHECK_OK(cuc_buffer_unref_many_async(NULL, 0, NULL));
    cuc_msg_destroy(m);
    cuc_pool_unref(p);
    ct_send_empty(ch);
    CHECK_RC(cuc_channel_recv(ch, RECV_MS, &m), CUC_E_PEER_CLOSED);
    cuc_channel_destroy(ch);
    return 0;
}

/* A pool of dev with n buffers of 8 KiB + j bytes, filled with phase's
 * patterns, and the message carrying them. */
static cuc_msg *pool_msg(cuc_device *dev, int n, int phase, cuc_pool **pool, cuc_buffer **bufs)
{
    cuc_msg *m;

    *pool = new_pool(dev, CUC_POOL_DEVICE);
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_pool(m, *pool));
    for (int j = 0; j < n; j++) {
        CHECK_OK(cuc_buffer_alloc_async(*pool, 8192 + (size_t)j, NULL, &bufs[j]));
        pt_fill(bufs[j], seed_of(phase, 0, j));
        CHECK_OK(cuc_msg_add_buffer(m, bufs[j]));
    }
    return m;
}

static void free_all(cuc_buffer **bufs, int n)
{
    for (int j = 0; j < n; j++)
        CHECK_OK(cuc_buffer_unref_async(bufs[j], NULL));
}

static void test_two_children(void)
{
    cuc_device *d = devs[0];
    char env[512], uuid[CUC_UUID_STRLEN], nb[16];
    const char *args[3] = {uuid, nb, NULL};
    cuc_buffer *bufs[THREAD_BUFS];
    cuc_channel *ch[2];
    cuc_pool *p;
    cuc_msg *m;
    pid_t pid[2];

    snprintf(uuid, sizeof(uuid), "%s", cuc_device_uuid_string(d));
    snprintf(nb, sizeof(nb), "%d", THREAD_BUFS);
    pt_child_cvd(env, sizeof(env));
    m = pool_msg(d, THREAD_BUFS, 4, &p, bufs);
    for (int k = 0; k < 2; k++)
        ch[k] = ct_start("reader", args, env, &pid[k]);
    for (int k = 0; k < 2; k++)
        CHECK_OK(cuc_channel_send(ch[k], m)); /* one lease per buffer and child */
    cuc_msg_destroy(m);
    CHECK(pool_leases(p) == 2 * THREAD_BUFS);
    free_all(bufs, THREAD_BUFS); /* deferred until both have released */
    for (int k = 0; k < 2; k++)
        ct_wait_empty(ch[k]);
    for (int k = 0; k < 2; k++)
        CHECK_OK(cuc_pool_lease_wait(p, ch[k], (size_t)(1 - k) * THREAD_BUFS, RECV_MS));
    CHECK(pool_leases(p) == 0 && pt_used(p) == 0);
    for (int k = 0; k < 2; k++) {
        cuc_channel_destroy(ch[k]);
        CHECK(wait_child(pid[k]) == 0);
    }
    cuc_pool_unref(p);
}

/* An importer's batched free ends every lease: the exporter's deferred
 * frees all happen. */
static void test_batch_free(void)
{
    char env[512], uuid[CUC_UUID_STRLEN], nb[16];
    const char *args[3] = {uuid, nb, NULL};
    cuc_buffer *bufs[THREAD_BUFS];
    cuc_channel *ch;
    cuc_pool *p;
    cuc_msg *m;
    pid_t pid;

    snprintf(uuid, sizeof(uuid), "%s", cuc_device_uuid_string(devs[0]));
    snprintf(nb, sizeof(nb), "%d", THREAD_BUFS);
    pt_child_cvd(env, sizeof(env));
    m = pool_msg(devs[0], THREAD_BUFS, 5, &p, bufs);
    ch = ct_start("batch", args, env, &pid);
    CHECK_OK(cuc_channel_send(ch, m));
    cuc_msg_destroy(m);
    free_all(bufs, THREAD_BUFS); /* deferred until the child releases */
    CHECK(pool_leases(p) == THREAD_BUFS);
    ct_wait_empty(ch);
    CHECK_OK(cuc_pool_lease_wait(p, ch, 0, RECV_MS));
    CHECK(pool_leases(p) == 0 && pt_used(p) == 0);
    cuc_channel_destroy(ch);
    CHECK(wait_child(pid) == 0);
    cuc_pool_unref(p);
}

/* ---- many buffers at once (cuc_msg_get_buffers) ----
 * The first message: the pool, GET_N buffers (more than two of the
 * function's runs of 64), a device record, GET_TAIL buffers; the second:
 * buffers of a pool the child never gets. */
#define GET_N 150
#define GET_TAIL 10

static int child_get_many(int argc, char **argv)
{
    cuc_channel *ch = ct_child_channel();
    cuc_buffer *b[GET_N], *t[GET_TAIL], *x[4], *again;
    cuc_msg *m = ct_recv(ch), *m2 = ct_recv(ch);
    cuc_pool *p;

    CHECK(argc == 1);
    p = get_checked_pool(m, 0, argv[0], -1);
    CHECK_OK(cuc_msg_get_buffers(m, 1, GET_N, b));
    for (int j = 0; j < GET_N; j++) {
        CHECK(cuc_buffer_size(b[j]) == 8192 + (size_t)j && cuc_buffer_is_imported(b[j]));
        CHECK(pt_holds(b[j], seed_of(6, 0, j)));
        CHECK_OK(cuc_msg_get_buffer(m, (size_t)j + 1, &again));
        CHECK(again == b[j]); /* one import, whichever call made it */
        CHECK_OK(cuc_buffer_unref_async(again, NULL));
    }
    /* all or nothing: a range that meets the device record, the pool
     * record, or runs past the message writes nothing and keeps nothing */
    memset(x, 0, sizeof(x));
    CHECK_RC(cuc_msg_get_buffers(m, GET_N - 1, 3, x), CUC_E_INVALID);
    CHECK_ERRMSG("is a device record, not a buffer's: nothing was taken");
    CHECK_RC(cuc_msg_get_buffers(m, 0, 2, x), CUC_E_INVALID);
    CHECK_RC(cuc_msg_get_buffers(m, GET_N + 2, GET_TAIL + 1, x), CUC_E_INVALID);
    CHECK_RC(cuc_msg_get_buffers(m2, 0, 3, x), CUC_E_POOL_NOT_IMPORTED);
    CHECK_RC(cuc_msg_get_buffers(NULL, 0, 1, x), CUC_E_INVALID);
    CHECK(!x[0] && !x[1] && !x[2]);
    CHECK_OK(cuc_msg_get_buffers(m, 1, 0, NULL));
    CHECK_OK(cuc_msg_get_buffers(m, GET_N + 2, GET_TAIL, t));
    for (int j = 0; j < GET_TAIL; j++)
        CHECK(pt_holds(t[j], seed_of(6, 0, GET_N + j)));
    CHECK_OK(cuc_buffer_unref_many_async(b, GET_N, NULL));
    CHECK_OK(cuc_buffer_unref_many_async(t, GET_TAIL, NULL));
    cuc_msg_destroy(m2);
    cuc_msg_destroy(m);
    cuc_pool_unref(p);
    ct_send_empty(ch);
    cuc_channel_destroy(ch); /* the never-imported buffers' leases end with it */
    return test_finish();
}

static void test_get_many(void)
{
    cuc_buffer *bufs[GET_N + GET_TAIL], *other[3];
    char env[512], uuid[CUC_UUID_STRLEN];
    const char *args[2] = {uuid, NULL};
    cuc_pool *p = new_pool(devs[0], CUC_POOL_DEVICE), *q = new_pool(devs[0], CUC_POOL_DEVICE);
    cuc_device *d;
    cuc_channel *ch;
    cuc_msg *m, *m2;
    pid_t pid;

    snprintf(uuid, sizeof(uuid), "%s", cuc_device_uuid_string(devs[0]));
    pt_child_cvd(env, sizeof(env));
    ch = ct_start("get_many", args, env, &pid);
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_pool(m, p));
    for (int j = 0; j < GET_N + GET_TAIL; j++) {
        if (j == GET_N) {
            CHECK_OK(cuc_device_get(0, &d));
            CHECK_OK(cuc_msg_add_device(m, d));
        }
        CHECK_OK(cuc_buffer_alloc_async(p, 8192 + (size_t)j, NULL, &bufs[j]));
        pt_fill(bufs[j], seed_of(6, 0, j));
        CHECK_OK(cuc_msg_add_buffer(m, bufs[j]));
    }
    CHECK_OK(cuc_msg_create(&m2));
    for (int j = 0; j < 3; j++) {
        CHECK_OK(cuc_buffer_alloc_async(q, 4096, NULL, &other[j]));
        CHECK_OK(cuc_msg_add_buffer(m2, other[j]));
    }
    CHECK_OK(cuc_channel_send(ch, m));
    CHECK_OK(cuc_channel_send(ch, m2));
    cuc_msg_destroy(m);
    cuc_msg_destroy(m2);
    free_all(bufs, GET_N + GET_TAIL);
    free_all(other, 3);
    ct_wait_empty(ch);
    /* every buffer the child took, in runs or alone, is released once */
    CHECK_OK(cuc_pool_lease_wait(p, ch, 0, RECV_MS));
    CHECK(pool_leases(p) == 0 && pt_used(p) == 0);
    CHECK(pool_leases(q) == 3); /* never imported: until the child's end goes */
    CHECK(wait_child(pid) == 0);
    CHECK_OK(cuc_pool_lease_wait(q, ch, 0, RECV_MS));
    CHECK(pt_used(q) == 0);
    cuc_channel_destroy(ch);
    cuc_pool_unref(p);
    cuc_pool_unref(q);
}

struct thread_res {
    const cuc_msg *m;
    int t;
    cuc_pool *pool;
    cuc_buffer *bufs[THREAD_BUFS];
};

static void *import_thread(void *arg)
{
    struct thread_res *r = arg;
    size_t n = cuc_msg_record_count(r->m);

    for (size_t k = 0; k < n; k++) {
        size_t i = (k + (size_t)r->t * 5) % n; /* each thread its own order */
        int type;
        CHECK_OK(cuc_msg_record_type(r->m, i, &type));
        if (type == CUC_RECORD_POOL) {
            CHECK_OK(cuc_msg_get_pool(r->m, i, &r->pool));
        } else {
            cuc_buffer *b;
            int rc;
            /* a buffer whose pool this thread has not got may still find
             * it imported by another thread; else it is named missing */
            rc = cuc_msg_get_buffer(r->m, i, &b);
            CHECK(rc == 0 || rc == CUC_E_POOL_NOT_IMPORTED);
            if (rc == CUC_E_POOL_NOT_IMPORTED) {
                cuc_pool *p;
                CHECK_OK(cuc_msg_get_pool(r->m, 0, &p));
                CHECK_OK(cuc_msg_get_buffer(r->m, i, &b));
                cuc_pool_unref(p);
            }
            r->bufs[i - 1] = b;
        }
    }
    return NULL;
}

static void *free_thread(void *arg)
{
    struct thread_res *r = arg;

    free_all(r->bufs, THREAD_BUFS);
    cuc_pool_unref(r->pool);
    return NULL;
}

static void threads_round(cuc_channel *ch, const char *uuid)
{
    struct thread_res res[NTHREADS];
    pthread_t t[NTHREADS];
    cuc_msg *m = ct_recv(ch);

    CHECK(cuc_msg_record_count(m) == THREAD_BUFS + 1);
    for (int k = 0; k < NTHREADS; k++) {
        memset(&res[k], 0, sizeof(res[k]));
        res[k].m = m;
        res[k].t = k;
        CHECK(pthread_create(&t[k], NULL, import_thread, &res[k]) == 0);
    }
    for (int k = 0; k < NTHREADS; k++)
        CHECK(pthread_join(t[k], NULL) == 0);
    CHECK(strcmp(cuc_device_uuid_string(cuc_pool_device(res[0].pool)), uuid) == 0);
    for (int k = 1; k < NTHREADS; k++) {
        CHECK(res[k].pool == res[0].pool);
        for (int j = 0; j < THREAD_BUFS; j++)
            CHECK(res[k].bufs[j] == res[0].bufs[j]);
    }
    for (int j = 0; j < THREAD_BUFS; j++)
        CHECK(pt_holds(res[0].bufs[j], seed_of(5, 0, j)));
    cuc_msg_destroy(m);
    for (int k = 0; k < NTHREADS; k++)
        CHECK(pthread_create(&t[k], NULL, free_thread, &res[k]) == 0);
    for (int k = 0; k < NTHREADS; k++)
        CHECK(pthread_join(t[k], NULL) == 0);
    ct_send_empty(ch);
}

/* args: UUID. Two rounds; the second must leave no fd and no mapping of a
 * file (the threads' stacks and malloc arenas, anonymous, come and go). */
static int child_threads(int argc, char **argv)
{
    cuc_channel *ch = ct_child_channel();
    int fds, maps;
    cuc_msg *m;

    CHECK(argc == 1);
    threads_round(ch, argv[0]);
    fds = test_fd_count();
    maps = pt_maps_count_of(1);
    threads_round(ch, argv[0]);
    if (test_fd_count() != fds || pt_maps_count_of(1) != maps) {
        fprintf(stderr, "child: %d fds and %d file mappings after the first round, %d "
                "and %d after the second\n", fds, maps, test_fd_count(),
                pt_maps_count_of(1));
        exit(1);
    }
    CHECK_RC(cuc_channel_recv(ch, RECV_MS, &m), CUC_E_PEER_CLOSED);
    cuc_channel_destroy(ch);
    return 0;
}

static void test_four_threads(void)
{
    cuc_device *d = devs[n_dev - 1];
    char env[512], uuid[CUC_UUID_STRLEN];
    const char *args[2] = {uuid, NULL};
    cuc_buffer *bufs[THREAD_BUFS];
    cuc_channel *ch;
    cuc_pool *p;
    cuc_msg *m;
    pid_t pid;

    snprintf(uuid, sizeof(uuid), "%s", cuc_device_uuid_string(d));
    pt_child_cvd(env, sizeof(env));
    ch = ct_start("threads", args, env, &pid);
    for (int round = 0; round < 2; round++) {
        m = pool_msg(d, THREAD_BUFS, 5, &p, bufs);
        CHECK_OK(cuc_channel_send(ch, m));
        cuc_msg_destroy(m);
        free_all(bufs, THREAD_BUFS);
        ct_wait_empty(ch);
        /* one release per buffer, however many threads imported it */
        CHECK_OK(cuc_pool_lease_wait(p, ch, 0, RECV_MS));
        CHECK(pt_used(p) == 0);
        cuc_pool_unref(p);
    }
    cuc_channel_destroy(ch);
    CHECK(wait_child(pid) == 0);
}

#define CHURN 200

static void *churn_thread(void *arg)
{
    const cuc_msg *m = arg;

    for (int k = 0; k < CHURN; k++) {
        cuc_pool *p;
        CHECK_OK(cuc_msg_get_pool(m, 0, &p));
        cuc_pool_unref(p);
    }
    return NULL;
}

static void churn_round(const cuc_msg *m)
{
    pthread_t t[NTHREADS];

    for (int k = 0; k < NTHREADS; k++)
        CHECK(pthread_create(&t[k], NULL, churn_thread, (void *)m) == 0);
    for (int k = 0; k < NTHREADS; k++)
        CHECK(pthread_join(t[k], NULL) == 0);
}

/* Two rounds of churn on the one pool record it gets; the second leaves
 * no fd the first did not. */
static int child_churn(int argc, char **argv)
{
    cuc_channel *ch = ct_child_channel();
    cuc_msg *m = ct_recv(ch);
    int fds;

    (void)argc;
    (void)argv;
    CHECK(cuc_msg_record_count(m) == 1);
    churn_round(m);
    fds = test_fd_count();
    churn_round(m);
    if (test_fd_count() != fds)
        fprintf(stderr, "child: %d fds after the first round, %d after the second\n", fds,
                test_fd_count());
    CHECK(test_fd_count() == fds);
    cuc_msg_destroy(m);
    ct_send_empty(ch);
    cuc_channel_destroy(ch);
    return test_finish();
}

static void test_churn(void)
{
    cuc_device *d = devs[0];
    char env[512];
    cuc_channel *ch;
    cuc_pool *p = new_pool(d, CUC_POOL_DEVICE);
    cuc_msg *m;
    pid_t pid;

    pt_child_cvd(env, sizeof(env));
    ch = ct_start("churn", NULL, env, &pid);
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_pool(m, p));
    CHECK_OK(cuc_channel_send(ch, m));
    cuc_msg_destroy(m);
    ct_wait_empty(ch);
    cuc_channel_destroy(ch);
    CHECK(wait_child(pid) == 0);
    cuc_pool_unref(p);
}

/* ---- SIGKILL while holding leases ---- */

/* args: UUID, number of buffers. Imports, acks, waits to be killed. */
static int child_hold(int argc, char **argv)
{
    cuc_channel *ch = ct_child_channel();
    int n = atoi(argv[1]);
    cuc_buffer *b;
    cuc_pool *p;
    cuc_msg *m;

    CHECK(argc == 2);
    m = ct_recv(ch);
    p = get_checked_pool(m, 0, argv[0], -1);
    for (int j = 0; j < n; j++) {
        CHECK_OK(cuc_msg_get_buffer(m, (size_t)j + 1, &b));
        CHECK(pt_holds(b, seed_of(6, 0, j)));
    }
    (void)p;
    ct_send_empty(ch);
    for (;;)
        pause();
}

static void sigkill_round(void)
{
    cuc_device *d = devs[0];
    char env[512], uuid[CUC_UUID_STRLEN], nb[16];
    const char *args[3] = {uuid, nb, NULL};
    cuc_buffer *bufs[4];
    cuc_channel *ch;
    cuc_pool *p;
    cuc_msg *m;
    pid_t pid;

    snprintf(uuid, sizeof(uuid), "%s", cuc_device_uuid_string(d));
    snprintf(nb, sizeof(nb), "%d", 4);
    pt_child_cvd(env, sizeof(env));
    ch = ct_start("hold", args, env, &pid);
    m = pool_msg(d, 4, 6, &p, bufs);
    CHECK_OK(cuc_channel_send(ch, m));
    cuc_msg_destroy(m);
    ct_wait_empty(ch);
    free_all(bufs, 4);
    CHECK(pt_used(p) > 0); /* deferred: the child holds four leases */
    CHECK(pool_leases(p) == 4);
    CHECK(kill(pid, SIGKILL) == 0);
    CHECK(wait_child(pid) == 128 + SIGKILL);
    CHECK_OK(cuc_pool_lease_wait(p, ch, 0, RECV_MS)); /* sees the death */
    CHECK(pool_leases(p) == 0 && pt_used(p) == 0);
    cuc_channel_destroy(ch);
    cuc_pool_unref(p);
}

static void test_sigkill(void)
{
    int fds, maps;

    sigkill_round(); /* the first may set up what the driver keeps */
    fds = test_fd_count();
    maps = pt_maps_count();
    sigkill_round();
    if (test_fd_count() != fds || pt_maps_count() != maps) {
        fprintf(stderr, "%d fds and %d mappings before the second round, %d and %d "
                "after it\n", fds, maps, test_fd_count(), pt_maps_count());
        exit(1);
    }
}

int main(int argc, char **argv)
{
    if (argc >= 3 && !strcmp(argv[1], "--child")) {
        const char *role = argv[2];
        signal(SIGPIPE, SIG_IGN);
        if (!strcmp(role, "reversed"))
            return child_reversed(argc - 3, argv + 3);
        if (!strcmp(role, "relay"))
            return child_relay(argc - 3, argv + 3);
        if (!strcmp(role, "leaf"))
            return child_leaf(argc - 3, argv + 3);
        if (!strcmp(role, "twice"))
            return child_twice(argc - 3, argv + 3);
        if (!strcmp(role, "reader"))
            return child_reader(argc - 3, argv + 3);
        if (!strcmp(role, "batch"))
            return child_batch(argc - 3, argv + 3);
        if (!strcmp(role, "get_many"))
            return child_get_many(argc - 3, argv + 3);
        if (!strcmp(role, "threads"))
            return child_threads(argc - 3, argv + 3);
        if (!strcmp(role, "hold"))
            return child_hold(argc - 3, argv + 3);
        if (!strcmp(role, "churn"))
            return child_churn(argc - 3, argv + 3);
        return 2;
    }
    unsetenv("CUDA_VISIBLE_DEVICES");
    pt_start(CUC_DEVICE_CAP_POOL_POSIX_FD, "cannot export pools as POSIX fds");
    if (n_dev > MAXP)
        n_dev = MAXP;
    test_sigkill(); /* first: it also settles the fd baseline */
    FD_BASELINE();
    test_reversed(CUC_POOL_DEVICE);
    test_reversed(CUC_POOL_PINNED_HOST);
    test_chain();
    test_two_messages();
    test_two_children();
    test_batch_free();
    test_get_many();
    test_four_threads();
    test_churn();
    FD_CHECK_NO_LEAK();
    return test_finish();
}
