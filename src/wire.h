/* Internal interface of the wire format (wire.c): the generic record
 * container that each object module fills with its own payload, and that a
 * channel moves with its fds. Layout: docs/wire-format.md. */
#ifndef CUC_WIRE_H
#define CUC_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "cucore/msg.h"

/* Appends a record. payload is copied; fds are dup'ed (F_DUPFD_CLOEXEC)
 * into the message, which owns the copies. */
int cuc__msg_add_record(cuc_msg *m, uint16_t type, uint16_t version,
                        const void *payload, uint32_t len, const int *fds,
                        uint32_t nfds);

/* Like cuc__msg_add_record, but the message takes ownership of fds (closed
 * by the message, also when this call fails). */
int cuc__msg_add_record_owned(cuc_msg *m, uint16_t type, uint16_t version,
                              const void *payload, uint32_t len, int *fds,
                              uint32_t nfds);

/* A view of record index: payload stays owned by the message. */
struct cuc__record {
    uint16_t type;
    uint16_t version;
    uint32_t len;
    const uint8_t *payload;
    uint32_t nfds;
    const int *fds; /* nfds entries, -1 where taken */
};
int cuc__msg_record(const cuc_msg *m, size_t index, struct cuc__record *rec);

/* Moves fd k of record index out of the message to the caller. */
int cuc__msg_take_record_fd(cuc_msg *m, size_t index, uint32_t k, int *fd);

/* Serializes; *fds (borrowed from the message, valid until it changes) are
 * the fds to send beside the bytes, in wire order. bytes is malloc'd. */
int cuc__msg_encode(const cuc_msg *m, uint8_t **bytes, size_t *len,
                    const int **fds, size_t *nfds);

/* Parses bytes that arrived with nfds fds. Takes ownership of every fd in
 * fds, on success (into the message) and on failure (closed). The header's
 * fd count must equal nfds, and each fd must be referenced by exactly one
 * record, in order. */
int cuc__msg_decode(const void *bytes, size_t len, int *fds, size_t nfds,
                    cuc_msg **out);

/* Little-endian helpers for payload codecs. */
static inline void cuc__put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static inline void cuc__put32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static inline void cuc__put64(uint8_t *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static inline uint16_t cuc__get16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline uint32_t cuc__get32(const uint8_t *p) { uint32_t v = 0; for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i); return v; }
static inline uint64_t cuc__get64(const uint8_t *p) { uint64_t v = 0; for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i); return v; }

#endif
