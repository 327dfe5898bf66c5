/* Lower-case hex. */
#include "base/hex.h"

void cuc__hex(const uint8_t *bytes, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";

    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[bytes[i] >> 4];
        out[2 * i + 1] = digits[bytes[i] & 0xf];
    }
    out[2 * n] = '\0';
}

struct cuc__hex16 cuc__id16_hex(const uint8_t id[16])
{
    struct cuc__hex16 h;

    cuc__hex(id, 16, h.s);
    return h;
}
