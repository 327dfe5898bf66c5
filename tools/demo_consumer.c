/* The consumer side of `cucore demo`: resolves what arrives, checks the
 * producer's data, launches the producer's kernel on the producer's
 * memory, and answers with the devices it resolved everything to. */
#include <stdlib.h>
#include <string.h>

#include "demo.h"

struct consumer {
    cuc_channel *ch;
    cuc_pool *pool; /* held until the end: its buffers find it by id */
    cuc_buffer *bufs[DEMO_BUFFERS];
    int nbufs;
    cuc_buffer *view; /* a part of the last buffer */
    int simulated;
};

/* Local ordinal and UUID of dev, for the step lines. */
static const char *where(const cuc_device *dev)
{
    static char s[96];
    snprintf(s, sizeof(s), "local ordinal %d = %s", cuc_device_ordinal(dev),
             cuc_device_uuid_string(dev));
    return s;
}

static int on_device(const cuc_msg *m, size_t i, cuc_device **dev)
{
    int rc = cuc_msg_get_device(m, i, dev);
    if (!rc)
        demo_say("consumer", "device record -> %s", where(*dev));
    return rc;
}

static int on_stream(const cuc_msg *m, size_t i, cuc_device **dev)
{
    cuc_stream *s;
    int rc = cuc_msg_get_stream(m, i, &s);

    if (rc)
        return rc;
    *dev = cuc_stream_device(s);
    demo_say("consumer", "stream record -> this process's %s of %s",
        cuc_stream_kind(s) == CUC_STREAM_LEGACY_DEFAULT ? "legacy default stream"
                                                        : "per-thread default stream",
        where(*dev));
    return 0;
}

static int on_pool(struct consumer *c, const cuc_msg *m, size_t i, cuc_device **dev)
{
    int rc;

    if (c->pool)
        return CUC_E_LIMIT;
    rc = cuc_msg_get_pool(m, i, &c->pool);
    if (rc)
        return rc;
    *dev = cuc_pool_device(c->pool);
    demo_say("consumer", "pool record -> imported (fd received) on %s", where(*dev));
    return 0;
}

static int on_event(const cuc_msg *m, size_t i, cuc_device **dev)
{
    cuc_event *ev;
    int rc = cuc_msg_get_event(m, i, &ev);

    if (rc)
        return rc;
    *dev = cuc_event_device(ev);
    rc = cuc_event_synchronize(ev);
    if (!rc)
        demo_say("consumer", "IPC event record -> opened on %s, waited on it",
                 where(*dev));
    cuc_event_unref(ev);
    return rc;
}

/* Reads the buffer back and compares every word with the pattern. */
static int check_words(cuc_buffer *b, int which)
{
    uint32_t *host = malloc(DEMO_BUFFER_BYTES);
    cuc_stream *s;
    size_t k, bad = 0;
    int rc;

    if (!host)
        return CUC_E_NOMEM;
    rc = cuc_stream_legacy(cuc_buffer_device(b), &s);
    if (!rc)
        rc = cuc_memcpy(host, cuc_buffer_ptr(b), DEMO_BUFFER_BYTES, s);
    for (k = 0; !rc && k < DEMO_WORDS; k++)
        bad += host[k] != demo_word(which, k);
    free(host);
    if (!rc && bad) {
        demo_say("consumer", "buffer %d: %zu of the words differ from what the producer wrote",
                 which, bad);
        rc = CUC_E_INVALID;
    }
    return rc;
}

static int on_buffer(struct consumer *c, const cuc_msg *m, size_t i, cuc_device **dev)
{
    cuc_buffer *b;
    char size[64];
    int rc;

    if (c->nbufs == DEMO_BUFFERS)
        return CUC_E_LIMIT;
    rc = cuc_msg_get_buffer(m, i, &b);
    if (rc)
        return rc;
    c->bufs[c->nbufs] = b;
    rc = check_words(b, c->nbufs++);
    *dev = cuc_buffer_device(b);
    snprintf(size, sizeof(size), "%zu KiB at %p", cuc_buffer_size(b) >> 10, cuc_buffer_ptr(b));
    if (!rc)
        demo_say("consumer", "buffer record -> mapped %s, every word as the producer wrote it (%s)",
            size, where(*dev));
    return rc;
}

/* A view of the last buffer's second half: its allocation is mapped here
 * already, so it resolves with no driver call, at the same memory. */
static int on_view(struct consumer *c, const cuc_msg *m, size_t i, cuc_device **dev)
{
    uint32_t *host = malloc(DEMO_BUFFER_BYTES / 2);
    size_t k0 = DEMO_WORDS / 2, bad = 0;
    cuc_buffer *last = c->nbufs == DEMO_BUFFERS ? c->bufs[DEMO_BUFFERS - 1] : NULL;
    cuc_stream *s;
    int rc = host && last && !c->view ? 0 : CUC_E_INVALID;

    if (!rc)
        rc = cuc_msg_get_buffer(m, i, &c->view);
    if (!rc)
        rc = cuc_stream_legacy(cuc_buffer_device(c->view), &s);
    if (!rc && (!cuc_buffer_is_view(c->view) || cuc_buffer_size(c->view) != DEMO_BUFFER_BYTES / 2 ||
                (char *)cuc_buffer_ptr(c->view) != (char *)cuc_buffer_ptr(last) + DEMO_BUFFER_BYTES / 2))
        rc = CUC_E_INVALID;
    if (!rc)
        rc = cuc_memcpy(host, cuc_buffer_ptr(c->view), DEMO_BUFFER_BYTES / 2, s);
    for (size_t k = 0; !rc && k < DEMO_WORDS / 2; k++)
        bad += host[k] != demo_word(DEMO_BUFFERS - 1, k0 + k);
    free(host);
    if (!rc && bad)
        rc = CUC_E_INVALID;
    if (!rc) {
        *dev = cuc_buffer_device(c->view);
        demo_say("consumer", "buffer view record -> the second half of buffer %d, inside "
                 "the allocation already mapped (no driver call), every word as written (%s)",
                 DEMO_BUFFERS - 1, where(*dev));
    }
    return rc;
}

