/* Memory another allocator owns, adopted (cuc_buffer_adopt, cuc_pool_adopt,
 * cuc_vmm_adopt) and sent to an exec'd child whose CUDA_VISIBLE_DEVICES
 * reverses the parent's, through a channel and through the share point
 * (cuc_share_detach / cuc_share_attach):
 *  - the objects: two parts of a cuMemAlloc allocation (legacy IPC), a
 *    framework's IPC pool (adopted, its pool record sent) and its
 *    allocation whole and a part of it, and two chunks of an expandable
 *    segment adopted from a pointer inside the first;
 *  - the child checks each by its bytes and its device's UUID, that the
 *    parts of one allocation share one import, what the driver says the
 *    imported memory is there (opened by legacy IPC; an imported pool's),
 *    and writes new bytes, which the parent reads from its own pointers;
 *  - releases: the parent drops its references right after sending; no
 *    release runs while the child maps the memory (checked once the child
 *    says so), and each runs exactly once after the child let go; then
 *    the parent frees the memory itself, as its owner. */
#include <pthread.h>
#include <signal.h>

#include "adopt_test.h"
#include "channel_test.h"
#include "share_test.h"
#include "memory/buffer.h"

#define KiB ((size_t)1 << 10)
#define WAIT_MS 30000
#define NBUF 4

enum { C_LEGACY, C_POOL, C_VMM, N_COUNTS };

/* The parent's memory, as its owner made it. */
struct owned {
    cuc_device *d0, *dn; /* legacy and VMM memory on d0, the pool on dn */
    CUdeviceptr legacy;  /* 256 KiB of cuMemAlloc */
    CUmemoryPool pool_cu;
    CUdeviceptr pool_mem; /* 128 KiB of it */
    struct at_segment seg; /* 3 chunks */
};

/* Where each part lies and the seed of the whole it is in. */
static const size_t legacy_size = 256 * KiB, pool_size = 128 * KiB;
static const size_t l1_off = 16 * KiB, l1_size = 64 * KiB, l2_off = 128 * KiB,
                    l2_size = 32 * KiB, p1_off = 4096, p1_size = 10000;

static uint64_t seed_of(int phase, int what)
{
    return 7907ull * (uint64_t)phase + (uint64_t)what + 1;
}

/* ---- the parent's memory and what it adopts ---- */

static void owned_make(struct owned *o, int phase)
{
    o->d0 = devs[0];
    o->dn = devs[n_dev - 1];
    CHECK_OK(cuc_device_set_current(o->d0));
    CHECK(CUC_DRV->cuMemAlloc(&o->legacy, legacy_size) == CUDA_SUCCESS);
    o->pool_cu = at_raw_pool(o->dn, 0, 1);
    o->pool_mem = at_pool_alloc(o->dn, o->pool_cu, pool_size);
    at_segment_make(o->d0, 3, NULL, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, NULL, &o->seg);
    at_fill(o->d0, o->legacy, legacy_size, seed_of(phase, C_LEGACY));
    at_fill(o->dn, o->pool_mem, pool_size, seed_of(phase, C_POOL));
    at_fill(o->d0, o->seg.base, 3 * o->seg.chunk, seed_of(phase, C_VMM));
}

/* The owner frees its memory (after every release ran). */
static void owned_free(struct owned *o)
{
    CHECK_OK(cuc_device_set_current(o->d0));
    CHECK(CUC_DRV->cuMemFree(o->legacy) == CUDA_SUCCESS);
    at_pool_free(o->dn, o->pool_mem);
    CHECK(CUC_DRV->cuMemPoolDestroy(o->pool_cu) == CUDA_SUCCESS);
    at_segment_free(o->d0, &o->seg);
}

struct adopted {
    cuc_pool *pool;
    cuc_buffer *b[NBUF]; /* legacy parts 1 and 2, the pool allocation, its part */
    cuc_vmm *vmm;
    struct at_count counts[N_COUNTS];
};

