/* Devices (device.c): the enumeration, the table by UUID, the
 * singletons and the current device; their records (device_share.c). */
#ifndef CUC_DEVICE_DEVICE_H
#define CUC_DEVICE_DEVICE_H

#include "cucore/device.h"
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

/* Makes d's primary context current on this thread (a no-op when it
 * already is). */
int cuc__device_activate(const cuc_device *d);

/* Fills the not-visible error for uuid: names it and lists what this
 * process sees. Returns CUC_E_NOT_VISIBLE. */
int cuc__device_not_visible(const cuc_uuid *uuid);

/* The device that a call with no device of its own uses (a NULL stream
 * with nothing to take a device from): the one current on this thread,
 * else device 0, as the CUDA runtime does. */
int cuc__device_implicit(cuc_device **out);

#endif
