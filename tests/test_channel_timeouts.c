/* Every call with a timeout honours it whatever other threads
 * do. While thread A waits in cuc_channel_recv(ch, 2000) (then -1), seven
 * threads call recv(ch, 0), recv(ch, 100), pump(ch, 100) and
 * cuc_channel_lease_wait(ch, 0, 100) (a lease is held) on the same
 * channel; each must return CUC_E_TIMEOUT within its timeout plus 500 ms
 * (a correctness bound for a loaded machine and sanitizers; a call that
 * waited for A would take about 2000 ms, or forever). */
#include <pthread.h>
#include <time.h>

#include "cucore.h"
#include "channel/channel.h"
#include "check.h"

#define SLACK_MS 500

static cuc_channel *a, *b;

static int64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void nop_begin(void *o) { (void)o; }
static void nop_end(void *o, uint64_t id, int why) { (void)o; (void)id; (void)why; }
static const struct cuc__lease_ops ops = {nop_begin, nop_end, nop_begin, nop_begin, NULL, NULL, NULL};

struct job {
    int kind; /* 0 recv(0), 1 recv(100), 2 pump(100), 3 lease wait(100) */
    int rc;
    int64_t ms;
};

static void *run_job(void *arg)
{
    struct job *j = arg;
    int64_t t0 = now_ms();
    cuc_msg *m = NULL;

    switch (j->kind) {
    case 0: j->rc = cuc_channel_recv(a, 0, &m); break;
    case 1: j->rc = cuc_channel_recv(a, 100, &m); break;
    case 2: j->rc = cuc_channel_pump(a, 100); break;
    default: j->rc = cuc_channel_lease_wait(a, 0, 100); break;
    }
    j->ms = now_ms() - t0;
    cuc_msg_destroy(m);
    return NULL;
}

static int a_timeout;
static int a_rc;

static void *run_a(void *arg)
{
    cuc_msg *m = NULL;

    (void)arg;
    a_rc = cuc_channel_recv(a, a_timeout, &m);
    cuc_msg_destroy(m);
    return NULL;
}

static void round_with(int timeout)
{
    pthread_t ta, t[7];
    struct job jobs[7];
    static const int limits[4] = {0, 100, 100, 100};

    a_timeout = timeout;
    CHECK(pthread_create(&ta, NULL, run_a, NULL) == 0);
    usleep(50000); /* A is in its poll */
    for (int i = 0; i < 7; i++) {
        jobs[i] = (struct job){i % 4, 0, 0};
        CHECK(pthread_create(&t[i], NULL, run_job, &jobs[i]) == 0);
    }
    for (int i = 0; i < 7; i++) {
        CHECK(pthread_join(t[i], NULL) == 0);
        CHECK(jobs[i].rc == CUC_E_TIMEOUT);
        if (jobs[i].ms > limits[jobs[i].kind] + SLACK_MS)
            fprintf(stderr, "kind %d took %lld ms\n", jobs[i].kind, (long long)jobs[i].ms);
        CHECK(jobs[i].ms <= limits[jobs[i].kind] + SLACK_MS);
    }
    if (timeout < 0) { /* wake A */
        cuc_msg *m;
        CHECK_OK(cuc_msg_create(&m));
        CHECK_OK(cuc_channel_send(b, m));
        cuc_msg_destroy(m);
    }
    CHECK(pthread_join(ta, NULL) == 0);
    CHECK(a_rc == (timeout < 0 ? 0 : CUC_E_TIMEOUT));
}

int main(void)
{
    uint64_t id = cuc__lease_id_next();

    FD_BASELINE();
    CHECK_OK(cuc_channel_pair(&a, &b));
    CHECK_OK(cuc__leases_add(a->leases, id, &ops, NULL));
    round_with(2000);
    round_with(-1);
    CHECK_OK(cuc__leases_drop(a->leases, id));
    cuc_channel_destroy(a);
    cuc_channel_destroy(b);
    FD_CHECK_NO_LEAK();
    return test_finish();
}
