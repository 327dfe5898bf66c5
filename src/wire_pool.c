/* Pool records: an IPC pool as its fd, id, owner UUID, kind and handle
 * type (docs/wire-format.md). Payload (40 bytes): pool id[16], owner
 * device UUID[16], kind u32 (enum cuc_pool_kind), handle type u32 (enum
 * cuc_pool_handle_type); one fd. */
#include "memory_impl.h"

#include <fcntl.h>
#include <string.h>
#include <unistd.h>

_Static_assert(CUC__POOL_PAYLOAD == 40u, "update the pool shape in wire.h");

/* Find-or-import is one step: two threads getting the same new pool must
 * not import it twice. */
static pthread_mutex_t import_lock = PTHREAD_MUTEX_INITIALIZER;

int cuc_msg_add_pool(cuc_msg *m, const cuc_pool *pool)
{
    uint8_t p[CUC__POOL_PAYLOAD];

    if (!m || !pool)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_add_pool: NULL argument");
    if (!(pool->flags & CUC_POOL_IPC))
        return cuc__seterr(CUC_E_NOT_SERIALIZABLE, "the %s pool of device %s was "
                           "created without CUC_POOL_IPC: only an IPC pool can cross "
                           "processes; create it with .flags = CUC_POOL_IPC",
                           cuc__pool_kind_name(pool->kind), cuc_device_uuid_string(pool->dev));
    memcpy(p, pool->id, CUC_POOL_ID_LEN);
    memcpy(p + 16, cuc_device_uuid(pool->dev)->bytes, 16);
    cuc__put32(p + 32, (uint32_t)pool->kind);
    cuc__put32(p + 36, CUC_POOL_HANDLE_POSIX_FD);
    return cuc__msg_add_record(m, CUC_RECORD_POOL, CUC_RECORD_POOL_VERSION, p, sizeof(p),
                               &pool->fd, 1);
}

int cuc__pool_rec_parse(const cuc_msg *m, size_t index, struct cuc__pool_rec *out)
{
    struct cuc__record r;
    uint32_t kind, ht;
    int rc;

    rc = cuc__msg_record_of(m, index, CUC_RECORD_POOL, &r);
    if (rc)
        return rc;
    if (r.len != CUC__POOL_PAYLOAD || r.nfds != 1)
        return cuc__seterr(CUC_E_BADMSG, "pool record %zu has a %u-byte payload and "
                           "%u fds, not %u and 1", index, r.len, r.nfds, CUC__POOL_PAYLOAD);
    kind = cuc__get32(r.payload + 32);
    if (kind != CUC_POOL_DEVICE && kind != CUC_POOL_PINNED_HOST)
        return cuc__seterr(CUC_E_BADMSG, "pool record %zu: kind %u (payload offset 32) "
                           "is neither device (%d) nor pinned host (%d)", index, kind,
                           CUC_POOL_DEVICE, CUC_POOL_PINNED_HOST);
    ht = cuc__get32(r.payload + 36);
    if (ht != CUC_POOL_HANDLE_POSIX_FD)
        return cuc__seterr(CUC_E_BADMSG, "pool record %zu: handle type %u (payload "
                           "offset 36) is not POSIX fd (%d), the only one this cucore "
                           "reads", index, ht, CUC_POOL_HANDLE_POSIX_FD);
    memcpy(out->id, r.payload, CUC_POOL_ID_LEN);
    memcpy(out->owner.bytes, r.payload + 16, 16);
    out->kind = kind;
    out->handle_type = ht;
    out->fd = r.fds[0];
    return 0;
}

static int import_new(const struct cuc__pool_rec *rec, cuc_pool **out)
{
    char hex[2 * CUC_POOL_ID_LEN + 1];
    CUmemoryPool cu;
    cuc_device *dev;
    CUresult r;
    int fd, rc;

    rc = cuc_device_get_by_uuid(&rec->owner, &dev);
    if (!rc)
        rc = cuc__device_activate(dev);
    if (rc)
        return rc;
    /* Ours to keep, so that the pool can be sent on (the driver does not
     * export an imported pool); the message keeps its own. */
    fd = fcntl(rec->fd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0)
        return cuc__errno_err(errno, "cannot duplicate the fd of a pool record");
    r = CUC_DRV->cuMemPoolImportFromShareableHandle(
        &cu, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    if (r != CUDA_SUCCESS) {
        close(fd);
        cuc__pool_id_hex(rec->id, hex);
        return cuc__cuda_err(r, "cuMemPoolImportFromShareableHandle", "%s pool %s of "
                             "device %s: the record's fd is not that pool's",
                             cuc__pool_kind_name((int)rec->kind), hex,
                             cuc_device_uuid_string(dev));
    }
    rc = cuc__pool_wrap_import(dev, cu, (int)rec->kind, fd, rec->id, out);
    if (rc)
        CUC_DRV->cuMemPoolDestroy(cu);
    return rc;
}

/* A pool this process knows under the record's id must be the record's. */
static int check_known(const cuc_pool *p, const struct cuc__pool_rec *rec, size_t index)
{
    char hex[2 * CUC_POOL_ID_LEN + 1], want[CUC_UUID_STRLEN];

    if (cuc_uuid_equal(cuc_device_uuid(p->dev), &rec->owner) && p->kind == (int)rec->kind)
        return 0;
    cuc__pool_id_hex(p->id, hex);
    cuc_uuid_format(&rec->owner, want);
    return cuc__seterr(CUC_E_BADMSG, "pool record %zu names pool %s as a %s pool of "
                       "%s, but this process has that pool as a %s pool of %s", index,
                       hex, cuc__pool_kind_name((int)rec->kind), want,
                       cuc__pool_kind_name(p->kind), cuc_device_uuid_string(p->dev));
}

int cuc_msg_get_pool(const cuc_msg *m, size_t index, cuc_pool **out)
{
    struct cuc__pool_rec rec;
    cuc_pool *p;
    int rc;

    if (!m || !out)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_get_pool: NULL argument");
    rc = cuc__pool_rec_parse(m, index, &rec);
    if (rc)
        return rc;
    if (rec.fd < 0)
        return cuc__seterr(CUC_E_INVALID, "the fd of pool record %zu was taken out of "
                           "the message", index);
    pthread_mutex_lock(&import_lock);
    p = cuc__pool_registry_find(rec.id);
    if (p) {
        rc = check_known(p, &rec, index);
        if (rc)
            cuc_pool_unref(p);
    } else {
        rc = import_new(&rec, &p);
    }
    pthread_mutex_unlock(&import_lock);
    if (!rc)
        *out = p;
    return rc;
}
