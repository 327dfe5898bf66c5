/* Importing IPC events.
 *
 * One object per handle per process: 8 threads of an exec'd child call
 * cuc_msg_get_event on one record at once, in several rounds; each round
 * they all get the same object, and the driver opened the handle once.
 *
 * A record whose UUID disagrees with its handle (names GPU 1, carries a
 * GPU-0 event's handle) is CUC_E_BADMSG naming both, as a pool record with
 * the wrong owner is; so is a record that repeats a handle this process
 * already imported for another GPU. On the simulator only: the sim refuses
 * to open a handle in a context of another GPU (sim/README.md, "Where the
 * sim differs", says what is assumed about the driver there). */
#include "cucore.h"
#include "check.h"
#include "devices_test.h"
#include "driver_warm.h"
#include "msg_hex.h"
#include "wire/records.h"
#include "../sim/cucore_sim.h"

#include <dlfcn.h>
#include <pthread.h>

#define THREADS 8
#define ROUNDS 5

static pthread_barrier_t start_line;
static cuc_msg *shared_msg;

static void *get_event(void *arg)
{
    cuc_event **out = arg;

    pthread_barrier_wait(&start_line);
    CHECK_OK(cuc_msg_get_event(shared_msg, 0, out));
    return NULL;
}

static unsigned long long opens(void)
{
    void *h = dlopen(CUC_SIM_PATH, RTLD_NOW | RTLD_NOLOAD);
    cucore_sim_calls_fn calls;
    unsigned long long n = 0;

    CHECK(h != NULL);
    calls = (cucore_sim_calls_fn)dlsym(h, "cucore_sim_calls");
    CHECK(calls && calls("cuIpcOpenEventHandle", &n) == 0);
    dlclose(h);
    return n;
}

/* Child: the 8-thread rounds; prints "OK <opens per round...>". */
static int child_race(int argc, char **argv)
{
    pthread_t th[THREADS];
    cuc_event *ev[THREADS];
    int n;

    CHECK(argc == 1);
    CHECK_OK(msg_from_hex(argv[0], &shared_msg));
    CHECK_OK(cuc_device_count(&n)); /* loads the driver */
    CHECK(pthread_barrier_init(&start_line, NULL, THREADS) == 0);
    printf("OK");
    for (int r = 0; r < ROUNDS; r++) {
        unsigned long long before = opens();
        for (int i = 0; i < THREADS; i++)
            CHECK(pthread_create(&th[i], NULL, get_event, &ev[i]) == 0);
        for (int i = 0; i < THREADS; i++)
            CHECK(pthread_join(th[i], NULL) == 0);
        for (int i = 1; i < THREADS; i++)
            if (ev[i] != ev[0]) {
                fprintf(stderr, "round %d: thread %d got %p, thread 0 %p\n", r, i,
                        (void *)ev[i], (void *)ev[0]);
                exit(1);
            }
        CHECK(cuc_event_is_imported(ev[0]));
        CHECK_OK(cuc_event_synchronize(ev[0]));
        printf(" %llu", opens() - before);
        for (int i = 0; i < THREADS; i++)
            cuc_event_unref(ev[i]); /* the last one closes the handle */
    }
    printf("\n");
    pthread_barrier_destroy(&start_line);
    cuc_msg_destroy(shared_msg);
    return test_finish();
}

static void test_race(void)
{
    char out[256], want[64];
    const char *env[] = {"CUDA_VISIBLE_DEVICES=3,2,1,0", NULL};
    int dev = n_dev > 1 ? 1 : 0;
    cuc_event *ev;
    cuc_msg *m;
    char *hex;

    CHECK_OK(cuc_event_create(devs[dev], CUC_EVENT_IPC, &ev));
    CHECK_OK(cuc_event_record(ev, NULL));
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_event(m, ev));
    hex = msg_to_hex(m);
    for (int run = 0; run < 3; run++) {
        const char *args[] = {hex, NULL};
        CHECK(spawn_self_capture("race", args, env, out, sizeof(out)) == 0);
        snprintf(want, sizeof(want), "OK 1 1 1 1 1\n"); /* one open per round */
        if (strcmp(out, want) != 0) {
            fprintf(stderr, "run %d: child said \"%s\", want \"%s\"\n", run, out, want);
            exit(1);
        }
    }
    free(hex);
    cuc_msg_destroy(m);
    cuc_event_unref(ev);
}

/* Child: gets event records 0..argc-1 of the message in argv[0] in turn,
 * printing "OK" or "ERR <name> <message>" for each, one a line. */
