/* Channels: messages (cucore/msg.h) and the file descriptors they carry,
 * between two processes on one machine, over a Unix-domain socket.
 *
 * A channel is one end of a connected AF_UNIX SOCK_SEQPACKET socket. A
 * message travels as one or more frames (a message with more than 253 fds,
 * the kernel's SCM_RIGHTS limit, or more than 64 KiB of bytes is split and
 * rejoined transparently); fds travel as SCM_RIGHTS and arrive close-on-exec.
 * docs/wire-format.md has the frame layout.
 *
 * The peer is untrusted. A receive checks every frame before it uses it,
 * caps what a peer can make it allocate (CUC_MSG_MAX_BYTES bytes,
 * CUC_MSG_MAX_FDS fds), closes every fd that arrived with anything it
 * refuses, and never waits past its timeout. A framing error (a malformed or
 * truncated frame, fds the frame header does not account for, a sequence
 * gap) leaves the channel unusable: that call and every later receive report
 * the same status and message. A message whose frames are sound but whose
 * content does not decode is dropped with CUC_E_BADMSG or CUC_E_VERSION and
 * the channel stays usable.
 *
 * Leases. When a process exports an object that the importer maps (a pool
 * buffer, a VMM chunk), the exporter must not free it while the importer
 * still uses it. The exporting module registers a lease on the channel it
 * sends the object on; the importer ends it by sending a release
 * (cuc_channel_release(), or implicitly when it frees the imported object).
 * A lease also ends when the exporter's channel sees the peer close or die;
 * it does NOT end when the exporter destroys its channel while the peer
 * lives (see cuc_channel_destroy: the link lingers). Each lease's end
 * callback runs exactly once, on the thread that noticed: inside
 * cuc_channel_recv(), cuc_channel_pump(), a lease wait or
 * cuc_channel_destroy(). An exporter that only sends must
 * call cuc_channel_pump() or cuc_channel_lease_wait() now and then, or it
 * will not notice releases.
 *
 * Fork: a channel belongs to the process that made it. In a child that
 * inherited it through fork() every call on it (send, recv, pump,
 * release, lease count, lease waits) fails with CUC_E_FORKED, naming both
 * pids, and sends nothing, so the parent's channel is untouched;
 * cuc_channel_destroy() there frees only the child's copy (its fd and
 * memory) and ends no lease. To pass a channel to a child, exec it
 * (cuc_channel_fd()).
 * Release messages are consumed by the channel and never returned by
 * cuc_channel_recv().
 *
 * Kernels by reference. A receiver that gets a kernel record from the
 * channel (cuc_msg_get_kernel) keeps its image loaded for as long as its
 * end of the channel exists and tells the sender so (a kernel held
 * record, consumed like releases); from then on cuc_channel_send() sends
 * that kernel as a kernel ref record (hash and name, no image), which the
 * receiver resolves from its cache. The caller's message is not changed.
 * A sender that never receives keeps sending the image.
 *
 * Threads: every function is thread-safe on one channel except
 * cuc_channel_destroy(), which must not race any other call on it. One
 * thread may send while another receives; concurrent sends are serialized
 * (a message's frames never interleave), concurrent receives too (one
 * waits for the other). A listener is used by one thread at a time.
 *
 * Ownership: a channel and a listener belong to the caller that made them
 * (cuc_channel_pair, _from_fd, _connect, cuc_listener_accept;
 * cuc_channel_listen) and are destroyed by it. Messages received from a
 * channel, and objects imported from them, outlive it.
 *
 * Timeouts are in milliseconds: -1 waits forever, 0 does not wait.
 */
#ifndef CUCORE_CHANNEL_H
#define CUCORE_CHANNEL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <cucore/version.h>
#include <cucore/msg.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cuc_channel cuc_channel;
typedef struct cuc_listener cuc_listener;

/* Two connected channels (socketpair). Typical use: create the pair, hand
 * one end to a child (cuc_channel_fd()), destroy that end in the parent. */
CUC_API int cuc_channel_pair(cuc_channel **a, cuc_channel **b);

/* A channel over fd, a connected AF_UNIX SOCK_SEQPACKET socket (one end of
 * a cuc_channel_pair() that a child inherited, for instance). Takes
 * ownership of fd in every case: it is closed on failure. The fd is made
 * close-on-exec. CUC_E_INVALID if fd is not such a socket. The peer's
 * uid is not checked: the caller chose the socket. */
CUC_API int cuc_channel_from_fd(int fd, cuc_channel **ch);

