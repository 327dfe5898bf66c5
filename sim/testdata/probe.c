/* Conformance probe: runs the same calls against any driver library and
 * prints one "key value" line per observation, so that the simulator's
 * answers can be diffed against the real driver's on a GPU machine:
 *
 *   cc -D_GNU_SOURCE -I/usr/local/cuda/include -Itests -Isrc \
 *      -DCUC_SIM_PATH='getenv("PROBE_LIB")' sim/testdata/probe.c -o probe -ldl
 *   PROBE_LIB=libcuda.so.1 ./probe > real.txt
 *   PROBE_LIB=.../libcucore-sim.so CUCORE_SIM_GPUS=1 ./probe > sim.txt
 *
 * Needs one visible GPU (device 0). Not part of the test suite. */
/* the simulator's controls (fault injection, call counters) are not in
 * a real driver, which this probes too */
#define SIM_T_CTL_OPTIONAL 1
#include "sim_test.h"

#include <ctype.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>

#define MiB ((size_t)1 << 20)

static const char *en(CUresult r)
{
    return sim_t_errname(r);
}

#define P(key, call) printf("%s %s\n", key, en(call))
#define PV(key, fmt, v) printf("%s " fmt "\n", key, v)

static char uuid0[44];
static int nfds_open(void);

/* ---- CUDA_VISIBLE_DEVICES ------------------------------------------------- */

static int child_cvd(void)
{
    int n = -1;
    CUresult rc, rc2;

    sim_t_load();
    rc = D.cuInit(0);
    rc2 = D.cuDeviceGetCount(&n);
    sim_t_report("%s count=%d(%s)", en(rc), n, en(rc2));
    return 0;
}

static void cvd(const char *v)
{
    char ev[256], out[512];
    const char *env[] = {ev, NULL};

    snprintf(ev, sizeof(ev), "CUDA_VISIBLE_DEVICES=%s", v);
    if (sim_t_run("cvd", NULL, env, out, sizeof(out)) != 0)
        snprintf(out, sizeof(out), "child failed");
    /* keys must not depend on the UUID */
    printf("cvd[%s] %s\n", v, out);
}

static void probe_cvd(void)
{
    char b[256], key[64];
    const char *u = uuid0 + 4;
#define CV(label, ...)                                                         \
    do {                                                                       \
        char ev_[320], out_[512];                                              \
        const char *env_[] = {ev_, NULL};                                      \
        snprintf(b, sizeof(b), __VA_ARGS__);                                   \
        snprintf(ev_, sizeof(ev_), "CUDA_VISIBLE_DEVICES=%s", b);              \
        if (sim_t_run("cvd", NULL, env_, out_, sizeof(out_)) != 0)             \
            snprintf(out_, sizeof(out_), "child failed");                      \
        snprintf(key, sizeof(key), "cvd<%s>", label);                          \
        printf("%s %s\n", key, out_);                                          \
    } while (0)
    cvd("");
    cvd("0");
    cvd("-1");
    cvd("abc");
    cvd("0,0");
    cvd("0,1");
    cvd("1,0");
    cvd(" 0");
    cvd("0 ");
    cvd(" 0 , 0");
    cvd("00");
    cvd("0a");
    cvd("0x0");
    cvd("+0");
    cvd("0,");
    cvd(",0");
    cvd("0,,0");
    cvd("GPU-");
    cvd("GPU");
    cvd("MIG-0");
    CV("0,GPU-uuid", "0,%s", uuid0);
    CV("GPU-uuid,0", "%s,0", uuid0);
    CV("GPU-uuid", "%s", uuid0);
    CV("GPU-4hex", "GPU-%.4s", u);
    CV("GPU-4HEX-upper", "GPU-%c%c%c%c", toupper(u[0]), toupper(u[1]),
       toupper(u[2]), toupper(u[3]));
    CV("gpu-4hex-lowercase-keyword", "gpu-%.4s", u);
    CV("GPU-1hex", "GPU-%.1s", u);
    CV("GPU-9chars-with-dash", "GPU-%.9s", u);
    CV("GPU-8hex-nodash-then-more", "GPU-%.8s%.4s", u, u + 9);
    CV("uuid-without-GPU", "%s", u);
    CV("0,uuid-without-GPU", "0,%s", u);
    CV("GPU-uuid+extra", "%s0", uuid0);
    CV("MIG-uuid", "MIG-%s", u);
    CV("0,MIG-uuid", "0,MIG-%s", u);
    CV(" GPU-4hex", " GPU-%.4s", u);
    CV("GPU-uuid,GPU-uuid", "%s,%s", uuid0, uuid0);
    CV("GPU-4hex,GPU-uuid", "GPU-%.4s,%s", u, uuid0);
    CV("GPU-4hex+xyz", "GPU-%.4sxyz", u);
    CV("GPU-4hex+space", "GPU-%.4s ", u);
    CV("GPU-4hex-", "GPU-%.4s-", u);
    CV("GPU--4hex", "GPU--%.4s", u);
    CV("MIG-4hex", "MIG-%.4s", u);
    CV("MIG-GPU-uuid", "MIG-%s", uuid0);
    CV("GPU-32hex-nodashes", "GPU-%.8s%.4s%.4s%.4s%.12s", u, u + 9, u + 14,
       u + 19, u + 24);
    CV("GPU-uuid,junk,0", "%s,junk,0", uuid0);
    CV("0,GPU-uuid,0", "0,%s,0", uuid0);
    CV("GPU-uuid,0,0", "%s,0,0", uuid0);
    CV("GPU-wrong", "GPU-%c", u[0] == 'f' ? 'e' : 'f');
#undef CV
}

/* ---- devices -------------------------------------------------------------- */

