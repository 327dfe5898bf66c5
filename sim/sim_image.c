/* Module images: finds the kernels of PTX text, cubin (ELF64, EM_CUDA) and
 * fatbin images, and each kernel's parameters as the device lays them out
 * (cuKernelGetParamInfo): from the .entry's parameter list in PTX, from the
 * EIATTR_KPARAM_INFO records of .nv.info.NAME in a cubin. Images are
 * untrusted: every offset, size and count the sim reads by is checked
 * against the extent the image's own headers declare (cuLibraryLoadData
 * gets no length), or against the entry or section that holds it. The
 * parameter records' values are only reported, unchecked, as the driver
 * reports them (FACTS.md F16). */
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
#define ELF_SHT_CUDA_INFO 0x70000000u /* .nv.info and .nv.info.NAME */

/* .nv.info records: {u8 format, u8 attribute, ...} */
#define EIFMT_NVAL 1 /* no value: 4 bytes in all */
#define EIFMT_BVAL 2 /* a byte value: 4 bytes in all */
#define EIFMT_HVAL 3 /* the u16 at +2: 4 bytes in all */
#define EIFMT_SVAL 4 /* u16 size at +2, then that many bytes */
#define EIATTR_KPARAM_INFO 0x17
#define EIATTR_KPARAM_INFO_V2 0x45
#define KPARAM_INFO_LEN 12
#define NVINFO_PREFIX ".nv.info."

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

/* A parameter list being built; handed to names_add. */
struct plist {
    struct sim_param *v;
    size_t n, cap;
};

static void plist_free(struct plist *pl)
{
    free(pl->v);
    pl->v = NULL;
    pl->n = pl->cap = 0;
}

/* Appends a parameter; -1 when out of memory. No bound on the count: in
 * PTX the parameter space bounds it (each takes a byte at least). */
static int plist_push(struct plist *pl, uint32_t offset, uint32_t size)
{
    if (pl->n == pl->cap) {
        size_t nc = pl->cap ? pl->cap * 2 : 8;
        struct sim_param *nv = realloc(pl->v, nc * sizeof(*nv));
        if (!nv)
            return -1;
        pl->v = nv;
        pl->cap = nc;
    }
    pl->v[pl->n].offset = offset;
    pl->v[pl->n].size = size;
    pl->n++;
    return 0;
}

static void kname_set_params(struct sim_kname *k, struct plist *pl,
                             enum sim_params_src src)
{
    free(k->params);
    k->params = pl->n ? pl->v : NULL;
    k->nparams = pl->n;
    k->src = src;
    if (!pl->n)
        free(pl->v);
    pl->v = NULL;
    pl->n = pl->cap = 0;
}

void sim_names_free(struct sim_names *names)
{
    for (size_t i = 0; i < names->n; i++) {
        free(names->v[i].name);
        free(names->v[i].params);
    }
    free(names->v);
    names->v = NULL;
    names->n = names->cap = 0;
}

/* Adds a copy of [s, s+len) with the parameters in pl (taken from src),
 * unless the name is there: then its parameters are replaced only when src
 * ranks higher (a fatbin's cubin over its PTX). pl is consumed either way.
 * 0, or -1 on failure. */
static int names_add(struct sim_names *names, const char *s, size_t len,
                     struct plist *pl, enum sim_params_src src)
{
    struct sim_kname *k;
    char *c;

    if (len == 0 || len > SIM_NAME_MAX)
        goto fail;
    for (size_t i = 0; i < names->n; i++) {
        k = &names->v[i];
        if (strlen(k->name) == len && memcmp(k->name, s, len) == 0) {
            if (src > k->src)
                kname_set_params(k, pl, src);
            plist_free(pl);
            return 0;
        }
    }
    if (names->n >= SIM_NAMES_MAX)
        goto fail;
    if (names->n == names->cap) {
        size_t nc = names->cap ? names->cap * 2 : 8;
        struct sim_kname *nv = realloc(names->v, nc * sizeof(*nv));
        if (!nv)
            goto fail;
        names->v = nv;
        names->cap = nc;
    }
    c = malloc(len + 1);
    if (!c)
        goto fail;
    memcpy(c, s, len);
    c[len] = '\0';
    k = &names->v[names->n++];
    memset(k, 0, sizeof(*k));
    k->name = c;
    kname_set_params(k, pl, src);
    return 0;
fail:
    plist_free(pl);
    return -1;
}

