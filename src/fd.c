/* Closing a set of owned fds: the message, the channel and the VMM export
 * all must close every fd they received on an error path, and mark them
 * closed so that nothing closes one twice. */
#include "internal.h"

#include <unistd.h>

void cuc__close_fds(int *fds, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (fds[i] >= 0) {
            close(fds[i]);
            fds[i] = -1;
        }
}
