/* Fault injection as a permanent test, in the manner of SQLite's: every
 * sharing scenario (pool + buffers, deferred free, VMM with a peer, IPC
 * event, kernel, memory another allocator owns adopted: a cuMemAlloc
 * part, a framework's IPC pool and its allocations, two chunks of an
 * expandable segment; and the demo's flow: all of them in one message) runs
 * with an exporter and an importer as two fork+exec processes of this
 * binary, the importer seeing the GPUs reversed (CUDA_VISIBLE_DEVICES).
 * First once with CUCORE_SIM_TRACE on each side, which counts the driver
 * calls each side makes; then once for each of those calls k on each
 * side, with CUCORE_SIM_FAIL='*:k' failing it there. Each run checks:
 *
 *  - both processes exit by status (no signal, no crash, no hang: an alarm
 *    kills a stuck child, and every receive has a timeout);
 *  - the side whose call failed either reports an error whose message
 *    (cuc_errmsg) names the failed call, or absorbed the failure: it
 *    completed with every byte checked (counted as "absorbed": a fallback
 *    took over), or the call was one of a teardown that returns nothing
 *    (an unref, a destroy: counted apart, by call, as a driver object the
 *    driver kept with nobody told);
 *  - fds and the simulator's mappings (pool, VMM and legacy-IPC files in
 *    /proc/self/maps) are back at the start's count in both processes,
 *    unless that side's error says the memory was leaked on purpose
 *    (a free that might corrupt memory still in use is not done);
 *  - the other side finished, or failed cleanly (its peer closed), never
 *    by a timeout;
 *  - no data came out wrong on either side;
 *  - adopted memory: every release callback registered ran once by the
 *    end, after which the exporter frees the memory as its owner.
 *
 * Then once more per call with that call and every later one failing
 * ("*:k+", as SQLite's persistent faults): nobody crashes, hangs or sees
 * wrong data, and the side whose driver works ends with its fds and
 * mappings back.
 *
 * Prints scenarios x calls x sides and how many runs ended each way.
 * Under ASan the per-side sweep takes every 3rd call (the output says so;
 * CUC_FAULT_STRIDE=N overrides), so that it stays within a minute on two
 * cores. */
#include "cucore.h"
#include "check.h"
#include "pattern.h"
#include "ptx_kernels.h"
#include "base/error.h"
#include "driver/driver.h"

#include <signal.h>
#include <sys/socket.h>

#if defined(__SANITIZE_ADDRESS__)
#define CUC_FAULT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CUC_FAULT_ASAN 1
#endif
#endif
#ifndef CUC_FAULT_ASAN
#define CUC_FAULT_ASAN 0
#endif

#define TIMEOUT_MS 15000
#define NBUF 3
#define BUF_BYTES 4096
#define MiB ((size_t)1 << 20)

/* Exit status of a child whose check of the data failed. */
#define WRONG_DATA (-1000)

enum scen { SC_POOL, SC_DEFER, SC_VMM, SC_EVENT, SC_KERNEL, SC_ADOPT, SC_DEMO, SC_N };
static const char *const scen_names[SC_N] = {"pool", "deferred-free", "vmm",  "event",
                                             "kernel", "adopt", "demo"};

/* ---- in a child: the first failure, the resources --------------------- */

static int first_rc;
static char first_msg[1024];

static void note(int rc)
{
    if (rc && !first_rc) {
        first_rc = rc;
        snprintf(first_msg, sizeof(first_msg), "%s",
                 rc == WRONG_DATA ? "wrong data" : cuc_errmsg());
    }
}

#define T(call)                                                                \
    do {                                                                       \
        int rc_ = (call);                                                      \
        if (rc_) {                                                             \
            note(rc_);                                                         \
            goto out;                                                          \
        }                                                                      \
    } while (0)
#define DATA(cond)                                                             \
    do {                                                                       \
        if (!(cond)) {                                                         \
            note(WRONG_DATA);                                                  \
            goto out;                                                          \
        }                                                                      \
    } while (0)

/* Open fds, but not the one the simulator keeps for the process's life
 * once it made an IPC event (as the driver does: sim/FACTS.md F11). */
static int fds_now(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    int n = 0;

    if (!d)
        return -1;
    while ((e = readdir(d)) != NULL) {
        char p[300], link[256];
        ssize_t len;
        if (e->d_name[0] == '.')
            continue;
        snprintf(p, sizeof(p), "/proc/self/fd/%s", e->d_name);
        len = readlink(p, link, sizeof(link) - 1);
        link[len > 0 ? len : 0] = '\0';
        if (!strstr(link, "cucore-sim-ipc-events"))
            n++;
    }
    closedir(d);
    return n - 1; /* the DIR's own */
}

/* The simulator's device memory mappings. */
static int maps_now(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[4096];
    int n = 0;

    if (!f)
        return -1;
    while (fgets(line, sizeof(line), f))
        n += strstr(line, "cucore-sim-pool") || strstr(line, "cucore-sim-vmm") ||
             strstr(line, "/dev/shm/cucore-sim-ipc");
    fclose(f);
    return n;
}

