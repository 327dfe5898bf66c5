/* The share point (cucore/share.h): objects detached to bytes, the bytes
 * carried by a transport of the test's (a pipe, a file), attached in an
 * exec'd child whose CUDA_VISIBLE_DEVICES reverses the parent's:
 *  - objects: a pool buffer, a view of one, a slab buffer, a wrapped
 *    cuMemAlloc allocation and a VMM resource, each checked in the child
 *    by its bytes and its device's UUID, written back and checked again
 *    by the parent;
 *  - leases: the parent drops its references right after detaching; its
 *    frees run when the child's leases end, and the pool's memory is back
 *    to none; fds back to the baseline once the child is gone;
 *  - through a file, the same;
 *  - two children attaching the same bytes, each with a lease of its own;
 *  - a child SIGKILLed while it holds the leases: they end, the frees run;
 *  - bytes attached after their hold expired: CUC_E_NOT_FOUND naming the
 *    token, and the memory is never handed out (the pointer getter fails);
 *  - in the detaching process: the objects themselves;
 *  - an imported buffer dropped while the child's share point runs: no
 *    synchronize in the dropping thread (its release waits for the free
 *    on the share point's thread, memory/settle.h), and the same buffer
 *    attached again at once (other bytes of it) holds its bytes: the
 *    import waits for the queued free of its pointer first.
 * The child gets the bytes on stdin (length-prefixed) and the parent's
 * UUIDs in its arguments. */
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>

#include "pool_test.h"
#include "share_test.h"
#include "sim_test.h"
#include "vmm_test.h"

#define KiB ((size_t)1 << 10)
#define WAIT_MS 30000
#define N_OBJ 5

enum { O_BUF, O_VIEW, O_SLAB, O_WRAP, O_VMM };
static const char *const obj_name[N_OBJ] = {"buffer", "view", "slab buffer", "wrapped",
                                            "vmm"};

/* ---- the objects ---- */

struct objs {
    cuc_pool *pool;
    cuc_slab *slab;
    cuc_buffer *buf, *parent, *view, *carved, *wrapped;
    CUdeviceptr raw;
    cuc_vmm *vmm;
};

static uint64_t seed_of(int phase, int k)
{
    return 7919ull * (uint64_t)phase + (uint64_t)k + 1;
}

static void make_objs(struct objs *o, int phase)
{
    size_t chunk;

    memset(o, 0, sizeof(*o));
    o->pool = pt_new_pool(devs[0], CUC_POOL_DEVICE, CUC_POOL_IPC);
    CHECK_OK(cuc_buffer_alloc_async(o->pool, 64 * KiB + 3, NULL, &o->buf));
    CHECK_OK(cuc_buffer_alloc_async(o->pool, 256 * KiB, NULL, &o->parent));
    CHECK_OK(cuc_buffer_view(o->parent, 4 * KiB, 8 * KiB + 5, &o->view));
    CHECK_OK(cuc_slab_create(o->pool, 1 << 20, &o->slab));
    CHECK_OK(cuc_slab_alloc_async(o->slab, 3 * KiB, NULL, &o->carved));
    CHECK_OK(cuc_device_set_current(devs[0]));
    CHECK(CUC_DRV->cuMemAlloc(&o->raw, 128 * KiB) == CUDA_SUCCESS);
    CHECK_OK(cuc_buffer_wrap(devs[0], (void *)(uintptr_t)o->raw, 32 * KiB, &o->wrapped));
    CHECK_OK(cuc_vmm_granularity(devs[0], &chunk));
    CHECK_OK(cuc_vmm_create(devs[0], NULL, 0, &chunk, 1, &o->vmm));
    pt_fill(o->buf, seed_of(phase, O_BUF));
    pt_fill(o->view, seed_of(phase, O_VIEW));
    pt_fill(o->carved, seed_of(phase, O_SLAB));
    pt_fill(o->wrapped, seed_of(phase, O_WRAP));
    vmm_t_fill(o->vmm, seed_of(phase, O_VMM));
}

static cuc_msg *objs_msg(const struct objs *o)
{
    cuc_msg *m;

    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_buffer(m, o->buf));
    CHECK_OK(cuc_msg_add_buffer(m, o->view));
    CHECK_OK(cuc_msg_add_buffer(m, o->carved));
    CHECK_OK(cuc_msg_add_buffer(m, o->wrapped));
    CHECK_OK(cuc_msg_add_vmm(m, o->vmm));
    return m;
}

