/* Simulator: cuGetProcAddress (base names, versions, per-thread forms,
 * CUCORE_SIM_HIDE), the exported ABI names and the plain names' first
 * ABIs, state before cuInit, cuInit errors, error names. */
#include "../sim/testdata/sim_test.h"

#include <limits.h>

static void *sym(const char *name)
{
    return dlsym(D.handle, name);
}

static void *gpa_ok(const char *name, int ver, cuuint64_t flags)
{
    void *p = NULL;
    CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;

    CU_OK(D.gpa(name, &p, ver, flags, &st));
    CHECK(st == CU_GET_PROC_ADDRESS_SUCCESS);
    CHECK(p != NULL);
    return p;
}

static void gpa_fails(const char *name, int ver,
                      CUdriverProcAddressQueryResult want)
{
    void *p = (void *)&p;
    CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SUCCESS;

    /* as the driver: success, a NULL pointer, the reason in the status */
    CU_OK(D.gpa(name, &p, ver, 0, &st));
    CHECK(st == want);
    CHECK(p == NULL);
}

static void test_proc_address(void)
{
    void *p = NULL;
    CUdriverProcAddressQueryResult st;

    /* Base name + version -> the ABI symbol libcuda exports. */
    CHECK(gpa_ok("cuInit", 2000, 0) == sym("cuInit"));
    CHECK(gpa_ok("cuDeviceTotalMem", 3020, 0) == sym("cuDeviceTotalMem_v2"));
    CHECK(gpa_ok("cuStreamDestroy", 4000, 0) == sym("cuStreamDestroy_v2"));
    CHECK(gpa_ok("cuEventDestroy", 4000, 0) == sym("cuEventDestroy_v2"));
    CHECK(gpa_ok("cuDevicePrimaryCtxRelease", 11000, 0) ==
          sym("cuDevicePrimaryCtxRelease_v2"));
    CHECK(gpa_ok("cuDeviceGetUuid", 11040, 0) == sym("cuDeviceGetUuid_v2"));
    CHECK(gpa_ok("cuMemcpyHtoDAsync", 3020, 0) == sym("cuMemcpyHtoDAsync_v2"));
    CHECK(gpa_ok("cuMemcpyDtoHAsync", 3020, 0) == sym("cuMemcpyDtoHAsync_v2"));
    CHECK(gpa_ok("cuEventElapsedTime", 12080, 0) ==
          sym("cuEventElapsedTime_v2"));
    CHECK(gpa_ok("cuGetProcAddress", 12000, 0) == sym("cuGetProcAddress_v2"));
    /* A newer request gets the newest version not above it. */
    CHECK(gpa_ok("cuStreamDestroy", 13000, 0) == sym("cuStreamDestroy_v2"));
    /* An older request gets the first ABI, the plain-name export
     * (sim/FACTS.md F5). */
    CHECK(gpa_ok("cuStreamDestroy", 3000, 0) == sym("cuStreamDestroy"));
    CHECK(gpa_ok("cuEventDestroy", 2000, 0) == sym("cuEventDestroy"));
    CHECK(gpa_ok("cuDevicePrimaryCtxRelease", 7000, 0) ==
          sym("cuDevicePrimaryCtxRelease"));
    CHECK(gpa_ok("cuDeviceGetUuid", 9020, 0) == sym("cuDeviceGetUuid"));
    CHECK(gpa_ok("cuEventElapsedTime", 2000, 0) == sym("cuEventElapsedTime"));
    /* The 32-bit forms are there too (F5). */
    CHECK(gpa_ok("cuDeviceTotalMem", 2000, 0) == sym("cuDeviceTotalMem"));
    CHECK(gpa_ok("cuMemcpyHtoDAsync", 2000, 0) == sym("cuMemcpyHtoDAsync"));
    CHECK(gpa_ok("cuMemcpyDtoHAsync", 2000, 0) == sym("cuMemcpyDtoHAsync"));
    CHECK(gpa_ok("cuDeviceTotalMem", 3010, 0) == sym("cuDeviceTotalMem"));
    /* CUDA 13 changed cuCtxSynchronize's ABI (it takes a context). */
    CHECK(gpa_ok("cuCtxSynchronize", 12090, 0) == sym("cuCtxSynchronize"));
    CHECK(gpa_ok("cuCtxSynchronize", 13000, 0) == sym("cuCtxSynchronize_v2"));
    /* cuGetProcAddress asked at 11.3 is the 4-argument form, which is
     * the plain export (F5). */
    CHECK(gpa_ok("cuGetProcAddress", 11030, 0) == sym("cuGetProcAddress"));
    CHECK(sym("cuGetProcAddress") != sym("cuGetProcAddress_v2"));
    /* The per-thread-stream flag gives the _ptsz form (F5); without it,
     * or with the legacy flag, the plain one. */
    CHECK(gpa_ok("cuStreamQuery", 13000,
                 CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) ==
          sym("cuStreamQuery_ptsz"));
    CHECK(gpa_ok("cuStreamQuery", 13000, CU_GET_PROC_ADDRESS_LEGACY_STREAM) ==
          sym("cuStreamQuery"));
    CHECK(gpa_ok("cuStreamQuery", 13000, 0) == sym("cuStreamQuery"));
    CHECK(gpa_ok("cuMemcpyHtoDAsync", 13000,
                 CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) ==
          sym("cuMemcpyHtoDAsync_v2_ptsz"));
    CHECK(gpa_ok("cuMemFreeAsync", 13000,
                 CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) ==
          sym("cuMemFreeAsync_ptsz"));
    /* no _ptsz form before 7.0, nor for calls without a stream */
    CHECK(gpa_ok("cuStreamQuery", 6050,
                 CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) ==
          sym("cuStreamQuery"));
    CHECK(gpa_ok("cuStreamDestroy", 13000,
                 CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) ==
          sym("cuStreamDestroy_v2"));

    gpa_fails("cuNoSuchEntryPoint", 13000,
              CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    gpa_fails("cuStreamDestroy_v2", 13000,
              CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND); /* base names only */
    gpa_fails("cuMemPoolCreate", 11010,
              CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    gpa_fails("cuLibraryLoadData", 11080,
              CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    gpa_fails("", 13000, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    gpa_fails("cuInit", 0, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    /* cuda.h has no 32-bit async memset (not measured) */
    gpa_fails("cuMemsetD8Async", 2000,
              CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);

    CU_RC(D.gpa(NULL, &p, 13000, 0, &st), CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.gpa("cuInit", NULL, 13000, 0, &st), CUDA_ERROR_INVALID_VALUE);
    /* bad flags, or a version above the driver's: refused, nothing set */
    p = (void *)&st;
    st = (CUdriverProcAddressQueryResult)99;
    CU_RC(D.gpa("cuInit", &p, 13000, 4, &st), CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.gpa("cuInit", &p, 13010, 0, &st), CUDA_ERROR_INVALID_VALUE);
    CHECK(p == (void *)&st && st == (CUdriverProcAddressQueryResult)99);
    CU_OK(D.gpa("cuInit", &p, 13000, 0, NULL)); /* status is optional */
    CHECK(p == sym("cuInit"));
}

static void test_exports(void)
{
    static const char *const abi[] = {
        "cuGetProcAddress", "cuGetProcAddress_v2", "cuInit",
        "cuDriverGetVersion", "cuDeviceTotalMem_v2", "cuStreamDestroy_v2",
        "cuStreamDestroy", "cuEventDestroy_v2", "cuEventDestroy",
        "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease",
        "cuDeviceGetUuid_v2", "cuDeviceGetUuid", "cuMemcpyHtoDAsync_v2",
        "cuMemcpyDtoHAsync_v2", "cuEventElapsedTime_v2", "cuEventElapsedTime",
        "cuMemPoolCreate", "cuMemMap", "cuLaunchKernelEx", "cuLibraryLoadData",
        "cuDeviceTotalMem", "cuMemcpyHtoDAsync", "cuMemcpyDtoHAsync",
        "cuCtxGetStreamPriorityRange", "cuStreamQuery_ptsz",
        "cuStreamSynchronize_ptsz", "cuStreamWaitEvent_ptsz",
        "cuStreamGetPriority_ptsz", "cuStreamGetFlags_ptsz",
        "cuEventRecord_ptsz", "cuLaunchKernelEx_ptsz", "cuMemcpyAsync_ptsz",
        "cuMemcpyHtoDAsync_v2_ptsz", "cuMemcpyDtoHAsync_v2_ptsz",
        "cuMemsetD8Async_ptsz", "cuMemAllocFromPoolAsync_ptsz",
        "cuMemFreeAsync_ptsz", NULL};
    static const char *const hidden[] = {"sim_lock", "sim_parse_visible",
                                         "sim_image_scan", "sim", NULL};

    for (int i = 0; abi[i]; i++)
        if (!sym(abi[i])) {
            fprintf(stderr, "missing export %s\n", abi[i]);
            exit(1);
        }
    for (int i = 0; hidden[i]; i++)
        CHECK(sym(hidden[i]) == NULL);
}

/* The plain names with their first ABIs, as libcuda has them: the
 * 4-argument cuGetProcAddress and the 32-bit cuDeviceTotalMem and copies
 * (what those answer on a GPU was not measured). */
/* cudaTypedefs.h has these only for __CUDA_API_VERSION_INTERNAL. */
typedef CUresult(CUDAAPI *total32_fn)(unsigned int *bytes, CUdevice dev);
typedef CUresult(CUDAAPI *htod32_fn)(unsigned int dst, const void *src,
                                     unsigned int n, CUstream s);
typedef CUresult(CUDAAPI *dtoh32_fn)(void *dst, unsigned int src,
                                     unsigned int n, CUstream s);

static void test_plain_abis(void)
{
    PFN_cuGetProcAddress_v11030 gpa4;
    total32_fn total32;
    htod32_fn htod32;
    dtoh32_fn dtoh32;
    void *p = NULL, *s;
    unsigned int bytes = 0;
    char host[8] = {0};

    s = sym("cuGetProcAddress");
    memcpy(&gpa4, &s, sizeof(s));
    CU_OK(gpa4("cuInit", &p, 13000, 0));
    CHECK(p == sym("cuInit"));
    p = (void *)&p;
    CU_OK(gpa4("cuNoSuchEntryPoint", &p, 13000, 0));
    CHECK(p == NULL);
    CU_RC(gpa4("cuInit", &p, 13010, 0), CUDA_ERROR_INVALID_VALUE);

    s = sym("cuDeviceTotalMem");
    memcpy(&total32, &s, sizeof(s));
    CU_OK(total32(&bytes, 0));
    CHECK(bytes == UINT_MAX); /* 143155 MiB does not fit */
    CU_RC(total32(NULL, 0), CUDA_ERROR_INVALID_VALUE);
    CU_RC(total32(&bytes, 4), CUDA_ERROR_INVALID_DEVICE);

    s = sym("cuMemcpyHtoDAsync");
    memcpy(&htod32, &s, sizeof(s));
    s = sym("cuMemcpyDtoHAsync");
    memcpy(&dtoh32, &s, sizeof(s));
    CU_RC(htod32(0, host, sizeof(host), NULL), CUDA_ERROR_INVALID_CONTEXT);
    sim_t_init_ctx(0);
    /* no allocation lies below 4 GiB: a 32-bit pointer is not device memory */
    CU_RC(htod32(4096, host, sizeof(host), NULL), CUDA_ERROR_INVALID_VALUE);
    CU_RC(dtoh32(host, 4096, sizeof(host), NULL), CUDA_ERROR_INVALID_VALUE);
    CU_OK(D.cuDevicePrimaryCtxRelease(0));
    CU_OK(D.cuCtxSetCurrent(NULL));
}

static void test_before_init(void)
{
    int v = 0, n = -1;
    CUdevice dev;
    CUcontext ctx = (CUcontext)&v;
    const char *s = NULL;
    CUmemoryPool pool;
    CUmemPoolProps props;
    CUmemAllocationProp aprop;
    CUmemGenericAllocationHandle h;
    CUlibrary lib;
    CUevent ev;
    CUstream st;
    size_t g;

    CU_OK(D.cuDriverGetVersion(&v));
    CHECK(v == 13000);
    CU_RC(D.cuDriverGetVersion(NULL), CUDA_ERROR_INVALID_VALUE);
    CU_OK(D.cuGetErrorName(CUDA_ERROR_NO_DEVICE, &s));
    CHECK(strcmp(s, "CUDA_ERROR_NO_DEVICE") == 0);
    CU_OK(D.cuGetErrorString(CUDA_ERROR_NO_DEVICE, &s));
    CHECK(strcmp(s, "no CUDA-capable device is detected") == 0);

    memset(&props, 0, sizeof(props));
    memset(&aprop, 0, sizeof(aprop));
    CU_RC(D.cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
    CHECK(n == -1);
    CU_RC(D.cuDeviceGet(&dev, 0), CUDA_ERROR_NOT_INITIALIZED);
    CU_RC(D.cuCtxGetCurrent(&ctx), CUDA_ERROR_NOT_INITIALIZED);
    CU_RC(D.cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_ERROR_NOT_INITIALIZED);
    CU_RC(D.cuStreamCreateWithPriority(&st, 0, 0), CUDA_ERROR_NOT_INITIALIZED);
    CU_RC(D.cuEventCreate(&ev, 0), CUDA_ERROR_NOT_INITIALIZED);
    CU_RC(D.cuMemPoolCreate(&pool, &props), CUDA_ERROR_NOT_INITIALIZED);
    CU_RC(D.cuMemCreate(&h, 2 << 20, &aprop, 0), CUDA_ERROR_NOT_INITIALIZED);
    CU_RC(D.cuMemGetAllocationGranularity(&g, &aprop, 0),
          CUDA_ERROR_NOT_INITIALIZED);
    CU_RC(D.cuLibraryLoadData(&lib, ".version 8.0", NULL, NULL, 0, NULL, NULL,
                              0),
          CUDA_ERROR_NOT_INITIALIZED);
    CU_RC(D.cuStreamSynchronize(NULL), CUDA_ERROR_NOT_INITIALIZED);

    CU_RC(D.cuInit(1), CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
    CU_OK(D.cuInit(0));
    CU_OK(D.cuInit(0)); /* again: still fine */
    CU_OK(D.cuDeviceGetCount(&n));
    CHECK(n == 4);
}

static void test_error_names(void)
{
#define NAME_ROW(c) {c, #c},
    static const struct {
        CUresult code;
        const char *name;
    } rows[] = {
        NAME_ROW(CUDA_SUCCESS) NAME_ROW(CUDA_ERROR_INVALID_VALUE)
        NAME_ROW(CUDA_ERROR_OUT_OF_MEMORY) NAME_ROW(CUDA_ERROR_NOT_INITIALIZED)
        NAME_ROW(CUDA_ERROR_NO_DEVICE) NAME_ROW(CUDA_ERROR_INVALID_DEVICE)
        NAME_ROW(CUDA_ERROR_INVALID_IMAGE) NAME_ROW(CUDA_ERROR_INVALID_CONTEXT)
        NAME_ROW(CUDA_ERROR_NO_BINARY_FOR_GPU) NAME_ROW(CUDA_ERROR_INVALID_PTX)
        NAME_ROW(CUDA_ERROR_OPERATING_SYSTEM) NAME_ROW(CUDA_ERROR_INVALID_HANDLE)
        NAME_ROW(CUDA_ERROR_NOT_FOUND) NAME_ROW(CUDA_ERROR_NOT_READY)
        NAME_ROW(CUDA_ERROR_CONTEXT_IS_DESTROYED)
        NAME_ROW(CUDA_ERROR_NOT_PERMITTED) NAME_ROW(CUDA_ERROR_NOT_SUPPORTED)
        NAME_ROW(CUDA_ERROR_KEY_ROTATION) NAME_ROW(CUDA_ERROR_UNKNOWN)};
#undef NAME_ROW
    const char *s;

    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        s = NULL;
        CU_OK(D.cuGetErrorName(rows[i].code, &s));
        CHECK(s && strcmp(s, rows[i].name) == 0);
        s = NULL;
        CU_OK(D.cuGetErrorString(rows[i].code, &s));
        CHECK(s && *s);
    }
    CU_OK(D.cuGetErrorString(CUDA_ERROR_INVALID_VALUE, &s));
    CHECK(strcmp(s, "invalid argument") == 0);
    s = "x";
    CU_RC(D.cuGetErrorName((CUresult)12345, &s), CUDA_ERROR_INVALID_VALUE);
    CHECK(s == NULL);
    s = "x";
    CU_RC(D.cuGetErrorString((CUresult)12345, &s), CUDA_ERROR_INVALID_VALUE);
    CHECK(s == NULL);
    CU_RC(D.cuGetErrorName(CUDA_SUCCESS, NULL), CUDA_ERROR_INVALID_VALUE);
}

/* ---- children ------------------------------------------------------------ */

static int child_hide(void)
{
    void *p = NULL;
    CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SUCCESS;
    void *gpa = dlopen(CUC_SIM_PATH, RTLD_NOW | RTLD_LOCAL);
    PFN_cuGetProcAddress_v12000 f;
    void *sp;

    CHECK(gpa != NULL);
    sp = dlsym(gpa, "cuGetProcAddress_v2");
    CHECK(sp);
    memcpy(&f, &sp, sizeof(sp));
    p = (void *)&st;
    CU_OK(f("cuMemCreate", &p, 13000, 0, &st));
    CHECK(st == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND && p == NULL);
    p = (void *)&st;
    CU_OK(f("cuInit", &p, 13000, 0, &st));
    CHECK(st == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND && p == NULL);
    /* Names not listed are still there ("cuMemCreat" is not a prefix
     * match of anything hidden). */
    CU_OK(f("cuMemRelease", &p, 13000, 0, &st));
    CHECK(st == CU_GET_PROC_ADDRESS_SUCCESS && p != NULL);
    CU_OK(f("cuMemCreat", &p, 13000, 0, &st));
    CHECK(st == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND && p == NULL);
    dlclose(gpa);
    return 0;
}

/* cuInit result (number), what follows when it failed, and the reason
 * cucoreSimInitError() gives ("(none)" for NULL). */
static int child_init(void)
{
    const char *(*why_fn)(void);
    const char *why;
    int n = -1;
    CUresult rc, rc2, rc3;

    sim_t_load();
    *(void **)&why_fn = sym("cucoreSimInitError");
    CHECK(why_fn != NULL);
    CHECK(why_fn() == NULL); /* before cuInit */
    rc = D.cuInit(0);
    rc2 = D.cuInit(0); /* the first result is sticky */
    rc3 = D.cuDeviceGetCount(&n);
    why = why_fn();
    sim_t_report("%d %d %d %d|%s", (int)rc, (int)rc2, (int)rc3, n, why ? why : "(none)");
    return 0;
}

/* why: what cucoreSimInitError() must say, NULL for nothing. */
static void expect_init(const char *const *env, CUresult rc, int count, const char *why)
{
    char out[512];
    const char *bar;
    int a, b, c, n;

    CHECK(sim_t_run("init", NULL, env, out, sizeof(out)) == 0);
    CHECK(sscanf(out, "%d %d %d %d", &a, &b, &c, &n) == 4);
    if (a != (int)rc || b != a) {
        fprintf(stderr, "cuInit gave %d/%d, wanted %d (%s)\n", a, b, (int)rc,
                env[0]);
        exit(1);
    }
    if (rc == CUDA_SUCCESS)
        CHECK(c == CUDA_SUCCESS && n == count);
    else
        CHECK(c == CUDA_ERROR_NOT_INITIALIZED);
    bar = strchr(out, '|');
    CHECK(bar != NULL);
    if (!strstr(bar + 1, why ? why : "(none)")) {
        fprintf(stderr, "cucoreSimInitError() said \"%s\", wanted \"%s\" (%s)\n", bar + 1,
                why ? why : "(none)", env[0]);
        exit(1);
    }
}

static void test_children(void)
{
    static const char *const hide_env[] = {
        "CUCORE_SIM_HIDE=cuMemCreate, cuInit", NULL};
    static const char *const g0[] = {"CUCORE_SIM_GPUS=0", NULL};
    static const char *const g1[] = {"CUCORE_SIM_GPUS=1", NULL};
    static const char *const g16[] = {"CUCORE_SIM_GPUS=16", NULL};
    static const char *const g17[] = {"CUCORE_SIM_GPUS=17", NULL};
    static const char *const gx[] = {"CUCORE_SIM_GPUS=four", NULL};
    static const char *const ubad[] = {"CUCORE_SIM_UUIDS=GPU-1234", NULL};
    static const char *const udup[] = {
        "CUCORE_SIM_UUIDS=GPU-ec8f1234-0000-1111-2222-333344445555,"
        "GPU-ec8f1234-0000-1111-2222-333344445555", NULL};
    /* CUDA_VISIBLE_DEVICES refusals are the driver's, which says no more. */
    static const char *const cvd[] = {"CUDA_VISIBLE_DEVICES=abc", NULL};
    char out[64];

    CHECK(sim_t_run("hide", NULL, hide_env, out, sizeof(out)) == 0);
    expect_init(g0, CUDA_ERROR_NO_DEVICE, 0, "CUCORE_SIM_GPUS=0: the simulator has no GPU");
    expect_init(g1, CUDA_SUCCESS, 1, NULL);
    expect_init(g16, CUDA_SUCCESS, 16, NULL);
    expect_init(g17, CUDA_ERROR_INVALID_VALUE, 0,
                "CUCORE_SIM_GPUS=\"17\" is not a number of GPUs from 0 to 16");
    expect_init(gx, CUDA_ERROR_INVALID_VALUE, 0,
                "CUCORE_SIM_GPUS=\"four\" is not a number of GPUs from 0 to 16");
    expect_init(ubad, CUDA_ERROR_INVALID_VALUE, 0,
                "CUCORE_SIM_UUIDS entry 0 \"GPU-1234\" is not GPU- and 32 hex digits");
    expect_init(udup, CUDA_ERROR_INVALID_VALUE, 0,
                "CUCORE_SIM_UUIDS entries 0 and 1 are the same UUID");
    expect_init(cvd, CUDA_ERROR_NO_DEVICE, 0, NULL);
}

int main(int argc, char **argv)
{
    if (argc >= 3 && strcmp(argv[1], "--child") == 0) {
        if (strcmp(argv[2], "hide") == 0)
            return child_hide();
        if (strcmp(argv[2], "init") == 0)
            return child_init();
        return 2;
    }
    sim_t_clean_env();
    FD_BASELINE();
    sim_t_load();
    test_exports();
    test_proc_address();
    test_before_init();
    test_plain_abis();
    test_error_names();
    test_children();
    FD_CHECK_NO_LEAK();
    return test_finish();
}
