/* Conformance probe for cuKernelGetParamInfo / cuFuncGetParamInfo (CUDA
 * 12.4): prints one "key value" line per observation, for the real driver
 * and for the simulator, so that the two can be diffed on a GPU machine:
 *
 *   cc -std=c11 -D_GNU_SOURCE -I/usr/local/cuda/include -Itests -Isrc \
 *      -DCUC_SIM_PATH='getenv("PROBE_LIB")' sim/testdata/probe_params.c \
 *      -o probe_params -ldl
 *   PROBE_LIB=libcuda.so.1 ./probe_params IMAGES > real.txt
 *   PROBE_LIB=.../libcucore-sim.so CUCORE_SIM_GPUS=1 ./probe_params IMAGES > sim.txt
 *
 * IMAGES is the directory sim/testdata/make_images.cmake fills with the
 * nvcc-built sim_kernels.{cubin,ptx,fatbin} (build/sim/test-images). What
 * can crash a driver (hostile cubins, bogus handles) runs in a child, one
 * per case. Needs one visible GPU (device 0). Not part of the test suite. */
#define SIM_T_CTL_OPTIONAL 1
#include "sim_test.h"

static const char *en(CUresult r)
{
    return sim_t_errname(r);
}

/* The call first, then the line: the outputs must not be read in the
 * same full expression that writes them (unsequenced arguments). */
#define RULE(key, call, fmt, ...)                                              \
    do {                                                                       \
        CUresult r_ = (call);                                                  \
        printf("%s %s" fmt "\n", key, en(r_), __VA_ARGS__);                    \
    } while (0)

static PFN_cuKernelGetParamInfo_v12040 kinfo;
static PFN_cuFuncGetParamInfo_v12040 finfo;
static const char *imgdir;

static void resolve(void)
{
    void *p = NULL;
    CUdriverProcAddressQueryResult st;

    sim_t_load();
    CHECK(D.gpa("cuKernelGetParamInfo", &p, 12040, 0, &st) == CUDA_SUCCESS && p);
    memcpy(&kinfo, &p, sizeof(p));
    p = NULL;
    CHECK(D.gpa("cuFuncGetParamInfo", &p, 12040, 0, &st) == CUDA_SUCCESS && p);
    memcpy(&finfo, &p, sizeof(p));
}

