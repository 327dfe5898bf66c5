/* The share point: how objects that carry fds (pools, buffers, VMM) go
 * through plain pickle. fds cannot ride in pickle bytes, so the exporting
 * process serves them: a Unix socket (mode 0600, same-uid peers only:
 * cuc_channel_listen/accept), started on first use, served by background
 * threads that never touch Python, removed at exit. A pickle carries the
 * host's identity, the share point's path, the exporter's pid and the
 * payload; unpickling connects (one channel per exporter, kept for the
 * process) when it needs the exporter.
 *
 * A buffer's payload is its record (bytes only), whose lease id is a hold's
 * token (hold.c): the receiver imports the pointer itself, fetching the
 * buffer's pool once (kept for the process), and claims the hold on the
 * kept channel without waiting (claim.c), which makes it a lease of that
 * connection. No round trip a buffer.
 *
 * Requests are cucore messages of one fd record whose tag says what
 * (REQ_*) and whose memfd holds the argument: a pool id, a VMM token, lease
 * ops (REQ_LEASES: claims and releases, never answered) or one token to
 * claim synchronously (REQ_CLAIM, answered REPLY_OK) or none (REQ_SYNC,
 * answered REPLY_OK after everything sent before it was served). A
 * refusal is one fd record tagged REPLY_ERROR | -status with the
 * exporter's message in its memfd. Claims of REQ_LEASES that found no hold
 * or lease (hold.c) are answered by one NOTICE_STALE message holding their
 * tokens, which the importer reads before its next reply, or after its
 * next round of lease ops (share_conn_drain). */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cucore_py.h"

#define REQ_POOL 1u
#define REQ_VMM 2u
#define REQ_LEASES 3u /* claims and releases of buffer holds (hold.c) */
#define REQ_CLAIM 4u  /* one claim, answered */
#define REPLY_OK 5u
#define NOTICE_STALE 6u /* exporter to importer: claims that found nothing */
#define REQ_SYNC 7u     /* answered REPLY_OK once what came before was served, holding
                         * the request's 8-byte nonce if it had one */
#define REPLY_ERROR 0x80000000u
#define MAX_LEASE_OPS 65536
#define GONE_CHECK_MS 10
#define TEXT_MAX 1024
#define REQUEST_TIMEOUT_MS 60000 /* unless CUCORE_SHARE_TIMEOUT_MS says */
#define CONNECT_TIMEOUT_MS 10000 /* a burst of importers can fill the listen backlog */
#define TRANSIENT_WAIT_US 10000
#define MAX_NOMEM_RETRIES 100 /* a link's NOMEM can be for good (a message it could not
                               * reassemble): ended after a second of them */
#define MAX_VMM_EXPORTS 65536

/* ---- the exporter's side ---- */

struct vmm_export {
    uint64_t token;
    cuc_vmm *v; /* a reference of the registry's */
};

static struct {
    pthread_mutex_t mu;
    pid_t pid; /* the process that started it; another means inherited */
    cuc_listener *l;
    char path[108];
    pthread_t accepter;
    int stopping; /* atomic: accept_main reads it without mu */
    struct vmm_export *vmms;
    size_t nvmm;
    uint64_t next_token;
    unsigned gen; /* counts starts: the strings of share_strings() follow it */
    pid_t exited; /* the process whose atexit stop ran: it starts no other */
} srv = {PTHREAD_MUTEX_INITIALIZER, 0, NULL, "", 0, 0, NULL, 0, 1, 0, 0};

static char host_id[512];
static uint64_t transient_fails; /* atomic: receives that failed for the moment */

/* A memfd holding n bytes of data, or -1. */
static int data_fd(const void *data, size_t n)
{
    int fd = memfd_create("cucore-share", MFD_CLOEXEC);

    if (fd < 0)
        return -1;
    if (write(fd, data, n) != (ssize_t)n) {
        close(fd);
        return -1;
    }
    return fd;
}

/* A message of one fd record (tag, data): a request or a refusal. */
static int data_msg(uint32_t tag, const void *data, size_t n, cuc_msg **out)
{
    cuc_msg *m;
    int fd = data_fd(data, n), rc;

    if (fd < 0)
        return CUC_E_IO;
    rc = cuc_msg_create(&m);
    if (rc == 0) {
        rc = cuc_msg_add_fd(m, fd, tag);
        if (rc)
            cuc_msg_destroy(m);
    }
    close(fd); /* the message holds its own duplicate */
    if (rc == 0)
        *out = m;
    return rc;
}

static void send_error(cuc_channel *ch, int status)
{
    const char *text = cuc_errmsg();
    cuc_msg *m;

    if (data_msg(REPLY_ERROR | (uint32_t)-status, text, strlen(text), &m) == 0) {
        cuc_channel_send(ch, m);
        cuc_msg_destroy(m);
    }
}

static cuc_vmm *vmm_find_ref(uint64_t token)
{
    cuc_vmm *v = NULL;
    size_t i;

    pthread_mutex_lock(&srv.mu);
    for (i = 0; i < srv.nvmm && !v; i++)
        if (srv.vmms[i].token == token)
            v = cuc_vmm_ref(srv.vmms[i].v);
    pthread_mutex_unlock(&srv.mu);
    return v;
}

/* One object asked for by id (a pool) or token (a VMM resource). */
/* One object asked for by id (a pool) or token (a VMM resource). */
static int serve_one(cuc_channel *ch, uint32_t tag, const void *data, size_t n)
{
    cuc_msg *reply = NULL;
    cuc_pool *pool = NULL;
    cuc_vmm *vmm = NULL;
    uint64_t token;
    int rc = cuc_msg_create(&reply);

    if (rc == 0 && tag == REQ_POOL && n == CUC_POOL_ID_LEN) {
        rc = cuc_pool_get_by_id(data, &pool);
        if (rc == 0)
            rc = cuc_msg_add_pool(reply, pool);
    } else if (rc == 0 && tag == REQ_VMM && n == sizeof(token)) {
        memcpy(&token, data, sizeof(token));
        vmm = vmm_find_ref(token);
        rc = vmm ? cuc_msg_add_vmm(reply, vmm) : CUC_E_NOT_FOUND;
    } else if (rc == 0) {
        rc = CUC_E_BADMSG;
    }
    if (rc == 0)
        rc = cuc_channel_send(ch, reply);
    else
        send_error(ch, rc);
    cuc_msg_destroy(reply);
    cuc_vmm_unref(vmm);
    cuc_pool_unref(pool);
    return rc;
}

