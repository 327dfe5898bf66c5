/* docs/wire-format.md against the code: the doc is read at test time and
 * each of its tables is compared with what the encoders write for known
 * objects, so that a doc that drifts from the code fails here.
 *
 * - the record-type table: every type, version, payload length range,
 *   multiple, fd range and reserved bytes equal CUC__RECORD_SHAPES (the
 *   shape the decoder enforces), and each owner file holds that type's
 *   encoder and resolver;
 * - every byte table (message header, record header, each record type,
 *   frame header): rows tile the bytes in order, and each field, found by
 *   its `name`, holds at the doc's offset and size exactly the value the
 *   encoder wrote for the known object (fixed values in the value column
 *   are compared too);
 * - the `checked` column of each payload table: a bad value of a `decode`
 *   field is refused by the decoder (CUC_E_BADMSG); of a `resolve` field,
 *   decoded and then refused by cuc_msg_get_*; a `—` field takes any value;
 * - the hex examples: each is exactly the encoding of the object it
 *   describes, and decodes; together they hold a record of every type;
 * - statuses the prose names: the first CUC_E_* after a phrase of the doc
 *   is what the code returns in the case the phrase describes (a 0-byte
 *   datagram from a live peer, the peer's end of file, an event handle the
 *   driver refuses, a handle this process has on another device), and the
 *   record header's `fd_index` rule is the record's own fd count's, as the
 *   decoder enforces it. */
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <sys/socket.h>

#include "cucore.h"
#include "check.h"
#include "driver_warm.h"
#include "msg_hex.h"
#include "ptx_kernels.h"
#include "base/sha256.h"
#include "driver/driver.h"
#include "exec/event.h"
#include "frame/frame.h"
#include "memory/buffer.h"
#include "memory/vmm.h"
#include "wire/records.h"

#define DOC CUC_SOURCE_DIR "/docs/wire-format.md"

static char *doc;          /* the whole file */
static char **lines;       /* doc split into lines (in place) */
static size_t nlines;
static int null_fd = -1;
static cuc_device *dev0;

static void fail(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void fail(const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "test_wire_doc: " DOC ": ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    exit(1);
}

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf;
    long n;

    if (!f)
        return NULL;
    CHECK(fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0);
    buf = malloc((size_t)n + 1);
    CHECK(buf != NULL);
    CHECK(fread(buf, 1, (size_t)n, f) == (size_t)n);
    buf[n] = '\0';
    fclose(f);
    if (len)
        *len = (size_t)n;
    return buf;
}

static void load_doc(void)
{
    size_t len, i, cap = 1024;
    char *p;

    doc = read_file(DOC, &len);
    if (!doc)
        fail("cannot read it");
    lines = malloc(cap * sizeof(*lines));
    CHECK(lines != NULL);
    for (p = doc; *p;) {
        char *nl = strchr(p, '\n');
        if (nlines == cap)
            CHECK((lines = realloc(lines, (cap *= 2) * sizeof(*lines))) != NULL);
        lines[nlines++] = p;
        if (!nl)
            break;
        *nl = '\0';
        p = nl + 1;
    }
    for (i = 0; i < nlines; i++) { /* no CR: the doc is plain LF text */
        size_t n = strlen(lines[i]);
        if (n && lines[i][n - 1] == '\r')
            lines[i][n - 1] = '\0';
    }
}

/* ---- tables ---- */

#define MAX_ROWS 64
#define MAX_CELLS 10

struct row {
    char *cell[MAX_CELLS];
    int ncells;
    size_t line; /* 1-based, for messages */
};

struct table {
    const char *where; /* the heading */
    struct row rows[MAX_ROWS];
    int nrows;
};

static char *trim(char *s)
{
    char *e;

    while (*s == ' ' || *s == '\t')
        s++;
    e = s + strlen(s);
    while (e > s && (e[-1] == ' ' || e[-1] == '\t'))
        *--e = '\0';
    return s;
}

/* Row copies, freed at the end. */
static char *copies[4096];
static size_t ncopies;

/* Splits a "| a | b |" line (a copy: the doc stays intact). */
static void split_row(const char *line, size_t lineno, struct row *r)
{
    char *copy = strdup(line), *p = copy + 1, *bar;

    CHECK(copy != NULL && line[0] == '|' && ncopies < CUC_ARRAY_LEN(copies));
    copies[ncopies++] = copy;
    r->ncells = 0;
    r->line = lineno;
    while ((bar = strchr(p, '|')) != NULL) {
        if (r->ncells == MAX_CELLS)
            fail("line %zu: more than %d cells", lineno, MAX_CELLS);
        *bar = '\0';
        r->cell[r->ncells++] = trim(p);
        p = bar + 1;
    }
}

/* The first table after the heading line that starts with heading, whose
 * header row starts with first_col; its data rows. */
static void find_table(const char *heading, const char *first_col, struct table *t)
{
    size_t i, j;
    struct row hdr;

    for (i = 0; i < nlines; i++)
        if (!strncmp(lines[i], heading, strlen(heading)))
            break;
    if (i == nlines)
        fail("no heading \"%s\"", heading);
    for (j = i + 1; j < nlines && lines[j][0] != '#'; j++)
        if (lines[j][0] == '|')
            break;
    if (j == nlines || lines[j][0] != '|')
        fail("no table under \"%s\"", heading);
    split_row(lines[j], j + 1, &hdr);
    if (strcmp(hdr.cell[0], first_col))
        fail("line %zu: the table under \"%s\" starts with \"%s\", not \"%s\"", j + 1,
             heading, hdr.cell[0], first_col);
    t->where = heading;
    t->nrows = 0;
    for (j += 2; j < nlines && lines[j][0] == '|'; j++) {
        if (t->nrows == MAX_ROWS)
            fail("table under \"%s\": too many rows", heading);
        split_row(lines[j], j + 1, &t->rows[t->nrows]);
        if (t->rows[t->nrows].ncells != hdr.ncells)
            fail("line %zu: %d cells, the header has %d", j + 1,
                 t->rows[t->nrows].ncells, hdr.ncells);
        t->nrows++;
    }
}

/* The text between the first pair of backticks of s (static buffer). */
static const char *ticked(const char *s, size_t line)
{
    static char name[128];
    const char *a = strchr(s, '`'), *b = a ? strchr(a + 1, '`') : NULL;

    if (!b || (size_t)(b - a - 1) >= sizeof(name))
        fail("line %zu: the field \"%s\" does not start with a `name`", line, s);
    memcpy(name, a + 1, (size_t)(b - a - 1));
    name[b - a - 1] = '\0';
    return name;
}

/* ---- offset and size expressions: "40+16·p", "8·n", "48+name_len" ---- */

struct var {
    const char *name;
    uint64_t value;
};

static int eval_factor(const char **s, const struct var *vars, uint64_t *v)
{
    const char *p = *s;
    size_t i, n;

    if (*p >= '0' && *p <= '9') {
        *v = strtoull(p, (char **)s, 10);
        return 0;
    }
    for (n = 0; (p[n] >= 'a' && p[n] <= 'z') || p[n] == '_'; n++)
        ;
    for (i = 0; n && vars && vars[i].name; i++)
        if (strlen(vars[i].name) == n && !strncmp(vars[i].name, p, n)) {
            *v = vars[i].value;
            *s = p + n;
            return 0;
        }
    return -1;
}

/* A sum of products of numbers and variables; -1 if s is not one. */
static int eval(const char *s, const struct var *vars, uint64_t *out)
{
    uint64_t sum = 0;

    for (;;) {
        uint64_t prod = 1, f;
        for (;;) {
            if (eval_factor(&s, vars, &f))
                return -1;
            prod *= f;
            if (!strncmp(s, "\xc2\xb7", 2)) /* U+00B7 middle dot */
                s += 2;
            else if (*s == '*')
                s++;
            else if (!((*s >= 'a' && *s <= 'z') || *s == '_'))
                break; /* "16p": a number then a variable multiplies */
        }
        sum += prod;
        if (*s == '+') {
            s++;
            continue;
        }
        break;
    }
    if (*s)
        return -1;
    *out = sum;
    return 0;
}

/* ---- field expectations ---- */

enum check { CK_NONE, CK_DECODE, CK_RESOLVE };
/* What breaks a field: all 0xff, all 0, or 0x7fffffff (a status that is
 * no code: -1 is one). */
enum bad { BAD_FF, BAD_ZERO, BAD_HIGH };

struct field {
    const char *name;
    const uint8_t *want; /* the bytes the encoder must have written */
    size_t len;
    int bad;             /* the value that breaks the field's rule */
    int fixed;           /* the value column states it: compare */
};

struct layout {
    const char *heading;
    struct var vars[4];
    struct field fields[20];
    size_t nfields;
};

static void add_field(struct layout *l, const char *name, const void *want, size_t len,
                      int bad)
{
    CHECK(l->nfields < CUC_ARRAY_LEN(l->fields));
    l->fields[l->nfields++] = (struct field){name, want, len, bad, 0};
}

/* Storage for expected values (little-endian integers, zeros). */
static uint8_t pool_of_bytes[1 << 16];
static size_t pool_used;

static const uint8_t *le(uint64_t v, size_t n)
{
    uint8_t *p = pool_of_bytes + pool_used;
    size_t i;

    CHECK(pool_used + n <= sizeof(pool_of_bytes));
    for (i = 0; i < n; i++)
        p[i] = i < 8 ? (uint8_t)(v >> (8 * i)) : 0;
    pool_used += n;
    return p;
}

