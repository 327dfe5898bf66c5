/* First loads of large kernel images, whose SHA-256 runs on a second
 * thread while the driver loads them (kernel.c, cuc__sha256_start):
 *  - the job gives cuc__sha256's hash, threaded at CUC__SHA256_THREAD_MIN
 *    bytes and over, at once below;
 *  - cuc_kernel_load of an image the cache cannot hold (no image of its
 *    kind and size) hashes during the load, the kernel's hash is the
 *    image's, the current context's function is looked up meanwhile; the
 *    same image again is a hit, another of the same size a load;
 *  - a received record on an empty cache: loaded, its hash checked; a
 *    record whose bytes do not hash to its sha256 is refused (BADMSG)
 *    and what the driver loaded is unloaded, nothing cached; the driver's
 *    failures (cuLibraryLoadData, cuLibraryGetKernel, by the simulator's
 *    fault injection) are reported with the image's hash, the library
 *    unloaded, and a wrong hash still wins over them; a malformed image
 *    never reaches the driver; a driver that refuses the
 *    CU_LIBRARY_BINARY_IS_PRESERVED hint gets the load without it.
 * Simulator only (the call counts and faults are its). */
#include <dlfcn.h>

#include "cucore.h"
#include "check.h"
#include "../sim/cucore_sim.h"
#include "base/sha256.h"
#include "ptx_kernels.h"

#define BIG (1u << 20)

static cucore_sim_calls_fn sim_calls_fn;
static cucore_sim_fail_fn sim_fail_fn;

static unsigned long long calls(const char *name)
{
    unsigned long long n = 0;

    CHECK(sim_calls_fn(name, &n) == 0);
    return n;
}

static void fail(const char *spec)
{
    char why[256];

    CHECK(sim_fail_fn(spec, why, sizeof(why)) == 0);
}

/* ptx_twice, then comment lines with fill as their last character, to
 * BIG bytes or a little less (no NUL counted). */
static char *big_ptx(char fill, size_t *len)
{
    char line[] = "// padding: a comment line the PTX parser skips ........X\n";
    size_t base = strlen(ptx_twice), n = base, l = strlen(line);
    char *p = malloc(BIG + 1);

    CHECK(p != NULL);
    line[l - 2] = fill;
    memcpy(p, ptx_twice, base);
    while (n + l <= BIG) {
        memcpy(p + n, line, l);
        n += l;
    }
    p[n] = '\0';
    *len = n;
    return p;
}

static void stats(size_t *loads, size_t *hits)
{
    cuc_kernel_cache_stats(loads, hits);
}

/* The bytes of a message holding k's kernel record. */
static void *record_bytes(const cuc_kernel *k, size_t *len)
{
    void *bytes = NULL;
    cuc_msg *m;

    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_kernel(m, k));
    CHECK_OK(cuc_msg_to_bytes(m, &bytes, len));
    cuc_msg_destroy(m);
    return bytes;
}

/* Decodes bytes and gets their kernel; destroys what it got. */
static int receive(const void *bytes, size_t len)
{
    cuc_kernel *k = NULL;
    cuc_msg *m;
    int rc;

    CHECK_OK(cuc_msg_from_bytes(bytes, len, &m));
    rc = cuc_msg_get_kernel(m, 0, &k);
    if (!rc) {
        CHECK(strcmp(cuc_kernel_name(k), "twice") == 0);
        cuc_kernel_destroy(k);
    }
    cuc_msg_destroy(m);
    return rc;
}

static void test_job(void)
{
    struct cuc__sha256_job j;
    uint8_t want[32];
    size_t len;
    char *img = big_ptx('a', &len);

    cuc__sha256(img, len, want);
    cuc__sha256_start(&j, img, len);
    CHECK(j.threaded);
    cuc__sha256_finish(&j);
    CHECK(!j.threaded && memcmp(j.out, want, 32) == 0);
    cuc__sha256(img, 1000, want);
    cuc__sha256_start(&j, img, 1000);
    CHECK(!j.threaded && memcmp(j.out, want, 32) == 0); /* small: at once */
    cuc__sha256_finish(&j);
    free(img);
}

