/* `cucore inspect FILE|- [--json]`: each record of a message, its fields
 * and what it resolves to in this process. Exit 0 when the message is
 * well-formed and every record inspect resolves did resolve here; 1 when
 * the input is not a message (the library's verdict, cuc_msg_from_bytes),
 * or a record is malformed or did not resolve (a device not visible here,
 * for one). Records inspect does not resolve (a buffer needs its pool
 * imported from a channel, a release belongs to a channel) are listed
 * with their fields as not resolved, with why, and do not make it fail. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

struct out {
    int json;
    int first;
    int malformed;
    size_t failed; /* records that did not resolve (malformed ones too) */
};

/* Starts record i's line (text) or object (JSON). */
static void begin(struct out *o, size_t i, const char *type)
{
    if (o->json) {
        printf("%s{\"index\":%zu,\"type\":\"%s\"", o->first ? "" : ",", i, type);
        o->first = 0;
    } else {
        printf("[%zu] %s", i, type);
    }
}

/* Ends it with the resolution: ok, or the failure of rc. */
static void end(struct out *o, int rc, const char *ok)
{
    if (rc == CUC_E_BADMSG || rc == CUC_E_VERSION)
        o->malformed = 1;
    if (rc)
        o->failed++;
    if (o->json) {
        printf(",\"resolved\":%s", rc ? "false" : "true");
        if (rc) {
            printf(",\"error\":\"%s\",\"message\":", cuc_errname(rc));
            json_str(stdout, cuc_errmsg());
        }
        printf("}");
    } else if (rc) {
        printf("\n    -> %s: %s\n", rc == CUC_E_BADMSG ? "MALFORMED" : cuc_errname(rc),
               cuc_errmsg());
    } else {
        printf("\n    -> %s\n", ok);
    }
}

static void field_s(struct out *o, const char *name, const char *v)
{
    if (o->json) {
        printf(",\"%s\":", name);
        json_str(stdout, v);
    } else {
        printf(" %s=%s", name, v);
    }
}

static void field_u(struct out *o, const char *name, unsigned long long v)
{
    if (o->json)
        printf(",\"%s\":%llu", name, v);
    else
        printf(" %s=%llu", name, v);
}

/* n bytes (at most 32: an id, a hash) as hex. */
static void field_hex(struct out *o, const char *name, const uint8_t *bytes, size_t n)
{
    char hex[2 * 32 + 1];

    cli_hex(bytes, n < 32 ? n : 32, hex);
    field_s(o, name, hex);
}

/* The little-endian integer of n bytes at p (docs/wire-format.md). */
static unsigned long long le(const uint8_t *p, int n)
{
    unsigned long long v = 0;

    while (n--)
        v = v << 8 | p[n];
    return v;
}

static void field_uuid(struct out *o, const char *name, const cuc_uuid *u)
{
    char text[CUC_UUID_STRLEN];

    cuc_uuid_format(u, text);
    field_s(o, name, text);
}

static void show_DEVICE(struct out *o, const cuc_msg *m, size_t i)
{
    char ok[96];
    cuc_device *d;
    cuc_uuid u;
    int rc;

    begin(o, i, "device");
    if (cuc_msg_read_device(m, i, &u) == 0)
        field_uuid(o, "uuid", &u);
    rc = cuc_msg_get_device(m, i, &d);
    if (!rc) {
        snprintf(ok, sizeof(ok), "local ordinal %d (%s)", cuc_device_ordinal(d),
                 cuc_device_name(d));
        if (o->json)
            printf(",\"ordinal\":%d", cuc_device_ordinal(d));
    }
    end(o, rc, ok);
}

static void show_STREAM(struct out *o, const cuc_msg *m, size_t i)
{
    struct cuc_stream_record rec;
    char ok[96];
    cuc_stream *s;
    int rc;

    begin(o, i, "stream");
    rc = cuc_msg_read_stream(m, i, &rec);
    if (!rc) {
        field_s(o, "kind", rec.kind == CUC_STREAM_LEGACY_DEFAULT ? "legacy" : "per-thread");
        field_uuid(o, "uuid", &rec.device);
        rc = cuc_msg_get_stream(m, i, &s);
    }
    if (!rc) {
        snprintf(ok, sizeof(ok), "the %s default stream of local device %d",
                 rec.kind == CUC_STREAM_LEGACY_DEFAULT ? "legacy" : "per-thread",
                 cuc_device_ordinal(cuc_stream_device(s)));
        if (o->json)
            printf(",\"ordinal\":%d", cuc_device_ordinal(cuc_stream_device(s)));
    }
    end(o, rc, ok);
}