static int recv_one(cuc_channel *ch, cuc_msg **m)
{
    return cuc_channel_recv(ch, TIMEOUT_MS, m);
}

/* The importer's end: the exporter closes once its leases ended. */
static int wait_close(cuc_channel *ch)
{
    cuc_msg *m = NULL;
    int rc = cuc_channel_recv(ch, TIMEOUT_MS, &m);

    if (rc == CUC_E_PEER_CLOSED)
        return 0;
    cuc_msg_destroy(m);
    return rc ? rc : cuc__seterr(CUC_E_BADMSG, "a message where the close was expected");
}

static uint32_t word_of(int b, size_t k)
{
    return (uint32_t)(b + 1) << 24 | (uint32_t)k;
}

/* ---- the objects each scenario shares ----------------------------------- */

/* Memory the exporter owns as a framework would (the adopt scenario):
 * made and freed with the raw driver, shared through cuc_*_adopt. */
struct owned {
    CUdeviceptr legacy;   /* 2 buffers' worth of cuMemAlloc */
    CUmemoryPool pool;    /* a framework's IPC pool */
    CUdeviceptr pmem[2];  /* 1 and 3 buffers' worth of it */
    CUdeviceptr base;     /* a reservation of 2 chunks */
    size_t chunk;
    CUmemGenericAllocationHandle h[2];
    int mapped[2];
    int released, wanted; /* release callbacks run, registered */
};

struct objs {
    int use_pool, use_vmm, use_event, use_kernel, deferred, adopt;
    struct owned own;
    cuc_device *dev, *peer;
    cuc_stream *stream;
    cuc_pool *pool;
    cuc_buffer *buf[NBUF];
    cuc_vmm *vmm;
    cuc_event *ev;
    cuc_kernel *k;
};

static void objs_for(enum scen sc, struct objs *o)
{
    memset(o, 0, sizeof(*o));
    o->use_pool = sc == SC_POOL || sc == SC_DEFER || sc == SC_ADOPT || sc == SC_DEMO;
    o->deferred = sc == SC_DEFER || sc == SC_DEMO;
    o->use_vmm = sc == SC_VMM || sc == SC_ADOPT || sc == SC_DEMO;
    o->adopt = sc == SC_ADOPT;
    o->use_event = sc == SC_EVENT || sc == SC_DEMO;
    o->use_kernel = sc == SC_KERNEL || sc == SC_DEMO;
}

static int fill(void *dst, int b, size_t n, cuc_stream *s)
{
    uint32_t *w = malloc(n);
    int rc;

    if (!w)
        return cuc__seterr(CUC_E_NOMEM, "test: no memory");
    for (size_t k = 0; k < n / 4; k++)
        w[k] = word_of(b, k);
    rc = cuc_memcpy(dst, w, n, s);
    free(w);
    return rc;
}

/* 0 if the n bytes at src hold buffer b's words, WRONG_DATA if not. */
static int holds(const void *src, int b, size_t n, uint32_t first, int *rc)
{
    uint32_t *w = malloc(n);
    int same = 1;

    *rc = w ? cuc_memcpy(w, src, n, NULL) : cuc__seterr(CUC_E_NOMEM, "test: no memory");
    if (*rc) {
        free(w);
        return 1;
    }
    for (size_t k = 0; k < n / 4 && same; k++)
        same = w[k] == (k == 0 ? first : word_of(b, k));
    free(w);
    return same;
}

#define HOLDS(src, b, n, first)                                                \
    do {                                                                       \
        int rc_h_;                                                             \
        int same_ = holds(src, b, n, first, &rc_h_);                           \
        T(rc_h_);                                                              \
        DATA(same_);                                                           \
    } while (0)

/* ---- memory another allocator owns (the adopt scenario) ------------------ */

#define RAW(call, name)                                                        \
    do {                                                                       \
        CUresult r_ = (call);                                                  \
        if (r_ != CUDA_SUCCESS) {                                              \
            note(cuc__cuda_err(r_, name, "the owner's memory, made raw"));     \
            goto out;                                                          \
        }                                                                      \
    } while (0)

static void owned_release(void *arg)
{
    ((struct owned *)arg)->released++;
}