/* The parent's references go at once: the frees wait for the leases. */
static void drop_objs(struct objs *o)
{
    CHECK_OK(cuc_buffer_unref_async(o->buf, NULL));
    CHECK_OK(cuc_buffer_unref_async(o->view, NULL));
    CHECK_OK(cuc_buffer_unref_async(o->parent, NULL));
    CHECK_OK(cuc_buffer_unref_async(o->carved, NULL));
    cuc_vmm_unref(o->vmm);
}

/* After the leases ended: nothing of the pool is in use, then the rest. */
static void end_objs(struct objs *o)
{
    CHECK_OK(cuc_pool_lease_wait(o->pool, NULL, 0, WAIT_MS));
    CHECK_OK(cuc_buffer_lease_wait(o->wrapped, NULL, 0, WAIT_MS));
    CHECK_OK(cuc_buffer_unref_async(o->wrapped, NULL));
    CHECK_OK(cuc_device_set_current(devs[0]));
    CHECK(CUC_DRV->cuMemFree(o->raw) == CUDA_SUCCESS);
    cuc_slab_unref(o->slab);
    EXPECT(pt_used(o->pool) == 0); /* the lease wait returned with the frees done */
    cuc_pool_unref(o->pool);
}

static void detach(const struct objs *o, void **bytes, size_t *len)
{
    cuc_msg *m = objs_msg(o);

    CHECK_OK(cuc_share_detach(m, bytes, len));
    cuc_msg_destroy(m);
}

/* ---- the child ---- */

static int child_attach(int argc, char **argv)
{
    const char *uuid = argv[0];
    int phase = atoi(argv[1]), mode = atoi(argv[2]);
    cuc_buffer *b[4];
    size_t len;
    cuc_vmm *v;
    cuc_msg *m;
    void *bytes;

    (void)argc;
    bytes = get_blob(0, &len);
    CHECK(bytes != NULL);
    CHECK_OK(cuc_share_attach(bytes, len, &m));
    free(bytes);
    CHECK(cuc_msg_record_count(m) == N_OBJ);
    CHECK_OK(cuc_msg_get_buffers(m, 0, 4, b));
    CHECK_OK(cuc_msg_get_vmm(m, 4, &v));
    cuc_msg_destroy(m);
    for (int k = 0; k < 4; k++) {
        EXPECT(strcmp(cuc_device_uuid_string(cuc_buffer_device(b[k])), uuid) == 0);
        if (!pt_holds(b[k], seed_of(phase, k))) {
            fprintf(stderr, "child: the %s holds other bytes\n", obj_name[k]);
            exit(1);
        }
        if (mode == 0) /* the only child: it answers in the same memory */
            pt_fill(b[k], seed_of(phase + 100, k));
    }
    EXPECT(strcmp(cuc_device_uuid_string(cuc_vmm_device(v)), uuid) == 0);
    EXPECT(vmm_t_holds(v, seed_of(phase, O_VMM)));
    if (mode == 0)
        vmm_t_fill(v, seed_of(phase + 100, O_VMM));
    printf("ok\n");
    fflush(stdout);
    if (mode == 1) /* hold the leases until killed */
        for (;;)
            pause();
    for (int k = 0; k < 4; k++)
        CHECK_OK(cuc_buffer_unref_async(b[k], NULL));
    cuc_vmm_unref(v);
    return test_finish();
}

/* The child of two detaches of one pool buffer: the first dropped, the
 * second attached at once. */
static int child_settle(int argc, char **argv)
{
    int phase = atoi(argv[1]), sim = test_on_sim();
    unsigned long long syncs = 0;
    size_t len[2];
    void *bytes[2];
    cuc_buffer *b;
    cuc_msg *m;

    (void)argc;
    for (int k = 0; k < 2; k++)
        CHECK((bytes[k] = get_blob(0, &len[k])) != NULL);
    for (int k = 0; k < 2; k++) {
        CHECK_OK(cuc_share_attach(bytes[k], len[k], &m));
        free(bytes[k]);
        CHECK_OK(cuc_msg_get_buffer(m, 0, &b));
        cuc_msg_destroy(m);
        EXPECT(pt_holds(b, seed_of(phase, O_BUF)));
        if (sim)
            syncs = sim_calls("cuStreamSynchronize");
        CHECK_OK(cuc_buffer_unref_async(b, NULL));
        if (sim) /* the free is queued; the share point's thread waits for it */
            EXPECT(sim_calls("cuStreamSynchronize") == syncs);
    }
    printf("ok\n");
    fflush(stdout);
    return test_finish();
}

/* The child of expired bytes: the attach is refused, or, mapped before
 * the refusal came, its memory is never handed out. */
