/* socket_producer: share GPU memory with an unrelated process that
 * connects to a filesystem path (its partner is socket_consumer.c).
 *
 * The two programs have no parent in common and inherit nothing from each
 * other: they meet at a Unix-domain socket path. cucore creates the socket
 * file with mode 0600 and checks the peer's uid (SO_PEERCRED), so only
 * processes of the same user get in.
 *
 * What crosses, in one message, in this order:
 *   - every device this process sees, as UUIDs: the consumer resolves each
 *     to its own device with that UUID, whatever its ordinal there, or gets
 *     CUC_E_NOT_VISIBLE naming the UUID (it may see fewer GPUs);
 *   - an IPC memory pool on our ordinal 0 (an fd, its pool id and its
 *     owner's UUID): the consumer imports it on the GPU with that UUID;
 *   - an IPC event recorded after our writes to the buffers: the consumer
 *     makes a stream of its own wait on it before it reads, which is how
 *     work is ordered across processes (streams themselves never cross);
 *   - NBUFFERS buffers of the pool that we filled (each is bytes only: its
 *     pool id and the driver's export data; no fd).
 * The consumer copies every buffer back to its host memory, checks every
 * byte against the pattern below, frees the buffers (which tells us it is
 * done with them), and answers with the devices it resolved followed by
 * the device it imported the pool on. We check that the pool landed on
 * the GPU we created it on and that each device is one we sent, in order:
 * device records resolve, in the process that sent them, to the very same
 * cuc_device objects.
 *
 * We free our buffers right after sending. The driver forbids the exporter
 * to free pool memory that an importer still maps, so cucore defers those
 * frees until the consumer releases its lease on each buffer (by freeing
 * it, closing the channel or dying); cuc_pool_lease_wait() waits for that.
 *
 *     ./socket_producer /tmp/demo.sock &
 *     CUDA_VISIBLE_DEVICES=GPU-<uuid>,... ./socket_consumer /tmp/demo.sock
 *
 * (CUCORE_DRIVER=sim for both without a GPU.) Exit status 0 when the answer
 * checks out and every lease ended, 1 otherwise.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include <cucore.h>

#define MAX_DEVICES 64
#define NBUFFERS 3
#define BUFFER_BYTES ((size_t)256 << 10)
#define TIMEOUT_MS 30000

/* What we write into buffer b at byte k; socket_consumer.c checks the same
 * function. Different in every buffer, so a buffer mixed up with another
 * is caught as well as a wrong byte. */
static uint8_t pattern(int b, size_t k)
{
    return (uint8_t)(k * 7 + (size_t)b * 101 + (k >> 8));
}

/* What main() owns, so that one cleanup path releases it all. */
struct producer {
    cuc_device *devs[MAX_DEVICES];
    int ndev;
    cuc_stream *stream; /* our writes, and the event after them */
    cuc_pool *pool;
    cuc_buffer *bufs[NBUFFERS];
    cuc_event *ev;
};

static int fail(const char *what, int rc)
{
    fprintf(stderr, "socket_producer: %s: %s: %s\n", what, cuc_errname(rc), cuc_errmsg());
    return 1;
}

/* The pool, its buffers filled with the pattern, and the event that marks
 * the end of the writes. */
