/* The settler (src/memory/settle.c) driven by hand on the simulator, as a
 * share point's thread drives it: a dropped pointer is freed by the
 * settler's turn, not by the caller; the pointers dropped between two
 * turns are freed together behind one event; ten turns are fenced by the
 * event the completed batch before gave back (one cuEventCreate in all),
 * the device's context is made current once on the settler's thread, and
 * each first queued free wakes it; an import's wait frees what is queued
 * before it synchronizes; a failed free leaves the turn's others alone;
 * cuc__settle_stop destroys the event it kept, and with no settler the
 * caller's free is done and synchronized at once. Then threads: four drop
 * pointers while one waits as imports do and a settler thread turns:
 * each wait passes every pointer dropped before it, and every pointer is
 * freed exactly once (under TSan in CI). */
#include "check.h"
#include "cucore.h"
#include "driver/driver.h"
#include "memory/settle.h"
#include "sim_test.h"

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#define TURNS 10
#define BATCH 5
#define DROPPERS 4
#define DROPS 300

static atomic_int woken;
static pthread_mutex_t wake_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake_cond = PTHREAD_COND_INITIALIZER;
static atomic_int dropping, settling, dropped;
static unsigned long long frees_before; /* cuMemFreeAsync's count as threads() starts */
static CUmemoryPool pool; /* a cucore pool's: its pointers go as imported ones do */

static void wake(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&wake_lock);
    woken++;
    pthread_cond_signal(&wake_cond);
    pthread_mutex_unlock(&wake_lock);
}

static CUdeviceptr alloc(void)
{
    CUdeviceptr p = 0;

    CHECK(CUC_DRV->cuMemAllocFromPoolAsync(&p, 4096, pool, CU_STREAM_LEGACY) == CUDA_SUCCESS);
    return p;
}

/* Queues n dropped pointers of d with the settler: each taken (1). */
static void drop_n(cuc_device *d, int n)
{
    struct cuc__upstream none = {NULL, 0};

    for (int i = 0; i < n; i++)
        CHECK(cuc__settle_free(d, alloc(), &none, NULL, 0) == 1);
}

/* The settler's turns until nothing waits (the simulator's work is done
 * at once): how many looked again. */
static int turns(void)
{
    int k = 0;

    while (cuc__settle_run() && k < 100)
        k++;
    return k;
}

static void one_a_turn(cuc_device *d)
{
    unsigned long long creates = sim_calls("cuEventCreate");
    unsigned long long records = sim_calls("cuEventRecord");
    unsigned long long sets = sim_calls("cuCtxSetCurrent");

    for (int k = 0; k < TURNS; k++) {
        unsigned long long frees = sim_calls("cuMemFreeAsync");
        drop_n(d, 1);
        CHECK(sim_calls("cuMemFreeAsync") == frees); /* not the caller's */
        CHECK(turns() == 0);
        CHECK(sim_calls("cuMemFreeAsync") - frees == 1);
    }
    CHECK(woken == TURNS);
    CHECK(sim_calls("cuEventCreate") - creates == 1);
    CHECK(sim_calls("cuEventRecord") - records == TURNS);
    CHECK(sim_calls("cuCtxSetCurrent") - sets <= 1);
}

static void together(cuc_device *d)
{
    unsigned long long frees = sim_calls("cuMemFreeAsync");
    unsigned long long records = sim_calls("cuEventRecord");
    int w = woken;

    drop_n(d, BATCH);
    CHECK(woken == w + 1); /* the first queued wakes */
    CHECK(turns() == 0);
    CHECK(sim_calls("cuMemFreeAsync") - frees == BATCH);
    CHECK(sim_calls("cuEventRecord") - records == 1);
}

static void wait_frees_first(cuc_device *d)
{
    unsigned long long frees = sim_calls("cuMemFreeAsync");
    unsigned long long syncs = sim_calls("cuStreamSynchronize");
    unsigned long long records = sim_calls("cuEventRecord");

    drop_n(d, 3);
    CHECK_OK(cuc__settle_wait(d));
    CHECK(sim_calls("cuMemFreeAsync") - frees == 3);
    CHECK(sim_calls("cuStreamSynchronize") - syncs == 1);
    CHECK_OK(cuc__settle_wait(d)); /* nothing queued since: no synchronize */
    CHECK(sim_calls("cuStreamSynchronize") - syncs == 1);
    CHECK(turns() == 0); /* the batch fenced, not freed again */
    CHECK(sim_calls("cuMemFreeAsync") - frees == 3);
    CHECK(sim_calls("cuEventRecord") - records == 1);
}