static void probe_devices(void)
{
    char s[128];
    size_t mem = 0;
    int v;
    CUuuid uu;

    P("cuInit(1)", D.cuInit(1));
    P("cuDeviceGetCount-before-init", D.cuDeviceGetCount(&v));
    P("cuInit(0)", D.cuInit(0));
    CU_OK(D.cuDeviceGetUuid(&uu, 0));
    sim_t_uuid_str(&uu, uuid0);
    CU_OK(D.cuDeviceGetName(s, sizeof(s), 0));
    PV("name", "%s", s);
    CU_OK(D.cuDeviceGetPCIBusId(s, sizeof(s), 0));
    PV("pci-format-len", "%zu", strlen(s));
    PV("pci-has-uppercase-hex", "%d", strpbrk(s, "ABCDEF") != NULL);
    PV("pci-has-lowercase-hex", "%d", strpbrk(s, "abcdef") != NULL);
    printf("pci-busid-raw %s\n", s);
    s[0] = 0;
    P("pci-busid-len5", D.cuDeviceGetPCIBusId(s, 5, 0));
    printf("pci-busid-len5-value %s\n", s);
    s[0] = 0;
    P("pci-busid-len12", D.cuDeviceGetPCIBusId(s, 12, 0));
    printf("pci-busid-len12-value %s\n", s);
    s[0] = 0;
    P("pci-busid-len13", D.cuDeviceGetPCIBusId(s, 13, 0));
    s[0] = 0;
    P("name-len6", D.cuDeviceGetName(s, 6, 0));
    printf("name-len6-value %s\n", s);
    CU_OK(D.cuDeviceTotalMem(&mem, 0));
    PV("totalmem-MiB", "%zu", mem >> 20);
    PV("totalmem-bytes", "%zu", mem);
    P("cuDeviceGet(1)", D.cuDeviceGet(&v, 1));
    P("cuDeviceGet(-1)", D.cuDeviceGet(&v, -1));
    P("attr-0", D.cuDeviceGetAttribute(&v, (CUdevice_attribute)0, 0));
    P("attr-MAX", D.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX, 0));
    P("attr-dev1", D.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 1));
    for (int a = 1; a < CU_DEVICE_ATTRIBUTE_MAX; a++) {
        CUresult r;
        v = -999;
        r = D.cuDeviceGetAttribute(&v, (CUdevice_attribute)a, 0);
        if (a == CU_DEVICE_ATTRIBUTE_PCI_BUS_ID ||
            a == CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD_GROUP_ID)
            continue; /* differ per machine */
        printf("attr[%d] %s %d\n", a, en(r), v);
    }
    P("canaccesspeer-self", D.cuDeviceCanAccessPeer(&v, 0, 0));
    PV("canaccesspeer-self-value", "%d", v);
    {
        const char *str = NULL;
        static const CUresult codes[] = {
            CUDA_SUCCESS, CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_OUT_OF_MEMORY,
            CUDA_ERROR_NOT_INITIALIZED, CUDA_ERROR_NO_DEVICE,
            CUDA_ERROR_INVALID_DEVICE, CUDA_ERROR_INVALID_IMAGE,
            CUDA_ERROR_INVALID_CONTEXT, CUDA_ERROR_NO_BINARY_FOR_GPU,
            CUDA_ERROR_INVALID_PTX, CUDA_ERROR_OPERATING_SYSTEM,
            CUDA_ERROR_INVALID_HANDLE, CUDA_ERROR_NOT_FOUND,
            CUDA_ERROR_NOT_READY, CUDA_ERROR_CONTEXT_IS_DESTROYED,
            CUDA_ERROR_NOT_PERMITTED, CUDA_ERROR_NOT_SUPPORTED,
            CUDA_ERROR_UNKNOWN, CUDA_ERROR_CONTAINED, CUDA_ERROR_INVALID_SOURCE,
            CUDA_ERROR_TENSOR_MEMORY_LEAK, CUDA_ERROR_MPS_SERVER_NOT_READY,
            CUDA_ERROR_CDP_NOT_SUPPORTED, CUDA_ERROR_CDP_VERSION_MISMATCH,
            CUDA_ERROR_EXTERNAL_DEVICE, CUDA_ERROR_PROFILER_NOT_INITIALIZED};
        for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
            str = NULL;
            D.cuGetErrorString(codes[i], &str);
            printf("errstr[%d] %s\n", (int)codes[i], str ? str : "(null)");
        }
        printf("errname-12345 %s\n",
               en(D.cuGetErrorName((CUresult)12345, &str)));
    }
}

static void gq(const char *key, const char *name, int ver, cuuint64_t flags)
{
    void *p = (void *)&p;
    CUdriverProcAddressQueryResult st = (CUdriverProcAddressQueryResult)99;
    CUresult r = D.gpa(name, &p, ver, flags, &st);

    printf("%s %s status=%d pfn=%s\n", key, en(r), (int)st,
           p == NULL ? "NULL" : p == (void *)&p ? "untouched" : "set");
}

static void probe_proc(void)
{
    void *p = NULL;
    CUdriverProcAddressQueryResult st;
    CUresult r;

    gq("gpa-cuStreamDestroy_v2", "cuStreamDestroy_v2", 13000, 0);
    gq("gpa-unknown", "cuNoSuchFunction", 13000, 0);
    gq("gpa-cuMemPoolCreate@11010", "cuMemPoolCreate", 11010, 0);
    gq("gpa-cuLibraryLoadData@11080", "cuLibraryLoadData", 11080, 0);
    gq("gpa-cuDeviceTotalMem@2000", "cuDeviceTotalMem", 2000, 0);
    gq("gpa-cuMemcpyHtoDAsync@2000", "cuMemcpyHtoDAsync", 2000, 0);
    gq("gpa-cuInit@13010", "cuInit", 13010, 0);
    gq("gpa-cuInit@99999", "cuInit", 99999, 0);
    gq("gpa-flags4", "cuInit", 13000, 4);
    gq("gpa-empty", "", 13000, 0);
    gq("gpa-cuInit@0", "cuInit", 0, 0);
    /* (NULL symbol or pfn: the real driver crashes) */
    r = D.gpa("cuGetProcAddress", &p, 11030, 0, &st);
    printf("gpa-cuGetProcAddress@11030==v2 %d\n",
           r == CUDA_SUCCESS && p == dlsym(D.handle, "cuGetProcAddress_v2"));
    printf("gpa-cuGetProcAddress@11030==plain %d\n",
           r == CUDA_SUCCESS && p == dlsym(D.handle, "cuGetProcAddress"));
    r = D.gpa("cuCtxSynchronize", &p, 13000, 0, &st);
    printf("gpa-cuCtxSynchronize@13000==_v2 %d\n",
           r == CUDA_SUCCESS && p == dlsym(D.handle, "cuCtxSynchronize_v2"));
    r = D.gpa("cuStreamQuery", &p, 13000,
              CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st);
    printf("gpa-cuStreamQuery-ptsz==plain %d ==_ptsz %d\n",
           r == CUDA_SUCCESS && p == dlsym(D.handle, "cuStreamQuery"),
           r == CUDA_SUCCESS && p == dlsym(D.handle, "cuStreamQuery_ptsz"));
    r = D.gpa("cuStreamDestroy", &p, 13000, 0, &st);
    printf("gpa-cuStreamDestroy==_v2 %d\n",
           r == CUDA_SUCCESS && p == dlsym(D.handle, "cuStreamDestroy_v2"));
    r = D.gpa("cuStreamDestroy", &p, 3000, 0, &st);
    printf("gpa-cuStreamDestroy@3000==plain %d\n",
           r == CUDA_SUCCESS && p == dlsym(D.handle, "cuStreamDestroy"));
    printf("dlsym-cuDeviceTotalMem %d dlsym-cuMemcpyHtoDAsync %d "
           "dlsym-cuGetProcAddress %d\n",
           dlsym(D.handle, "cuDeviceTotalMem") != NULL,
           dlsym(D.handle, "cuMemcpyHtoDAsync") != NULL,
           dlsym(D.handle, "cuGetProcAddress") != NULL);
}

/* ---- contexts, streams, events -------------------------------------------- */

