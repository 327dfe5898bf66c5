/* Launch-config records. Payload (64 bytes): 16 u32 in struct order:
 * grid x,y,z, block x,y,z, cluster x,y,z, shared_mem, cooperative,
 * reserved[5] = 0. */
#include "objects.h"

#include <string.h>

_Static_assert(CUC__LAUNCH_PAYLOAD == 64u, "update the launch config shape in wire.h");

#define N_FIELDS (CUC__LAUNCH_PAYLOAD / 4)

static void to_words(const cuc_launch_config *c, uint32_t w[N_FIELDS])
{
    size_t i, k = 0;

    for (i = 0; i < 3; i++)
        w[k++] = c->grid[i];
    for (i = 0; i < 3; i++)
        w[k++] = c->block[i];
    for (i = 0; i < 3; i++)
        w[k++] = c->cluster[i];
    w[k++] = c->shared_mem;
    w[k++] = c->cooperative;
    for (i = 0; i < CUC_ARRAY_LEN(c->reserved); i++)
        w[k++] = c->reserved[i];
}

static void from_words(const uint32_t w[N_FIELDS], cuc_launch_config *c)
{
    size_t i, k = 0;

    for (i = 0; i < 3; i++)
        c->grid[i] = w[k++];
    for (i = 0; i < 3; i++)
        c->block[i] = w[k++];
    for (i = 0; i < 3; i++)
        c->cluster[i] = w[k++];
    c->shared_mem = w[k++];
    c->cooperative = w[k++];
    for (i = 0; i < CUC_ARRAY_LEN(c->reserved); i++)
        c->reserved[i] = w[k++];
}

_Static_assert(sizeof(cuc_launch_config) == CUC__LAUNCH_PAYLOAD,
               "a launch config is its 16 wire fields");

int cuc_msg_add_launch_config(cuc_msg *m, const cuc_launch_config *cfg)
{
    uint8_t p[CUC__LAUNCH_PAYLOAD];
    uint32_t w[N_FIELDS];
    size_t i;
    int rc;

    if (!m || !cfg)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_add_launch_config: NULL argument");
    /* A receiver refuses what breaks the rules: refuse it here first. */
    rc = cuc_launch_config_check(cfg);
    if (rc)
        return rc;
    to_words(cfg, w);
    for (i = 0; i < N_FIELDS; i++)
        cuc__put32(p + 4 * i, w[i]);
    return cuc__msg_add_record(m, CUC_RECORD_LAUNCH_CONFIG,
                               CUC_RECORD_LAUNCH_CONFIG_VERSION, p, sizeof(p), NULL, 0);
}

int cuc_msg_get_launch_config(const cuc_msg *m, size_t index, cuc_launch_config *cfg)
{
    struct cuc__record r;
    cuc_launch_config c;
    uint32_t w[N_FIELDS];
    char why[160];
    size_t i;
    int rc;

    if (!m || !cfg)
        return cuc__seterr(CUC_E_INVALID, "cuc_msg_get_launch_config: NULL argument");
    rc = cuc__msg_record_of(m, index, CUC_RECORD_LAUNCH_CONFIG, &r);
    if (rc)
        return rc;
    if (r.len != CUC__LAUNCH_PAYLOAD)
        return cuc__seterr(CUC_E_BADMSG, "launch config record %zu has a %u-byte "
                           "payload, not %u", index, r.len, CUC__LAUNCH_PAYLOAD);
    for (i = 0; i < N_FIELDS; i++)
        w[i] = cuc__get32(r.payload + 4 * i);
    from_words(w, &c);
    if (cuc__launch_config_problem(&c, why, sizeof(why)))
        return cuc__seterr(CUC_E_BADMSG, "launch config record %zu: %s", index, why);
    *cfg = c;
    return 0;
}
