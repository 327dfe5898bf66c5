/* Leases carried by messages (lease.h, cuc__msg_lease_attach): a send
 * begins each attached lease on that channel, a release or the channel's
 * end ends it exactly once, a failed send ends it with SEND_FAILED, a
 * message holds its objects until destroyed, a received message knows its
 * channel and keeps it alive past cuc_channel_destroy(); deferred
 * releases (a share point's) wait for a flush. */
#include "check.h"
#include "cucore.h"
#include "device/device.h"
#include "channel/channel.h"
#include "lease/lease.h"
#include "lease/linger.h"
#include "wire/records.h"

struct obj {
    int refs, begun, ended;
    int last_why;
    uint64_t last_id;
};

static void o_begin(void *p) { ((struct obj *)p)->begun++; }
static void o_ref(void *p) { ((struct obj *)p)->refs++; }
static void o_unref(void *p) { ((struct obj *)p)->refs--; }
static void o_end(void *p, uint64_t id, int why)
{
    struct obj *o = p;
    o->ended++;
    o->last_id = id;
    o->last_why = why;
}

static const struct cuc__lease_ops ops = {o_begin, o_end, o_ref, o_unref, NULL, NULL, NULL};

/* A message of one device record with obj attached under a fresh id. */
static cuc_msg *leased_msg(struct obj *o, uint64_t *id)
{
    cuc_device *d;
    cuc_msg *m;

    CHECK_OK(cuc_device_get(0, &d));
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_device(m, d));
    CHECK_OK(cuc__msg_lease_attach(m, &ops, o, id));
    CHECK(*id != 0);
    return m;
}

static size_t leases(cuc_channel *ch)
{
    size_t n;
    CHECK_OK(cuc_channel_lease_count(ch, &n));
    return n;
}

static void test_release(void)
{
    struct obj o = {0};
    cuc_channel *a, *b;
    cuc_msg *m, *got;
    uint64_t id;

    CHECK_OK(cuc_channel_pair(&a, &b));
    m = leased_msg(&o, &id);
    CHECK(o.refs == 1 && o.begun == 0);
    CHECK_OK(cuc_channel_send(a, m));
    CHECK(o.begun == 1 && o.ended == 0);
    CHECK(leases(a) == 1);
    cuc_msg_destroy(m);
    CHECK(o.refs == 0);

    CHECK_OK(cuc_channel_recv(b, 1000, &got));
    CHECK(cuc__leases_of_msg(got) == b->leases); /* it reports to b's table */
    CHECK_OK(cuc_channel_release(b, &id, 1));
    CHECK_OK(cuc_channel_lease_wait(a, 0, 1000));
    CHECK(o.ended == 1 && o.last_id == id && o.last_why == CUC__LEASE_RELEASED);
    CHECK(leases(a) == 0);

    /* The received message keeps b alive after the user's close; a release
     * through it is then a no-op. */
    cuc_channel_destroy(b);
    CHECK_OK(cuc__leases_release(cuc__leases_of_msg(got), &id, 1));
    cuc_msg_destroy(got);
    CHECK_RC(cuc_channel_pump(a, 1000), CUC_E_PEER_CLOSED);
    cuc_channel_destroy(a);
    CHECK(o.ended == 1);
}

static void test_close_ends(void)
{
    struct obj o = {0};
    cuc_channel *a, *b;
    cuc_msg *m;
    uint64_t id;

    /* The importer goes: its leases end with PEER_CLOSED. */
    CHECK_OK(cuc_channel_pair(&a, &b));
    m = leased_msg(&o, &id);
    CHECK_OK(cuc_channel_send(a, m));
    cuc_channel_destroy(b);
    CHECK_OK(cuc_channel_lease_wait(a, 0, 1000));
    CHECK(o.ended == 1 && o.last_why == CUC__LEASE_PEER_CLOSED);
    /* Sending again on a channel whose peer has gone: the lease is begun
     * and ended at once, the send fails. */
    CHECK(cuc_channel_send(a, m) < 0);
    CHECK(o.begun == 2 && o.ended == 2 && o.last_why == CUC__LEASE_SEND_FAILED);
    cuc_channel_destroy(a);

    /* The exporter closes: the lease lingers until the importer goes. */
    CHECK_OK(cuc_channel_pair(&a, &b));
    CHECK_OK(cuc_channel_send(a, m));
    cuc_channel_destroy(a);
    CHECK(o.begun == 3 && o.ended == 2);
    cuc_channel_destroy(b);
    for (int i = 0; i < 50 && o.ended == 2; i++)
        cuc__linger_pump(100);
    CHECK(o.begun == 3 && o.ended == 3 && o.last_why == CUC__LEASE_PEER_CLOSED);
    cuc_msg_destroy(m);
    CHECK(o.refs == 0);
}

