/* Legacy-IPC memory (cuc_buffer_wrap): cuMemAlloc allocations shared as
 * their base's CUipcMemHandle plus an offset, ipc buffer records.
 *  - local: refusals naming what to use instead (pool, VMM, managed,
 *    pinned host, malloc'ed memory, a part past the end), a part of a
 *    base is a view of one wrapped root, a record that comes back to its
 *    process resolves to the original pointer with no cuIpcOpenMemHandle;
 *    driver calls per wrap (a later part of a wrapped base: none, but a
 *    forked child asks the driver again);
 *    hostile records (offset or size near UINT64_MAX, generation 0, an
 *    unknown handle type, a handle that is not the one its generation
 *    gave) refused before anything is touched;
 *  - reversed: an exec'd child with the parent's CUDA_VISIBLE_DEVICES
 *    reversed gets two buffers of one base on the GPU of the parent's
 *    UUID with one open (the sim's call counter), checks the bytes and
 *    writes some back; its last unref closes the base once (also through
 *    cuc_buffer_unref_many_async, with a whole base in the batch); the
 *    parent's lease wait ends then;
 *  - SIGKILL of a child holding leases ends them; fds back to baseline.
 * Runs on a real GPU too (the call counts only on the simulator). */
#include <dlfcn.h>
#include <signal.h>

#include "pool_test.h"
#include "../sim/cucore_sim.h"
#include "driver/driver.h"
#include "memory/buffer.h"
#include "wire/records.h"
#include "channel_test.h"

#define RECV_MS 30000
#define BASE 8192
#define PART 1024

static cuc_device *dev0;

/* The simulator's count of calls of name, or -1 on the real driver. */
static long long sim_calls(const char *name)
{
    void *h = dlopen(CUC_SIM_PATH, RTLD_NOW | RTLD_NOLOAD);
    cucore_sim_calls_fn f;
    unsigned long long n = 0;

    if (!h)
        return -1;
    f = (cucore_sim_calls_fn)(uintptr_t)dlsym(h, "cucore_sim_calls");
    CHECK(f != NULL && f(name, &n) == 0);
    dlclose(h);
    return (long long)n;
}

static size_t leases_of(const cuc_buffer *b)
{
    size_t n = 999;

    CHECK_OK(cuc_buffer_lease_count(b, &n));
    return n;
}

static CUdeviceptr mem_alloc(cuc_device *d, size_t n)
{
    CUdeviceptr p = 0;

    CHECK_OK(cuc_device_set_current(d));
    CHECK(CUC_DRV->cuMemAlloc(&p, n) == CUDA_SUCCESS);
    return p;
}

static void mem_free(CUdeviceptr p)
{
    CHECK(CUC_DRV->cuMemFree(p) == CUDA_SUCCESS);
}

/* ---- local ---- */

