/* VMM records: one fd per chunk beside the bytes; in the payload the handle
 * type, the counts, the exporter's lease id, the owner's and the peers'
 * UUIDs and the chunk sizes (docs/wire-format.md). And the import cache
 * that makes a record received on a channel import once.
 *
 * Payload (40 + 16 * npeers + 8 * nchunks bytes):
 *   0  u32 handle type (CUC_VMM_HANDLE_POSIX_FD)
 *   4  u32 nchunks, = the record's fd count, 1..CUC_VMM_MAX_CHUNKS
 *   8  u32 npeers, 0..CUC_VMM_MAX_PEERS
 *   12 u32 reserved, 0 (checked by the decoder: the shape in wire.h)
 *   16 u64 lease id, not 0
 *   24 owner UUID[16]
 *   40 peer UUIDs[16 * npeers]
 *   .. chunk sizes u64[nchunks] */
#include "vmm_impl.h"
#include "lease.h"
#include "wire.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(CUC__VMM_PAYLOAD_MAX == 9256u, "update the vmm shape in wire.h");
_Static_assert(CUC__VMM_FIXED + 8u == 48u && CUC_VMM_MAX_CHUNKS == 1024u,
               "update the vmm shape in wire.h");
_Static_assert(CUC_VMM_MAX_CHUNKS <= CUC_MSG_MAX_FDS, "chunks travel as fds");

static cuc_vmm *cache; /* imported from a channel; cuc__vmm_lock */

/* ---- encode ---- */

static void put_payload(uint8_t *p, const cuc_vmm *v, uint64_t lease_id)
{
    uint8_t *q = p + CUC__VMM_FIXED;
    size_t i;

    cuc__put32(p, CUC_VMM_HANDLE_POSIX_FD);
    cuc__put32(p + 4, (uint32_t)v->nchunks);
    cuc__put32(p + 8, (uint32_t)v->npeers);
    cuc__put32(p + 12, 0);
    cuc__put64(p + 16, lease_id);
    memcpy(p + 24, v->owner->uuid.bytes, 16);
    for (i = 0; i < v->npeers; i++, q += 16)
        memcpy(q, v->peers[i]->uuid.bytes, 16);
    for (i = 0; i < v->nchunks; i++, q += 8)
        cuc__put64(q, v->sizes[i]);
}

