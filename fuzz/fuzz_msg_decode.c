/* libFuzzer target: the message decoder, fed with 0..3 real fds (the
 * first input byte picks how many), then every record walked and every
 * getter tried, as a receiver would. */
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "internal.h"
#include "wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int fds[3];
    size_t nfds, i;
    cuc_msg *m;

    if (size < 1)
        return 0;
    nfds = data[0] % 4;
    for (i = 0; i < nfds; i++)
        fds[i] = open("/dev/null", O_RDONLY | O_CLOEXEC);
    for (i = 0; i < nfds; i++)
        if (fds[i] < 0)
            abort();
    if (cuc__msg_decode(data + 1, size - 1, fds, nfds, &m) != 0)
        return 0;
    for (i = 0; i < cuc_msg_count(m); i++) {
        cuc_device *d;
        uint32_t tag;
        int fd, type;
        if (cuc_msg_record_type(m, i, &type))
            abort();
        cuc_msg_get_device(m, i, &d);
        if (cuc_msg_take_fd(m, i, &fd, &tag) == 0)
            close(fd);
    }
    cuc_msg_destroy(m);
    return 0;
}