static int fill_buffers(struct producer *p)
{
    /* CUC_POOL_IPC: only an exportable pool can be sent, and only buffers of
     * such a pool. The pool is exported once, here. */
    struct cuc_pool_props props = {CUC_POOL_DEVICE, CUC_POOL_IPC, 0};
    uint8_t *host = malloc(BUFFER_BYTES);
    int rc;

    if (!host)
        return fail("host memory", CUC_E_NOMEM);
    rc = cuc_stream_create(p->devs[0], CUC_STREAM_NON_BLOCKING, 0, &p->stream);
    if (rc == 0)
        rc = cuc_pool_create(p->devs[0], &props, &p->pool);
    for (int b = 0; rc == 0 && b < NBUFFERS; b++) {
        for (size_t k = 0; k < BUFFER_BYTES; k++)
            host[k] = pattern(b, k);
        /* Stream-ordered: the allocation and the copy are queued on our
         * stream. The copy is asynchronous for the GPU, but from pageable
         * host memory it returns only once host[] has been read, so host[]
         * can be refilled for the next buffer at once. */
        rc = cuc_buffer_alloc_async(p->pool, BUFFER_BYTES, p->stream, &p->bufs[b]);
        if (rc == 0)
            rc = cuc_memcpy_async(cuc_buffer_ptr(p->bufs[b]), host, BUFFER_BYTES, p->stream);
    }
    free(host);
    if (rc)
        return fail("filling the pool's buffers", rc);
    /* The writes may still be in flight when the message goes out: we do
     * not synchronize. The event marks their end instead, and the consumer
     * waits on it before reading. CUC_EVENT_IPC: only interprocess events
     * can be sent (they record no time, as the driver requires). */
    rc = cuc_event_create(p->devs[0], CUC_EVENT_IPC, &p->ev);
    if (rc == 0)
        rc = cuc_event_record(p->ev, p->stream);
    return rc ? fail("recording the event", rc) : 0;
}

static int build_message(const struct producer *p, cuc_msg **out)
{
    cuc_msg *m;
    int rc;

    rc = cuc_msg_create(&m);
    for (int i = 0; rc == 0 && i < p->ndev; i++)
        rc = cuc_msg_add_device(m, p->devs[i]); /* the UUID only, never the ordinal */
    /* The pool goes before its buffers: the consumer finds a buffer's pool
     * by id among the pools it has imported, so the pool record must have
     * been resolved by then. */
    if (rc == 0)
        rc = cuc_msg_add_pool(m, p->pool); /* a duplicate of the pool's fd */
    /* The event before the buffers too, so that the consumer has a stream
     * ordered after our writes when the first buffer arrives. */
    if (rc == 0)
        rc = cuc_msg_add_event(m, p->ev); /* the IPC handle + the device's UUID */
    for (int b = 0; rc == 0 && b < NBUFFERS; b++)
        rc = cuc_msg_add_buffer(m, p->bufs[b]); /* pool id + export data + size */
    if (rc) {
        cuc_msg_destroy(m);
        return fail("building the message", rc);
    }
    *out = m;
    return 0;
}

/* The answer: the devices the consumer resolved, in the order we sent them
 * (it leaves out the ones it cannot see), then the device it imported the
 * pool on. Returns mismatches. */
static int check_answer(const cuc_msg *answer, const struct producer *p)
{
    size_t k = cuc_msg_record_count(answer), i;
    cuc_device *d;
    int next = 0, bad = 0, rc;

    rc = k ? cuc_msg_get_device(answer, k - 1, &d) : CUC_E_BADMSG;
    if (rc)
        return fail("the answer's pool device", rc);
    if (d != p->devs[0]) { /* singletons: compare pointers */
        printf("  MISMATCH: the consumer imported the pool on %s, we made it on %s\n",
               cuc_device_uuid_string(d), cuc_device_uuid_string(p->devs[0]));
        bad++;
    } else {
        printf("  consumer imported the pool on our ordinal 0 = %s\n", cuc_device_uuid_string(d));
    }
    for (i = 0; i + 1 < k; i++) {
        rc = cuc_msg_get_device(answer, i, &d);
        if (rc) {
            bad += fail("answer record", rc);
            continue;
        }
        while (next < p->ndev && p->devs[next] != d)
            next++;
        if (next == p->ndev) {
            printf("  MISMATCH: the consumer answered %s, which we did not send there\n",
                   cuc_device_uuid_string(d));
            bad++;
            break;
        }
        printf("  consumer resolved our ordinal %d = %s\n", next, cuc_device_uuid_string(d));
        next++;
    }
    printf("  consumer resolved %zu of %d devices\n", k - 1, p->ndev);
    return bad;
}

/* Our side of the buffers ends here, right after the send: the consumer
 * may still be reading them, so cucore keeps the memory allocated until
 * its lease on each buffer ends. Returns 1 if the leases did not end. */
