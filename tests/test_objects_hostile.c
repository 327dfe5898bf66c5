/* Hostile stream, event, launch-config and kernel records: every field a
 * peer controls, wrong, is CUC_E_BADMSG (never a crash, never a load), with
 * a message that names the field; wrong record types are CUC_E_INVALID.
 * Each case also checks where it is refused, as docs/wire-format.md says:
 * lengths and reserved fields by the decoder, field values on resolve. */
#include "cucore.h"
#include "check.h"
#include "msg_hex.h"
#include "base/sha256.h"
#include "base/hex.h"
#include "device/device.h"
#include "exec/kernel.h"
#include "wire/records.h"
#include "ptx_kernels.h"
#include "wire/records.h"

static cuc_device *dev0;

/* Where the last get_* failed: at decode (cuc_msg_from_bytes) or resolve. */
enum { AT_DECODE = 1, AT_RESOLVE = 2 };
static int stage;

#define CHECK_AT(call, want, where)                                            \
    do {                                                                       \
        CHECK_RC(call, want);                                                  \
        if (stage != (where)) {                                                \
            fprintf(stderr, "%s:%d: refused at %s, the doc says at %s\n",      \
                    __FILE__, __LINE__, stage == AT_DECODE ? "decode" : "resolve", \
                    (where) == AT_DECODE ? "decode" : "resolve");              \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

/* ---- stream ---- */

static void stream_payload(uint8_t p[24], uint32_t kind)
{
    memset(p, 0, 24);
    cuc__put32(p, kind);
    memcpy(p + 8, cuc_device_uuid(dev0)->bytes, 16);
}

static int get_stream(const uint8_t *p, uint32_t len)
{
    cuc_stream *s = (cuc_stream *)0x1;
    cuc_msg *m;
    int rc = msg_decode_one(CUC_RECORD_STREAM, p, len, &m);

    stage = AT_DECODE;
    if (rc)
        return rc;
    stage = AT_RESOLVE;
    rc = cuc_msg_get_stream(m, 0, &s);

    if (rc)
        CHECK(s == (cuc_stream *)0x1);
    cuc_msg_destroy(m);
    return rc;
}

static void test_stream(void)
{
    static const uint32_t bad_kinds[] = {0, 3, 4, 0x80000001u, 0xffffffffu};
    uint8_t p[32];
    size_t i;

    stream_payload(p, CUC_STREAM_PER_THREAD_DEFAULT);
    CHECK_OK(get_stream(p, 24));
    for (i = 0; i < CUC_ARRAY_LEN(bad_kinds); i++) {
        stream_payload(p, bad_kinds[i]);
        CHECK_AT(get_stream(p, 24), CUC_E_BADMSG, AT_RESOLVE);
        CHECK_ERRMSG("neither legacy (1) nor per-thread (2)");
    }
    stream_payload(p, 0);
    CHECK_AT(get_stream(p, 24), CUC_E_BADMSG, AT_RESOLVE);
    CHECK_ERRMSG("never sent as 0");
    for (i = 4; i < 8; i++) {
        stream_payload(p, CUC_STREAM_LEGACY_DEFAULT);
        p[i] = 1;
        CHECK_AT(get_stream(p, 24), CUC_E_BADMSG, AT_DECODE);
        CHECK_ERRMSG("reserved stream record field at offset 44 (payload offset 4");
    }
    stream_payload(p, CUC_STREAM_LEGACY_DEFAULT);
    CHECK_AT(get_stream(p, 23), CUC_E_BADMSG, AT_DECODE);
    CHECK_ERRMSG("stream payload length 23 outside 24..24");
    CHECK_AT(get_stream(p, 25), CUC_E_BADMSG, AT_DECODE);
    CHECK_AT(get_stream(p, 32), CUC_E_BADMSG, AT_DECODE);
    CHECK_AT(get_stream(p, 16), CUC_E_BADMSG, AT_DECODE);
    CHECK_AT(get_stream(p, 0), CUC_E_BADMSG, AT_DECODE);
    /* Well-formed, but a GPU nobody has. */
    stream_payload(p, CUC_STREAM_LEGACY_DEFAULT);
    memset(p + 8, 0xab, 16);
    CHECK_AT(get_stream(p, 24), CUC_E_NOT_VISIBLE, AT_RESOLVE);
    CHECK_ERRMSG("GPU-abababab-abab-abab-abab-abababababab");
}

/* ---- event ---- */

static void event_payload(uint8_t p[88], uint32_t flags)
{
    memset(p, 0, 88);
    cuc__put32(p, flags);
    memcpy(p + 8, cuc_device_uuid(dev0)->bytes, 16);
    memset(p + 24, 0x5a, 64); /* a handle no driver made */
}

static int get_event(const uint8_t *p, uint32_t len)
{
    cuc_event *ev = (cuc_event *)0x1;
    cuc_msg *m;
    int rc = msg_decode_one(CUC_RECORD_EVENT, p, len, &m);

    stage = AT_DECODE;
    if (rc)
        return rc;
    stage = AT_RESOLVE;
    rc = cuc_msg_get_event(m, 0, &ev);

    if (rc)
        CHECK(ev == (cuc_event *)0x1);
    else
        cuc_event_unref(ev);
    cuc_msg_destroy(m);
    return rc;
}

static void test_event(void)
{
    static const uint32_t bad_flags[] = {0, CUC_EVENT_TIMING, CUC_EVENT_IPC | CUC_EVENT_TIMING,
                                         CUC_EVENT_IPC | 0x100, 0xffffffffu,
                                         CUC_EVENT_BLOCKING_SYNC};
    uint8_t p[96];
    size_t i;
    int rc;

    for (i = 0; i < CUC_ARRAY_LEN(bad_flags); i++) {
        event_payload(p, bad_flags[i]);
        CHECK_AT(get_event(p, 88), CUC_E_BADMSG, AT_RESOLVE);
        CHECK_ERRMSG("flags");
    }
    event_payload(p, CUC_EVENT_IPC);
    cuc__put32(p + 4, 7);
    CHECK_AT(get_event(p, 88), CUC_E_BADMSG, AT_DECODE);
    CHECK_ERRMSG("reserved event record field");
    event_payload(p, CUC_EVENT_IPC);
    cuc__put32(p + 4, 0x80000000u);
    CHECK_AT(get_event(p, 88), CUC_E_BADMSG, AT_DECODE);
    event_payload(p, CUC_EVENT_IPC);
    CHECK_AT(get_event(p, 87), CUC_E_BADMSG, AT_DECODE);
    CHECK_ERRMSG("event payload length 87 outside 88..88");
    CHECK_AT(get_event(p, 89), CUC_E_BADMSG, AT_DECODE);
    CHECK_AT(get_event(p, 24), CUC_E_BADMSG, AT_DECODE);
    memset(p + 8, 0xcd, 16);
    CHECK_AT(get_event(p, 88), CUC_E_NOT_VISIBLE, AT_RESOLVE);
    /* A garbage handle reaches the driver, which refuses it: an error, not
     * a crash. */
    event_payload(p, CUC_EVENT_IPC);
    rc = get_event(p, 88);
    CHECK(rc == CUC_E_DRIVER && stage == AT_RESOLVE);
    CHECK_ERRMSG("cuIpcOpenEventHandle");
}

/* ---- launch config ---- */

static void config_payload(uint8_t p[64], const cuc_launch_config *c)
{
    const uint32_t *w = (const uint32_t *)(const void *)c;
    int i;

    for (i = 0; i < 16; i++)
        cuc__put32(p + 4 * i, w[i]);
}

static int get_config(const uint8_t *p, uint32_t len)
{
    cuc_launch_config c, untouched;
    cuc_msg *m;
    int rc = msg_decode_one(CUC_RECORD_LAUNCH_CONFIG, p, len, &m);

    stage = AT_DECODE;
    if (rc)
        return rc;
    stage = AT_RESOLVE;
    memset(&c, 0x77, sizeof(c));
    untouched = c;
    rc = cuc_msg_get_launch_config(m, 0, &c);
    if (rc)
        CHECK(memcmp(&c, &untouched, sizeof(c)) == 0);
    cuc_msg_destroy(m);
    return rc;
}

static void test_launch_config(void)
{
    cuc_launch_config good, c;
    uint8_t p[72];
    int field;

    cuc_launch_config_init(&good);
    good.grid[0] = 4;
    good.cluster[0] = 2;
    config_payload(p, &good);
    CHECK_OK(get_config(p, 64));
    /* A zero in any dimension. */
    for (field = 0; field < 9; field++) {
        c = good;
        ((uint32_t *)(void *)&c)[field] = 0;
        config_payload(p, &c);
        CHECK_AT(get_config(p, 64), CUC_E_BADMSG, AT_RESOLVE);
        CHECK_ERRMSG(" is 0 (1..");
    }
    /* Absurd values. */
    c = good, c.grid[1] = 65536;
    config_payload(p, &c);
    CHECK_AT(get_config(p, 64), CUC_E_BADMSG, AT_RESOLVE);
    CHECK_ERRMSG("grid.y is 65536");
    c = good, c.grid[0] = 0x80000000u, c.cluster[0] = 1;
    config_payload(p, &c);
    CHECK_AT(get_config(p, 64), CUC_E_BADMSG, AT_RESOLVE);
    c = good, c.block[0] = 0xffffffffu;
    config_payload(p, &c);
    CHECK_AT(get_config(p, 64), CUC_E_BADMSG, AT_RESOLVE);
    c = good, c.block[0] = 1024, c.block[1] = 1024;
    config_payload(p, &c);
    CHECK_AT(get_config(p, 64), CUC_E_BADMSG, AT_RESOLVE);
    CHECK_ERRMSG("more than 1024");
    c = good, c.grid[0] = 32, c.cluster[0] = 32;
    config_payload(p, &c);
    CHECK_AT(get_config(p, 64), CUC_E_BADMSG, AT_RESOLVE);
    c = good, c.cluster[0] = 3;
    config_payload(p, &c);
    CHECK_AT(get_config(p, 64), CUC_E_BADMSG, AT_RESOLVE);
    CHECK_ERRMSG("does not divide");
    c = good, c.shared_mem = 0xffffffffu;
    config_payload(p, &c);
    CHECK_AT(get_config(p, 64), CUC_E_BADMSG, AT_RESOLVE);
    CHECK_ERRMSG("shared_mem");
    c = good, c.cooperative = 2;
    config_payload(p, &c);
    CHECK_AT(get_config(p, 64), CUC_E_BADMSG, AT_RESOLVE);
    CHECK_ERRMSG("cooperative");
    /* reserved[0..4] (payload offsets 44..63): the decoder's */
    for (field = 0; field < 5; field++) {
        c = good, c.reserved[field] = field == 4 ? 0x10000u : 1u;
        config_payload(p, &c);
        CHECK_AT(get_config(p, 64), CUC_E_BADMSG, AT_DECODE);
        CHECK_ERRMSG("reserved launch config record field at offset 84 (payload offset 44");
    }
    config_payload(p, &good);
    CHECK_AT(get_config(p, 60), CUC_E_BADMSG, AT_DECODE);
    CHECK_AT(get_config(p, 68), CUC_E_BADMSG, AT_DECODE);
    CHECK_ERRMSG("launch config payload length 68 outside 64..64");
    CHECK_AT(get_config(p, 72), CUC_E_BADMSG, AT_DECODE);
}

/* ---- kernel ---- */

struct kfields {
    uint32_t kind, name_len, image_len, reserved;
    uint8_t hash[32];
    const char *name; /* name_len bytes copied as they are */
    const void *image;
    size_t copy_image; /* bytes of image copied */
    size_t total;      /* payload length */
};

static uint8_t kbuf[4096];

static void good_kernel(struct kfields *f)
{
    memset(f, 0, sizeof(*f));
    f->kind = CUC_IMAGE_PTX;
    f->name = "twice";
    f->name_len = 6;
    f->image = ptx_twice;
    f->image_len = (uint32_t)strlen(ptx_twice);
    f->copy_image = f->image_len;
    cuc__sha256(ptx_twice, f->image_len, f->hash);
    f->total = 48 + f->name_len + f->image_len;
}

static int get_kernel(const struct kfields *f)
{
    size_t name_copy = f->name_len < 64 ? f->name_len : 0;
    cuc_kernel *k = (cuc_kernel *)0x1;
    size_t loads0, loads;
    cuc_msg *m;
    int rc;

    CHECK(f->total <= sizeof(kbuf) && 48 + name_copy + f->copy_image <= sizeof(kbuf));
    memset(kbuf, 0, sizeof(kbuf));
    cuc__put32(kbuf, f->kind);
    cuc__put32(kbuf + 4, f->name_len);
    cuc__put32(kbuf + 8, f->image_len);
    cuc__put32(kbuf + 12, f->reserved);
    memcpy(kbuf + 16, f->hash, 32);
    memcpy(kbuf + 48, f->name, name_copy);
    memcpy(kbuf + 48 + name_copy, f->image, f->copy_image);
    stage = AT_DECODE;
    rc = msg_decode_one(CUC_RECORD_KERNEL, kbuf, (uint32_t)f->total, &m);
    if (rc)
        return rc;
    stage = AT_RESOLVE;
    cuc_kernel_cache_stats(&loads0, NULL);
    rc = cuc_msg_get_kernel(m, 0, &k);
    cuc_kernel_cache_stats(&loads, NULL);
    if (rc) {
        CHECK(k == (cuc_kernel *)0x1);
        if (rc == CUC_E_BADMSG)
            CHECK(loads == loads0); /* refused before the driver */
    } else {
        cuc_kernel_destroy(k);
    }
    cuc_msg_destroy(m);
    return rc;
}

static void test_kernel(void)
{
    struct kfields f;
    uint8_t elf[128];

    good_kernel(&f);
    CHECK_OK(get_kernel(&f));

    good_kernel(&f), f.kind = 0;
    CHECK_AT(get_kernel(&f), CUC_E_BADMSG, AT_RESOLVE);
    CHECK_ERRMSG("image kind 0");
    good_kernel(&f), f.kind = 4;
    CHECK_AT(get_kernel(&f), CUC_E_BADMSG, AT_RESOLVE);
    good_kernel(&f), f.kind = 0xffffffffu;
    CHECK_AT(get_kernel(&f), CUC_E_BADMSG, AT_RESOLVE);
    good_kernel(&f), f.reserved = 1;
    CHECK_AT(get_kernel(&f), CUC_E_BADMSG, AT_DECODE);
    CHECK_ERRMSG("reserved kernel record field at offset 52 (payload offset 12");
    good_kernel(&f), f.reserved = 0xff000000u;
    CHECK_AT(get_kernel(&f), CUC_E_BADMSG, AT_DECODE);

    /* Name lengths: 0, 1 (just a NUL), past the payload, near UINT32_MAX. */
    good_kernel(&f), f.name_len = 0;
    CHECK_AT(get_kernel(&f), CUC_E_BADMSG, AT_RESOLVE);
    CHECK_ERRMSG("name length 0");
    good_kernel(&f), f.name_len = 1, f.name = "", f.total = 48 + 1 + f.image_len;
    CHECK_AT(get_kernel(&f), CUC_E_BADMSG, AT_RESOLVE);
    good_kernel(&f), f.name_len = 4000;
    CHECK_AT(get_kernel(&f), CUC_E_BADMSG, AT_RESOLVE);
    CHECK_ERRMSG("name length 4000");
    good_kernel(&f), f.name_len = 0xfffffff0u;
    CHECK_AT(get_kernel(&f), CUC_E_BADMSG, AT_RESOLVE);
    good_kernel(&f), f.name_len = 5000;
    CHECK_AT(get_kernel(&f), CUC_E_BADMSG, AT_RESOLVE);
    /* Not NUL-terminated; a NUL inside. */
    good_kernel(&f), f.name = "twiceX";
    CHECK_AT(get_kernel(&f), CUC_E_BADMSG, AT_RESOLVE);
    CHECK_ERRMSG("NUL-terminated");
    good_kernel(&f), f.name = "tw\0ce";
    CHECK_AT(get_kernel(&f), CUC_E_BADMSG, AT_RESOLVE);

    /* Image lengths that lie: 0, one more or less than there is, near
     * UINT32_MAX (no wrap-around in 48 + name + image). */
    good_kernel(&f), f.image_len = 0;
    CHECK_AT(get_kernel(&f), CUC_E_BADMSG, AT_RESOLVE);
    good_kernel(&f), f.image_len += 1;
    CHECK_AT(get_kernel(&f), CUC_E_BADMSG, AT_RESOLVE);
    CHECK_ERRMSG("image length");
    good_kernel(&f), f.image_len -= 1;
    CHECK_AT(get_kernel(&f), CUC_E_BADMSG, AT_RESOLVE);
    good_kernel(&f), f.image_len = 0xffffffffu;
    CHECK_AT(get_kernel(&f), CUC_E_BADMSG, AT_RESOLVE);
    good_kernel(&f), f.image_len = 0xffffffffu - 47 - 6;
    CHECK_AT(get_kernel(&f), CUC_E_BADMSG, AT_RESOLVE);
    /* Shorter than 48 bytes, a one-character name and its NUL, one image
     * byte: the decoder's; 51 bytes that do not add up: the resolver's. */
    good_kernel(&f), f.total = 47;
    CHECK_AT(get_kernel(&f), CUC_E_BADMSG, AT_DECODE);
    CHECK_ERRMSG("kernel payload length 47 outside 51..");
    good_kernel(&f), f.total = 40;
    CHECK_AT(get_kernel(&f), CUC_E_BADMSG, AT_DECODE);
    good_kernel(&f), f.total = 50;
    CHECK_AT(get_kernel(&f), CUC_E_BADMSG, AT_DECODE);
    good_kernel(&f), f.total = 51;
    CHECK_AT(get_kernel(&f), CUC_E_BADMSG, AT_RESOLVE);

    /* The hash must be the bytes'. */
    good_kernel(&f), f.hash[31] ^= 1;
    CHECK_AT(get_kernel(&f), CUC_E_BADMSG, AT_RESOLVE);
    CHECK_ERRMSG("do not hash to");
    {
        char changed[sizeof(ptx_twice)];
        memcpy(changed, ptx_twice, sizeof(changed));
        changed[5] ^= 0x20;
        good_kernel(&f), f.image = changed;
        CHECK_AT(get_kernel(&f), CUC_E_BADMSG, AT_RESOLVE);
    }
    /* With the image cached, its hash is its identity (checked when it was
     * loaded): a record with the cached hash is a hit whatever bytes follow
     * (the cached image, not those bytes, is what resolves), a wrong hash
     * is still a miss whose bytes are hashed and refused. */
    {
        char changed[sizeof(ptx_twice)];
        size_t hits0, hits;
        cuc_kernel *held, *k;
        cuc_msg *m;

        CHECK_OK(cuc_kernel_load(CUC_IMAGE_PTX, ptx_twice, strlen(ptx_twice), "twice", &held));
        good_kernel(&f), f.hash[31] ^= 1;
        CHECK_AT(get_kernel(&f), CUC_E_BADMSG, AT_RESOLVE);
        CHECK_ERRMSG("do not hash to");
        memcpy(changed, ptx_twice, sizeof(changed));
        changed[5] ^= 0x20;
        cuc_kernel_cache_stats(NULL, &hits0);
        good_kernel(&f), f.image = changed;
        CHECK_OK(get_kernel(&f));
        /* what resolved is the cached image, not the record's bytes */
        CHECK_OK(msg_decode_one(CUC_RECORD_KERNEL, kbuf, (uint32_t)f.total, &m));
        CHECK_OK(cuc_msg_get_kernel(m, 0, &k));
        CHECK(cuc_kernel_handle(k) == cuc_kernel_handle(held));
        CHECK(memcmp(cuc_kernel_image(k, NULL), ptx_twice, strlen(ptx_twice)) == 0);
        cuc_kernel_destroy(k);
        cuc_msg_destroy(m);
        good_kernel(&f);
        CHECK_OK(get_kernel(&f));
        cuc_kernel_cache_stats(NULL, &hits);
        CHECK(hits == hits0 + 3);
        cuc_kernel_destroy(held);
    }
    /* Canonical: a sender never includes PTX's trailing NUL. */
    good_kernel(&f), f.image_len += 1, f.copy_image += 1, f.total += 1;
    cuc__sha256(ptx_twice, f.image_len, f.hash);
    CHECK_AT(get_kernel(&f), CUC_E_BADMSG, AT_RESOLVE);
    CHECK_ERRMSG("ends in NUL bytes");
    /* Kind and bytes disagree; declared extents past the image. */
    good_kernel(&f), f.kind = CUC_IMAGE_CUBIN;
    CHECK_AT(get_kernel(&f), CUC_E_BADMSG, AT_RESOLVE);
    CHECK_ERRMSG("ELF magic");
    memset(elf, 0, sizeof(elf));
    memcpy(elf, "\x7f" "ELF\x02\x01", 6);
    elf[40] = 64, elf[58] = 64, elf[60] = 100; /* 100 section headers in 128 bytes */
    good_kernel(&f), f.kind = CUC_IMAGE_CUBIN, f.image = elf, f.image_len = 128;
    f.copy_image = 128, f.total = 48 + 6 + 128;
    cuc__sha256(elf, 128, f.hash);
    CHECK_AT(get_kernel(&f), CUC_E_BADMSG, AT_RESOLVE);
    CHECK_ERRMSG("section headers");
    /* Well-formed and hashed, but the driver cannot load it: its error,
     * with the kernel and the image named. The driver loads lazily, EAGER
     * too (sim/FACTS.md F12): cuLibraryGetKernel is the call that
     * refuses. */
    good_kernel(&f), f.image = "garbage text", f.image_len = 12, f.copy_image = 12;
    f.total = 48 + 6 + 12;
    cuc__sha256("garbage text", 12, f.hash);
    CHECK_AT(get_kernel(&f), CUC_E_DRIVER, AT_RESOLVE);
    if (!strstr(cuc_errmsg(), "cuLibraryGetKernel failed"))
        CHECK_ERRMSG("cuLibraryLoadData failed");
    CHECK_ERRMSG("CUDA_ERROR_INVALID_IMAGE");
    CHECK_ERRMSG("kernel \"twice\"");
    CHECK_ERRMSG("12-byte PTX image");
    /* Loads, but has no such symbol. */
    good_kernel(&f), f.name = "thrice", f.name_len = 7, f.total += 1;
    CHECK_AT(get_kernel(&f), CUC_E_NOT_FOUND, AT_RESOLVE);
    CHECK_ERRMSG("\"thrice\"");
}

/* ---- wrong record types, indices ---- */

static void test_types(void)
{
    uint8_t p[64] = {0};
    cuc_launch_config c;
    cuc_stream *s;
    cuc_event *ev;
    cuc_kernel *k;
    cuc_msg *m;

    m = msg_received(CUC_RECORD_DEVICE, cuc_device_uuid(dev0)->bytes, 16);
    CHECK_RC(cuc_msg_get_stream(m, 0, &s), CUC_E_INVALID);
    CHECK_ERRMSG("not a stream");
    CHECK_RC(cuc_msg_get_event(m, 0, &ev), CUC_E_INVALID);
    CHECK_RC(cuc_msg_get_launch_config(m, 0, &c), CUC_E_INVALID);
    CHECK_RC(cuc_msg_get_kernel(m, 0, &k), CUC_E_INVALID);
    CHECK_RC(cuc_msg_get_stream(m, 1, &s), CUC_E_INVALID);
    CHECK_RC(cuc_msg_get_kernel(m, (size_t)-1, &k), CUC_E_INVALID);
    CHECK_RC(cuc_msg_get_stream(NULL, 0, &s), CUC_E_INVALID);
    CHECK_RC(cuc_msg_get_kernel(m, 0, NULL), CUC_E_INVALID);
    cuc_msg_destroy(m);
    CHECK_RC(msg_decode_one(CUC_RECORD_KERNEL, p, 0, &m), CUC_E_BADMSG);
    CHECK_ERRMSG("kernel payload length 0 outside 51..");
}

int main(void)
{
    CHECK_OK(cuc_device_get(0, &dev0));
    CHECK_OK(cuc_device_set_current(dev0));
    FD_BASELINE();
    test_stream();
    test_event();
    test_launch_config();
    test_kernel();
    test_types();
    FD_CHECK_NO_LEAK();
    return test_finish();
}
