/* Refused records from a hostile peer, against an exporter holding many
 * grants (one a sent message with leases):
 *  - 20,000 leased messages (frames 0..19,999) received unread; then
 *    65,536 refused records in messages of at most 1000 (the cap): each of
 *    frames 0..999 named 64 times, and 1,536 frames never sent. The pump
 *    returns; exactly those 1000 messages' leases end (CUC__LEASE_REFUSED,
 *    once each), cuc_channel_refused_count says 1000, 19,000 leases stay.
 *    Each record is one lookup, whatever the number of grants (it was a
 *    walk of all of them: 65,536 x 20,000); the time the pumps took is
 *    printed, not asserted;
 *  - the same 65,536 records in one 1.5 MB message (raw frames, written by
 *    a forked child): CUC_E_BADMSG at decode naming the cap, nothing ends
 *    or is counted, the channel goes on;
 *  - decode and add: 1000 refused records a message pass, the 1001st is
 *    refused (CUC_E_BADMSG, CUC_E_LIMIT). */
#include <signal.h>
#include <sys/socket.h>
#include <time.h>

#include "check.h"
#include "cucore.h"
#include "channel/channel.h"
#include "frame/frame.h"
#include "lease/lease.h"
#include "wire/records.h"

#define NGRANT 20000u
#define NREC 65536u
#define NNAMED 1000u /* frames named: each NREC_NAMED / NNAMED times */
#define NREC_NAMED 64000u
#define RECV_MS 30000

static uint64_t ids[NGRANT]; /* the lease of message i, in send order */
static int ends[NGRANT], bad_ends;
static int tag;

static double now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_id(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

static void on_end(void *obj, uint64_t id, int why)
{
    const uint64_t *at = bsearch(&id, ids, NGRANT, sizeof(ids[0]), cmp_id);

    if (obj != &tag || !at)
        bad_ends++;
    else if (why == CUC__LEASE_REFUSED)
        ends[at - ids]++; /* the others end with the peer's close */
}

static void no_op(void *obj)
{
    (void)obj;
}

static const struct cuc__lease_ops end_ops = {no_op, on_end, no_op, no_op, NULL, NULL, NULL};

/* The payload of a refused record naming frame seq. */
static void refused_payload(uint8_t p[8], uint32_t seq)
{
    memset(p, 0, 8);
    cuc__put32(p, seq);
}

/* The frame record k of the NREC names: frames 0..NNAMED-1 over and
 * over, then frames never sent. */
static uint32_t seq_named(uint32_t k)
{
    return k < NREC_NAMED ? k % NNAMED : 1000000u + k;
}

/* Sends NGRANT messages of one lease each from exp, imp taking each
 * (nothing of it imported: the leases stay). */
static void grant_many(cuc_channel *exp, cuc_channel *imp)
{
    for (uint32_t i = 0; i < NGRANT; i++) {
        cuc_msg *m;
        CHECK_OK(cuc_msg_create(&m));
        CHECK_OK(cuc__msg_lease_attach(m, &end_ops, &tag, &ids[i]));
        CHECK_OK(cuc_channel_send(exp, m));
        cuc_msg_destroy(m);
        CHECK_OK(cuc_channel_recv(imp, RECV_MS, &m));
        cuc_msg_destroy(m);
    }
    for (uint32_t i = 1; i < NGRANT; i++)
        CHECK(ids[i] > ids[i - 1]); /* sorted: on_end searches them */
}

static size_t lease_count(cuc_channel *ch)
{
    size_t n;

    CHECK_OK(cuc_channel_lease_count(ch, &n));
    return n;
}

static uint64_t refused_count(cuc_channel *ch)
{
    uint64_t n;

    CHECK_OK(cuc_channel_refused_count(ch, &n));
    return n;
}

/* The NREC records in messages of at most the cap, each pumped. */
static void refuse_capped(cuc_channel *exp, cuc_channel *imp)
{
    double t0, total = 0;
    uint32_t k = 0;
    int nmsg = 0;

    while (k < NREC) {
        uint8_t p[8];
        cuc_msg *m;
        CHECK_OK(cuc_msg_create(&m));
        for (uint32_t i = 0; i < CUC__REFUSED_MAX_RECORDS && k < NREC; i++, k++) {
            refused_payload(p, seq_named(k));
            CHECK_OK(cuc__msg_add_record(m, CUC_RECORD_REFUSED, CUC_RECORD_REFUSED_VERSION,
                                         p, sizeof(p), NULL, 0));
        }
        CHECK_OK(cuc_channel_send(imp, m));
        cuc_msg_destroy(m);
        t0 = now_ms();
        CHECK_OK(cuc_channel_pump(exp, RECV_MS));
        total += now_ms() - t0;
        nmsg++;
    }
    printf("%u refused records in %d messages against %u grants: pumped in %.1f ms\n",
           NREC, nmsg, NGRANT, total);
    CHECK(refused_count(exp) == NNAMED);
    CHECK(lease_count(exp) == NGRANT - NNAMED);
    CHECK(bad_ends == 0);
    for (uint32_t i = 0; i < NGRANT; i++)
        CHECK(ends[i] == (i < NNAMED));
}

/* The bytes of one message of n refused records (seq_named's frames). */
static uint8_t *refused_bytes(uint32_t n, size_t *len)
{
    uint8_t p[8], *one, *b;
    const int *fds;
    size_t one_len, nfds;
    cuc_msg *m;

    CHECK_OK(cuc_msg_create(&m));
    refused_payload(p, 0);
    CHECK_OK(cuc__msg_add_record(m, CUC_RECORD_REFUSED, CUC_RECORD_REFUSED_VERSION, p,
                                 sizeof(p), NULL, 0));
    CHECK_OK(cuc__msg_encode(m, &one, &one_len, &fds, &nfds));
    cuc_msg_destroy(m);
    CHECK(one_len == CUC__WIRE_HDR + CUC__WIRE_REC_HDR + 8);
    *len = CUC__WIRE_HDR + (size_t)n * (CUC__WIRE_REC_HDR + 8);
    CHECK((b = malloc(*len)) != NULL);
    memcpy(b, one, CUC__WIRE_HDR);
    cuc__put32(b + 8, n);
    cuc__put64(b + 16, *len);
    for (uint32_t k = 0; k < n; k++) {
        uint8_t *r = b + CUC__WIRE_HDR + (size_t)k * (CUC__WIRE_REC_HDR + 8);
        memcpy(r, one + CUC__WIRE_HDR, CUC__WIRE_REC_HDR + 8);
        cuc__put32(r + CUC__WIRE_REC_HDR, seq_named(k));
    }
    free(one);
    return b;
}

/* Writes b as the frames of one message from seq on, on fd (blocking).
 * Returns the number of frames. */
static uint32_t write_frames(int fd, uint32_t seq, const uint8_t *b, size_t len)
{
    uint32_t nparts = cuc__frame_parts((uint32_t)len, 0);

    for (uint32_t part = 0; part < nparts; part++) {
        struct cuc__frame f = {seq + part, part, nparts, 0, 0, (uint32_t)len, 0};
        uint8_t hdr[CUC__FRAME_HDR];
        uint32_t off, fo, pn;
        struct iovec iov[2];
        struct msghdr mh;

        cuc__frame_slice((uint32_t)len, 0, part, &off, &f.len, &fo, &pn);
        cuc__frame_write(hdr, &f);
        iov[0] = (struct iovec){hdr, sizeof(hdr)};
        iov[1] = (struct iovec){(void *)(b + off), f.len};
        memset(&mh, 0, sizeof(mh));
        mh.msg_iov = iov;
        mh.msg_iovlen = 2;
        if (sendmsg(fd, &mh, MSG_NOSIGNAL) != (ssize_t)(sizeof(hdr) + f.len))
            _exit(3);
    }
    return nparts;
}

/* The NREC records in one message: refused at decode, nothing ends. */
static void refuse_uncapped(cuc_channel *exp, cuc_channel *imp)
{
    size_t len, leases = lease_count(exp);
    uint8_t *b = refused_bytes(NREC, &len);
    uint32_t seq = imp->link->send_seq, nparts = cuc__frame_parts((uint32_t)len, 0);
    cuc_msg *m;
    pid_t pid;

    pid = fork(); /* the writer: raw frames only, no CUDA */
    CHECK(pid >= 0);
    if (pid == 0)
        _exit(write_frames(cuc_channel_fd(imp), seq, b, len) == nparts ? 0 : 4);
    imp->link->send_seq += nparts; /* what went out on imp's link */
    CHECK_RC(cuc_channel_pump(exp, RECV_MS), CUC_E_BADMSG);
    CHECK_ERRMSG("more than the 1000 refused records a message holds");
    CHECK(wait_child(pid) == 0);
    free(b);
    CHECK(refused_count(exp) == NNAMED);
    CHECK(lease_count(exp) == leases);
    /* the channel goes on */
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_channel_send(imp, m));
    cuc_msg_destroy(m);
    CHECK_OK(cuc_channel_recv(exp, RECV_MS, &m));
    CHECK(cuc_msg_record_count(m) == 0);
    cuc_msg_destroy(m);
}