static void test_refusals(void)
{
    cuc_pool *p = pt_new_pool(dev0, CUC_POOL_DEVICE, CUC_POOL_IPC);
    cuc_buffer *pb, *b = (cuc_buffer *)0x1;
    CUdeviceptr m = 0, base = mem_alloc(dev0, BASE);
    void *host = NULL, *heap = malloc(64);
    size_t gran;
    cuc_vmm *vmm;

    CHECK_OK(cuc_buffer_alloc_async(p, 4096, NULL, &pb));
    CHECK_OK(cuc_stream_synchronize(pt_stream(pb)));
    CHECK_RC(cuc_buffer_wrap(dev0, cuc_buffer_ptr(pb), 64, &b), CUC_E_INVALID);
    CHECK_ERRMSG("send that cuc_buffer");
    CHECK(CUC_DRV->cuMemAllocManaged(&m, 4096, CU_MEM_ATTACH_GLOBAL) == CUDA_SUCCESS);
    CHECK_RC(cuc_buffer_wrap(dev0, (void *)(uintptr_t)m, 64, &b), CUC_E_INVALID);
    CHECK_ERRMSG("managed memory");
    CHECK(CUC_DRV->cuMemAllocHost(&host, 4096) == CUDA_SUCCESS);
    CHECK_RC(cuc_buffer_wrap(dev0, host, 64, &b), CUC_E_INVALID);
    CHECK_ERRMSG("pinned host memory");
    CHECK_RC(cuc_buffer_wrap(dev0, heap, 64, &b), CUC_E_INVALID);
    CHECK_ERRMSG("not CUDA memory");
    if (cuc_device_caps(dev0) & CUC_DEVICE_CAP_VMM) {
        CHECK_OK(cuc_vmm_granularity(dev0, &gran));
        CHECK_OK(cuc_vmm_create(dev0, NULL, 0, &gran, 1, &vmm));
        CHECK_RC(cuc_buffer_wrap(dev0, cuc_vmm_ptr(vmm), 64, &b), CUC_E_INVALID);
        CHECK_ERRMSG("cuc_vmm");
        cuc_vmm_unref(vmm);
    }
    CHECK_RC(cuc_buffer_wrap(dev0, (void *)(uintptr_t)(base + 64), BASE, &b),
             CUC_E_INVALID);
    CHECK_ERRMSG("run past the end");
    CHECK_RC(cuc_buffer_wrap(dev0, (void *)(uintptr_t)base, 0, &b), CUC_E_INVALID);
    CHECK(b == (cuc_buffer *)0x1);
    CHECK(CUC_DRV->cuMemFree(m) == CUDA_SUCCESS);
    CHECK(CUC_DRV->cuMemFreeHost(host) == CUDA_SUCCESS);
    free(heap);
    mem_free(base);
    CHECK_OK(cuc_buffer_unref_async(pb, NULL));
    cuc_pool_unref(p);
}

/* A record of b, its payload copied to pl. */
static void payload_of(cuc_buffer *b, uint8_t pl[CUC__IPC_BUFFER_PAYLOAD])
{
    struct cuc__record r;
    cuc_msg *m;

    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_buffer(m, b));
    CHECK_OK(cuc__msg_record(m, 0, &r));
    CHECK(r.type == CUC_RECORD_IPC_BUFFER);
    memcpy(pl, r.payload, CUC__IPC_BUFFER_PAYLOAD);
    cuc_msg_destroy(m);
}

/* pl with the u64 (or u32 when wide is 0) at off set to v: refused with rc. */
static void forged(const uint8_t *pl, size_t off, uint64_t v, int wide, int rc)
{
    uint8_t f[CUC__IPC_BUFFER_PAYLOAD];
    struct cuc_ipc_buffer_record rec;
    cuc_buffer *b = (cuc_buffer *)0x1;
    cuc_msg *m;

    memcpy(f, pl, sizeof(f));
    if (wide)
        cuc__put64(f + off, v);
    else
        cuc__put32(f + off, (uint32_t)v);
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc__msg_add_record(m, CUC_RECORD_IPC_BUFFER, 1, f, sizeof(f), NULL, 0));
    CHECK_RC(cuc_msg_get_buffer(m, 0, &b), rc);
    CHECK(b == (cuc_buffer *)0x1);
    if ((rc == CUC_E_BADMSG && off != 80) || rc == CUC_E_VERSION) /* in the bytes */
        CHECK_RC(cuc_msg_read_ipc_buffer(m, 0, &rec), rc);
    cuc_msg_destroy(m);
}

