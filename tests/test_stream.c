/* Streams: created streams (flags, priority, sync, query, wait), the
 * default-stream singletons, the default-stream mode (explicit and from
 * CUCORE_DEFAULT_STREAM in an exec'd child), that every operation makes
 * the stream's device current, and another library's streams wrapped
 * (cuc_stream_wrap): used, not sent, destroyed without the driver's. */
#include <pthread.h>

#include "cucore.h"
#include "check.h"
#include "devices_test.h"
#include "device/device.h"
#include "sim_test.h"


static void test_created(void)
{
    cuc_device *cur;
    cuc_stream *s, *nb;
    unsigned flags = 99;
    int done = -1, prio = 99;

    CHECK_OK(cuc_stream_create(devs[0], 0, 0, &s));
    CHECK(cuc_stream_kind(s) == CUC_STREAM_CREATED);
    CHECK(cuc_stream_device(s) == devs[0]);
    CHECK(cuc_stream_handle(s) != NULL);
    CHECK(cuc_stream_handle(s) != (void *)CU_STREAM_LEGACY);
    CHECK_OK(cuc_stream_synchronize(s));
    CHECK_OK(cuc_stream_query(s, &done));
    CHECK(done == 1);
    /* The handle is the driver's: raw calls work on it. */
    CHECK(CUC_DRV->cuStreamQuery((CUstream)cuc_stream_handle(s)) == CUDA_SUCCESS);
    CHECK(CUC_DRV->cuStreamGetFlags((CUstream)cuc_stream_handle(s), &flags) == CUDA_SUCCESS);
    CHECK(flags == CU_STREAM_DEFAULT);

    CHECK_OK(cuc_stream_create(devs[n_dev - 1], CUC_STREAM_NON_BLOCKING, -1, &nb));
    CHECK(cuc_stream_device(nb) == devs[n_dev - 1]);
    /* Operations activate the stream's device first. */
    CHECK_OK(cuc_device_set_current(devs[0]));
    CHECK_OK(cuc_stream_synchronize(nb));
    CHECK_OK(cuc_device_current(&cur));
    CHECK(cur == devs[n_dev - 1]);
    CHECK(CUC_DRV->cuStreamGetFlags((CUstream)cuc_stream_handle(nb), &flags) == CUDA_SUCCESS);
    CHECK(flags == CU_STREAM_NON_BLOCKING);
    CHECK(CUC_DRV->cuStreamGetPriority((CUstream)cuc_stream_handle(nb), &prio) == CUDA_SUCCESS);
    CHECK(prio == -1);

    CHECK_OK(cuc_device_set_current(devs[0]));
    CHECK_OK(cuc_stream_query(nb, &done));
    CHECK(done == 1);
    CHECK_OK(cuc_device_current(&cur));
    CHECK(cur == devs[n_dev - 1]);
    cuc_stream_destroy(nb);
    cuc_stream_destroy(s);
    cuc_stream_destroy(NULL);
}

static void test_errors(void)
{
    cuc_stream *s = (cuc_stream *)0x1234;
    int done;

    CHECK_RC(cuc_stream_create(NULL, 0, 0, &s), CUC_E_INVALID);
    CHECK_RC(cuc_stream_create(devs[0], 0, 0, NULL), CUC_E_INVALID);
    CHECK_RC(cuc_stream_create(devs[0], 0x10, 0, &s), CUC_E_INVALID);
    CHECK(strstr(cuc_errmsg(), "0x10") != NULL);
    CHECK(s == (cuc_stream *)0x1234); /* outputs untouched on failure */
    CHECK_RC(cuc_stream_synchronize(NULL), CUC_E_INVALID);
    CHECK_RC(cuc_stream_query(NULL, &done), CUC_E_INVALID);
    CHECK_RC(cuc_stream_legacy(devs[0], &s), 0);
    CHECK_RC(cuc_stream_query(s, NULL), CUC_E_INVALID);
    CHECK_RC(cuc_stream_wait_event(s, NULL), CUC_E_INVALID);
    CHECK_RC(cuc_stream_legacy(NULL, &s), CUC_E_INVALID);
    CHECK_RC(cuc_stream_per_thread(devs[0], NULL), CUC_E_INVALID);
    CHECK_RC(cuc_stream_set_default_mode(0), CUC_E_INVALID);
    CHECK_RC(cuc_stream_set_default_mode(3), CUC_E_INVALID);
}

static void *thread_per_thread(void *arg)
{
    cuc_stream *s = NULL;

    (void)arg;
    if (cuc_stream_per_thread(devs[0], &s) != 0 || cuc_stream_synchronize(s) != 0)
        return NULL;
    return s;
}

