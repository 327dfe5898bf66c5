/* Kernels: image checks, the process-wide cache of loaded images keyed by
 * (kind, SHA-256) and the kernels that share them. */
#include "objects.h"

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
    struct cuc__library *next;
};

/* Held across loads so that one image is never loaded twice at once; a
 * process holds few images, so the list is searched linearly. */
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static struct cuc__library *cache;
static size_t stat_loads, stat_hits;

static const uint8_t elf_magic[4] = {0x7f, 'E', 'L', 'F'};
static const uint8_t fatbin_magic[4] = {0x50, 0xed, 0x55, 0xba};
static const uint8_t wrapper_magic[4] = {0xb1, 0x43, 0x62, 0x46};

const char *cuc__image_kind_name(int kind)
{
    switch (kind) {
    case CUC_IMAGE_CUBIN: return "cubin";
    case CUC_IMAGE_PTX: return "PTX";
    case CUC_IMAGE_FATBIN: return "fatbin";
    }
    return "unknown";
}

static uint64_t rd64(const uint8_t *p) { return cuc__get64(p); }

static int starts(const uint8_t *p, size_t len, const uint8_t magic[4])
{
    return len >= 4 && memcmp(p, magic, 4) == 0;
}

/* [off, off + n) inside [0, len), without overflow. */
static int fits(uint64_t off, uint64_t n, size_t len)
{
    return off <= len && n <= len - off;
}

static int check_elf(const uint8_t *p, size_t len, char *why, size_t wl)
{
    uint64_t shoff, phoff, i;
    unsigned shnum, shentsize, phnum, phentsize;

    if (len < 64 || p[4] != 2 || p[5] != 1) {
        snprintf(why, wl, "not a 64-bit little-endian ELF (%zu bytes)", len);
        return -1;
    }
    phoff = rd64(p + 32);
    shoff = rd64(p + 40);
    phentsize = cuc__get16(p + 54);
    phnum = cuc__get16(p + 56);
    shentsize = cuc__get16(p + 58);
    shnum = cuc__get16(p + 60);
    if (phnum && (phentsize < 56 || !fits(phoff, (uint64_t)phnum * phentsize, len))) {
        snprintf(why, wl, "its %u program headers at offset %llu lie outside the "
                 "%zu-byte image", phnum, (unsigned long long)phoff, len);
        return -1;
    }
    if (shnum == 0 && shoff != 0) {
        snprintf(why, wl, "it uses extended section numbering, which cucore does "
                 "not check");
        return -1;
    }
    if (shnum && (shentsize < 64 || !fits(shoff, (uint64_t)shnum * shentsize, len))) {
        snprintf(why, wl, "its %u section headers at offset %llu lie outside the "
                 "%zu-byte image", shnum, (unsigned long long)shoff, len);
        return -1;
    }
    for (i = 0; i < shnum; i++) {
        const uint8_t *sh = p + shoff + i * shentsize;
        uint32_t type = cuc__get32(sh + 4);
        uint64_t off = rd64(sh + 24), size = rd64(sh + 32);
        if (type == 0 || type == 8) /* SHT_NULL, SHT_NOBITS: no bytes */
            continue;
        if (!fits(off, size, len)) {
            snprintf(why, wl, "section %llu (%llu bytes at offset %llu) lies outside "
                     "the %zu-byte image", (unsigned long long)i,
                     (unsigned long long)size, (unsigned long long)off, len);
            return -1;
        }
    }
    return 0;
}