static void adopt_all(const struct owned *o, struct adopted *a)
{
    size_t off = 0;

    memset(a, 0, sizeof(*a));
    CHECK_OK(cuc_buffer_adopt(o->d0, (void *)(uintptr_t)(o->legacy + l1_off), l1_size,
                              at_release, &a->counts[C_LEGACY], &a->b[0]));
    CHECK_OK(cuc_buffer_adopt(o->d0, (void *)(uintptr_t)(o->legacy + l2_off), l2_size, NULL,
                              NULL, &a->b[1]));
    CHECK_OK(cuc_buffer_adopt(o->dn, (void *)(uintptr_t)o->pool_mem, pool_size, at_release,
                              &a->counts[C_POOL], &a->b[2]));
    CHECK_OK(cuc_buffer_adopt(o->dn, (void *)(uintptr_t)(o->pool_mem + p1_off), p1_size, NULL,
                              NULL, &a->b[3]));
    a->pool = cuc_pool_ref(cuc_buffer_pool(a->b[2]));
    CHECK(cuc_pool_is_adopted(a->pool));
    CHECK_OK(cuc_vmm_adopt(o->d0, (void *)(uintptr_t)(o->seg.base + o->seg.chunk / 2),
                           o->seg.chunk, at_release, &a->counts[C_VMM], &a->vmm, &off));
    CHECK(off == o->seg.chunk / 2 && cuc_vmm_chunk_count(a->vmm) == 2);
}

static cuc_msg *adopted_msg(const struct adopted *a, int with_pool)
{
    cuc_msg *m;

    CHECK_OK(cuc_msg_create(&m));
    if (with_pool)
        CHECK_OK(cuc_msg_add_pool(m, a->pool));
    for (int i = 0; i < NBUF; i++)
        CHECK_OK(cuc_msg_add_buffer(m, a->b[i]));
    CHECK_OK(cuc_msg_add_vmm(m, a->vmm));
    return m;
}

/* The parent's references go at once: the leases keep the memory. */
static void drop_adopted(struct adopted *a)
{
    for (int i = 0; i < NBUF; i++)
        CHECK_OK(cuc_buffer_unref_async(a->b[i], NULL));
    cuc_vmm_unref(a->vmm);
    cuc_pool_unref(a->pool);
    for (int k = 0; k < N_COUNTS; k++)
        CHECK(at_calls(&a->counts[k]) == 0);
}

static int releases_done(struct adopted *a)
{
    for (int k = 0; k < N_COUNTS; k++)
        if (at_calls(&a->counts[k]) != 1)
            return 0;
    return 1;
}

/* What the child wrote back, read from the owner's own pointers. */
static void check_written(const struct owned *o, int phase)
{
    EXPECT(at_holds(o->d0, (void *)(uintptr_t)(o->legacy + l2_off), l2_size,
                    seed_of(phase + 100, C_LEGACY)));
    EXPECT(at_holds(o->dn, (void *)(uintptr_t)(o->pool_mem + p1_off), p1_size,
                    seed_of(phase + 100, C_POOL)));
    EXPECT(at_holds(o->d0, (void *)(uintptr_t)o->seg.base, 2 * o->seg.chunk,
                    seed_of(phase + 100, C_VMM)));
    /* and what it did not touch is the parent's still */
    EXPECT(at_holds_at(o->d0, (void *)(uintptr_t)(o->seg.base + 2 * o->seg.chunk),
                       o->seg.chunk, seed_of(phase, C_VMM), 2 * o->seg.chunk));
}

/* ---- the child: the same checks for both transports ---- */

struct got {
    cuc_pool *pool;
    cuc_buffer *b[NBUF];
    cuc_vmm *vmm;
};

static void expect_uuid(cuc_device *d, const char *uuid, const char *what)
{
    if (strcmp(cuc_device_uuid_string(d), uuid) != 0) {
        fprintf(stderr, "child: the %s arrived on %s, want %s\n", what,
                cuc_device_uuid_string(d), uuid);
        exit(1);
    }
}