static const uint8_t *zeros(size_t n)
{
    return le(0, n);
}

static const uint8_t *copy_of(const void *src, size_t n)
{
    uint8_t *p = pool_of_bytes + pool_used;

    CHECK(pool_used + n <= sizeof(pool_of_bytes));
    memcpy(p, src, n);
    pool_used += n;
    return p;
}

static const struct field *field_of(const struct layout *l, const char *name)
{
    for (size_t i = 0; i < l->nfields; i++)
        if (!strcmp(l->fields[i].name, name))
            return &l->fields[i];
    return NULL;
}

struct placed {
    const struct field *f;
    uint64_t off, size;
    int check;
};

/* Checks a byte table against bytes (len of them, starting at the table's
 * offset 0): rows in order, without gap or overlap, covering exactly len;
 * each named field's bytes equal to what the test expects; a number or
 * `0x..` at the start of a value column (value_col >= 0) equal to the
 * field. Fills placed[] (one per row) for the checked-column tests. */
static int check_layout(const struct table *t, const struct layout *l, const uint8_t *bytes,
                        uint64_t len, int value_col, int checked_col, struct placed *placed)
{
    uint64_t at = 0;
    int seen[20] = {0}, i;

    for (i = 0; i < t->nrows; i++) {
        const struct row *r = &t->rows[i];
        const char *name = ticked(r->cell[2], r->line);
        const struct field *f = field_of(l, name);
        uint64_t off, size;

        if (!f)
            fail("line %zu: field `%s` under \"%s\" is not a field the encoder writes",
                 r->line, name, t->where);
        seen[f - l->fields]++;
        if (eval(r->cell[0], l->vars, &off) || eval(r->cell[1], l->vars, &size))
            fail("line %zu: offset \"%s\" or size \"%s\" is not an expression of the "
                 "table's variables", r->line, r->cell[0], r->cell[1]);
        if (off != at)
            fail("line %zu: `%s` at offset %llu, but the field before it ends at %llu",
                 r->line, name, (unsigned long long)off, (unsigned long long)at);
        if (size != f->len)
            fail("line %zu: `%s` is %llu bytes in the doc, %zu in the encoder's output",
                 r->line, name, (unsigned long long)size, f->len);
        if (off + size > len)
            fail("line %zu: `%s` ends at %llu, past the %llu bytes the encoder wrote",
                 r->line, name, (unsigned long long)(off + size), (unsigned long long)len);
        if (memcmp(bytes + off, f->want, f->len))
            fail("line %zu: `%s` at offset %llu: the encoder's bytes are not the field's "
                 "value", r->line, name, (unsigned long long)off);
        if (value_col >= 0 && f->fixed) {
            const char *v = r->cell[value_col];
            uint64_t doc_v = 0, enc = 0;
            if (*v == '`')
                v++;
            doc_v = strtoull(v, NULL, 0);
            for (size_t k = 0; k < f->len && k < 8; k++)
                enc |= (uint64_t)bytes[off + k] << (8 * k);
            if (doc_v != enc)
                fail("line %zu: `%s` says %s; the encoder wrote %llu", r->line, name,
                     r->cell[value_col], (unsigned long long)enc);
        }
        if (placed) {
            const char *c = checked_col >= 0 ? r->cell[checked_col] : "";
            placed[i].f = f;
            placed[i].off = off;
            placed[i].size = size;
            if (!strcmp(c, "decode"))
                placed[i].check = CK_DECODE;
            else if (!strcmp(c, "resolve"))
                placed[i].check = CK_RESOLVE;
            else if (!strcmp(c, "\xe2\x80\x94")) /* em dash */
                placed[i].check = CK_NONE;
            else if (checked_col >= 0)
                fail("line %zu: checked \"%s\" is not decode, resolve or \xe2\x80\x94",
                     r->line, c);
        }
        at = off + size;
    }
    if (at != len)
        fail("\"%s\": the fields end at %llu; the encoder wrote %llu bytes", t->where,
             (unsigned long long)at, (unsigned long long)len);
    for (size_t k = 0; k < l->nfields; k++)
        if (seen[k] != 1)
            fail("\"%s\": field `%s` appears %d times in the table (once wanted)",
                 t->where, l->fields[k].name, seen[k]);
    return t->nrows;
}

/* ---- the known objects, encoded ---- */

/* A one-record message m, its bytes and fds; resolve() is the record's
 * cuc_msg_get_* (0 or its status; on success what it made is dropped). */
struct sample {
    const char *heading;
    cuc_msg *m;
    uint8_t *bytes;
    size_t len;
    const int *fds;
    size_t nfds;
    int (*resolve)(cuc_msg *m);
    struct layout l;
};

static void encode(struct sample *s)
{
    CHECK_OK(cuc__msg_encode(s->m, &s->bytes, &s->len, &s->fds, &s->nfds));
    CHECK(cuc_msg_record_count(s->m) == 1);
}

static int decode_copy(const struct sample *s, const uint8_t *bytes, cuc_msg **out)
{
    int fds[CUC_VMM_MAX_CHUNKS];

    for (size_t i = 0; i < s->nfds; i++)
        CHECK((fds[i] = fcntl(s->fds[i], F_DUPFD_CLOEXEC, 0)) >= 0);
    return cuc__msg_decode(bytes, s->len, fds, s->nfds, out);
}

static int res_device(cuc_msg *m)
{
    cuc_device *d;

    return cuc_msg_get_device(m, 0, &d);
}

static int res_stream(cuc_msg *m)
{
    cuc_stream *s;

    return cuc_msg_get_stream(m, 0, &s);
}

static int res_event(cuc_msg *m)
{
    cuc_event *ev;
    int rc = cuc_msg_get_event(m, 0, &ev);

    if (!rc)
        cuc_event_unref(ev);
    return rc;
}

static int res_launch(cuc_msg *m)
{
    cuc_launch_config c;

    return cuc_msg_get_launch_config(m, 0, &c);
}

static int res_kernel(cuc_msg *m)
{
    cuc_kernel *k;
    int rc = cuc_msg_get_kernel(m, 0, &k);

    if (!rc)
        cuc_kernel_destroy(k);
    return rc;
}

static int res_pool(cuc_msg *m)
{
    cuc_pool *p;
    int rc = cuc_msg_get_pool(m, 0, &p);

    if (!rc)
        cuc_pool_unref(p);
    return rc;
}

static int res_buffer(cuc_msg *m)
{
    cuc_buffer *b;
    int rc = cuc_msg_get_buffer(m, 0, &b);

    if (!rc)
        CHECK_OK(cuc_buffer_unref_async(b, NULL));
    return rc;
}

static int res_vmm(cuc_msg *m)
{
    cuc_vmm *v;
    int rc = cuc_msg_get_vmm(m, 0, &v);

    if (!rc)
        cuc_vmm_unref(v);
    return rc;
}

static int res_fd(cuc_msg *m)
{
    int fd, rc = cuc_msg_take_fd(m, 0, &fd, NULL);

    if (!rc)
        close(fd);
    return rc;
}

static cuc_msg *new_msg(void)
{
    cuc_msg *m;

    CHECK_OK(cuc_msg_create(&m));
    return m;
}

static uint64_t lease_of(const cuc_msg *m)
{
    const struct cuc__lease_att *atts;

    CHECK(cuc__msg_leases(m, &atts) == 1);
    return atts[0].id;
}

/* Objects kept until the end (the samples' records name them). */
static cuc_event *ev;
static cuc_kernel *kern;
static cuc_pool *pool;
static cuc_buffer *buf;
static cuc_vmm *vmm;
static cuc_device *peers[2];
static size_t npeers, gran;

static void sample_device(struct sample *s)
{
    s->heading = "### device (type 1)";
    s->m = new_msg();
    CHECK_OK(cuc_msg_add_device(s->m, dev0));
    s->resolve = res_device;
    add_field(&s->l, "uuid", copy_of(cuc_device_uuid(dev0)->bytes, 16), 16, BAD_FF);
}

static void sample_stream(struct sample *s)
{
    cuc_stream *st;

    s->heading = "### stream (type 2)";
    s->m = new_msg();
    CHECK_OK(cuc_stream_per_thread(dev0, &st));
    CHECK_OK(cuc_msg_add_stream(s->m, st));
    s->resolve = res_stream;
    add_field(&s->l, "kind", le(CUC_STREAM_PER_THREAD_DEFAULT, 4), 4, BAD_FF);
    add_field(&s->l, "reserved", zeros(4), 4, BAD_FF);
    add_field(&s->l, "device_uuid", copy_of(cuc_device_uuid(dev0)->bytes, 16), 16, BAD_FF);
}

static void sample_event(struct sample *s)
{
    CUipcEventHandle h;

    s->heading = "### event (type 3)";
    s->m = new_msg();
    CHECK_OK(cuc_event_create(dev0, CUC_EVENT_IPC | CUC_EVENT_BLOCKING_SYNC, &ev));
    CHECK_OK(cuc_msg_add_event(s->m, ev));
    CHECK(cuc__event_known_handle(ev, &h)); /* the handle the add fetched */
    s->resolve = res_event;
    add_field(&s->l, "flags", le(CUC_EVENT_IPC | CUC_EVENT_BLOCKING_SYNC, 4), 4, BAD_FF);
    add_field(&s->l, "reserved", zeros(4), 4, BAD_FF);
    add_field(&s->l, "device_uuid", copy_of(cuc_device_uuid(dev0)->bytes, 16), 16, BAD_FF);
    add_field(&s->l, "ipc_handle", copy_of(h.reserved, 64), 64, BAD_FF);
}

