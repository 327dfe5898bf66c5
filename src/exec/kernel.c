/* Kernels: the process-wide cache of loaded images keyed by (kind,
 * SHA-256) and the kernels that share them. */
#include "exec/kernel.h"
#include "exec/kernel_image.h"
#include "base/hex.h"
#include "base/htab.h"
#include "os/proc.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Zero bytes after every image copy: cuLibraryLoadData gets no length, so a
 * PTX image needs its NUL and a driver that reads a header past the end of
 * a short image reads zeros, not the heap. */
#define IMAGE_PAD 64

struct cuc__library {
    int kind;
    uint8_t hash[CUC__SHA256_LEN];
    uint8_t *image; /* len bytes + IMAGE_PAD zeros */
    size_t len;
    CUlibrary cu;
    size_t refs; /* kernels using it; guarded by cache_lock */
    pid_t creator; /* fork rule: a child's last unref makes no driver call */
    struct cuc__hnode node;
};

/* Held across loads so that one image is never loaded twice at once. */
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static struct cuc__htab cache;
static size_t stat_loads, stat_hits;

struct lib_key {
    int kind;
    size_t len;
    const uint8_t *hash;
};

static int same_lib(const struct cuc__hnode *n, const void *key)
{
    const struct cuc__library *l = CUC_CONTAINER_OF(n, struct cuc__library, node);
    const struct lib_key *k = key;

    return l->kind == k->kind && l->len == k->len &&
           !memcmp(l->hash, k->hash, CUC__SHA256_LEN);
}

static uint64_t lib_hash(const uint8_t *hash)
{
    return cuc__hash_bytes(hash, CUC__SHA256_LEN);
}

static struct cuc__library *cache_find(int kind, const uint8_t *hash, size_t len)
{
    struct lib_key k = {kind, len, hash};
    struct cuc__hnode *n = cuc__htab_find(&cache, lib_hash(hash), same_lib, &k);

    return n ? CUC_CONTAINER_OF(n, struct cuc__library, node) : NULL;
}

/* Loads a library, not yet in the cache: cuc__kernel_load_checked adds it
 * once a kernel is found in it. name is for the message. */
static int library_load(int kind, const void *image, size_t len, const uint8_t *hash,
                        const char *name, struct cuc__library **out)
{
    char hex[2 * CUC__SHA256_LEN + 1];
    struct cuc__library *l = calloc(1, sizeof(*l));
    CUresult r;

    if (!l || !(l->image = calloc(1, len + IMAGE_PAD))) {
        free(l);
        return cuc__seterr(CUC_E_NOMEM, "out of memory for a %zu-byte image", len);
    }
    memcpy(l->image, image, len);
    l->creator = cuc__pid();
    /* No JIT log buffer: with lazy loading the driver may use JIT options
     * after this call returns, when a stack buffer is gone. */
    r = CUC_DRV->cuLibraryLoadData(&l->cu, l->image, NULL, NULL, 0, NULL, NULL, 0);
    if (r != CUDA_SUCCESS) {
        cuc__hex(hash, CUC__SHA256_LEN, hex);
        free(l->image);
        free(l);
        return cuc__cuda_err(r, "cuLibraryLoadData", "kernel \"%.256s\" in the %zu-byte "
                             "%s image (sha256 %.16s...)", name, len,
                             cuc__image_kind_name(kind), hex);
    }
    l->kind = kind;
    memcpy(l->hash, hash, CUC__SHA256_LEN);
    l->len = len;
    *out = l;
    return 0;
}

static void library_free(struct cuc__library *l)
{
    if (l->creator == cuc__pid()) /* not the parent's, after fork */
        CUC_DRV->cuLibraryUnload(l->cu);
    free(l->image);
    free(l);
}

/* Drops one reference; cache_lock held. */
static void library_unref(struct cuc__library *l)
{
    if (--l->refs)
        return;
    cuc__htab_remove(&cache, &l->node);
    if (cache.count == 0)
        cuc__htab_free(&cache); /* nothing left for a leak checker */
    library_free(l);
}

/* The driver loads lazily (the H200, driver 580, did so even with
 * CUDA_MODULE_LOADING=EAGER): cuLibraryLoadData takes any bytes and this
 * is where a malformed image is refused. */
static int get_kernel(struct cuc__library *l, const char *name, CUkernel *k)
{
    char hex[2 * CUC__SHA256_LEN + 1];
    CUresult r = CUC_DRV->cuLibraryGetKernel(k, l->cu, name);

    if (r == CUDA_SUCCESS)
        return 0;
    cuc__hex(l->hash, CUC__SHA256_LEN, hex);
    return cuc__cuda_err(r, "cuLibraryGetKernel", "kernel \"%.256s\" in the %zu-byte "
                         "%s image (sha256 %.16s...)%s", name, l->len,
                         cuc__image_kind_name(l->kind), hex,
                         r == CUDA_ERROR_NOT_FOUND
                             ? ": no such kernel (is it extern \"C\" and __global__?)"
                             : ": the driver refused the image itself; check that it "
                               "was built for this GPU");
}

