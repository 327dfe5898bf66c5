/* Streams on the wire: a created stream is refused with a message that
 * says what to do instead; default streams travel as kind + UUID, come
 * back as the identical singleton in-process, and resolve by UUID in exec'd
 * children whose CUDA_VISIBLE_DEVICES permutes the GPUs; "default" goes
 * out as legacy or per-thread, never 0. */
#include "cucore.h"
#include "check.h"
#include "devices_test.h"
#include "device/device.h"
#include "msg_hex.h"
#include "wire/records.h"


static void test_created_refused(void)
{
    cuc_stream *s;
    cuc_msg *m;

    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_stream_create(devs[0], 0, 0, &s));
    CHECK_RC(cuc_msg_add_stream(m, s), CUC_E_NOT_SERIALIZABLE);
    CHECK(strstr(cuc_errmsg(), "valid only in its process") != NULL);
    CHECK(strstr(cuc_errmsg(), "IPC event") != NULL);
    CHECK(strstr(cuc_errmsg(), "CUC_EVENT_IPC") != NULL);
    CHECK(strstr(cuc_errmsg(), "cuc_stream_create") != NULL);
    CHECK(strstr(cuc_errmsg(), "cuc_stream_wait_event") != NULL);
    CHECK(cuc_msg_record_count(m) == 0);
    cuc_stream_destroy(s);
    cuc_msg_destroy(m);
}

/* The kind field of record 0 in the message's bytes. */
static uint32_t wire_kind(const cuc_msg *m)
{
    void *bytes;
    size_t len;
    uint32_t kind;

    CHECK_OK(cuc_msg_to_bytes(m, &bytes, &len));
    CHECK(len == CUC__WIRE_HDR + CUC__WIRE_REC_HDR + 24);
    CHECK(cuc__get16((uint8_t *)bytes + CUC__WIRE_HDR) == CUC_RECORD_STREAM);
    CHECK(cuc__get32((uint8_t *)bytes + CUC__WIRE_HDR + 4) == 24);
    kind = cuc__get32((uint8_t *)bytes + CUC__WIRE_HDR + CUC__WIRE_REC_HDR);
    CHECK(memcmp((uint8_t *)bytes + CUC__WIRE_HDR + CUC__WIRE_REC_HDR + 8,
                 cuc_device_uuid(devs[n_dev - 1])->bytes, 16) == 0);
    free(bytes);
    return kind;
}

static void test_default_resolved(void)
{
    cuc_stream *s;
    cuc_msg *m;

    CHECK_OK(cuc_stream_set_default_mode(CUC_STREAM_MODE_PER_THREAD));
    CHECK_OK(cuc_stream_default(devs[n_dev - 1], &s));
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_stream(m, s));
    CHECK(wire_kind(m) == CUC_STREAM_PER_THREAD_DEFAULT);
    cuc_msg_destroy(m);

    CHECK_OK(cuc_stream_set_default_mode(CUC_STREAM_MODE_LEGACY));
    CHECK_OK(cuc_stream_default(devs[n_dev - 1], &s));
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_stream(m, s));
    CHECK(wire_kind(m) == CUC_STREAM_LEGACY_DEFAULT);
    cuc_msg_destroy(m);
}

static void test_in_process(void)
{
    cuc_stream *s, *back;
    cuc_msg *m, *r;
    char *hex;
    int i, per_thread;

    for (i = 0; i < n_dev; i++)
        for (per_thread = 0; per_thread < 2; per_thread++) {
            if (per_thread)
                CHECK_OK(cuc_stream_per_thread(devs[i], &s));
            else
                CHECK_OK(cuc_stream_legacy(devs[i], &s));
            CHECK_OK(cuc_msg_create(&m));
            CHECK_OK(cuc_msg_add_stream(m, s));
            hex = msg_to_hex(m);
            CHECK_OK(msg_from_hex(hex, &r));
            CHECK_OK(cuc_msg_get_stream(r, 0, &back));
            CHECK(back == s); /* the identical singleton */
            CHECK_RC(cuc_msg_get_stream(r, 1, &back), CUC_E_INVALID);
            free(hex);
            cuc_msg_destroy(r);
            cuc_msg_destroy(m);
        }
}

/* Child: resolves the stream of the message in argv[0]; prints
 * "OK <uuid> <kind> <ordinal>" or "ERR <code>". */
static int child_resolve(int argc, char **argv)
{
    cuc_stream *s;
    cuc_msg *m;
    int rc;

    CHECK(argc == 1);
    CHECK_OK(msg_from_hex(argv[0], &m));
    rc = cuc_msg_get_stream(m, 0, &s);
    if (rc) {
        printf("ERR %s %s\n", cuc_errname(rc), cuc_errmsg());
    } else {
        CHECK_OK(cuc_stream_synchronize(s));
        printf("OK %s %d %d\n", cuc_device_uuid_string(cuc_stream_device(s)),
               cuc_stream_kind(s), cuc_device_ordinal(cuc_stream_device(s)));
    }
    cuc_msg_destroy(m);
    return 0;
}

/* Position of physical index phys in the list cvd, or -1. */
static void check_child(int dev, int per_thread, const char *cvd)
{
    const char *uuid = cuc_device_uuid_string(devs[dev]);
    int pos = cvd_position(cvd, dev);
    char want[256];
    cuc_stream *s;
    cuc_msg *m;

    if (per_thread)
        CHECK_OK(cuc_stream_per_thread(devs[dev], &s));
    else
        CHECK_OK(cuc_stream_legacy(devs[dev], &s));
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_stream(m, s));
    snprintf(want, sizeof(want), "OK %s %d %d\n", uuid,
             per_thread ? CUC_STREAM_PER_THREAD_DEFAULT : CUC_STREAM_LEGACY_DEFAULT, pos);
    child_expect("resolve", m, cvd, uuid, pos >= 0 ? want : NULL);
    cuc_msg_destroy(m);
}

static void check_both(int dev, const char *cvd, void *arg)
{
    (void)arg;
    check_child(dev, 0, cvd);
    check_child(dev, 1, cvd);
}

static void test_children(void)
{
    for_each_visibility(n_dev, check_both, NULL);
}

int main(int argc, char **argv)
{
    if (argc >= 3 && !strcmp(argv[1], "--child")) {
        if (!strcmp(argv[2], "resolve"))
            return child_resolve(argc - 3, argv + 3);
        return 2;
    }
    unsetenv("CUDA_VISIBLE_DEVICES");
    open_all();
    FD_BASELINE();
    test_created_refused();
    test_default_resolved();
    test_in_process();
    test_children();
    FD_CHECK_NO_LEAK();
    return test_finish();
}