static cuc_launch_config example_config(void)
{
    cuc_launch_config c;

    cuc_launch_config_init(&c);
    c.grid[0] = 8, c.grid[1] = 4, c.block[0] = 128, c.cluster[0] = 2;
    c.shared_mem = 1024, c.cooperative = 1;
    return c;
}

static void sample_launch(struct sample *s)
{
    static const char *const dims[9] = {"grid_x", "grid_y", "grid_z", "block_x", "block_y",
                                        "block_z", "cluster_x", "cluster_y", "cluster_z"};
    cuc_launch_config c = example_config();
    int i;

    s->heading = "### launch config (type 4)";
    s->m = new_msg();
    CHECK_OK(cuc_msg_add_launch_config(s->m, &c));
    s->resolve = res_launch;
    for (i = 0; i < 3; i++)
        add_field(&s->l, dims[i], le(c.grid[i], 4), 4, BAD_FF);
    for (i = 0; i < 3; i++)
        add_field(&s->l, dims[3 + i], le(c.block[i], 4), 4, BAD_FF);
    for (i = 0; i < 3; i++)
        add_field(&s->l, dims[6 + i], le(c.cluster[i], 4), 4, BAD_FF);
    add_field(&s->l, "shared_mem", le(c.shared_mem, 4), 4, BAD_FF);
    add_field(&s->l, "cooperative", le(c.cooperative, 4), 4, BAD_FF);
    add_field(&s->l, "reserved", zeros(20), 20, BAD_FF);
}

static void sample_kernel(struct sample *s)
{
    size_t n = strlen(ptx_twice);
    uint8_t hash[32];

    s->heading = "### kernel (type 5)";
    s->m = new_msg();
    CHECK_OK(cuc_kernel_load(CUC_IMAGE_PTX, ptx_twice, n, "twice", &kern));
    CHECK_OK(cuc_msg_add_kernel(s->m, kern));
    cuc__sha256(ptx_twice, n, hash);
    s->resolve = res_kernel;
    s->l.vars[0] = (struct var){"name_len", 6};
    s->l.vars[1] = (struct var){"image_len", n};
    add_field(&s->l, "kind", le(CUC_IMAGE_PTX, 4), 4, BAD_FF);
    add_field(&s->l, "name_len", le(6, 4), 4, BAD_FF);
    add_field(&s->l, "image_len", le(n, 4), 4, BAD_FF);
    add_field(&s->l, "reserved", zeros(4), 4, BAD_FF);
    add_field(&s->l, "sha256", copy_of(hash, 32), 32, BAD_FF);
    add_field(&s->l, "name", copy_of("twice", 6), 6, BAD_FF); /* with its NUL */
    add_field(&s->l, "image", copy_of(ptx_twice, n), n, BAD_FF);
}

static void sample_pool(struct sample *s)
{
    struct cuc_pool_props props = {CUC_POOL_DEVICE, CUC_POOL_IPC, 0};
    uint8_t id[CUC_POOL_ID_LEN];

    s->heading = "### pool (type 6)";
    s->m = new_msg();
    CHECK_OK(cuc_pool_create(dev0, &props, &pool));
    CHECK_OK(cuc_msg_add_pool(s->m, pool));
    cuc_pool_id(pool, id);
    s->resolve = res_pool;
    add_field(&s->l, "pool_id", copy_of(id, 16), 16, BAD_FF);
    add_field(&s->l, "owner_uuid", copy_of(cuc_device_uuid(dev0)->bytes, 16), 16, BAD_FF);
    add_field(&s->l, "kind", le(CUC_POOL_DEVICE, 4), 4, BAD_FF);
    add_field(&s->l, "handle_type", le(CUC_POOL_HANDLE_POSIX_FD, 4), 4, BAD_FF);
}

static void sample_buffer(struct sample *s)
{
    CUmemPoolPtrExportData d;
    uint8_t id[CUC_POOL_ID_LEN];

    s->heading = "### buffer (type 7)";
    s->m = new_msg();
    CHECK_OK(cuc_buffer_alloc_async(pool, 4096, NULL, &buf));
    CHECK_OK(cuc_msg_add_buffer(s->m, buf));
    CHECK_OK(cuc__buffer_export(buf, &d));
    cuc_pool_id(pool, id);
    s->resolve = res_buffer;
    add_field(&s->l, "pool_id", copy_of(id, 16), 16, BAD_FF);
    add_field(&s->l, "size", le(4096, 8), 8, BAD_ZERO);
    add_field(&s->l, "offset", zeros(8), 8, BAD_FF);
    add_field(&s->l, "lease_id", le(lease_of(s->m), 8), 8, BAD_ZERO);
    add_field(&s->l, "export_data", copy_of(d.reserved, 48), 48, BAD_FF);
    /* what the sender sends of the 16 bytes the driver leaves: zero */
    add_field(&s->l, "export_data_tail", zeros(16), 16, BAD_FF);
}

static cuc_buffer *view;

static void sample_buffer_view(struct sample *s)
{
    CUmemPoolPtrExportData d;
    uint8_t id[CUC_POOL_ID_LEN];

    s->heading = "### buffer view (type 13)";
    s->m = new_msg();
    CHECK_OK(cuc_buffer_view(buf, 1024, 512, &view));
    CHECK_OK(cuc_msg_add_buffer(s->m, view));
    CHECK_OK(cuc__buffer_export(buf, &d));
    cuc_pool_id(pool, id);
    s->resolve = res_buffer;
    add_field(&s->l, "pool_id", copy_of(id, 16), 16, BAD_FF);
    add_field(&s->l, "size", le(512, 8), 8, BAD_ZERO);
    add_field(&s->l, "offset", le(1024, 8), 8, BAD_FF);
    add_field(&s->l, "lease_id", le(lease_of(s->m), 8), 8, BAD_ZERO);
    add_field(&s->l, "export_data", copy_of(d.reserved, 48), 48, BAD_FF);
    add_field(&s->l, "export_data_tail", zeros(16), 16, BAD_FF);
    add_field(&s->l, "alloc_size", le(4096, 8), 8, BAD_FF);
}

static cuc_buffer *wrapped;

static void sample_ipc_buffer(struct sample *s)
{
    CUdeviceptr base = 0;
    uint8_t self[16];
    struct cuc__record r;

    s->heading = "### ipc buffer (type 14)";
    s->m = new_msg();
    CHECK_OK(cuc_device_set_current(dev0));
    CHECK(CUC_DRV->cuMemAlloc(&base, 8192) == CUDA_SUCCESS);
    CHECK_OK(cuc_buffer_wrap(dev0, (void *)(uintptr_t)(base + 2048), 1024, &wrapped));
    CHECK_OK(cuc_msg_add_buffer(s->m, wrapped));
    CHECK_OK(cuc__msg_record(s->m, 0, &r));
    memcpy(self, wrapped->root->ipc->exporter, 16);
    s->resolve = res_buffer;
    add_field(&s->l, "device_uuid", copy_of(cuc_device_uuid(dev0)->bytes, 16), 16, BAD_FF);
    add_field(&s->l, "exporter", copy_of(self, 16), 16, BAD_FF);
    add_field(&s->l, "generation", le(wrapped->root->ipc->gen, 8), 8, BAD_ZERO);
    add_field(&s->l, "base_size", le(8192, 8), 8, BAD_FF);
    add_field(&s->l, "offset", le(2048, 8), 8, BAD_FF);
    add_field(&s->l, "size", le(1024, 8), 8, BAD_ZERO);
    add_field(&s->l, "lease_id", le(lease_of(s->m), 8), 8, BAD_ZERO);
    add_field(&s->l, "handle_type", le(CUC_IPC_HANDLE_LEGACY, 4), 4, BAD_FF);
    add_field(&s->l, "reserved", zeros(4), 4, BAD_FF);
    add_field(&s->l, "handle", copy_of(wrapped->root->ipc->handle.reserved, 64), 64, BAD_FF);
}

static void sample_vmm(struct sample *s)
{
    size_t sizes[2];
    uint8_t uu[32];

    s->heading = "### vmm (type 8)";
    CHECK_OK(cuc_vmm_granularity(dev0, &gran));
    sizes[0] = gran, sizes[1] = 2 * gran;
    if (cuc_vmm_create(dev0, (const cuc_device *const *)peers, npeers, sizes, 2, &vmm) ==
        CUC_E_NOT_SUPPORTED) { /* GPUs without peer access: no peers then */
        npeers = 0;
        CHECK_OK(cuc_vmm_create(dev0, NULL, 0, sizes, 2, &vmm));
    }
    s->m = new_msg();
    CHECK_OK(cuc_msg_add_vmm(s->m, vmm));
    s->resolve = res_vmm;
    s->l.vars[0] = (struct var){"p", npeers};
    s->l.vars[1] = (struct var){"n", 2};
    for (size_t i = 0; i < npeers; i++)
        memcpy(uu + 16 * i, cuc_device_uuid(peers[i])->bytes, 16);
    add_field(&s->l, "handle_type", le(CUC_VMM_HANDLE_POSIX_FD, 4), 4, BAD_FF);
    add_field(&s->l, "chunk_count", le(2, 4), 4, BAD_FF);
    add_field(&s->l, "peer_count", le(npeers, 4), 4, BAD_FF);
    add_field(&s->l, "reserved", zeros(4), 4, BAD_FF);
    add_field(&s->l, "lease_id", le(lease_of(s->m), 8), 8, BAD_ZERO);
    add_field(&s->l, "owner_uuid", copy_of(cuc_device_uuid(dev0)->bytes, 16), 16, BAD_FF);
    add_field(&s->l, "peer_uuids", copy_of(uu, 16 * npeers), 16 * npeers, BAD_FF);
    {
        uint8_t *sz = pool_of_bytes + pool_used;
        le(gran, 8);
        le(2 * gran, 8);
        add_field(&s->l, "chunk_sizes", sz, 16, BAD_ZERO);
    }
}

