/* UUID text form: parse accepts nvidia-smi's form with or without prefix,
 * any case; refuses a MIG instance's UUID (it would format back as GPU-)
 * with CUC_E_NOT_SUPPORTED; rejects everything else
 * with CUC_E_INVALID. */
#include "cucore.h"
#include "check.h"

static const char *good[] = {
    "GPU-ec8f1d2a-3b4c-5d6e-7f80-9a0b1c2d3e4f",
    "gpu-EC8F1D2A-3B4C-5D6E-7F80-9A0B1C2D3E4F",
    "ec8f1d2a-3b4c-5d6e-7f80-9a0b1c2d3e4f",
};

static const char *bad[] = {
    "", "GPU-", "GPU", "GPU-ec8f", "ec8f1d2a3b4c5d6e7f809a0b1c2d3e4f",
    "GPU-ec8f1d2a-3b4c-5d6e-7f80-9a0b1c2d3e4", /* one short */
    "GPU-ec8f1d2a-3b4c-5d6e-7f80-9a0b1c2d3e4f0", /* one long */
    "GPU-ec8f1d2a-3b4c-5d6e-7f80-9a0b1c2d3e4g", /* non-hex */
    "GPU-ec8f1d2a+3b4c-5d6e-7f80-9a0b1c2d3e4f", /* wrong separator */
    "GPU-ec8f1d2a-3b4c5-d6e-7f80-9a0b1c2d3e4f", /* misplaced dash */
    "XPU-ec8f1d2a-3b4c-5d6e-7f80-9a0b1c2d3e4f",
    " GPU-ec8f1d2a-3b4c-5d6e-7f80-9a0b1c2d3e4f",
    "GPU-ec8f1d2a-3b4c-5d6e-7f80-9a0b1c2d3e4f ",
    "GPU-GPU-ec8f1d2a-3b4c-5d6e-7f80-9a0b1c2d",
};

int main(void)
{
    static const uint8_t want[16] = {0xec, 0x8f, 0x1d, 0x2a, 0x3b, 0x4c, 0x5d, 0x6e,
                                     0x7f, 0x80, 0x9a, 0x0b, 0x1c, 0x2d, 0x3e, 0x4f};
    char text[CUC_UUID_STRLEN];
    cuc_uuid u, v;
    size_t i;

    FD_BASELINE();
    for (i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        memset(&u, 0, sizeof(u));
        CHECK_OK(cuc_uuid_parse(good[i], &u));
        CHECK(memcmp(u.bytes, want, 16) == 0);
    }
    cuc_uuid_format(&u, text);
    CHECK(strcmp(text, good[0]) == 0);
    CHECK(strlen(text) == CUC_UUID_STRLEN - 1);
    CHECK_OK(cuc_uuid_parse(text, &v));
    CHECK(cuc_uuid_equal(&u, &v));

    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        memset(&v, 0x5a, sizeof(v));
        CHECK_RC(cuc_uuid_parse(bad[i], &v), CUC_E_INVALID);
        CHECK(v.bytes[0] == 0x5a); /* output untouched on failure */
        CHECK(strstr(cuc_errmsg(), "not a GPU UUID") != NULL);
    }
    /* MIG: refused, saying why, rather than turned into a GPU- UUID */
    memset(&v, 0x5a, sizeof(v));
    CHECK_RC(cuc_uuid_parse("MIG-ec8f1d2a-3b4c-5d6e-7f80-9a0b1c2d3e4f", &v),
             CUC_E_NOT_SUPPORTED);
    CHECK(v.bytes[0] == 0x5a);
    CHECK_ERRMSG("MIG instance");
    CHECK_RC(cuc_uuid_parse("mig-ec8f1d2a-3b4c-5d6e-7f80-9a0b1c2d3e4f", &v),
             CUC_E_NOT_SUPPORTED);
    CHECK_RC(cuc_uuid_parse(NULL, &v), CUC_E_INVALID);
    CHECK_RC(cuc_uuid_parse(good[0], NULL), CUC_E_INVALID);
    v.bytes[15] ^= 1;
    CHECK(!cuc_uuid_equal(&u, &v));
    FD_CHECK_NO_LEAK();
    return 0;
}
