/* The cached pid, refreshed after fork by a pthread_atfork handler; the
 * overflow uid, read once. */
#include "os/proc.h"
#include "base/error.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
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

static uid_t overflow_uid = 65534; /* the kernel's default */
static pthread_once_t overflow_once = PTHREAD_ONCE_INIT;

static void read_overflow_uid(void)
{
    char buf[32], *end;
    int fd = open("/proc/sys/kernel/overflowuid", O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
    unsigned long v;

    if (fd >= 0)
        close(fd);
    if (n <= 0)
        return;
    buf[n] = '\0';
    v = strtoul(buf, &end, 10);
    if (end != buf && (*end == '\n' || *end == '\0') && v <= (uid_t)-1)
        overflow_uid = (uid_t)v;
}

uid_t cuc__overflow_uid(void)
{
    pthread_once(&overflow_once, read_overflow_uid);
    return overflow_uid;
}
