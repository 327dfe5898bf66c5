/* CUDA_VISIBLE_DEVICES, case by case, as the driver reads it
 * (sim/FACTS.md F1). Each case runs in an exec'd child; the child reports the
 * UUIDs it sees, the parent compares them with the physical list. On the
 * real driver the same cases run, sized to the GPUs that are there. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cucore.h"
#include "check.h"

#define MAXG 16

static char phys[MAXG][CUC_UUID_STRLEN];
static int nphys;
static const char *sim_uuids; /* "CUCORE_SIM_UUIDS=..." for the children, or NULL */

/* Child: "OK n uuid..." or "ERR name cuda". */
static int child_list(void)
{
    int n, i, rc = cuc_device_count(&n);

    if (rc) {
        printf("ERR %s %d\n", cuc_errname(rc), cuc_errcuda());
        return 0;
    }
    printf("OK %d", n);
    for (i = 0; i < n; i++) {
        cuc_device *d;
        CHECK_OK(cuc_device_get(i, &d));
        printf(" %s", cuc_device_uuid_string(d));
    }
    printf("\n");
    return 0;
}

static void run_case(const char *cvd, const char *gpus, char *out, size_t outsz)
{
    char e1[512], e2[64];
    const char *env[4];

    if (cvd)
        snprintf(e1, sizeof(e1), "CUDA_VISIBLE_DEVICES=%s", cvd);
    else
        snprintf(e1, sizeof(e1), "CUDA_VISIBLE_DEVICES");
    env[0] = e1;
    env[1] = env[2] = env[3] = NULL;
    if (gpus) {
        snprintf(e2, sizeof(e2), "CUCORE_SIM_GPUS=%s", gpus);
        env[1] = e2;
    }
    if (sim_uuids)
        env[gpus ? 2 : 1] = sim_uuids;
    CHECK(spawn_self_capture("list", NULL, env, out, outsz) == 0);
}

/* want: physical indices, terminated by -1. */
static void expect_devices(const char *cvd, const char *gpus, const int *want)
{
    char out[4096], expect[4096];
    int n = 0, len;

    while (want[n] >= 0)
        n++;
    len = snprintf(expect, sizeof(expect), "OK %d", n);
    for (int i = 0; i < n; i++)
        len += snprintf(expect + len, sizeof(expect) - (size_t)len, " %s", phys[want[i]]);
    snprintf(expect + len, sizeof(expect) - (size_t)len, "\n");
    run_case(cvd, gpus, out, sizeof(out));
    if (strcmp(out, expect) != 0) {
        fprintf(stderr, "CUDA_VISIBLE_DEVICES=\"%s\": got \"%s\", want \"%s\"\n",
                cvd ? cvd : "(unset)", out, expect);
        exit(1);
    }
}

static void expect_error(const char *cvd, const char *gpus, const char *line)
{
    char out[4096];

    run_case(cvd, gpus, out, sizeof(out));
    if (strcmp(out, line) != 0) {
        fprintf(stderr, "CUDA_VISIBLE_DEVICES=\"%s\": got \"%s\", want \"%s\"\n",
                cvd ? cvd : "(unset)", out, line);
        exit(1);
    }
}

static void read_physical(const char *gpus)
{
    char out[4096], *tok, *save = NULL;

    run_case(NULL, gpus, out, sizeof(out));
    CHECK(sscanf(out, "OK %d", &nphys) == 1 && nphys >= 1 && nphys <= MAXG);
    tok = strtok_r(out, " \n", &save); /* OK */
    tok = strtok_r(NULL, " \n", &save); /* n */
    for (int i = 0; i < nphys; i++) {
        tok = strtok_r(NULL, " \n", &save);
        CHECK(tok && strlen(tok) == CUC_UUID_STRLEN - 1);
        memcpy(phys[i], tok, CUC_UUID_STRLEN);
    }
}

static const char *const no_device = "ERR CUC_E_NO_DEVICE 100\n";
static const char *const twice = "ERR CUC_E_DRIVER 101\n";

