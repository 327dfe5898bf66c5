/* VMM records: the in-process round trip (bytes and fds decoded back into
 * a message, imported, same memory, access by UUID), plain bytes refused,
 * and hostile payloads built byte by byte beside real chunk fds: every
 * truncation, lying lengths and counts near UINT32_MAX, chunk count vs fd
 * count, bad handle types, unknown versions, reserved fields, lease id 0,
 * sizes that are 0, overflow, exceed the maximum, miss the granularity or
 * lie about the allocation behind the fd, swapped fds, fds that are not
 * VMM allocations, duplicated or owner-as-peer UUIDs, owner or peer not
 * visible. After each: no fd, mapping or resource left behind. */
#include <fcntl.h>
#include <linux/kcmp.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include "msg_hex.h"
#include "vmm_test.h"
#include "wire/records.h"

#define CHUNKS 2

static size_t gran;
static cuc_device *dev0, *dev1;
static cuc_vmm *src;           /* chunks of gran and 2 * gran */
static int src_fds[CHUNKS];    /* exported once, dup'ed for each case */
static uint8_t good[CUC__VMM_PAYLOAD_MAX];
static uint32_t good_len;
static int base_maps;

/* A one-record message around payload, as a peer could send it. */
static size_t build(uint8_t *out, uint16_t rec_version, const uint8_t *payload,
                    uint32_t len, uint32_t rec_nfds, uint32_t hdr_nfds)
{
    return test_raw_record(out, CUC_RECORD_VMM, rec_version, len, rec_nfds, hdr_nfds,
                           payload, len);
}

/* n fds for one case: dups of the source chunks, in order (or others). */
static void dup_fds(int *fds, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        fds[i] = fcntl(src_fds[i % CHUNKS], F_DUPFD_CLOEXEC, 0);
        CHECK(fds[i] >= 0);
    }
}

/* Decodes bytes with fds; if that succeeds, gets record 0. Returns the
 * first failure (or 0 with *out set). Every fd is consumed. */
static int decode_get(const uint8_t *b, size_t len, int *fds, size_t nfds, cuc_vmm **out)
{
    cuc_msg *m;
    int rc = cuc__msg_decode(b, len, fds, nfds, &m);

    for (size_t i = 0; i < nfds; i++)
        CHECK(fds[i] == -1);
    if (rc)
        return rc;
    rc = cuc_msg_get_vmm(m, 0, out);
    cuc_msg_destroy(m);
    return rc;
}

static void no_leftovers(int line)
{
    if (cuc__vmm_live() != 1 || test_fd_count() != test_fd_baseline_ ||
        vmm_t_sim_maps(0, 0) != base_maps) {
        fprintf(stderr, "line %d: left behind: %zu resources (want 1), %d fds (want "
                "%d), %d sim maps (want %d)\n", line, cuc__vmm_live(), test_fd_count(),
                test_fd_baseline_, vmm_t_sim_maps(0, 0), base_maps);
        exit(1);
    }
}

/* payload (len bytes) in a record with rec_nfds fds of which the header
 * announces hdr_nfds and nsend arrive: the status it ends with. */
static int try_raw(uint16_t ver, const uint8_t *p, uint32_t len, uint32_t rec_nfds,
                   uint32_t hdr_nfds, size_t nsend)
{
    static uint8_t b[24 + 16 + CUC__VMM_PAYLOAD_MAX + 64];
    int fds[8];
    cuc_vmm *v = NULL;
    size_t n = build(b, ver, p, len, rec_nfds, hdr_nfds);
    int rc;

    CHECK(nsend <= 8);
    dup_fds(fds, nsend);
    rc = decode_get(b, n, fds, nsend, &v);
    if (rc == 0)
        cuc_vmm_unref(v);
    return rc;
}

#define EXPECT_RAW(ver, p, len, rec_nfds, hdr_nfds, nsend, want)               \
    do {                                                                       \
        int r_ = try_raw(ver, p, len, rec_nfds, hdr_nfds, nsend);              \
        if (r_ != (want)) {                                                    \
            fprintf(stderr, "%s:%d: got %s, wanted %s: %s\n", __FILE__, __LINE__, \
                    cuc_errname(r_), cuc_errname(want), cuc_errmsg());         \
            exit(1);                                                           \
        }                                                                      \
        no_leftovers(__LINE__);                                                \
    } while (0)

