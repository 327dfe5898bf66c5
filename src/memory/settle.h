/* An importer's releases after its frees complete (settle.c): the
 * exporter may reuse a pool allocation once an importer released it, and
 * the driver wants the importer's stream-ordered free complete by then
 * (cuda.h, cuMemPoolImportPointer). Without a settler each free on a
 * legacy stream is synchronized before its release; while a settler runs
 * (a share point's thread) the releases wait here instead, behind one
 * event a device a turn, and the caller's thread does not wait for the
 * GPU. */
#ifndef CUC_MEMORY_SETTLE_H
#define CUC_MEMORY_SETTLE_H

#include <stddef.h>
#include <stdint.h>

#include "cucore/device.h"

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

/* Right after an imported buffer's cuMemFreeAsync on dev's legacy stream
 * (before the buffer can no longer be found): 1 when a settler runs, and
 * the free is counted as queued (imports of dev wait for it); 0 when none
 * does: the caller synchronizes (cuc__settle_sync) and releases. */
int cuc__settle_freeing(cuc_device *dev);
/* Then, for a free that cuc__settle_freeing counted: its upstream leases
 * up[0..n) are released once it is complete, by the settler, or here once
 * the stream is synchronized (the settler gone meanwhile, no memory to
 * queue them). The leases are taken over (up[i].leases set NULL). 0, or
 * the synchronize's failure, which keeps the leases (never released: the
 * memory may still be in use). */
int cuc__settle_release(cuc_device *dev, struct cuc__upstream *up, size_t n);
/* cuStreamSynchronize of dev's legacy stream (dev made current meanwhile):
 * 0, or the failure, named. */
int cuc__settle_sync(cuc_device *dev);
/* Right after a cuMemFreeAsync of imported memory on dev's legacy stream
 * that nothing else synchronizes or counts (an import undone): counted as
 * queued, so that cuc__settle_wait synchronizes; synchronized here when it
 * cannot be counted (no memory). */
void cuc__settle_freed(cuc_device *dev);

/* Waits for the frees queued on dev since the last synchronize (one
 * cuStreamSynchronize; none when there are none): before a pool pointer
 * is imported there (a queued free of it would unmap the new import:
 * sim/FACTS.md F29) and before an imported pool is destroyed (its fd stays
 * while a free of its memory has not been synchronized: F46). 0, or the
 * failure. */
int cuc__settle_wait(cuc_device *dev);

/* The settler's turn: an event recorded on each device with frees queued
 * since the last turn (an event a completed batch used, or a new one), and
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
