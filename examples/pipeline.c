/* pipeline: one producer, many consumers, sharing GPU memory.
 *
 * The producer listens at a socket path and starts N consumer processes
 * (this program again, with --consumer), each with its own view of the
 * GPUs: consumer i sees the producer's devices rotated by i, by UUID, so
 * one GPU has a different ordinal in every process.
 *
 * First the producer sends every consumer one IPC memory pool per GPU,
 * once. A consumer imports each pool on its GPU with the pool's owner UUID
 * and keeps it: the buffers that arrive later find their pool by its id
 * among the pools imported here, so the pools travel before any buffer.
 *
 * Then it runs rounds. In each round it fills one buffer for every
 * consumer, on the GPU that consumer works on this round (consumer i,
 * round r: the producer's device (i + r) mod n), records on every GPU an
 * IPC event that marks "this round's writes on this GPU are done", and
 * sends every consumer one work item:
 *
 *     device   the GPU the item is for, by UUID
 *     event    that GPU's event
 *     buffer   the consumer's buffer of that GPU's pool (pool id + export
 *              data: bytes only, no fd)
 *
 * A consumer resolves the device, makes a stream of its own wait for the
 * event (that is how its reads are ordered after the producer's writes),
 * copies the buffer to host memory, checks every byte, frees the buffer,
 * which releases its lease, and answers with the device it used. The
 * producer checks every answer against what it sent, then starts the next
 * round.
 *
 * Buffers are reused: the producer keeps one buffer per consumer and GPU
 * and refills it when that pair comes round again, but only after the
 * consumer's lease on it has ended (cuc_buffer_lease_wait). The driver
 * requires every importer to have freed pool memory before the exporter
 * frees it, and overwriting a buffer a consumer still reads would be a
 * race of our own; the lease tells us both are safe.
 *
 * The rounds are lock-step on purpose: an IPC event is one object shared
 * by every process that opened it, so re-recording it while a consumer
 * still waits for the previous record would move that consumer's wait.
 * The producer records again only after every consumer has answered.
 *
 * Consumers keep the events they opened: getting an event this process
 * has opened before returns the same object without another driver call.
 *
 *     ./pipeline [CONSUMERS [ROUNDS]]       (defaults: 4 consumers, 8 rounds)
 *     CUCORE_DRIVER=sim ./pipeline 8 100    (no GPU needed)
 *
 * Exit status 0 when every buffer and every answer matched and every lease
 * ended, 1 otherwise.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* readlink, mkdtemp */
#endif
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cucore.h>

#define MAX_DEVICES 64
#define MAX_CONSUMERS 256
#define BUFFER_BYTES ((size_t)64 << 10)
#define TIMEOUT_MS 30000

/* Byte k of consumer i's buffer in round r: different for every consumer
 * and round, so a stale buffer or another consumer's is caught. */
static uint8_t pattern(int r, int i, size_t k)
{
    return (uint8_t)(k + (size_t)r * 31 + (size_t)i * 97 + (k >> 8));
}

static int fail(const char *who, const char *what, int rc)
{
    fprintf(stderr, "pipeline %s: %s: %s: %s\n", who, what, cuc_errname(rc), cuc_errmsg());
    return 1;
}

static int sys_fail(const char *what)
{
    fprintf(stderr, "pipeline: %s: %s\n", what, strerror(errno));
    return 1;
}

/* ---------------------------------------------------------- consumer -- */

struct consumer {
    const char *name;
    int index;
    cuc_pool *pools[MAX_DEVICES];   /* imported once, kept to the end */
    cuc_event *events[MAX_DEVICES]; /* opened events, by our ordinal */
    cuc_stream *streams[MAX_DEVICES];
    uint8_t *host;                  /* where a buffer is read back */
    long items;
    size_t bytes;
};

/* The first message: every pool. Answers with the device each pool was
 * imported on, so that the producer can check it is the pool's own GPU. */
