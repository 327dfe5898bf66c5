/* VMM resources in one process: argument checks, two chunks mapped as one
 * contiguous range with access for the owner and a peer (checked through
 * the driver, by UUID), peers copied at creation, references; and leases
 * over an in-process channel pair: a free during a lease is deferred until
 * the importer's release, the exporter's close or the importer's close end
 * it; a failed send ends its lease; cuc_vmm_lease_wait with and without a
 * channel to pump. Takes a peer only when two devices exist. */
#include <fcntl.h>
#include <pthread.h>

#include "vmm_test.h"
#include "lease/lease.h"
#include "lease/linger.h"
#include "wire/records.h"

static size_t gran;
static int ndev;
static cuc_device *dev0, *dev1; /* dev1 NULL with one device */

static size_t leases(const cuc_vmm *v)
{
    size_t n = 99;

    CHECK_OK(cuc_vmm_lease_count(v, &n));
    return n;
}

static void test_granularity(void)
{
    size_t g = 0;

    CHECK_OK(cuc_vmm_granularity(dev0, &g));
    CHECK(g >= 4096 && (g & (g - 1)) == 0);
    if (test_on_sim())
        CHECK(g == ((size_t)2 << 20)); /* sim/FACTS.md F39 */
    CHECK_RC(cuc_vmm_granularity(NULL, &g), CUC_E_INVALID);
    CHECK_RC(cuc_vmm_granularity(dev0, NULL), CUC_E_INVALID);
    gran = g;
}

static void test_bad_args(void)
{
    size_t two[2] = {gran, gran}, big = (size_t)1 << 47;
    size_t too_big[3] = {big, big, big}, wrap[2] = {SIZE_MAX - gran + 1, gran};
    size_t odd[2] = {gran, gran + 4096}, zero[2] = {gran, 0}, half = gran / 2;
    const cuc_device *self[1] = {dev0}, *null_peer[1] = {NULL};
    static size_t many[CUC_VMM_MAX_CHUNKS + 1];
    const cuc_device *peers[CUC_VMM_MAX_PEERS + 1];
    size_t live0 = cuc__vmm_live();
    cuc_vmm *v = NULL;

    CHECK_RC(cuc_vmm_create(NULL, NULL, 0, two, 2, &v), CUC_E_INVALID);
    CHECK_RC(cuc_vmm_create(dev0, NULL, 0, NULL, 2, &v), CUC_E_INVALID);
    CHECK_RC(cuc_vmm_create(dev0, NULL, 0, two, 2, NULL), CUC_E_INVALID);
    CHECK_RC(cuc_vmm_create(dev0, NULL, 1, two, 2, &v), CUC_E_INVALID);
    CHECK_RC(cuc_vmm_create(dev0, NULL, 0, two, 0, &v), CUC_E_INVALID);
    for (size_t i = 0; i < CUC_VMM_MAX_CHUNKS + 1; i++)
        many[i] = gran;
    CHECK_RC(cuc_vmm_create(dev0, NULL, 0, many, CUC_VMM_MAX_CHUNKS + 1, &v), CUC_E_INVALID);
    CHECK(strstr(cuc_errmsg(), "1025 chunks") != NULL);
    for (size_t i = 0; i < CUC_VMM_MAX_PEERS + 1; i++)
        peers[i] = dev1 ? dev1 : dev0;
    CHECK_RC(cuc_vmm_create(dev0, peers, CUC_VMM_MAX_PEERS + 1, two, 2, &v), CUC_E_INVALID);
    CHECK_RC(cuc_vmm_create(dev0, null_peer, 1, two, 2, &v), CUC_E_INVALID);
    CHECK_RC(cuc_vmm_create(dev0, self, 1, two, 2, &v), CUC_E_INVALID);
    CHECK(strstr(cuc_errmsg(), "is the owner") && strstr(cuc_errmsg(), cuc_device_uuid_string(dev0)));
    if (dev1) {
        const cuc_device *twice[2] = {dev1, dev1};
        CHECK_RC(cuc_vmm_create(dev0, twice, 2, two, 2, &v), CUC_E_INVALID);
        CHECK(strstr(cuc_errmsg(), cuc_device_uuid_string(dev1)) != NULL);
    }
    /* sizes: granularity multiples, no overflow, at most CUC_VMM_MAX_BYTES */
    CHECK_RC(cuc_vmm_create(dev0, NULL, 0, zero, 2, &v), CUC_E_INVALID);
    CHECK_RC(cuc_vmm_create(dev0, NULL, 0, odd, 2, &v), CUC_E_INVALID);
    CHECK(strstr(cuc_errmsg(), "chunk 1") && strstr(cuc_errmsg(), "granularity"));
    CHECK_RC(cuc_vmm_create(dev0, NULL, 0, &half, 1, &v), CUC_E_INVALID);
    CHECK_RC(cuc_vmm_create(dev0, NULL, 0, wrap, 2, &v), CUC_E_INVALID);
    CHECK_RC(cuc_vmm_create(dev0, NULL, 0, too_big, 3, &v), CUC_E_INVALID);
    CHECK(v == NULL);
    CHECK(cuc__vmm_live() == live0);
}

