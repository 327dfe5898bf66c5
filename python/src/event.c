/* cucore.Event: events, and IPC events that pickle as their driver handle
 * and device UUID. */
#include "handle.h"

static PyObject *event_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    static char *names[] = {"device", "ipc", "timing", "blocking_sync", NULL};
    int ipc, timing = 0, blocking = 0, rc;
    unsigned flags;
    cuc_device *dev;
    PyObject *d, *io = Py_None;
    cuc_event *e;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|Opp", names, &d, &io, &timing, &blocking) ||
        (ipc = io == Py_None ? !timing : PyObject_IsTrue(io)) < 0 || device_arg(d, &dev))
        return NULL; /* ipc by default unless timing: the driver's IPC events record no time */
    flags = (ipc ? CUC_EVENT_IPC : 0) | (timing ? CUC_EVENT_TIMING : 0) |
            (blocking ? CUC_EVENT_BLOCKING_SYNC : 0);
    rc = cuc_event_create(dev, flags, &e);
    return rc ? py_raise(rc) : event_wrap(e);
}

static void event_dealloc(PyObject *self)
{
    PyEvent *o = (PyEvent *)self;

    if (o->weak)
        PyObject_ClearWeakRefs(self);
    live_del_ptr(o->h, self);
    if (o->pid == py_pid())
        cuc_event_unref(o->h);
    Py_TYPE(self)->tp_free(self);
}

#define E(o) ((cuc_event *)H(o))

static PyObject *ev_record(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"stream", NULL};
    PyObject *so = Py_None;
    cuc_stream *s;
    int rc;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O", names, &so) ||
        py_check_pid(((PyEvent *)self)->pid, "event") || stream_arg(so, &s))
        return NULL;
    rc = cuc_event_record(E(self), s);
    return rc ? py_raise(rc) : Py_NewRef(Py_None);
}

static PyObject *ev_sync(PyObject *self, PyObject *noargs)
{
    int rc;

    if (py_check_pid(((PyEvent *)self)->pid, "event"))
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = cuc_event_synchronize(E(self));
    Py_END_ALLOW_THREADS
    return rc ? py_raise(rc) : Py_NewRef(Py_None);
}

static PyObject *ev_query(PyObject *self, PyObject *noargs)
{
    int rc, done = 0;

    if (py_check_pid(((PyEvent *)self)->pid, "event"))
        return NULL;
    rc = cuc_event_query(E(self), &done);
    return rc ? py_raise(rc) : PyBool_FromLong(done);
}

/* elapsed(end): milliseconds from this event to end, both timing events
 * recorded and complete (cuc_event_elapsed_ms). */
static PyObject *ev_elapsed(PyObject *self, PyObject *end)
{
    float ms;
    int rc;

    if (!PyObject_TypeCheck(end, &PyEvent_Type))
        return PyErr_Format(PyExc_TypeError, "Event.elapsed takes a cucore.Event");
    if (py_check_pid(((PyEvent *)self)->pid, "event") ||
        py_check_pid(((PyEvent *)end)->pid, "event"))
        return NULL;
    rc = cuc_event_elapsed_ms(E(self), E(end), &ms);
    return rc ? py_raise(rc) : PyFloat_FromDouble(ms);
}

static PyObject *ev_reduce(PyObject *self, PyObject *noargs)
{
    cuc_msg *m = NULL;
    int rc;

    if (py_check_pid(((PyHandle *)self)->pid, "event"))
        return NULL;
    rc = cuc_msg_create(&m);
    return handle_reduce(rc ? rc : cuc_msg_add_event(m, E(self)), m, 0);
}

GETTER(get_device, 1, device_wrap(cuc_event_device(E(self))))
GETTER(get_imported, 1, PyBool_FromLong(cuc_event_is_imported(E(self))))
GETTER(get_ipc, 1, PyBool_FromLong((cuc_event_flags(E(self)) & CUC_EVENT_IPC) != 0))

static PyGetSetDef ev_getset[] = {
    {"device", get_device, NULL, NULL, NULL},
    {"is_imported", get_imported, NULL, "opened from another process's IPC handle", NULL},
    {"ipc", get_ipc, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyMethodDef ev_methods[] = {
    {"record", (PyCFunction)(void (*)(void))ev_record, METH_VARARGS | METH_KEYWORDS,
     "record(stream=None): capture the work queued so far"},
    {"synchronize", ev_sync, METH_NOARGS, NULL},
    {"query", ev_query, METH_NOARGS, "True when the captured work has completed"},
    {"elapsed", ev_elapsed, METH_O, "elapsed(end): ms from this timing event to end"},
    {"__reduce__", ev_reduce, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL}};

int event_init(PyObject *m)
{
    PyTypeObject *t = &PyEvent_Type;

    t->tp_doc = "Event(device, ipc=not timing, timing=False, blocking_sync=False)";
    t->tp_new = event_new;
    t->tp_dealloc = event_dealloc;
    t->tp_getset = ev_getset;
    t->tp_methods = ev_methods;
    return type_add(m, t);
}