static void test_local(void)
{
    CUdeviceptr base = mem_alloc(dev0, BASE);
    cuc_buffer *whole, *a, *a2, *got;
    uint8_t pl[CUC__IPC_BUFFER_PAYLOAD];
    long long opens = sim_calls("cuIpcOpenMemHandle");
    long long gets = sim_calls("cuIpcGetMemHandle");
    cuc_msg *m;

    CHECK_OK(cuc_buffer_wrap(dev0, (void *)(uintptr_t)(base + PART), PART, &a));
    CHECK(cuc_buffer_is_view(a) && cuc_buffer_is_wrapped(a) && !cuc_buffer_is_imported(a));
    CHECK(cuc_buffer_offset(a) == PART && cuc_buffer_ptr(a) == (void *)(uintptr_t)(base + PART));
    CHECK_OK(cuc_buffer_wrap(dev0, (void *)(uintptr_t)base, BASE, &whole));
    CHECK(!cuc_buffer_is_view(whole) && a->root == whole); /* one root a base */
    CHECK_OK(cuc_buffer_wrap(dev0, (void *)(uintptr_t)(base + PART), PART, &a2));
    CHECK(a2 != a && a2->root == whole); /* another view of the one root */
    CHECK_OK(cuc_buffer_unref_async(a2, NULL));
    if (gets >= 0)
        CHECK(sim_calls("cuIpcGetMemHandle") == gets + 1); /* once a base */
    /* back to its own process: the original, no open */
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_buffer(m, a));
    CHECK(leases_of(a) == 0); /* begins when sent */
    CHECK_OK(cuc_msg_get_buffer(m, 0, &got));
    CHECK(got == a);
    CHECK_OK(cuc_buffer_unref_async(got, NULL));
    cuc_msg_destroy(m);
    if (opens >= 0)
        CHECK(sim_calls("cuIpcOpenMemHandle") == opens);
    /* hostile records */
    payload_of(a, pl);
    CHECK(cuc__get64(pl + 48) == PART && cuc__get64(pl + 56) == PART &&
          cuc__get64(pl + 40) == BASE && cuc__get32(pl + 72) == CUC_IPC_HANDLE_LEGACY);
    forged(pl, 48, UINT64_MAX, 1, CUC_E_BADMSG);          /* offset */
    forged(pl, 48, UINT64_MAX - PART + 1, 1, CUC_E_BADMSG); /* offset + size wraps */
    forged(pl, 56, UINT64_MAX, 1, CUC_E_BADMSG);          /* size */
    forged(pl, 56, 0, 1, CUC_E_BADMSG);
    forged(pl, 40, 0, 1, CUC_E_BADMSG);                   /* base size */
    forged(pl, 40, PART, 1, CUC_E_BADMSG);                /* part past the base */
    forged(pl, 32, 0, 1, CUC_E_BADMSG);                   /* generation */
    forged(pl, 64, 0, 1, CUC_E_BADMSG);                   /* lease id */
    forged(pl, 72, 2, 0, CUC_E_VERSION);                  /* handle type */
    forged(pl, 80, 0x5a5a5a5a5a5a5a5aull, 1, CUC_E_BADMSG); /* not its handle */
    CHECK_ERRMSG("handle differs");
    forged(pl, 32, 1u << 30, 1, CUC_E_NOT_FOUND);         /* a generation not here */
    CHECK_OK(cuc_buffer_unref_async(a, NULL));
    CHECK_OK(cuc_buffer_unref_async(whole, NULL));
    mem_free(base);
}

/* Driver calls per wrap (the simulator's counter): the first of a base
 * asks the driver once for what the pointer is and where its allocation
 * starts, and takes the handle; a later part of a wrapped base makes no
 * driver call; a base no longer wrapped is asked about again (the table
 * of recent bases is only a hint), as is a part that runs past the base
 * (the driver's answer gives the error). */
