/* Buffer views in one process, and the size a buffer record may claim:
 *  - local views: bounds (near SIZE_MAX too), addresses, views of views
 *    flatten to the allocation, a view keeps its allocation after the
 *    parent's last unref (the pool's bytes in use say so), a view record
 *    in the allocating process resolves to the view itself;
 *  - hostile buffer view records: lengths at decode, lying offsets, sizes
 *    and allocation sizes (0, past the allocation, wrapping near
 *    UINT64_MAX and UINT32_MAX) on read, an allocation size that disagrees
 *    with the allocation's, each refused with CUC_E_BADMSG naming it;
 *  - simulator: a pool imported under another id, as another process
 *    would: 64 views of one allocation cost one cuMemPoolImportPointer,
 *    the same view twice is one object, the bytes are the exporter's;
 *  - a buffer record claiming 6400 bytes of a 64-byte
 *    allocation (and a view record claiming a larger allocation) is
 *    CUC_E_BADMSG giving both sizes, the import undone (no fd, mapping or
 *    import left);
 *  - a message holding buffers of two pools, one of them twice, and views
 *    of one (its holds dropped a run of one pool at a time): nothing is
 *    freed while the message lives, everything once it is destroyed. */
#include <sys/mman.h>

#include "pool_test.h"
#include "msg_hex.h"
#include "sim_test.h"
#include "memory/buffer.h"
#include "wire/records.h"

static cuc_device *dev0;

/* ---- local views ---- */

static void test_local(void)
{
    cuc_pool *p = pt_new_pool(dev0, CUC_POOL_DEVICE, CUC_POOL_IPC);
    cuc_buffer *b, *v, *vv, *got, *tmp = (cuc_buffer *)0x1;
    uint8_t bytes[100];
    cuc_msg *m, *r;
    cuc_channel *a, *c;

    CHECK_OK(cuc_buffer_alloc_async(p, 4096, NULL, &b));
    pt_fill(b, 7);
    CHECK_RC(cuc_buffer_view(b, 0, 0, &tmp), CUC_E_INVALID);
    CHECK_ERRMSG("0 bytes at offset 0");
    CHECK_RC(cuc_buffer_view(b, 4000, 97, &tmp), CUC_E_INVALID);
    CHECK_ERRMSG("4096-byte buffer");
    CHECK_RC(cuc_buffer_view(b, SIZE_MAX, 2, &tmp), CUC_E_INVALID);
    CHECK_RC(cuc_buffer_view(b, 2, SIZE_MAX, &tmp), CUC_E_INVALID);
    CHECK_RC(cuc_buffer_view(b, SIZE_MAX - 10, 11, &tmp), CUC_E_INVALID);
    CHECK_RC(cuc_buffer_view(NULL, 0, 1, &tmp), CUC_E_INVALID);
    CHECK(tmp == (cuc_buffer *)0x1);
    CHECK_OK(cuc_buffer_view(b, 1000, 3096, &v));
    CHECK(cuc_buffer_is_view(v) && !cuc_buffer_is_view(b));
    CHECK(cuc_buffer_offset(v) == 1000 && cuc_buffer_size(v) == 3096);
    CHECK((char *)cuc_buffer_ptr(v) == (char *)cuc_buffer_ptr(b) + 1000);
    CHECK(cuc_buffer_pool(v) == p && cuc_buffer_device(v) == dev0);
    /* a view of a view is a view of the allocation */
    CHECK_RC(cuc_buffer_view(v, 3000, 97, &tmp), CUC_E_INVALID);
    CHECK_OK(cuc_buffer_view(v, 24, 100, &vv));
    CHECK(cuc_buffer_offset(vv) == 1024 && vv->root == b);
    /* the root: the allocation's buffer, a reference each */
    tmp = cuc_buffer_root(vv);
    CHECK(tmp == b && cuc_buffer_root(b) == b && b->refs == 5);
    CHECK_OK(cuc_buffer_unref_async(b, NULL));
    CHECK_OK(cuc_buffer_unref_async(b, NULL));
    CHECK(b->refs == 3); /* the caller's, v's and vv's */
    CHECK_OK(cuc_memcpy(bytes, cuc_buffer_ptr(vv), 100, pt_stream(b)));
    {
        uint8_t all[4096];
        test_pattern(7, all, sizeof(all));
        CHECK(memcmp(bytes, all + 1024, 100) == 0);
    }
    /* the parent's last unref leaves the memory to its views */
    CHECK_OK(cuc_buffer_unref_async(b, NULL));
    CHECK(pt_used(p) == 4096);
    CHECK_OK(cuc_buffer_unref_async(v, NULL));
    CHECK(pt_used(p) == 4096);
    /* sent and resolved here: the view itself, leased like a buffer */
    CHECK_OK(cuc_channel_pair(&a, &c));
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_buffer(m, vv));
    CHECK_OK(cuc_channel_send(a, m));
    cuc_msg_destroy(m);
    CHECK_OK(cuc_channel_recv(c, 5000, &r));
    {
        int type = 0;
        CHECK_OK(cuc_msg_record_type(r, 0, &type));
        CHECK(type == CUC_RECORD_BUFFER_VIEW);
    }
    CHECK_OK(cuc_msg_get_buffer(r, 0, &got));
    CHECK(got == vv);
    cuc_msg_destroy(r);
    CHECK_OK(cuc_buffer_unref_async(vv, NULL));
    CHECK_OK(cuc_buffer_unref_async(got, NULL)); /* the last: its lease is released */
    CHECK(pt_used(p) == 4096);                   /* not yet seen by a */
    CHECK_OK(cuc_pool_lease_wait(p, a, 0, 5000));
    CHECK(pt_used(p) == 0);
    cuc_channel_destroy(a);
    cuc_channel_destroy(c);
    cuc_pool_unref(p);
}

