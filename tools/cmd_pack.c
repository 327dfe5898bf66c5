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
    int hold_given;
    FILE *desc; /* --json: the description, written out once the message is */
};

const char cli_pack_usage[] =
    "usage: cucore pack device N [--json]\n"
    "       cucore pack stream legacy|per-thread N [--json]\n"
    "       cucore pack launch-config GX[,GY[,GZ]] BX[,BY[,BZ]] [SHMEM] [--json]\n"
    "       cucore pack kernel FILE NAME [--kind ptx|cubin|fatbin] [--json]\n"
    "       cucore pack event N [--hold SECONDS] [--json]\n"
    "N is a device ordinal of this process. The message goes to stdout\n"
    "(never to a terminal); --json describes it, or the failure, as one JSON\n"
    "object on stderr, which then holds nothing else. A created stream is never\n"
    "packed: it means nothing outside its process.\n"
    "An IPC event means something only while this process lives:\n"
    "--hold keeps it alive that long after writing.\n";

/* A usage error: the message names the word at fault. */
static int usage(const char *fmt, const char *word)
{
    return cli_usage_error("pack", cli_pack_usage, fmt, word);
}

/* Positional arguments of an object: exactly want of them. */
static int want_args(const struct pack_opts *o, int want, const char *what)
{
    if (o->npos < want)
        return usage("%s", what);
    if (o->npos > want)
        return usage("unexpected argument \"%s\"", o->pos[want]);
    return 0;
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
    int n, rc;

    if (cli_parse_ordinal(arg, &n))
        return usage("\"%s\" is not a device ordinal", arg);
    rc = cuc_device_get(n, dev);
    if (rc)
        return cli_fail("pack", rc);
    return 0;
}

static int pack_device(cuc_msg *m, const struct pack_opts *o)
{
    cuc_device *d;
    int rc;

    if ((rc = want_args(o, 1, "device needs N, a device ordinal")) != 0)
        return rc;
    if ((rc = get_device(o->pos[0], &d)) != 0)
        return rc;
    if ((rc = cuc_msg_add_device(m, d)) != 0)
        return cli_fail("pack device", rc);
    if (o->json)
        fprintf(o->desc, "{\"packed\":\"device\",\"ordinal\":%d,\"uuid\":\"%s\"}\n",
                cuc_device_ordinal(d), cuc_device_uuid_string(d));
    return 0;
}

static int pack_stream(cuc_msg *m, const struct pack_opts *o)
{
    cuc_stream *s;
    cuc_device *d;
    int rc, per_thread;

    if ((rc = want_args(o, 2, "stream needs legacy|per-thread and N")) != 0)
        return rc;
    if (!strcmp(o->pos[0], "legacy"))
        per_thread = 0;
    else if (!strcmp(o->pos[0], "per-thread"))
        per_thread = 1;
    else if (!strcmp(o->pos[0], "created"))
        return usage("\"%s\": a created stream means nothing outside its process; "
                     "send an IPC event (pack event N), or create a stream in the "
                     "receiver", o->pos[0]);
    else
        return usage("\"%s\" is not a stream kind: legacy or per-thread", o->pos[0]);
    if ((rc = get_device(o->pos[1], &d)) != 0)
        return rc;
    rc = per_thread ? cuc_stream_per_thread(d, &s) : cuc_stream_legacy(d, &s);
    if (!rc)
        rc = cuc_msg_add_stream(m, s);
    if (rc)
        return cli_fail("pack stream", rc);
    if (o->json)
        fprintf(o->desc, "{\"packed\":\"stream\",\"kind\":\"%s\",\"ordinal\":%d,"
                "\"uuid\":\"%s\"}\n", o->pos[0], cuc_device_ordinal(d),
                cuc_device_uuid_string(d));
    return 0;
}

static int pack_launch_config(cuc_msg *m, const struct pack_opts *o)
{
    cuc_launch_config c;
    int rc;

    if (o->npos < 2)
        return usage("%s", "launch-config needs the grid and block dimensions");
    if (o->npos > 3)
        return usage("unexpected argument \"%s\"", o->pos[3]);
    cuc_launch_config_init(&c);
    if (parse_dims(o->pos[0], c.grid))
        return usage("grid \"%s\" is not 1 to 3 comma-separated unsigned integers",
                     o->pos[0]);
    if (parse_dims(o->pos[1], c.block))
        return usage("block \"%s\" is not 1 to 3 comma-separated unsigned integers",
                     o->pos[1]);
    if (o->npos == 3 && parse_u32(o->pos[2], &c.shared_mem))
        return usage("SHMEM \"%s\" is not an unsigned integer", o->pos[2]);
    if ((rc = cuc_msg_add_launch_config(m, &c)) != 0)
        return cli_fail("pack launch-config", rc);
    if (o->json)
        fprintf(o->desc, "{\"packed\":\"launch_config\",\"grid\":[%u,%u,%u],"
                "\"block\":[%u,%u,%u],\"shared_mem\":%u}\n", c.grid[0], c.grid[1],
                c.grid[2], c.block[0], c.block[1], c.block[2], c.shared_mem);
    return 0;
}

/* --kind's word, or 0. */
static int kind_option(const char *opt)
{
    if (!strcmp(opt, "ptx"))
        return CUC_IMAGE_PTX;
    if (!strcmp(opt, "cubin"))
        return CUC_IMAGE_CUBIN;
    if (!strcmp(opt, "fatbin"))
        return CUC_IMAGE_FATBIN;
    return 0;
}