/* Moves the kernels of from into out (names_add's rules). */
static int names_merge(struct sim_names *out, struct sim_names *from)
{
    for (size_t i = 0; i < from->n; i++) {
        struct sim_kname *k = &from->v[i];
        struct plist pl = {k->params, k->nparams, k->nparams};

        k->params = NULL;
        k->nparams = 0;
        if (names_add(out, k->name, strlen(k->name), &pl, k->src))
            return -1;
    }
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

/* ---- PTX parameter lists ------------------------------------------------
 * .entry NAME ( .param [.align N] TYPE [.ptr [SPACE]] [.align M] NAME[D],
 * ... ): the PTX ISA's grammar ("Kernel Function Parameters", the .ptr
 * attribute) as ptxas 13.0 takes it, and what nvcc writes (`.param .u64
 * k_param_0`, `.param .align 16 .b8 k_param_6[32]`). What ptxas
 * (-arch=sm_90) made of hand-written lists, read back from the cubin's
 * KPARAM_INFO records, decides the rest:
 *  - a parameter is aligned to the larger of its element's size and the
 *    .align N before its type; the .align M after it moves nothing, with
 *    .ptr (where it is the pointee's) or without;
 *  - the alignment holds for the parameter's address in sm_90's constant
 *    bank, where the parameters start at 0x210 (PARAM_CBANK's offset), not
 *    for its offset: `.param .u8 a, .param .align 64 .b8 b[4]` puts b at
 *    48; below 32 the two agree;
 *  - one dimension at most (`x[2][3]` is a syntax error), not 0, not
 *    empty; no .pred, .f16x2 or .bf16 parameter;
 *  - at most 32764 bytes, from 0 to the last parameter's end (ptxas
 *    checks its limit with the alignments counted from 0, and so takes a
 *    lone `.align 65536` parameter it puts at 65008: the sim does not);
 *  - no .texref / .samplerref / .surfref: ptxas gives the first and last
 *    no place in the parameter space (offset 0xffff, size 0), which the
 *    sim does not model, so it refuses them all.
 * No list, or (), is no parameters. The driver's JIT, unlike ptxas 13.0,
 * refuses `.ptr.shared` at the first use in a context (FACTS.md F18;
 * ptx_pointee tells scan_ptx). */

#define SIM_PARAM_BANK_BASE 0x210u /* sm_90: the parameters in c[0x0] */

/* Skips blanks and comments; an unterminated comment runs to the end. */
static size_t ptx_skip(const char *t, size_t n, size_t i)
{
    for (;;) {
        while (i < n && ptx_space((unsigned char)t[i]))
            i++;
        if (i + 1 < n && t[i] == '/' && t[i + 1] == '/') {
            while (i < n && t[i] != '\n')
                i++;
        } else if (i + 1 < n && t[i] == '/' && t[i + 1] == '*') {
            i += 2;
            while (i + 1 < n && !(t[i] == '*' && t[i + 1] == '/'))
                i++;
            i = i + 1 < n ? i + 2 : n;
        } else {
            return i;
        }
    }
}

/* Length of the directive at t[i] ('.' and identifier characters, so that
 * ".ptr.global.align" is three), 0 when there is none. */
static size_t ptx_word(const char *t, size_t n, size_t i)
{
    size_t j = i + 1;

    if (i >= n || t[i] != '.')
        return 0;
    while (j < n && ptx_ident_char((unsigned char)t[j]))
        j++;
    return j - i;
}

static int word_is(const char *t, size_t i, size_t len, const char *w)
{
    return len == strlen(w) && memcmp(t + i, w, len) == 0;
}

/* An integer constant as PTX writes them (decimal, 0x hex, 0b binary, 0
 * octal, an optional U) at t[*i]. Anything above UINT32_MAX is refused:
 * no dimension or alignment that large fits the parameter space. */
static int ptx_uint(const char *t, size_t n, size_t *i, uint32_t *out)
{
    size_t j = *i, digits = 0;
    unsigned base = 10;
    uint64_t v = 0;

    if (j >= n || t[j] < '0' || t[j] > '9')
        return -1;
    if (t[j] == '0' && j + 1 < n && (t[j + 1] == 'x' || t[j + 1] == 'X')) {
        base = 16;
        j += 2;
    } else if (t[j] == '0' && j + 1 < n &&
               (t[j + 1] == 'b' || t[j + 1] == 'B')) {
        base = 2;
        j += 2;
    } else if (t[j] == '0') {
        base = 8; /* its own 0 is a digit: "0" is zero */
    }
    for (; j < n && (unsigned)sim_hexval((unsigned char)t[j]) < base; j++, digits++) {
        v = v * base + (unsigned)sim_hexval((unsigned char)t[j]);
        if (v > UINT32_MAX)
            return -1;
    }
    if (digits == 0)
        return -1;
    if (j < n && t[j] == 'U')
        j++;
    if (j < n && ptx_ident_char((unsigned char)t[j]))
        return -1; /* "12abc", "09" */
    *i = j;
    *out = (uint32_t)v;
    return 0;
}

static int pow2(uint32_t v)
{
    return v && !(v & (v - 1));
}

/* Bytes of a parameter type, 0 for one a kernel parameter cannot have. */
static uint32_t ptx_type_size(const char *t, size_t i, size_t len)
{
    static const struct {
        const char *name;
        uint32_t size;
    } types[] = {
        {".b8", 1},  {".u8", 1},  {".s8", 1},  {".b16", 2}, {".u16", 2},
        {".s16", 2}, {".f16", 2}, {".b32", 4}, {".u32", 4}, {".s32", 4},
        {".f32", 4}, {".b64", 8}, {".u64", 8}, {".s64", 8}, {".f64", 8},
        {".b128", 16},
    };

    for (size_t k = 0; k < sizeof(types) / sizeof(types[0]); k++)
        if (word_is(t, i, len, types[k].name))
            return types[k].size;
    return 0;
}

/* `.align N` at t[*pos], if there: *align = N, a power of two. */
static int ptx_align(const char *t, size_t n, size_t *pos, uint32_t *align)
{
    size_t i = *pos, w = ptx_word(t, n, i);

    if (!word_is(t, i, w, ".align"))
        return 0;
    i = ptx_skip(t, n, i + w);
    if (ptx_uint(t, n, &i, align) || !pow2(*align))
        return -1; /* (at most 2^31: no overflow in ptx_param) */
    *pos = ptx_skip(t, n, i);
    return 0;
}

/* `[.ptr [.const|.global|.local|.shared]] [.align M]` after a parameter's
 * type: what it points to, which leaves its own layout alone. *shared is
 * set for .shared, which the JIT refuses. */
static int ptx_pointee(const char *t, size_t n, size_t *pos, int *shared)
{
    size_t i = *pos, w = ptx_word(t, n, i);
    uint32_t ignored = 0;

    if (word_is(t, i, w, ".ptr")) {
        i = ptx_skip(t, n, i + w);
        w = ptx_word(t, n, i);
        if (word_is(t, i, w, ".shared"))
            *shared = 1;
        if (word_is(t, i, w, ".const") || word_is(t, i, w, ".global") ||
            word_is(t, i, w, ".local") || word_is(t, i, w, ".shared"))
            i = ptx_skip(t, n, i + w);
    }
    if (ptx_align(t, n, &i, &ignored))
        return -1;
    *pos = i;
    return 0;
}

/* An array dimension after a parameter's name, if there: size (the
 * element's on entry) times it, within the parameter space. */
static int ptx_dim(const char *t, size_t n, size_t *pos, uint64_t *size)
{
    size_t i = ptx_skip(t, n, *pos);
    uint32_t dim;

    if (i >= n || t[i] != '[')
        return 0;
    i = ptx_skip(t, n, i + 1);
    if (ptx_uint(t, n, &i, &dim) || dim == 0)
        return -1;
    *size *= dim; /* both below 2^32: no overflow */
    i = ptx_skip(t, n, i);
    if (i >= n || t[i] != ']' || *size > SIM_PARAM_SPACE)
        return -1;
    *pos = i + 1;
    return 0;
}

/* One `.param ...` at t[*pos], placed after *end (the bytes so far);
 * *shared as ptx_pointee. */
static int ptx_param(const char *t, size_t n, size_t *pos, struct plist *pl,
                     uint32_t *end, int *shared)
{
    size_t i = ptx_skip(t, n, *pos), w = ptx_word(t, n, i);
    uint32_t align = 1, elem;
    uint64_t size, at;

    if (!word_is(t, i, w, ".param"))
        return -1;
    i = ptx_skip(t, n, i + w);
    if (ptx_align(t, n, &i, &align))
        return -1;
    w = ptx_word(t, n, i);
    elem = ptx_type_size(t, i, w);
    if (elem == 0)
        return -1;
    i = ptx_skip(t, n, i + w);
    if (ptx_pointee(t, n, &i, shared))
        return -1;
    if (i >= n || !ptx_ident_first((unsigned char)t[i]))
        return -1; /* no name */
    for (i++; i < n && ptx_ident_char((unsigned char)t[i]); i++)
        ;
    size = elem;
    if (ptx_dim(t, n, &i, &size))
        return -1;
    if (align < elem)
        align = elem;
    at = sim_round_up(SIM_PARAM_BANK_BASE + (uint64_t)*end, align) -
         SIM_PARAM_BANK_BASE;
    if (at + size > SIM_PARAM_SPACE ||
        plist_push(pl, (uint32_t)at, (uint32_t)size))
        return -1;
    *end = (uint32_t)(at + size);
    *pos = i;
    return 0;
}

/* The parameter list that follows `.entry NAME` at t[*pos], if one does;
 * *pos moves past its ')'. -1 when it is malformed or too large; *shared
 * as ptx_pointee. */
static int ptx_param_list(const char *t, size_t n, size_t *pos,
                          struct plist *pl, int *shared)
{
    size_t i = ptx_skip(t, n, *pos);
    uint32_t end = 0;

    if (i >= n || t[i] != '(')
        return 0;
    i = ptx_skip(t, n, i + 1);
    if (i < n && t[i] == ')') {
        *pos = i + 1;
        return 0;
    }
    for (;;) {
        if (ptx_param(t, n, &i, pl, &end, shared))
            return -1;
        i = ptx_skip(t, n, i);
        if (i < n && t[i] == ',') {
            i++;
            continue;
        }
        if (i < n && t[i] == ')') {
            *pos = i + 1;
            return 0;
        }
        return -1; /* cut short, or something else than ',' or ')' */
    }
}

/* `.entry NAME [(params)]` after the directive at t[*pos]; *shared as
 * ptx_pointee. */
static CUresult ptx_entry(const char *t, size_t n, size_t *pos,
                          struct sim_names *out, int *shared)
{
    struct plist pl = {NULL, 0, 0};
    size_t j = *pos, s;

    while (j < n && ptx_space((unsigned char)t[j]))
        j++;
    s = j;
    if (j >= n || !ptx_ident_first((unsigned char)t[j]))
        return CUDA_ERROR_INVALID_PTX;
    j++;
    while (j < n && ptx_ident_char((unsigned char)t[j]))
        j++;
    *pos = j;
    if (ptx_param_list(t, n, pos, &pl, shared)) {
        plist_free(&pl);
        return CUDA_ERROR_INVALID_PTX;
    }
    if (names_add(out, t + s, j - s, &pl, SIM_PARAMS_PTX) != 0)
        return CUDA_ERROR_INVALID_PTX;
    return CUDA_SUCCESS;
}

/* ---- PTX .version and .target ------------------------------------------- */

/* The lowest .version that ptxas 13.0 takes for each .target it compiles,
 * as major * 100 + minor, each checked with `ptxas -arch=sm_XX` ("PTX
 * .version 7.7 does not support .target sm_90"). The driver's JIT agrees
 * for sm_90 (FACTS.md F17). Targets not here (sm_72 and older,
 * which this ptxas no longer compiles) are not checked. */
static const struct {
    const char *name;
    unsigned min;
} ptx_targets[] = {
    {"sm_75", 603},   {"sm_80", 700},   {"sm_86", 701},   {"sm_87", 704},
    {"sm_88", 703},   {"sm_89", 708},   {"sm_90", 708},   {"sm_90a", 800},
    {"sm_100", 806},  {"sm_100a", 806}, {"sm_100f", 808}, {"sm_103", 808},
    {"sm_103a", 808}, {"sm_103f", 808}, {"sm_110", 900},  {"sm_110a", 900},
    {"sm_110f", 900}, {"sm_120", 807},  {"sm_120a", 807}, {"sm_120f", 808},
    {"sm_121", 808},  {"sm_121a", 808}, {"sm_121f", 808},
};

/* `MAJOR.MINOR` after `.version` at t[i]: major * 100 + minor, or 0 when it
 * is not that (then nothing is checked against it, as before). */
static unsigned ptx_version(const char *t, size_t n, size_t i)
{
    unsigned v[2] = {0, 0};

    i = ptx_skip(t, n, i);
    for (int part = 0; part < 2; part++) {
        size_t digits = 0;
        if (part && (i >= n || t[i++] != '.'))
            return 0;
        for (; i < n && t[i] >= '0' && t[i] <= '9'; i++, digits++) {
            v[part] = v[part] * 10 + (unsigned)(t[i] - '0');
            if (v[part] > 99)
                return 0;
        }
        if (digits == 0)
            return 0;
    }
    return v[0] * 100 + v[1];
}

/* ptx_targets' minimum for the target t[0..len), 0 when it has none. */
static unsigned ptx_target_min(const char *t, size_t len)
{
    for (size_t k = 0; k < sizeof(ptx_targets) / sizeof(ptx_targets[0]); k++)
        if (strlen(ptx_targets[k].name) == len &&
            memcmp(ptx_targets[k].name, t, len) == 0)
            return ptx_targets[k].min;
    return 0;
}

/* The target list after `.target` at t[i] (`sm_90`, `sm_90a, debug`): -1
 * when a target in it needs a later .version than version (0: unknown). */
static int ptx_target_check(const char *t, size_t n, size_t i,
                            unsigned version)
{
    for (;;) {
        size_t s;

        i = ptx_skip(t, n, i);
        for (s = i; i < n && ptx_ident_char((unsigned char)t[i]); i++)
            ;
        if (version && version < ptx_target_min(t + s, i - s))
            return -1;
        i = ptx_skip(t, n, i);
        if (i >= n || t[i] != ',')
            return 0;
        i++;
    }
}

/* ---- PTX text ----------------------------------------------------------- */

/* What scan_ptx has seen so far. */
struct ptx_scan {
    int have_version;
    unsigned version; /* ptx_version's; 0 when unreadable */
    int shared;       /* a parameter is .ptr.shared */
    struct sim_names found;
};

/* The directive t[i..*pos) (its '.' and word): .version and .target are
 * read, .entry adds a kernel and moves *pos past its parameters. */
static CUresult ptx_directive(const char *t, size_t n, size_t i, size_t *pos,
                              struct ptx_scan *st)
{
    size_t len = *pos - i;

    if (len == 8 && memcmp(t + i, ".version", 8) == 0) {
        st->have_version = 1;
        st->version = ptx_version(t, n, *pos);
    } else if (len == 7 && memcmp(t + i, ".target", 7) == 0) {
        if (st->have_version && ptx_target_check(t, n, *pos, st->version))
            return CUDA_ERROR_INVALID_PTX;
    } else if (len == 6 && memcmp(t + i, ".entry", 6) == 0) {
        if (!st->have_version)
            return CUDA_ERROR_INVALID_IMAGE;
        return ptx_entry(t, n, pos, &st->found, &st->shared);
    }
    return CUDA_SUCCESS;
}

/* Scans PTX text t[0..n) (no NUL inside) for its directives, skipping
 * comments and string literals. */
static CUresult ptx_scan_text(const char *t, size_t n, struct ptx_scan *st)
{
    size_t i = 0;

    for (size_t k = 0; k < n; k++) {
        unsigned char c = (unsigned char)t[k];
        if (c < 0x20 && !ptx_space(c))
            return CUDA_ERROR_INVALID_IMAGE; /* not text */
    }
    while (i < n) {
        size_t k = ptx_skip(t, n, i);

        if (k != i) { /* blanks and comments */
            i = k;
        } else if (t[i] == '"') {
            for (i++; i < n && t[i] != '"' && t[i] != '\n'; i++)
                ;
            i++;
        } else if (t[i] == '.' &&
                   (i == 0 || !ptx_ident_char((unsigned char)t[i - 1]))) {
            CUresult rc;
            for (k = i + 1; k < n && ptx_ident_char((unsigned char)t[k]); k++)
                ;
            rc = ptx_directive(t, n, i, &k, st);
            if (rc != CUDA_SUCCESS)
                return rc;
            i = k;
        } else {
            i++;
        }
    }
    return st->have_version ? CUDA_SUCCESS : CUDA_ERROR_INVALID_IMAGE;
}

/* The kernels of PTX text t[0..n), added to out. */
static CUresult scan_ptx(const char *t, size_t n, struct sim_names *out)
{
    struct ptx_scan st;
    CUresult rc;

    memset(&st, 0, sizeof(st));
    rc = ptx_scan_text(t, n, &st);
    if (rc == CUDA_SUCCESS) {
        /* The JIT compiles the module whole, so what it refuses fails
         * every kernel of it (inferred: FACTS.md F18 saw one kernel a
         * module). */
        for (size_t k = 0; st.shared && k < st.found.n; k++)
            st.found.v[k].src = SIM_PARAMS_PTX_REFUSED;
        if (names_merge(out, &st.found))
            rc = CUDA_ERROR_INVALID_PTX;
    }
    sim_names_free(&st.found);
    return rc;
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

/* The kernels of the ELF at p[0..ext): defined global STT_FUNC symbols,
 * only those flagged STO_CUDA_ENTRY when any is; their parameters unknown
 * as yet. */
static CUresult elf_kernels(const unsigned char *p, size_t ext,
                            struct sim_names *out)
{
    unsigned shnum = rd16(p + 60), pass;
    int any_entry_flag = 0, found_symtab = 0;
    struct plist none = {NULL, 0, 0};

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
                if (names_add(out, str, (size_t)((const char *)nul - str),
                              &none, SIM_PARAMS_UNKNOWN))
                    return CUDA_ERROR_INVALID_IMAGE;
            }
        }
    }
    return found_symtab ? CUDA_SUCCESS : CUDA_ERROR_INVALID_IMAGE;
}