static void test_wrap_calls(void)
{
    CUdeviceptr base = mem_alloc(dev0, BASE);
    long long gets = sim_calls("cuIpcGetMemHandle"), all, attrs, ranges;
    cuc_buffer *a, *b, *c, *d;

    if (gets < 0)
        return; /* the counts are the simulator's */
    attrs = sim_calls("cuPointerGetAttributes");
    ranges = sim_calls("cuMemGetAddressRange");
    all = sim_calls("*");
    CHECK_OK(cuc_buffer_wrap(dev0, (void *)(uintptr_t)base, PART, &a));
    /* cuCtxGetCurrent (activate), cuPointerGetAttributes, cuIpcGetMemHandle */
    CHECK(sim_calls("*") - all == 3);
    CHECK(sim_calls("cuPointerGetAttributes") == attrs + 1);
    CHECK(sim_calls("cuIpcGetMemHandle") == gets + 1);
    CHECK(sim_calls("cuMemGetAddressRange") == ranges); /* an attribute of that call */
    all = sim_calls("*");
    CHECK_OK(cuc_buffer_wrap(dev0, (void *)(uintptr_t)(base + PART), PART, &b));
    CHECK_OK(cuc_buffer_wrap(dev0, (void *)(uintptr_t)(base + BASE - 1), 1, &c));
    CHECK(sim_calls("*") == all); /* no driver call */
    CHECK(b->root == a->root && c->root == a->root);
    CHECK(cuc_buffer_ptr(c) == (void *)(uintptr_t)(base + BASE - 1));
    /* a plain fork's child does not trust its parent's hints: it asks the
     * driver (which, on a GPU, refuses a process that forked) */
    {
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            long long before = sim_calls("*");
            cuc_buffer *e = NULL;
            int rc = cuc_buffer_wrap(dev0, (void *)(uintptr_t)(base + PART), PART, &e);
            (void)rc;
            _exit(sim_calls("*") > before ? 0 : 1);
        }
        CHECK(wait_child(pid) == 0);
    }
    /* past the end: the driver is asked, and the message names the base */
    CHECK(cuc_buffer_wrap(dev0, (void *)(uintptr_t)(base + PART), BASE, &d) == CUC_E_INVALID);
    CHECK_ERRMSG("run past the end");
    CHECK(sim_calls("*") > all);
    CHECK_OK(cuc_buffer_unref_async(a, NULL));
    CHECK_OK(cuc_buffer_unref_async(b, NULL));
    CHECK_OK(cuc_buffer_unref_async(c, NULL));
    /* no longer wrapped: the hint is not trusted, the handle taken again */
    gets = sim_calls("cuIpcGetMemHandle");
    CHECK_OK(cuc_buffer_wrap(dev0, (void *)(uintptr_t)(base + PART), PART, &d));
    CHECK(sim_calls("cuIpcGetMemHandle") == gets + 1);
    CHECK_OK(cuc_buffer_unref_async(d, NULL));
    mem_free(base);
}

/* ---- across processes ---- */

/* The simulator's count of every call since *mark, which moves to now. */
static long long calls_since(long long *mark)
{
    long long now = sim_calls("*"), d = now - *mark;

    *mark = now;
    return d;
}

#define SHARED 3 /* bases in test_share_calls's message */

/* args: UUID. The importer's driver calls for the first share of SHARED
 * bases (the simulator's counter): cuc_msg_get_buffer activates the
 * device (cuCtxGetCurrent: the user may have changed the context between
 * calls), opens (cuIpcOpenMemHandle) and checks the size the record
 * claims against what the driver mapped (cuMemGetAddressRange: a forged
 * size is refused, test_local); cuc_buffer_unref_many_async waits for the
 * stream once (cuCtxGetCurrent, cuStreamSynchronize) and closes each
 * (cuIpcCloseMemHandle) with that device current already. Raw: an open and
 * a close a base. */