/* The cap at decode and at add. */
static void test_cap(void)
{
    uint8_t p[8], *b;
    size_t len;
    cuc_msg *m;

    b = refused_bytes(CUC__REFUSED_MAX_RECORDS, &len);
    CHECK_OK(cuc__msg_decode(b, len, NULL, 0, &m));
    CHECK(cuc__refused_rec_count(m) == CUC__REFUSED_MAX_RECORDS);
    cuc_msg_destroy(m);
    free(b);
    b = refused_bytes(CUC__REFUSED_MAX_RECORDS + 1, &len);
    CHECK_RC(cuc__msg_decode(b, len, NULL, 0, &m), CUC_E_BADMSG);
    CHECK_ERRMSG("record 1000 at offset 24024: more than the 1000 refused records");
    free(b);
    CHECK_OK(cuc_msg_create(&m));
    refused_payload(p, 7);
    for (uint32_t i = 0; i < CUC__REFUSED_MAX_RECORDS; i++)
        CHECK_OK(cuc__msg_add_record(m, CUC_RECORD_REFUSED, CUC_RECORD_REFUSED_VERSION, p,
                                     sizeof(p), NULL, 0));
    CHECK_RC(cuc__msg_add_record(m, CUC_RECORD_REFUSED, CUC_RECORD_REFUSED_VERSION, p,
                                 sizeof(p), NULL, 0),
             CUC_E_LIMIT);
    cuc_msg_destroy(m);
}

int main(void)
{
    cuc_channel *exp, *imp;

    signal(SIGPIPE, SIG_IGN);
    FD_BASELINE();
    test_cap();
    CHECK_OK(cuc_channel_pair(&exp, &imp));
    grant_many(exp, imp);
    CHECK(lease_count(exp) == NGRANT);
    refuse_capped(exp, imp);
    refuse_uncapped(exp, imp);
    cuc_channel_destroy(imp); /* the rest end with the peer's close */
    CHECK_RC(cuc_channel_pump(exp, RECV_MS), CUC_E_PEER_CLOSED);
    CHECK(lease_count(exp) == 0 && bad_ends == 0);
    cuc_channel_destroy(exp);
    FD_CHECK_NO_LEAK();
    return test_finish();
}
