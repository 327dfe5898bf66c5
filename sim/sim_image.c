/* Module images: finds the kernel names of PTX text, cubin (ELF64, EM_CUDA)
 * and fatbin images. Images are untrusted: every offset, size and count is
 * checked against the extent the image's own headers declare (cuLibraryLoad-
 * Data gets no length), or against the entry that holds it. */
#include "sim_internal.h"
#include "sim_decompress.h"

#include <stdlib.h>
#include <string.h>

#define SIM_IMAGE_MAX ((size_t)1 << 30)     /* largest image accepted */
#define SIM_NAMES_MAX 65536
#define SIM_NAME_MAX 4096

#define ELF_EM_CUDA 190
#define ELF_SHT_SYMTAB 2
#define ELF_SHT_STRTAB 3
#define ELF_STT_FUNC 2
#define ELF_STB_LOCAL 0
#define ELF_STO_CUDA_ENTRY 0x10

#define FATBIN_MAGIC 0xBA55ED50u
#define FATBIN_WRAPPER_MAGIC 0x466243b1u
#define FATBIN_KIND_PTX 1
#define FATBIN_KIND_ELF 2
#define FATBIN_FLAG_LZ4 0x2000u
#define FATBIN_FLAG_ZSTD 0x8000u
#define FATBIN_ENTRY_MIN 64

