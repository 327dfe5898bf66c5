/* `cucore demo`: a producer and a consumer process with reversed GPU
 * visibility share objects; every step prints what crossed and what each
 * side resolved it to. Exits non-zero on any mismatch.
 *
 * The consumer is this same binary, exec'd with `demo --consumer` and
 * CUDA_VISIBLE_DEVICES reversed; messages go over a socket pair as a
 * 4-byte length + the message bytes. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"

static int write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;

    while (len) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static int read_all(int fd, void *buf, size_t len)
{
    char *p = buf;

    while (len) {
        ssize_t n = read(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static int send_frame(int fd, const void *bytes, size_t len)
{
    uint32_t n = (uint32_t)len;

    if (write_all(fd, &n, sizeof(n)) || write_all(fd, bytes, len))
        return -1;
    return 0;
}

/* Reads one frame into a malloc'd buffer (capped: the peer is trusted
 * only as far as CUC_MSG_MAX_BYTES). */
static int recv_frame(int fd, void **bytes, size_t *len)
{
    uint32_t n;
    void *b;

    if (read_all(fd, &n, sizeof(n)) || n > CUC_MSG_MAX_BYTES)
        return -1;
    b = malloc(n ? n : 1);
    if (!b)
        return -1;
    if (read_all(fd, b, n)) {
        free(b);
        return -1;
    }
    *bytes = b;
    *len = n;
    return 0;
}

/* ---- consumer ---- */

static int consumer(int fd)
{
    void *bytes;
    size_t len, i;
    cuc_msg *m;
    char line[512];
    int rc;

    if (recv_frame(fd, &bytes, &len))
        return 1;
    rc = cuc_msg_from_bytes(bytes, len, &m);
    free(bytes);
    if (rc)
        return cli_fail("consumer: decode", rc);
    for (i = 0; i < cuc_msg_count(m); i++) {
        cuc_device *d;
        rc = cuc_msg_get_device(m, i, &d);
        if (rc)
            snprintf(line, sizeof(line), "ERR %s", cuc_errmsg());
        else
            snprintf(line, sizeof(line), "%d %s", cuc_device_ordinal(d),
                     cuc_device_uuid_string(d));
        if (send_frame(fd, line, strlen(line)))
            break;
    }
    cuc_msg_destroy(m);
    return 0;
}

/* ---- producer ---- */

/* The consumer's CUDA_VISIBLE_DEVICES: our devices in reverse, by index
 * when we see every GPU in physical order, else by UUID (the only form
 * that names the same GPUs whatever our own visibility is). */
static void reversed_visibility(int n, char *out, size_t outsz)
{
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    size_t len = 0;
    int i;

    out[0] = '\0';
    for (i = n - 1; i >= 0; i--) {
        cuc_device *d;
        if (cuc_device_get(i, &d))
            continue;
        if (!cvd && n > 1)
            len += (size_t)snprintf(out + len, outsz - len, "%s%d", len ? "," : "", i);
        else
            len += (size_t)snprintf(out + len, outsz - len, "%s%s", len ? "," : "",
                                    cuc_device_uuid_string(d));
        if (len >= outsz)
            break;
    }
}

static pid_t start_consumer(const char *self, const char *cvd, int fd)
{
    char fdarg[16];
    pid_t pid;

    snprintf(fdarg, sizeof(fdarg), "%d", fd);
    pid = fork();
    if (pid == 0) {
        fcntl(fd, F_SETFD, 0); /* the one fd the consumer inherits */
        setenv("CUDA_VISIBLE_DEVICES", cvd, 1);
        execl(self, self, "demo", "--consumer", fdarg, (char *)NULL);
        _exit(127);
    }
    return pid;
}

static int check_devices(int fd, int n)
{
    int i, bad = 0;

    for (i = 0; i < n; i++) {
        cuc_device *d;
        void *reply;
        size_t len;
        char text[512], uuid[CUC_UUID_STRLEN + 8];
        int ord = -1;

        if (cuc_device_get(i, &d) || recv_frame(fd, &reply, &len))
            return -1;
        snprintf(text, sizeof(text), "%.*s", (int)len, (char *)reply);
        free(reply);
        uuid[0] = '\0';
        if (sscanf(text, "%d %44s", &ord, uuid) == 2 &&
            strcmp(uuid, cuc_device_uuid_string(d)) == 0) {
            printf("  device: producer ordinal %d = %s -> consumer ordinal %d = %s  MATCH\n",
                   i, cuc_device_uuid_string(d), ord, uuid);
        } else {
            printf("  device: producer ordinal %d = %s -> consumer: %s  MISMATCH\n", i,
                   cuc_device_uuid_string(d), text);
            bad++;
        }
    }
    return bad;
}

