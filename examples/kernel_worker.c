/* kernel_worker: send a kernel to a worker process and have it run there.
 *
 * The parent loads a kernel from the PTX text below, starts a worker (this
 * same program, exec'd with --worker) and gives it one end of a channel
 * pair. Each job it sends is one message of three records:
 *
 *     device         which GPU to run on, as its UUID (never an ordinal)
 *     kernel         the image bytes, their kind and SHA-256, the symbol name
 *     launch config  grid and block (a config carries no stream: the worker
 *                    launches on a stream of its own)
 *
 * The worker sees the GPUs in the reverse order (CUDA_VISIBLE_DEVICES), so
 * its ordinals differ from the parent's; the UUID still names the same GPU.
 * It launches the kernel into a buffer of a memory pool of its own
 * (cuc_buffer_alloc_async: no raw driver calls), copies the result out with
 * cuc_memcpy, and answers with the device it ran on and a memfd holding its
 * report: what the kernel wrote, and how many images its kernel cache has
 * loaded. The same kernel is sent twice: the second job
 * finds the image in the worker's cache (same hash) and loads nothing.
 *
 * On the simulated driver (CUCORE_DRIVER=sim, no GPU needed) every step is
 * real except the execution of device code: the simulator checks the
 * launch (stream, kernel handle, configuration) and answers
 * CUDA_ERROR_NOT_SUPPORTED, which cucore returns as CUC_E_NOT_SUPPORTED;
 * the worker reports that, and the parent accepts it only on the
 * simulator. On a GPU the kernel runs and the parent checks every value.
 *
 *     cc -o kernel_worker kernel_worker.c $(pkg-config --cflags --libs cucore)
 *     ./kernel_worker                    # on a GPU machine
 *     CUCORE_DRIVER=sim ./kernel_worker  # anywhere
 *
 * Exit status: 0 when both jobs came back right, 1 otherwise.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memfd_create */
#endif
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cucore.h>

/* twice(u32 *out, u32 n): out[i] = 2 * i for every i < n. PTX for sm_70,
 * which the driver compiles for whatever GPU it runs on. */
static const char twice_ptx[] =
    ".version 7.0\n"
    ".target sm_70\n"
    ".address_size 64\n"
    "\n"
    ".visible .entry twice(.param .u64 out, .param .u32 n)\n"
    "{\n"
    "  .reg .u32 %r<6>;\n"
    "  .reg .u64 %rd<4>;\n"
    "  .reg .pred %p;\n"
    "  ld.param.u64 %rd1, [out];\n"
    "  ld.param.u32 %r1, [n];\n"
    "  mov.u32 %r2, %ctaid.x;\n"
    "  mov.u32 %r3, %ntid.x;\n"
    "  mov.u32 %r4, %tid.x;\n"
    "  mad.lo.u32 %r5, %r2, %r3, %r4;\n"
    "  setp.ge.u32 %p, %r5, %r1;\n"
    "  @%p bra DONE;\n"
    "  cvta.to.global.u64 %rd1, %rd1;\n"
    "  mul.wide.u32 %rd2, %r5, 4;\n"
    "  add.u64 %rd3, %rd1, %rd2;\n"
    "  shl.b32 %r1, %r5, 1;\n"
    "  st.global.u32 [%rd3], %r1;\n"
    "DONE:\n"
    "  ret;\n"
    "}\n";

#define THREADS_PER_BLOCK 64u
#define MAX_THREADS (1u << 20) /* what the worker accepts to compute */
#define TIMEOUT_MS 30000

/* What the worker writes into the memfd it sends back: this header, then
 * n uint32_t values when status is REPORT_RAN. Both sides are this program
 * on one machine, so a plain struct is a fine format. */
enum { REPORT_RAN = 1, REPORT_SIMULATED = 2, REPORT_FAILED = 3 };
struct report {
    uint32_t status;
    uint32_t n;
    uint64_t loads; /* cuc_kernel_cache_stats() after the job */
    uint64_t hits;
    char error[256]; /* cuc_errmsg() when status is REPORT_FAILED */
};

static int fail(const char *what, int rc)
{
    fprintf(stderr, "kernel_worker: %s: %s: %s\n", what, cuc_errname(rc), cuc_errmsg());
    return 1;
}

static int sys_fail(const char *what)
{
    fprintf(stderr, "kernel_worker: %s: %s\n", what, strerror(errno));
    return 1;
}

/* ------------------------------------------------------------ worker -- */

