/* Telling two received fds apart: the kernel's open-file identity first
 * (kcmp, which a seccomp filter may refuse), then the file's identity for
 * regular files. */
#include "os/fd_same.h"

#include <linux/kcmp.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static int same_open_file(int a, int b)
{
#ifdef SYS_kcmp
    pid_t self = getpid();

    return syscall(SYS_kcmp, self, self, KCMP_FILE, a, b) == 0;
#else
    (void)a;
    (void)b;
    return 0;
#endif
}

int cuc__fd_same_object(int a, int b)
{
    struct stat sa, sb;

    if (a == b || same_open_file(a, b))
        return 1;
    if (fstat(a, &sa) != 0 || fstat(b, &sb) != 0)
        return 0;
    return S_ISREG(sa.st_mode) && S_ISREG(sb.st_mode) && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}
