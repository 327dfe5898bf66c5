/* The status table: every code has a distinct name and text; messages are
 * thread-local. */
#include <pthread.h>

#include "cucore.h"
#include "device/device.h"
#include "check.h"

static void *other_thread(void *arg)
{
    (void)arg;
    cuc__seterr(CUC_E_TIMEOUT, "message from the other thread");
    return NULL;
}

int main(void)
{
    static const int codes[] = {
#define CODE_(name, value, text) value,
        CUC_ERRNO_MAP(CODE_)
#undef CODE_
    };
    pthread_t t;
    size_t i, j;

    FD_BASELINE();
    for (i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
        CHECK(strncmp(cuc_errname(codes[i]), "CUC_E_", 6) == 0);
        CHECK(strcmp(cuc_strerror(codes[i]), "unknown error") != 0);
        for (j = 0; j < i; j++) {
            CHECK(codes[i] != codes[j]);
            CHECK(strcmp(cuc_errname(codes[i]), cuc_errname(codes[j])) != 0);
        }
    }
    CHECK(strcmp(cuc_errname(CUC_E_NOT_VISIBLE), "CUC_E_NOT_VISIBLE") == 0);
    CHECK(strcmp(cuc_errname(CUC_E_FORKED), "CUC_E_FORKED") == 0);
    CHECK(strstr(cuc_strerror(CUC_E_FORKED), "fork") != NULL);
    CHECK(strcmp(cuc_errname(12345), "CUC_E_UNKNOWN") == 0);
    CHECK(strcmp(cuc_strerror(-999), "unknown error") == 0);

    CHECK(cuc__seterr(CUC_E_BADMSG, "mine %d", 7) == CUC_E_BADMSG);
    CHECK(pthread_create(&t, NULL, other_thread, NULL) == 0);
    CHECK(pthread_join(t, NULL) == 0);
    CHECK(strcmp(cuc_errmsg(), "mine 7") == 0);

    CHECK(cuc__errno_err(ENOENT, "open %s", "/x") == CUC_E_IO);
    CHECK(strstr(cuc_errmsg(), "open /x: ") != NULL);
    CHECK(cuc__errno_err(EACCES, "bind") == CUC_E_PERMISSION);
    FD_CHECK_NO_LEAK();
    return 0;
}