/* (sim_fail restarts the counts) */
static void failed_free(cuc_device *d)
{
    drop_n(d, 3);
    sim_fail("cuMemFreeAsync:2");
    CHECK(turns() == 0);
    CHECK(sim_calls("cuMemFreeAsync") == 3); /* the third after the failed one */
    CHECK(sim_calls("cuEventRecord") == 1);  /* and fenced */
    sim_fail(NULL);
    drop_n(d, 1); /* the settler goes on */
    CHECK(turns() == 0);
    CHECK(sim_calls("cuMemFreeAsync") == 1);
}

/* A share point's thread, in short: a turn, then a nap until woken
 * (or 1 ms) while nothing waits. */
static void *settler_main(void *arg)
{
    struct timespec t;

    (void)arg;
    while (atomic_load(&settling)) {
        if (cuc__settle_run())
            continue;
        pthread_mutex_lock(&wake_lock);
        clock_gettime(CLOCK_REALTIME, &t);
        t.tv_nsec += 1000000;
        if (t.tv_nsec >= 1000000000) {
            t.tv_sec++;
            t.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&wake_cond, &wake_lock, &t);
        pthread_mutex_unlock(&wake_lock);
    }
    return NULL;
}

static void *dropper_main(void *arg)
{
    cuc_device *d = arg;

    CHECK_OK(cuc_device_set_current(d));
    for (int i = 0; i < DROPS; i++) {
        drop_n(d, 1);
        atomic_fetch_add(&dropped, 1);
    }
    atomic_fetch_sub(&dropping, 1);
    return NULL;
}

/* As an import: once the wait returns, every pointer dropped before it
 * began has been freed (sim/FACTS.md F29). */
static void *waiter_main(void *arg)
{
    cuc_device *d = arg;

    while (atomic_load(&dropping) > 0) {
        int before = atomic_load(&dropped);
        CHECK_OK(cuc__settle_wait(d));
        CHECK(sim_calls("cuMemFreeAsync") - frees_before >= (unsigned long long)before);
    }
    return NULL;
}

static void threads(cuc_device *d)
{
    pthread_t settler, waiter, droppers[DROPPERS];

    frees_before = sim_calls("cuMemFreeAsync");
    atomic_store(&settling, 1);
    atomic_store(&dropping, DROPPERS);
    CHECK(pthread_create(&settler, NULL, settler_main, NULL) == 0);
    for (int i = 0; i < DROPPERS; i++)
        CHECK(pthread_create(&droppers[i], NULL, dropper_main, d) == 0);
    CHECK(pthread_create(&waiter, NULL, waiter_main, d) == 0);
    for (int i = 0; i < DROPPERS; i++)
        CHECK(pthread_join(droppers[i], NULL) == 0);
    CHECK(pthread_join(waiter, NULL) == 0);
    atomic_store(&settling, 0);
    wake(NULL);
    CHECK(pthread_join(settler, NULL) == 0);
    turns(); /* what came after the settler's last turn */
    CHECK(sim_calls("cuMemFreeAsync") - frees_before == DROPPERS * DROPS);
    printf("threads: %d pointers dropped, each freed once\n", DROPPERS * DROPS);
}

int main(void)
{
    struct cuc__upstream none = {NULL, 0};
    unsigned long long destroys, frees, syncs;
    cuc_device *d;
    struct cuc_pool_props props;
    cuc_pool *p;

    if (!test_on_sim())
        SKIP("counts the simulator's driver calls");
    CHECK_OK(cuc_device_get(0, &d));
    CHECK_OK(cuc_device_set_current(d));
    cuc_pool_props_init(&props);
    CHECK_OK(cuc_pool_create(d, &props, &p));
    pool = (CUmemoryPool)cuc_pool_handle(p);
    CHECK(!cuc__settle_running());
    cuc__settle_start(wake, NULL);
    CHECK(cuc__settle_running());
    one_a_turn(d);
    together(d);
    wait_frees_first(d);
    failed_free(d);
    threads(d);
    destroys = sim_calls("cuEventDestroy");
    cuc__settle_stop();
    CHECK(sim_calls("cuEventDestroy") - destroys >= 1);
    CHECK(!cuc__settle_running());
    frees = sim_calls("cuMemFreeAsync");
    syncs = sim_calls("cuStreamSynchronize");
    CHECK(cuc__settle_free(d, alloc(), &none, NULL, 0) == 0); /* no settler: here */
    CHECK(sim_calls("cuMemFreeAsync") - frees == 1);
    CHECK(sim_calls("cuStreamSynchronize") - syncs == 1);
    cuc_pool_unref(p);
    return test_finish();
}