static void note_error(struct report *rep, int rc)
{
    snprintf(rep->error, sizeof(rep->error), "%s: %s", cuc_errname(rc), cuc_errmsg());
}

/* The kernel's output: a buffer of a local pool on the job's GPU (no
 * CUC_POOL_IPC: nothing here leaves this process; the words travel back in
 * the report). A pool per job keeps the example short; a long-lived worker
 * would keep one pool per GPU and let it recycle memory. */
static int alloc_output(cuc_stream *s, size_t bytes, cuc_pool **pool, cuc_buffer **buf)
{
    struct cuc_pool_props props = {CUC_POOL_DEVICE, 0, 0};
    int rc = cuc_pool_create(cuc_stream_device(s), &props, pool);

    if (rc)
        return rc;
    /* Stream-ordered: the memory is usable by work queued on s after this,
     * the launch included. */
    rc = cuc_buffer_alloc_async(*pool, bytes, s, buf);
    if (rc)
        cuc_pool_unref(*pool);
    return rc;
}

/* Launches the kernel on s into a buffer of n words and, on a GPU, copies
 * them to out. Returns 0 or the status of the failed step (in rep). */
static int launch(int simulated, cuc_stream *s, const cuc_launch_config *cfg, cuc_kernel *k,
                  uint32_t n, uint32_t *out, struct report *rep)
{
    size_t bytes = (size_t)n * sizeof(uint32_t);
    cuc_pool *pool;
    cuc_buffer *buf;
    void *dptr;
    void *args[2] = {&dptr, &n}; /* one pointer per kernel parameter */
    size_t sizes[2] = {sizeof(dptr), sizeof(n)}; /* checked against the kernel's */
    int rc;

    rc = alloc_output(s, bytes, &pool, &buf);
    if (rc) {
        note_error(rep, rc);
        return rc;
    }
    dptr = cuc_buffer_ptr(buf);
    rc = cuc_launch_checked(s, cfg, k, args, sizes, 2);
    if (simulated) {
        /* The simulator validates the launch but runs no device code: it
         * must refuse it, with CUC_E_NOT_SUPPORTED. */
        if (rc == CUC_E_NOT_SUPPORTED) {
            rc = 0;
        } else {
            snprintf(rep->error, sizeof(rep->error), "simulated launch: %s: %s",
                     cuc_errname(rc), rc ? cuc_errmsg() : "succeeded, which it cannot");
            rc = rc ? rc : CUC_E_INVALID;
        }
    } else {
        /* Ordered after the launch on s; cuc_memcpy waits for it. */
        if (rc == 0)
            rc = cuc_memcpy(out, dptr, bytes, s);
        if (rc)
            note_error(rep, rc);
    }
    /* Queued on s after the copy; the pool goes with its last buffer. */
    cuc_buffer_unref_async(buf, s);
    cuc_pool_unref(pool);
    return rc;
}

/* Launches the job's kernel; fills rep and out. */
static void run_job(int simulated, cuc_device *dev, const cuc_launch_config *cfg,
                    cuc_kernel *k, uint32_t *out, struct report *rep)
{
    uint32_t n = cfg->grid[0] * cfg->block[0];
    cuc_stream *s;
    int rc;

    rep->n = n;
    rep->status = REPORT_FAILED;
    /* A stream of the worker's own: streams never cross processes. */
    rc = cuc_stream_create(dev, CUC_STREAM_NON_BLOCKING, 0, &s);
    if (rc) {
        note_error(rep, rc);
        return;
    }
    if (launch(simulated, s, cfg, k, n, out, rep) == 0)
        rep->status = simulated ? REPORT_SIMULATED : REPORT_RAN;
    cuc_stream_destroy(s);
}

/* The answer: the device the job ran on, and the report in a memfd. The
 * message duplicates the fd, so ours is closed here either way. */
static int send_report(cuc_channel *ch, cuc_device *dev, const struct report *rep,
                       const uint32_t *out, uint32_t job)
{
    size_t words = rep->status == REPORT_RAN ? rep->n : 0;
    int fd = memfd_create("kernel_worker-report", MFD_CLOEXEC);
    cuc_msg *m = NULL;
    int rc;

    if (fd < 0)
        return sys_fail("memfd_create");
    if (write(fd, rep, sizeof(*rep)) != (ssize_t)sizeof(*rep) ||
        (words && write(fd, out, words * sizeof(*out)) != (ssize_t)(words * sizeof(*out)))) {
        sys_fail("writing the report");
        close(fd);
        return 1;
    }
    rc = cuc_msg_create(&m);
    if (rc == 0)
        rc = cuc_msg_add_device(m, dev);
    if (rc == 0)
        rc = cuc_msg_add_fd(m, fd, job);
    if (rc == 0)
        rc = cuc_channel_send(ch, m);
    cuc_msg_destroy(m);
    close(fd);
    return rc ? fail("sending the report", rc) : 0;
}

