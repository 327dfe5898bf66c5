/* Events on the wire: a non-IPC event is refused; an IPC event travels as
 * its handle + device UUID; in the creating process it comes back as the
 * same object; an exec'd child (GPUs permuted by CUDA_VISIBLE_DEVICES)
 * opens it on the device with that UUID and synchronizes on it; a child
 * that cannot see the GPU gets CUC_E_NOT_VISIBLE. (test_event_wire_gpu:
 * the child really waits for a running kernel.) */
#include "cucore.h"
#include "check.h"
#include "devices_test.h"
#include "driver_warm.h"
#include "device/device.h"
#include "msg_hex.h"
#include "wire/records.h"


static void test_refused(void)
{
    cuc_event *ev;
    cuc_msg *m;

    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_event_create(devs[0], CUC_EVENT_TIMING, &ev));
    CHECK_RC(cuc_msg_add_event(m, ev), CUC_E_NOT_SERIALIZABLE);
    CHECK(strstr(cuc_errmsg(), "CUC_EVENT_IPC") != NULL);
    cuc_event_unref(ev);
    CHECK_OK(cuc_event_create(devs[0], 0, &ev));
    CHECK_RC(cuc_msg_add_event(m, ev), CUC_E_NOT_SERIALIZABLE);
    CHECK(cuc_msg_record_count(m) == 0);
    cuc_event_unref(ev);
    cuc_msg_destroy(m);
}

static void test_layout(void)
{
    CUipcEventHandle h;
    cuc_event *ev;
    uint8_t *p;
    void *bytes;
    cuc_msg *m;
    size_t len;

    CHECK_OK(cuc_event_create(devs[n_dev - 1], CUC_EVENT_IPC | CUC_EVENT_BLOCKING_SYNC, &ev));
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_event(m, ev));
    CHECK_OK(cuc_msg_to_bytes(m, &bytes, &len));
    CHECK(len == CUC__WIRE_HDR + CUC__WIRE_REC_HDR + 88);
    p = (uint8_t *)bytes + CUC__WIRE_HDR;
    CHECK(cuc__get16(p) == CUC_RECORD_EVENT && cuc__get32(p + 4) == 88);
    p += CUC__WIRE_REC_HDR;
    CHECK(cuc__get32(p) == (CUC_EVENT_IPC | CUC_EVENT_BLOCKING_SYNC));
    CHECK(cuc__get32(p + 4) == 0);
    CHECK(memcmp(p + 8, cuc_device_uuid(devs[n_dev - 1])->bytes, 16) == 0);
    CHECK(CUC_DRV->cuIpcGetEventHandle(&h, (CUevent)cuc_event_handle(ev)) == CUDA_SUCCESS);
    CHECK(memcmp(p + 24, h.reserved, 64) == 0);
    free(bytes);
    cuc_msg_destroy(m);
    cuc_event_unref(ev);
}

/* Child: opens the event of the message in argv[0], synchronizes, and
 * prints "OK <uuid> <ordinal> <opened> <same>" or "ERR <code> <text>". */
static int child_open(int argc, char **argv)
{
    cuc_event *ev, *again;
    cuc_stream *s;
    cuc_msg *m;
    int rc, done = -1;

    CHECK(argc == 1);
    CHECK_OK(msg_from_hex(argv[0], &m));
    rc = cuc_msg_get_event(m, 0, &ev);
    if (rc) {
        printf("ERR %s %s\n", cuc_errname(rc), cuc_errmsg());
        cuc_msg_destroy(m);
        return 0;
    }
    CHECK_OK(cuc_event_synchronize(ev));
    CHECK_OK(cuc_event_query(ev, &done));
    CHECK(done == 1);
    CHECK(cuc_event_flags(ev) == CUC_EVENT_IPC);
    /* A local stream can wait on it; and, as the driver documents an opened
     * event to behave like a local one without timing, record it. */
    CHECK_OK(cuc_stream_create(cuc_event_device(ev), CUC_STREAM_NON_BLOCKING, 0, &s));
    CHECK_OK(cuc_stream_wait_event(s, ev));
    CHECK_OK(cuc_stream_synchronize(s));
    CHECK_OK(cuc_event_record(ev, s));
    CHECK_OK(cuc_event_synchronize(ev));
    cuc_stream_destroy(s);
    /* No timing on an opened event. */
    {
        float ms;
        CHECK_RC(cuc_event_elapsed_ms(ev, ev, &ms), CUC_E_INVALID);
        CHECK(strstr(cuc_errmsg(), "opened IPC event") != NULL);
    }
    /* Opened once: a second get is the same object. */
    CHECK_OK(cuc_msg_get_event(m, 0, &again));
    printf("OK %s %d %d %d\n", cuc_device_uuid_string(cuc_event_device(ev)),
           cuc_device_ordinal(cuc_event_device(ev)), cuc_event_is_imported(ev), again == ev);
    cuc_event_unref(again);
    cuc_event_unref(ev);
    cuc_msg_destroy(m);
    return 0;
}

static void check_child(int dev, const char *cvd)
{
    const char *uuid = cuc_device_uuid_string(devs[dev]);
    int pos = cvd_position(cvd, dev);
    char want[256];
    cuc_event *ev;
    cuc_stream *s;
    cuc_msg *m;

    CHECK_OK(cuc_event_create(devs[dev], CUC_EVENT_IPC, &ev));
    CHECK_OK(cuc_stream_legacy(devs[dev], &s));
    CHECK_OK(cuc_event_record(ev, s));
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_event(m, ev));
    snprintf(want, sizeof(want), "OK %s %d 1 1\n", uuid, pos);
    /* The event stays alive here until the child is done with it. */
    child_expect("open", m, cvd, uuid, pos >= 0 ? want : NULL);
    cuc_msg_destroy(m);
    cuc_event_unref(ev);
}

static void check_one(int dev, const char *cvd, void *arg)
{
    (void)arg;
    check_child(dev, cvd);
}

static void test_children(void)
{
    for_each_visibility(n_dev, check_one, NULL);
}

int main(int argc, char **argv)
{
    if (argc >= 3 && !strcmp(argv[1], "--child")) {
        if (!strcmp(argv[2], "open"))
            return child_open(argc - 3, argv + 3);
        return 2;
    }
    unsetenv("CUDA_VISIBLE_DEVICES");
    open_all();
    test_warm_driver_fds();
    FD_BASELINE();
    test_refused();
    test_layout();
    test_children();
    FD_CHECK_NO_LEAK();
    return test_finish();
}
