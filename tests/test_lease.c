/* Leases: a release ends a lease and calls back once; user messages that
 * arrive around releases are kept, in order; closing the channel ends what
 * is left; the importer's death (SIGKILL) ends its leases. */
#include <fcntl.h>
#include <signal.h>

#include "check.h"
#include "devices_test.h"
#include "cucore.h"
#include "device/device.h"
#include "channel/channel.h"
#include "lease/lease.h"
#include "lease/linger.h"
#include "wire/records.h"

#define MAXID 20000
/* The lease id of slot k: a block's first id (lease.h, wire.h). */
#define LID(k) ((uint64_t)(k) << CUC__LEASE_INDEX_BITS)

static int ends[MAXID];
static int why_of[MAXID];
static int tag_arg;

static void on_end(void *arg, uint64_t id, int why)
{
    CHECK(arg == &tag_arg);
    CHECK(id % LID(1) == 0 && id / LID(1) < MAXID);
    ends[id / LID(1)]++;
    why_of[id / LID(1)] = why;
}

static void no_op(void *obj)
{
    (void)obj;
}

/* Leases of no object: only their ends are counted. */
static const struct cuc__lease_ops end_ops = {no_op, on_end, no_op, no_op, NULL, NULL, NULL};

static void reset_ends(void)
{
    memset(ends, 0, sizeof(ends));
    memset(why_of, 0, sizeof(why_of));
}

static size_t count(cuc_channel *ch)
{
    size_t n;

    CHECK_OK(cuc_channel_lease_count(ch, &n));
    return n;
}

static void add(cuc_channel *ch, uint64_t slot)
{
    CHECK_OK(cuc__leases_add(ch->leases, LID(slot), &end_ops, &tag_arg));
}

static int ndev;

/* A user message naming device ordinal % ndev; recv_ordinal() reads it. */
#define user_msg test_device_msg

static void send_user(cuc_channel *ch, int ordinal)
{
    cuc_msg *m = user_msg(ordinal);

    CHECK_OK(cuc_channel_send(ch, m));
    cuc_msg_destroy(m);
}

static int recv_ordinal(cuc_channel *ch)
{
    cuc_device *d;
    cuc_msg *m;

    CHECK_OK(cuc_channel_recv(ch, 1000, &m));
    CHECK_OK(cuc_msg_get_device(m, 0, &d));
    cuc_msg_destroy(m);
    return cuc_device_ordinal(d);
}

/* ---- importer child: takes the lease ids (fd tags), releases the first
 * ten, acknowledges, then waits to be killed (or, for "exit", for a
 * message, and then closes and exits). ---- */
static int child_main(const char *role)
{
    uint64_t ids[10];
    cuc_channel *ch;
    cuc_msg *m;
    size_t i;
    int n;

    CHECK_OK(cuc_device_count(&n));
    ndev = n;
    CHECK(getenv("CUC_TEST_FD"));
    CHECK_OK(cuc_channel_from_fd(atoi(getenv("CUC_TEST_FD")), &ch));
    CHECK_OK(cuc_channel_recv(ch, 10000, &m));
    CHECK(cuc_msg_record_count(m) == 100);
    for (i = 0; i < 10; i++) {
        struct cuc__record r;
        CHECK_OK(cuc__msg_record(m, i, &r));
        ids[i] = cuc__get32(r.payload);
    }
    cuc_msg_destroy(m);
    CHECK_OK(cuc_channel_release(ch, ids, 10));
    send_user(ch, 0);
    if (!strcmp(role, "exit")) { /* on the parent's word */
        CHECK_OK(cuc_channel_recv(ch, 10000, &m));
        cuc_msg_destroy(m);
        cuc_channel_destroy(ch);
        return 0;
    }
    for (;;)
        pause();
}

/* ---- tests ---- */

