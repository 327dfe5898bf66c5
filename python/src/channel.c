/* cucore.Channel and cucore.Listener: explicit channels, for programs that
 * want them (pickle needs none). */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "wire.h"

typedef struct {
    PyObject_HEAD
    cuc_channel *ch;
    pid_t pid;
    Py_ssize_t busy; /* calls running on it with the GIL let go */
} PyChannel;

typedef struct {
    PyObject_HEAD
    cuc_listener *l;
    PyObject *path;
    pid_t pid;
    int busy; /* an accept running with the GIL let go */
} PyListener;

static PyTypeObject PyChannel_Type, PyListener_Type;

static PyObject *channel_wrap(cuc_channel *ch)
{
    PyChannel *o = PyObject_New(PyChannel, &PyChannel_Type);

    if (!o) {
        cuc_channel_destroy(ch);
        return NULL;
    }
    o->ch = ch;
    o->pid = py_pid();
    o->busy = 0;
    return (PyObject *)o;
}

static int ch_live(PyChannel *c)
{
    if (py_check_pid(c->pid, "channel"))
        return -1;
    if (!c->ch) {
        PyErr_SetString(PyExc_ValueError, "the channel is closed");
        return -1;
    }
    return 0;
}

/* Raises (-1) while another thread is in a call on c with the GIL let go:
 * the library's destroy must not race one, so what closes c waits for
 * that call to return (give recv and pump a timeout to bound it). */
static int ch_idle(const PyChannel *c, const char *what)
{
    if (!c->busy)
        return 0;
    py_raise_fmt(CUC_E_BUSY, "%s: another thread is in a call on this channel (a recv or "
                 "pump without a timeout waits until something comes): close it once that "
                 "call has returned", what);
    return -1;
}

/* In a fork child only the child's copy of the socket is closed (so that
 * the peer sees the parent's close when it comes): the handle is the
 * parent's, and its locks may have been held by a thread that did not come
 * along. */
static void channel_close(PyChannel *c)
{
    cuc_channel *ch = c->ch;

    c->ch = NULL;
    if (ch && c->pid == py_pid()) {
        Py_BEGIN_ALLOW_THREADS
        cuc_channel_destroy(ch);
        Py_END_ALLOW_THREADS
    } else if (ch) {
        close(cuc_channel_fd(ch));
    }
}

static void channel_dealloc(PyObject *self)
{
    channel_close((PyChannel *)self);
    PyObject_Free(self);
}

static PyObject *ch_pair(PyObject *cls, PyObject *noargs)
{
    cuc_channel *a, *b;
    PyObject *pa, *pb;
    int rc = cuc_channel_pair(&a, &b);

    if (rc)
        return py_raise(rc);
    pa = channel_wrap(a);
    pb = pa ? channel_wrap(b) : (cuc_channel_destroy(b), NULL);
    if (!pb) {
        Py_XDECREF(pa);
        return NULL;
    }
    return Py_BuildValue("(NN)", pa, pb);
}

static PyObject *ch_connect(PyObject *cls, PyObject *args, PyObject *kw)
{
    static char *names[] = {"path", "timeout", NULL};
    PyObject *to = Py_None;
    const char *path;
    cuc_channel *ch;
    int ms, rc;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "s|O", names, &path, &to) || timeout_arg(to, &ms))
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = cuc_channel_connect(path, ms, &ch);
    Py_END_ALLOW_THREADS
    return rc ? py_raise(rc) : channel_wrap(ch);
}

/* The caller's fd becomes the channel's only when the call succeeds:
 * cuc_channel_from_fd takes (and on failure closes) a duplicate, and the
 * caller's fd is closed once the channel is made, so a failure leaves it
 * open and the caller's (Channel.from_fd(0) on a terminal closed stdin).
 * The channel's fileno() is then the duplicate's number. */
static PyObject *ch_from_fd(PyObject *cls, PyObject *arg)
{
    PyObject *o;
    cuc_channel *ch;
    int fd, dup_fd, rc;

    if (fd_arg(arg, &fd))
        return NULL;
    dup_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (dup_fd < 0)
        return py_raise_fmt(CUC_E_INVALID, "Channel.from_fd(%d): %s", fd, strerror(errno));
    rc = cuc_channel_from_fd(dup_fd, &ch);
    if (rc)
        return py_raise(rc);
    o = channel_wrap(ch); /* on failure it destroys ch: fd stays the caller's */
    if (o)
        close(fd);
    return o;
}

#define CH(o) (((PyChannel *)(o))->ch)

