/* A program built against an installed cucore: only the public headers.
 * Prints the driver library it loaded, so that the install test can check
 * that CUCORE_DRIVER=sim found the installed simulator. */
#include <cucore.h>
#include <stdio.h>
#include <string.h>

int main(void)
{
    struct cuc_driver_info info;
    cuc_uuid u;
    char s[CUC_UUID_STRLEN];
    int n;

    if (cuc_uuid_parse("gpu-00112233-4455-6677-8899-aabbccddeeff", &u) != 0)
        return 1;
    cuc_uuid_format(&u, s);
    if (strcmp(s, "GPU-00112233-4455-6677-8899-aabbccddeeff") != 0)
        return 2;
    if (strcmp(cuc_errname(CUC_E_NOT_VISIBLE), "CUC_E_NOT_VISIBLE") != 0)
        return 3;
    if (cuc_driver_load(&info) != 0 || cuc_device_count(&n) != 0) {
        fprintf(stderr, "consumer: %s\n", cuc_errmsg());
        return 4;
    }
    printf("consumer ok: %d devices, %s, driver %s%s\n", n, s, info.path,
           info.simulated ? " (simulated)" : "");
    return 0;
}
