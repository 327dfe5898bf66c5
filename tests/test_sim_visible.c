/* Simulator: CUDA_VISIBLE_DEVICES, each case in its own exec'd child, read
 * as the driver reads it (sim/FACTS.md F1). */
#include "../sim/testdata/sim_test.h"

#include <ctype.h>

#define NGPU 4

static char phys[NGPU][44]; /* physical UUIDs, from the unrestricted parent */

/* Child: "rc count uuid..." */
static int child_cvd(void)
{
    int n = -1;
    CUresult rc, rc2;

    sim_t_load();
    rc = D.cuInit(0);
    rc2 = D.cuDeviceGetCount(&n);
    sim_t_report("%d %d", (int)rc, rc2 == CUDA_SUCCESS ? n : -1);
    if (rc == CUDA_SUCCESS)
        for (int i = 0; i < n; i++) {
            CUuuid u;
            char s[44];
            CU_OK(D.cuDeviceGetUuid(&u, i));
            sim_t_uuid_str(&u, s);
            sim_t_report(" %s", s);
        }
    else
        CHECK(rc2 == CUDA_ERROR_NOT_INITIALIZED);
    return 0;
}

static int phys_index(const char *uuid)
{
    for (int i = 0; i < NGPU; i++)
        if (strcmp(phys[i], uuid) == 0)
            return i;
    return -1;
}

/* Runs a child with CUDA_VISIBLE_DEVICES=cvd (NULL: unset) and gpus GPUs;
 * checks cuInit's result and the physical order of what it sees (want is
 * a list of physical indices ended by -1). */
static void expect(const char *cvd, const char *gpus, CUresult want_rc,
                   const int *want)
{
    char envv[512], envg[64], out[2048];
    const char *env[3];
    int rc, n, pos, k = 0;
    const char *p;

    if (cvd)
        snprintf(envv, sizeof(envv), "CUDA_VISIBLE_DEVICES=%s", cvd);
    else
        snprintf(envv, sizeof(envv), "CUDA_VISIBLE_DEVICES");
    snprintf(envg, sizeof(envg), "CUCORE_SIM_GPUS=%s", gpus ? gpus : "4");
    env[0] = envv;
    env[1] = envg;
    env[2] = NULL;
    CHECK(sim_t_run("cvd", NULL, env, out, sizeof(out)) == 0);
    CHECK(sscanf(out, "%d %d%n", &rc, &n, &pos) == 2);
    if (rc != (int)want_rc) {
        fprintf(stderr, "CUDA_VISIBLE_DEVICES='%s': cuInit %d (%s), wanted %s\n",
                cvd ? cvd : "(unset)", rc, sim_t_errname((CUresult)rc),
                sim_t_errname(want_rc));
        exit(1);
    }
    if (want_rc != CUDA_SUCCESS) {
        CHECK(n == -1);
        return;
    }
    p = out + pos;
    while (*p == ' ') {
        char u[44];
        int len = 0;
        p++;
        while (p[len] && p[len] != ' ')
            len++;
        CHECK(len < (int)sizeof(u));
        memcpy(u, p, (size_t)len);
        u[len] = '\0';
        p += len;
        if (want[k] < 0 || phys_index(u) != want[k]) {
            fprintf(stderr, "CUDA_VISIBLE_DEVICES='%s': device %d is %s\n",
                    cvd ? cvd : "(unset)", k, u);
            exit(1);
        }
        k++;
    }
    CHECK(want[k] == -1 && k == n);
}

/* Shortest prefix (after "GPU-") of gpu g that no other GPU shares. */
static void unique_prefix(int g, char *out, size_t cap, int upper)
{
    for (size_t len = 1; len <= 36; len++) {
        int clash = 0;
        for (int o = 0; o < NGPU; o++)
            if (o != g && strncmp(phys[o] + 4, phys[g] + 4, len) == 0)
                clash = 1;
        if (!clash) {
            snprintf(out, cap, "GPU-%.*s", (int)len, phys[g] + 4);
            if (upper)
                for (char *c = out + 4; *c; c++)
                    *c = (char)toupper((unsigned char)*c);
            return;
        }
    }
    CHECK(!"no unique prefix");
}

