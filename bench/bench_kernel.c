/* Kernel send: the first time a receiver gets a kernel, and again (the same
 * image, a cache hit), each beside the raw driver calls doing the same work.
 *
 *   encode      sender: message create, add the kernel record (the image is
 *               copied in), encode, destroy. Raw: malloc + memcpy of the
 *               image, the least any protocol does to send one.
 *   first time  receiver with an empty cache: decode the bytes, get the
 *               kernel (its shape checked, cuLibraryLoadData,
 *               cuLibraryGetKernel and, for an image of 128 KiB or more,
 *               cuKernelGetFunction in the current context, while another
 *               thread checks its SHA-256), cuKernelGetFunction in the current
 *               context (with lazy loading, where the module really loads),
 *               destroy (the last kernel of the image: cuLibraryUnload).
 *               Raw: cuLibraryLoadData + cuLibraryGetKernel +
 *               cuKernelGetFunction + cuLibraryUnload; the note gives
 *               the first three's times (a loop of their own).
 *   again       receiver that holds a kernel of that image: decode, get
 *               (found in the cache by the record's hash: no load, no
 *               image byte read),
 *               cuKernelGetFunction, destroy (the image stays loaded). Raw:
 *               cuLibraryGetKernel + cuKernelGetFunction on a library the
 *               program keeps.
 *   by reference over a channel   sender and receiver on a channel pair
 *               (one process: the bench's threads are not needed, the
 *               socket buffers one message), after the receiver said it
 *               holds the image: cuc_channel_send of the kernel's message
 *               (a kernel ref record goes out, 54 bytes + the name),
 *               cuc_channel_recv, get (from the cache: no image byte, no
 *               hash), cuKernelGetFunction, destroy. Raw: the hash and name
 *               (32 + 6 bytes) through a SOCK_SEQPACKET pair, then
 *               cuLibraryGetKernel + cuKernelGetFunction on a library the
 *               program keeps.
 * Each for the 0.6 KB PTX of the tests and a 1 MiB one (the same kernel
 * padded with comment lines, as large as a mid-sized cubin). The image
 * loads are counted (cuc_kernel_cache_stats): the first-time loop must load
 * once per iteration, the again loop never; the bench fails otherwise.
 *
 *   build/bench/bench_kernel [FIRST_ITERS [AGAIN_ITERS]]   (defaults 2000 20000;
 *                                           the 1 MiB image gets a tenth and a hundredth)
 *   CUCORE_DRIVER=sim build/bench/bench_kernel
 * On a GPU the first time includes the driver's JIT of the PTX, which its
 * disk cache shortens on repeated loads (CUDA_CACHE_DISABLE=1: cold).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bench_ipc.h"
#include "bench_report.h"
#include "cucore.h"
#include "ptx_kernels.h"

#define BIG_IMAGE (1u << 20)

static const struct cuc__driver *drv;

/* ptx_twice followed by "// ..." lines up to about `size` bytes. */
static char *padded_ptx(size_t size)
{
    static const char line[] = "// padding: a comment line the PTX parser skips ........\n";
    size_t base = strlen(ptx_twice), n = base;
    char *p = malloc(size + sizeof(line));

    if (!p)
        bench_ok(CUC_E_NOMEM, "padded image");
    memcpy(p, ptx_twice, base);
    while (n + sizeof(line) - 1 < size) {
        memcpy(p + n, line, sizeof(line) - 1);
        n += sizeof(line) - 1;
    }
    p[n] = '\0';
    return p;
}

/* The bytes a sender puts on the wire for k. */
static uint8_t *encode(const cuc_kernel *k, size_t *len)
{
    void *bytes = NULL;
    cuc_msg *m;
    int rc = cuc_msg_create(&m);

    if (rc == 0)
        rc = cuc_msg_add_kernel(m, k);
    if (rc == 0)
        rc = cuc_msg_to_bytes(m, &bytes, len);
    cuc_msg_destroy(m);
    if (rc)
        bench_ok(rc, "encode");
    return bytes;
}