static int take_pools(struct consumer *c, cuc_channel *ch, const cuc_msg *m)
{
    size_t n = cuc_msg_record_count(m);
    cuc_msg *answer;
    int rc = n <= MAX_DEVICES ? cuc_msg_create(&answer) : CUC_E_LIMIT;

    if (rc)
        return fail(c->name, "pools", rc);
    for (size_t d = 0; rc == 0 && d < n; d++) {
        /* An fd + pool id + owner UUID: imported on our GPU with that UUID
         * (CUC_E_NOT_VISIBLE, naming it, if we cannot see it). */
        rc = cuc_msg_get_pool(m, d, &c->pools[d]);
        if (rc == 0)
            rc = cuc_msg_add_device(answer, cuc_pool_device(c->pools[d]));
    }
    if (rc == 0)
        rc = cuc_channel_send(ch, answer);
    cuc_msg_destroy(answer);
    return rc ? fail(c->name, "importing the pools", rc) : 0;
}

/* Our stream on dev, ordered after the event of record 1. */
static int wait_for_producer(struct consumer *c, const cuc_msg *m, cuc_device *dev,
                             cuc_stream **s)
{
    int ord = cuc_device_ordinal(dev), rc;
    cuc_event *ev;

    rc = cuc_msg_get_event(m, 1, &ev);
    if (rc)
        return fail(c->name, "event record", rc);
    if (cuc_event_device(ev) != dev || ord >= MAX_DEVICES) {
        cuc_event_unref(ev);
        fprintf(stderr, "pipeline %s: the event is not on the item's device\n", c->name);
        return 1;
    }
    /* The first get opened the handle; later ones return that same event
     * as a new reference, which we drop, keeping the first. */
    if (c->events[ord])
        cuc_event_unref(ev);
    else
        c->events[ord] = ev;
    if (!c->streams[ord]) {
        rc = cuc_stream_create(dev, CUC_STREAM_NON_BLOCKING, 0, &c->streams[ord]);
        if (rc)
            return fail(c->name, "stream", rc);
    }
    rc = cuc_stream_wait_event(c->streams[ord], c->events[ord]);
    if (rc)
        return fail(c->name, "waiting for the event", rc);
    *s = c->streams[ord];
    return 0;
}

/* Reads the buffer back on s (after the producer's writes) and checks it
 * against this round's pattern. Returns mismatches. */
static int verify(struct consumer *c, cuc_buffer *b, cuc_stream *s)
{
    size_t n = cuc_buffer_size(b), wrong = 0;
    int rc;

    if (n != BUFFER_BYTES) {
        fprintf(stderr, "pipeline %s: MISMATCH: a buffer of %zu bytes\n", c->name, n);
        return 1;
    }
    rc = cuc_memcpy(c->host, cuc_buffer_ptr(b), n, s); /* waits for the copy */
    if (rc)
        return fail(c->name, "reading the buffer", rc);
    for (size_t k = 0; k < n; k++)
        wrong += c->host[k] != pattern((int)c->items, c->index, k);
    if (wrong) {
        fprintf(stderr, "pipeline %s: round %ld: MISMATCH: %zu of %zu bytes differ\n",
                c->name, c->items, wrong, n);
        return 1;
    }
    c->bytes += n;
    return 0;
}

/* One work item: [device, event, buffer]. Answers [device]. */
static int consume(struct consumer *c, cuc_channel *ch, const cuc_msg *m)
{
    cuc_device *dev;
    cuc_stream *s;
    cuc_buffer *b;
    cuc_msg *answer;
    int rc, bad;

    if (cuc_msg_record_count(m) != 3) {
        fprintf(stderr, "pipeline %s: an item of %zu records\n", c->name, cuc_msg_record_count(m));
        return 1;
    }
    rc = cuc_msg_get_device(m, 0, &dev);
    if (rc)
        return fail(c->name, "device record", rc);
    if (wait_for_producer(c, m, dev, &s))
        return 1;
    rc = cuc_msg_get_buffer(m, 2, &b); /* maps it from its pool, found by id */
    if (rc)
        return fail(c->name, "buffer record", rc);
    bad = cuc_buffer_device(b) != dev;
    if (bad)
        fprintf(stderr, "pipeline %s: MISMATCH: the buffer is not on the item's GPU\n", c->name);
    else
        bad = verify(c, b, s);
    /* Done with it: the free unmaps it once our reads on s are complete and
     * releases the producer's lease, which is what lets the producer refill
     * (or free) it. Keeping it would hold the producer's memory until we
     * closed the channel. */
    rc = cuc_buffer_unref_async(b, s);
    if (rc)
        return fail(c->name, "freeing the buffer", rc);
    if (bad)
        return 1;
    rc = cuc_msg_create(&answer);
    if (rc == 0)
        rc = cuc_msg_add_device(answer, dev);
    if (rc == 0)
        rc = cuc_channel_send(ch, answer);
    cuc_msg_destroy(answer);
    if (rc)
        return fail(c->name, "answer", rc);
    c->items++;
    return 0;
}

