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

/* A library of a copy of image, not loaded yet: len bytes + IMAGE_PAD
 * zeros (only the pad is cleared: the copy writes the rest). */
static int library_new(const void *image, size_t len, struct cuc__library **out)
{
    struct cuc__library *l = calloc(1, sizeof(*l));

    if (!l || !(l->image = malloc(len + IMAGE_PAD))) {
        free(l);
        return cuc__seterr(CUC_E_NOMEM, "out of memory for a %zu-byte image", len);
    }
    memcpy(l->image, image, len);
    memset(l->image + len, 0, IMAGE_PAD);
    l->len = len;
    l->creator = cuc__pid();
    *out = l;
    return 0;
}

static void library_free(struct cuc__library *l)
{
    if (l->cu && l->creator == cuc__pid()) /* not the parent's, after fork */
        CUC_DRV->cuLibraryUnload(l->cu);
    free(l->image);
    free(l);
}

/* " (sha256 0123456789abcdef...)". */
static void hash_note(const uint8_t *hash, char note[40])
{
    char hex[2 * CUC__SHA256_LEN + 1];

    cuc__hex(hash, CUC__SHA256_LEN, hex);
    snprintf(note, 40, " (sha256 %.16s...)", hex);
}

/* What cuLibraryGetKernel's failure r means for name in l. */
static int kernel_err(const struct cuc__library *l, const char *name, CUresult r)
{
    char note[40];

    hash_note(l->hash, note);
    return cuc__cuda_err(r, "cuLibraryGetKernel", "kernel \"%.256s\" in the %zu-byte "
                         "%s image%s%s", name, l->len, cuc__image_kind_name(l->kind), note,
                         r == CUDA_ERROR_NOT_FOUND
                             ? ": no such kernel (is it extern \"C\" and __global__?)"
                             : ": the driver refused the image itself; check that it "
                               "was built for this GPU");
}

/* The driver loads lazily, EAGER or not (sim/FACTS.md F12):
 * cuLibraryLoadData takes any bytes and this is where a malformed image
 * is refused. */
static int get_kernel(struct cuc__library *l, const char *name, CUkernel *k)
{
    CUresult r = CUC_DRV->cuLibraryGetKernel(k, l->cu, name);

    return r == CUDA_SUCCESS ? 0 : kernel_err(l, name, r);
}

/* With lazy loading the module reaches a context at its first function
 * lookup there: done here for the current context while the hash runs, so
 * that the caller's cuKernelGetFunction finds it loaded. Its failure is
 * the caller's to see, on that call. */
static void warm_function(CUkernel k)
{
    CUcontext ctx = NULL;
    CUfunction f;

    if (CUC_DRV->cuCtxGetCurrent(&ctx) == CUDA_SUCCESS && ctx)
        (void)CUC_DRV->cuKernelGetFunction(&f, k);
}

/* The driver's part of a first load: cuLibraryLoadData, then name in it
 * (the warm-up only while a hash runs beside it). */
static void driver_load(struct cuc__library *l, const char *name, int warm, CUresult *load,
                        CUresult *get, CUkernel *k)
{
    /* The image stays, unchanged, until cuLibraryUnload (library_free):
     * the driver may read it there instead of making a copy of its own
     * (a hint it may ignore). No JIT log buffer: with lazy loading the
     * driver may use JIT options after this call returns, when a stack
     * buffer is gone. */
    CUlibraryOption opt = CU_LIBRARY_BINARY_IS_PRESERVED;
    void *val = (void *)(uintptr_t)1;

    *load = CUC_DRV->cuLibraryLoadData(&l->cu, l->image, NULL, NULL, 0, &opt, &val, 1);
    if (*load == CUDA_ERROR_INVALID_VALUE) /* a driver that does not take the hint */
        *load = CUC_DRV->cuLibraryLoadData(&l->cu, l->image, NULL, NULL, 0, NULL, NULL, 0);
    *get = CUDA_SUCCESS;
    if (*load != CUDA_SUCCESS) {
        l->cu = NULL;
        return;
    }
    *get = CUC_DRV->cuLibraryGetKernel(k, l->cu, name);
    if (*get == CUDA_SUCCESS && warm)
        warm_function(*k);
}

/* Loads a library of image, not in the cache, and finds name in it;
 * cache_lock held. hash: the image's, when the caller computed it. Else
 * the image is hashed on another thread while the driver loads it (most
 * of a first load is the driver's parse or JIT; the hash was half as
 * much again), and the library enters the cache only after its hash is
 * known: claimed, when given, must be it, or this returns 2 (nothing
 * loaded, no message). The driver sees only bytes the caller checked
 * (cuc__image_check), whose hash is unknown until the join: a peer can
 * make a receiver load any image it likes with its true hash anyway, so
 * loading before the hash is checked exposes nothing new. */
static int library_load(int kind, const void *image, size_t len, const uint8_t *hash,
                        const uint8_t *claimed, const char *name,
                        struct cuc__library **out, CUkernel *kernel)
{
    struct cuc__sha256_job job = {0};
    struct cuc__library *l = NULL;
    CUresult load, get;
    char note[40];
    int rc = library_new(image, len, &l);

