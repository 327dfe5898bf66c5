/* Kernels: SHA-256 against FIPS 180 vectors; loading PTX; the image cache
 * (same image -> no second load, proven by the load counter; kernels of one
 * image share its library; the library goes when its last kernel does);
 * unknown symbols and bad images named, neither kept nor counted (drivers
 * load lazily: bad bytes fail at cuLibraryGetKernel); images checked against their kind
 * and their declared extents before the driver sees them; launches
 * (NOT_SUPPORTED on the simulator, run on a GPU) and config checks; each
 * kernel's parameters as the driver lays them out, and launches whose
 * argument count or sizes differ from them refused. */
#include <pthread.h>

#include "cucore.h"
#include "check.h"
#include "base/sha256.h"
#include "base/hex.h"
#include "device/device.h"
#include "ptx_kernels.h"

static cuc_device *dev0;

static void expect_hash(const void *data, size_t len, const char *want)
{
    uint8_t h[32];
    char hex[65];

    cuc__sha256(data, len, h);
    cuc__hex(h, 32, hex);
    if (strcmp(hex, want)) {
        fprintf(stderr, "sha256 of %zu bytes: %s, want %s\n", len, hex, want);
        exit(1);
    }
}

static void test_sha256(void)
{
    static const char two_blocks[] =
        "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    char *million = malloc(1000000);

    expect_hash("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    expect_hash("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    expect_hash(two_blocks, strlen(two_blocks),
                "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    CHECK(million != NULL);
    memset(million, 'a', 1000000);
    expect_hash(million, 1000000,
                "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    free(million);
    /* The SHA-NI path (when the CPU has it) and the portable one agree on
     * every length around the block and padding boundaries. */
    {
        uint8_t data[700], a[32], b[32];
        uint32_t x = 12345;
        for (size_t i = 0; i < sizeof(data); i++)
            data[i] = (uint8_t)((x = x * 1103515245u + 12345u) >> 16);
        for (size_t len = 0; len <= sizeof(data); len++) {
            cuc__sha256(data, len, a);
            cuc__sha256_portable(data, len, b);
            CHECK(memcmp(a, b, 32) == 0);
        }
    }
}

static void stats(size_t *loads, size_t *hits)
{
    cuc_kernel_cache_stats(loads, hits);
}

static void test_cache(void)
{
    size_t loads0, hits0, loads, hits, len;
    cuc_kernel *a, *b, *noop, *other;
    uint8_t h[32];
    const void *img;

    stats(&loads0, &hits0);
    CHECK_OK(cuc_kernel_load(CUC_IMAGE_PTX, ptx_twice, strlen(ptx_twice), "twice", &a));
    stats(&loads, &hits);
    CHECK(loads == loads0 + 1 && hits == hits0);
    CHECK(strcmp(cuc_kernel_name(a), "twice") == 0);
    CHECK(cuc_kernel_kind(a) == CUC_IMAGE_PTX);
    CHECK(cuc_kernel_handle(a) != NULL);
    img = cuc_kernel_image(a, &len);
    CHECK(len == strlen(ptx_twice) && memcmp(img, ptx_twice, len) == 0);
    cuc__sha256(ptx_twice, strlen(ptx_twice), h);
    CHECK(memcmp(cuc_kernel_hash(a), h, 32) == 0);

    /* The same image (here with its NUL counted) is not loaded again. */
    CHECK_OK(cuc_kernel_load(CUC_IMAGE_PTX, ptx_twice, sizeof(ptx_twice), "twice", &b));
    stats(&loads, &hits);
    CHECK(loads == loads0 + 1 && hits == hits0 + 1);
    CHECK(b != a && cuc_kernel_handle(b) == cuc_kernel_handle(a));
    CHECK(memcmp(cuc_kernel_hash(b), h, 32) == 0);
    /* Another kernel of the same image shares its library. */
    CHECK_OK(cuc_kernel_load(CUC_IMAGE_PTX, ptx_twice, sizeof(ptx_twice), "noop", &noop));
    stats(&loads, &hits);
    CHECK(loads == loads0 + 1 && hits == hits0 + 2);
    CHECK(cuc_kernel_handle(noop) != cuc_kernel_handle(a));
    /* A different image is a second load. */
    CHECK_OK(cuc_kernel_load(CUC_IMAGE_PTX, ptx_other, sizeof(ptx_other), "other", &other));
    stats(&loads, &hits);
    CHECK(loads == loads0 + 2 && hits == hits0 + 2);

    /* Destroying some kernels keeps the library for the others. */
    cuc_kernel_destroy(a);
    cuc_kernel_destroy(b);
    CHECK_OK(cuc_kernel_load(CUC_IMAGE_PTX, ptx_twice, sizeof(ptx_twice), "twice", &a));
    stats(&loads, &hits);
    CHECK(loads == loads0 + 2 && hits == hits0 + 3);
    /* The last kernel of an image unloads it: the next load is real. */
    cuc_kernel_destroy(a);
    cuc_kernel_destroy(noop);
    CHECK_OK(cuc_kernel_load(CUC_IMAGE_PTX, ptx_twice, sizeof(ptx_twice), "twice", &a));
    stats(&loads, &hits);
    CHECK(loads == loads0 + 3 && hits == hits0 + 3);
    cuc_kernel_destroy(a);
    cuc_kernel_destroy(other);
    cuc_kernel_destroy(NULL);
    cuc_kernel_cache_stats(NULL, NULL);
}

static void test_not_found(void)
{
    size_t loads0, hits0, loads, hits;
    cuc_kernel *k = NULL, *k2 = NULL;

    stats(&loads0, &hits0);
    CHECK_RC(cuc_kernel_load(CUC_IMAGE_PTX, ptx_other, sizeof(ptx_other), "no_such_kernel",
                             &k), CUC_E_NOT_FOUND);
    CHECK(strstr(cuc_errmsg(), "\"no_such_kernel\"") != NULL);
    CHECK(strstr(cuc_errmsg(), "CUDA_ERROR_NOT_FOUND") != NULL);
    CHECK(strstr(cuc_errmsg(), "PTX image") != NULL);
    CHECK(cuc_errcuda() == CUDA_ERROR_NOT_FOUND);
    CHECK(k == NULL);
    /* The failed lookup neither kept the library nor counted: the next
     * kernel of that image is a load, not a hit. */
    stats(&loads, &hits);
    CHECK(loads == loads0 && hits == hits0);
    CHECK_OK(cuc_kernel_load(CUC_IMAGE_PTX, ptx_other, sizeof(ptx_other), "other", &k));
    stats(&loads, &hits);
    CHECK(loads == loads0 + 1 && hits == hits0);
    /* A missing name in a cached image leaves it cached, for k. */
    CHECK_RC(cuc_kernel_load(CUC_IMAGE_PTX, ptx_other, sizeof(ptx_other), "no_such_kernel",
                             &k2), CUC_E_NOT_FOUND);
    CHECK_OK(cuc_kernel_load(CUC_IMAGE_PTX, ptx_other, sizeof(ptx_other), "other", &k2));
    stats(&loads, &hits);
    CHECK(loads == loads0 + 1 && hits == hits0 + 1);
    CHECK(cuc_kernel_handle(k2) == cuc_kernel_handle(k));
    cuc_kernel_destroy(k2);
    cuc_kernel_destroy(k);
}

/* A 64-bit ELF whose extents are consistent but whose machine is x86-64,
 * not CUDA: for the driver to refuse. */
static size_t x86_elf(uint8_t *b)
{
    memset(b, 0, 128);
    memcpy(b, "\x7f" "ELF", 4);
    b[4] = 2;           /* ELFCLASS64 */
    b[5] = 1;           /* little endian */
    b[6] = 1;           /* EV_CURRENT */
    b[16] = 1;          /* ET_REL */
    b[18] = 62;         /* EM_X86_64 */
    b[20] = 1;          /* e_version */
    b[40] = 64;         /* e_shoff */
    b[52] = 64;         /* e_ehsize */
    b[58] = 64;         /* e_shentsize */
    b[60] = 1;          /* e_shnum: one SHT_NULL section */
    return 128;
}

/* The driver's refusal, named with the kernel and the image. The driver
 * loads lazily, EAGER or not (sim/FACTS.md F12): cuLibraryLoadData takes
 * these bytes and cuLibraryGetKernel refuses them; a driver that refused them at
 * load would be named as well. */
static void expect_refused(int kind, const void *img, size_t len, const char *image_says)
{
    cuc_kernel *k = (cuc_kernel *)0x1;
    size_t loads0, hits0, loads, hits;

    stats(&loads0, &hits0);
    for (int i = 0; i < 2; i++) {
        CHECK_RC(cuc_kernel_load((enum cuc_image_kind)kind, img, len, "k_bad", &k),
                 CUC_E_DRIVER);
        CHECK(k == (cuc_kernel *)0x1);
        CHECK(cuc_errcuda() == CUDA_ERROR_INVALID_IMAGE ||
              cuc_errcuda() == CUDA_ERROR_INVALID_PTX);
        CHECK_ERRMSG("CUDA_ERROR_INVALID_");
        if (!strstr(cuc_errmsg(), "cuLibraryGetKernel failed"))
            CHECK_ERRMSG("cuLibraryLoadData failed");
        CHECK_ERRMSG("kernel \"k_bad\"");
        CHECK_ERRMSG(image_says);
        CHECK_ERRMSG("sha256 ");
    }
    /* Neither try counts as a load or a hit (test_not_found shows that a
     * library no kernel came from is not kept; LeakSanitizer that it is
     * freed). */
    stats(&loads, &hits);
    CHECK(loads == loads0 && hits == hits0);
}

static void test_bad_image(void)
{
    uint8_t elf[128];

    expect_refused(CUC_IMAGE_CUBIN, elf, x86_elf(elf), "128-byte cubin image");
    expect_refused(CUC_IMAGE_PTX, "this is not PTX", 15, "15-byte PTX image");
    expect_refused(CUC_IMAGE_PTX, "garbage text", 13, "12-byte PTX image");
    CHECK(cuc_errcuda() == CUDA_ERROR_INVALID_IMAGE);
}

/* Refused by cucore before the driver sees the bytes. */
static void expect_invalid(int kind, const void *img, size_t len, const char *name,
                           const char *says)
{
    cuc_kernel *k;

    CHECK_RC(cuc_kernel_load((enum cuc_image_kind)kind, img, len, name, &k), CUC_E_INVALID);
    if (says && !strstr(cuc_errmsg(), says)) {
        fprintf(stderr, "message \"%s\" lacks \"%s\"\n", cuc_errmsg(), says);
        exit(1);
    }
}

static void test_checks(void)
{
    static const uint8_t wrapper[24] = {0xb1, 0x43, 0x62, 0x46, 1};
    uint8_t elf[128], fat[96], bad[128];
    char long_name[CUC_KERNEL_NAME_MAX + 2];
    size_t loads0, loads;

    stats(&loads0, NULL);
    x86_elf(elf);
    expect_invalid(CUC_IMAGE_CUBIN, ptx_twice, sizeof(ptx_twice), "twice", "ELF magic");
    expect_invalid(CUC_IMAGE_PTX, elf, sizeof(elf), "k", "not PTX");
    expect_invalid(CUC_IMAGE_FATBIN, elf, sizeof(elf), "k", "CUC_IMAGE_CUBIN");
    expect_invalid(CUC_IMAGE_FATBIN, wrapper, sizeof(wrapper), "k", "pointer");
    expect_invalid(CUC_IMAGE_PTX, ".version 7.0\0.entry x()", 23, "x", "NUL byte at offset 12");
    expect_invalid(CUC_IMAGE_PTX, "\0\0", 2, "x", "empty");
    expect_invalid(0, ptx_twice, sizeof(ptx_twice), "twice", "image kind 0");
    expect_invalid(7, ptx_twice, sizeof(ptx_twice), "twice", "image kind 7");
    expect_invalid(CUC_IMAGE_PTX, ptx_twice, 0, "twice", "0 bytes");
    expect_invalid(CUC_IMAGE_PTX, ptx_twice, sizeof(ptx_twice), "", "name of 0 bytes");
    memset(long_name, 'k', sizeof(long_name) - 1);
    long_name[sizeof(long_name) - 1] = '\0';
    expect_invalid(CUC_IMAGE_PTX, ptx_twice, sizeof(ptx_twice), long_name, "4096 bytes");
    expect_invalid(CUC_IMAGE_PTX, NULL, 10, "k", NULL);
    /* ELF extents that lie. */
    memcpy(bad, elf, sizeof(bad));
    bad[60] = 200; /* 200 section headers: past the end */
    expect_invalid(CUC_IMAGE_CUBIN, bad, sizeof(bad), "k", "section headers");
    memcpy(bad, elf, sizeof(bad));
    bad[64 + 4] = 1;  /* section 0: SHT_PROGBITS ... */
    bad[64 + 24] = 0xf0; /* ... at offset 0xf0 of a 128-byte image */
    bad[64 + 32] = 0x20;
    expect_invalid(CUC_IMAGE_CUBIN, bad, sizeof(bad), "k", "section 0");
    memcpy(bad, elf, sizeof(bad));
    bad[4] = 1; /* ELFCLASS32 */
    expect_invalid(CUC_IMAGE_CUBIN, bad, sizeof(bad), "k", "64-bit");
    memset(bad, 0, sizeof(bad));
    memcpy(bad, elf, 63);
    expect_invalid(CUC_IMAGE_CUBIN, bad, 63, "k", "64-bit");
    /* Fatbin extents that lie. */
    memset(fat, 0, sizeof(fat));
    memcpy(fat, "\x50\xed\x55\xba\x01\x00\x10\x00", 8);
    fat[8] = 200; /* 16 + 200 bytes declared, 96 there */
    expect_invalid(CUC_IMAGE_FATBIN, fat, sizeof(fat), "k", "declares 16 + 200");
    fat[8] = 80;  /* right total; one entry that claims more */
    fat[16 + 4] = 64;
    fat[16 + 8] = 100;
    expect_invalid(CUC_IMAGE_FATBIN, fat, sizeof(fat), "k", "entry at offset 16");
    stats(&loads, NULL);
    CHECK(loads == loads0);
}

static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    uint8_t *b;
    long n;

    if (!f)
        return NULL;
    CHECK(fseek(f, 0, SEEK_END) == 0);
    n = ftell(f);
    CHECK(n > 0 && fseek(f, 0, SEEK_SET) == 0);
    b = malloc((size_t)n);
    CHECK(b && fread(b, 1, (size_t)n, f) == (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return b;
}

/* nvcc's own cubin and fatbins pass the extent checks (built into the
 * simulator's test images when the toolkit has nvcc). */
static void test_real_images(void)
{
    static const struct {
        const char *file;
        int kind;
    } imgs[] = {
        {"sim_kernels.cubin", CUC_IMAGE_CUBIN},
        {"sim_kernels.fatbin", CUC_IMAGE_FATBIN},
        {"sim_kernels_lz4.fatbin", CUC_IMAGE_FATBIN},
    };
    char path[4096];
    size_t i, len;

    if (!test_on_sim()) {
        fprintf(stderr, "note: nvcc images are for the simulator's architecture; not "
                "loaded on this GPU\n");
        return;
    }
    for (i = 0; i < CUC_ARRAY_LEN(imgs); i++) {
        uint8_t h[32], *b;
        cuc_kernel *k;
        snprintf(path, sizeof(path), "%s/sim/test-images/%s", CUC_BINARY_DIR, imgs[i].file);
        b = slurp(path, &len);
        if (!b) {
            fprintf(stderr, "note: %s not built (no nvcc): not checked\n", path);
            continue;
        }
        CHECK_OK(cuc_kernel_load((enum cuc_image_kind)imgs[i].kind, b, len, "sim_add_one", &k));
        cuc__sha256(b, len, h);
        CHECK(memcmp(cuc_kernel_hash(k), h, 32) == 0);
        cuc_kernel_destroy(k);
        free(b);
    }
}

static void test_launch(void)
{
    cuc_launch_config cfg;
    cuc_stream *s;
    cuc_kernel *k;
    int rc;

    CHECK_OK(cuc_stream_legacy(dev0, &s));
    CHECK_OK(cuc_kernel_load(CUC_IMAGE_PTX, ptx_twice, sizeof(ptx_twice), "noop", &k));
    cuc_launch_config_init(&cfg);
    CHECK(cfg.grid[0] == 1 && cfg.block[2] == 1 && cfg.cluster[1] == 1);
    CHECK(cfg.shared_mem == 0 && cfg.cooperative == 0 && cfg.reserved[4] == 0);
    cfg.grid[0] = 4;
    cfg.block[0] = 32;
    rc = cuc_launch(s, &cfg, k, NULL);
    if (test_on_sim()) {
        CHECK(rc == CUC_E_NOT_SUPPORTED);
        CHECK(strstr(cuc_errmsg(), "cuLaunchKernelEx") != NULL);
        CHECK(strstr(cuc_errmsg(), "simulated driver") != NULL);
        CHECK(strstr(cuc_errmsg(), "\"noop\"") != NULL);
    } else {
        CHECK_OK(rc);
        CHECK_OK(cuc_stream_synchronize(s));
    }
    /* Clusters and cooperative launches go as attributes. */
    cfg.cluster[0] = 2;
    cfg.cooperative = 1;
    rc = cuc_launch(s, &cfg, k, NULL);
    if (test_on_sim()) {
        CHECK(rc == CUC_E_NOT_SUPPORTED);
    } else {
        int maj, min;
        cuc_device_compute_capability(dev0, &maj, &min);
        if (maj >= 9) {
            CHECK_OK(rc);
            CHECK_OK(cuc_stream_synchronize(s));
        }
    }

    /* Checked before the driver. */
    cuc_launch_config_init(&cfg);
    cfg.grid[1] = 0;
    CHECK_RC(cuc_launch(s, &cfg, k, NULL), CUC_E_INVALID);
    CHECK(strstr(cuc_errmsg(), "grid.y is 0") != NULL);
    cuc_launch_config_init(&cfg);
    cfg.grid[0] = 4;
    cfg.cluster[0] = 3;
    CHECK_RC(cuc_launch(s, &cfg, k, NULL), CUC_E_INVALID);
    CHECK(strstr(cuc_errmsg(), "cluster.x (3) does not divide grid.x (4)") != NULL);
    cuc_launch_config_init(&cfg);
    cfg.block[0] = 64;
    cfg.block[1] = 32;
    CHECK_RC(cuc_launch_config_check(&cfg), CUC_E_INVALID);
    CHECK(strstr(cuc_errmsg(), "2048") != NULL);
    cuc_launch_config_init(&cfg);
    cfg.cooperative = 2;
    CHECK_RC(cuc_launch_config_check(&cfg), CUC_E_INVALID);
    cuc_launch_config_init(&cfg);
    cfg.reserved[3] = 1;
    CHECK_RC(cuc_launch_config_check(&cfg), CUC_E_INVALID);
    CHECK(strstr(cuc_errmsg(), "reserved[3]") != NULL);
    cuc_launch_config_init(&cfg);
    cfg.block[2] = 65;
    CHECK_RC(cuc_launch_config_check(&cfg), CUC_E_INVALID);
    cuc_launch_config_init(&cfg);
    CHECK_OK(cuc_launch_config_check(&cfg));
    /* a NULL stream is the legacy default stream: launched (refused by the
     * simulator, which runs no kernels) */
    rc = cuc_launch(NULL, &cfg, k, NULL);
    CHECK(rc == 0 || (test_on_sim() && rc == CUC_E_NOT_SUPPORTED));
    CHECK_RC(cuc_launch(s, NULL, k, NULL), CUC_E_INVALID);
    CHECK_RC(cuc_launch(s, &cfg, NULL, NULL), CUC_E_INVALID);
    cuc_kernel_destroy(k);
}

static void expect_params(cuc_kernel *k, const size_t *off, const size_t *size, size_t n)
{
    cuc_kernel_param p[8];
    size_t got = 99, i;

    CHECK(n <= 8);
    CHECK_OK(cuc_kernel_params(k, p, 8, &got));
    CHECK(got == n);
    for (i = 0; i < n && i < got; i++) {
        if (p[i].offset != off[i] || p[i].size != size[i])
            fprintf(stderr, "kernel %s parameter %zu: offset %zu size %zu, want %zu %zu\n",
                    cuc_kernel_name(k), i, p[i].offset, p[i].size, off[i], size[i]);
        CHECK(p[i].offset == off[i] && p[i].size == size[i]);
    }
}

/* What the driver says of each kernel's parameters (the simulator reads
 * them from the PTX), and launches held against them. */
static void test_params(void)
{
    static const size_t twice_off[] = {0, 8}, twice_size[] = {8, 4};
    static const size_t mixed_off[] = {0, 2, 4, 8, 16, 40};
    static const size_t mixed_size[] = {1, 2, 4, 8, 24, 8};
    size_t sizes[3] = {8, 4, 8}, n = 99;
    uint64_t out = 0, extra = 0;
    uint32_t count = 0;
    void *args[3] = {&out, &count, &extra};
    cuc_kernel_param one;
    cuc_launch_config cfg;
    cuc_kernel *twice, *noop, *mixed;
    cuc_stream *s;
    int rc;

    CHECK_OK(cuc_stream_legacy(dev0, &s));
    CHECK_OK(cuc_kernel_load(CUC_IMAGE_PTX, ptx_twice, sizeof(ptx_twice), "twice", &twice));
    CHECK_OK(cuc_kernel_load(CUC_IMAGE_PTX, ptx_twice, sizeof(ptx_twice), "noop", &noop));
    CHECK_OK(cuc_kernel_load(CUC_IMAGE_PTX, ptx_mixed, sizeof(ptx_mixed), "mixed", &mixed));
    expect_params(twice, twice_off, twice_size, 2);
    expect_params(noop, NULL, NULL, 0);
    expect_params(mixed, mixed_off, mixed_size, 6);
    expect_params(twice, twice_off, twice_size, 2); /* again: from the first answer */
    /* fewer slots than parameters: the count is still the whole */
    CHECK_OK(cuc_kernel_params(mixed, &one, 1, &n));
    CHECK(n == 6 && one.offset == 0 && one.size == 1);
    CHECK_OK(cuc_kernel_params(mixed, NULL, 0, &n));
    CHECK(n == 6);
    CHECK_RC(cuc_kernel_params(mixed, NULL, 1, &n), CUC_E_INVALID);
    CHECK_RC(cuc_kernel_params(mixed, &one, 1, NULL), CUC_E_INVALID);
    CHECK_RC(cuc_kernel_params(NULL, &one, 1, &n), CUC_E_INVALID);

    /* twice(out, 0) touches no memory: it runs on a GPU */
    cuc_launch_config_init(&cfg);
    cfg.block[0] = 32;
    rc = cuc_launch_checked(s, &cfg, twice, args, sizes, 2);
    CHECK(rc == 0 || (test_on_sim() && rc == CUC_E_NOT_SUPPORTED));
    rc = cuc_launch_checked(s, &cfg, noop, NULL, NULL, 0);
    CHECK(rc == 0 || (test_on_sim() && rc == CUC_E_NOT_SUPPORTED));
    CHECK_RC(cuc_launch_checked(s, &cfg, twice, args, sizes, 1), CUC_E_INVALID);
    CHECK(strstr(cuc_errmsg(), "\"twice\" takes 2 parameters, 1 argument given") != NULL);
    CHECK_RC(cuc_launch_checked(s, &cfg, twice, args, sizes, 3), CUC_E_INVALID);
    CHECK(strstr(cuc_errmsg(), "takes 2 parameters, 3 arguments given") != NULL);
    CHECK_RC(cuc_launch_checked(s, &cfg, noop, args, sizes, 1), CUC_E_INVALID);
    sizes[1] = 8;
    CHECK_RC(cuc_launch_checked(s, &cfg, twice, args, sizes, 2), CUC_E_INVALID);
    CHECK(strstr(cuc_errmsg(), "parameter 1 takes 4 bytes, argument 1 has 8") != NULL);
    CHECK_RC(cuc_launch_checked(s, &cfg, twice, NULL, sizes, 2), CUC_E_INVALID);
    CHECK_RC(cuc_launch_checked(s, &cfg, twice, args, NULL, 2), CUC_E_INVALID);
    if (!test_on_sim())
        CHECK_OK(cuc_stream_synchronize(s));
    cuc_kernel_destroy(mixed);
    cuc_kernel_destroy(noop);
    cuc_kernel_destroy(twice);
}

/* A thread with no context current: the driver answers for a CUkernel only
 * in one, so cuc_kernel_params makes device 0's current for the query and
 * puts back none. */
static void *params_thread(void *arg)
{
    static const size_t off[] = {0, 2, 4, 8, 16, 40}, size[] = {1, 2, 4, 8, 24, 8};
    cuc_kernel *k;
    void *saved = &saved;

    (void)arg;
    CHECK_OK(cuc_device_context_save(&saved));
    CHECK(saved == NULL);
    CHECK_OK(cuc_kernel_load(CUC_IMAGE_PTX, ptx_mixed, sizeof(ptx_mixed), "mixed", &k));
    expect_params(k, off, size, 6);
    CHECK_OK(cuc_device_context_save(&saved));
    CHECK(saved == NULL);
    cuc_kernel_destroy(k);
    return NULL;
}

/* A thread with another device current keeps it: the query is made there. */
static void *params_other_device_thread(void *arg)
{
    static const size_t off[] = {0, 8}, size[] = {8, 4};
    cuc_device *d1 = arg, *cur = NULL;
    cuc_kernel *k;

    CHECK_OK(cuc_device_set_current(d1));
    CHECK_OK(cuc_kernel_load(CUC_IMAGE_PTX, ptx_twice, sizeof(ptx_twice), "twice", &k));
    expect_params(k, off, size, 2);
    CHECK_OK(cuc_device_current(&cur));
    CHECK(cur == d1);
    cuc_kernel_destroy(k);
    return NULL;
}

static void test_params_context(void)
{
    cuc_device *d1;
    pthread_t t;
    int n = 0;

    CHECK(pthread_create(&t, NULL, params_thread, NULL) == 0);
    CHECK(pthread_join(t, NULL) == 0);
    CHECK_OK(cuc_device_count(&n));
    if (n < 2)
        return;
    CHECK_OK(cuc_device_get(1, &d1));
    CHECK(pthread_create(&t, NULL, params_other_device_thread, d1) == 0);
    CHECK(pthread_join(t, NULL) == 0);
}

static char threads_ptx[sizeof(ptx_other) + 32];

static void *load_thread(void *arg)
{
    cuc_kernel *k = NULL;

    (void)arg;
    if (cuc_kernel_load(CUC_IMAGE_PTX, threads_ptx, strlen(threads_ptx), "other", &k))
        return NULL;
    return k;
}

static void test_threads(void)
{
    size_t loads0, hits0, loads, hits;
    pthread_t t[4];
    cuc_kernel *k[4];
    int i;

    snprintf(threads_ptx, sizeof(threads_ptx), "// threads\n%s", ptx_other);
    stats(&loads0, &hits0);
    for (i = 0; i < 4; i++)
        CHECK(pthread_create(&t[i], NULL, load_thread, NULL) == 0);
    for (i = 0; i < 4; i++) {
        CHECK(pthread_join(t[i], (void **)&k[i]) == 0);
        CHECK(k[i] != NULL);
    }
    stats(&loads, &hits);
    CHECK(loads == loads0 + 1 && hits == hits0 + 3);
    for (i = 0; i < 4; i++)
        cuc_kernel_destroy(k[i]);
}

int main(void)
{
    CHECK_OK(cuc_device_get(0, &dev0));
    CHECK_OK(cuc_device_set_current(dev0));
    FD_BASELINE();
    test_sha256();
    test_cache();
    test_not_found();
    test_bad_image();
    test_checks();
    test_real_images();
    test_launch();
    test_params();
    test_params_context();
    test_threads();
    FD_CHECK_NO_LEAK();
    return test_finish();
}
