/* File descriptors (fd.c): every fd has one owner, and every error path
 * closes what it owns. */
#ifndef CUC_OS_FD_H
#define CUC_OS_FD_H

#include <stddef.h>

/* Closes every fd of fds[0..n) that is not -1 and sets it to -1. */
void cuc__close_fds(int *fds, size_t n);

/* A close-on-exec duplicate of fd in *out (what names fd in the message:
 * "the fd of a pool record"). */
int cuc__dup_cloexec(int fd, const char *what, int *out);

/* Sets FD_CLOEXEC on fd; on failure closes fd (the caller owned it and
 * must not keep an fd a child could inherit). */
int cuc__set_cloexec_or_close(int fd, const char *what);

/* This process's RLIMIT_NOFILE soft limit and how many fds it has open
 * now (counted in /proc/self/fd), for a message naming the room left.
 * Best effort: 0 for what cannot be read. */
void cuc__fd_room(unsigned long *limit, unsigned long *open);

/* n random bytes from the kernel (getrandom), for identities. */
int cuc__random_bytes(void *out, size_t n, const char *what);

#endif
