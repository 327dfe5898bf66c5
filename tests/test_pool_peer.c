/* Pool peer access (cuc_pool_set_access / _get_access): a device other
 * than a pool's owner reads the pool's buffers only after it is granted
 * read-write access, and not after it is revoked; read-only access is
 * CUC_E_NOT_SUPPORTED and revoking the owner's CUC_E_INVALID, as the
 * driver refuses them (sim/FACTS.md F20); a device
 * that cannot reach the owner (CUCORE_SIM_NO_PEER) is CUC_E_NOT_SUPPORTED
 * naming both UUIDs; a failing cuMemPoolSetAccess is CUC_E_DRIVER naming
 * the call. Across processes (an exec'd child with reversed visibility):
 * the exporter's grant does not carry over, the importer grants its own
 * access on the imported pool and a copy issued on the peer device then
 * reads the exporter's bytes; revoked, it fails again. Needs two devices
 * (skips on one); runs on a GPU as on the simulator, where the copy from
 * a device without access is refused with CUDA_ERROR_INVALID_VALUE (the
 * sim's choice: sim/README.md; what the driver does is F21). */
#include <fcntl.h>

#include "pool_test.h"
#include "channel_test.h"

#define RECV_MS 30000
#define NBYTES 4099
#define SEED 77

static cuc_device *by_uuid(const char *s)
{
    cuc_uuid u;
    cuc_device *d;

    CHECK_OK(cuc_uuid_parse(s, &u));
    CHECK_OK(cuc_device_get_by_uuid(&u, &d));
    return d;
}

static int access_of(const cuc_pool *p, cuc_device *d)
{
    int a = -1;

    CHECK_OK(cuc_pool_get_access(p, d, &a));
    return a;
}

/* Reads b through a copy issued on a stream of dev: 0 and the pattern, or
 * the copy's failure. */
static int read_from(const cuc_buffer *b, cuc_device *dev)
{
    uint8_t *got = calloc(1, NBYTES);
    cuc_stream *s;
    int rc;

    CHECK(got != NULL);
    CHECK_OK(cuc_stream_legacy(dev, &s));
    rc = cuc_memcpy(got, cuc_buffer_ptr(b), NBYTES, s);
    if (rc == 0)
        CHECK(test_pattern_is(SEED, got, NBYTES));
    free(got);
    return rc;
}

/* The grant/revoke cycle of peer on b's pool, seen through copies. */
static void grant_cycle(const cuc_buffer *b, cuc_device *peer)
{
    cuc_pool *p = cuc_buffer_pool(b);

    CHECK(access_of(p, peer) == CUC_POOL_ACCESS_NONE);
    CHECK(read_from(b, peer) != 0);
    CHECK_OK(cuc_pool_set_access(p, peer, CUC_POOL_ACCESS_READWRITE));
    CHECK(access_of(p, peer) == CUC_POOL_ACCESS_READWRITE);
    CHECK_OK(read_from(b, peer));
    CHECK_OK(read_from(b, cuc_pool_device(p)));
    CHECK_OK(cuc_pool_set_access(p, peer, CUC_POOL_ACCESS_NONE));
    CHECK(access_of(p, peer) == CUC_POOL_ACCESS_NONE);
    CHECK(read_from(b, peer) != 0);
    CHECK_OK(read_from(b, cuc_pool_device(p))); /* the owner is untouched */
}

static void test_local(void)
{
    cuc_pool *p = pt_new_pool(devs[0], CUC_POOL_DEVICE, CUC_POOL_IPC);
    cuc_buffer *b;

    CHECK_OK(cuc_buffer_alloc_async(p, NBYTES, NULL, &b));
    pt_fill(b, SEED);
    CHECK(access_of(p, devs[0]) == CUC_POOL_ACCESS_READWRITE);
    grant_cycle(b, devs[1]);

    CHECK_RC(cuc_pool_set_access(p, devs[1], CUC_POOL_ACCESS_READ), CUC_E_NOT_SUPPORTED);
    CHECK_ERRMSG("no read-only access");
    CHECK(access_of(p, devs[1]) == CUC_POOL_ACCESS_NONE);
    CHECK_RC(cuc_pool_set_access(p, devs[0], CUC_POOL_ACCESS_NONE), CUC_E_INVALID);
    CHECK_ERRMSG(cuc_device_uuid_string(devs[0]));
    CHECK_ERRMSG("keeps its read-write access");
    CHECK_OK(cuc_pool_set_access(p, devs[0], CUC_POOL_ACCESS_READWRITE)); /* a no-op */
    CHECK_RC(cuc_pool_set_access(p, devs[1], 2), CUC_E_INVALID);
    CHECK_RC(cuc_pool_set_access(NULL, devs[1], CUC_POOL_ACCESS_NONE), CUC_E_INVALID);
    CHECK_RC(cuc_pool_set_access(p, NULL, CUC_POOL_ACCESS_NONE), CUC_E_INVALID);
    CHECK_RC(cuc_pool_get_access(p, devs[1], NULL), CUC_E_INVALID);
    CHECK_OK(cuc_buffer_unref_async(b, NULL));
    cuc_pool_unref(p);
}

/* ---- children ---- */