/* One .nv.info record at s[o..len): its format, attribute and value (an
 * SVAL's data, else the 2 bytes at +2). The offset of the next record, or
 * 0 when this one is cut short or of an unknown format. */
static uint64_t nvinfo_record(const unsigned char *s, uint64_t len,
                              uint64_t o, unsigned *attr,
                              const unsigned char **data, unsigned *dlen)
{
    if (len - o < 4)
        return 0;
    *attr = s[o + 1];
    *data = s + o + 2;
    *dlen = 2;
    switch (s[o]) {
    case EIFMT_NVAL:
    case EIFMT_BVAL:
    case EIFMT_HVAL:
        return o + 4;
    case EIFMT_SVAL:
        *dlen = rd16(s + o + 2);
        *data = s + o + 4;
        if (*dlen > len - o - 4)
            return 0;
        return o + 4 + *dlen;
    default:
        return 0;
    }
}

/* Whether a .nv.info section is well framed: every record whole and of a
 * known format, every KPARAM_INFO record the 12 bytes it must be. The
 * driver checks this at cuLibraryLoadData, before cuLibraryGetKernel
 * (FACTS.md F13). That a KPARAM_INFO of another length than 12 is refused
 * even where the records after it still frame is the sim's reading: it
 * could not be read. */
static int nvinfo_framed(const unsigned char *s, uint64_t len)
{
    uint64_t o = 0;

    while (o < len) {
        const unsigned char *d;
        unsigned attr, dlen;
        uint64_t next = nvinfo_record(s, len, o, &attr, &d, &dlen);

        if (next == 0)
            return 0;
        if ((attr == EIATTR_KPARAM_INFO || attr == EIATTR_KPARAM_INFO_V2) &&
            (s[o] != EIFMT_SVAL || dlen != KPARAM_INFO_LEN))
            return 0;
        o = next;
    }
    return 1;
}

