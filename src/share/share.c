/* The share point's public face (cucore/share.h) and its life: start,
 * the thread and its poll loop, stop, the fork child's copies of its
 * sockets, the stop at exit; the socket directory and its stale sockets.
 * The work is serve.c's (the exporter's side) and attach.c's (the
 * importer's), which this file calls and which never call it. */
#include "share/point.h"
#include "base/error.h"
#include "memory/settle.h"
#include "os/clock.h"
#include "os/dir.h"
#include "os/fd.h"
#include "os/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define DEFAULT_HOLD_MS 60000
#define DEFAULT_TIMEOUT_MS 60000
/* How often the thread looks at half-sent messages when one is pending. */
#define HALF_SENT_CHECK_MS 1000
/* How long the thread leaves a listener alone that it could not accept
 * from (no fd free). */
#define ACCEPT_BACKOFF_MS 100
/* How soon the thread looks again while frees wait for their event (the
 * thread's timer slack made small enough for it). */
#define SETTLE_POLL_NS 10000
#define SETTLE_TIMER_SLACK_NS 1000

static struct cuc__share point = {.lock = PTHREAD_MUTEX_INITIALIZER, .wake = -1};
static pthread_once_t hooks_once = PTHREAD_ONCE_INIT;

/* ---- options ---- */

void cuc_share_opts_init(cuc_share_opts *o)
{
    if (o)
        memset(o, 0, sizeof(*o));
}

/* A positive number of ms from the environment, or dflt when unset. */
static int env_ms(const char *name, int dflt, int *out)
{
    const char *v = getenv(name);
    char *end;
    long n;

    if (!v || !*v) {
        *out = dflt;
        return 0;
    }
    errno = 0;
    n = strtol(v, &end, 10);
    if (errno || *end || n <= 0 || n > INT_MAX)
        return cuc__seterr(CUC_E_INVALID, "%s=\"%.32s\" is not a number of milliseconds "
                           "(1..%d)", name, v, INT_MAX);
    *out = (int)n;
    return 0;
}

static int default_dir(char *out, size_t n)
{
    const char *v = getenv("CUCORE_SHARE_DIR"), *x = getenv("XDG_RUNTIME_DIR");
    int k;

    if (v && *v)
        k = snprintf(out, n, "%s", v);
    else if (x && *x)
        k = snprintf(out, n, "%s/cucore", x);
    else
        k = snprintf(out, n, "/tmp/cucore-%lu", (unsigned long)geteuid());
    if (k < 0 || (size_t)k >= n)
        return cuc__seterr(CUC_E_INVALID, "the share point directory is too long");
    return 0;
}

static int resolve_opts(struct cuc__share *p, const cuc_share_opts *o)
{
    cuc_share_opts d;
    int rc;

    cuc_share_opts_init(&d);
    if (!o)
        o = &d;
    if (o->hold_ms < 0 || o->timeout_ms < 0)
        return cuc__seterr(CUC_E_INVALID, "cuc_share_start: hold_ms %d, timeout_ms %d: "
                           "0 (the default) or positive", o->hold_ms, o->timeout_ms);
    if (o->dir && snprintf(p->dir, sizeof(p->dir), "%s", o->dir) >= (int)sizeof(p->dir))
        return cuc__seterr(CUC_E_INVALID, "cuc_share_start: the directory is too long");
    rc = o->dir ? 0 : default_dir(p->dir, sizeof(p->dir));
    if (!rc)
        rc = o->hold_ms ? (p->hold_ms = o->hold_ms, 0)
                        : env_ms("CUCORE_SHARE_HOLD_MS", DEFAULT_HOLD_MS, &p->hold_ms);
    if (!rc)
        rc = o->timeout_ms ? (p->timeout_ms = o->timeout_ms, 0)
                           : env_ms("CUCORE_SHARE_TIMEOUT_MS", DEFAULT_TIMEOUT_MS,
                                    &p->timeout_ms);
    p->max_peers = o->max_peers ? o->max_peers : CUC_SHARE_MAX_PEERS_DEFAULT;
    p->half_sent_ms = p->timeout_ms < CUC__SHARE_HALF_SENT_MS ? p->timeout_ms
                                                               : CUC__SHARE_HALF_SENT_MS;
    return rc;
}

/* ---- stale sockets ---- */

/* A share point socket nobody accepts on any more: its process is gone
 * (whatever its pid namespace). A live one's thread sees a peer that
 * closed at once. A full backlog is a live one. */
static void remove_if_stale(const char *path, void *arg)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    int fd, rc, err;

    (void)arg;
    if (strlen(path) >= sizeof(a.sun_path))
        return;
    memcpy(a.sun_path, path, strlen(path) + 1);
    fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return;
    rc = connect(fd, (const struct sockaddr *)&a, sizeof(a));
    err = errno;
    close(fd);
    if (rc < 0 && err == ECONNREFUSED)
        unlink(path);
}

