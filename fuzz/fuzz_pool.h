/* The pool that fuzz_objects and its corpus generator share: an IPC device
 * pool of device 0, imported again in its own process (the simulator
 * allows it) under a fixed pool id, so that the corpus's buffer records
 * name a pool the target has imported and reach the driver's
 * cuMemPoolImportPointer with mutated export data. */
#ifndef CUC_FUZZ_POOL_H
#define CUC_FUZZ_POOL_H

#include <string.h>

#include "cucore.h"
#include "wire/records.h"

#define FUZZ_POOL_ID "cucore-fuzz-pool" /* 16 bytes, no NUL on the wire */

/* *local: the pool allocated from; *imported: the same memory under
 * FUZZ_POOL_ID. 0 or a cucore status. */
static inline int fuzz_pool_setup(cuc_pool **local, cuc_pool **imported)
{
    struct cuc_pool_props pr = {CUC_POOL_DEVICE, CUC_POOL_IPC, 0};
    struct cuc__record r;
    uint8_t p[40];
    cuc_device *d;
    cuc_msg *m = NULL, *m2;
    int rc;

    rc = cuc_device_get(0, &d);
    if (!rc)
        rc = cuc_pool_create(d, &pr, local);
    if (rc)
        return rc;
    rc = cuc_msg_create(&m);
    if (!rc)
        rc = cuc_msg_add_pool(m, *local);
    if (!rc)
        rc = cuc__msg_record(m, 0, &r);
    if (!rc && !(rc = cuc_msg_create(&m2))) {
        memcpy(p, r.payload, sizeof(p));
        memcpy(p, FUZZ_POOL_ID, 16);
        rc = cuc__msg_add_record(m2, CUC_RECORD_POOL, 1, p, sizeof(p), r.fds, 1);
        if (!rc)
            rc = cuc_msg_get_pool(m2, 0, imported);
        cuc_msg_destroy(m2);
    }
    cuc_msg_destroy(m);
    return rc;
}

#endif
