/* This process's Python object of each cucore object, weakly held, so that
 * a pickle round trip in one process gives back the very same object. */
#include "cucore_py.h"

static PyObject *table; /* key -> weakref */

int live_init(void)
{
    table = PyDict_New();
    return table ? 0 : -1;
}

PyObject *live_get(PyObject *key)
{
    PyObject *ref = PyDict_GetItemWithError(table, key), *obj;

    if (!ref)
        return NULL;
    obj = PyWeakref_GetObject(ref);
    if (obj == Py_None)
        return NULL;
    Py_INCREF(obj);
    return obj;
}

int live_put(PyObject *key, PyObject *obj)
{
    PyObject *ref = PyWeakref_NewRef(obj, NULL);
    int rc;

    if (!ref)
        return -1;
    rc = PyDict_SetItem(table, key, ref);
    Py_DECREF(ref);
    return rc;
}

/* Called from deallocators: must not leave an exception set. */
void live_del(PyObject *key)
{
    PyObject *type, *value, *tb;

    PyErr_Fetch(&type, &value, &tb);
    if (PyDict_DelItem(table, key))
        PyErr_Clear();
    PyErr_Restore(type, value, tb);
}

PyObject *live_get_ptr(const void *p)
{
    PyObject *key = PyLong_FromVoidPtr((void *)p), *obj;

    if (!key)
        return NULL;
    obj = live_get(key);
    Py_DECREF(key);
    return obj;
}

int live_put_ptr(const void *p, PyObject *obj)
{
    PyObject *key = PyLong_FromVoidPtr((void *)p);
    int rc;

    if (!key)
        return -1;
    rc = live_put(key, obj);
    Py_DECREF(key);
    return rc;
}

void live_del_ptr(const void *p)
{
    PyObject *key = PyLong_FromVoidPtr((void *)p);

    if (key) {
        live_del(key);
        Py_DECREF(key);
    } else {
        PyErr_Clear();
    }
}
