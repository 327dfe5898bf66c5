/* Python objects in cucore messages (wire.c): what Channel.send/recv and
 * unpickling use. */
#ifndef CUCORE_PY_WIRE_H
#define CUCORE_PY_WIRE_H

#include "handle.h"

/* Appends obj (a cucore object, or an int: a plain fd) to m. */
int wire_add(cuc_msg *m, PyObject *obj);
/* Every record of m as objects (a tuple); m's fds are taken last. */
PyObject *wire_resolve(cuc_msg *m);

#endif
