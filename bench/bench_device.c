/* Device encode + decode, against the raw driver calls that do the same
 * work: the sender asks the driver for the UUID (cuDeviceGetUuid), the
 * receiver finds the local device with that UUID (cuDeviceGetCount, then
 * cuDeviceGet + cuDeviceGetUuid per device until it matches).
 *
 *   CUCORE_DRIVER=sim build/bench/bench_device      (or unset on a GPU)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_report.h"
#include "cucore.h"
#include "driver/driver.h"

static int raw_once(CUdevice dev, int n)
{
    CUuuid u, v;
    CUdevice d;

    if (CUC_DRV->cuDeviceGetUuid(&u, dev) != CUDA_SUCCESS)
        return -1;
    for (int i = 0; i < n; i++) {
        if (CUC_DRV->cuDeviceGet(&d, i) != CUDA_SUCCESS ||
            CUC_DRV->cuDeviceGetUuid(&v, d) != CUDA_SUCCESS)
            return -1;
        if (memcmp(u.bytes, v.bytes, 16) == 0)
            return i;
    }
    return -1;
}

/* What a sender and a receiver write: the public calls, the sender
 * encoding into a buffer it reuses. */
static int cucore_once(const cuc_device *dev, cuc_device **out)
{
    uint8_t bytes[256];
    size_t len;
    cuc_msg *m, *r;
    int rc;

    if (cuc_msg_create(&m))
        return -1;
    rc = cuc_msg_add_device(m, dev);
    if (!rc)
        rc = cuc_msg_to_buffer(m, bytes, sizeof(bytes), &len);
    cuc_msg_destroy(m);
    if (rc)
        return rc;
    rc = cuc_msg_from_bytes(bytes, len, &r);
    if (rc)
        return rc;
    rc = cuc_msg_get_device(r, 0, out);
    cuc_msg_destroy(r);
    return rc;
}

int main(int argc, char **argv)
{
    long iters = argc > 1 ? atol(argv[1]) : 1000000;
    cuc_device *dev, *got = NULL;
    CUdevice cu;
    double t0, raw_ns, cuc_ns;
    int n, last = -1;

    if (bench_header("bench_device"))
        return 1;
    if (cuc_device_count(&n) || cuc_device_get(n - 1, &dev)) {
        fprintf(stderr, "bench_device: %s\n", cuc_errmsg());
        return 1;
    }
    if (CUC_DRV->cuDeviceGet(&cu, n - 1) != CUDA_SUCCESS) {
        fprintf(stderr, "bench_device: cuDeviceGet failed\n");
        return 1;
    }
    for (long i = 0; i < iters / 10; i++) /* warm-up */
        cucore_once(dev, &got);
    t0 = bench_now_ns();
    for (long i = 0; i < iters; i++)
        last = raw_once(cu, n);
    raw_ns = (bench_now_ns() - t0) / (double)iters;
    t0 = bench_now_ns();
    for (long i = 0; i < iters; i++)
        if (cucore_once(dev, &got))
            return 1;
    cuc_ns = (bench_now_ns() - t0) / (double)iters;
    if (got != dev || last != n - 1) {
        fprintf(stderr, "bench_device: wrong device resolved\n");
        return 1;
    }
    bench_line("device encode+decode", raw_ns, cuc_ns,
               "last of %d devices, %ld iterations; raw: cuDeviceGetUuid + scan", n, iters);
    return 0;
}
