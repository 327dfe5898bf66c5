/* Devices: singletons, UUID lookup, errors that name what is wrong; the
 * UUID table in fresh processes with other visibility (10 and 2 of 12
 * simulated GPUs: both ways of searching it); the current device when
 * another runtime made its primary context current. */
#include <ctype.h>
#include <pthread.h>

#include "cucore.h"
#include "check.h"
#include "devices_test.h"

#define THREADS 4

static cuc_device *seen[THREADS];

static void *get_first(void *arg)
{
    int i = (int)(intptr_t)arg;
    CHECK_OK(cuc_device_get(0, &seen[i]));
    return NULL;
}

static int bus_id_well_formed(const char *s)
{
    static const char shape[] = "XXXXXXXX:XX:XX.0";
    size_t i;

    if (strlen(s) != strlen(shape))
        return 0;
    for (i = 0; shape[i]; i++) {
        if (shape[i] == 'X' ? !isxdigit((unsigned char)s[i]) || islower((unsigned char)s[i])
                            : s[i] != shape[i])
            return 0;
    }
    return 1;
}

static void check_singletons(void)
{
    pthread_t t[THREADS];
    int i;

    for (i = 0; i < THREADS; i++)
        CHECK(pthread_create(&t[i], NULL, get_first, (void *)(intptr_t)i) == 0);
    for (i = 0; i < THREADS; i++)
        CHECK(pthread_join(t[i], NULL) == 0);
    for (i = 1; i < THREADS; i++)
        CHECK(seen[i] == seen[0]);
}

static void check_each(int n)
{
    int i, j;

    for (i = 0; i < n; i++) {
        cuc_device *d, *again, *byu;
        int maj = -1, min = -1;
        CHECK_OK(cuc_device_get(i, &d));
        CHECK_OK(cuc_device_get(i, &again));
        CHECK(d == again);
        CHECK(cuc_device_ordinal(d) == i);
        CHECK_OK(cuc_device_get_by_uuid(cuc_device_uuid(d), &byu));
        CHECK(byu == d);
        CHECK(strncmp(cuc_device_uuid_string(d), "GPU-", 4) == 0);
        CHECK(cuc_device_name(d)[0] != '\0');
        CHECK(bus_id_well_formed(cuc_device_pci_bus_id(d)));
        CHECK(cuc_device_total_memory(d) > ((size_t)1 << 30));
        cuc_device_compute_capability(d, &maj, &min);
        CHECK(maj >= 7 && min >= 0);
        if (test_on_sim())
            CHECK((cuc_device_caps(d) & (CUC_DEVICE_CAP_MEMORY_POOLS | CUC_DEVICE_CAP_POOL_POSIX_FD |
                                         CUC_DEVICE_CAP_VMM | CUC_DEVICE_CAP_IPC_EVENTS)) ==
                  (CUC_DEVICE_CAP_MEMORY_POOLS | CUC_DEVICE_CAP_POOL_POSIX_FD |
                   CUC_DEVICE_CAP_VMM | CUC_DEVICE_CAP_IPC_EVENTS));
        for (j = 0; j < i; j++) {
            cuc_device *o;
            CHECK_OK(cuc_device_get(j, &o));
            CHECK(!cuc_uuid_equal(cuc_device_uuid(o), cuc_device_uuid(d)));
            CHECK(strcmp(cuc_device_pci_bus_id(o), cuc_device_pci_bus_id(d)) != 0);
        }
        CHECK_OK(cuc_device_set_current(d));
        CHECK_OK(cuc_device_current(&again));
        CHECK(again == d);
    }
}