static uint16_t rd16(const unsigned char *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t rd32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

static uint64_t rd64(const unsigned char *p)
{
    return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32;
}

void sim_names_free(struct sim_names *names)
{
    for (size_t i = 0; i < names->n; i++)
        free(names->v[i]);
    free(names->v);
    names->v = NULL;
    names->n = names->cap = 0;
}

/* Adds a copy of [s, s+len) unless present. 0, or -1 on failure. */
static int names_add(struct sim_names *names, const char *s, size_t len)
{
    char *c;

    if (len == 0 || len > SIM_NAME_MAX)
        return -1;
    for (size_t i = 0; i < names->n; i++)
        if (strlen(names->v[i]) == len && memcmp(names->v[i], s, len) == 0)
            return 0;
    if (names->n >= SIM_NAMES_MAX)
        return -1;
    if (names->n == names->cap) {
        size_t nc = names->cap ? names->cap * 2 : 8;
        char **nv = realloc(names->v, nc * sizeof(*nv));
        if (!nv)
            return -1;
        names->v = nv;
        names->cap = nc;
    }
    c = malloc(len + 1);
    if (!c)
        return -1;
    memcpy(c, s, len);
    c[len] = '\0';
    names->v[names->n++] = c;
    return 0;
}

/* ---- PTX ---------------------------------------------------------------- */

static int ptx_ident_first(int c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
           c == '$' || c == '%';
}

static int ptx_ident_char(int c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || c == '_' || c == '$';
}

static int ptx_space(int c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' ||
           c == '\v';
}

/* Scans PTX text t[0..n) (no NUL inside) for `.version` and `.entry NAME`,
 * skipping comments and string literals. */
static CUresult scan_ptx(const char *t, size_t n, struct sim_names *out)
{
    int have_version = 0;
    size_t i = 0;

    for (size_t k = 0; k < n; k++) {
        unsigned char c = (unsigned char)t[k];
        if (c < 0x20 && !ptx_space(c))
            return CUDA_ERROR_INVALID_IMAGE; /* not text */
    }
    while (i < n) {
        char c = t[i];
        if (c == '/' && i + 1 < n && t[i + 1] == '/') {
            while (i < n && t[i] != '\n')
                i++;
            continue;
        }
        if (c == '/' && i + 1 < n && t[i + 1] == '*') {
            i += 2;
            while (i + 1 < n && !(t[i] == '*' && t[i + 1] == '/'))
                i++;
            i += 2;
            continue;
        }
        if (c == '"') {
            i++;
            while (i < n && t[i] != '"' && t[i] != '\n')
                i++;
            i++;
            continue;
        }
        if (c == '.' && (i == 0 || !ptx_ident_char((unsigned char)t[i - 1]))) {
            size_t j = i + 1;
            while (j < n && ptx_ident_char((unsigned char)t[j]))
                j++;
            if (j - i == 8 && memcmp(t + i, ".version", 8) == 0) {
                have_version = 1;
            } else if (j - i == 6 && memcmp(t + i, ".entry", 6) == 0) {
                size_t s;
                if (!have_version)
                    return CUDA_ERROR_INVALID_IMAGE;
                while (j < n && ptx_space((unsigned char)t[j]))
                    j++;
                s = j;
                if (j >= n || !ptx_ident_first((unsigned char)t[j]))
                    return CUDA_ERROR_INVALID_PTX;
                j++;
                while (j < n && ptx_ident_char((unsigned char)t[j]))
                    j++;
                if (names_add(out, t + s, j - s) != 0)
                    return CUDA_ERROR_INVALID_PTX;
            }
            i = j;
            continue;
        }
        i++;
    }
    return have_version ? CUDA_SUCCESS : CUDA_ERROR_INVALID_IMAGE;
}

/* ---- ELF (cubin) -------------------------------------------------------- */

/* Extent of the ELF at p as its headers declare it; 0 when the headers are
 * not those of a 64-bit little-endian CUDA ELF. Reads only the 64-byte
 * header, and only when avail allows it. */
static size_t elf_extent(const unsigned char *p, size_t avail)
{
    uint64_t phoff, shoff, end = 64, e;
    unsigned phnum, phentsize, shnum, shentsize;

    if (avail < 64)
        return 0;
    if (p[4] != 2 /* ELFCLASS64 */ || p[5] != 1 /* little endian */ ||
        rd16(p + 18) != ELF_EM_CUDA || rd16(p + 52) != 64)
        return 0;
    phoff = rd64(p + 32);
    shoff = rd64(p + 40);
    phentsize = rd16(p + 54);
    phnum = rd16(p + 56);
    shentsize = rd16(p + 58);
    shnum = rd16(p + 60);
    if (shnum == 0 || shentsize != 64 || shoff < 64 || shoff > SIM_IMAGE_MAX)
        return 0;
    e = shoff + (uint64_t)shnum * 64;
    if (e > end)
        end = e;
    if (phnum) {
        if (phentsize != 56 || phoff < 64 || phoff > SIM_IMAGE_MAX)
            return 0;
        e = phoff + (uint64_t)phnum * 56;
        if (e > end)
            end = e;
    }
    if (end > SIM_IMAGE_MAX || end > avail)
        return 0;
    return (size_t)end;
}

/* Section i's [offset, offset+size) inside [0, ext). */
static int elf_section(const unsigned char *p, size_t ext, unsigned i,
                       uint32_t *type, uint64_t *off, uint64_t *size,
                       uint32_t *link, uint64_t *entsize)
{
    const unsigned char *sh = p + rd64(p + 40) + (uint64_t)i * 64;

    *type = rd32(sh + 4);
    *off = rd64(sh + 24);
    *size = rd64(sh + 32);
    *link = rd32(sh + 40);
    *entsize = rd64(sh + 56);
    if (*off > ext || *size > ext - *off)
        return -1;
    return 0;
}

static CUresult scan_elf(const unsigned char *p, size_t avail,
                         struct sim_names *out)
{
    size_t ext = elf_extent(p, avail);
    unsigned shnum, pass;
    int any_entry_flag = 0, found_symtab = 0;

    if (ext == 0)
        return CUDA_ERROR_INVALID_IMAGE;
    shnum = rd16(p + 60);
    /* pass 0: validate and see whether kernels carry STO_CUDA_ENTRY;
     * pass 1: collect. */
    for (pass = 0; pass < 2; pass++) {
        for (unsigned i = 0; i < shnum; i++) {
            uint32_t type, link, stype, slink;
            uint64_t off, size, entsize, soff, ssize, sent;

            if (elf_section(p, ext, i, &type, &off, &size, &link, &entsize))
                return CUDA_ERROR_INVALID_IMAGE;
            if (type != ELF_SHT_SYMTAB)
                continue;
            found_symtab = 1;
            if (entsize != 24 || size % 24 != 0 || link >= shnum)
                return CUDA_ERROR_INVALID_IMAGE;
            if (elf_section(p, ext, link, &stype, &soff, &ssize, &slink,
                            &sent) ||
                stype != ELF_SHT_STRTAB)
                return CUDA_ERROR_INVALID_IMAGE;
            for (uint64_t s = 0; s < size / 24; s++) {
                const unsigned char *sym = p + off + s * 24;
                uint32_t name = rd32(sym);
                unsigned info = sym[4], other = sym[5];
                unsigned shndx = rd16(sym + 6);
                const char *str;
                const void *nul;

                if ((info & 0xf) != ELF_STT_FUNC ||
                    (info >> 4) == ELF_STB_LOCAL || shndx == 0)
                    continue;
                if (name >= ssize)
                    return CUDA_ERROR_INVALID_IMAGE;
                str = (const char *)p + soff + name;
                nul = memchr(str, '\0', ssize - name);
                if (!nul)
                    return CUDA_ERROR_INVALID_IMAGE;
                if (pass == 0) {
                    if (other & ELF_STO_CUDA_ENTRY)
                        any_entry_flag = 1;
                    continue;
                }
                if (any_entry_flag && !(other & ELF_STO_CUDA_ENTRY))
                    continue; /* a device function, not a kernel */
                if ((const char *)nul == str)
                    continue;
                if (names_add(out, str, (size_t)((const char *)nul - str)))
                    return CUDA_ERROR_INVALID_IMAGE;
            }
        }
    }
    return found_symtab ? CUDA_SUCCESS : CUDA_ERROR_INVALID_IMAGE;
}

/* ---- fatbin ------------------------------------------------------------- */

/* Entry payload, decompressed when needed. *owned is set when the returned
 * buffer must be freed. NULL with *rc set on failure; NULL with *rc ==
 * CUDA_SUCCESS when it cannot be decoded here (zstd missing). */
static const unsigned char *entry_payload(const unsigned char *e,
                                          const unsigned char *payload,
                                          size_t plen, size_t *len_out,
                                          unsigned char **owned,
                                          CUresult *rc)
{
    uint64_t flags = rd64(e + 40);
    uint64_t csize = rd32(e + 16), usize = rd64(e + 56);
    unsigned char *buf;
    size_t n;

    *owned = NULL;
    *rc = CUDA_SUCCESS;
    if (!(flags & (FATBIN_FLAG_LZ4 | FATBIN_FLAG_ZSTD))) {
        *len_out = plen;
        return payload;
    }
    if (csize == 0 || csize > plen)
        csize = plen;
    if (usize == 0 || usize > SIM_IMAGE_MAX) {
        *rc = CUDA_ERROR_INVALID_IMAGE;
        return NULL;
    }
    buf = malloc((size_t)usize);
    if (!buf) {
        *rc = CUDA_ERROR_OUT_OF_MEMORY;
        return NULL;
    }
    if (flags & FATBIN_FLAG_LZ4)
        n = sim_lz4_block_decompress(payload, (size_t)csize, buf,
                                     (size_t)usize);
    else
        n = sim_zstd_decompress(payload, (size_t)csize, buf, (size_t)usize);
    if (n == SIM_DECOMPRESS_UNAVAILABLE) {
        free(buf);
        return NULL; /* *rc stays CUDA_SUCCESS: skip the entry */
    }
    if (n == SIM_DECOMPRESS_ERROR) {
        free(buf);
        *rc = CUDA_ERROR_INVALID_IMAGE;
        return NULL;
    }
    *owned = buf;
    *len_out = n;
    return buf;
}

static CUresult scan_fatbin(const unsigned char *p, size_t avail,
                            struct sim_names *out)
{
    size_t hsize, total, off;
    uint64_t fsize;
    int entries = 0;

    if (avail < 16 || rd32(p) != FATBIN_MAGIC || rd16(p + 4) != 1)
        return CUDA_ERROR_INVALID_IMAGE;
    hsize = rd16(p + 6);
    fsize = rd64(p + 8);
    if (hsize < 16 || fsize > SIM_IMAGE_MAX || hsize > avail ||
        fsize > avail - hsize)
        return CUDA_ERROR_INVALID_IMAGE;
    total = hsize + (size_t)fsize;
    off = hsize;
    while (off < total) {
        const unsigned char *e = p + off;
        unsigned kind;
        size_t ehs, plen, dlen = 0;
        uint64_t esize;
        const unsigned char *data;
        unsigned char *owned = NULL;
        CUresult rc;

        if (total - off < FATBIN_ENTRY_MIN)
            return CUDA_ERROR_INVALID_IMAGE;
        kind = rd16(e);
        ehs = rd32(e + 4);
        esize = rd64(e + 8);
        if (ehs < FATBIN_ENTRY_MIN || ehs > total - off ||
            esize > total - off - ehs)
            return CUDA_ERROR_INVALID_IMAGE;
        plen = (size_t)esize;
        entries++;
        if (kind == FATBIN_KIND_PTX || kind == FATBIN_KIND_ELF) {
            data = entry_payload(e, e + ehs, plen, &dlen, &owned, &rc);
            if (!data && rc != CUDA_SUCCESS)
                return rc;
            if (data && kind == FATBIN_KIND_PTX) {
                const char *t = (const char *)data;
                const void *nul = memchr(t, '\0', dlen);
                size_t tl = nul ? (size_t)((const char *)nul - t) : dlen;
                rc = scan_ptx(t, tl, out);
            } else if (data) {
                rc = scan_elf(data, dlen, out);
            }
            free(owned);
            if (rc != CUDA_SUCCESS)
                return rc == CUDA_ERROR_OUT_OF_MEMORY
                           ? rc
                           : CUDA_ERROR_INVALID_IMAGE;
        }
        off += ehs + plen;
    }
    return entries ? CUDA_SUCCESS : CUDA_ERROR_NO_BINARY_FOR_GPU;
}

/* ---- dispatch ------------------------------------------------------------ */

/* Compares prefix bytes one at a time so that a short NUL-terminated input
 * is never read past its terminator. */
static int has_prefix(const unsigned char *p, const unsigned char *m, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != m[i])
            return 0;
    return 1;
}

