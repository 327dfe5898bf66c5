/* Every visible device of the process, each made current once (so that
 * fd baselines are taken after the driver opened its contexts' fds), for
 * tests that address devices by ordinal: devs[0..n_dev). */
#ifndef CUC_TEST_DEVICES_H
#define CUC_TEST_DEVICES_H

#include "cucore.h"
#include "check.h"
#include "driver/driver.h"

#define TEST_MAX_DEVICES 64

static int n_dev;
static cuc_device *devs[TEST_MAX_DEVICES];

static inline void open_all(void)
{
    CHECK_OK(cuc_device_count(&n_dev));
    if (n_dev > TEST_MAX_DEVICES)
        n_dev = TEST_MAX_DEVICES;
    for (int i = 0; i < n_dev; i++) {
        CHECK_OK(cuc_device_get(i, &devs[i]));
        CHECK_OK(cuc_device_set_current(devs[i]));
    }
}

/* The last visible GPU's primary context, retained and made current with
 * the raw driver (as PyTorch's runtime does before cucore uses that GPU),
 * in a process where cucore has not made it current: that device. */
static inline cuc_device *test_foreign_primary_current(void)
{
    cuc_device *d;
    CUcontext c;
    CUdevice cu;
    int n;

    CHECK_OK(cuc_device_count(&n));
    CHECK_OK(cuc_device_get(n - 1, &d));
    CHECK(CUC_DRV->cuDeviceGet(&cu, n - 1) == CUDA_SUCCESS);
    CHECK(CUC_DRV->cuDevicePrimaryCtxRetain(&c, cu) == CUDA_SUCCESS);
    CHECK(CUC_DRV->cuCtxSetCurrent(c) == CUDA_SUCCESS);
    return d;
}

/* A message naming the device at ordinal % (devices visible): for the
 * channel tests, whose messages need some content. */
static inline cuc_msg *test_device_msg(int ordinal)
{
    cuc_device *d;
    cuc_msg *m;
    int n;

    CHECK_OK(cuc_device_count(&n));
    CHECK_OK(cuc_device_get(ordinal % n, &d));
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_device(m, d));
    return m;
}

#endif