/* The image's kind from its first bytes. */
static int image_kind(const uint8_t *p, size_t len)
{
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

    if ((rc = want_args(o, 2, "kernel needs FILE and NAME")) != 0)
        return rc;
    kind = o->kind ? kind_option(o->kind) : 0;
    if (o->kind && !kind)
        return usage("--kind \"%s\" is not ptx, cubin or fatbin", o->kind);
    if ((rc = cli_read_file("pack kernel", o->pos[0], &img, &len)) != 0)
        return rc;
    if (!kind)
        kind = image_kind(img, len);
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
        fprintf(o->desc, "{\"packed\":\"kernel\",\"name\":");
        json_str(o->desc, cuc_kernel_name(k));
        fprintf(o->desc, ",\"kind\":\"%s\",\"image_bytes\":%zu,\"sha256\":\"%s\"}\n",
                cli_image_kind_name(kind), len, hex);
    }
    cuc_kernel_destroy(k);
    return 0;
}

static const char *event_note(unsigned hold)
{
    return hold ? "an IPC event is valid only while the process that created it "
                  "lives; this one stays for --hold seconds after writing"
                : "an IPC event is valid only while the process that created it "
                  "lives; this one exits after writing (use --hold SECONDS to keep it)";
}

static int pack_event(cuc_msg *m, const struct pack_opts *o, cuc_event **keep)
{
    cuc_stream *s;
    cuc_device *d;
    cuc_event *ev;
    int rc;

    if ((rc = want_args(o, 1, "event needs N, a device ordinal")) != 0)
        return rc;
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
    if (o->json) {
        fprintf(o->desc, "{\"packed\":\"event\",\"ordinal\":%d,\"uuid\":\"%s\","
                "\"ipc\":true,\"hold_seconds\":%u,\"note\":", cuc_device_ordinal(d),
                cuc_device_uuid_string(d), o->hold);
        json_str(o->desc, event_note(o->hold));
        fputs("}\n", o->desc);
    } else {
        fprintf(stderr, "note: %s\n", event_note(o->hold));
    }
    *keep = ev;
    return 0;
}

/* Options anywhere after the object; 0 or the usage error's exit code. */
static int parse_opts(int argc, char **argv, struct pack_opts *o)
{
    int i;
    uint32_t v;

    memset(o, 0, sizeof(*o));
    for (i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) {
            o->json = 1;
        } else if (!strcmp(argv[i], "--kind") || !strcmp(argv[i], "--hold")) {
            if (i + 1 >= argc)
                return usage("%s needs a value", argv[i]);
            if (!strcmp(argv[i++], "--kind")) {
                o->kind = argv[i];
            } else if (parse_u32(argv[i], &v) || v > 86400) {
                return usage("--hold \"%s\" is not a number of seconds from 0 to 86400",
                             argv[i]);
            } else {
                o->hold = v;
                o->hold_given = 1;
            }
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            return usage("unknown option \"%s\"", argv[i]);
        } else if (o->npos < 4) {
            o->pos[o->npos++] = argv[i];
        } else {
            return usage("unexpected argument \"%s\"", argv[i]);
        }
    }
    return 0;
}

static int write_all(const void *bytes, size_t len)
{
    if (fwrite(bytes, 1, len, stdout) != len || fflush(stdout))
        return cli_error("CUC_E_IO", "pack: writing the message to stdout failed: %s",
                         strerror(errno));
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
    return usage("unknown object \"%s\" (device, stream, launch-config, kernel, event)",
                 what);
}

int cli_pack(int argc, char **argv)
{
    struct pack_opts o;
    cuc_event *ev = NULL;
    void *bytes = NULL;
    char *desc = NULL;
    size_t len, desc_len = 0;
    cuc_msg *m;
    int rc;

    if (argc < 1)
        return usage("%s", "missing the object to pack (device, stream, launch-config, "
                     "kernel, event)");
    if (argv[0][0] == '-')
        return usage("the object to pack (device, stream, launch-config, kernel, "
                     "event) comes first, not \"%s\"", argv[0]);
    if ((rc = parse_opts(argc, argv, &o)) != 0)
        return rc;
    if (o.kind && strcmp(argv[0], "kernel"))
        return usage("--kind applies to kernel, not to \"%s\"", argv[0]);
    if (o.hold_given && strcmp(argv[0], "event"))
        return usage("--hold applies to event, not to \"%s\"", argv[0]);
    if (isatty(STDOUT_FILENO))
        return cli_error("CUC_E_INVALID", "pack: refusing to write a binary message to "
                         "a terminal; redirect stdout to a file or a pipe (| cucore "
                         "inspect -)");
    if (o.json && !(o.desc = open_memstream(&desc, &desc_len)))
        return cli_error("CUC_E_NOMEM", "pack: out of memory");
    if ((rc = cuc_msg_create(&m)) != 0) {
        rc = cli_fail("pack", rc);
        goto close_desc;
    }
    rc = build(argv[0], &o, m, &ev);
    if (!rc) {
        int st = cuc_msg_to_bytes(m, &bytes, &len);
        rc = st ? cli_fail("pack", st) : write_all(bytes, len);
    }
    free(bytes);
    cuc_msg_destroy(m);
close_desc:
    if (o.desc) {
        fclose(o.desc);
        if (!rc)
            fputs(desc, stderr);
        free(desc);
    }
    if (!rc && ev && o.hold) {
        fclose(stdout); /* the reader sees the end of the message now */
        sleep(o.hold);
    }
    cuc_event_unref(ev);
    return rc;
}
