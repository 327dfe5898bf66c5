/* socket_producer: share CUDA objects with an unrelated process that
 * connects to a filesystem path (its partner is socket_consumer.c).
 *
 * The two programs have no parent in common and inherit nothing from each
 * other: they meet at a Unix-domain socket path. cucore creates the socket
 * file with mode 0600 and checks the peer's uid (SO_PEERCRED), so only
 * processes of the same user get in.
 *
 * What crosses, in one message:
 *   - every device this process sees, as UUIDs: the consumer resolves each
 *     to its own device with that UUID, whatever its ordinal there, or gets
 *     CUC_E_NOT_VISIBLE naming the UUID (it may see fewer GPUs);
 *   - an IPC event recorded on a stream of ours: the consumer makes a
 *     stream of its own wait on it, which is how work is ordered across
 *     processes (streams themselves never cross).
 * The consumer answers with the devices it resolved, and we check that
 * each is one we sent, in order: device records resolve, in the process
 * that sent them, to the very same cuc_device objects.
 *
 *     ./socket_producer /tmp/demo.sock &
 *     CUDA_VISIBLE_DEVICES=1,0 ./socket_consumer /tmp/demo.sock
 *
 * (CUCORE_DRIVER=sim for both without a GPU.) Exit status 0 when the answer
 * checks out, 1 otherwise.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include <cucore.h>

#define MAX_DEVICES 64
#define TIMEOUT_MS 30000

static int fail(const char *what, int rc)
{
    fprintf(stderr, "socket_producer: %s: %s: %s\n", what, cuc_errname(rc), cuc_errmsg());
    return 1;
}

/* The event the consumer will wait for. In a real program the stream would
 * hold work (a kernel filling a buffer, say) and the event would mark its
 * end; recording it on an empty stream completes it at once. */
static int make_event(cuc_device *dev, cuc_event **ev)
{
    cuc_stream *s;
    int rc;

    /* CUC_EVENT_IPC: only interprocess events can be sent (and they record
     * no time, as the driver requires). */
    rc = cuc_event_create(dev, CUC_EVENT_IPC, ev);
    if (rc)
        return fail("event", rc);
    rc = cuc_stream_create(dev, CUC_STREAM_NON_BLOCKING, 0, &s);
    if (rc == 0) {
        rc = cuc_event_record(*ev, s);
        cuc_stream_destroy(s); /* queued work still completes */
    }
    if (rc) {
        cuc_event_destroy(*ev);
        return fail("recording the event", rc);
    }
    return 0;
}

static int build_message(cuc_device *const *devs, int n, const cuc_event *ev, cuc_msg **out)
{
    cuc_msg *m;
    int rc;

    rc = cuc_msg_create(&m);
    for (int i = 0; rc == 0 && i < n; i++)
        rc = cuc_msg_add_device(m, devs[i]); /* the UUID only, never the ordinal */
    if (rc == 0)
        rc = cuc_msg_add_event(m, ev); /* the IPC handle + the device's UUID */

    /* ---- POOL BUFFERS GO HERE (issue #6) ----
     * Once cucore's memory pools land (cucore/pool.h, cucore/memory.h), this
     * is where the producer adds an IPC pool and buffers allocated from it;
     * the consumer's matching place is marked in socket_consumer.c. Not
     * written yet: the pool API is still being built. */

    if (rc) {
        cuc_msg_destroy(m);
        return fail("building the message", rc);
    }
    *out = m;
    return 0;
}

/* The answer: the devices the consumer resolved, in the order we sent them
 * (it leaves out the ones it cannot see). Returns mismatches. */
static int check_answer(const cuc_msg *answer, cuc_device *const *devs, int n)
{
    size_t k = cuc_msg_count(answer), i;
    int next = 0, bad = 0;

    for (i = 0; i < k; i++) {
        cuc_device *d;
        int rc = cuc_msg_get_device(answer, i, &d);
        if (rc) {
            bad += fail("answer record", rc);
            continue;
        }
        while (next < n && devs[next] != d) /* singletons: compare pointers */
            next++;
        if (next == n) {
            printf("  MISMATCH: the consumer answered %s, which we did not send there\n",
                   cuc_device_uuid_string(d));
            bad++;
            break;
        }
        printf("  consumer resolved our ordinal %d = %s\n", next, cuc_device_uuid_string(d));
        next++;
    }
    if (k == 0) {
        printf("  MISMATCH: the consumer resolved none of our devices\n");
        bad++;
    }
    printf("  consumer resolved %zu of %d devices\n", k, n);
    return bad;
}

int main(int argc, char **argv)
{
    cuc_device *devs[MAX_DEVICES];
    cuc_listener *l = NULL;
    cuc_channel *ch = NULL;
    cuc_msg *m = NULL, *answer = NULL;
    cuc_event *ev = NULL;
    pid_t peer = 0;
    int n, rc, bad = 1;

    if (argc != 2) {
        fprintf(stderr, "usage: socket_producer SOCKET_PATH\n");
        return 2;
    }
    rc = cuc_device_count(&n);
    if (rc)
        return fail("devices (no GPU? try CUCORE_DRIVER=sim)", rc);
    if (n > MAX_DEVICES)
        n = MAX_DEVICES;
    for (int i = 0; i < n; i++)
        if ((rc = cuc_device_get(i, &devs[i])) != 0)
            return fail("device", rc);
    if (make_event(devs[0], &ev))
        return 1;
    if (build_message(devs, n, ev, &m))
        goto destroy_event;

    /* Listen first, then accept: the consumer may start before or after
     * us (cuc_channel_connect retries until something listens). */
    rc = cuc_channel_listen(argv[1], &l);
    if (rc) {
        fail("listen", rc);
        goto destroy_msg;
    }
    printf("socket_producer: listening at %s, %d device%s\n", argv[1], n, n == 1 ? "" : "s");
    fflush(stdout);
    rc = cuc_listener_accept(l, TIMEOUT_MS, &ch);
    if (rc) {
        fail("accept", rc);
        goto close_listener;
    }
    cuc_channel_peer_pid(ch, &peer);
    printf("socket_producer: consumer pid %d connected\n", (int)peer);
    fflush(stdout);
    rc = cuc_channel_send(ch, m);
    if (rc) {
        fail("send", rc);
        goto close_channel;
    }
    /* Wait for the answer before destroying the event: an IPC event means
     * something only while the event it was opened from exists. */
    rc = cuc_channel_recv(ch, TIMEOUT_MS, &answer);
    if (rc) {
        fail("receiving the answer", rc);
        goto close_channel;
    }
    bad = check_answer(answer, devs, n);
    cuc_msg_destroy(answer);
close_channel:
    cuc_channel_close(ch);
close_listener:
    cuc_listener_close(l); /* also removes the socket file */
destroy_msg:
    cuc_msg_destroy(m);
destroy_event:
    cuc_event_destroy(ev);
    printf("socket_producer %s\n", bad ? "FAILED" : "OK");
    return bad ? 1 : 0;
}