/* REPLY_OK holding data (a REQ_SYNC's nonce, echoed; else nothing). */
static void send_ok_data(cuc_channel *ch, const void *data, size_t n)
{
    cuc_msg *m;

    if (data_msg(REPLY_OK, data, n, &m) == 0) {
        cuc_channel_send(ch, m);
        cuc_msg_destroy(m);
    }
}

static void send_ok(cuc_channel *ch)
{
    send_ok_data(ch, "", 0);
}

/* A synchronous claim (claim.c's late path): answered, REPLY_OK or a
 * refusal saying why. */
static void serve_claim(cuc_channel *ch, struct lessee *l, uint64_t token)
{
    char text[200];
    cuc_msg *m;
    int rc = hold_apply(l, token, 1);

    if (rc < 0) {
        snprintf(text, sizeof(text), rc == CUC_E_NOMEM ? "no memory here for a lease of "
                 "token %016llx" : "no hold or lease of token %016llx here: the pickle was "
                 "loaded after its hold (CUCORE_SHARE_HOLD_MS) and every receiver's lease "
                 "of it ended", (unsigned long long)token);
        if (data_msg(REPLY_ERROR | (uint32_t)-rc, text, strlen(text), &m) == 0) {
            cuc_channel_send(ch, m);
            cuc_msg_destroy(m);
        }
    } else {
        send_ok(ch);
    }
}

/* Lease ops (claims, releases with RELEASE_BIT), never answered but for
 * the claims that found nothing: their tokens go back in one NOTICE_STALE
 * (the receiver may have mapped memory that is freed: it must learn). */
static void serve_leases(cuc_channel *ch, struct lessee *l, uint64_t *ops, size_t n)
{
    size_t nstale = 0;
    cuc_msg *m;

    hold_apply_many(l, ops, n, &nstale);
    if (nstale && data_msg(NOTICE_STALE, ops, nstale * 8, &m) == 0) {
        cuc_channel_send(ch, m);
        cuc_msg_destroy(m);
    }
}

/* A request is one fd record: its tag says what, its memfd holds the
 * argument (a pool id, a VMM token, lease ops). Lease ops (REQ_LEASES:
 * claims and releases, hold.c) are never answered (but stale claims). A
 * request of any other shape is refused and the connection goes on. */
static void serve(cuc_channel *ch, cuc_msg *req, struct lessee *l)
{
    uint32_t tag = 0;
    uint64_t *data = NULL;
    struct stat st;
    ssize_t n = -1;
    int type = 0, fd;

    if (cuc_msg_record_count(req) != 1 || cuc_msg_record_type(req, 0, &type) ||
        type != CUC_RECORD_FD || cuc_msg_take_fd(req, 0, &fd, &tag)) {
        send_error(ch, CUC_E_BADMSG);
        return;
    }
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
        st.st_size <= (off_t)(MAX_LEASE_OPS * 8) && (data = malloc((size_t)st.st_size + 8)))
        n = pread(fd, data, (size_t)st.st_size, 0);
    close(fd);
    if (n < 0 || n != st.st_size) {
        if (tag != REQ_LEASES)
            send_error(ch, CUC_E_IO);
    } else if (tag == REQ_LEASES) {
        serve_leases(ch, l, data, (size_t)n / 8);
    } else if (tag == REQ_CLAIM && n == 8) {
        serve_claim(ch, l, data[0]);
    } else if (tag == REQ_SYNC && (n == 0 || n == 8)) {
        send_ok_data(ch, data, (size_t)n); /* a nonce comes back: the importer's resync */
    } else {
        serve_one(ch, tag, data, (size_t)n);
    }
    free(data);
}

/* The sockets of the connections this share point serves, so that a fork
 * child closes its copies: an importer then sees this process's end when
 * it exits, not when the child does. */
static struct {
    pthread_mutex_t mu;
    int *fds;
    size_t n, cap;
} served = {PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0};

/* No memory to note it: a fork child keeps that socket open until it exits. */
static void served_add(int fd)
{
    pthread_mutex_lock(&served.mu);
    if (served.n == served.cap) {
        size_t cap = served.cap ? served.cap * 2 : 16;
        int *grown = realloc(served.fds, cap * sizeof(*grown));

        if (grown) {
            served.fds = grown;
            served.cap = cap;
        }
    }
    if (served.n < served.cap)
        served.fds[served.n++] = fd;
    pthread_mutex_unlock(&served.mu);
}

static void served_remove(int fd)
{
    pthread_mutex_lock(&served.mu);
    for (size_t i = 0; i < served.n; i++)
        if (served.fds[i] == fd) {
            served.fds[i] = served.fds[--served.n];
            break;
        }
    pthread_mutex_unlock(&served.mu);
}

/* One importer: serves its requests and lease ops; its releases and its
 * death end its leases (the deferred frees run here). */
static void *conn_main(void *arg)
{
    cuc_channel *ch = arg;
    struct lessee *l = hold_lessee_new();
    int rc, fd = cuc_channel_fd(ch), nomem = 0;
    cuc_msg *req;

    served_add(fd);
    for (;;) {
        rc = l ? cuc_channel_recv(ch, -1, &req) : CUC_E_NOMEM;
        if (rc == CUC_E_BADMSG || rc == CUC_E_VERSION)
            continue; /* dropped; the channel goes on (channel.h) */
        if (rc == CUC_E_LIMIT || (rc == CUC_E_NOMEM && l && ++nomem < MAX_NOMEM_RETRIES)) {
            if (rc == CUC_E_LIMIT)
                hold_keep_unclaimed(); /* the message may have held claims */
            __atomic_add_fetch(&transient_fails, 1, __ATOMIC_RELAXED);
            usleep(TRANSIENT_WAIT_US); /* no fd or memory left for now: the importer lives on */
            continue;
        }
        if (rc)
            break; /* the importer closed or died (or the link failed for good): its leases end */
        nomem = 0;
        serve(ch, req, l);
        cuc_msg_destroy(req);
    }
    if (l)
        hold_lessee_end(l);
    served_remove(fd);
    cuc_channel_destroy(ch);
    return NULL;
}

static void *accept_main(void *arg)
{
    cuc_channel *ch;
    int rc;

    (void)arg;
    while (!__atomic_load_n(&srv.stopping, __ATOMIC_ACQUIRE)) {
        rc = cuc_listener_accept(srv.l, -1, &ch);
        if (rc) {
            if (rc != CUC_E_PERMISSION) /* a refused peer is not our failure */
                usleep(10000);
            continue;
        }
        if (__atomic_load_n(&srv.stopping, __ATOMIC_ACQUIRE) ||
            py_thread_detached(conn_main, ch))
            cuc_channel_destroy(ch);
    }
    return NULL;
}

