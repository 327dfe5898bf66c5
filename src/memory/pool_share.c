/* Pools in messages: an IPC pool travels as its fd, id, owner UUID, kind
 * and handle type (wire/rec_pool.c). Import finds the pool this process
 * already has under the id (pool.c's table) or imports the fd. */
#include "memory/pool.h"
#include "os/fd.h"
#include "wire/records.h"

#include <string.h>
#include <unistd.h>

int cuc_msg_add_pool(cuc_msg *m, const cuc_pool *pool)
{
    struct cuc_pool_record rec;

    if (!m || !pool)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_add_pool: NULL argument");
    if (!(pool->flags & CUC_POOL_IPC))
        return cuc__seterr(CUC_E_NOT_SERIALIZABLE, "the %s pool of device %s was "
                           "created without CUC_POOL_IPC: only an IPC pool can cross "
                           "processes; create it with .flags = CUC_POOL_IPC",
                           cuc__pool_kind_name(pool->kind), pool->dev->uuid_str);
    memcpy(rec.id, pool->id, CUC_POOL_ID_LEN);
    rec.owner = pool->dev->uuid;
    rec.kind = pool->kind;
    rec.handle_type = CUC_POOL_HANDLE_POSIX_FD;
    rec.fd = pool->fd;
    return cuc__pool_rec_put(m, &rec);
}

static int import_new(const struct cuc_pool_record *rec, cuc_pool **out)
{
    CUC__CTX_KEEP(guard);
    CUmemoryPool cu;
    cuc_device *dev;
    cuc_pool *p;
    CUresult r;
    int fd, rc;

    rc = cuc_device_get_by_uuid(&rec->owner, &dev);
    if (!rc)
        rc = cuc__device_activate(&guard, dev);
    /* Ours to keep, so that the pool can be sent on (the driver does not
     * export an imported pool); the message keeps its own. */
    if (!rc)
        rc = cuc__dup_cloexec(rec->fd, "the fd of a pool record", &fd);
    if (rc)
        return rc;
    r = CUC_DRV->cuMemPoolImportFromShareableHandle(
        &cu, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    if (r != CUDA_SUCCESS) {
        close(fd);
        return cuc__cuda_err(r, "cuMemPoolImportFromShareableHandle", "%s pool %s of "
                             "device %s: the record's fd is not that pool's",
                             cuc__pool_kind_name(rec->kind), cuc__pool_id_hex(rec->id).s,
                             dev->uuid_str);
    }
    rc = cuc__pool_wrap_import(dev, cu, rec->kind, fd, rec->id, &p);
    if (!rc)
        *out = p;
    return rc;
}

/* A pool this process knows under the record's id must be the record's. */
static int check_known(const cuc_pool *p, const struct cuc_pool_record *rec, size_t index)
{
    char want[CUC_UUID_STRLEN];

    if (cuc_uuid_equal(&p->dev->uuid, &rec->owner) && p->kind == rec->kind)
        return 0;
    cuc_uuid_format(&rec->owner, want);
    return cuc__seterr(CUC_E_BADMSG, "pool record %zu names pool %s as a %s pool of "
                       "%s, but this process has that pool as a %s pool of %s", index,
                       cuc__pool_id_hex(p->id).s, cuc__pool_kind_name(rec->kind), want,
                       cuc__pool_kind_name(p->kind), p->dev->uuid_str);
}

/* Find-or-import is one step (cuc__pool_import_lock): two threads getting
 * the same new pool must not import it twice (sim/FACTS.md F47). */
int cuc_msg_get_pool(const cuc_msg *m, size_t index, cuc_pool **out)
{
    struct cuc_pool_record rec;
    cuc_pool *p = NULL;
    int rc;

    if (!m || !out)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_get_pool: NULL argument");
    rc = cuc_msg_read_pool(m, index, &rec);
    if (rc)
        return rc;
    if (rec.fd < 0)
        return cuc__seterr(CUC_E_INVALID, "the fd of pool record %zu was taken out of "
                           "the message", index);
    pthread_mutex_lock(&cuc__pool_import_lock);
    p = cuc__pool_find(rec.id);
    rc = p ? check_known(p, &rec, index) : import_new(&rec, &p);
    pthread_mutex_unlock(&cuc__pool_import_lock);
    if (!rc)
        *out = p;
    else if (p)
        cuc_pool_unref(p); /* perhaps the last: its destroy takes the lock */
    return rc;
}
