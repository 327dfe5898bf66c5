/* The channel side of the multi-process tests: a child's end of its
 * channel (CUC_TEST_FD, set by ct_start through spawn_self), receiving
 * with a bound, the empty message the two sides use as a step's "done",
 * and starting a child role with its end of a new channel pair. */
#ifndef CUC_TEST_CHANNEL_H
#define CUC_TEST_CHANNEL_H

#include <stdlib.h>
#include <sys/types.h>

#include "cucore.h"
#include "check.h"

/* Long enough for a loaded CI machine under the sanitizers; a lost
 * message still fails the test instead of hanging it. */
#define CT_RECV_MS 30000

/* The child's end, from CUC_TEST_FD. */
static inline cuc_channel *ct_child_channel(void)
{
    const char *s = getenv("CUC_TEST_FD");
    cuc_channel *ch;

    CHECK(s != NULL);
    CHECK_OK(cuc_channel_from_fd(atoi(s), &ch));
    return ch;
}

static inline cuc_msg *ct_recv(cuc_channel *ch)
{
    cuc_msg *m;

    CHECK_OK(cuc_channel_recv(ch, CT_RECV_MS, &m));
    return m;
}

static inline void ct_send_empty(cuc_channel *ch)
{
    cuc_msg *m;

    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_channel_send(ch, m));
    cuc_msg_destroy(m);
}

static inline void ct_wait_empty(cuc_channel *ch)
{
    cuc_msg *m = ct_recv(ch);

    CHECK(cuc_msg_record_count(m) == 0);
    cuc_msg_destroy(m);
}

/* Starts role (spawn_self, with env added) with its end of a new channel;
 * returns the parent's end. */
static inline cuc_channel *ct_start(const char *role, const char *const *args,
                                    const char *env, pid_t *pid)
{
    const char *envs[2] = {env, NULL};
    cuc_channel *mine, *theirs;

    CHECK_OK(cuc_channel_pair(&mine, &theirs));
    *pid = spawn_self(role, args, envs, cuc_channel_fd(theirs));
    CHECK(*pid > 0);
    cuc_channel_destroy(theirs);
    return mine;
}

#endif