/* The owner's memory: cuMemAlloc, a pool of its own, a segment. */
static int owned_make(struct objs *o)
{
    struct owned *w = &o->own;
    CUmemAllocationProp ap;
    CUmemPoolProps pp;
    CUmemAccessDesc acc;

    memset(&pp, 0, sizeof(pp));
    pp.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    pp.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    pp.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    T(cuc_device_set_current(o->dev));
    RAW(CUC_DRV->cuMemAlloc(&w->legacy, 2 * BUF_BYTES), "cuMemAlloc");
    RAW(CUC_DRV->cuMemPoolCreate(&w->pool, &pp), "cuMemPoolCreate");
    for (int i = 0; i < 2; i++)
        RAW(CUC_DRV->cuMemAllocFromPoolAsync(&w->pmem[i], (size_t)(1 + 2 * i) * BUF_BYTES,
                                             w->pool, CU_STREAM_LEGACY),
            "cuMemAllocFromPoolAsync");
    T(cuc_vmm_granularity(o->dev, &w->chunk));
    RAW(CUC_DRV->cuMemAddressReserve(&w->base, 2 * w->chunk, 0, 0, 0), "cuMemAddressReserve");
    memset(&ap, 0, sizeof(ap));
    ap.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    ap.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    ap.location = pp.location;
    memset(&acc, 0, sizeof(acc));
    acc.location = pp.location;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    for (int i = 0; i < 2; i++) {
        RAW(CUC_DRV->cuMemCreate(&w->h[i], w->chunk, &ap, 0), "cuMemCreate");
        RAW(CUC_DRV->cuMemMap(w->base + (size_t)i * w->chunk, w->chunk, 0, w->h[i], 0),
            "cuMemMap");
        w->mapped[i] = 1;
    }
    RAW(CUC_DRV->cuMemSetAccess(w->base, 2 * w->chunk, &acc, 1), "cuMemSetAccess");
    return 0;
out:
    return first_rc;
}

/* A failed free of the owner's: its memory stays, and the error says so. */
#define FREE(call, name)                                                       \
    do {                                                                       \
        CUresult r_ = (call);                                                  \
        if (r_ != CUDA_SUCCESS)                                                \
            note(cuc__cuda_err(r_, name, "the owner's free: leaked"));         \
    } while (0)

/* Once cucore is done (every release it was given has run), the owner
 * frees. */
static void owned_free(struct objs *o)
{
    struct owned *w = &o->own;

    if (w->released != w->wanted)
        note(cuc__seterr(CUC_E_INVALID, "test: %d of %d release callbacks ran",
                         w->released, w->wanted));
    if (cuc_device_set_current(o->dev) != 0)
        return; /* (noted by whoever failed first) */
    if (w->legacy)
        FREE(CUC_DRV->cuMemFree(w->legacy), "cuMemFree");
    for (int i = 0; i < 2; i++)
        if (w->pmem[i])
            FREE(CUC_DRV->cuMemFreeAsync(w->pmem[i], CU_STREAM_LEGACY), "cuMemFreeAsync");
    if (w->pool) {
        FREE(CUC_DRV->cuStreamSynchronize(CU_STREAM_LEGACY), "cuStreamSynchronize");
        FREE(CUC_DRV->cuMemPoolDestroy(w->pool), "cuMemPoolDestroy");
    }
    for (int i = 0; i < 2; i++) {
        if (w->mapped[i])
            FREE(CUC_DRV->cuMemUnmap(w->base + (size_t)i * w->chunk, w->chunk), "cuMemUnmap");
        if (w->h[i])
            FREE(CUC_DRV->cuMemRelease(w->h[i]), "cuMemRelease");
    }
    if (w->base)
        FREE(CUC_DRV->cuMemAddressFree(w->base, 2 * w->chunk), "cuMemAddressFree");
}

static int adopt_one(struct objs *o, int b, CUdeviceptr p)
{
    T(cuc_buffer_adopt(o->dev, (void *)(uintptr_t)p, BUF_BYTES, owned_release, &o->own,
                       &o->buf[b]));
    o->own.wanted++;
    return 0;
out:
    return first_rc;
}

/* The owner's memory adopted, filled and added: the pool (from its
 * allocation's buffer), a cuMemAlloc part, the pool's allocation whole and
 * a part of another, two chunks from inside the first. */
static int exporter_adopt(struct objs *o, cuc_msg *m)
{
    size_t off = 0;

    T(owned_make(o));
    T(adopt_one(o, 0, o->own.legacy + BUF_BYTES));
    T(adopt_one(o, 1, o->own.pmem[0]));
    T(adopt_one(o, 2, o->own.pmem[1] + BUF_BYTES));
    o->pool = cuc_pool_ref(cuc_buffer_pool(o->buf[1]));
    T(cuc_msg_add_pool(m, o->pool));
    for (int b = 0; b < NBUF; b++) {
        T(fill(cuc_buffer_ptr(o->buf[b]), b, BUF_BYTES, NULL));
        T(cuc_msg_add_buffer(m, o->buf[b]));
    }
    T(cuc_vmm_adopt(o->dev, (void *)(uintptr_t)(o->own.base + 100), 2 * o->own.chunk - 100,
                    owned_release, &o->own, &o->vmm, &off));
    o->own.wanted++;
    DATA(off == 100);
    T(fill(cuc_vmm_ptr(o->vmm), 7, 2 * o->own.chunk, NULL));
    T(cuc_msg_add_vmm(m, o->vmm));
    return 0;
out:
    return first_rc;
}

/* ---- the exporter ---------------------------------------------------------- */