/* A directory only this uid can use: $XDG_RUNTIME_DIR, else /tmp/cucore-UID. */
static int share_dir(char *out, size_t cap)
{
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    struct stat st;

    if (xdg && xdg[0] == '/' && access(xdg, W_OK | X_OK) == 0) {
        snprintf(out, cap, "%s", xdg);
        return 0;
    }
    snprintf(out, cap, "/tmp/cucore-%ld", (long)geteuid());
    if (mkdir(out, 0700) && errno != EEXIST)
        return -1;
    if (lstat(out, &st) || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() ||
        (st.st_mode & 077))
        return -1;
    return 0;
}

/* Starts the share point if this process has none: 0, or raises. */
static int share_start_locked(void)
{
    char dir[64];
    uint32_t r = 0;
    int rc;

    if (srv.l && srv.pid == py_pid())
        return 0;
    if (srv.exited == py_pid()) {
        /* A daemon thread pickling after atexit: a new socket would outlive us. */
        py_raise_fmt(CUC_E_INVALID, "pid %ld is exiting: its share point closed at exit, "
                     "so objects with memory can no longer be pickled here; pickle "
                     "them before the interpreter exits", (long)py_pid());
        return -1;
    }
    if (share_dir(dir, sizeof(dir))) {
        py_raise_fmt(CUC_E_PERMISSION, "no private directory for the share point: "
                     "set XDG_RUNTIME_DIR, or fix /tmp/cucore-%ld (mode 0700, ours)",
                     (long)geteuid());
        return -1;
    }
    if (getrandom(&r, sizeof(r), 0) != (ssize_t)sizeof(r))
        r = (uint32_t)py_pid() * 2654435761u;
    snprintf(srv.path, sizeof(srv.path), "%.60s/cucore-share-%ld-%08x.sock", dir,
             (long)py_pid(), r);
    rc = cuc_channel_listen(srv.path, &srv.l);
    if (rc) {
        py_raise(rc);
        return -1;
    }
    __atomic_store_n(&srv.stopping, 0, __ATOMIC_RELEASE);
    srv.pid = py_pid();
    srv.gen++;
    if (pthread_create(&srv.accepter, NULL, accept_main, NULL)) {
        cuc_listener_destroy(srv.l);
        srv.l = NULL;
        py_raise_fmt(CUC_E_IO, "cannot start the share point's thread");
        return -1;
    }
    return 0;
}

static int share_start(void)
{
    int rc;

    pthread_mutex_lock(&srv.mu);
    rc = share_start_locked();
    pthread_mutex_unlock(&srv.mu);
    return rc;
}

PyObject *py_share_point(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
    if (share_start())
        return NULL;
    return PyUnicode_FromString(srv.path);
}

/* Stops accepting and removes the socket. Runs with the GIL let go, all
 * of it: a thread holding the GIL may be waiting for srv.mu (a pickle
 * starting the share point), so taking the GIL back under srv.mu would
 * deadlock (at exit, with a daemon thread still pickling). */
static void share_stop(void)
{
    cuc_channel *wake;
    cuc_listener *l;

    pthread_mutex_lock(&srv.mu);
    if (srv.l && srv.pid == py_pid()) {
        __atomic_store_n(&srv.stopping, 1, __ATOMIC_RELEASE); /* read unlocked: accept_main */
        if (cuc_channel_connect(srv.path, 0, &wake) == 0) /* wakes the accept */
            cuc_channel_destroy(wake);
        pthread_join(srv.accepter, NULL);
        l = srv.l;
        srv.l = NULL; /* before the destroy: a fork child reads it unlocked */
        cuc_listener_destroy(l);
    }
    pthread_mutex_unlock(&srv.mu);
}

static void share_close(int at_exit)
{
    Py_BEGIN_ALLOW_THREADS
    claim_close(); /* the releases queued go out before we exit; later drops are ours */
    if (at_exit) {
        pthread_mutex_lock(&srv.mu);
        srv.exited = py_pid();
        pthread_mutex_unlock(&srv.mu);
    }
    share_stop();
    Py_END_ALLOW_THREADS
}

/* _share_close(): stops the share point; the next pickle starts another. */
PyObject *py_share_close(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
    share_close(0);
    return Py_NewRef(Py_None);
}

/* _share_exit(): atexit's stop; no share point starts again in this process. */
PyObject *py_share_exit(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
    share_close(1);
    return Py_NewRef(Py_None);
}

static uint64_t vmm_register(cuc_vmm *v)
{
    struct vmm_export *grown;
    uint64_t token = 0;

    pthread_mutex_lock(&srv.mu);
    grown = srv.nvmm < MAX_VMM_EXPORTS
                ? realloc(srv.vmms, (srv.nvmm + 1) * sizeof(*srv.vmms)) : NULL;
    if (grown) {
        srv.vmms = grown;
        token = srv.next_token++;
        srv.vmms[srv.nvmm].token = token;
        srv.vmms[srv.nvmm++].v = cuc_vmm_ref(v);
    }
    pthread_mutex_unlock(&srv.mu);
    return token;
}

void share_vmm_forget(uint64_t token)
{
    cuc_vmm *v = NULL;
    size_t i;

    pthread_mutex_lock(&srv.mu);
    for (i = 0; i < srv.nvmm && !v; i++) {
        if (srv.vmms[i].token == token) {
            v = srv.vmms[i].v;
            srv.vmms[i] = srv.vmms[--srv.nvmm];
        }
    }
    pthread_mutex_unlock(&srv.mu);
    cuc_vmm_unref(v);
}

/* ---- pickling ---- */

static PyObject *load_shared_fn, *kind_buffer, *host_str, *path_str, *pid_obj;
static unsigned strs_gen;

/* The share point started, and its path and pid as the objects every
 * buffer pickle shares (pickle memoizes them: a list's pickle holds them
 * once). */
static int share_strings(void)
{
    if (share_start())
        return -1;
    if (path_str && strs_gen == srv.gen)
        return 0;
    Py_XSETREF(path_str, PyUnicode_FromString(srv.path));
    Py_XSETREF(pid_obj, PyLong_FromLong((long)py_pid()));
    if (!path_str || !pid_obj)
        return -1;
    strs_gen = srv.gen;
    return 0;
}

static PyObject *reduce_as(const char *kind, PyObject *payload)
{
    PyObject *r;

    if (!payload || share_start()) {
        Py_XDECREF(payload);
        return NULL;
    }
    r = Py_BuildValue("(O(sssiO))", load_shared_fn, kind, host_id, srv.path, (int)py_pid(),
                      payload);
    Py_DECREF(payload);
    return r;
}