static void test_create(void)
{
    size_t sizes[2] = {gran, 2 * gran};
    const cuc_device *peers[1] = {dev1};
    const char *expect[2] = {cuc_device_uuid_string(dev0),
                             dev1 ? cuc_device_uuid_string(dev1) : NULL};
    size_t live0 = cuc__vmm_live();
    uint8_t edge[64], back[64];
    cuc_vmm *v, *w;

    CHECK_OK(cuc_vmm_create(dev0, dev1 ? peers : NULL, dev1 ? 1 : 0, sizes, 2, &v));
    /* the caller's arrays are read once */
    sizes[0] = sizes[1] = 0;
    peers[0] = NULL;
    CHECK(cuc__vmm_live() == live0 + 1);
    CHECK(cuc_vmm_ptr(v) != NULL && (uintptr_t)cuc_vmm_ptr(v) % gran == 0);
    CHECK(cuc_vmm_size(v) == 3 * gran);
    CHECK(cuc_vmm_device(v) == dev0);
    CHECK(cuc_vmm_chunk_count(v) == 2);
    CHECK(cuc_vmm_chunk_size(v, 0) == gran && cuc_vmm_chunk_size(v, 1) == 2 * gran);
    CHECK(cuc_vmm_chunk_size(v, 2) == 0);
    CHECK(cuc_vmm_peer_count(v) == (dev1 ? 1u : 0u));
    CHECK(cuc_vmm_peer(v, 0) == dev1);
    CHECK(cuc_vmm_peer(v, 1) == NULL);
    CHECK(cuc_vmm_handle_type(v) == CUC_VMM_HANDLE_POSIX_FD);
    CHECK(!cuc_vmm_is_imported(v));
    CHECK(leases(v) == 0);
    vmm_t_check_access(v, expect, 2);
    CHECK_RC(cuc_vmm_access(v, NULL, &(unsigned){0}), CUC_E_INVALID);

    /* one contiguous range: bytes written across the chunk boundary */
    vmm_t_pattern(7, edge, sizeof(edge));
    vmm_t_write(v, gran - 32, edge, sizeof(edge));
    vmm_t_read(v, gran - 32, back, sizeof(back));
    CHECK(!memcmp(edge, back, sizeof(edge)));
    vmm_t_fill(v, 11);
    CHECK(vmm_t_holds(v, 11));
    CHECK(!vmm_t_holds(v, 12));

    w = cuc_vmm_ref(v);
    CHECK(w == v && cuc_vmm_ref(NULL) == NULL);
    cuc_vmm_unref(v);
    CHECK(cuc__vmm_live() == live0 + 1 && vmm_t_holds(w, 11));
    cuc_vmm_unref(w);
    cuc_vmm_unref(NULL);
    CHECK(cuc__vmm_live() == live0);
    if (test_on_sim())
        CHECK(vmm_t_sim_maps(0, 0) == 0);
}

