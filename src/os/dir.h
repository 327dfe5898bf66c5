/* The directories and host identity a share point needs (dir.c). */
#ifndef CUC_OS_DIR_H
#define CUC_OS_DIR_H

#include <stddef.h>
#include <stdint.h>

/* dir made (mode 0700) if missing, its parent's existing; then checked:
 * a directory (not a link) owned by this process's effective uid, with no
 * access for group or others. CUC_E_PERMISSION naming what is wrong
 * (owner, mode), CUC_E_IO for a system call that failed. */
int cuc__private_dir(const char *dir);

/* The kernel's boot id (/proc/sys/kernel/random/boot_id) as 16 bytes:
 * one value for every process on this machine until it reboots, whatever
 * their namespaces. */
int cuc__boot_id(uint8_t out[16]);

/* Calls fn(path, arg) for each entry of dir whose name starts with prefix
 * and ends with suffix (path is dir/name). Entries that come and go
 * meanwhile are fine. */
int cuc__dir_each(const char *dir, const char *prefix, const char *suffix,
                  void (*fn)(const char *path, void *arg), void *arg);

#endif