PyObject *share_reduce_pool(PyPool *p)
{
    uint8_t id[CUC_POOL_ID_LEN];

    if (py_check_pid(p->pid, "pool"))
        return NULL;
    if (!cuc_pool_is_ipc(p->p))
        return py_raise_fmt(CUC_E_NOT_SERIALIZABLE, "pool not created with ipc=True: it "
                            "cannot be shared; create it with Pool(dev, ipc=True)");
    cuc_pool_id(p->p, id);
    return reduce_as("pool", PyBytes_FromStringAndSize((const char *)id, sizeof(id)));
}

/* Where a one-record message's lease id is: the record's payload starts
 * after the message header (24 bytes) and the record header (16);
 * docs/wire-format.md. */
static Py_ssize_t lease_offset(int type)
{
    if (type == CUC_RECORD_BUFFER || type == CUC_RECORD_BUFFER_VIEW)
        return 24 + 16 + 32;
    if (type == CUC_RECORD_IPC_BUFFER)
        return 24 + 16 + 64;
    return -1;
}

/* The buffer's one-record message, made once (its export data is cached
 * by cucore anyway; the bytes are what every pickle copies). */
static int buffer_record(PyBuffer *b)
{
    cuc_msg *m;
    size_t len;
    void *buf = NULL;
    int rc = cuc_msg_create(&m), type = 0;

    if (rc == 0)
        rc = cuc_msg_add_buffer(m, b->b);
    if (rc == 0)
        rc = cuc_msg_record_type(m, 0, &type);
    if (rc == 0)
        rc = cuc_msg_to_bytes(m, &buf, &len);
    cuc_msg_destroy(m);
    if (rc)
        return py_raise(rc), -1;
    b->lease_at = lease_offset(type);
    if (b->lease_at < 0 || len < (size_t)b->lease_at + 8) {
        free(buf);
        return py_raise_fmt(CUC_E_BADMSG, "a buffer record of type %d has no lease id where "
                            "docs/wire-format.md puts it", type), -1;
    }
    b->rec = PyBytes_FromStringAndSize(buf, (Py_ssize_t)len);
    free(buf);
    return b->rec ? 0 : -1;
}

/* (_load_shared, ("buffer", host, path, pid, record)): the record's lease
 * id is a fresh hold's token (hold.c). */
PyObject *share_reduce_buffer(PyBuffer *b)
{
    PyObject *payload, *r;
    uint64_t token;
    int rc;

    if ((!b->rec && buffer_record(b)) || share_strings())
        return NULL;
    payload = PyBytes_FromStringAndSize(NULL, PyBytes_GET_SIZE(b->rec));
    if (!payload)
        return NULL;
    rc = hold_new(b->b, buffer_uses(b), &token);
    if (rc) {
        Py_DECREF(payload);
        return py_raise(rc);
    }
    memcpy(PyBytes_AS_STRING(payload), PyBytes_AS_STRING(b->rec),
           (size_t)PyBytes_GET_SIZE(b->rec));
    for (int i = 0; i < 8; i++) /* the wire is little-endian */
        PyBytes_AS_STRING(payload)[b->lease_at + i] = (char)(uint8_t)(token >> (8 * i));
    r = PyTuple_New(2);
    if (r) {
        PyObject *args = PyTuple_Pack(5, kind_buffer, host_str, path_str, pid_obj, payload);

        if (args) {
            PyTuple_SET_ITEM(r, 0, Py_NewRef(load_shared_fn));
            PyTuple_SET_ITEM(r, 1, args);
        } else {
            Py_CLEAR(r);
        }
    }
    Py_DECREF(payload);
    return r; /* on failure the hold expires */
}

PyObject *share_reduce_vmm(PyVmm *v)
{
    if (cuc_vmm_is_imported(v->v))
        return py_raise_fmt(CUC_E_NOT_SUPPORTED, "an imported VMM resource cannot be sent on "
                            "(the driver exports chunks from their owner only): pickle it "
                            "in the process that created it");
    if (!v->token)
        v->token = vmm_register(v->v);
    if (!v->token)
        return py_raise_fmt(CUC_E_LIMIT, "too many VMM resources shared (%d)",
                            MAX_VMM_EXPORTS);
    return reduce_as("vmm", PyBytes_FromStringAndSize((const char *)&v->token,
                                                      sizeof(v->token)));
}

/* ---- the importer's side ---- */

struct conn {
    struct conn *next;
    char path[108];
    pid_t owner; /* the exporter */
    cuc_channel *ch; /* NULL until connected, and after the exporter went */
    int gone;        /* the exporter closed our connection, or died */
    int out_of_step; /* a request timed out: its reply may still come (resync_locked) */
    uint64_t nonces; /* the resyncs' REQ_SYNC nonces so far */
    pthread_mutex_t mu; /* one request at a time */
    cuc_pool **pools;   /* the pools fetched from it: kept for the process */
    size_t npools;
    int64_t checked_ms; /* when exporter_dead() last asked the kernel */
};

static pthread_mutex_t conns_mu = PTHREAD_MUTEX_INITIALIZER;
static struct conn *conns;

static struct conn *conn_for(const char *path, pid_t owner)
{
    struct conn *c;

    pthread_mutex_lock(&conns_mu);
    for (c = conns; c && strcmp(c->path, path); c = c->next)
        ;
    if (!c && (c = calloc(1, sizeof(*c)))) {
        snprintf(c->path, sizeof(c->path), "%s", path);
        c->owner = owner;
        pthread_mutex_init(&c->mu, NULL);
        c->next = conns;
        conns = c;
    }
    pthread_mutex_unlock(&conns_mu);
    return c;
}

/* The connections, newest first (they are never freed: kept for the
 * process). */
static struct conn *conns_first(void)
{
    struct conn *c;

    pthread_mutex_lock(&conns_mu);
    c = conns;
    pthread_mutex_unlock(&conns_mu);
    return c;
}

static struct conn *conns_next(struct conn *c)
{
    struct conn *n;

    pthread_mutex_lock(&conns_mu);
    n = c->next;
    pthread_mutex_unlock(&conns_mu);
    return n;
}

/* 1 once the process pid is gone (not merely unreachable). */
static int process_gone(pid_t pid)
{
    return kill(pid, 0) != 0 && errno == ESRCH;
}