static void test_send_twice(void)
{
    struct obj o1 = {0}, o2 = {0};
    cuc_channel *a, *b, *c, *d;
    cuc_msg *m;
    uint64_t id1, id2;

    m = leased_msg(&o1, &id1);
    CHECK_OK(cuc__msg_lease_attach(m, &ops, &o2, &id2));
    CHECK(id2 == id1 + 1); /* one block: attachment i is lease block | i */
    CHECK_OK(cuc_channel_pair(&a, &b));
    CHECK_OK(cuc_channel_pair(&c, &d));
    CHECK_OK(cuc_channel_send(a, m));
    /* The same leases on another channel: a second, independent lease. */
    CHECK_OK(cuc_channel_send(c, m));
    CHECK(o1.begun == 2 && o2.begun == 2 && leases(a) == 2 && leases(c) == 2);
    /* On the same channel again: refused, and the leases begun for it are
     * ended; the two held stay held. */
    CHECK_RC(cuc_channel_send(a, m), CUC_E_INVALID);
    CHECK_ERRMSG("already held");
    CHECK(o1.begun == 3 && o1.ended == 1 && o1.last_why == CUC__LEASE_SEND_FAILED);
    CHECK(o2.begun == 3 && o2.ended == 1 && o2.last_why == CUC__LEASE_SEND_FAILED);
    CHECK(leases(a) == 2);
    cuc_channel_destroy(b);
    cuc_channel_destroy(d);
    cuc_channel_destroy(a);
    cuc_channel_destroy(c);
    for (int i = 0; i < 50 && cuc__linger_count(); i++)
        cuc__linger_pump(100); /* the peers are gone: the links see it */
    CHECK(o1.ended == 3 && o2.ended == 3);
    cuc_msg_destroy(m);
    CHECK(o1.refs == 0 && o2.refs == 0);
}

static void count_wake(void *arg) { ++*(int *)arg; }

/* Deferred releases (a share point's connection): released ids wait in
 * the table, the first one wakes the flusher once, and a flush sends
 * them all; the exporter's leases end only then. */
static void test_deferred(void)
{
    struct obj o[3] = {{0}};
    cuc_channel *a, *b;
    cuc_msg *got[3];
    uint64_t ids[3];
    int wakes = 0;

    CHECK_OK(cuc_channel_pair(&a, &b));
    cuc__leases_defer_releases(b->leases, count_wake, &wakes);
    for (int i = 0; i < 3; i++) {
        cuc_msg *m = leased_msg(&o[i], &ids[i]);
        CHECK_OK(cuc_channel_send(a, m));
        cuc_msg_destroy(m);
        CHECK_OK(cuc_channel_recv(b, 1000, &got[i]));
    }
    CHECK(!cuc__leases_pending(b->leases));
    CHECK_OK(cuc__leases_release(b->leases, &ids[0], 1));
    CHECK_OK(cuc__leases_release(b->leases, &ids[1], 2));
    CHECK(wakes == 1 && cuc__leases_pending(b->leases));
    CHECK_RC(cuc_channel_lease_wait(a, 0, 50), CUC_E_TIMEOUT); /* none sent yet */
    CHECK(leases(a) == 3 && o[0].ended == 0);
    CHECK_OK(cuc__leases_flush(b->leases));
    CHECK(!cuc__leases_pending(b->leases));
    CHECK_OK(cuc_channel_lease_wait(a, 0, 1000));
    for (int i = 0; i < 3; i++) {
        CHECK(o[i].ended == 1 && o[i].last_id == ids[i] && o[i].last_why == CUC__LEASE_RELEASED);
        cuc_msg_destroy(got[i]);
    }
    CHECK_OK(cuc__leases_flush(b->leases)); /* nothing queued: nothing sent */
    cuc_channel_destroy(b);
    cuc_channel_destroy(a);
}

static void test_bad_args(void)
{
    struct obj o = {0};
    uint64_t id = 0;
    cuc_msg *m;

    CHECK_OK(cuc_msg_create(&m));
    CHECK_RC(cuc__msg_lease_attach(m, &ops, &o, NULL), CUC_E_INVALID);
    CHECK_RC(cuc__msg_lease_attach(m, NULL, &o, &id), CUC_E_INVALID);
    CHECK_RC(cuc__msg_lease_attach(m, &ops, NULL, &id), CUC_E_INVALID);
    CHECK(id == 0); /* written only on success */
    CHECK(o.refs == 0);
    CHECK(cuc__leases_of_msg(m) == NULL);
    cuc_msg_destroy(m);
}

int main(void)
{
    int n;

    CHECK_OK(cuc_device_count(&n));
    FD_BASELINE();
    test_release();
    test_close_ends();
    test_send_twice();
    test_deferred();
    test_bad_args();
    FD_CHECK_NO_LEAK();
    return test_finish();
}
