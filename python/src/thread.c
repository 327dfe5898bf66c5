/* The extension's background threads (the claims' flusher, the parked
 * imports' thread, a share point's connections) start detached: none is
 * joined, each ends on its own or with the process. */
#include "cucore_py.h"

#include <pthread.h>

int py_thread_detached(void *(*fn)(void *), void *arg)
{
    pthread_attr_t attr;
    pthread_t t;
    int rc;

    if (pthread_attr_init(&attr))
        return -1;
    rc = pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (!rc)
        rc = pthread_create(&t, &attr, fn, arg);
    pthread_attr_destroy(&attr);
    return rc ? -1 : 0;
}
