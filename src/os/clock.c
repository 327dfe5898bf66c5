/* Deadlines and timed waits on CLOCK_MONOTONIC. */
#include "os/clock.h"
#include "cucore/error.h"

#include <errno.h>
#include <limits.h>
#include <time.h>

static int64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t cuc__deadline(int timeout_ms)
{
    if (timeout_ms < 0)
        return -1;
    return now_ms() + timeout_ms;
}

int cuc__remaining(int64_t deadline)
{
    int64_t left;

    if (deadline < 0)
        return -1;
    left = deadline - now_ms();
    if (left <= 0)
        return 0;
    return left > INT_MAX ? INT_MAX : (int)left;
}

void cuc__cond_init(pthread_cond_t *c)
{
    pthread_condattr_t a;

    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(c, &a);
    pthread_condattr_destroy(&a);
}

int cuc__cond_wait_until(pthread_cond_t *c, pthread_mutex_t *m, int64_t deadline)
{
    struct timespec ts;

    if (deadline < 0) {
        pthread_cond_wait(c, m);
        return 0;
    }
    ts.tv_sec = (time_t)(deadline / 1000);
    ts.tv_nsec = (long)(deadline % 1000) * 1000000L;
    return pthread_cond_timedwait(c, m, &ts) == ETIMEDOUT ? CUC_E_TIMEOUT : 0;
}

void cuc__nap(int ms, int64_t deadline)
{
    int left = cuc__remaining(deadline);
    struct timespec ts;

    if (left >= 0 && left < ms)
        ms = left;
    ts.tv_sec = ms / 1000;
    ts.tv_nsec = (long)(ms % 1000) * 1000000L;
    nanosleep(&ts, NULL);
}
