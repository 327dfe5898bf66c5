/* Release records: lease ids an importer no longer uses. Payload: 8 * n
 * bytes, lease id i at 8 * i. A message holds only releases, or none. */
#include "wire/records.h"
#include "base/error.h"

#include <stdlib.h>

/* Appends records of up to CUC__RELEASE_MAX_IDS ids from
 * ids[*done..n), at most CUC__RELEASE_MAX_RECORDS of them. */
static int fill(cuc_msg *m, const uint64_t *ids, size_t n, size_t *done)
{
    size_t most = n - *done < CUC__RELEASE_MAX_IDS ? n - *done
                                                         : CUC__RELEASE_MAX_IDS;
    uint8_t *payload = malloc(8 * most);
    int rc = 0;

    if (!payload)
        return cuc__seterr(CUC_E_NOMEM, "out of memory releasing %zu leases", n);
    for (size_t r = 0; !rc && r < CUC__RELEASE_MAX_RECORDS && *done < n; r++) {
        size_t k = n - *done < most ? n - *done : most;
        for (size_t i = 0; i < k; i++)
            cuc__put64(payload + 8 * i, ids[*done + i]);
        rc = cuc__msg_add_record(m, CUC_RECORD_RELEASE, CUC_RECORD_RELEASE_VERSION,
                                 payload, (uint32_t)(8 * k), NULL, 0);
        if (!rc)
            *done += k;
    }
    free(payload);
    return rc;
}

int cuc__release_msg_build(const uint64_t *ids, size_t n, size_t *done, cuc_msg **out)
{
    cuc_msg *m;
    int rc = cuc_msg_create(&m);

    if (rc)
        return rc;
    rc = fill(m, ids, n, done);
    if (rc) {
        cuc_msg_destroy(m);
        return rc;
    }
    *out = m;
    return 0;
}

size_t cuc__release_rec_count(const cuc_msg *m)
{
    size_t n = cuc_msg_record_count(m), nrel = 0;
    int type = 0;

    if (!cuc__msg_has_type(m, CUC_RECORD_RELEASE)) /* O(1): most messages */
        return 0;
    for (size_t i = 0; i < n; i++)
        nrel += cuc_msg_record_type(m, i, &type) == 0 && type == CUC_RECORD_RELEASE;
    return nrel;
}

int cuc__release_rec_read(const cuc_msg *m, size_t index, const uint8_t **ids, size_t *n)
{
    struct cuc__record r;
    int rc = cuc__msg_record_of(m, index, CUC_RECORD_RELEASE, &r);

    if (rc)
        return rc;
    *ids = r.payload;
    *n = r.len / 8;
    return 0;
}
