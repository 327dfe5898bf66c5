/* The share point: how objects that carry fds (pools, buffers, VMM) go
 * through plain pickle. fds cannot ride in pickle bytes, so the exporting
 * process serves them: a Unix socket (mode 0600, same-uid peers only:
 * cuc_channel_listen/accept), started on first use, served by background
 * threads that never touch Python, removed at exit. A pickle carries the
 * host's identity, the share point's path, the exporter's pid and the
 * record bytes; unpickling connects (one channel per exporter, kept), asks
 * for the object, and imports what comes back over that channel, so the
 * lease lives as long as the imported object (or this process).
 *
 * Requests and replies are cucore messages. A buffer request is the
 * buffer records themselves (bytes-only records); the reply holds each
 * buffer's pool, then the buffers. A pool or VMM request is one fd record
 * whose tag says which (REQ_*) and whose fd, a memfd, holds the pool id or
 * VMM token. A refusal is one fd record tagged REPLY_ERROR | -status with
 * the exporter's message in its memfd. */
#include <errno.h>
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
#define REPLY_ERROR 0x80000000u
#define TEXT_MAX 1024
#define REQUEST_TIMEOUT_MS 60000
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
    volatile int stopping;
    struct vmm_export *vmms;
    size_t nvmm;
    uint64_t next_token;
} srv = {PTHREAD_MUTEX_INITIALIZER, 0, NULL, "", 0, 0, NULL, 0, 1};

static char host_id[512];

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

