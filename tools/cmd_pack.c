/* `cucore pack OBJECT ...`: a message holding one object, as bytes on
 * stdout (for `cucore inspect -`, a file, or another program). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

struct pack_opts {
    int json;
    unsigned hold; /* seconds to live after writing (events) */
    const char *kind;
    const char *pos[4];
    int npos;
};

static int usage(void)
{
    fprintf(stderr,
            "usage: cucore pack device N\n"
            "       cucore pack stream legacy|per-thread N\n"
            "       cucore pack launch-config GX[,GY[,GZ]] BX[,BY[,BZ]] [SHMEM]\n"
            "       cucore pack kernel FILE NAME [--kind ptx|cubin|fatbin]\n"
            "       cucore pack event N [--hold SECONDS]\n"
            "N is a device ordinal of this process. The message goes to stdout\n"
            "(never to a terminal); --json also describes it on stderr.\n"
            "An IPC event means something only while this process lives:\n"
            "--hold keeps it alive that long after writing.\n");
    return 2;
}

static int parse_u32(const char *s, uint32_t *v)
{
    unsigned long long x;
    char *end;

    if (!s[0] || s[0] == '-' || s[0] == '+')
        return -1;
    errno = 0;
    x = strtoull(s, &end, 10);
    if (errno || *end || x > UINT32_MAX)
        return -1;
    *v = (uint32_t)x;
    return 0;
}

/* "X", "X,Y" or "X,Y,Z"; missing dimensions are 1. */
static int parse_dims(const char *s, uint32_t d[3])
{
    char buf[64], *tok, *save = NULL;
    int n = 0;

    if (strlen(s) >= sizeof(buf))
        return -1;
    strcpy(buf, s);
    d[0] = d[1] = d[2] = 1;
    for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (n == 3 || parse_u32(tok, &d[n]))
            return -1;
        n++;
    }
    return n ? 0 : -1;
}

static int get_device(const char *arg, cuc_device **dev)
{
    uint32_t n;
    int rc;

    if (parse_u32(arg, &n) || n > 1000000) {
        fprintf(stderr, "cucore: pack: \"%s\" is not a device ordinal\n", arg);
        return 1;
    }
    rc = cuc_device_get((int)n, dev);
    if (rc)
        return cli_fail("pack", rc);
    return 0;
}

static int pack_device(cuc_msg *m, const struct pack_opts *o)
{
    cuc_device *d;
    int rc;

    if (o->npos != 1)
        return usage();
    if ((rc = get_device(o->pos[0], &d)) != 0)
        return rc;
    if ((rc = cuc_msg_add_device(m, d)) != 0)
        return cli_fail("pack device", rc);
    if (o->json)
        fprintf(stderr, "{\"packed\":\"device\",\"ordinal\":%d,\"uuid\":\"%s\"}\n",
                cuc_device_ordinal(d), cuc_device_uuid_string(d));
    return 0;
}

static int pack_stream(cuc_msg *m, const struct pack_opts *o)
{
    cuc_stream *s;
    cuc_device *d;
    int rc, per_thread;

    if (o->npos != 2)
        return usage();
    if (!strcmp(o->pos[0], "legacy"))
        per_thread = 0;
    else if (!strcmp(o->pos[0], "per-thread"))
        per_thread = 1;
    else
        return usage();
    if ((rc = get_device(o->pos[1], &d)) != 0)
        return rc;
    rc = per_thread ? cuc_stream_per_thread(d, &s) : cuc_stream_legacy(d, &s);
    if (!rc)
        rc = cuc_msg_add_stream(m, s);
    if (rc)
        return cli_fail("pack stream", rc);
    if (o->json)
        fprintf(stderr, "{\"packed\":\"stream\",\"kind\":\"%s\",\"ordinal\":%d,"
                "\"uuid\":\"%s\"}\n", o->pos[0], cuc_device_ordinal(d),
                cuc_device_uuid_string(d));
    return 0;
}

static int pack_launch_config(cuc_msg *m, const struct pack_opts *o)
{
    cuc_launch_config c;
    int rc;

    if (o->npos < 2 || o->npos > 3)
        return usage();
    cuc_launch_config_init(&c);
    if (parse_dims(o->pos[0], c.grid) || parse_dims(o->pos[1], c.block) ||
        (o->npos == 3 && parse_u32(o->pos[2], &c.shared_mem))) {
        fprintf(stderr, "cucore: pack launch-config: dimensions are 1 to 3 "
                "comma-separated unsigned integers, SHMEM one\n");
        return 1;
    }
    if ((rc = cuc_msg_add_launch_config(m, &c)) != 0)
        return cli_fail("pack launch-config", rc);
    if (o->json)
        fprintf(stderr, "{\"packed\":\"launch_config\",\"grid\":[%u,%u,%u],"
                "\"block\":[%u,%u,%u],\"shared_mem\":%u}\n", c.grid[0], c.grid[1],
                c.grid[2], c.block[0], c.block[1], c.block[2], c.shared_mem);
    return 0;
}

static int image_kind(const char *opt, const uint8_t *p, size_t len)
{
    if (opt) {
        if (!strcmp(opt, "ptx"))
            return CUC_IMAGE_PTX;
        if (!strcmp(opt, "cubin"))
            return CUC_IMAGE_CUBIN;
        if (!strcmp(opt, "fatbin"))
            return CUC_IMAGE_FATBIN;
        return 0;
    }
    if (len >= 4 && !memcmp(p, "\x7f" "ELF", 4))
        return CUC_IMAGE_CUBIN;
    if (len >= 4 && !memcmp(p, "\x50\xed\x55\xba", 4))
        return CUC_IMAGE_FATBIN;
    return CUC_IMAGE_PTX;
}