/* The good payload with a u32 at off set to v. */
#define EXPECT_U32(off, v, want)                                               \
    do {                                                                       \
        uint8_t p_[CUC__VMM_PAYLOAD_MAX];                                      \
        memcpy(p_, good, good_len);                                            \
        cuc__put32(p_ + (off), (v));                                           \
        EXPECT_RAW(1, p_, good_len, CHUNKS, CHUNKS, CHUNKS, want);             \
    } while (0)

static size_t sizes_at(void)
{
    return CUC__VMM_FIXED + 16 * (size_t)cuc__get32(good + 8);
}

#define EXPECT_SIZES(s0, s1, want)                                             \
    do {                                                                       \
        uint8_t p_[CUC__VMM_PAYLOAD_MAX];                                      \
        memcpy(p_, good, good_len);                                            \
        cuc__put64(p_ + sizes_at(), (s0));                                     \
        cuc__put64(p_ + sizes_at() + 8, (s1));                                 \
        EXPECT_RAW(1, p_, good_len, CHUNKS, CHUNKS, CHUNKS, want);             \
    } while (0)

static void setup(void)
{
    size_t sizes[CHUNKS] = {gran, 2 * gran};
    const cuc_device *peers[1] = {dev1};
    struct cuc__record r;
    cuc_msg *m;

    CHECK_OK(cuc_vmm_create(dev0, dev1 ? peers : NULL, dev1 ? 1 : 0, sizes, CHUNKS, &src));
    vmm_t_fill(src, 5);
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_vmm(m, src));
    CHECK_OK(cuc__msg_record(m, 0, &r));
    CHECK(r.type == CUC_RECORD_VMM && r.version == 1 && r.nfds == CHUNKS);
    CHECK(r.len == CUC__VMM_FIXED + 16 * (dev1 ? 1u : 0u) + 8 * CHUNKS);
    memcpy(good, r.payload, r.len);
    good_len = r.len;
    for (int i = 0; i < CHUNKS; i++)
        CHECK_OK(cuc__msg_take_record_fd(m, 0, (uint32_t)i, &src_fds[i]));
    cuc_msg_destroy(m);
    /* the layout docs/wire-format.md gives */
    CHECK(cuc__get32(good) == CUC_VMM_HANDLE_POSIX_FD);
    CHECK(cuc__get32(good + 4) == CHUNKS && cuc__get32(good + 8) == (dev1 ? 1u : 0u));
    CHECK(cuc__get32(good + 12) == 0 && cuc__get64(good + 16) != 0);
    CHECK(!memcmp(good + 24, cuc_device_uuid(dev0)->bytes, 16));
    if (dev1)
        CHECK(!memcmp(good + 40, cuc_device_uuid(dev1)->bytes, 16));
    CHECK(cuc__get64(good + sizes_at()) == gran && cuc__get64(good + sizes_at() + 8) == 2 * gran);
}

/* The encoded message decoded back (as a channel would hand it over):
 * the same memory, mapped elsewhere, access by UUID. */
