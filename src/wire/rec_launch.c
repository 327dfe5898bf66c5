/* Launch-config records. Payload (64 bytes): 16 u32 in struct order:
 * grid x,y,z, block x,y,z, cluster x,y,z, shared_mem, cooperative,
 * reserved[5] = 0. The codec moves the words; the rules they obey are the
 * launch module's (exec/launch.c), applied on both sides. */
#include "wire/records.h"
#include "base/error.h"

#include <stddef.h>
#include <string.h>

_Static_assert(CUC__LAUNCH_PAYLOAD == 64u, "update the launch config shape in record_types.h");

#define N_WORDS (CUC__LAUNCH_PAYLOAD / 4)

_Static_assert(sizeof(cuc_launch_config) == CUC__LAUNCH_PAYLOAD &&
                   offsetof(cuc_launch_config, reserved) == 44,
               "a launch config is its 16 wire fields, in order, unpadded");

int cuc__launch_rec_put(cuc_msg *m, const cuc_launch_config *cfg)
{
    uint8_t p[CUC__LAUNCH_PAYLOAD];
    uint32_t w[N_WORDS];

    memcpy(w, cfg, sizeof(w)); /* the fields in wire order, no padding */
    for (size_t i = 0; i < N_WORDS; i++)
        cuc__put32(p + 4 * i, w[i]);
    return cuc__msg_add_record(m, CUC_RECORD_LAUNCH_CONFIG,
                               CUC_RECORD_LAUNCH_CONFIG_VERSION, p, sizeof(p), NULL, 0);
}

int cuc__launch_rec_read(const cuc_msg *m, size_t index, cuc_launch_config *out)
{
    struct cuc__record r;
    uint32_t w[N_WORDS];
    int rc;

    rc = cuc__msg_record_fixed(m, index, CUC_RECORD_LAUNCH_CONFIG, CUC__LAUNCH_PAYLOAD, 0,
                               &r);
    if (rc)
        return rc;
    for (size_t i = 0; i < N_WORDS; i++)
        w[i] = cuc__get32(r.payload + 4 * i);
    memcpy(out, w, sizeof(w));
    return 0;
}