static PyObject *ch_send(PyObject *self, PyObject *args)
{
    Py_ssize_t i;
    cuc_msg *m;
    int rc;

    if (ch_live((PyChannel *)self))
        return NULL;
    rc = cuc_msg_create(&m);
    if (rc)
        return py_raise(rc);
    for (i = 0; i < PyTuple_GET_SIZE(args); i++) {
        if (wire_add(m, PyTuple_GET_ITEM(args, i))) {
            cuc_msg_destroy(m);
            return NULL;
        }
    }
    ((PyChannel *)self)->busy++;
    Py_BEGIN_ALLOW_THREADS
    rc = cuc_channel_send(CH(self), m);
    cuc_msg_destroy(m);
    Py_END_ALLOW_THREADS
    ((PyChannel *)self)->busy--;
    return rc ? py_raise(rc) : Py_NewRef(Py_None);
}

static PyObject *ch_recv(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"timeout", NULL};
    PyObject *to = Py_None, *t;
    cuc_msg *m;
    int ms, rc;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O", names, &to) || timeout_arg(to, &ms) ||
        ch_live((PyChannel *)self))
        return NULL;
    ((PyChannel *)self)->busy++;
    Py_BEGIN_ALLOW_THREADS
    rc = cuc_channel_recv(CH(self), ms, &m);
    Py_END_ALLOW_THREADS
    ((PyChannel *)self)->busy--;
    if (rc)
        return py_raise(rc);
    t = wire_resolve(m);
    cuc_msg_destroy(m);
    return t;
}

static PyObject *ch_pump(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"timeout", NULL};
    PyObject *to = Py_None;
    int ms, rc;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O", names, &to) || timeout_arg(to, &ms) ||
        ch_live((PyChannel *)self))
        return NULL;
    ((PyChannel *)self)->busy++;
    Py_BEGIN_ALLOW_THREADS
    rc = cuc_channel_pump(CH(self), ms);
    Py_END_ALLOW_THREADS
    ((PyChannel *)self)->busy--;
    if (rc == CUC_E_TIMEOUT)
        Py_RETURN_FALSE;
    return rc ? py_raise(rc) : Py_NewRef(Py_True);
}

static PyObject *ch_lease_count(PyObject *self, PyObject *noargs)
{
    size_t n;
    int rc;

    if (ch_live((PyChannel *)self))
        return NULL;
    rc = cuc_channel_lease_count(CH(self), &n);
    return rc ? py_raise(rc) : PyLong_FromSize_t(n);
}

static PyObject *ch_fileno(PyObject *self, PyObject *noargs)
{
    return ch_live((PyChannel *)self) ? NULL : PyLong_FromLong(cuc_channel_fd(CH(self)));
}

static PyObject *ch_peer_pid(PyObject *self, void *c)
{
    pid_t pid;
    int rc;

    if (ch_live((PyChannel *)self))
        return NULL;
    rc = cuc_channel_peer_pid(CH(self), &pid);
    return rc ? py_raise(rc) : PyLong_FromLong(pid);
}

static PyObject *ch_close(PyObject *self, PyObject *noargs)
{
    if (ch_idle((PyChannel *)self, "close()"))
        return NULL;
    channel_close((PyChannel *)self);
    return Py_NewRef(Py_None);
}

static PyObject *ch_enter(PyObject *self, PyObject *noargs)
{
    return Py_NewRef(self);
}

static PyObject *ch_exit(PyObject *self, PyObject *args)
{
    if (ch_idle((PyChannel *)self, "leaving the with block"))
        return NULL;
    channel_close((PyChannel *)self);
    return Py_NewRef(Py_False);
}

static PyObject *ch_reduce(PyObject *self, PyObject *noargs)
{
    return py_raise_fmt(CUC_E_NOT_SERIALIZABLE, "a Channel is a socket of this process: "
                        "pass its fileno() to a child, or listen()/connect() by path");
}