/* ---- hostile buffer view records ---- */

static void view_payload(uint8_t p[112], const uint8_t id[16], uint64_t size, uint64_t off,
                         uint64_t alloc)
{
    memset(p, 0, 112);
    memcpy(p, id, 16);
    cuc__put64(p + 16, size);
    cuc__put64(p + 24, off);
    cuc__put64(p + 32, 77);
    memset(p + 40, 0x5c, 64);
    cuc__put64(p + 104, alloc);
}

/* Decodes a one-view-record message and resolves it: the decoder's status
 * if it refused (*decoded 0), else the resolve's. */
static int get_view(const uint8_t *p, uint32_t len, int *decoded)
{
    cuc_buffer *b = (cuc_buffer *)0x1;
    cuc_msg *m;
    int rc = msg_decode_one(CUC_RECORD_BUFFER_VIEW, p, len, &m);

    *decoded = rc == 0;
    if (rc)
        return rc;
    rc = cuc_msg_get_buffer(m, 0, &b);
    if (rc)
        CHECK(b == (cuc_buffer *)0x1);
    else
        CHECK_OK(cuc_buffer_unref_async(b, NULL));
    cuc_msg_destroy(m);
    return rc;
}

static void test_hostile(void)
{
    static const struct {
        uint64_t size, off, alloc;
        const char *why;
    } lies[] = {
        {0, 0, 4096, "size 0"},
        {1, 0, 0, "allocation size 0"},
        {4097, 0, 4096, "4097 bytes at offset 0"},
        {1, 4096, 4096, "1 bytes at offset 4096"},
        {16, 4090, 4096, "16 bytes at offset 4090"},
        {2, UINT64_MAX, 4096, "at offset 18446744073709551615"},
        {UINT64_MAX, 1, 4096, "18446744073709551615 bytes"},
        {UINT64_MAX, 0, UINT64_MAX - 1, "do not fit"},
        {16, UINT64_MAX - 7, UINT64_MAX, "do not fit"},
        {UINT64_MAX - 15, 32, UINT64_MAX, "do not fit"},
        {(uint64_t)UINT32_MAX + 2, (uint64_t)UINT32_MAX, (uint64_t)UINT32_MAX * 2,
         "do not fit"},
        {1, (uint64_t)UINT32_MAX + 1, (uint64_t)UINT32_MAX + 1, "do not fit"},
    };
    cuc_pool *p = pt_new_pool(dev0, CUC_POOL_DEVICE, CUC_POOL_IPC);
    uint8_t id[CUC_POOL_ID_LEN], pl[120];
    CUmemPoolPtrExportData d;
    cuc_buffer *b;
    int decoded;

    cuc_pool_id(p, id);
    for (size_t i = 0; i < CUC_ARRAY_LEN(lies); i++) {
        view_payload(pl, id, lies[i].size, lies[i].off, lies[i].alloc);
        CHECK_RC(get_view(pl, 112, &decoded), CUC_E_BADMSG);
        CHECK(decoded); /* the fields are checked on read, not by the decoder */
        CHECK_ERRMSG(lies[i].why);
    }
    view_payload(pl, id, 16, 0, 4096);
    cuc__put64(pl + 32, 0);
    CHECK_RC(get_view(pl, 112, &decoded), CUC_E_BADMSG);
    CHECK_ERRMSG("lease id 0");
    /* lengths and versions: the decoder's */
    view_payload(pl, id, 16, 0, 4096);
    CHECK_RC(get_view(pl, 104, &decoded), CUC_E_BADMSG);
    CHECK(!decoded);
    CHECK_RC(get_view(pl, 120, &decoded), CUC_E_BADMSG);
    CHECK(!decoded);
    CHECK_RC(get_view(pl, 111, &decoded), CUC_E_BADMSG);
    CHECK(!decoded);
    /* a sound record of a live allocation whose size it misstates */
    CHECK_OK(cuc_buffer_alloc_async(p, 4096, NULL, &b));
    CHECK_OK(cuc__buffer_export(b, &d));
    view_payload(pl, id, 16, 8, 8192);
    memcpy(pl + 40, d.reserved, 64);
    CHECK_RC(get_view(pl, 112, &decoded), CUC_E_BADMSG);
    CHECK_ERRMSG("8192");
    view_payload(pl, id, 16, 8, 4096);
    memcpy(pl + 40, d.reserved, 64);
    CHECK_OK(get_view(pl, 112, &decoded)); /* the truth resolves */
    /* no such allocation (freed, or never) */
    view_payload(pl, id, 16, 8, 4096);
    CHECK_RC(get_view(pl, 112, &decoded), CUC_E_NOT_FOUND);
    CHECK_OK(cuc_buffer_unref_async(b, NULL));
    cuc_pool_unref(p);
}