static void test_sender(void)
{
    size_t len, len2, loads0, hits0, loads, hits;
    char *img = big_ptx('a', &len), *other = big_ptx('b', &len2);
    unsigned long long funcs;
    cuc_kernel *a, *b, *c;
    uint8_t want[32];

    CHECK(len == len2);
    cuc__sha256(img, len, want);
    stats(&loads0, &hits0);
    funcs = calls("cuKernelGetFunction");
    CHECK_OK(cuc_kernel_load(CUC_IMAGE_PTX, img, len + 1, "twice", &a));
    stats(&loads, &hits);
    CHECK(loads == loads0 + 1 && hits == hits0);
    CHECK(memcmp(cuc_kernel_hash(a), want, 32) == 0);
    CHECK(calls("cuKernelGetFunction") == funcs + 1); /* warmed meanwhile */
    memset(img, 'z', 64); /* the library kept its own copy */
    CHECK(memcmp(cuc_kernel_image(a, NULL), ptx_twice, 64) == 0);
    memcpy(img, ptx_twice, 64);
    CHECK_OK(cuc_kernel_load(CUC_IMAGE_PTX, img, len, "twice", &b));
    stats(&loads, &hits);
    CHECK(loads == loads0 + 1 && hits == hits0 + 1 && cuc_kernel_handle(b) == cuc_kernel_handle(a));
    CHECK_OK(cuc_kernel_load(CUC_IMAGE_PTX, other, len2, "twice", &c));
    stats(&loads, &hits);
    CHECK(loads == loads0 + 2 && memcmp(cuc_kernel_hash(c), want, 32) != 0);
    cuc_kernel_destroy(a);
    cuc_kernel_destroy(b);
    cuc_kernel_destroy(c);
    /* the driver refuses: its error names the image's hash */
    fail("cuLibraryLoadData:1");
    CHECK_RC(cuc_kernel_load(CUC_IMAGE_PTX, img, len, "twice", &a), CUC_E_DRIVER);
    CHECK_ERRMSG("cuLibraryLoadData failed");
    CHECK_ERRMSG("sha256 ");
    /* a driver that refuses the preserved-binary hint: loaded without it */
    fail("cuLibraryLoadData:1:CUDA_ERROR_INVALID_VALUE");
    CHECK_OK(cuc_kernel_load(CUC_IMAGE_PTX, img, len, "twice", &a));
    CHECK(calls("cuLibraryLoadData") == 2);
    cuc_kernel_destroy(a);
    fail(NULL);
    free(img);
    free(other);
}

static void test_receiver(void)
{
    size_t len, wire, loads0, loads;
    char *img = big_ptx('c', &len);
    unsigned long long ld, unld;
    uint8_t *bytes, *bad;
    cuc_kernel *k;

    CHECK_OK(cuc_kernel_load(CUC_IMAGE_PTX, img, len, "twice", &k));
    bytes = record_bytes(k, &wire);
    cuc_kernel_destroy(k); /* the cache is empty of it again */
    bad = malloc(wire);
    CHECK(bad != NULL);
    memcpy(bad, bytes, wire);
    bad[24 + 16 + 16 + 31] ^= 1; /* the record's sha256, last byte */

    /* the right hash: loaded once, then gone with its kernel */
    stats(&loads0, NULL);
    CHECK_OK(receive(bytes, wire));
    stats(&loads, NULL);
    CHECK(loads == loads0 + 1);

    /* a wrong hash: refused, what the driver loaded unloaded, not cached */
    ld = calls("cuLibraryLoadData");
    unld = calls("cuLibraryUnload");
    CHECK_RC(receive(bad, wire), CUC_E_BADMSG);
    CHECK_ERRMSG("do not hash to");
    CHECK(calls("cuLibraryLoadData") == ld + 1 && calls("cuLibraryUnload") == unld + 1);
    stats(&loads0, NULL);
    CHECK(loads0 == loads);

    /* the driver's failures: named with the hash, nothing kept */
    fail("cuLibraryLoadData:1");
    CHECK_RC(receive(bytes, wire), CUC_E_DRIVER);
    CHECK_ERRMSG("cuLibraryLoadData failed");
    CHECK_ERRMSG("sha256 ");
    fail("cuLibraryGetKernel:1");
    CHECK_RC(receive(bytes, wire), CUC_E_DRIVER);
    CHECK_ERRMSG("cuLibraryGetKernel failed");
    CHECK(calls("cuLibraryUnload") == 1);
    /* a wrong hash is the error, whatever the driver said */
    fail("cuLibraryLoadData:1");
    CHECK_RC(receive(bad, wire), CUC_E_BADMSG);
    CHECK_ERRMSG("do not hash to");
    fail("cuLibraryGetKernel:1");
    CHECK_RC(receive(bad, wire), CUC_E_BADMSG);
    fail(NULL);
    stats(&loads, NULL);
    CHECK(loads == loads0);

    /* malformed (a NUL inside the PTX): never reaches the driver */
    memcpy(bad, bytes, wire);
    bad[24 + 16 + 48 + 6 + 4096] = 0;
    CHECK_RC(receive(bad, wire), CUC_E_BADMSG);
    CHECK_ERRMSG("NUL byte");
    CHECK(calls("cuLibraryLoadData") == 0);

    CHECK_OK(receive(bytes, wire)); /* and it still loads */
    stats(&loads, NULL);
    CHECK(loads == loads0 + 1);
    free(bad);
    free(bytes);
    free(img);
}

int main(void)
{
    cuc_device *dev;
    void *h;

    if (!test_on_sim())
        return 77;
    CHECK_OK(cuc_device_get(0, &dev));
    CHECK_OK(cuc_device_set_current(dev)); /* the warm-up's context */
    h = dlopen(CUC_SIM_PATH, RTLD_NOW | RTLD_NOLOAD);
    CHECK(h != NULL);
    sim_calls_fn = (cucore_sim_calls_fn)(uintptr_t)dlsym(h, "cucore_sim_calls");
    sim_fail_fn = (cucore_sim_fail_fn)(uintptr_t)dlsym(h, "cucore_sim_fail");
    CHECK(sim_calls_fn != NULL && sim_fail_fn != NULL);
    test_job();
    test_sender();
    test_receiver();
    dlclose(h);
    return test_finish();
}
