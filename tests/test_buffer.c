/* Buffers in one process: allocation and free on streams (created,
 * default, NULL), the driver's bytes-in-use following them; copies host ->
 * device -> device -> host and fills, checked byte for byte, on device and
 * pinned host pools; references; and the deferred free: a buffer attached
 * to a message, or leased over an in-process channel pair, keeps its
 * memory after its last cuc_buffer_unref_async() until the message goes or the
 * lease ends (release, the importer's close, the exporter's close). */
#include <pthread.h>

#include "pool_test.h"
#include "memory/buffer.h"

#define dev0 (devs[0])
#define new_pool pt_new_pool

static void test_alloc_args(void)
{
    cuc_pool *p = new_pool(dev0, CUC_POOL_DEVICE, 0);
    cuc_buffer *b = NULL;

    CHECK_RC(cuc_buffer_alloc_async(NULL, 16, NULL, &b), CUC_E_INVALID);
    CHECK_RC(cuc_buffer_alloc_async(p, 16, NULL, NULL), CUC_E_INVALID);
    CHECK(b == NULL);
    CHECK_OK(cuc_buffer_unref_async(NULL, NULL));
    CHECK(cuc_buffer_ref(NULL) == NULL);
    CHECK(pt_used(p) == 0);
    cuc_pool_unref(p);
}

/* host -> a -> b -> host, fills, on the pools of one device. */
static void check_copies(cuc_device *d, int kind)
{
    const size_t n = 3 * 4096 + 17;
    cuc_pool *p = new_pool(d, kind, 0);
    uint8_t *src = malloc(n), *dst = malloc(n);
    cuc_stream *s, *legacy;
    cuc_buffer *a, *b;

    CHECK(src && dst);
    CHECK_OK(cuc_stream_create(d, CUC_STREAM_NON_BLOCKING, 0, &s));
    CHECK_OK(cuc_stream_legacy(d, &legacy));
    CHECK_OK(cuc_buffer_alloc_async(p, n, s, &a));
    CHECK_OK(cuc_buffer_alloc_async(p, n, NULL, &b));
    CHECK(cuc_buffer_size(a) == n && cuc_buffer_device(a) == d);
    CHECK(!cuc_buffer_is_imported(a));
    CHECK(cuc_buffer_ptr(a) != cuc_buffer_ptr(b));
    CHECK(pt_used(p) == 2 * n); /* the driver counts the bytes asked for */
    pt_pattern(0x1234 + (uint64_t)kind, src, n);
    CHECK_OK(cuc_memcpy_async(cuc_buffer_ptr(a), src, n, s));
    CHECK_OK(cuc_memcpy_async(cuc_buffer_ptr(b), cuc_buffer_ptr(a), n, s));
    CHECK_OK(cuc_stream_synchronize(s));
    memset(dst, 0, n);
    CHECK_OK(cuc_memcpy(dst, cuc_buffer_ptr(b), n, s));
    CHECK(memcmp(src, dst, n) == 0);
    /* a fill of part of b, and an offset copy */
    CHECK_OK(cuc_memset_async((uint8_t *)cuc_buffer_ptr(b) + 100, 0xa5, 1000, s));
    CHECK_OK(cuc_memcpy(dst, cuc_buffer_ptr(b), n, s));
    for (size_t i = 0; i < n; i++)
        CHECK(dst[i] == (i >= 100 && i < 1100 ? 0xa5 : src[i]));
    CHECK_OK(cuc_memset(cuc_buffer_ptr(a), 0, n, legacy));
    CHECK_OK(cuc_memcpy(dst, (uint8_t *)cuc_buffer_ptr(a) + 1, n - 1, legacy));
    for (size_t i = 0; i < n - 1; i++)
        CHECK(dst[i] == 0);
    if (kind == CUC_POOL_PINNED_HOST) {
        /* pinned host memory is the host's too */
        volatile uint8_t *h = cuc_buffer_ptr(b);
        CHECK(h[100] == 0xa5 && h[99] == src[99]);
    }
    /* arguments */
    CHECK_RC(cuc_memcpy_async(NULL, src, 1, s), CUC_E_INVALID);
    CHECK_RC(cuc_memcpy_async(dst, NULL, 1, s), CUC_E_INVALID);
    CHECK_RC(cuc_memset_async(NULL, 0, 1, s), CUC_E_INVALID);
    /* a NULL stream is the legacy default stream of the current device,
     * as for cuc_buffer_alloc_async */
    CHECK_OK(cuc_device_set_current(d));
    CHECK_OK(cuc_memset_async(cuc_buffer_ptr(a), 0x3c, 16, NULL));
    memset(dst, 0, 16);
    CHECK_OK(cuc_memcpy(dst, cuc_buffer_ptr(a), 16, NULL));
    for (size_t i = 0; i < 16; i++)
        CHECK(dst[i] == 0x3c);
    CHECK_OK(cuc_memcpy_async(dst, src, 1, NULL));
    CHECK_OK(cuc_memset(cuc_buffer_ptr(a), 0, n, NULL));
    CHECK_OK(cuc_memcpy_async(NULL, NULL, 0, s));
    CHECK_OK(cuc_memset_async(NULL, 0, 0, s));
    if (test_on_sim()) {
        /* the sim checks ranges against allocations */
        CHECK_RC(cuc_memset((uint8_t *)cuc_buffer_ptr(a) + 1, 0, n + 4096, s),
                 CUC_E_DRIVER);
        CHECK(strstr(cuc_errmsg(), "cuMemsetD8Async") != NULL);
    }
    CHECK_OK(cuc_buffer_unref_async(a, s));
    CHECK_OK(cuc_buffer_unref_async(b, NULL));
    CHECK_OK(cuc_stream_synchronize(s));
    CHECK(pt_used(p) == 0);
    cuc_stream_destroy(s);
    cuc_pool_unref(p);
    free(src);
    free(dst);
}

