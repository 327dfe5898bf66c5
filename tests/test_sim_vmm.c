/* Simulator: virtual memory management — granularity, create/export/
 * import, reserve/map/unmap, per-device access, release while mapped, a
 * mapping past the end of its reservation (as the driver allows:
 * sim/FACTS.md F40),
 * the handle behind an address (cuMemRetainAllocationHandle, counted;
 * cuMemGetAllocationPropertiesFromHandle), and two chunks crossing to an
 * exec'd child that maps them contiguously. */
#include "../sim/testdata/sim_test.h"

#include <sys/mman.h>

#define MiB ((size_t)1 << 20)
#define GRAN (2 * MiB)

static CUmemAllocationProp prop_dev(int dev, CUmemAllocationHandleType ht)
{
    CUmemAllocationProp p;

    memset(&p, 0, sizeof(p));
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.requestedHandleTypes = ht;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = dev;
    return p;
}

static CUmemAccessDesc desc(int dev, CUmemAccess_flags f)
{
    CUmemAccessDesc d;

    memset(&d, 0, sizeof(d));
    d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    d.location.id = dev;
    d.flags = f;
    return d;
}

static unsigned long long access_of(CUdeviceptr p, int dev)
{
    unsigned long long f = 0xdead;
    CUmemLocation loc = {CU_MEM_LOCATION_TYPE_DEVICE, dev};

    CU_OK(D.cuMemGetAccess(&f, &loc, p));
    return f;
}

