/* Slabs (cucore/slab.h):
 *  - carving: sizes rounded to CUC_SLAB_ALIGN, addresses aligned, views of
 *    one slab; a size over the slab size gets its own allocation; errors;
 *  - reuse only once the free's event has completed (the sim's events
 *    made NOT_READY by fault injection), a slab back to the pool when its
 *    ranges are all free;
 *  - ranges freed on the legacy stream share one event, recorded at the
 *    next carve (no driver call at their release, one query a reap), and
 *    a slab whose last ranges wait unmarked still goes back;
 *  - a slab the driver refuses (out of memory, other): nothing kept;
 *  - a failing cuEventRecord at the free: the stream is synchronized and
 *    the range reused; with the synchronize failing too, the range is
 *    never reused, and the slab goes back with the allocator (no leak);
 *  - across processes (exec'd child, reversed CUDA_VISIBLE_DEVICES):
 *    1000 small buffers in one message, the child imports one pointer a
 *    slab (cuMemPoolImportPointer counted), bytes both ways, ranges not
 *    reused while the child's leases last; the child releases (first
 *    round) or is SIGKILLed (second): the leases end, the slabs go back,
 *    fds back to the baseline.
 * The fault and call-count parts need the simulator; the rest runs on a
 * real GPU too. */
#include <signal.h>

#include "pool_test.h"
#include "memory/buffer.h"
#include "cucore/slab.h"
#include "sim_test.h"
#include "channel_test.h"

#define RECV_MS 30000
#define NB 1000
#define BSZ 200           /* rounded to 256 */
#define SLAB (64 * 1024)  /* 256 buffers a slab */
#define KSLABS 4          /* ceil(1000 / 256) */
#define NEXTRA (KSLABS * 256 - NB + 1) /* the last slab's tail, then one more */

static size_t slabs_of(cuc_slab *s, size_t *used)
{
    size_t n = 999, u = 999;

    CHECK_OK(cuc_slab_stats(s, &n, &u));
    if (used)
        *used = u;
    return n;
}

static size_t off_of(const cuc_buffer *b) { return cuc_buffer_offset(b); }

/* ---- in process ---- */

static void test_carve(cuc_device *d)
{
    cuc_pool *p = pt_new_pool(d, CUC_POOL_DEVICE, CUC_POOL_IPC);
    cuc_pool *local = pt_new_pool(d, CUC_POOL_DEVICE, 0);
    cuc_slab *s, *bad = (cuc_slab *)0x1;
    cuc_buffer *b[4], *big, *none = (cuc_buffer *)0x1;
    size_t sizes[4] = {1, 100, 256, 300}, offs[4] = {0, 256, 512, 768}, used;

    CHECK_RC(cuc_slab_create(local, SLAB, &bad), CUC_E_INVALID);
    CHECK_ERRMSG("not IPC");
    CHECK_RC(cuc_slab_create(p, 0, &bad), CUC_E_INVALID);
    CHECK(bad == (cuc_slab *)0x1);
    CHECK_OK(cuc_slab_create(p, SLAB - 5, &s)); /* rounded up to SLAB */
    CHECK_RC(cuc_slab_alloc_async(s, 0, NULL, &none), CUC_E_INVALID);
    CHECK(none == (cuc_buffer *)0x1);
    for (int i = 0; i < 4; i++) {
        CHECK_OK(cuc_slab_alloc_async(s, sizes[i], NULL, &b[i]));
        CHECK(cuc_buffer_is_view(b[i]) && cuc_buffer_size(b[i]) == sizes[i]);
        CHECK(off_of(b[i]) == offs[i]);
        CHECK((uintptr_t)cuc_buffer_ptr(b[i]) % CUC_SLAB_ALIGN == 0);
        CHECK(b[i]->root == b[0]->root && cuc_buffer_size(b[i]->root) == SLAB);
        pt_fill(b[i], 40 + i);
    }
    for (int i = 0; i < 4; i++)
        CHECK(pt_holds(b[i], 40 + i)); /* no overlap */
    CHECK(slabs_of(s, &used) == 1 && used == 768 + 512);
    CHECK_OK(cuc_slab_alloc_async(s, SLAB + 1, NULL, &big));
    CHECK(!cuc_buffer_is_view(big) && cuc_buffer_size(big) == SLAB + 1);
    CHECK(slabs_of(s, NULL) == 1);
    CHECK_OK(cuc_buffer_unref_async(big, NULL));
    for (int i = 0; i < 4; i++)
        CHECK_OK(cuc_buffer_unref_async(b[i], NULL));
    CHECK(slabs_of(s, &used) == 0 && used == 0);
    CHECK(pt_used(p) == 0);
    cuc_slab_unref(s);
    cuc_pool_unref(local);
    cuc_pool_unref(p);
}