/* One parameter record of a .nv.info.NAME section. */
struct kparam {
    unsigned ord;
    uint32_t off, size;
};

/* The next KPARAM_INFO or KPARAM_INFO_V2 record of a well-framed section
 * from s[*o] on: 1 with it (*o past it), 0 at the end. */
static int kparam_next(const unsigned char *s, uint64_t len, uint64_t *o,
                       struct kparam *r)
{
    while (*o < len) {
        const unsigned char *d;
        unsigned attr, dlen;
        uint64_t next = nvinfo_record(s, len, *o, &attr, &d, &dlen);

        if (next == 0)
            break; /* (cannot be: nvinfo_framed passed the section) */
        *o = next;
        if (attr != EIATTR_KPARAM_INFO && attr != EIATTR_KPARAM_INFO_V2)
            continue;
        r->ord = rd16(d + 4);
        r->off = rd16(d + 6);
        r->size = rd32(d + 8);
        if (attr == EIATTR_KPARAM_INFO)
            r->size >>= 18;
        return 1;
    }
    *o = len;
    return 0;
}

/* The parameters a well-framed .nv.info.NAME section lists, one record
 * each, last ordinal first as nvcc writes them. EIATTR_KPARAM_INFO, 12
 * bytes: u32 index (0), u16 ordinal, u16 offset, u32 with the size in bits
 * 18-31 (below them the pointee's log2 alignment, the space and the
 * constant bank, as cuobjdump decodes them; not needed here). Where a size
 * does not fit those 14 bits (a 20000-byte struct, or a 16384-byte array),
 * nvcc 13.0 writes EIATTR_KPARAM_INFO_V2 for every parameter of the kernel
 * instead: u32 index, u16 ordinal, u16 offset, u32 size. The records are
 * reported as the driver reports them (FACTS.md F16): unchecked; the
 * count the largest ordinal + 1, an ordinal without a record offset 0
 * size 0, of two records with one ordinal the later; no record, no
 * parameters. */