static void test_granularity_create(void)
{
    CUmemAllocationProp p = prop_dev(0, CU_MEM_HANDLE_TYPE_NONE);
    CUmemGenericAllocationHandle h;
    size_t g = 0;
    int fd;

    CU_OK(D.cuMemGetAllocationGranularity(&g, &p,
                                          CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    CHECK(g == GRAN);
    g = 0;
    CU_OK(D.cuMemGetAllocationGranularity(&g, &p,
                                          CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    CHECK(g == GRAN);
    CU_RC(D.cuMemGetAllocationGranularity(&g, &p,
                                          (CUmemAllocationGranularity_flags)5),
          CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuMemGetAllocationGranularity(NULL, &p, 0),
          CUDA_ERROR_INVALID_VALUE);
    p.location.id = 4;
    CU_RC(D.cuMemGetAllocationGranularity(&g, &p, 0),
          CUDA_ERROR_INVALID_DEVICE);

    p = prop_dev(0, CU_MEM_HANDLE_TYPE_NONE);
    CU_RC(D.cuMemCreate(&h, MiB, &p, 0), CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuMemCreate(&h, 0, &p, 0), CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuMemCreate(&h, GRAN, &p, 1), CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuMemCreate(NULL, GRAN, &p, 0), CUDA_ERROR_INVALID_VALUE);
    p.type = CU_MEM_ALLOCATION_TYPE_INVALID;
    CU_RC(D.cuMemCreate(&h, GRAN, &p, 0), CUDA_ERROR_INVALID_VALUE);
    p = prop_dev(7, CU_MEM_HANDLE_TYPE_NONE);
    CU_RC(D.cuMemCreate(&h, GRAN, &p, 0), CUDA_ERROR_INVALID_DEVICE);
    p = prop_dev(0, CU_MEM_HANDLE_TYPE_FABRIC); /* sim/FACTS.md F22 */
    CU_RC(D.cuMemCreate(&h, GRAN, &p, 0), CUDA_ERROR_NOT_PERMITTED);

    /* no POSIX handle type requested: no export */
    p = prop_dev(0, CU_MEM_HANDLE_TYPE_NONE);
    CU_OK(D.cuMemCreate(&h, GRAN, &p, 0));
    CU_RC(D.cuMemExportToShareableHandle(
              &fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
          CUDA_ERROR_INVALID_VALUE);
    CU_OK(D.cuMemRelease(h));
    CU_RC(D.cuMemRelease(h), CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuMemRelease(0), CUDA_ERROR_INVALID_VALUE);
}

static void test_local(void)
{
    CUmemAllocationProp p = prop_dev(1, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    CUmemGenericAllocationHandle ha, hb, hi;
    CUdeviceptr base, other;
    CUmemAccessDesc d[3];
    unsigned char buf[64], back[64];
    int fd1, fd2, fds0 = test_fd_count();

    CU_OK(D.cuMemCreate(&ha, GRAN, &p, 0));
    CU_OK(D.cuMemCreate(&hb, 2 * GRAN, &p, 0));
    CHECK(ha != hb && ha != 0);
    CHECK(test_fd_count() == fds0 + 2);
    CU_OK(D.cuMemExportToShareableHandle(
        &fd1, ha, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    CU_OK(D.cuMemExportToShareableHandle(
        &fd2, ha, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    /* close-on-exec, unlike the driver's pool fds (sim/FACTS.md F41,
     * F23) */
    CHECK(fd1 != fd2 && sim_t_is_cloexec(fd1) && sim_t_is_cloexec(fd2));
    CU_RC(D.cuMemExportToShareableHandle(&fd2, ha, CU_MEM_HANDLE_TYPE_FABRIC, 0),
          CUDA_ERROR_INVALID_VALUE);
    close(fd2);

    /* reserve: aligned to the granularity at least */
    CU_RC(D.cuMemAddressReserve(&base, 8 * MiB, 3, 0, 0),
          CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuMemAddressReserve(&base, 100, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuMemAddressReserve(&base, 65536, 0, 0, 0),
          CUDA_ERROR_INVALID_VALUE); /* whole granules only, as the driver */
    CU_RC(D.cuMemAddressReserve(&base, 8 * MiB, 0, 0, 1),
          CUDA_ERROR_INVALID_VALUE);
    CU_OK(D.cuMemAddressReserve(&other, 4 * MiB, 16 * MiB, 0, 0));
    CHECK(other % (16 * MiB) == 0);
    CU_OK(D.cuMemAddressReserve(&base, 8 * MiB, 0, 0, 0));
    CHECK(base % GRAN == 0);

    /* map a, then b right after it; the driver's answers: an offset, part
     * of an allocation or an overlap are CUDA_ERROR_NOT_SUPPORTED */
    CU_RC(D.cuMemMap(base, GRAN, GRAN, ha, 0), CUDA_ERROR_NOT_SUPPORTED);
    CU_RC(D.cuMemMap(base + 4096, GRAN, 0, ha, 0), CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuMemMap(base, 2 * GRAN, 0, ha, 0), CUDA_ERROR_NOT_SUPPORTED);
    CU_RC(D.cuMemMap(base, GRAN, 0, hb, 0), CUDA_ERROR_NOT_SUPPORTED);
    CU_RC(D.cuMemMap(base + 4 * GRAN, 2 * GRAN, 0, hb, 0),
          CUDA_ERROR_INVALID_VALUE); /* starts past the reservation */
    CU_OK(D.cuMemMap(base, GRAN, 0, ha, 0));
    CU_RC(D.cuMemMap(base, 2 * GRAN, 0, hb, 0), CUDA_ERROR_NOT_SUPPORTED);
    CU_OK(D.cuMemMap(base + GRAN, 2 * GRAN, 0, hb, 0));
    CU_RC(D.cuMemMap(base + 2 * GRAN, GRAN, 0, ha, 0),
          CUDA_ERROR_NOT_SUPPORTED); /* overlaps b */

    /* mapped but no access yet */
    CHECK(access_of(base, 1) == CU_MEM_ACCESS_FLAGS_PROT_NONE);
    memset(buf, 0x42, sizeof(buf));
    CU_RC(D.cuMemcpyHtoDAsync(base, buf, sizeof(buf), NULL),
          CUDA_ERROR_INVALID_VALUE);

    /* access over both mappings: owner RW, device 0 read, 3 none */
    d[0] = desc(1, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    d[1] = desc(0, CU_MEM_ACCESS_FLAGS_PROT_READ);
    d[2] = desc(3, CU_MEM_ACCESS_FLAGS_PROT_NONE);
    CU_RC(D.cuMemSetAccess(base, GRAN / 2, d, 3), CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuMemSetAccess(base, 4 * GRAN, d, 3), CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuMemSetAccess(base + 4096, GRAN, d, 3), CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuMemSetAccess(base, 3 * GRAN, d, 0), CUDA_ERROR_INVALID_VALUE);
    {
        CUmemAccessDesc bad = desc(9, CU_MEM_ACCESS_FLAGS_PROT_READ);
        CU_RC(D.cuMemSetAccess(base, 3 * GRAN, &bad, 1),
              CUDA_ERROR_INVALID_DEVICE);
    }
    CU_OK(D.cuMemSetAccess(base, 3 * GRAN, d, 3));
    for (int m = 0; m < 2; m++) {
        CUdeviceptr at = base + (CUdeviceptr)m * 2 * GRAN;
        CHECK(access_of(at, 1) == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
        CHECK(access_of(at, 0) == CU_MEM_ACCESS_FLAGS_PROT_READ);
        CHECK(access_of(at, 2) == CU_MEM_ACCESS_FLAGS_PROT_NONE);
        CHECK(access_of(at, 3) == CU_MEM_ACCESS_FLAGS_PROT_NONE);
    }
    {
        unsigned long long f;
        CUmemLocation loc = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
        CU_RC(D.cuMemGetAccess(&f, &loc, base + 3 * GRAN),
              CUDA_ERROR_INVALID_VALUE); /* not mapped */
        loc.id = 8;
        CU_RC(D.cuMemGetAccess(&f, &loc, base), CUDA_ERROR_INVALID_DEVICE);
    }

    /* a copy across the boundary between the two chunks */
    for (size_t i = 0; i < sizeof(buf); i++)
        buf[i] = (unsigned char)(i + 1);
    CU_OK(D.cuMemcpyHtoDAsync(base + GRAN - 32, buf, sizeof(buf), NULL));
    CU_OK(D.cuMemcpyDtoHAsync(back, base + GRAN - 32, sizeof(back), NULL));
    CHECK(memcmp(buf, back, sizeof(buf)) == 0);
    CU_RC(D.cuMemcpyHtoDAsync(base + 3 * GRAN - 8, buf, 16, NULL),
          CUDA_ERROR_INVALID_VALUE); /* runs into the unmapped part */
    CU_OK(D.cuMemsetD8Async(base + 2 * GRAN, 7, 4, NULL));

    /* read-only for everyone: copies out work, copies in do not */
    d[0] = desc(1, CU_MEM_ACCESS_FLAGS_PROT_READ);
    CU_OK(D.cuMemSetAccess(base, GRAN, d, 1));
    CU_RC(D.cuMemcpyHtoDAsync(base, buf, 4, NULL), CUDA_ERROR_INVALID_VALUE);
    CU_OK(D.cuMemcpyDtoHAsync(back, base + GRAN - 32, 32, NULL));
    CHECK(memcmp(back, buf, 32) == 0);

    /* the same memory through an import, mapped elsewhere */
    CU_OK(D.cuMemImportFromShareableHandle(
        &hi, (void *)(uintptr_t)fd1, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    CHECK(fcntl(fd1, F_GETFD) >= 0); /* still ours */
    close(fd1);
    CU_OK(D.cuMemMap(other, GRAN, 0, hi, 0));
    d[0] = desc(2, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    CU_OK(D.cuMemSetAccess(other, GRAN, d, 1));
    CHECK(memcmp((void *)(uintptr_t)(other + GRAN - 32), buf, 32) == 0);
    CU_OK(D.cuMemRelease(hi));
    CU_OK(D.cuMemUnmap(other, GRAN));

    /* release while mapped: the memory stays until unmapped */
    CU_OK(D.cuMemRelease(ha));
    CU_OK(D.cuMemRelease(hb));
    CHECK(test_fd_count() == fds0 + 2);
    CU_OK(D.cuMemcpyDtoHAsync(back, base + GRAN - 32, sizeof(back), NULL));
    CHECK(memcmp(buf, back, sizeof(buf)) == 0);
    CU_RC(D.cuMemMap(base + 3 * GRAN, GRAN, 0, ha, 0),
          CUDA_ERROR_INVALID_VALUE); /* the handle is gone */

    CU_RC(D.cuMemAddressFree(base, 8 * MiB), CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuMemUnmap(base, GRAN / 2), CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuMemUnmap(base + GRAN, GRAN), CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuMemUnmap(base, 2 * GRAN), CUDA_ERROR_INVALID_VALUE); /* cuts b */
    CU_OK(D.cuMemUnmap(base + 3 * GRAN, GRAN)); /* nothing mapped: fine */
    CU_OK(D.cuMemUnmap(base, GRAN));
    CHECK(test_fd_count() == fds0 + 1);
    CU_RC(D.cuMemcpyDtoHAsync(back, base, 4, NULL), CUDA_ERROR_INVALID_VALUE);
    CU_OK(D.cuMemUnmap(base + GRAN, 2 * GRAN));
    CHECK(test_fd_count() == fds0);
    CU_OK(D.cuMemUnmap(base + GRAN, 2 * GRAN)); /* again: as the driver */
    CU_RC(D.cuMemUnmap(base + 16 * GRAN, GRAN), CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuMemAddressFree(base, 4 * MiB), CUDA_ERROR_INVALID_VALUE);
    CU_OK(D.cuMemAddressFree(base, 8 * MiB));
    CU_RC(D.cuMemAddressFree(base, 8 * MiB), CUDA_ERROR_INVALID_VALUE);
    CU_OK(D.cuMemAddressFree(other, 4 * MiB));

    /* not a VMM fd */
    {
        int mfd = memfd_create("junk", MFD_CLOEXEC);
        CHECK(mfd >= 0 && ftruncate(mfd, (off_t)(GRAN + 4096)) == 0);
        CU_RC(D.cuMemImportFromShareableHandle(
                  &hi, (void *)(uintptr_t)mfd,
                  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
              CUDA_ERROR_INVALID_VALUE);
        CU_RC(D.cuMemImportFromShareableHandle(
                  &hi, (void *)(uintptr_t)mfd, CU_MEM_HANDLE_TYPE_FABRIC),
              CUDA_ERROR_NOT_PERMITTED);
        close(mfd);
    }
    CHECK(test_fd_count() == fds0);
}

/* The driver maps past the end of a reservation (a 4 MiB allocation at
 * 6 MiB of an 8 MiB reservation) and then will not free the reservation
 * (sim/FACTS.md F40). Past the end is no host memory here, so copies
 * there are refused; a map over it from another reservation is refused
 * too (inferred: sim/README.md); unmapping the whole mapping is taken (not
 * measured). */
static void test_map_past_end(void)
{
    CUmemAllocationProp p = prop_dev(0, CU_MEM_HANDLE_TYPE_NONE);
    CUmemGenericAllocationHandle h2, h;
    CUdeviceptr base, next;
    CUmemAccessDesc d = desc(0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    unsigned char buf[16] = {1, 2, 3};
    int fds0 = test_fd_count();

    CU_OK(D.cuMemCreate(&h2, 2 * GRAN, &p, 0));
    CU_OK(D.cuMemCreate(&h, GRAN, &p, 0));
    /* base: 4 granules with 2 free ones after them (single-threaded) */
    CU_OK(D.cuMemAddressReserve(&base, 6 * GRAN, 0, 0, 0));
    CU_OK(D.cuMemAddressFree(base, 6 * GRAN));
    CU_OK(D.cuMemAddressReserve(&next, 4 * GRAN, 0, base, 0));
    CHECK(next == base);

    CU_OK(D.cuMemMap(base + 3 * GRAN, 2 * GRAN, 0, h2, 0));
    CU_RC(D.cuMemAddressFree(base, 4 * GRAN), CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuMemUnmap(base + 3 * GRAN, GRAN), CUDA_ERROR_INVALID_VALUE); /* cuts it */
    CU_OK(D.cuMemSetAccess(base + 3 * GRAN, 2 * GRAN, &d, 1));
    CU_OK(D.cuMemcpyHtoDAsync(base + 4 * GRAN - 16, buf, 16, NULL));
    CU_RC(D.cuMemcpyHtoDAsync(base + 4 * GRAN - 8, buf, 16, NULL),
          CUDA_ERROR_INVALID_VALUE); /* runs into what lies past the end */
    CU_RC(D.cuMemcpyAsync(base + 4 * GRAN, (CUdeviceptr)(uintptr_t)buf, 16, NULL),
          CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuMemcpyAsync((CUdeviceptr)(uintptr_t)buf, base + 5 * GRAN - 16, 16, NULL),
          CUDA_ERROR_INVALID_VALUE);

    /* a reservation where the mapping spilled: mapping there is refused */
    CU_OK(D.cuMemAddressReserve(&next, 2 * GRAN, 0, base + 4 * GRAN, 0));
    CHECK(next == base + 4 * GRAN);
    CU_RC(D.cuMemMap(next, GRAN, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
    CU_OK(D.cuMemMap(next + GRAN, GRAN, 0, h, 0)); /* beyond the spill: fine */
    CU_OK(D.cuMemUnmap(next + GRAN, GRAN));
    CU_OK(D.cuMemUnmap(base + 3 * GRAN, 2 * GRAN));
    CU_OK(D.cuMemMap(next, GRAN, 0, h, 0));
    /* and the other way round: no spill over another reservation's map */
    CU_RC(D.cuMemMap(base + 3 * GRAN, 2 * GRAN, 0, h2, 0), CUDA_ERROR_INVALID_VALUE);
    CU_OK(D.cuMemUnmap(next, GRAN));
    CU_OK(D.cuMemAddressFree(next, 2 * GRAN));
    CU_OK(D.cuMemAddressFree(base, 4 * GRAN));
    CU_OK(D.cuMemRelease(h));
    CU_OK(D.cuMemRelease(h2));
    CHECK(test_fd_count() == fds0);
}

/* ---- across processes ------------------------------------------------------ */

struct vmm_msg {
    uint64_t size[2];
    uint32_t seed;
};

static unsigned char pat(uint32_t seed, size_t i)
{
    return (unsigned char)((i * 2654435761u + seed) >> 13);
}

/* Child: imports two chunks, maps them back to back, gives its owner-GPU
 * read-write and device 0 read, checks the data across the seam, reports
 * the access flags per device and writes a reply. */
static int child_vmm(void)
{
    int sock = sim_t_child_fd(), fds[2], n = 0;
    struct vmm_msg m;
    CUmemGenericAllocationHandle h[2];
    CUdeviceptr base;
    CUmemAccessDesc d[2];
    size_t total;
    CUresult rc;
    int owner = -1;

    FD_BASELINE();
    sim_t_init_ctx(0);
    CHECK(sim_t_recv(sock, &m, sizeof(m), fds, 2) == 2);
    for (int i = 0; i < 2; i++) {
        rc = D.cuMemImportFromShareableHandle(
            &h[i], (void *)(uintptr_t)fds[i],
            CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
        close(fds[i]);
        if (rc != CUDA_SUCCESS) {
            sim_t_report("import %d", (int)rc);
            if (i == 0)
                close(fds[1]);
            else
                CU_OK(D.cuMemRelease(h[0]));
            return 0;
        }
    }
    /* the owner's local ordinal comes from the parent's argv */
    owner = atoi(getenv("SIM_T_OWNER"));
    total = (size_t)(m.size[0] + m.size[1]);
    CU_OK(D.cuMemAddressReserve(&base, total, 0, 0, 0));
    CU_OK(D.cuMemMap(base, (size_t)m.size[0], 0, h[0], 0));
    CU_OK(D.cuMemMap(base + m.size[0], (size_t)m.size[1], 0, h[1], 0));
    CU_OK(D.cuMemRelease(h[0]));
    CU_OK(D.cuMemRelease(h[1]));
    d[0] = desc(owner, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    d[1] = desc(owner == 0 ? 1 : 0, CU_MEM_ACCESS_FLAGS_PROT_READ);
    CU_OK(D.cuMemSetAccess(base, total, d, 2));
    for (size_t i = m.size[0] - 4096; i < m.size[0] + 4096; i++)
        if (((unsigned char *)(uintptr_t)base)[i] != pat(m.seed, i)) {
            sim_t_report("bytes differ at %zu", i);
            return 1;
        }
    CU_OK(D.cuDeviceGetCount(&n));
    sim_t_report("ok");
    for (int dev = 0; dev < n; dev++)
        sim_t_report(" %llu", access_of(base + m.size[0], dev));
    CU_OK(D.cuMemsetD8Async(base + m.size[0] - 2, 0xcc, 4, NULL));
    CU_OK(D.cuMemUnmap(base, total));
    CU_OK(D.cuMemAddressFree(base, total));
    CU_OK(D.cuDevicePrimaryCtxRelease(0));
    FD_CHECK_NO_LEAK();
    return 0;
}

static void cross(int fd0, int fd1, unsigned char *p, size_t s0, size_t s1,
                  const char *cvd, const char *owner, const char *want)
{
    int sv[2];
    char ev[128], eo[64], out[256];
    const char *env[] = {ev, eo, NULL};
    struct vmm_msg m;
    int fds[2] = {fd0, fd1};
    pid_t pid;
    ssize_t len = 0;

    memset(&m, 0, sizeof(m));
    m.size[0] = s0;
    m.size[1] = s1;
    m.seed = (uint32_t)(uintptr_t)want;
    for (size_t i = s0 - 4096; i < s0 + 4096; i++)
        p[i] = pat(m.seed, i);
    if (cvd)
        snprintf(ev, sizeof(ev), "CUDA_VISIBLE_DEVICES=%s", cvd);
    else
        snprintf(ev, sizeof(ev), "CUDA_VISIBLE_DEVICES");
    snprintf(eo, sizeof(eo), "SIM_T_OWNER=%s", owner);
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    pid = spawn_self("vmm", NULL, env, sv[1]);
    CHECK(pid > 0);
    close(sv[1]);
    sim_t_send(sv[0], &m, sizeof(m), fds, 2);
    for (;;) {
        ssize_t r = read(sv[0], out + len, sizeof(out) - 1 - (size_t)len);
        if (r <= 0)
            break;
        len += r;
    }
    out[len] = '\0';
    close(sv[0]);
    CHECK(wait_child(pid) == 0);
    if (strcmp(out, want) != 0) {
        fprintf(stderr, "vmm child (CVD %s) said '%s', wanted '%s'\n",
                cvd ? cvd : "unset", out, want);
        exit(1);
    }
    if (strncmp(want, "ok", 2) == 0)
        CHECK(p[s0 - 2] == 0xcc && p[s0 + 1] == 0xcc && p[s0 + 2] ==
                                                           pat(m.seed, s0 + 2));
}

static void test_cross_process(void)
{
    /* chunks on physical GPU 2 */
    CUmemAllocationProp p = prop_dev(2, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    CUmemGenericAllocationHandle h0, h1;
    CUdeviceptr base;
    CUmemAccessDesc d = desc(2, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    int fd0, fd1;
    char want[64];
    const size_t s0 = GRAN, s1 = 2 * GRAN;
    unsigned char *mem;

    CU_OK(D.cuMemCreate(&h0, s0, &p, 0));
    CU_OK(D.cuMemCreate(&h1, s1, &p, 0));
    CU_OK(D.cuMemExportToShareableHandle(
        &fd0, h0, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    CU_OK(D.cuMemExportToShareableHandle(
        &fd1, h1, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    CU_OK(D.cuMemAddressReserve(&base, s0 + s1, 0, 0, 0));
    CU_OK(D.cuMemMap(base, s0, 0, h0, 0));
    CU_OK(D.cuMemMap(base + s0, s1, 0, h1, 0));
    CU_OK(D.cuMemSetAccess(base, s0 + s1, &d, 1));
    mem = (unsigned char *)(uintptr_t)base;

    /* local ordinal of physical 2: 2 unset, 1 under "3,2,1,0", 0 under "2,0" */
    cross(fd0, fd1, mem, s0, s1, NULL, "2", "ok 1 0 3 0");
    cross(fd0, fd1, mem, s0, s1, "3,2,1,0", "1", "ok 1 3 0 0");
    cross(fd0, fd1, mem, s0, s1, "2,0", "0", "ok 3 1");
    snprintf(want, sizeof(want), "import %d", (int)CUDA_ERROR_INVALID_DEVICE);
    cross(fd0, fd1, mem, s0, s1, "0,1,3", "0", want);

    close(fd0);
    close(fd1);
    CU_OK(D.cuMemUnmap(base, s0 + s1));
    CU_OK(D.cuMemRelease(h0));
    CU_OK(D.cuMemRelease(h1));
    CU_OK(D.cuMemAddressFree(base, s0 + s1));
}

/* The handle that mapped any address of a mapping, the same value, one
 * reference more per retain; its properties; a handle the owner released
 * after mapping comes back with the retain (sim/FACTS.md F42, F43). */
static void test_retain(void)
{
    CUmemAllocationProp p = prop_dev(2, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    CUmemAllocationProp q = prop_dev(1, CU_MEM_HANDLE_TYPE_NONE), got;
    CUmemGenericAllocationHandle ha, hb, r1, r2;
    CUdeviceptr base;
    int fd;

    CU_OK(D.cuMemCreate(&ha, GRAN, &p, 0));
    CU_OK(D.cuMemCreate(&hb, 2 * GRAN, &q, 0));
    CU_OK(D.cuMemAddressReserve(&base, 4 * GRAN, 0, 0, 0));
    CU_OK(D.cuMemMap(base, GRAN, 0, ha, 0));
    CU_OK(D.cuMemMap(base + GRAN, 2 * GRAN, 0, hb, 0));
    CU_RC(D.cuMemRetainAllocationHandle(&r1, (void *)(uintptr_t)(base + 3 * GRAN)),
          CUDA_ERROR_INVALID_VALUE); /* reserved, not mapped */
    CU_RC(D.cuMemRetainAllocationHandle(NULL, (void *)(uintptr_t)base),
          CUDA_ERROR_INVALID_VALUE);
    CU_OK(D.cuMemRetainAllocationHandle(&r1, (void *)(uintptr_t)(base + 12345)));
    CHECK(r1 == ha);
    CU_OK(D.cuMemRetainAllocationHandle(&r2, (void *)(uintptr_t)(base + 3 * GRAN - 1)));
    CHECK(r2 == hb);
    memset(&got, 0xa5, sizeof(got));
    CU_OK(D.cuMemGetAllocationPropertiesFromHandle(&got, r1));
    CHECK(got.type == CU_MEM_ALLOCATION_TYPE_PINNED);
    CHECK(got.requestedHandleTypes == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    CHECK(got.location.type == CU_MEM_LOCATION_TYPE_DEVICE && got.location.id == 2);
    CU_OK(D.cuMemGetAllocationPropertiesFromHandle(&got, hb));
    CHECK(got.requestedHandleTypes == CU_MEM_HANDLE_TYPE_NONE && got.location.id == 1);
    CU_RC(D.cuMemGetAllocationPropertiesFromHandle(NULL, hb), CUDA_ERROR_INVALID_VALUE);
    /* the creator's reference and the retain's: two releases */
    CU_OK(D.cuMemRelease(ha));
    CU_OK(D.cuMemExportToShareableHandle(&fd, r1, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                         0));
    {
        /* imported, an allocation requests no handle type (sim/FACTS.md F43) */
        CUmemGenericAllocationHandle hi;
        CU_OK(D.cuMemImportFromShareableHandle(&hi, (void *)(intptr_t)fd,
                                               CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
        CU_OK(D.cuMemGetAllocationPropertiesFromHandle(&got, hi));
        CHECK(got.requestedHandleTypes == CU_MEM_HANDLE_TYPE_NONE && got.location.id == 2);
        CU_OK(D.cuMemRelease(hi));
    }
    close(fd);
    CU_OK(D.cuMemRelease(r1));
    /* every reference released, still mapped: the properties still come
     * (sim/FACTS.md F42), a release does not */
    CU_OK(D.cuMemGetAllocationPropertiesFromHandle(&got, ha));
    CU_RC(D.cuMemRelease(ha), CUDA_ERROR_INVALID_VALUE);
    /* still mapped: a retain gives it back */
    CU_OK(D.cuMemRetainAllocationHandle(&r1, (void *)(uintptr_t)base));
    CHECK(r1 == ha);
    CU_OK(D.cuMemRelease(r1));
    CU_OK(D.cuMemRelease(r2));
    CU_OK(D.cuMemRelease(hb));
    CU_OK(D.cuMemUnmap(base, 3 * GRAN));
    CU_RC(D.cuMemRetainAllocationHandle(&r1, (void *)(uintptr_t)base),
          CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuMemGetAllocationPropertiesFromHandle(&got, ha), CUDA_ERROR_INVALID_VALUE);
    CU_OK(D.cuMemAddressFree(base, 4 * GRAN));
}

/* cuMemsetD16Async / D32Async: values of their width, little-endian,
 * dstDevice aligned to it (cuda.h), over VMM memory. */
static void test_memset_widths(void)
{
    CUmemAllocationProp p = prop_dev(0, CU_MEM_HANDLE_TYPE_NONE);
    CUmemGenericAllocationHandle h;
    CUmemAccessDesc d = desc(0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    CUdeviceptr base;
    unsigned char *m;

    CU_OK(D.cuMemCreate(&h, GRAN, &p, 0));
    CU_OK(D.cuMemAddressReserve(&base, GRAN, 0, 0, 0));
    CU_OK(D.cuMemMap(base, GRAN, 0, h, 0));
    CU_OK(D.cuMemSetAccess(base, GRAN, &d, 1));
    m = (unsigned char *)(uintptr_t)base;
    memset(m, 0x11, 64);
    CU_OK(D.cuMemsetD16Async(base + 2, 0xbeef, 3, CU_STREAM_LEGACY));
    CHECK(m[1] == 0x11 && m[2] == 0xef && m[3] == 0xbe && m[6] == 0xef && m[7] == 0xbe &&
          m[8] == 0x11);
    CU_OK(D.cuMemsetD32Async(base + 16, 0xdeadbeef, 2, CU_STREAM_LEGACY));
    CHECK(m[15] == 0x11 && m[16] == 0xef && m[19] == 0xde && m[23] == 0xde &&
          m[24] == 0x11);
    CU_RC(D.cuMemsetD16Async(base + 1, 1, 1, CU_STREAM_LEGACY), CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuMemsetD32Async(base + 2, 1, 1, CU_STREAM_LEGACY), CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuMemsetD32Async(base, 1, GRAN / 4 + 1, CU_STREAM_LEGACY),
          CUDA_ERROR_INVALID_VALUE);
    CU_OK(D.cuMemsetD32Async(base, 1, 0, CU_STREAM_LEGACY));
    CU_OK(D.cuMemUnmap(base, GRAN));
    CU_OK(D.cuMemRelease(h));
    CU_OK(D.cuMemAddressFree(base, GRAN));
}

int main(int argc, char **argv)
{
    if (argc >= 3 && strcmp(argv[1], "--child") == 0)
        return strcmp(argv[2], "vmm") == 0 ? child_vmm() : 2;
    sim_t_clean_env();
    FD_BASELINE();
    sim_t_init_ctx(0); /* copies need a current context */
    test_granularity_create();
    test_local();
    test_map_past_end();
    test_retain();
    test_memset_widths();
    test_cross_process();
    CU_OK(D.cuDevicePrimaryCtxRelease(0));
    FD_CHECK_NO_LEAK();
    return test_finish();
}