/* Receiver: decode, get the kernel, its function here, destroy. */
static void receive(const uint8_t *bytes, size_t len)
{
    cuc_kernel *k = NULL;
    CUfunction f;
    cuc_msg *m;
    int rc = cuc_msg_from_bytes(bytes, len, &m);

    if (rc == 0)
        rc = cuc_msg_get_kernel(m, 0, &k);
    cuc_msg_destroy(m);
    if (rc)
        bench_ok(rc, "decode + get kernel");
    bench_cu(drv->cuKernelGetFunction(&f, (CUkernel)cuc_kernel_handle(k)), "cuKernelGetFunction");
    cuc_kernel_destroy(k);
}

/* Where a raw first load's time goes (ns each, in a loop of its own, so
 * that the clock reads stay out of the raw figure): the driver may parse
 * or JIT a PTX image at any of the three calls (lazy loading); cucore
 * hides its SHA-256 behind all three. */
struct raw_split {
    double load, get, func;
};

static void raw_first_timed(const char *image, struct raw_split *t)
{
    double t0, t1, t2, t3;
    CUlibrary lib;
    CUkernel k;
    CUfunction f;

    t0 = bench_now_ns();
    bench_cu(drv->cuLibraryLoadData(&lib, image, NULL, NULL, 0, NULL, NULL, 0),
             "cuLibraryLoadData");
    t1 = bench_now_ns();
    bench_cu(drv->cuLibraryGetKernel(&k, lib, "twice"), "cuLibraryGetKernel");
    t2 = bench_now_ns();
    bench_cu(drv->cuKernelGetFunction(&f, k), "cuKernelGetFunction");
    t3 = bench_now_ns();
    bench_cu(drv->cuLibraryUnload(lib), "cuLibraryUnload");
    t->load += t1 - t0;
    t->get += t2 - t1;
    t->func += t3 - t2;
}

static void raw_first(const char *image)
{
    CUlibrary lib;
    CUkernel k;
    CUfunction f;

    bench_cu(drv->cuLibraryLoadData(&lib, image, NULL, NULL, 0, NULL, NULL, 0),
          "cuLibraryLoadData");
    bench_cu(drv->cuLibraryGetKernel(&k, lib, "twice"), "cuLibraryGetKernel");
    bench_cu(drv->cuKernelGetFunction(&f, k), "cuKernelGetFunction");
    bench_cu(drv->cuLibraryUnload(lib), "cuLibraryUnload");
}

/* Receives one message on ch and gets its kernel; checks it is a ref. */
static void receive_on(cuc_channel *ch, int want_type)
{
    cuc_kernel *k = NULL;
    CUfunction f;
    cuc_msg *m;
    int rc = cuc_channel_recv(ch, 10000, &m), type = -1;

    if (rc == 0)
        rc = cuc_msg_record_type(m, 0, &type);
    if (rc == 0 && type != want_type) {
        fprintf(stderr, "bench_kernel: record type %d arrived, %d expected\n", type,
                want_type);
        exit(1);
    }
    if (rc == 0)
        rc = cuc_msg_get_kernel(m, 0, &k);
    cuc_msg_destroy(m);
    if (rc)
        bench_ok(rc, "receive a kernel on a channel");
    bench_cu(drv->cuKernelGetFunction(&f, (CUkernel)cuc_kernel_handle(k)), "cuKernelGetFunction");
    cuc_kernel_destroy(k);
}

struct sender {
    cuc_channel *ch;
    const cuc_msg *m;
    int rc;
};

static void *send_thread(void *arg)
{
    struct sender *s = arg;

    s->rc = cuc_channel_send(s->ch, s->m);
    return NULL;
}