static void test_singletons(void)
{
    cuc_stream *a, *b, *p, *q, *from_thread;
    pthread_t t;
    int i, done;

    for (i = 0; i < n_dev; i++) {
        CHECK_OK(cuc_stream_legacy(devs[i], &a));
        CHECK_OK(cuc_stream_legacy(devs[i], &b));
        CHECK(a == b);
        CHECK(cuc_stream_kind(a) == CUC_STREAM_LEGACY_DEFAULT);
        CHECK(cuc_stream_device(a) == devs[i]);
        CHECK(cuc_stream_handle(a) == (void *)CU_STREAM_LEGACY);
        CHECK_OK(cuc_stream_per_thread(devs[i], &p));
        CHECK_OK(cuc_stream_per_thread(devs[i], &q));
        CHECK(p == q && p != a);
        CHECK(cuc_stream_kind(p) == CUC_STREAM_PER_THREAD_DEFAULT);
        CHECK(cuc_stream_device(p) == devs[i]);
        CHECK(cuc_stream_handle(p) == (void *)CU_STREAM_PER_THREAD);
        CHECK_OK(cuc_stream_synchronize(a));
        CHECK_OK(cuc_stream_synchronize(p));
        CHECK_OK(cuc_stream_query(a, &done));
        CHECK(done == 1);
        /* Destroying a default stream is a no-op: it still works. */
        cuc_stream_destroy(a);
        cuc_stream_destroy(p);
        CHECK_OK(cuc_stream_synchronize(a));
        CHECK_OK(cuc_stream_query(p, &done));
    }
    if (n_dev > 1) {
        CHECK_OK(cuc_stream_legacy(devs[1], &b));
        CHECK_OK(cuc_stream_legacy(devs[0], &a));
        CHECK(a != b);
    }
    /* One per-thread object per device, whatever the thread. */
    CHECK(pthread_create(&t, NULL, thread_per_thread, NULL) == 0);
    CHECK(pthread_join(t, (void **)&from_thread) == 0);
    CHECK_OK(cuc_stream_per_thread(devs[0], &p));
    CHECK(from_thread == p);
}

static void test_mode(void)
{
    cuc_stream *s, *legacy, *pt;
    int mode = 0;

    CHECK_OK(cuc_stream_legacy(devs[0], &legacy));
    CHECK_OK(cuc_stream_per_thread(devs[0], &pt));
    CHECK_OK(cuc_stream_default_mode(&mode));
    CHECK(mode == CUC_STREAM_MODE_LEGACY); /* CUCORE_DEFAULT_STREAM unset */
    CHECK_OK(cuc_stream_default(devs[0], &s));
    CHECK(s == legacy);
    CHECK_OK(cuc_stream_set_default_mode(CUC_STREAM_MODE_PER_THREAD));
    CHECK_OK(cuc_stream_default_mode(&mode));
    CHECK(mode == CUC_STREAM_MODE_PER_THREAD);
    CHECK_OK(cuc_stream_default(devs[0], &s));
    CHECK(s == pt);
    CHECK_OK(cuc_stream_set_default_mode(CUC_STREAM_MODE_LEGACY));
    CHECK_OK(cuc_stream_default(devs[0], &s));
    CHECK(s == legacy);
}

/* Child: what cuc_stream_default gives under the inherited environment. */
static int child_mode(void)
{
    cuc_device *d;
    cuc_stream *s;
    int rc;

    CHECK_OK(cuc_device_get(0, &d));
    rc = cuc_stream_default(d, &s);
    if (rc) {
        printf("ERR %s %s\n", cuc_errname(rc), cuc_errmsg());
        return 0;
    }
    printf("KIND %d\n", cuc_stream_kind(s));
    /* An explicit setting overrides the environment. */
    CHECK_OK(cuc_stream_set_default_mode(CUC_STREAM_MODE_LEGACY));
    CHECK_OK(cuc_stream_default(d, &s));
    printf("SET %d\n", cuc_stream_kind(s));
    return 0;
}

static void test_mode_env(void)
{
    char out[1024];

    CHECK(spawn_self_capture("mode", NULL,
                             (const char *const[]){"CUCORE_DEFAULT_STREAM=per-thread", NULL},
                             out, sizeof(out)) == 0);
    CHECK(strstr(out, "KIND 2\n") != NULL);
    CHECK(strstr(out, "SET 1\n") != NULL);
    CHECK(spawn_self_capture("mode", NULL,
                             (const char *const[]){"CUCORE_DEFAULT_STREAM=legacy", NULL},
                             out, sizeof(out)) == 0);
    CHECK(strstr(out, "KIND 1\n") != NULL);
    CHECK(spawn_self_capture("mode", NULL,
                             (const char *const[]){"CUCORE_DEFAULT_STREAM=sideways", NULL},
                             out, sizeof(out)) == 0);
    CHECK(strstr(out, "ERR CUC_E_INVALID") != NULL);
    CHECK(strstr(out, "sideways") != NULL);
}

