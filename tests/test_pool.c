/* Pools in one process: argument checks; device and pinned host pools,
 * local and IPC; random, distinct pool ids; an IPC pool holds one fd (its
 * one export) and is found by id until its last reference goes; buffers
 * keep their pool alive. */
#include <pthread.h>

#include "pool_test.h"
#include "memory/buffer.h"

#define dev0 (devs[0])

static void test_bad_args(void)
{
    struct cuc_pool_props pr = {CUC_POOL_DEVICE, 0, 0};
    cuc_pool *p = NULL;

    CHECK_RC(cuc_pool_create(NULL, &pr, &p), CUC_E_INVALID);
    CHECK_RC(cuc_pool_create(dev0, NULL, &p), CUC_E_INVALID);
    CHECK_RC(cuc_pool_create(dev0, &pr, NULL), CUC_E_INVALID);
    pr.kind = 0;
    CHECK_RC(cuc_pool_create(dev0, &pr, &p), CUC_E_INVALID);
    CHECK(strstr(cuc_errmsg(), "kind 0") != NULL);
    pr.kind = 3;
    CHECK_RC(cuc_pool_create(dev0, &pr, &p), CUC_E_INVALID);
    pr.kind = CUC_POOL_DEVICE;
    pr.flags = 0x2;
    CHECK_RC(cuc_pool_create(dev0, &pr, &p), CUC_E_INVALID);
    CHECK(strstr(cuc_errmsg(), "0x2") != NULL);
    CHECK(p == NULL);
    cuc_pool_unref(NULL);
    CHECK(cuc_pool_ref(NULL) == NULL);
}

static void check_pool(int kind, unsigned flags, cuc_device *dev)
{
    struct cuc_pool_props pr = {kind, flags, 0};
    uint8_t id[CUC_POOL_ID_LEN], id2[CUC_POOL_ID_LEN], zero[CUC_POOL_ID_LEN] = {0};
    struct cuc_pool_props local = {kind, 0, 0};
    int fds = test_fd_count(), base;
    cuc_pool *p, *q, *found;

    /* what a local pool of this kind costs in fds (none: sim/FACTS.md
     * F28) */
    CHECK_OK(cuc_pool_create(dev, &local, &q));
    base = test_fd_count() - fds;
    cuc_pool_unref(q);
    CHECK(test_fd_count() == fds);
    CHECK_OK(cuc_pool_create(dev, &pr, &p));
    CHECK(cuc_pool_device(p) == dev);
    CHECK(cuc_pool_kind(p) == kind);
    CHECK(cuc_pool_is_ipc(p) == !!(flags & CUC_POOL_IPC));
    CHECK(!cuc_pool_is_imported(p));
    CHECK(cuc_pool_handle(p) != NULL);
    /* an IPC pool keeps the fd of its one export; a local pool none. The
     * driver opens one more fd of its own per exported pool, closed when
     * the pool is destroyed (sim/FACTS.md F28). */
    CHECK(test_fd_count() == fds + base + ((flags & CUC_POOL_IPC) ? 2 : 0));
    /* The pool's fd must not leak into children this process execs (the
     * driver exports it without FD_CLOEXEC: sim/FACTS.md F23). */
    if (flags & CUC_POOL_IPC)
        CHECK((fcntl(p->fd, F_GETFD) & FD_CLOEXEC) != 0);
    cuc_pool_id(p, id);
    CHECK(memcmp(id, zero, sizeof(id)) != 0);
    CHECK_OK(cuc_pool_create(dev, &pr, &q));
    cuc_pool_id(q, id2);
    CHECK(memcmp(id, id2, sizeof(id)) != 0);
    cuc_pool_unref(q);
    if (flags & CUC_POOL_IPC) {
        CHECK_OK(cuc_pool_get_by_id(id, &found));
        CHECK(found == p);
        cuc_pool_unref(found);
    } else {
        char hex[33];
        CHECK_RC(cuc_pool_get_by_id(id, &found), CUC_E_POOL_NOT_IMPORTED);
        cuc__hex(id, 16, hex);
        CHECK(strstr(cuc_errmsg(), hex) != NULL);
    }
    /* references */
    CHECK(cuc_pool_ref(p) == p);
    cuc_pool_unref(p);
    cuc_pool_unref(p);
    CHECK(test_fd_count() == fds);
    if (flags & CUC_POOL_IPC)
        CHECK_RC(cuc_pool_get_by_id(id, &found), CUC_E_POOL_NOT_IMPORTED);
}