static unsigned char *slurp(const char *name, size_t *len)
{
    char path[4096];
    unsigned char *b;
    FILE *f;
    long n;

    snprintf(path, sizeof(path), "%s/%s", imgdir, name);
    f = fopen(path, "rb");
    if (!f)
        return NULL;
    CHECK(fseek(f, 0, SEEK_END) == 0);
    n = ftell(f);
    CHECK(n > 0 && fseek(f, 0, SEEK_SET) == 0);
    b = calloc(1, (size_t)n + 1); /* PTX gets its NUL */
    CHECK(b && fread(b, 1, (size_t)n, f) == (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return b;
}

/* "count=N o/s o/s ... past=ERR" for a kernel, into buf. */
static void layout(CUkernel k, char *buf, size_t cap)
{
    size_t used = 0, i;

    buf[0] = '\0';
    for (i = 0; i < 64; i++) {
        size_t off = 777, size = 777;
        CUresult rc = kinfo(k, i, &off, &size);
        if (rc != CUDA_SUCCESS) {
            used += (size_t)snprintf(buf + used, cap - used,
                                     " count=%zu past=%s out=%zu/%zu", i,
                                     en(rc), off, size);
            return;
        }
        used += (size_t)snprintf(buf + used, cap - used, " %zu/%zu", off, size);
        if (used >= cap)
            return;
    }
}

static void kernel_line(const char *key, CUlibrary lib, const char *name)
{
    char buf[2048];
    CUkernel k;
    CUresult rc = D.cuLibraryGetKernel(&k, lib, name);

    if (rc != CUDA_SUCCESS) {
        printf("%s.%s getkernel %s\n", key, name, en(rc));
        return;
    }
    layout(k, buf, sizeof(buf));
    printf("%s.%s%s\n", key, name, buf);
}

static const char *const kernels[] = {"sim_add_one", "sim_scale",
                                      "_Z8sim_fillIiEvPT_", "sim_params",
                                      "sim_no_params", "sim_big_param", NULL};

static void probe_images(void)
{
    static const char *const files[] = {"sim_kernels.cubin", "sim_kernels.ptx",
                                        "sim_kernels.fatbin",
                                        "sim_kernels_lz4.fatbin",
                                        "sim_kernels_zstd.fatbin", NULL};

    for (int i = 0; files[i]; i++) {
        size_t n;
        unsigned char *b = slurp(files[i], &n);
        CUlibrary lib;
        CUresult rc;

        if (!b) {
            printf("%s missing\n", files[i]);
            continue;
        }
        rc = D.cuLibraryLoadData(&lib, b, NULL, NULL, 0, NULL, NULL, 0);
        if (rc != CUDA_SUCCESS) {
            printf("%s load %s\n", files[i], en(rc));
            free(b);
            continue;
        }
        for (int j = 0; kernels[j]; j++)
            kernel_line(files[i], lib, kernels[j]);
        CHECK(D.cuLibraryUnload(lib) == CUDA_SUCCESS);
        free(b);
    }
}

/* The calls' own rules, on the cubin's sim_params. */
static void probe_rules(void)
{
    size_t n, off, size;
    unsigned char *b = slurp("sim_kernels.cubin", &n);
    CUlibrary lib;
    CUkernel k, k0;
    CUfunction f;
    CUcontext ctx;
    char buf[2048];

    if (!b)
        return;
    CHECK(D.cuLibraryLoadData(&lib, b, NULL, NULL, 0, NULL, NULL, 0) == 0);
    CHECK(D.cuLibraryGetKernel(&k, lib, "sim_params") == 0);
    CHECK(D.cuLibraryGetKernel(&k0, lib, "sim_no_params") == 0);
    off = size = 777;
    RULE("rule.size-null", kinfo(k, 6, &off, NULL), " off=%zu", off);
    off = size = 777;
    RULE("rule.offset-null", kinfo(k, 6, NULL, &size), " size=%zu", size);
    printf("rule.both-null %s\n", en(kinfo(k, 0, NULL, NULL)));
    off = size = 777;
    RULE("rule.index-max", kinfo(k, SIZE_MAX, &off, &size), " out=%zu/%zu", off,
         size);
    off = size = 777;
    RULE("rule.noparams-0", kinfo(k0, 0, &off, &size), " out=%zu/%zu", off, size);
    printf("rule.noparams-0-offset-null %s\n", en(kinfo(k0, 0, NULL, &size)));
    printf("rule.kernel-null %s\n", en(kinfo(NULL, 0, &off, &size)));
    printf("rule.func-null %s\n", en(finfo(NULL, 0, &off, &size)));

    /* functions: without a context, then in one */
    printf("rule.getfunction-noctx %s\n", en(D.cuKernelGetFunction(&f, k)));
    CHECK(D.cuDevicePrimaryCtxRetain(&ctx, 0) == 0);
    CHECK(D.cuCtxSetCurrent(ctx) == 0);
    CHECK(D.cuKernelGetFunction(&f, k) == 0);
    {
        size_t used = 0, i;
        buf[0] = '\0';
        for (i = 0; i < 64; i++) {
            CUresult rc;
            off = size = 777;
            rc = finfo(f, i, &off, &size);
            if (rc != CUDA_SUCCESS) {
                snprintf(buf + used, sizeof(buf) - used, " count=%zu past=%s", i,
                         en(rc));
                break;
            }
            used += (size_t)snprintf(buf + used, sizeof(buf) - used, " %zu/%zu",
                                     off, size);
        }
        printf("rule.func%s\n", buf);
    }
    off = 777;
    RULE("rule.func-size-null", finfo(f, 6, &off, NULL), " off=%zu", off);
    printf("rule.func-offset-null %s\n", en(finfo(f, 6, NULL, &size)));
    /* a function asked about in no context */
    CHECK(D.cuCtxSetCurrent(NULL) == 0);
    off = size = 777;
    RULE("rule.func-noctx", finfo(f, 6, &off, &size), " out=%zu/%zu", off, size);
    CHECK(D.cuCtxSetCurrent(ctx) == 0);
    CHECK(D.cuLibraryUnload(lib) == 0);
    CHECK(D.cuCtxSetCurrent(NULL) == 0);
    CHECK(D.cuDevicePrimaryCtxRelease(0) == 0);
    free(b);
}

/* ---- PTX written by hand ---------------------------------------------------- */

static void ptx_case(const char *key, const char *text, const char *name)
{
    CUlibrary lib;
    CUresult rc = D.cuLibraryLoadData(&lib, text, NULL, NULL, 0, NULL, NULL, 0);

    if (rc != CUDA_SUCCESS) {
        printf("ptx.%s load %s\n", key, en(rc));
        return;
    }
    kernel_line(key, lib, name);
    CHECK(D.cuLibraryUnload(lib) == 0);
}

#define HEAD(v) ".version " v "\n.target sm_90\n.address_size 64\n"

/* A kernel k of PTX ISA version with the parameter list params. */
static void ptx_k(const char *key, const char *version, const char *params)
{
    char text[512];

    snprintf(text, sizeof(text), ".version %s\n.target sm_90\n.address_size 64\n"
             ".visible .entry k(%s)\n{\nret;\n}\n", version, params);
    ptx_case(key, text, "k");
}

static void probe_ptx(void)
{
    static char many[4200 * 24 + 256];
    size_t o;

    ptx_k("ptr-attr", "8.0", ".param .u8 a,\n"
             " .param .u64 .ptr.global.align 16 p, .param .u8 b,\n"
             " .param .u64 .ptr .align 4 q, .param .u32 .ptr.shared c");
    /* ptr-attr's parameters one at a time, to find what the JIT refuses */
    ptx_k("ptr-global-align16", "8.0", ""
             ".param .u64 .ptr.global.align 16 p");
    ptx_k("ptr-align4", "8.0", ""
             ".param .u64 .ptr .align 4 q");
    ptx_k("ptr-u32-shared", "8.0", ""
             ".param .u32 .ptr.shared c");
    ptx_k("ptr-u64-shared", "8.0", ""
             ".param .u64 .ptr.shared c");
    ptx_k("ptr-u8-then-align16", "8.0", ".param .u8 a,"
             " .param .u64 .ptr.global.align 16 p");
    ptx_k("v77-sm90", "7.7", ".param .u32 a");
    ptx_k("v78-sm90", "7.8", ".param .u32 a");
    ptx_k("align-small", "8.0", ".param .u8 a,"
             " .param .align 2 .u32 b, .param .u8 c");
    ptx_k("align-big", "8.0", ".param .u8 a,"
             " .param .align 64 .u32 b, .param .u8 c");
    ptx_k("array-b16", "8.0", ".param .u8 a,"
             " .param .b16 b[3], .param .u8 c");
    ptx_k("array-2d", "8.0", ".param .u8 a,"
             " .param .align 8 .b8 b[2][3], .param .u8 c");
    ptx_k("array-hex-oct", "8.0", ".param .b8 a[0x10],"
             " .param .b8 b[010], .param .b8 c[3U]");
    ptx_k("types", "8.3", ".param .u8 a, .param .f16 b,"
             " .param .f16x2 c, .param .s8 d, .param .b128 e, .param .s64 f,"
             " .param .b32 g");
    ptx_k("texref", "8.0", ".param .u8 a,"
             " .param .texref t, .param .samplerref s, .param .surfref u,"
             " .param .u8 b");
    ptx_k("align-after-type", "8.0", ".param .u8 a,"
             " .param .b8 .align 8 b[4]");
    ptx_k("pred", "8.0", ".param .pred a");
    ptx_k("zero-dim", "8.0", ".param .b8 a[0]");
    ptx_k("empty-dim", "8.0", ".param .b8 a[]");
    ptx_k("align-3", "8.0", ".param .align 3 .b8 a[4]");
    ptx_k("trailing-comma", "8.0", ".param .u32 a,");
    ptx_case("cut-short", HEAD("8.0") ".visible .entry k(.param .u32 a", "k");
    ptx_k("no-name", "8.0", ".param .u32");
    ptx_k("space-32764", "8.1", ".param .b8 a[32764]");
    ptx_k("space-32765", "8.1", ".param .b8 a[32765]");
    ptx_k("space-32764-plus", "8.1", ".param .b8 a[32760],"
             " .param .u64 b");
    ptx_k("space-4096-v70", "7.0", ".param .b8 a[4096]");
    ptx_k("space-4097-v70", "7.0", ".param .b8 a[4097]");
    ptx_k("space-4097-v80", "8.0", ".param .b8 a[4097]");
    ptx_k("huge-dim", "8.1", ".param .b8 a[99999999999999999999]");
    ptx_case("maxntid", HEAD("8.0") ".visible .entry k(.param .u32 a)\n.maxntid 128, 1, 1\n{\nret;\n}\n",
             "k");
    ptx_k("comments", "8.0", " // x\n .param /* y */ .u8 a, // z\n"
             " .param .u32 b /* w */ ");
    /* 4096 and 4097 one-byte parameters */
    for (int count = 4096; count <= 4097; count++) {
        char key[32];
        o = (size_t)snprintf(many, sizeof(many), HEAD("8.1") ".visible .entry k(");
        for (int i = 0; i < count; i++)
            o += (size_t)snprintf(many + o, sizeof(many) - o, "%s.param .u8 p%d",
                                  i ? ", " : "", i);
        snprintf(many + o, sizeof(many) - o, ")\n{\nret;\n}\n");
        snprintf(key, sizeof(key), "params-%d", count);
        {
            CUlibrary lib;
            CUkernel k;
            CUresult rc = D.cuLibraryLoadData(&lib, many, NULL, NULL, 0, NULL, NULL, 0);
            size_t off = 777, size = 777;
            if (rc) {
                printf("ptx.%s load %s\n", key, en(rc));
                continue;
            }
            rc = D.cuLibraryGetKernel(&k, lib, "k");
            printf("ptx.%s getkernel %s", key, en(rc));
            if (rc == CUDA_SUCCESS) {
                CUresult r1 = kinfo(k, (size_t)count - 1, &off, &size);
                printf(" last=%s %zu/%zu", en(r1), off, size);
                printf(" past=%s", en(kinfo(k, (size_t)count, &off, &size)));
            }
            printf("\n");
            CHECK(D.cuLibraryUnload(lib) == 0);
        }
    }
}

/* ---- hostile cubins, each in a child ---------------------------------------- */

static uint64_t r64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* The .nv.info.NAME section of the nvcc cubin: [*off, *off+*size). */
static int find_info(const unsigned char *b, size_t n, const char *name,
                     size_t *off, size_t *size, size_t *hdr)
{
    uint64_t shoff = r64(b + 40);
    unsigned shnum = b[60] | b[61] << 8, shstr = b[62] | b[63] << 8;
    const unsigned char *ss = b + shoff + 64 * (uint64_t)shstr;
    uint64_t stroff = r64(ss + 24);
    char want[256];

    snprintf(want, sizeof(want), ".nv.info.%s", name);
    for (unsigned i = 0; i < shnum; i++) {
        const unsigned char *sh = b + shoff + 64 * (uint64_t)i;
        uint32_t nm = (uint32_t)(sh[0] | sh[1] << 8 | sh[2] << 16 | (uint32_t)sh[3] << 24);
        if (strcmp((const char *)b + stroff + nm, want) == 0) {
            *off = (size_t)r64(sh + 24);
            *size = (size_t)r64(sh + 32);
            *hdr = (size_t)(sh - b);
            CHECK(*off + *size <= n);
            return 0;
        }
    }
    return -1;
}

/* Offset of the k-th record with attribute attr in the section, or 0. */
static size_t find_attr(const unsigned char *b, size_t off, size_t size, int attr, int k)
{
    size_t p = off;

    while (p + 4 <= off + size) {
        size_t len = b[p] == 4 ? 4 + (size_t)(b[p + 2] | b[p + 3] << 8) : 4;
        if (b[p + 1] == attr && k-- == 0)
            return p;
        p += len;
    }
    return 0;
}

static int child_hostile(const char *what)
{
    size_t n, off, size, hdr, a;
    unsigned char *b;
    CUlibrary lib;
    CUkernel k;
    CUresult rc;
    char buf[2048];

    resolve();
    b = slurp("sim_kernels.cubin", &n);
    CHECK(b);
    CHECK(find_info(b, n, "sim_add_one", &off, &size, &hdr) == 0);
    if (strcmp(what, "rename-section") == 0) {
        const unsigned char *ss = b + r64(b + 40) + 64 * (uint64_t)(b[62] | b[63] << 8);
        uint32_t nm = (uint32_t)(b[hdr] | b[hdr + 1] << 8 | b[hdr + 2] << 16);
        b[r64(ss + 24) + nm + 4] = 'X'; /* .nv.Xnfo.sim_add_one */
    } else if (strcmp(what, "size-lies") == 0) {
        a = find_attr(b, off, size, 0x17, 1); /* ordinal 0: offset 0, size 8 */
        CHECK(a);
        b[a + 4 + 10] = (unsigned char)(b[a + 4 + 10] | 0xfc);
        b[a + 4 + 11] = 0xff; /* size 16383 */
    } else if (strcmp(what, "size-16") == 0) {
        a = find_attr(b, off, size, 0x17, 1); /* ordinal 0: offset 0, size 8 */
        CHECK(a);
        b[a + 4 + 10] = (unsigned char)((b[a + 4 + 10] & 3) | (16 << 2));
    } else if (strcmp(what, "offset-past") == 0) {
        a = find_attr(b, off, size, 0x17, 0); /* ordinal 1: offset 8 */
        CHECK(a);
        b[a + 4 + 6] = 0xf0, b[a + 4 + 7] = 0x7f;
    } else if (strcmp(what, "offset-past-cbank") == 0) {
        a = find_attr(b, off, size, 0x17, 0); /* ordinal 1: offset 8 -> 16 */
        CHECK(a);
        b[a + 4 + 6] = 16;
    } else if (strcmp(what, "ordinal-big") == 0) {
        a = find_attr(b, off, size, 0x17, 0);
        CHECK(a);
        b[a + 4 + 4] = 7;
    } else if (strcmp(what, "ordinal-dup") == 0) {
        a = find_attr(b, off, size, 0x17, 0);
        CHECK(a);
        b[a + 4 + 4] = 0;
    } else if (strcmp(what, "record-len-lies") == 0) {
        a = find_attr(b, off, size, 0x17, 0);
        CHECK(a);
        b[a + 2] = 0x00, b[a + 3] = 0xff;
    } else if (strcmp(what, "record-len-8") == 0) {
        a = find_attr(b, off, size, 0x17, 0);
        CHECK(a);
        b[a + 2] = 8;
    } else if (strcmp(what, "cbank-size-small") == 0) {
        a = find_attr(b, off, size, 0x19, 0);
        CHECK(a);
        b[a + 2] = 4, b[a + 3] = 0;
    } else if (strcmp(what, "no-kparam") == 0) {
        /* both KPARAM_INFO records become EIATTR_EXTERNS-like unknowns */
        for (int i = 0; i < 2; i++) {
            a = find_attr(b, off, size, 0x17, 0);
            CHECK(a);
            b[a + 1] = 0x7e;
        }
    } else if (strcmp(what, "bad-format") == 0) {
        b[off + 8] = 9; /* the record after CUDA_API_VERSION (4 + 4 bytes) */
    }
    CHECK(D.cuInit(0) == 0);
    rc = D.cuLibraryLoadData(&lib, b, NULL, NULL, 0, NULL, NULL, 0);
    if (rc != CUDA_SUCCESS) {
        sim_t_report("load %s", en(rc));
        return 0;
    }
    rc = D.cuLibraryGetKernel(&k, lib, "sim_add_one");
    if (rc != CUDA_SUCCESS) {
        sim_t_report("getkernel %s", en(rc));
        return 0;
    }
    layout(k, buf, sizeof(buf));
    {
        CUfunction f;
        CUcontext ctx;
        CUresult r2;
        char inctx[1024];
        CHECK(D.cuDevicePrimaryCtxRetain(&ctx, 0) == 0);
        CHECK(D.cuCtxSetCurrent(ctx) == 0);
        layout(k, inctx, sizeof(inctx));
        r2 = D.cuKernelGetFunction(&f, k);
        sim_t_report("ok%s in-context%s getfunction=%s", buf, inctx, en(r2));
    }
    return 0;
}

/* Bogus handles: a stack address, a kernel of an unloaded library, a
 * CUkernel given as a CUfunction, before cuInit. */
static int child_handles(const char *what)
{
    size_t n, off = 777, size = 777;
    unsigned char *b;
    CUlibrary lib;
    CUkernel k;
    int x[64];

    resolve();
    memset(x, 0, sizeof(x));
    if (strcmp(what, "before-init") == 0) {
        CUresult r1 = kinfo((CUkernel)x, 0, &off, &size);
        CUresult r2 = finfo((CUfunction)x, 0, &off, &size);
        sim_t_report("kernel=%s func=%s out=%zu/%zu", en(r1), en(r2), off, size);
        return 0;
    }
    CHECK(D.cuInit(0) == 0);
    if (strncmp(what, "ctx-", 4) == 0) { /* the same cases in a context */
        CUcontext ctx;
        CHECK(D.cuDevicePrimaryCtxRetain(&ctx, 0) == 0);
        CHECK(D.cuCtxSetCurrent(ctx) == 0);
        what += 4;
    }
    if (strcmp(what, "stack") == 0) {
        CUresult r1 = kinfo((CUkernel)x, 0, &off, &size);
        CUresult r2 = finfo((CUfunction)x, 0, &off, &size);
        sim_t_report("kernel=%s func=%s out=%zu/%zu", en(r1), en(r2), off, size);
        return 0;
    }
    b = slurp("sim_kernels.cubin", &n);
    CHECK(b);
    CHECK(D.cuLibraryLoadData(&lib, b, NULL, NULL, 0, NULL, NULL, 0) == 0);
    CHECK(D.cuLibraryGetKernel(&k, lib, "sim_add_one") == 0);
    if (strcmp(what, "kernel-as-func") == 0) {
        CUresult r = finfo((CUfunction)k, 1, &off, &size);
        sim_t_report("%s out=%zu/%zu", en(r), off, size);
        return 0;
    }
    if (strcmp(what, "unloaded") == 0) {
        CHECK(D.cuLibraryUnload(lib) == 0);
        CUresult r = kinfo(k, 0, &off, &size);
        sim_t_report("%s out=%zu/%zu", en(r), off, size);
        return 0;
    }
    return 2;
}

static void in_child(const char *role, const char *what)
{
    char out[4096];
    const char *args[] = {what, imgdir, NULL};
    int st = sim_t_run(role, args, NULL, out, sizeof(out));

    printf("%s.%s %s (exit %d)\n", role, what, out, st);
}

int main(int argc, char **argv)
{
    static const char *const hostile[] = {
        "none", "rename-section", "size-lies", "size-16", "offset-past",
        "offset-past-cbank", "ordinal-big", "ordinal-dup", "record-len-lies",
        "record-len-8", "cbank-size-small", "no-kparam", "bad-format", NULL};
    static const char *const handles[] = {"before-init", "stack", "kernel-as-func",
                                          "unloaded", "ctx-stack", "ctx-kernel-as-func",
                                          "ctx-unloaded", NULL};

    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc >= 5 && strcmp(argv[1], "--child") == 0) {
        imgdir = argv[4];
        return strcmp(argv[2], "hostile") == 0   ? child_hostile(argv[3])
               : strcmp(argv[2], "handles") == 0 ? child_handles(argv[3])
                                                 : 2;
    }
    if (argc != 2) {
        fprintf(stderr, "usage: %s IMAGE_DIR\n", argv[0]);
        return 2;
    }
    imgdir = argv[1];
    unsetenv("CUDA_VISIBLE_DEVICES");
    for (int i = 0; handles[i]; i++)
        in_child("handles", handles[i]);
    for (int i = 0; hostile[i]; i++)
        in_child("hostile", hostile[i]);
    resolve();
    CHECK(D.cuInit(0) == 0);
    probe_images();
    probe_rules();
    probe_ptx();
    /* The same kernels again with device 0's primary context current: the
     * driver answers some of them only then. */
    {
        CUcontext ctx;
        CHECK(D.cuDevicePrimaryCtxRetain(&ctx, 0) == 0);
        CHECK(D.cuCtxSetCurrent(ctx) == 0);
        printf("== with a current context\n");
        probe_images();
        probe_ptx();
        CHECK(D.cuCtxSetCurrent(NULL) == 0);
        CHECK(D.cuDevicePrimaryCtxRelease(0) == 0);
    }
    return 0;
}