/* The channel's socket, still owned by the channel (or CUC_E_INVALID for
 * NULL). It is close-on-exec; to pass it to a child, clear that between
 * fork() and exec() in the child:
 *     fcntl(fd, F_SETFD, fcntl(fd, F_GETFD) & ~FD_CLOEXEC);
 * (or dup2() it onto the number the child expects, which clears it), give
 * the child the number (argv or environment), and have it call
 * cuc_channel_from_fd(). The parent then closes its copy of that end with
 * cuc_channel_destroy(). */
CUC_API int cuc_channel_fd(const cuc_channel *ch);

/* Frees the channel and its queued messages (and their fds). Ends no
 * lease of a live peer: it may still import what it received, or has yet
 * to receive, so the end of the link that the leases need stays open
 * after the handle is gone, and closes by itself:
 *  - exporter: while leases granted on the channel are held, the destroy
 *    first reads what has arrived: releases end their leases, and if the
 *    peer has closed or died, all of them end there and then (their
 *    objects' deferred frees run inside the destroy) and the socket is
 *    closed (unless imports from the peer hold it: below). Leases left
 *    make the link linger; the process reads it in
 *    cuc_buffer_lease_wait(), cuc_pool_lease_wait(), cuc_vmm_lease_wait()
 *    (with a NULL channel, or any) and in its channels' recv and pump,
 *    ends leases as the releases arrive (or all of them when the peer
 *    closes or dies), drops any other message, and closes the socket
 *    once no lease is held. To wait for the frees after destroying the
 *    channel:
 *        cuc_pool_lease_wait(pool, NULL, 0, timeout_ms);
 *  - importer: while messages received from it or objects imported from
 *    them live, the socket stays open so that their releases still reach
 *    the exporter; it closes with the last of them. It is no longer read:
 *    a peer that keeps sending blocks once the socket buffer is full.
 * The peer sees the close only then. NULL is a no-op. */
CUC_API void cuc_channel_destroy(cuc_channel *ch);

/* Listens at path, a filesystem path of at most 107 bytes. The socket file
 * is created with mode 0600, before any peer can connect. A stale socket
 * at path (nobody listening) is replaced; a live one is CUC_E_BUSY, and so
 * is anything at path that is not a socket (it is never removed). Telling
 * stale from live takes one connection attempt: a live listener's accept
 * then returns a peer that has already closed.
 * cuc_listener_destroy() removes the socket file. */
CUC_API int cuc_channel_listen(const char *path, cuc_listener **l);

/* Waits up to timeout_ms for a peer and returns its channel. A peer whose
 * uid (SO_PEERCRED) is not this process's effective uid, or is the
 * overflow uid (/proc/sys/kernel/overflowuid, 65534 by default: what any
 * uid without a mapping in this process's user namespace reads as, root
 * outside included, and what this process's own reads as in a namespace
 * without a uid map; a peer that really runs as that uid is refused too),
 * is disconnected without a word sent to it and the call fails with
 * CUC_E_PERMISSION (the message gives its pid and uid, and says which of
 * the two; nothing is logged). CUC_E_TIMEOUT if
 * no peer came. CUC_E_FORKED in a child that inherited the listener
 * through fork: its peers are the parent's. */
CUC_API int cuc_listener_accept(cuc_listener *l, int timeout_ms, cuc_channel **ch);

/* The listening socket, still owned by the listener (or CUC_E_INVALID for
 * NULL): to poll it beside other fds, or, in a fork child that will never
 * use the inherited listener, to close the child's copy without touching
 * the listener (which then must not be used or destroyed there). */
CUC_API int cuc_listener_fd(const cuc_listener *l);

/* Stops listening, unlinks the socket file if it is still the one this
 * listener created, and frees the listener. Channels it accepted live on.
 * In a child that inherited it through fork it closes and frees only the
 * child's copy: the parent keeps listening, and its file stays. NULL is a
 * no-op. */
CUC_API void cuc_listener_destroy(cuc_listener *l);

/* Connects to a listener at path. While nothing listens there yet (no
 * socket, or a stale one), retries until timeout_ms has passed: then
 * CUC_E_TIMEOUT, or with timeout_ms 0 CUC_E_NOT_FOUND. A listener run by
 * another uid, or whose uid reads as the overflow uid, is refused with
 * CUC_E_PERMISSION (as cuc_listener_accept refuses a peer). */
CUC_API int cuc_channel_connect(const char *path, int timeout_ms, cuc_channel **ch);

