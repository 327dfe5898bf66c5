/* UUID text form: nvidia-smi's "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx". */
#include "cucore/device.h"
#include "base/error.h"

#include <string.h>
#include <strings.h>

/* Offsets of the dashes in the 36-character body. */
static int is_dash_pos(size_t i)
{
    return i == 8 || i == 13 || i == 18 || i == 23;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int cuc_uuid_parse(const char *text, cuc_uuid *uuid)
{
    cuc_uuid tmp;
    const char *p;
    size_t i, nib = 0;

    if (!text || !uuid)
        return cuc__seterr(CUC_E_INVALID, "cuc_uuid_parse: NULL argument");
    p = text;
    /* A cuc_uuid is the driver's 16 bytes, as records carry them, with no
     * kind; cucore names every device GPU-... Taking MIG-... would name a
     * MIG instance with a GPU- string, so it is refused. */
    if (strncasecmp(p, "MIG-", 4) == 0)
        return cuc__seterr(CUC_E_NOT_SUPPORTED,
                           "\"%.64s\" names a MIG instance: cucore does not support MIG "
                           "devices (a cuc_uuid holds 16 bytes and no kind, and cucore "
                           "writes every UUID as GPU-...); give the GPU- UUID of a whole "
                           "GPU", text);
    if (strncasecmp(p, "GPU-", 4) == 0)
        p += 4;
    if (strlen(p) != 36)
        goto bad;
    for (i = 0; i < 36; i++) {
        int v;
        if (is_dash_pos(i)) {
            if (p[i] != '-')
                goto bad;
            continue;
        }
        v = hexval(p[i]);
        if (v < 0)
            goto bad;
        if (nib % 2 == 0)
            tmp.bytes[nib / 2] = (uint8_t)(v << 4);
        else
            tmp.bytes[nib / 2] |= (uint8_t)v;
        nib++;
    }
    *uuid = tmp;
    return 0;
bad:
    return cuc__seterr(CUC_E_INVALID,
                       "\"%.64s\" is not a GPU UUID: expected "
                       "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx (hex, "
                       "prefix optional)", text);
}

void cuc_uuid_format(const cuc_uuid *uuid, char out[CUC_UUID_STRLEN])
{
    static const char hex[] = "0123456789abcdef";
    size_t i, nib = 0;
    char *o = out;

    memcpy(o, "GPU-", 4);
    o += 4;
    for (i = 0; i < 36; i++) {
        if (is_dash_pos(i)) {
            o[i] = '-';
            continue;
        }
        if (nib % 2 == 0)
            o[i] = hex[uuid->bytes[nib / 2] >> 4];
        else
            o[i] = hex[uuid->bytes[nib / 2] & 0xf];
        nib++;
    }
    o[36] = '\0';
}

int cuc_uuid_equal(const cuc_uuid *a, const cuc_uuid *b)
{
    return memcmp(a->bytes, b->bytes, sizeof(a->bytes)) == 0;
}