static void show_EVENT(struct out *o, const cuc_msg *m, size_t i)
{
    struct cuc_event_record rec;
    char ok[96];
    cuc_event *ev;
    int rc;

    begin(o, i, "event");
    rc = cuc_msg_read_event(m, i, &rec);
    if (!rc) {
        field_uuid(o, "uuid", &rec.device);
        field_u(o, "flags", rec.flags);
        rc = cuc_msg_get_event(m, i, &ev);
    }
    if (!rc) {
        snprintf(ok, sizeof(ok), "an IPC event opened on local device %d",
                 cuc_device_ordinal(cuc_event_device(ev)));
        if (o->json)
            printf(",\"ordinal\":%d", cuc_device_ordinal(cuc_event_device(ev)));
        cuc_event_unref(ev);
    }
    end(o, rc, ok);
}

static void show_LAUNCH_CONFIG(struct out *o, const cuc_msg *m, size_t i)
{
    cuc_launch_config c;
    char v[160];
    int rc;

    begin(o, i, "launch_config");
    rc = cuc_msg_get_launch_config(m, i, &c);
    if (!rc && o->json)
        printf(",\"grid\":[%u,%u,%u],\"block\":[%u,%u,%u],\"cluster\":[%u,%u,%u],"
               "\"shared_mem\":%u,\"cooperative\":%u", c.grid[0], c.grid[1], c.grid[2],
               c.block[0], c.block[1], c.block[2], c.cluster[0], c.cluster[1],
               c.cluster[2], c.shared_mem, c.cooperative);
    if (!rc)
        snprintf(v, sizeof(v), "grid %ux%ux%u, block %ux%ux%u, cluster %ux%ux%u, "
                 "shared_mem %u, cooperative %u", c.grid[0], c.grid[1], c.grid[2],
                 c.block[0], c.block[1], c.block[2], c.cluster[0], c.cluster[1],
                 c.cluster[2], c.shared_mem, c.cooperative);
    end(o, rc, v);
}

static void show_KERNEL(struct out *o, const cuc_msg *m, size_t i)
{
    struct cuc_kernel_record rec;
    cuc_kernel *k;
    int rc;

    begin(o, i, "kernel");
    rc = cuc_msg_read_kernel(m, i, &rec);
    if (!rc) {
        field_s(o, "name", rec.name);
        field_s(o, "kind", cli_image_kind_name((int)rec.kind));
        field_u(o, "image_bytes", rec.image_len);
        field_hex(o, "sha256", rec.hash, sizeof(rec.hash));
        rc = cuc_msg_get_kernel(m, i, &k);
    }
    if (!rc)
        cuc_kernel_destroy(k);
    end(o, rc, "loadable here");
}

/* A record inspect does not resolve: not resolved, with why; not a
 * failure. Ends the line the record's show_ began. */
static void not_resolved(struct out *o, const char *why)
{
    if (o->json) {
        printf(",\"resolved\":false,\"why\":");
        json_str(stdout, why);
        printf("}");
    } else {
        printf("\n    -> not resolved: %s\n", why);
    }
}

/* The raw view's sizes: listed for every record inspect does not
 * resolve. */
static void field_sizes(struct out *o, const cuc_msg *m, size_t i, struct cuc_record_view *r)
{
    cuc_msg_record(m, i, r);
    field_u(o, "payload_bytes", r->len);
    field_u(o, "fds", r->nfds);
}

static void show_BUFFER(struct out *o, const cuc_msg *m, size_t i)
{
    struct cuc_buffer_record rec;
    struct cuc_record_view r;
    int type = 0, rc;

    cuc_msg_record_type(m, i, &type);
    begin(o, i, cuc_record_type_name(type));
    field_sizes(o, m, i, &r);
    rc = cuc_msg_read_buffer(m, i, &rec);
    if (rc) {
        end(o, rc, NULL);
        return;
    }
    field_hex(o, "pool_id", rec.pool_id, sizeof(rec.pool_id));
    field_u(o, "size", rec.size);
    if (type == CUC_RECORD_BUFFER_VIEW) {
        field_u(o, "offset", rec.offset);
        field_u(o, "alloc_size", rec.alloc_size);
    }
    field_u(o, "lease_id", rec.lease_id);
    not_resolved(o, type == CUC_RECORD_BUFFER
                        ? "inspect does not import buffers: a buffer maps memory of a pool "
                          "that this process must first import from a channel"
                        : "inspect does not import buffer views: a view maps a part of an "
                          "allocation of a pool that this process must first import from "
                          "a channel");
}

