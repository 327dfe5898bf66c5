/* socket_consumer: receive GPU memory from an unrelated process at a
 * filesystem path (its partner is socket_producer.c, which has the whole
 * story).
 *
 * Run it with any CUDA_VISIBLE_DEVICES: a device record names a GPU by
 * UUID, so it resolves to the same physical GPU whatever its ordinal here;
 * a GPU this process cannot see is refused with CUC_E_NOT_VISIBLE, and the
 * message says which UUID and which devices are visible instead. Give the
 * list as UUIDs (GPU-...) when you reorder or narrow it: an index means
 * whatever GPU has that place in the caller's own list.
 *
 *     CUDA_VISIBLE_DEVICES=GPU-<uuid>,... ./socket_consumer /tmp/demo.sock
 *
 * Exit status 0 when every record was handled and every byte of every
 * buffer is what the producer wrote, 1 otherwise. A device we cannot see
 * is reported, not fatal; the pool is, when its GPU is one we cannot see:
 * its buffers are unreachable then.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cucore.h>

#define MAX_BUFFERS 16
#define TIMEOUT_MS 30000

/* socket_producer.c writes this into buffer b at byte k. */
static uint8_t pattern(int b, size_t k)
{
    return (uint8_t)(k * 7 + (size_t)b * 101 + (k >> 8));
}

/* What the records of one message resolved to. */
struct consumer {
    cuc_pool *pool;     /* held while we use its buffers */
    cuc_event *ev;      /* the producer's "writes done" */
    cuc_stream *stream; /* ours, ordered after ev */
    cuc_buffer *bufs[MAX_BUFFERS];
    int nbufs, verified;
    size_t bytes;
};

static int fail(const char *what, int rc)
{
    fprintf(stderr, "socket_consumer: %s: %s: %s\n", what, cuc_errname(rc), cuc_errmsg());
    return 1;
}

/* A device record: resolved here by UUID and added to the answer. */
static int take_device(const cuc_msg *m, size_t i, cuc_msg *answer)
{
    cuc_device *d;
    int rc = cuc_msg_get_device(m, i, &d);

    if (rc == CUC_E_NOT_VISIBLE) {
        /* Not an error of the program: this process was started without
         * that GPU. cuc_errmsg() names it and lists what we do see. */
        printf("  record %zu: not visible here: %s\n", i, cuc_errmsg());
        return 0;
    }
    if (rc)
        return fail("device record", rc);
    printf("  record %zu: device %s is our ordinal %d (%s)\n", i, cuc_device_uuid_string(d),
           cuc_device_ordinal(d), cuc_device_name(d));
    rc = cuc_msg_add_device(answer, d);
    return rc ? fail("answer", rc) : 0;
}

/* The pool record: the pool is imported (from the fd that came with the
 * message) on our device with the owner's UUID, and registered under its
 * pool id, which is how the buffer records find it. The pool's device
 * ends the answer (it follows the devices, as the records do), so that the
 * producer can check it is the GPU it made the pool on. */
static int take_pool(struct consumer *c, const cuc_msg *m, size_t i, cuc_msg *answer)
{
    cuc_device *d;
    int rc;

    if (c->pool) {
        printf("  record %zu: a second pool, not expected by this example\n", i);
        return 1;
    }
    rc = cuc_msg_get_pool(m, i, &c->pool);
    if (rc)
        return fail("pool record", rc); /* CUC_E_NOT_VISIBLE names the owner's UUID */
    d = cuc_pool_device(c->pool);
    printf("  record %zu: IPC pool imported on our ordinal %d = %s\n", i, cuc_device_ordinal(d),
           cuc_device_uuid_string(d));
    rc = cuc_msg_add_device(answer, d);
    return rc ? fail("answer", rc) : 0;
}

/* An IPC event: opened on our device with its UUID; a stream of ours waits
 * for it, so work queued on that stream afterwards (our reads of the
 * buffers) runs only once the producer's writes before the event are
 * done. Without it we could read the buffers before they are filled. */
static int take_event(struct consumer *c, const cuc_msg *m, size_t i)
{
    int rc;

    if (c->ev) {
        printf("  record %zu: a second event, not expected by this example\n", i);
        return 1;
    }
    rc = cuc_msg_get_event(m, i, &c->ev);
    if (rc)
        return fail("event record", rc);
    rc = cuc_stream_create(cuc_event_device(c->ev), CUC_STREAM_NON_BLOCKING, 0, &c->stream);
    if (rc == 0)
        rc = cuc_stream_wait_event(c->stream, c->ev);
    if (rc)
        return fail("waiting for the event", rc);
    printf("  record %zu: IPC event on our ordinal %d (%s): our stream waits for it\n", i,
           cuc_device_ordinal(cuc_event_device(c->ev)),
           cuc_device_uuid_string(cuc_event_device(c->ev)));
    return 0;
}

/* Copies the buffer to host memory on our stream (so after the event) and
 * compares every byte with the pattern. Returns mismatches. */
