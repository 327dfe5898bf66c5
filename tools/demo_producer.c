/* The producer side of `cucore demo`: one message per step, each checked
 * against the consumer's answer. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "demo.h"

struct producer {
    cuc_channel *ch;
    int ndev;
    cuc_device *dev0; /* where the pool, buffers, event and kernel live */
    cuc_pool *pool;
    cuc_buffer *bufs[DEMO_BUFFERS];
    int simulated;
};

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    char line[1024];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    demo_say("producer", "%s", line);
}

/* Sends m (destroying it) and checks that the answer names, record by
 * record, the devices in want. Returns the number of mismatches. */
static int exchange(struct producer *p, cuc_msg *m, cuc_device *const *want, size_t n)
{
    cuc_msg *answer;
    size_t i;
    int rc, bad = 0;

    rc = cuc_channel_send(p->ch, m);
    cuc_msg_destroy(m);
    if (!rc)
        rc = cuc_channel_recv(p->ch, DEMO_TIMEOUT_MS, &answer);
    if (rc) {
        say("FAILED: %s", cuc_errmsg());
        return 1;
    }
    if (cuc_msg_record_count(answer) != n)
        bad = 1, say("MISMATCH: the consumer resolved %zu of %zu records",
                     cuc_msg_record_count(answer), n);
    for (i = 0; !bad && i < n; i++) {
        cuc_device *got;
        rc = cuc_msg_get_device(answer, i, &got);
        if (rc || got != want[i]) {
            say("MISMATCH: record %zu came back as %s", i,
                rc ? cuc_errmsg() : cuc_device_uuid_string(got));
            bad++;
        }
    }
    if (!bad)
        say("MATCH: the consumer's answer decodes to the same GPU%s here",
            n == 1 ? "" : "s");
    cuc_msg_destroy(answer);
    return bad;
}

static int step_devices(struct producer *p)
{
    cuc_device *devs[64];
    cuc_msg *m;
    int i, n = p->ndev < 64 ? p->ndev : 64;

    say("step 1: every device, by UUID only");
    if (cuc_msg_create(&m))
        return 1;
    for (i = 0; i < n; i++) {
        if (cuc_device_get(i, &devs[i]) || cuc_msg_add_device(m, devs[i])) {
            cuc_msg_destroy(m);
            return 1;
        }
        say("sending local ordinal %d = %s", i, cuc_device_uuid_string(devs[i]));
    }
    return exchange(p, m, devs, (size_t)n);
}

static int step_streams(struct producer *p)
{
    cuc_device *last;
    cuc_stream *legacy, *created;
    cuc_msg *m;
    int rc, bad = 0;

    say("step 2: streams");
    if (cuc_device_get(p->ndev - 1, &last) || cuc_stream_legacy(last, &legacy) ||
        cuc_msg_create(&m))
        return 1;
    rc = cuc_stream_create(last, CUC_STREAM_NON_BLOCKING, 0, &created);
    if (!rc) {
        rc = cuc_msg_add_stream(m, created);
        if (rc == CUC_E_NOT_SERIALIZABLE)
            say("a created stream is refused, as it must be: %s", cuc_errmsg());
        else
            bad++, say("MISMATCH: a created stream was not refused (%d)", rc);
        cuc_stream_destroy(created);
    }
    if (cuc_msg_add_stream(m, legacy)) {
        cuc_msg_destroy(m);
        return bad + 1;
    }
    say("sending the legacy default stream of local ordinal %d = %s (kind + UUID)",
        p->ndev - 1, cuc_device_uuid_string(last));
    return bad + exchange(p, m, &last, 1);
}

/* Pool, buffers filled with the pattern, and an IPC event recorded after
 * the writes, so that the consumer reads only once they are done. */
static int fill(struct producer *p, cuc_stream *s)
{
    uint32_t *host = malloc(DEMO_BUFFER_BYTES);
    struct cuc_pool_props props = {CUC_POOL_DEVICE, CUC_POOL_IPC, 0};
    int rc, b;

    if (!host)
        return CUC_E_NOMEM;
    rc = cuc_pool_create(p->dev0, &props, &p->pool);
    for (b = 0; !rc && b < DEMO_BUFFERS; b++) {
        for (size_t k = 0; k < DEMO_WORDS; k++)
            host[k] = demo_word(b, k);
        rc = cuc_buffer_alloc_async(p->pool, DEMO_BUFFER_BYTES, s, &p->bufs[b]);
        if (!rc) /* synchronous: host is reused for the next buffer */
            rc = cuc_memcpy(cuc_buffer_ptr(p->bufs[b]), host, DEMO_BUFFER_BYTES, s);
    }
    free(host);
    return rc;
}

