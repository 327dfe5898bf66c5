/* This process's Python object of each cucore object, not kept alive by
 * the registry, so that a pickle round trip in one process gives back the
 * very same object. */
#include <stdlib.h>

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

/* Objects keyed by their cucore object's address: a C table of borrowed
 * pointers (no key object, no weak reference to make a lookup or an
 * insert). Each object removes its own entry before it goes (its close or
 * its deallocator, live_del_ptr), so an entry never outlives its object;
 * one whose count already reached zero (being deallocated) is not handed
 * out. The GIL guards the table. */
struct live_entry {
    struct keynode node; /* keyed by the cucore object's address */
    PyObject *obj;       /* borrowed */
};

static struct keytab ptrs;

static uint64_t ptr_key(const void *p)
{
    return (uint64_t)(uintptr_t)p;
}

PyObject *live_get_ptr(const void *p)
{
    struct keynode *n;

    for (n = keytab_first(&ptrs, ptr_key(p)); n; n = keytab_next(n)) {
        PyObject *obj = ((struct live_entry *)n)->obj;

        if (Py_REFCNT(obj) > 0)
            return Py_NewRef(obj);
    }
    return NULL;
}

int live_put_ptr(const void *p, PyObject *obj)
{
    struct live_entry *e = malloc(sizeof(*e));

    if (!e) {
        PyErr_NoMemory();
        return -1;
    }
    e->node.key = ptr_key(p);
    e->obj = obj;
    if (keytab_insert(&ptrs, &e->node)) {
        free(e);
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

void live_del_ptr(const void *p, const PyObject *obj)
{
    struct keynode *n;

    for (n = keytab_first(&ptrs, ptr_key(p)); n; n = keytab_next(n))
        if (((struct live_entry *)n)->obj == obj) {
            keytab_remove(&ptrs, n);
            free(n);
            return;
        }
}