static void show_BUFFER_VIEW(struct out *o, const cuc_msg *m, size_t i)
{
    show_BUFFER(o, m, i);
}

static void show_IPC_BUFFER(struct out *o, const cuc_msg *m, size_t i)
{
    struct cuc_ipc_buffer_record rec;
    struct cuc_record_view r;
    int rc;

    begin(o, i, cuc_record_type_name(CUC_RECORD_IPC_BUFFER));
    field_sizes(o, m, i, &r);
    rc = cuc_msg_read_ipc_buffer(m, i, &rec);
    if (rc) {
        end(o, rc, NULL);
        return;
    }
    field_uuid(o, "uuid", &rec.device);
    field_hex(o, "exporter", rec.exporter, sizeof(rec.exporter));
    field_u(o, "generation", rec.generation);
    field_u(o, "base_size", rec.base_size);
    field_u(o, "offset", rec.offset);
    field_u(o, "size", rec.size);
    field_u(o, "lease_id", rec.lease_id);
    not_resolved(o, "inspect does not open ipc buffers: opening maps the exporter's memory "
                    "under a lease, which only a channel gives");
}

/* Lease ids listed in the text form; JSON lists them all. */
#define TEXT_IDS 8

static void show_RELEASE(struct out *o, const cuc_msg *m, size_t i)
{
    struct cuc_record_view r;
    const uint8_t *p;
    size_t n, k;

    begin(o, i, cuc_record_type_name(CUC_RECORD_RELEASE));
    field_sizes(o, m, i, &r);
    p = r.payload;
    n = r.len / 8; /* the decoder took the length: a multiple of 8 */
    printf(o->json ? ",\"lease_ids\":[" : " lease_ids=");
    for (k = 0; k < n && (o->json || k < TEXT_IDS); k++)
        printf("%s%llu", k ? "," : "", le(p + 8 * k, 8));
    if (o->json)
        printf("]");
    else if (n > TEXT_IDS)
        printf(",... (%zu ids)", n);
    not_resolved(o, "a release ends leases on the channel it arrives on; inspect has no "
                    "channel");
}

static void show_REFUSED(struct out *o, const cuc_msg *m, size_t i)
{
    struct cuc_record_view r;
    const uint8_t *p;

    begin(o, i, cuc_record_type_name(CUC_RECORD_REFUSED));
    field_sizes(o, m, i, &r);
    p = r.payload; /* 8 bytes, as the decoder took them */
    field_u(o, "seq", le(p, 4));
    not_resolved(o, "a refused record ends the leases of a message its sender's peer could "
                    "not take; inspect has no channel");
}

static void show_KERNEL_REF(struct out *o, const cuc_msg *m, size_t i)
{
    struct cuc_kernel_record rec;
    struct cuc_record_view r;
    int rc;

    begin(o, i, cuc_record_type_name(CUC_RECORD_KERNEL_REF));
    field_sizes(o, m, i, &r);
    rc = cuc_msg_read_kernel(m, i, &rec);
    if (rc) {
        end(o, rc, NULL);
        return;
    }
    field_s(o, "name", rec.name);
    field_s(o, "kind", cli_image_kind_name(rec.kind));
    field_u(o, "image_bytes", rec.image_len);
    field_hex(o, "sha256", rec.hash, sizeof(rec.hash));
    not_resolved(o, "a kernel ref names by hash an image that only the receiver on its "
                    "channel holds; inspect has no channel");
}

static void show_KERNEL_HELD(struct out *o, const cuc_msg *m, size_t i)
{
    struct cuc_record_view r;
    const uint8_t *p;

    begin(o, i, cuc_record_type_name(CUC_RECORD_KERNEL_HELD));
    field_sizes(o, m, i, &r);
    p = r.payload; /* 40 bytes, as the decoder took them: kind, image_len, sha256 */
    field_s(o, "kind", cli_image_kind_name((int)le(p, 4)));
    field_u(o, "image_bytes", le(p + 4, 4));
    field_hex(o, "sha256", p + 8, CUC_KERNEL_HASH_LEN);
    not_resolved(o, "a kernel held record tells a channel's sender which images its peer "
                    "holds; inspect has no channel");
}

