/* Physical GPUs (count, UUIDs, PCI ids) and the cuDevice* queries. */
#include "sim_internal.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SIM_NAME "NVIDIA H200 (cucore-sim)"
/* cuDeviceTotalMem of an H200 (FACTS.md F3) */
#define SIM_TOTAL_MEM ((size_t)150109880320ull)

/* PCI buses of an HGX H200 board; GPUs 8..15 repeat them in domain 1. */
static const int sim_pci_buses[8] = {0x19, 0x3b, 0x4c, 0x5d,
                                     0x9b, 0xbb, 0xcb, 0xdb};

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void sim_uuid_format(const CUuuid *u, char out[44])
{
    const unsigned char *b = (const unsigned char *)u->bytes;

    snprintf(out, 44,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
             "%02x%02x%02x%02x%02x%02x",
             b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9],
             b[10], b[11], b[12], b[13], b[14], b[15]);
}

/* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" of exactly len chars. */
static int parse_uuid(const char *s, size_t len, CUuuid *out)
{
    static const int dash[] = {8, 13, 18, 23};
    size_t i, nb = 0, di = 0;

    if (len != 40 || strncmp(s, "GPU-", 4) != 0)
        return -1;
    s += 4;
    for (i = 0; i < 36;) {
        if (di < 4 && i == (size_t)dash[di]) {
            if (s[i] != '-')
                return -1;
            di++;
            i++;
            continue;
        }
        int hi = sim_hexval((unsigned char)s[i]);
        int lo = sim_hexval((unsigned char)s[i + 1]);
        if (hi < 0 || lo < 0)
            return -1;
        out->bytes[nb++] = (char)(hi << 4 | lo);
        i += 2;
    }
    return nb == 16 ? 0 : -1;
}

static void set_pci(int i)
{
    sim.phys[i].pci_domain = i / 8;
    sim.phys[i].pci_bus = sim_pci_buses[i % 8];
    sim.phys[i].pci_device = 0;
}

static CUresult setup_from_uuids(const char *list)
{
    const char *p = list;
    int n = 0;

    while (*p) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        const char *s = p;

        while (len && isspace((unsigned char)*s)) {
            s++;
            len--;
        }
        while (len && isspace((unsigned char)s[len - 1]))
            len--;
        if (n >= SIM_MAX_GPUS)
            return sim_init_why(CUDA_ERROR_INVALID_VALUE, "CUCORE_SIM_UUIDS lists "
                                "more than %d GPUs", SIM_MAX_GPUS);
        if (parse_uuid(s, len, &sim.phys[n].uuid) != 0)
            return sim_init_why(CUDA_ERROR_INVALID_VALUE, "CUCORE_SIM_UUIDS entry "
                                "%d \"%.*s\" is not GPU- and 32 hex digits", n,
                                (int)(len > 64 ? 64 : len), s);
        for (int j = 0; j < n; j++)
            if (memcmp(&sim.phys[j].uuid, &sim.phys[n].uuid, 16) == 0)
                return sim_init_why(CUDA_ERROR_INVALID_VALUE, "CUCORE_SIM_UUIDS "
                                    "entries %d and %d are the same UUID", j, n);
        set_pci(n);
        n++;
        if (!e)
            break;
        p = e + 1;
    }
    if (n == 0)
        return sim_init_why(CUDA_ERROR_INVALID_VALUE, "CUCORE_SIM_UUIDS is empty");
    sim.nphys = n;
    return CUDA_SUCCESS;
}

