/* Buffer views across processes, with exec'd children whose
 * CUDA_VISIBLE_DEVICES reverses the parent's:
 *  - reversed: NV views of one allocation arrive on the device with the
 *    parent's UUID as views of one import; each holds the parent's bytes,
 *    the child's write through a view comes back; the parent drops the
 *    allocation and its views at once, and the memory stays until the
 *    child's releases, then is freed;
 *  - chain: A -> B -> C of views, B forwarding the views it imported; A's
 *    free waits for both;
 *  - SIGKILL of a child holding view leases: the parent's deferred frees
 *    run, and fds and mappings are back to what they were;
 *  - with the driver's own import: a buffer record claiming
 *    6400 bytes of a 64-byte allocation is CUC_E_BADMSG in the child,
 *    giving both sizes (cuMemGetAddressRange of what it mapped), and the
 *    true record then imports.
 * Runs as well on a real GPU as on the simulator. */
#include <signal.h>

#include "pool_test.h"
#include "memory/buffer.h"
#include "wire/records.h"
#include "channel_test.h"

#define RECV_MS 30000
#define NV 16
#define VSZ 256

static size_t pool_leases(const cuc_pool *p)
{
    size_t n = 999;

    CHECK_OK(cuc_pool_lease_count(p, &n));
    return n;
}

/* 1 if the n bytes at ptr are those of the pattern of seed at off. */
static int holds_at(void *ptr, size_t n, uint64_t seed, size_t off, cuc_device *d)
{
    uint8_t *all = malloc(off + n), *got = malloc(n);
    cuc_stream *s;
    int same;

    CHECK(all && got);
    CHECK_OK(cuc_stream_legacy(d, &s));
    test_pattern(seed, all, off + n);
    CHECK_OK(cuc_memcpy(got, ptr, n, s));
    same = memcmp(got, all + off, n) == 0;
    free(all);
    free(got);
    return same;
}

/* The importer's side of a message: the pool (on the device with uuid)
 * and NV views of one allocation, each checked, mapped once. */
static cuc_pool *get_views(const cuc_msg *m, const char *uuid, cuc_buffer **v)
{
    cuc_pool *p;

    CHECK(cuc_msg_record_count(m) == NV + 1);
    CHECK_OK(cuc_msg_get_pool(m, 0, &p));
    CHECK(!strcmp(cuc_device_uuid_string(cuc_pool_device(p)), uuid));
    for (size_t i = 0; i < NV; i++) {
        CHECK_OK(cuc_msg_get_buffer(m, i + 1, &v[i]));
        CHECK(cuc_buffer_is_view(v[i]) && cuc_buffer_is_imported(v[i]));
        CHECK(cuc_buffer_size(v[i]) == VSZ && cuc_buffer_offset(v[i]) == i * VSZ);
        CHECK(v[i]->root == v[0]->root); /* one import */
        CHECK(holds_at(cuc_buffer_ptr(v[i]), VSZ, 5, i * VSZ, cuc_pool_device(p)));
    }
    return p;
}

/* A message of the pool and NV views of b. */
static cuc_msg *views_msg(cuc_pool *p, cuc_buffer *const *v)
{
    cuc_msg *m;

    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_pool(m, p));
    for (size_t i = 0; i < NV; i++)
        CHECK_OK(cuc_msg_add_buffer(m, v[i]));
    return m;
}

static void unref_all(cuc_buffer **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        CHECK_OK(cuc_buffer_unref_async(v[i], NULL));
}

/* ---- reversed ---- */

/* args: UUID. Checks, writes view 3, acks, frees. */
static int child_reversed(int argc, char **argv)
{
    cuc_channel *ch = ct_child_channel();
    cuc_buffer *v[NV], *again;
    cuc_msg *m = ct_recv(ch);
    cuc_pool *p;
    uint8_t w[VSZ];

    CHECK(argc == 1);
    p = get_views(m, argv[0], v);
    CHECK_OK(cuc_msg_get_buffer(m, 4, &again)); /* record 4 is view 3 */
    CHECK(again == v[3]);
    CHECK_OK(cuc_buffer_unref_async(again, NULL));
    {
        cuc_buffer *w2[NV]; /* the same views in one call, the same objects */
        CHECK_OK(cuc_msg_get_buffers(m, 1, NV, w2));
        for (size_t i = 0; i < NV; i++)
            CHECK(w2[i] == v[i]);
        CHECK_OK(cuc_buffer_unref_many_async(w2, NV, NULL));
    }
    memset(w, 0xa7, sizeof(w));
    CHECK_OK(cuc_memcpy(cuc_buffer_ptr(v[3]), w, VSZ, NULL));
    ct_send_empty(ch);
    ct_wait_empty(ch); /* the parent has checked the bytes */
    /* a view dropped while its allocation stays mapped for the others:
     * its record taken again is refused (its lease ended), and so is
     * every record once all are dropped */
    CHECK_OK(cuc_buffer_unref_async(v[3], NULL));
    CHECK_RC(cuc_msg_get_buffer(m, 4, &again), CUC_E_NOT_FOUND);
    CHECK(strstr(cuc_errmsg(), "taken before") != NULL);
    v[3] = NULL;
    CHECK_OK(cuc_buffer_unref_many_async(v, NV, NULL));
    CHECK_RC(cuc_msg_get_buffer(m, 5, &again), CUC_E_NOT_FOUND);
    CHECK_RC(cuc_msg_get_buffers(m, 1, NV, v), CUC_E_NOT_FOUND);
    cuc_msg_destroy(m);
    cuc_pool_unref(p);
    ct_wait_empty(ch);
    cuc_channel_destroy(ch);
    return test_finish();
}