static void probe_ctx_streams(void)
{
    CUcontext c, cur;
    CUstream s;
    CUevent e, e2, nt, ipc, op;
    CUipcEventHandle h, hz;
    unsigned int fl;
    int pr, lo = 99, hi = 99;
    float ms;
    int x;

    P("ctxsync-noctx", D.cuCtxSynchronize());
    P("streamcreate-noctx", D.cuStreamCreateWithPriority(&s, 0, 0));
    P("eventcreate-noctx", D.cuEventCreate(&e, 0));
    P("streamquery-null-noctx", D.cuStreamQuery(NULL));
    (void)x; /* (a bogus context: the real driver takes it, then crashes) */
    CU_OK(D.cuDevicePrimaryCtxRetain(&c, 0));
    CU_OK(D.cuCtxSetCurrent(c));
    {
        PFN_cuCtxGetStreamPriorityRange_v5050 f = NULL;
        void *pv = NULL;
        if (D.gpa("cuCtxGetStreamPriorityRange", &pv, 13000, 0, NULL) == 0 && pv) {
            memcpy(&f, &pv, sizeof(pv));
            f(&lo, &hi);
        }
        printf("priority-range %d %d\n", lo, hi);
    }
    CU_OK(D.cuStreamCreateWithPriority(&s, CU_STREAM_NON_BLOCKING, -100));
    CU_OK(D.cuStreamGetPriority(s, &pr));
    PV("prio(-100)", "%d", pr);
    CU_OK(D.cuStreamDestroy(s));
    CU_OK(D.cuStreamCreateWithPriority(&s, 0, 7));
    CU_OK(D.cuStreamGetPriority(s, &pr));
    PV("prio(7)", "%d", pr);
    CU_OK(D.cuStreamDestroy(s));
    P("streamcreate-flags0x10", D.cuStreamCreateWithPriority(&s, 0x10, 0));
    P("streamdestroy-legacy", D.cuStreamDestroy(CU_STREAM_LEGACY));
    P("streamdestroy-null", D.cuStreamDestroy(NULL));
    P("streamdestroy-perthread", D.cuStreamDestroy(CU_STREAM_PER_THREAD));
    fl = 77;
    P("streamgetflags-null", D.cuStreamGetFlags(NULL, &fl));
    PV("streamgetflags-null-value", "%u", fl);
    fl = 77;
    P("streamgetflags-perthread", D.cuStreamGetFlags(CU_STREAM_PER_THREAD, &fl));
    PV("streamgetflags-perthread-value", "%u", fl);
    pr = 77;
    P("streamgetprio-legacy", D.cuStreamGetPriority(CU_STREAM_LEGACY, &pr));
    PV("streamgetprio-legacy-value", "%d", pr);
    P("streamsync-perthread", D.cuStreamSynchronize(CU_STREAM_PER_THREAD));

    CU_OK(D.cuStreamCreateWithPriority(&s, 0, 0));
    CU_OK(D.cuEventCreate(&e, 0));
    CU_OK(D.cuEventCreate(&e2, 0));
    P("eventquery-unrecorded", D.cuEventQuery(e));
    P("eventsync-unrecorded", D.cuEventSynchronize(e));
    P("elapsed-unrecorded", D.cuEventElapsedTime(&ms, e, e2));
    CU_OK(D.cuEventRecord(e, s));
    P("elapsed-one-unrecorded", D.cuEventElapsedTime(&ms, e, e2));
    CU_OK(D.cuEventRecord(e2, s));
    CU_OK(D.cuEventSynchronize(e2));
    P("elapsed-ok", D.cuEventElapsedTime(&ms, e, e2));
    CU_OK(D.cuEventCreate(&nt, CU_EVENT_DISABLE_TIMING));
    CU_OK(D.cuEventRecord(nt, s));
    CU_OK(D.cuEventSynchronize(nt));
    P("elapsed-notiming", D.cuEventElapsedTime(&ms, e, nt));
    P("eventcreate-ipc-timing", D.cuEventCreate(&ipc, CU_EVENT_INTERPROCESS));
    P("eventcreate-flags0x80", D.cuEventCreate(&ipc, 0x80));
    P("ipcget-nonipc", D.cuIpcGetEventHandle(&h, e));
    P("streamwaitevent-flags0x40", D.cuStreamWaitEvent(s, e, 0x40));
    CU_OK(D.cuEventCreate(&ipc, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING));
    CU_OK(D.cuIpcGetEventHandle(&h, ipc));
    P("ipcopen-same-process", D.cuIpcOpenEventHandle(&op, h));
    memset(&hz, 0, sizeof(hz));
    P("ipcopen-zero-handle", D.cuIpcOpenEventHandle(&op, hz));
    hz = h;
    hz.reserved[0] ^= 0x5a;
    P("ipcopen-flipped-byte0", D.cuIpcOpenEventHandle(&op, hz));
    CU_OK(D.cuEventDestroy(e));
    CU_OK(D.cuStreamDestroy(s));
    CU_OK(D.cuEventDestroy(e2));
    CU_OK(D.cuEventDestroy(nt));

    /* release to zero while current */
    CU_OK(D.cuDevicePrimaryCtxRelease(0));
    P("ctxrelease-overcount", D.cuDevicePrimaryCtxRelease(0));
    P("streamcreate-released-current",
      D.cuStreamCreateWithPriority(&s, 0, 0));
    P("ctxsync-released-current", D.cuCtxSynchronize());
    P("ctxgetcurrent-released", D.cuCtxGetCurrent(&cur));
    PV("ctxgetcurrent-released-same", "%d", cur == c);
    CU_OK(D.cuDevicePrimaryCtxRetain(&cur, 0));
    PV("ctxretain-same-handle", "%d", cur == c);
    CU_OK(D.cuCtxSetCurrent(cur));
}

/* ---- libraries --------------------------------------------------------------- */

/* A fatbin header with no entries. Static, as every image here: a library
 * that loaded may refer to its image until it is unloaded (the probe once
 * passed this one from the stack and never unloaded it). */
static const unsigned char fatbin_no_entries[16] = {0x50, 0xed, 0x55, 0xba, 1, 0, 16, 0};

/* key+load_suffix: cuLibraryLoadData's answer; when it loaded (lazily),
 * key-getkernel and key-unload: nothing stays loaded. */
static void load_get_unload(const char *key, const char *load_suffix,
                            const void *img, const char *name)
{
    char k2[128];
    CUlibrary lib;
    CUkernel k;
    CUresult r = D.cuLibraryLoadData(&lib, img, NULL, NULL, 0, NULL, NULL, 0);

    printf("%s%s %s\n", key, load_suffix, en(r));
    if (r != CUDA_SUCCESS)
        return;
    snprintf(k2, sizeof(k2), "%s-getkernel", key);
    P(k2, D.cuLibraryGetKernel(&k, lib, name));
    snprintf(k2, sizeof(k2), "%s-unload", key);
    P(k2, D.cuLibraryUnload(lib));
}

static void lib_probe(const char *key, const void *img, const char *name)
{
    load_get_unload(key, "", img, name);
}

static void probe_library(void)
{
    CUlibrary lib;
    CUkernel k;
    CUfunction f;
    CUlaunchConfig cfg;
    static const char ptx[] = ".version 8.0\n.target sm_90\n.address_size 64\n"
                              ".visible .entry k1()\n{\n\tret;\n}\n";
    static const char ptx_noentry[] = ".version 8.0\n.target sm_90\n"
                                      ".address_size 64\n";

    lib_probe("lib-empty-string", "", "k");
    {
        CUresult r1 = D.cuLibraryLoadData(&lib, "hello .entry k()", NULL, NULL,
                                          0, NULL, NULL, 0);
        if (r1 == CUDA_SUCCESS) {
            P("lib-garbage-getkernel", D.cuLibraryGetKernel(&k, lib, "k"));
            D.cuLibraryUnload(lib);
        }
        r1 = D.cuLibraryLoadData(&lib, ".version 8.0\n.target sm_90\n.entry 9bad()",
                                 NULL, NULL, 0, NULL, NULL, 0);
        if (r1 == CUDA_SUCCESS) {
            P("lib-badptx-getkernel", D.cuLibraryGetKernel(&k, lib, "9bad"));
            D.cuLibraryUnload(lib);
        }
    }
    lib_probe("lib-text-no-version", "hello .entry k()", "k");
    lib_probe("lib-ptx-noentry", ptx_noentry, "k");
    lib_probe("lib-ptx-bad-entry", ".version 8.0\n.target sm_90\n.entry 9bad()",
              "9bad");
    CU_OK(D.cuLibraryLoadData(&lib, ptx, NULL, NULL, 0, NULL, NULL, 0));
    P("getkernel-unknown", D.cuLibraryGetKernel(&k, lib, "nope"));
    CU_OK(D.cuLibraryGetKernel(&k, lib, "k1"));
    CU_OK(D.cuKernelGetFunction(&f, k));
    memset(&cfg, 0, sizeof(cfg));
    cfg.gridDimX = cfg.gridDimY = cfg.gridDimZ = 1;
    cfg.blockDimX = cfg.blockDimY = cfg.blockDimZ = 1;
    P("launch-ok", D.cuLaunchKernelEx(&cfg, f, NULL, NULL));
    CU_OK(D.cuCtxSynchronize());
    cfg.gridDimY = 0;
    P("launch-grid0", D.cuLaunchKernelEx(&cfg, f, NULL, NULL));
    cfg.gridDimY = 1, cfg.blockDimX = 2048;
    P("launch-block2048", D.cuLaunchKernelEx(&cfg, f, NULL, NULL));
    cfg.blockDimX = 1, cfg.blockDimZ = 65;
    P("launch-blockz65", D.cuLaunchKernelEx(&cfg, f, NULL, NULL));
    cfg.blockDimZ = 1, cfg.numAttrs = 2;
    P("launch-attrs-null", D.cuLaunchKernelEx(&cfg, f, NULL, NULL));
    cfg.numAttrs = 0;
    P("launch-kernel-handle", D.cuLaunchKernelEx(&cfg, (CUfunction)k, NULL, NULL));
    CU_OK(D.cuCtxSynchronize());
    CU_OK(D.cuLibraryUnload(lib));
    lib_probe("lib-fatbin-no-entries", fatbin_no_entries, "k");
}

