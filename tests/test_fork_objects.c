/* The fork rule for events, streams and kernels (DESIGN.md, "Fork"): in a
 * plain fork()'s child (no exec, so no CUDA) unref'ing an inherited event
 * (created, and one with an IPC handle), destroying an inherited created
 * stream and destroying the last kernel of an inherited library make no
 * driver call (on the simulator: its call counter does not move); the
 * parent's objects still work afterwards and go with their own calls. */
#include <dlfcn.h>
#include <sys/wait.h>

#include "check.h"
#include "cucore.h"
#include "devices_test.h"
#include "ptx_kernels.h"

typedef int (*calls_fn)(const char *name, unsigned long long *out);

static calls_fn sim_calls(void)
{
    void *h = dlopen(CUC_SIM_PATH, RTLD_NOW | RTLD_NOLOAD);

    return h ? (calls_fn)(uintptr_t)dlsym(h, "cucore_sim_calls") : NULL;
}

static unsigned long long calls_now(calls_fn calls, const char *name)
{
    unsigned long long n = 0;

    CHECK(calls(name, &n) == 0);
    return n;
}

static void child(cuc_event *ev, cuc_event *ipc, cuc_stream *s, cuc_kernel *k)
{
    calls_fn calls = sim_calls();
    unsigned long long before = 0;

    if (test_on_sim()) {
        CHECK(calls != NULL);
        before = calls_now(calls, "*");
    }
    cuc_event_unref(ev);
    cuc_event_unref(ipc);
    cuc_stream_destroy(s);
    cuc_kernel_destroy(k);
    if (calls)
        CHECK(calls_now(calls, "*") == before); /* no driver call */
    _exit(test_finish());
}

static void test_fork(void)
{
    calls_fn calls = sim_calls();
    unsigned long long destroys = 0;
    cuc_event *ev, *ipc;
    cuc_stream *s;
    cuc_kernel *k;
    pid_t pid;

    CHECK_OK(cuc_event_create(devs[0], 0, &ev));
    CHECK_OK(cuc_event_create(devs[0], CUC_EVENT_IPC, &ipc));
    CHECK_OK(cuc_stream_create(devs[0], 0, 0, &s));
    CHECK_OK(cuc_kernel_load(CUC_IMAGE_PTX, ptx_twice, strlen(ptx_twice), "twice", &k));
    fflush(NULL);
    pid = fork();
    CHECK(pid >= 0);
    if (pid == 0)
        child(ev, ipc, s, k);
    CHECK(wait_child(pid) == 0);
    /* the parent's objects are whole */
    CHECK_OK(cuc_event_record(ev, s));
    CHECK_OK(cuc_event_record(ipc, s));
    CHECK_OK(cuc_stream_synchronize(s));
    CHECK_OK(cuc_event_synchronize(ev));
    if (calls)
        destroys = calls_now(calls, "cuEventDestroy");
    cuc_event_unref(ev);
    cuc_event_unref(ipc);
    if (calls)
        CHECK(calls_now(calls, "cuEventDestroy") == destroys + 2); /* here they go */
    cuc_stream_destroy(s);
    cuc_kernel_destroy(k);
}

/* What the driver sets up for the first event, stream and kernel (and
 * keeps) is there before the fds are counted. */
static void warm_up(void)
{
    cuc_event *ev;
    cuc_stream *s;
    cuc_kernel *k;

    CHECK_OK(cuc_event_create(devs[0], CUC_EVENT_IPC, &ev));
    CHECK_OK(cuc_stream_create(devs[0], 0, 0, &s));
    CHECK_OK(cuc_kernel_load(CUC_IMAGE_PTX, ptx_twice, strlen(ptx_twice), "twice", &k));
    CHECK_OK(cuc_event_record(ev, s));
    CHECK_OK(cuc_stream_synchronize(s));
    cuc_event_unref(ev);
    cuc_stream_destroy(s);
    cuc_kernel_destroy(k);
}

int main(void)
{
    open_all();
    warm_up();
    FD_BASELINE();
    test_fork();
    FD_CHECK_NO_LEAK();
    return test_finish();
}