static void test_round_trip(void)
{
    const char *expect[2] = {cuc_device_uuid_string(dev0),
                             dev1 ? cuc_device_uuid_string(dev1) : NULL};
    const int *wire_fds;
    size_t len, nfds;
    uint8_t *bytes;
    void *plain = NULL;
    int fds[CHUNKS];
    cuc_vmm *v;
    cuc_msg *m, *back;

    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_vmm(m, src));
    CHECK_RC(cuc_msg_to_bytes(m, &plain, &len), CUC_E_NEEDS_CHANNEL);
    CHECK(strstr(cuc_errmsg(), "2 file descriptors") != NULL);
    CHECK_OK(cuc__msg_encode(m, &bytes, &len, &wire_fds, &nfds));
    CHECK(nfds == CHUNKS);
    /* without its fds the bytes do not decode */
    CHECK_RC(cuc_msg_from_bytes(bytes, len, &back), CUC_E_BADMSG);
    for (size_t i = 0; i < nfds; i++)
        CHECK((fds[i] = fcntl(wire_fds[i], F_DUPFD_CLOEXEC, 0)) >= 0);
    CHECK_OK(cuc__msg_decode(bytes, len, fds, nfds, &back));
    free(bytes);
    cuc_msg_destroy(m);
    CHECK_OK(cuc_msg_get_vmm(back, 0, &v));
    CHECK(cuc_vmm_is_imported(v) && cuc_vmm_ptr(v) != cuc_vmm_ptr(src));
    CHECK(cuc_vmm_device(v) == dev0 && cuc_vmm_peer(v, 0) == dev1);
    CHECK(cuc_vmm_chunk_size(v, 0) == gran && cuc_vmm_chunk_size(v, 1) == 2 * gran);
    vmm_t_check_access(v, expect, 2);
    CHECK(vmm_t_holds(v, 5));
    vmm_t_fill(v, 6); /* one memory: the source sees it */
    CHECK(vmm_t_holds(src, 6));
    cuc_vmm_unref(v);
    {
        cuc_device *d;
        CHECK_RC(cuc_msg_get_device(back, 0, &d), CUC_E_INVALID);
    }
    cuc_msg_destroy(back);
    no_leftovers(__LINE__);
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_device(m, dev0));
    CHECK_RC(cuc_msg_get_vmm(m, 0, &v), CUC_E_INVALID);
    CHECK(strstr(cuc_errmsg(), "not a vmm") != NULL);
    CHECK_RC(cuc_msg_get_vmm(m, 1, &v), CUC_E_INVALID);
    CHECK_RC(cuc_msg_get_vmm(NULL, 0, &v), CUC_E_INVALID);
    CHECK_RC(cuc_msg_get_vmm(m, 0, NULL), CUC_E_INVALID);
    cuc_msg_destroy(m);
}

static void test_good_raw(void)
{
    EXPECT_RAW(1, good, good_len, CHUNKS, CHUNKS, CHUNKS, 0);
}

/* Every shorter payload: refused by the decoder's shape or the record's
 * own length check. */
static void test_truncated(void)
{
    for (uint32_t n = 0; n < good_len; n++) {
        int want = CUC_E_BADMSG;
        EXPECT_RAW(1, good, n, CHUNKS, CHUNKS, CHUNKS, want);
    }
    /* and the message bytes cut anywhere */
    {
        static uint8_t b[24 + 16 + CUC__VMM_PAYLOAD_MAX];
        size_t n = build(b, 1, good, good_len, CHUNKS, CHUNKS);
        for (size_t cut = 0; cut < n; cut++) {
            int fds[CHUNKS];
            cuc_vmm *v;
            dup_fds(fds, CHUNKS);
            CHECK_RC(decode_get(b, cut, fds, CHUNKS, &v), CUC_E_BADMSG);
            no_leftovers(__LINE__);
        }
    }
}

static void test_lying_lengths(void)
{
    static uint8_t b[24 + 16 + CUC__VMM_PAYLOAD_MAX];
    static const uint32_t lies[] = {0xffffffffu, 0xfffffff8u, 0x80000000u, 0x10000u};
    size_t n = build(b, 1, good, good_len, CHUNKS, CHUNKS);

    for (size_t i = 0; i < CUC_ARRAY_LEN(lies); i++) {
        int fds[CHUNKS];
        cuc_vmm *v;
        cuc__put32(b + 28, lies[i]); /* record payload length */
        dup_fds(fds, CHUNKS);
        CHECK_RC(decode_get(b, n, fds, CHUNKS, &v), CUC_E_BADMSG);
        no_leftovers(__LINE__);
    }
    /* counts that lie */
    EXPECT_U32(4, 0xffffffffu, CUC_E_BADMSG);
    CHECK(strstr(cuc_errmsg(), "chunk count 4294967295") != NULL);
    EXPECT_U32(4, 0x80000000u, CUC_E_BADMSG);
    EXPECT_U32(4, CUC_VMM_MAX_CHUNKS + 1, CUC_E_BADMSG);
    EXPECT_U32(4, 0, CUC_E_BADMSG);
    EXPECT_U32(8, 0xffffffffu, CUC_E_BADMSG);
    EXPECT_U32(8, CUC_VMM_MAX_PEERS + 1, CUC_E_BADMSG);
    EXPECT_U32(8, cuc__get32(good + 8) + 1, CUC_E_BADMSG); /* length then disagrees */
    CHECK(strstr(cuc_errmsg(), "make") != NULL);
    /* a payload longer than its counts say */
    {
        uint8_t p[CUC__VMM_PAYLOAD_MAX + 8];
        memset(p, 0, sizeof(p));
        memcpy(p, good, good_len);
        EXPECT_RAW(1, p, good_len + 8, CHUNKS, CHUNKS, CHUNKS, CUC_E_BADMSG);
        EXPECT_RAW(1, p, CUC__VMM_PAYLOAD_MAX + 8, CHUNKS, CHUNKS, CHUNKS, CUC_E_BADMSG);
    }
}