static void test_refs(void)
{
    cuc_pool *p = new_pool(dev0, CUC_POOL_DEVICE, 0);
    cuc_buffer *b;

    CHECK_OK(cuc_buffer_alloc_async(p, 1000, NULL, &b));
    CHECK(cuc_buffer_ref(b) == b);
    CHECK_OK(cuc_buffer_unref_async(b, NULL));
    CHECK(pt_used(p) == 1000); /* one reference left */
    pt_fill(b, 3);
    CHECK(pt_holds(b, 3));
    CHECK_OK(cuc_buffer_unref_async(b, NULL));
    CHECK(pt_used(p) == 0);
    cuc_pool_unref(p);
}

static void test_imported_pool_refused(void)
{
    struct cuc_pool_props pr = {CUC_POOL_DEVICE, CUC_POOL_IPC, 0};
    cuc_pool *p;
    cuc_buffer *b;

    /* Pretend: an imported pool is one whose flag says so. The real case
     * runs in test_pool_multiproc's children. */
    CHECK_OK(cuc_pool_create(dev0, &pr, &p));
    p->imported = 1;
    CHECK_RC(cuc_buffer_alloc_async(p, 64, NULL, &b), CUC_E_INVALID);
    CHECK(strstr(cuc_errmsg(), "imported") != NULL);
    p->imported = 0;
    cuc_pool_unref(p);
}

/* A message holding a buffer keeps its memory past the last free; the
 * free waits on the legacy stream for the free's own stream. */
static void test_message_holds(void)
{
    cuc_pool *p = new_pool(dev0, CUC_POOL_DEVICE, CUC_POOL_IPC);
    cuc_stream *s;
    cuc_buffer *b;
    cuc_msg *m;
    size_t n = 99;

    CHECK_OK(cuc_stream_create(dev0, CUC_STREAM_NON_BLOCKING, 0, &s));
    CHECK_OK(cuc_buffer_alloc_async(p, 5000, s, &b));
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_buffer(m, b));
    CHECK_OK(cuc_buffer_unref_async(b, s));
    CHECK(pt_used(p) == 5000); /* the message keeps it */
    CHECK_OK(cuc_pool_lease_count(p, &n));
    CHECK(n == 0); /* held, not leased: never sent */
    cuc_msg_destroy(m);
    CHECK_OK(cuc_stream_synchronize(s));
    CHECK(pt_used(p) == 0);
    cuc_stream_destroy(s);
    cuc_pool_unref(p);
}

static size_t pool_leases(const cuc_pool *p)
{
    size_t n = 99;

    CHECK_OK(cuc_pool_lease_count(p, &n));
    return n;
}

static size_t buf_leases(const cuc_buffer *b)
{
    size_t n = 99;

    CHECK_OK(cuc_buffer_lease_count(b, &n));
    return n;
}

/* Sends b on a; returns the message received on c (not resolved). */
static cuc_msg *send_recv(cuc_channel *a, cuc_channel *c, const cuc_buffer *b)
{
    cuc_msg *m, *got;

    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_buffer(m, b));
    CHECK_OK(cuc_channel_send(a, m));
    cuc_msg_destroy(m);
    CHECK_OK(cuc_channel_recv(c, 5000, &got));
    return got;
}