/* The kernel and its launch config, run on buffer 0 on the buffer's GPU. */
static int on_kernel(struct consumer *c, const cuc_msg *m, size_t i, size_t j,
                     cuc_device **dev)
{
    cuc_launch_config cfg;
    cuc_stream *s;
    cuc_kernel *k;
    uint32_t n = DEMO_WORDS;
    void *p, *args[2] = {&p, &n};
    size_t sizes[2] = {sizeof(p), sizeof(n)}; /* held against the kernel's parameters */
    int rc;

    if (c->nbufs == 0)
        return CUC_E_INVALID;
    rc = cuc_msg_get_kernel(m, i, &k);
    if (rc)
        return rc;
    rc = cuc_msg_get_launch_config(m, j, &cfg);
    p = cuc_buffer_ptr(c->bufs[0]);
    *dev = cuc_buffer_device(c->bufs[0]);
    if (!rc && c->simulated) {
        demo_say("consumer", "kernel \"%s\" + launch config arrived and loaded; the "
                 "simulator runs no device code: launch skipped", cuc_kernel_name(k));
    } else if (!rc) {
        rc = cuc_stream_legacy(*dev, &s);
        if (!rc)
            rc = cuc_launch_checked(s, &cfg, k, args, sizes, 2);
        if (!rc)
            rc = cuc_stream_synchronize(s);
        if (!rc)
            demo_say("consumer", "kernel \"%s\" launched on buffer 0 with the received config (%s)",
                cuc_kernel_name(k), where(*dev));
    }
    cuc_kernel_destroy(k);
    return rc;
}

/* Resolves every record of m; the answer holds one device per record
 * (the launch config's is its kernel's). */
static int resolve(struct consumer *c, const cuc_msg *m, cuc_msg *answer)
{
    size_t i, n = cuc_msg_record_count(m);
    int rc = 0, type;

    for (i = 0; !rc && i < n; i++) {
        cuc_device *dev = NULL;
        cuc_msg_record_type(m, i, &type);
        switch (type) {
        case CUC_RECORD_DEVICE: rc = on_device(m, i, &dev); break;
        case CUC_RECORD_STREAM: rc = on_stream(m, i, &dev); break;
        case CUC_RECORD_POOL: rc = on_pool(c, m, i, &dev); break;
        case CUC_RECORD_EVENT: rc = on_event(m, i, &dev); break;
        case CUC_RECORD_BUFFER: rc = on_buffer(c, m, i, &dev); break;
        case CUC_RECORD_BUFFER_VIEW: rc = on_view(c, m, i, &dev); break;
        case CUC_RECORD_KERNEL: /* then its launch config: one device each */
            rc = i + 1 < n ? on_kernel(c, m, i, i + 1, &dev) : CUC_E_BADMSG;
            if (!rc)
                rc = cuc_msg_add_device(answer, dev);
            i++;
            break;
        default: rc = CUC_E_VERSION; break;
        }
        if (!rc)
            rc = cuc_msg_add_device(answer, dev);
    }
    return rc;
}

/* One step: 1 when the producer said it is done, 0 after an answer. */
static int step(struct consumer *c)
{
    cuc_msg *m, *answer;
    int rc, done;

    rc = cuc_channel_recv(c->ch, DEMO_TIMEOUT_MS, &m);
    if (rc)
        return rc;
    done = cuc_msg_record_count(m) == 0;
    rc = done ? 0 : cuc_msg_create(&answer);
    if (!done && !rc) {
        if (resolve(c, m, answer)) {
            demo_say("consumer", "FAILED: %s", cuc_errmsg());
            cuc_msg_destroy(answer);
            rc = cuc_msg_create(&answer);
        }
        if (!rc)
            rc = cuc_channel_send(c->ch, answer);
        cuc_msg_destroy(answer);
    }
    cuc_msg_destroy(m);
    return rc ? rc : done;
}

int demo_consumer(int fd)
{
    struct cuc_driver_info info;
    struct consumer c = {0};
    int rc;

    rc = cuc_driver_load(&info);
    if (!rc)
        rc = cuc_channel_from_fd(fd, &c.ch);
    if (rc)
        return cli_fail("consumer", rc);
    c.simulated = info.simulated;
    while ((rc = step(&c)) == 0)
        ;
    /* Freeing an imported buffer unmaps it and releases its lease: the
     * producer's deferred frees can then run. */
    cuc_buffer_unref_async(c.view, NULL);
    cuc_buffer_unref_many_async(c.bufs, (size_t)c.nbufs, NULL); /* one release message */
    cuc_pool_unref(c.pool);
    if (rc == 1 && c.nbufs)
        demo_say("consumer", "released %d buffers (unmapped; the producer may free them)",
                 c.nbufs);
    cuc_channel_destroy(c.ch);
    return rc == 1 ? 0 : cli_fail("consumer", rc);
}
