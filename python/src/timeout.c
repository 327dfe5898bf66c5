/* Timeouts: seconds as Python gives them, milliseconds as the library
 * takes them. */
#include <math.h>

#include "cucore_py.h"

/* None or a negative number: -1 (no limit); a longer wait than an int of
 * milliseconds holds waits that long (24.8 days); NaN is refused. */
int timeout_arg(PyObject *o, int *ms)
{
    double t;

    if (o == Py_None) {
        *ms = -1;
        return 0;
    }
    t = PyFloat_AsDouble(o);
    if (t == -1.0 && PyErr_Occurred())
        return -1;
    if (isnan(t)) {
        PyErr_SetString(PyExc_ValueError, "timeout is NaN: give seconds, or None to wait "
                        "without a limit");
        return -1;
    }
    *ms = t < 0 ? -1 : t * 1000 >= 2147483647.0 ? 2147483647 : (int)(t * 1000);
    return 0;
}