static cuc_vmm *make(int with_peer, uint64_t seed)
{
    size_t sizes[2] = {gran, 2 * gran};
    const cuc_device *peers[1] = {dev1};
    cuc_vmm *v;

    CHECK_OK(cuc_vmm_create(dev0, with_peer && dev1 ? peers : NULL,
                            with_peer && dev1 ? 1 : 0, sizes, 2, &v));
    vmm_t_fill(v, seed);
    return v;
}

static cuc_msg *msg_of(const cuc_vmm *v)
{
    cuc_msg *m;

    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_vmm(m, v));
    return m;
}

/* A message with a VMM record: fds, no plain bytes; the message keeps
 * the resource alive; an import cannot be sent on. */
static void test_message(void)
{
    size_t live0 = cuc__vmm_live();
    cuc_vmm *v = make(1, 21), *imp;
    cuc_msg *m = msg_of(v), *m2;
    void *bytes = NULL;
    size_t len;
    int type;

    CHECK(cuc_msg_record_count(m) == 1 && cuc_msg_fd_count(m) == 2);
    {
        struct cuc__record r;
        CHECK_OK(cuc__msg_record(m, 0, &r));
        for (uint32_t i = 0; i < r.nfds; i++) /* not inherited by exec'd children */
            CHECK(fcntl(r.fds[i], F_GETFD) & FD_CLOEXEC);
    }
    CHECK_OK(cuc_msg_record_type(m, 0, &type));
    CHECK(type == CUC_RECORD_VMM);
    CHECK_RC(cuc_msg_to_bytes(m, &bytes, &len), CUC_E_NEEDS_CHANNEL);
    CHECK(bytes == NULL);
    CHECK_RC(cuc_msg_add_vmm(NULL, v), CUC_E_INVALID);
    CHECK_RC(cuc_msg_add_vmm(m, NULL), CUC_E_INVALID);

    cuc_vmm_unref(v); /* the message holds it */
    CHECK(cuc__vmm_live() == live0 + 1);

    /* imported in this process from a message that came on no channel:
     * a second mapping of the same memory, and no lease */
    CHECK_OK(cuc_msg_get_vmm(m, 0, &imp));
    CHECK(cuc_vmm_is_imported(imp) && cuc_vmm_device(imp) == dev0);
    CHECK(cuc_vmm_size(imp) == 3 * gran && cuc_vmm_chunk_count(imp) == 2);
    CHECK(vmm_t_holds(imp, 21));
    {
        const char *expect[2] = {cuc_device_uuid_string(dev0),
                                 dev1 ? cuc_device_uuid_string(dev1) : NULL};
        vmm_t_check_access(imp, expect, 2);
    }
    CHECK(leases(imp) == 0);
    CHECK_OK(cuc_msg_create(&m2));
    CHECK_RC(cuc_msg_add_vmm(m2, imp), CUC_E_NOT_SUPPORTED);
    CHECK(cuc_msg_record_count(m2) == 0 && cuc_msg_fd_count(m2) == 0);
    cuc_msg_destroy(m2);
    CHECK_RC(cuc_msg_get_vmm(m, 1, &imp), CUC_E_INVALID);
    cuc_vmm_unref(imp);
    cuc_msg_destroy(m);
    CHECK(cuc__vmm_live() == live0);
}

/* Sends v on a, receives on b, imports. */
static cuc_vmm *send_import(cuc_channel *a, cuc_channel *b, cuc_vmm *v, cuc_msg **rm)
{
    cuc_msg *m = msg_of(v);
    cuc_vmm *imp, *again;

    CHECK_OK(cuc_channel_send(a, m));
    cuc_msg_destroy(m);
    CHECK_OK(cuc_channel_recv(b, 1000, rm));
    CHECK_OK(cuc_msg_get_vmm(*rm, 0, &imp));
    CHECK_OK(cuc_msg_get_vmm(*rm, 0, &again)); /* the same record: the same object */
    CHECK(again == imp);
    cuc_vmm_unref(again);
    return imp;
}

