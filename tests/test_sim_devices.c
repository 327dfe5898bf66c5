/* Simulator: devices — UUIDs (distinct, fixed, random-looking,
 * CUCORE_SIM_UUIDS), names, PCI ids, attributes, memory, peers. */
#include "../sim/testdata/sim_test.h"

#define NGPU 4

static int attr(CUdevice_attribute a, int dev)
{
    int v = -12345;
    CU_OK(D.cuDeviceGetAttribute(&v, a, dev));
    return v;
}

static void get_uuids(CUuuid *u, int n)
{
    for (int i = 0; i < n; i++)
        CU_OK(D.cuDeviceGetUuid(&u[i], i));
}

static void test_uuids(void)
{
    CUuuid u[NGPU], again;
    static const CUuuid zero;

    get_uuids(u, NGPU);
    for (int i = 0; i < NGPU; i++) {
        CHECK(memcmp(&u[i], &zero, sizeof(zero)) != 0);
        CU_OK(D.cuDeviceGetUuid(&again, i));
        CHECK(memcmp(&again, &u[i], sizeof(again)) == 0);
        for (int j = 0; j < i; j++) {
            int differ = 0;
            for (int b = 0; b < 16; b++)
                differ += u[i].bytes[b] != u[j].bytes[b];
            /* distinct, and not a counter in one byte */
            CHECK(differ >= 8);
        }
    }
    CU_RC(D.cuDeviceGetUuid(NULL, 0), CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuDeviceGetUuid(&again, NGPU), CUDA_ERROR_INVALID_DEVICE);
}

static void test_identity(void)
{
    char name[64], bus[64];
    size_t mem = 0;
    int seen_bus[NGPU];
    CUdevice d = -1;

    CU_OK(D.cuDeviceGet(&d, 3));
    CHECK(d == 3);
    CU_RC(D.cuDeviceGet(&d, NGPU), CUDA_ERROR_INVALID_DEVICE);
    CU_RC(D.cuDeviceGet(&d, -1), CUDA_ERROR_INVALID_DEVICE);
    CU_RC(D.cuDeviceGet(NULL, 0), CUDA_ERROR_INVALID_VALUE);

    for (int i = 0; i < NGPU; i++) {
        unsigned dom, b, dv, fn;

        CU_OK(D.cuDeviceGetName(name, sizeof(name), i));
        CHECK(strcmp(name, "NVIDIA H200 (cucore-sim)") == 0);
        CU_OK(D.cuDeviceTotalMem(&mem, i));
        CHECK(mem == (size_t)150109880320ull); /* sim/FACTS.md F3 */
        CU_OK(D.cuDeviceGetPCIBusId(bus, sizeof(bus), i));
        /* the driver's form: domain:bus:device.function, hex */
        CHECK(strlen(bus) == 12);
        CHECK(sscanf(bus, "%4x:%2x:%2x.%1x", &dom, &b, &dv, &fn) == 4);
        CHECK((int)dom == attr(CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, i));
        CHECK((int)b == attr(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, i));
        CHECK((int)dv == attr(CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, i));
        CHECK(fn == 0);
        seen_bus[i] = (int)(dom << 8 | b);
        for (int j = 0; j < i; j++)
            CHECK(seen_bus[j] != seen_bus[i]);
    }
    CU_OK(D.cuDeviceGetName(name, 6, 0)); /* truncated, terminated */
    CHECK(strcmp(name, "NVIDI") == 0);
    /* too short for the id: what fits, and an error (as the driver) */
    CU_RC(D.cuDeviceGetPCIBusId(bus, 5, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK(strcmp(bus, "0000") == 0);
    CU_RC(D.cuDeviceGetPCIBusId(bus, 12, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK(strlen(bus) == 11);
    CU_OK(D.cuDeviceGetPCIBusId(bus, 13, 0));
    CHECK(strlen(bus) == 12);
    CU_RC(D.cuDeviceGetName(name, 0, 0), CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuDeviceGetName(NULL, 10, 0), CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuDeviceGetName(name, sizeof(name), 9), CUDA_ERROR_INVALID_DEVICE);
    CU_RC(D.cuDeviceTotalMem(NULL, 0), CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuDeviceTotalMem(&mem, 4), CUDA_ERROR_INVALID_DEVICE);
    CU_RC(D.cuDeviceGetPCIBusId(bus, sizeof(bus), 4),
          CUDA_ERROR_INVALID_DEVICE);
}

static void test_attributes(void)
{
    int v;

    CHECK(attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0) == 9);
    CHECK(attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0) == 0);
    CHECK(attr(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 1) == 1);
    /* POSIX fd and fabric (sim/FACTS.md F3) */
    CHECK(attr(CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES, 1) ==
          (CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR | CU_MEM_HANDLE_TYPE_FABRIC));
    CHECK(attr(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, 1) == 62914560);
    CHECK(attr(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 2) == 1);
    CHECK(attr(CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
               2) == 1);
    CHECK(attr(CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED, 3) == 1);
    CHECK(attr(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 3) == 1);
    CHECK(attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0) == 132);
    CHECK(attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 0) == 1024);
    CHECK(attr(CU_DEVICE_ATTRIBUTE_WARP_SIZE, 0) == 32);
    CHECK(attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, 0) == 64);
    CHECK(attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, 0) == 2147483647);
    CHECK(attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, 0) ==
          232448);
    CHECK(attr(CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH, 0) == 1);
    CHECK(attr(CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH, 0) == 1);
    CHECK(attr(CU_DEVICE_ATTRIBUTE_INTEGRATED, 0) == 0);
    /* every attribute cuda.h 13.0 knows has a value */
    for (int a = CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK;
         a <= CU_DEVICE_ATTRIBUTE_ONLY_PARTIAL_HOST_NATIVE_ATOMIC_SUPPORTED;
         a++)
        CU_OK(D.cuDeviceGetAttribute(&v, (CUdevice_attribute)a, 0));
    CU_RC(D.cuDeviceGetAttribute(&v, (CUdevice_attribute)0, 0),
          CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX, 0),
          CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuDeviceGetAttribute(&v, (CUdevice_attribute)100000, 0),
          CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuDeviceGetAttribute(NULL, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 0),
          CUDA_ERROR_INVALID_VALUE);
    CU_RC(D.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_WARP_SIZE, NGPU),
          CUDA_ERROR_INVALID_DEVICE);
}