static void sample_fd(struct sample *s)
{
    s->heading = "### fd (type 9)";
    s->m = new_msg();
    CHECK_OK(cuc_msg_add_fd(s->m, null_fd, 0xc0ffee));
    s->resolve = res_fd;
    add_field(&s->l, "tag", le(0xc0ffee, 4), 4, BAD_FF);
    add_field(&s->l, "reserved", zeros(4), 4, BAD_FF);
}

static void sample_release(struct sample *s)
{
    uint8_t ids[24];

    s->heading = "### release (type 10)";
    s->m = new_msg();
    for (int i = 0; i < 3; i++)
        cuc__put64(ids + 8 * i, 0x1000000000ull + (uint64_t)i);
    CHECK_OK(cuc__msg_add_record(s->m, CUC_RECORD_RELEASE, CUC_RECORD_RELEASE_VERSION, ids,
                                 sizeof(ids), NULL, 0));
    s->resolve = NULL; /* the channel's; the table claims no check */
    s->l.vars[0] = (struct var){"n", 3};
    add_field(&s->l, "lease_ids", copy_of(ids, 24), 24, BAD_FF);
}

static void sample_refused(struct sample *s)
{
    uint8_t p[8] = {0};

    s->heading = "### refused (type 15)";
    s->m = new_msg();
    cuc__put32(p, 0x01020304u);
    CHECK_OK(cuc__msg_add_record(s->m, CUC_RECORD_REFUSED, CUC_RECORD_REFUSED_VERSION, p,
                                 sizeof(p), NULL, 0));
    s->resolve = NULL; /* the channel's; the table claims no check */
    add_field(&s->l, "seq", le(0x01020304u, 4), 4, BAD_FF);
    add_field(&s->l, "reserved", zeros(4), 4, BAD_FF);
}

static int res_kernel_held(cuc_msg *m)
{
    struct cuc__kernel_id id;

    return cuc__kernel_held_rec_read(m, 0, &id);
}

/* The sample kernel by reference: kern is loaded here, so it resolves. */
static void sample_kernel_ref(struct sample *s)
{
    struct cuc_kernel_record rec;

    s->heading = "### kernel ref (type 11)";
    s->m = new_msg();
    rec.kind = CUC_IMAGE_PTX;
    memcpy(rec.hash, cuc_kernel_hash(kern), 32);
    rec.name = "twice";
    rec.image = NULL;
    rec.image_len = strlen(ptx_twice);
    CHECK_OK(cuc__kernel_ref_rec_put(s->m, &rec));
    s->resolve = res_kernel;
    s->l.vars[0] = (struct var){"name_len", 6};
    add_field(&s->l, "kind", le(CUC_IMAGE_PTX, 4), 4, BAD_FF);
    add_field(&s->l, "name_len", le(6, 4), 4, BAD_FF);
    add_field(&s->l, "image_len", le(strlen(ptx_twice), 4), 4, BAD_FF);
    add_field(&s->l, "reserved", zeros(4), 4, BAD_FF);
    add_field(&s->l, "sha256", copy_of(cuc_kernel_hash(kern), 32), 32, BAD_FF);
    add_field(&s->l, "name", copy_of("twice", 6), 6, BAD_FF);
}

static void sample_kernel_held(struct sample *s)
{
    struct cuc__kernel_id id = {CUC_IMAGE_PTX, (uint32_t)strlen(ptx_twice), {0}};

    s->heading = "### kernel held (type 12)";
    s->m = new_msg();
    memcpy(id.hash, cuc_kernel_hash(kern), 32);
    CHECK_OK(cuc__kernel_held_rec_put(s->m, &id));
    s->resolve = res_kernel_held;
    add_field(&s->l, "kind", le(CUC_IMAGE_PTX, 4), 4, BAD_FF);
    add_field(&s->l, "image_len", le(strlen(ptx_twice), 4), 4, BAD_FF);
    add_field(&s->l, "sha256", copy_of(cuc_kernel_hash(kern), 32), 32, BAD_FF);
}

static int res_share(cuc_msg *m)
{
    struct cuc_share_record r;

    return cuc_msg_read_share(m, 0, &r);
}

static int res_held(cuc_msg *m)
{
    struct cuc_held_record r;

    return cuc_msg_read_held(m, 0, &r);
}

static int res_claim(cuc_msg *m)
{
    uint8_t token[16];
    uint32_t flags;

    return cuc__claim_rec_read(m, 0, token, &flags);
}

static int res_confirm(cuc_msg *m)
{
    uint8_t token[16];
    int status;

    return cuc__confirm_rec_read(m, 0, token, &status);
}

#define SAMPLE_PATH "/tmp/cucore-0/cucore-share-0011223344556677.sock"

static void sample_share(struct sample *s)
{
    struct cuc_share_record r = {{0}, {0}, {0}, SAMPLE_PATH};
    uint8_t path[120] = {0};

    s->heading = "### share (type 16)";
    s->m = new_msg();
    memset(r.point, 0x11, 16);
    memset(r.boot_id, 0x22, 16);
    memset(r.token, 0x33, 16);
    memcpy(path, SAMPLE_PATH, strlen(SAMPLE_PATH));
    CHECK_OK(cuc__share_rec_put(s->m, &r));
    s->resolve = res_share;
    add_field(&s->l, "point", copy_of(r.point, 16), 16, BAD_FF);
    add_field(&s->l, "boot_id", copy_of(r.boot_id, 16), 16, BAD_FF);
    add_field(&s->l, "token", copy_of(r.token, 16), 16, BAD_FF);
    add_field(&s->l, "reserved", zeros(4), 4, BAD_FF);
    add_field(&s->l, "path_len", le(strlen(SAMPLE_PATH), 4), 4, BAD_FF);
    add_field(&s->l, "path", copy_of(path, 120), 120, BAD_FF);
}

/* A held pool record: the pool example's payload. */
static void sample_held(struct sample *s)
{
    uint8_t pl[40] = {0};

    s->heading = "### held (type 17)";
    s->m = new_msg();
    memset(pl, 0x10, 16);
    memcpy(pl + 16, cuc_device_uuid(dev0)->bytes, 16);
    pl[32] = CUC_POOL_DEVICE;
    pl[36] = CUC_POOL_HANDLE_POSIX_FD;
    CHECK_OK(cuc__held_rec_put(s->m, &(struct cuc_held_record){CUC_RECORD_POOL, 1, 1, pl,
                                                                 sizeof(pl)}));
    s->resolve = res_held;
    s->l.vars[0] = (struct var){"len", 40};
    add_field(&s->l, "type", le(CUC_RECORD_POOL, 2), 2, BAD_FF);
    add_field(&s->l, "version", le(1, 2), 2, BAD_FF);
    add_field(&s->l, "nfds", le(1, 4), 4, BAD_FF);
    add_field(&s->l, "len", le(40, 4), 4, BAD_FF);
    add_field(&s->l, "reserved", zeros(4), 4, BAD_FF);
    add_field(&s->l, "payload", copy_of(pl, 40), 40, BAD_FF);
}

static void sample_claim(struct sample *s)
{
    uint8_t token[16];

    s->heading = "### claim (type 18)";
    s->m = new_msg();
    memset(token, 0x33, sizeof(token));
    CHECK_OK(cuc__claim_rec_put(s->m, token, CUC__CLAIM_FETCH));
    s->resolve = res_claim;
    add_field(&s->l, "token", copy_of(token, 16), 16, BAD_FF);
    add_field(&s->l, "flags", le(CUC__CLAIM_FETCH, 4), 4, BAD_FF);
    add_field(&s->l, "reserved", zeros(4), 4, BAD_FF);
}

static void sample_confirm(struct sample *s)
{
    uint8_t token[16];

    s->heading = "### confirm (type 19)";
    s->m = new_msg();
    memset(token, 0x33, sizeof(token));
    CHECK_OK(cuc__confirm_rec_put(s->m, token, CUC_E_NOT_FOUND));
    s->resolve = res_confirm;
    add_field(&s->l, "token", copy_of(token, 16), 16, BAD_FF);
    add_field(&s->l, "status", le((uint32_t)CUC_E_NOT_FOUND, 4), 4, BAD_HIGH);
    add_field(&s->l, "reserved", zeros(4), 4, BAD_FF);
}

/* ---- the record-type table against CUC__RECORD_SHAPES ---- */

struct code_shape {
    unsigned type, version;
    uint32_t lo, hi, mul, flo, fhi, roff, rlen;
};