/* One job: resolve the records, launch, answer. *keep holds the previous
 * job's kernel: keeping a kernel keeps its image loaded, and that is what
 * makes the next job with the same image a cache hit. */
static int worker_job(int simulated, cuc_channel *ch, cuc_msg *m,
                      uint32_t job, cuc_kernel **keep)
{
    struct report rep;
    cuc_launch_config cfg;
    cuc_device *dev;
    cuc_kernel *k;
    uint32_t *out;
    size_t loads, hits;
    int rc;

    /* By UUID: the local device with that UUID, whatever its ordinal here;
     * CUC_E_NOT_VISIBLE (naming the UUID) if this process cannot see it. */
    rc = cuc_msg_get_device(m, 0, &dev);
    if (rc)
        return fail("device record", rc);
    /* Checks the image against its hash, then loads it unless an image
     * with that hash is loaded already. */
    rc = cuc_msg_get_kernel(m, 1, &k);
    if (rc)
        return fail("kernel record", rc);
    cuc_kernel_destroy(*keep);
    *keep = k;
    rc = cuc_msg_get_launch_config(m, 2, &cfg);
    if (rc)
        return fail("launch config record", rc);
    /* The config is valid CUDA, but this worker computes one word per
     * thread of a 1-D grid: refuse what it would not have memory for. */
    if ((uint64_t)cfg.grid[0] * cfg.block[0] > MAX_THREADS || cfg.grid[1] * cfg.grid[2] != 1 ||
        cfg.block[1] * cfg.block[2] != 1) {
        fprintf(stderr, "kernel_worker: job %u: want a 1-D launch of at most %u threads\n",
                job, MAX_THREADS);
        return 1;
    }
    memset(&rep, 0, sizeof(rep));
    out = calloc((size_t)cfg.grid[0] * cfg.block[0], sizeof(*out));
    if (!out)
        return fail("out of memory", CUC_E_NOMEM);
    run_job(simulated, dev, &cfg, k, out, &rep);
    cuc_kernel_cache_stats(&loads, &hits);
    rep.loads = loads;
    rep.hits = hits;
    printf("  worker: job %u on its ordinal %d (%s): %s, %zu image load%s, %zu cache hit%s\n",
           job, cuc_device_ordinal(dev), cuc_device_uuid_string(dev),
           rep.status == REPORT_RAN ? "ran" :
           rep.status == REPORT_SIMULATED ? "launch checked (simulator: no device code runs)" :
           "FAILED", loads, loads == 1 ? "" : "s", hits, hits == 1 ? "" : "s");
    fflush(stdout);
    rc = send_report(ch, dev, &rep, out, job);
    free(out);
    return rc;
}

static int worker(int fd)
{
    struct cuc_driver_info drv;
    cuc_kernel *keep = NULL;
    cuc_channel *ch;
    uint32_t job = 0;
    int rc, bad = 0;

    /* The channel takes the fd over, whatever happens. */
    rc = cuc_channel_from_fd(fd, &ch);
    if (rc)
        return fail("channel from inherited fd", rc);
    rc = cuc_driver_load(&drv);
    if (rc) {
        cuc_channel_destroy(ch);
        return fail("driver", rc);
    }
    for (;;) {
        cuc_msg *m;
        rc = cuc_channel_recv(ch, TIMEOUT_MS, &m);
        if (rc == CUC_E_PEER_CLOSED) /* the parent is done */
            break;
        if (rc) {
            bad = fail("receive", rc);
            break;
        }
        bad = worker_job(drv.simulated, ch, m, job++, &keep);
        cuc_msg_destroy(m);
        if (bad)
            break;
    }
    cuc_kernel_destroy(keep);
    cuc_channel_destroy(ch);
    return bad;
}

/* ------------------------------------------------------------ parent -- */

/* The worker's CUDA_VISIBLE_DEVICES: our devices in reverse, by UUID (an
 * index would mean a different GPU if our own visibility is narrowed). */