static int child_get(int argc, char **argv)
{
    cuc_msg *m;
    cuc_event *ev[4] = {NULL};
    size_t n;

    CHECK(argc == 1);
    CHECK_OK(msg_from_hex(argv[0], &m));
    n = cuc_msg_record_count(m);
    CHECK(n <= 4);
    for (size_t i = 0; i < n; i++) {
        int rc = cuc_msg_get_event(m, i, &ev[i]);
        if (rc)
            printf("ERR %s %s\n", cuc_errname(rc), cuc_errmsg());
        else
            printf("OK %s\n", cuc_device_uuid_string(cuc_event_device(ev[i])));
    }
    for (size_t i = 0; i < n; i++)
        cuc_event_unref(ev[i]);
    cuc_msg_destroy(m);
    return test_finish();
}

/* A message of event records: ev's, with the UUID of devs[names[i]]. */
static cuc_msg *forged(cuc_event *ev, const int *names, size_t n)
{
    cuc_msg *m;
    uint8_t *bytes;
    size_t len;
    void *b;

    CHECK_OK(cuc_msg_create(&m));
    for (size_t i = 0; i < n; i++)
        CHECK_OK(cuc_msg_add_event(m, ev));
    CHECK_OK(cuc_msg_to_bytes(m, &b, &len));
    cuc_msg_destroy(m);
    bytes = b;
    for (size_t i = 0; i < n; i++) {
        uint8_t *p = bytes + CUC__WIRE_HDR + i * (CUC__WIRE_REC_HDR + 88) + CUC__WIRE_REC_HDR;
        memcpy(p + 8, cuc_device_uuid(devs[names[i]])->bytes, 16);
    }
    CHECK_OK(cuc_msg_from_bytes(bytes, len, &m));
    free(b);
    return m;
}

/* Record i must give a line starting with want_prefix[i]; an error must
 * name uuid_named, and uuid_had too where it is given (a handle this
 * process had already). */
static void expect_get(cuc_msg *m, const char *want_prefix[], size_t n,
                       const char *uuid_named, const char *uuid_had)
{
    const char *env[] = {"CUDA_VISIBLE_DEVICES=3,2,1,0", NULL};
    char *hex = msg_to_hex(m);
    const char *args[] = {hex, NULL};
    char out[8192], *line = out;

    CHECK(spawn_self_capture("get", args, env, out, sizeof(out)) == 0);
    for (size_t i = 0; i < n; i++) {
        char *nl = strchr(line, '\n');
        CHECK(nl != NULL);
        if (!nl)
            break;
        *nl = '\0';
        if (strncmp(line, want_prefix[i], strlen(want_prefix[i])) != 0) {
            fprintf(stderr, "record %zu: \"%s\", want \"%s...\"\n", i, line, want_prefix[i]);
            exit(1);
        }
        if (strncmp(line, "ERR", 3) == 0)
            CHECK(strstr(line, uuid_named) && (!uuid_had || strstr(line, uuid_had)));
        line = nl + 1;
    }
    free(hex);
}

static void test_mismatch(void)
{
    const char *u0 = cuc_device_uuid_string(devs[0]), *u1 = cuc_device_uuid_string(devs[1]);
    cuc_event *ev;
    cuc_msg *m;

    CHECK_OK(cuc_event_create(devs[0], CUC_EVENT_IPC, &ev));
    CHECK_OK(cuc_event_record(ev, NULL));
    {
        /* GPU 1 named, GPU 0's handle */
        const int names[] = {1};
        const char *want[] = {"ERR CUC_E_BADMSG"};
        m = forged(ev, names, 1);
        expect_get(m, want, 1, u1, NULL);
        cuc_msg_destroy(m);
    }
    {
        /* the truth first, then the same handle under another GPU's name */
        const int names[] = {0, 1};
        char ok[128];
        const char *want[] = {ok, "ERR CUC_E_BADMSG"};
        snprintf(ok, sizeof(ok), "OK %s", u0);
        m = forged(ev, names, 2);
        expect_get(m, want, 2, u1, u0);
        cuc_msg_destroy(m);
    }
    cuc_event_unref(ev);
}

int main(int argc, char **argv)
{
    if (argc >= 3 && strcmp(argv[1], "--child") == 0) {
        if (strcmp(argv[2], "race") == 0)
            return child_race(argc - 3, argv + 3);
        if (strcmp(argv[2], "get") == 0)
            return child_get(argc - 3, argv + 3);
        return 2;
    }
    if (!test_on_sim())
        SKIP("counts the driver's opens and forges records: simulator only");
    unsetenv("CUDA_VISIBLE_DEVICES");
    open_all();
    if (n_dev < 4)
        SKIP("needs 4 simulated GPUs");
    test_warm_driver_fds();
    FD_BASELINE();
    test_race();
    test_mismatch();
    FD_CHECK_NO_LEAK();
    return test_finish();
}