#define CODE_SHAPE_(name, ver, lo, hi, mul, flo, fhi, roff, rlen) \
    {CUC_RECORD_##name, ver, lo, hi, mul, flo, fhi, roff, rlen},
static const struct code_shape code_shapes[] = {CUC__RECORD_SHAPES(CODE_SHAPE_)};
#undef CODE_SHAPE_

/* "a..b" or "a", then anything (a parenthesis): the range. */
static void range_of(const char *s, size_t line, uint64_t *lo, uint64_t *hi)
{
    char *end;

    *lo = strtoull(s, &end, 10);
    if (end == s)
        fail("line %zu: \"%s\" is not a number or a range", line, s);
    *hi = *lo;
    if (!strncmp(end, "..", 2)) {
        const char *b = end + 2;
        *hi = strtoull(b, &end, 10);
        if (end == b)
            fail("line %zu: \"%s\" is not a range", line, s);
    }
}

/* The owner files (paths in backticks: the codec, and the object's
 * records) hold the type's encoder and its resolver between them. */
static void check_owner(unsigned type, const char *owner, size_t line)
{
    static const char *const codecs[][2] = {
        [CUC_RECORD_DEVICE] = {"int cuc_msg_add_device(", "int cuc_msg_get_device("},
        [CUC_RECORD_STREAM] = {"int cuc_msg_add_stream(", "int cuc_msg_get_stream("},
        [CUC_RECORD_EVENT] = {"int cuc_msg_add_event(", "int cuc_msg_get_event("},
        [CUC_RECORD_LAUNCH_CONFIG] = {"int cuc_msg_add_launch_config(",
                                      "int cuc_msg_get_launch_config("},
        [CUC_RECORD_KERNEL] = {"int cuc_msg_add_kernel(", "int cuc_msg_get_kernel("},
        [CUC_RECORD_POOL] = {"int cuc_msg_add_pool(", "int cuc_msg_get_pool("},
        [CUC_RECORD_BUFFER] = {"int cuc_msg_add_buffer(", "int cuc_msg_get_buffer("},
        [CUC_RECORD_VMM] = {"int cuc_msg_add_vmm(", "int cuc_msg_get_vmm("},
        [CUC_RECORD_FD] = {"int cuc_msg_add_fd(", "int cuc_msg_take_fd("},
        [CUC_RECORD_RELEASE] = {"int cuc__release_msg_build(", "int cuc__leases_take_release("},
        [CUC_RECORD_KERNEL_REF] = {"int cuc__kernel_ref_rec_put(", "int cuc_msg_get_kernel("},
        [CUC_RECORD_KERNEL_HELD] = {"int cuc__kernel_held_rec_put(",
                                    "int cuc__kernel_refs_take_held("},
        [CUC_RECORD_BUFFER_VIEW] = {"int cuc_msg_add_buffer(", "int cuc_msg_get_buffer("},
        [CUC_RECORD_IPC_BUFFER] = {"int cuc_msg_add_buffer(", "int cuc_msg_get_buffer("},
        [CUC_RECORD_REFUSED] = {"int cuc__refused_msg_build(", "int cuc__leases_take_release("},
        [CUC_RECORD_SHARE] = {"int cuc__share_rec_put(", "int cuc_msg_read_share("},
        [CUC_RECORD_HELD] = {"int cuc__held_rec_put(", "int cuc_msg_read_held("},
        [CUC_RECORD_CLAIM] = {"int cuc__claim_rec_put(", "int cuc__claim_rec_read("},
        [CUC_RECORD_CONFIRM] = {"int cuc__confirm_rec_put(", "int cuc__confirm_rec_read("},
    };
    int found[2] = {0, 0};
    char path[4096];

    for (const char *p = owner; (p = strchr(p, '`')) != NULL; p = strchr(p + 1, '`') + 1) {
        char *text;
        snprintf(path, sizeof(path), "%s/%s", CUC_SOURCE_DIR, ticked(p, line));
        text = read_file(path, NULL);
        if (!text)
            fail("line %zu: owner %s does not exist", line, path);
        for (int k = 0; k < 2; k++)
            found[k] |= strstr(text, codecs[type][k]) != NULL;
        free(text);
    }
    for (int k = 0; k < 2; k++)
        if (!found[k])
            fail("line %zu: no owner in \"%s\" holds \"%s...)\"", line, owner,
                 codecs[type][k]);
}

static void test_type_table(void)
{
    struct table t;
    int seen[32] = {0}, i;

    find_table("## Record types", "type", &t);
    for (i = 0; i < t.nrows; i++) {
        const struct row *r = &t.rows[i];
        unsigned type = (unsigned)strtoul(r->cell[0], NULL, 10);
        const struct code_shape *c = NULL;
        uint64_t lo, hi, flo, fhi, rlo = 0, rhi = 0;

        for (size_t k = 0; k < CUC_ARRAY_LEN(code_shapes); k++)
            if (code_shapes[k].type == type && code_shapes[k].version)
                c = &code_shapes[k];
        if (!c)
            fail("line %zu: type %u is not one CUC__RECORD_SHAPES lists", r->line, type);
        seen[type]++;
        if (strcmp(r->cell[1], cuc_record_type_name((int)type)))
            fail("line %zu: type %u is \"%s\" in the doc, \"%s\" in the code", r->line,
                 type, r->cell[1], cuc_record_type_name((int)type));
        if (strtoul(r->cell[2], NULL, 10) != c->version)
            fail("line %zu: %s version %s, the code reads %u", r->line, r->cell[1],
                 r->cell[2], c->version);
        range_of(r->cell[3], r->line, &lo, &hi);
        if (lo != c->lo || hi != c->hi)
            fail("line %zu: %s payload %llu..%llu bytes, the decoder's shape is %u..%u",
                 r->line, r->cell[1], (unsigned long long)lo, (unsigned long long)hi,
                 c->lo, c->hi);
        if (strtoul(r->cell[4], NULL, 10) != c->mul)
            fail("line %zu: %s multiple of %s, the decoder's is %u", r->line, r->cell[1],
                 r->cell[4], c->mul);
        range_of(r->cell[5], r->line, &flo, &fhi);
        if (flo != c->flo || fhi != c->fhi)
            fail("line %zu: %s fds %s, the decoder's are %u..%u", r->line, r->cell[1],
                 r->cell[5], c->flo, c->fhi);
        if (strcmp(r->cell[6], "\xe2\x80\x94")) {
            range_of(r->cell[6], r->line, &rlo, &rhi);
            rhi++;
        }
        if (rlo != c->roff || rhi - rlo != c->rlen)
            fail("line %zu: %s reserved bytes %s, the decoder checks %u bytes at %u",
                 r->line, r->cell[1], r->cell[6], c->rlen, c->roff);
        check_owner(type, r->cell[7], r->line);
    }
    for (size_t k = 0; k < CUC_ARRAY_LEN(code_shapes); k++)
        if (code_shapes[k].version && seen[code_shapes[k].type] != 1)
            fail("type %u (%s) is listed %d times in \"## Record types\"", code_shapes[k].type,
                 cuc_record_type_name((int)code_shapes[k].type), seen[code_shapes[k].type]);
}

/* ---- each payload table, and its checked column ---- */

static const char *where_name(int c)
{
    return c == CK_DECODE ? "decode" : c == CK_RESOLVE ? "resolve" : "\xe2\x80\x94";
}

/* Mutates field p of a copy of the sample's bytes to the value that breaks
 * the field's rule (0xff bytes, or 0 for a field that must not be 0) and
 * checks what the doc says: `decode`, the decoder refuses it; `resolve`,
 * the decoder takes it and resolving fails; `—`, the decoder takes it and
 * resolving does not call it malformed (it may still name nothing here). */
static void check_stage(const struct sample *s, const struct placed *p, size_t line)
{
    uint8_t *c = malloc(s->len);
    size_t at = CUC__WIRE_HDR + CUC__WIRE_REC_HDR + (size_t)p->off;
    cuc_msg *m = NULL;
    int drc, rrc = 0;

    if (p->size == 0)
        return; /* no peers: nothing to spoil */
    CHECK(c != NULL);
    memcpy(c, s->bytes, s->len);
    memset(c + at, p->f->bad == BAD_ZERO ? 0 : 0xff, p->size);
    if (p->f->bad == BAD_HIGH)
        c[at + p->size - 1] = 0x7f;
    CHECK(memcmp(c, s->bytes, s->len) != 0);
    drc = decode_copy(s, c, &m);
    if (!drc && s->resolve && p->check != CK_DECODE)
        rrc = s->resolve(m);
    cuc_msg_destroy(m);
    free(c);
    if (p->check == CK_DECODE && drc != CUC_E_BADMSG)
        fail("line %zu: `%s` is checked at decode, but the decoder gave %s for a bad value",
             line, p->f->name, cuc_errname(drc));
    if (p->check != CK_DECODE && drc)
        fail("line %zu: `%s` is checked at %s, but the decoder refused another value: %s",
             line, p->f->name, where_name(p->check), cuc_errmsg());
    if (p->check == CK_RESOLVE && s->resolve && rrc == 0)
        fail("line %zu: `%s` is checked at resolve, but a bad value resolved", line,
             p->f->name);
    if (p->check == CK_NONE && rrc == CUC_E_BADMSG)
        fail("line %zu: `%s` is checked nowhere, but resolving refused a value: %s", line,
             p->f->name, cuc_errmsg());
}

static void test_payload_tables(void)
{
    static void (*const make[])(struct sample *) = {
        sample_device, sample_stream, sample_event, sample_launch, sample_kernel,
        sample_pool, sample_buffer, sample_vmm, sample_fd, sample_release,
        sample_kernel_ref, sample_kernel_held, sample_buffer_view, sample_ipc_buffer,
        sample_refused, sample_share, sample_held, sample_claim, sample_confirm};
    struct sample s;
    struct table t;
    struct placed placed[MAX_ROWS];
    int i, n, types_seen = 0;

    for (size_t k = 0; k < CUC_ARRAY_LEN(make); k++) {
        cuc_msg *m;
        memset(&s, 0, sizeof(s));
        make[k](&s);
        encode(&s);
        find_table(s.heading, "offset", &t);
        n = check_layout(&t, &s.l, s.bytes + CUC__WIRE_HDR + CUC__WIRE_REC_HDR,
                         cuc__get32(s.bytes + CUC__WIRE_HDR + 4), -1, 3, placed);
        /* the record as it is decodes and resolves */
        CHECK_OK(decode_copy(&s, s.bytes, &m));
        if (s.resolve && s.resolve(m))
            fail("\"%s\": the encoder's own record does not resolve: %s", s.heading,
                 cuc_errmsg());
        cuc_msg_destroy(m);
        for (i = 0; i < n; i++)
            check_stage(&s, &placed[i], t.rows[i].line);
        free(s.bytes);
        cuc_msg_destroy(s.m);
        types_seen++;
    }
    CHECK(types_seen == (int)CUC_ARRAY_LEN(code_shapes));
}

/* ---- the message header, the record header, the frame header ---- */

static void test_header_tables(void)
{
    uint8_t kp[53] = {0}, *b;
    const int *fds;
    size_t len, nfds;
    struct layout l;
    struct table t;
    cuc_msg *m = new_msg();
    int r;

    memset(kp, 0x3c, sizeof(kp));
    memset(kp + 12, 0, 4);
    CHECK_OK(cuc_msg_add_fd(m, null_fd, 7));
    CHECK_OK(cuc__msg_add_record(m, CUC_RECORD_KERNEL, 1, kp, sizeof(kp), NULL, 0));
    CHECK_OK(cuc__msg_encode(m, &b, &len, &fds, &nfds));
    CHECK(len == 24 + 24 + 16 + 56);

    memset(&l, 0, sizeof(l));
    add_field(&l, "magic", le(0x4d435543u, 4), 4, 0);
    add_field(&l, "format_version", le(1, 2), 2, 0);
    add_field(&l, "flags", le(0, 2), 2, 0);
    add_field(&l, "record_count", le(2, 4), 4, 0);
    add_field(&l, "fd_count", le(1, 4), 4, 0);
    add_field(&l, "total_length", le(len, 4), 4, 0);
    add_field(&l, "reserved", zeros(4), 4, 0);
    l.fields[0].fixed = l.fields[1].fixed = l.fields[2].fixed = l.fields[6].fixed = 1;
    find_table("## Message header", "offset", &t);
    check_layout(&t, &l, b, 24, 3, -1, NULL);

    /* both records: the fd record (one fd, no padding), the 53-byte one */
    for (r = 0; r < 2; r++) {
        size_t off = r ? 48 : 24;
        uint32_t plen = r ? 53 : 8, pad = r ? 3 : 0;
        memset(&l, 0, sizeof(l));
        l.vars[0] = (struct var){"len", plen};
        l.vars[1] = (struct var){"pad", pad};
        add_field(&l, "type", le(r ? CUC_RECORD_KERNEL : CUC_RECORD_FD, 2), 2, 0);
        add_field(&l, "record_version", le(1, 2), 2, 0);
        add_field(&l, "payload_length", le(plen, 4), 4, 0);
        add_field(&l, "fd_index", le(0, 4), 4, 0);
        add_field(&l, "fd_count", le(r ? 0 : 1, 4), 4, 0);
        add_field(&l, "payload", r ? copy_of(kp, 53) : copy_of(b + off + 16, 8), plen, 0);
        add_field(&l, "padding", zeros(pad), pad, 0);
        find_table("## Record (16-byte header", "offset", &t);
        check_layout(&t, &l, b + off, 16 + plen + pad, -1, -1, NULL);
    }
    free(b);
    cuc_msg_destroy(m);

    {
        struct cuc__frame f = {0xfffffffeu, 1, 3, 65536, 253, 200000, 300};
        uint8_t h[CUC__FRAME_HDR];

        cuc__frame_write(h, &f);
        memset(&l, 0, sizeof(l));
        add_field(&l, "magic", le(0x46435543u, 4), 4, 0);
        add_field(&l, "frame_version", le(1, 2), 2, 0);
        add_field(&l, "flags", le(0, 2), 2, 0);
        add_field(&l, "sequence", le(f.seq, 4), 4, 0);
        add_field(&l, "part_index", le(f.part, 4), 4, 0);
        add_field(&l, "part_count", le(f.nparts, 4), 4, 0);
        add_field(&l, "frame_length", le(f.len, 4), 4, 0);
        add_field(&l, "frame_fd_count", le(f.nfds, 4), 4, 0);
        add_field(&l, "message_length", le(f.msg_len, 4), 4, 0);
        add_field(&l, "message_fd_count", le(f.msg_nfds, 4), 4, 0);
        add_field(&l, "reserved", zeros(4), 4, 0);
        l.fields[0].fixed = l.fields[1].fixed = l.fields[2].fixed = l.fields[10].fixed = 1;
        find_table("### Frame header", "offset", &t);
        check_layout(&t, &l, h, sizeof(h), 3, -1, NULL);
    }
}

/* ---- the hex examples ---- */

struct example {
    const char *name;
    cuc_msg *(*make)(const uint8_t *doc_bytes, size_t len);
};

static cuc_msg *ex_empty(const uint8_t *b, size_t n)
{
    (void)b, (void)n;
    return new_msg();
}

static cuc_msg *ex_launch(const uint8_t *b, size_t n)
{
    cuc_launch_config c = example_config();
    cuc_msg *m = new_msg();

    (void)b, (void)n;
    CHECK_OK(cuc_msg_add_launch_config(m, &c));
    return m;
}

/* The stream of the example's device, if this process sees it. */
static cuc_msg *ex_stream(const uint8_t *b, size_t n)
{
    cuc_device *d;
    cuc_stream *s;
    cuc_uuid u;
    cuc_msg *m;

    if (n < 24 + 16 + 24)
        return NULL;
    memcpy(u.bytes, b + 24 + 16 + 8, 16);
    if (cuc_device_get_by_uuid(&u, &d)) {
        fprintf(stderr, "note: the stream example's device is not visible here; its "
                "bytes are checked by decoding only\n");
        return NULL;
    }
    m = new_msg();
    CHECK_OK(cuc_stream_legacy(d, &s));
    CHECK_OK(cuc_msg_add_stream(m, s));
    return m;
}

static cuc_msg *ex_fd_release(const uint8_t *b, size_t n)
{
    uint8_t ids[16];
    cuc_msg *m = new_msg();

    (void)b, (void)n;
    cuc__put64(ids, 1);
    cuc__put64(ids + 8, 2);
    CHECK_OK(cuc_msg_add_fd(m, null_fd, 7));
    CHECK_OK(cuc__msg_add_record(m, CUC_RECORD_RELEASE, 1, ids, 16, NULL, 0));
    return m;
}

/* The smallest PTX kernel: the image of the kernel example. */
static const char ptx_k[] = ".version 7.0\n.target sm_70\n.address_size 64\n"
                            ".visible .entry k()\n{\n  ret;\n}\n";

static cuc_msg *ex_kernel(const uint8_t *b, size_t n)
{
    cuc_kernel *k;
    cuc_msg *m = new_msg();

    (void)b, (void)n;
    CHECK_OK(cuc_kernel_load(CUC_IMAGE_PTX, ptx_k, strlen(ptx_k), "k", &k));
    CHECK_OK(cuc_msg_add_kernel(m, k));
    cuc_kernel_destroy(k);
    return m;
}

/* The values the examples below state, as their prose gives them. */
static const cuc_uuid ex_gpu0 = {{0xd8, 0x0a, 0x39, 0xdf, 0x6b, 0xf0, 0x99, 0xe4, 0x45, 0xf9,
                                  0x69, 0xf1, 0xb5, 0xf3, 0x15, 0x4a}};
static const cuc_uuid ex_gpu1 = {{0x39, 0x92, 0x38, 0x26, 0xaa, 0xb9, 0x8c, 0xbb, 0x60, 0xf4,
                                  0xf7, 0x86, 0x95, 0x99, 0x39, 0xcd}};
#define EX_LEASE 0x10000u /* block 1, record 0: the first leased record of a message */

/* n bytes first, first + 1, ...: bytes the examples' prose says stand
 * for what a driver or a random draw gave. */
static void ex_count(uint8_t *out, size_t n, uint8_t first)
{
    for (size_t i = 0; i < n; i++)
        out[i] = (uint8_t)(first + i);
}

static cuc_msg *ex_device(const uint8_t *b, size_t n)
{
    cuc_msg *m = new_msg();

    (void)b, (void)n;
    CHECK_OK(cuc__device_rec_put(m, &ex_gpu0));
    return m;
}

static cuc_msg *ex_event(const uint8_t *b, size_t n)
{
    struct cuc_event_record r = {0};
    cuc_msg *m = new_msg();

    (void)b, (void)n;
    r.flags = CUC_EVENT_IPC;
    r.device = ex_gpu0;
    ex_count(r.handle, sizeof(r.handle), 0x00);
    CHECK_OK(cuc__event_rec_put(m, &r));
    return m;
}

static cuc_msg *ex_pool(const uint8_t *b, size_t n)
{
    struct cuc_pool_record r;
    cuc_msg *m = new_msg();

    (void)b, (void)n;
    ex_count(r.id, sizeof(r.id), 0x10);
    r.owner = ex_gpu0;
    r.kind = CUC_POOL_DEVICE;
    r.handle_type = CUC_POOL_HANDLE_POSIX_FD;
    r.fd = null_fd;
    CHECK_OK(cuc__pool_rec_put(m, &r));
    return m;
}

/* The allocation of the buffer and buffer view examples: 1 MiB of the
 * pool example's pool, its export data 0x20..0x4f and 16 zero bytes. */
static struct cuc_buffer_record ex_alloc(void)
{
    struct cuc_buffer_record r;

    memset(&r, 0, sizeof(r));
    ex_count(r.pool_id, sizeof(r.pool_id), 0x10);
    r.size = r.alloc_size = 1u << 20;
    r.lease_id = EX_LEASE;
    ex_count(r.export_data, 48, 0x20);
    return r;
}

static cuc_msg *ex_buffer(const uint8_t *b, size_t n)
{
    struct cuc_buffer_record r = ex_alloc();
    cuc_msg *m = new_msg();

    (void)b, (void)n;
    CHECK_OK(cuc__buffer_rec_put(m, &r));
    return m;
}

static cuc_msg *ex_buffer_view(const uint8_t *b, size_t n)
{
    struct cuc_buffer_record r = ex_alloc();
    cuc_msg *m = new_msg();

    (void)b, (void)n;
    r.offset = 8192;
    r.size = 4096;
    CHECK_OK(cuc__buffer_rec_put(m, &r));
    return m;
}

static cuc_msg *ex_ipc_buffer(const uint8_t *b, size_t n)
{
    struct cuc_ipc_buffer_record r;
    cuc_msg *m = new_msg();

    (void)b, (void)n;
    memset(&r, 0, sizeof(r));
    r.device = ex_gpu0;
    ex_count(r.exporter, sizeof(r.exporter), 0xf0);
    r.generation = 1;
    r.base_size = 2u << 20;
    r.offset = 4096;
    r.size = 4096;
    r.lease_id = EX_LEASE;
    r.handle_type = CUC_IPC_HANDLE_LEGACY;
    ex_count(r.handle, sizeof(r.handle), 0x40);
    CHECK_OK(cuc__ipc_buffer_rec_put(m, &r));
    return m;
}

static cuc_msg *ex_vmm(const uint8_t *b, size_t n)
{
    size_t sizes[2] = {2u << 20, 2u << 20};
    int fds[2];
    cuc_msg *m = new_msg();

    (void)b, (void)n;
    for (int i = 0; i < 2; i++)
        CHECK((fds[i] = fcntl(null_fd, F_DUPFD_CLOEXEC, 0)) >= 0);
    CHECK_OK(cuc__vmm_rec_put(m, EX_LEASE, &ex_gpu0, &ex_gpu1, 1, sizes, 2, fds));
    return m;
}

static cuc_msg *ex_kernel_ref(const uint8_t *b, size_t n)
{
    struct cuc_kernel_record r;
    cuc_msg *m = new_msg();

    (void)b, (void)n;
    memset(&r, 0, sizeof(r));
    r.kind = CUC_IMAGE_PTX;
    r.name = "k";
    r.image_len = strlen(ptx_k);
    cuc__sha256(ptx_k, strlen(ptx_k), r.hash);
    CHECK_OK(cuc__kernel_ref_rec_put(m, &r));
    return m;
}

static cuc_msg *ex_kernel_held(const uint8_t *b, size_t n)
{
    struct cuc__kernel_id id = {CUC_IMAGE_PTX, (uint32_t)strlen(ptx_k), {0}};
    cuc_msg *m = new_msg();

    (void)b, (void)n;
    cuc__sha256(ptx_k, strlen(ptx_k), id.hash);
    CHECK_OK(cuc__kernel_held_rec_put(m, &id));
    return m;
}

static cuc_msg *ex_refused(const uint8_t *b, size_t n)
{
    cuc_msg *m;

    (void)b, (void)n;
    CHECK_OK(cuc__refused_msg_build(7, &m));
    return m;
}

/* The detached example: a share record, the buffer example's record and
 * the pool example's record held. */
static cuc_msg *ex_detached(const uint8_t *b, size_t n)
{
    struct cuc_share_record sr = {{0}, {0}, {0}, SAMPLE_PATH};
    struct cuc_buffer_record br = ex_alloc();
    struct cuc__record pr;
    cuc_msg *pm = ex_pool(b, n), *m = new_msg();

    ex_count(sr.point, 16, 0x80);
    ex_count(sr.boot_id, 16, 0x90);
    ex_count(sr.token, 16, 0xa0);
    CHECK_OK(cuc__share_rec_put(m, &sr));
    CHECK_OK(cuc__buffer_rec_put(m, &br));
    CHECK_OK(cuc__msg_record(pm, 0, &pr));
    CHECK_OK(cuc__held_rec_put(m, &(struct cuc_held_record){CUC_RECORD_POOL, 1, 1,
                                                             pr.payload, pr.len}));
    cuc_msg_destroy(pm);
    return m;
}

static cuc_msg *ex_claims(const uint8_t *b, size_t n)
{
    uint8_t token[16];
    cuc_msg *m = new_msg();

    (void)b, (void)n;
    ex_count(token, 16, 0xa0);
    CHECK_OK(cuc__claim_rec_put(m, token, 0));
    ex_count(token, 16, 0xb0);
    CHECK_OK(cuc__claim_rec_put(m, token, CUC__CLAIM_FETCH));
    return m;
}

static cuc_msg *ex_confirms(const uint8_t *b, size_t n)
{
    uint8_t token[16];
    cuc_msg *m = new_msg();

    (void)b, (void)n;
    ex_count(token, 16, 0xa0);
    CHECK_OK(cuc__confirm_rec_put(m, token, 0));
    ex_count(token, 16, 0xb0);
    CHECK_OK(cuc__confirm_rec_put(m, token, CUC_E_NOT_FOUND));
    return m;
}

static void print_hex(const uint8_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        fprintf(stderr, "%02x%s", b[i], i + 1 == n ? "\n" : (i % 4 == 3 ? " " : ""));
}

/* The bytes of the fenced block "```hex name" (malloc'd), or NULL. */
static uint8_t *example_bytes(const char *name, size_t *len)
{
    char open[64];
    size_t i, n = 0;
    uint8_t *b = malloc(1 << 16);

    CHECK(b != NULL);
    snprintf(open, sizeof(open), "```hex %s", name);
    for (i = 0; i < nlines && strcmp(lines[i], open); i++)
        ;
    if (i == nlines) {
        free(b);
        return NULL;
    }
    for (i++; i < nlines && strncmp(lines[i], "```", 3); i++) {
        const char *p = lines[i];
        while (*p) {
            int hi, lo;
            if (*p == ' ') {
                p++;
                continue;
            }
            hi = hex_nibble(p[0]);
            lo = p[1] ? hex_nibble(p[1]) : -1;
            if (hi < 0 || lo < 0)
                fail("line %zu: example %s: \"%s\" is not hex", i + 1, name, p);
            CHECK(n < (1 << 16));
            b[n++] = (uint8_t)(hi << 4 | lo);
            p += 2;
        }
    }
    *len = n;
    return b;
}

static void test_examples(void)
{
    static const struct example ex[] = {{"empty", ex_empty},
                                        {"launch_config", ex_launch},
                                        {"stream", ex_stream},
                                        {"kernel", ex_kernel},
                                        {"fd_and_release", ex_fd_release},
                                        {"device", ex_device},
                                        {"event", ex_event},
                                        {"pool", ex_pool},
                                        {"buffer", ex_buffer},
                                        {"buffer_view", ex_buffer_view},
                                        {"ipc_buffer", ex_ipc_buffer},
                                        {"vmm", ex_vmm},
                                        {"kernel_ref", ex_kernel_ref},
                                        {"kernel_held", ex_kernel_held},
                                        {"refused", ex_refused},
                                        {"detached", ex_detached},
                                        {"claims", ex_claims},
                                        {"confirms", ex_confirms}};
#define EX_TYPE_(name, value, text) {value, text},
    static const struct {
        int type;
        const char *name;
    } types[] = {CUC_RECORD_TYPE_MAP(EX_TYPE_)};
#undef EX_TYPE_
    int shown[256] = {0};
    size_t i, k, n, blocks = 0;

    for (k = 0; k < nlines; k++)
        blocks += !strncmp(lines[k], "```hex ", 7);
    if (blocks != CUC_ARRAY_LEN(ex))
        fail("%zu hex examples; the test knows %zu", blocks, CUC_ARRAY_LEN(ex));
    for (i = 0; i < CUC_ARRAY_LEN(ex); i++) {
        uint8_t *b = example_bytes(ex[i].name, &n), *enc;
        int fds[8];
        const int *efds;
        size_t elen, enfds, nfd;
        cuc_msg *m, *d;

        if (!b)
            fail("no example \"```hex %s\"", ex[i].name);
        nfd = n >= 16 ? cuc__get32(b + 12) : 0;
        m = ex[i].make(b, n);
        if (m) {
            CHECK_OK(cuc__msg_encode(m, &enc, &elen, &efds, &enfds));
            if (elen != n || memcmp(enc, b, n) || enfds != nfd) {
                fprintf(stderr, "example %s: the encoder writes (%zu fds):\n", ex[i].name,
                        enfds);
                print_hex(enc, elen);
                fail("example %s is not what the encoder writes", ex[i].name);
            }
            free(enc);
            cuc_msg_destroy(m);
        }
        CHECK(nfd <= 8);
        for (k = 0; k < nfd; k++)
            CHECK((fds[k] = fcntl(null_fd, F_DUPFD_CLOEXEC, 0)) >= 0);
        if (cuc__msg_decode(b, n, fds, nfd, &d))
            fail("example %s does not decode: %s", ex[i].name, cuc_errmsg());
        for (k = 0; k < cuc_msg_record_count(d); k++) {
            int t = 0;
            CHECK_OK(cuc_msg_record_type(d, k, &t));
            CHECK(t > 0 && t < 256);
            shown[t] = 1;
        }
        cuc_msg_destroy(d);
        free(b);
    }
    /* a hex example for every record type */
    for (i = 0; i < CUC_ARRAY_LEN(types); i++)
        if (!shown[types[i].type])
            fail("no hex example holds a %s record (type %d): add one, and its maker "
                 "here", types[i].name, types[i].type);
}

/* ---- statuses the prose names ---- */

/* The doc's text with every run of white space one space (lines joined). */
static char *flat;

static void flatten(void)
{
    size_t k, n = 0, cap = 1;

    for (k = 0; k < nlines; k++)
        cap += strlen(lines[k]) + 1;
    CHECK((flat = malloc(cap)) != NULL);
    for (k = 0; k < nlines; k++) {
        for (const char *p = lines[k]; *p; p++) {
            int space = *p == ' ' || *p == '\t';
            if (!space || (n && flat[n - 1] != ' '))
                flat[n++] = space ? ' ' : *p;
        }
        if (n && flat[n - 1] != ' ')
            flat[n++] = ' ';
    }
    flat[n] = '\0';
}

/* The first status name (CUC_E_...) after phrase (static buffer). */
static const char *status_after(const char *phrase)
{
    static char name[64];
    const char *at = strstr(flat, phrase), *e;
    size_t n = 0;

    if (!at)
        fail("the phrase \"%s\" is gone: update the test with the doc", phrase);
    if (!(e = strstr(at + strlen(phrase), "CUC_E_")))
        fail("no status named after \"%s\"", phrase);
    while (n + 1 < sizeof(name) && ((e[n] >= 'A' && e[n] <= 'Z') || e[n] == '_'))
        name[n] = e[n], n++;
    name[n] = '\0';
    return name;
}

static int recv_status(cuc_channel *ch)
{
    cuc_msg *m = NULL;
    int rc = cuc_channel_recv(ch, 5000, &m);

    cuc_msg_destroy(m);
    return rc;
}

/* A 0-byte datagram from a peer that stays connected. */
static int case_empty_datagram(void)
{
    cuc_channel *ch;
    int sv[2], rc;

    CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) == 0);
    CHECK_OK(cuc_channel_from_fd(sv[0], &ch));
    CHECK(send(sv[1], "", 0, 0) == 0);
    rc = recv_status(ch);
    cuc_channel_destroy(ch);
    close(sv[1]);
    return rc;
}