static int exporter_make(struct objs *o, cuc_msg *m)
{
    T(cuc_device_get(0, &o->dev));
    T(cuc_msg_add_device(m, o->dev));
    if (o->adopt)
        return exporter_adopt(o, m);
    if (o->deferred || o->use_event)
        T(cuc_stream_create(o->dev, 0, 0, &o->stream));
    if (o->use_pool) {
        struct cuc_pool_props pr;
        cuc_pool_props_init(&pr);
        pr.flags = CUC_POOL_IPC;
        T(cuc_pool_create(o->dev, &pr, &o->pool));
        T(cuc_msg_add_pool(m, o->pool));
        for (int b = 0; b < NBUF; b++) {
            T(cuc_buffer_alloc_async(o->pool, BUF_BYTES, o->stream, &o->buf[b]));
            T(fill(cuc_buffer_ptr(o->buf[b]), b, BUF_BYTES, o->stream));
            T(cuc_msg_add_buffer(m, o->buf[b]));
        }
    }
    if (o->use_vmm) {
        size_t g, sizes[2];
        T(cuc_device_get(1, &o->peer));
        T(cuc_vmm_granularity(o->dev, &g));
        sizes[0] = sizes[1] = g;
        T(cuc_vmm_create(o->dev, (const cuc_device *const *)&o->peer, 1, sizes, 2, &o->vmm));
        T(fill(cuc_vmm_ptr(o->vmm), 7, 2 * g, NULL));
        T(cuc_msg_add_vmm(m, o->vmm));
    }
    if (o->use_event) {
        T(cuc_event_create(o->dev, CUC_EVENT_IPC, &o->ev));
        T(cuc_event_record(o->ev, o->stream));
        T(cuc_msg_add_event(m, o->ev));
    }
    if (o->use_kernel) {
        cuc_launch_config cfg;
        T(cuc_kernel_load(CUC_IMAGE_PTX, ptx_twice, sizeof(ptx_twice), "twice", &o->k));
        T(cuc_msg_add_kernel(m, o->k));
        cuc_launch_config_init(&cfg);
        cfg.grid[0] = 4;
        cfg.block[0] = 64;
        T(cuc_msg_add_launch_config(m, &cfg));
    }
    return 0;
out:
    return first_rc;
}

/* The importer's reply: one device record naming what it resolved. */
static int exporter_check_reply(struct objs *o, cuc_msg *r)
{
    cuc_device *d;

    T(cuc_msg_get_device(r, 0, &d));
    DATA(d == o->dev);
    for (int b = 0; o->use_pool && b < NBUF; b++)
        HOLDS(cuc_buffer_ptr(o->buf[b]), b, BUF_BYTES, b == 0 ? 0xfeedu : word_of(b, 0));
    return 0;
out:
    return first_rc;
}

/* Drops what it made. Buffers go first (deferred while leased, on the
 * stream they were used on), then the channel is waited on for the
 * releases; failed frees that no caller heard of are reported by
 * cuc_pool_lease_wait. */
static void exporter_drop(struct objs *o, cuc_channel *ch, int clean)
{
    /* an adopted cuMemAlloc part is of no pool here: its own lease wait */
    cuc_buffer *legacy = o->adopt ? cuc_buffer_ref(o->buf[0]) : NULL;

    for (int b = 0; b < NBUF; b++)
        if (o->buf[b])
            note(cuc_buffer_unref_async(o->buf[b], o->stream));
    if (o->pool && clean)
        note(cuc_pool_lease_wait(o->pool, ch, 0, TIMEOUT_MS));
    if (o->vmm && clean)
        note(cuc_vmm_lease_wait(o->vmm, ch, 0, TIMEOUT_MS));
    /* A destroyed channel keeps the leases of a live importer (channel.h):
     * its link lingers until the importer releases them or goes, read by
     * the NULL wait (an importer gone already ended them at the destroy). */
    cuc_channel_destroy(ch);
    if (o->pool)
        note(cuc_pool_lease_wait(o->pool, NULL, 0, TIMEOUT_MS));
    if (o->vmm)
        note(cuc_vmm_lease_wait(o->vmm, NULL, 0, TIMEOUT_MS));
    if (legacy) {
        note(cuc_buffer_lease_wait(legacy, NULL, 0, TIMEOUT_MS));
        note(cuc_buffer_unref_async(legacy, NULL));
    }
    cuc_pool_unref(o->pool);
    cuc_vmm_unref(o->vmm);
    cuc_event_unref(o->ev);
    cuc_kernel_destroy(o->k);
    if (o->stream)
        cuc_stream_destroy(o->stream);
    if (o->adopt)
        owned_free(o);
}