static int pack_kernel(cuc_msg *m, const struct pack_opts *o)
{
    char hex[2 * CUC_KERNEL_HASH_LEN + 1];
    cuc_kernel *k;
    uint8_t *img;
    size_t len;
    int kind, rc;

    if (o->npos != 2)
        return usage();
    if ((rc = cli_read_file("pack kernel", o->pos[0], &img, &len)) != 0)
        return rc;
    kind = image_kind(o->kind, img, len);
    if (!kind) {
        free(img);
        return usage();
    }
    rc = cuc_kernel_load((enum cuc_image_kind)kind, img, len, o->pos[1], &k);
    free(img);
    if (rc)
        return cli_fail("pack kernel", rc);
    rc = cuc_msg_add_kernel(m, k);
    if (rc) {
        cuc_kernel_destroy(k);
        return cli_fail("pack kernel", rc);
    }
    if (o->json) {
        cli_hex(cuc_kernel_hash(k), CUC_KERNEL_HASH_LEN, hex);
        cuc_kernel_image(k, &len);
        fprintf(stderr, "{\"packed\":\"kernel\",\"name\":");
        json_str(stderr, cuc_kernel_name(k));
        fprintf(stderr, ",\"kind\":\"%s\",\"image_bytes\":%zu,\"sha256\":\"%s\"}\n",
                kind == CUC_IMAGE_PTX ? "ptx" : kind == CUC_IMAGE_CUBIN ? "cubin" : "fatbin",
                len, hex);
    }
    cuc_kernel_destroy(k);
    return 0;
}

static int pack_event(cuc_msg *m, const struct pack_opts *o, cuc_event **keep)
{
    cuc_stream *s;
    cuc_device *d;
    cuc_event *ev;
    int rc;

    if (o->npos != 1)
        return usage();
    if ((rc = get_device(o->pos[0], &d)) != 0)
        return rc;
    rc = cuc_event_create(d, CUC_EVENT_IPC, &ev);
    if (rc)
        return cli_fail("pack event", rc);
    rc = cuc_stream_legacy(d, &s);
    if (!rc)
        rc = cuc_event_record(ev, s);
    if (!rc)
        rc = cuc_msg_add_event(m, ev);
    if (rc) {
        cuc_event_unref(ev);
        return cli_fail("pack event", rc);
    }
    fprintf(stderr, "note: an IPC event is valid only while the process that created "
            "it lives; this one %s\n", o->hold ? "stays for --hold seconds after "
            "writing" : "exits after writing (use --hold SECONDS to keep it)");
    if (o->json)
        fprintf(stderr, "{\"packed\":\"event\",\"ordinal\":%d,\"uuid\":\"%s\","
                "\"ipc\":true,\"hold_seconds\":%u}\n", cuc_device_ordinal(d),
                cuc_device_uuid_string(d), o->hold);
    *keep = ev;
    return 0;
}

static int parse_opts(int argc, char **argv, struct pack_opts *o)
{
    int i;
    uint32_t v;

    memset(o, 0, sizeof(*o));
    for (i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) {
            o->json = 1;
        } else if (!strcmp(argv[i], "--kind") && i + 1 < argc) {
            o->kind = argv[++i];
        } else if (!strcmp(argv[i], "--hold") && i + 1 < argc) {
            if (parse_u32(argv[++i], &v) || v > 86400)
                return -1;
            o->hold = v;
        } else if (argv[i][0] == '-' && argv[i][1] == '-') {
            return -1;
        } else if (o->npos < 4) {
            o->pos[o->npos++] = argv[i];
        } else {
            return -1;
        }
    }
    return 0;
}

static int write_all(const void *bytes, size_t len)
{
    if (fwrite(bytes, 1, len, stdout) != len || fflush(stdout)) {
        fprintf(stderr, "cucore: pack: writing the message to stdout failed: %s\n",
                strerror(errno));
        return 1;
    }
    return 0;
}

static int build(const char *what, const struct pack_opts *o, cuc_msg *m, cuc_event **ev)
{
    if (!strcmp(what, "device"))
        return pack_device(m, o);
    if (!strcmp(what, "stream"))
        return pack_stream(m, o);
    if (!strcmp(what, "launch-config"))
        return pack_launch_config(m, o);
    if (!strcmp(what, "kernel"))
        return pack_kernel(m, o);
    if (!strcmp(what, "event"))
        return pack_event(m, o, ev);
    return usage();
}

int cli_pack(int argc, char **argv)
{
    struct pack_opts o;
    cuc_event *ev = NULL;
    void *bytes = NULL;
    cuc_msg *m;
    size_t len;
    int rc;

    if (argc < 1 || parse_opts(argc, argv, &o))
        return usage();
    if (o.kind && strcmp(argv[0], "kernel"))
        return usage();
    if (isatty(STDOUT_FILENO)) {
        fprintf(stderr, "cucore: pack: refusing to write a binary message to a "
                "terminal; redirect stdout to a file or a pipe (| cucore inspect -)\n");
        return 1;
    }
    if ((rc = cuc_msg_create(&m)) != 0)
        return cli_fail("pack", rc);
    rc = build(argv[0], &o, m, &ev);
    if (!rc) {
        int st = cuc_msg_to_bytes(m, &bytes, &len);
        rc = st ? cli_fail("pack", st) : write_all(bytes, len);
    }
    free(bytes);
    cuc_msg_destroy(m);
    if (!rc && ev && o.hold) {
        fclose(stdout); /* the reader sees the end of the message now */
        sleep(o.hold);
    }
    cuc_event_unref(ev);
    return rc;
}