static void test_fd_count_mismatch(void)
{
    uint8_t p[CUC__VMM_PAYLOAD_MAX];

    /* two chunks, one fd (the header agrees with the record) */
    EXPECT_RAW(1, good, good_len, 1, 1, 1, CUC_E_BADMSG);
    CHECK(strstr(cuc_errmsg(), "chunk count 2") && strstr(cuc_errmsg(), "1 fds"));
    /* two chunks, three fds */
    EXPECT_RAW(1, good, good_len, 3, 3, 3, CUC_E_BADMSG);
    /* no fd at all: the shape wants at least one */
    EXPECT_RAW(1, good, good_len, 0, 0, 0, CUC_E_BADMSG);
    /* header and arrivals disagree */
    EXPECT_RAW(1, good, good_len, CHUNKS, CHUNKS, 1, CUC_E_BADMSG);
    EXPECT_RAW(1, good, good_len, CHUNKS, 3, 3, CUC_E_BADMSG);
    /* one chunk claimed, two fds, payload shortened to match one chunk */
    memcpy(p, good, good_len);
    cuc__put32(p + 4, 1);
    EXPECT_RAW(1, p, good_len - 8, CHUNKS, CHUNKS, CHUNKS, CUC_E_BADMSG);
}

static void test_enums_versions(void)
{
    EXPECT_U32(0, 0, CUC_E_BADMSG);
    CHECK(strstr(cuc_errmsg(), "handle type 0") != NULL);
    EXPECT_U32(0, 2, CUC_E_BADMSG); /* fabric: not in version 1 */
    EXPECT_U32(0, 0xffffffffu, CUC_E_BADMSG);
    EXPECT_U32(12, 1, CUC_E_BADMSG); /* reserved */
    EXPECT_U32(16, 0, CUC_E_BADMSG);
    {
        uint8_t p[CUC__VMM_PAYLOAD_MAX];
        memcpy(p, good, good_len);
        cuc__put64(p + 16, 0);
        EXPECT_RAW(1, p, good_len, CHUNKS, CHUNKS, CHUNKS, CUC_E_BADMSG);
        CHECK(strstr(cuc_errmsg(), "lease id 0") != NULL);
    }
    EXPECT_RAW(2, good, good_len, CHUNKS, CHUNKS, CHUNKS, CUC_E_VERSION);
    EXPECT_RAW(0xffff, good, good_len, CHUNKS, CHUNKS, CHUNKS, CUC_E_VERSION);
    EXPECT_RAW(0, good, good_len, CHUNKS, CHUNKS, CHUNKS, CUC_E_BADMSG);
}

static void test_sizes(void)
{
    EXPECT_SIZES(0, 2 * gran, CUC_E_BADMSG);
    EXPECT_SIZES(gran, 0, CUC_E_BADMSG);
    EXPECT_SIZES(UINT64_MAX, gran, CUC_E_BADMSG);
    EXPECT_SIZES((uint64_t)1 << 63, (uint64_t)1 << 63, CUC_E_BADMSG); /* wraps to 0 */
    EXPECT_SIZES(CUC_VMM_MAX_BYTES, gran, CUC_E_BADMSG);
    EXPECT_SIZES(0xffffffffu, 2 * gran, CUC_E_BADMSG); /* not a granularity multiple */
    CHECK(strstr(cuc_errmsg(), "granularity") != NULL);
    EXPECT_SIZES(gran + 4096, 2 * gran, CUC_E_BADMSG);
    /* multiples, but not what the fds hold: the driver refuses the map */
    EXPECT_SIZES(2 * gran, 2 * gran, CUC_E_NOT_SUPPORTED);
    EXPECT_SIZES(gran, gran, CUC_E_NOT_SUPPORTED);
    EXPECT_SIZES(2 * gran, gran, CUC_E_NOT_SUPPORTED); /* the fds' order swapped */
    CHECK(strstr(cuc_errmsg(), "chunk 0") != NULL);
}