/* ---- start ---- */

static void *thread_main(void *arg);
static void hooks_install(void);

static int start_locked(struct cuc__share *p, const cuc_share_opts *o)
{
    int rc = resolve_opts(p, o);

    if (!rc)
        rc = cuc__private_dir(p->dir);
    if (!rc)
        rc = cuc__boot_id(p->boot);
    if (!rc)
        rc = cuc__random_bytes(p->point, sizeof(p->point), "a share point's identity");
    if (!rc)
        rc = cuc__holds_create(p->hold_ms, &p->holds);
    if (rc)
        return rc;
    p->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (p->wake < 0) {
        rc = cuc__errno_err(errno, "eventfd for the share point");
        goto fail;
    }
    cuc__cond_init(&p->cond);
    atomic_store(&p->stopping, 0);
    p->owner = cuc__pid();
    if ((errno = pthread_create(&p->thread, NULL, thread_main, p)) != 0) {
        rc = cuc__errno_err(errno, "pthread_create for the share point");
        goto fail;
    }
    p->running = 1;
    cuc__settle_start(cuc__share_wake_cb, p);
    (void)cuc__dir_each(p->dir, CUC__SHARE_SOCK_PREFIX, CUC__SHARE_SOCK_SUFFIX,
                        remove_if_stale, NULL);
    return 0;
fail:
    if (p->wake >= 0)
        close(p->wake);
    p->wake = -1;
    cuc__holds_destroy(p->holds);
    p->holds = NULL;
    return rc;
}

int cuc_share_start(const cuc_share_opts *o)
{
    struct cuc__share *p = &point;
    int rc = 0;

    pthread_once(&hooks_once, hooks_install);
    pthread_mutex_lock(&p->lock);
    if (p->running && p->owner != cuc__pid())
        rc = cuc__check_owner(p->owner, "cuc_share_start", "share point");
    else if (!p->running)
        rc = start_locked(p, o);
    pthread_mutex_unlock(&p->lock);
    return rc;
}

static int running(const char *fn, struct cuc__share **out)
{
    struct cuc__share *p = &point;
    int running;
    pid_t owner;

    pthread_mutex_lock(&p->lock);
    running = p->running;
    owner = p->owner;
    pthread_mutex_unlock(&p->lock);
    if (!running)
        return cuc__seterr(CUC_E_INVALID, "%s: this process's share point is not started "
                           "(cuc_share_start)", fn);
    if (owner != cuc__pid())
        return cuc__check_owner(owner, fn, "share point");
    *out = p;
    return 0;
}

int cuc_share_detach(const cuc_msg *m, void **bytes, size_t *len)
{
    struct cuc__share *p;
    int rc;

    if (!m || !bytes || !len)
        return cuc__seterr(CUC_E_INVALID, "cuc_share_detach: NULL argument");
    rc = running("cuc_share_detach", &p);
    return rc ? rc : cuc__share_detach(p, m, bytes, len);
}

int cuc_share_attach(const void *bytes, size_t len, cuc_msg **out)
{
    struct cuc__share *p;
    int rc;

    if (!bytes || !out)
        return cuc__seterr(CUC_E_INVALID, "cuc_share_attach: NULL argument");
    rc = cuc_share_start(NULL); /* the thread reads the answers */
    if (!rc)
        rc = running("cuc_share_attach", &p);
    return rc ? rc : cuc__share_attach(p, bytes, len, out);
}

int cuc_share_path(char *buf, size_t len)
{
    struct cuc__share *p;
    size_t n;
    int rc = running("cuc_share_path", &p);

    if (rc)
        return rc;
    if (!buf)
        return cuc__seterr(CUC_E_INVALID, "cuc_share_path: buf is NULL");
    pthread_mutex_lock(&p->lock);
    n = strlen(p->path);
    if (n == 0)
        rc = cuc__seterr(CUC_E_NOT_FOUND, "the share point has no socket yet: it is made "
                         "at the first cuc_share_detach()");
    else if (n >= len)
        rc = cuc__seterr(CUC_E_INVALID, "cuc_share_path: %zu bytes, the path needs %zu",
                         len, n + 1);
    else
        memcpy(buf, p->path, n + 1);
    pthread_mutex_unlock(&p->lock);
    return rc;
}