/* The importer releases: the exporter's deferred free happens then. */
static void test_lease_release(void)
{
    size_t live0 = cuc__vmm_live();
    cuc_channel *a, *b;
    cuc_vmm *v = make(1, 31), *imp;
    cuc_msg *rm;

    CHECK_OK(cuc_channel_pair(&a, &b));
    imp = send_import(a, b, v, &rm);
    CHECK(leases(v) == 1 && leases(imp) == 0);
    CHECK(cuc__vmm_live() == live0 + 2);
    CHECK(vmm_t_holds(imp, 31));
    CHECK_RC(cuc_vmm_lease_wait(v, a, 0, 50), CUC_E_TIMEOUT);
    CHECK(strstr(cuc_errmsg(), "1 lease on the VMM resource") != NULL);
    CHECK_RC(cuc_vmm_lease_wait(v, NULL, 0, 20), CUC_E_TIMEOUT);
    CHECK_OK(cuc_vmm_lease_wait(v, a, 1, 0));

    /* the exporter frees during the lease: deferred */
    cuc_vmm_unref(v);
    CHECK(cuc__vmm_live() == live0 + 2);
    vmm_t_fill(imp, 32); /* still backed */
    CHECK(vmm_t_holds(imp, 32));
    cuc_msg_destroy(rm);
    cuc_vmm_unref(imp); /* unmaps, then releases */
    CHECK(cuc__vmm_live() == live0 + 1);
    CHECK_OK(cuc_channel_lease_wait(a, 0, 1000));
    CHECK(cuc__vmm_live() == live0);
    cuc_channel_destroy(a);
    cuc_channel_destroy(b);
}

/* The exporter keeps its reference and waits for the release. */
static void test_lease_wait(void)
{
    size_t live0 = cuc__vmm_live();
    cuc_channel *a, *b;
    cuc_vmm *v = make(0, 41), *imp;
    cuc_msg *rm;

    CHECK_OK(cuc_channel_pair(&a, &b));
    imp = send_import(a, b, v, &rm);
    CHECK_RC(cuc_vmm_lease_wait(NULL, a, 0, 0), CUC_E_INVALID);
    CHECK_RC(cuc_vmm_lease_wait(v, a, 0, -2), CUC_E_INVALID);
    cuc_vmm_unref(imp);
    CHECK_OK(cuc_vmm_lease_wait(v, a, 0, 1000));
    CHECK(leases(v) == 0 && cuc__vmm_live() == live0 + 1);
    /* sent twice, two leases; released in turn */
    {
        cuc_vmm *i1, *i2;
        cuc_msg *r2;
        cuc_msg_destroy(rm);
        i1 = send_import(a, b, v, &rm);
        i2 = send_import(a, b, v, &r2);
        CHECK(i1 != i2 && leases(v) == 2);
        cuc_vmm_unref(i1);
        CHECK_OK(cuc_vmm_lease_wait(v, a, 1, 1000));
        CHECK(leases(v) == 1);
        cuc_vmm_unref(i2);
        CHECK_OK(cuc_vmm_lease_wait(v, a, 0, 1000));
        cuc_msg_destroy(r2);
    }
    cuc_msg_destroy(rm);
    cuc_vmm_unref(v);
    CHECK(cuc__vmm_live() == live0);
    cuc_channel_destroy(a);
    cuc_channel_destroy(b);
}

struct pumper {
    cuc_channel *ch;
    int stop;
};

static void *pump_thread(void *arg)
{
    struct pumper *p = arg;

    while (!__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE))
        cuc_channel_pump(p->ch, 10);
    return NULL;
}

/* cuc_vmm_lease_wait without a channel: another thread pumps. */
static void test_lease_wait_other_thread(void)
{
    struct pumper p = {NULL, 0};
    cuc_channel *a, *b;
    cuc_vmm *v = make(0, 51), *imp;
    pthread_t t;
    cuc_msg *rm;

    CHECK_OK(cuc_channel_pair(&a, &b));
    imp = send_import(a, b, v, &rm);
    p.ch = a;
    CHECK(pthread_create(&t, NULL, pump_thread, &p) == 0);
    cuc_vmm_unref(imp);
    CHECK_OK(cuc_vmm_lease_wait(v, NULL, 0, 5000));
    CHECK(leases(v) == 0);
    __atomic_store_n(&p.stop, 1, __ATOMIC_RELEASE);
    CHECK(pthread_join(t, NULL) == 0);
    cuc_msg_destroy(rm);
    cuc_vmm_unref(v);
    cuc_channel_destroy(a);
    cuc_channel_destroy(b);
}