static int consumer_main(const char *path, const char *index)
{
    static char name[64];
    struct consumer c;
    cuc_channel *ch;
    cuc_msg *m;
    int rc, bad = 0;

    memset(&c, 0, sizeof(c));
    snprintf(name, sizeof(name), "consumer %s", index);
    c.name = name;
    c.index = atoi(index);
    c.host = malloc(BUFFER_BYTES);
    if (!c.host)
        return fail(c.name, "host memory", CUC_E_NOMEM);
    rc = cuc_channel_connect(path, TIMEOUT_MS, &ch);
    if (rc) {
        free(c.host);
        return fail(c.name, "connect", rc);
    }
    rc = cuc_channel_recv(ch, TIMEOUT_MS, &m);
    if (rc == 0) {
        bad = take_pools(&c, ch, m);
        cuc_msg_destroy(m);
    } else {
        bad = fail(c.name, "receiving the pools", rc);
    }
    while (!bad) {
        rc = cuc_channel_recv(ch, TIMEOUT_MS, &m);
        if (rc == CUC_E_PEER_CLOSED) /* the producer is done */
            break;
        if (rc) {
            bad = fail(c.name, "receive", rc);
            break;
        }
        bad = consume(&c, ch, m);
        cuc_msg_destroy(m);
    }
    cuc_channel_destroy(ch);
    for (int i = 0; i < MAX_DEVICES; i++) {
        cuc_stream_destroy(c.streams[i]);
        cuc_event_unref(c.events[i]);
        cuc_pool_unref(c.pools[i]);
    }
    free(c.host);
    printf("  %s: %ld items, every byte of %ld buffers verified (%zu KiB), pid %d\n", c.name,
           c.items, c.items, c.bytes >> 10, (int)getpid());
    return bad;
}

/* ---------------------------------------------------------- producer -- */

struct producer {
    int ndev, nconsumers, rounds;
    cuc_device *devs[MAX_DEVICES];
    cuc_pool *pools[MAX_DEVICES];   /* one IPC pool per GPU */
    cuc_event *events[MAX_DEVICES]; /* one IPC event per GPU */
    cuc_stream *streams[MAX_DEVICES];
    cuc_buffer *bufs[MAX_DEVICES][MAX_CONSUMERS]; /* by GPU and consumer, reused */
    int nbufs;
    uint8_t *host; /* where a buffer's bytes are made */
    pid_t pids[MAX_CONSUMERS];
    cuc_channel *chans[MAX_CONSUMERS]; /* by consumer index */
};

/* Consumer i's CUDA_VISIBLE_DEVICES: our devices rotated by i, by UUID. */
static int rotated_visibility(const struct producer *p, int i, char *out, size_t outsz)
{
    size_t len = (size_t)snprintf(out, outsz, "CUDA_VISIBLE_DEVICES=");

    for (int k = 0; k < p->ndev; k++) {
        const char *u = cuc_device_uuid_string(p->devs[(i + k) % p->ndev]);
        int w = snprintf(out + len, outsz - len, "%s%s", k ? "," : "", u);
        if (w < 0 || (size_t)w >= outsz - len)
            return -1;
        len += (size_t)w;
    }
    return 0;
}

extern char **environ;

/* fork + exec of this program as consumer i; the environment is built
 * before fork(), so the child only calls execve. */
