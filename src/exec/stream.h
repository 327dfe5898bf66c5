/* Streams (stream.c) and their records (stream_share.c). */
#ifndef CUC_EXEC_STREAM_H
#define CUC_EXEC_STREAM_H

#include "cucore/stream.h"
#include "device/device.h"

#include <sys/types.h>

struct cuc_stream {
    cuc_device *dev;
    CUstream cu;
    int kind; /* enum cuc_stream_kind */
    pid_t creator; /* fork rule: a child's destroy makes no driver call */
    int foreign;   /* cuc_stream_wrap: the driver's stream is its maker's */
};

/* The stream a call orders its work on: s itself, or for NULL the legacy
 * default stream of dev, or with dev NULL too of the implicit device
 * (cucore/stream.h, "NULL streams"). */
int cuc__stream_or_legacy(cuc_device *dev, cuc_stream *s, cuc_stream **out);

/* s's device made current until g ends, for a driver call on s. */
static inline int cuc__stream_activate(struct cuc__ctx_guard *g, const cuc_stream *s)
{
    return cuc__device_activate(g, s->dev);
}

/* A failed driver call on s, naming the stream's kind and device. */
int cuc__stream_err(CUresult r, const char *call, const cuc_stream *s);

#endif
