/* `cucore pack` | `cucore inspect`: the device packed as ordinal 0 shows up
 * at its ordinal under another CUDA_VISIBLE_DEVICES; a GPU the inspector
 * cannot see gives the not-visible text (exit 1: it did not resolve);
 * streams, launch configs, kernels and events; --json; malformed input and
 * bad arguments. */
#include <stdio.h>

#include "cucore.h"
#include "check.h"
#include "ptx_kernels.h"

static int sh(const char *cmd, char *out, size_t n)
{
    const char *argv[] = {"/bin/sh", "-c", cmd, NULL};

    return run_capture(argv, NULL, out, n);
}

/* Exit status of `cucore pack device 0` with stdout on a terminal. */
static int pack_to_terminal(void)
{
    int master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC), st;
    pid_t pid;

    CHECK(master >= 0 && grantpt(master) == 0 && unlockpt(master) == 0);
    pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        int slave = open(ptsname(master), O_RDWR | O_NOCTTY);
        if (slave < 0 || dup2(slave, 1) < 0)
            _exit(126);
        execl(CUC_CLI_PATH, CUC_CLI_PATH, "pack", "device", "0", (char *)NULL);
        _exit(127);
    }
    st = wait_child(pid);
    close(master);
    return st;
}

static void want(const char *out, const char *s)
{
    if (!strstr(out, s)) {
        fprintf(stderr, "output lacks \"%s\":\n%s\n", s, out);
        exit(1);
    }
}