static void check_errors(int n)
{
    cuc_device *d = (cuc_device *)0x1, *first;
    cuc_uuid nobody;
    char text[CUC_UUID_STRLEN];

    CHECK_RC(cuc_device_get(-1, &d), CUC_E_INVALID);
    CHECK_RC(cuc_device_get(n, &d), CUC_E_INVALID);
    CHECK(strstr(cuc_errmsg(), "out of range") != NULL);
    CHECK(d == (cuc_device *)0x1);
    CHECK_RC(cuc_device_get(0, NULL), CUC_E_INVALID);
    CHECK_RC(cuc_device_count(NULL), CUC_E_INVALID);

    CHECK_OK(cuc_uuid_parse("GPU-00000000-dead-beef-0000-000000000000", &nobody));
    CHECK_RC(cuc_device_get_by_uuid(&nobody, &d), CUC_E_NOT_VISIBLE);
    CHECK(d == (cuc_device *)0x1);
    cuc_uuid_format(&nobody, text);
    CHECK(strstr(cuc_errmsg(), text) != NULL);
    CHECK_OK(cuc_device_get(0, &first));
    CHECK_RC(cuc_device_get_by_uuid(&nobody, &d), CUC_E_NOT_VISIBLE);
    CHECK(strstr(cuc_errmsg(), cuc_device_uuid_string(first)) != NULL);
    CHECK(strstr(cuc_errmsg(), "0=GPU-") != NULL);
}

/* In a child that sees no device, the not-visible error says so. */
static int child_none(void)
{
    cuc_device *d;
    cuc_uuid u;
    int n;

    CHECK_OK(cuc_uuid_parse("GPU-00000000-dead-beef-0000-000000000000", &u));
    CHECK_RC(cuc_device_count(&n), CUC_E_NO_DEVICE);
    CHECK(strstr(cuc_errmsg(), "CUDA_ERROR_NO_DEVICE") != NULL);
    CHECK_RC(cuc_device_get_by_uuid(&u, &d), CUC_E_NOT_VISIBLE);
    CHECK(strstr(cuc_errmsg(), "GPU-00000000-dead-beef-0000-000000000000") != NULL);
    CHECK(strstr(cuc_errmsg(), "no device is visible") != NULL);
    return 0;
}

/* In a child with argv[3] devices visible: every device's record
 * resolves to that device, through the table built once (scanned up to 8
 * devices, hashed beyond), and a UUID one bit away from each is not
 * visible. */
static int child_table(int want)
{
    cuc_device *d, *got;
    uint8_t bytes[256];
    cuc_msg *m, *r;
    cuc_uuid u;
    size_t len;
    int n;

    CHECK_OK(cuc_device_count(&n));
    CHECK(n == want);
    for (int i = 0; i < n; i++) {
        CHECK_OK(cuc_device_get(i, &d));
        CHECK_OK(cuc_msg_create(&m));
        CHECK_OK(cuc_msg_add_device(m, d));
        CHECK_OK(cuc_msg_to_buffer(m, bytes, sizeof(bytes), &len));
        cuc_msg_destroy(m);
        CHECK_OK(cuc_msg_from_bytes(bytes, len, &r));
        CHECK_OK(cuc_msg_get_device(r, 0, &got));
        cuc_msg_destroy(r);
        CHECK(got == d && cuc_device_ordinal(got) == i);
        for (int bit = 0; bit < 128; bit += 37) {
            u = *cuc_device_uuid(d);
            u.bytes[bit / 8] ^= (uint8_t)(1u << (bit % 8));
            CHECK_RC(cuc_device_get_by_uuid(&u, &got), CUC_E_NOT_VISIBLE);
        }
    }
    return 0;
}

/* cuc_device_context_save / _restore: a scope puts back what it found,
 * nested scopes in order, and a thread that had no context gets none. */
static void *scope_in_fresh_thread(void *arg)
{
    void *saved = (void *)0x1;
    cuc_device *cur;

    (void)arg;
    CHECK_OK(cuc_device_context_save(&saved));
    CHECK(saved == NULL);
    CHECK_OK(cuc_device_set_current(devs[0]));
    CHECK_OK(cuc_device_context_restore(saved));
    CHECK_RC(cuc_device_current(&cur), CUC_E_NOT_FOUND);
    return NULL;
}

