/* Simulator: peer access. cuDeviceCanAccessPeer and CUCORE_SIM_NO_PEER;
 * cuMemPoolSetAccess / cuMemPoolGetAccess across the GPUs (grant, revoke,
 * the owner, the host, bad locations); copies and memset issued from a
 * device without access to a pool are refused, from one with access go
 * through; an importer's access is its own (exec'd children, reversed
 * visibility). What a device without access gets on real hardware was
 * not seen (one GPU there): CUDA_ERROR_INVALID_VALUE is the sim's
 * choice. */
#include "../sim/testdata/sim_test.h"

#define MiB ((size_t)1 << 20)

static CUmemoryPool make_pool(int dev, CUmemAllocationHandleType ht)
{
    CUmemPoolProps pp;
    CUmemoryPool pool;

    memset(&pp, 0, sizeof(pp));
    pp.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    pp.handleTypes = ht;
    pp.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    pp.location.id = dev;
    pp.maxSize = 4 * MiB;
    CU_OK(D.cuMemPoolCreate(&pool, &pp));
    return pool;
}

static CUresult set_access(CUmemoryPool pool, int dev, CUmemAccess_flags f)
{
    CUmemAccessDesc d;

    memset(&d, 0, sizeof(d));
    d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    d.location.id = dev;
    d.flags = f;
    return D.cuMemPoolSetAccess(pool, &d, 1);
}

static CUmemAccess_flags get_access(CUmemoryPool pool, int dev)
{
    CUmemAccess_flags f = (CUmemAccess_flags)99;
    CUmemLocation loc = {CU_MEM_LOCATION_TYPE_DEVICE, dev};

    CU_OK(D.cuMemPoolGetAccess(&f, pool, &loc));
    return f;
}

/* The access list as "0,2" (devices with read-write access). */
static const char *rw_list(CUmemoryPool pool, char *buf, size_t cap)
{
    int n = 0;

    buf[0] = '\0';
    CU_OK(D.cuDeviceGetCount(&n));
    for (int d = 0; d < n; d++)
        if (get_access(pool, d) == CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            snprintf(buf + strlen(buf), cap - strlen(buf), "%s%d", buf[0] ? "," : "", d);
    return buf;
}

static CUstream stream_on(int dev)
{
    CUcontext c;
    CUstream s;

    CU_OK(D.cuDevicePrimaryCtxRetain(&c, dev));
    CU_OK(D.cuCtxSetCurrent(c));
    CU_OK(D.cuStreamCreateWithPriority(&s, 0, 0));
    return s;
}

static void test_can_access_peer(void)
{
    int v = -1;

    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++) {
            CU_OK(D.cuDeviceCanAccessPeer(&v, a, b));
            CHECK(v == (a != b)); /* a device and itself: 0 ("canaccesspeer.0-0") */
        }
    CU_RC(D.cuDeviceCanAccessPeer(&v, 0, 4), CUDA_ERROR_INVALID_DEVICE);
    CU_RC(D.cuDeviceCanAccessPeer(NULL, 0, 1), CUDA_ERROR_INVALID_VALUE);
}