static void bench_by_ref(const char *label, const char *image, cuc_kernel *held,
                         long iters)
{
    uint8_t id[64] = {0}, got[64];
    double t0, raw_ns, cuc_ns;
    size_t loads0, loads;
    cuc_channel *a, *b;
    CUlibrary lib;
    char name[96];
    cuc_msg *m, *empty;
    int sv[2], rc;

    /* raw: hash + name through a socket, the program's own library */
    if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv) < 0)
        bench_ok(CUC_E_IO, "socketpair");
    bench_cu(drv->cuLibraryLoadData(&lib, image, NULL, NULL, 0, NULL, NULL, 0),
             "cuLibraryLoadData");
    memcpy(id, cuc_kernel_hash(held), 32);
    memcpy(id + 32, "twice", 6);
    t0 = bench_now_ns();
    for (long i = 0; i < iters; i++) {
        CUkernel k;
        CUfunction f;
        if (send(sv[0], id, 38, 0) != 38 || recv(sv[1], got, sizeof(got), 0) != 38)
            bench_ok(CUC_E_IO, "raw send");
        bench_cu(drv->cuLibraryGetKernel(&k, lib, (const char *)got + 32),
                 "cuLibraryGetKernel");
        bench_cu(drv->cuKernelGetFunction(&f, k), "cuKernelGetFunction");
    }
    raw_ns = (bench_now_ns() - t0) / (double)iters;
    bench_cu(drv->cuLibraryUnload(lib), "cuLibraryUnload");
    close(sv[0]);
    close(sv[1]);

    rc = cuc_channel_pair(&a, &b);
    if (rc == 0)
        rc = cuc_msg_create(&m);
    if (rc == 0)
        rc = cuc_msg_add_kernel(m, held);
    if (rc == 0)
        rc = cuc_msg_create(&empty);
    if (rc)
        bench_ok(rc, "channel pair");
    /* the first send carries the image (from a thread: a 1 MiB message
     * does not fit the socket); the receiver says it holds it */
    {
        struct sender s = {a, m, 0};
        pthread_t t;
        if (pthread_create(&t, NULL, send_thread, &s))
            bench_ok(CUC_E_NOMEM, "pthread_create");
        receive_on(b, CUC_RECORD_KERNEL);
        pthread_join(t, NULL);
        bench_ok(s.rc, "send");
    }
    bench_ok(cuc_channel_send(b, empty), "send");
    {
        cuc_msg *r;
        bench_ok(cuc_channel_recv(a, 10000, &r), "recv"); /* takes the held record */
        cuc_msg_destroy(r);
    }
    cuc_kernel_cache_stats(&loads0, NULL);
    t0 = bench_now_ns();
    for (long i = 0; i < iters; i++) {
        bench_ok(cuc_channel_send(a, m), "send");
        receive_on(b, CUC_RECORD_KERNEL_REF);
    }
    cuc_ns = (bench_now_ns() - t0) / (double)iters;
    cuc_kernel_cache_stats(&loads, NULL);
    snprintf(name, sizeof(name), "kernel by reference on a channel, %s", label);
    bench_line(name, raw_ns, cuc_ns, "%ld iterations, send + recv + get; image loads +%zu; "
               "raw: hash + name on a socket, cuLibraryGetKernel", iters, loads - loads0);
    if (loads != loads0) {
        fprintf(stderr, "bench_kernel: a kernel ref loaded the image\n");
        exit(1);
    }
    cuc_msg_destroy(m);
    cuc_msg_destroy(empty);
    cuc_channel_destroy(a);
    cuc_channel_destroy(b);
}

