/* Kernel image checks: the magic of each kind and every extent an image's
 * headers declare, so that the driver never reads past the bytes it was
 * given (cuLibraryLoadData takes no length). */
#include "exec/kernel_image.h"
#include "cucore/kernel.h"
#include "base/bytes.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

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
    phoff = cuc__get64(p + 32);
    shoff = cuc__get64(p + 40);
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
        uint64_t off = cuc__get64(sh + 24), size = cuc__get64(sh + 32);
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
    fsize = cuc__get64(p + 8);
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
        esize = cuc__get64(p + off + 8);
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

