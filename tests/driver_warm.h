/* Opens what the real driver opens once and then keeps: the first IPC
 * event a process creates on a device opens one fd that stays open after
 * the event is destroyed (sim/FACTS.md F11). Tests that count fds call this
 * before FD_BASELINE(), so that the count measures cucore's fds, not the
 * driver's one-time ones: an IPC event on every device. */
#ifndef CUC_TEST_DRIVER_WARM_H
#define CUC_TEST_DRIVER_WARM_H

#include "cucore.h"
#include "check.h"

static inline void test_warm_driver_fds(void)
{
    int n = 0;

    CHECK_OK(cuc_device_count(&n));
    for (int i = 0; i < n; i++) {
        cuc_device *dev;
        cuc_event *ev;

        CHECK_OK(cuc_device_get(i, &dev));
        CHECK_OK(cuc_event_create(dev, CUC_EVENT_IPC, &ev));
        cuc_event_unref(ev);
    }
}

#endif