/* Records first.. of m: the four buffers and the VMM resource. */
static void child_take(const cuc_msg *m, size_t first, const char *uuid0, const char *uuidn,
                       int phase, struct got *g)
{
    int kind = -1;
    cuc_device *d;

    CHECK_OK(cuc_msg_get_buffers(m, first, NBUF, g->b));
    CHECK_OK(cuc_msg_get_vmm(m, first + NBUF, &g->vmm));
    expect_uuid(cuc_buffer_device(g->b[0]), uuid0, "legacy part");
    expect_uuid(cuc_buffer_device(g->b[2]), uuidn, "pool allocation");
    expect_uuid(cuc_vmm_device(g->vmm), uuid0, "VMM resource");
    CHECK(cuc_buffer_is_imported(g->b[0]) && cuc_buffer_is_wrapped(g->b[0]));
    /* parts of one allocation: one import */
    CHECK(cuc_buffer_is_view(g->b[0]) && cuc_buffer_is_view(g->b[1]));
    CHECK(g->b[0]->root == g->b[1]->root);
    CHECK((char *)cuc_buffer_ptr(g->b[1]) - (char *)cuc_buffer_ptr(g->b[0]) ==
          (ptrdiff_t)(l2_off - l1_off));
    CHECK(!cuc_buffer_is_view(g->b[2]) && g->b[3]->root == g->b[2]);
    CHECK(cuc_pool_is_imported(cuc_buffer_pool(g->b[2])));
    /* the bytes */
    EXPECT(at_holds_at(cuc_buffer_device(g->b[0]), cuc_buffer_ptr(g->b[0]), l1_size,
                       seed_of(phase, C_LEGACY), l1_off));
    EXPECT(at_holds_at(cuc_buffer_device(g->b[1]), cuc_buffer_ptr(g->b[1]), l2_size,
                       seed_of(phase, C_LEGACY), l2_off));
    EXPECT(at_holds(cuc_buffer_device(g->b[2]), cuc_buffer_ptr(g->b[2]), pool_size,
                    seed_of(phase, C_POOL)));
    EXPECT(at_holds_at(cuc_buffer_device(g->b[3]), cuc_buffer_ptr(g->b[3]), p1_size,
                       seed_of(phase, C_POOL), p1_off));
    EXPECT(at_holds(cuc_vmm_device(g->vmm), cuc_vmm_ptr(g->vmm), cuc_vmm_size(g->vmm),
                    seed_of(phase, C_VMM)));
    /* what the memory is here */
    CHECK_OK(cuc_memory_kind(cuc_buffer_ptr(g->b[0]), &kind, &d));
    CHECK(kind == CUC_MEMORY_IPC_OPENED);
    CHECK_OK(cuc_memory_kind(cuc_buffer_ptr(g->b[3]), &kind, &d));
    CHECK(kind == CUC_MEMORY_POOL && d == cuc_buffer_device(g->b[3]));
    /* new bytes, for the parent to read */
    at_fill(cuc_buffer_device(g->b[1]), (CUdeviceptr)(uintptr_t)cuc_buffer_ptr(g->b[1]), l2_size,
            seed_of(phase + 100, C_LEGACY));
    at_fill(cuc_buffer_device(g->b[3]), (CUdeviceptr)(uintptr_t)cuc_buffer_ptr(g->b[3]),
            p1_size, seed_of(phase + 100, C_POOL));
    at_fill(cuc_vmm_device(g->vmm), (CUdeviceptr)(uintptr_t)cuc_vmm_ptr(g->vmm),
            cuc_vmm_size(g->vmm), seed_of(phase + 100, C_VMM));
}

static void child_drop(struct got *g)
{
    for (int i = 0; i < NBUF; i++)
        CHECK_OK(cuc_buffer_unref_async(g->b[i], NULL));
    cuc_vmm_unref(g->vmm);
    cuc_pool_unref(g->pool);
}

/* args: UUID of parent device 0, UUID of its last device, phase. */
static int child_channel(int argc, char **argv)
{
    cuc_channel *ch = ct_child_channel();
    struct got g;
    cuc_msg *m;

    CHECK(argc == 3);
    m = ct_recv(ch);
    CHECK(cuc_msg_record_count(m) == 2 + NBUF);
    CHECK_OK(cuc_msg_get_pool(m, 0, &g.pool));
    expect_uuid(cuc_pool_device(g.pool), argv[1], "pool");
    child_take(m, 1, argv[0], argv[1], atoi(argv[2]), &g);
    cuc_msg_destroy(m);
    ct_send_empty(ch); /* mapped, and written */
    ct_wait_empty(ch); /* the parent checked that nothing was released */
    child_drop(&g);
    ct_wait_empty(ch); /* the parent saw the releases */
    cuc_channel_destroy(ch);
    return test_finish();
}

/* share_test.h's child: args parent device 0's UUID, phase, mode; the
 * bytes then the last device's UUID as blobs on stdin; "go" on stdin
 * once the parent checked. */
