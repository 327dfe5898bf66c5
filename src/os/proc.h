/* The process (proc.c): its pid, cached and refreshed in the child of a
 * fork(), so that objects can tell whether they were made in this process
 * or inherited through fork (DESIGN.md, "Fork"); the system's overflow
 * uid. */
#ifndef CUC_OS_PROC_H
#define CUC_OS_PROC_H

#include <sys/types.h>

/* This process's pid: a load, no system call (a pthread_atfork child
 * handler refreshes it). */
pid_t cuc__pid(void);

/* The overflow uid (/proc/sys/kernel/overflowuid, read once; 65534 when
 * it cannot be read): what a uid that has no mapping in the reader's user
 * namespace reads as (SO_PEERCRED, geteuid() in a namespace without a uid
 * map), whoever it is outside. */
uid_t cuc__overflow_uid(void);

/* 0 if owner (an object's creating pid) is this process; otherwise
 * CUC_E_FORKED naming both pids and what (a "channel", say) with fn, the
 * call refused. */
int cuc__check_owner(pid_t owner, const char *fn, const char *what);

#endif