static void exporter(enum scen sc, cuc_channel *ch)
{
    struct objs o;
    cuc_msg *m = NULL, *r = NULL;
    int clean = 0;

    objs_for(sc, &o);
    T(cuc_msg_create(&m));
    T(exporter_make(&o, m));
    T(cuc_channel_send(ch, m));
    cuc_msg_destroy(m);
    m = NULL;
    if (o.deferred) {
        /* the last reference goes while the leases keep the memory */
        for (int b = 0; b < NBUF; b++) {
            cuc_buffer *bb = o.buf[b];
            o.buf[b] = NULL;
            T(cuc_buffer_unref_async(bb, o.stream));
        }
    }
    T(recv_one(ch, &r));
    if (o.deferred) {
        T(cuc_msg_get_device(r, 0, &o.peer));
        DATA(o.peer == o.dev);
    } else {
        T(exporter_check_reply(&o, r));
    }
    clean = 1;
out:
    cuc_msg_destroy(m);
    cuc_msg_destroy(r);
    exporter_drop(&o, ch, clean);
}

/* ---- the importer ---------------------------------------------------------- */

static void importer(enum scen sc, cuc_channel *ch)
{
    struct objs o;
    cuc_msg *m = NULL, *r = NULL;
    size_t i = 0;
    int rc, ord;

    objs_for(sc, &o);
    T(recv_one(ch, &m));
    T(cuc_msg_get_device(m, i++, &o.dev));
    /* reversed visibility: physical GPU 0 is the last ordinal here */
    T(cuc_device_count(&ord));
    DATA(cuc_device_ordinal(o.dev) == ord - 1);
    if (o.use_pool) {
        T(cuc_msg_get_pool(m, i++, &o.pool));
        for (int b = 0; b < NBUF; b++) {
            T(cuc_msg_get_buffer(m, i++, &o.buf[b]));
            HOLDS(cuc_buffer_ptr(o.buf[b]), b, BUF_BYTES, word_of(b, 0));
        }
        {
            uint32_t v = 0xfeedu;
            T(cuc_memcpy(cuc_buffer_ptr(o.buf[0]), &v, sizeof(v), NULL));
        }
    }
    if (o.use_vmm) {
        T(cuc_msg_get_vmm(m, i++, &o.vmm));
        DATA(cuc_vmm_device(o.vmm) == o.dev && cuc_vmm_peer_count(o.vmm) == !o.adopt);
        HOLDS(cuc_vmm_ptr(o.vmm), 7, cuc_vmm_size(o.vmm), word_of(7, 0));
    }
    if (o.use_event) {
        int done = 0;
        T(cuc_msg_get_event(m, i++, &o.ev));
        DATA(cuc_event_device(o.ev) == o.dev && cuc_event_is_imported(o.ev));
        T(cuc_event_synchronize(o.ev));
        T(cuc_event_query(o.ev, &done));
        DATA(done == 1);
    }
    if (o.use_kernel) {
        cuc_launch_config cfg;
        T(cuc_msg_get_kernel(m, i++, &o.k));
        DATA(strcmp(cuc_kernel_name(o.k), "twice") == 0);
        T(cuc_msg_get_launch_config(m, i++, &cfg));
        DATA(cfg.grid[0] == 4 && cfg.block[0] == 64);
    }
    T(cuc_msg_create(&r));
    T(cuc_msg_add_device(r, o.dev));
    T(cuc_channel_send(ch, r));
    /* done: everything goes, the releases are sent, then the close */
    if (o.use_pool) {
        rc = sc == SC_POOL ? cuc_buffer_unref_many_async(o.buf, NBUF, NULL) : 0;
        for (int b = 0; b < NBUF && sc != SC_POOL; b++)
            if (!rc)
                rc = cuc_buffer_unref_async(o.buf[b], NULL);
            else
                note(cuc_buffer_unref_async(o.buf[b], NULL));
        memset(o.buf, 0, sizeof(o.buf));
        T(rc);
    }
    cuc_vmm_unref(o.vmm);
    o.vmm = NULL;
    cuc_msg_destroy(m);
    m = NULL;
    T(wait_close(ch));
out:
    for (int b = 0; b < NBUF; b++)
        note(cuc_buffer_unref_async(o.buf[b], NULL));
    cuc_pool_unref(o.pool);
    cuc_vmm_unref(o.vmm);
    cuc_event_unref(o.ev);
    cuc_kernel_destroy(o.k);
    cuc_msg_destroy(m);
    cuc_msg_destroy(r);
    cuc_channel_destroy(ch);
}

/* `--child run SCENARIO exporter|importer`, the socket in CUC_TEST_FD.
 * Prints "rc=N fds=D maps=M msg=TEXT" (D, M: growth since the start). */
static int child_run(const char *scen, const char *role)
{
    const char *fdv = getenv("CUC_TEST_FD");
    int fd = fdv ? atoi(fdv) : -1, fd0, m0, sc;
    cuc_channel *ch = NULL;

    alarm(60); /* a hang becomes a signal the parent sees */
    for (sc = 0; sc < SC_N && strcmp(scen, scen_names[sc]) != 0; sc++)
        ;
    if (sc == SC_N || fd < 0)
        return 2;
    fd0 = fds_now() - 1; /* the socket goes with the channel */
    m0 = maps_now();
    if (cuc_channel_from_fd(fd, &ch) != 0) {
        note(-1);
        close(fd);
    } else if (strcmp(role, "exporter") == 0) {
        exporter((enum scen)sc, ch);
    } else {
        importer((enum scen)sc, ch);
    }
    printf("rc=%d fds=%d maps=%d msg=%s\n", first_rc, fds_now() - fd0, maps_now() - m0,
           first_msg);
    fflush(stdout);
    return 0;
}

