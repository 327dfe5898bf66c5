/* Launch configurations (launch.c): the rules every configuration obeys,
 * wherever it comes from; their records (launch_share.c). */
#ifndef CUC_EXEC_LAUNCH_H
#define CUC_EXEC_LAUNCH_H

#include <stddef.h>

#include "cucore/launch.h"

/* 0, or the first rule cfg breaks, described in why. */
int cuc__launch_config_problem(const cuc_launch_config *cfg, char *why, size_t whylen);

#endif