/* Sends the message and its fds; the message is unchanged (its fds are
 * duplicated in flight, the sender keeps its own). Blocks while the
 * socket's buffer is full. CUC_E_PEER_CLOSED if the peer has gone (no
 * SIGPIPE is raised); CUC_E_LIMIT if the kernel refuses more fds in flight
 * (RLIMIT_NOFILE). A failure after part of a split message went out leaves
 * the channel unusable for sending. */
CUC_API int cuc_channel_send(cuc_channel *ch, const cuc_msg *m);

/* Receives the next message, waiting up to timeout_ms (a message split in
 * frames counts as one: the whole wait is bounded by timeout_ms, and a
 * message cut short by the timeout resumes on the next call). The caller
 * owns *m and its fds. Messages queued by cuc_channel_pump() come first.
 * CUC_E_TIMEOUT: nothing complete arrived in time. CUC_E_PEER_CLOSED: the
 * peer closed or died (also mid-message); the leases it held ended.
 * CUC_E_BADMSG / CUC_E_VERSION: see the framing rules above.
 * CUC_E_LIMIT: a message came whose fds this process had no room for (the
 * kernel dropped them: RLIMIT_NOFILE). The message names the limit, the
 * fds the message needed and the fds free; the message is dropped (the
 * rest of its frames are skipped as they arrive), the sender is sent a
 * refused record and ends the message's leases (cuc_channel_refused_count
 * there), and the channel goes on: the next call receives the next
 * message. A socket with SO_PASSCRED set receives a full 253-fd frame. */
CUC_API int cuc_channel_recv(cuc_channel *ch, int timeout_ms, cuc_msg **m);

/* Processes incoming traffic without losing any: waits up to timeout_ms
 * for a message, then takes every message already available; releases end
 * their leases, other messages are queued for cuc_channel_recv(). 0 if at
 * least one message was processed, CUC_E_TIMEOUT if none came,
 * CUC_E_PEER_CLOSED if the peer has gone (its leases ended; queued
 * messages stay readable), CUC_E_BUSY if CUC_CHANNEL_MAX_QUEUED messages
 * wait to be received (call cuc_channel_recv()), CUC_E_LIMIT for a message
 * this process had no room for the fds of (as cuc_channel_recv: dropped,
 * refused to the sender; call again to go on). */
CUC_API int cuc_channel_pump(cuc_channel *ch, int timeout_ms);
#define CUC_CHANNEL_MAX_QUEUED 4096u

/* Importer side: tells the peer (the exporter) that this process no longer
 * uses the objects it imported under these lease ids; the exporter's
 * leases end when its channel processes the release. n must be at least 1;
 * ids the exporter does not know (or already ended) are ignored there.
 * CUC_E_FORKED in a child that inherited the channel through fork. */
CUC_API int cuc_channel_release(cuc_channel *ch, const uint64_t *lease_ids, size_t n);

/* Exporter side: the number of leases not yet ended on objects this process
 * exported over the channel. Counts what has been noticed so far: it drops
 * when a receive, pump or lease wait processes releases. */
CUC_API int cuc_channel_lease_count(cuc_channel *ch, size_t *n);

/* Exporter side: how many messages with leases (buffers, VMM resources)
 * sent on the channel the peer refused (dropped unread because it had no
 * room for their fds; its receive gave CUC_E_LIMIT). Each refusal ends the
 * leases of that message, as a release would: the objects' deferred frees
 * run. A refusal is believed, and counted, once, and only while the
 * message's leases are held: a message without leases, or a refusal
 * repeated or naming a message never sent, ends and counts nothing
 * (docs/wire-format.md, "refused"). Counts what a receive, pump or lease
 * wait has processed so far (as cuc_channel_lease_count); compare before
 * and after to learn that such a message was refused. */
CUC_API int cuc_channel_refused_count(cuc_channel *ch, uint64_t *n);

/* Pumps (as cuc_channel_pump()) until at most max_left leases remain, or
 * timeout_ms has passed (CUC_E_TIMEOUT). Returns 0 as soon as the count is
 * low enough, also when the peer's death ended the leases; CUC_E_BUSY if
 * the queue of received messages is full. */
CUC_API int cuc_channel_lease_wait(cuc_channel *ch, size_t max_left, int timeout_ms);

/* The peer's process id and user id, as the kernel recorded them when the
 * connection was made (SO_PEERCRED). For a cuc_channel_pair() end, the
 * process that created the pair. */
CUC_API int cuc_channel_peer_pid(const cuc_channel *ch, pid_t *pid);
CUC_API int cuc_channel_peer_uid(const cuc_channel *ch, uid_t *uid);

#ifdef __cplusplus
}
#endif
#endif