static int child_count(int argc, char **argv)
{
    cuc_channel *ch = ct_child_channel();
    cuc_msg *m = ct_recv(ch);
    long long mark, opens, ranges, syncs, closes;
    cuc_buffer *b[SHARED];
    cuc_device *dev;
    cuc_uuid u;

    CHECK(argc == 1 && cuc_msg_record_count(m) == SHARED);
    /* the device current already, as in a program that used it before */
    CHECK_OK(cuc_uuid_parse(argv[0], &u));
    CHECK_OK(cuc_device_get_by_uuid(&u, &dev));
    CHECK_OK(cuc_device_set_current(dev));
    opens = sim_calls("cuIpcOpenMemHandle");
    ranges = sim_calls("cuMemGetAddressRange");
    mark = sim_calls("*");
    for (int i = 0; i < SHARED; i++)
        CHECK_OK(cuc_msg_get_buffer(m, (size_t)i, &b[i]));
    CHECK(calls_since(&mark) == 3 * SHARED);
    CHECK(sim_calls("cuIpcOpenMemHandle") == opens + SHARED);
    CHECK(sim_calls("cuMemGetAddressRange") == ranges + SHARED);
    {
        cuc_buffer *again[SHARED]; /* the same records as one run: the same */
        CHECK_OK(cuc_msg_get_buffers(m, 0, SHARED, again)); /* objects, no call */
        CHECK(calls_since(&mark) == 0);
        for (int i = 0; i < SHARED; i++)
            CHECK(again[i] == b[i]);
        CHECK_OK(cuc_buffer_unref_many_async(again, SHARED, NULL));
        CHECK(calls_since(&mark) == 0); /* b still holds them */
    }
    syncs = sim_calls("cuStreamSynchronize");
    closes = sim_calls("cuIpcCloseMemHandle");
    CHECK_OK(cuc_buffer_unref_many_async(b, SHARED, NULL));
    CHECK(calls_since(&mark) == 2 + SHARED);
    CHECK(sim_calls("cuStreamSynchronize") == syncs + 1);
    CHECK(sim_calls("cuIpcCloseMemHandle") == closes + SHARED);
    cuc_msg_destroy(m);
    ct_send_empty(ch);
    cuc_channel_destroy(ch);
    return test_finish();
}

/* The exporter's driver calls for the first share of SHARED bases: each
 * wrap asks the driver what the pointer is (cuCtxGetCurrent to activate,
 * one cuPointerGetAttributes) and takes the handle (cuIpcGetMemHandle);
 * adding them to a message and sending it call nothing, nor do the
 * unrefs (a leased wrapped base's free is deferred on the legacy stream:
 * no event, no activation) or the lease wait. Raw: a cuIpcGetMemHandle a
 * base. */
static void test_share_calls(void)
{
    CUdeviceptr base[SHARED];
    char env[512], uuid[CUC_UUID_STRLEN];
    const char *args[2] = {uuid, NULL};
    long long mark = sim_calls("*"), attrs, gets, events;
    cuc_buffer *b[SHARED];
    cuc_channel *ch;
    cuc_pool *legacy;
    cuc_msg *m;
    pid_t pid;

    if (mark < 0)
        return; /* the counts are the simulator's */
    for (int i = 0; i < SHARED; i++)
        base[i] = mem_alloc(dev0, BASE);
    snprintf(uuid, sizeof(uuid), "%s", cuc_device_uuid_string(dev0));
    pt_child_cvd(env, sizeof(env));
    ch = ct_start("count", args, env, &pid);
    attrs = sim_calls("cuPointerGetAttributes");
    gets = sim_calls("cuIpcGetMemHandle");
    mark = sim_calls("*");
    CHECK_OK(cuc_msg_create(&m));
    for (int i = 0; i < SHARED; i++) {
        CHECK_OK(cuc_buffer_wrap(dev0, (void *)(uintptr_t)base[i], BASE, &b[i]));
        CHECK_OK(cuc_msg_add_buffer(m, b[i]));
    }
    CHECK(calls_since(&mark) == 3 * SHARED);
    CHECK(sim_calls("cuPointerGetAttributes") == attrs + SHARED);
    CHECK(sim_calls("cuIpcGetMemHandle") == gets + SHARED);
    legacy = cuc_pool_ref(cuc_buffer_pool(b[0]));
    CHECK_OK(cuc_channel_send(ch, m));
    cuc_msg_destroy(m);
    CHECK(calls_since(&mark) == 0);
    events = sim_calls("cuEventCreate");
    for (int i = 0; i < SHARED; i++)
        CHECK_OK(cuc_buffer_unref_async(b[i], NULL));
    CHECK(calls_since(&mark) == 0);
    CHECK(sim_calls("cuEventCreate") == events);
    ct_wait_empty(ch);
    CHECK_OK(cuc_pool_lease_wait(legacy, ch, 0, RECV_MS));
    CHECK(calls_since(&mark) == 0);
    CHECK(wait_child(pid) == 0);
    cuc_pool_unref(legacy);
    cuc_channel_destroy(ch);
    for (int i = 0; i < SHARED; i++)
        mem_free(base[i]);
}