CUresult sim_devices_setup(void)
{
    const char *uu = getenv("CUCORE_SIM_UUIDS");
    const char *ng = getenv("CUCORE_SIM_GPUS");
    int n = SIM_DEFAULT_GPUS;

    memset(sim.phys, 0, sizeof(sim.phys));
    sim.nphys = 0;
    if (uu) {
        CUresult rc = setup_from_uuids(uu);
        if (rc == CUDA_SUCCESS)
            for (int i = 0; i < sim.nphys; i++)
                sim_uuid_format(&sim.phys[i].uuid, sim.phys[i].uuid_str);
        return rc;
    }
    if (ng && *ng) {
        char *end = NULL;
        long v;
        errno = 0;
        v = strtol(ng, &end, 10);
        if (errno || *end || v < 0 || v > SIM_MAX_GPUS)
            return sim_init_why(CUDA_ERROR_INVALID_VALUE, "CUCORE_SIM_GPUS=\"%.32s\" "
                                "is not a number of GPUs from 0 to %d", ng, SIM_MAX_GPUS);
        n = (int)v;
    }
    for (int i = 0; i < n; i++) {
        /* Fixed, random-looking, distinct: a hash of the index. */
        uint64_t x = 0xC0C0DE5117ull * (uint64_t)(i + 1) + 0x5eedULL;
        uint64_t a = splitmix64(&x), b = splitmix64(&x);
        memcpy(sim.phys[i].uuid.bytes, &a, 8);
        memcpy(sim.phys[i].uuid.bytes + 8, &b, 8);
        for (int j = 0; j < i; j++)
            if (memcmp(&sim.phys[j].uuid, &sim.phys[i].uuid, 16) == 0)
                sim.phys[i].uuid.bytes[15] ^= (char)(0x5a + i);
        set_pci(i);
        sim_uuid_format(&sim.phys[i].uuid, sim.phys[i].uuid_str);
    }
    sim.nphys = n;
    return CUDA_SUCCESS;
}

static CUresult nopeer_bad(void)
{
    return sim_init_why(CUDA_ERROR_INVALID_VALUE,
                        "CUCORE_SIM_NO_PEER=\"%.64s\" is not a list of A-B pairs of "
                        "distinct physical GPUs below CUCORE_SIM_GPUS (e.g. 0-1,2-3)",
                        getenv("CUCORE_SIM_NO_PEER"));
}

CUresult sim_peers_setup(void)
{
    const char *s = getenv("CUCORE_SIM_NO_PEER");

    memset(sim.nopeer, 0, sizeof(sim.nopeer));
    while (s && *s) {
        char *end;
        long a, b;
        errno = 0;
        a = strtol(s, &end, 10);
        if (errno || end == s || *end != '-')
            return nopeer_bad();
        s = end + 1;
        b = strtol(s, &end, 10);
        if (errno || end == s || (*end && *end != ',') || a < 0 || b < 0 ||
            a >= sim.nphys || b >= sim.nphys || a == b)
            return nopeer_bad();
        sim.nopeer[a][b] = sim.nopeer[b][a] = 1;
        if (*end && !end[1])
            return nopeer_bad(); /* a trailing comma */
        s = *end ? end + 1 : end;
    }
    return CUDA_SUCCESS;
}

int sim_peer_ok(int a, int b)
{
    return a == b || !sim.nopeer[sim.vis[a]][sim.vis[b]];
}

/* ---- entry points ------------------------------------------------------ */