int cuc_share_stats(struct cuc_share_stats *out)
{
    struct cuc__share *p;
    int rc = running("cuc_share_stats", &p);

    if (!rc && !out)
        rc = cuc__seterr(CUC_E_INVALID, "cuc_share_stats: out is NULL");
    if (rc)
        return rc;
    cuc__holds_count(p->holds, &out->holds, &out->unclaimed);
    pthread_mutex_lock(&p->lock);
    out->peers = p->npeers;
    out->exporters = 0;
    for (struct cuc__share_exp *e = p->exps; e; e = e->next)
        out->exporters += !e->closed;
    out->pending = p->npending;
    pthread_mutex_unlock(&p->lock);
    return 0;
}

/* ---- the thread ---- */

enum { SLOT_WAKE, SLOT_LISTEN, SLOT_PEER, SLOT_EXP };

struct pollset {
    struct pollfd *fds;
    int *kind;
    void **obj;
    size_t n, cap;
};

static int pollset_add(struct pollset *s, int fd, int kind, void *obj)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 16;
        struct pollfd *f = realloc(s->fds, cap * sizeof(*f));
        int *k = f ? realloc(s->kind, cap * sizeof(*k)) : NULL;
        void **o = k ? realloc(s->obj, cap * sizeof(*o)) : NULL;
        if (f)
            s->fds = f;
        if (k)
            s->kind = k;
        if (!o)
            return CUC_E_NOMEM;
        s->obj = o;
        s->cap = cap;
    }
    s->fds[s->n] = (struct pollfd){fd, POLLIN, 0};
    s->kind[s->n] = kind;
    s->obj[s->n++] = obj;
    return 0;
}

/* What the thread polls, and the soonest time it must look again. */
static int64_t build(struct cuc__share *p, struct pollset *s, int64_t listen_after)
{
    int64_t next = cuc__holds_expire(p->holds);

    s->n = 0;
    pthread_mutex_lock(&p->lock);
    (void)pollset_add(s, p->wake, SLOT_WAKE, NULL);
    if (p->listener && (listen_after < 0 || cuc__remaining(listen_after) == 0))
        (void)pollset_add(s, cuc_listener_fd(p->listener), SLOT_LISTEN, NULL);
    else if (p->listener && (next < 0 || listen_after < next))
        next = listen_after;
    for (struct cuc__share_peer *pr = p->peers; pr; pr = pr->next) {
        if (cuc__link_partial_since(pr->ch->link) >= 0) {
            int64_t check = cuc__deadline(p->half_sent_ms < HALF_SENT_CHECK_MS
                                              ? p->half_sent_ms / 2 + 1
                                              : HALF_SENT_CHECK_MS);
            next = next < 0 || check < next ? check : next;
        }
        (void)pollset_add(s, pr->ch->link->fd, SLOT_PEER, pr);
    }
    for (struct cuc__share_exp *e = p->exps; e; e = e->next)
        if (!e->closed)
            (void)pollset_add(s, e->ch->link->fd, SLOT_EXP, e);
    pthread_mutex_unlock(&p->lock);
    return next;
}

/* Peers that stopped half-way through a message are dropped. */
static void drop_half_sent(struct cuc__share *p)
{
    int64_t now = cuc__deadline(0);
    struct cuc__share_peer *pr = p->peers, *next;

    for (; pr; pr = next) {
        int64_t since = cuc__link_partial_since(pr->ch->link);
        next = pr->next;
        if (since >= 0 && now - since >= p->half_sent_ms)
            cuc__share_drop_peer(p, pr, CUC__LEASE_PEER_CLOSED);
    }
}

static void handle(struct cuc__share *p, const struct pollset *s, int64_t *listen_after)
{
    uint64_t count;

    for (size_t i = 0; i < s->n; i++) {
        if (!s->fds[i].revents)
            continue;
        switch (s->kind[i]) {
        case SLOT_WAKE:
            (void)!read(p->wake, &count, sizeof(count));
            break;
        case SLOT_LISTEN:
            /* still readable after: no fd to accept with (EMFILE); look later */
            *listen_after = cuc__share_accept(p) ? cuc__deadline(ACCEPT_BACKOFF_MS) : -1;
            break;
        case SLOT_PEER:
            if (cuc__share_serve(p, s->obj[i]))
                cuc__share_drop_peer(p, s->obj[i], CUC__LEASE_PEER_CLOSED);
            break;
        case SLOT_EXP:
            if (cuc__share_read_exp(p, s->obj[i]))
                cuc__share_exp_closed(p, s->obj[i], CUC_E_EXPORTER_GONE);
            break;
        }
    }
}

