/* CUDA_VISIBLE_DEVICES, read as the driver reads it (FACTS.md F1): the
 * first entry sets the list's kind (an index read like strtol, or a
 * "GPU-"/"MIG-" prefix of a UUID's hex digits, dashes ignored), the first
 * invalid entry ends the list, an empty list is CUDA_ERROR_NO_DEVICE and
 * a GPU named twice CUDA_ERROR_INVALID_DEVICE. Ambiguous prefixes were not
 * measured; they are refused. */
#include "sim_internal.h"

#include <ctype.h>
#include <string.h>

static int is_blank(int c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' ||
           c == '\v';
}

enum { KIND_INDEX = 1, KIND_UUID = 2 };

static int is_uuid_entry(const char *s, size_t len)
{
    return len >= 4 &&
           (strncmp(s, "GPU-", 4) == 0 || strncmp(s, "MIG-", 4) == 0);
}

/* Physical index named by the entry [s, s+len) of the given kind, or -1. */
static int match_entry(const char *s, size_t len, int kind,
                       const struct sim_gpu *gpus, int ngpus)
{
    if (kind == KIND_INDEX) {
        size_t i = 0;
        long v = 0;
        int digits = 0;
        while (i < len && is_blank((unsigned char)s[i]))
            i++;
        if (i < len && s[i] == '+')
            i++;
        while (i < len && isdigit((unsigned char)s[i])) {
            v = v * 10 + (s[i] - '0');
            if (v > 1000000)
                return -1;
            digits++;
            i++;
        }
        return digits && v < ngpus ? (int)v : -1;
    } else {
        char hex[32];
        size_t n = 0;
        int found = -1;
        for (size_t i = 4; i < len; i++) {
            if (s[i] == '-')
                continue;
            if (!isxdigit((unsigned char)s[i]))
                return -1;
            if (n < sizeof(hex))
                hex[n++] = (char)tolower((unsigned char)s[i]);
        }
        if (n == 0)
            return -1;
        for (int g = 0; g < ngpus; g++) {
            const char *u = gpus[g].uuid_str + 4; /* after "GPU-" */
            size_t k = 0;
            for (; *u && k < n; u++) {
                if (*u == '-')
                    continue;
                if (*u != hex[k])
                    break;
                k++;
            }
            if (k < n)
                continue;
            if (found >= 0)
                return -1; /* ambiguous prefix */
            found = g;
        }
        return found;
    }
}

CUresult sim_parse_visible(const char *env, const struct sim_gpu *gpus,
                           int ngpus, int out[SIM_MAX_GPUS], int *nout)
{
    const char *p = env;
    int n = 0, kind = 0;

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
        int g, k = is_uuid_entry(p, len) ? KIND_UUID : KIND_INDEX;

        if (kind == 0)
            kind = k;
        g = k == kind ? match_entry(p, len, k, gpus, ngpus) : -1;
        if (g < 0)
            break;
        for (int j = 0; j < n; j++)
            if (out[j] == g)
                return CUDA_ERROR_INVALID_DEVICE;
        if (n >= SIM_MAX_GPUS)
            break;
        out[n++] = g;
        if (!e)
            break;
        p = e + 1;
    }
    if (n == 0)
        return CUDA_ERROR_NO_DEVICE;
    *nout = n;
    return CUDA_SUCCESS;
}
