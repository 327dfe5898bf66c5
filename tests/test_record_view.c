/* The public record view, written only against <cucore.h> (as cucore
 * inspect and any user's inspector are): cuc_msg_record gives each
 * record's type, version, payload and fd count; cuc_record_type_name names
 * every type; each cuc_msg_read_* returns the fields an add wrote,
 * resolving nothing, and refuses a record of another type. Also the small
 * additions of the same redesign: cuc_version, cuc_pool_props_init. */
#include <fcntl.h>
#include <sys/mman.h>

#include "cucore.h"
#include "check.h"
#include "devices_test.h"
#include "driver_warm.h"
#include "ptx_kernels.h"

static void test_names(void)
{
    static const char *const names[] = {"device", "stream", "event", "launch config",
                                        "kernel", "pool", "buffer", "vmm", "fd",
                                        "release", "kernel ref", "kernel held", "buffer view",
                                        "ipc buffer", "refused"};

    for (int t = CUC_RECORD_DEVICE; t <= CUC_RECORD_REFUSED; t++)
        CHECK(strcmp(cuc_record_type_name(t), names[t - 1]) == 0);
    CHECK(strcmp(cuc_record_type_name(0), "unknown") == 0);
    CHECK(strcmp(cuc_record_type_name(99), "unknown") == 0);
    CHECK(strcmp(cuc_record_type_name(-1), "unknown") == 0);
}

static void test_version(void)
{
    struct cuc_pool_props pr;

    CHECK(cuc_version() == CUC_VERSION_NUMBER);
    CHECK(strcmp(cuc_version_string(), CUC_VERSION_STRING) == 0);
    memset(&pr, 0x5a, sizeof(pr));
    cuc_pool_props_init(&pr);
    CHECK(pr.kind == CUC_POOL_DEVICE && pr.flags == 0 && pr.max_size == 0);
    cuc_pool_props_init(NULL);
}

/* A message of every fd-free record type, through bytes. */
static cuc_msg *fd_free_msg(cuc_event *ev, cuc_kernel *k, const cuc_launch_config *cfg)
{
    cuc_stream *s;
    cuc_msg *m, *r;
    size_t len;
    void *b;

    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_device(m, devs[n_dev - 1]));
    CHECK_OK(cuc_stream_per_thread(devs[0], &s));
    CHECK_OK(cuc_msg_add_stream(m, s));
    CHECK_OK(cuc_msg_add_event(m, ev));
    CHECK_OK(cuc_msg_add_launch_config(m, cfg));
    CHECK_OK(cuc_msg_add_kernel(m, k));
    CHECK_OK(cuc_msg_to_bytes(m, &b, &len));
    cuc_msg_destroy(m);
    CHECK_OK(cuc_msg_from_bytes(b, len, &r));
    free(b);
    return r;
}

static void check_views(const cuc_msg *m)
{
    static const int types[] = {CUC_RECORD_DEVICE, CUC_RECORD_STREAM, CUC_RECORD_EVENT,
                                CUC_RECORD_LAUNCH_CONFIG, CUC_RECORD_KERNEL};
    static const size_t lens[] = {16, 24, 88, 64, 0};
    struct cuc_record_view v;

    CHECK(cuc_msg_record_count(m) == 5);
    for (size_t i = 0; i < 5; i++) {
        CHECK_OK(cuc_msg_record(m, i, &v));
        CHECK(v.type == types[i] && v.version == 1 && v.nfds == 0 && v.payload);
        CHECK(lens[i] == 0 || v.len == lens[i]);
    }
    CHECK_OK(cuc_msg_record(m, 0, &v));
    CHECK(memcmp(v.payload, cuc_device_uuid(devs[n_dev - 1])->bytes, 16) == 0);
    CHECK_RC(cuc_msg_record(m, 5, &v), CUC_E_INVALID);
    CHECK_RC(cuc_msg_record(m, 0, NULL), CUC_E_INVALID);
    CHECK_RC(cuc_msg_record(NULL, 0, &v), CUC_E_INVALID);
}

