/* Deferred records (wire.h: cuc__msg_add_leased): a record whose payload
 * the message does not keep, written by its attachment at each encode.
 * Held to the records the message keeps: the same bytes whole, a window
 * at a time (every split of a record across windows) and through a
 * reader; a reader's side arena written once and records added after it;
 * the attachment's references and the held variant's on failure; shape
 * refusals. Then real pool buffers: cuc_msg_add_buffer's deferred records
 * encode to what cuc__buffer_rec_put writes for the same fields. */
#include "check.h"
#include "cucore.h"
#include "pool_test.h"
#include "wire/msg_impl.h"
#include "wire/records.h"

#include <stdint.h>

struct obj {
    int refs, puts;
    struct cuc_buffer_record rec;
};

static void o_nop(void *p) { (void)p; }
static void o_end(void *p, uint64_t id, int why) { (void)p, (void)id, (void)why; }
static void o_ref(void *p) { ((struct obj *)p)->refs++; }
static void o_unref(void *p) { ((struct obj *)p)->refs--; }
static void o_put(const void *p, uint16_t type, uint64_t id, uint8_t *out)
{
    struct obj *o = (struct obj *)p;
    struct cuc_buffer_record r = o->rec;

    o->puts++;
    r.lease_id = id;
    CHECK(type == CUC_RECORD_BUFFER || type == CUC_RECORD_BUFFER_VIEW);
    cuc__buffer_rec_write(&r, out);
}

/* The lease id of m's last attachment. */
static uint64_t last_id(const cuc_msg *m)
{
    const struct cuc__lease_att *atts;
    size_t n = cuc__msg_leases(m, &atts);

    CHECK(n > 0);
    return atts[n - 1].id;
}

static const struct cuc__lease_ops ops = {o_nop, o_end, o_ref, o_unref, NULL, NULL, o_put};

#define N 300 /* records of the big message: several 4 KiB windows' worth */

static struct obj objs[N];

static void fill(struct obj *o, int i)
{
    memset(o, 0, sizeof(*o));
    for (int k = 0; k < CUC_POOL_ID_LEN; k++)
        o->rec.pool_id[k] = (uint8_t)(k * 7 + i);
    for (int k = 0; k < CUC_BUFFER_EXPORT_LEN; k++)
        o->rec.export_data[k] = (uint8_t)(k + 3 * i);
    o->rec.alloc_size = 1u << 20;
    o->rec.size = i % 3 == 0 ? o->rec.alloc_size : 4096;          /* plain or view */
    o->rec.offset = i % 3 == 0 ? 0 : (uint64_t)(i % 200) * 4096; /* a view's part */
}

static int is_view(const struct obj *o)
{
    return o->rec.offset != 0 || o->rec.size != o->rec.alloc_size;
}

/* m with deferred records of objs[0..n) (a device record between, every
 * tenth) and twin with the same records kept in the message. */
static void build(cuc_msg **m, cuc_msg **twin, int n)
{
    cuc_device *d;

    CHECK_OK(cuc_device_get(0, &d));
    CHECK_OK(cuc_msg_create(m));
    CHECK_OK(cuc_msg_create(twin));
    for (int i = 0; i < n; i++) {
        struct cuc_buffer_record r;
        fill(&objs[i], i);
        CHECK_OK(cuc__buffer_rec_add_leased(*m, is_view(&objs[i]), &ops, &objs[i], 0));
        r = objs[i].rec;
        r.lease_id = last_id(*m);
        CHECK(r.lease_id == (last_id(*m) >> CUC__LEASE_INDEX_BITS << CUC__LEASE_INDEX_BITS |
                             (uint64_t)i)); /* attachment i, lease block | i */
        CHECK_OK(cuc__buffer_rec_put(*twin, &r));
        if (i % 10 == 9) {
            CHECK_OK(cuc_msg_add_device(*m, d));
            CHECK_OK(cuc_msg_add_device(*twin, d));
        }
    }
}

static void *bytes_of(const cuc_msg *m, size_t *len)
{
    void *b;
    CHECK_OK(cuc_msg_to_bytes(m, &b, len));
    return b;
}

