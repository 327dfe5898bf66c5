/* Teardowns leave the calling thread's current context as they found it
 * (src/device/device.h, "How a call makes its object's device current"):
 * the last unref of a buffer, a view, a slab range, an event, a stream, a
 * pool or a VMM resource runs whenever the last reference goes (Python's
 * collector, another thread's release), so it must not move the thread to
 * the object's device. Operations still leave their device current, as
 * cucore/stream.h promises.
 *
 * Each teardown runs on a thread with no context current (one GPU is
 * enough: the real driver runs this) and, with two GPUs or more, with
 * another device's primary context current; imported buffers, a view and
 * a pool are dropped so in an exec'd child that sees the GPUs reversed. */
#include <pthread.h>
#include <signal.h>
#include <string.h>

#include "cucore.h"
#include "check.h"
#include "channel_test.h"
#include "devices_test.h"
#include "pool_test.h"
#include "device/device.h"

#define NBUF 4

static CUcontext current(void)
{
    CUcontext c = (CUcontext)0x1;

    CHECK(CUC_DRV->cuCtxGetCurrent(&c) == CUDA_SUCCESS);
    return c;
}

static CUcontext primary(cuc_device *d)
{
    CUcontext c;

    CHECK_OK(cuc_device_set_current(d));
    c = current();
    CHECK(c != NULL);
    return c;
}

/* The objects one teardown case drops, all of device 0. */
struct objs {
    cuc_pool *pool;
    cuc_buffer *buf, *many[3], *view, *ranged;
    cuc_slab *slab;
    cuc_event *ev;
    cuc_stream *st;
    cuc_vmm *vmm;
};

/* Made by operations, each of which leaves device 0 current. */
static void make(struct objs *o)
{
    struct cuc_pool_props props;
    cuc_device *cur;
    size_t gran;

    cuc_pool_props_init(&props);
    props.flags = CUC_POOL_IPC; /* a slab carves an IPC pool */
    CHECK_OK(cuc_pool_create(devs[0], &props, &o->pool));
    CHECK_OK(cuc_buffer_alloc_async(o->pool, 4096, NULL, &o->buf));
    for (int i = 0; i < 3; i++)
        CHECK_OK(cuc_buffer_alloc_async(o->pool, 4096, NULL, &o->many[i]));
    CHECK_OK(cuc_buffer_view(o->buf, 256, 256, &o->view));
    CHECK_OK(cuc_slab_create(o->pool, 1 << 16, &o->slab));
    CHECK_OK(cuc_slab_alloc_async(o->slab, 512, NULL, &o->ranged));
    CHECK_OK(cuc_event_create(devs[0], 0, &o->ev));
    CHECK_OK(cuc_stream_create(devs[0], 0, 0, &o->st));
    CHECK_OK(cuc_memset(cuc_buffer_ptr(o->buf), 7, 4096, o->st));
    CHECK_OK(cuc_vmm_granularity(devs[0], &gran));
    CHECK_OK(cuc_vmm_create(devs[0], NULL, 0, &gran, 1, &o->vmm));
    CHECK_OK(cuc_device_current(&cur));
    CHECK(cur == devs[0]);
}