    if (rc)
        return rc;
    l->kind = kind;
    if (hash)
        memcpy(l->hash, hash, CUC__SHA256_LEN);
    else /* of the copy: the caller's bytes may change under us */
        cuc__sha256_start(&job, l->image, len);
    /* hashed already (small): a wrong claim never reaches the driver */
    if (!hash && !job.threaded && claimed && memcmp(job.out, claimed, CUC__SHA256_LEN)) {
        rc = 2;
        goto free_lib;
    }
    driver_load(l, name, job.threaded, &load, &get, kernel);
    if (!hash) {
        cuc__sha256_finish(&job);
        memcpy(l->hash, job.out, CUC__SHA256_LEN);
    }
    /* bytes that are not what the record says: that is the error, whatever
     * the driver made of them */
    if (claimed && memcmp(l->hash, claimed, CUC__SHA256_LEN)) {
        rc = 2;
    } else if (load != CUDA_SUCCESS) {
        hash_note(l->hash, note);
        rc = cuc__cuda_err(load, "cuLibraryLoadData", "kernel \"%.256s\" in the %zu-byte "
                           "%s image%s", name, len, cuc__image_kind_name(kind), note);
    } else if (get != CUDA_SUCCESS) {
        rc = kernel_err(l, name, get);
    }
    if (rc)
        goto free_lib;
    *out = l;
    return 0;
free_lib:
    library_free(l);
    return rc;
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

/* Whether the cache holds a library of this kind and length: an image
 * that has neither cannot be a hit, whatever its hash. cache_lock held. */
struct same_size {
    int kind;
    size_t len;
    int found;
};

static void size_match(struct cuc__hnode *n, void *arg)
{
    const struct cuc__library *l = CUC_CONTAINER_OF(n, struct cuc__library, node);
    struct same_size *q = arg;

    q->found |= l->kind == q->kind && l->len == q->len;
}

static int cache_has_size(int kind, size_t len)
{
    struct same_size q = {kind, len, 0};

    cuc__htab_each(&cache, size_match, &q);
    return q.found;
}

/* The kernel found or loaded; cache_lock held. hash: known (trusted, or
 * NULL with claimed: see library_load); image NULL: the cache only, 1 on
 * a miss. */
static int load_locked(int kind, const void *image, size_t len, const uint8_t *hash,
                       const uint8_t *claimed, const char *name, cuc_kernel *k)
{
    uint8_t own[CUC__SHA256_LEN];
    const uint8_t *key = hash ? hash : claimed;
    struct cuc__library *l = NULL;
    CUkernel cu;
    int rc;

    if (!key && cache_has_size(kind, len)) { /* it may be a hit: hash first */
        cuc__sha256(image, len, own);
        key = hash = own;
    }
    if (key)
        l = cache_find(kind, key, len);
    if (l) {
        rc = get_kernel(l, name, &cu);
        if (rc)
            return rc;
        stat_hits++;
    } else {
        if (!image)
            return 1; /* not cached: the caller checks the image and comes back */
        rc = library_load(kind, image, len, hash, claimed, name, &l, &cu);
        if (rc)
            return rc;
        l->node.hash = lib_hash(l->hash);
        rc = cuc__htab_insert(&cache, &l->node);
        if (rc) {
            library_free(l);
            return rc;
        }
        stat_loads++;
    }
    l->refs++;
    k->lib = l;
    k->cu = cu;
    return 0;
}

static int load(int kind, const void *image, size_t len, const uint8_t *hash,
                const uint8_t *claimed, const char *name, cuc_kernel **out)
{
    const struct cuc__driver *drv;
    cuc_kernel *k;
    int rc;

    rc = cuc__driver_get(&drv);
    if (rc)
        return rc;
    k = calloc(1, sizeof(*k));
    if (!k || !(k->name = strdup(name))) {
        free(k);
        return cuc__seterr(CUC_E_NOMEM, "out of memory for kernel \"%.256s\"", name);
    }
    pthread_mutex_lock(&cache_lock);
    rc = load_locked(kind, image, len, hash, claimed, name, k);
    pthread_mutex_unlock(&cache_lock);
    if (rc) {
        free(k->name);
        free(k);
        return rc;
    }
    *out = k;
    return 0;
}

int cuc__kernel_load_checked(int kind, const void *image, size_t len,
                             const uint8_t hash[CUC__SHA256_LEN], const char *name,
                             cuc_kernel **out)
{
    return load(kind, image, len, hash, NULL, name, out);
}

int cuc__kernel_load_claimed(int kind, const void *image, size_t len,
                             const uint8_t claimed[CUC__SHA256_LEN], const char *name,
                             cuc_kernel **out)
{
    return load(kind, image, len, NULL, claimed, name, out);
}

int cuc_kernel_load(enum cuc_image_kind kind, const void *image, size_t len,
                    const char *name, cuc_kernel **out)
{
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
    /* The hash is computed during the load unless the cache may hold the
     * image (load_locked). */
    return load((int)kind, image, len, NULL, NULL, name, out);
}

void cuc_kernel_destroy(cuc_kernel *k)
{
    if (!k)
        return;
    pthread_mutex_lock(&cache_lock);
    library_unref(k->lib);
    pthread_mutex_unlock(&cache_lock);
    free(k->params);
    free(k->name);
    free(k);
}

pid_t cuc__kernel_creator(const cuc_kernel *k)
{
    return k->lib->creator;
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
