/* Unix-domain datagram sockets (sock.c): poll with a deadline, and a
 * sendmsg / recvmsg pair that moves bytes and fds (SCM_RIGHTS). The
 * receive is written after systemd's recvmsg_safe and libwayland's
 * wayland-os.c: fds arrive close-on-exec (MSG_CMSG_CLOEXEC), the outputs
 * are written only on success, and every failure closes every fd that
 * arrived, whatever the failure. */
#ifndef CUC_OS_SOCK_H
#define CUC_OS_SOCK_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* The kernel's SCM_MAX_FD: most fds one sendmsg may carry. */
#define CUC__SOCK_MAX_FDS 253u

/* poll() for events until the deadline, across EINTR: 0 when ready,
 * CUC_E_TIMEOUT without a message (the caller says what timed out). */
int cuc__poll_until(int fd, short events, int64_t deadline);

/* Sends one datagram, hdr[0..hlen) then data[0..len), with nfds (at most
 * CUC__SOCK_MAX_FDS) fds, which stay the caller's. Blocks while the socket
 * buffer is full; raises no SIGPIPE. CUC_E_PEER_CLOSED when the peer has
 * gone, CUC_E_LIMIT when the kernel refuses more fds in flight
 * (ETOOMANYREFS), CUC_E_IO otherwise (named). */
int cuc__sock_send(int fd, const void *hdr, size_t hlen, const void *data, size_t len,
                   const int *fds, size_t nfds);

/* Receives one datagram into buf (cap bytes) and its fds into fds (room
 * for CUC__SOCK_MAX_FDS), waiting until the deadline. On success *len and
 * *nfds say what arrived. On failure nothing is written and every fd that
 * arrived is closed:
 *   CUC_E_TIMEOUT      nothing arrived in time (no message set);
 *   CUC_E_PEER_CLOSED  end of file, or a reset with nothing left queued
 *                      (no message set: the caller knows what was cut);
 *                      a 0-byte datagram from a peer still connected is
 *                      CUC_E_BADMSG (named);
 *   CUC_E_BADMSG       more fds than CUC__SOCK_MAX_FDS, or a datagram
 *                      longer than cap (named);
 *   CUC_E_LIMIT        the kernel cut the control data (MSG_CTRUNC): this
 *                      process had no room for the fds (RLIMIT_NOFILE).
 *                      The exception to "nothing written": *len and buf
 *                      hold the datagram's bytes, every fd that came was
 *                      closed, no message is set (the caller names it);
 *   CUC_E_IO           recvmsg or poll failed (named). */
int cuc__sock_recv(int fd, void *buf, size_t cap, int64_t deadline, int *fds,
                   size_t *len, size_t *nfds);

/* fd's peer credentials (SO_PEERCRED). */
int cuc__sock_peer(int fd, pid_t *pid, uid_t *uid);

/* 0 if fd is an AF_UNIX SOCK_SEQPACKET socket; CUC_E_INVALID (or the
 * getsockopt failure) naming what it is otherwise. */
int cuc__sock_check_seqpacket(int fd);

#endif
