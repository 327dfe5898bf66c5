/* VMM resources between processes (fork + exec), the child's
 * CUDA_VISIBLE_DEVICES the parent's devices reversed (UUID form always;
 * the index form too when the parent's is unset), so that every ordinal
 * differs and only UUIDs can match:
 *  - import: two chunks (and a peer when two devices exist) arrive as one
 *    contiguous range; the child finds owner and peer by UUID at the
 *    reversed ordinals, every device's access is read-write exactly for
 *    them (cuMemGetAccess), it reads the parent's bytes and writes its
 *    own, which the parent reads; its release ends the lease. With a peer,
 *    a kernel on the peer device copies the u64s across the chunk boundary
 *    of the mapping into a buffer of its own, and they must be the
 *    parent's (on the simulator, which runs no device code, everything up
 *    to the launch runs and the launch is CUC_E_NOT_SUPPORTED);
 *  - kill: a child holding two leases is killed with SIGKILL after the
 *    parent freed both resources: the deferred frees happen, and no fd,
 *    mapping or resource is left;
 *  - refuse (two devices or more): a child that cannot see the owner, or
 *    the peer, gets CUC_E_NOT_VISIBLE naming it and the visible devices,
 *    and leaks nothing; its exit ends the lease. */
#include <signal.h>

#include "ptx_kernels.h"
#include "vmm_test.h"

#define WAIT_MS 10000
#define N_PEER_READ 64u /* u64s the peer's kernel copies, half in each chunk */

static size_t gran;
static int ndev;
static cuc_device *owner, *peer; /* peer NULL with one device */

/* ---- children ---- */

static cuc_device *dev_at(int i)
{
    cuc_device *d;

    CHECK_OK(cuc_device_get(i, &d));
    return d;
}

static cuc_channel *child_channel(void)
{
    cuc_channel *ch;

    CHECK(getenv("CUC_TEST_FD"));
    CHECK_OK(cuc_channel_from_fd(atoi(getenv("CUC_TEST_FD")), &ch));
    return ch;
}

/* Contexts of every device, and a first resource created and imported,
 * so that what the driver opens on first use is in the fd baseline. */
static void warm_up(void)
{
    int n, i;

    CHECK_OK(cuc_device_count(&n));
    for (i = 0; i < n; i++)
        CHECK_OK(cuc_device_set_current(dev_at(i)));
    vmm_t_warm_up(dev_at(0));
}

static void send_device(cuc_channel *ch, const cuc_device *d)
{
    cuc_msg *m;

    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_device(m, d));
    CHECK_OK(cuc_channel_send(ch, m));
    cuc_msg_destroy(m);
}

static cuc_device *recv_device(cuc_channel *ch)
{
    cuc_device *d;
    cuc_msg *m;

    CHECK_OK(cuc_channel_recv(ch, WAIT_MS, &m));
    CHECK_OK(cuc_msg_get_device(m, 0, &d));
    cuc_msg_destroy(m);
    return d;
}

/* The peer device's side of child_import: copy_u64 on its legacy stream,
 * from the mapping into a buffer of a local pool on the peer. */
struct peer_read {
    cuc_kernel *k;
    cuc_pool *pool;
    cuc_buffer *out;
    cuc_stream *s;
};

/* Before the fd baseline, as warm_up(): what the driver opens on first
 * use of a kernel or a pool is not the import's to count. */
static void peer_read_open(struct peer_read *r, cuc_device *peer_dev)
{
    struct cuc_pool_props props = {CUC_POOL_DEVICE, 0, 0};

    CHECK_OK(cuc_kernel_load(CUC_IMAGE_PTX, ptx_copy_u64, sizeof(ptx_copy_u64), "copy_u64",
                             &r->k));
    CHECK_OK(cuc_stream_legacy(peer_dev, &r->s));
    CHECK_OK(cuc_pool_create(peer_dev, &props, &r->pool));
    CHECK_OK(cuc_buffer_alloc_async(r->pool, N_PEER_READ * 8, r->s, &r->out));
}