/* The exporter closes its channel: the lease lingers until
 * the importer's release, which a lease wait without a channel reads. */
static void test_lease_exporter_closes(void)
{
    size_t live0 = cuc__vmm_live();
    cuc_channel *a, *b;
    cuc_vmm *v = make(1, 61), *imp;
    cuc_msg *rm;

    CHECK_OK(cuc_channel_pair(&a, &b));
    imp = send_import(a, b, v, &rm);
    cuc_vmm_unref(v);
    CHECK(cuc__vmm_live() == live0 + 2);
    cuc_channel_destroy(a);
    CHECK(cuc__vmm_live() == live0 + 2); /* the exporter's free waits */
    CHECK(vmm_t_holds(imp, 61));         /* the importer still maps it */
    cuc_msg_destroy(rm);
    cuc_vmm_unref(imp);
    CHECK(cuc__vmm_live() == live0 + 1); /* the import went */
    for (int i = 0; i < 50 && cuc__vmm_live() > live0; i++)
        cuc__linger_pump(100);
    CHECK(cuc__vmm_live() == live0);     /* the release arrived */
    cuc_channel_destroy(b);
}

/* The importer closes its end (holding the import): the link stays for
 * the import's release, which ends the exporter's lease. */
static void test_lease_importer_closes(void)
{
    size_t live0 = cuc__vmm_live();
    cuc_channel *a, *b;
    cuc_vmm *v = make(0, 71), *imp;
    cuc_msg *rm;

    CHECK_OK(cuc_channel_pair(&a, &b));
    imp = send_import(a, b, v, &rm);
    cuc_msg_destroy(rm);
    cuc_channel_destroy(b);
    CHECK_RC(cuc_vmm_lease_wait(v, a, 0, 200), CUC_E_TIMEOUT); /* still mapped */
    CHECK(vmm_t_holds(imp, 71));
    cuc_vmm_unref(imp); /* the release goes on the kept link */
    CHECK_OK(cuc_vmm_lease_wait(v, a, 0, 1000));
    CHECK(leases(v) == 0);
    cuc_vmm_unref(v);
    CHECK(cuc__vmm_live() == live0);
    cuc_channel_destroy(a);
}

/* A send that fails ends its lease at once: nothing is deferred. */
static void test_send_failed(void)
{
    size_t live0 = cuc__vmm_live();
    cuc_channel *a, *b;
    cuc_vmm *v = make(0, 81);
    cuc_msg *m = msg_of(v);
    int rc;

    CHECK_OK(cuc_channel_pair(&a, &b));
    cuc_channel_destroy(b);
    rc = cuc_channel_send(a, m);
    CHECK(rc == CUC_E_PEER_CLOSED);
    CHECK(leases(v) == 0);
    cuc_msg_destroy(m);
    cuc_vmm_unref(v);
    CHECK(cuc__vmm_live() == live0);
    cuc_channel_destroy(a);
}

int main(void)
{
    int live_maps;

    CHECK_OK(cuc_device_count(&ndev));
    CHECK_OK(cuc_device_get(0, &dev0));
    if (ndev >= 2)
        CHECK_OK(cuc_device_get(1, &dev1));
    else
        fprintf(stderr, "note: one device: no peer\n");
    CHECK_OK(cuc_device_set_current(dev0));
    test_granularity();
    /* contexts, the driver's own fds: counted from here */
    if (dev1)
        CHECK_OK(cuc_device_set_current(dev1));
    vmm_t_warm_up(dev0);
    FD_BASELINE();
    live_maps = vmm_t_sim_maps(0, 0);
    test_bad_args();
    test_create();
    test_message();
    test_lease_release();
    test_lease_wait();
    test_lease_wait_other_thread();
    test_lease_exporter_closes();
    test_lease_importer_closes();
    test_send_failed();
    CHECK(cuc__vmm_live() == 0);
    CHECK(vmm_t_sim_maps(0, 0) == live_maps);
    FD_CHECK_NO_LEAK();
    return test_finish();
}