/* fds that are not VMM allocations. */
static void test_foreign_fds(void)
{
    static uint8_t b[24 + 16 + CUC__VMM_PAYLOAD_MAX];
    size_t n = build(b, 1, good, good_len, CHUNKS, CHUNKS);
    int kinds, fds[CHUNKS], p[2];
    cuc_vmm *v;

    for (kinds = 0; kinds < 3; kinds++) {
        int rc;
        dup_fds(fds, CHUNKS);
        close(fds[1]);
        if (kinds == 0) {
            fds[1] = open("/dev/null", O_RDONLY | O_CLOEXEC);
        } else if (kinds == 1) {
            CHECK(pipe2(p, O_CLOEXEC) == 0);
            close(p[1]);
            fds[1] = p[0];
        } else {
            fds[1] = memfd_create("not-vmm", MFD_CLOEXEC);
            CHECK(fds[1] >= 0 && ftruncate(fds[1], (off_t)(2 * gran + 4096)) == 0);
        }
        CHECK(fds[1] >= 0);
        rc = decode_get(b, n, fds, CHUNKS, &v);
        CHECK(rc < 0);
        if (test_on_sim())
            CHECK_RC(rc, CUC_E_DRIVER);
        CHECK(strstr(cuc_errmsg(), "cuMemImportFromShareableHandle") &&
              strstr(cuc_errmsg(), "chunk 1"));
        no_leftovers(__LINE__);
    }
}

/* 1 if the kernel answers kcmp(KCMP_FILE) for this process. */
static int kcmp_works(void)
{
    int p[2], d, ok;
    pid_t self = getpid();

    CHECK(pipe2(p, O_CLOEXEC) == 0);
    d = fcntl(p[0], F_DUPFD_CLOEXEC, 0);
    ok = syscall(SYS_kcmp, self, self, KCMP_FILE, p[0], d) == 0 &&
         syscall(SYS_kcmp, self, self, KCMP_FILE, p[0], p[1]) > 0;
    close(d);
    close(p[0]);
    close(p[1]);
    return ok;
}

/* One chunk's fd twice: it would be mapped at two
 * offsets of one range. Refused, naming the chunks, for the same fd sent
 * twice (dups of one open file) and, where the fd is a regular file (the
 * sim's memfds), for another open of the same file. */
static void test_duplicate_chunk(void)
{
    static uint8_t b[24 + 16 + CUC__VMM_PAYLOAD_MAX];
    uint8_t p[CUC__VMM_PAYLOAD_MAX];
    int fds[CHUNKS];
    cuc_vmm *v;
    size_t n;

    memcpy(p, good, good_len);
    cuc__put64(p + sizes_at() + 8, gran); /* both chunks as big as chunk 0 */
    n = build(b, 1, p, good_len, CHUNKS, CHUNKS);
    for (int i = 0; i < CHUNKS; i++) {
        fds[i] = fcntl(src_fds[0], F_DUPFD_CLOEXEC, 0);
        CHECK(fds[i] >= 0);
    }
    if (test_on_sim() || kcmp_works()) {
        CHECK_RC(decode_get(b, n, fds, CHUNKS, &v), CUC_E_BADMSG);
        CHECK_ERRMSG("chunks 0 and 1 are the same allocation");
    } else {
        /* the driver's fds are not regular files and the kernel refuses
         * kcmp here: one open file sent twice cannot be told */
        printf("duplicate chunk fd: kcmp refused here, not checked\n");
        for (int i = 0; i < CHUNKS; i++)
            close(fds[i]);
    }
    no_leftovers(__LINE__);
    if (test_on_sim()) {
        char path[64];
        snprintf(path, sizeof(path), "/proc/self/fd/%d", src_fds[0]);
        fds[0] = fcntl(src_fds[0], F_DUPFD_CLOEXEC, 0);
        fds[1] = open(path, O_RDWR | O_CLOEXEC);
        CHECK(fds[0] >= 0 && fds[1] >= 0);
        CHECK_RC(decode_get(b, n, fds, CHUNKS, &v), CUC_E_BADMSG);
        CHECK_ERRMSG("chunks 0 and 1 are the same allocation");
        no_leftovers(__LINE__);
    }
    /* two distinct chunks of the same size still import */
    {
        size_t sizes[CHUNKS] = {gran, gran};
        cuc_vmm *two;
        cuc_msg *m;
        CHECK_OK(cuc_vmm_create(dev0, NULL, 0, sizes, CHUNKS, &two));
        CHECK_OK(cuc_msg_create(&m));
        CHECK_OK(cuc_msg_add_vmm(m, two));
        for (int i = 0; i < CHUNKS; i++)
            CHECK_OK(cuc__msg_take_record_fd(m, 0, (uint32_t)i, &fds[i]));
        {
            struct cuc__record r;
            CHECK_OK(cuc__msg_record(m, 0, &r));
            n = build(b, 1, r.payload, r.len, CHUNKS, CHUNKS);
        }
        cuc_msg_destroy(m);
        CHECK_OK(decode_get(b, n, fds, CHUNKS, &v));
        cuc_vmm_unref(v);
        cuc_vmm_unref(two);
    }
}