/* A buffer holds its pool: the pool outlives the caller's reference. */
static void test_buffer_keeps_pool(void)
{
    struct cuc_pool_props pr = {CUC_POOL_DEVICE, CUC_POOL_IPC, 0};
    uint8_t id[CUC_POOL_ID_LEN];
    cuc_pool *p, *found;
    cuc_buffer *b;

    CHECK_OK(cuc_pool_create(dev0, &pr, &p));
    cuc_pool_id(p, id);
    CHECK_OK(cuc_buffer_alloc_async(p, 4096, NULL, &b));
    CHECK(cuc_buffer_pool(b) == p);
    cuc_pool_unref(p);
    CHECK_OK(cuc_pool_get_by_id(id, &found)); /* still alive, through b */
    CHECK(found == p);
    cuc_pool_unref(found);
    pt_fill(b, 7);
    CHECK(pt_holds(b, 7));
    CHECK_OK(cuc_buffer_unref_async(b, NULL));
    CHECK_RC(cuc_pool_get_by_id(id, &found), CUC_E_POOL_NOT_IMPORTED);
}

static void test_lease_args(void)
{
    struct cuc_pool_props pr = {CUC_POOL_DEVICE, CUC_POOL_IPC, 0};
    size_t n = 99;
    cuc_pool *p;

    CHECK_OK(cuc_pool_create(dev0, &pr, &p));
    CHECK_OK(cuc_pool_lease_count(p, &n));
    CHECK(n == 0);
    CHECK_RC(cuc_pool_lease_count(NULL, &n), CUC_E_INVALID);
    CHECK_RC(cuc_pool_lease_count(p, NULL), CUC_E_INVALID);
    CHECK_OK(cuc_pool_lease_wait(p, NULL, 0, 0));
    CHECK_RC(cuc_pool_lease_wait(p, NULL, 0, -2), CUC_E_INVALID);
    CHECK_RC(cuc_pool_lease_wait(NULL, NULL, 0, 0), CUC_E_INVALID);
    cuc_pool_unref(p);
}

/* Many threads creating and dropping IPC pools: the registry stays sound
 * (each finds its own, none finds a dropped one). */
static void *churn(void *arg)
{
    struct cuc_pool_props pr = {CUC_POOL_DEVICE, CUC_POOL_IPC, 0};
    uint8_t id[CUC_POOL_ID_LEN];
    cuc_pool *p, *f;

    (void)arg;
    for (int i = 0; i < 50; i++) {
        CHECK_OK(cuc_pool_create(dev0, &pr, &p));
        cuc_pool_id(p, id);
        CHECK_OK(cuc_pool_get_by_id(id, &f));
        CHECK(f == p);
        cuc_pool_unref(f);
        cuc_pool_unref(p);
        CHECK_RC(cuc_pool_get_by_id(id, &f), CUC_E_POOL_NOT_IMPORTED);
    }
    return NULL;
}

static void test_threads(void)
{
    pthread_t t[4];

    for (int i = 0; i < 4; i++)
        CHECK(pthread_create(&t[i], NULL, churn, NULL) == 0);
    for (int i = 0; i < 4; i++)
        CHECK(pthread_join(t[i], NULL) == 0);
}

int main(void)
{
    int i;

    pt_start(CUC_DEVICE_CAP_MEMORY_POOLS, "has no memory pools");
    FD_BASELINE();
    test_bad_args();
    for (i = 0; i < n_dev; i++) {
        cuc_device *d;
        CHECK_OK(cuc_device_get(i, &d));
        check_pool(CUC_POOL_DEVICE, 0, d);
        check_pool(CUC_POOL_DEVICE, CUC_POOL_IPC, d);
        check_pool(CUC_POOL_PINNED_HOST, 0, d);
        check_pool(CUC_POOL_PINNED_HOST, CUC_POOL_IPC, d);
    }
    test_buffer_keeps_pool();
    test_lease_args();
    test_threads();
    FD_CHECK_NO_LEAK();
    return test_finish();
}