static cuc_buffer *views_of_new(cuc_pool *p, cuc_buffer **b, cuc_buffer **v)
{
    cuc_buffer *half;

    CHECK_OK(cuc_buffer_alloc_async(p, NV * VSZ, NULL, b));
    pt_fill(*b, 5);
    /* half of them through a view of the second half: they flatten */
    CHECK_OK(cuc_buffer_view(*b, NV / 2 * VSZ, NV / 2 * VSZ, &half));
    for (size_t i = 0; i < NV; i++) {
        if (i < NV / 2)
            CHECK_OK(cuc_buffer_view(*b, i * VSZ, VSZ, &v[i]));
        else
            CHECK_OK(cuc_buffer_view(half, (i - NV / 2) * VSZ, VSZ, &v[i]));
    }
    CHECK_OK(cuc_buffer_unref_async(half, NULL));
    return *b;
}

static void test_reversed(void)
{
    cuc_device *d = devs[0];
    cuc_pool *p = pt_new_pool(d, CUC_POOL_DEVICE, CUC_POOL_IPC);
    char env[512], uuid[CUC_UUID_STRLEN];
    const char *args[2] = {uuid, NULL};
    cuc_buffer *b, *v[NV];
    cuc_channel *ch;
    uint8_t w[VSZ];
    cuc_msg *m;
    pid_t pid;

    snprintf(uuid, sizeof(uuid), "%s", cuc_device_uuid_string(d));
    pt_child_cvd(env, sizeof(env));
    ch = ct_start("reversed", args, env, &pid);
    views_of_new(p, &b, v);
    m = views_msg(p, v);
    CHECK_OK(cuc_channel_send(ch, m));
    cuc_msg_destroy(m);
    ct_wait_empty(ch);
    memset(w, 0xa7, sizeof(w));
    CHECK_OK(cuc_memcpy(w, cuc_buffer_ptr(v[3]), VSZ, NULL));
    for (size_t i = 0; i < VSZ; i++)
        CHECK(w[i] == 0xa7);
    CHECK(holds_at(cuc_buffer_ptr(v[4]), VSZ, 5, 4 * VSZ, d));
    /* the parent lets go of everything: the child's leases keep it */
    unref_all(v, NV);
    CHECK_OK(cuc_buffer_unref_async(b, NULL));
    CHECK(pool_leases(p) == NV && pt_used(p) == NV * VSZ);
    ct_send_empty(ch);
    CHECK_OK(cuc_pool_lease_wait(p, ch, 0, RECV_MS));
    CHECK(pt_used(p) == 0);
    ct_send_empty(ch);
    CHECK(wait_child(pid) == 0);
    cuc_channel_destroy(ch);
    cuc_pool_unref(p);
}

/* ---- chain: A -> B -> C ---- */

/* args: UUID, C's environment. Imports, forwards to C, frees its own
 * references at once (its views stay mapped for C), waits for C. */
static int child_relay(int argc, char **argv)
{
    cuc_channel *up = ct_child_channel(), *down;
    const char *cargs[2] = {argv[0], NULL};
    cuc_buffer *v[NV];
    cuc_msg *m = ct_recv(up), *fw;
    cuc_pool *p;
    pid_t pid;
    size_t n;

    CHECK(argc == 2);
    p = get_views(m, argv[0], v);
    cuc_msg_destroy(m);
    down = ct_start("leaf", cargs, argv[1], &pid);
    fw = views_msg(p, v);
    CHECK_OK(cuc_channel_send(down, fw));
    cuc_msg_destroy(fw);
    CHECK_OK(cuc_buffer_lease_count(v[0], &n));
    CHECK(n == 1);
    unref_all(v, NV); /* deferred: C holds them */
    cuc_pool_unref(p);
    ct_send_empty(up);
    ct_wait_empty(down);
    CHECK(wait_child(pid) == 0);
    cuc_channel_destroy(down);
    ct_wait_empty(up);
    cuc_channel_destroy(up);
    return test_finish();
}