static PyGetSetDef ch_getset[] = {
    {"peer_pid", ch_peer_pid, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyMethodDef ch_methods[] = {
    {"pair", ch_pair, METH_NOARGS | METH_CLASS, "two connected channels"},
    {"connect", (PyCFunction)(void (*)(void))ch_connect,
     METH_VARARGS | METH_KEYWORDS | METH_CLASS, "connect(path, timeout=None)"},
    {"from_fd", ch_from_fd, METH_O | METH_CLASS,
     "a channel over an inherited socket; fd is taken (closed) only on success"},
    {"send", ch_send, METH_VARARGS, "send(*objects): one message"},
    {"recv", (PyCFunction)(void (*)(void))ch_recv, METH_VARARGS | METH_KEYWORDS,
     "recv(timeout=None) -> tuple of the message's objects"},
    {"pump", (PyCFunction)(void (*)(void))ch_pump, METH_VARARGS | METH_KEYWORDS,
     "pump(timeout=None): process releases; False on timeout"},
    {"lease_count", ch_lease_count, METH_NOARGS, NULL},
    {"fileno", ch_fileno, METH_NOARGS, NULL},
    {"close", ch_close, METH_NOARGS, NULL},
    {"__enter__", ch_enter, METH_NOARGS, NULL},
    {"__exit__", ch_exit, METH_VARARGS, NULL},
    {"__reduce__", ch_reduce, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL}};

static PyTypeObject PyChannel_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "cucore.Channel",
    .tp_basicsize = sizeof(PyChannel),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "one end of a cucore channel: Channel.pair(), Channel.connect(path)",
    .tp_dealloc = channel_dealloc,
    .tp_getset = ch_getset,
    .tp_methods = ch_methods,
};

static PyObject *py_listen(PyObject *self, PyObject *arg)
{
    PyListener *o;
    cuc_listener *l;
    int rc;

    if (!PyUnicode_Check(arg))
        return PyErr_Format(PyExc_TypeError, "listen(path): path is a str");
    rc = cuc_channel_listen(PyUnicode_AsUTF8(arg), &l);
    if (rc)
        return py_raise(rc);
    o = PyObject_New(PyListener, &PyListener_Type);
    if (!o) {
        cuc_listener_destroy(l);
        return NULL;
    }
    o->l = l;
    o->path = Py_NewRef(arg);
    o->pid = py_pid();
    o->busy = 0;
    return (PyObject *)o;
}

/* In a fork child, as channel_close: the child's copy of the socket only
 * (the parent listens on, at its file). */
static void listener_close(PyListener *o)
{
    if (o->l && o->pid == py_pid())
        cuc_listener_destroy(o->l);
    else if (o->l)
        close(cuc_listener_fd(o->l));
    o->l = NULL;
}

static void listener_dealloc(PyObject *self)
{
    listener_close((PyListener *)self);
    Py_XDECREF(((PyListener *)self)->path);
    PyObject_Free(self);
}

static PyObject *l_accept(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"timeout", NULL};
    PyListener *o = (PyListener *)self;
    PyObject *to = Py_None;
    cuc_channel *ch;
    int ms, rc;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O", names, &to) || timeout_arg(to, &ms))
        return NULL;
    if (!o->l || o->pid != py_pid()) {
        PyErr_SetString(PyExc_ValueError, "the listener is closed");
        return NULL;
    }
    if (o->busy) /* the library's listener serves one thread at a time */
        return py_raise_fmt(CUC_E_BUSY, "accept(): another thread is accepting on this "
                            "listener; accept on one thread and hand the channels on");
    o->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    rc = cuc_listener_accept(o->l, ms, &ch);
    Py_END_ALLOW_THREADS
    o->busy = 0;
    return rc ? py_raise(rc) : channel_wrap(ch);
}

static PyObject *l_close(PyObject *self, PyObject *noargs)
{
    if (((PyListener *)self)->busy)
        return py_raise_fmt(CUC_E_BUSY, "close(): another thread is accepting on this "
                            "listener (an accept without a timeout waits for a peer): close "
                            "it once that call has returned");
    listener_close((PyListener *)self);
    return Py_NewRef(Py_None);
}

GETTER(l_path, 1, Py_NewRef(((PyListener *)self)->path))

static PyGetSetDef l_getset[] = {
    {"path", l_path, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyMethodDef l_methods[] = {
    {"accept", (PyCFunction)(void (*)(void))l_accept, METH_VARARGS | METH_KEYWORDS,
     "accept(timeout=None) -> Channel (same-uid peers only)"},
    {"close", l_close, METH_NOARGS, NULL},
    {"__enter__", ch_enter, METH_NOARGS, NULL},
    {"__exit__", l_close, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL}};

static PyTypeObject PyListener_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "cucore.Listener",
    .tp_basicsize = sizeof(PyListener),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "cucore.listen(path): a socket 0600 that same-uid peers connect to",
    .tp_dealloc = listener_dealloc,
    .tp_getset = l_getset,
    .tp_methods = l_methods,
};

static PyMethodDef module_methods[] = {
    {"listen", py_listen, METH_O, "listen(path) -> Listener"},
    {NULL, NULL, 0, NULL}};

int channel_init(PyObject *m)
{
    return type_add(m, &PyChannel_Type) || type_add(m, &PyListener_Type) ||
                   PyModule_AddFunctions(m, module_methods) ? -1 : 0;
}