/* Up to cap bytes of an fd record's memfd; -1 when unreadable. */
static ssize_t record_data(cuc_msg *m, size_t i, uint32_t *tag, void *buf, size_t cap)
{
    ssize_t n;
    int fd;

    if (cuc_msg_take_fd(m, i, &fd, tag))
        return -1;
    n = pread(fd, buf, cap, 0);
    close(fd);
    return n;
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

/* Adds the pool unless pools[0..*n) has it. */
static int add_pool_once(cuc_msg *reply, cuc_pool *p, cuc_pool **pools, size_t *n)
{
    size_t i;

    for (i = 0; i < *n; i++)
        if (pools[i] == p)
            return 0;
    pools[(*n)++] = p;
    return cuc_msg_add_pool(reply, p);
}

/* The buffers of req, resolved here through their bytes (a message that
 * came on no channel: no lease is taken on our own records), sent back
 * after their pools. */
static int serve_buffers(cuc_channel *ch, cuc_msg *req)
{
    size_t n = cuc_msg_record_count(req), i, got = 0, npools = 0;
    cuc_buffer **bufs = calloc(n, sizeof(*bufs));
    cuc_pool **pools = calloc(n, sizeof(*pools));
    cuc_msg *local = NULL, *reply = NULL;
    size_t len;
    void *bytes = NULL;
    int rc = bufs && pools ? cuc_msg_to_bytes(req, &bytes, &len) : CUC_E_NOMEM;

    if (rc == 0)
        rc = cuc_msg_from_bytes(bytes, len, &local);
    for (; rc == 0 && got < n; got++)
        rc = cuc_msg_get_buffer(local, got, &bufs[got]);
    if (rc == 0)
        rc = cuc_msg_create(&reply);
    for (i = 0; rc == 0 && i < n; i++)
        rc = add_pool_once(reply, cuc_buffer_pool(bufs[i]), pools, &npools);
    for (i = 0; rc == 0 && i < n; i++)
        rc = cuc_msg_add_buffer(reply, bufs[i]);
    if (rc == 0)
        rc = cuc_channel_send(ch, reply);
    else
        send_error(ch, rc);
    cuc_msg_destroy(reply);
    for (i = 0; i < got; i++)
        cuc_buffer_unref_async(bufs[i], NULL); /* the leases keep what was sent */
    cuc_msg_destroy(local);
    free(bytes);
    free(pools);
    free(bufs);
    return rc;
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
static int serve_one(cuc_channel *ch, cuc_msg *req)
{
    uint8_t data[CUC_POOL_ID_LEN];
    cuc_msg *reply = NULL;
    cuc_pool *pool = NULL;
    cuc_vmm *vmm = NULL;
    uint64_t token;
    uint32_t tag = 0;
    ssize_t n = record_data(req, 0, &tag, data, sizeof(data));
    int rc = cuc_msg_create(&reply);

    if (rc == 0 && tag == REQ_POOL && n == CUC_POOL_ID_LEN) {
        rc = cuc_pool_get_by_id(data, &pool);
        if (rc == 0)
            rc = cuc_msg_add_pool(reply, pool);
    } else if (rc == 0 && tag == REQ_VMM && n == (ssize_t)sizeof(token)) {
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

static void serve(cuc_channel *ch, cuc_msg *req)
{
    int type = 0;

    if (cuc_msg_record_count(req) == 0 || cuc_msg_record_type(req, 0, &type))
        type = 0;
    if (type == CUC_RECORD_BUFFER)
        serve_buffers(ch, req);
    else if (type == CUC_RECORD_FD && cuc_msg_record_count(req) == 1)
        serve_one(ch, req);
    else
        send_error(ch, CUC_E_BADMSG);
}

/* One importer: serves its requests; its releases and its death end the
 * leases (the deferred frees run here). */
static void *conn_main(void *arg)
{
    cuc_channel *ch = arg;
    cuc_msg *req;
    int rc;

    for (;;) {
        rc = cuc_channel_recv(ch, -1, &req);
        if (rc == CUC_E_BADMSG || rc == CUC_E_VERSION)
            continue; /* dropped; the channel goes on (channel.h) */
        if (rc)
            break;
        serve(ch, req);
        cuc_msg_destroy(req);
    }
    cuc_channel_destroy(ch);
    return NULL;
}

static void *accept_main(void *arg)
{
    pthread_attr_t attr;
    cuc_channel *ch;
    pthread_t t;
    int rc;

    (void)arg;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    while (!srv.stopping) {
        rc = cuc_listener_accept(srv.l, -1, &ch);
        if (rc) {
            if (rc != CUC_E_PERMISSION) /* a refused peer is not our failure */
                usleep(10000);
            continue;
        }
        if (srv.stopping || pthread_create(&t, &attr, conn_main, ch))
            cuc_channel_destroy(ch);
    }
    pthread_attr_destroy(&attr);
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

    if (srv.l && srv.pid == getpid())
        return 0;
    if (share_dir(dir, sizeof(dir))) {
        py_raise_fmt(CUC_E_PERMISSION, "no private directory for the share point: "
                     "set XDG_RUNTIME_DIR, or fix /tmp/cucore-%ld (mode 0700, ours)",
                     (long)geteuid());
        return -1;
    }
    if (getrandom(&r, sizeof(r), 0) != (ssize_t)sizeof(r))
        r = (uint32_t)getpid() * 2654435761u;
    snprintf(srv.path, sizeof(srv.path), "%.60s/cucore-share-%ld-%08x.sock", dir,
             (long)getpid(), r);
    rc = cuc_channel_listen(srv.path, &srv.l);
    if (rc) {
        py_raise(rc);
        return -1;
    }
    srv.stopping = 0;
    srv.pid = getpid();
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

PyObject *py_share_close(PyObject *self, PyObject *noargs)
{
    cuc_channel *wake;

    (void)self;
    (void)noargs;
    pthread_mutex_lock(&srv.mu);
    if (srv.l && srv.pid == getpid()) {
        srv.stopping = 1;
        Py_BEGIN_ALLOW_THREADS
        if (cuc_channel_connect(srv.path, 0, &wake) == 0) /* wakes the accept */
            cuc_channel_destroy(wake);
        pthread_join(srv.accepter, NULL);
        Py_END_ALLOW_THREADS
        cuc_listener_destroy(srv.l);
        srv.l = NULL;
    }
    pthread_mutex_unlock(&srv.mu);
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

static PyObject *load_shared_fn;

static PyObject *reduce_as(const char *kind, PyObject *payload)
{
    PyObject *r;

    if (!payload || share_start()) {
        Py_XDECREF(payload);
        return NULL;
    }
    r = Py_BuildValue("(O(sssiO))", load_shared_fn, kind, host_id, srv.path, (int)getpid(),
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

PyObject *share_reduce_buffer(PyBuffer *b)
{
    PyObject *bytes;
    cuc_msg *m;
    size_t len;
    void *buf = NULL;
    int rc = cuc_msg_create(&m);

    if (rc == 0)
        rc = cuc_msg_add_buffer(m, b->b);
    if (rc == 0)
        rc = cuc_msg_to_bytes(m, &buf, &len);
    cuc_msg_destroy(m);
    if (rc)
        return py_raise(rc);
    bytes = PyBytes_FromStringAndSize(buf, (Py_ssize_t)len);
    free(buf);
    return reduce_as("buffer", bytes);
}

/* Buffers of one batch: one message of their records, so the receiver
 * fetches them all in one request. */
PyObject *py_reduce_buffers(PyObject *self, PyObject *arg)
{
    PyObject *seq = PySequence_Fast(arg, "a batch is a sequence of cucore.Buffer"), *bytes;
    Py_ssize_t i, n;
    cuc_msg *m = NULL;
    size_t len;
    void *buf = NULL;
    int rc;

    (void)self;
    if (!seq)
        return NULL;
    n = PySequence_Fast_GET_SIZE(seq);
    rc = n < 1 || (size_t)n > CUC_MSG_MAX_RECORDS ? CUC_E_INVALID : cuc_msg_create(&m);
    for (i = 0; rc == 0 && i < n; i++) {
        PyObject *o = PySequence_Fast_GET_ITEM(seq, i);

        if (!PyObject_TypeCheck(o, &PyBuffer_Type) || buffer_live((PyBuffer *)o)) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_TypeError, "batch item %zd is not a cucore.Buffer", i);
            cuc_msg_destroy(m);
            Py_DECREF(seq);
            return NULL;
        }
        rc = cuc_msg_add_buffer(m, ((PyBuffer *)o)->b);
    }
    Py_DECREF(seq);
    if (rc == 0)
        rc = cuc_msg_to_bytes(m, &buf, &len);
    cuc_msg_destroy(m);
    if (rc == CUC_E_INVALID && n < 1)
        return py_raise_fmt(rc, "an empty batch: pickle an empty list instead");
    if (rc)
        return py_raise(rc);
    bytes = PyBytes_FromStringAndSize(buf, (Py_ssize_t)len);
    free(buf);
    return reduce_as("buffers", bytes);
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
    cuc_channel *ch; /* NULL after the exporter went */
    pthread_mutex_t mu; /* one request at a time */
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

/* Sends req and waits for the reply, connecting first if needed (the GIL
 * released). A failure is left in cuc_errmsg(); *gone says the exporter
 * could not be reached. */
static int request(struct conn *c, cuc_msg *req, cuc_msg **reply, int *gone)
{
    int rc = 0;

    pthread_mutex_lock(&c->mu);
    if (!c->ch)
        rc = cuc_channel_connect(c->path, 0, &c->ch);
    *gone = rc != 0;
    if (rc == 0)
        rc = cuc_channel_send(c->ch, req);
    if (rc == 0)
        rc = cuc_channel_recv(c->ch, REQUEST_TIMEOUT_MS, reply);
    if (rc == CUC_E_PEER_CLOSED) {
        *gone = 1;
        cuc_channel_destroy(c->ch); /* imports live on; their releases are no-ops */
        c->ch = NULL;
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

static PyObject *exporter_gone(const char *kind, const char *path, pid_t pid)
{
    int alive = kill(pid, 0) == 0 || errno == EPERM;

    return py_raise_named("ExporterGoneError", "CUC_E_PEER_CLOSED",
                          "the %s was pickled by process %ld, which %s (share point %s): "
                          "keep the exporting process alive until receivers have unpickled",
                          kind, (long)pid, alive ? "no longer serves it" : "is gone", path);
}

/* A refusal from the exporter, or the object(s) of the reply. */
static PyObject *reply_objects(cuc_msg *reply, pid_t pid)
{
    char text[TEXT_MAX + 1];
    uint32_t tag = 0;
    ssize_t n;
    int type = 0;

    if (cuc_msg_record_count(reply) == 1 && cuc_msg_record_type(reply, 0, &type) == 0 &&
        type == CUC_RECORD_FD) {
        n = record_data(reply, 0, &tag, text, TEXT_MAX);
        text[n > 0 ? n : 0] = 0;
        if (!(tag & REPLY_ERROR))
            return py_raise_fmt(CUC_E_BADMSG, "process %ld answered with an fd tag %u",
                                (long)pid, tag);
        return py_raise_fmt(-(int)(tag & ~REPLY_ERROR), "process %ld (the exporter) refused: "
                            "%s", (long)pid, text);
    }
    return wire_resolve(reply);
}

/* The request a pickle asks for: its buffer record bytes, or a pool id /
 * VMM token in an fd record. */
static int build_request(const char *kind, Py_buffer *payload, cuc_msg **req)
{
    if (!strcmp(kind, "buffer") || !strcmp(kind, "buffers"))
        return cuc_msg_from_bytes(payload->buf, (size_t)payload->len, req);
    return data_msg(!strcmp(kind, "pool") ? REQ_POOL : REQ_VMM, payload->buf,
                    (size_t)payload->len, req);
}

/* A reply this process could not take in full: its leases go back now
 * (those of records that were imported are released again, which the
 * exporter ignores), not when this process ends. */
static void give_back(struct conn *c, cuc_msg *reply)
{
    size_t n = cuc_msg_record_count(reply), i, k = 0;
    uint64_t *ids = calloc(n ? n : 1, sizeof(*ids));
    struct cuc_buffer_record br;
    struct cuc_vmm_record vr;

    if (!ids)
        return;
    for (i = 0; i < n; i++) {
        if (cuc_msg_read_buffer(reply, i, &br) == 0)
            ids[k++] = br.lease_id;
        else if (cuc_msg_read_vmm(reply, i, &vr) == 0)
            ids[k++] = vr.lease_id;
    }
    pthread_mutex_lock(&c->mu);
    if (k && c->ch)
        cuc_channel_release(c->ch, ids, k);
    pthread_mutex_unlock(&c->mu);
    free(ids);
}

/* The buffers of a reply's objects (its pools come first), as a list. */
static PyObject *buffers_of(PyObject *t)
{
    PyObject *list = PyList_New(0);
    Py_ssize_t i;

    for (i = 0; list && i < PyTuple_GET_SIZE(t); i++) {
        PyObject *o = PyTuple_GET_ITEM(t, i);

        if (PyObject_TypeCheck(o, &PyBuffer_Type) && PyList_Append(list, o))
            Py_CLEAR(list);
    }
    return list;
}

static PyObject *fetch(const char *kind, const char *path, pid_t pid, Py_buffer *payload)
{
    struct conn *c = conn_for(path, pid);
    cuc_msg *req = NULL, *reply = NULL;
    PyObject *t, *o = NULL;
    int rc, gone = 0;

    if (!c)
        return PyErr_NoMemory();
    rc = build_request(kind, payload, &req);
    if (rc)
        return py_raise(rc);
    Py_BEGIN_ALLOW_THREADS
    rc = request(c, req, &reply, &gone);
    Py_END_ALLOW_THREADS
    cuc_msg_destroy(req);
    if (rc)
        return gone ? exporter_gone(kind, path, pid) : py_raise(rc);
    t = reply_objects(reply, pid);
    if (!t)
        give_back(c, reply);
    cuc_msg_destroy(reply);
    if (t && !strcmp(kind, "buffers"))
        o = buffers_of(t);
    else if (t && PyTuple_GET_SIZE(t) > 0)
        o = Py_NewRef(PyTuple_GET_ITEM(t, PyTuple_GET_SIZE(t) - 1)); /* pools come first */
    else if (t)
        py_raise_fmt(CUC_E_BADMSG, "process %ld sent an empty reply", (long)pid);
    Py_XDECREF(t);
    return o;
}

/* In the exporting process itself: the object, without a connection. */
static PyObject *local(const char *kind, Py_buffer *payload)
{
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
    if (!strcmp(kind, "buffers")) {
        PyObject *t = wire_resolve(m), *list = t ? buffers_of(t) : NULL;

        Py_XDECREF(t);
        cuc_msg_destroy(m);
        return list;
    }
    rc = cuc_msg_get_buffer(m, 0, (cuc_buffer **)&obj);
    cuc_msg_destroy(m);
    return rc ? py_raise(rc) : buffer_wrap(obj);
}

/* _load_shared(kind, host, path, pid, payload): pickle's loader. */
PyObject *py_load_shared(PyObject *self, PyObject *args)
{
    const char *kind, *host, *path;
    Py_buffer payload;
    PyObject *o;
    int pid;

    (void)self;
    if (!PyArg_ParseTuple(args, "sssiy*", &kind, &host, &path, &pid, &payload))
        return NULL;
    if (strcmp(kind, "buffer") && strcmp(kind, "buffers") && strcmp(kind, "pool") &&
        strcmp(kind, "vmm"))
        o = py_raise_fmt(CUC_E_VERSION, "a shared pickle of kind \"%s\"", kind);
    else if (strcmp(host, host_id))
        o = py_raise_named("ForeignHostError", "CUC_E_NOT_SUPPORTED",
                           "this %s was pickled on host %s and unpickled on host %s: memory "
                           "does not cross machines (devices, default streams, launch "
                           "configs and kernels do)", kind, host, host_id);
    else if (pid == getpid())
        o = local(kind, &payload);
    else
        o = fetch(kind, path, pid, &payload);
    PyBuffer_Release(&payload);
    return o;
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

/* A forked child starts with no share point and no connections: the
 * parent's belong to the parent (its threads did not come along). */
static void after_fork_child(void)
{
    pthread_mutex_init(&srv.mu, NULL);
    pthread_mutex_init(&conns_mu, NULL);
    srv.l = NULL;
    srv.nvmm = 0;
    srv.vmms = NULL;
    conns = NULL;
}

int share_init(PyObject *module)
{
    host_id_init();
    load_shared_fn = PyObject_GetAttrString(module, "_load_shared");
    if (!load_shared_fn)
        return -1;
    return pthread_atfork(NULL, NULL, after_fork_child) ? -1 : 0;
}