/* The peer closes its end. */
static int case_peer_closed(void)
{
    cuc_channel *ch;
    int sv[2], rc;

    CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) == 0);
    CHECK_OK(cuc_channel_from_fd(sv[0], &ch));
    close(sv[1]);
    rc = recv_status(ch);
    cuc_channel_destroy(ch);
    return rc;
}

/* An event record of dev0 whose handle no driver made (zeros). */
static int case_event_refused(void)
{
    struct cuc_event_record r = {0};
    cuc_event *e;
    cuc_msg *m = new_msg();
    int rc;

    r.flags = CUC_EVENT_IPC;
    r.device = *cuc_device_uuid(dev0);
    CHECK_OK(cuc__event_rec_put(m, &r));
    rc = cuc_msg_get_event(m, 0, &e);
    if (!rc)
        cuc_event_unref(e);
    cuc_msg_destroy(m);
    return rc;
}

/* The record of an IPC event of dev0, its UUID changed to another
 * device's: this process has that handle's event, on dev0. */
static int case_event_other_device(void)
{
    uint8_t *b;
    size_t n;
    cuc_event *e, *got;
    cuc_msg *m = new_msg(), *d;
    int rc;

    CHECK_OK(cuc_event_create(dev0, CUC_EVENT_IPC, &e));
    CHECK_OK(cuc_msg_add_event(m, e));
    CHECK_OK(cuc_msg_to_bytes(m, (void **)&b, &n));
    memcpy(b + 24 + 16 + 8, cuc_device_uuid(peers[0])->bytes, 16);
    CHECK_OK(cuc_msg_from_bytes(b, n, &d));
    rc = cuc_msg_get_event(d, 0, &got);
    if (!rc)
        cuc_event_unref(got);
    cuc_msg_destroy(d);
    free(b);
    cuc_msg_destroy(m);
    cuc_event_unref(e);
    return rc;
}