/* args: UUID. Imports what B forwards, checks, frees, says done. */
static int child_leaf(int argc, char **argv)
{
    cuc_channel *ch = ct_child_channel();
    cuc_buffer *v[NV];
    cuc_msg *m = ct_recv(ch);
    cuc_pool *p;

    CHECK(argc == 1);
    p = get_views(m, argv[0], v);
    cuc_msg_destroy(m);
    unref_all(v, NV);
    cuc_pool_unref(p);
    ct_send_empty(ch);
    cuc_channel_destroy(ch);
    return test_finish();
}

static void test_chain(void)
{
    cuc_device *d = devs[0];
    cuc_pool *p = pt_new_pool(d, CUC_POOL_DEVICE, CUC_POOL_IPC);
    char env[512], uuid[CUC_UUID_STRLEN];
    const char *args[3] = {uuid, env, NULL};
    cuc_buffer *b, *v[NV];
    cuc_channel *ch;
    cuc_msg *m;
    pid_t pid;

    snprintf(uuid, sizeof(uuid), "%s", cuc_device_uuid_string(d));
    pt_child_cvd(env, sizeof(env));
    ch = ct_start("relay", args, env, &pid);
    views_of_new(p, &b, v);
    m = views_msg(p, v);
    CHECK_OK(cuc_channel_send(ch, m));
    cuc_msg_destroy(m);
    unref_all(v, NV);
    CHECK_OK(cuc_buffer_unref_async(b, NULL));
    ct_wait_empty(ch); /* B has dropped its references; C may still map */
    CHECK_OK(cuc_pool_lease_wait(p, ch, 0, RECV_MS));
    CHECK(pt_used(p) == 0);
    ct_send_empty(ch);
    CHECK(wait_child(pid) == 0);
    cuc_channel_destroy(ch);
    cuc_pool_unref(p);
}

/* ---- SIGKILL of a holder ---- */

static int child_hold(int argc, char **argv)
{
    cuc_channel *ch = ct_child_channel();
    cuc_buffer *v[NV];
    cuc_msg *m = ct_recv(ch);

    CHECK(argc == 1);
    (void)get_views(m, argv[0], v);
    ct_send_empty(ch);
    for (;;)
        pause();
}

static void sigkill_round(void)
{
    cuc_device *d = devs[0];
    cuc_pool *p = pt_new_pool(d, CUC_POOL_DEVICE, CUC_POOL_IPC);
    char env[512], uuid[CUC_UUID_STRLEN];
    const char *args[2] = {uuid, NULL};
    cuc_buffer *b, *v[NV];
    cuc_channel *ch;
    cuc_msg *m;
    pid_t pid;

    snprintf(uuid, sizeof(uuid), "%s", cuc_device_uuid_string(d));
    pt_child_cvd(env, sizeof(env));
    ch = ct_start("hold", args, env, &pid);
    views_of_new(p, &b, v);
    m = views_msg(p, v);
    CHECK_OK(cuc_channel_send(ch, m));
    cuc_msg_destroy(m);
    ct_wait_empty(ch);
    unref_all(v, NV);
    CHECK_OK(cuc_buffer_unref_async(b, NULL));
    CHECK(pool_leases(p) == NV && pt_used(p) == NV * VSZ);
    CHECK(kill(pid, SIGKILL) == 0);
    CHECK(wait_child(pid) == 128 + SIGKILL);
    CHECK_OK(cuc_pool_lease_wait(p, ch, 0, RECV_MS));
    CHECK(pool_leases(p) == 0 && pt_used(p) == 0);
    cuc_channel_destroy(ch);
    cuc_pool_unref(p);
}

static void test_sigkill(void)
{
    int fds, maps;

    sigkill_round();
    fds = test_fd_count();
    maps = pt_maps_count();
    sigkill_round();
    if (test_fd_count() != fds || pt_maps_count() != maps) {
        fprintf(stderr, "%d fds and %d mappings before the second round, %d and %d "
                "after it\n", fds, maps, test_fd_count(), pt_maps_count());
        exit(1);
    }
}

/* ---- a forged size (13.7) ---- */

/* The forged record refused after the true one's import and free: its
 * import undone (a free no synchronize follows), the pool's destroy must
 * still give back its fd (sim/FACTS.md F46). The pool under a second id
 * (its fd again) is the same pool, its second import undone; the driver
 * keeps one fd for it (F47). */