static void test_wait_event(void)
{
    cuc_stream *s, *other;
    cuc_event *ev;
    int done = 0;

    CHECK_OK(cuc_stream_create(devs[0], 0, 0, &s));
    CHECK_OK(cuc_event_create(devs[0], 0, &ev));
    CHECK_OK(cuc_event_record(ev, s));
    CHECK_OK(cuc_stream_wait_event(s, ev));
    /* A stream may wait on another device's event. */
    CHECK_OK(cuc_stream_create(devs[n_dev - 1], CUC_STREAM_NON_BLOCKING, 0, &other));
    CHECK_OK(cuc_stream_wait_event(other, ev));
    CHECK_OK(cuc_stream_synchronize(other));
    CHECK_OK(cuc_stream_query(other, &done));
    CHECK(done == 1);
    cuc_event_unref(ev);
    cuc_stream_destroy(other);
    cuc_stream_destroy(s);
}

/* cuc_stream_wrap of a live stream that the driver refuses (the sim's
 * fault injection): CUC_E_DRIVER naming the call, nothing written. */
static void wrap_refused(cuc_device *dev)
{
    cuc_stream *s = (cuc_stream *)0x1234;
    CUstream raw = NULL;

    CHECK(CUC_DRV->cuStreamCreateWithPriority(&raw, CU_STREAM_NON_BLOCKING, 0) == CUDA_SUCCESS);
    sim_fail("cuStreamGetFlags:1:CUDA_ERROR_INVALID_HANDLE");
    CHECK_RC(cuc_stream_wrap(dev, raw, &s), CUC_E_DRIVER);
    sim_fail(NULL);
    CHECK(strstr(cuc_errmsg(), "cuc_stream_wrap") && strstr(cuc_errmsg(), "cuStreamGetFlags"));
    CHECK(s == (cuc_stream *)0x1234);
    CHECK(CUC_DRV->cuStreamDestroy(raw) == CUDA_SUCCESS);
}

/* A stream made with the driver (a framework's), wrapped: work and waits
 * go on it, it is not sent, and destroying the wrap leaves the driver's
 * stream alive; the default handles give the singletons; a handle the
 * driver does not know is refused by name. */
static void test_wrap(void)
{
    cuc_stream *w, *legacy, *pt, *s = (cuc_stream *)0x1234;
    CUstream raw = NULL;
    cuc_event *ev;
    cuc_msg *m;
    int done = 0;

    CHECK_OK(cuc_device_set_current(devs[n_dev - 1]));
    CHECK(CUC_DRV->cuStreamCreateWithPriority(&raw, CU_STREAM_NON_BLOCKING, 0) == CUDA_SUCCESS);
    CHECK_OK(cuc_stream_wrap(devs[n_dev - 1], raw, &w));
    CHECK(cuc_stream_handle(w) == raw && cuc_stream_device(w) == devs[n_dev - 1]);
    CHECK(cuc_stream_kind(w) == CUC_STREAM_CREATED);
    CHECK_OK(cuc_event_create(devs[n_dev - 1], 0, &ev));
    CHECK_OK(cuc_event_record(ev, w));
    CHECK_OK(cuc_stream_wait_event(w, ev));
    CHECK_OK(cuc_stream_synchronize(w));
    CHECK_OK(cuc_stream_query(w, &done));
    CHECK(done == 1);
    CHECK_OK(cuc_msg_create(&m));
    CHECK_RC(cuc_msg_add_stream(m, w), CUC_E_NOT_SERIALIZABLE);
    cuc_msg_destroy(m);
    cuc_event_unref(ev);
    cuc_stream_destroy(w);
    CHECK(CUC_DRV->cuStreamQuery(raw) == CUDA_SUCCESS); /* still the maker's */
    CHECK(CUC_DRV->cuStreamDestroy(raw) == CUDA_SUCCESS);

    CHECK_OK(cuc_stream_legacy(devs[0], &legacy));
    CHECK_OK(cuc_stream_per_thread(devs[0], &pt));
    CHECK_OK(cuc_stream_wrap(devs[0], NULL, &w));
    CHECK(w == legacy);
    CHECK_OK(cuc_stream_wrap(devs[0], (void *)CU_STREAM_LEGACY, &w));
    CHECK(w == legacy);
    CHECK_OK(cuc_stream_wrap(devs[0], (void *)CU_STREAM_PER_THREAD, &w));
    CHECK(w == pt);
    cuc_stream_destroy(w); /* a singleton: no-op */

    if (test_on_sim()) /* a refusal, made by the sim (a garbage handle: F45) */
        wrap_refused(devs[0]);
    CHECK_RC(cuc_stream_wrap(NULL, raw, &s), CUC_E_INVALID);
    CHECK_RC(cuc_stream_wrap(devs[0], raw, NULL), CUC_E_INVALID);
}

int main(int argc, char **argv)
{
    if (argc >= 3 && !strcmp(argv[1], "--child")) {
        if (!strcmp(argv[2], "mode"))
            return child_mode();
        return 2;
    }
    unsetenv("CUCORE_DEFAULT_STREAM");
    open_all();
    FD_BASELINE();
    test_created();
    test_errors();
    test_singletons();
    test_mode();
    test_mode_env();
    test_wait_event();
    test_wrap();
    FD_CHECK_NO_LEAK();
    return test_finish();
}