static void put_uuid(uint8_t *p, uint8_t fill)
{
    memset(p, fill, 16);
}

static void test_uuids(void)
{
    uint8_t p[CUC__VMM_PAYLOAD_MAX], q[CUC__VMM_PAYLOAD_MAX];
    uint32_t len = CUC__VMM_FIXED + 2 * 16 + 8 * CHUNKS;
    char text[CUC_UUID_STRLEN];
    cuc_uuid u;

    /* two peers, forged: both the same, or one the owner */
    memcpy(p, good, 24 + 16);
    cuc__put32(p + 8, 2);
    put_uuid(p + 40, 0xab);
    put_uuid(p + 56, 0xab);
    cuc__put64(p + 72, gran);
    cuc__put64(p + 80, 2 * gran);
    EXPECT_RAW(1, p, len, CHUNKS, CHUNKS, CHUNKS, CUC_E_BADMSG);
    CHECK(strstr(cuc_errmsg(), "peers 0 and 1") != NULL);
    memcpy(p + 56, cuc_device_uuid(dev0)->bytes, 16);
    EXPECT_RAW(1, p, len, CHUNKS, CHUNKS, CHUNKS, CUC_E_BADMSG);
    CHECK(strstr(cuc_errmsg(), "is the owner") != NULL);

    /* a peer nobody here sees: refused, named, the visible devices listed */
    put_uuid(p + 56, 0xcd);
    memcpy(u.bytes, p + 40, 16);
    cuc_uuid_format(&u, text);
    EXPECT_RAW(1, p, len, CHUNKS, CHUNKS, CHUNKS, CUC_E_NOT_VISIBLE);
    CHECK(strstr(cuc_errmsg(), "peer 0") && strstr(cuc_errmsg(), text));
    CHECK(strstr(cuc_errmsg(), cuc_device_uuid_string(dev0)) != NULL);

    /* the owner nobody here sees */
    memcpy(q, good, good_len);
    put_uuid(q + 24, 0xef);
    memcpy(u.bytes, q + 24, 16);
    cuc_uuid_format(&u, text);
    EXPECT_RAW(1, q, good_len, CHUNKS, CHUNKS, CHUNKS, CUC_E_NOT_VISIBLE);
    CHECK(strstr(cuc_errmsg(), "owner") && strstr(cuc_errmsg(), text));
    CHECK(strstr(cuc_errmsg(), "visible devices") && strstr(cuc_errmsg(), cuc_device_uuid_string(dev0)));
}

int main(void)
{
    int n;

    CHECK_OK(cuc_device_count(&n));
    CHECK_OK(cuc_device_get(0, &dev0));
    if (n >= 2)
        CHECK_OK(cuc_device_get(1, &dev1));
    CHECK_OK(cuc_vmm_granularity(dev0, &gran));
    if (dev1)
        CHECK_OK(cuc_device_set_current(dev1));
    CHECK_OK(cuc_device_set_current(dev0));
    vmm_t_warm_up(dev0);
    setup();
    FD_BASELINE();
    base_maps = vmm_t_sim_maps(0, 0);
    test_round_trip();
    test_good_raw();
    test_truncated();
    test_lying_lengths();
    test_fd_count_mismatch();
    test_enums_versions();
    test_duplicate_chunk();
    test_sizes();
    test_foreign_fds();
    test_uuids();
    for (int i = 0; i < CHUNKS; i++)
        close(src_fds[i]);
    cuc_vmm_unref(src);
    CHECK(cuc__vmm_live() == 0);
    return test_finish();
}