/* The encoding a window of w bytes at a time equals the whole one. */
static void check_windows(const cuc_msg *m, const uint8_t *whole, size_t len, size_t w)
{
    uint8_t *out = malloc(len);
    struct cuc__enc_cursor cur;
    const int *fds;
    size_t n, nfds;

    CHECK(out);
    CHECK_OK(cuc__msg_encode_begin(m, &n, &fds, &nfds));
    CHECK(n == len);
    for (size_t off = 0; off < len; off += w)
        cuc__msg_encode_part(m, off, off + w > len ? len - off : w, out + off, &cur);
    CHECK(memcmp(out, whole, len) == 0);
    free(out);
}

static void test_same_bytes(void)
{
    size_t len, tlen;
    cuc_msg *m, *twin;
    uint8_t *a, *b;

    build(&m, &twin, N);
    CHECK(cuc_msg_record_count(m) == cuc_msg_record_count(twin));
    CHECK(cuc_msg_wire_size(m) == cuc_msg_wire_size(twin));
    a = bytes_of(m, &len);
    b = bytes_of(twin, &tlen);
    CHECK(len == tlen && memcmp(a, b, len) == 0);
    /* windows that split records everywhere: 1, 7 and 100 bytes, a frame's */
    check_windows(m, a, len, 1);
    check_windows(m, a, len, 7);
    check_windows(m, a, len, 100);
    check_windows(m, a, len, 65536);
    for (int i = 0; i < N; i++)
        CHECK(objs[i].refs == 1); /* the message's, one each */
    free(a);
    free(b);
    cuc_msg_destroy(twin);
    cuc_msg_destroy(m);
    for (int i = 0; i < N; i++)
        CHECK(objs[i].refs == 0);
}

/* A reader gets the payloads the twin keeps; the side arena is written
 * once (one put a record, whatever the number of reads), and records
 * added after it are kept as written then. */
static void test_reader(void)
{
    struct cuc_buffer_record got, want;
    struct cuc_record_view v, tv;
    size_t len, tlen;
    cuc_msg *m, *twin;
    uint8_t *a, *b;

    build(&m, &twin, 40);
    for (size_t i = 0; i < cuc_msg_record_count(m); i++) {
        CHECK_OK(cuc_msg_record(m, i, &v));
        CHECK_OK(cuc_msg_record(twin, i, &tv));
        CHECK(v.type == tv.type && v.len == tv.len && v.version == tv.version);
        CHECK(memcmp(v.payload, tv.payload, v.len) == 0);
    }
    for (int i = 0; i < 40; i++)
        CHECK(objs[i].puts == 1);
    CHECK_OK(cuc_msg_read_buffer(m, 0, &got));
    CHECK_OK(cuc_msg_read_buffer(twin, 0, &want));
    CHECK(memcmp(&got, &want, sizeof(got)) == 0);
    CHECK(objs[0].puts == 1);
    /* an add after the read: its payload is written now, once */
    fill(&objs[40], 41);
    {
        struct cuc_buffer_record r = objs[40].rec;
        CHECK_OK(cuc__buffer_rec_add_leased(m, is_view(&objs[40]), &ops, &objs[40], 0));
        r.lease_id = last_id(m);
        CHECK_OK(cuc__buffer_rec_put(twin, &r));
    }
    CHECK(objs[40].puts == 1 && objs[40].refs == 1);
    a = bytes_of(m, &len);
    b = bytes_of(twin, &tlen);
    CHECK(len == tlen && memcmp(a, b, len) == 0);
    CHECK(objs[40].puts == 1); /* kept: the encode wrote it from the arena */
    free(a);
    free(b);
    cuc_msg_destroy(twin);
    cuc_msg_destroy(m);
    for (int i = 0; i <= 40; i++)
        CHECK(objs[i].refs == 0);
}