/* ---- pools ------------------------------------------------------------------- */

static cuuint64_t pa(CUmemoryPool p, CUmemPool_attribute a)
{
    cuuint64_t v = 0;
    D.cuMemPoolGetAttribute(p, a, &v);
    return v;
}

/* A fabric pool where fabric handles cannot be made (no IMEX channel),
 * which can kill the process (sim/FACTS.md F22): it runs in a child that
 * reports each step as it goes; its exit status says how it ended (134:
 * SIGABRT, 139: SIGSEGV). */
static int child_fabric(void)
{
    CUmemPoolProps pp;
    CUmemoryPool pool;
    CUdeviceptr fa = 0;
    CUmemFabricHandle fh;
    CUresult r;
    int fd = -1;

    sim_t_init_ctx(0);
    memset(&pp, 0, sizeof(pp));
    pp.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    pp.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    pp.handleTypes = CU_MEM_HANDLE_TYPE_FABRIC;
    r = D.cuMemPoolCreate(&pool, &pp);
    sim_t_report("poolcreate-fabric %s\n", en(r));
    if (r != CUDA_SUCCESS)
        return 0;
    sim_t_report("poolexport-fabric %s\n",
                 en(D.cuMemPoolExportToShareableHandle(&fh, pool,
                                                       CU_MEM_HANDLE_TYPE_FABRIC, 0)));
    r = D.cuMemPoolExportToShareableHandle(&fd, pool,
                                           CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    sim_t_report("poolexport-posix-on-fabric %s\n", en(r));
    if (r == CUDA_SUCCESS)
        close(fd);
    r = D.cuMemAllocFromPoolAsync(&fa, 64, pool, NULL);
    sim_t_report("pool-fabric-alloc %s\n", en(r));
    if (r == CUDA_SUCCESS) {
        sim_t_report("pool-fabric-free %s\n", en(D.cuMemFreeAsync(fa, NULL)));
        sim_t_report("pool-fabric-sync %s\n", en(D.cuCtxSynchronize()));
    }
    sim_t_report("pool-fabric-destroy %s\n", en(D.cuMemPoolDestroy(pool)));
    return 0;
}

static void probe_fabric_pool(void)
{
    char out[1024];
    int st = sim_t_run("fabric", NULL, NULL, out, sizeof(out));

    printf("%spool-fabric-child-exit %d\n", out, st);
}

static void probe_pools(void)
{
    CUmemPoolProps pp;
    CUmemoryPool pool, npool, imp, hpool;
    CUdeviceptr a, b, c, ia;
    CUmemPoolPtrExportData data;
    CUmemAccess_flags f;
    CUmemLocation loc = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
    CUmemAccessDesc d;
    int fd1 = -1, fd2 = -1;
    cuuint64_t v;
    char host[64];
    CUstream s;

    CU_OK(D.cuStreamCreateWithPriority(&s, 0, 0));
    probe_fabric_pool();
    memset(&pp, 0, sizeof(pp));
    pp.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    pp.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    pp.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
    pp.location.id = 3;
    P("poolcreate-baddev", D.cuMemPoolCreate(&pool, &pp));
    pp.location.id = 0;
    pp.reserved[0] = 1;
    P("poolcreate-reserved-nonzero", D.cuMemPoolCreate(&pool, &pp));
    pp.reserved[0] = 0;
    pp.maxSize = 64 * MiB;
    CU_OK(D.cuMemPoolCreate(&npool, &pp));
    pp.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    CU_OK(D.cuMemPoolCreate(&pool, &pp));

    printf("pool-init used=%llu reserved=%llu thr=%llu\n",
           (unsigned long long)pa(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT),
           (unsigned long long)pa(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT),
           (unsigned long long)pa(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD));
    CU_OK(D.cuMemAllocFromPoolAsync(&a, 1000, pool, s));
    printf("pool-after-1000 used=%llu reserved=%llu high=%llu\n",
           (unsigned long long)pa(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT),
           (unsigned long long)pa(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT),
           (unsigned long long)pa(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH));
    CU_OK(D.cuMemAllocFromPoolAsync(&b, 4096, pool, s));
    printf("pool-b-minus-a %lld\n", (long long)(b - a));
    printf("pool-align256 %d\n", a % 256 == 0 && b % 256 == 0);
    printf("pool-after-4096 used=%llu reserved=%llu\n",
           (unsigned long long)pa(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT),
           (unsigned long long)pa(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT));
    CU_OK(D.cuMemFreeAsync(a, s));
    printf("pool-after-free-nosync used=%llu reserved=%llu\n",
           (unsigned long long)pa(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT),
           (unsigned long long)pa(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT));
    CU_OK(D.cuStreamSynchronize(s));
    printf("pool-after-free-sync used=%llu reserved=%llu\n",
           (unsigned long long)pa(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT),
           (unsigned long long)pa(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT));
    CU_OK(D.cuMemAllocFromPoolAsync(&c, 512, pool, s));
    printf("pool-reuse-hole %d\n", c == a);
    P("pool-alloc-too-big", D.cuMemAllocFromPoolAsync(&ia, 65 * MiB, pool, s));
    ia = 77;
    P("pool-alloc-0", D.cuMemAllocFromPoolAsync(&ia, 0, pool, s));
    printf("pool-alloc-0-ptr-is-null %d\n", ia == 0);
    if (ia == 0)
        P("pool-free-0", D.cuMemFreeAsync(0, s));
    P("pool-free-null", D.cuMemFreeAsync(0, s));
    P("pool-free-interior", D.cuMemFreeAsync(b + 256, s));
    P("pool-free-host-ptr", D.cuMemFreeAsync((CUdeviceptr)(uintptr_t)host, s));
    v = 5;
    P("pool-set-usedhigh-5", D.cuMemPoolSetAttribute(
                                  pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &v));
    P("pool-set-usedcurrent", D.cuMemPoolSetAttribute(
                                  pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &v));

    /* copies */
    memset(host, 7, sizeof(host));
    P("memcpy-htod-host-dst",
      D.cuMemcpyHtoDAsync((CUdeviceptr)(uintptr_t)host, host + 8, 8, s));
    P("memset-host-dst", D.cuMemsetD8Async((CUdeviceptr)(uintptr_t)host, 0, 8, s));
    P("memcpy-h2h-via-cuMemcpyAsync",
      D.cuMemcpyAsync((CUdeviceptr)(uintptr_t)host,
                      (CUdeviceptr)(uintptr_t)(host + 8), 8, s));
    CU_OK(D.cuStreamSynchronize(s));

    /* access */
    CU_OK(D.cuMemPoolGetAccess(&f, pool, &loc));
    PV("pool-access-owner", "%d", (int)f);
    memset(&d, 0, sizeof(d));
    d.location = loc;
    d.flags = CU_MEM_ACCESS_FLAGS_PROT_NONE;
    P("pool-setaccess-owner-none", D.cuMemPoolSetAccess(pool, &d, 1));
    d.flags = CU_MEM_ACCESS_FLAGS_PROT_READ;
    P("pool-setaccess-owner-read", D.cuMemPoolSetAccess(pool, &d, 1));
    d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    P("pool-setaccess-owner-rw", D.cuMemPoolSetAccess(pool, &d, 1));
    {
        CUmemLocation hl = {CU_MEM_LOCATION_TYPE_HOST, 0};
        f = 99;
        P("pool-getaccess-host-on-devpool", D.cuMemPoolGetAccess(&f, pool, &hl));
        PV("pool-getaccess-host-on-devpool-value", "%d", (int)f);
    }

    /* export */
    P("exportptr-before-export", D.cuMemPoolExportPointer(&data, b));
    P("poolexport-nonepool", D.cuMemPoolExportToShareableHandle(
                                 &fd1, npool,
                                 CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    CU_OK(D.cuMemPoolExportToShareableHandle(
        &fd1, pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    CU_OK(D.cuMemPoolExportToShareableHandle(
        &fd2, pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    printf("poolexport-new-fd-each %d\n", fd1 != fd2);
    printf("poolexport-cloexec %d\n", sim_t_is_cloexec(fd1));
    P("exportptr-after-export", D.cuMemPoolExportPointer(&data, b));
    P("exportptr-interior", D.cuMemPoolExportPointer(&data, b + 256));
    P("poolimport-same-process", D.cuMemPoolImportFromShareableHandle(
                                     &imp, (void *)(uintptr_t)fd1,
                                     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                     0));
    printf("poolimport-fd-still-open %d\n", fcntl(fd1, F_GETFD) >= 0);
    {
        int mfd = memfd_create("junk", MFD_CLOEXEC);
        if (ftruncate(mfd, 8192) != 0)
            return;
        P("poolimport-junk-memfd", D.cuMemPoolImportFromShareableHandle(
                                       &hpool, (void *)(uintptr_t)mfd,
                                       CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                       0));
        close(mfd);
    }
    printf("poolexport-fd-fstat-size ");
    {
        struct stat st;
        if (fstat(fd2, &st) == 0)
            printf("mode=%o size=%lld\n", (unsigned)st.st_mode & 0170000,
                   (long long)st.st_size);
        else
            printf("fstat failed\n");
    }
    close(fd1);
    close(fd2);

    /* host pool */
    memset(&pp, 0, sizeof(pp));
    pp.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    pp.location.type = CU_MEM_LOCATION_TYPE_HOST;
    P("poolcreate-host", D.cuMemPoolCreate(&hpool, &pp));
    pp.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
    pp.location.id = 0;
    P("poolcreate-hostnuma0", D.cuMemPoolCreate(&hpool, &pp));

    CU_OK(D.cuMemFreeAsync(b, s));
    CU_OK(D.cuMemFreeAsync(c, s));
    CU_OK(D.cuStreamSynchronize(s));
    CU_OK(D.cuMemPoolDestroy(pool));
    CU_OK(D.cuMemPoolDestroy(npool));
    CU_OK(D.cuStreamDestroy(s));
}

/* ---- a pool and an IPC event in another process ---------------------------- */

struct xmsg {
    CUmemPoolPtrExportData data;
    CUipcEventHandle ev;
};

static int child_import(void)
{
    int sock = sim_t_child_fd(), fd = -1, r;
    struct xmsg m;
    CUmemoryPool pool;
    CUdeviceptr p, q;
    CUmemAccess_flags f = (CUmemAccess_flags)99;
    CUmemLocation loc = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
    CUmemPoolPtrExportData bad;
    CUevent e;
    unsigned char b[4] = {0};
    char out[2048];
    int n = 0, f0;
    CUresult xr;

    sim_t_init_ctx(0);
    r = sim_t_recv(sock, &m, sizeof(m), &fd, 1);
    (void)r;
    f0 = nfds_open();
    xr = D.cuIpcOpenEventHandle(&e, m.ev);
    n += snprintf(out + n, sizeof(out) - (size_t)n, "x-ipcopen %s\n", en(xr));
    n += snprintf(out + n, sizeof(out) - (size_t)n, "x-ipcopen-fds %+d\n",
                  nfds_open() - f0);
    n += snprintf(out + n, sizeof(out) - (size_t)n, "x-ipc-query %s\n",
                  en(D.cuEventQuery(e)));
    n += snprintf(out + n, sizeof(out) - (size_t)n, "x-ipc-getowner %s\n",
                  en(D.cuIpcGetEventHandle(&m.ev, e)));
    f0 = nfds_open();
    xr = D.cuMemPoolImportFromShareableHandle(&pool, (void *)(uintptr_t)fd,
                                              CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    n += snprintf(out + n, sizeof(out) - (size_t)n, "x-poolimport %s\n", en(xr));
    n += snprintf(out + n, sizeof(out) - (size_t)n, "x-poolimport-fds %+d\n",
                  nfds_open() - f0);
    n += snprintf(out + n, sizeof(out) - (size_t)n, "x-fd-still-open %d\n",
                  fcntl(fd, F_GETFD) >= 0);
    D.cuMemPoolGetAccess(&f, pool, &loc);
    n += snprintf(out + n, sizeof(out) - (size_t)n, "x-imported-owner-access %d\n",
                  (int)f);
    n += snprintf(out + n, sizeof(out) - (size_t)n, "x-alloc-from-imported %s\n",
                  en(D.cuMemAllocFromPoolAsync(&q, 64, pool, NULL)));
    n += snprintf(out + n, sizeof(out) - (size_t)n, "x-export-imported %s\n",
                  en(D.cuMemPoolExportToShareableHandle(
                      &r, pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0)));
    bad = m.data;
    bad.reserved[0] ^= 0xff;
    bad.reserved[9] ^= 0xff;
    n += snprintf(out + n, sizeof(out) - (size_t)n, "x-importptr-bad %s\n",
                  en(D.cuMemPoolImportPointer(&q, pool, &bad)));
    n += snprintf(out + n, sizeof(out) - (size_t)n, "x-importptr %s\n",
                  en(D.cuMemPoolImportPointer(&p, pool, &m.data)));
    D.cuMemcpyDtoHAsync(b, p, 4, NULL);
    D.cuCtxSynchronize();
    n += snprintf(out + n, sizeof(out) - (size_t)n, "x-bytes %d %d\n", b[0], b[3]);
    /* (the call first: the arguments of one snprintf are unsequenced, and
     * this line once compared q before the call had set it) */
    q = 0;
    xr = D.cuMemPoolImportPointer(&q, pool, &m.data);
    n += snprintf(out + n, sizeof(out) - (size_t)n, "x-importptr-twice %s same=%d\n",
                  en(xr), q == p);
    cuuint64_t v = 12345;
    CUresult ar = D.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &v);
    n += snprintf(out + n, sizeof(out) - (size_t)n, "x-imported-used %s %llu\n",
                  en(ar), (unsigned long long)v);
    ar = D.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &v);
    n += snprintf(out + n, sizeof(out) - (size_t)n, "x-imported-threshold %s\n",
                  en(ar));
    {
        int ru = 77;
        ar = D.cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, &ru);
        n += snprintf(out + n, sizeof(out) - (size_t)n, "x-imported-reuse %s %d\n",
                      en(ar), ru);
        v = 0;
        ar = D.cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &v);
        n += snprintf(out + n, sizeof(out) - (size_t)n, "x-imported-set-threshold %s\n",
                      en(ar));
    }
    {
        CUmemAccessDesc dd;
        memset(&dd, 0, sizeof(dd));
        dd.location = loc;
        dd.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        n += snprintf(out + n, sizeof(out) - (size_t)n, "x-imported-setaccess %s\n",
                      en(D.cuMemPoolSetAccess(pool, &dd, 1)));
    }
    n += snprintf(out + n, sizeof(out) - (size_t)n, "x-free-imported %s\n",
                  en(D.cuMemFreeAsync(p, NULL)));
    D.cuCtxSynchronize();
    n += snprintf(out + n, sizeof(out) - (size_t)n, "x-pooldestroy %s\n",
                  en(D.cuMemPoolDestroy(pool)));
    sim_t_report("%s", out);
    return 0;
}

static void probe_cross(void)
{
    CUmemPoolProps pp;
    CUmemoryPool pool;
    CUdeviceptr a;
    CUevent e;
    struct xmsg m;
    int fd = -1, sv[2];
    char out[4096];
    ssize_t len = 0;
    pid_t pid;

    memset(&pp, 0, sizeof(pp));
    pp.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    pp.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    pp.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    if (D.cuMemPoolCreate(&pool, &pp) || D.cuMemAllocFromPoolAsync(&a, 4096, pool, NULL) ||
        D.cuMemsetD8Async(a, 0x5a, 4096, NULL) || D.cuCtxSynchronize() ||
        D.cuMemPoolExportToShareableHandle(&fd, pool,
                                           CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) ||
        D.cuMemPoolExportPointer(&m.data, a) ||
        D.cuEventCreate(&e, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING) ||
        D.cuEventRecord(e, NULL) || D.cuIpcGetEventHandle(&m.ev, e)) {
        printf("x-setup failed\n");
        return;
    }
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
        return;
    pid = spawn_self("import", NULL, NULL, sv[1]);
    close(sv[1]);
    sim_t_send(sv[0], &m, sizeof(m), &fd, 1);
    for (;;) {
        ssize_t r = read(sv[0], out + len, sizeof(out) - 1 - (size_t)len);
        if (r <= 0)
            break;
        len += r;
    }
    out[len] = '\0';
    close(sv[0]);
    printf("%sx-child-exit %d\n", out, wait_child(pid));
    printf("x-exporter-free %s\n", en(D.cuMemFreeAsync(a, NULL)));
    D.cuCtxSynchronize();
    printf("x-exporter-destroy %s\n", en(D.cuMemPoolDestroy(pool)));
    close(fd);
}

/* ---- VMM --------------------------------------------------------------------- */

/* After "vmm-map-past-reservation-end" succeeded: a 4 MiB allocation mapped
 * at 6 MiB of the 8 MiB reservation at base, so 2 MiB past its end, after
 * which the next reservation's cuMemMap (probe_risky) can fail
 * (sim/FACTS.md F40): is the VA past the end handed out again while still
 * mapped? A reservation asked for right there, and a map into it, answer
 * that; then the mapping is undone so later sections start clean. */
static void probe_vmm_spill(CUdeviceptr base, const CUmemAllocationProp *p)
{
    CUmemGenericAllocationHandle h3;
    CUdeviceptr nb = 0;
    CUresult r;

    r = D.cuMemAddressReserve(&nb, 2 * MiB, 0, base + 8 * MiB, 0);
    printf("vmm-spill-reserve-at-end %s at-hint=%d\n", en(r), nb == base + 8 * MiB);
    if (r == CUDA_SUCCESS) {
        if (nb == base + 8 * MiB && D.cuMemCreate(&h3, 2 * MiB, p, 0) == CUDA_SUCCESS) {
            r = D.cuMemMap(nb, 2 * MiB, 0, h3, 0);
            P("vmm-spill-map-over", r);
            if (r == CUDA_SUCCESS)
                P("vmm-spill-unmap-over", D.cuMemUnmap(nb, 2 * MiB));
            D.cuMemRelease(h3);
        }
        P("vmm-spill-reserve-free", D.cuMemAddressFree(nb, 2 * MiB));
    }
    P("vmm-unmap-past-end", D.cuMemUnmap(base + 6 * MiB, 4 * MiB));
    P("vmm-addressfree-after-unmap", D.cuMemAddressFree(base, 8 * MiB));
}

static void probe_vmm(void)
{
    CUmemAllocationProp p;
    CUmemGenericAllocationHandle h, h2, hn;
    CUdeviceptr base, o2;
    CUmemAccessDesc d;
    size_t g = 0;
    unsigned long long fl;
    CUmemLocation loc = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
    int fd;
    char host[64];

    memset(&p, 0, sizeof(p));
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location = loc;
    p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    CU_OK(D.cuMemGetAllocationGranularity(&g, &p, 0));
    PV("vmm-gran-min", "%zu", g);
    CU_OK(D.cuMemGetAllocationGranularity(&g, &p, 1));
    PV("vmm-gran-rec", "%zu", g);
    P("vmm-gran-badopt",
      D.cuMemGetAllocationGranularity(&g, &p, (CUmemAllocationGranularity_flags)5));
    P("vmm-create-1MiB", D.cuMemCreate(&h, MiB, &p, 0));
    {
        CUmemAllocationProp q = p;
        q.requestedHandleTypes = CU_MEM_HANDLE_TYPE_FABRIC;
        P("vmm-create-fabric", D.cuMemCreate(&h, 2 * MiB, &q, 0));
        q.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
        CU_OK(D.cuMemCreate(&hn, 2 * MiB, &q, 0));
        P("vmm-export-without-type",
          D.cuMemExportToShareableHandle(&fd, hn,
                                         CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
        CU_OK(D.cuMemRelease(hn));
        q.location.id = 5;
        P("vmm-create-baddev", D.cuMemCreate(&h, 2 * MiB, &q, 0));
    }
    CU_OK(D.cuMemCreate(&h, 2 * MiB, &p, 0));
    CU_OK(D.cuMemCreate(&h2, 4 * MiB, &p, 0));
    P("vmm-reserve-align3", D.cuMemAddressReserve(&base, 8 * MiB, 3, 0, 0));
    P("vmm-reserve-size100", D.cuMemAddressReserve(&base, 100, 0, 0, 0));
    P("vmm-reserve-size64K", D.cuMemAddressReserve(&o2, 65536, 0, 0, 0));
    if (o2)
        D.cuMemAddressFree(o2, 65536);
    CU_OK(D.cuMemAddressReserve(&base, 8 * MiB, 0, 0, 0));
    printf("vmm-reserve-aligned-2MiB %d\n", base % (2 * MiB) == 0);
    P("vmm-map-offset", D.cuMemMap(base, 2 * MiB, 2 * MiB, h2, 0));
    P("vmm-map-toobig", D.cuMemMap(base, 4 * MiB, 0, h, 0));
    P("vmm-map-partial-of-4MiB", D.cuMemMap(base + 6 * MiB, 2 * MiB, 0, h2, 0));
    D.cuMemUnmap(base + 6 * MiB, 2 * MiB);
    CU_OK(D.cuMemMap(base, 2 * MiB, 0, h, 0));
    P("vmm-map-overlap", D.cuMemMap(base, 2 * MiB, 0, h2, 0));
    CU_OK(D.cuMemMap(base + 2 * MiB, 4 * MiB, 0, h2, 0));
    fl = 99;
    P("vmm-getaccess-before-set", D.cuMemGetAccess(&fl, &loc, base));
    PV("vmm-getaccess-before-set-value", "%llu", fl);
    memset(&d, 0, sizeof(d));
    d.location = loc;
    d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    P("vmm-setaccess-partial", D.cuMemSetAccess(base, MiB, &d, 1));
    P("vmm-setaccess-inside-one", D.cuMemSetAccess(base + 2 * MiB, 2 * MiB, &d, 1));
    fl = 99;
    D.cuMemGetAccess(&fl, &loc, base + 2 * MiB);
    PV("vmm-getaccess-after-inside-one", "%llu", fl);
    P("vmm-setaccess-past-mapped", D.cuMemSetAccess(base, 8 * MiB, &d, 1));
    P("vmm-setaccess-count0", D.cuMemSetAccess(base, 6 * MiB, &d, 0));
    P("vmm-setaccess-two-maps", D.cuMemSetAccess(base, 6 * MiB, &d, 1));
    d.flags = CU_MEM_ACCESS_FLAGS_PROT_READ;
    P("vmm-setaccess-read", D.cuMemSetAccess(base, 2 * MiB, &d, 1));
    fl = 99;
    D.cuMemGetAccess(&fl, &loc, base);
    PV("vmm-getaccess-after-read", "%llu", fl);
    d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CU_OK(D.cuMemSetAccess(base, 2 * MiB, &d, 1));
    memset(host, 1, sizeof(host));
    P("vmm-htod-across-seam", D.cuMemcpyHtoDAsync(base + 2 * MiB - 32, host, 64, NULL));
    D.cuCtxSynchronize();
    P("vmm-getaccess-unmapped", D.cuMemGetAccess(&fl, &loc, base + 7 * MiB));
    P("vmm-addressfree-while-mapped", D.cuMemAddressFree(base, 8 * MiB));
    P("vmm-unmap-partial", D.cuMemUnmap(base + 2 * MiB, 2 * MiB));
    CU_OK(D.cuMemRelease(h));
    P("vmm-dtoh-after-release-mapped", D.cuMemcpyDtoHAsync(host, base, 8, NULL));
    D.cuCtxSynchronize();
    P("vmm-unmap-two-at-once", D.cuMemUnmap(base, 6 * MiB));
    P("vmm-unmap-again", D.cuMemUnmap(base, 2 * MiB));
    P("vmm-unmap-1MiB-unmapped", D.cuMemUnmap(base, MiB));
    P("vmm-unmap-outside-reservation", D.cuMemUnmap(base + 64 * MiB, 2 * MiB));
    P("vmm-map-outside-reservation", D.cuMemMap(base + 64 * MiB, 4 * MiB, 0, h2, 0));
    {
        CUresult past = D.cuMemMap(base + 6 * MiB, 4 * MiB, 0, h2, 0);
        P("vmm-map-past-reservation-end", past);
        P("vmm-addressfree-wrongsize", D.cuMemAddressFree(base, 4 * MiB));
        P("vmm-addressfree", D.cuMemAddressFree(base, 8 * MiB));
        if (past == CUDA_SUCCESS)
            probe_vmm_spill(base, &p);
    }
    CU_OK(D.cuMemExportToShareableHandle(&fd, h2,
                                         CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    printf("vmm-export-cloexec %d\n", sim_t_is_cloexec(fd));
    {
        struct stat st;
        if (fstat(fd, &st) == 0)
            printf("vmm-export-fd-fstat mode=%o size=%lld\n",
                   (unsigned)st.st_mode & 0170000, (long long)st.st_size);
        else
            printf("vmm-export-fd-fstat failed\n");
    }
    {
        CUmemGenericAllocationHandle hi;
        P("vmm-import-same-process",
          D.cuMemImportFromShareableHandle(&hi, (void *)(uintptr_t)fd,
                                           CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
        printf("vmm-import-fd-still-open %d\n", fcntl(fd, F_GETFD) >= 0);
        printf("vmm-import-same-handle %d\n", hi == h2);
    }
    close(fd);
    CU_OK(D.cuMemRelease(h2));
}

/* Last: copies the simulator refuses and a GPU might fault on. */
static void probe_risky(void)
{
    CUmemAllocationProp p;
    CUmemGenericAllocationHandle h;
    CUdeviceptr base;
    CUmemAccessDesc d;
    CUmemLocation loc = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
    char host[64];
    CUresult r;

    memset(host, 3, sizeof(host));
    memset(&p, 0, sizeof(p));
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location = loc;
    CU_OK(D.cuMemCreate(&h, 2 * MiB, &p, 0));
    CU_OK(D.cuMemAddressReserve(&base, 4 * MiB, 0, 0, 0));
    /* (the whole 2 MiB allocation, refused while probe_vmm's mapping past
     * its reservation's end is in place, sim/FACTS.md F40; a fresh
     * reservation tells whether the place or the allocation is the
     * reason) */
    r = D.cuMemMap(base, 2 * MiB, 0, h, 0);
    P("risky-map", r);
    if (r != CUDA_SUCCESS) {
        CUdeviceptr b2;
        D.cuMemAddressFree(base, 4 * MiB);
        CU_OK(D.cuMemAddressReserve(&b2, 4 * MiB, 0, 0, 0));
        base = b2;
        r = D.cuMemMap(base, 2 * MiB, 0, h, 0);
        P("risky-map-fresh-reservation", r);
    }
    if (r == CUDA_SUCCESS) {
        memset(&d, 0, sizeof(d));
        d.location = loc;
        d.flags = CU_MEM_ACCESS_FLAGS_PROT_READ;
        CU_OK(D.cuMemSetAccess(base, 2 * MiB, &d, 1));
        P("risky-vmm-htod-into-readonly", D.cuMemcpyHtoDAsync(base, host, 8, NULL));
        P("risky-sync1", D.cuCtxSynchronize());
        P("risky-vmm-htod-past-mapped",
          D.cuMemcpyHtoDAsync(base + 2 * MiB - 8, host, 16, NULL));
        P("risky-sync2", D.cuCtxSynchronize());
    }
    {
        CUmemPoolProps pp;
        CUmemoryPool pool;
        CUdeviceptr a;
        memset(&pp, 0, sizeof(pp));
        pp.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
        pp.location = loc;
        if (D.cuMemPoolCreate(&pool, &pp) == CUDA_SUCCESS &&
            D.cuMemAllocFromPoolAsync(&a, 4096, pool, NULL) == CUDA_SUCCESS) {
            P("risky-pool-htod-past-end", D.cuMemcpyHtoDAsync(a + 4090, host, 64, NULL));
            P("risky-sync3", D.cuCtxSynchronize());
        }
    }
}

/* ---- lazy loading and driver-held fds ---------------------------------------- */

static int nfds_open(void)
{
    int n = 0;
    for (int fd = 0; fd < 4096; fd++)
        n += fcntl(fd, F_GETFD) >= 0;
    return n;
}

/* Which bad images cuLibraryLoadData refuses at once and which it takes
 * (lazy loading) and only cuLibraryGetKernel refuses. */
static void load_then_get(const char *key, const void *img, const char *name)
{
    load_get_unload(key, "-load", img, name);
}

static void probe_lazy(void)
{
    unsigned char elf[128];
    static const char ptx[] = ".version 7.0\n.target sm_70\n.address_size 64\n"
                              ".visible .entry k1()\n{\n\tret;\n}\n";

    memset(elf, 0, sizeof(elf));
    memcpy(elf, "\x7f" "ELF", 4);
    elf[4] = 2, elf[5] = 1, elf[6] = 1, elf[16] = 1, elf[18] = 62, elf[20] = 1;
    elf[40] = 64, elf[52] = 64, elf[58] = 64, elf[60] = 1;
    load_then_get("lazy-x86-elf", elf, "k");
    load_then_get("lazy-not-ptx", "this is not PTX", "k");
    load_then_get("lazy-garbage-text", "garbage text", "twice");
    load_then_get("lazy-sm70-ptx", ptx, "k1");
    load_then_get("lazy-sm70-ptx-missing", ptx, "nope");
}

/* A pool without a handle type, and an IPC pool that allocates before
 * its export: what each step opens. */
static void probe_fds_pool_orders(void)
{
    for (int ipc = 0; ipc < 2; ipc++) {
        CUmemPoolProps pp;
        CUmemoryPool pool;
        CUdeviceptr b;
        int n0, n1, n2, n3, n4, fd = -1;

        memset(&pp, 0, sizeof(pp));
        pp.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
        pp.handleTypes = ipc ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
                             : CU_MEM_HANDLE_TYPE_NONE;
        pp.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        pp.location.id = 0;
        n0 = nfds_open();
        CU_OK(D.cuMemPoolCreate(&pool, &pp));
        n1 = nfds_open();
        CU_OK(D.cuMemAllocFromPoolAsync(&b, 1 << 20, pool, NULL));
        CU_OK(D.cuCtxSynchronize());
        n2 = nfds_open();
        if (ipc)
            CU_OK(D.cuMemPoolExportToShareableHandle(
                &fd, pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
        n3 = nfds_open();
        CU_OK(D.cuMemFreeAsync(b, NULL));
        CU_OK(D.cuCtxSynchronize());
        if (fd >= 0)
            close(fd);
        CU_OK(D.cuMemPoolDestroy(pool));
        n4 = nfds_open();
        printf("fds-%s base %d created %+d alloc %+d exported %+d destroyed+closed %+d\n",
               ipc ? "ipc-pool-alloc-first" : "pool-none", n0, n1 - n0, n2 - n0,
               n3 - n0, n4 - n0);
    }
}

/* rounds IPC events in the current context, each made, given a handle
 * and destroyed: what each step leaves open, against the fds before the
 * first ("fds-ipc-event<label>-N base ... created ... destroyed ..."). */
static void ipc_event_fds(const char *label, int rounds)
{
    CUipcEventHandle h;
    CUevent e;
    int n0 = nfds_open(), n1, n2, n3;

    for (int i = 0; i < rounds; i++) {
        CU_OK(D.cuEventCreate(&e, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING));
        n1 = nfds_open();
        CU_OK(D.cuIpcGetEventHandle(&h, e));
        n2 = nfds_open();
        CU_OK(D.cuEventDestroy(e));
        n3 = nfds_open();
        printf("fds-ipc-event%s-%d base %d created %+d handle %+d destroyed %+d\n", label,
               i, n0, n1 - n0, n2 - n0, n3 - n0);
    }
}

static void probe_fds(void)
{
    int n0, n1, n2, n3;

    ipc_event_fds("", 3);
    for (int i = 0; i < 3; i++) {
        CUmemPoolProps pp;
        CUmemoryPool pool;
        CUdeviceptr b;
        CUmemPoolPtrExportData d1, d2;
        int fd;

        memset(&pp, 0, sizeof(pp));
        pp.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
        pp.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        pp.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        pp.location.id = 0;
        n0 = nfds_open();
        CU_OK(D.cuMemPoolCreate(&pool, &pp));
        n1 = nfds_open();
        CU_OK(D.cuMemPoolExportToShareableHandle(
            &fd, pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
        n2 = nfds_open();
        CU_OK(D.cuMemAllocFromPoolAsync(&b, 1 << 20, pool, NULL));
        CU_OK(D.cuCtxSynchronize());
        memset(&d1, 0xa5, sizeof(d1));
        memset(&d2, 0x5a, sizeof(d2));
        CU_OK(D.cuMemPoolExportPointer(&d1, b));
        CU_OK(D.cuMemPoolExportPointer(&d2, b));
        /* (the fills differ, so the 64 bytes differ wherever the driver
         * writes nothing: the first 48 are the export's) */
        printf("exportptr-twice-same-bytes %d\n", memcmp(&d1, &d2, sizeof(d1)) == 0);
        printf("exportptr-twice-same-first48 %d\n", memcmp(&d1, &d2, 48) == 0);
        printf("exportptr-bytes");
        for (size_t j = 0; j < sizeof(d1); j++)
            printf("%s%02x", j % 8 ? "" : " ", d1.reserved[j]);
        printf("\n");
        printf("exportptr-bytes2");
        for (size_t j = 0; j < sizeof(d2); j++)
            printf("%s%02x", j % 8 ? "" : " ", d2.reserved[j]);
        printf("\n");
        CU_OK(D.cuMemFreeAsync(b, NULL));
        CU_OK(D.cuCtxSynchronize());
        close(fd);
        CU_OK(D.cuMemPoolDestroy(pool));
        n3 = nfds_open();
        printf("fds-ipc-pool-%d base %d created %+d exported %+d destroyed+closed %+d\n",
               i, n0, n1 - n0, n2 - n0, n3 - n0);
    }
    probe_fds_pool_orders();
}

/* With a second GPU: does its first IPC event open an fd of its own, or
 * was the one device 0's first event opened the process's? (After
 * probe_fds, which made device 0's.) */
static void probe_fds_second_device(void)
{
    CUcontext ctx;
    int count = 0, n0;

    CU_OK(D.cuDeviceGetCount(&count));
    if (count < 2) {
        printf("fds-ipc-event-dev1 no second device\n");
        return;
    }
    n0 = nfds_open();
    CU_OK(D.cuDevicePrimaryCtxRetain(&ctx, 1));
    CU_OK(D.cuCtxSetCurrent(ctx));
    printf("fds-primary-ctx-dev1 %+d\n", nfds_open() - n0);
    ipc_event_fds("-dev1", 2);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc >= 3 && strcmp(argv[1], "--child") == 0)
        return strcmp(argv[2], "cvd") == 0      ? child_cvd()
               : strcmp(argv[2], "import") == 0 ? child_import()
               : strcmp(argv[2], "fabric") == 0 ? child_fabric()
                                                : 2;
    unsetenv("CUDA_VISIBLE_DEVICES");
    sim_t_load();
    if (argc >= 2 && strcmp(argv[1], "--lazy-fds") == 0) {
        int n = nfds_open();
        sim_t_init_ctx(0);
        printf("fds-primary-ctx %+d\n", nfds_open() - n);
        probe_lazy();
        probe_fds();
        probe_fds_second_device();
        return 0;
    }
    probe_proc();
    probe_devices();
    probe_cvd();
    probe_ctx_streams();
    probe_library();
    probe_pools();
    probe_cross();
    probe_vmm();
    probe_lazy();
    probe_fds();
    probe_fds_second_device();
    probe_risky();
    printf("done\n");
    return 0;
}