/* ---- the parent ---------------------------------------------------------- */

struct side {
    int status; /* exit status, 128+signal */
    int rc, fds, maps;
    char msg[1024];
    unsigned long long calls, nfail;
    char fail_name[64];
};

static void read_trace(const char *path, struct side *s)
{
    FILE *f = fopen(path, "r");
    char line[256];

    s->calls = s->nfail = 0;
    s->fail_name[0] = '\0';
    if (!f)
        return;
    while (fgets(line, sizeof(line), f)) {
        long pid;
        unsigned long long k, kn;
        char name[64], word[8] = "";
        int got = sscanf(line, "%ld %llu %63s %llu %7s", &pid, &k, name, &kn, word);
        if (got < 4)
            continue;
        s->calls = k;
        if (got == 5 && strcmp(word, "fail") == 0) {
            s->nfail++;
            snprintf(s->fail_name, sizeof(s->fail_name), "%s", name);
        }
    }
    fclose(f);
    unlink(path);
}

static void parse_out(const char *out, struct side *s)
{
    const char *p = strstr(out, "msg=");

    s->rc = -9999;
    if (sscanf(out, "rc=%d fds=%d maps=%d", &s->rc, &s->fds, &s->maps) != 3)
        s->rc = -9999;
    snprintf(s->msg, sizeof(s->msg), "%s", p ? p + 4 : out);
    s->msg[strcspn(s->msg, "\n")] = '\0';
}

static pid_t start(const char *scen, const char *role, const char *fail, const char *trace,
                   const char *cvd, int sock, int *pipe_out)
{
    char fe[64], te[256];
    const char *args[] = {scen, role, NULL};
    const char *env[4];
    int p[2], saved;
    pid_t pid;

    snprintf(fe, sizeof(fe), "CUCORE_SIM_FAIL=%s", fail);
    snprintf(te, sizeof(te), "CUCORE_SIM_TRACE=%s", trace);
    env[0] = fe;
    env[1] = te;
    env[2] = cvd;
    env[3] = NULL;
    CHECK(pipe2(p, O_CLOEXEC) == 0);
    fflush(stdout);
    saved = dup(1);
    CHECK(saved >= 0 && dup2(p[1], 1) == 1);
    pid = spawn_self("run", args, env, sock);
    CHECK(dup2(saved, 1) == 1);
    close(saved);
    close(p[1]);
    CHECK(pid > 0);
    *pipe_out = p[0];
    return pid;
}

static void read_all(int fd, char *out, size_t cap)
{
    size_t len = 0;

    for (;;) {
        ssize_t r = read(fd, out + len, cap - 1 - len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0 || (len += (size_t)r) == cap - 1)
            break;
    }
    out[len] = '\0';
    close(fd);
}

/* One run of scenario sc; fail[0] the exporter's spec, fail[1] the
 * importer's ("" for none). */
static void run_pair(int sc, const char *const fail[2], struct side s[2])
{
    static const char *const roles[2] = {"exporter", "importer"};
    static const char *const cvd[2] = {"CUDA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES=3,2,1,0"};
    char trace[2][96], out[2][2048];
    int sv[2], po[2];
    pid_t pid[2];

    CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) == 0);
    for (int i = 0; i < 2; i++) {
        snprintf(trace[i], sizeof(trace[i]), "/tmp/cucore-fault-%ld-%d", (long)getpid(), i);
        unlink(trace[i]);
        pid[i] = start(scen_names[sc], roles[i], fail[i], trace[i], cvd[i], sv[i], &po[i]);
    }
    close(sv[0]);
    close(sv[1]);
    for (int i = 0; i < 2; i++)
        read_all(po[i], out[i], sizeof(out[i]));
    for (int i = 0; i < 2; i++) {
        s[i].status = wait_child(pid[i]);
        parse_out(out[i], &s[i]);
        read_trace(trace[i], &s[i]);
    }
}

/* What a run ended as, for the counts. */
enum outcome { OUT_REPORTED, OUT_ABSORBED, OUT_LEAK_SAID, OUT_VOID_LEAK, OUT_N };
static const char *const outcome_names[OUT_N] = {
    "error naming the call", "absorbed (completed, data checked)",
    "error naming the call, leak said", "void teardown: driver object kept, unreported"};

/* The driver calls of the teardowns that return nothing (cuc_pool_unref,
 * cuc_vmm_unref, cuc_event_unref, cuc_stream_destroy, cuc_kernel_destroy,
 * and the VMM teardown giving the caller's context back): when one fails
 * the driver keeps its object (for pools and VMM an fd and a mapping too)
 * and no caller can be told. Known and counted, not hidden. */