static void *thread_main(void *arg)
{
    struct cuc__share *p = arg;
    static const struct timespec settle_poll = {0, SETTLE_POLL_NS};
    struct pollset s = {0};
    int64_t listen_after = -1;
    int settling = 0;

    (void)prctl(PR_SET_TIMERSLACK, SETTLE_TIMER_SLACK_NS);

    while (!atomic_load(&p->stopping)) {
        int64_t next = build(p, &s, listen_after);
        int n = settling ? ppoll(s.fds, s.n, &settle_poll, NULL)
                         : poll(s.fds, s.n, cuc__remaining(next));
        if (n < 0 && errno != EINTR)
            cuc__nap(10, -1);
        if (atomic_load(&p->stopping))
            break;
        if (n > 0)
            handle(p, &s, &listen_after);
        settling = cuc__settle_run(); /* its releases go with the flush */
        cuc__share_flush_queued(p);
        drop_half_sent(p);
        pthread_mutex_lock(&p->lock);
        cuc__share_reap_exps_locked(p);
        pthread_cond_broadcast(&p->cond); /* a stop waiting for leases looks again */
        pthread_mutex_unlock(&p->lock);
    }
    free(s.fds);
    free(s.kind);
    free(s.obj);
    return NULL;
}

/* ---- stop ---- */

/* Waits until the peers hold no lease, or the deadline: 0, or
 * CUC_E_TIMEOUT naming what is left. */
static int wait_leases(struct cuc__share *p, int timeout_ms)
{
    int64_t deadline = cuc__deadline(timeout_ms);
    size_t leases, peers;

    for (;;) {
        cuc__share_peer_leases(p, &leases, &peers);
        if (leases == 0)
            return 0;
        pthread_mutex_lock(&p->lock);
        if (cuc__cond_wait_until(&p->cond, &p->lock, deadline) == CUC_E_TIMEOUT) {
            pthread_mutex_unlock(&p->lock);
            cuc__share_peer_leases(p, &leases, &peers);
            if (leases == 0)
                return 0;
            return cuc__seterr(CUC_E_TIMEOUT, "the share point stopped with %zu leases of "
                               "%zu processes still held after %d ms: they ended, and "
                               "those processes may read freed memory", leases, peers,
                               timeout_ms);
        }
        pthread_mutex_unlock(&p->lock);
    }
}

int cuc_share_stop(int timeout_ms)
{
    struct cuc__share *p = &point;
    int rc;

    if (timeout_ms < -1)
        return cuc__seterr(CUC_E_INVALID, "cuc_share_stop: timeout %d ms", timeout_ms);
    pthread_mutex_lock(&p->lock);
    if (!p->running) {
        pthread_mutex_unlock(&p->lock);
        return 0;
    }
    if (p->owner != cuc__pid()) {
        pthread_mutex_unlock(&p->lock);
        return cuc__check_owner(p->owner, "cuc_share_stop", "share point");
    }
    pthread_mutex_unlock(&p->lock);
    rc = wait_leases(p, timeout_ms);
    atomic_store(&p->stopping, 1);
    cuc__share_wake(p);
    pthread_join(p->thread, NULL);
    cuc__settle_stop(); /* the frees complete before the exporters hear we go */
    cuc__share_flush_queued(p);
    cuc__share_serve_end(p);
    cuc__share_attach_end(p);
    pthread_mutex_lock(&p->lock);
    close(p->wake);
    p->wake = -1;
    p->running = 0;
    pthread_mutex_unlock(&p->lock);
    return rc;
}

/* ---- fork and exit ---- */

static void before_fork(void)
{
    pthread_mutex_lock(&point.lock);
}

static void parent_after_fork(void)
{
    pthread_mutex_unlock(&point.lock);
}

/* The child closes its copies of the share point's sockets (the peers see
 * the parent go when the parent goes), keeping the numbers taken (by
 * /dev/null) until the objects that own them are freed. */
static void child_after_fork(void)
{
    struct cuc__share *p = &point;
    int null;

    pthread_mutex_unlock(&p->lock);
    if (!p->running)
        return;
    cuc__settle_forget();
    null = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null < 0)
        return;
    if (p->listener)
        (void)dup3(null, cuc_listener_fd(p->listener), O_CLOEXEC);
    for (struct cuc__share_peer *pr = p->peers; pr; pr = pr->next)
        (void)dup3(null, pr->ch->link->fd, O_CLOEXEC);
    for (struct cuc__share_exp *e = p->exps; e; e = e->next)
        if (e->ch)
            (void)dup3(null, e->ch->link->fd, O_CLOEXEC);
    close(null);
}

static void stop_at_exit(void)
{
    int ms = 0, rc;

    if (!point.running || point.owner != cuc__pid())
        return;
    (void)env_ms("CUCORE_SHARE_EXIT_WAIT_MS", 0, &ms);
    rc = cuc_share_stop(ms);
    if (rc)
        fprintf(stderr, "cucore: at exit: %s\n", cuc_errmsg());
}

static void hooks_install(void)
{
    pthread_atfork(before_fork, parent_after_fork, child_after_fork);
    atexit(stop_at_exit);
}
