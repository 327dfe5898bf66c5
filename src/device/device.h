/* Devices (device.c): the enumeration, the table by UUID, the
 * singletons and the current device; their records (device_share.c). */
#ifndef CUC_DEVICE_DEVICE_H
#define CUC_DEVICE_DEVICE_H

#include "cucore/device.h"
#include "base/compiler.h"
#include "base/htab.h"
#include "driver/driver.h"

struct cuc_device {
    int ordinal;
    CUdevice cu;
    cuc_uuid uuid;
    char uuid_str[CUC_UUID_STRLEN];
    char name[128];
    char pci_bus_id[32];
    int cc_major, cc_minor;
    size_t total_mem;
    unsigned caps;
    CUcontext ctx; /* primary context, retained once, never released */
    struct cuc__hnode by_uuid;
};

/* How a call makes its object's device current. An operation (a create,
 * an import, a copy, a launch) leaves that device's primary context
 * current, as cucore/stream.h promises. A teardown (an unref, a destroy,
 * a lease's end) puts back the context the thread had: it runs whenever
 * the last reference goes, in a thread and at a moment the application
 * does not choose (Python's collector, another thread's release), and a
 * runtime such as PyTorch's takes its current device from the current
 * context.
 *
 * The function that makes the driver calls declares CUC__CTX_KEEP(name)
 * or CUC__CTX_RESTORE(name); a helper that activates for its caller takes
 * the caller's guard. Guards nest: each restoring one puts back what was
 * current at its first switch. */
struct cuc__ctx_guard {
    CUcontext saved;
    int switched;
    const struct cuc_device *dev; /* made or found current under this guard */
};

void cuc__ctx_guard_end(struct cuc__ctx_guard *g);

#define CUC__CTX_KEEP(name) struct cuc__ctx_guard name = {NULL, 0, NULL}
#define CUC__CTX_RESTORE(name) \
    struct cuc__ctx_guard name CUC_CLEANUP(cuc__ctx_guard_end) = {NULL, 0, NULL}

/* Makes d's primary context current on this thread until g ends (a no-op
 * when it already is current; if the driver cannot say what is current,
 * d's stays after g ends). Within one guard nothing else changes the
 * thread's context (an inner guard puts back what it found), so a second
 * activation of the guard's device asks the driver nothing. */
int cuc__device_activate(struct cuc__ctx_guard *g, const cuc_device *d);

/* Fills the not-visible error for uuid: names it and lists what this
 * process sees. Returns CUC_E_NOT_VISIBLE. */
int cuc__device_not_visible(const cuc_uuid *uuid);

/* The device that a call with no device of its own uses (a NULL stream
 * with nothing to take a device from): the one current on this thread,
 * else device 0, as the CUDA runtime does. */
int cuc__device_implicit(cuc_device **out);

#endif