static void test_refusals(void)
{
    static const struct cuc__lease_ops no_put = {o_nop, o_end, o_ref, o_unref, NULL, NULL, NULL};
    struct obj o;
    cuc_msg *m;

    fill(&o, 1);
    CHECK_OK(cuc_msg_create(&m));
    CHECK_RC(cuc__msg_add_leased(m, CUC_RECORD_RELEASE, 1, 8, &ops, &o, 0), CUC_E_INVALID);
    CHECK_RC(cuc__msg_add_leased(m, CUC_RECORD_BUFFER, 1, 96, &ops, &o, 0), CUC_E_INVALID);
    CHECK_ERRMSG("cannot be deferred");
    CHECK_RC(cuc__msg_add_leased(m, CUC_RECORD_BUFFER, 9, 104, &ops, &o, 0), CUC_E_INVALID);
    CHECK_RC(cuc__msg_add_leased(m, CUC_RECORD_POOL, 1, 40, &ops, &o, 0), CUC_E_INVALID);
    CHECK_RC(cuc__msg_add_leased(m, CUC_RECORD_KERNEL, 1, 4096, &ops, &o, 0),
             CUC_E_INVALID); /* longer than a deferred payload may be */
    CHECK_RC(cuc__msg_add_leased(m, CUC_RECORD_BUFFER, 1, 104, &no_put, &o, 0),
             CUC_E_INVALID);
    CHECK_RC(cuc__msg_add_leased(NULL, CUC_RECORD_BUFFER, 1, 104, &ops, &o, 0),
             CUC_E_INVALID);
    /* held: on failure the caller's reference stays the caller's */
    o.refs = 1;
    CHECK_RC(cuc__msg_add_leased(m, CUC_RECORD_RELEASE, 1, 8, &ops, &o, 1), CUC_E_INVALID);
    CHECK(o.refs == 1 && o.puts == 0);
    CHECK_OK(cuc__msg_add_leased(m, CUC_RECORD_BUFFER, 1, 104, &ops, &o, 1));
    CHECK(o.refs == 1 && cuc_msg_record_count(m) == 1);
    cuc_msg_destroy(m);
    CHECK(o.refs == 0);
}

/* cuc_msg_add_buffer on real (simulated) pool buffers and views: what a
 * receiver reads is the buffer's own record. */
static void test_pool_buffers(void)
{
    struct cuc_pool_props props;
    struct cuc_buffer_record r;
    uint8_t id[CUC_POOL_ID_LEN];
    cuc_buffer *b, *v;
    cuc_device *d;
    cuc_pool *p;
    cuc_msg *m, *back;
    void *bytes;
    size_t len;

    CHECK_OK(cuc_device_get(0, &d));
    cuc_pool_props_init(&props);
    props.flags = CUC_POOL_IPC;
    CHECK_OK(cuc_pool_create(d, &props, &p));
    CHECK_OK(cuc_buffer_alloc_async(p, 8192, NULL, &b));
    CHECK_OK(cuc_buffer_view(b, 4096, 1024, &v));
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_buffer(m, b));
    CHECK_OK(cuc_msg_add_buffer(m, v));
    CHECK_OK(cuc_msg_to_bytes(m, &bytes, &len));
    CHECK_OK(cuc_msg_from_bytes(bytes, len, &back));
    CHECK_OK(cuc_msg_read_buffer(back, 0, &r));
    CHECK(r.size == 8192 && r.offset == 0 && r.alloc_size == 8192 && r.lease_id != 0);
    cuc_pool_id(p, id);
    CHECK(memcmp(r.pool_id, id, CUC_POOL_ID_LEN) == 0);
    CHECK_OK(cuc_msg_read_buffer(back, 1, &r));
    CHECK(r.size == 1024 && r.offset == 4096 && r.alloc_size == 8192);
    {
        int t;
        CHECK_OK(cuc_msg_record_type(back, 1, &t));
        CHECK(t == CUC_RECORD_BUFFER_VIEW);
        CHECK_OK(cuc_msg_record_type(back, 0, &t));
        CHECK(t == CUC_RECORD_BUFFER);
    }
    free(bytes);
    cuc_msg_destroy(back);
    cuc_msg_destroy(m);
    CHECK_OK(cuc_buffer_unref_async(v, NULL));
    CHECK_OK(cuc_buffer_unref_async(b, NULL));
    cuc_pool_unref(p);
}

int main(void)
{
    /* the driver's own fds (a real one opens them at its first pool) come
     * before the baseline */
    pt_start(CUC_DEVICE_CAP_MEMORY_POOLS, "has no memory pools");
    FD_BASELINE();
    test_same_bytes();
    test_reader();
    test_refusals();
    test_pool_buffers();
    FD_CHECK_NO_LEAK();
    return test_finish();
}
