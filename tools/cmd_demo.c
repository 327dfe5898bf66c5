/* `cucore demo`: a producer and a consumer process with reversed GPU
 * visibility share real objects (demo_producer.c, demo_consumer.c); every
 * step prints what crossed and what each side resolved it to. Exits
 * non-zero on any mismatch.
 *
 * The consumer is this same binary, exec'd as `demo --consumer FD` with
 * CUDA_VISIBLE_DEVICES reversed and one end of a channel (a socket pair)
 * as its only inherited fd. */
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "demo.h"

void demo_say(const char *side, const char *fmt, ...)
{
    va_list ap;

    printf("  %-8s ", side);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout);
}

/* The consumer's CUDA_VISIBLE_DEVICES: our devices in reverse, by index
 * when we see every GPU in physical order, else by UUID (the only form
 * that names the same GPUs whatever our own visibility is; on one GPU the
 * reversed list is the UUID of the one GPU). */
static void reversed_visibility(int n, char *out, size_t outsz)
{
    size_t len = 0;
    int by_index = !getenv("CUDA_VISIBLE_DEVICES") && n > 1;

    out[0] = '\0';
    for (int i = n - 1; i >= 0 && len < outsz; i--) {
        cuc_device *d;
        if (cuc_device_get(i, &d))
            continue;
        if (by_index)
            len += (size_t)snprintf(out + len, outsz - len, "%s%d", len ? "," : "", i);
        else
            len += (size_t)snprintf(out + len, outsz - len, "%s%s", len ? "," : "",
                                    cuc_device_uuid_string(d));
    }
}

static pid_t start_consumer(const char *self, const char *cvd, int fd)
{
    char fdarg[16];
    pid_t pid;

    snprintf(fdarg, sizeof(fdarg), "%d", fd);
    fflush(stdout);
    pid = fork();
    if (pid == 0) {
        fcntl(fd, F_SETFD, 0); /* the one fd the consumer inherits */
        setenv("CUDA_VISIBLE_DEVICES", cvd, 1);
        execl(self, self, "demo", "--consumer", fdarg, (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* No driver and no explicit choice: switch to the simulator. The driver
 * load is once per process, so re-exec with CUCORE_DRIVER=sim. */
static int fall_back_to_sim(const char *self)
{
    printf("cucore demo: no GPU driver here (%s); switching to the simulated driver\n",
           cuc_errmsg());
    fflush(stdout);
    setenv("CUCORE_DRIVER", "sim", 1);
    execl(self, self, "demo", (char *)NULL);
    return cli_fail("re-exec with the simulator", CUC_E_IO);
}

static int say_driver(const char *self, int *simulated)
{
    struct cuc_driver_info info;
    int rc = cuc_driver_load(&info);

    if (rc == CUC_E_NO_DRIVER && !getenv("CUCORE_DRIVER"))
        return fall_back_to_sim(self);
    if (rc)
        return cli_fail("driver", rc);
    if (info.simulated)
        printf("cucore demo: using the SIMULATED driver (%s), no GPU involved\n", info.path);
    else
        printf("cucore demo: using the CUDA driver %s (version %d)\n", info.path,
               info.version);
    *simulated = info.simulated;
    return 0;
}

static int producer(const char *self)
{
    cuc_channel *ch, *theirs;
    char cvd[4096];
    int n, bad, rc, st = 0, simulated = 0;
    pid_t pid;

    if (say_driver(self, &simulated))
        return 1;
    rc = cuc_device_count(&n);
    if (rc)
        return cli_fail("devices", rc);
    reversed_visibility(n, cvd, sizeof(cvd));
    printf("producer (pid %d): CUDA_VISIBLE_DEVICES=%s, %d device%s\n", (int)getpid(),
           getenv("CUDA_VISIBLE_DEVICES") ? getenv("CUDA_VISIBLE_DEVICES") : "(unset)", n,
           n == 1 ? "" : "s");
    rc = cuc_channel_pair(&ch, &theirs);
    if (rc)
        return cli_fail("channel", rc);
    pid = start_consumer(self, cvd, cuc_channel_fd(theirs));
    cuc_channel_destroy(theirs);
    printf("consumer (pid %d): CUDA_VISIBLE_DEVICES=%s (reversed)\n", (int)pid, cvd);
    bad = pid < 0 ? 1 : demo_producer_steps(ch, simulated);
    cuc_channel_destroy(ch);
    if (pid > 0)
        waitpid(pid, &st, 0);
    if (bad || pid < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        printf("demo FAILED: %d mismatch%s, consumer exit status %d\n", bad,
               bad == 1 ? "" : "es", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
        return 1;
    }
    printf("demo OK: every object meant the same physical thing on both sides\n");
    return 0;
}

const char cli_demo_usage[] =
    "usage: cucore demo\n"
    "A producer and a consumer process (this command again, with\n"
    "CUDA_VISIBLE_DEVICES reversed) share devices, a default stream, an IPC pool\n"
    "and its buffers, an IPC event and a kernel over a channel; each step prints\n"
    "what crossed and what each side resolved it to. Exit 1 on any mismatch.\n"
    "With no GPU driver it switches to the simulated one and says so.\n";

int cli_demo(int argc, char **argv)
{
    char self[4096];
    ssize_t k;
    int fd;

    /* demo --consumer FD: the consumer, as the producer starts it. */
    if (argc >= 1 && !strcmp(argv[0], "--consumer")) {
        if (argc != 2 || cli_parse_ordinal(argv[1], &fd))
            return cli_usage_error("demo", cli_demo_usage, "--consumer needs the "
                                   "channel's fd, got \"%s\"", argc > 1 ? argv[1] : "");
        return demo_consumer(fd);
    }
    if (argc > 0)
        return cli_usage_error("demo", cli_demo_usage, "unknown argument \"%s\"", argv[0]);
    k = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (k <= 0)
        return cli_fail("cannot find /proc/self/exe", CUC_E_IO);
    self[k] = '\0';
    return producer(self);
}
