/* Channel frame headers and the rejoining of split messages: pure code over
 * bytes and fds (link.c does the socket). */
#include "frame/frame.h"
#include "base/array.h"
#include "base/error.h"
#include "os/fd.h"
#include "wire/wire.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint32_t div_up(uint32_t a, uint32_t b)
{
    return a / b + (a % b != 0);
}

uint32_t cuc__frame_parts(uint32_t len, uint32_t nfds)
{
    uint32_t by_len = div_up(len, CUC__FRAME_MAX_DATA);
    uint32_t by_fds = div_up(nfds, CUC__FRAME_MAX_FDS);
    uint32_t n = by_len > by_fds ? by_len : by_fds;

    return n ? n : 1;
}

void cuc__frame_slice(uint32_t len, uint32_t nfds, uint32_t part, uint32_t *off,
                      uint32_t *plen, uint32_t *fd_off, uint32_t *pnfds)
{
    uint64_t o = (uint64_t)part * CUC__FRAME_MAX_DATA;
    uint64_t fo = (uint64_t)part * CUC__FRAME_MAX_FDS;

    *off = o < len ? (uint32_t)o : len;
    *plen = len - *off < CUC__FRAME_MAX_DATA ? len - *off : CUC__FRAME_MAX_DATA;
    *fd_off = fo < nfds ? (uint32_t)fo : nfds;
    *pnfds = nfds - *fd_off < CUC__FRAME_MAX_FDS ? nfds - *fd_off : CUC__FRAME_MAX_FDS;
}

void cuc__frame_write(uint8_t out[CUC__FRAME_HDR], const struct cuc__frame *f)
{
    cuc__put32(out, CUC__FRAME_MAGIC);
    cuc__put16(out + 4, CUC__FRAME_VERSION);
    cuc__put16(out + 6, 0);
    cuc__put32(out + 8, f->seq);
    cuc__put32(out + 12, f->part);
    cuc__put32(out + 16, f->nparts);
    cuc__put32(out + 20, f->len);
    cuc__put32(out + 24, f->nfds);
    cuc__put32(out + 28, f->msg_len);
    cuc__put32(out + 32, f->msg_nfds);
    cuc__put32(out + 36, 0);
}

static int check_fixed(const uint8_t *b, size_t n)
{
    uint16_t version;

    if (n < CUC__FRAME_HDR)
        return cuc__badmsg("frame of %zu bytes is shorter than the %u-byte frame header",
                           n, CUC__FRAME_HDR);
    if (cuc__get32(b) != CUC__FRAME_MAGIC)
        return cuc__badmsg("bad frame magic 0x%08x at offset 0 (want 0x%08x, \"CUCF\"): "
                           "the peer does not speak the cucore channel protocol",
                           cuc__get32(b), CUC__FRAME_MAGIC);
    version = cuc__get16(b + 4);
    if (version > CUC__FRAME_VERSION)
        return cuc__seterr(CUC_E_VERSION, "frame version %u at offset 4 is newer "
                           "than this cucore reads (%u): upgrade the receiver",
                           version, CUC__FRAME_VERSION);
    if (version == 0)
        return cuc__badmsg("frame version 0 at offset 4 is not valid");
    if (cuc__get16(b + 6))
        return cuc__badmsg("frame flags 0x%04x at offset 6: version %u defines none",
                           cuc__get16(b + 6), CUC__FRAME_VERSION);
    if (cuc__get32(b + 36))
        return cuc__badmsg("reserved frame field at offset 36 is 0x%08x, must be 0",
                           cuc__get32(b + 36));
    return 0;
}

int cuc__frame_parse(const uint8_t *b, size_t n, struct cuc__frame *f)
{
    uint32_t off, plen, fd_off, pnfds, want_parts;
    int rc = check_fixed(b, n);

    if (rc)
        return rc;
    f->seq = cuc__get32(b + 8);
    f->part = cuc__get32(b + 12);
    f->nparts = cuc__get32(b + 16);
    f->len = cuc__get32(b + 20);
    f->nfds = cuc__get32(b + 24);
    f->msg_len = cuc__get32(b + 28);
    f->msg_nfds = cuc__get32(b + 32);
    if (f->len != n - CUC__FRAME_HDR)
        return cuc__badmsg("frame length %u at offset 20, but %zu bytes follow the header",
                           f->len, n - CUC__FRAME_HDR);
    if (f->msg_len > CUC_MSG_MAX_BYTES)
        return cuc__badmsg("message length %u at offset 28 exceeds the maximum of %u",
                           f->msg_len, CUC_MSG_MAX_BYTES);
    if (f->msg_nfds > CUC_MSG_MAX_FDS)
        return cuc__badmsg("message fd count %u at offset 32 exceeds the maximum of %u",
                           f->msg_nfds, CUC_MSG_MAX_FDS);
    want_parts = cuc__frame_parts(f->msg_len, f->msg_nfds);
    if (f->nparts != want_parts)
        return cuc__badmsg("part count %u at offset 16: a message of %u bytes and %u fds "
                           "travels in %u frames", f->nparts, f->msg_len, f->msg_nfds,
                           want_parts);
    if (f->part >= f->nparts)
        return cuc__badmsg("part index %u at offset 12 is not below the part count %u",
                           f->part, f->nparts);
    cuc__frame_slice(f->msg_len, f->msg_nfds, f->part, &off, &plen, &fd_off, &pnfds);
    if (f->len != plen || f->nfds != pnfds)
        return cuc__badmsg("frame %u of %u carries %u bytes (offset 20) and %u fds "
                           "(offset 24); that part of the message is %u bytes and %u fds",
                           f->part, f->nparts, f->len, f->nfds, plen, pnfds);
    return 0;
}