/* Connected, or a status (c->mu held). While the exporter lives, a
 * connect that cannot get through (its listen backlog full: a burst of
 * workers; no fd left here) is tried again for up to CONNECT_TIMEOUT_MS,
 * and then fails this call only; the exporter counts as gone once its
 * process is (looked at between tries: a dead one's socket may linger). */
static int conn_open_locked(struct conn *c)
{
    int64_t end = hold_now_ms() + CONNECT_TIMEOUT_MS;
    int rc;

    if (c->ch)
        return 0;
    for (;;) {
        rc = cuc_channel_connect(c->path, 0, &c->ch);
        if (rc == 0)
            return 0;
        if (process_gone(c->owner) ||
            (rc != CUC_E_BUSY && rc != CUC_E_IO && rc != CUC_E_NOMEM)) {
            /* nobody listens (it closed its share point, or died unreaped) */
            __atomic_store_n(&c->gone, 1, __ATOMIC_RELAXED);
            return rc;
        }
        if (hold_now_ms() >= end)
            return rc;
        usleep(TRANSIENT_WAIT_US);
    }
}

static int conn_is_open(struct conn *c)
{
    int open;

    pthread_mutex_lock(&c->mu);
    open = c->ch && !__atomic_load_n(&c->gone, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&c->mu);
    return open;
}

static void conn_lost_locked(struct conn *c)
{
    cuc_channel *ch = c->ch;

    c->ch = NULL; /* before the destroy: a fork child reads it unlocked */
    c->out_of_step = 0;
    cuc_channel_destroy(ch); /* imports live on; their releases are no-ops */
    __atomic_store_n(&c->gone, 1, __ATOMIC_RELAXED);
}

/* A one-fd-record message's tag and fd, taken (*fd -1 for other messages). */
static void take_fd_record(cuc_msg *m, uint32_t *tag, int *fd)
{
    int type = 0;

    *fd = -1;
    *tag = 0;
    if (cuc_msg_record_count(m) != 1 || cuc_msg_record_type(m, 0, &type) ||
        type != CUC_RECORD_FD || cuc_msg_take_fd(m, 0, fd, tag))
        *fd = -1;
}

/* A stale notice's tokens (at most MAX_LEASE_OPS) marked on the buffers
 * that arrived under them (claim.c); fd is closed. */
static void read_notice(struct conn *c, int fd)
{
    uint64_t *tokens = malloc(MAX_LEASE_OPS * 8);
    ssize_t n = tokens ? pread(fd, tokens, MAX_LEASE_OPS * 8, 0) : -1;

    close(fd);
    if (n > 0)
        claim_mark_stale(c, c->owner, tokens, (size_t)n / 8);
    free(tokens);
}

/* How long an importer waits for an exporter's answer. */
static int request_timeout_ms(void)
{
    const char *e = getenv("CUCORE_SHARE_TIMEOUT_MS");
    long v = e ? strtol(e, NULL, 10) : 0;

    return v > 0 && v <= INT_MAX ? (int)v : REQUEST_TIMEOUT_MS;
}

/* The next reply (stale notices that come first read on the way, its fd
 * record taken: *tag and *fd, else -1), waiting up to
 * request_timeout_ms() (c->mu held). */
static int next_reply_locked(struct conn *c, cuc_msg **reply, uint32_t *tag, int *fd)
{
    int rc;

    for (;;) {
        rc = cuc_channel_recv(c->ch, request_timeout_ms(), reply);
        if (rc)
            return rc;
        take_fd_record(*reply, tag, fd);
        if (*fd < 0 || *tag != NOTICE_STALE)
            return 0;
        read_notice(c, *fd);
        cuc_msg_destroy(*reply);
    }
}

/* Gives back the VMM leases a reply brought (c->mu held): one dropped
 * unread must not keep the exporter's memory. */
static void release_vmm_leases_locked(struct conn *c, const cuc_msg *reply)
{
    size_t n = cuc_msg_record_count(reply), i, k = 0;
    uint64_t *ids = calloc(n ? n : 1, sizeof(*ids));
    struct cuc_vmm_record vr;

    if (!ids)
        return;
    for (i = 0; i < n; i++)
        if (cuc_msg_read_vmm(reply, i, &vr) == 0)
            ids[k++] = vr.lease_id;
    if (k && c->ch)
        cuc_channel_release(c->ch, ids, k);
    free(ids);
}

/* A reply nobody waits for (its request timed out), dropped (c->mu held). */
static void drop_reply_locked(struct conn *c, cuc_msg *m, int fd)
{
    if (fd >= 0)
        close(fd);
    release_vmm_leases_locked(c, m);
    cuc_msg_destroy(m);
}

/* 1 if the reply (tag, fd) is the REPLY_OK of the REQ_SYNC with nonce. */
static int is_synced(uint32_t tag, int fd, uint64_t nonce)
{
    uint64_t got = 0;

    return tag == REPLY_OK && fd >= 0 && pread(fd, &got, sizeof(got), 0) == sizeof(got) &&
           got == nonce;
}

/* After a request timed out, its reply may still come, or never (the
 * exporter dropped the request). A REQ_SYNC with a fresh nonce is
 * answered after everything before it, holding the nonce: the replies
 * read until that one are late ones, dropped (c->mu held). On a failure
 * the connection stays out of step, and the next request tries again. */
static int resync_locked(struct conn *c)
{
    uint64_t nonce = ((uint64_t)py_pid() << 32) ^ ++c->nonces;
    uint32_t tag;
    cuc_msg *m;
    int fd, rc, synced = 0;

    if (!c->out_of_step)
        return 0;
    rc = data_msg(REQ_SYNC, &nonce, sizeof(nonce), &m);
    if (rc == 0) {
        rc = cuc_channel_send(c->ch, m);
        cuc_msg_destroy(m);
    }
    while (rc == 0 && !synced && (rc = next_reply_locked(c, &m, &tag, &fd)) == 0) {
        synced = is_synced(tag, fd, nonce);
        drop_reply_locked(c, m, fd);
    }
    if (synced)
        c->out_of_step = 0;
    return rc;
}

/* Sends req and waits for the reply, connecting first if needed (the GIL
 * released). A reply of one fd record comes with its tag and fd taken
 * (*fd, else -1). A failure is left in cuc_errmsg(); *gone says the
 * exporter closed our connection or died. */
