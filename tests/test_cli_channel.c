/* `cucore serve` / `cucore connect`: a device named by ordinal in a process
 * with CUDA_VISIBLE_DEVICES=2,3 arrives as the same physical GPU (ordinal
 * 2 in the server, which sees all four), and an fd arrives as an fd. A raw
 * peer's message that does not decode is reported and serve goes on to the
 * next message (exit 0); after a framing error, which leaves the channel
 * unusable, serve exits 1 saying so. */
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "cucore.h"
#include "check.h"
#include "frame/frame.h"
#include "wire/records.h"

static pid_t start_serve(const char *path, int *out_fd)
{
    int p[2];
    pid_t pid;

    CHECK(pipe(p) == 0);
    pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        dup2(p[1], 1);
        dup2(p[1], 2); /* its complaints too */
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

/* A raw peer of the serve at path: connects (retrying while it starts). */
static int raw_connect(const char *path)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    int fd, tries;

    CHECK(strlen(path) < sizeof(a.sun_path));
    memcpy(a.sun_path, path, strlen(path) + 1);
    for (tries = 0; tries < 500; tries++) {
        fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        CHECK(fd >= 0);
        if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0)
            return fd;
        close(fd);
        usleep(10000);
    }
    fprintf(stderr, "cannot connect to %s\n", path);
    exit(1);
}

/* Sends frame seq of a one-frame message of len bytes; a zeroed header
 * (no magic) when broken. What send() returned. */
static ssize_t frame_send(int fd, uint32_t seq, const void *data, size_t len, int broken)
{
    struct cuc__frame f = {seq, 0, 1, (uint32_t)len, 0, (uint32_t)len, 0};
    uint8_t buf[CUC__FRAME_HDR + 256];

    CHECK(len <= 256);
    cuc__frame_write(buf, &f);
    if (broken)
        memset(buf, 0, CUC__FRAME_HDR);
    memcpy(buf + CUC__FRAME_HDR, data, len);
    return send(fd, buf, CUC__FRAME_HDR + len, MSG_NOSIGNAL);
}

static void raw_frame(int fd, uint32_t seq, const void *data, size_t len, int broken)
{
    CHECK(frame_send(fd, seq, data, len, broken) == (ssize_t)(CUC__FRAME_HDR + len));
}

/* Runs a serve, sends it what role says as a raw peer; its output and exit
 * status. */
static int serve_raw(const char *role, char *out, size_t n)
{
    char dir[] = "/tmp/cuc_cli_raw_XXXXXX", path[256];
    static const char garbage[] = "garbage that is no cucore message";
    cuc_device *d;
    cuc_msg *m;
    void *good;
    size_t len;
    pid_t pid;
    int rd, fd, st;

    CHECK_OK(cuc_device_get(0, &d));
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_device(m, d));
    CHECK_OK(cuc_msg_to_bytes(m, &good, &len));
    cuc_msg_destroy(m);
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof(path), "%s/sock", dir);
    pid = start_serve(path, &rd);
    fd = raw_connect(path);
    if (!strcmp(role, "bad_content")) { /* frames sound, content not a message */
        raw_frame(fd, 0, garbage, sizeof(garbage), 0);
        raw_frame(fd, 1, good, len, 0);
        raw_frame(fd, 2, garbage, 10, 0);
        raw_frame(fd, 3, good, len, 0);
    } else { /* a frame without its magic, then a good message */
        raw_frame(fd, 0, garbage, sizeof(garbage), 1);
        /* serve may already have given up on the channel and closed it */
        (void)frame_send(fd, 1, good, len, 0);
    }
    close(fd);
    free(good);
    read_all(rd, out, n);
    st = wait_child(pid);
    fprintf(stderr, "%s", out);
    unlink(path);
    CHECK(rmdir(dir) == 0);
    return st;
}

static void test_serve_goes_on(void)
{
    char out[8192];

    CHECK(serve_raw("bad_content", out, sizeof(out)) == 0);
    CHECK(strstr(out, "message 0 rejected: ") != NULL);
    CHECK(strstr(out, "(CUC_E_BADMSG)") != NULL);
    CHECK(strstr(out, "message 1: 1 record, 0 fds") != NULL);
    CHECK(strstr(out, "message 2 rejected: ") != NULL);
    CHECK(strstr(out, "message 3: 1 record, 0 fds") != NULL);
    CHECK(strstr(out, "peer closed after 4 messages (2 rejected)") != NULL);

    CHECK(serve_raw("broken_frame", out, sizeof(out)) == 1);
    CHECK(strstr(out, "message 0 rejected: ") != NULL);
    CHECK(strstr(out, "message 1:") == NULL); /* nothing after a framing error */
    CHECK(strstr(out, "serve: the channel is unusable after that error") != NULL);
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
    test_serve_goes_on();
    FD_CHECK_NO_LEAK();
    return test_finish();
}