int cuc__reasm_partial(const struct cuc__reasm *r)
{
    return r->next_part != 0;
}

void cuc__reasm_reset(struct cuc__reasm *r)
{
    cuc__close_fds(r->fds, r->nfds);
    free(r->buf);
    free(r->fds);
    r->buf = NULL;
    r->fds = NULL;
    r->len = r->cap = r->nfds = r->fd_cap = 0;
    r->next_part = 0;
    r->dropping = 0;
}

static int append(struct cuc__reasm *r, const struct cuc__frame *f,
                  const uint8_t *data, int *fds, size_t nfds)
{
    /* Grows toward the message's announced size only as its bytes arrive,
     * so a peer that announces 64 MiB and sends 1 KiB costs 1 KiB. */
    int rc = cuc__array_reserve((void **)&r->buf, &r->cap, r->len + f->len, 1,
                                f->msg_len, NULL);

    if (!rc)
        rc = cuc__array_reserve((void **)&r->fds, &r->fd_cap, r->nfds + nfds,
                                sizeof(int), f->msg_nfds, NULL);
    if (rc)
        return rc;
    if (f->len)
        memcpy(r->buf + r->len, data, f->len);
    r->len += f->len;
    if (nfds)
        memcpy(r->fds + r->nfds, fds, nfds * sizeof(int));
    r->nfds += nfds;
    for (size_t i = 0; i < nfds; i++)
        fds[i] = -1;
    return 0;
}

static int check_sequence(struct cuc__reasm *r, const struct cuc__frame *f, size_t nfds)
{
    const struct cuc__frame *p = &r->first;

    if (nfds != f->nfds)
        return cuc__badmsg("frame %u's header counts %u fds (offset 24), but %zu arrived "
                           "with it", f->seq, f->nfds, nfds);
    if (f->seq != r->next_seq)
        return cuc__badmsg("frame sequence number %u at offset 8, expected %u: a frame "
                           "was lost, repeated or injected", f->seq, r->next_seq);
    if (f->part != r->next_part)
        return cuc__badmsg("frame %u is part %u of its message (offset 12), expected "
                           "part %u", f->seq, f->part, r->next_part);
    if (f->part && (f->nparts != p->nparts || f->msg_len != p->msg_len ||
                    f->msg_nfds != p->msg_nfds))
        return cuc__badmsg("frame %u (part %u) says the message is %u bytes, %u fds, %u "
                           "parts; its part 0 said %u bytes, %u fds, %u parts", f->seq,
                           f->part, f->msg_len, f->msg_nfds, f->nparts, p->msg_len,
                           p->msg_nfds, p->nparts);
    return 0;
}

/* The next frame of the message being skipped has come. */
static void skipped(struct cuc__reasm *r, const struct cuc__frame *f)
{
    r->next_seq++;
    if (++r->next_part >= f->nparts) {
        r->next_part = 0;
        r->dropping = 0;
    }
}

int cuc__reasm_refuse(struct cuc__reasm *r, const struct cuc__frame *f, int *fresh,
                      uint32_t *seq0)
{
    int rc = check_sequence(r, f, f->nfds);

    if (rc) {
        cuc__reasm_reset(r);
        return rc;
    }
    *fresh = !r->dropping;
    *seq0 = f->seq - f->part;
    if (f->part == 0)
        r->first = *f;
    /* what arrived of the message goes */
    cuc__close_fds(r->fds, r->nfds);
    r->nfds = 0;
    r->len = 0;
    r->dropping = 1;
    skipped(r, f);
    return 0;
}

int cuc__reasm_push(struct cuc__reasm *r, const struct cuc__frame *f,
                    const uint8_t *data, int *fds, size_t nfds, cuc_msg **out,
                    int *decode_rc)
{
    int rc, adopted = 0;

    *out = NULL;
    *decode_rc = 0;
    rc = check_sequence(r, f, nfds);
    if (rc)
        goto fail;
    if (r->dropping) { /* a later frame of a refused message */
        cuc__close_fds(fds, nfds);
        skipped(r, f);
        return 0;
    }
    r->next_seq++;
    if (f->part == 0)
        r->first = *f;
    if (f->nparts == 1) { /* the common case: no copy */
        *decode_rc = cuc__msg_decode(data, f->len, fds, nfds, out);
        return 0;
    }
    rc = append(r, f, data, fds, nfds);
    if (rc)
        goto fail;
    if (++r->next_part < f->nparts)
        return 0;
    *decode_rc = cuc__msg_decode_adopt(r->buf, r->len, r->fds, r->nfds, out, &adopted);
    if (adopted) { /* the message has the buffer: no copy of a large one */
        r->buf = NULL;
        r->cap = 0;
    }
    r->nfds = 0; /* the decoder owns them now */
    r->len = 0;
    r->next_part = 0;
    if (r->cap > 2 * CUC__FRAME_MAX_DATA) { /* don't keep a big message's buffer */
        free(r->buf);
        r->buf = NULL;
        r->cap = 0;
    }
    return 0;
fail:
    cuc__close_fds(fds, nfds);
    cuc__reasm_reset(r);
    return rc;
}