static void test_release(void)
{
    /* some: unknown, twice, 0, and an index past the grant of slot 1 */
    uint64_t two = LID(2), some[4] = {LID(99), LID(2), 0, LID(1) | 5};
    cuc_channel *a, *b;
    cuc_msg *m;

    reset_ends();
    CHECK_OK(cuc_channel_pair(&a, &b));
    add(a, 1);
    add(a, 2);
    add(a, 3);
    CHECK(count(a) == 3);
    CHECK_RC(cuc__leases_add(a->leases, LID(2), &end_ops, &tag_arg), CUC_E_INVALID);
    CHECK_RC(cuc__leases_add(a->leases, 0, &end_ops, &tag_arg), CUC_E_INVALID);
    CHECK_RC(cuc__leases_add(a->leases, LID(4) | 1, &end_ops, &tag_arg), CUC_E_INVALID);
    CHECK_RC(cuc_channel_release(b, &two, 0), CUC_E_INVALID);

    CHECK_OK(cuc_channel_release(b, &two, 1));
    /* recv consumes the release: no user message comes out of it */
    CHECK_RC(cuc_channel_recv(a, 100, &m), CUC_E_TIMEOUT);
    CHECK(ends[2] == 1 && why_of[2] == CUC__LEASE_RELEASED);
    CHECK(ends[1] == 0 && ends[3] == 0 && count(a) == 2);

    /* twice, unknown, 0: ignored; exactly once */
    CHECK_OK(cuc_channel_release(b, some, 4));
    CHECK_RC(cuc_channel_pump(a, 100), 0);
    CHECK(ends[2] == 1 && ends[1] == 0 && count(a) == 2);

    /* drop: gone without a callback */
    CHECK_OK(cuc__leases_drop(a->leases, LID(3)));
    CHECK_RC(cuc__leases_drop(a->leases, LID(3)), CUC_E_NOT_FOUND);
    CHECK(ends[3] == 0 && count(a) == 1);

    /* closing ends nothing: the link lingers until the peer goes */
    cuc_channel_destroy(a);
    CHECK(ends[1] == 0 && ends[3] == 0 && cuc__linger_count() == 1);
    cuc_channel_destroy(b);
    for (int i = 0; i < 50 && ends[1] == 0; i++)
        cuc__linger_pump(100);
    CHECK(ends[1] == 1 && why_of[1] == CUC__LEASE_PEER_CLOSED);
    CHECK(ends[2] == 1 && ends[3] == 0 && cuc__linger_count() == 0);
}

/* pump keeps user messages for recv, in order, around releases. */
static void test_pump_queue(void)
{
    uint64_t id = LID(5);
    cuc_channel *a, *b;
    cuc_msg *m;
    int rc;

    reset_ends();
    CHECK_OK(cuc_channel_pair(&a, &b));
    add(a, 5);
    add(a, 6);
    CHECK_RC(cuc_channel_pump(a, 0), CUC_E_TIMEOUT);
    send_user(b, 1);
    CHECK_OK(cuc_channel_release(b, &id, 1));
    send_user(b, 2);
    CHECK_OK(cuc_channel_pump(a, 1000));
    CHECK(ends[5] == 1 && count(a) == 1);
    CHECK(recv_ordinal(a) == 1 % ndev);
    CHECK(recv_ordinal(a) == 2 % ndev);
    CHECK_RC(cuc_channel_recv(a, 0, &m), CUC_E_TIMEOUT);

    /* lease_wait pumps until the count is low enough */
    id = LID(6);
    send_user(b, 3);
    CHECK_OK(cuc_channel_release(b, &id, 1));
    CHECK_OK(cuc_channel_lease_wait(a, 0, 1000));
    CHECK(ends[6] == 1 && count(a) == 0);
    CHECK(recv_ordinal(a) == 3 % ndev); /* still there */
    add(a, 7);
    CHECK_RC(cuc_channel_lease_wait(a, 0, 100), CUC_E_TIMEOUT);
    CHECK(strstr(cuc_errmsg(), "1 lease on the channel") != NULL);
    CHECK(strstr(cuc_errmsg(), "still held") != NULL);

    /* the peer closes: its leases end, lease_add is refused afterwards */
    send_user(b, 0);
    cuc_channel_destroy(b);
    CHECK_OK(cuc_channel_lease_wait(a, 0, 1000));
    CHECK(ends[7] == 1 && why_of[7] == CUC__LEASE_PEER_CLOSED);
    CHECK_RC(cuc__leases_add(a->leases, LID(8), &end_ops, &tag_arg), CUC_E_PEER_CLOSED);
    CHECK(recv_ordinal(a) == 0); /* queued before the close: not lost */
    rc = cuc_channel_recv(a, 0, &m);
    CHECK_RC(rc, CUC_E_PEER_CLOSED);
    cuc_channel_destroy(a);
    CHECK(ends[7] == 1);
}

