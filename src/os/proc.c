/* The cached pid, refreshed after fork by a pthread_atfork handler. */
#include "os/proc.h"
#include "base/error.h"

#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

static _Atomic pid_t cached;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void refresh(void)
{
    atomic_store_explicit(&cached, getpid(), memory_order_relaxed);
}

static void setup(void)
{
    /* the handler first: once cached is set, callers skip the once and
     * may fork at any time */
    pthread_atfork(NULL, NULL, refresh);
    refresh();
}

pid_t cuc__pid(void)
{
    pid_t p = atomic_load_explicit(&cached, memory_order_relaxed);

    /* set once (and in a child by the atfork handler, before fork returns):
     * the once is only for the first call, on every hot path after it */
    if (p)
        return p;
    pthread_once(&once, setup);
    return atomic_load_explicit(&cached, memory_order_relaxed);
}

int cuc__check_owner(pid_t owner, const char *fn, const char *what)
{
    pid_t self = cuc__pid();

    if (owner == self)
        return 0;
    return cuc__seterr(CUC_E_FORKED, "%s: the %s was created by process %ld and "
                       "inherited by this process (pid %ld) through fork(): it is "
                       "inert here (make a new one in this process, or exec first)",
                       fn, what, (long)owner, (long)self);
}