/* ---- simulator: imports, as in another process ---- */

static void pool_payload(uint8_t p[40], const uint8_t id[16], const cuc_uuid *owner)
{
    memcpy(p, id, 16);
    memcpy(p + 16, owner->bytes, 16);
    cuc__put32(p + 32, CUC_POOL_DEVICE);
    cuc__put32(p + 36, CUC_POOL_HANDLE_POSIX_FD);
}

/* p imported again under a fake id: the simulator imports pools in their
 * own process, which the real driver does not. */
static cuc_pool *import_as_other(cuc_pool *p, uint8_t fake[CUC_POOL_ID_LEN])
{
    uint8_t pl[40];
    cuc_pool *ip;
    cuc_msg *m;
    int fd = fcntl(p->fd, F_DUPFD_CLOEXEC, 0);

    cuc_pool_id(p, fake);
    fake[5] ^= 0x33;
    pool_payload(pl, fake, cuc_device_uuid(cuc_pool_device(p)));
    CHECK(fd >= 0);
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc__msg_add_record_owned(m, CUC_RECORD_POOL, 1, pl, 40, &fd, 1));
    CHECK_OK(cuc_msg_get_pool(m, 0, &ip));
    cuc_msg_destroy(m);
    return ip;
}

static void test_sim_views(void)
{
    cuc_pool *p = pt_new_pool(dev0, CUC_POOL_DEVICE, CUC_POOL_IPC), *ip;
    uint8_t fake[CUC_POOL_ID_LEN], pl[112];
    CUmemPoolPtrExportData d;
    cuc_buffer *b, *v[64], *again, *whole;
    unsigned long long imports;
    cuc_msg *m;

    ip = import_as_other(p, fake);
    CHECK_OK(cuc_buffer_alloc_async(p, 64 * 64, NULL, &b));
    pt_fill(b, 31);
    CHECK_OK(cuc__buffer_export(b, &d));
    imports = sim_calls("cuMemPoolImportPointer");
    for (int i = 0; i < 64; i++) {
        view_payload(pl, fake, 64, 64u * (unsigned)i, 64 * 64);
        memcpy(pl + 40, d.reserved, 64);
        m = msg_received(CUC_RECORD_BUFFER_VIEW, pl, 112);
        CHECK_OK(cuc_msg_get_buffer(m, 0, &v[i]));
        cuc_msg_destroy(m);
        CHECK(cuc_buffer_is_imported(v[i]) && cuc_buffer_is_view(v[i]));
        CHECK(cuc_buffer_pool(v[i]) == ip);
    }
    CHECK(sim_calls("cuMemPoolImportPointer") == imports + 1);
    for (int i = 1; i < 64; i++)
        CHECK((char *)cuc_buffer_ptr(v[i]) == (char *)cuc_buffer_ptr(v[0]) + 64 * i);
    CHECK(cuc_buffer_ptr(v[0]) != cuc_buffer_ptr(b));
    {
        uint8_t all[4096], got[64];
        test_pattern(31, all, sizeof(all));
        for (int i = 0; i < 64; i += 9) {
            CHECK_OK(cuc_memcpy(got, cuc_buffer_ptr(v[i]), 64, pt_stream(b)));
            CHECK(memcmp(got, all + 64 * i, 64) == 0);
        }
    }
    /* the same view again is the same object; the whole allocation, by a
     * view record of all of it or by a buffer record, is the allocation */
    view_payload(pl, fake, 64, 128, 4096);
    memcpy(pl + 40, d.reserved, 64);
    m = msg_received(CUC_RECORD_BUFFER_VIEW, pl, 112);
    CHECK_OK(cuc_msg_get_buffer(m, 0, &again));
    CHECK(again == v[2]);
    cuc_msg_destroy(m);
    CHECK_OK(cuc_buffer_unref_async(again, NULL));
    view_payload(pl, fake, 4096, 0, 4096);
    memcpy(pl + 40, d.reserved, 64);
    m = msg_received(CUC_RECORD_BUFFER_VIEW, pl, 112);
    CHECK_OK(cuc_msg_get_buffer(m, 0, &whole));
    CHECK(!cuc_buffer_is_view(whole) && cuc_buffer_ptr(whole) == cuc_buffer_ptr(v[0]));
    cuc_msg_destroy(m);
    CHECK(v[0]->root == whole);
    CHECK(sim_calls("cuMemPoolImportPointer") == imports + 1);
    CHECK_OK(cuc_buffer_unref_async(whole, NULL));
    for (int i = 0; i < 64; i++)
        CHECK_OK(cuc_buffer_unref_async(v[i], NULL));
    /* all gone: the next view imports again */
    view_payload(pl, fake, 64, 0, 4096);
    memcpy(pl + 40, d.reserved, 64);
    m = msg_received(CUC_RECORD_BUFFER_VIEW, pl, 112);
    CHECK_OK(cuc_msg_get_buffer(m, 0, &again));
    cuc_msg_destroy(m);
    CHECK(sim_calls("cuMemPoolImportPointer") == imports + 2);
    CHECK_OK(cuc_buffer_unref_async(again, NULL));
    cuc_pool_unref(ip);
    CHECK_OK(cuc_buffer_unref_async(b, NULL));
    cuc_pool_unref(p);
}