static int child_forged(int argc, char **argv)
{
    cuc_channel *ch = ct_child_channel();
    cuc_buffer *b = (cuc_buffer *)0x1;
    cuc_device *dev;
    cuc_uuid u;
    cuc_pool *p;
    cuc_msg *m;
    int fds;

    CHECK(argc == 1);
    /* the driver's own fds opened first (its context), then counted */
    CHECK_OK(cuc_uuid_parse(argv[0], &u));
    CHECK_OK(cuc_device_get_by_uuid(&u, &dev));
    CHECK_OK(cuc_device_set_current(dev));
    fds = test_fd_count();
    m = ct_recv(ch);
    CHECK_OK(cuc_msg_get_pool(m, 0, &p));
    CHECK(!strcmp(cuc_device_uuid_string(cuc_pool_device(p)), argv[0]));
    CHECK_OK(cuc_msg_get_buffer(m, 2, &b));
    CHECK(cuc_buffer_size(b) == 64);
    CHECK(holds_at(cuc_buffer_ptr(b), 64, 5, 0, cuc_pool_device(p)));
    CHECK_OK(cuc_buffer_unref_async(b, NULL));
    b = (cuc_buffer *)0x1;
    CHECK_RC(cuc_msg_get_buffer(m, 1, &b), CUC_E_BADMSG);
    CHECK_ERRMSG("6400-byte allocation");
    CHECK_ERRMSG("is 64 bytes");
    CHECK(b == (cuc_buffer *)0x1);
    {
        cuc_pool *again;
        CHECK_OK(cuc_msg_get_pool(m, 3, &again));
        CHECK(again == p);
        cuc_pool_unref(again);
    }
    cuc_msg_destroy(m);
    cuc_pool_unref(p);
    if (test_fd_count() != fds + 1)
        fprintf(stderr, "child_forged: %d fds, %d before the message\n", test_fd_count(), fds);
    CHECK(test_fd_count() == fds + 1);
    ct_send_empty(ch);
    cuc_channel_destroy(ch);
    return test_finish();
}

static void test_forged(void)
{
    cuc_device *d = devs[0];
    cuc_pool *p = pt_new_pool(d, CUC_POOL_DEVICE, CUC_POOL_IPC);
    char env[512], uuid[CUC_UUID_STRLEN];
    const char *args[2] = {uuid, NULL};
    struct cuc__record r;
    uint8_t pl[104], pool_pl[40];
    cuc_buffer *b;
    cuc_channel *ch;
    cuc_msg *m, *tmp;
    pid_t pid;

    snprintf(uuid, sizeof(uuid), "%s", cuc_device_uuid_string(d));
    pt_child_cvd(env, sizeof(env));
    ch = ct_start("forged", args, env, &pid);
    CHECK_OK(cuc_buffer_alloc_async(p, 64, NULL, &b));
    pt_fill(b, 5);
    CHECK_OK(cuc_msg_create(&tmp));
    CHECK_OK(cuc_msg_add_buffer(tmp, b));
    CHECK_OK(cuc__msg_record(tmp, 0, &r));
    memcpy(pl, r.payload, sizeof(pl));
    cuc_msg_destroy(tmp);
    cuc__put64(pl + 16, 6400); /* the lie */
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_pool(m, p));
    CHECK_OK(cuc__msg_add_record(m, CUC_RECORD_BUFFER, 1, pl, sizeof(pl), NULL, 0));
    CHECK_OK(cuc_msg_add_buffer(m, b)); /* the truth, leased */
    CHECK_OK(cuc__msg_record(m, 0, &r)); /* the pool under another id */
    CHECK(r.len == sizeof(pool_pl) && r.nfds == 1);
    memcpy(pool_pl, r.payload, sizeof(pool_pl));
    pool_pl[0] ^= 0xff;
    CHECK_OK(cuc__msg_add_record(m, CUC_RECORD_POOL, 1, pool_pl, sizeof(pool_pl), r.fds, 1));
    CHECK_OK(cuc_channel_send(ch, m));
    cuc_msg_destroy(m);
    CHECK_OK(cuc_buffer_unref_async(b, NULL));
    ct_wait_empty(ch);
    CHECK_OK(cuc_pool_lease_wait(p, ch, 0, RECV_MS));
    CHECK(pt_used(p) == 0);
    CHECK(wait_child(pid) == 0);
    cuc_channel_destroy(ch);
    cuc_pool_unref(p);
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
        if (!strcmp(role, "hold"))
            return child_hold(argc - 3, argv + 3);
        if (!strcmp(role, "forged"))
            return child_forged(argc - 3, argv + 3);
        return 2;
    }
    unsetenv("CUDA_VISIBLE_DEVICES");
    pt_start(CUC_DEVICE_CAP_POOL_POSIX_FD, "cannot export pools as POSIX fds");
    test_sigkill(); /* first: it also settles the fd baseline */
    FD_BASELINE();
    test_reversed();
    test_chain();
    test_forged();
    FD_CHECK_NO_LEAK();
    return test_finish();
}