static int step_memory(struct producer *p)
{
    cuc_device *want[3 + DEMO_BUFFERS];
    cuc_buffer *view = NULL;
    cuc_stream *s;
    cuc_event *ev = NULL;
    cuc_msg *m = NULL;
    int rc, b;

    say("step 3: an IPC memory pool, %d buffers of %zu KiB filled here, an IPC event",
        DEMO_BUFFERS, DEMO_BUFFER_BYTES >> 10);
    rc = cuc_stream_legacy(p->dev0, &s);
    if (!rc)
        rc = fill(p, s);
    if (!rc)
        rc = cuc_event_create(p->dev0, CUC_EVENT_IPC, &ev);
    if (!rc)
        rc = cuc_event_record(ev, s);
    if (!rc)
        rc = cuc_msg_create(&m);
    if (!rc)
        rc = cuc_msg_add_pool(m, p->pool);
    if (!rc)
        rc = cuc_msg_add_event(m, ev);
    for (b = 0; !rc && b < DEMO_BUFFERS; b++)
        rc = cuc_msg_add_buffer(m, p->bufs[b]);
    /* the second half of the last buffer, as a buffer of its own */
    if (!rc)
        rc = cuc_buffer_view(p->bufs[DEMO_BUFFERS - 1], DEMO_BUFFER_BYTES / 2,
                             DEMO_BUFFER_BYTES / 2, &view);
    if (!rc)
        rc = cuc_msg_add_buffer(m, view);
    if (rc) {
        say("FAILED: %s", cuc_errmsg());
        cuc_msg_destroy(m);
        cuc_buffer_unref_async(view, NULL);
        cuc_event_unref(ev);
        return 1;
    }
    say("sending pool (fd + id + owner %s), event, %d buffers (pool id + export data), "
        "a view of buffer %d (its allocation's identity + offset + size)",
        cuc_device_uuid_string(p->dev0), DEMO_BUFFERS, DEMO_BUFFERS - 1);
    for (b = 0; b < 3 + DEMO_BUFFERS; b++)
        want[b] = p->dev0;
    rc = exchange(p, m, want, 3 + DEMO_BUFFERS);
    cuc_buffer_unref_async(view, NULL); /* leased: kept until the consumer's release */
    cuc_event_unref(ev);
    return rc;
}

/* Every word of buffer 0 must now be the pattern plus one. */
static int check_kernel_result(struct producer *p)
{
    uint32_t *host = malloc(DEMO_BUFFER_BYTES);
    size_t k, bad = 0;
    cuc_stream *s;
    int rc;

    if (!host)
        return 1;
    rc = cuc_stream_legacy(p->dev0, &s);
    if (!rc)
        rc = cuc_memcpy(host, cuc_buffer_ptr(p->bufs[0]), DEMO_BUFFER_BYTES, s);
    for (k = 0; !rc && k < DEMO_WORDS; k++)
        bad += host[k] != demo_word(0, k) + 1;
    free(host);
    if (rc || bad) {
        say("MISMATCH: %s", rc ? cuc_errmsg() : "buffer 0 is not what the kernel writes");
        return 1;
    }
    say("MATCH: every word of buffer 0 is the producer's value + 1, written by the "
        "consumer's launch");
    return 0;
}

static int step_kernel(struct producer *p)
{
    cuc_device *want[2] = {p->dev0, p->dev0};
    cuc_launch_config cfg;
    cuc_kernel *k;
    cuc_msg *m;
    int bad;

    say("step 4: a kernel (PTX image + name + hash) and its launch config");
    cuc_launch_config_init(&cfg);
    cfg.block[0] = 256;
    cfg.grid[0] = (uint32_t)((DEMO_WORDS + 255) / 256);
    if (cuc_kernel_load(CUC_IMAGE_PTX, demo_ptx, sizeof(demo_ptx), "add_one", &k) ||
        cuc_msg_create(&m)) {
        say("FAILED: %s", cuc_errmsg());
        return 1;
    }
    if (cuc_msg_add_kernel(m, k) || cuc_msg_add_launch_config(m, &cfg)) {
        say("FAILED: %s", cuc_errmsg());
        cuc_msg_destroy(m);
        cuc_kernel_destroy(k);
        return 1;
    }
    cuc_kernel_destroy(k);
    bad = exchange(p, m, want, 2);
    if (!bad && !p->simulated)
        bad = check_kernel_result(p);
    return bad;
}

/* The producer frees its buffers at once; cucore defers each free until
 * the consumer's lease on it ends. */
static int finish(struct producer *p)
{
    size_t before = 0, after = 1;
    cuc_msg *done;
    int rc, b;

    for (b = 0; b < DEMO_BUFFERS; b++)
        if (p->bufs[b])
            cuc_buffer_unref_async(p->bufs[b], NULL);
    if (!p->pool)
        return 0;
    cuc_pool_lease_count(p->pool, &before);
    rc = cuc_msg_create(&done);
    if (!rc)
        rc = cuc_channel_send(p->ch, done);
    cuc_msg_destroy(done);
    if (!rc)
        rc = cuc_pool_lease_wait(p->pool, p->ch, 0, DEMO_TIMEOUT_MS);
    cuc_pool_lease_count(p->pool, &after);
    say("freed the buffers: %zu leases held by the consumer deferred the frees, "
        "%zu left once it released them", before, after);
    cuc_pool_unref(p->pool);
    return rc || after ? 1 : 0;
}

int demo_producer_steps(cuc_channel *ch, int simulated)
{
    struct producer p = {0};
    int bad;

    p.ch = ch;
    p.simulated = simulated;
    if (cuc_device_count(&p.ndev) || cuc_device_get(0, &p.dev0))
        return 1;
    bad = step_devices(&p);
    bad += step_streams(&p);
    bad += step_memory(&p);
    if (p.pool)
        bad += step_kernel(&p);
    bad += finish(&p);
    return bad;
}
