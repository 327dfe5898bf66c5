/* `cucore serve` / `cucore connect`: a device named by ordinal in a process
 * with CUDA_VISIBLE_DEVICES=2,3 arrives as the same physical GPU (ordinal
 * 2 in the server, which sees all four), and an fd arrives as an fd. */
#include <sys/stat.h>

#include "cucore.h"
#include "check.h"

static pid_t start_serve(const char *path, int *out_fd)
{
    int p[2];
    pid_t pid;

    CHECK(pipe(p) == 0);
    pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        dup2(p[1], 1);
        close(p[0]);
        close(p[1]);
        unsetenv("CUDA_VISIBLE_DEVICES");
        execl(CUC_CLI_PATH, CUC_CLI_PATH, "serve", path, (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    *out_fd = p[0];
    return pid;
}

static void read_all(int fd, char *out, size_t n)
{
    size_t len = 0;
    ssize_t k;

    while (len + 1 < n && (k = read(fd, out + len, n - 1 - len)) > 0)
        len += (size_t)k;
    out[len] = '\0';
    close(fd);
}

int main(void)
{
    char dir[] = "/tmp/cuc_cli_chan_XXXXXX", path[256], out[8192], sent[1024];
    const char *argv[] = {CUC_CLI_PATH, "connect", path, "device", "0", "--fd",
                          CUC_CLI_PATH, NULL};
    const char *env[] = {"CUDA_VISIBLE_DEVICES=2,3", NULL};
    char want[128];
    cuc_device *d;
    pid_t pid;
    int n, fd;

    CHECK_OK(cuc_device_count(&n));
    if (n < 4)
        SKIP("needs 4 devices (CUCORE_SIM_GPUS=4); %d visible", n);
    FD_BASELINE();
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof(path), "%s/sock", dir);
    pid = start_serve(path, &fd);
    CHECK(run_capture(argv, env, sent, sizeof(sent)) == 0); /* retries until serve listens */
    CHECK(strstr(sent, "sent 1 message: 2 records, 1 fd") != NULL);
    read_all(fd, out, sizeof(out));
    CHECK(wait_child(pid) == 0);
    fprintf(stderr, "%s", out);
    CHECK_OK(cuc_device_get(2, &d));
    snprintf(want, sizeof(want), "record 0: device %s (ordinal 2 here", cuc_device_uuid_string(d));
    CHECK(strstr(out, "message 0: 2 records, 1 fd") != NULL);
    CHECK(strstr(out, want) != NULL);
    CHECK(strstr(out, "record 1: fd tag 1 (regular file)") != NULL);
    CHECK(strstr(out, "peer closed after 1 message") != NULL);
    {
        struct stat st;
        CHECK(stat(path, &st) < 0); /* serve removed its socket */
    }
    CHECK(rmdir(dir) == 0);
    FD_CHECK_NO_LEAK();
    return test_finish();
}