/* Many leases: the table grows, and ends each exactly once in any order. */
static void test_many(void)
{
    static uint64_t ids[10000];
    cuc_channel *a, *b;
    uint64_t i, j, t;
    size_t k;

    reset_ends();
    CHECK_OK(cuc_channel_pair(&a, &b));
    for (i = 0; i < 10000; i++) {
        ids[i] = cuc__lease_id_next();
        CHECK(ids[i] > 0 && ids[i] / LID(1) < MAXID);
        CHECK_OK(cuc__leases_add(a->leases, ids[i], &end_ops, &tag_arg));
    }
    CHECK(count(a) == 10000);
    srand(7);
    for (i = 9999; i > 0; i--) { /* shuffle */
        j = (uint64_t)rand() % (i + 1);
        t = ids[i];
        ids[i] = ids[j];
        ids[j] = t;
    }
    /* drop a few, then release everything (the dropped ones are unknown) */
    for (k = 0; k < 100; k++)
        CHECK_OK(cuc__leases_drop(a->leases, ids[k]));
    CHECK_OK(cuc_channel_release(b, ids, 10000));
    CHECK_OK(cuc_channel_lease_wait(a, 0, 5000));
    for (k = 0; k < 10000; k++)
        CHECK(ends[ids[k] / LID(1)] == (k < 100 ? 0 : 1));
    cuc_channel_destroy(a);
    cuc_channel_destroy(b);
    for (k = 0; k < 10000; k++)
        CHECK(ends[ids[k] / LID(1)] == (k < 100 ? 0 : 1));
}

/* The importer is a real process: it releases ten leases, then dies. */
static void importer(const char *role, int expect_status)
{
    cuc_channel *a, *b;
    cuc_msg *m;
    uint64_t id;
    pid_t pid;
    int null = open("/dev/null", O_RDONLY | O_CLOEXEC);

    CHECK(null >= 0);
    reset_ends();
    CHECK_OK(cuc_channel_pair(&a, &b));
    pid = spawn_self(role, NULL, NULL, cuc_channel_fd(b));
    CHECK(pid > 0);
    cuc_channel_destroy(b);
    CHECK_OK(cuc_msg_create(&m));
    for (id = 1; id <= 100; id++) {
        add(a, id);
        CHECK_OK(cuc_msg_add_fd(m, null, (uint32_t)LID(id)));
    }
    CHECK_OK(cuc_channel_send(a, m));
    cuc_msg_destroy(m);
    CHECK_OK(cuc_channel_lease_wait(a, 90, 10000));
    CHECK(recv_ordinal(a) == 0); /* the child's acknowledgement */
    CHECK(count(a) == 90);
    for (id = 1; id <= 10; id++)
        CHECK(ends[id] == 1 && why_of[id] == CUC__LEASE_RELEASED);
    if (expect_status == 128 + SIGKILL)
        CHECK(kill(pid, SIGKILL) == 0);
    else
        send_user(a, 0); /* the child closes and exits on it */
    CHECK_OK(cuc_channel_lease_wait(a, 0, 10000));
    for (id = 1; id <= 100; id++)
        CHECK(ends[id] == 1 && why_of[id] == (id <= 10 ? CUC__LEASE_RELEASED
                                                        : CUC__LEASE_PEER_CLOSED));
    CHECK(wait_child(pid) == expect_status);
    cuc_channel_destroy(a);
    for (id = 1; id <= 100; id++)
        CHECK(ends[id] == 1);
    close(null);
}

int main(int argc, char **argv)
{
    int n;

    if (argc >= 3 && !strcmp(argv[1], "--child"))
        return child_main(argv[2]);
    CHECK_OK(cuc_device_count(&n));
    ndev = n;
    if (n < 4)
        fprintf(stderr, "note: %d devices: messages reuse ordinals\n", n);
    FD_BASELINE();
    test_release();
    test_pump_queue();
    test_many();
    importer("kill", 128 + SIGKILL);
    importer("exit", 0);
    FD_CHECK_NO_LEAK();
    return test_finish();
}
