/* libFuzzer target: stream, event, launch-config, kernel, pool, buffer and
 * vmm records over hostile bytes. Buffer records of pool FUZZ_POOL_ID
 * (fuzz_pool.h) find a pool imported here and reach the driver's pointer
 * import. Input = message bytes; when the header announces fds
 * (at most FUZZ_MAX_FDS), that many real ones come with them: dups of the
 * two chunks (2 and 4 MiB, in turn) of a simulated VMM allocation, so that
 * vmm records get past the fd checks into import and mapping. A message
 * that decodes has every cuc_msg_get_* called on every record, whatever
 * its type: each must succeed with a usable object or fail with a status,
 * never crash, and a launch config that decodes must satisfy cuc_launch_config_check.
 * A kernel record is also retried with its hash made right, so that the
 * image checks and the driver's image parser see mutated images (a random
 * hash would stop nearly every input at the hash check). Runs on the simulated driver (CUCORE_DRIVER=sim unless set). */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

#include "cucore.h"
#include "device/device.h"
#include "exec/kernel.h"
#include "wire/records.h"
#include "fuzz_pool.h"

#define FUZZ_MAX_FDS 16

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
    case CUC_E_NOT_SUPPORTED: /* a vmm chunk whose size is not its fd's */
    case CUC_E_POOL_NOT_IMPORTED: /* a buffer of a pool other than FUZZ_POOL_ID */
    case CUC_E_VERSION: /* an ipc buffer of a handle type this cucore does not know */
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
    cuc_vmm *v;
    cuc_pool *pool;
    cuc_buffer *buf;
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
        cuc_event_unref(ev);
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
    rc = cuc_msg_get_pool(m, i, &pool);
    check_status(rc);
    if (!rc) {
        if (!cuc_pool_is_ipc(pool))
            abort();
        cuc_pool_unref(pool);
    }
    rc = cuc_msg_get_buffer(m, i, &buf);
    check_status(rc);
    if (!rc) {
        if (!cuc_buffer_ptr(buf) || !cuc_buffer_size(buf) || cuc_buffer_unref_async(buf, NULL))
            abort();
    }
    rc = cuc_msg_get_vmm(m, i, &v);
    check_status(rc);
    if (!rc) {
        size_t sum = 0;
        for (size_t c = 0; c < cuc_vmm_chunk_count(v); c++)
            sum += cuc_vmm_chunk_size(v, c);
        if (!cuc_vmm_is_imported(v) || !cuc_vmm_ptr(v) || sum != cuc_vmm_size(v))
            abort();
        cuc_vmm_unref(v);
    }
}

/* The fds of a real simulated VMM allocation (chunks of 2 and 4 MiB),
 * made once. */
static int chunk_fds[2] = {-1, -1};

static void make_chunk_fds(void)
{
    size_t sizes[2] = {(size_t)2 << 20, (size_t)4 << 20};
    cuc_device *d;
    cuc_vmm *v;
    cuc_msg *m;

    if (cuc_device_get(0, &d) || cuc_vmm_create(d, NULL, 0, sizes, 2, &v))
        abort();
    if (cuc_msg_create(&m) || cuc_msg_add_vmm(m, v) ||
        cuc__msg_take_record_fd(m, 0, 0, &chunk_fds[0]) ||
        cuc__msg_take_record_fd(m, 0, 1, &chunk_fds[1]))
        abort();
    cuc_msg_destroy(m);
    cuc_vmm_unref(v); /* the fds keep the memory */
}

/* Decodes data with as many fds as its header announces (up to
 * FUZZ_MAX_FDS; more, or a short header, get none). */
static int decode_with_fds(const uint8_t *data, size_t size, cuc_msg **m)
{
    int fds[FUZZ_MAX_FDS];
    uint32_t n = size >= 16 ? cuc__get32(data + 12) : 0;

    if (n > FUZZ_MAX_FDS)
        n = 0;
    for (uint32_t i = 0; i < n; i++)
        if ((fds[i] = fcntl(chunk_fds[i % 2], F_DUPFD_CLOEXEC, 0)) < 0)
            abort();
    return cuc__msg_decode(data, size, fds, n, m);
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

/* Kept for the process's life: buffer records name FUZZ_POOL_ID. */
static cuc_pool *fuzz_local, *fuzz_imported;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int started;
    cuc_msg *m;
    size_t i;

    if (!started) {
        setenv("CUCORE_DRIVER", "sim", 0);
        make_chunk_fds();
        if (fuzz_pool_setup(&fuzz_local, &fuzz_imported))
            abort();
        started = 1;
    }
    if (decode_with_fds(data, size, &m) != 0)
        return 0;
    for (i = 0; i < cuc_msg_record_count(m); i++) {
        resolve_all(m, i);
        kernel_rehashed(m, i);
    }
    cuc_msg_destroy(m);
    return 0;
}