static void test_peers(void)
{
    int can = -1;

    CU_OK(D.cuDeviceCanAccessPeer(&can, 0, 1));
    CHECK(can == 1);
    CU_OK(D.cuDeviceCanAccessPeer(&can, 2, 2));
    CHECK(can == 0);
    CU_RC(D.cuDeviceCanAccessPeer(&can, 0, NGPU), CUDA_ERROR_INVALID_DEVICE);
    CU_RC(D.cuDeviceCanAccessPeer(NULL, 0, 1), CUDA_ERROR_INVALID_VALUE);
}

/* ---- children ------------------------------------------------------------ */

/* Reports cuInit's result and the visible UUIDs. */
static int child_uuids(void)
{
    int n = 0;
    CUresult rc;
    char s[44];

    sim_t_load();
    rc = D.cuInit(0);
    sim_t_report("%d", (int)rc);
    if (rc == CUDA_SUCCESS) {
        CU_OK(D.cuDeviceGetCount(&n));
        for (int i = 0; i < n; i++) {
            CUuuid u;
            CU_OK(D.cuDeviceGetUuid(&u, i));
            sim_t_uuid_str(&u, s);
            sim_t_report(" %s", s);
        }
    }
    return 0;
}

static void test_fixed_across_processes(void)
{
    CUuuid u[NGPU];
    char out[1024], want[1024] = "0", s[44];

    get_uuids(u, NGPU);
    for (int i = 0; i < NGPU; i++) {
        sim_t_uuid_str(&u[i], s);
        strcat(want, " ");
        strcat(want, s);
    }
    CHECK(sim_t_run("uuids", NULL, NULL, out, sizeof(out)) == 0);
    CHECK(strcmp(out, want) == 0);
}

static void test_sim_uuids_env(void)
{
    static const char *const two[] = {
        "CUCORE_SIM_UUIDS= GPU-EC8F1234-0000-1111-2222-333344445555 ,"
        "GPU-0badc0de-9999-8888-7777-666655554444",
        NULL};
    static const char *const two_cvd[] = {
        "CUCORE_SIM_UUIDS=GPU-ec8f1234-0000-1111-2222-333344445555,"
        "GPU-0badc0de-9999-8888-7777-666655554444",
        "CUDA_VISIBLE_DEVICES=GPU-0bad", NULL};
    static const char *const bad[] = {"CUCORE_SIM_UUIDS=GPU-1234", NULL};
    static const char *const nogpu[] = {
        "CUCORE_SIM_UUIDS=ec8f1234-0000-1111-2222-333344445555", NULL};
    static const char *const dup[] = {
        "CUCORE_SIM_UUIDS=GPU-ec8f1234-0000-1111-2222-333344445555,"
        "GPU-EC8F1234-0000-1111-2222-333344445555",
        NULL};
    char out[1024];
    char e[64];

    CHECK(sim_t_run("uuids", NULL, two, out, sizeof(out)) == 0);
    CHECK(strcmp(out, "0 GPU-ec8f1234-0000-1111-2222-333344445555 "
                      "GPU-0badc0de-9999-8888-7777-666655554444") == 0);
    CHECK(sim_t_run("uuids", NULL, two_cvd, out, sizeof(out)) == 0);
    CHECK(strcmp(out, "0 GPU-0badc0de-9999-8888-7777-666655554444") == 0);
    snprintf(e, sizeof(e), "%d", (int)CUDA_ERROR_INVALID_VALUE);
    CHECK(sim_t_run("uuids", NULL, bad, out, sizeof(out)) == 0);
    CHECK(strcmp(out, e) == 0);
    CHECK(sim_t_run("uuids", NULL, nogpu, out, sizeof(out)) == 0);
    CHECK(strcmp(out, e) == 0);
    CHECK(sim_t_run("uuids", NULL, dup, out, sizeof(out)) == 0);
    CHECK(strcmp(out, e) == 0);
}

int main(int argc, char **argv)
{
    if (argc >= 3 && strcmp(argv[1], "--child") == 0) {
        if (strcmp(argv[2], "uuids") == 0)
            return child_uuids();
        return 2;
    }
    sim_t_clean_env();
    FD_BASELINE();
    sim_t_load();
    CU_OK(D.cuInit(0));
    test_uuids();
    test_identity();
    test_attributes();
    test_peers();
    test_fixed_across_processes();
    test_sim_uuids_env();
    FD_CHECK_NO_LEAK();
    return test_finish();
}