static void test_reuse_after_event(cuc_device *d)
{
    cuc_pool *p = pt_new_pool(d, CUC_POOL_DEVICE, CUC_POOL_IPC);
    cuc_buffer *keep, *a, *b, *c;
    cuc_stream *st;
    cuc_slab *s;
    size_t used;

    CHECK_OK(cuc_stream_create(d, 0, 0, &st));
    CHECK_OK(cuc_slab_create(p, SLAB, &s));
    CHECK_OK(cuc_slab_alloc_async(s, 256, st, &keep));
    CHECK_OK(cuc_slab_alloc_async(s, 256, st, &a));
    CHECK(off_of(a) == 256);
    CHECK_OK(cuc_buffer_unref_async(a, st));
    /* the free's event has not completed: its range stays out */
    sim_fail("cuEventQuery:1+:CUDA_ERROR_NOT_READY");
    CHECK_OK(cuc_slab_alloc_async(s, 256, st, &b));
    CHECK(off_of(b) == 512);
    CHECK(sim_calls("cuEventQuery") >= 1);
    CHECK(slabs_of(s, &used) == 1 && used == 3 * 256);
    sim_fail("");
    CHECK_OK(cuc_slab_alloc_async(s, 256, st, &c));
    CHECK(off_of(c) == 256); /* completed now: reused */
    CHECK_OK(cuc_buffer_unref_async(keep, st));
    CHECK_OK(cuc_buffer_unref_async(b, st));
    CHECK(slabs_of(s, NULL) == 1);
    CHECK_OK(cuc_buffer_unref_async(c, st)); /* the last range: the slab goes */
    CHECK(slabs_of(s, NULL) == 0);
    CHECK_OK(cuc_stream_synchronize(st));
    CHECK(pt_used(p) == 0);
    cuc_slab_unref(s);
    cuc_stream_destroy(st);
    cuc_pool_unref(p);
}

static void test_legacy_one_event(cuc_device *d)
{
    cuc_pool *p = pt_new_pool(d, CUC_POOL_DEVICE, CUC_POOL_IPC);
    cuc_buffer *keep, *b[16], *c, *e;
    unsigned long long created, queried;
    cuc_slab *s;
    size_t used;

    CHECK_OK(cuc_slab_create(p, SLAB, &s));
    CHECK_OK(cuc_slab_alloc_async(s, 256, NULL, &keep));
    for (int i = 0; i < 16; i++)
        CHECK_OK(cuc_slab_alloc_async(s, 256, NULL, &b[i]));
    created = sim_calls("cuEventCreate");
    for (int i = 0; i < 16; i++)
        CHECK_OK(cuc_buffer_unref_async(b[i], NULL));
    CHECK(sim_calls("cuEventCreate") == created); /* none at the release */
    /* the next carve records one event for the 16 and queries it once;
     * not complete yet: none of them is handed out */
    sim_fail("cuEventQuery:1+:CUDA_ERROR_NOT_READY"); /* (counts start anew) */
    created = sim_calls("cuEventCreate");
    queried = sim_calls("cuEventQuery");
    CHECK_OK(cuc_slab_alloc_async(s, 256, NULL, &c));
    CHECK(sim_calls("cuEventCreate") == created + 1);
    CHECK(sim_calls("cuEventQuery") == queried + 1);
    CHECK(off_of(c) == 17 * 256);
    CHECK(slabs_of(s, &used) == 1 && used == 18 * 256);
    sim_fail("");
    created = sim_calls("cuEventCreate");
    CHECK_OK(cuc_slab_alloc_async(s, 256, NULL, &e));
    CHECK(off_of(e) == 256); /* completed now: reused */
    CHECK(sim_calls("cuEventCreate") == created); /* nothing new to mark */
    CHECK(slabs_of(s, &used) == 1 && used == 3 * 256);
    /* the last ranges go unmarked: the slab goes back all the same */
    CHECK_OK(cuc_buffer_unref_async(e, NULL));
    CHECK_OK(cuc_buffer_unref_async(c, NULL));
    CHECK(slabs_of(s, NULL) == 1);
    CHECK_OK(cuc_buffer_unref_async(keep, NULL));
    CHECK(slabs_of(s, NULL) == 0);
    CHECK(pt_used(p) == 0);
    cuc_slab_unref(s);
    cuc_pool_unref(p);
}

