/* libFuzzer target: stream, event, launch-config and kernel records over
 * hostile bytes. Input = message bytes (no fds). A message that decodes
 * has every cuc_msg_get_* called on every record, whatever its type: each
 * must succeed with a usable object or fail with a status, never crash,
 * and a launch config that decodes must satisfy cuc_launch_config_check.
 * A kernel record is also retried with its hash made right, so that the
 * image checks and the driver's image parser see mutated images (a random
 * hash would stop nearly every input at the hash check). Runs on the simulated driver (CUCORE_DRIVER=sim unless set). */
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "objects.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_status(int rc)
{
    /* Only failures a record can cause; anything else is a bug. */
    switch (rc) {
    case 0:
    case CUC_E_INVALID:
    case CUC_E_BADMSG:
    case CUC_E_NOT_VISIBLE:
    case CUC_E_NOT_FOUND:
    case CUC_E_DRIVER:
    case CUC_E_NOMEM:
        return;
    }
    abort();
}

static void resolve_all(const cuc_msg *m, size_t i)
{
    cuc_launch_config cfg;
    cuc_device *dev;
    cuc_stream *s;
    cuc_event *ev;
    cuc_kernel *k;
    int rc;

    check_status(cuc_msg_get_device(m, i, &dev));
    rc = cuc_msg_get_stream(m, i, &s);
    check_status(rc);
    if (!rc && (cuc_stream_kind(s) == CUC_STREAM_CREATED || cuc_stream_synchronize(s)))
        abort();
    rc = cuc_msg_get_event(m, i, &ev);
    check_status(rc);
    if (!rc) {
        if (!(cuc_event_flags(ev) & CUC_EVENT_IPC))
            abort();
        cuc_event_destroy(ev);
    }
    rc = cuc_msg_get_launch_config(m, i, &cfg);
    check_status(rc);
    if (!rc && cuc_launch_config_check(&cfg))
        abort();
    rc = cuc_msg_get_kernel(m, i, &k);
    check_status(rc);
    if (!rc) {
        size_t len;
        if (!cuc_kernel_image(k, &len) || !len || !cuc_kernel_name(k)[0])
            abort();
        cuc_kernel_destroy(k);
    }
}

/* Record i again, with the SHA-256 its declared image lengths imply. */
static void kernel_rehashed(const cuc_msg *m, size_t i)
{
    struct cuc__record r;
    uint32_t name_len, image_len;
    cuc_kernel *k;
    cuc_msg *fixed;
    uint8_t *p;
    int rc;

    if (cuc__msg_record(m, i, &r) || r.type != CUC_RECORD_KERNEL || r.len < CUC__KERNEL_FIXED)
        return;
    name_len = cuc__get32(r.payload + 4);
    image_len = cuc__get32(r.payload + 8);
    if ((uint64_t)CUC__KERNEL_FIXED + name_len + image_len != r.len)
        return;
    p = malloc(r.len);
    if (!p)
        return;
    memcpy(p, r.payload, r.len);
    cuc__sha256(p + CUC__KERNEL_FIXED + name_len, image_len, p + 16);
    if (cuc_msg_create(&fixed) == 0) {
        if (cuc__msg_add_record(fixed, CUC_RECORD_KERNEL, 1, p, r.len, NULL, 0) == 0) {
            rc = cuc_msg_get_kernel(fixed, 0, &k);
            check_status(rc);
            if (!rc)
                cuc_kernel_destroy(k);
        }
        cuc_msg_destroy(fixed);
    }
    free(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int started;
    cuc_msg *m;
    size_t i;

    if (!started) {
        setenv("CUCORE_DRIVER", "sim", 0);
        started = 1;
    }
    if (cuc_msg_from_bytes(data, size, &m) != 0)
        return 0;
    for (i = 0; i < cuc_msg_count(m); i++) {
        resolve_all(m, i);
        kernel_rehashed(m, i);
    }
    cuc_msg_destroy(m);
    return 0;
}