static void test_grant_revoke(void)
{
    CUmemoryPool pool = make_pool(1, CU_MEM_HANDLE_TYPE_NONE);
    CUstream s0 = stream_on(0), s1 = stream_on(1), s2 = stream_on(2);
    CUdeviceptr a, b;
    unsigned char buf[64], back[64];
    char list[32];
    unsigned int af = 9;

    memset(buf, 0x6b, sizeof(buf));
    CHECK(strcmp(rw_list(pool, list, sizeof(list)), "1") == 0);
    CU_OK(D.cuMemAllocFromPoolAsync(&a, 64, pool, s1));
    CU_OK(D.cuMemAllocFromPoolAsync(&b, 64, pool, s1));
    /* the owner's streams use it; others are refused (the sim's choice) */
    CU_OK(D.cuMemcpyHtoDAsync(a, buf, sizeof(buf), s1));
    CU_RC(D.cuMemcpyDtoHAsync(back, a, sizeof(back), s0), CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuMemsetD8Async(a, 0, 8, s2), CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuMemcpyAsync(b, a, 8, s2), CUDA_ERROR_INVALID_VALUE);
    CU_OK(D.cuCtxSetCurrent(NULL));
    {
        CUcontext c2;
        CU_OK(D.cuDevicePrimaryCtxRetain(&c2, 2));
        CU_OK(D.cuCtxSetCurrent(c2));
        CU_OK(D.cuPointerGetAttribute(&af, CU_POINTER_ATTRIBUTE_ACCESS_FLAGS, a));
        CHECK(af == CU_POINTER_ATTRIBUTE_ACCESS_FLAG_NONE);
        /* grant GPU 2: its streams use the memory */
        CU_OK(set_access(pool, 2, CU_MEM_ACCESS_FLAGS_PROT_READWRITE));
        CHECK(strcmp(rw_list(pool, list, sizeof(list)), "1,2") == 0);
        CU_OK(D.cuPointerGetAttribute(&af, CU_POINTER_ATTRIBUTE_ACCESS_FLAGS, a));
        CHECK(af == CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE);
        CU_OK(D.cuMemcpyDtoHAsync(back, a, sizeof(back), s2));
        CHECK(memcmp(back, buf, sizeof(buf)) == 0);
        CU_OK(D.cuMemsetD8Async(a, 0x01, 1, s2));
        CU_OK(D.cuMemcpyAsync(b, a, 64, s2));
        CU_RC(D.cuMemcpyDtoHAsync(back, a, sizeof(back), s0), CUDA_ERROR_INVALID_VALUE);
        /* revoke: refused again; the owner keeps its access */
        CU_OK(set_access(pool, 2, CU_MEM_ACCESS_FLAGS_PROT_NONE));
        CU_RC(D.cuMemcpyDtoHAsync(back, a, sizeof(back), s2), CUDA_ERROR_INVALID_VALUE);
        CU_RC(set_access(pool, 1, CU_MEM_ACCESS_FLAGS_PROT_NONE), CUDA_ERROR_INVALID_DEVICE);
        CHECK(strcmp(rw_list(pool, list, sizeof(list)), "1") == 0);
        CU_OK(D.cuDevicePrimaryCtxRelease(2));
    }
    CU_OK(D.cuMemcpyDtoHAsync(back, b, sizeof(back), s1));
    CHECK(back[0] == 0x01 && back[1] == 0x6b);
    /* several descriptors in one call are all or nothing */
    {
        CUmemAccessDesc d[3];
        memset(d, 0, sizeof(d));
        for (int i = 0; i < 3; i++) {
            d[i].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
            d[i].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        }
        d[0].location.id = 0;
        d[1].location.id = 3;
        d[2].location.id = 7; /* no such device */
        CU_RC(D.cuMemPoolSetAccess(pool, d, 3), CUDA_ERROR_INVALID_DEVICE);
        CHECK(strcmp(rw_list(pool, list, sizeof(list)), "1") == 0);
        CU_OK(D.cuMemPoolSetAccess(pool, d, 2));
        CHECK(strcmp(rw_list(pool, list, sizeof(list)), "0,1,3") == 0);
    }
    CU_OK(D.cuMemcpyDtoHAsync(back, a, 8, s0));
    CU_OK(D.cuMemFreeAsync(a, s1));
    CU_OK(D.cuMemFreeAsync(b, s0)); /* freeing is not an access */
    CU_OK(D.cuMemPoolDestroy(pool));
    CU_OK(D.cuCtxSetCurrent(NULL));
    for (int d = 0; d < 3; d++) {
        CUcontext c;
        CU_OK(D.cuDevicePrimaryCtxRetain(&c, d));
        CU_OK(D.cuCtxSetCurrent(c));
        CU_OK(D.cuStreamDestroy(d == 0 ? s0 : d == 1 ? s1 : s2));
        CU_OK(D.cuDevicePrimaryCtxRelease(d)); /* this retain */
        CU_OK(D.cuDevicePrimaryCtxRelease(d)); /* stream_on's */
    }
    {
        CUcontext c;
        CU_OK(D.cuDevicePrimaryCtxRetain(&c, 0));
        CU_OK(D.cuCtxSetCurrent(c));
    }
}

/* A pinned host pool is not checked: every device copies to and from it
 * (not modelled further). */
static void test_host_pool(void)
{
    CUmemPoolProps pp;
    CUmemoryPool pool;
    CUdeviceptr h;
    CUstream s3 = stream_on(3);
    unsigned char c = 0;

    memset(&pp, 0, sizeof(pp));
    pp.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    pp.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
    pp.location.id = 0;
    pp.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    pp.maxSize = 2 * MiB;
    CU_OK(D.cuMemPoolCreate(&pool, &pp));
    CU_OK(D.cuMemAllocFromPoolAsync(&h, 16, pool, s3));
    CU_OK(D.cuMemsetD8Async(h, 0x77, 16, s3));
    CU_OK(D.cuMemcpyDtoHAsync(&c, h + 3, 1, s3));
    CHECK(c == 0x77);
    CU_OK(D.cuMemFreeAsync(h, s3));
    CU_OK(D.cuMemPoolDestroy(pool));
    CU_OK(D.cuStreamDestroy(s3));
    CU_OK(D.cuDevicePrimaryCtxRelease(3));
    {
        CUcontext c0;
        CU_OK(D.cuDevicePrimaryCtxRetain(&c0, 0));
        CU_OK(D.cuCtxSetCurrent(c0));
        CU_OK(D.cuDevicePrimaryCtxRelease(0));
    }
}

