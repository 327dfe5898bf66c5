/* pipeline: one producer, many consumers.
 *
 * The producer listens at a socket path and starts N consumer processes
 * (this program again, with --consumer), each with its own view of the
 * GPUs: consumer i sees the producer's devices rotated by i, so one GPU
 * has a different ordinal in every process. The producer then runs rounds.
 * In each round it records, on every device, an IPC event that marks "this
 * round's work on this GPU is done", and sends every consumer one work
 * item:
 *
 *     device   the GPU the item is for (consumer i, round r: the producer's
 *              device (i + r) mod n), by UUID
 *     event    that GPU's event
 *
 * A consumer resolves the device, makes a stream of its own wait for the
 * event (that is how a consumer's work is ordered after the producer's),
 * and answers with the device it used. The producer checks every answer
 * against what it sent, then starts the next round.
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
 * Exit status 0 when every answer matched, 1 otherwise.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* readlink, mkdtemp */
#endif
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cucore.h>

#define MAX_DEVICES 64
#define MAX_CONSUMERS 256
#define TIMEOUT_MS 30000

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
    cuc_event *events[MAX_DEVICES]; /* opened events, by our ordinal */
    cuc_stream *streams[MAX_DEVICES];
    long items;
};

/* One work item: [device, event]. Answers [device]. */
static int consume(struct consumer *c, cuc_channel *ch, const cuc_msg *m)
{
    cuc_device *dev;
    cuc_event *ev;
    cuc_msg *answer;
    int ord, rc;

    rc = cuc_msg_get_device(m, 0, &dev);
    if (rc)
        return fail(c->name, "device record", rc);
    rc = cuc_msg_get_event(m, 1, &ev);
    if (rc)
        return fail(c->name, "event record", rc);
    ord = cuc_device_ordinal(dev);
    if (cuc_event_device(ev) != dev || ord >= MAX_DEVICES) {
        cuc_event_destroy(ev);
        fprintf(stderr, "pipeline %s: the event is not on the item's device\n", c->name);
        return 1;
    }
    /* The first get opened the handle; later ones return that same event
     * as a new reference, which we drop, keeping the first. */
    if (c->events[ord])
        cuc_event_destroy(ev);
    else
        c->events[ord] = ev;
    if (!c->streams[ord]) {
        rc = cuc_stream_create(dev, CUC_STREAM_NON_BLOCKING, 0, &c->streams[ord]);
        if (rc)
            return fail(c->name, "stream", rc);
    }
    rc = cuc_stream_wait_event(c->streams[ord], c->events[ord]);
    /* ... work that needs the producer's round done goes on the stream here;
     * the answer waits for it to complete ... */
    if (rc == 0)
        rc = cuc_stream_synchronize(c->streams[ord]);
    if (rc)
        return fail(c->name, "waiting for the event", rc);
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
    int rc, bad = 0;

    memset(&c, 0, sizeof(c));
    snprintf(name, sizeof(name), "consumer %s", index);
    c.name = name;
    rc = cuc_channel_connect(path, TIMEOUT_MS, &ch);
    if (rc)
        return fail(c.name, "connect", rc);
    for (;;) {
        cuc_msg *m;
        rc = cuc_channel_recv(ch, TIMEOUT_MS, &m);
        if (rc == CUC_E_PEER_CLOSED) /* the producer is done */
            break;
        if (rc) {
            bad = fail(c.name, "receive", rc);
            break;
        }
        bad = consume(&c, ch, m);
        cuc_msg_destroy(m);
        if (bad)
            break;
    }
    cuc_channel_close(ch);
    for (int i = 0; i < MAX_DEVICES; i++) {
        cuc_stream_destroy(c.streams[i]);
        cuc_event_destroy(c.events[i]);
    }
    printf("  %s (pid %d): %ld items\n", c.name, (int)getpid(), c.items);
    return bad;
}

/* ---------------------------------------------------------- producer -- */

struct producer {
    int ndev, nconsumers, rounds;
    cuc_device *devs[MAX_DEVICES];
    cuc_event *events[MAX_DEVICES]; /* one IPC event per device */
    cuc_stream *streams[MAX_DEVICES];
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
            cuc_channel_close(ch);
            got--;
            continue;
        }
        p->chans[i] = ch;
    }
    return 0;
}

static int send_item(struct producer *p, int i, int d)
{
    cuc_msg *m;
    int rc = cuc_msg_create(&m);

    if (rc == 0)
        rc = cuc_msg_add_device(m, p->devs[d]);
    if (rc == 0)
        rc = cuc_msg_add_event(m, p->events[d]);

    /* ---- POOL BUFFERS GO HERE (issue #6) ----
     * Once cucore's memory pools land (cucore/pool.h, cucore/memory.h), a
     * work item carries the buffer the round's work wrote (its IPC pool is
     * sent to each consumer once, before the first round). Not written
     * yet: the pool API is still being built. */

    if (rc == 0)
        rc = cuc_channel_send(p->chans[i], m);
    cuc_msg_destroy(m);
    return rc ? fail("producer", "send", rc) : 0;
}

static int check_answer(struct producer *p, int i, int d, int r)
{
    cuc_device *back;
    cuc_msg *m;
    int rc = cuc_channel_recv(p->chans[i], TIMEOUT_MS, &m);

    if (rc)
        return fail("producer", "receive", rc);
    rc = cuc_msg_count(m) == 1 ? cuc_msg_get_device(m, 0, &back) : CUC_E_BADMSG;
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
        /* The round's work would be queued on each device's stream here;
         * the event marks its end. */
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

static int open_devices(struct producer *p)
{
    int rc = cuc_device_count(&p->ndev);

    if (rc)
        return fail("producer", "devices (no GPU? try CUCORE_DRIVER=sim)", rc);
    if (p->ndev > MAX_DEVICES)
        p->ndev = MAX_DEVICES;
    for (int d = 0; d < p->ndev; d++) {
        rc = cuc_device_get(d, &p->devs[d]);
        if (rc == 0)
            rc = cuc_event_create(p->devs[d], CUC_EVENT_IPC, &p->events[d]);
        if (rc == 0)
            rc = cuc_stream_create(p->devs[d], CUC_STREAM_NON_BLOCKING, 0, &p->streams[d]);
        if (rc)
            return fail("producer", "device setup", rc);
    }
    return 0;
}

/* Closes every channel (each consumer then sees CUC_E_PEER_CLOSED and
 * exits) and reaps the consumers; returns how many failed. */
static int finish_consumers(struct producer *p, int started)
{
    int bad = 0;

    for (int i = 0; i < started; i++)
        cuc_channel_close(p->chans[i]);
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
    if (started == nconsumers && accept_all(&p, l) == 0)
        bad = run_rounds(&p);
    /* Before reaping: a consumer still waiting to be accepted then sees
     * the listener go instead of waiting for its timeout. */
    cuc_listener_close(l);
    bad += finish_consumers(&p, started);
remove_dir:
    rmdir(dir);
free_devices:
    for (int d = 0; d < MAX_DEVICES; d++) {
        cuc_stream_destroy(p.streams[d]);
        cuc_event_destroy(p.events[d]);
    }
    if (!bad)
        printf("pipeline OK: %d items, every answer on the GPU it was sent for\n",
               nconsumers * rounds);
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