/* ---- a record may not claim more than was mapped ---- */

static void test_sim_oversize(void)
{
    cuc_pool *p = pt_new_pool(dev0, CUC_POOL_DEVICE, CUC_POOL_IPC), *ip;
    uint8_t fake[CUC_POOL_ID_LEN], pl[112];
    CUmemPoolPtrExportData d;
    unsigned long long frees;
    cuc_buffer *b, *got = (cuc_buffer *)0x1;
    cuc_msg *m;
    int maps;

    ip = import_as_other(p, fake);
    CHECK_OK(cuc_buffer_alloc_async(p, 64, NULL, &b));
    CHECK_OK(cuc__buffer_export(b, &d));
    maps = pt_maps_count();
    frees = sim_calls("cuMemFreeAsync");
    memset(pl, 0, sizeof(pl));
    memcpy(pl, fake, 16);
    cuc__put64(pl + 16, 6400);
    cuc__put64(pl + 32, 9);
    memcpy(pl + 40, d.reserved, 64);
    m = msg_received(CUC_RECORD_BUFFER, pl, 104);
    CHECK_RC(cuc_msg_get_buffer(m, 0, &got), CUC_E_BADMSG);
    CHECK_ERRMSG("6400-byte allocation");
    CHECK_ERRMSG("is 64 bytes");
    CHECK(got == (cuc_buffer *)0x1);
    CHECK(sim_calls("cuMemFreeAsync") == frees + 1); /* the import undone */
    CHECK(pt_maps_count() == maps);
    cuc_msg_destroy(m);
    /* a view record lying about the allocation around a part that fits */
    view_payload(pl, fake, 32, 0, 6400);
    memcpy(pl + 40, d.reserved, 64);
    m = msg_received(CUC_RECORD_BUFFER_VIEW, pl, 112);
    CHECK_RC(cuc_msg_get_buffer(m, 0, &got), CUC_E_BADMSG);
    CHECK_ERRMSG("6400-byte allocation");
    cuc_msg_destroy(m);
    /* the truth imports */
    cuc__put64(pl + 16, 64);
    cuc__put64(pl + 104, 64);
    m = msg_received(CUC_RECORD_BUFFER_VIEW, pl, 112);
    CHECK_OK(cuc_msg_get_buffer(m, 0, &got));
    CHECK(cuc_buffer_size(got) == 64 && !cuc_buffer_is_view(got));
    cuc_msg_destroy(m);
    CHECK_OK(cuc_buffer_unref_async(got, NULL));
    /* the driver that cannot say how large: refused, import undone */
    {
        sim_fail("cuMemGetAddressRange:1");
        m = msg_received(CUC_RECORD_BUFFER_VIEW, pl, 112);
        CHECK_RC(cuc_msg_get_buffer(m, 0, &got), CUC_E_DRIVER);
        CHECK_ERRMSG("cuMemGetAddressRange");
        cuc_msg_destroy(m);
        sim_fail(NULL);
    }
    CHECK(pt_maps_count() == maps);
    cuc_pool_unref(ip);
    CHECK_OK(cuc_buffer_unref_async(b, NULL));
    cuc_pool_unref(p);
}