/* args: UUID, role. The two parts of one base: one open, the bytes, a
 * write back into the second; then (reversed) frees and reports the
 * close, or (hold) waits to be killed. */
static int child_get(int argc, char **argv)
{
    cuc_channel *ch = ct_child_channel();
    cuc_msg *m = ct_recv(ch);
    long long opens = sim_calls("cuIpcOpenMemHandle");
    long long closes = sim_calls("cuIpcCloseMemHandle");
    cuc_buffer *b[2];
    uint8_t w[PART];
    cuc_buffer *whole, *last[2];

    CHECK(argc == 2);
    CHECK(cuc_msg_record_count(m) == 3);
    CHECK_OK(cuc_msg_get_buffer(m, 2, &whole)); /* all of another base */
    CHECK(!cuc_buffer_is_view(whole) && cuc_buffer_size(whole) == PART);
    CHECK(pt_holds(whole, 9));
    CHECK_OK(cuc_msg_get_buffers(m, 0, 2, b)); /* the two parts of one base, as a run */
    for (int i = 0; i < 2; i++) {
        CHECK(cuc_buffer_is_imported(b[i]) && cuc_buffer_is_wrapped(b[i]));
        CHECK(!strcmp(cuc_device_uuid_string(cuc_buffer_device(b[i])), argv[0]));
        CHECK(cuc_buffer_size(b[i]) == PART && cuc_buffer_offset(b[i]) == (size_t)i * PART);
        CHECK(pt_holds(b[i], 7 + (uint64_t)i));
    }
    CHECK(b[0]->root == b[1]->root && b[0]->root->size == BASE);
    if (opens >= 0)
        CHECK(sim_calls("cuIpcOpenMemHandle") == opens + 2); /* one open a base */
    memset(w, 0xa7, sizeof(w));
    CHECK_OK(cuc_memcpy(cuc_buffer_ptr(b[1]), w, PART, NULL));
    CHECK_OK(cuc_stream_synchronize(pt_stream(b[1])));
    ct_send_empty(ch);
    if (!strcmp(argv[1], "hold")) {
        ct_wait_empty(ch); /* never comes: killed */
        return 3;
    }
    ct_wait_empty(ch);
    CHECK_OK(cuc_buffer_unref_async(b[0], NULL));
    if (closes >= 0)
        CHECK(sim_calls("cuIpcCloseMemHandle") == closes); /* b[1] keeps the base */
    /* the part dropped, its base still open for b[1]: taken again, its
     * record is refused (its lease ended); with no driver call */
    CHECK_RC(cuc_msg_get_buffer(m, 0, &b[0]), CUC_E_NOT_FOUND);
    CHECK(strstr(cuc_errmsg(), "taken before") != NULL);
    if (opens >= 0)
        CHECK(sim_calls("cuIpcOpenMemHandle") == opens + 2);
    last[0] = b[1], last[1] = whole; /* a view and a whole base, batched */
    CHECK_OK(cuc_buffer_unref_many_async(last, 2, NULL));
    if (closes >= 0)
        CHECK(sim_calls("cuIpcCloseMemHandle") == closes + 2);
    /* the bases closed: no record of them opens again */
    CHECK_RC(cuc_msg_get_buffer(m, 2, &whole), CUC_E_NOT_FOUND);
    CHECK_RC(cuc_msg_get_buffers(m, 0, 2, b), CUC_E_NOT_FOUND);
    if (opens >= 0)
        CHECK(sim_calls("cuIpcOpenMemHandle") == opens + 2);
    cuc_msg_destroy(m);
    ct_send_empty(ch);
    cuc_channel_destroy(ch);
    return test_finish();
}

