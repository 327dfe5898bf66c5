/* Events (event.c): lifetime, reference counts, operations, and the table
 * of events whose IPC handle is known here (created here and sent, or
 * imported here), by handle. Their records (event_share.c) export the
 * handle and import through that table. */
#ifndef CUC_EXEC_EVENT_H
#define CUC_EXEC_EVENT_H

#include "cucore/event.h"
#include "base/htab.h"
#include "device/device.h"

#include <sys/types.h>

struct cuc_event {
    cuc_device *dev;
    CUevent cu;
    unsigned flags;   /* CUC_EVENT_* */
    int imported;     /* opened from another process's handle */
    pid_t creator;    /* fork rule: a child's last unref makes no driver call */
    /* guarded by event.c's table lock */
    int refs;
    int have_ipc;     /* ipc is valid and the event is in the table */
    CUipcEventHandle ipc;
    struct cuc__hnode by_handle;
};

/* A new event object (one reference) around a driver event. NULL when out
 * of memory (the caller destroys cu). */
cuc_event *cuc__event_wrap(cuc_device *dev, CUevent cu, unsigned flags, int imported);

/* ev's IPC handle if it is known (1, *h written), else 0. */
int cuc__event_known_handle(const cuc_event *ev, CUipcEventHandle *h);

/* The event of this process whose IPC handle is h, with a new reference;
 * NULL if there is none. */
cuc_event *cuc__event_find(const CUipcEventHandle *h);

/* Records h as ev's handle and makes ev findable by it, unless an event
 * with that handle is known already: then that one is returned with a new
 * reference (ev is left as it was), else NULL. CUC_E_NOMEM is reported
 * through *rc. */
cuc_event *cuc__event_publish(cuc_event *ev, const CUipcEventHandle *h, int *rc);

/* A failed driver call on ev, naming it. */
int cuc__event_err(CUresult r, const char *call, const cuc_event *ev);

#endif
