/* Time (clock.c): deadlines on CLOCK_MONOTONIC, and the one wait with a
 * deadline on a condition variable. A timeout in milliseconds is -1
 * (forever), 0 (do not wait) or positive; a deadline is an absolute time
 * in ms, -1 for none. */
#ifndef CUC_OS_CLOCK_H
#define CUC_OS_CLOCK_H

#include <pthread.h>
#include <stdint.h>

/* The deadline timeout_ms from now (-1 for a negative timeout). */
int64_t cuc__deadline(int timeout_ms);
/* What is left of deadline, as a poll() timeout: -1 for none, 0 once past. */
int cuc__remaining(int64_t deadline);

/* Initialises c to wait on CLOCK_MONOTONIC (the clock of the deadlines). */
void cuc__cond_init(pthread_cond_t *c);
/* Waits on c (m held) until woken or the deadline: 0 when woken (perhaps
 * spuriously: the caller checks its condition), CUC_E_TIMEOUT at the
 * deadline, without setting an error message (the caller names what it
 * waited for). */
int cuc__cond_wait_until(pthread_cond_t *c, pthread_mutex_t *m, int64_t deadline);

/* Sleeps ms milliseconds, or until the deadline if that comes first. */
void cuc__nap(int ms, int64_t deadline);

#endif
