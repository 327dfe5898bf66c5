/* Sharing over any transport: a message's objects as plain bytes that any
 * process on this machine with the same uid can attach.
 *
 * A channel (cucore/channel.h) carries objects with their fds between two
 * processes that hold its two ends. The share point carries them over a
 * transport of the program's choosing (a pipe, a file, ZeroMQ, HTTP, MPI,
 * Python's pickle): cuc_share_detach() turns a message, built as for a
 * channel (cuc_msg_add_pool, _buffer, _vmm, devices, kernels, ...), into
 * bytes that hold no fd; cuc_share_attach() in any process that gets
 * those bytes makes the message back, its fds fetched from the detaching
 * process's share point, and cuc_msg_get_*() resolves its records as for
 * a message received on a channel. The bytes are a cucore message
 * (docs/wire-format.md, "Detached messages"): a share record naming the
 * share point and the hold's token, then the message's records, each
 * record that carries fds standing in as a held record.
 *
 * The share point is a Unix socket (mode 0600, in a directory of mode
 * 0700 that only this uid owns) served by one background thread of the
 * process: it accepts peers of the same uid only (SO_PEERCRED; a peer in
 * another user namespace without a uid map is refused), answers their
 * claims, and reads their releases. The same thread reads the answers of
 * the share points this process attached from, and sends them the
 * releases this process's frees queued meanwhile, many in one message (an
 * attach sends its claim at once). Nothing is decided by a pid
 * or a clock another process reads: an exporter is alive while its socket
 * accepts, so processes in other PID, mount or time namespaces that see
 * the same socket directory share as processes on the host do
 * (docs/DESIGN.md, "Sharing in containers").
 *
 * Holds and leases. Detaching takes a hold: every object the message
 * leases (buffers, views, VMM resources) is kept for the holder of the
 * bytes under a token of 128 random bits, which only the bytes carry. The
 * first attach claims the hold: it becomes a lease of that process's
 * connection, as a channel send's would be, ending when the importer frees
 * what it imported (or dies). Later attaches of the same bytes get leases
 * of their own while any lease of the hold lives. A hold nobody claims ends
 * after hold_ms; an attach after that, or after every lease of the hold
 * ended, is refused (CUC_E_NOT_FOUND naming the token). Holds and leases
 * are counted by cuc_pool_lease_count(), cuc_buffer_lease_count(),
 * cuc_vmm_lease_count() and waited for by their lease waits, as channel
 * leases are.
 *
 * Attaching maps memory at once where it can (a buffer whose pool this
 * process has: no round trip), and sends its claim without waiting for
 * the answer; the memory is usable only once the exporter confirmed the
 * lease: cuc_buffer_ptr(), the copies and fills wait for that answer
 * (cuc_buffer_ready() says it without using the memory) and fail, naming
 * the token, when the exporter refused the claim. An attach that needs
 * fds (a pool not imported here yet, a VMM resource) waits for them, up
 * to timeout_ms. Destroying an attached message gives back the leases of
 * the records nobody got from it; a message from which nothing was got
 * gives its claim back, and the hold stays for the other holders of the
 * bytes.
 *
 * Fork: the share point belongs to the process that started it. A fork
 * child's copies of its sockets are closed at the fork (the peers see the
 * parent go when it goes); in the child every call here fails with
 * CUC_E_FORKED.
 *
 * Threads: every function is thread-safe.
 */
#ifndef CUCORE_SHARE_H
#define CUCORE_SHARE_H

#include <stddef.h>
#include <stdint.h>

#include <cucore/version.h>
#include <cucore/msg.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Most connections a share point serves at once (cuc_share_opts). */
#define CUC_SHARE_MAX_PEERS_DEFAULT 256u

/* What cuc_share_start() takes. Initialize with cuc_share_opts_init();
 * every field left 0 or NULL takes its default. */
typedef struct cuc_share_opts {
    /* The socket directory: NULL is $CUCORE_SHARE_DIR, else
     * $XDG_RUNTIME_DIR/cucore, else /tmp/cucore-UID. Made with mode 0700
     * if missing; refused unless owned by this uid with no access for
     * others. Processes that share must see the same directory. */
    const char *dir;
    /* How long an unclaimed hold lasts: 0 is $CUCORE_SHARE_HOLD_MS, else
     * 60000; at most 2^31 - 1. */
    int hold_ms;
    /* How long an attach waits for an exporter's answer: 0 is
     * $CUCORE_SHARE_TIMEOUT_MS, else 60000. */
    int timeout_ms;
    /* Most peers served at once: 0 is CUC_SHARE_MAX_PEERS_DEFAULT. At the
     * limit the peer idle longest (a second at least) that holds no lease
     * is disconnected (it connects again when it needs to); if there is
     * none, the newcomer is. A peer that does not read the answers sent
     * to it for 10 s is disconnected too, and its leases end. */
    unsigned max_peers;
} cuc_share_opts;