static int check_fatbin(const uint8_t *p, size_t len, char *why, size_t wl)
{
    uint64_t hsize, fsize, off, total;

    if (len < 16) {
        snprintf(why, wl, "a fatbin header is 16 bytes, the image %zu", len);
        return -1;
    }
    hsize = cuc__get16(p + 6);
    fsize = rd64(p + 8);
    if (hsize < 16 || !fits(hsize, fsize, len)) {
        snprintf(why, wl, "its header declares %llu + %llu bytes, the image is %zu",
                 (unsigned long long)hsize, (unsigned long long)fsize, len);
        return -1;
    }
    total = hsize + fsize;
    for (off = hsize; off < total;) {
        uint64_t ehs, esize;
        if (total - off < 16) {
            snprintf(why, wl, "entry at offset %llu is cut off",
                     (unsigned long long)off);
            return -1;
        }
        ehs = cuc__get32(p + off + 4);
        esize = rd64(p + off + 8);
        if (ehs < 16 || !fits(ehs, esize, (size_t)(total - off))) {
            snprintf(why, wl, "entry at offset %llu declares %llu + %llu bytes, past "
                     "the fatbin's end at %llu", (unsigned long long)off,
                     (unsigned long long)ehs, (unsigned long long)esize,
                     (unsigned long long)total);
            return -1;
        }
        off += ehs + esize;
    }
    return 0;
}

static int check_ptx(const uint8_t *p, size_t *len, char *why, size_t wl)
{
    size_t n = *len;

    while (n && p[n - 1] == 0)
        n--;
    if (n == 0) {
        snprintf(why, wl, "the PTX text is empty");
        return -1;
    }
    if (memchr(p, 0, n)) {
        snprintf(why, wl, "the PTX text has a NUL byte at offset %zu, before its end",
                 (size_t)((const uint8_t *)memchr(p, 0, n) - p));
        return -1;
    }
    *len = n;
    return 0;
}

int cuc__image_check(int kind, const void *image, size_t *len, char *why, size_t wl)
{
    const uint8_t *p = image;
    int elf = starts(p, *len, elf_magic), fat = starts(p, *len, fatbin_magic);

    if (starts(p, *len, wrapper_magic)) {
        snprintf(why, wl, "the bytes are a __fatBinC_Wrapper_t, which holds a "
                 "pointer: pass the fatbin it points to");
        return -1;
    }
    switch (kind) {
    case CUC_IMAGE_CUBIN:
        if (!elf) {
            snprintf(why, wl, "a cubin starts with the ELF magic 7f 45 4c 46%s",
                     fat ? "; these bytes are a fatbin (CUC_IMAGE_FATBIN)" : "");
            return -1;
        }
        return check_elf(p, *len, why, wl);
    case CUC_IMAGE_FATBIN:
        if (!fat) {
            snprintf(why, wl, "a fatbin starts with the magic 50 ed 55 ba%s",
                     elf ? "; these bytes are a cubin (CUC_IMAGE_CUBIN)" : "");
            return -1;
        }
        return check_fatbin(p, *len, why, wl);
    case CUC_IMAGE_PTX:
        if (elf || fat) {
            snprintf(why, wl, "these bytes are a %s, not PTX text",
                     elf ? "cubin (CUC_IMAGE_CUBIN)" : "fatbin (CUC_IMAGE_FATBIN)");
            return -1;
        }
        return check_ptx(p, len, why, wl);
    }
    snprintf(why, wl, "image kind %d is not CUC_IMAGE_CUBIN, _PTX or _FATBIN", kind);
    return -1;
}

static struct cuc__library *cache_find(int kind, const uint8_t *hash, size_t len)
{
    struct cuc__library *l;

    for (l = cache; l; l = l->next)
        if (l->kind == kind && l->len == len && !memcmp(l->hash, hash, CUC__SHA256_LEN))
            return l;
    return NULL;
}

int cuc__kernel_cache_has(int kind, const void *image, size_t len,
                          const uint8_t hash[CUC__SHA256_LEN])
{
    struct cuc__library *l;
    int has;

    pthread_mutex_lock(&cache_lock);
    l = cache_find(kind, hash, len);
    has = l && memcmp(l->image, image, len) == 0;
    pthread_mutex_unlock(&cache_lock);
    return has;
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
    CUC_DRV->cuLibraryUnload(l->cu);
    free(l->image);
    free(l);
}

/* Drops one reference; cache_lock held. */
static void library_unref(struct cuc__library *l)
{
    struct cuc__library **pp;

    if (--l->refs)
        return;
    for (pp = &cache; *pp; pp = &(*pp)->next)
        if (*pp == l) {
            *pp = l->next;
            break;
        }
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
        l->next = cache;
        cache = l;
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