/* call, made with `was` current, must leave it current. */
#define DROPPED(call)                                                          \
    do {                                                                       \
        CHECK(CUC_DRV->cuCtxSetCurrent(was) == CUDA_SUCCESS);                  \
        call;                                                                  \
        if (current() != was) {                                                \
            fprintf(stderr, "%s: %s moved the thread to another context\n",   \
                    what, #call);                                              \
            CHECK(current() == was);                                           \
        }                                                                      \
    } while (0)

/* Drops every object with `was` current, checking after each drop. */
static void drop(struct objs *o, CUcontext was, const char *what)
{
    DROPPED(CHECK_OK(cuc_buffer_unref_async(o->view, o->st)));
    DROPPED(CHECK_OK(cuc_buffer_unref_async(o->buf, o->st)));
    DROPPED(CHECK_OK(cuc_buffer_unref_many_async(o->many, 3, NULL)));
    DROPPED(CHECK_OK(cuc_buffer_unref_async(o->ranged, NULL)));
    DROPPED(cuc_slab_unref(o->slab));
    DROPPED(cuc_event_unref(o->ev));
    DROPPED(cuc_stream_destroy(o->st));
    DROPPED(cuc_vmm_unref(o->vmm));
    DROPPED(cuc_pool_unref(o->pool));
}

static void *with_nothing_current(void *arg)
{
    struct objs o;

    (void)arg;
    CHECK(current() == NULL); /* a new thread has none */
    make(&o);
    drop(&o, NULL, "no context current");
    return NULL;
}

static void test_nothing_current(void)
{
    pthread_t t;

    CHECK(pthread_create(&t, NULL, with_nothing_current, NULL) == 0);
    CHECK(pthread_join(t, NULL) == 0);
}

static void test_other_device_current(void)
{
    struct objs o;
    CUcontext other;

    if (n_dev < 2) {
        printf("other device current: skipped, one GPU\n");
        return;
    }
    other = primary(devs[1]);
    make(&o);
    drop(&o, other, "another device current");
}

/* Operations still leave their device current (cucore/stream.h), and a
 * teardown on that device keeps it so. */
static void test_operations_keep(void)
{
    cuc_device *cur;
    cuc_stream *st;

    CHECK(CUC_DRV->cuCtxSetCurrent(NULL) == CUDA_SUCCESS);
    CHECK_OK(cuc_stream_create(devs[0], 0, 0, &st));
    CHECK(current() == primary(devs[0]));
    CHECK(CUC_DRV->cuCtxSetCurrent(NULL) == CUDA_SUCCESS);
    CHECK_OK(cuc_stream_synchronize(st));
    CHECK_OK(cuc_device_current(&cur));
    CHECK(cur == devs[0]);
    cuc_stream_destroy(st);
    CHECK_OK(cuc_device_current(&cur));
    CHECK(cur == devs[0]);
}

/* The importer: NBUF buffers and a view of the last, then the pool, each
 * dropped with nothing current or (with two GPUs) another device's
 * context current, alternately; the batch path (cuc_buffer_unref_many_async)
 * frees imported memory, the single one a view's root. */
static int child_importer(const char *uuid)
{
    cuc_channel *ch = ct_child_channel();
    cuc_buffer *b[NBUF], *view;
    cuc_device *owner;
    cuc_pool *pool;
    CUcontext other = NULL, was;
    const char *what;
    cuc_msg *m = ct_recv(ch);
    cuc_uuid u;

    CHECK_OK(cuc_uuid_parse(uuid, &u));
    CHECK_OK(cuc_device_get_by_uuid(&u, &owner));
    for (int i = 0; i < n_dev && !other; i++)
        if (devs[i] != owner)
            other = primary(devs[i]);
    CHECK_OK(cuc_msg_get_pool(m, 0, &pool));
    CHECK_OK(cuc_msg_get_buffers(m, 1, NBUF, b));
    CHECK_OK(cuc_msg_get_buffer(m, NBUF + 1, &view));
    CHECK(cuc_buffer_device(b[0]) == owner && cuc_buffer_is_imported(b[0]));
    cuc_msg_destroy(m);

    was = NULL, what = "importer, no context current";
    DROPPED(CHECK_OK(cuc_buffer_unref_many_async(b, 2, NULL)));
    DROPPED(CHECK_OK(cuc_buffer_unref_async(view, NULL)));
    if (other)
        was = other, what = "importer, another device current";
    DROPPED(CHECK_OK(cuc_buffer_unref_many_async(b + 2, NBUF - 2, NULL)));
    DROPPED(cuc_pool_unref(pool));
    ct_send_empty(ch);
    CHECK_RC(cuc_channel_recv(ch, CT_RECV_MS, &m), CUC_E_PEER_CLOSED);
    cuc_channel_destroy(ch);
    return 0;
}

static void test_imported(void)
{
    struct cuc_pool_props props;
    char env[512], uuid[CUC_UUID_STRLEN];
    const char *args[2] = {uuid, NULL};
    cuc_buffer *b[NBUF], *view;
    cuc_channel *ch;
    cuc_pool *pool;
    cuc_msg *m;
    pid_t pid;

    cuc_pool_props_init(&props);
    props.flags = CUC_POOL_IPC;
    CHECK_OK(cuc_pool_create(devs[0], &props, &pool));
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_pool(m, pool));
    for (int i = 0; i < NBUF; i++) {
        CHECK_OK(cuc_buffer_alloc_async(pool, 4096, NULL, &b[i]));
        CHECK_OK(cuc_msg_add_buffer(m, b[i]));
    }
    CHECK_OK(cuc_buffer_view(b[NBUF - 1], 1024, 1024, &view));
    CHECK_OK(cuc_msg_add_buffer(m, view));
    snprintf(uuid, sizeof(uuid), "%s", cuc_device_uuid_string(devs[0]));
    pt_child_cvd(env, sizeof(env));
    ch = ct_start("importer", args, env, &pid);
    CHECK_OK(cuc_channel_send(ch, m));
    cuc_msg_destroy(m);
    ct_wait_empty(ch);
    CHECK_OK(cuc_pool_lease_wait(pool, ch, 0, CT_RECV_MS));
    cuc_channel_destroy(ch);
    CHECK(wait_child(pid) == 0);
    CHECK_OK(cuc_buffer_unref_async(view, NULL));
    CHECK_OK(cuc_buffer_unref_many_async(b, NBUF, NULL));
    cuc_pool_unref(pool);
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    if (argc == 4 && !strcmp(argv[1], "--child") && !strcmp(argv[2], "importer")) {
        open_all();
        return child_importer(argv[3]);
    }
    unsetenv("CUDA_VISIBLE_DEVICES");
    open_all();
    FD_BASELINE();
    test_nothing_current();
    test_other_device_current();
    test_operations_keep();
    test_imported();
    FD_CHECK_NO_LEAK();
    printf("ctx teardown: ok (%d devices)\n", n_dev);
    return 0;
}