static int verify(struct consumer *c, cuc_buffer *b, int which)
{
    size_t n = cuc_buffer_size(b), k, wrong = 0;
    uint8_t *host = malloc(n);
    int rc;

    if (!host)
        return fail("host memory", CUC_E_NOMEM);
    rc = cuc_memcpy(host, cuc_buffer_ptr(b), n, c->stream); /* waits for the copy */
    for (k = 0; rc == 0 && k < n; k++)
        wrong += host[k] != pattern(which, k);
    free(host);
    if (rc)
        return fail("reading the buffer", rc);
    if (wrong) {
        printf("  buffer %d: MISMATCH: %zu of %zu bytes differ from what the producer wrote\n",
               which, wrong, n);
        return 1;
    }
    printf("  buffer %d: %zu KiB on our ordinal %d: every byte as the producer wrote it\n", which,
           n >> 10, cuc_device_ordinal(cuc_buffer_device(b)));
    c->verified++;
    c->bytes += n;
    return 0;
}

/* A buffer record: mapped from its pool (which we must have imported) and
 * checked. */
static int take_buffer(struct consumer *c, const cuc_msg *m, size_t i)
{
    cuc_buffer *b;
    int rc;

    if (!c->stream || c->nbufs == MAX_BUFFERS) {
        printf("  record %zu: a buffer before the event, or too many buffers\n", i);
        return 1;
    }
    /* CUC_E_POOL_NOT_IMPORTED (naming the pool id) if the pool record did
     * not come first. */
    rc = cuc_msg_get_buffer(m, i, &b);
    if (rc)
        return fail("buffer record", rc);
    c->bufs[c->nbufs++] = b;
    if (cuc_buffer_device(b) != cuc_stream_device(c->stream)) {
        printf("  record %zu: MISMATCH: the buffer is not on the event's GPU\n", i);
        return 1;
    }
    return verify(c, b, c->nbufs - 1);
}

static int handle(struct consumer *c, const cuc_msg *m, cuc_msg *answer)
{
    int bad = 0;

    for (size_t i = 0; i < cuc_msg_record_count(m); i++) {
        int type = 0;
        cuc_msg_record_type(m, i, &type);
        switch (type) {
        case CUC_RECORD_DEVICE:
            bad += take_device(m, i, answer);
            break;
        case CUC_RECORD_POOL:
            bad += take_pool(c, m, i, answer);
            break;
        case CUC_RECORD_EVENT:
            bad += take_event(c, m, i);
            break;
        case CUC_RECORD_BUFFER:
            bad += take_buffer(c, m, i);
            break;
        default:
            printf("  record %zu: type %d, not handled by this example\n", i, type);
            bad++;
        }
    }
    return bad;
}

/* Freeing an imported buffer unmaps it and, once our stream's reads are
 * done, sends the producer the release of its lease: that is what lets
 * the producer's deferred free run. A consumer that kept them would pin the
 * producer's memory until it closed the channel or exited. */
static void release(struct consumer *c)
{
    /* One call for all of them: one wait for the stream and one release
     * message, instead of one of each per buffer. */
    cuc_buffer_unref_many_async(c->bufs, (size_t)c->nbufs, c->stream);
    if (c->nbufs)
        printf("socket_consumer: freed %d buffers: their leases are released\n", c->nbufs);
    cuc_pool_unref(c->pool);
    cuc_stream_destroy(c->stream);
    cuc_event_unref(c->ev);
}

int main(int argc, char **argv)
{
    struct consumer c;
    cuc_channel *ch;
    cuc_msg *m, *answer;
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    int rc, bad;

    if (argc != 2) {
        fprintf(stderr, "usage: socket_consumer SOCKET_PATH\n");
        return 2;
    }
    memset(&c, 0, sizeof(c));
    printf("socket_consumer: CUDA_VISIBLE_DEVICES=%s\n", cvd ? cvd : "(unset)");
    /* Retries while nothing listens at the path yet. */
    rc = cuc_channel_connect(argv[1], TIMEOUT_MS, &ch);
    if (rc)
        return fail("connect", rc);
    rc = cuc_channel_recv(ch, TIMEOUT_MS, &m);
    if (rc) {
        cuc_channel_destroy(ch);
        return fail("receive", rc);
    }
    rc = cuc_msg_create(&answer);
    if (rc) {
        cuc_msg_destroy(m);
        cuc_channel_destroy(ch);
        return fail("answer", rc);
    }
    printf("socket_consumer: %zu records\n", cuc_msg_record_count(m));
    bad = handle(&c, m, answer);
    printf("socket_consumer: verified %d of %d buffers, %zu bytes\n", c.verified, c.nbufs,
           c.bytes);
    release(&c); /* before answering: the producer is waiting for the releases */
    rc = cuc_channel_send(ch, answer);
    if (rc)
        bad += fail("sending the answer", rc);
    cuc_msg_destroy(answer);
    cuc_msg_destroy(m);
    /* Stay connected until the producer hangs up. Closing the channel (or
     * exiting) would end our leases for us, which would hide a buffer we
     * forgot to free: the producer counts our releases while we are still
     * here. */
    rc = cuc_channel_recv(ch, TIMEOUT_MS, &m);
    if (rc == 0) {
        printf("socket_consumer: an unexpected second message\n");
        cuc_msg_destroy(m);
        bad++;
    } else if (rc != CUC_E_PEER_CLOSED) {
        bad += fail("waiting for the producer to hang up", rc);
    }
    cuc_channel_destroy(ch);
    printf("socket_consumer %s\n", bad ? "FAILED" : "OK");
    return bad ? 1 : 0;
}