static void test_event_fault(cuc_device *d)
{
    cuc_pool *p = pt_new_pool(d, CUC_POOL_DEVICE, CUC_POOL_IPC);
    cuc_buffer *keep, *a, *b[SLAB / 256];
    unsigned long long syncs;
    cuc_stream *st;
    cuc_slab *s;
    size_t used, n = 0;

    CHECK_OK(cuc_stream_create(d, 0, 0, &st));
    CHECK_OK(cuc_slab_create(p, SLAB, &s));
    /* a slab the driver refuses: nothing carved, nothing kept */
    sim_fail("cuMemAllocFromPoolAsync:1:CUDA_ERROR_OUT_OF_MEMORY");
    a = (cuc_buffer *)0x1;
    CHECK_RC(cuc_slab_alloc_async(s, 256, st, &a), CUC_E_NOMEM);
    CHECK(a == (cuc_buffer *)0x1 && cuc_errcuda() == CUDA_ERROR_OUT_OF_MEMORY);
    sim_fail("cuMemAllocFromPoolAsync:1");
    CHECK_RC(cuc_slab_alloc_async(s, 256, st, &a), CUC_E_DRIVER);
    CHECK(a == (cuc_buffer *)0x1);
    CHECK(slabs_of(s, NULL) == 0);
    sim_fail("");
    CHECK_OK(cuc_slab_alloc_async(s, 256, st, &keep));
    CHECK_OK(cuc_slab_alloc_async(s, 256, st, &a));
    /* no event: the stream is waited for, the range free at once */
    sim_fail("cuEventRecord:1");
    syncs = sim_calls("cuStreamSynchronize");
    CHECK_OK(cuc_buffer_unref_async(a, st));
    CHECK(sim_calls("cuStreamSynchronize") == syncs + 1);
    sim_fail("");
    CHECK_OK(cuc_slab_alloc_async(s, 256, st, &a));
    CHECK(off_of(a) == 256);
    /* neither: the range is lost, never handed out again */
    sim_fail("cuEventRecord:1,cuStreamSynchronize:1");
    CHECK_RC(cuc_buffer_unref_async(a, st), CUC_E_DRIVER);
    CHECK_ERRMSG("not reused");
    sim_fail("");
    CHECK(slabs_of(s, &used) == 1 && used == 2 * 256);
    for (size_t i = 0; i < SLAB / 256; i++) {
        CHECK_OK(cuc_slab_alloc_async(s, 256, st, &b[i]));
        CHECK(b[i]->root != keep->root || off_of(b[i]) != 256);
        n += b[i]->root == keep->root;
    }
    CHECK(n == SLAB / 256 - 2); /* all of the first slab but keep and the lost one */
    CHECK(slabs_of(s, NULL) == 2);
    for (size_t i = 0; i < SLAB / 256; i++)
        CHECK_OK(cuc_buffer_unref_async(b[i], st));
    CHECK_OK(cuc_buffer_unref_async(keep, st));
    /* the slab with the lost range stays until the allocator goes */
    CHECK(slabs_of(s, &used) == 1 && used == 256);
    CHECK(pt_used(p) == SLAB);
    cuc_slab_unref(s);
    CHECK_OK(cuc_stream_synchronize(st));
    CHECK(pt_used(p) == 0);
    cuc_stream_destroy(st);
    cuc_pool_unref(p);
}

/* ---- across processes ---- */

static void wait_empty(cuc_channel *ch)
{
    cuc_msg *m;

    CHECK_OK(cuc_channel_recv(ch, RECV_MS, &m));
    CHECK(cuc_msg_record_count(m) == 0);
    cuc_msg_destroy(m);
}

/* args: UUID, the number of slabs, "release" or "hold". Checks the
 * buffers and the imports, writes each, acks; then releases them all and
 * acks, or waits to be killed. */
static int child_recv(int argc, char **argv)
{
    cuc_channel *ch = ct_child_channel();
    unsigned long long imports0;
    cuc_buffer **b = calloc(NB, sizeof(*b));
    cuc_pool *p;
    cuc_msg *m;

    CHECK(argc == 3 && b);
    CHECK_OK(cuc_channel_recv(ch, RECV_MS, &m));
    CHECK(cuc_msg_record_count(m) == NB + 1);
    CHECK_OK(cuc_msg_get_pool(m, 0, &p));
    CHECK(!strcmp(cuc_device_uuid_string(cuc_pool_device(p)), argv[0]));
    imports0 = test_on_sim() ? sim_calls("cuMemPoolImportPointer") : 0;
    for (size_t i = 0; i < NB; i++) {
        CHECK_OK(cuc_msg_get_buffer(m, i + 1, &b[i]));
        CHECK(cuc_buffer_is_view(b[i]) && cuc_buffer_size(b[i]) == BSZ);
        CHECK(pt_holds(b[i], 1 + i));
        pt_fill(b[i], 5000 + i);
    }
    if (test_on_sim())
        CHECK(sim_calls("cuMemPoolImportPointer") - imports0 ==
              strtoull(argv[1], NULL, 10));
    cuc_msg_destroy(m);
    ct_send_empty(ch);
    if (!strcmp(argv[2], "hold"))
        for (;;)
            pause();
    wait_empty(ch);
    CHECK_OK(cuc_buffer_unref_many_async(b, NB, NULL));
    free(b);
    cuc_pool_unref(p);
    ct_send_empty(ch);
    cuc_channel_destroy(ch);
    return test_finish();
}

