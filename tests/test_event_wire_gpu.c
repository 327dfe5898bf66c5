/* GPU only (SKIPs on the simulator, whose events complete at record): the
 * parent launches a kernel that spins for SPIN_NS on %globaltimer, records
 * an IPC event after it and sends the event to an exec'd child. The child
 * opens it: cuEventQuery says not ready while the kernel runs, and
 * cuc_event_synchronize returns only after the kernel's end. */
#include <time.h>

#include "cucore.h"
#include "check.h"
#include "driver_warm.h"
#include "device/device.h"
#include "msg_hex.h"

#define SPIN_NS 3000000000ull

static const char spin_ptx[] =
    ".version 7.0\n"
    ".target sm_70\n"
    ".address_size 64\n"
    ".visible .entry spin(.param .u64 ns)\n"
    "{\n"
    "  .reg .u64 %t0, %t, %d, %lim;\n"
    "  .reg .pred %p;\n"
    "  ld.param.u64 %d, [ns];\n"
    "  mov.u64 %t0, %globaltimer;\n"
    "  add.u64 %lim, %t0, %d;\n"
    "LOOP:\n"
    "  mov.u64 %t, %globaltimer;\n"
    "  setp.lt.u64 %p, %t, %lim;\n"
    "  @%p bra LOOP;\n"
    "  ret;\n"
    "}\n";

static long long now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Child: open, query, synchronize; prints "Q <done> T <ns> Q <done>". */
static int child_wait(int argc, char **argv)
{
    cuc_event *ev;
    cuc_msg *m;
    int before = -1, after = -1;
    long long t;

    CHECK(argc == 1);
    CHECK_OK(msg_from_hex(argv[0], &m));
    CHECK_OK(cuc_msg_get_event(m, 0, &ev));
    CHECK(cuc_event_is_imported(ev));
    CHECK_OK(cuc_event_query(ev, &before));
    CHECK_OK(cuc_event_synchronize(ev));
    t = now_ns();
    CHECK_OK(cuc_event_query(ev, &after));
    printf("Q %d T %lld Q %d\n", before, t, after);
    cuc_event_unref(ev);
    cuc_msg_destroy(m);
    return 0;
}

int main(int argc, char **argv)
{
    unsigned long long spin = SPIN_NS;
    void *args[1] = {&spin};
    cuc_launch_config cfg;
    const char *cargs[2];
    long long t0, t_child, t_end;
    int before, after, done, n;
    char out[1024], *hex;
    cuc_kernel *k;
    cuc_device *d;
    cuc_stream *s;
    cuc_event *ev;
    cuc_msg *m;

    if (argc >= 3 && !strcmp(argv[1], "--child"))
        return !strcmp(argv[2], "wait") ? child_wait(argc - 3, argv + 3) : 2;
    if (test_on_sim())
        SKIP("the simulator runs no kernels: an IPC event is complete at record");
    CHECK_OK(cuc_device_get(0, &d));
    CHECK_OK(cuc_device_set_current(d));
    test_warm_driver_fds();
    FD_BASELINE();
    CHECK_OK(cuc_kernel_load(CUC_IMAGE_PTX, spin_ptx, sizeof(spin_ptx), "spin", &k));
    CHECK_OK(cuc_stream_create(d, CUC_STREAM_NON_BLOCKING, 0, &s));
    CHECK_OK(cuc_event_create(d, CUC_EVENT_IPC, &ev));
    cuc_launch_config_init(&cfg);
    t0 = now_ns();
    CHECK_OK(cuc_launch(s, &cfg, k, args));
    CHECK_OK(cuc_event_record(ev, s));
    CHECK_OK(cuc_event_query(ev, &done));
    CHECK(done == 0); /* the kernel holds the stream */
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_event(m, ev));
    hex = msg_to_hex(m);
    cargs[0] = hex;
    cargs[1] = NULL;
    CHECK(spawn_self_capture("wait", cargs, NULL, out, sizeof(out)) == 0);
    n = sscanf(out, "Q %d T %lld Q %d", &before, &t_child, &after);
    if (n != 3) {
        fprintf(stderr, "child said \"%s\"\n", out);
        exit(1);
    }
    CHECK_OK(cuc_stream_synchronize(s));
    t_end = now_ns();
    fprintf(stderr, "child: not ready before (%d), synchronize returned %.3f s after "
            "the launch; the parent's stream ended %.3f s after it\n", before,
            (double)(t_child - t0) / 1e9, (double)(t_end - t0) / 1e9);
    CHECK(before == 0);
    CHECK(after == 1);
    /* The child's wait ended after the kernel's spin, not before. */
    CHECK(t_child - t0 >= (long long)(SPIN_NS * 9 / 10));
    CHECK(t_child <= t_end + 50000000LL);
    free(hex);
    cuc_msg_destroy(m);
    cuc_event_unref(ev);
    cuc_stream_destroy(s);
    cuc_kernel_destroy(k);
    FD_CHECK_NO_LEAK();
    return test_finish();
}