int main(void)
{
    char cmd[2048], out[16384], ptx_path[256];
    cuc_device *d0, *d1;
    int n;
    FILE *f;

    CHECK_OK(cuc_device_count(&n));
    CHECK_OK(cuc_device_get(0, &d0));
    d1 = d0;
    if (n > 1)
        CHECK_OK(cuc_device_get(1, &d1));
    FD_BASELINE();

    /* The acceptance case: ordinal 0 here is ordinal 1 under "3,0" (with
     * two or three GPUs "1,0"; one GPU has no other order). */
    snprintf(cmd, sizeof(cmd), "%s pack device 0 | CUDA_VISIBLE_DEVICES=%s %s inspect -",
             CUC_CLI_PATH, n >= 4 ? "3,0" : n >= 2 ? "1,0" : "0", CUC_CLI_PATH);
    CHECK(sh(cmd, out, sizeof(out)) == 0);
    want(out, cuc_device_uuid_string(d0));
    want(out, n >= 2 ? "local ordinal 1" : "local ordinal 0");

    /* Not visible to the inspector: the error text, exit 1. */
    snprintf(cmd, sizeof(cmd), "%s pack device 0 | CUDA_VISIBLE_DEVICES=%s %s inspect -",
             CUC_CLI_PATH, n >= 2 ? "1" : "", CUC_CLI_PATH);
    CHECK(sh(cmd, out, sizeof(out)) == 1);
    want(out, "CUC_E_NOT_VISIBLE");
    want(out, cuc_device_uuid_string(d0));
    want(out, "is not visible in this process");

    /* JSON, through a file. */
    snprintf(cmd, sizeof(cmd), "f=$(mktemp) && %s pack device 0 > $f && "
             "CUDA_VISIBLE_DEVICES=%s %s inspect $f --json; rc=$?; rm -f $f; exit $rc",
             CUC_CLI_PATH, n >= 4 ? "2,0" : n >= 2 ? "1,0" : "0", CUC_CLI_PATH);
    CHECK(sh(cmd, out, sizeof(out)) == 0);
    snprintf(cmd, sizeof(cmd), "\"uuid\":\"%s\",\"ordinal\":%d,\"resolved\":true",
             cuc_device_uuid_string(d0), n >= 2 ? 1 : 0);
    want(out, cmd);
    want(out, "\"malformed\":false");

    /* Streams resolve by UUID too (device 1, or 0 alone: at local 1 under
     * "3,1", at local 0 under "1,0"). */
    snprintf(cmd, sizeof(cmd), "%s pack stream per-thread %d | CUDA_VISIBLE_DEVICES=%s "
             "%s inspect -", CUC_CLI_PATH, n > 1 ? 1 : 0,
             n >= 4 ? "3,1" : n >= 2 ? "1,0" : "0", CUC_CLI_PATH);
    CHECK(sh(cmd, out, sizeof(out)) == 0);
    want(out, "kind=per-thread");
    want(out, cuc_device_uuid_string(d1));
    want(out, n >= 4 ? "per-thread default stream of local device 1"
                     : "per-thread default stream of local device 0");

    /* Launch config: the values. pack --json describes it on stderr. */
    snprintf(cmd, sizeof(cmd), "%s pack launch-config 8,4 32,2,1 4096 --json 2>&1 >/dev/null",
             CUC_CLI_PATH);
    CHECK(sh(cmd, out, sizeof(out)) == 0);
    want(out, "\"packed\":\"launch_config\",\"grid\":[8,4,1],\"block\":[32,2,1],"
              "\"shared_mem\":4096");
    snprintf(cmd, sizeof(cmd), "%s pack launch-config 8,4 32,2,1 4096 | %s inspect -",
             CUC_CLI_PATH, CUC_CLI_PATH);
    CHECK(sh(cmd, out, sizeof(out)) == 0);
    want(out, "grid 8x4x1, block 32x2x1, cluster 1x1x1, shared_mem 4096, cooperative 0");
    snprintf(cmd, sizeof(cmd), "%s pack launch-config 0 32 2>&1 >/dev/null", CUC_CLI_PATH);
    CHECK(sh(cmd, out, sizeof(out)) == 1);
    want(out, "grid.x is 0");

    /* Kernel: name, kind, size, hash, loadable. */
    snprintf(ptx_path, sizeof(ptx_path), "/tmp/cuc_test_cli_%d.ptx", (int)getpid());
    f = fopen(ptx_path, "w");
    CHECK(f && fputs(ptx_twice, f) >= 0 && fclose(f) == 0);
    snprintf(cmd, sizeof(cmd), "%s pack kernel %s twice | %s inspect -", CUC_CLI_PATH,
             ptx_path, CUC_CLI_PATH);
    CHECK(sh(cmd, out, sizeof(out)) == 0);
    want(out, "name=twice kind=ptx");
    snprintf(cmd, sizeof(cmd), "image_bytes=%zu", strlen(ptx_twice));
    want(out, cmd);
    want(out, "sha256=");
    want(out, "loadable here");
    snprintf(cmd, sizeof(cmd), "%s pack kernel %s nope 2>&1 >/dev/null", CUC_CLI_PATH, ptx_path);
    CHECK(sh(cmd, out, sizeof(out)) == 1);
    want(out, "\"nope\"");
    snprintf(cmd, sizeof(cmd), "%s pack kernel %s twice --kind cubin 2>&1 >/dev/null",
             CUC_CLI_PATH, ptx_path);
    CHECK(sh(cmd, out, sizeof(out)) == 1);
    want(out, "ELF magic");
    unlink(ptx_path);

    /* Event: the lifetime note; --hold keeps the packer alive for the
     * reader. */
    snprintf(cmd, sizeof(cmd), "%s pack event 0 2>&1 >/dev/null", CUC_CLI_PATH);
    CHECK(sh(cmd, out, sizeof(out)) == 0);
    want(out, "valid only while the process that created it lives");
    snprintf(cmd, sizeof(cmd), "%s pack event 0 --hold 1 2>/dev/null | %s inspect -",
             CUC_CLI_PATH, CUC_CLI_PATH);
    CHECK(sh(cmd, out, sizeof(out)) == 0);
    want(out, "event uuid=");
    want(out, "an IPC event opened on local device 0");

    /* Malformed input: a message, exit 1. */
    snprintf(cmd, sizeof(cmd), "echo garbage | %s inspect - 2>&1", CUC_CLI_PATH);
    CHECK(sh(cmd, out, sizeof(out)) == 1);
    want(out, "not a valid cucore message");
    want(out, "CUC_E_BADMSG");
    snprintf(cmd, sizeof(cmd), "%s pack device 0 | head -c 40 | %s inspect - 2>&1",
             CUC_CLI_PATH, CUC_CLI_PATH);
    CHECK(sh(cmd, out, sizeof(out)) == 1);
    want(out, "CUC_E_BADMSG");
    snprintf(cmd, sizeof(cmd), "%s inspect /nonexistent/file 2>&1", CUC_CLI_PATH);
    CHECK(sh(cmd, out, sizeof(out)) == 1);
    want(out, "cannot open");
    /* Binary never goes to a terminal. */
    CHECK(pack_to_terminal() == 1);
    /* Bad arguments: usage, exit 2. */
    snprintf(cmd, sizeof(cmd), "%s pack stream sideways 0 >/dev/null 2>&1", CUC_CLI_PATH);
    CHECK(sh(cmd, out, sizeof(out)) == 2);
    snprintf(cmd, sizeof(cmd), "%s pack >/dev/null 2>&1", CUC_CLI_PATH);
    CHECK(sh(cmd, out, sizeof(out)) == 2);
    snprintf(cmd, sizeof(cmd), "%s inspect >/dev/null 2>&1", CUC_CLI_PATH);
    CHECK(sh(cmd, out, sizeof(out)) == 2);
    snprintf(cmd, sizeof(cmd), "%s pack device 99 2>&1 >/dev/null", CUC_CLI_PATH);
    CHECK(sh(cmd, out, sizeof(out)) == 1);
    want(out, "out of range");
    FD_CHECK_NO_LEAK();
    return test_finish();
}
