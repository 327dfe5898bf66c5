/* Kernels by reference over a channel (docs/wire-format.md, "Kernels by
 * reference"):
 *  - in one process: the receiver's get sends a kernel held record once
 *    per image and channel; the sender's receive takes it (never returned
 *    to the application) and the next send of that kernel carries a
 *    kernel ref record of 54 bytes, resolved from the cache; the
 *    application's message keeps its image (plain bytes and other
 *    channels still get it);
 *  - hostile: a ref to an image the receiver does not hold is
 *    CUC_E_NOT_FOUND naming the full hash; kernel held records mixed with
 *    other records or with a bad kind are dropped with CUC_E_BADMSG and
 *    the channel goes on; 5000 held records note at most 4096 images;
 *  - an exec'd child (reversed visibility): the first send loads the image
 *    there, the second is a ref that loads nothing, the image stays loaded
 *    in the child after its kernels are destroyed (kept for the channel),
 *    and a forged ref is refused; no fd leaked on either side. */
#include "cucore.h"
#include "check.h"
#include "devices_test.h"
#include "ptx_kernels.h"
#include "base/hex.h"
#include "base/sha256.h"
#include "channel/channel.h"
#include "wire/records.h"
#include "channel_test.h"

#define RECV_MS 30000

static cuc_msg *recv_msg(cuc_channel *ch)
{
    cuc_msg *m = NULL;

    CHECK_OK(cuc_channel_recv(ch, RECV_MS, &m));
    return m;
}

static cuc_msg *kernel_msg(const cuc_kernel *k)
{
    cuc_msg *m;

    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_kernel(m, k));
    return m;
}

static int type_of(const cuc_msg *m, size_t i)
{
    int t = -1;

    CHECK_OK(cuc_msg_record_type(m, i, &t));
    return t;
}

static void test_in_process(void)
{
    size_t n = strlen(ptx_twice), loads0, hits0, loads, hits;
    struct cuc_kernel_record rec;
    cuc_channel *a, *b, *c, *d;
    cuc_kernel *k, *got, *again;
    cuc_msg *m, *r;
    void *bytes;
    size_t len;

    CHECK_OK(cuc_kernel_load(CUC_IMAGE_PTX, ptx_twice, n, "twice", &k));
    CHECK_OK(cuc_channel_pair(&a, &b));
    m = kernel_msg(k);

    /* first send: the image travels; b's get says it holds it, once */
    CHECK_OK(cuc_channel_send(a, m));
    r = recv_msg(b);
    CHECK(type_of(r, 0) == CUC_RECORD_KERNEL && cuc_msg_wire_size(r) > n);
    CHECK_OK(cuc_msg_get_kernel(r, 0, &got));
    CHECK_OK(cuc_msg_get_kernel(r, 0, &again)); /* kept already: no second held */
    cuc_kernel_destroy(again);
    cuc_kernel_destroy(got);
    cuc_msg_destroy(r);
    CHECK(cuc__kernel_refs_count(&a->krefs) == 0); /* a has not received yet */
    ct_send_empty(b);
    r = recv_msg(a); /* the held message is taken on the way */
    CHECK(cuc_msg_record_count(r) == 0);
    cuc_msg_destroy(r);
    CHECK(cuc__kernel_refs_count(&a->krefs) == 1);
    CHECK_RC(cuc_channel_pump(a, 0), CUC_E_TIMEOUT); /* only one held was sent */

    /* second send: a ref, resolved from the cache */
    CHECK_OK(cuc_channel_send(a, m));
    CHECK(type_of(m, 0) == CUC_RECORD_KERNEL); /* the application's message unchanged */
    r = recv_msg(b);
    CHECK(type_of(r, 0) == CUC_RECORD_KERNEL_REF);
    CHECK(cuc_msg_wire_size(r) == 24 + 16 + 56); /* 54 bytes padded to 56 */
    CHECK_OK(cuc_msg_read_kernel(r, 0, &rec));
    CHECK(rec.image == NULL && rec.image_len == n && !strcmp(rec.name, "twice"));
    CHECK(rec.kind == CUC_IMAGE_PTX && !memcmp(rec.hash, cuc_kernel_hash(k), 32));
    cuc_kernel_cache_stats(&loads0, &hits0);
    CHECK_OK(cuc_msg_get_kernel(r, 0, &got));
    cuc_kernel_cache_stats(&loads, &hits);
    CHECK(loads == loads0 && hits == hits0 + 1);
    CHECK(cuc_kernel_handle(got) == cuc_kernel_handle(k));
    cuc_kernel_destroy(got);
    cuc_msg_destroy(r);

    /* plain bytes and another channel still carry the image */
    CHECK_OK(cuc_msg_to_bytes(m, &bytes, &len));
    CHECK(len > n);
    free(bytes);
    CHECK_OK(cuc_channel_pair(&c, &d));
    CHECK_OK(cuc_channel_send(c, m));
    r = recv_msg(d);
    CHECK(type_of(r, 0) == CUC_RECORD_KERNEL);
    cuc_msg_destroy(r);
    cuc_channel_destroy(c);
    cuc_channel_destroy(d);

    /* a message of a kernel and a device: only the kernel becomes a ref */
    CHECK_OK(cuc_msg_add_device(m, devs[0]));
    CHECK_OK(cuc_channel_send(a, m));
    r = recv_msg(b);
    CHECK(type_of(r, 0) == CUC_RECORD_KERNEL_REF && type_of(r, 1) == CUC_RECORD_DEVICE);
    {
        cuc_device *dev;
        CHECK_OK(cuc_msg_get_device(r, 1, &dev));
        CHECK(dev == devs[0]);
    }
    cuc_msg_destroy(r);
    cuc_msg_destroy(m);
    cuc_channel_destroy(a);
    cuc_channel_destroy(b);
    cuc_kernel_destroy(k);
}