static CUresult nvinfo_params(const unsigned char *s, uint64_t len,
                              struct plist *pl)
{
    struct kparam r;
    size_t count = 0;
    uint64_t o = 0;

    while (kparam_next(s, len, &o, &r))
        if (r.ord >= count)
            count = (size_t)r.ord + 1; /* at most 65536 */
    if (count == 0)
        return CUDA_SUCCESS;
    pl->v = calloc(count, sizeof(*pl->v));
    if (!pl->v)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pl->n = pl->cap = count;
    for (o = 0; kparam_next(s, len, &o, &r);) {
        pl->v[r.ord].offset = r.off;
        pl->v[r.ord].size = r.size;
    }
    return CUDA_SUCCESS;
}

/* Whether every .nv.info section (SHT_CUDA_INFO: .nv.info and each
 * .nv.info.NAME, a kernel's or not) of the ELF at p[0..ext) is well
 * framed (nvinfo_framed). Measured on a kernel's section only; the
 * others are read by the same loader. A section outside the image is
 * left to elf_params (refused at cuLibraryGetKernel). */
static int elf_nvinfo_framed(const unsigned char *p, size_t ext)
{
    unsigned shnum = rd16(p + 60);

    for (unsigned i = 0; i < shnum; i++) {
        uint32_t type, link;
        uint64_t off, size, ent;

        if (elf_section(p, ext, i, &type, &off, &size, &link, &ent) == 0 &&
            type == ELF_SHT_CUDA_INFO && !nvinfo_framed(p + off, size))
            return 0;
    }
    return 1;
}