static int child_share(int argc, char **argv)
{
    char *uuidn, line[16];
    struct got g = {0};
    size_t len, ulen;
    cuc_msg *m;
    void *bytes;

    CHECK(argc == 3);
    bytes = get_blob(0, &len);
    uuidn = get_blob(0, &ulen);
    CHECK(bytes && uuidn && ulen > 0 && uuidn[ulen - 1] == '\0');
    CHECK_OK(cuc_share_attach(bytes, len, &m));
    free(bytes);
    CHECK(cuc_msg_record_count(m) == 1 + NBUF);
    child_take(m, 0, argv[0], uuidn, atoi(argv[1]), &g);
    cuc_msg_destroy(m);
    free(uuidn);
    printf("ok\n");
    fflush(stdout);
    CHECK(read(0, line, 2) == 2 && !memcmp(line, "go", 2));
    child_drop(&g);
    return test_finish();
}

/* ---- the parent's scenarios ---- */

static void scenario_channel(int phase)
{
    char cvd[256], ph[16];
    const char *args[] = {cuc_device_uuid_string(devs[0]),
                          cuc_device_uuid_string(devs[n_dev - 1]), ph, NULL};
    struct adopted a;
    struct owned o;
    cuc_channel *ch;
    cuc_msg *m;
    pid_t pid;

    pt_child_cvd(cvd, sizeof(cvd));
    snprintf(ph, sizeof(ph), "%d", phase);
    owned_make(&o, phase);
    adopt_all(&o, &a);
    ch = ct_start("channel", args, cvd, &pid);
    m = adopted_msg(&a, 1);
    CHECK_OK(cuc_channel_send(ch, m));
    cuc_msg_destroy(m);
    drop_adopted(&a);
    ct_wait_empty(ch); /* the child maps everything */
    CHECK(!releases_done(&a));
    for (int k = 0; k < N_COUNTS; k++)
        CHECK(at_calls(&a.counts[k]) == 0); /* none while the child maps it */
    check_written(&o, phase);
    ct_send_empty(ch);
    CHECK_OK(cuc_channel_lease_wait(ch, 0, WAIT_MS)); /* the child's releases */
    CHECK(releases_done(&a));
    ct_send_empty(ch);
    CHECK(wait_child(pid) == 0);
    cuc_channel_destroy(ch);
    CHECK(releases_done(&a)); /* once each */
    owned_free(&o);
    printf("channel (phase %d): ok\n", phase);
}

static void scenario_share(int phase)
{
    const char *uuidn = cuc_device_uuid_string(devs[n_dev - 1]);
    struct adopted a;
    struct owned o;
    size_t len;
    void *bytes;
    cuc_msg *m;
    FILE *from;
    pid_t pid;
    int to;

    owned_make(&o, phase);
    adopt_all(&o, &a);
    m = adopted_msg(&a, 0);
    CHECK_OK(cuc_share_detach(m, &bytes, &len));
    cuc_msg_destroy(m);
    drop_adopted(&a);
    pid = start_child(NULL, "share", phase, 0, &to, &from);
    put_blob(to, bytes, len);
    put_blob(to, uuidn, strlen(uuidn) + 1);
    free(bytes);
    expect_line(from, "ok"); /* the child maps everything */
    for (int k = 0; k < N_COUNTS; k++)
        CHECK(at_calls(&a.counts[k]) == 0); /* none while the child maps it */
    check_written(&o, phase);
    write_all(to, "go", 2);
    close(to);
    fclose(from);
    CHECK(wait_child(pid) == 0);
    /* the share point's thread ends the leases as the releases come */
    for (int i = 0; i < WAIT_MS / 10 && !releases_done(&a); i++)
        usleep(10000);
    CHECK(releases_done(&a));
    usleep(20000);
    CHECK(releases_done(&a)); /* once each */
    owned_free(&o);
    printf("share (phase %d): ok\n", phase);
}

int main(int argc, char **argv)
{
    int fds0;

    if (argc >= 3 && strcmp(argv[1], "--child") == 0) {
        open_all();
        if (strcmp(argv[2], "channel") == 0)
            return child_channel(argc - 3, argv + 3);
        if (strcmp(argv[2], "share") == 0)
            return child_share(argc - 3, argv + 3);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    private_share_dir();
    pt_start(CUC_DEVICE_CAP_MEMORY_POOLS | CUC_DEVICE_CAP_POOL_POSIX_FD | CUC_DEVICE_CAP_VMM |
                 CUC_DEVICE_CAP_VMM_POSIX_FD, "lacks IPC pools or VMM");
    fds0 = test_fd_count();
    scenario_channel(1);
    CHECK_OK(cuc_share_start(NULL));
    scenario_share(2);
    CHECK_OK(cuc_share_stop(WAIT_MS));
    EXPECT(test_fd_count() == fds0);
    return test_finish();
}