static int void_teardown(const char *call)
{
    static const char *const calls[] = {"cuMemPoolDestroy", "cuMemUnmap", "cuMemRelease",
                                         "cuMemAddressFree", "cuEventDestroy",
                                         "cuStreamDestroy", "cuLibraryUnload",
                                         "cuCtxSetCurrent"};

    for (size_t i = 0; i < sizeof(calls) / sizeof(calls[0]); i++)
        if (strcmp(call, calls[i]) == 0)
            return 1;
    return 0;
}

static int bad_runs;

/* Which calls' failures were absorbed (or leaked in a void teardown), for
 * the output: a name and a count each. */
struct tally {
    char name[48];
    unsigned long long n;
};
static struct tally absorbed[64], void_leaks[16];

static void tally(struct tally *t, size_t cap, const char *name)
{
    size_t i;

    for (i = 0; i < cap && t[i].name[0] && strcmp(t[i].name, name) != 0; i++)
        ;
    if (i == cap)
        return;
    snprintf(t[i].name, sizeof(t[i].name), "%s", name);
    t[i].n++;
}

static void print_tally(const char *what, const struct tally *t, size_t cap)
{
    printf("  %s:", what);
    for (size_t i = 0; i < cap && t[i].name[0]; i++)
        printf(" %s %llu", t[i].name, t[i].n);
    printf("\n");
}

static void bad(int sc, int side, unsigned long long k, const struct side s[2],
                const char *what)
{
    bad_runs++;
    if (bad_runs > 40)
        return;
    fprintf(stderr, "FAULT %s side=%s k=%llu (%s): %s\n"
            "   exporter: status %d rc %d fds %+d maps %+d: %s\n"
            "   importer: status %d rc %d fds %+d maps %+d: %s\n",
            scen_names[sc], side ? "importer" : "exporter", k,
            s[side].fail_name[0] ? s[side].fail_name : "?", what, s[0].status, s[0].rc,
            s[0].fds, s[0].maps, s[0].msg, s[1].status, s[1].rc, s[1].fds, s[1].maps,
            s[1].msg);
}

/* Checks one run in which side's k-th call failed; returns its outcome. */
static int judge(int sc, int side, unsigned long long k, const struct side s[2])
{
    const struct side *me = &s[side], *peer = &s[!side];
    int leak_said = strstr(me->msg, "leak") != NULL;

    for (int i = 0; i < 2; i++) {
        if (s[i].status != 0)
            return bad(sc, side, k, s, "a process did not exit by status 0"), -1;
        if (s[i].rc == -9999)
            return bad(sc, side, k, s, "a process printed no result"), -1;
        if (s[i].rc == WRONG_DATA)
            return bad(sc, side, k, s, "wrong data"), -1;
        if (s[i].rc == CUC_E_TIMEOUT)
            return bad(sc, side, k, s, "a timeout: somebody was not told"), -1;
    }
    if (me->nfail != 1)
        return bad(sc, side, k, s, "the fault was not injected exactly once"), -1;
    if (peer->nfail != 0)
        return bad(sc, side, k, s, "a fault on the other side"), -1;
    if (me->rc && !strstr(me->msg, me->fail_name))
        return bad(sc, side, k, s, "the error does not name the failed call"), -1;
    if (!me->rc && !peer->rc && void_teardown(me->fail_name) && !peer->fds && !peer->maps)
        return OUT_VOID_LEAK;
    if ((me->fds || me->maps) && !(me->rc && leak_said))
        return bad(sc, side, k, s, "fds or mappings not back at the start (no leak said)"), -1;
    if (peer->fds || peer->maps)
        return bad(sc, side, k, s, "the other side's fds or mappings not back"), -1;
    if (!me->rc && peer->rc)
        return bad(sc, side, k, s, "the failure was absorbed but the peer failed"), -1;
    if (!me->rc)
        return OUT_ABSORBED;
    return leak_said ? OUT_LEAK_SAID : OUT_REPORTED;
}

/* A run in which side's k-th call and every later one failed ("*:k+"):
 * nobody crashes, hangs or sees wrong data, the failing side reports an
 * error (or finished before any call failed), and the other side, whose
 * driver works, ends with every fd and mapping back. 1 if it held. */
static int judge_persistent(int sc, int side, unsigned long long k, const struct side s[2])
{
    const struct side *me = &s[side], *peer = &s[!side];

    for (int i = 0; i < 2; i++) {
        if (s[i].status != 0)
            return bad(sc, side, k, s, "persistent: a process did not exit by status 0"), 0;
        if (s[i].rc == -9999 || s[i].rc == WRONG_DATA || s[i].rc == CUC_E_TIMEOUT)
            return bad(sc, side, k, s, "persistent: no result, wrong data or a timeout"), 0;
    }
    if (me->nfail == 0 || peer->nfail != 0)
        return bad(sc, side, k, s, "persistent: faults not where they were asked"), 0;
    if (peer->fds || peer->maps)
        return bad(sc, side, k, s, "persistent: the working side's fds or mappings not back"),
               0;
    return 1;
}