static int export_fds(const cuc_vmm *v, int *fds)
{
    size_t i;
    int rc = cuc__device_activate(v->owner);

    if (rc)
        return rc;
    for (i = 0; i < v->nchunks; i++) {
        CUresult r = CUC_DRV->cuMemExportToShareableHandle(
            &fds[i], v->handles[i], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
        if (r != CUDA_SUCCESS) {
            cuc__close_fds(fds, i);
            return cuc__cuda_err(r, "cuMemExportToShareableHandle", "chunk %zu of %zu "
                                 "on device %s", i, v->nchunks, v->owner->uuid_str);
        }
        /* the H200's driver hands these out close-on-exec (probe:
         * "vmm-export-cloexec 1") but not its pool fds ("poolexport-cloexec
         * 0"): set it whatever the driver did, or a child exec'd meanwhile
         * would inherit the chunk */
        if (fcntl(fds[i], F_SETFD, FD_CLOEXEC) < 0) {
            int err = errno;
            cuc__close_fds(fds, i + 1);
            return cuc__errno_err(err, "F_SETFD on the fd of chunk %zu", i);
        }
    }
    return 0;
}

static int check_room(const cuc_msg *m, const cuc_vmm *v)
{
    if (cuc_msg_count(m) >= CUC_MSG_MAX_RECORDS)
        return cuc__seterr(CUC_E_LIMIT, "the message already holds the maximum of %u "
                           "records", CUC_MSG_MAX_RECORDS);
    if (cuc_msg_fd_count(m) + v->nchunks > CUC_MSG_MAX_FDS)
        return cuc__seterr(CUC_E_LIMIT, "a VMM resource of %zu chunks needs %zu fds; "
                           "the message carries %zu of at most %u", v->nchunks,
                           v->nchunks, cuc_msg_fd_count(m), CUC_MSG_MAX_FDS);
    return 0;
}

int cuc_msg_add_vmm(cuc_msg *m, const cuc_vmm *cv)
{
    uint8_t p[CUC__VMM_PAYLOAD_MAX];
    cuc_vmm *v = (cuc_vmm *)cv;
    int fds[CUC_VMM_MAX_CHUNKS];
    uint32_t len;
    uint64_t id;
    int rc;

    if (!m || !v)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_add_vmm: NULL argument");
    if (v->imported)
        return cuc__seterr(CUC_E_NOT_SUPPORTED, "cuc_msg_add_vmm: this VMM resource "
                           "(%zu bytes on %s) was imported from another process; "
                           "send it from the process that created it", v->size,
                           v->owner->uuid_str);
    rc = check_room(m, v);
    if (!rc)
        rc = export_fds(v, fds);
    if (rc)
        return rc;
    id = cuc__lease_id_next();
    /* The lease first: a record whose lease is missing could let the
     * exporter free memory the importer maps. */
    rc = cuc__msg_lease_attach(m, id, &cuc__vmm_lease_ops, v);
    if (rc) {
        cuc__close_fds(fds, v->nchunks);
        return rc;
    }
    len = (uint32_t)(CUC__VMM_FIXED + 16 * v->npeers + 8 * v->nchunks);
    put_payload(p, v, id);
    rc = cuc__msg_add_record_owned(m, CUC_RECORD_VMM, CUC_RECORD_VMM_VERSION, p, len,
                                   fds, (uint32_t)v->nchunks);
    if (rc)
        cuc__msg_lease_pop(m); /* no record: nothing to lease */
    return rc;
}

/* ---- parse ---- */

static int bad(size_t index, const char *fmt, ...) CUC_PRINTF(2, 3);
static int bad(size_t index, const char *fmt, ...)
{
    char what[768];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    return cuc__seterr(CUC_E_BADMSG, "vmm record %zu: %s", index, what);
}

static int parse_counts(const struct cuc__record *r, size_t index, struct cuc__vmm_rec *o)
{
    uint64_t want;

    if (r->len < CUC__VMM_FIXED)
        return bad(index, "%u-byte payload is shorter than its %u-byte fixed part",
                   r->len, CUC__VMM_FIXED);
    o->handle_type = cuc__get32(r->payload);
    o->nchunks = cuc__get32(r->payload + 4);
    o->npeers = cuc__get32(r->payload + 8);
    if (o->handle_type != CUC_VMM_HANDLE_POSIX_FD)
        return bad(index, "handle type %u (payload offset 0) is not one this cucore "
                   "imports (%u, POSIX fd)", o->handle_type, CUC_VMM_HANDLE_POSIX_FD);
    if (o->nchunks == 0 || o->nchunks > CUC_VMM_MAX_CHUNKS)
        return bad(index, "chunk count %u (payload offset 4) outside 1..%u", o->nchunks,
                   CUC_VMM_MAX_CHUNKS);
    if (o->nchunks != r->nfds)
        return bad(index, "chunk count %u (payload offset 4) but %u fds: one fd per "
                   "chunk", o->nchunks, r->nfds);
    if (o->npeers > CUC_VMM_MAX_PEERS)
        return bad(index, "peer count %u (payload offset 8) exceeds %u", o->npeers,
                   CUC_VMM_MAX_PEERS);
    want = CUC__VMM_FIXED + 16ull * o->npeers + 8ull * o->nchunks;
    if (r->len != want)
        return bad(index, "%u-byte payload; %u peers and %u chunks make %llu", r->len,
                   o->npeers, o->nchunks, (unsigned long long)want);
    return 0;
}

static int parse_uuids(size_t index, struct cuc__vmm_rec *o)
{
    const uint8_t *own = o->owner.bytes;
    uint32_t i, j;

    for (i = 0; i < o->npeers; i++) {
        const uint8_t *pi = o->peers + 16 * (size_t)i;
        char text[CUC_UUID_STRLEN];
        cuc_uuid u;
        memcpy(u.bytes, pi, 16);
        cuc_uuid_format(&u, text);
        if (!memcmp(pi, own, 16))
            return bad(index, "peer %u (payload offset %u) is the owner, %s", i,
                       CUC__VMM_FIXED + 16 * i, text);
        for (j = 0; j < i; j++)
            if (!memcmp(pi, o->peers + 16 * (size_t)j, 16))
                return bad(index, "peers %u and %u are both %s", j, i, text);
    }
    return 0;
}

static int parse_sizes(size_t index, struct cuc__vmm_rec *o)
{
    size_t at = CUC__VMM_FIXED + 16 * (size_t)o->npeers;
    uint64_t sum = 0;
    uint32_t i;

    for (i = 0; i < o->nchunks; i++) {
        uint64_t s = cuc__get64(o->sizes + 8 * (size_t)i);
        if (s == 0)
            return bad(index, "chunk %u has size 0 (payload offset %zu)", i, at + 8 * i);
        if (__builtin_add_overflow(sum, s, &sum) || sum > CUC_VMM_MAX_BYTES)
            return bad(index, "chunk sizes 0..%u (from payload offset %zu) add up to "
                       "more than %llu bytes", i, at,
                       (unsigned long long)CUC_VMM_MAX_BYTES);
    }
    o->total = sum;
    return 0;
}

int cuc__vmm_rec_parse(const cuc_msg *m, size_t index, struct cuc__vmm_rec *out)
{
    struct cuc__vmm_rec o;
    struct cuc__record r;
    uint32_t i;
    int rc;

    rc = cuc__msg_record_of(m, index, CUC_RECORD_VMM, &r);
    if (rc)
        return rc;
    rc = parse_counts(&r, index, &o);
    if (rc)
        return rc;
    o.lease_id = cuc__get64(r.payload + 16);
    if (o.lease_id == 0)
        return bad(index, "lease id 0 (payload offset 16) is reserved");
    memcpy(o.owner.bytes, r.payload + 24, 16);
    o.peers = r.payload + CUC__VMM_FIXED;
    o.sizes = o.peers + 16 * (size_t)o.npeers;
    rc = parse_uuids(index, &o);
    if (!rc)
        rc = parse_sizes(index, &o);
    if (rc)
        return rc;
    for (i = 0; i < o.nchunks; i++)
        if (r.fds[i] < 0)
            return cuc__seterr(CUC_E_INVALID, "vmm record %zu: fd %u was taken out of "
                               "the message", index, i);
    o.fds = r.fds;
    *out = o;
    return 0;
}

/* ---- resolve ---- */

/* A device of the record by UUID; the not-visible message says which. */
static int resolve(const uint8_t *bytes, size_t index, const char *role, cuc_device **d)
{
    char why[1024];
    cuc_uuid u;
    int rc;

    memcpy(u.bytes, bytes, 16);
    rc = cuc_device_get_by_uuid(&u, d);
    if (rc == CUC_E_NOT_VISIBLE) {
        snprintf(why, sizeof(why), "%s", cuc_errmsg());
        cuc__seterr(rc, "vmm record %zu: its %s: %s", index, role, why);
    }
    return rc;
}

static int resolve_devices(const struct cuc__vmm_rec *o, size_t index, cuc_device **owner,
                           cuc_device **peers)
{
    char role[32];
    uint32_t i;
    int rc = resolve(o->owner.bytes, index, "owner", owner);

    for (i = 0; !rc && i < o->npeers; i++) {
        snprintf(role, sizeof(role), "peer %u", i);
        rc = resolve(o->peers + 16 * (size_t)i, index, role, &peers[i]);
    }
    return rc;
}

static int check_granularity(const struct cuc__vmm_rec *o, size_t index,
                             const cuc_device *owner, uint64_t *sizes)
{
    size_t g;
    uint32_t i;
    int rc = cuc_vmm_granularity(owner, &g);

    if (rc)
        return rc;
    for (i = 0; i < o->nchunks; i++) {
        sizes[i] = cuc__get64(o->sizes + 8 * (size_t)i);
        if (sizes[i] % g)
            return bad(index, "chunk %u is %llu bytes, not a multiple of the "
                       "granularity of %s (%zu)", i, (unsigned long long)sizes[i],
                       owner->uuid_str, g);
    }
    return 0;
}

static cuc_vmm *cache_find(cuc_channel *ch, uint64_t id)
{
    for (cuc_vmm *v = cache; v; v = v->next)
        if (v->channel == ch && v->lease_id == id)
            return v;
    return NULL;
}

void cuc__vmm_cache_remove(cuc_vmm *v)
{
    for (cuc_vmm **pp = &cache; *pp; pp = &(*pp)->next)
        if (*pp == v) {
            *pp = v->next;
            return;
        }
}

/* The cached import of (ch, id) with a new reference, or NULL. */
static cuc_vmm *cache_get(cuc_channel *ch, uint64_t id)
{
    cuc_vmm *v;

    pthread_mutex_lock(&cuc__vmm_lock);
    v = cache_find(ch, id);
    if (v)
        v->refs++;
    pthread_mutex_unlock(&cuc__vmm_lock);
    return v;
}

/* Registers v as the import of (ch, id), unless another thread got there
 * first: then that one is returned (referenced) and v is left alone. */
static cuc_vmm *cache_put(cuc_vmm *v, cuc_channel *ch, uint64_t id)
{
    cuc_vmm *had;

    pthread_mutex_lock(&cuc__vmm_lock);
    had = cache_find(ch, id);
    if (had) {
        had->refs++;
    } else {
        cuc__channel_ref(ch);
        v->channel = ch;
        v->lease_id = id;
        v->next = cache;
        cache = v;
    }
    pthread_mutex_unlock(&cuc__vmm_lock);
    return had;
}

int cuc_msg_get_vmm(const cuc_msg *m, size_t index, cuc_vmm **out)
{
    cuc_device *owner, *peers[CUC_VMM_MAX_PEERS];
    uint64_t sizes[CUC_VMM_MAX_CHUNKS];
    struct cuc__vmm_rec o;
    cuc_channel *ch;
    cuc_vmm *v, *had;
    int rc;

    if (!m || !out)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_get_vmm: NULL argument");
    rc = cuc__vmm_rec_parse(m, index, &o);
    if (rc)
        return rc;
    ch = cuc__msg_channel(m);
    v = ch ? cache_get(ch, o.lease_id) : NULL;
    if (v) {
        *out = v;
        return 0;
    }
    rc = resolve_devices(&o, index, &owner, peers);
    if (!rc)
        rc = check_granularity(&o, index, owner, sizes);
    if (!rc)
        rc = cuc__vmm_import(owner, peers, o.npeers, o.fds, sizes, o.nchunks, &v);
    if (rc)
        return rc;
    had = ch ? cache_put(v, ch, o.lease_id) : NULL;
    if (had) {
        cuc_vmm_unref(v); /* lost a race with another thread's get */
        v = had;
    }
    *out = v;
    return 0;
}