static int send_devices(int fd, int n)
{
    void *bytes = NULL;
    size_t len = 0;
    cuc_msg *m;
    int i, rc;

    rc = cuc_msg_create(&m);
    for (i = 0; rc == 0 && i < n; i++) {
        cuc_device *d;
        rc = cuc_device_get(i, &d);
        if (rc == 0)
            rc = cuc_msg_add_device(m, d);
    }
    if (rc == 0)
        rc = cuc_msg_to_bytes(m, &bytes, &len);
    cuc_msg_destroy(m);
    if (rc)
        return cli_fail("producer: encode", rc);
    printf("  sent %d device record%s: %zu bytes, UUIDs only (no ordinals)\n", n,
           n == 1 ? "" : "s", len);
    rc = send_frame(fd, bytes, len);
    free(bytes);
    return rc ? 1 : 0;
}

/* No driver and no explicit choice: switch to the simulator. The driver
 * load is once per process, so re-exec with CUCORE_DRIVER=sim. */
static int fall_back_to_sim(const char *self, char **argv, int argc)
{
    char *args[16];
    int i, k = 0;

    fprintf(stdout, "cucore demo: no GPU driver here, switching to the simulated "
            "driver (%s)\n", cuc_errmsg());
    fflush(stdout);
    setenv("CUCORE_DRIVER", "sim", 1);
    args[k++] = (char *)self;
    args[k++] = "demo";
    for (i = 0; i < argc && k < 15; i++)
        args[k++] = argv[i];
    args[k] = NULL;
    execv(self, args);
    return cli_fail("re-exec with the simulator", CUC_E_IO);
}

static int producer(const char *self, int argc, char **argv)
{
    struct cuc_driver_info info;
    char cvd[4096];
    int sv[2], n = 0, bad, rc, st;
    pid_t pid;

    rc = cuc_driver_load(&info);
    if (rc == CUC_E_NO_DRIVER && !getenv("CUCORE_DRIVER"))
        return fall_back_to_sim(self, argv, argc);
    if (rc)
        return cli_fail("driver", rc);
    if (info.simulated)
        printf("cucore demo: using the SIMULATED driver (%s), no GPU involved\n", info.path);
    else
        printf("cucore demo: using the CUDA driver %s (version %d)\n", info.path, info.version);
    rc = cuc_device_count(&n);
    if (rc)
        return cli_fail("devices", rc);
    reversed_visibility(n, cvd, sizeof(cvd));
    printf("producer (pid %d): CUDA_VISIBLE_DEVICES=%s, %d device%s\n", (int)getpid(),
           getenv("CUDA_VISIBLE_DEVICES") ? getenv("CUDA_VISIBLE_DEVICES") : "(unset)", n,
           n == 1 ? "" : "s");
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        return cli_fail("socketpair", CUC_E_IO);
    pid = start_consumer(self, cvd, sv[1]);
    close(sv[1]);
    printf("consumer (pid %d): CUDA_VISIBLE_DEVICES=%s (reversed)\n", (int)pid, cvd);
    printf("step 1: devices by UUID\n");
    rc = send_devices(sv[0], n);
    bad = rc ? 1 : check_devices(sv[0], n);
    close(sv[0]);
    st = 0;
    waitpid(pid, &st, 0);
    if (bad || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        printf("demo FAILED: %d mismatch%s\n", bad, bad == 1 ? "" : "es");
        return 1;
    }
    printf("demo OK: every object meant the same GPU on both sides\n");
    return 0;
}

int cli_demo(int argc, char **argv)
{
    char self[4096];
    ssize_t k = readlink("/proc/self/exe", self, sizeof(self) - 1);

    if (k <= 0)
        return cli_fail("cannot find /proc/self/exe", CUC_E_IO);
    self[k] = '\0';
    if (argc >= 2 && !strcmp(argv[0], "--consumer")) {
        int fd = atoi(argv[1]);
        return consumer(fd);
    }
    return producer(self, argc, argv);
}