static int kname_cmp(const void *a, const void *b)
{
    return strcmp(((const struct sim_kname *)a)->name,
                  ((const struct sim_kname *)b)->name);
}

static int kname_key_cmp(const void *key, const void *b)
{
    return strcmp(key, ((const struct sim_kname *)b)->name);
}

/* Section i's name, when it is a .nv.info.NAME section: NAME, else NULL.
 * *bad is set when the name lies outside the string table. */
static const char *nvinfo_kernel(const unsigned char *p, unsigned i,
                                 uint64_t stroff, uint64_t strsize, int *bad)
{
    const unsigned char *sh = p + rd64(p + 40) + (uint64_t)i * 64;
    uint32_t nm = rd32(sh);
    const char *name;

    if (rd32(sh + 4) != ELF_SHT_CUDA_INFO)
        return NULL;
    if (nm >= strsize || !memchr(p + stroff + nm, '\0', strsize - nm)) {
        *bad = 1;
        return NULL;
    }
    name = (const char *)p + stroff + nm;
    if (strncmp(name, NVINFO_PREFIX, sizeof(NVINFO_PREFIX) - 1) != 0)
        return NULL;
    return name + sizeof(NVINFO_PREFIX) - 1;
}

/* Gives the kernels in found (sorted here) the parameters of their
 * .nv.info.NAME sections, found by the section names of e_shstrndx (an ELF
 * without them has none), their framing checked (elf_nvinfo_framed). A
 * kernel without such a section keeps SIM_PARAMS_UNKNOWN; one with two
 * (not measured), or a section outside the image, makes the image
 * invalid. */