/* fd_index of a record without fds, after a record that has one: the
 * record's own fd count rules, not the message's. */
static void test_fd_index_rule(void)
{
    uint8_t *b;
    const int *efds;
    size_t n, nfds;
    struct table t;
    cuc_msg *m = new_msg(), *d;
    int fd, i;

    find_table("## Record (16-byte header", "offset", &t);
    for (i = 0; i < t.nrows && strcmp(ticked(t.rows[i].cell[2], t.rows[i].line), "fd_index");
         i++)
        ;
    if (i == t.nrows || !strstr(t.rows[i].cell[3], "this record's own `fd_count`"))
        fail("the record header's `fd_index` row does not say its 0 is for this record's "
             "own `fd_count`");
    CHECK_OK(cuc_msg_add_fd(m, null_fd, 7));
    CHECK_OK(cuc__device_rec_put(m, &ex_gpu0));
    CHECK_OK(cuc__msg_encode(m, &b, &n, &efds, &nfds));
    CHECK(nfds == 1 && cuc__get32(b + 48 + 8) == 0);
    CHECK((fd = fcntl(null_fd, F_DUPFD_CLOEXEC, 0)) >= 0);
    CHECK_OK(cuc__msg_decode(b, n, &fd, 1, &d));
    cuc_msg_destroy(d);
    cuc__put32(b + 48 + 8, 1); /* where the fd record's range ended */
    CHECK((fd = fcntl(null_fd, F_DUPFD_CLOEXEC, 0)) >= 0);
    CHECK_RC(cuc__msg_decode(b, n, &fd, 1, &d), CUC_E_BADMSG);
    free(b);
    cuc_msg_destroy(m);
}

