/* `cucore devices`: the acceptance case (CUDA_VISIBLE_DEVICES=3,1
 * lists physical GPUs 3 and 1, in that order), text form, and the failure
 * when nothing is visible. */
#include "cucore.h"
#include "check.h"

static int run_cli(const char *const *args, const char *const *env, char *out, size_t n)
{
    const char *argv[8] = {CUC_CLI_PATH};
    int i;

    for (i = 0; args[i] && i < 6; i++)
        argv[i + 1] = args[i];
    argv[i + 1] = NULL;
    return run_capture(argv, env, out, n);
}

/* The UUIDs in a --json listing, in order, into u[]. */
static int json_uuids(const char *json, char u[][CUC_UUID_STRLEN], int max)
{
    const char *p = json;
    int n = 0;

    while (n < max && (p = strstr(p, "\"uuid\":\"")) != NULL) {
        p += 8;
        CHECK(strlen(p) > CUC_UUID_STRLEN - 1 && p[CUC_UUID_STRLEN - 1] == '"');
        memcpy(u[n], p, CUC_UUID_STRLEN - 1);
        u[n][CUC_UUID_STRLEN - 1] = '\0';
        n++;
    }
    return n;
}

int main(void)
{
    static const char *const json[] = {"devices", "--json", NULL};
    static const char *const text[] = {"devices", NULL};
    char out[16384], all[16][CUC_UUID_STRLEN], some[16][CUC_UUID_STRLEN];
    int n;

    FD_BASELINE();
    if (!test_on_sim())
        SKIP("the 4-GPU listing needs the simulator; test_visible_devices covers the real driver");
    CHECK(run_cli(json, (const char *const[]){"CUDA_VISIBLE_DEVICES", NULL}, out,
                  sizeof(out)) == 0);
    CHECK(json_uuids(out, all, 16) == 4);
    CHECK(strstr(out, "\"cuda_visible_devices\":null") != NULL);
    CHECK(strstr(out, "\"simulated\":true") != NULL);

    CHECK(run_cli(json, (const char *const[]){"CUDA_VISIBLE_DEVICES=3,1", NULL}, out,
                  sizeof(out)) == 0);
    n = json_uuids(out, some, 16);
    CHECK(n == 2);
    CHECK(strcmp(some[0], all[3]) == 0);
    CHECK(strcmp(some[1], all[1]) == 0);
    CHECK(strstr(out, "\"ordinal\":0,\"uuid\":\"") != NULL);
    CHECK(strstr(out, "\"cuda_visible_devices\":\"3,1\"") != NULL);
    CHECK(strstr(out, "\"pci_bus_id\":\"00000000:") != NULL);

    CHECK(run_cli(text, (const char *const[]){"CUDA_VISIBLE_DEVICES=3,1", NULL}, out,
                  sizeof(out)) == 0);
    CHECK(strstr(out, "CUDA_VISIBLE_DEVICES: 3,1") != NULL);
    CHECK(strstr(out, all[3]) != NULL && strstr(out, all[3]) < strstr(out, all[1]));

    /* Nothing visible: non-zero exit, the driver's reason on stderr. */
    CHECK(run_cli(text, (const char *const[]){"CUDA_VISIBLE_DEVICES=", NULL}, out,
                  sizeof(out)) == 1);
    CHECK(run_cli((const char *const[]){"devices", "--bogus", NULL}, NULL, out,
                  sizeof(out)) == 2);
    FD_CHECK_NO_LEAK();
    return 0;
}