/* Records with fds: a message from a file or stdin has none (the decoder
 * refuses a record whose fds did not come with it), so these are listed
 * only for what they are. */
static void show_raw(struct out *o, const cuc_msg *m, size_t i, int type, const char *why)
{
    struct cuc_record_view r;

    begin(o, i, cuc_record_type_name(type));
    field_sizes(o, m, i, &r);
    not_resolved(o, why);
}

#define FDS_WHY "it carries file descriptors, which only a channel delivers"

static void show_POOL(struct out *o, const cuc_msg *m, size_t i)
{
    show_raw(o, m, i, CUC_RECORD_POOL, FDS_WHY);
}

static void show_VMM(struct out *o, const cuc_msg *m, size_t i)
{
    show_raw(o, m, i, CUC_RECORD_VMM, FDS_WHY);
}

static void show_FD(struct out *o, const cuc_msg *m, size_t i)
{
    show_raw(o, m, i, CUC_RECORD_FD, FDS_WHY);
}

static void show_SHARE(struct out *o, const cuc_msg *m, size_t i)
{
    struct cuc_share_record rec;
    struct cuc_record_view r;
    int rc;

    begin(o, i, cuc_record_type_name(CUC_RECORD_SHARE));
    field_sizes(o, m, i, &r);
    rc = cuc_msg_read_share(m, i, &rec);
    if (rc) {
        end(o, rc, NULL);
        return;
    }
    field_hex(o, "point", rec.point, sizeof(rec.point));
    field_hex(o, "boot_id", rec.boot_id, sizeof(rec.boot_id));
    field_hex(o, "token", rec.token, sizeof(rec.token));
    field_s(o, "path", rec.path);
    not_resolved(o, "a detached message's share point: inspect does not attach (that "
                    "claims the hold: cuc_share_attach)");
}

static void show_HELD(struct out *o, const cuc_msg *m, size_t i)
{
    struct cuc_held_record rec;
    struct cuc_record_view r;
    int rc;

    begin(o, i, cuc_record_type_name(CUC_RECORD_HELD));
    field_sizes(o, m, i, &r);
    rc = cuc_msg_read_held(m, i, &rec);
    if (rc) {
        end(o, rc, NULL);
        return;
    }
    field_s(o, "holds", cuc_record_type_name(rec.type));
    field_u(o, "version", rec.version);
    field_u(o, "held_fds", rec.nfds);
    field_u(o, "held_bytes", rec.len);
    if (rec.type == CUC_RECORD_POOL)
        field_hex(o, "pool_id", rec.payload, CUC_POOL_ID_LEN);
    not_resolved(o, "its fds are kept by the share point that detached the message: only "
                    "an attach fetches them");
}

/* Claim and confirm records: a token and a word. */
static void show_token(struct out *o, const cuc_msg *m, size_t i, int type)
{
    struct cuc_record_view r;
    const uint8_t *p;

    begin(o, i, cuc_record_type_name(type));
    field_sizes(o, m, i, &r);
    p = r.payload; /* 24 bytes, as the decoder took them */
    field_hex(o, "token", p, 16);
    if (type == CUC_RECORD_CLAIM)
        field_u(o, "flags", le(p + 16, 4));
    else
        field_s(o, "status", cuc_errname((int)(uint32_t)le(p + 16, 4)));
    not_resolved(o, "claims and their answers travel between an importer and a share "
                    "point; inspect is neither");
}

static void show_CLAIM(struct out *o, const cuc_msg *m, size_t i)
{
    show_token(o, m, i, CUC_RECORD_CLAIM);
}

static void show_CONFIRM(struct out *o, const cuc_msg *m, size_t i)
{
    show_token(o, m, i, CUC_RECORD_CONFIRM);
}

/* One show_NAME per record type, the table built from CUC_RECORD_TYPE_MAP
 * (cucore/msg.h): a type added to the library without its show_NAME here
 * does not compile, so inspect describes every type the library defines.
 * The decoder refuses any type not in the map, so every record inspect
 * sees has its entry. */
