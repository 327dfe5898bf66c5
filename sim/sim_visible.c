/* CUDA_VISIBLE_DEVICES, as observed on an H200 with driver 580 (CUDA 13.0):
 * - unset: every GPU, in physical order;
 * - comma-separated entries, each a decimal index or "GPU-" + a UUID prefix
 *   (hex case-insensitive) matching exactly one GPU; a UUID without "GPU-"
 *   does not match, nor does a MIG- entry (no MIG here);
 * - the first invalid entry ends the list ("0,1" on one GPU -> [0]);
 * - an empty result is CUDA_ERROR_NO_DEVICE; an index that repeats an
 *   index ("0,0", "0, 0") is CUDA_ERROR_INVALID_DEVICE, but any other
 *   repeat ("0,GPU-<uuid of 0>", "GPU-<uuid of 0>,0", "0,GPU-<0>,0") ends
 *   the list like an invalid entry: the H200 kept one device in each.
 * Blanks around an entry are ignored. */
#include "sim_internal.h"

#include <ctype.h>
#include <string.h>
#include <strings.h>

static int is_blank(int c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* Physical index named by the entry [s, s+len), or -1. */
static int match_entry(const char *s, size_t len, const struct sim_gpu *gpus,
                       int ngpus)
{
    if (len == 0)
        return -1;
    if (isdigit((unsigned char)s[0])) {
        long v = 0;
        for (size_t i = 0; i < len; i++) {
            if (!isdigit((unsigned char)s[i]))
                return -1;
            v = v * 10 + (s[i] - '0');
            if (v > 1000000)
                return -1;
        }
        return v < ngpus ? (int)v : -1;
    }
    if (len > 4 && strncmp(s, "GPU-", 4) == 0) {
        int found = -1;
        size_t plen = len - 4;
        for (int g = 0; g < ngpus; g++) {
            const char *u = gpus[g].uuid_str + 4; /* after "GPU-" */
            size_t ulen = strlen(u), i;
            if (plen > ulen)
                continue;
            for (i = 0; i < plen; i++)
                if (tolower((unsigned char)s[4 + i]) !=
                    tolower((unsigned char)u[i]))
                    break;
            if (i < plen)
                continue;
            if (found >= 0)
                return -1; /* ambiguous prefix */
            found = g;
        }
        return found;
    }
    return -1; /* MIG-, a bare UUID, -1, text... */
}

CUresult sim_parse_visible(const char *env, const struct sim_gpu *gpus,
                           int ngpus, int out[SIM_MAX_GPUS], int *nout)
{
    const char *p = env;
    int by_index[SIM_MAX_GPUS], is_uuid, n = 0;

    *nout = 0;
    if (!env) {
        for (int i = 0; i < ngpus && i < SIM_MAX_GPUS; i++)
            out[i] = i;
        *nout = ngpus;
        return ngpus > 0 ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
    }
    for (;;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        const char *s = p;
        int g;

        while (len && is_blank((unsigned char)*s)) {
            s++;
            len--;
        }
        while (len && is_blank((unsigned char)s[len - 1]))
            len--;
        g = match_entry(s, len, gpus, ngpus);
        if (g < 0)
            break;
        is_uuid = len >= 4 && strncasecmp(s, "GPU-", 4) == 0;
        for (int j = 0; j < n; j++)
            if (out[j] == g) {
                if (by_index[j] && !is_uuid)
                    return CUDA_ERROR_INVALID_DEVICE;
                goto done;
            }
        if (n >= SIM_MAX_GPUS)
            break;
        by_index[n] = !is_uuid;
        out[n++] = g;
        if (!e)
            break;
        p = e + 1;
    }
done:
    if (n == 0)
        return CUDA_ERROR_NO_DEVICE;
    *nout = n;
    return CUDA_SUCCESS;
}
