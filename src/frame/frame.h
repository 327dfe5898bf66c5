/* Channel frames (docs/wire-format.md, "Channel frames"): the fixed header
 * in front of each piece of a message on the socket, and the reassembly of
 * a split message. Pure functions over bytes and fds, no socket (link.c
 * moves frames on one): the frame fuzzer drives them directly. */
#ifndef CUC_FRAME_FRAME_H
#define CUC_FRAME_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include "cucore/msg.h"
#include "os/sock.h"

#define CUC__FRAME_MAGIC 0x46435543u /* "CUCF" */
#define CUC__FRAME_VERSION 1u
#define CUC__FRAME_HDR 40u
/* Message bytes and fds one frame carries at most. 253 is the kernel's
 * SCM_MAX_FD; 64 KiB keeps a frame well inside the default socket buffer
 * (net.core.wmem_default, 208 KiB), which a SEQPACKET datagram must fit. */
#define CUC__FRAME_MAX_DATA (64u * 1024u)
#define CUC__FRAME_MAX_FDS CUC__SOCK_MAX_FDS
#define CUC__FRAME_MAX_PARTS (CUC_MSG_MAX_BYTES / CUC__FRAME_MAX_DATA)

struct cuc__frame {
    uint32_t seq;      /* frame number on this direction of the channel */
    uint32_t part;     /* index of this frame in its message */
    uint32_t nparts;   /* frames of the message */
    uint32_t len;      /* message bytes in this frame */
    uint32_t nfds;     /* fds in this frame */
    uint32_t msg_len;  /* message bytes in all its frames */
    uint32_t msg_nfds; /* fds in all its frames */
};

/* Frames a message of len bytes and nfds fds is split into, and what
 * frame part of it carries (the split is fixed: a receiver checks it). */
uint32_t cuc__frame_parts(uint32_t len, uint32_t nfds);
void cuc__frame_slice(uint32_t len, uint32_t nfds, uint32_t part, uint32_t *off,
                      uint32_t *plen, uint32_t *fd_off, uint32_t *pnfds);

void cuc__frame_write(uint8_t out[CUC__FRAME_HDR], const struct cuc__frame *f);

/* Parses and checks one frame of n bytes (header + data): every field, the
 * caps, and that the frame is the slice of its message the split rule
 * gives. CUC_E_BADMSG (CUC_E_VERSION for a newer frame version), with the
 * field and offset in the message. */
int cuc__frame_parse(const uint8_t *buf, size_t n, struct cuc__frame *f);

/* A message being rejoined from its frames. */
struct cuc__reasm {
    uint32_t next_seq;
    uint32_t next_part; /* 0: between messages */
    struct cuc__frame first;
    uint8_t *buf;
    size_t len, cap;
    int *fds;
    size_t nfds, fd_cap;
    int dropping; /* the rest of a refused message's frames are skipped */
};

/* Feeds one parsed frame, its data and the fds that arrived with it (which
 * the call owns from now on: kept, or closed on failure). Returns nonzero
 * only for a framing error: a frame that breaks the sequence (seq, part,
 * totals, fds the header does not count) is CUC_E_BADMSG, and the state is
 * then of no further use. Otherwise, when the frame completes a message,
 * *out is the decoded message, or NULL with *decode_rc the decoder's
 * failure (the message is dropped, its fds closed, the next can follow);
 * when more frames are needed, *out is NULL and *decode_rc 0. */
int cuc__reasm_push(struct cuc__reasm *r, const struct cuc__frame *f,
                    const uint8_t *data, int *fds, size_t nfds, cuc_msg **out,
                    int *decode_rc);

/* Takes frame f whose fds this process could not receive (the kernel
 * dropped them: os/sock.h's CUC_E_LIMIT). The frame's sequence is checked
 * as for any frame (nonzero: a framing error, as cuc__reasm_push); its
 * message is dropped, with what arrived of it, and its later frames are
 * skipped as they come. *fresh is 1 when this is the first refused frame
 * of its message, *seq0 then that message's first frame number. */
int cuc__reasm_refuse(struct cuc__reasm *r, const struct cuc__frame *f, int *fresh,
                      uint32_t *seq0);

/* 1 while a message is partly received. */
int cuc__reasm_partial(const struct cuc__reasm *r);

/* Drops a partial message (closing its fds) and frees the buffers. */
void cuc__reasm_reset(struct cuc__reasm *r);

#endif
