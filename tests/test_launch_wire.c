/* Kernels and launch configs on the wire: the record layouts; configs come
 * back equal; a kernel comes back through the cache (in-process: no second
 * load); an exec'd child with permuted GPUs gets kernel + config + the
 * legacy stream of the GPU with the sender's UUID, loads the image once
 * however often it gets it, and launches: CUC_E_NOT_SUPPORTED on the
 * simulator, on a GPU a kernel that writes 2*i into memory the child
 * allocates (through libcuda directly), checked. A child that sees no GPU
 * gets CUC_E_NOT_VISIBLE for the stream. */
#include <dlfcn.h>

#include "cucore.h"
#include "check.h"
#include "devices_test.h"
#include "base/sha256.h"
#include "base/hex.h"
#include "device/device.h"
#include "msg_hex.h"
#include "ptx_kernels.h"
#include "wire/records.h"

#define N_OUT 256u


static void launch_cfg(cuc_launch_config *c)
{
    cuc_launch_config_init(c);
    c->grid[0] = N_OUT / 64;
    c->block[0] = 64;
}

static void test_config_roundtrip(void)
{
    cuc_launch_config in[3], out;
    cuc_msg *m, *r;
    char *hex;
    int i;

    launch_cfg(&in[0]);
    cuc_launch_config_init(&in[1]);
    in[1].grid[0] = 8, in[1].grid[1] = 6, in[1].grid[2] = 4;
    in[1].block[0] = 16, in[1].block[1] = 8, in[1].block[2] = 4;
    in[1].cluster[0] = 4, in[1].cluster[1] = 2, in[1].cluster[2] = 2;
    in[1].shared_mem = 49152;
    in[1].cooperative = 1;
    cuc_launch_config_init(&in[2]);
    in[2].grid[0] = CUC_LAUNCH_MAX_GRID_X;
    in[2].grid[1] = in[2].grid[2] = CUC_LAUNCH_MAX_GRID_YZ;
    in[2].block[0] = 1024;
    in[2].shared_mem = CUC_LAUNCH_MAX_SHARED_MEM;
    CHECK_OK(cuc_msg_create(&m));
    for (i = 0; i < 3; i++)
        CHECK_OK(cuc_msg_add_launch_config(m, &in[i]));
    hex = msg_to_hex(m);
    CHECK_OK(msg_from_hex(hex, &r));
    for (i = 0; i < 3; i++) {
        memset(&out, 0xee, sizeof(out));
        CHECK_OK(cuc_msg_get_launch_config(r, (size_t)i, &out));
        CHECK(memcmp(&out, &in[i], sizeof(out)) == 0);
    }
    /* The layout: 16 u32 in struct order. */
    {
        struct cuc__record rec;
        CHECK_OK(cuc__msg_record(r, 1, &rec));
        CHECK(rec.type == CUC_RECORD_LAUNCH_CONFIG && rec.len == 64);
        CHECK(cuc__get32(rec.payload) == 8 && cuc__get32(rec.payload + 20) == 4);
        CHECK(cuc__get32(rec.payload + 24) == 4 && cuc__get32(rec.payload + 36) == 49152);
        CHECK(cuc__get32(rec.payload + 40) == 1);
    }
    /* A config the receiver would refuse is refused at send. */
    in[0].grid[2] = 0;
    CHECK_RC(cuc_msg_add_launch_config(m, &in[0]), CUC_E_INVALID);
    CHECK(cuc_msg_record_count(m) == 3);
    free(hex);
    cuc_msg_destroy(r);
    cuc_msg_destroy(m);
}

static void test_kernel_roundtrip(void)
{
    size_t loads0, hits0, loads, hits, len;
    struct cuc__record rec;
    cuc_kernel *k, *back;
    cuc_msg *m, *r;
    char *hex;

    CHECK_OK(cuc_kernel_load(CUC_IMAGE_PTX, ptx_twice, sizeof(ptx_twice), "twice", &k));
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_kernel(m, k));
    hex = msg_to_hex(m);
    CHECK_OK(msg_from_hex(hex, &r));
    CHECK_OK(cuc__msg_record(r, 0, &rec));
    len = strlen(ptx_twice);
    CHECK(rec.type == CUC_RECORD_KERNEL && rec.len == 48 + 6 + len);
    CHECK(cuc__get32(rec.payload) == CUC_IMAGE_PTX);
    CHECK(cuc__get32(rec.payload + 4) == 6 && cuc__get32(rec.payload + 8) == len);
    CHECK(cuc__get32(rec.payload + 12) == 0);
    CHECK(memcmp(rec.payload + 16, cuc_kernel_hash(k), 32) == 0);
    CHECK(memcmp(rec.payload + 48, "twice", 6) == 0);
    CHECK(memcmp(rec.payload + 54, ptx_twice, len) == 0);

    cuc_kernel_cache_stats(&loads0, &hits0);
    CHECK_OK(cuc_msg_get_kernel(r, 0, &back));
    cuc_kernel_cache_stats(&loads, &hits);
    CHECK(loads == loads0 && hits == hits0 + 1); /* same hash: no second load */
    CHECK(back != k && cuc_kernel_handle(back) == cuc_kernel_handle(k));
    CHECK(strcmp(cuc_kernel_name(back), "twice") == 0);
    CHECK(memcmp(cuc_kernel_hash(back), cuc_kernel_hash(k), 32) == 0);
    CHECK_RC(cuc_msg_get_kernel(r, 1, &back), CUC_E_INVALID);
    cuc_kernel_destroy(back);
    free(hex);
    cuc_msg_destroy(r);
    cuc_msg_destroy(m);
    cuc_kernel_destroy(k);
}

typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*dtoh_fn)(void *, CUdeviceptr, size_t);
typedef CUresult (*free_fn)(CUdeviceptr);

/* On a GPU: runs k into fresh device memory and checks out[i] == 2i.
 * Memory comes from libcuda directly (cucore has no buffers here). */
static int run_on_gpu(cuc_stream *s, const cuc_launch_config *cfg, cuc_kernel *k)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    uint32_t host[N_OUT], n = N_OUT, i;
    CUdeviceptr p = 0;
    void *args[2] = {&p, &n};
    alloc_fn mem_alloc;
    dtoh_fn dtoh;
    free_fn mem_free;

    CHECK(lib != NULL);
    mem_alloc = (alloc_fn)dlsym(lib, "cuMemAlloc_v2");
    dtoh = (dtoh_fn)dlsym(lib, "cuMemcpyDtoH_v2");
    mem_free = (free_fn)dlsym(lib, "cuMemFree_v2");
    CHECK(mem_alloc && dtoh && mem_free);
    CHECK_OK(cuc_device_set_current(cuc_stream_device(s)));
    CHECK(mem_alloc(&p, sizeof(host)) == CUDA_SUCCESS);
    CHECK_OK(cuc_launch(s, cfg, k, args));
    CHECK_OK(cuc_stream_synchronize(s));
    CHECK(dtoh(host, p, sizeof(host)) == CUDA_SUCCESS);
    for (i = 0; i < N_OUT; i++)
        if (host[i] != 2 * i) {
            fprintf(stderr, "out[%u] = %u, want %u\n", i, host[i], 2 * i);
            return 1;
        }
    CHECK(mem_free(p) == CUDA_SUCCESS);
    dlclose(lib);
    return 0;
}

/* Child: message = kernel, launch config, stream. Prints
 * "OK <uuid> <ordinal> <loads> <hits> NOTSUP|RAN" or "ERR <code> <text>". */
static int child_launch(int argc, char **argv)
{
    cuc_launch_config cfg, want;
    cuc_kernel *k, *again;
    size_t loads, hits;
    cuc_stream *s;
    cuc_msg *m;
    int rc;

    CHECK(argc == 1);
    CHECK_OK(msg_from_hex(argv[0], &m));
    CHECK(cuc_msg_record_count(m) == 3);
    rc = cuc_msg_get_stream(m, 2, &s);
    if (rc) {
        printf("ERR %s %s\n", cuc_errname(rc), cuc_errmsg());
        cuc_msg_destroy(m);
        return 0;
    }
    CHECK_OK(cuc_msg_get_kernel(m, 0, &k));
    CHECK_OK(cuc_msg_get_kernel(m, 0, &again));
    cuc_kernel_cache_stats(&loads, &hits);
    CHECK_OK(cuc_msg_get_launch_config(m, 1, &cfg));
    launch_cfg(&want);
    CHECK(memcmp(&cfg, &want, sizeof(cfg)) == 0);
    printf("OK %s %d %zu %zu ", cuc_device_uuid_string(cuc_stream_device(s)),
           cuc_device_ordinal(cuc_stream_device(s)), loads, hits);
    if (test_on_sim()) {
        CHECK_RC(cuc_launch(s, &cfg, k, (void *[]){NULL, NULL}), CUC_E_NOT_SUPPORTED);
        printf("NOTSUP\n");
    } else {
        CHECK(run_on_gpu(s, &cfg, again) == 0);
        printf("RAN\n");
    }
    cuc_kernel_destroy(again);
    cuc_kernel_destroy(k);
    cuc_msg_destroy(m);
    return 0;
}

static void check_child(cuc_kernel *k, int dev, const char *cvd)
{
    const char *uuid = cuc_device_uuid_string(devs[dev]);
    int pos = cvd_position(cvd, dev);
    cuc_launch_config cfg;
    char want[256];
    cuc_stream *s;
    cuc_msg *m;

    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_kernel(m, k));
    launch_cfg(&cfg);
    CHECK_OK(cuc_msg_add_launch_config(m, &cfg));
    CHECK_OK(cuc_stream_legacy(devs[dev], &s));
    CHECK_OK(cuc_msg_add_stream(m, s));
    snprintf(want, sizeof(want), "OK %s %d 1 1 %s\n", uuid, pos,
             test_on_sim() ? "NOTSUP" : "RAN");
    child_expect("launch", m, cvd, uuid, pos >= 0 ? want : NULL);
    cuc_msg_destroy(m);
}

static void check_one(int dev, const char *cvd, void *k)
{
    check_child(k, dev, cvd);
}

static void test_children(void)
{
    cuc_kernel *k;

    CHECK_OK(cuc_kernel_load(CUC_IMAGE_PTX, ptx_twice, sizeof(ptx_twice), "twice", &k));
    for_each_visibility(n_dev, check_one, k);
    cuc_kernel_destroy(k);
}

int main(int argc, char **argv)
{
    if (argc >= 3 && !strcmp(argv[1], "--child")) {
        if (!strcmp(argv[2], "launch"))
            return child_launch(argc - 3, argv + 3);
        return 2;
    }
    unsetenv("CUDA_VISIBLE_DEVICES");
    open_all();
    FD_BASELINE();
    test_config_roundtrip();
    test_kernel_roundtrip();
    test_children();
    FD_CHECK_NO_LEAK();
    return test_finish();
}
