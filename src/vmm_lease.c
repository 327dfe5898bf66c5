/* Leases on an exporter's VMM resource: each send begins one (it holds a
 * reference, so a free during the lease is deferred), each end drops it and
 * wakes cuc_vmm_lease_wait(). */
#include "vmm_impl.h"
#include "channel_impl.h"
#include "lease.h"

static void op_ref(void *obj)
{
    cuc_vmm_ref(obj);
}

static void op_unref(void *obj)
{
    cuc_vmm_unref(obj);
}

static void op_begin(void *obj)
{
    cuc_vmm *v = obj;

    pthread_mutex_lock(&cuc__vmm_lock);
    v->refs++;
    v->leases++;
    pthread_mutex_unlock(&cuc__vmm_lock);
}

static void op_end(void *obj, uint64_t id, int why)
{
    cuc_vmm *v = obj;
    int last;

    (void)id;
    (void)why;
    cuc__vmm_cond_init();
    pthread_mutex_lock(&cuc__vmm_lock);
    v->leases--;
    last = cuc__vmm_unref_locked(v);
    cuc__vmm_cond_broadcast();
    pthread_mutex_unlock(&cuc__vmm_lock);
    if (last)
        cuc__vmm_teardown(v);
}

const struct cuc__lease_ops cuc__vmm_lease_ops = {op_begin, op_end, op_ref, op_unref};

int cuc_vmm_lease_count(const cuc_vmm *v, size_t *n)
{
    if (!v || !n)
        return cuc__seterr(CUC_E_INVALID, "cuc_vmm_lease_count: NULL argument");
    pthread_mutex_lock(&cuc__vmm_lock);
    *n = v->leases;
    pthread_mutex_unlock(&cuc__vmm_lock);
    return 0;
}

static size_t leases_of(const cuc_vmm *v)
{
    size_t n;

    cuc_vmm_lease_count(v, &n);
    return n;
}

static int timed_out(const cuc_vmm *v, size_t max_left, int timeout_ms)
{
    return cuc__seterr(CUC_E_TIMEOUT, "%zu leases of the VMM resource (%zu bytes on "
                       "%s) still held after %d ms (waiting for at most %zu)",
                       leases_of(v), v->size, v->owner->uuid_str, timeout_ms, max_left);
}

/* Without a channel to pump: sleep until a lease ends elsewhere. */
static int wait_others(cuc_vmm *v, size_t max_left, int64_t deadline, int timeout_ms)
{
    int late = 0;

    cuc__vmm_cond_init();
    pthread_mutex_lock(&cuc__vmm_lock);
    while (v->leases > max_left && !late)
        late = cuc__vmm_cond_wait_until(deadline) != 0;
    late = v->leases > max_left;
    pthread_mutex_unlock(&cuc__vmm_lock);
    return late ? timed_out(v, max_left, timeout_ms) : 0;
}

/* Pumps in short slices, so that leases ended by other threads (on other
 * channels) are seen too. */
#define PUMP_SLICE_MS 20

int cuc_vmm_lease_wait(cuc_vmm *v, cuc_channel *ch, size_t max_left, int timeout_ms)
{
    int64_t deadline = cuc__deadline(timeout_ms);
    int rc;

    if (!v || timeout_ms < -1)
        return cuc__seterr(CUC_E_INVALID, "cuc_vmm_lease_wait: %s",
                           v ? "timeout below -1" : "vmm is NULL");
    while (ch) {
        int left = cuc__remaining(deadline), slice;
        if (leases_of(v) <= max_left)
            return 0;
        if (left == 0)
            return timed_out(v, max_left, timeout_ms);
        slice = left < 0 || left > PUMP_SLICE_MS ? PUMP_SLICE_MS : left;
        rc = cuc_channel_pump(ch, slice);
        if (rc == CUC_E_PEER_CLOSED)
            ch = NULL; /* its leases ended; others may end elsewhere */
        else if (rc && rc != CUC_E_TIMEOUT)
            return rc;
    }
    return wait_others(v, max_left, deadline, timeout_ms);
}