/* A message of one kernel ref naming hash (and n bytes). */
static cuc_msg *ref_msg(const uint8_t hash[32], size_t n)
{
    struct cuc_kernel_record rec;
    cuc_msg *m;

    rec.kind = CUC_IMAGE_PTX;
    memcpy(rec.hash, hash, 32);
    rec.name = "twice";
    rec.image = NULL;
    rec.image_len = n;
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc__kernel_ref_rec_put(m, &rec));
    return m;
}

static void test_hostile(void)
{
    struct cuc__kernel_id id = {CUC_IMAGE_PTX, 100, {0}};
    char hex[65], want[128];
    uint8_t hash[32];
    cuc_channel *a, *b;
    cuc_kernel *k = (cuc_kernel *)0x1;
    cuc_msg *m, *r;
    void *bytes;
    size_t len;

    /* a ref to an image nobody loaded */
    for (int i = 0; i < 32; i++)
        hash[i] = (uint8_t)(0xa0 + i);
    m = ref_msg(hash, 551);
    CHECK_OK(cuc_msg_to_bytes(m, &bytes, &len));
    cuc_msg_destroy(m);
    CHECK_OK(cuc_msg_from_bytes(bytes, len, &r));
    free(bytes);
    CHECK_RC(cuc_msg_get_kernel(r, 0, &k), CUC_E_NOT_FOUND);
    CHECK(k == (cuc_kernel *)0x1);
    cuc__hex(hash, 32, hex);
    snprintf(want, sizeof(want), "sha256 %s", hex);
    CHECK_ERRMSG(want);
    CHECK_ERRMSG("551-byte PTX image");
    cuc_msg_destroy(r);

    CHECK_OK(cuc_channel_pair(&a, &b));
    /* held mixed with another record: dropped, the channel goes on */
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc__kernel_held_rec_put(m, &id));
    CHECK_OK(cuc_msg_add_device(m, devs[0]));
    CHECK_OK(cuc_channel_send(b, m));
    cuc_msg_destroy(m);
    CHECK_RC(cuc_channel_recv(a, RECV_MS, &r), CUC_E_BADMSG);
    CHECK_ERRMSG("kernel held");
    /* a bad kind in the second of two: none noted */
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc__kernel_held_rec_put(m, &id));
    id.kind = 7;
    CHECK_OK(cuc__kernel_held_rec_put(m, &id));
    id.kind = CUC_IMAGE_PTX;
    CHECK_OK(cuc_channel_send(b, m));
    cuc_msg_destroy(m);
    CHECK_RC(cuc_channel_recv(a, RECV_MS, &r), CUC_E_BADMSG);
    CHECK_ERRMSG("image kind 7");
    CHECK(cuc__kernel_refs_count(&a->krefs) == 0);
    /* image_len 0 */
    CHECK_OK(cuc_msg_create(&m));
    id.image_len = 0;
    CHECK_OK(cuc__kernel_held_rec_put(m, &id));
    id.image_len = 100;
    CHECK_OK(cuc_channel_send(b, m));
    cuc_msg_destroy(m);
    CHECK_RC(cuc_channel_recv(a, RECV_MS, &r), CUC_E_BADMSG);
    /* 5000 distinct images (5 messages, each taken before the next fills
     * the socket): 4096 noted, the rest ignored */
    for (uint32_t i = 0; i < 5000; i++) {
        if (i % 1000 == 0)
            CHECK_OK(cuc_msg_create(&m));
        cuc__put32(id.hash, i);
        CHECK_OK(cuc__kernel_held_rec_put(m, &id));
        if (i % 1000 == 999) {
            CHECK_OK(cuc_channel_send(b, m));
            cuc_msg_destroy(m);
            CHECK_OK(cuc_channel_pump(a, RECV_MS));
        }
    }
    CHECK_RC(cuc_channel_recv(a, 0, &r), CUC_E_TIMEOUT); /* none reached the queue */
    CHECK(cuc__kernel_refs_count(&a->krefs) == CUC__KERNEL_REFS_MAX);
    cuc_channel_destroy(a);
    cuc_channel_destroy(b);
}

/* ---- across processes ---- */

/* Receives a message, gets the kernel of its record 0 and prints "STEP
 * type=T loads=L hits=H rc=RC [message]" (the parent reads the pipe), then
 * destroys the kernel and answers with an empty message. */