static pid_t start_consumer(const struct producer *p, const char *self, const char *path, int i)
{
    static char cvd[64 * 64];
    char index[16];
    char *argv[] = {(char *)self, "--consumer", (char *)path, index, NULL};
    char **envp;
    size_t n = 0, k = 0;
    pid_t pid;

    if (rotated_visibility(p, i, cvd, sizeof(cvd)))
        return -1;
    snprintf(index, sizeof(index), "%d", i);
    while (environ[n])
        n++;
    envp = calloc(n + 2, sizeof(*envp));
    if (!envp)
        return -1;
    for (size_t e = 0; e < n; e++)
        if (strncmp(environ[e], "CUDA_VISIBLE_DEVICES=", 21) != 0)
            envp[k++] = environ[e];
    envp[k] = cvd;
    pid = fork();
    if (pid == 0) {
        execve(self, argv, envp);
        _exit(127);
    }
    free(envp);
    return pid;
}

/* Accepts the N consumers; the kernel's record of the peer's pid
 * (SO_PEERCRED) tells which is which. */
static int accept_all(struct producer *p, cuc_listener *l)
{
    for (int got = 0; got < p->nconsumers; got++) {
        cuc_channel *ch;
        pid_t pid = 0;
        int i, rc = cuc_listener_accept(l, TIMEOUT_MS, &ch);
        if (rc)
            return fail("producer", "accept", rc);
        cuc_channel_peer_pid(ch, &pid);
        for (i = 0; i < p->nconsumers && p->pids[i] != pid; i++)
            ;
        if (i == p->nconsumers || p->chans[i]) {
            fprintf(stderr, "pipeline producer: pid %d is not one of our consumers\n", (int)pid);
            cuc_channel_destroy(ch);
            got--;
            continue;
        }
        p->chans[i] = ch;
    }
    return 0;
}

/* Every pool, once, to every consumer; each answers with the devices it
 * imported them on, which must be the pools' own GPUs. */
static int send_pools(struct producer *p)
{
    cuc_msg *m;
    int rc = cuc_msg_create(&m), bad = 0;

    for (int d = 0; rc == 0 && d < p->ndev; d++)
        rc = cuc_msg_add_pool(m, p->pools[d]); /* a duplicate of the pool's fd */
    for (int i = 0; rc == 0 && i < p->nconsumers; i++)
        rc = cuc_channel_send(p->chans[i], m);
    cuc_msg_destroy(m);
    if (rc)
        return fail("producer", "sending the pools", rc);
    for (int i = 0; i < p->nconsumers && !bad; i++) {
        cuc_msg *answer;
        rc = cuc_channel_recv(p->chans[i], TIMEOUT_MS, &answer);
        if (rc)
            return fail("producer", "receiving a pool answer", rc);
        bad = cuc_msg_record_count(answer) != (size_t)p->ndev;
        for (int d = 0; !bad && d < p->ndev; d++) {
            cuc_device *back;
            bad = cuc_msg_get_device(answer, (size_t)d, &back) || back != p->devs[d];
        }
        cuc_msg_destroy(answer);
        if (bad)
            printf("  consumer %d: MISMATCH: a pool was not imported on its own GPU\n", i);
    }
    if (!bad)
        printf("pipeline: every consumer imported our %d pool%s, each on the GPU it belongs to\n",
               p->ndev, p->ndev == 1 ? "" : "s");
    fflush(stdout); /* before the consumers' lines */
    return bad;
}

/* Consumer i's buffer on GPU d, filled with round r's pattern on d's
 * stream. A buffer sent in an earlier round is refilled only once the
 * consumer's lease on it has ended. */
static int fill(struct producer *p, int i, int d, int r)
{
    cuc_buffer **b = &p->bufs[d][i];
    int rc;

    if (*b) {
        /* Lock-step rounds make this immediate (the consumer releases
         * before it answers), but a pipeline that runs ahead must wait
         * here. ch is pumped while waiting. */
        rc = cuc_buffer_lease_wait(*b, p->chans[i], 0, TIMEOUT_MS);
    } else {
        /* Stream-ordered: usable by the work queued on d's stream next. */
        rc = cuc_buffer_alloc_async(p->pools[d], BUFFER_BYTES, p->streams[d], b);
        p->nbufs += rc == 0;
    }
    for (size_t k = 0; rc == 0 && k < BUFFER_BYTES; k++)
        p->host[k] = pattern(r, i, k);
    /* From pageable host memory the copy returns once host has been read
     * (so it can be refilled for the next buffer), but the GPU may still
     * be writing the buffer: the round's event marks the end. */
    if (rc == 0)
        rc = cuc_memcpy_async(cuc_buffer_ptr(*b), p->host, BUFFER_BYTES, p->streams[d]);
    return rc ? fail("producer", "filling a buffer", rc) : 0;
}