/* The defaults. */
CUC_API void cuc_share_opts_init(cuc_share_opts *opts);

/* Starts this process's share point (opts NULL: the defaults): the
 * background thread now, the socket at the first detach. Removes the
 * sockets of share points in the directory whose process is gone (nobody
 * accepts on them). Started already: 0, opts ignored. */
CUC_API int cuc_share_start(const cuc_share_opts *opts);

/* Stops the share point: waits up to timeout_ms (-1: forever) for the
 * leases granted through it to end (unclaimed holds are not waited for),
 * then ends every hold and lease, closes every connection (an importer
 * sees this process go), removes the socket and ends the thread. CUC_E_TIMEOUT
 * (naming how many leases of how many peers remained, which ended with
 * the stop) when the wait ran out. Not started: 0. At exit the share
 * point stops with a timeout of $CUCORE_SHARE_EXIT_WAIT_MS (default 0);
 * what it gave up is written to stderr. */
CUC_API int cuc_share_stop(int timeout_ms);

/* The share point's socket path, in buf (len bytes, 108 are enough), or
 * CUC_E_NOT_FOUND before its first detach. */
CUC_API int cuc_share_path(char *buf, size_t len);

/* m as plain bytes (*bytes malloc'd, the caller's to free()), holding
 * what m's records lease for whoever attaches the bytes (above). m is not
 * changed and may be destroyed at once, or sent again. The share point
 * must be started (CUC_E_INVALID otherwise); its socket is made at the
 * first detach. CUC_E_LIMIT past the share point's holds
 * (CUC_SHARE_MAX_HOLDS). */
CUC_API int cuc_share_detach(const cuc_msg *m, void **bytes, size_t *len);

/* Most holds a share point keeps at once. */
#define CUC_SHARE_MAX_HOLDS (1u << 20)

/* The message that was detached into bytes[0..len), owned by the caller
 * (cuc_msg_destroy), with the records it had and in the same order: a
 * record that carried fds carries them again. Starts the share point's
 * thread if it is not running (its socket is not made).
 * Fails, with nothing imported, on: bytes that do not decode
 * (CUC_E_BADMSG, CUC_E_VERSION); bytes of a share point on another
 * machine or boot (CUC_E_FOREIGN_HOST, naming both); a share point whose
 * socket nobody serves any more (CUC_E_EXPORTER_GONE, naming its path);
 * one served by another uid (CUC_E_PERMISSION, naming it); a refused claim
 * (CUC_E_NOT_FOUND naming the token: the hold ended, or every lease of
 * it); no answer in timeout_ms (CUC_E_TIMEOUT); no room for the fds
 * (CUC_E_LIMIT). In the process that detached the bytes the records
 * resolve to the objects themselves (and the hold is claimed). */
CUC_API int cuc_share_attach(const void *bytes, size_t len, cuc_msg **out);

/* ---- the records of a detached message (docs/wire-format.md) ---- */

#define CUC_SHARE_ID_LEN 16u
#define CUC_SHARE_PATH_MAX 107u

/* A share record's fields (cuc_msg_read_share): record 0 of detached
 * bytes. */
struct cuc_share_record {
    uint8_t point[CUC_SHARE_ID_LEN];   /* the share point's identity */
    uint8_t boot_id[CUC_SHARE_ID_LEN]; /* the kernel's boot id where it runs */
    uint8_t token[CUC_SHARE_ID_LEN];   /* the hold's token */
    char path[CUC_SHARE_PATH_MAX + 1]; /* its socket, NUL-terminated */
};
/* Reads share record index, checking every field (CUC_E_BADMSG naming
 * it): the path is absolute, 1..107 bytes with no NUL, zero-padded. */
CUC_API int cuc_msg_read_share(const cuc_msg *msg, size_t index,
                               struct cuc_share_record *rec);

/* A held record's fields (cuc_msg_read_held): a record with fds that the
 * share point keeps, as its type, version, fd count and payload. */
struct cuc_held_record {
    int type;            /* enum cuc_record_type of the record it stands for */
    unsigned version;
    size_t nfds;         /* the fds it carries there */
    const void *payload; /* len bytes, owned by the message */
    size_t len;
};
/* Reads held record index: the inner record must be of a type that
 * carries fds, of a version this cucore reads, and within that type's
 * shape (CUC_E_BADMSG, or CUC_E_VERSION for a newer one). */
CUC_API int cuc_msg_read_held(const cuc_msg *msg, size_t index,
                              struct cuc_held_record *rec);

/* What a share point holds now (for tests and monitoring). */
struct cuc_share_stats {
    size_t holds;     /* detached messages whose hold or leases live */
    size_t unclaimed; /* of those, holds nobody claimed yet */
    size_t peers;     /* connections served */
    size_t exporters; /* connections to share points attached from */
    size_t pending;   /* claims sent and not yet answered */
};
CUC_API int cuc_share_stats(struct cuc_share_stats *out);

#ifdef __cplusplus
}
#endif

#endif