static CUresult elf_params(const unsigned char *p, size_t ext,
                           struct sim_names *found)
{
    unsigned shnum = rd16(p + 60), shstr = rd16(p + 62);
    uint32_t type, link;
    uint64_t stroff, strsize, ent;

    if (found->n == 0 || shstr == 0 || shstr >= shnum)
        return CUDA_SUCCESS;
    if (elf_section(p, ext, shstr, &type, &stroff, &strsize, &link, &ent))
        return CUDA_ERROR_INVALID_IMAGE;
    if (type != ELF_SHT_STRTAB)
        return CUDA_SUCCESS;
    qsort(found->v, found->n, sizeof(found->v[0]), kname_cmp);
    for (unsigned i = 0; i < shnum; i++) {
        struct plist pl = {NULL, 0, 0};
        struct sim_kname *k;
        uint64_t off, size;
        int bad = 0;
        const char *name = nvinfo_kernel(p, i, stroff, strsize, &bad);
        CUresult rc;

        if (bad)
            return CUDA_ERROR_INVALID_IMAGE;
        if (!name)
            continue;
        k = bsearch(name, found->v, found->n, sizeof(found->v[0]),
                    kname_key_cmp);
        if (!k)
            continue; /* not a kernel's */
        if (k->src == SIM_PARAMS_CUBIN ||
            elf_section(p, ext, i, &type, &off, &size, &link, &ent))
            return CUDA_ERROR_INVALID_IMAGE;
        rc = nvinfo_params(p + off, size, &pl);
        if (rc != CUDA_SUCCESS) {
            plist_free(&pl);
            return rc;
        }
        kname_set_params(k, &pl, SIM_PARAMS_CUBIN);
    }
    return CUDA_SUCCESS;
}

/* A cubin's kernel without a .nv.info.NAME section has no parameters: the
 * driver (13.0) says count 0 for one whose section was renamed. */
static void kernels_without_info(struct sim_names *found)
{
    for (size_t i = 0; i < found->n; i++)
        if (found->v[i].src == SIM_PARAMS_UNKNOWN)
            found->v[i].src = SIM_PARAMS_CUBIN;
}

static CUresult scan_elf(const unsigned char *p, size_t avail,
                         struct sim_names *out)
{
    struct sim_names found = {NULL, 0, 0, 0};
    size_t ext = elf_extent(p, avail);
    CUresult rc;

    if (ext == 0)
        return CUDA_ERROR_INVALID_IMAGE;
    if (!elf_nvinfo_framed(p, ext)) {
        out->refused_at_load = 1;
        return CUDA_ERROR_INVALID_IMAGE;
    }
    rc = elf_kernels(p, ext, &found);
    if (rc == CUDA_SUCCESS)
        rc = elf_params(p, ext, &found);
    if (rc == CUDA_SUCCESS) {
        kernels_without_info(&found);
        if (names_merge(out, &found))
            rc = CUDA_ERROR_INVALID_IMAGE;
    }
    sim_names_free(&found);
    return rc;
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