static void test_msg_holds(void)
{
    cuc_pool *p = pt_new_pool(dev0, CUC_POOL_DEVICE, CUC_POOL_IPC);
    cuc_pool *q = pt_new_pool(dev0, CUC_POOL_DEVICE, CUC_POOL_IPC);
    cuc_buffer *a, *b, *c, *v[3];
    uint64_t used_p, used_q;
    cuc_msg *m;

    CHECK_OK(cuc_buffer_alloc_async(p, 4096, NULL, &a));
    CHECK_OK(cuc_buffer_alloc_async(p, 512, NULL, &b));
    CHECK_OK(cuc_buffer_alloc_async(q, 256, NULL, &c));
    for (int i = 0; i < 3; i++)
        CHECK_OK(cuc_buffer_view(a, (size_t)i * 1024, 1024, &v[i]));
    used_p = pt_used(p);
    used_q = pt_used(q);
    CHECK(used_p >= 4096 + 512 && used_q >= 256);
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_buffer(m, v[0]));
    CHECK_OK(cuc_msg_add_buffer(m, b));
    CHECK_OK(cuc_msg_add_buffer(m, b)); /* twice: two holds */
    CHECK_OK(cuc_msg_add_buffer(m, c));
    CHECK_OK(cuc_msg_add_buffer(m, v[1]));
    CHECK_OK(cuc_msg_add_buffer(m, a));
    CHECK_OK(cuc_msg_add_buffer(m, v[2]));
    for (int i = 0; i < 3; i++)
        CHECK_OK(cuc_buffer_unref_async(v[i], NULL));
    CHECK_OK(cuc_buffer_unref_async(a, NULL));
    CHECK_OK(cuc_buffer_unref_async(b, NULL));
    CHECK_OK(cuc_buffer_unref_async(c, NULL));
    CHECK(pt_used(p) == used_p && pt_used(q) == used_q); /* the message keeps them */
    cuc_msg_destroy(m);
    CHECK(pt_used(p) == 0 && pt_used(q) == 0);
    cuc_pool_unref(q);
    cuc_pool_unref(p);
}

int main(void)
{
    pt_start(CUC_DEVICE_CAP_POOL_POSIX_FD, "cannot export pools as POSIX fds");
    dev0 = devs[0];
    FD_BASELINE();
    test_local();
    FD_CHECK_NO_LEAK();
    test_hostile();
    FD_CHECK_NO_LEAK();
    test_msg_holds();
    FD_CHECK_NO_LEAK();
    if (test_on_sim()) { /* the real driver imports pools only from other processes */
        test_sim_views();
        FD_CHECK_NO_LEAK();
        test_sim_oversize();
        FD_CHECK_NO_LEAK();
    }
    return test_finish();
}