static int request(struct conn *c, cuc_msg *req, cuc_msg **reply, uint32_t *tag, int *fd,
                   int *gone)
{
    int rc;

    pthread_mutex_lock(&c->mu);
    rc = conn_open_locked(c);
    if (rc == 0)
        rc = resync_locked(c);
    if (rc == 0)
        rc = cuc_channel_send(c->ch, req);
    if (rc == 0) {
        rc = next_reply_locked(c, reply, tag, fd);
        if (rc == CUC_E_TIMEOUT)
            c->out_of_step = 1; /* its reply may still come: resync_locked() */
    }
    if (rc == CUC_E_PEER_CLOSED)
        conn_lost_locked(c);
    *gone = __atomic_load_n(&c->gone, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

void share_conn_post(struct conn *c, const uint64_t *ops, size_t n)
{
    size_t done, k;
    cuc_msg *m;

    for (done = 0; done < n; done += k) {
        k = n - done < MAX_LEASE_OPS ? n - done : MAX_LEASE_OPS;
        if (data_msg(REQ_LEASES, ops + done, k * 8, &m))
            continue; /* unsent: the exporter ends them when we close or exit */
        pthread_mutex_lock(&c->mu);
        if (!__atomic_load_n(&c->gone, __ATOMIC_RELAXED) && conn_open_locked(c) == 0 &&
            cuc_channel_send(c->ch, m) == CUC_E_PEER_CLOSED)
            conn_lost_locked(c);
        pthread_mutex_unlock(&c->mu);
        cuc_msg_destroy(m);
    }
}

/* Reads what the exporter sent unasked (stale notices) without waiting,
 * unless a request is using the channel (it reads them itself): so that
 * notices never pile up in the socket while this process only posts. */
void share_conn_drain(struct conn *c)
{
    uint32_t tag;
    cuc_msg *m;
    int fd;

    if (pthread_mutex_trylock(&c->mu))
        return;
    while (c->ch && !__atomic_load_n(&c->gone, __ATOMIC_RELAXED) &&
           cuc_channel_recv(c->ch, 0, &m) == 0) {
        take_fd_record(m, &tag, &fd);
        if (fd >= 0 && tag == NOTICE_STALE) {
            read_notice(c, fd);
            cuc_msg_destroy(m);
        } else {
            drop_reply_locked(c, m, fd); /* a late reply: the resync still runs */
        }
    }
    pthread_mutex_unlock(&c->mu);
}

static PyObject *exporter_gone(const char *kind, const char *path, pid_t pid)
{
    int alive = kill(pid, 0) == 0 || errno == EPERM;

    return py_raise_named("ExporterGoneError", "CUC_E_PEER_CLOSED",
                          "the %s was pickled by process %ld, which %s (share point %s): "
                          "keep the exporting process alive until receivers have unpickled",
                          kind, (long)pid, alive ? "no longer serves it" : "is gone", path);
}

/* A refusal from the exporter (raised: -1), its REPLY_OK (1), or objects
 * (0); fd and tag: the reply's fd record, taken by request() (-1: none). */
static int reply_status(int fd, uint32_t tag, pid_t pid)
{
    char text[TEXT_MAX + 1];
    ssize_t n;

    if (fd < 0)
        return 0;
    n = pread(fd, text, TEXT_MAX, 0);
    close(fd);
    text[n > 0 ? n : 0] = 0;
    if (tag == REPLY_OK)
        return 1;
    if (!(tag & REPLY_ERROR))
        py_raise_fmt(CUC_E_BADMSG, "process %ld answered with an fd tag %u", (long)pid, tag);
    else
        py_raise_fmt(-(int)(tag & ~REPLY_ERROR), "process %ld (the exporter) refused: %s",
                     (long)pid, text);
    return -1;
}

/* A reply this process could not take in full: its leases go back now
 * (those of records that were imported are released again, which the
 * exporter ignores), not when this process ends. */
static void give_back(struct conn *c, cuc_msg *reply)
{
    Py_BEGIN_ALLOW_THREADS /* c->mu may be held through a whole request */
    pthread_mutex_lock(&c->mu);
    release_vmm_leases_locked(c, reply);
    pthread_mutex_unlock(&c->mu);
    Py_END_ALLOW_THREADS
}

/* One request (tag, data) and its reply: the reply's last object (pools
 * come first), Py_None for REPLY_OK, or NULL raised. */
static PyObject *ask(struct conn *c, const char *kind, uint32_t tag, const void *data,
                     size_t n)
{
    cuc_msg *req = NULL, *reply = NULL;
    PyObject *t, *o = NULL;
    uint32_t rtag = 0;
    int rc, gone = 0, st, fd = -1;

    rc = data_msg(tag, data, n, &req);
    if (rc)
        return py_raise(rc);
    Py_BEGIN_ALLOW_THREADS
    rc = request(c, req, &reply, &rtag, &fd, &gone);
    Py_END_ALLOW_THREADS
    cuc_msg_destroy(req);
    if (rc)
        return gone ? exporter_gone(kind, c->path, c->owner) : py_raise(rc);
    st = reply_status(fd, rtag, c->owner);
    t = st == 0 ? wire_resolve(reply) : NULL;
    if (st == 0 && !t)
        give_back(c, reply);
    cuc_msg_destroy(reply);
    if (st == 1)
        return Py_NewRef(Py_None);
    if (t && PyTuple_GET_SIZE(t) > 0)
        o = Py_NewRef(PyTuple_GET_ITEM(t, PyTuple_GET_SIZE(t) - 1));
    else if (t)
        py_raise_fmt(CUC_E_BADMSG, "process %ld sent an empty reply", (long)c->owner);
    Py_XDECREF(t);
    return o;
}

/* The pool a buffer needs, fetched from its exporter (one round trip for
 * its fd) and kept for the process: later buffers of it need none. */
static int fetch_pool(struct conn *c, const uint8_t id[CUC_POOL_ID_LEN])
{
    PyObject *o = ask(c, "buffer's pool", REQ_POOL, id, CUC_POOL_ID_LEN);
    cuc_pool **grown;

    if (!o)
        return -1;
    if (!PyObject_TypeCheck(o, &PyPool_Type)) {
        Py_DECREF(o);
        py_raise_fmt(CUC_E_BADMSG, "process %ld answered a pool request with no pool",
                     (long)c->owner);
        return -1;
    }
    pthread_mutex_lock(&conns_mu);
    grown = realloc(c->pools, (c->npools + 1) * sizeof(*grown));
    if (grown) {
        c->pools = grown;
        c->pools[c->npools++] = cuc_pool_ref(((PyPool *)o)->p);
    }
    pthread_mutex_unlock(&conns_mu);
    Py_DECREF(o);
    return 0;
}

/* The exporter has died (checked at most every GONE_CHECK_MS, a system
 * call; a claim to a dead one is dropped, and its pool's fd keeps the
 * memory mapped here until the buffer goes). */
static int exporter_dead(struct conn *c)
{
    int64_t now = hold_now_ms();

    if (now - c->checked_ms < GONE_CHECK_MS)
        return 0;
    c->checked_ms = now;
    if (!process_gone(c->owner))
        return 0;
    __atomic_store_n(&c->gone, 1, __ATOMIC_RELAXED);
    return 1;
}

/* The hold token a buffer pickle's record carries as its lease id. */
static int record_token(cuc_msg *m, uint8_t pool_id[CUC_POOL_ID_LEN], uint64_t *token)
{
    struct cuc_buffer_record br;
    struct cuc_ipc_buffer_record ir;
    int type = 0, rc;

    if (cuc_msg_record_count(m) != 1 || cuc_msg_record_type(m, 0, &type))
        return py_raise_fmt(CUC_E_BADMSG, "a buffer pickle holds one record"), -1;
    if (type == CUC_RECORD_IPC_BUFFER) {
        rc = cuc_msg_read_ipc_buffer(m, 0, &ir);
        memset(pool_id, 0, CUC_POOL_ID_LEN);
        *token = ir.lease_id;
    } else {
        rc = cuc_msg_read_buffer(m, 0, &br);
        memcpy(pool_id, br.pool_id, CUC_POOL_ID_LEN);
        *token = br.lease_id;
    }
    return rc ? (py_raise(rc), -1) : 0;
}

/* A buffer from another process: imported here from its record (its pool
 * fetched once), its hold claimed (queued, or asked for when the hold may
 * be near its end: hold.c). */
static PyObject *load_buffer(struct conn *c, const char *path, pid_t pid, Py_buffer *payload)
{
    uint8_t pool_id[CUC_POOL_ID_LEN];
    uint64_t token;
    cuc_buffer *b;
    cuc_msg *m;
    PyObject *o;
    int rc, sync;

    rc = cuc_msg_from_bytes(payload->buf, (size_t)payload->len, &m);
    if (rc)
        return py_raise(rc);
    if (record_token(m, pool_id, &token))
        goto fail_msg;
    if (__atomic_load_n(&c->gone, __ATOMIC_RELAXED) || exporter_dead(c)) {
        exporter_gone("buffer", path, pid);
        goto fail_msg;
    }
    sync = hold_now_ms() >= hold_sync_after_ms(token);
    if (sync) {
        o = ask(c, "buffer", REQ_CLAIM, &token, sizeof(token));
        if (!o)
            goto fail_claim; /* it may have been served late: claimed and released */
        Py_DECREF(o);
    }
    rc = cuc_msg_get_buffer(m, 0, &b);
    if (rc == CUC_E_POOL_NOT_IMPORTED) {
        if (fetch_pool(c, pool_id))
            goto fail_claim;
        rc = cuc_msg_get_buffer(m, 0, &b);
    }
    if (rc) {
        py_raise(rc);
        goto fail_claim;
    }
    cuc_msg_destroy(m);
    o = buffer_wrap(b);
    if (o && claim_add(b, c, token, !sync, !((PyBuffer *)o)->claimed) == 0) {
        ((PyBuffer *)o)->claimed = 1;
        return o;
    }
    if (o) { /* no room to remember the claim: the object cannot be kept */
        Py_DECREF(o);
        PyErr_NoMemory();
    }
    claim_give_back(c, token);
    return NULL;

fail_claim:
    claim_give_back(c, token); /* a hold we could not take goes back now */
fail_msg:
    cuc_msg_destroy(m);
    return NULL;
}

static PyObject *fetch(const char *kind, const char *path, pid_t pid, Py_buffer *payload)
{
    struct conn *c = conn_for(path, pid);

    if (!c)
        return PyErr_NoMemory();
    if (!strcmp(kind, "buffer"))
        return load_buffer(c, path, pid, payload);
    return ask(c, kind, !strcmp(kind, "pool") ? REQ_POOL : REQ_VMM, payload->buf,
               (size_t)payload->len);
}

/* In the exporting process itself: the object, without a connection (a
 * buffer's hold ends: the object is ours). */
static PyObject *local(const char *kind, Py_buffer *payload)
{
    uint8_t pool_id[CUC_POOL_ID_LEN];
    cuc_msg *m;
    void *obj;
    uint64_t token;
    int rc;

    if (!strcmp(kind, "pool")) {
        if (payload->len != CUC_POOL_ID_LEN)
            return py_raise_fmt(CUC_E_BADMSG, "a pool pickle's id is 16 bytes");
        rc = cuc_pool_get_by_id(payload->buf, (cuc_pool **)&obj);
        return rc ? py_raise(rc) : pool_wrap(obj);
    }
    if (!strcmp(kind, "vmm")) {
        if (payload->len != sizeof(token))
            return py_raise_fmt(CUC_E_BADMSG, "a VMM pickle's token is 8 bytes");
        memcpy(&token, payload->buf, sizeof(token));
        obj = vmm_find_ref(token);
        return obj ? vmm_wrap(obj) : py_raise_fmt(CUC_E_NOT_FOUND, "the VMM resource was "
                                                  "closed before it was unpickled");
    }
    rc = cuc_msg_from_bytes(payload->buf, (size_t)payload->len, &m);
    if (rc)
        return py_raise(rc);
    if (record_token(m, pool_id, &token)) {
        cuc_msg_destroy(m);
        return NULL;
    }
    rc = cuc_msg_get_buffer(m, 0, (cuc_buffer **)&obj);
    cuc_msg_destroy(m);
    if (rc)
        return py_raise(rc);
    hold_apply(NULL, token, 0);
    return buffer_wrap(obj);
}

/* One of _load_shared's text arguments: a str without NUL, as UTF-8. */
static const char *arg_text(PyObject *o, const char *what)
{
    Py_ssize_t n;
    const char *s;

    if (!PyUnicode_Check(o)) {
        PyErr_Format(PyExc_TypeError, "_load_shared: %s must be str, not %.100s", what,
                     Py_TYPE(o)->tp_name);
        return NULL;
    }
    s = PyUnicode_AsUTF8AndSize(o, &n);
    if (s && strlen(s) != (size_t)n) {
        PyErr_Format(PyExc_ValueError, "_load_shared: %s holds a NUL", what);
        return NULL;
    }
    return s;
}

/* _load_shared's pid argument: an int that a pid_t holds, positive. */
static int arg_pid(PyObject *o, int *pid)
{
    long v = PyLong_Check(o) ? PyLong_AsLong(o) : -1;

    if (v == -1 && PyErr_Occurred())
        return -1;
    if (v <= 0 || v > INT_MAX) {
        PyErr_Format(PyExc_ValueError, "_load_shared: a pid is a positive int, not %R", o);
        return -1;
    }
    *pid = (int)v;
    return 0;
}

static PyObject *load_shared(const char *kind, const char *host, const char *path, int pid,
                             Py_buffer *payload)
{
    if (strcmp(kind, "buffer") && strcmp(kind, "pool") && strcmp(kind, "vmm"))
        return py_raise_fmt(CUC_E_VERSION, "a shared pickle of kind \"%s\"", kind);
    if (strcmp(host, host_id))
        return py_raise_named("ForeignHostError", "CUC_E_NOT_SUPPORTED",
                              "this %s was pickled on host %s and unpickled on host %s: "
                              "memory does not cross machines (devices, default streams, "
                              "launch configs and kernels do)", kind, host, host_id);
    if (pid == py_pid())
        return local(kind, payload);
    return fetch(kind, path, pid, payload);
}

/* _load_shared(kind, host, path, pid, payload): pickle's loader, called
 * once a buffer a pickle carries, so its arguments are taken apart by
 * hand (a format string parsed at every call cost more than the rest of
 * the call but the import). Every one of them may be hostile. */
PyObject *py_load_shared(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    const char *kind, *host, *path;
    Py_buffer payload;
    PyObject *o;
    int pid;

    (void)self;
    if (nargs != 5)
        return PyErr_Format(PyExc_TypeError, "_load_shared takes 5 arguments (%zd given)",
                            nargs);
    if (!(kind = arg_text(args[0], "kind")) || !(host = arg_text(args[1], "host")) ||
        !(path = arg_text(args[2], "path")) || arg_pid(args[3], &pid))
        return NULL;
    if (PyUnicode_Check(args[4])) /* what "y*" refused: a str is not bytes */
        return PyErr_Format(PyExc_TypeError, "_load_shared: payload must be bytes-like, "
                            "not str");
    if (PyObject_GetBuffer(args[4], &payload, PyBUF_SIMPLE))
        return NULL;
    o = load_shared(kind, host, path, pid, &payload);
    PyBuffer_Release(&payload);
    return o;
}

/* _share_flush(): waits until the claims and releases queued so far have
 * been sent and, on every connection open, served (a REQ_SYNC round trip:
 * the stale notices of those claims are read on the way, so a buffer
 * whose claim found nothing raises from then on). */
PyObject *py_share_flush(PyObject *self, PyObject *noargs)
{
    struct conn *c;
    PyObject *o;

    (void)self;
    (void)noargs;
    Py_BEGIN_ALLOW_THREADS
    claim_flush();
    Py_END_ALLOW_THREADS
    for (c = conns_first(); c; c = conns_next(c)) {
        int open;

        Py_BEGIN_ALLOW_THREADS /* c->mu may be held through a whole request */
        open = conn_is_open(c);
        Py_END_ALLOW_THREADS
        if (!open)
            continue;
        o = ask(c, "share point", REQ_SYNC, "", 0);
        if (!o)
            PyErr_Clear(); /* an exporter gone has nothing to tell */
        Py_XDECREF(o);
    }
    return Py_NewRef(Py_None);
}

/* _share_stats(): this process's buffer holds, unclaimed and leased. */
PyObject *py_share_stats(PyObject *self, PyObject *noargs)
{
    size_t unclaimed, leased;

    (void)self;
    (void)noargs;
    hold_stats(&unclaimed, &leased);
    return Py_BuildValue("{snsnsK}", "holds", (Py_ssize_t)unclaimed, "leases",
                         (Py_ssize_t)leased, "transient_fails",
                         (unsigned long long)__atomic_load_n(&transient_fails,
                                                             __ATOMIC_RELAXED));
}

/* _share_parked(): imported buffers kept for the leases of their sends on
 * (park.c). */
PyObject *py_share_parked(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
    return PyLong_FromSize_t(park_count());
}

int share_lease_count(const cuc_buffer *b, const cuc_pool *pool, size_t *n)
{
    int rc = b ? cuc_buffer_lease_count(b, n) : cuc_pool_lease_count(pool, n);

    if (rc == 0)
        *n += hold_count(b, pool);
    return rc;
}

PyObject *py_host_id(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
    return PyUnicode_FromString(host_id);
}

/* "hostname/machine-id" (or the boot id where there is no machine id). */
static void host_id_init(void)
{
    char name[256] = "", id[64] = "";
    FILE *f = fopen("/etc/machine-id", "r");

    if (!f)
        f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
        if (!fgets(id, sizeof(id), f))
            id[0] = 0;
        fclose(f);
    }
    id[strcspn(id, "\n")] = 0;
    gethostname(name, sizeof(name) - 1);
    snprintf(host_id, sizeof(host_id), "%s/%s", name, id);
}

/* The child's copies of the parent's sockets (its listener, the
 * connections it serves, those to its exporters), closed: while the child
 * held them, the parent's importers and exporters did not see the parent
 * go when it exited. Their handles are the parent's, never used or freed
 * here. The served list is read only if no thread held it at the fork. */
static void close_inherited_sockets(void)
{
    struct conn *c;

    if (srv.l)
        close(cuc_listener_fd(srv.l));
    for (c = conns; c; c = c->next)
        if (c->ch)
            close(cuc_channel_fd(c->ch));
    if (pthread_mutex_trylock(&served.mu) == 0)
        for (size_t i = 0; i < served.n; i++)
            close(served.fds[i]);
    served.fds = NULL; /* the parent's: leaked here */
    served.n = served.cap = 0;
    pthread_mutex_init(&served.mu, NULL);
}

/* A forked child starts with no share point and no connections: the
 * parent's belong to the parent (its threads did not come along). */
static void after_fork_child(void)
{
    close_inherited_sockets();
    pthread_mutex_init(&srv.mu, NULL);
    pthread_mutex_init(&conns_mu, NULL);
    srv.l = NULL;
    srv.nvmm = 0;
    srv.vmms = NULL;
    conns = NULL;
    path_str = pid_obj = NULL; /* the parent's: leaked here, never freed */
    hold_after_fork();
    claim_after_fork();
}

int share_init(PyObject *module)
{
    host_id_init();
    load_shared_fn = PyObject_GetAttrString(module, "_load_shared");
    kind_buffer = PyUnicode_InternFromString("buffer");
    host_str = PyUnicode_FromString(host_id);
    if (!load_shared_fn || !kind_buffer || !host_str)
        return -1;
    return pthread_atfork(NULL, NULL, after_fork_child) ? -1 : 0;
}