/* Over an in-process pair the receiving side gets the very object back;
 * its free is what releases the lease. */
static void test_lease_release(void)
{
    cuc_pool *p = new_pool(dev0, CUC_POOL_DEVICE, CUC_POOL_IPC);
    cuc_channel *a, *c;
    cuc_buffer *b, *again;
    cuc_msg *got;

    CHECK_OK(cuc_channel_pair(&a, &c));
    CHECK_OK(cuc_buffer_alloc_async(p, 256, NULL, &b));
    pt_fill(b, 11);
    got = send_recv(a, c, b);
    CHECK(buf_leases(b) == 1 && pool_leases(p) == 1);
    CHECK_OK(cuc_buffer_unref_async(b, NULL)); /* deferred: leased */
    CHECK(pt_used(p) == 256);
    CHECK_OK(cuc_msg_get_buffer(got, 0, &again));
    CHECK(again == b); /* revived: the same object, its bytes intact */
    CHECK(pt_holds(again, 11));
    cuc_msg_destroy(got);
    CHECK_RC(cuc_pool_lease_wait(p, a, 0, 50), CUC_E_TIMEOUT);
    CHECK(strstr(cuc_errmsg(), "1 lease") != NULL);
    CHECK_OK(cuc_buffer_unref_async(again, NULL)); /* sends the release on c */
    CHECK_OK(cuc_pool_lease_wait(p, a, 0, 5000));
    CHECK(pool_leases(p) == 0);
    CHECK(pt_used(p) == 0); /* the deferred free ran */
    cuc_channel_destroy(a);
    cuc_channel_destroy(c);
    cuc_pool_unref(p);
}

/* A deferred free from a created stream waits for that stream's work (an
 * event recorded now); from the legacy stream it needs none (the later
 * free goes on that stream). Both run once the lease ends. */
static void test_deferred_streams(void)
{
    cuc_pool *p = new_pool(dev0, CUC_POOL_DEVICE, CUC_POOL_IPC);
    cuc_buffer *b[2];
    cuc_channel *a, *c;
    cuc_stream *s;
    cuc_msg *got[2];

    CHECK_OK(cuc_stream_create(dev0, CUC_STREAM_NON_BLOCKING, 0, &s));
    CHECK_OK(cuc_channel_pair(&a, &c));
    for (int i = 0; i < 2; i++) {
        CHECK_OK(cuc_buffer_alloc_async(p, 512, s, &b[i]));
        CHECK_OK(cuc_memset_async(cuc_buffer_ptr(b[i]), 7, 512, s));
        got[i] = send_recv(a, c, b[i]);
    }
    CHECK_OK(cuc_buffer_unref_async(b[0], s)); /* an event on s */
    CHECK(b[0]->free_after != NULL);
    CHECK_OK(cuc_buffer_unref_async(b[1], NULL)); /* the legacy stream: none */
    CHECK(b[1]->free_after == NULL);
    CHECK(pt_used(p) == 1024);
    for (int i = 0; i < 2; i++)
        cuc_msg_destroy(got[i]); /* the in-process receiver drops its holds */
    cuc_channel_destroy(c); /* the peer goes: both leases end */
    CHECK_OK(cuc_pool_lease_wait(p, a, 0, 5000));
    CHECK(pt_used(p) == 0);
    cuc_channel_destroy(a);
    cuc_stream_destroy(s);
    cuc_pool_unref(p);
}

/* The importer's close, the exporter's close, and a send that fails all
 * end leases; a buffer still referenced stays. */
