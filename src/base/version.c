/* The library's own version, for a program built against other headers. */
#include "cucore/version.h"

int cuc_version(void)
{
    return CUC_VERSION_NUMBER;
}

const char *cuc_version_string(void)
{
    return CUC_VERSION_STRING;
}