/* argv: owner UUID, peer UUID. */
static int child_import(char **argv)
{
    cuc_device *owner = by_uuid(argv[0]), *peer = by_uuid(argv[1]);
    cuc_channel *ch = ct_child_channel();
    cuc_pool *p;
    cuc_buffer *b;
    cuc_msg *m, *ok;

    open_all();
    CHECK_OK(cuc_channel_recv(ch, RECV_MS, &m));
    CHECK_OK(cuc_msg_get_pool(m, 0, &p));
    CHECK_OK(cuc_msg_get_buffer(m, 1, &b));
    cuc_msg_destroy(m);
    CHECK(cuc_pool_device(p) == owner && cuc_pool_is_imported(p));
    CHECK_OK(read_from(b, owner));
    /* the exporter granted peer; that is its own process's access */
    grant_cycle(b, peer);
    CHECK_RC(cuc_pool_set_access(p, owner, CUC_POOL_ACCESS_NONE), CUC_E_INVALID);
    CHECK_OK(cuc_buffer_unref_async(b, NULL));
    cuc_pool_unref(p);
    CHECK_OK(cuc_msg_create(&ok));
    CHECK_OK(cuc_channel_send(ch, ok));
    cuc_msg_destroy(ok);
    cuc_channel_destroy(ch);
    return test_finish();
}

/* CUCORE_SIM_NO_PEER=0-1 set: device 1 cannot reach device 0. */
static int child_no_peer(void)
{
    cuc_pool *p;

    open_all();
    p = pt_new_pool(devs[0], CUC_POOL_DEVICE, 0);
    CHECK_RC(cuc_pool_set_access(p, devs[1], CUC_POOL_ACCESS_READWRITE), CUC_E_NOT_SUPPORTED);
    CHECK_ERRMSG(cuc_device_uuid_string(devs[0]));
    CHECK_ERRMSG(cuc_device_uuid_string(devs[1]));
    CHECK_OK(cuc_pool_set_access(p, devs[1], CUC_POOL_ACCESS_NONE));
    cuc_pool_unref(p);
    return test_finish();
}

/* CUCORE_SIM_FAIL=cuMemPoolSetAccess:1 set. */
static int child_fault(void)
{
    cuc_pool *p;

    open_all();
    p = pt_new_pool(devs[0], CUC_POOL_DEVICE, 0);
    CHECK_RC(cuc_pool_set_access(p, devs[1], CUC_POOL_ACCESS_READWRITE), CUC_E_DRIVER);
    CHECK_ERRMSG("cuMemPoolSetAccess");
    CHECK(access_of(p, devs[1]) == CUC_POOL_ACCESS_NONE);
    CHECK_OK(cuc_pool_set_access(p, devs[1], CUC_POOL_ACCESS_READWRITE)); /* once only */
    cuc_pool_unref(p);
    return test_finish();
}

static void test_child(void)
{
    char cvd[128];
    const char *envs[2] = {cvd, NULL};
    const char *args[3] = {cuc_device_uuid_string(devs[0]), cuc_device_uuid_string(devs[1]),
                           NULL};
    cuc_pool *p = pt_new_pool(devs[0], CUC_POOL_DEVICE, CUC_POOL_IPC);
    cuc_channel *mine, *theirs;
    cuc_buffer *b;
    cuc_msg *m;
    pid_t pid;

    CHECK_OK(cuc_buffer_alloc_async(p, NBYTES, NULL, &b));
    pt_fill(b, SEED);
    CHECK_OK(cuc_pool_set_access(p, devs[1], CUC_POOL_ACCESS_READWRITE));
    pt_child_cvd(cvd, sizeof(cvd));
    CHECK_OK(cuc_channel_pair(&mine, &theirs));
    pid = spawn_self("import", args, envs, cuc_channel_fd(theirs));
    CHECK(pid > 0);
    cuc_channel_destroy(theirs);
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_pool(m, p));
    CHECK_OK(cuc_msg_add_buffer(m, b));
    CHECK_OK(cuc_channel_send(mine, m));
    cuc_msg_destroy(m);
    CHECK_OK(cuc_channel_recv(mine, RECV_MS, &m)); /* the child's release came first */
    CHECK(cuc_msg_record_count(m) == 0);
    cuc_msg_destroy(m);
    CHECK(wait_child(pid) == 0);
    CHECK_OK(read_from(b, devs[1])); /* our grant stands */
    CHECK_OK(cuc_buffer_unref_async(b, NULL));
    CHECK_OK(cuc_pool_lease_wait(p, mine, 0, RECV_MS));
    cuc_channel_destroy(mine);
    cuc_pool_unref(p);
}

static void run_env_child(const char *role, const char *env)
{
    const char *envs[2] = {env, NULL};
    pid_t pid = spawn_self(role, NULL, envs, -1);

    CHECK(pid > 0);
    CHECK(wait_child(pid) == 0);
}

int main(int argc, char **argv)
{
    if (argc >= 3 && !strcmp(argv[1], "--child")) {
        if (!strcmp(argv[2], "import") && argc == 5)
            return child_import(argv + 3);
        if (!strcmp(argv[2], "nopeer"))
            return child_no_peer();
        if (!strcmp(argv[2], "fault"))
            return child_fault();
        return 2;
    }
    unsetenv("CUDA_VISIBLE_DEVICES");
    pt_start(CUC_DEVICE_CAP_POOL_POSIX_FD, "has no IPC pools");
    if (n_dev < 2)
        SKIP("peer access needs two devices (%d visible)", n_dev);
    FD_BASELINE();
    test_local();
    test_child();
    if (test_on_sim()) {
        run_env_child("nopeer", "CUCORE_SIM_NO_PEER=0-1");
        run_env_child("fault", "CUCORE_SIM_FAIL=cuMemPoolSetAccess:1");
    }
    FD_CHECK_NO_LEAK();
    return test_finish();
}