typedef void (*show_fn)(struct out *, const cuc_msg *, size_t);
#define SHOW_ENTRY_(name, value, text) [value] = show_##name,
static const show_fn shows[] = {CUC_RECORD_TYPE_MAP(SHOW_ENTRY_)};
#undef SHOW_ENTRY_

static void show(struct out *o, const cuc_msg *m, size_t i)
{
    int type = 0;

    cuc_msg_record_type(m, i, &type);
    if (type > 0 && (size_t)type < sizeof(shows) / sizeof(shows[0]) && shows[type])
        shows[type](o, m, i);
    else /* not a type of the map: the decoder refuses those */
        show_raw(o, m, i, type, "not a record type of this cucore");
}

const char cli_inspect_usage[] =
    "usage: cucore inspect FILE|- [--json]\n"
    "Shows each record of a cucore message (FILE, or - for stdin) and what it\n"
    "resolves to in this process. Exit 0 when the message is well-formed and every\n"
    "record inspect resolves did resolve here; 1 when the input cannot be read or\n"
    "is not a message, or a record is malformed or does not resolve (a device not\n"
    "visible here, an event that does not open, a kernel that does not load).\n"
    "Every record type is listed with its fields. Buffer, buffer view, ipc buffer,\n"
    "kernel ref, release, kernel held and refused records are listed as not\n"
    "resolved, with why: a buffer needs its pool imported from a channel, a\n"
    "release belongs to a channel.\n"
    "--json: {\"bytes\":N,\"records\":[...],\"malformed\":B,\"failed\":N} on stdout,\n"
    "each record with \"resolved\" and, when false, \"error\" and \"message\" or\n"
    "\"why\"; or {\"error\":{...}} when there is no message to list.\n";

static int usage(const char *fmt, const char *word)
{
    return cli_usage_error("inspect", cli_inspect_usage, fmt, word);
}

int cli_inspect(int argc, char **argv)
{
    struct out o = {0, 1, 0, 0};
    const char *path = NULL;
    cuc_msg *m;
    uint8_t *data;
    size_t len, i;
    int k, rc;

    for (k = 0; k < argc; k++) {
        if (!strcmp(argv[k], "--json"))
            o.json = 1;
        else if (argv[k][0] == '-' && argv[k][1] != '\0')
            return usage("unknown option \"%s\"", argv[k]);
        else if (path)
            return usage("unexpected argument \"%s\" (one FILE or -)", argv[k]);
        else
            path = argv[k];
    }
    if (!path)
        return usage("%s", "missing FILE (or - for stdin)");
    if (cli_read_upto("inspect", path, &data, &len))
        return CLI_FAILURE;
    rc = cuc_msg_from_bytes(data, len, &m);
    free(data);
    /* Input larger than a message is read only that far: the library's
     * status for those bytes is its status for the whole input (the
     * header's checks come first, then any length over the maximum is
     * CUC_E_BADMSG), but its text would name the length read. */
    if (rc == CUC_E_BADMSG && len > CUC_MSG_MAX_BYTES)
        return cli_error(cuc_errname(rc), "inspect: %s is not a valid cucore message: it "
                         "holds more than %u bytes, the most a message may (CUC_MSG_MAX_BYTES) "
                         "(%s)", path, CUC_MSG_MAX_BYTES, cuc_errname(rc));
    if (rc)
        return cli_error(cuc_errname(rc), "inspect: %s is not a valid cucore message: %s (%s)",
                         path, cuc_errmsg(), cuc_errname(rc));
    if (o.json)
        printf("{\"bytes\":%zu,\"records\":[", len);
    else
        printf("message: %zu bytes, %zu record%s\n", len, cuc_msg_record_count(m),
               cuc_msg_record_count(m) == 1 ? "" : "s");
    for (i = 0; i < cuc_msg_record_count(m); i++)
        show(&o, m, i);
    if (o.json)
        printf("],\"malformed\":%s,\"failed\":%zu}\n", o.malformed ? "true" : "false",
               o.failed);
    if (o.malformed)
        fprintf(stderr, "cucore: inspect: %s holds malformed records\n", path);
    else if (o.failed)
        fprintf(stderr, "cucore: inspect: %zu of %zu record%s of %s did not resolve here\n",
                o.failed, cuc_msg_record_count(m), cuc_msg_record_count(m) == 1 ? "" : "s", path);
    cuc_msg_destroy(m);
    return o.malformed || o.failed ? CLI_FAILURE : CLI_OK;
}
