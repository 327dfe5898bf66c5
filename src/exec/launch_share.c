/* Launch configurations in messages: a configuration travels as its 16
 * words (wire/rec_launch.c) and obeys launch.c's rules on both sides. */
#include "exec/launch.h"
#include "base/error.h"
#include "wire/records.h"

int cuc_msg_add_launch_config(cuc_msg *m, const cuc_launch_config *cfg)
{
    int rc;

    if (!m || !cfg)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_add_launch_config: NULL argument");
    /* A receiver refuses what breaks the rules: refuse it here first. */
    rc = cuc_launch_config_check(cfg);
    if (rc)
        return rc;
    return cuc__launch_rec_put(m, cfg);
}

int cuc_msg_get_launch_config(const cuc_msg *m, size_t index, cuc_launch_config *cfg)
{
    cuc_launch_config c;
    char why[160];
    int rc;

    if (!m || !cfg)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_get_launch_config: NULL argument");
    rc = cuc__launch_rec_read(m, index, &c);
    if (rc)
        return rc;
    if (cuc__launch_config_problem(&c, why, sizeof(why)))
        return cuc__seterr(CUC_E_BADMSG, "launch config record %zu: %s", index, why);
    *cfg = c;
    return 0;
}
