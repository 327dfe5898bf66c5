/* Driver loading: a missing library, one without cuGetProcAddress, one that
 * lacks an entry point — each a clear CUC_E_NO_DRIVER, never a crash. Each
 * case runs in its own exec'd child (loading happens once per process). */
#include "cucore.h"
#include "check.h"

/* Child: load, print "status|message". Twice, to check the failure is
 * sticky and reported identically. */
static int child_load(void)
{
    struct cuc_driver_info info;
    char first[1024];
    int rc = cuc_driver_load(&info), rc2, n;

    snprintf(first, sizeof(first), "%s", cuc_errmsg());
    rc2 = cuc_driver_load(NULL);
    CHECK(rc == rc2);
    if (rc) {
        CHECK(strcmp(first, cuc_errmsg()) == 0);
        /* Everything that needs the driver reports the same failure. */
        CHECK_RC(cuc_device_count(&n), rc);
        printf("%s|%s\n", cuc_errname(rc), first);
    } else {
        printf("OK|%s|%d|%d\n", info.path, info.version, info.simulated);
    }
    return 0;
}

static void load_with(const char *const *env, char *out, size_t outsz)
{
    CHECK(spawn_self_capture("load", NULL, env, out, outsz) == 0);
}

int main(int argc, char **argv)
{
    char out[4096], want[2048];

    if (argc >= 3 && !strcmp(argv[1], "--child"))
        return child_load();
    FD_BASELINE();

    load_with((const char *const[]){"CUCORE_DRIVER=/nonexistent/libcuda.so.1", NULL},
              out, sizeof(out));
    CHECK(strncmp(out, "CUC_E_NO_DRIVER|", 16) == 0);
    CHECK(strstr(out, "/nonexistent/libcuda.so.1") != NULL);
    CHECK(strstr(out, "CUCORE_DRIVER=sim") != NULL);

    load_with((const char *const[]){"CUCORE_DRIVER=libm.so.6", NULL}, out, sizeof(out));
    CHECK(strncmp(out, "CUC_E_NO_DRIVER|", 16) == 0);
    CHECK(strstr(out, "libm.so.6 has no cuGetProcAddress_v2") != NULL);

    snprintf(want, sizeof(want), "CUCORE_DRIVER=%s", CUC_SIM_PATH);
    load_with((const char *const[]){want, "CUCORE_SIM_HIDE=cuMemCreate", NULL}, out,
              sizeof(out));
    CHECK(strncmp(out, "CUC_E_NO_DRIVER|", 16) == 0);
    CHECK(strstr(out, "lacks cuMemCreate") != NULL);

    load_with((const char *const[]){"CUCORE_DRIVER=sim", "CUCORE_SIM_HIDE", NULL}, out,
              sizeof(out));
    CHECK(strncmp(out, "OK|", 3) == 0);
    CHECK(strstr(out, "libcucore-sim.so|13000|1") != NULL);

    load_with((const char *const[]){"CUCORE_DRIVER=sim", "CUDA_VISIBLE_DEVICES=abc", NULL},
              out, sizeof(out));
    CHECK(strncmp(out, "CUC_E_NO_DEVICE|cuInit failed: CUDA_ERROR_NO_DEVICE", 51) == 0);
    CHECK(strstr(out, "CUDA_VISIBLE_DEVICES=\"abc\"") != NULL);

    /* The simulator's own settings: the message names the variable. */
    load_with((const char *const[]){"CUCORE_DRIVER=sim", "CUCORE_SIM_GPUS=abc", NULL},
              out, sizeof(out));
    CHECK(strncmp(out, "CUC_E_DRIVER|cuInit failed: CUDA_ERROR_INVALID_VALUE", 52) == 0);
    CHECK(strstr(out, "CUCORE_SIM_GPUS=\"abc\" is not a number of GPUs from 0 to 16") != NULL);

    if (!test_on_sim()) {
        load_with((const char *const[]){"CUCORE_DRIVER", NULL}, out, sizeof(out));
        CHECK(strncmp(out, "OK|libcuda.so.1|", 16) == 0);
    }
    FD_CHECK_NO_LEAK();
    return 0;
}