static void child_report(cuc_channel *ch, const char *step)
{
    size_t loads, hits;
    cuc_kernel *k = NULL;
    cuc_msg *m = recv_msg(ch);
    int rc = cuc_msg_get_kernel(m, 0, &k);

    cuc_kernel_cache_stats(&loads, &hits);
    printf("%s type=%d loads=%zu hits=%zu rc=%s%s%s\n", step, type_of(m, 0), loads, hits,
           cuc_errname(rc), rc ? " " : "", rc ? cuc_errmsg() : "");
    fflush(stdout);
    cuc_kernel_destroy(k);
    cuc_msg_destroy(m);
    ct_send_empty(ch);
}

static int child_refs(void)
{
    cuc_channel *ch = ct_child_channel();

    child_report(ch, "first");  /* loads 1: its kernel destroyed at once */
    child_report(ch, "second"); /* a ref: the channel kept the image */
    child_report(ch, "forged"); /* a ref to what the child never had */
    cuc_channel_destroy(ch);
    return test_finish();
}

static void test_child(void)
{
    char cvd[64], out[2048], want[512], hex[65];
    const char *envs[2] = {cvd, NULL};
    size_t n = strlen(ptx_twice);
    cuc_channel *mine, *theirs;
    uint8_t hash[32] = {0};
    cuc_kernel *k;
    cuc_msg *m, *r;
    int p[2], st;
    pid_t pid;
    ssize_t got;
    size_t len = 0;

    /* reversed visibility: the child's device 0 is our last */
    snprintf(cvd, sizeof(cvd), "CUDA_VISIBLE_DEVICES=%s", n_dev > 1 ? "3,2,1,0" : "0");
    if (n_dev != 4 && n_dev > 1)
        snprintf(cvd, sizeof(cvd), "CUDA_VISIBLE_DEVICES=%d,0", n_dev - 1);
    CHECK_OK(cuc_kernel_load(CUC_IMAGE_PTX, ptx_twice, n, "twice", &k));
    CHECK_OK(cuc_channel_pair(&mine, &theirs));
    CHECK(pipe(p) == 0);
    fflush(stdout);
    pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        const char *argv[32];
        char fdbuf[32];
        int fl;
        dup2(p[1], 1);
        close(p[0]);
        close(p[1]);
        test_apply_env(envs);
        snprintf(fdbuf, sizeof(fdbuf), "%d", cuc_channel_fd(theirs));
        setenv("CUC_TEST_FD", fdbuf, 1);
        fl = fcntl(cuc_channel_fd(theirs), F_GETFD);
        fcntl(cuc_channel_fd(theirs), F_SETFD, fl & ~FD_CLOEXEC);
        child_argv("refs", NULL, argv);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(p[1]);
    cuc_channel_destroy(theirs);

    m = kernel_msg(k);
    for (int round = 0; round < 2; round++) {
        CHECK_OK(cuc_channel_send(mine, m));
        r = recv_msg(mine); /* the child's held arrives before its empty message */
        CHECK(cuc_msg_record_count(r) == 0);
        cuc_msg_destroy(r);
        CHECK(cuc__kernel_refs_count(&mine->krefs) == 1);
    }
    cuc_msg_destroy(m);
    for (int i = 0; i < 32; i++)
        hash[i] = (uint8_t)(0x11 * i);
    m = ref_msg(hash, n);
    CHECK_OK(cuc_channel_send(mine, m));
    cuc_msg_destroy(m);
    r = recv_msg(mine);
    cuc_msg_destroy(r);
    cuc_channel_destroy(mine);
    while ((got = read(p[0], out + len, sizeof(out) - 1 - len)) > 0)
        len += (size_t)got;
    out[len] = '\0';
    close(p[0]);
    st = wait_child(pid);
    CHECK(st == 0);
    cuc__hex(hash, 32, hex);
    snprintf(want, sizeof(want),
             "first type=%d loads=1 hits=0 rc=CUC_E_OK\n"
             "second type=%d loads=1 hits=1 rc=CUC_E_OK\n"
             "forged type=%d loads=1 hits=1 rc=CUC_E_NOT_FOUND ",
             CUC_RECORD_KERNEL, CUC_RECORD_KERNEL_REF, CUC_RECORD_KERNEL_REF);
    if (strncmp(out, want, strlen(want)) != 0 || !strstr(out, hex)) {
        fprintf(stderr, "child said:\n%s\nwanted:\n%s... sha256 %s\n", out, want, hex);
        CHECK(0);
    }
    cuc_kernel_destroy(k);
}

int main(int argc, char **argv)
{
    if (argc >= 3 && !strcmp(argv[1], "--child")) {
        if (!strcmp(argv[2], "refs"))
            return child_refs();
        return 2;
    }
    unsetenv("CUDA_VISIBLE_DEVICES");
    open_all();
    FD_BASELINE();
    test_in_process();
    test_hostile();
    test_child();
    FD_CHECK_NO_LEAK();
    return test_finish();
}