static void check_reads(const cuc_msg *m, const cuc_kernel *k, const cuc_launch_config *cfg)
{
    struct cuc_stream_record s;
    struct cuc_event_record e;
    struct cuc_kernel_record kr;
    cuc_launch_config c;
    size_t image_len;
    const void *image = cuc_kernel_image(k, &image_len);
    cuc_uuid u;

    CHECK_OK(cuc_msg_read_device(m, 0, &u));
    CHECK(cuc_uuid_equal(&u, cuc_device_uuid(devs[n_dev - 1])));
    CHECK_OK(cuc_msg_read_stream(m, 1, &s));
    CHECK(s.kind == CUC_STREAM_PER_THREAD_DEFAULT);
    CHECK(cuc_uuid_equal(&s.device, cuc_device_uuid(devs[0])));
    CHECK_OK(cuc_msg_read_event(m, 2, &e));
    CHECK(cuc_uuid_equal(&e.device, cuc_device_uuid(devs[0])) && e.flags == CUC_EVENT_IPC);
    CHECK_OK(cuc_msg_get_launch_config(m, 3, &c));
    CHECK(memcmp(&c, cfg, sizeof(c)) == 0);
    CHECK_OK(cuc_msg_read_kernel(m, 4, &kr));
    CHECK(kr.kind == CUC_IMAGE_PTX && strcmp(kr.name, "twice") == 0);
    CHECK(kr.image_len == image_len && memcmp(kr.image, image, image_len) == 0);
    CHECK(memcmp(kr.hash, cuc_kernel_hash(k), CUC_KERNEL_HASH_LEN) == 0);
    /* another type's record, and arguments */
    CHECK_RC(cuc_msg_read_device(m, 1, &u), CUC_E_INVALID);
    CHECK_ERRMSG("record 1 is a stream record, not a device record");
    CHECK_RC(cuc_msg_read_stream(m, 2, &s), CUC_E_INVALID);
    CHECK_ERRMSG("is an event record, not a stream record");
    CHECK_RC(cuc_msg_read_event(m, 0, &e), CUC_E_INVALID);
    CHECK_RC(cuc_msg_read_kernel(m, 0, &kr), CUC_E_INVALID);
    CHECK_RC(cuc_msg_read_kernel(m, 4, NULL), CUC_E_INVALID);
    CHECK_RC(cuc_msg_read_device(NULL, 0, &u), CUC_E_INVALID);
}

static void test_fd_free(void)
{
    cuc_launch_config cfg;
    cuc_kernel *k;
    cuc_event *ev;
    cuc_msg *m;

    cuc_launch_config_init(&cfg);
    cfg.grid[0] = 8;
    cfg.cluster[0] = 2;
    cfg.shared_mem = 1024;
    CHECK_OK(cuc_event_create(devs[0], CUC_EVENT_IPC, &ev));
    CHECK_OK(cuc_kernel_load(CUC_IMAGE_PTX, ptx_twice, sizeof(ptx_twice), "twice", &k));
    m = fd_free_msg(ev, k, &cfg);
    check_views(m);
    check_reads(m, k, &cfg);
    cuc_msg_destroy(m);
    cuc_kernel_destroy(k);
    cuc_event_unref(ev);
}