static int reversed_visibility(int n, char *out, size_t outsz)
{
    size_t len = 0;

    out[0] = '\0';
    for (int i = n - 1; i >= 0; i--) {
        cuc_device *d;
        int k;
        if (cuc_device_get(i, &d))
            return -1;
        k = snprintf(out + len, outsz - len, "%s%s", len ? "," : "", cuc_device_uuid_string(d));
        if (k < 0 || (size_t)k >= outsz - len)
            return -1;
        len += (size_t)k;
    }
    return 0;
}

extern char **environ;

/* fork + exec of this program as the worker. Everything the child needs is
 * prepared before fork(): after it, only fcntl and execve run. */
static pid_t start_worker(const char *self, const char *cvd, cuc_channel *theirs)
{
    static char cvd_var[8192];
    char fdarg[16];
    char *argv[] = {(char *)self, "--worker", fdarg, NULL};
    char **envp;
    size_t n = 0, k = 0;
    int fd = cuc_channel_fd(theirs);
    pid_t pid;

    while (environ[n])
        n++;
    envp = calloc(n + 2, sizeof(*envp));
    if (!envp)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "CUDA_VISIBLE_DEVICES=", 21) != 0)
            envp[k++] = environ[i];
    snprintf(cvd_var, sizeof(cvd_var), "CUDA_VISIBLE_DEVICES=%s", cvd);
    envp[k++] = cvd_var;
    snprintf(fdarg, sizeof(fdarg), "%d", fd);
    pid = fork();
    if (pid == 0) {
        /* The channel's fd is close-on-exec; this is the one the worker
         * inherits. */
        fcntl(fd, F_SETFD, 0);
        execve(self, argv, envp);
        _exit(127);
    }
    free(envp);
    return pid;
}

static int send_job(cuc_channel *ch, cuc_device *dev, cuc_kernel *k, uint32_t n)
{
    cuc_launch_config cfg;
    cuc_msg *m;
    int rc;

    cuc_launch_config_init(&cfg); /* 1,1,1 everywhere, no shared memory */
    cfg.grid[0] = n / THREADS_PER_BLOCK;
    cfg.block[0] = THREADS_PER_BLOCK;
    rc = cuc_msg_create(&m);
    if (rc)
        return fail("message", rc);
    rc = cuc_msg_add_device(m, dev);
    if (rc == 0)
        rc = cuc_msg_add_kernel(m, k);
    if (rc == 0)
        rc = cuc_msg_add_launch_config(m, &cfg); /* checked here, as the receiver will */
    if (rc == 0)
        rc = cuc_channel_send(ch, m);
    cuc_msg_destroy(m);
    return rc ? fail("sending a job", rc) : 0;
}

/* Reads the worker's report from the fd it sent; 0 if it is well formed. */
static int read_report(int fd, struct report *rep, uint32_t **out)
{
    struct stat st;
    size_t words;

    if (fstat(fd, &st) || (size_t)st.st_size < sizeof(*rep) ||
        pread(fd, rep, sizeof(*rep), 0) != (ssize_t)sizeof(*rep))
        return -1;
    rep->error[sizeof(rep->error) - 1] = '\0';
    words = rep->status == REPORT_RAN ? rep->n : 0;
    if ((size_t)st.st_size != sizeof(*rep) + words * sizeof(uint32_t))
        return -1;
    *out = calloc(words ? words : 1, sizeof(uint32_t));
    if (!*out)
        return -1;
    if (words && pread(fd, *out, words * sizeof(uint32_t), sizeof(*rep)) !=
                     (ssize_t)(words * sizeof(uint32_t))) {
        free(*out);
        return -1;
    }
    return 0;
}

/* The worker's answer to job `job`: same device (the very same singleton
 * here), the expected counts, every value right. Returns mismatches. */
