/* Private directories, the boot id, directory walks. */
#include "os/dir.h"
#include "base/error.h"
#include "cucore/device.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int cuc__private_dir(const char *dir)
{
    struct stat st;

    if (mkdir(dir, 0700) < 0 && errno != EEXIST)
        return cuc__errno_err(errno, "mkdir(\"%s\")", dir);
    if (lstat(dir, &st) < 0)
        return cuc__errno_err(errno, "lstat(\"%s\")", dir);
    if (!S_ISDIR(st.st_mode))
        return cuc__seterr(CUC_E_PERMISSION, "\"%s\" is not a directory (a link or a "
                           "file): refusing it as the share point directory", dir);
    if (st.st_uid != geteuid())
        return cuc__seterr(CUC_E_PERMISSION, "the share point directory \"%s\" belongs "
                           "to uid %lu, not to this process's uid %lu", dir,
                           (unsigned long)st.st_uid, (unsigned long)geteuid());
    if (st.st_mode & 077)
        return cuc__seterr(CUC_E_PERMISSION, "the share point directory \"%s\" has mode "
                           "%03o: others may reach its sockets; make it 0700", dir,
                           (unsigned)(st.st_mode & 0777));
    return 0;
}

int cuc__boot_id(uint8_t out[16])
{
    const char *path = "/proc/sys/kernel/random/boot_id";
    char text[64] = {0};
    cuc_uuid u;
    ssize_t n;
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    if (fd < 0)
        return cuc__errno_err(errno, "open(\"%s\")", path);
    n = read(fd, text, sizeof(text) - 1);
    close(fd);
    if (n < 36)
        return cuc__seterr(CUC_E_IO, "%s holds %zd bytes, not a UUID", path, n);
    text[36] = '\0';
    if (cuc_uuid_parse(text, &u) != 0)
        return cuc__seterr(CUC_E_IO, "%s holds \"%s\", not a UUID", path, text);
    memcpy(out, u.bytes, 16);
    return 0;
}

int cuc__dir_each(const char *dir, const char *prefix, const char *suffix,
                  void (*fn)(const char *path, void *arg), void *arg)
{
    size_t np = strlen(prefix), ns = strlen(suffix);
    char path[4096];
    struct dirent *e;
    DIR *d = opendir(dir);

    if (!d)
        return cuc__errno_err(errno, "opendir(\"%s\")", dir);
    while ((e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        if (n < np + ns || strncmp(e->d_name, prefix, np) != 0 ||
            strcmp(e->d_name + n - ns, suffix) != 0)
            continue;
        if (snprintf(path, sizeof(path), "%s/%s", dir, e->d_name) < (int)sizeof(path))
            fn(path, arg);
    }
    closedir(d);
    return 0;
}