static const unsigned char elf_magic[4] = {0x7f, 'E', 'L', 'F'};
static const unsigned char fat_magic[4] = {0x50, 0xED, 0x55, 0xBA};
static const unsigned char wrap_magic[4] = {0xb1, 0x43, 0x62, 0x46};

static CUresult scan_dispatch(const unsigned char *p, size_t avail,
                              int known_len, struct sim_names *out)
{
    if (avail >= 4 && has_prefix(p, elf_magic, 4))
        return scan_elf(p, avail, out);
    if (avail >= 4 && has_prefix(p, fat_magic, 4)) {
        size_t ext;
        if (!known_len) {
            /* The header gives the extent. */
            if (!has_prefix(p + 4, (const unsigned char *)"\x01\x00", 2))
                return CUDA_ERROR_INVALID_IMAGE;
            ext = (size_t)rd16(p + 6);
            if (rd64(p + 8) > SIM_IMAGE_MAX || ext < 16)
                return CUDA_ERROR_INVALID_IMAGE;
            avail = ext + (size_t)rd64(p + 8);
        }
        return scan_fatbin(p, avail, out);
    }
    if (!known_len && has_prefix(p, wrap_magic, 4)) {
        /* __fatBinC_Wrapper_t {int magic; int version; const void *data;
         * void *unused;}: follow data. */
        const void *data;
        memcpy(&data, p + 8, sizeof(data));
        if (rd32(p + 4) != 1 || !data)
            return CUDA_ERROR_INVALID_IMAGE;
        if (!has_prefix(data, fat_magic, 4))
            return CUDA_ERROR_INVALID_IMAGE;
        return scan_dispatch(data, SIZE_MAX, 0, out);
    }
    if (avail == 0 || p[0] == 0)
        return CUDA_ERROR_INVALID_IMAGE;
    {
        const void *nul;
        size_t n;
        if (known_len) {
            nul = memchr(p, '\0', avail);
            n = nul ? (size_t)((const unsigned char *)nul - p) : avail;
        } else {
            n = strnlen((const char *)p, SIM_IMAGE_MAX);
            if (n == SIM_IMAGE_MAX)
                return CUDA_ERROR_INVALID_IMAGE;
        }
        return scan_ptx((const char *)p, n, out);
    }
}

CUresult sim_image_scan(const void *code, struct sim_names *out)
{
    CUresult rc;

    if (!code)
        return CUDA_ERROR_INVALID_VALUE;
    rc = scan_dispatch(code, SIZE_MAX, 0, out);
    if (rc != CUDA_SUCCESS)
        sim_names_free(out);
    return rc;
}

CUresult sim_image_scan_len(const void *code, size_t len,
                            struct sim_names *out)
{
    CUresult rc;

    if (!code)
        return CUDA_ERROR_INVALID_VALUE;
    rc = scan_dispatch(code, len, 1, out);
    if (rc != CUDA_SUCCESS)
        sim_names_free(out);
    return rc;
}
