/* Events: flags, record / synchronize / query, elapsed time, the IPC +
 * timing refusal, device checks, and reference counting through the IPC
 * registry (in-process; test_event_wire covers other processes). */
#include <time.h>

#include "cucore.h"
#include "check.h"
#include "devices_test.h"
#include "driver_warm.h"
#include "device/device.h"


static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

    while (nanosleep(&ts, &ts) != 0)
        ;
}

static void test_basic(void)
{
    cuc_stream *s;
    cuc_event *ev;
    int done = -1;

    CHECK_OK(cuc_stream_create(devs[0], 0, 0, &s));
    CHECK_OK(cuc_event_create(devs[0], 0, &ev));
    CHECK(cuc_event_device(ev) == devs[0]);
    CHECK(cuc_event_flags(ev) == 0);
    CHECK(cuc_event_is_imported(ev) == 0);
    CHECK(cuc_event_handle(ev) != NULL);
    CHECK_OK(cuc_event_query(ev, &done)); /* never recorded: complete */
    CHECK(done == 1);
    CHECK_OK(cuc_event_record(ev, s));
    CHECK_OK(cuc_event_synchronize(ev));
    done = -1;
    CHECK_OK(cuc_event_query(ev, &done));
    CHECK(done == 1);
    /* The handle is the driver's. */
    CHECK(CUC_DRV->cuEventQuery((CUevent)cuc_event_handle(ev)) == CUDA_SUCCESS);
    cuc_event_unref(ev);

    CHECK_OK(cuc_event_create(devs[0], CUC_EVENT_BLOCKING_SYNC | CUC_EVENT_IPC, &ev));
    CHECK(cuc_event_flags(ev) == (CUC_EVENT_BLOCKING_SYNC | CUC_EVENT_IPC));
    CHECK_OK(cuc_event_record(ev, s));
    CHECK_OK(cuc_event_synchronize(ev));
    cuc_event_unref(ev);
    cuc_event_unref(NULL);
    cuc_stream_destroy(s);
}

static void test_timing(void)
{
    cuc_event *a, *b, *plain;
    cuc_stream *s;
    float ms = -1;

    CHECK_OK(cuc_stream_legacy(devs[0], &s));
    CHECK_OK(cuc_event_create(devs[0], CUC_EVENT_TIMING, &a));
    CHECK_OK(cuc_event_create(devs[0], CUC_EVENT_TIMING, &b));
    CHECK_OK(cuc_event_create(devs[0], 0, &plain));
    CHECK(cuc_event_elapsed_ms(a, b, &ms) != 0); /* neither recorded yet */
    CHECK(ms == -1);
    CHECK_OK(cuc_event_record(a, s));
    CHECK_OK(cuc_event_synchronize(a));
    sleep_ms(30);
    CHECK_OK(cuc_event_record(b, s));
    CHECK_OK(cuc_event_synchronize(b));
    CHECK_OK(cuc_event_elapsed_ms(a, b, &ms));
    CHECK(ms >= 20.0f && ms < 10000.0f);
    CHECK_OK(cuc_event_record(plain, s));
    CHECK_OK(cuc_event_synchronize(plain));
    CHECK_RC(cuc_event_elapsed_ms(a, plain, &ms), CUC_E_INVALID);
    CHECK(strstr(cuc_errmsg(), "end event") != NULL);
    CHECK(strstr(cuc_errmsg(), "CUC_EVENT_TIMING") != NULL);
    CHECK_RC(cuc_event_elapsed_ms(plain, a, &ms), CUC_E_INVALID);
    CHECK(strstr(cuc_errmsg(), "start event") != NULL);
    CHECK_RC(cuc_event_elapsed_ms(a, b, NULL), CUC_E_INVALID);
    cuc_event_unref(plain);
    cuc_event_unref(b);
    cuc_event_unref(a);
}

static void test_errors(void)
{
    cuc_event *ev = (cuc_event *)0x1234;
    cuc_stream *s;
    int done;

    CHECK_RC(cuc_event_create(devs[0], CUC_EVENT_IPC | CUC_EVENT_TIMING, &ev), CUC_E_INVALID);
    CHECK(strstr(cuc_errmsg(), "CUC_EVENT_IPC") != NULL);
    CHECK(strstr(cuc_errmsg(), "CUC_EVENT_TIMING") != NULL);
    CHECK(strstr(cuc_errmsg(), "CU_EVENT_DISABLE_TIMING") != NULL);
    CHECK_RC(cuc_event_create(devs[0], 0x80, &ev), CUC_E_INVALID);
    CHECK_RC(cuc_event_create(NULL, 0, &ev), CUC_E_INVALID);
    CHECK_RC(cuc_event_create(devs[0], 0, NULL), CUC_E_INVALID);
    CHECK(ev == (cuc_event *)0x1234);
    CHECK_RC(cuc_event_synchronize(NULL), CUC_E_INVALID);
    CHECK_RC(cuc_event_query(NULL, &done), CUC_E_INVALID);
    CHECK_OK(cuc_stream_legacy(devs[0], &s));
    CHECK_RC(cuc_event_record(NULL, s), CUC_E_INVALID);
    if (n_dev > 1) {
        /* An event records only on a stream of its own device. */
        CHECK_OK(cuc_event_create(devs[1], 0, &ev));
        CHECK_RC(cuc_event_record(ev, s), CUC_E_INVALID);
        CHECK(strstr(cuc_errmsg(), cuc_device_uuid_string(devs[1])) != NULL);
        CHECK(strstr(cuc_errmsg(), cuc_device_uuid_string(devs[0])) != NULL);
        cuc_event_unref(ev);
    }
}

/* In the creating process, getting an IPC event back is another reference
 * to the same object: each reference is destroyed once. */
static void test_refs(void)
{
    cuc_event *ev, *again, *third;
    cuc_stream *s;
    cuc_msg *m;
    int done;

    CHECK_OK(cuc_stream_legacy(devs[0], &s));
    CHECK_OK(cuc_event_create(devs[0], CUC_EVENT_IPC, &ev));
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_event(m, ev));
    CHECK_OK(cuc_msg_add_event(m, ev)); /* the handle is cached: same bytes */
    CHECK_OK(cuc_msg_get_event(m, 0, &again));
    CHECK_OK(cuc_msg_get_event(m, 1, &third));
    CHECK(again == ev && third == ev);
    cuc_event_unref(ev);
    cuc_event_unref(again);
    /* One reference left: still usable. */
    CHECK_OK(cuc_event_record(third, s));
    /* A record is asynchronous on a GPU: only a synchronize makes it done. */
    CHECK_OK(cuc_event_synchronize(third));
    CHECK_OK(cuc_event_query(third, &done));
    CHECK(done == 1);
    cuc_event_unref(third);
    cuc_msg_destroy(m);
}

int main(void)
{
    open_all();
    test_warm_driver_fds();
    FD_BASELINE();
    test_basic();
    test_timing();
    test_errors();
    test_refs();
    FD_CHECK_NO_LEAK();
    return test_finish();
}
