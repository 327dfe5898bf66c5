/* Status codes as Python exceptions (the classes live in cucore._errors,
 * where Python is the better tool for a class hierarchy). */
#include <stdarg.h>
#include <string.h>
#include <pthread.h>
#include <unistd.h>

#include "cucore_py.h"

static PyObject *errors_mod; /* cucore._errors */

int errors_init(PyObject *module)
{
    PyObject *base;

    errors_mod = PyImport_ImportModule("cucore._errors");
    if (!errors_mod)
        return -1;
    base = PyObject_GetAttrString(errors_mod, "Error");
    if (!base)
        return -1;
    return PyModule_AddObject(module, "Error", base) ? (Py_DECREF(base), -1) : 0;
}

/* The class for code (cucore.Error when none is more specific). */
static PyObject *class_of(const char *code)
{
    PyObject *by = PyObject_GetAttrString(errors_mod, "BY_CODE"), *cls;

    if (!by)
        return NULL;
    cls = PyDict_GetItemString(by, code);
    Py_XINCREF(cls);
    Py_DECREF(by);
    return cls ? cls : PyObject_GetAttrString(errors_mod, "Error");
}

/* Raises cls(code, text). The text may quote bytes a peer sent (a kernel's
 * name) that are not UTF-8: they show as \\xNN escapes, never as a
 * UnicodeDecodeError in place of the error. */
static PyObject *raise_with(PyObject *cls, const char *code, const char *text)
{
    PyObject *exc, *msg;

    if (!cls)
        return NULL;
    msg = PyUnicode_DecodeUTF8(text, (Py_ssize_t)strlen(text), "backslashreplace");
    exc = msg ? PyObject_CallFunction(cls, "sN", code, msg) : NULL;
    Py_DECREF(cls);
    if (exc) {
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        Py_DECREF(exc);
    }
    return NULL;
}

PyObject *py_raise(int status)
{
    const char *code = cuc_errname(status), *msg = cuc_errmsg();

    return raise_with(class_of(code), code, msg[0] ? msg : cuc_strerror(status));
}

PyObject *py_raise_fmt(int status, const char *fmt, ...)
{
    const char *code = cuc_errname(status);
    char text[1024];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    return raise_with(class_of(code), code, text);
}

PyObject *py_raise_named(const char *cls, const char *code, const char *fmt, ...)
{
    char text[1024];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    return raise_with(PyObject_GetAttrString(errors_mod, cls), code, text);
}

static pid_t cached_pid;

static void pid_after_fork(void)
{
    cached_pid = getpid();
}

/* getpid() is a system call (glibc no longer caches it), and every object
 * checks it on every use: this process's pid, refreshed after fork. */
pid_t py_pid(void)
{
    if (!cached_pid) {
        cached_pid = getpid();
        pthread_atfork(NULL, NULL, pid_after_fork);
    }
    return cached_pid;
}

int py_check_pid(pid_t pid, const char *what)
{
    if (pid == py_pid())
        return 0;
    py_raise_fmt(CUC_E_FORKED, "this %s was inherited through fork from process %ld: "
                 "objects inherited through fork are inert (CUDA state does not "
                 "survive fork); send it to this process by pickle instead",
                 what, (long)pid);
    return -1;
}
