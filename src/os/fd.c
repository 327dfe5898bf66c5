/* Closing, duplicating and marking fds; random bytes. */
#include "os/fd.h"
#include "base/error.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/random.h>
#include <unistd.h>

void cuc__close_fds(int *fds, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (fds[i] >= 0) {
            close(fds[i]);
            fds[i] = -1;
        }
}

void cuc__fd_room(unsigned long *limit, unsigned long *open)
{
    struct rlimit rl;
    struct dirent *e;
    unsigned long n = 0;
    DIR *d;

    *limit = getrlimit(RLIMIT_NOFILE, &rl) == 0 ? (unsigned long)rl.rlim_cur : 0;
    d = opendir("/proc/self/fd");
    if (!d) {
        /* no fd for the directory: the process is at its limit */
        *open = errno == EMFILE ? *limit : 0;
        return;
    }
    while ((e = readdir(d)) != NULL)
        n += e->d_name[0] != '.';
    closedir(d);
    *open = n ? n - 1 : 0; /* not the directory's own fd */
}

int cuc__dup_cloexec(int fd, const char *what, int *out)
{
    int d = fcntl(fd, F_DUPFD_CLOEXEC, 0);

    if (d < 0)
        return cuc__errno_err(errno, "cannot duplicate %s", what);
    *out = d;
    return 0;
}

int cuc__set_cloexec_or_close(int fd, const char *what)
{
    int fl = fcntl(fd, F_GETFD);

    if (fl >= 0 && (fl & FD_CLOEXEC))
        return 0;
    if (fl < 0 || fcntl(fd, F_SETFD, fl | FD_CLOEXEC) < 0) {
        int err = errno;
        close(fd);
        return cuc__errno_err(err, "F_SETFD on %s", what);
    }
    return 0;
}

int cuc__random_bytes(void *out, size_t n, const char *what)
{
    unsigned char *p = out;
    size_t got = 0;

    while (got < n) {
        ssize_t k = getrandom(p + got, n - got, 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return cuc__errno_err(errno, "getrandom for %s", what);
        got += (size_t)k;
    }
    return 0;
}
