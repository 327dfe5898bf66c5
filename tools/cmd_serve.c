/* `cucore serve PATH`: listens at PATH, accepts one peer and prints each
 * message it sends, record by record (what a device record's UUID is here,
 * what an fd record's fd is), until the peer closes. A message that does
 * not decode is reported and serving goes on, as the channel stays usable;
 * a framing error, after which it does not, ends it. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

static const char *fd_kind(int fd)
{
    struct stat st;

    if (fstat(fd, &st) < 0)
        return "unknown";
    if (S_ISREG(st.st_mode))
        return "regular file";
    if (S_ISDIR(st.st_mode))
        return "directory";
    if (S_ISSOCK(st.st_mode))
        return "socket";
    if (S_ISFIFO(st.st_mode))
        return "pipe";
    if (S_ISCHR(st.st_mode))
        return "character device";
    return "other";
}

static void print_device(const cuc_msg *m, size_t i)
{
    char text[CUC_UUID_STRLEN];
    cuc_device *d;
    cuc_uuid u;

    if (cuc_msg_read_device(m, i, &u)) {
        printf("  record %zu: device, malformed: %s\n", i, cuc_errmsg());
        return;
    }
    cuc_uuid_format(&u, text);
    if (cuc_msg_get_device(m, i, &d) == 0)
        printf("  record %zu: device %s (ordinal %d here, %s)\n", i, text,
               cuc_device_ordinal(d), cuc_device_name(d));
    else
        printf("  record %zu: device %s, not usable here: %s\n", i, text, cuc_errmsg());
}

static void print_fd(cuc_msg *m, size_t i)
{
    uint32_t tag;
    int fd;

    if (cuc_msg_take_fd(m, i, &fd, &tag)) {
        printf("  record %zu: fd, unusable: %s\n", i, cuc_errmsg());
        return;
    }
    printf("  record %zu: fd tag %u (%s)\n", i, tag, fd_kind(fd));
    close(fd);
}

static void print_msg(cuc_msg *m, long seq)
{
    size_t i, n = cuc_msg_record_count(m);

    printf("message %ld: %zu record%s, %zu fd%s\n", seq, n, n == 1 ? "" : "s",
           cuc_msg_fd_count(m), cuc_msg_fd_count(m) == 1 ? "" : "s");
    for (i = 0; i < n; i++) {
        struct cuc_record_view r;
        if (cuc_msg_record(m, i, &r))
            continue;
        if (r.type == CUC_RECORD_DEVICE)
            print_device(m, i);
        else if (r.type == CUC_RECORD_FD)
            print_fd(m, i);
        else
            printf("  record %zu: %s (version %u, %zu bytes, %zu fds)\n", i,
                   cuc_record_type_name(r.type), r.version, r.len, r.nfds);
    }
    fflush(stdout);
}

const char cli_serve_usage[] =
    "usage: cucore serve PATH\n"
    "Listens at PATH (a socket, mode 0600), accepts one peer of this uid and\n"
    "prints each message it sends, record by record, until the peer closes\n"
    "(exit 0). A message whose content does not decode is reported and skipped,\n"
    "and serving goes on; exit 1 when listening fails or the channel does (a\n"
    "framing error leaves it unusable).\n";

static int is_content_error(int rc)
{
    return rc == CUC_E_BADMSG || rc == CUC_E_VERSION;
}

/* After a message was rejected: the next result. A framing error makes
 * every later receive fail at once with the same status and words
 * (cucore/channel.h), which a look without waiting tells from a next
 * message (good, or bad in other words) or from nothing yet. */
static int after_rejected(cuc_channel *ch, int rc, const char *why, cuc_msg **m, int *unusable)
{
    int next = cuc_channel_recv(ch, 0, m);

    if (next == rc && !strcmp(cuc_errmsg(), why)) {
        *unusable = 1;
        return next;
    }
    if (next == CUC_E_TIMEOUT)
        next = cuc_channel_recv(ch, -1, m);
    return next;
}

static int serve(cuc_channel *ch)
{
    char why[1024];
    long seq = 0, rejected = 0;
    int rc, unusable = 0;
    cuc_msg *m;

    rc = cuc_channel_recv(ch, -1, &m);
    for (;;) {
        if (rc == 0) {
            print_msg(m, seq++);
            cuc_msg_destroy(m);
            rc = cuc_channel_recv(ch, -1, &m);
            continue;
        }
        if (!is_content_error(rc))
            break;
        snprintf(why, sizeof(why), "%s", cuc_errmsg());
        printf("message %ld rejected: %s (%s)\n", seq++, why, cuc_errname(rc));
        fflush(stdout);
        rejected++;
        rc = after_rejected(ch, rc, why, &m, &unusable);
        if (unusable)
            return cli_error(cuc_errname(rc), "serve: the channel is unusable after "
                             "that error: %s (%s)", why, cuc_errname(rc));
    }
    if (rc != CUC_E_PEER_CLOSED)
        return cli_fail("receive", rc);
    printf("peer closed after %ld message%s (%ld rejected)\n", seq, seq == 1 ? "" : "s",
           rejected);
    return CLI_OK;
}

int cli_serve(int argc, char **argv)
{
    cuc_listener *l;
    cuc_channel *ch;
    pid_t pid = 0;
    int rc;

    if (argc < 1)
        return cli_usage_error("serve", cli_serve_usage, "missing PATH");
    if (argv[0][0] == '-')
        return cli_usage_error("serve", cli_serve_usage, "unknown option \"%s\"", argv[0]);
    if (argc > 1)
        return cli_usage_error("serve", cli_serve_usage, "unexpected argument \"%s\"",
                               argv[1]);
    rc = cuc_channel_listen(argv[0], &l);
    if (rc)
        return cli_fail("cannot listen", rc);
    fprintf(stderr, "listening on %s\n", argv[0]);
    rc = cuc_listener_accept(l, -1, &ch);
    cuc_listener_destroy(l);
    if (rc)
        return cli_fail("accept", rc);
    cuc_channel_peer_pid(ch, &pid);
    printf("peer pid %ld connected\n", (long)pid);
    fflush(stdout);
    rc = serve(ch);
    cuc_channel_destroy(ch);
    return rc;
}
