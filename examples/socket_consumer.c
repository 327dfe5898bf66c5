/* socket_consumer: receive CUDA objects from an unrelated process at a
 * filesystem path (its partner is socket_producer.c, which has the whole
 * story).
 *
 * Run it with any CUDA_VISIBLE_DEVICES: a device record names a GPU by
 * UUID, so it resolves to the same physical GPU whatever its ordinal here;
 * a GPU this process cannot see is refused with CUC_E_NOT_VISIBLE, and the
 * message says which UUID and which devices are visible instead.
 *
 *     CUDA_VISIBLE_DEVICES=1,0 ./socket_consumer /tmp/demo.sock
 *
 * Exit status 0 when every record was handled, 1 otherwise. A device we
 * cannot see is reported, not fatal; the event is, when it lives on a GPU
 * we cannot see: there is nothing to wait on then.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cucore.h>

#define TIMEOUT_MS 30000

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

/* An IPC event: opened on our device with its UUID; a stream of ours waits
 * for it, so work queued on that stream afterwards runs only once the
 * producer's work before the event is done. */
static int take_event(const cuc_msg *m, size_t i)
{
    cuc_event *ev;
    cuc_stream *s;
    int rc = cuc_msg_get_event(m, i, &ev);

    if (rc)
        return fail("event record", rc);
    rc = cuc_stream_create(cuc_event_device(ev), CUC_STREAM_NON_BLOCKING, 0, &s);
    if (rc == 0) {
        rc = cuc_stream_wait_event(s, ev);
        /* ... queue work that depends on the producer's here ... */
        if (rc == 0)
            rc = cuc_stream_synchronize(s);
        cuc_stream_destroy(s);
    }
    if (rc == 0)
        printf("  record %zu: IPC event on our ordinal %d (%s): waited for it\n", i,
               cuc_device_ordinal(cuc_event_device(ev)),
               cuc_device_uuid_string(cuc_event_device(ev)));
    cuc_event_destroy(ev);
    return rc ? fail("waiting for the event", rc) : 0;
}

static int handle(const cuc_msg *m, cuc_msg *answer)
{
    int bad = 0;

    for (size_t i = 0; i < cuc_msg_count(m); i++) {
        int type = 0;
        cuc_msg_record_type(m, i, &type);
        switch (type) {
        case CUC_RECORD_DEVICE:
            bad += take_device(m, i, answer);
            break;
        case CUC_RECORD_EVENT:
            bad += take_event(m, i);
            break;

        /* ---- POOL BUFFERS GO HERE (issue #6) ----
         * Once cucore's memory pools land (cucore/pool.h, cucore/memory.h),
         * the producer sends an IPC pool and buffers of it; this is where the
         * consumer imports the pool (CUC_RECORD_POOL) and maps the buffers
         * (CUC_RECORD_BUFFER). Not written yet: the pool API is still being
         * built. */

        default:
            printf("  record %zu: type %d, not handled by this example\n", i, type);
            bad++;
        }
    }
    return bad;
}

int main(int argc, char **argv)
{
    cuc_channel *ch;
    cuc_msg *m, *answer;
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    int rc, bad;

    if (argc != 2) {
        fprintf(stderr, "usage: socket_consumer SOCKET_PATH\n");
        return 2;
    }
    printf("socket_consumer: CUDA_VISIBLE_DEVICES=%s\n", cvd ? cvd : "(unset)");
    /* Retries while nothing listens at the path yet. */
    rc = cuc_channel_connect(argv[1], TIMEOUT_MS, &ch);
    if (rc)
        return fail("connect", rc);
    rc = cuc_channel_recv(ch, TIMEOUT_MS, &m);
    if (rc) {
        cuc_channel_close(ch);
        return fail("receive", rc);
    }
    rc = cuc_msg_create(&answer);
    if (rc) {
        cuc_msg_destroy(m);
        cuc_channel_close(ch);
        return fail("answer", rc);
    }
    printf("socket_consumer: %zu records\n", cuc_msg_count(m));
    bad = handle(m, answer);
    rc = cuc_channel_send(ch, answer);
    if (rc)
        bad += fail("sending the answer", rc);
    cuc_msg_destroy(answer);
    cuc_msg_destroy(m);
    cuc_channel_close(ch);
    printf("socket_consumer %s\n", bad ? "FAILED" : "OK");
    return bad ? 1 : 0;
}