static void round_trip(const char *role)
{
    CUdeviceptr base = mem_alloc(dev0, BASE), other = mem_alloc(dev0, PART);
    char env[512], uuid[CUC_UUID_STRLEN];
    const char *args[3] = {uuid, role, NULL};
    cuc_buffer *b[2], *whole;
    uint8_t got[PART];
    cuc_channel *ch;
    cuc_msg *m;
    pid_t pid;

    snprintf(uuid, sizeof(uuid), "%s", cuc_device_uuid_string(dev0));
    pt_child_cvd(env, sizeof(env));
    ch = ct_start("get", args, env, &pid);
    CHECK_OK(cuc_msg_create(&m));
    for (int i = 0; i < 2; i++) {
        CHECK_OK(cuc_buffer_wrap(dev0, (void *)(uintptr_t)(base + (size_t)i * PART), PART,
                                 &b[i]));
        pt_fill(b[i], 7 + (uint64_t)i);
        CHECK_OK(cuc_msg_add_buffer(m, b[i]));
    }
    CHECK_OK(cuc_buffer_wrap(dev0, (void *)(uintptr_t)other, PART, &whole));
    pt_fill(whole, 9);
    CHECK_OK(cuc_msg_add_buffer(m, whole));
    CHECK_OK(cuc_channel_send(ch, m));
    cuc_msg_destroy(m);
    ct_wait_empty(ch);
    CHECK(leases_of(b[0]) == 1 && leases_of(b[1]) == 1 && leases_of(whole) == 1);
    CHECK_OK(cuc_memcpy(got, cuc_buffer_ptr(b[1]), PART, pt_stream(b[1])));
    for (size_t k = 0; k < PART; k++)
        CHECK(got[k] == 0xa7);
    if (!strcmp(role, "hold")) {
        CHECK(kill(pid, SIGKILL) == 0);
        CHECK(wait_child(pid) == 128 + SIGKILL);
    } else {
        ct_send_empty(ch);
        ct_wait_empty(ch);
        CHECK(wait_child(pid) == 0);
    }
    for (int i = 0; i < 2; i++) {
        CHECK_OK(cuc_buffer_lease_wait(b[i], ch, 0, RECV_MS));
        CHECK(leases_of(b[i]) == 0);
        CHECK_OK(cuc_buffer_unref_async(b[i], NULL));
    }
    CHECK_OK(cuc_buffer_lease_wait(whole, ch, 0, RECV_MS));
    CHECK_OK(cuc_buffer_unref_async(whole, NULL));
    cuc_channel_destroy(ch);
    mem_free(base); /* the user's, freed once its buffers are gone */
    mem_free(other);
}

int main(int argc, char **argv)
{
    if (argc >= 3 && !strcmp(argv[1], "--child")) {
        signal(SIGPIPE, SIG_IGN);
        if (!strcmp(argv[2], "get"))
            return child_get(argc - 3, argv + 3);
        if (!strcmp(argv[2], "count"))
            return child_count(argc - 3, argv + 3);
        return 2;
    }
    unsetenv("CUDA_VISIBLE_DEVICES");
    pt_start(CUC_DEVICE_CAP_POOL_POSIX_FD, "cannot export pools as POSIX fds");
    dev0 = devs[0];
    round_trip("hold"); /* first: it also settles the fd baseline */
    FD_BASELINE();
    test_refusals();
    test_local();
    test_wrap_calls();
    test_share_calls();
    round_trip("free");
    round_trip("hold");
    FD_CHECK_NO_LEAK();
    return test_finish();
}