int main(int argc, char **argv)
{
    static const int all[] = {0, 1, 2, 3, -1}, only0[] = {0, -1},
                     rev[] = {3, 2, 1, 0, -1}, two0[] = {2, 0, -1},
                     one2[] = {1, 2, -1}, none[] = {-1};
    char buf[256], pre[64], pre_up[64];
    int idx[NGPU + 1];

    if (argc >= 3 && strcmp(argv[1], "--child") == 0)
        return strcmp(argv[2], "cvd") == 0 ? child_cvd() : 2;
    sim_t_clean_env();
    FD_BASELINE();
    sim_t_load();
    CU_OK(D.cuInit(0));
    for (int i = 0; i < NGPU; i++) {
        CUuuid u;
        CU_OK(D.cuDeviceGetUuid(&u, i));
        sim_t_uuid_str(&u, phys[i]);
    }

    /* indices, read like strtol */
    expect(NULL, NULL, CUDA_SUCCESS, all);
    expect("0", NULL, CUDA_SUCCESS, only0);
    expect("3,2,1,0", NULL, CUDA_SUCCESS, rev);
    expect("2,0", NULL, CUDA_SUCCESS, two0);
    expect(" 1 , 2 ", NULL, CUDA_SUCCESS, one2);
    expect("+1,2x,00", NULL, CUDA_SUCCESS, (const int[]){1, 2, 0, -1});
    expect("0a", NULL, CUDA_SUCCESS, only0);
    /* the first invalid entry ends the list */
    expect("0,7,1", NULL, CUDA_SUCCESS, only0);
    expect("0,1", "1", CUDA_SUCCESS, only0);
    expect("1,0", "1", CUDA_ERROR_NO_DEVICE, none);
    expect("0,,1", NULL, CUDA_SUCCESS, only0);
    expect("0,", NULL, CUDA_SUCCESS, only0);
    expect("0,-1,1", NULL, CUDA_SUCCESS, only0);
    /* nothing valid: no device */
    expect("", NULL, CUDA_ERROR_NO_DEVICE, none);
    expect("-1", NULL, CUDA_ERROR_NO_DEVICE, none);
    expect("abc", NULL, CUDA_ERROR_NO_DEVICE, none);
    expect("4", NULL, CUDA_ERROR_NO_DEVICE, none);
    expect(",0", NULL, CUDA_ERROR_NO_DEVICE, none);
    expect("GPU-", NULL, CUDA_ERROR_NO_DEVICE, none);
    expect("GPU", NULL, CUDA_ERROR_NO_DEVICE, none);
    expect("MIG-0", NULL, CUDA_ERROR_NO_DEVICE, none); /* no such UUID */
    /* named twice */
    expect("0,0", NULL, CUDA_ERROR_INVALID_DEVICE, none);
    expect(" 0 , 0", NULL, CUDA_ERROR_INVALID_DEVICE, none);
    expect("2,1,2", NULL, CUDA_ERROR_INVALID_DEVICE, none);
    snprintf(buf, sizeof(buf), "%s,%s", phys[1], phys[1]);
    expect(buf, NULL, CUDA_ERROR_INVALID_DEVICE, none);
    /* a duplicate after the list has ended is not seen */
    expect("0,9,0", NULL, CUDA_SUCCESS, only0);

    /* UUIDs: full, prefix, case-insensitive, dashes ignored */
    snprintf(buf, sizeof(buf), "%s", phys[2]);
    idx[0] = 2, idx[1] = -1;
    expect(buf, NULL, CUDA_SUCCESS, idx);
    unique_prefix(3, pre, sizeof(pre), 0);
    unique_prefix(3, pre_up, sizeof(pre_up), 1);
    idx[0] = 3, idx[1] = -1;
    expect(pre, NULL, CUDA_SUCCESS, idx);
    expect(pre_up, NULL, CUDA_SUCCESS, idx);
    snprintf(buf, sizeof(buf), "%s-", pre);
    expect(buf, NULL, CUDA_SUCCESS, idx);
    snprintf(buf, sizeof(buf), "GPU--%s", pre + 4);
    expect(buf, NULL, CUDA_SUCCESS, idx);
    {
        /* all 32 digits without dashes, and one digit too many */
        char d32[64];
        size_t k = 0;
        for (const char *c = phys[3] + 4; *c; c++)
            if (*c != '-')
                d32[k++] = *c;
        d32[k] = '\0';
        snprintf(buf, sizeof(buf), "GPU-%s", d32);
        expect(buf, NULL, CUDA_SUCCESS, idx);
        snprintf(buf, sizeof(buf), "%s0", phys[3]);
        expect(buf, NULL, CUDA_SUCCESS, idx);
        /* MIG- takes a GPU UUID too */
        snprintf(buf, sizeof(buf), "MIG-%s", phys[3] + 4);
        expect(buf, NULL, CUDA_SUCCESS, idx);
    }
    snprintf(buf, sizeof(buf), "%sxyz", pre);
    expect(buf, NULL, CUDA_ERROR_NO_DEVICE, none);
    snprintf(buf, sizeof(buf), "%s ", pre); /* no trimming for UUIDs */
    expect(buf, NULL, CUDA_ERROR_NO_DEVICE, none);
    snprintf(buf, sizeof(buf), " %s", pre);
    expect(buf, NULL, CUDA_ERROR_NO_DEVICE, none);
    snprintf(buf, sizeof(buf), "gpu-%s", pre + 4); /* "GPU-" is case-sensitive */
    expect(buf, NULL, CUDA_ERROR_NO_DEVICE, none);
    snprintf(buf, sizeof(buf), "MIG-%s", phys[0]);   /* MIG-GPU-... */
    expect(buf, NULL, CUDA_ERROR_NO_DEVICE, none);
    /* a list keeps the kind of its first entry: an index after a UUID, or
     * a UUID after an index, ends it (so no "named twice" there) */
    snprintf(buf, sizeof(buf), "%s,0", pre);
    expect(buf, NULL, CUDA_SUCCESS, idx);
    snprintf(buf, sizeof(buf), "%s,3,3", pre);
    expect(buf, NULL, CUDA_SUCCESS, idx);
    snprintf(buf, sizeof(buf), "1,%s", phys[1]);
    expect(buf, NULL, CUDA_SUCCESS, (const int[]){1, -1});
    snprintf(buf, sizeof(buf), "0,%s,0", phys[0]);
    expect(buf, NULL, CUDA_SUCCESS, only0);
    snprintf(buf, sizeof(buf), "%s,%.8s", phys[1], phys[0]);
    expect(buf, NULL, CUDA_SUCCESS, (const int[]){1, 0, -1});
    /* without "GPU-" a UUID is invalid */
    expect(phys[1] + 4, NULL, CUDA_ERROR_NO_DEVICE, none);
    snprintf(buf, sizeof(buf), "0,%s", phys[1] + 4);
    expect(buf, NULL, CUDA_SUCCESS, only0);

    /* An ambiguous prefix is invalid: two GPUs starting with ec8f. */
    {
        static const char uu[] =
            "CUCORE_SIM_UUIDS=GPU-ec8f0000-1111-2222-3333-444455556666,"
            "GPU-ec8f1111-aaaa-bbbb-cccc-ddddeeeeffff,"
            "GPU-12345678-aaaa-bbbb-cccc-ddddeeeeffff";
        const char *cases[][2] = {
            {"GPU-ec8f", "x"},      {"GPU-ec8f1", "1"}, {"GPU-EC8F0", "0"},
            {"GPU-12,GPU-ec8f", "2"}, {"GPU-ec8f-", "x"}, {"GPU-", "x"},
            {"GPU-ec8f-1", "1"},
            {"GPU-ec8f1111-aaaa-bbbb-cccc-ddddeeeeffff", "1"}};
        for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
            char ev[128], out[1024];
            const char *env[] = {uu, ev, "CUCORE_SIM_GPUS", NULL};
            int rc, n;
            snprintf(ev, sizeof(ev), "CUDA_VISIBLE_DEVICES=%s", cases[c][0]);
            CHECK(sim_t_run("cvd", NULL, env, out, sizeof(out)) == 0);
            CHECK(sscanf(out, "%d %d", &rc, &n) == 2);
            if (cases[c][1][0] == 'x') {
                CHECK(rc == CUDA_ERROR_NO_DEVICE);
            } else {
                const char *want = cases[c][1][0] == '0'
                                       ? "GPU-ec8f0000-1111-2222-3333-444455556666"
                                   : cases[c][1][0] == '1'
                                       ? "GPU-ec8f1111-aaaa-bbbb-cccc-ddddeeeeffff"
                                       : "GPU-12345678-aaaa-bbbb-cccc-ddddeeeeffff";
                CHECK(rc == CUDA_SUCCESS && n == 1 && strstr(out, want));
            }
        }
    }
    FD_CHECK_NO_LEAK();
    return test_finish();
}