static int free_buffers(struct producer *p, cuc_channel *ch)
{
    size_t before = 0, after = 1;
    int rc;

    for (int b = 0; b < NBUFFERS; b++) {
        /* The free is queued on our stream, after the writes. */
        cuc_buffer_unref_async(p->bufs[b], p->stream);
        p->bufs[b] = NULL;
    }
    cuc_pool_lease_count(p->pool, &before);
    /* Releases arrive on the channel: something must read it for cucore to
     * notice them. The wait pumps ch; the answer, when it comes first, is
     * queued for cuc_channel_recv(). Deferred frees whose lease ended have
     * run when it returns 0. (The consumer stays connected until we hang
     * up, so these are its releases: its close would end the leases too.) */
    rc = cuc_pool_lease_wait(p->pool, ch, 0, TIMEOUT_MS);
    cuc_pool_lease_count(p->pool, &after);
    printf("  freed our %d buffers at once: %zu leases deferred the frees, %zu left after "
           "waiting for the consumer's releases\n", NBUFFERS, before, after);
    if (rc)
        return fail("waiting for the leases", rc);
    return after ? 1 : 0;
}

static int open_devices(struct producer *p)
{
    int rc = cuc_device_count(&p->ndev);

    if (rc)
        return fail("devices (no GPU? try CUCORE_DRIVER=sim)", rc);
    if (p->ndev > MAX_DEVICES)
        p->ndev = MAX_DEVICES;
    for (int i = 0; i < p->ndev; i++)
        if ((rc = cuc_device_get(i, &p->devs[i])) != 0)
            return fail("device", rc);
    return 0;
}

static void release(struct producer *p)
{
    for (int b = 0; b < NBUFFERS; b++)
        cuc_buffer_unref_async(p->bufs[b], NULL);
    cuc_event_unref(p->ev);
    cuc_pool_unref(p->pool); /* after its buffers: each holds a reference anyway */
    cuc_stream_destroy(p->stream);
}

int main(int argc, char **argv)
{
    static struct producer p;
    cuc_listener *l = NULL;
    cuc_channel *ch = NULL;
    cuc_msg *m = NULL, *answer = NULL;
    pid_t peer = 0;
    int rc, bad = 1;

    if (argc != 2) {
        fprintf(stderr, "usage: socket_producer SOCKET_PATH\n");
        return 2;
    }
    if (open_devices(&p) || fill_buffers(&p) || build_message(&p, &m))
        goto release;

    /* Listen first, then accept: the consumer may start before or after
     * us (cuc_channel_connect retries until something listens). */
    rc = cuc_channel_listen(argv[1], &l);
    if (rc) {
        fail("listen", rc);
        goto destroy_msg;
    }
    printf("socket_producer: listening at %s, %d device%s, %d buffers of %zu KiB on %s\n",
           argv[1], p.ndev, p.ndev == 1 ? "" : "s", NBUFFERS, BUFFER_BYTES >> 10,
           cuc_device_uuid_string(p.devs[0]));
    fflush(stdout);
    rc = cuc_listener_accept(l, TIMEOUT_MS, &ch);
    if (rc) {
        fail("accept", rc);
        goto close_listener;
    }
    cuc_channel_peer_pid(ch, &peer);
    printf("socket_producer: consumer pid %d connected\n", (int)peer);
    fflush(stdout);
    rc = cuc_channel_send(ch, m); /* starts one lease per buffer */
    /* The message holds a reference to every buffer; drop it now so that
     * our frees below are the last references. */
    cuc_msg_destroy(m);
    m = NULL;
    if (rc) {
        fail("send", rc);
        goto close_channel;
    }
    bad = free_buffers(&p, ch);
    /* Receive the answer before destroying the event: an IPC event means
     * something only while the event it was opened from exists. */
    rc = cuc_channel_recv(ch, TIMEOUT_MS, &answer);
    if (rc) {
        bad += fail("receiving the answer", rc);
        goto close_channel;
    }
    bad += check_answer(answer, &p);
    cuc_msg_destroy(answer);
close_channel:
    cuc_channel_destroy(ch); /* ends any lease still held: deferred frees run now */
close_listener:
    cuc_listener_destroy(l); /* also removes the socket file */
destroy_msg:
    cuc_msg_destroy(m);
release:
    release(&p);
    printf("socket_producer %s\n", bad ? "FAILED" : "OK");
    return bad ? 1 : 0;
}
