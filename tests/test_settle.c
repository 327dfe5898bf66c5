/* The settler (src/memory/settle.c) driven by hand on the simulator, as a
 * share point's thread drives it: ten frees, one a turn, are fenced by
 * the event the completed batch before gave back (one cuEventCreate in
 * all, one cuEventRecord a turn), the device's context is made current
 * once on the settler's thread, each first queued release wakes it, and
 * cuc__settle_stop destroys the event it kept. */
#include "check.h"
#include "cucore.h"
#include "memory/settle.h"
#include "sim_test.h"

#define TURNS 10

static int woken;

static void wake(void *arg)
{
    (void)arg;
    woken++;
}

int main(void)
{
    struct cuc__upstream none = {NULL, 0};
    unsigned long long creates, records, sets, destroys;
    cuc_device *d;

    if (!test_on_sim())
        SKIP("counts the simulator's driver calls");
    CHECK_OK(cuc_device_get(0, &d));
    cuc__settle_start(wake, NULL);
    creates = sim_calls("cuEventCreate");
    records = sim_calls("cuEventRecord");
    sets = sim_calls("cuCtxSetCurrent");
    for (int k = 0; k < TURNS; k++) {
        int turns = 0;
        CHECK(cuc__settle_freeing(d) == 1);
        CHECK_OK(cuc__settle_release(d, &none, 1));
        while (cuc__settle_run() && turns < 100) /* the simulator's work is done */
            turns++;
        CHECK(turns == 0);
    }
    CHECK(woken == TURNS);
    CHECK(sim_calls("cuEventCreate") - creates == 1);
    CHECK(sim_calls("cuEventRecord") - records == TURNS);
    CHECK(sim_calls("cuCtxSetCurrent") - sets <= 1);
    destroys = sim_calls("cuEventDestroy");
    cuc__settle_stop();
    CHECK(sim_calls("cuEventDestroy") - destroys == 1);
    CHECK(cuc__settle_freeing(d) == 0); /* no settler now: the caller synchronizes */
    return test_finish();
}