static void bench_image(const char *label, const char *image, long first_iters,
                        long again_iters)
{
    size_t img_len = strlen(image) + 1, len, loads0, hits0, loads, hits;
    struct raw_split split = {0, 0, 0};
    long split_iters;
    double t0, raw_ns, cuc_ns;
    cuc_kernel *held;
    CUlibrary lib;
    uint8_t *bytes;
    char name[96];
    int rc;

    rc = cuc_kernel_load(CUC_IMAGE_PTX, image, img_len, "twice", &held);
    if (rc)
        bench_ok(rc, "cuc_kernel_load");

    /* encode (the sender holds the kernel) */
    t0 = bench_now_ns();
    for (long i = 0; i < again_iters; i++) {
        char *copy = malloc(img_len);
        if (!copy)
            bench_ok(CUC_E_NOMEM, "malloc");
        memcpy(copy, image, img_len);
        __asm__ volatile("" : : "r"(copy) : "memory"); /* keep the copy */
        free(copy);
    }
    raw_ns = (bench_now_ns() - t0) / (double)again_iters;
    t0 = bench_now_ns();
    for (long i = 0; i < again_iters; i++)
        free(encode(held, &len));
    cuc_ns = (bench_now_ns() - t0) / (double)again_iters;
    snprintf(name, sizeof(name), "kernel encode, %s", label);
    bench_line(name, raw_ns, cuc_ns, "%ld iterations, %zu bytes on the wire; raw: memcpy",
               again_iters, len);

    bytes = encode(held, &len);

    /* again: the receiver holds a kernel of the image */
    bench_cu(drv->cuLibraryLoadData(&lib, image, NULL, NULL, 0, NULL, NULL, 0),
          "cuLibraryLoadData");
    t0 = bench_now_ns();
    for (long i = 0; i < again_iters; i++) {
        CUkernel k;
        CUfunction f;
        bench_cu(drv->cuLibraryGetKernel(&k, lib, "twice"), "cuLibraryGetKernel");
        bench_cu(drv->cuKernelGetFunction(&f, k), "cuKernelGetFunction");
    }
    raw_ns = (bench_now_ns() - t0) / (double)again_iters;
    bench_cu(drv->cuLibraryUnload(lib), "cuLibraryUnload");
    cuc_kernel_cache_stats(&loads0, &hits0);
    t0 = bench_now_ns();
    for (long i = 0; i < again_iters; i++)
        receive(bytes, len);
    cuc_ns = (bench_now_ns() - t0) / (double)again_iters;
    cuc_kernel_cache_stats(&loads, &hits);
    snprintf(name, sizeof(name), "kernel send again (cache hit), %s", label);
    bench_line(name, raw_ns, cuc_ns, "%ld iterations; image loads +%zu, cache hits +%zu",
               again_iters, loads - loads0, hits - hits0);
    if (loads != loads0 || hits - hits0 != (size_t)again_iters) {
        fprintf(stderr, "bench_kernel: a cache hit loaded the image again\n");
        exit(1);
    }

    bench_by_ref(label, image, held, again_iters);

    /* first time: nothing of the image is loaded in this process */
    cuc_kernel_destroy(held);
    split_iters = first_iters / 10 ? first_iters / 10 : 1;
    for (long i = 0; i < split_iters; i++)
        raw_first_timed(image, &split);
    t0 = bench_now_ns();
    for (long i = 0; i < first_iters; i++)
        raw_first(image);
    raw_ns = (bench_now_ns() - t0) / (double)first_iters;
    cuc_kernel_cache_stats(&loads0, &hits0);
    t0 = bench_now_ns();
    for (long i = 0; i < first_iters; i++)
        receive(bytes, len);
    cuc_ns = (bench_now_ns() - t0) / (double)first_iters;
    cuc_kernel_cache_stats(&loads, &hits);
    snprintf(name, sizeof(name), "kernel send first time, %s", label);
    bench_line(name, raw_ns, cuc_ns, "%ld iterations; image loads +%zu, cache hits +%zu; "
               "raw cuLibraryLoadData %.0f ns, cuLibraryGetKernel %.0f ns, "
               "cuKernelGetFunction %.0f ns", first_iters, loads - loads0, hits - hits0,
               split.load / (double)split_iters, split.get / (double)split_iters,
               split.func / (double)split_iters);
    if (loads - loads0 != (size_t)first_iters || hits != hits0) {
        fprintf(stderr, "bench_kernel: an empty cache did not load the image\n");
        exit(1);
    }
    free(bytes);
}

int main(int argc, char **argv)
{
    long first_iters = argc > 1 ? atol(argv[1]) : 2000;
    long again_iters = argc > 2 ? atol(argv[2]) : 20000;
    cuc_device *dev;
    char *big;
    int rc;

    bench_name = "bench_kernel";
    if (first_iters < 1 || again_iters < 1) {
        fprintf(stderr, "usage: bench_kernel [FIRST_ITERS [AGAIN_ITERS]]\n");
        return 2;
    }
    if (bench_header("bench_kernel"))
        return 1;
    rc = cuc__driver_get(&drv);
    if (rc == 0)
        rc = cuc_device_get(0, &dev);
    if (rc == 0) /* cuKernelGetFunction needs a current context */
        rc = cuc_device_set_current(dev);
    if (rc)
        bench_ok(rc, "device 0");
    bench_image("0.6 KB PTX", ptx_twice, first_iters, again_iters);
    big = padded_ptx(BIG_IMAGE);
    bench_image("1 MiB PTX", big, first_iters / 10 ? first_iters / 10 : 1,
                again_iters / 100 ? again_iters / 100 : 1);
    free(big);
    return 0;
}