static int child_expired(int argc, char **argv)
{
    cuc_buffer *b;
    size_t len;
    cuc_msg *m;
    void *bytes;
    int rc;

    (void)argc;
    (void)argv;
    bytes = get_blob(0, &len);
    CHECK(bytes != NULL);
    rc = cuc_share_attach(bytes, len, &m);
    free(bytes);
    if (rc == 0) {
        rc = cuc_msg_get_buffer(m, 0, &b);
        if (rc == 0) {
            CHECK(cuc_buffer_ptr(b) == NULL);
            rc = cuc_buffer_ready(b);
            CHECK_OK(cuc_buffer_unref_async(b, NULL));
        }
        cuc_msg_destroy(m);
    }
    CHECK_RC(rc, CUC_E_NOT_FOUND);
    CHECK_ERRMSG("token");
    printf("refused\n");
    return 0;
}

/* ---- the parent's scenarios ---- */

/* The child's stdin closed, its line read, its exit 0. */
static void child_says(pid_t pid, int to, FILE *from, const char *line)
{
    close(to);
    expect_line(from, line);
    fclose(from);
    CHECK(wait_child(pid) == 0);
}

/* The parent checks what the child wrote back (before dropping). */
static void check_written(const struct objs *o, int phase)
{
    EXPECT(pt_holds(o->buf, seed_of(phase + 100, O_BUF)));
    EXPECT(pt_holds(o->view, seed_of(phase + 100, O_VIEW)));
    EXPECT(pt_holds(o->carved, seed_of(phase + 100, O_SLAB)));
    EXPECT(pt_holds(o->wrapped, seed_of(phase + 100, O_WRAP)));
    EXPECT(vmm_t_holds(o->vmm, seed_of(phase + 100, O_VMM)));
}

static void scenario_pipe(int phase)
{
    struct objs o;
    FILE *from;
    size_t len;
    void *bytes;
    pid_t pid;
    int to;

    make_objs(&o, phase);
    detach(&o, &bytes, &len);
    pid = start_child(NULL, "attach", phase, 0, &to, &from);
    put_blob(to, bytes, len);
    free(bytes);
    child_says(pid, to, from, "ok");
    check_written(&o, phase);
    drop_objs(&o);
    end_objs(&o);
    printf("pipe (phase %d): ok\n", phase);
}

/* The bytes in a file, read by the child as its stdin. */
static void scenario_file(int phase)
{
    char path[] = "/tmp/cucore-test-share-bytes-XXXXXX";
    struct objs o;
    FILE *from;
    size_t len;
    void *bytes;
    pid_t pid;
    int fd, to;

    make_objs(&o, phase);
    detach(&o, &bytes, &len);
    drop_objs(&o); /* before the child exists: the hold keeps them */
    fd = mkstemp(path);
    CHECK(fd >= 0);
    put_blob(fd, bytes, len);
    free(bytes);
    close(fd);
    pid = start_child(NULL, "attach", phase, 0, &to, &from);
    fd = open(path, O_RDONLY);
    CHECK(fd >= 0);
    {
        uint8_t tmp[4096];
        ssize_t k;
        while ((k = read(fd, tmp, sizeof(tmp))) > 0)
            write_all(to, tmp, (size_t)k);
    }
    close(fd);
    unlink(path);
    child_says(pid, to, from, "ok");
    end_objs(&o);
    printf("file (phase %d): ok\n", phase);
}

static void scenario_two_children(int phase)
{
    struct objs o;
    FILE *from[2];
    size_t len, n;
    void *bytes;
    pid_t pid[2];
    int to[2];

    make_objs(&o, phase);
    detach(&o, &bytes, &len);
    drop_objs(&o);
    for (int i = 0; i < 2; i++) {
        pid[i] = start_child(NULL, "attach", phase, 1, &to[i], &from[i]); /* hold until killed */
        put_blob(to[i], bytes, len);
    }
    for (int i = 0; i < 2; i++)
        expect_line(from[i], "ok");
    /* each child leases the pool's three buffers (the buffer, the view, the
     * slab buffer): the first child took the hold, the second a copy */
    CHECK_OK(cuc_pool_lease_count(o.pool, &n));
    EXPECT(n == 6);
    /* the first goes: the second's leases still keep the memory */
    kill(pid[0], SIGKILL);
    wait_child(pid[0]);
    EXPECT(cuc_pool_lease_wait(o.pool, NULL, 3, WAIT_MS) == 0);
    CHECK_OK(cuc_pool_lease_count(o.pool, &n));
    EXPECT(n == 3);
    EXPECT(pt_used(o.pool) > 0);
    kill(pid[1], SIGKILL);
    wait_child(pid[1]);
    for (int i = 0; i < 2; i++) {
        close(to[i]);
        fclose(from[i]);
    }
    free(bytes);
    end_objs(&o);
    printf("two children, killed (phase %d): ok\n", phase);
}

