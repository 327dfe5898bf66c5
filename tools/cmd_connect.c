/* `cucore connect PATH ITEM...`: sends one message to a `cucore serve` (or
 * any cucore listener) at PATH. ITEMs, in order:
 *   device N      the device at local ordinal N (it travels as its UUID)
 *   --fd FILE     FILE opened read-only, as an fd record (tag = its index)
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static int usage(void)
{
    fprintf(stderr, "usage: cucore connect PATH [device N | --fd FILE]...\n");
    return 2;
}

static int add_item(cuc_msg *m, char **argv, int *i, uint32_t index)
{
    cuc_device *d;
    char *end;
    long ord;
    int fd, rc;

    if (!strcmp(argv[*i], "device") && argv[*i + 1]) {
        ord = strtol(argv[*i + 1], &end, 10);
        if (*end || end == argv[*i + 1])
            return usage();
        *i += 2;
        rc = cuc_device_get((int)ord, &d);
        if (!rc)
            rc = cuc_msg_add_device(m, d);
        return rc ? cli_fail("device", rc) : 0;
    }
    if (!strcmp(argv[*i], "--fd") && argv[*i + 1]) {
        fd = open(argv[*i + 1], O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            perror(argv[*i + 1]);
            return 1;
        }
        *i += 2;
        rc = cuc_msg_add_fd(m, fd, index);
        close(fd);
        return rc ? cli_fail("fd", rc) : 0;
    }
    return usage();
}

int cli_connect(int argc, char **argv)
{
    cuc_channel *ch;
    uint32_t index = 0;
    cuc_msg *m;
    int i = 1, rc;

    if (argc < 1 || argv[0][0] == '-')
        return usage();
    rc = cuc_msg_create(&m);
    if (rc)
        return cli_fail("message", rc);
    while (i < argc) {
        rc = add_item(m, argv, &i, index++);
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
    return rc ? cli_fail("send", rc) : 0;
}
