/* Whether two fds a peer sent are one object (fd_same.c). */
#ifndef CUC_OS_FD_SAME_H
#define CUC_OS_FD_SAME_H

/* 1 if fds a and b of this process refer to the same open file (the same
 * fd sent twice, or dups of one: kcmp(KCMP_FILE), where the kernel allows
 * it) or to the same regular file (st_dev and st_ino; a memfd is one);
 * else 0. Character devices are compared by open file only: a driver's
 * handles may all be opens of one device node. */
int cuc__fd_same_object(int a, int b);

#endif