static int check_answer(cuc_channel *ch, cuc_device *dev, uint32_t n, uint32_t job,
                        int simulated)
{
    struct report rep;
    cuc_device *back;
    uint32_t *out = NULL, tag, i;
    int fd = -1, bad = 0, rc;
    cuc_msg *m;

    rc = cuc_channel_recv(ch, TIMEOUT_MS, &m);
    if (rc)
        return fail("receiving the report", rc);
    if (cuc_msg_record_count(m) != 2 || cuc_msg_get_device(m, 0, &back) ||
        cuc_msg_take_fd(m, 1, &fd, &tag) || tag != job) {
        fprintf(stderr, "kernel_worker: job %u: the answer is not [device, fd]\n", job);
        bad = 1;
        goto destroy;
    }
    if (read_report(fd, &rep, &out)) {
        fprintf(stderr, "kernel_worker: job %u: malformed report\n", job);
        bad = 1;
        goto destroy;
    }
    if (back != dev) {
        printf("  job %u MISMATCH: ran on %s, sent to %s\n", job,
               cuc_device_uuid_string(back), cuc_device_uuid_string(dev));
        bad++;
    }
    /* Job 0 loads the image; job 1 carries the same image: a cache hit. */
    if (rep.loads != 1 || rep.hits != job) {
        printf("  job %u MISMATCH: worker reports %llu loads and %llu hits, want 1 and %u\n",
               job, (unsigned long long)rep.loads, (unsigned long long)rep.hits, job);
        bad++;
    }
    if (rep.n != n || rep.status != (simulated ? REPORT_SIMULATED : REPORT_RAN)) {
        printf("  job %u MISMATCH: status %u for %u threads%s%s\n", job, rep.status, rep.n,
               rep.error[0] ? ": " : "", rep.error);
        bad++;
    }
    for (i = 0; rep.status == REPORT_RAN && i < rep.n; i++)
        if (out[i] != 2 * i) {
            printf("  job %u MISMATCH: out[%u] = %u, want %u\n", job, i, out[i], 2 * i);
            bad++;
            break;
        }
    if (!bad)
        printf("  job %u OK: %u threads, %s\n", job, n,
               simulated ? "launch accepted and refused as the simulator must"
                         : "every out[i] == 2*i");
destroy:
    free(out);
    if (fd >= 0)
        close(fd);
    cuc_msg_destroy(m);
    return bad;
}

static int parent(void)
{
    static const uint32_t job_threads[2] = {256, 4096};
    struct cuc_driver_info drv;
    cuc_channel *mine, *theirs;
    char self[4096], cvd[8192];
    cuc_device *dev;
    cuc_kernel *k;
    int n, rc, bad = 0, st = 0;
    ssize_t len;
    pid_t pid;

    rc = cuc_driver_load(&drv);
    if (rc)
        return fail("driver (no GPU? try CUCORE_DRIVER=sim)", rc);
    rc = cuc_device_count(&n);
    if (rc)
        return fail("devices", rc);
    /* The last device: in the worker, which sees them reversed, it is 0. */
    rc = cuc_device_get(n - 1, &dev);
    if (rc)
        return fail("device", rc);
    len = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (len <= 0)
        return sys_fail("/proc/self/exe");
    if (reversed_visibility(n, cvd, sizeof(cvd)))
        return fail("listing our devices", CUC_E_LIMIT);
    self[len] = '\0';
    printf("kernel_worker: %s driver %s; job device: our ordinal %d = %s\n",
           drv.simulated ? "SIMULATED" : "CUDA", drv.path, n - 1, cuc_device_uuid_string(dev));
    fflush(stdout); /* our lines before the worker's, which shares stdout */

    /* Loaded here through the same cache; the image's bytes travel, not
     * the handle, so the worker loads it in its own process. */
    rc = cuc_kernel_load(CUC_IMAGE_PTX, twice_ptx, sizeof(twice_ptx), "twice", &k);
    if (rc)
        return fail("loading the kernel", rc);
    rc = cuc_channel_pair(&mine, &theirs);
    if (rc) {
        cuc_kernel_destroy(k);
        return fail("channel pair", rc);
    }
    pid = start_worker(self, cvd, theirs);
    cuc_channel_destroy(theirs); /* the worker has its copy */
    if (pid < 0) {
        sys_fail("starting the worker");
        cuc_channel_destroy(mine);
        cuc_kernel_destroy(k);
        return 1;
    }
    for (uint32_t job = 0; job < 2 && !bad; job++) {
        bad = send_job(mine, dev, k, job_threads[job]);
        if (!bad)
            bad = check_answer(mine, dev, job_threads[job], job, drv.simulated);
    }
    cuc_channel_destroy(mine); /* the worker sees CUC_E_PEER_CLOSED and exits */
    cuc_kernel_destroy(k);
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        printf("kernel_worker: the worker failed (status 0x%x)\n", st);
        bad++;
    }
    printf("kernel_worker %s\n", bad ? "FAILED" : "OK");
    return bad ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--worker") == 0)
        return worker(atoi(argv[2]));
    return parent();
}