int cuc__kernel_load_checked(int kind, const void *image, size_t len,
                             const uint8_t hash[CUC__SHA256_LEN], const char *name,
                             cuc_kernel **out)
{
    const struct cuc__driver *drv;
    struct cuc__library *l;
    cuc_kernel *k;
    CUkernel cu;
    int fresh, rc;

    rc = cuc__driver_get(&drv);
    if (rc)
        return rc;
    k = calloc(1, sizeof(*k));
    if (!k || !(k->name = strdup(name))) {
        free(k);
        return cuc__seterr(CUC_E_NOMEM, "out of memory for kernel \"%.256s\"", name);
    }
    pthread_mutex_lock(&cache_lock);
    l = cache_find(kind, hash, len);
    fresh = l == NULL;
    if (fresh && !image) {
        rc = 1; /* not cached: the caller checks the image and comes back */
        goto unlock;
    }
    if (fresh) {
        rc = library_load(kind, image, len, hash, name, &l);
        if (rc)
            goto unlock;
    }
    rc = get_kernel(l, name, &cu);
    if (rc) {
        /* A library no kernel came from is neither kept nor counted. */
        if (fresh)
            library_free(l);
        goto unlock;
    }
    if (fresh) {
        l->node.hash = lib_hash(hash);
        rc = cuc__htab_insert(&cache, &l->node);
        if (rc) {
            library_free(l);
            goto unlock;
        }
        stat_loads++;
    } else {
        stat_hits++;
    }
    l->refs++;
    pthread_mutex_unlock(&cache_lock);
    k->lib = l;
    k->cu = cu;
    *out = k;
    return 0;
unlock:
    pthread_mutex_unlock(&cache_lock);
    free(k->name);
    free(k);
    return rc;
}

int cuc_kernel_load(enum cuc_image_kind kind, const void *image, size_t len,
                    const char *name, cuc_kernel **out)
{
    uint8_t hash[CUC__SHA256_LEN];
    char why[256];
    size_t n;

    if (!image || !name || !out)
        return cuc__seterr(CUC_E_INVALID, "cuc_kernel_load: NULL argument");
    n = strlen(name);
    if (n == 0 || n > CUC_KERNEL_NAME_MAX)
        return cuc__seterr(CUC_E_INVALID, "cuc_kernel_load: kernel name of %zu bytes "
                           "(1..%d)", n, CUC_KERNEL_NAME_MAX);
    if (len == 0 || len > CUC_KERNEL_IMAGE_MAX)
        return cuc__seterr(CUC_E_INVALID, "cuc_kernel_load: image of %zu bytes "
                           "(1..%zu)", len, CUC_KERNEL_IMAGE_MAX);
    if (cuc__image_check((int)kind, image, &len, why, sizeof(why)))
        return cuc__seterr(CUC_E_INVALID, "cuc_kernel_load: %s image for kernel "
                           "\"%.256s\" is malformed: %s", cuc__image_kind_name((int)kind),
                           name, why);
    cuc__sha256(image, len, hash);
    return cuc__kernel_load_checked((int)kind, image, len, hash, name, out);
}

void cuc_kernel_destroy(cuc_kernel *k)
{
    if (!k)
        return;
    pthread_mutex_lock(&cache_lock);
    library_unref(k->lib);
    pthread_mutex_unlock(&cache_lock);
    free(k->name);
    free(k);
}

void *cuc__kernel_lib_keep(const cuc_kernel *k)
{
    pthread_mutex_lock(&cache_lock);
    k->lib->refs++;
    pthread_mutex_unlock(&cache_lock);
    return k->lib;
}

void cuc__kernel_lib_drop(void *lib)
{
    pthread_mutex_lock(&cache_lock);
    library_unref(lib);
    pthread_mutex_unlock(&cache_lock);
}

void cuc_kernel_cache_stats(size_t *loads, size_t *hits)
{
    pthread_mutex_lock(&cache_lock);
    if (loads)
        *loads = stat_loads;
    if (hits)
        *hits = stat_hits;
    pthread_mutex_unlock(&cache_lock);
}

const char *cuc_kernel_name(const cuc_kernel *k) { return k->name; }
enum cuc_image_kind cuc_kernel_kind(const cuc_kernel *k) { return (enum cuc_image_kind)k->lib->kind; }
const uint8_t *cuc_kernel_hash(const cuc_kernel *k) { return k->lib->hash; }
void *cuc_kernel_handle(const cuc_kernel *k) { return k->cu; }

const void *cuc_kernel_image(const cuc_kernel *k, size_t *len)
{
    if (len)
        *len = k->lib->len;
    return k->lib->image;
}