static void test_statuses(void)
{
    static const struct {
        const char *phrase;
        int (*make)(void);
        int needs_peer;
    } cases[] = {
        {"otherwise a 0-byte datagram from a peer still connected", case_empty_datagram, 0},
        {"if the peer has shut its end", case_peer_closed, 0},
        {"any other refusal is the status", case_event_refused, 0},
        {"is returned as a new reference to that object, unless", case_event_other_device, 1},
    };

    flatten();
    for (size_t i = 0; i < CUC_ARRAY_LEN(cases); i++) {
        const char *doc_says = status_after(cases[i].phrase);
        int rc;
        if (cases[i].needs_peer && npeers == 0) {
            fprintf(stderr, "note: \"%s\" needs two devices: not checked\n", cases[i].phrase);
            continue;
        }
        rc = cases[i].make();
        if (strcmp(doc_says, cuc_errname(rc)))
            fail("after \"%s\" the doc says %s; the code returns %s (%s)", cases[i].phrase,
                 doc_says, cuc_errname(rc), cuc_errmsg());
    }
    test_fd_index_rule();
    free(flat);
}

int main(void)
{
    int n;

    CHECK_OK(cuc_device_count(&n));
    CHECK_OK(cuc_device_get(0, &dev0));
    CHECK_OK(cuc_device_set_current(dev0));
    for (int i = 1; i < n && npeers < 2; i++)
        CHECK_OK(cuc_device_get(i, &peers[npeers++]));
    test_warm_driver_fds();
    FD_BASELINE();
    null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    CHECK(null_fd >= 0);
    load_doc();
    test_type_table();
    test_header_tables();
    test_payload_tables();
    test_examples();
    test_statuses();
    cuc_vmm_unref(vmm);
    CHECK_OK(cuc_buffer_unref_async(view, NULL));
    CHECK_OK(cuc_buffer_unref_async(buf, NULL));
    cuc_pool_unref(pool);
    cuc_kernel_destroy(kern);
    cuc_event_unref(ev);
    close(null_fd);
    while (ncopies)
        free(copies[--ncopies]);
    free(lines);
    free(doc);
    FD_CHECK_NO_LEAK();
    return test_finish();
}