static void multiproc_round(cuc_device *d, int kill_it)
{
    cuc_pool *p = pt_new_pool(d, CUC_POOL_DEVICE, CUC_POOL_IPC);
    char env[512], uuid[CUC_UUID_STRLEN], k[16];
    const char *args[4] = {uuid, k, kill_it ? "hold" : "release", NULL};
    const char *envs[2] = {env, NULL};
    cuc_buffer **b = calloc(NB, sizeof(*b)), *extra[NEXTRA], *last_root;
    cuc_channel *mine, *theirs;
    cuc_slab *s;
    cuc_msg *m;
    size_t leases;
    pid_t pid;

    CHECK(b != NULL);
    snprintf(uuid, sizeof(uuid), "%s", cuc_device_uuid_string(d));
    snprintf(k, sizeof(k), "%d", KSLABS);
    pt_child_cvd(env, sizeof(env));
    CHECK_OK(cuc_channel_pair(&mine, &theirs));
    pid = spawn_self("recv", args, envs, cuc_channel_fd(theirs));
    CHECK(pid > 0);
    cuc_channel_destroy(theirs);
    CHECK_OK(cuc_slab_create(p, SLAB, &s));
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_pool(m, p));
    for (size_t i = 0; i < NB; i++) {
        CHECK_OK(cuc_slab_alloc_async(s, BSZ, NULL, &b[i]));
        pt_fill(b[i], 1 + i);
        CHECK_OK(cuc_msg_add_buffer(m, b[i]));
    }
    CHECK(slabs_of(s, NULL) == KSLABS);
    CHECK_OK(cuc_channel_send(mine, m));
    cuc_msg_destroy(m);
    wait_empty(mine);
    for (size_t i = 0; i < NB; i++)
        CHECK(pt_holds(b[i], 5000 + i));
    last_root = b[NB - 1]->root;
    for (size_t i = 0; i < NB; i++)
        CHECK_OK(cuc_buffer_unref_async(b[i], NULL));
    CHECK_OK(cuc_pool_lease_count(p, &leases));
    CHECK(leases == NB);
    /* the leases keep every range: new buffers fill the last slab's tail,
     * then need a new slab */
    for (size_t i = 0; i < NEXTRA; i++) {
        CHECK_OK(cuc_slab_alloc_async(s, BSZ, NULL, &extra[i]));
        if (i < NEXTRA - 1)
            CHECK(extra[i]->root == last_root && off_of(extra[i]) == (NB % 256 + i) * 256);
        else
            CHECK(extra[i]->root != last_root && off_of(extra[i]) == 0);
    }
    CHECK(slabs_of(s, NULL) == KSLABS + 1);
    if (kill_it) {
        CHECK(kill(pid, SIGKILL) == 0);
        CHECK(wait_child(pid) == 128 + SIGKILL);
    } else {
        ct_send_empty(mine);
    }
    CHECK_OK(cuc_pool_lease_wait(p, mine, 0, RECV_MS));
    CHECK(slabs_of(s, NULL) == 2); /* the old slabs went back but the extras' two */
    for (size_t i = 0; i < NEXTRA; i++)
        CHECK_OK(cuc_buffer_unref_async(extra[i], NULL));
    CHECK(slabs_of(s, NULL) == 0 && pt_used(p) == 0);
    if (!kill_it) {
        wait_empty(mine);
        CHECK(wait_child(pid) == 0);
    }
    cuc_slab_unref(s);
    cuc_channel_destroy(mine);
    cuc_pool_unref(p);
    free(b);
}

static void test_multiproc(cuc_device *d)
{
    int fds;

    multiproc_round(d, 0);
    fds = test_fd_count();
    multiproc_round(d, 1);
    multiproc_round(d, 1);
    if (test_fd_count() != fds) {
        fprintf(stderr, "%d fds before the SIGKILL rounds, %d after\n", fds, test_fd_count());
        exit(1);
    }
}

int main(int argc, char **argv)
{
    if (argc >= 3 && !strcmp(argv[1], "--child")) {
        signal(SIGPIPE, SIG_IGN);
        if (!strcmp(argv[2], "recv"))
            return child_recv(argc - 3, argv + 3);
        return 2;
    }
    unsetenv("CUDA_VISIBLE_DEVICES");
    pt_start(CUC_DEVICE_CAP_POOL_POSIX_FD, "cannot export pools as POSIX fds");
    FD_BASELINE();
    test_carve(devs[0]);
    if (test_on_sim()) {
        test_reuse_after_event(devs[0]);
        test_legacy_one_event(devs[0]);
        test_event_fault(devs[0]);
    }
    test_multiproc(devs[0]);
    FD_CHECK_NO_LEAK();
    return test_finish();
}
