/* `cucore connect PATH ITEM...`: sends one message to a `cucore serve` (or
 * any cucore listener) at PATH. ITEMs, in order:
 *   device N      the device at local ordinal N (it travels as its UUID)
 *   --fd FILE     FILE opened read-only, as an fd record (tag = its index)
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

const char cli_connect_usage[] =
    "usage: cucore connect PATH [device N | --fd FILE]...\n"
    "Connects to the cucore listener at PATH (waiting up to 5 s for it) and sends\n"
    "one message: each `device N` as the UUID of this process's device N, each\n"
    "`--fd FILE` as FILE opened read-only (tag: its index among the items).\n";

static int usage_error(const char *what, const char *word)
{
    return cli_usage_error("connect", cli_connect_usage, "%s \"%s\"", what, word);
}

static int add_item(cuc_msg *m, char **argv, int argc, int *i, uint32_t index)
{
    const char *item = argv[*i], *arg = *i + 1 < argc ? argv[*i + 1] : NULL;
    cuc_device *d;
    int ord, fd, rc;

    if (!strcmp(item, "device")) {
        if (!arg)
            return cli_usage_error("connect", cli_connect_usage, "device needs N, a "
                                   "device ordinal");
        if (cli_parse_ordinal(arg, &ord))
            return usage_error("device needs N, a device ordinal, not", arg);
        *i += 2;
        rc = cuc_device_get(ord, &d);
        if (!rc)
            rc = cuc_msg_add_device(m, d);
        return rc ? cli_fail("device", rc) : 0;
    }
    if (!strcmp(item, "--fd")) {
        if (!arg)
            return cli_usage_error("connect", cli_connect_usage, "--fd needs FILE");
        fd = open(arg, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            return cli_error("CUC_E_IO", "connect: cannot open %s: %s", arg, strerror(errno));
        *i += 2;
        rc = cuc_msg_add_fd(m, fd, index);
        close(fd);
        return rc ? cli_fail("fd", rc) : 0;
    }
    return usage_error("unknown item (device N or --fd FILE):", item);
}

int cli_connect(int argc, char **argv)
{
    cuc_channel *ch;
    uint32_t index = 0;
    cuc_msg *m;
    int i = 1, rc;

    if (argc < 1)
        return cli_usage_error("connect", cli_connect_usage, "missing PATH");
    if (argv[0][0] == '-')
        return usage_error("PATH comes first, not", argv[0]);
    rc = cuc_msg_create(&m);
    if (rc)
        return cli_fail("message", rc);
    while (i < argc) {
        rc = add_item(m, argv, argc, &i, index++);
        if (rc) {
            cuc_msg_destroy(m);
            return rc;
        }
    }
    rc = cuc_channel_connect(argv[0], 5000, &ch);
    if (rc) {
        cuc_msg_destroy(m);
        return cli_fail("connect", rc);
    }
    rc = cuc_channel_send(ch, m);
    if (!rc)
        printf("sent 1 message: %zu record%s, %zu fd%s\n", cuc_msg_record_count(m),
               cuc_msg_record_count(m) == 1 ? "" : "s", cuc_msg_fd_count(m),
               cuc_msg_fd_count(m) == 1 ? "" : "s");
    cuc_msg_destroy(m);
    cuc_channel_destroy(ch);
    return rc ? cli_fail("send", rc) : CLI_OK;
}