static int send_item(struct producer *p, int i, int d)
{
    cuc_msg *m;
    int rc = cuc_msg_create(&m);

    if (rc == 0)
        rc = cuc_msg_add_device(m, p->devs[d]);
    if (rc == 0)
        rc = cuc_msg_add_event(m, p->events[d]);
    if (rc == 0)
        rc = cuc_msg_add_buffer(m, p->bufs[d][i]);
    if (rc == 0)
        rc = cuc_channel_send(p->chans[i], m); /* starts the buffer's lease */
    cuc_msg_destroy(m); /* drops the message's reference to the buffer */
    return rc ? fail("producer", "send", rc) : 0;
}

static int check_answer(struct producer *p, int i, int d, int r)
{
    cuc_device *back;
    cuc_msg *m;
    int rc = cuc_channel_recv(p->chans[i], TIMEOUT_MS, &m);

    if (rc)
        return fail("producer", "receive", rc);
    rc = cuc_msg_record_count(m) == 1 ? cuc_msg_get_device(m, 0, &back) : CUC_E_BADMSG;
    cuc_msg_destroy(m);
    if (rc)
        return fail("producer", "answer", rc);
    if (back != p->devs[d]) { /* singletons: compare pointers */
        printf("  round %d, consumer %d: MISMATCH: used %s, sent %s\n", r, i,
               cuc_device_uuid_string(back), cuc_device_uuid_string(p->devs[d]));
        return 1;
    }
    return 0;
}

static int run_rounds(struct producer *p)
{
    for (int r = 0; r < p->rounds; r++) {
        for (int i = 0; i < p->nconsumers; i++)
            if (fill(p, i, (i + r) % p->ndev, r))
                return 1;
        /* After every write of the round on each GPU: the consumers wait
         * for this, not for our stream, which they cannot see. */
        for (int d = 0; d < p->ndev; d++) {
            int rc = cuc_event_record(p->events[d], p->streams[d]);
            if (rc)
                return fail("producer", "record", rc);
        }
        for (int i = 0; i < p->nconsumers; i++)
            if (send_item(p, i, (i + r) % p->ndev))
                return 1;
        for (int i = 0; i < p->nconsumers; i++)
            if (check_answer(p, i, (i + r) % p->ndev, r))
                return 1;
    }
    return 0;
}

/* Leases not yet ended on any pool's buffers: 0 once every consumer has
 * released every buffer it got. The consumers are still connected when we
 * count (they leave when we close), so a 0 is their releases, not the
 * ends that a closed channel brings. */
static size_t leases_left(const struct producer *p)
{
    size_t total = 0;

    for (int d = 0; d < p->ndev; d++) {
        size_t n = 0;
        cuc_pool_lease_count(p->pools[d], &n);
        total += n;
    }
    return total;
}

static int open_devices(struct producer *p)
{
    /* CUC_POOL_IPC: only an exportable pool can be sent, and only buffers
     * of such a pool. */
    struct cuc_pool_props props = {CUC_POOL_DEVICE, CUC_POOL_IPC, 0};
    int rc = cuc_device_count(&p->ndev);

    if (rc)
        return fail("producer", "devices (no GPU? try CUCORE_DRIVER=sim)", rc);
    if (p->ndev > MAX_DEVICES)
        p->ndev = MAX_DEVICES;
    p->host = malloc(BUFFER_BYTES);
    if (!p->host)
        return fail("producer", "host memory", CUC_E_NOMEM);
    for (int d = 0; d < p->ndev; d++) {
        rc = cuc_device_get(d, &p->devs[d]);
        if (rc == 0)
            rc = cuc_pool_create(p->devs[d], &props, &p->pools[d]);
        if (rc == 0)
            rc = cuc_event_create(p->devs[d], CUC_EVENT_IPC, &p->events[d]);
        if (rc == 0)
            rc = cuc_stream_create(p->devs[d], CUC_STREAM_NON_BLOCKING, 0, &p->streams[d]);
        if (rc)
            return fail("producer", "device setup", rc);
    }
    return 0;
}