/* A UUID without "GPU-" is no UUID entry: the driver reads it as an index,
 * like strtol, so one whose hex begins with digits names the GPU of that
 * index ("0aef..." is GPU 0, and "0,0aef..." names GPU 0 twice), and one
 * that begins with a letter matches nothing (sim/FACTS.md F1). */
static void expect_bare_uuid(const char *gpus)
{
    const char *u = phys[0] + 4;
    char *end;
    long k = strtol(u, &end, 10);
    char cvd[1024];

    if (end == u || k >= nphys) {
        expect_error(u, gpus, no_device);
        return;
    }
    expect_devices(u, gpus, (int[]){(int)k, -1});
    snprintf(cvd, sizeof(cvd), "%ld,%s", k, u);
    expect_error(cvd, gpus, twice);
}

/* Cases that hold for any number of GPUs. */
static void common_cases(const char *gpus)
{
    char cvd[256];
    int all[MAXG + 1], first[] = {0, -1}, last[2];

    read_physical(gpus);
    last[0] = nphys - 1;
    last[1] = -1;
    for (int i = 0; i < nphys; i++)
        all[i] = i;
    all[nphys] = -1;
    expect_devices(NULL, gpus, all);
    expect_error("", gpus, no_device);
    expect_error("-1", gpus, no_device);
    expect_error("abc", gpus, no_device);
    expect_error("0,0", gpus, twice);
    /* An index, then the same GPU by UUID: the driver keeps one device,
     * it does not fail as for "0,0" (F1). */
    snprintf(cvd, sizeof(cvd), "0,%s", phys[0]);
    expect_devices(cvd, gpus, first);
    /* A full UUID, and its GPU- prefix of 4 hex digits. */
    expect_devices(phys[nphys - 1], gpus, last);
    snprintf(cvd, sizeof(cvd), "%.8s", phys[0]);
    expect_devices(cvd, gpus, first);
    expect_bare_uuid(gpus);
    /* The first invalid entry ends the list. */
    snprintf(cvd, sizeof(cvd), "0,%d", nphys);
    expect_devices(cvd, gpus, first);
    snprintf(cvd, sizeof(cvd), "%d,0", nphys);
    expect_error(cvd, gpus, no_device);
    snprintf(cvd, sizeof(cvd), "0,-1,%d", nphys - 1);
    expect_devices(cvd, gpus, first);
}

static void multi_gpu_cases(const char *gpus)
{
    char cvd[256];
    int rev[MAXG + 1], len = 0;
    int three_one[] = {3, 1, -1}, one_uuid_zero[] = {1, 0, -1};

    for (int i = 0; i < nphys; i++) {
        rev[i] = nphys - 1 - i;
        len += snprintf(cvd + len, sizeof(cvd) - (size_t)len, "%s%d", i ? "," : "", rev[i]);
    }
    rev[nphys] = -1;
    expect_devices(cvd, gpus, rev);
    if (nphys >= 4)
        expect_devices("3,1", gpus, three_one);
    snprintf(cvd, sizeof(cvd), "%s,%.8s", phys[1], phys[0]); /* UUID, then prefix */
    expect_devices(cvd, gpus, one_uuid_zero);
}

int main(int argc, char **argv)
{
    if (argc >= 3 && !strcmp(argv[1], "--child"))
        return child_list();
    FD_BASELINE();
    if (test_on_sim()) {
        common_cases("4");
        multi_gpu_cases("4");
        common_cases("1");
        CHECK(nphys == 1);
        expect_devices("0,1", "1", (int[]){0, -1});
        expect_error("1,0", "1", no_device);
        /* a UUID whose hex begins with a digit */
        sim_uuids = "CUCORE_SIM_UUIDS=GPU-0aefc091-35d4-ba1d-04a4-3830cd47dbf4";
        common_cases("1");
        CHECK(strcmp(phys[0], "GPU-0aefc091-35d4-ba1d-04a4-3830cd47dbf4") == 0);
        sim_uuids = NULL;
    } else {
        common_cases(NULL);
        if (nphys >= 2)
            multi_gpu_cases(NULL);
    }
    FD_CHECK_NO_LEAK();
    return 0;
}