static void peer_read_check(const struct peer_read *r, const cuc_vmm *v, uint64_t seed)
{
    uint64_t got[N_PEER_READ], want[N_PEER_READ];
    uint8_t *pattern = malloc(cuc_vmm_size(v));
    size_t at = cuc_vmm_chunk_size(v, 0) - sizeof(got) / 2;
    void *src = (uint8_t *)cuc_vmm_ptr(v) + at, *dst = cuc_buffer_ptr(r->out);
    uint32_t n = N_PEER_READ;
    void *args[3] = {&src, &dst, &n};
    cuc_launch_config cfg;

    CHECK(pattern != NULL);
    vmm_t_pattern(seed, pattern, cuc_vmm_size(v));
    memcpy(want, pattern + at, sizeof(want));
    free(pattern);
    cuc_launch_config_init(&cfg);
    cfg.block[0] = N_PEER_READ;
    CHECK_OK(cuc_memset(dst, 0, sizeof(got), r->s));
    if (test_on_sim()) {
        CHECK_RC(cuc_launch(r->s, &cfg, r->k, args), CUC_E_NOT_SUPPORTED);
        fprintf(stderr, "import: copy_u64 on the peer: not supported on the simulator\n");
        return;
    }
    CHECK_OK(cuc_launch(r->s, &cfg, r->k, args));
    CHECK_OK(cuc_stream_synchronize(r->s));
    CHECK_OK(cuc_memcpy(got, dst, sizeof(got), r->s));
    CHECK(memcmp(got, want, sizeof(got)) == 0);
    fprintf(stderr, "import: copy_u64 on the peer read the parent's bytes\n");
}

static void peer_read_close(struct peer_read *r)
{
    if (!r->k)
        return;
    CHECK_OK(cuc_buffer_unref_async(r->out, r->s));
    cuc_pool_unref(r->pool);
    cuc_kernel_destroy(r->k);
}

/* args: owner UUID, peer UUID or "-", seed, owner's ordinal here, peer's */
static int child_import(int argc, char **argv)
{
    struct peer_read pr = {0};
    const char *expect[2];
    cuc_channel *ch;
    cuc_vmm *v;
    cuc_msg *m;
    uint64_t seed;

    CHECK(argc == 5);
    expect[0] = argv[0];
    expect[1] = strcmp(argv[1], "-") ? argv[1] : NULL;
    seed = strtoull(argv[2], NULL, 10);
    ch = child_channel();
    warm_up();
    if (expect[1])
        peer_read_open(&pr, dev_at(atoi(argv[4])));
    FD_BASELINE();
    CHECK_OK(cuc_channel_recv(ch, WAIT_MS, &m));
    CHECK_OK(cuc_msg_get_vmm(m, 0, &v));
    CHECK(cuc_vmm_is_imported(v));
    CHECK(!strcmp(cuc_device_uuid_string(cuc_vmm_device(v)), argv[0]));
    CHECK(cuc_device_ordinal(cuc_vmm_device(v)) == atoi(argv[3]));
    CHECK(cuc_vmm_peer_count(v) == (expect[1] ? 1u : 0u));
    if (expect[1]) {
        CHECK(!strcmp(cuc_device_uuid_string(cuc_vmm_peer(v, 0)), argv[1]));
        CHECK(cuc_device_ordinal(cuc_vmm_peer(v, 0)) == atoi(argv[4]));
    }
    CHECK(cuc_vmm_chunk_count(v) == 2 && cuc_vmm_size(v) == 3 * gran);
    CHECK(cuc_vmm_chunk_size(v, 0) == gran && cuc_vmm_chunk_size(v, 1) == 2 * gran);
    vmm_t_check_access(v, expect, 2);
    CHECK(vmm_t_holds(v, seed));
    if (expect[1])
        peer_read_check(&pr, v, seed);
    vmm_t_fill(v, seed + 1);
    send_device(ch, cuc_vmm_device(v));
    (void)recv_device(ch); /* the parent has read our bytes */
    cuc_vmm_unref(v);
    cuc_msg_destroy(m);
    FD_CHECK_NO_LEAK();
    CHECK(cuc__vmm_live() == 0 && vmm_t_sim_maps(0, 0) == 0);
    peer_read_close(&pr);
    cuc_channel_destroy(ch);
    return test_finish();
}

/* args: seed of the first resource (the second has seed + 1). Imports
 * both, acknowledges, and waits to be killed. */
static int child_hold(int argc, char **argv)
{
    cuc_channel *ch = child_channel();
    uint64_t seed;
    cuc_vmm *v[2];
    cuc_msg *m;

    CHECK(argc == 1);
    seed = strtoull(argv[0], NULL, 10);
    CHECK_OK(cuc_channel_recv(ch, WAIT_MS, &m));
    CHECK(cuc_msg_record_count(m) == 2);
    CHECK_OK(cuc_msg_get_vmm(m, 0, &v[0]));
    CHECK_OK(cuc_msg_get_vmm(m, 1, &v[1]));
    CHECK(vmm_t_holds(v[0], seed) && vmm_t_holds(v[1], seed + 1));
    send_device(ch, cuc_vmm_device(v[0]));
    for (;;)
        pause();
}