SIM_API CUresult CUDAAPI cuDeviceGetCount(int *count)
{
    CUresult rc = sim_check_init();

    SIM_FAULT(cuDeviceGetCount);
    if (rc)
        return rc;
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    *count = sim.nvis;
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal)
{
    CUresult rc = sim_check_init();

    SIM_FAULT(cuDeviceGet);
    if (rc)
        return rc;
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    if (!sim_dev_valid(ordinal))
        return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
    CUresult rc = sim_check_init();

    SIM_FAULT(cuDeviceGetUuid);
    if (rc)
        return rc;
    if (!uuid)
        return CUDA_ERROR_INVALID_VALUE;
    if (!sim_dev_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    *uuid = sim.phys[sim.vis[dev]].uuid;
    return CUDA_SUCCESS;
}

static CUresult copy_str(char *dst, int len, const char *src)
{
    size_t n;

    if (!dst || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    n = strlen(src);
    if (n >= (size_t)len)
        n = (size_t)len - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuDeviceGetName(char *name, int len, CUdevice dev)
{
    CUresult rc = sim_check_init();

    SIM_FAULT(cuDeviceGetName);
    if (rc)
        return rc;
    if (!name || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!sim_dev_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    return copy_str(name, len, SIM_NAME);
}

SIM_API CUresult CUDAAPI cuDeviceTotalMem(size_t *bytes, CUdevice dev)
{
    CUresult rc = sim_check_init();

    SIM_FAULT(cuDeviceTotalMem);
    if (rc)
        return rc;
    if (!bytes)
        return CUDA_ERROR_INVALID_VALUE;
    if (!sim_dev_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    *bytes = SIM_TOTAL_MEM;
    return CUDA_SUCCESS;
}

/* "0000:19:00.0", upper-case hex (FACTS.md F2) */
SIM_API CUresult CUDAAPI cuDeviceGetPCIBusId(char *pciBusId, int len,
                                             CUdevice dev)
{
    char buf[32];
    const struct sim_gpu *g;
    CUresult rc = sim_check_init();

    SIM_FAULT(cuDeviceGetPCIBusId);
    if (rc)
        return rc;
    if (!pciBusId || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!sim_dev_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    g = &sim.phys[sim.vis[dev]];
    snprintf(buf, sizeof(buf), "%04X:%02X:%02X.0", g->pci_domain & 0xffff,
             g->pci_bus & 0xff, g->pci_device & 0x1f);
    copy_str(pciBusId, len, buf);
    /* As the driver: a buffer too short for the whole id gets what fits,
     * and CUDA_ERROR_INVALID_VALUE. */
    return (size_t)len > strlen(buf) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SIM_API CUresult CUDAAPI cuDeviceCanAccessPeer(int *canAccessPeer,
                                               CUdevice dev,
                                               CUdevice peerDev)
{
    CUresult rc = sim_check_init();

    SIM_FAULT(cuDeviceCanAccessPeer);
    if (rc)
        return rc;
    if (!canAccessPeer)
        return CUDA_ERROR_INVALID_VALUE;
    if (!sim_dev_valid(dev) || !sim_dev_valid(peerDev))
        return CUDA_ERROR_INVALID_DEVICE;
    /* a device and itself: 0 (FACTS.md F4); other pairs as
     * CUCORE_SIM_NO_PEER says (not measured) */
    *canAccessPeer = dev != peerDev && sim_peer_ok(dev, peerDev);
    return CUDA_SUCCESS;
}

/* An H200's values (FACTS.md F3), except the PCI location, which follows
 * the simulated bus ids. */
static int attr_value(CUdevice_attribute a, const struct sim_gpu *g,
                      int phys, int *out)
{
    int v;

    switch ((int)a) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: v = 64; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: v = 2147483647; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: v = 65535; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: v = 65535; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: v = 49152; break;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: v = 65536; break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: v = 32; break;
    case CU_DEVICE_ATTRIBUTE_MAX_PITCH: v = 2147483647; break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: v = 65536; break;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: v = 1980000; break;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT: v = 512; break;
    case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: v = 132; break;
    case CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_INTEGRATED: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE: v = CU_COMPUTEMODE_DEFAULT; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_WIDTH: v = 131072; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_WIDTH: v = 131072; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_HEIGHT: v = 65536; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH: v = 16384; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT: v = 16384; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH: v = 16384; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_WIDTH: v = 32768; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_HEIGHT: v = 32768; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_LAYERS: v = 2048; break;
    case CU_DEVICE_ATTRIBUTE_SURFACE_ALIGNMENT: v = 512; break;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_ECC_ENABLED: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: v = g->pci_bus; break;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: v = g->pci_device; break;
    case CU_DEVICE_ATTRIBUTE_TCC_DRIVER: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: v = 3201000; break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: v = 6016; break;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: v = 62914560; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: v = 2048; break;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: v = 3; break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_WIDTH: v = 32768; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_LAYERS: v = 2048; break;
    case CU_DEVICE_ATTRIBUTE_CAN_TEX2D_GATHER: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_GATHER_WIDTH: v = 32768; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_GATHER_HEIGHT: v = 32768; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH_ALTERNATE: v = 8192; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT_ALTERNATE: v = 8192; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH_ALTERNATE: v = 32768; break;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: v = g->pci_domain; break;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT: v = 32; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_WIDTH: v = 32768; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_LAYERED_WIDTH: v = 32768; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_LAYERED_LAYERS: v = 2046; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_WIDTH: v = 32768; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_WIDTH: v = 131072; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_HEIGHT: v = 65536; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_WIDTH: v = 16384; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_HEIGHT: v = 16384; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_DEPTH: v = 16384; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_LAYERED_WIDTH: v = 32768; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_LAYERED_LAYERS: v = 2048; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_WIDTH: v = 32768; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_HEIGHT: v = 32768; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_LAYERS: v = 2048; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_WIDTH: v = 32768; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_LAYERED_WIDTH: v = 32768; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_LAYERED_LAYERS: v = 2046; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LINEAR_WIDTH: v = 268435456; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_WIDTH: v = 131072; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_HEIGHT: v = 65000; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_PITCH: v = 2097120; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_MIPMAPPED_WIDTH: v = 32768; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_MIPMAPPED_HEIGHT: v = 32768; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: v = 9; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_MIPMAPPED_WIDTH: v = 32768; break;
    case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: v = 233472; break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: v = 65536; break;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD_GROUP_ID: v = phys; break;
    case CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO: v = 2; break;
    case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS_V1: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR_V1: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_MULTI_DEVICE_LAUNCH: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: v = 232448; break;
    case CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_DIRECT_MANAGED_MEM_ACCESS_FROM_HOST: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_HANDLE_SUPPORTED: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_KMT_HANDLE_SUPPORTED: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: v = 32; break;
    case CU_DEVICE_ATTRIBUTE_GENERIC_COMPRESSION_SUPPORTED: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE: v = 39321600; break;
    case CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE: v = 134217728; break;
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK: v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_SPARSE_CUDA_ARRAY_SUPPORTED: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_TIMELINE_SEMAPHORE_INTEROP_SUPPORTED: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING: v = 100; break;
    case CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES:
        /* POSIX fd | fabric (FACTS.md F3); fabric handles are refused (F22) */
        v = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR | CU_MEM_HANDLE_TYPE_FABRIC;
        break;
    case CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_MEM_SYNC_DOMAIN_COUNT: v = 4; break;
    case CU_DEVICE_ATTRIBUTE_TENSOR_MAP_ACCESS_SUPPORTED: v = 1; break;
    /* Reported supported; creating one is refused (FACTS.md F3, F22). */
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_FUNCTION_POINTERS: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_NUMA_CONFIG: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_NUMA_ID: v = -1; break;
    case CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_MPS_ENABLED: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID: v = phys < 4 ? 0 : 1; break;
    case CU_DEVICE_ATTRIBUTE_D3D12_CIG_SUPPORTED: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_MEM_DECOMPRESS_ALGORITHM_MASK: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_MEM_DECOMPRESS_MAXIMUM_LENGTH: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_VULKAN_CIG_SUPPORTED: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_GPU_PCI_DEVICE_ID: v = 0x233510de; break;
    case CU_DEVICE_ATTRIBUTE_GPU_PCI_SUBSYSTEM_ID: v = 0x18bf10de; break;
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_MEMORY_POOLS_SUPPORTED: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_MULTINODE_IPC_SUPPORTED: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_HOST_MEMORY_POOLS_SUPPORTED: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_HOST_ALLOC_DMA_BUF_SUPPORTED: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_ONLY_PARTIAL_HOST_NATIVE_ATOMIC_SUPPORTED: v = 0; break;
    default:
        return -1;
    }
    *out = v;
    return 0;
}

SIM_API CUresult CUDAAPI cuDeviceGetAttribute(int *pi,
                                              CUdevice_attribute attrib,
                                              CUdevice dev)
{
    int phys;
    CUresult rc = sim_check_init();

    SIM_FAULT(cuDeviceGetAttribute);
    if (rc)
        return rc;
    if (!pi)
        return CUDA_ERROR_INVALID_VALUE;
    if (!sim_dev_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    phys = sim.vis[dev];
    if (attr_value(attrib, &sim.phys[phys], phys, pi) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}
