/* An importer's frees of imported pool memory and its releases after
 * they complete (settle.c): the exporter may reuse a pool allocation once
 * an importer released it, and the driver wants the importer's
 * stream-ordered free complete by then (cuda.h, cuMemPoolImportPointer).
 * Without a settler each free on a legacy stream is synchronized before
 * its release; while a settler runs (a share point's thread) it frees the
 * pointers dropped since its last turn together, and releases them behind
 * one event a device a turn: the caller's thread neither frees nor waits
 * for the GPU. */
#ifndef CUC_MEMORY_SETTLE_H
#define CUC_MEMORY_SETTLE_H

#include <stddef.h>
#include <stdint.h>

#include "cucore/device.h"
#include "driver/driver.h"

struct cuc__leases;

/* Where an imported buffer came from: the lease table it reports to (a
 * reference) and the lease id to release there. leases NULL: no lease
 * (from plain bytes). */
struct cuc__upstream {
    struct cuc__leases *leases;
    uint64_t id;
};

/* Releases each upstream lease of up[0..n) and drops its table. */
void cuc__upstream_release(struct cuc__upstream *up, size_t n);
/* Drops each upstream lease's table without releasing it: after a failed
 * free of an imported buffer, whose memory may still be in use, the lease
 * stays with the exporter until the channel closes. */
void cuc__upstream_keep(struct cuc__upstream *up, size_t n);

/* 1 while a settler runs: an imported buffer dropped on its device's
 * legacy stream then goes to cuc__settle_free (a stream wait it needs put
 * on that stream first); else the caller frees and synchronizes. */
int cuc__settle_running(void);
/* An imported pointer of dev, dropped on dev's legacy stream, under its
 * pool's lock once the buffer can no longer be found there (imports of
 * dev count it from here on, and wait for it: cuc__settle_wait). Returns
 * 1: the settler frees it and releases anchor and extra[0..nextra) once
 * the free is complete (taken over: their leases set NULL); 0: the
 * settler is gone or there was no memory to queue, and ptr was freed and
 * the stream synchronized here: the caller releases; or the failure,
 * named: the caller keeps the leases (the memory may still be in use). */
int cuc__settle_free(cuc_device *dev, CUdeviceptr ptr, struct cuc__upstream *anchor,
                     struct cuc__upstream *extra, size_t nextra);
/* cuStreamSynchronize of dev's legacy stream (dev made current meanwhile):
 * 0, or the failure, named. */
int cuc__settle_sync(cuc_device *dev);
/* Right after a cuMemFreeAsync of imported memory on dev's legacy stream
 * that nothing else synchronizes or counts (an import undone): counted as
 * queued, so that cuc__settle_wait synchronizes; synchronized here when it
 * cannot be counted (no memory). */
void cuc__settle_freed(cuc_device *dev);

/* Waits for the frees queued on dev since the last synchronize (those
 * the settler has not freed yet freed here first, then one
 * cuStreamSynchronize; none when there are none): before a pool pointer
 * is imported there (a queued free of it would unmap the new import:
 * sim/FACTS.md F29) and before an imported pool is destroyed (its fd stays
 * while a free of its memory has not been synchronized: F46). 0, or the
 * failure. */
int cuc__settle_wait(cuc_device *dev);

/* The settler's turn: the pointers dropped on each device since the last
 * turn freed and an event recorded behind them (an event a completed batch used, or a new one), and
 * the releases of those whose event completed. Returns 1 while some still
 * wait: the settler looks again soon, and is not woken meanwhile (the
 * frees queued meanwhile go with its next turn). One thread only, its own
 * (no user code runs there): the last device it fenced stays current. */
int cuc__settle_run(void);

/* Registers the settler: wake(arg) is called (no lock held) when the
 * first release waits. */
void cuc__settle_start(void (*wake)(void *), void *arg);
/* Unregisters it, after waiting for every queued free (synchronize) and
 * releasing what they kept, and destroys the events it kept; after the
 * settler's thread ended (the caller's context is left as it was). */
void cuc__settle_stop(void);
/* In a forked child: forgets what the parent queued (its leases are the
 * parent's), and the settler. */
void cuc__settle_forget(void);

#endif