/* The "*:k+" sweep of one scenario whose sides make n[0] and n[1] calls;
 * returns its runs. */
static unsigned long long sweep_persistent(int sc, const unsigned long long n[2],
                                           unsigned long stride, unsigned long long *held)
{
    unsigned long long runs = 0;

    for (int side = 0; side < 2; side++)
        for (unsigned long long k = 1; k <= n[side]; k += stride) {
            char spec[32];
            const char *fail[2] = {"", ""};
            struct side s[2];
            snprintf(spec, sizeof(spec), "*:%llu+", k);
            fail[side] = spec;
            run_pair(sc, fail, s);
            *held += (unsigned long long)judge_persistent(sc, side, k, s);
            runs++;
        }
    return runs;
}

int main(int argc, char **argv)
{
    unsigned long long total_calls = 0, runs = 0, counts[OUT_N] = {0};
    unsigned long long p_runs = 0, p_held = 0;
    unsigned long stride = CUC_FAULT_ASAN ? 3 : 1;
    const char *st = getenv("CUC_FAULT_STRIDE");

    if (argc >= 5 && strcmp(argv[1], "--child") == 0 && strcmp(argv[2], "run") == 0)
        return child_run(argv[3], argv[4]);
    if (!test_on_sim())
        SKIP("fault injection needs the simulator (CUCORE_DRIVER=sim)");
    signal(SIGPIPE, SIG_IGN);
    if (st && atoi(st) > 0)
        stride = (unsigned long)atoi(st);
    FD_BASELINE();
    printf("fault scenarios: every driver call of each side failed in turn, once and "
           "from there on%s\n",
           stride > 1 ? "" : " (all of them)");
    if (stride > 1)
        printf("  (%s: every %luth call per side only; the plain build runs them all)\n",
               CUC_FAULT_ASAN ? "sanitizer build" : "CUC_FAULT_STRIDE", stride);
    for (int sc = 0; sc < SC_N; sc++) {
        const char *none[2] = {"", ""};
        struct side s[2];
        unsigned long long n[2], sc_runs = 0;

        run_pair(sc, none, s);
        if (s[0].status || s[1].status || s[0].rc || s[1].rc || s[0].fds || s[0].maps ||
            s[1].fds || s[1].maps || s[0].nfail || s[1].nfail) {
            bad(sc, 0, 0, s, "the run without faults did not succeed cleanly");
            continue;
        }
        n[0] = s[0].calls;
        n[1] = s[1].calls;
        CHECK(n[0] > 10 && n[1] > 10);
        for (int side = 0; side < 2; side++)
            for (unsigned long long k = 1; k <= n[side]; k += stride) {
                char spec[32];
                const char *fail[2] = {"", ""};
                int o;
                snprintf(spec, sizeof(spec), "*:%llu", k);
                fail[side] = spec;
                run_pair(sc, fail, s);
                o = judge(sc, side, k, s);
                if (o >= 0)
                    counts[o]++;
                if (o == OUT_ABSORBED && getenv("CUC_FAULT_VERBOSE"))
                    printf("absorbed: %s %s k=%llu %s\n", scen_names[sc],
                           side ? "importer" : "exporter", k, s[side].fail_name);
                if (o == OUT_ABSORBED)
                    tally(absorbed, sizeof(absorbed) / sizeof(absorbed[0]), s[side].fail_name);
                if (o == OUT_VOID_LEAK)
                    tally(void_leaks, sizeof(void_leaks) / sizeof(void_leaks[0]),
                          s[side].fail_name);
                sc_runs++;
            }
        printf("  %-14s exporter %3llu calls, importer %3llu calls: %llu runs\n",
               scen_names[sc], n[0], n[1], sc_runs);
        p_runs += sweep_persistent(sc, n, stride, &p_held);
        total_calls += n[0] + n[1];
        runs += sc_runs;
    }
    printf("total: %d scenarios x their calls x 2 sides = %llu calls, %llu runs\n", SC_N,
           total_calls, runs);
    for (int o = 0; o < OUT_N; o++)
        printf("  %-40s %llu runs\n", outcome_names[o], counts[o]);
    printf("  %-40s %d runs\n", "FAILED a check", bad_runs);
    printf("persistent faults ('*:k+', the k-th call and every later one): %llu runs, "
           "%llu held (no crash, hang or wrong data; the working side clean)\n",
           p_runs, p_held);
    print_tally("absorbed, by call", absorbed, sizeof(absorbed) / sizeof(absorbed[0]));
    print_tally("void teardowns, by call", void_leaks,
                sizeof(void_leaks) / sizeof(void_leaks[0]));
    CHECK(bad_runs == 0);
    FD_CHECK_NO_LEAK();
    return test_finish();
}