static void check_context_scope(int n)
{
    void *outer, *inner;
    cuc_device *cur;
    pthread_t t;

    CHECK_OK(cuc_device_set_current(devs[0]));
    CHECK_OK(cuc_device_context_save(&outer));
    CHECK_OK(cuc_device_set_current(devs[n - 1]));
    CHECK_OK(cuc_device_context_save(&inner));
    CHECK_OK(cuc_device_set_current(devs[0]));
    CHECK_OK(cuc_device_context_restore(inner));
    CHECK_OK(cuc_device_current(&cur));
    CHECK(cur == devs[n - 1]);
    CHECK_OK(cuc_device_context_restore(outer));
    CHECK_OK(cuc_device_current(&cur));
    CHECK(cur == devs[0]);
    CHECK_RC(cuc_device_context_save(NULL), CUC_E_INVALID);
    if (test_on_sim()) { /* a real driver may not survive a bogus handle */
        CHECK_RC(cuc_device_context_restore((void *)&outer), CUC_E_DRIVER);
        CHECK_ERRMSG("cuCtxSetCurrent failed");
        CHECK_OK(cuc_device_current(&cur));
        CHECK(cur == devs[0]);
    }
    CHECK(pthread_create(&t, NULL, scope_in_fresh_thread, NULL) == 0);
    CHECK(pthread_join(t, NULL) == 0);
}

/* A primary context that something else made current (a runtime such as
 * PyTorch's, before cucore used that GPU) is still its device's: found,
 * though cucore had not retained it. */
static int child_foreign(void)
{
    cuc_device *d, *cur = NULL;
    int n;

    CHECK_OK(cuc_device_count(&n));
    CHECK_RC(cuc_device_current(&cur), CUC_E_NOT_FOUND);
    CHECK(strstr(cuc_errmsg(), "no context is current") != NULL);
    d = test_foreign_primary_current();
    CHECK_OK(cuc_device_current(&cur));
    CHECK(cur == d);
    return 0;
}

int main(int argc, char **argv)
{
    static const char *const none_env[] = {"CUDA_VISIBLE_DEVICES=", NULL};
    static const char *const many_env[] = {"CUCORE_SIM_GPUS=12",
                                           "CUDA_VISIBLE_DEVICES=11,3,7,0,1,2,4,5,6,9", NULL};
    static const char *const few_env[] = {"CUCORE_SIM_GPUS=12", "CUDA_VISIBLE_DEVICES=9,2",
                                          NULL};
    static const char *const ten[] = {"10", NULL}, *const two[] = {"2", NULL};
    int n = 0;

    if (argc >= 4 && !strcmp(argv[1], "--child") && !strcmp(argv[2], "table"))
        return child_table(atoi(argv[3]));
    if (argc >= 3 && !strcmp(argv[1], "--child") && !strcmp(argv[2], "foreign"))
        return child_foreign();
    if (argc >= 3 && !strcmp(argv[1], "--child"))
        return child_none();
    open_all(); /* the driver opens fds per context: first */
    n = n_dev;
    FD_BASELINE(); /* after the driver opened what it keeps open */
    CHECK(n >= 1);
    if (test_on_sim())
        CHECK(n == 4);
    check_singletons();
    check_each(n);
    check_errors(n);
    check_context_scope(n);
    CHECK(wait_child(spawn_self("none", NULL, none_env, -1)) == 0);
    CHECK(wait_child(spawn_self("foreign", NULL, NULL, -1)) == 0);
    if (test_on_sim()) { /* twelve GPUs: the simulator's */
        CHECK(wait_child(spawn_self("table", ten, many_env, -1)) == 0);
        CHECK(wait_child(spawn_self("table", two, few_env, -1)) == 0);
    }
    FD_CHECK_NO_LEAK();
    return 0;
}