/* Pool, buffer and fd records: their fields, on a channel. */
static void test_with_fds(void)
{
    struct cuc_buffer_record br;
    struct cuc_pool_record pr;
    struct cuc_record_view v;
    struct cuc_pool_props props;
    uint8_t id[CUC_POOL_ID_LEN];
    cuc_channel *a, *b;
    cuc_buffer *buf;
    cuc_pool *p;
    cuc_msg *m, *got;
    int fd = memfd_create("view", MFD_CLOEXEC);

    if (!(cuc_device_caps(devs[0]) & CUC_DEVICE_CAP_POOL_POSIX_FD))
        return;
    CHECK(fd >= 0);
    cuc_pool_props_init(&props);
    props.flags = CUC_POOL_IPC;
    CHECK_OK(cuc_pool_create(devs[0], &props, &p));
    CHECK_OK(cuc_buffer_alloc_async(p, 4096, NULL, &buf));
    CHECK_OK(cuc_channel_pair(&a, &b));
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_pool(m, p));
    CHECK_OK(cuc_msg_add_buffer(m, buf));
    CHECK_OK(cuc_msg_add_fd(m, fd, 77));
    CHECK_OK(cuc_channel_send(a, m));
    cuc_msg_destroy(m);
    CHECK_OK(cuc_channel_recv(b, 5000, &got));
    CHECK_OK(cuc_msg_record(got, 0, &v));
    CHECK(v.type == CUC_RECORD_POOL && v.nfds == 1 && v.len == 40);
    CHECK_OK(cuc_msg_read_pool(got, 0, &pr));
    cuc_pool_id(p, id);
    CHECK(memcmp(pr.id, id, sizeof(id)) == 0 && pr.kind == CUC_POOL_DEVICE);
    CHECK(pr.handle_type == CUC_POOL_HANDLE_POSIX_FD && pr.fd >= 0);
    CHECK(cuc_uuid_equal(&pr.owner, cuc_device_uuid(devs[0])));
    CHECK_OK(cuc_msg_read_buffer(got, 1, &br));
    CHECK(memcmp(br.pool_id, id, sizeof(id)) == 0 && br.size == 4096 && br.offset == 0);
    CHECK(br.lease_id != 0);
    CHECK_OK(cuc_msg_record(got, 2, &v));
    CHECK(v.type == CUC_RECORD_FD && v.nfds == 1);
    CHECK(cuc_msg_fd_count(got) == 2); /* reading took nothing */
    CHECK_RC(cuc_msg_read_pool(got, 1, &pr), CUC_E_INVALID);
    CHECK_RC(cuc_msg_read_buffer(got, 0, &br), CUC_E_INVALID);
    CHECK_OK(cuc_channel_release(b, &br.lease_id, 1));
    cuc_msg_destroy(got);
    CHECK_OK(cuc_buffer_unref_async(buf, NULL));
    CHECK_OK(cuc_channel_lease_wait(a, 0, 5000));
    cuc_channel_destroy(a);
    cuc_channel_destroy(b);
    cuc_pool_unref(p);
    close(fd);
}

/* A VMM record's fields, peers included when there are two devices. */
static void test_vmm(void)
{
    const cuc_device *peers[1];
    struct cuc_vmm_record vr;
    cuc_channel *a, *b;
    size_t g, sizes[2];
    cuc_vmm *v;
    cuc_msg *m, *got;
    size_t np = n_dev > 1 ? 1 : 0;

    if ((cuc_device_caps(devs[0]) & (CUC_DEVICE_CAP_VMM | CUC_DEVICE_CAP_VMM_POSIX_FD)) !=
        (CUC_DEVICE_CAP_VMM | CUC_DEVICE_CAP_VMM_POSIX_FD))
        return;
    CHECK_OK(cuc_vmm_granularity(devs[0], &g));
    sizes[0] = g;
    sizes[1] = 2 * g;
    peers[0] = np ? devs[1] : NULL;
    CHECK_OK(cuc_vmm_create(devs[0], peers, np, sizes, 2, &v));
    CHECK_OK(cuc_channel_pair(&a, &b));
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_vmm(m, v));
    CHECK_OK(cuc_channel_send(a, m));
    cuc_msg_destroy(m);
    CHECK_OK(cuc_channel_recv(b, 5000, &got));
    CHECK_OK(cuc_msg_read_vmm(got, 0, &vr));
    CHECK(vr.handle_type == CUC_VMM_HANDLE_POSIX_FD && vr.nchunks == 2 && vr.npeers == np);
    CHECK(vr.lease_id != 0 && vr.total == 3 * g && vr.fds[0] >= 0 && vr.fds[1] >= 0);
    CHECK(cuc_uuid_equal(&vr.owner, cuc_device_uuid(devs[0])));
    CHECK(!np || cuc_uuid_equal(&vr.peers[0], cuc_device_uuid(devs[1])));
    CHECK(cuc_vmm_record_chunk_size(&vr, 0) == g && cuc_vmm_record_chunk_size(&vr, 1) == 2 * g);
    CHECK(cuc_vmm_record_chunk_size(&vr, 2) == 0);
    CHECK_RC(cuc_msg_read_vmm(got, 1, &vr), CUC_E_INVALID);
    cuc_msg_destroy(got);
    cuc_vmm_unref(v);
    cuc_channel_destroy(b); /* the lease ends with the importer's end */
    CHECK_OK(cuc_channel_lease_wait(a, 0, 5000));
    cuc_channel_destroy(a);
}

int main(void)
{
    open_all();
    test_warm_driver_fds();
    FD_BASELINE();
    test_names();
    test_version();
    test_fd_free();
    test_with_fds();
    test_vmm();
    FD_CHECK_NO_LEAK();
    return test_finish();
}