/* Once the consumers are gone (no lease left: closing a channel ends its
 * leases), our frees run at once. */
static void release_devices(struct producer *p)
{
    for (int d = 0; d < MAX_DEVICES; d++) {
        for (int i = 0; i < MAX_CONSUMERS; i++)
            cuc_buffer_unref_async(p->bufs[d][i], p->streams[d]);
        cuc_pool_unref(p->pools[d]);
        cuc_stream_destroy(p->streams[d]);
        cuc_event_unref(p->events[d]);
    }
    free(p->host);
}

/* Closes every channel (each consumer then sees CUC_E_PEER_CLOSED and
 * exits) and reaps the consumers; returns how many failed. */
static int finish_consumers(struct producer *p, int started)
{
    int bad = 0;

    for (int i = 0; i < started; i++)
        cuc_channel_destroy(p->chans[i]);
    for (int i = 0; i < started; i++) {
        int st = 0;
        while (waitpid(p->pids[i], &st, 0) < 0 && errno == EINTR)
            ;
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            printf("  consumer %d (pid %d) failed: status 0x%x\n", i, (int)p->pids[i], st);
            bad++;
        }
    }
    return bad;
}

static int producer_main(int nconsumers, int rounds)
{
    static struct producer p;
    char self[4096], dir[] = "/tmp/cucore-pipeline-XXXXXX", path[64];
    cuc_listener *l = NULL;
    int started = 0, bad = 1, rc;
    size_t leases;
    ssize_t len;

    p.nconsumers = nconsumers;
    p.rounds = rounds;
    if (open_devices(&p))
        goto free_devices;
    len = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (len <= 0) {
        sys_fail("/proc/self/exe");
        goto free_devices;
    }
    self[len] = '\0';
    /* A private directory (mode 0700) for the socket. */
    if (!mkdtemp(dir)) {
        sys_fail("mkdtemp");
        goto free_devices;
    }
    snprintf(path, sizeof(path), "%s/sock", dir);
    rc = cuc_channel_listen(path, &l);
    if (rc) {
        fail("producer", "listen", rc);
        goto remove_dir;
    }
    printf("pipeline: %d device%s, %d consumers, %d rounds, at %s\n", p.ndev,
           p.ndev == 1 ? "" : "s", nconsumers, rounds, path);
    fflush(stdout);
    for (; started < nconsumers; started++) {
        p.pids[started] = start_consumer(&p, self, path, started);
        if (p.pids[started] < 0) {
            sys_fail("starting a consumer");
            break;
        }
    }
    if (started == nconsumers && accept_all(&p, l) == 0 && send_pools(&p) == 0)
        bad = run_rounds(&p);
    if (!bad) {
        leases = leases_left(&p);
        printf("pipeline: %d buffers for %d items, each refilled only after its lease ended; "
               "%zu leases left\n", p.nbufs, nconsumers * rounds, leases);
        bad = leases != 0;
        fflush(stdout);
    }
    /* Before reaping: a consumer still waiting to be accepted then sees
     * the listener go instead of waiting for its timeout. */
    cuc_listener_destroy(l);
    bad += finish_consumers(&p, started);
remove_dir:
    rmdir(dir);
free_devices:
    release_devices(&p);
    if (!bad)
        printf("pipeline OK: %d items, every buffer verified by its consumer on the GPU "
               "it was sent for\n", nconsumers * rounds);
    else
        printf("pipeline FAILED\n");
    return bad ? 1 : 0;
}

int main(int argc, char **argv)
{
    int nconsumers = 4, rounds = 8;

    if (argc == 4 && strcmp(argv[1], "--consumer") == 0)
        return consumer_main(argv[2], argv[3]);
    if (argc > 1)
        nconsumers = atoi(argv[1]);
    if (argc > 2)
        rounds = atoi(argv[2]);
    if (argc > 3 || nconsumers < 1 || nconsumers > MAX_CONSUMERS || rounds < 1) {
        fprintf(stderr, "usage: pipeline [CONSUMERS (1..%d) [ROUNDS]]\n", MAX_CONSUMERS);
        return 2;
    }
    return producer_main(nconsumers, rounds);
}
