/* Driver loading: a missing library, one without cuGetProcAddress, one that
 * lacks an entry point — each a clear CUC_E_NO_DRIVER, never a crash. Each
 * case runs in its own exec'd child (loading happens once per process). */
#include <dlfcn.h>
#include <sys/stat.h>

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

static void copy_file(const char *from, const char *to, mode_t mode)
{
    char buf[65536];
    int in = open(from, O_RDONLY | O_CLOEXEC);
    int out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    ssize_t n;

    CHECK(in >= 0 && out >= 0);
    while ((n = read(in, buf, sizeof(buf))) > 0)
        CHECK(write(out, buf, (size_t)n) == n);
    CHECK(n == 0);
    close(in);
    CHECK(close(out) == 0);
}

/* CUCORE_DRIVER=sim from a program that linked libcucore.a (this test:
 * the CLI links the shared library, as a user's program does), copied to
 * DIR/bin: no simulator next to it nor in DIR/lib is an error
 * naming both places; one in DIR/lib (the bindir-to-libdir path) is found
 * and named by its path. */
static void test_sim_lookup(void)
{
    char dir[] = "/tmp/cuc_drvload_XXXXXX", bin[64], lib[64], cli[96], sim[96];
    char cmd[256], out[4096], want[512];
    const char *sh[] = {"/bin/sh", "-c", cmd, NULL};
    const char *env[] = {"CUCORE_DRIVER=sim", "LD_LIBRARY_PATH", NULL};
    void *h;

    CHECK(mkdtemp(dir) != NULL);
    snprintf(bin, sizeof(bin), "%s/bin", dir);
    snprintf(lib, sizeof(lib), "%s/lib", dir);
    snprintf(cli, sizeof(cli), "%s/test_driver_load", bin);
    snprintf(sim, sizeof(sim), "%s/libcucore-sim.so", lib);
    CHECK(mkdir(bin, 0700) == 0);
    copy_file(test_self_path(), cli, 0700);
    snprintf(cmd, sizeof(cmd), "%s --child load 2>&1", cli);
    /* Unless the loader finds one (an install in /usr/local/lib, say). */
    h = dlopen("libcucore-sim.so", RTLD_LAZY | RTLD_LOCAL);
    if (h) {
        dlclose(h);
        fprintf(stderr, "note: the loader finds a libcucore-sim.so; not checking the "
                "message when there is none\n");
    } else {
        CHECK(run_capture(sh, env, out, sizeof(out)) == 0);
        CHECK(strncmp(out, "CUC_E_NO_DRIVER|", 16) == 0);
        snprintf(want, sizeof(want), "cannot load the simulated driver: neither "
                 "%s/libcucore-sim.so nor %s/../lib/libcucore-sim.so is there", bin, bin);
        if (!strstr(out, want)) {
            fprintf(stderr, "wanted \"%s\" in:\n%s\n", want, out);
            exit(1);
        }
    }
    CHECK(mkdir(lib, 0700) == 0);
    copy_file(CUC_SIM_PATH, sim, 0600);
    CHECK(run_capture(sh, env, out, sizeof(out)) == 0);
    snprintf(want, sizeof(want), "OK|%s|13000|1", sim);
    if (!strstr(out, want)) {
        fprintf(stderr, "wanted \"%s\" in:\n%s\n", want, out);
        exit(1);
    }
    CHECK(unlink(sim) == 0 && unlink(cli) == 0);
    CHECK(rmdir(lib) == 0 && rmdir(bin) == 0 && rmdir(dir) == 0);
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
    /* The newest pinned ABI version (driver_syms.h), also in cucore --help. */
    CHECK(strstr(out, "needs a CUDA 12.8 or newer driver") != NULL);

    snprintf(want, sizeof(want), "CUCORE_DRIVER=%s", CUC_SIM_PATH);
    load_with((const char *const[]){want, "CUCORE_SIM_HIDE=cuMemCreate", NULL}, out,
              sizeof(out));
    CHECK(strncmp(out, "CUC_E_NO_DRIVER|", 16) == 0);
    CHECK(strstr(out, "lacks cuMemCreate") != NULL);
    CHECK(strstr(out, "needs a CUDA 12.8 or newer driver") != NULL);

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

    test_sim_lookup();

    if (!test_on_sim()) {
        load_with((const char *const[]){"CUCORE_DRIVER", NULL}, out, sizeof(out));
        CHECK(strncmp(out, "OK|libcuda.so.1|", 16) == 0);
    }
    FD_CHECK_NO_LEAK();
    return 0;
}