/* args: what is missing ("owner" or "peer 0") and its UUID. */
static int child_refuse(int argc, char **argv)
{
    cuc_channel *ch;
    cuc_vmm *v = NULL;
    cuc_msg *m;
    int n, i;

    CHECK(argc == 2);
    ch = child_channel();
    warm_up();
    FD_BASELINE();
    CHECK_OK(cuc_channel_recv(ch, WAIT_MS, &m));
    CHECK_RC(cuc_msg_get_vmm(m, 0, &v), CUC_E_NOT_VISIBLE);
    CHECK(v == NULL);
    CHECK(strstr(cuc_errmsg(), argv[0]) && strstr(cuc_errmsg(), argv[1]));
    CHECK(strstr(cuc_errmsg(), "visible devices") != NULL);
    CHECK_OK(cuc_device_count(&n));
    for (i = 0; i < n; i++) {
        cuc_device *d;
        CHECK_OK(cuc_device_get(i, &d));
        CHECK(strstr(cuc_errmsg(), cuc_device_uuid_string(d)) != NULL);
    }
    CHECK(cuc__vmm_live() == 0 && vmm_t_sim_maps(0, 0) == 0);
    cuc_msg_destroy(m);
    FD_CHECK_NO_LEAK();
    cuc_channel_destroy(ch);
    return test_finish();
}

/* ---- parent ---- */

/* CUDA_VISIBLE_DEVICES=<the parent's devices, reversed, as UUIDs>, leaving
 * out the device skip (or none: NULL). */
static void cvd_uuids(char *out, size_t n, const cuc_device *skip)
{
    size_t at = (size_t)snprintf(out, n, "CUDA_VISIBLE_DEVICES=");

    for (int i = ndev - 1; i >= 0; i--) {
        if (dev_at(i) == skip)
            continue;
        at += (size_t)snprintf(out + at, n - at, "%s%s", out[at - 1] == '=' ? "" : ",",
                               cuc_device_uuid_string(dev_at(i)));
    }
}

static void cvd_indices(char *out, size_t n)
{
    size_t at = (size_t)snprintf(out, n, "CUDA_VISIBLE_DEVICES=");

    for (int i = ndev - 1; i >= 0; i--)
        at += (size_t)snprintf(out + at, n - at, "%s%d", i == ndev - 1 ? "" : ",", i);
}

static size_t leases(const cuc_vmm *v)
{
    size_t n = 99;

    CHECK_OK(cuc_vmm_lease_count(v, &n));
    return n;
}

static pid_t start(cuc_channel **a, const char *role, const char *const *args,
                   const char *cvd)
{
    const char *env[2] = {cvd, NULL};
    cuc_channel *b;
    pid_t pid;

    CHECK_OK(cuc_channel_pair(a, &b));
    pid = spawn_self(role, args, env, cuc_channel_fd(b));
    CHECK(pid > 0);
    cuc_channel_destroy(b);
    return pid;
}

static cuc_vmm *make(const cuc_device *p, size_t nchunks, uint64_t seed)
{
    size_t sizes[2] = {gran, 2 * gran};
    const cuc_device *peers[1] = {p};
    cuc_vmm *v;

    CHECK_OK(cuc_vmm_create(owner, p ? peers : NULL, p ? 1 : 0, sizes, nchunks, &v));
    vmm_t_fill(v, seed);
    return v;
}

static void send_vmms(cuc_channel *ch, cuc_vmm *const *v, size_t n)
{
    cuc_msg *m;

    CHECK_OK(cuc_msg_create(&m));
    for (size_t i = 0; i < n; i++)
        CHECK_OK(cuc_msg_add_vmm(m, v[i]));
    CHECK_OK(cuc_channel_send(ch, m));
    cuc_msg_destroy(m);
}

static void scenario_import(const char *cvd, uint64_t seed)
{
    char s_seed[32], s_own[16], s_peer[16];
    const char *args[6];
    cuc_channel *a;
    cuc_vmm *v = make(peer, 2, seed);
    pid_t pid;

    fprintf(stderr, "import: child %s\n", cvd);
    snprintf(s_seed, sizeof(s_seed), "%llu", (unsigned long long)seed);
    snprintf(s_own, sizeof(s_own), "%d", ndev - 1 - cuc_device_ordinal(owner));
    snprintf(s_peer, sizeof(s_peer), "%d", peer ? ndev - 1 - cuc_device_ordinal(peer) : -1);
    args[0] = cuc_device_uuid_string(owner);
    args[1] = peer ? cuc_device_uuid_string(peer) : "-";
    args[2] = s_seed;
    args[3] = s_own;
    args[4] = s_peer;
    args[5] = NULL;
    pid = start(&a, "import", args, cvd);
    send_vmms(a, &v, 1);
    CHECK(leases(v) == 1);
    CHECK(recv_device(a) == owner); /* by UUID, whatever its ordinal there */
    CHECK(vmm_t_holds(v, seed + 1));
    send_device(a, owner);
    CHECK_OK(cuc_vmm_lease_wait(v, a, 0, WAIT_MS));
    CHECK(wait_child(pid) == 0);
    cuc_vmm_unref(v);
    CHECK(cuc__vmm_live() == 0);
    cuc_channel_destroy(a);
}