static void test_lease_closes(void)
{
    cuc_pool *p = new_pool(dev0, CUC_POOL_DEVICE, CUC_POOL_IPC);
    cuc_channel *a, *c;
    cuc_buffer *b1, *b2;
    cuc_msg *got1, *got2, *m;

    CHECK_OK(cuc_buffer_alloc_async(p, 512, NULL, &b1));
    CHECK_OK(cuc_buffer_alloc_async(p, 1024, NULL, &b2));
    /* importer closes */
    CHECK_OK(cuc_channel_pair(&a, &c));
    got1 = send_recv(a, c, b1);
    got2 = send_recv(a, c, b2);
    CHECK(pool_leases(p) == 2);
    CHECK_OK(cuc_buffer_unref_async(b1, NULL));
    CHECK(pt_used(p) == 1536);
    cuc_msg_destroy(got1);
    cuc_msg_destroy(got2);
    cuc_channel_destroy(c);
    CHECK_OK(cuc_pool_lease_wait(p, a, 0, 5000));
    CHECK(pt_used(p) == 1024); /* b1 went; b2 is still ours */
    CHECK(buf_leases(b2) == 0);
    cuc_channel_destroy(a);
    /* exporter closes */
    CHECK_OK(cuc_channel_pair(&a, &c));
    got2 = send_recv(a, c, b2);
    CHECK_OK(cuc_buffer_unref_async(b2, NULL));
    CHECK(pt_used(p) == 1024);
    /* the close ends no lease: the peer may still import */
    cuc_channel_destroy(a);
    CHECK(pool_leases(p) == 1 && pt_used(p) == 1024);
    cuc_msg_destroy(got2);
    cuc_channel_destroy(c);
    /* the importer's end closed: the lingering link sees it */
    CHECK_OK(cuc_pool_lease_wait(p, NULL, 0, 5000));
    CHECK(pool_leases(p) == 0 && pt_used(p) == 0);
    /* a send to a peer that has gone */
    CHECK_OK(cuc_channel_pair(&a, &c));
    cuc_channel_destroy(c);
    CHECK_OK(cuc_buffer_alloc_async(p, 64, NULL, &b1));
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_buffer(m, b1));
    CHECK(cuc_channel_send(a, m) != 0);
    CHECK(buf_leases(b1) == 0 && pool_leases(p) == 0);
    CHECK_OK(cuc_buffer_unref_async(b1, NULL));
    CHECK(pt_used(p) == 64); /* the message still holds it */
    cuc_msg_destroy(m);
    CHECK(pt_used(p) == 0);
    cuc_channel_destroy(a);
    cuc_pool_unref(p);
}

/* cuc_buffer_lease_wait without a channel: another thread pumps. */
struct pump_arg {
    cuc_channel *ch;
};

static void *pump_thread(void *arg)
{
    struct pump_arg *pa = arg;

    for (int i = 0; i < 200; i++) {
        int rc = cuc_channel_pump(pa->ch, 20);
        if (rc && rc != CUC_E_TIMEOUT)
            break;
        if (rc == 0)
            break;
    }
    return NULL;
}

static void test_lease_wait_other_thread(void)
{
    cuc_pool *p = new_pool(dev0, CUC_POOL_DEVICE, CUC_POOL_IPC);
    struct cuc_buffer_record rec;
    struct pump_arg pa;
    cuc_channel *a, *c;
    cuc_buffer *b;
    pthread_t t;
    cuc_msg *got;

    CHECK_OK(cuc_channel_pair(&a, &c));
    CHECK_OK(cuc_buffer_alloc_async(p, 128, NULL, &b));
    got = send_recv(a, c, b);
    CHECK_OK(cuc_msg_read_buffer(got, 0, &rec));
    cuc_msg_destroy(got);
    CHECK(buf_leases(b) == 1);
    CHECK_RC(cuc_buffer_lease_wait(b, NULL, 0, 30), CUC_E_TIMEOUT);
    pa.ch = a;
    CHECK(pthread_create(&t, NULL, pump_thread, &pa) == 0);
    /* the importer's side of a free, by hand: b stays referenced here */
    CHECK_OK(cuc_channel_release(c, &rec.lease_id, 1));
    CHECK_OK(cuc_buffer_lease_wait(b, NULL, 0, 10000));
    CHECK(pthread_join(t, NULL) == 0);
    CHECK(buf_leases(b) == 0);
    CHECK_RC(cuc_buffer_lease_wait(NULL, NULL, 0, 0), CUC_E_INVALID);
    CHECK_RC(cuc_buffer_lease_count(NULL, NULL), CUC_E_INVALID);
    CHECK_OK(cuc_buffer_unref_async(b, NULL));
    CHECK(pt_used(p) == 0);
    cuc_channel_destroy(a);
    cuc_channel_destroy(c);
    cuc_pool_unref(p);
}

int main(void)
{
    int i;

    pt_start(CUC_DEVICE_CAP_MEMORY_POOLS, "has no memory pools");
    FD_BASELINE();
    test_alloc_args();
    for (i = 0; i < n_dev; i++) {
        cuc_device *d;
        CHECK_OK(cuc_device_get(i, &d));
        check_copies(d, CUC_POOL_DEVICE);
        check_copies(d, CUC_POOL_PINNED_HOST);
    }
    test_refs();
    test_imported_pool_refused();
    test_message_holds();
    test_lease_release();
    test_deferred_streams();
    test_lease_closes();
    test_lease_wait_other_thread();
    FD_CHECK_NO_LEAK();
    return test_finish();
}