static void scenario_expired(void)
{
    struct objs o;
    FILE *from;
    size_t len, n;
    void *bytes;
    pid_t pid;
    int to;
    cuc_msg *m;

    make_objs(&o, 9);
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_buffer(m, o.buf));
    CHECK_OK(cuc_share_detach(m, &bytes, &len));
    cuc_msg_destroy(m);
    drop_objs(&o);
    /* the hold (200 ms in this test) ends unclaimed: the buffer is freed */
    CHECK_OK(cuc_pool_lease_wait(o.pool, NULL, 0, WAIT_MS));
    CHECK_OK(cuc_pool_lease_count(o.pool, &n));
    CHECK(n == 0);
    pid = start_child(NULL, "expired", 9, 0, &to, &from);
    put_blob(to, bytes, len);
    free(bytes);
    child_says(pid, to, from, "refused");
    end_objs(&o);
    printf("expired: ok\n");
}

/* One pool buffer detached twice, to a child that drops the first and
 * attaches the second at once; the leases end, the frees run. */
static void scenario_settle(int phase)
{
    struct objs o;
    FILE *from;
    cuc_msg *m;
    size_t len;
    void *bytes;
    pid_t pid;
    int to;

    make_objs(&o, phase);
    pid = start_child(NULL, "settle", phase, 0, &to, &from);
    for (int k = 0; k < 2; k++) {
        CHECK_OK(cuc_msg_create(&m));
        CHECK_OK(cuc_msg_add_buffer(m, o.buf));
        CHECK_OK(cuc_share_detach(m, &bytes, &len));
        cuc_msg_destroy(m);
        put_blob(to, bytes, len);
        free(bytes);
    }
    child_says(pid, to, from, "ok");
    drop_objs(&o);
    end_objs(&o);
    printf("settle (phase %d): ok\n", phase);
}

/* In the detaching process the records resolve to the objects. */
static void scenario_here(void)
{
    struct objs o;
    cuc_buffer *b[4];
    size_t len, n;
    void *bytes;
    cuc_vmm *v;
    cuc_msg *m;

    make_objs(&o, 11);
    detach(&o, &bytes, &len);
    CHECK_OK(cuc_share_attach(bytes, len, &m));
    CHECK_OK(cuc_msg_get_buffers(m, 0, 4, b));
    CHECK_OK(cuc_msg_get_vmm(m, 4, &v));
    cuc_msg_destroy(m);
    EXPECT(b[O_BUF] == o.buf && b[O_WRAP] == o.wrapped && v == o.vmm);
    EXPECT(cuc_buffer_ptr(b[O_VIEW]) == cuc_buffer_ptr(o.view));
    for (int k = 0; k < 4; k++)
        CHECK_OK(cuc_buffer_unref_async(b[k], NULL));
    cuc_vmm_unref(v);
    /* attached here, the hold ended: nothing is leased */
    CHECK_OK(cuc_pool_lease_count(o.pool, &n));
    EXPECT(n == 0);
    /* and the bytes are spent */
    CHECK_RC(cuc_share_attach(bytes, len, &m), CUC_E_NOT_FOUND);
    free(bytes);
    drop_objs(&o);
    end_objs(&o);
    printf("here: ok\n");
}

int main(int argc, char **argv)
{
    cuc_share_opts opts;
    int fds0;

    if (argc >= 3 && strcmp(argv[1], "--child") == 0) {
        open_all();
        if (strcmp(argv[2], "attach") == 0)
            return child_attach(argc - 3, argv + 3);
        if (strcmp(argv[2], "expired") == 0)
            return child_expired(argc - 3, argv + 3);
        if (strcmp(argv[2], "settle") == 0)
            return child_settle(argc - 3, argv + 3);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    private_share_dir();
    pt_start(CUC_DEVICE_CAP_MEMORY_POOLS | CUC_DEVICE_CAP_POOL_POSIX_FD | CUC_DEVICE_CAP_VMM |
                 CUC_DEVICE_CAP_VMM_POSIX_FD, "lacks IPC pools or VMM");
    fds0 = test_fd_count();
    CHECK_OK(cuc_share_start(NULL));
    scenario_here();
    scenario_pipe(1);
    scenario_file(2);
    scenario_two_children(3);
    scenario_settle(4);
    CHECK_OK(cuc_share_stop(WAIT_MS));
    cuc_share_opts_init(&opts);
    opts.hold_ms = 200; /* holds nobody claims end soon */
    CHECK_OK(cuc_share_start(&opts));
    scenario_expired();
    CHECK_OK(cuc_share_stop(WAIT_MS));
    EXPECT(test_fd_count() == fds0);
    return test_finish();
}