static void scenario_kill(const char *cvd, int base_maps)
{
    char s_seed[32];
    const char *args[2] = {s_seed, NULL};
    cuc_channel *a;
    cuc_vmm *v[2];
    uintptr_t lo, hi;
    pid_t pid;

    fprintf(stderr, "kill: child %s\n", cvd);
    v[0] = make(peer, 2, 300);
    v[1] = make(NULL, 1, 301);
    lo = (uintptr_t)cuc_vmm_ptr(v[0]);
    hi = lo + cuc_vmm_size(v[0]);
    snprintf(s_seed, sizeof(s_seed), "300");
    pid = start(&a, "hold", args, cvd);
    send_vmms(a, v, 2);
    CHECK(recv_device(a) == owner);
    CHECK(leases(v[0]) == 1 && leases(v[1]) == 1);
    cuc_vmm_unref(v[0]);
    cuc_vmm_unref(v[1]);
    CHECK(cuc__vmm_live() == 2); /* deferred: the child holds them */
    if (test_on_sim())
        CHECK(vmm_t_sim_maps(lo, hi) == 2); /* both chunks of the first */
    CHECK(kill(pid, SIGKILL) == 0);
    CHECK(wait_child(pid) == 128 + SIGKILL);
    CHECK_OK(cuc_channel_lease_wait(a, 0, WAIT_MS));
    CHECK(cuc__vmm_live() == 0);
    CHECK(vmm_t_sim_maps(lo, hi) == 0);
    CHECK(vmm_t_sim_maps(0, 0) == base_maps);
    cuc_channel_destroy(a);
}

static void scenario_refuse(const cuc_device *hidden, const char *what)
{
    const char *args[3] = {what, cuc_device_uuid_string(hidden), NULL};
    char cvd[2048];
    cuc_channel *a;
    cuc_vmm *v = make(peer, 2, 400);
    pid_t pid;

    cvd_uuids(cvd, sizeof(cvd), hidden);
    fprintf(stderr, "refuse (%s not visible): child %s\n", what, cvd);
    pid = start(&a, "refuse", args, cvd);
    send_vmms(a, &v, 1);
    CHECK(wait_child(pid) == 0);
    /* it never imported, so it never released: its exit ends the lease */
    CHECK_OK(cuc_vmm_lease_wait(v, a, 0, WAIT_MS));
    cuc_vmm_unref(v);
    CHECK(cuc__vmm_live() == 0);
    cuc_channel_destroy(a);
}

int main(int argc, char **argv)
{
    char cvd[2048];
    int base_maps;

    CHECK_OK(cuc_device_count(&ndev));
    owner = dev_at(0);
    peer = ndev >= 2 ? dev_at(1) : NULL;
    CHECK_OK(cuc_vmm_granularity(owner, &gran));
    if (argc >= 3 && !strcmp(argv[1], "--child")) {
        if (!strcmp(argv[2], "import"))
            return child_import(argc - 3, argv + 3);
        if (!strcmp(argv[2], "hold"))
            return child_hold(argc - 3, argv + 3);
        if (!strcmp(argv[2], "refuse"))
            return child_refuse(argc - 3, argv + 3);
        return 2;
    }
    if (!peer)
        fprintf(stderr, "note: one device: no peer, no not-visible children\n");
    warm_up();
    FD_BASELINE();
    base_maps = vmm_t_sim_maps(0, 0);

    cvd_uuids(cvd, sizeof(cvd), NULL);
    scenario_import(cvd, 100);
    if (!getenv("CUDA_VISIBLE_DEVICES")) {
        char idx[256];
        cvd_indices(idx, sizeof(idx));
        scenario_import(idx, 200);
    }
    scenario_kill(cvd, base_maps);
    if (peer) {
        scenario_refuse(owner, "owner");
        scenario_refuse(peer, "peer 0");
    }
    FD_CHECK_NO_LEAK();
    CHECK(vmm_t_sim_maps(0, 0) == base_maps);
    return test_finish();
}