/* ---- CUCORE_SIM_NO_PEER, in children ----------------------------------------- */

static int child_nopeer(void)
{
    CUmemoryPool pool;
    int v01 = -1, v10 = -1, v02 = -1, v23 = -1;
    CUresult r1, r2;

    sim_t_init_ctx(0);
    CU_OK(D.cuDeviceCanAccessPeer(&v01, 0, 1));
    CU_OK(D.cuDeviceCanAccessPeer(&v10, 1, 0));
    CU_OK(D.cuDeviceCanAccessPeer(&v02, 0, 2));
    CU_OK(D.cuDeviceCanAccessPeer(&v23, 2, 3));
    pool = make_pool(0, CU_MEM_HANDLE_TYPE_NONE);
    /* a GPU that cannot reach the owner is refused access (guess) */
    r1 = set_access(pool, 1, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    r2 = set_access(pool, 2, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    sim_t_report("%d%d%d%d %s %s", v01, v10, v02, v23, sim_t_errname(r1),
                 sim_t_errname(r2));
    CU_OK(D.cuMemPoolDestroy(pool));
    return 0;
}

static int child_init_rc(void)
{
    sim_t_load();
    sim_t_report("%s", sim_t_errname(D.cuInit(0)));
    return 0;
}

static void test_no_peer_knob(void)
{
    char out[256];
    /* physical GPUs 1 and 2 cannot reach each other; under "2,1,0,3"
     * they are local 0 and 1 */
    const char *e1[] = {"CUCORE_SIM_NO_PEER=1-2", "CUDA_VISIBLE_DEVICES=2,1,0,3", NULL};
    const char *e2[] = {"CUCORE_SIM_NO_PEER=0-3,2-3", NULL};
    static const char *const bad[] = {"CUCORE_SIM_NO_PEER=1-1", "CUCORE_SIM_NO_PEER=0-4",
                                      "CUCORE_SIM_NO_PEER=x", "CUCORE_SIM_NO_PEER=0-1,",
                                      "CUCORE_SIM_NO_PEER=0-"};

    CHECK(sim_t_run("nopeer", NULL, e1, out, sizeof(out)) == 0);
    CHECK(strcmp(out, "0011 CUDA_ERROR_INVALID_DEVICE CUDA_SUCCESS") == 0);
    CHECK(sim_t_run("nopeer", NULL, e2, out, sizeof(out)) == 0);
    CHECK(strcmp(out, "1110 CUDA_SUCCESS CUDA_SUCCESS") == 0);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        const char *e[] = {bad[i], NULL};
        CHECK(sim_t_run("init", NULL, e, out, sizeof(out)) == 0);
        if (strcmp(out, "CUDA_ERROR_INVALID_VALUE") != 0) {
            fprintf(stderr, "%s: cuInit said %s\n", bad[i], out);
            exit(1);
        }
    }
}

/* ---- an importer's access is its own --------------------------------------------- */

/* Child: imports the pool and pointer it is sent (as GPU 0 current),
 * reports its own access list, what a copy from each device gives before
 * and after it grants that device access, and writes a reply. */
static int child_importer(void)
{
    int sock = sim_t_child_fd(), fd = -1, n = 0;
    CUmemPoolPtrExportData data;
    CUmemoryPool pool;
    CUdeviceptr p;
    char list[32];
    CUstream s[4];

    CHECK(sock >= 0);
    FD_BASELINE();
    sim_t_init_ctx(0);
    CU_OK(D.cuDeviceGetCount(&n));
    for (int d = 0; d < n; d++)
        s[d] = stream_on(d);
    CHECK(sim_t_recv(sock, &data, sizeof(data), &fd, 1) == 1);
    CU_OK(D.cuMemPoolImportFromShareableHandle(&pool, (void *)(uintptr_t)fd,
                                               CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    close(fd);
    CU_OK(D.cuMemPoolImportPointer(&p, pool, &data));
    sim_t_report("own=%s", rw_list(pool, list, sizeof(list)));
    for (int d = 0; d < n; d++) {
        unsigned char c = 0;
        CUresult before = D.cuMemcpyDtoHAsync(&c, p, 1, s[d]), after;
        CU_OK(set_access(pool, d, CU_MEM_ACCESS_FLAGS_PROT_READWRITE));
        after = D.cuMemcpyDtoHAsync(&c, p, 1, s[d]);
        sim_t_report(" %d:%d%d:%02x", d, before == CUDA_SUCCESS, after == CUDA_SUCCESS, c);
    }
    CU_OK(D.cuMemsetD8Async(p + 1, 0xcd, 1, s[n - 1]));
    CU_OK(D.cuMemFreeAsync(p, NULL));
    CU_OK(D.cuMemPoolDestroy(pool));
    for (int d = 0; d < n; d++) {
        CU_OK(D.cuStreamDestroy(s[d]));
        CU_OK(D.cuDevicePrimaryCtxRelease(d));
    }
    CU_OK(D.cuDevicePrimaryCtxRelease(0));
    FD_CHECK_NO_LEAK();
    return 0;
}

static void import_in_child(int pool_fd, CUdeviceptr p, const char *cvd, const char *want)
{
    CUmemPoolPtrExportData data;
    char ev[64], out[256];
    const char *env[] = {ev, NULL};
    int sv[2];
    size_t len = 0;
    pid_t pid;

    CU_OK(D.cuMemPoolExportPointer(&data, p));
    snprintf(ev, sizeof(ev), "CUDA_VISIBLE_DEVICES=%s", cvd);
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    pid = spawn_self("importer", NULL, env, sv[1]);
    CHECK(pid > 0);
    close(sv[1]);
    sim_t_send(sv[0], &data, sizeof(data), &pool_fd, 1);
    for (;;) {
        ssize_t r = read(sv[0], out + len, sizeof(out) - 1 - len);
        if (r <= 0)
            break;
        len += (size_t)r;
    }
    out[len] = '\0';
    close(sv[0]);
    CHECK(wait_child(pid) == 0);
    if (strcmp(out, want) != 0) {
        fprintf(stderr, "importer (CVD %s) said '%s', wanted '%s'\n", cvd, out, want);
        exit(1);
    }
}

static void test_importer_access(void)
{
    CUmemoryPool pool;
    CUdeviceptr p;
    CUstream s1 = stream_on(1);
    char list[32];
    unsigned char c[2];
    int fd;

    pool = make_pool(1, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    CU_OK(set_access(pool, 3, CU_MEM_ACCESS_FLAGS_PROT_READWRITE));
    CU_OK(D.cuMemPoolExportToShareableHandle(&fd, pool,
                                             CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    CU_OK(D.cuMemAllocFromPoolAsync(&p, 256, pool, s1));
    CU_OK(D.cuMemsetD8Async(p, 0x99, 2, s1));
    /* The exporter's grant of GPU 3 does not travel: the importer starts
     * with the owner alone (physical GPU 1: local 1, or 2 under 3,2,1,0),
     * copies from the others' streams fail until it grants them. */
    import_in_child(fd, p, "0,1,2,3", "own=1 0:01:99 1:11:99 2:01:99 3:01:99");
    import_in_child(fd, p, "3,2,1,0", "own=2 0:01:99 1:01:99 2:11:99 3:01:99");
    /* and its grants stay there */
    CHECK(strcmp(rw_list(pool, list, sizeof(list)), "1,3") == 0);
    CU_OK(D.cuMemcpyDtoHAsync(c, p, 2, s1));
    CHECK(c[0] == 0x99 && c[1] == 0xcd); /* the importer's reply */
    CU_OK(D.cuMemFreeAsync(p, s1));
    CU_OK(D.cuMemPoolDestroy(pool));
    close(fd);
    CU_OK(D.cuStreamDestroy(s1));
    CU_OK(D.cuDevicePrimaryCtxRelease(1));
}

int main(int argc, char **argv)
{
    if (argc >= 3 && strcmp(argv[1], "--child") == 0) {
        if (strcmp(argv[2], "nopeer") == 0)
            return child_nopeer();
        if (strcmp(argv[2], "init") == 0)
            return child_init_rc();
        if (strcmp(argv[2], "importer") == 0)
            return child_importer();
        return 2;
    }
    sim_t_clean_env();
    FD_BASELINE();
    sim_t_init_ctx(0);
    test_can_access_peer();
    test_grant_revoke();
    test_host_pool();
    test_no_peer_knob();
    test_importer_access();
    CU_OK(D.cuDevicePrimaryCtxRelease(0));
    FD_CHECK_NO_LEAK();
    return test_finish();
}
