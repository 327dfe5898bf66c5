/* `cucore demo`, the main job, run as a user runs it: it must exit 0, say
 * which driver it used, reverse the consumer's visibility, resolve every
 * device to the producer's UUID, refuse the created stream, carry the
 * buffers' bytes, and end every lease. On the simulator with 4 GPUs, with
 * 2 of them visible, and with 1; on a GPU with what the machine has, where
 * the consumer's kernel must also have changed the producer's buffer. */
#include "cucore.h"
#include "check.h"

static int count(const char *s, const char *what)
{
    int n = 0;

    for (; (s = strstr(s, what)) != NULL; s += strlen(what))
        n++;
    return n;
}

/* The consumer's "device record -> local ordinal K = UUID" for the
 * producer's ordinal i of n: the same UUID at the reversed ordinal. */
static void check_reversed(const char *out, int n)
{
    for (int i = 0; i < n; i++) {
        char want[160], uuid[CUC_UUID_STRLEN];
        const char *p;
        snprintf(want, sizeof(want), "sending local ordinal %d = ", i);
        p = strstr(out, want);
        CHECK(p != NULL);
        memcpy(uuid, p + strlen(want), CUC_UUID_STRLEN - 1);
        uuid[CUC_UUID_STRLEN - 1] = '\0';
        snprintf(want, sizeof(want), "device record -> local ordinal %d = %s", n - 1 - i, uuid);
        CHECK(strstr(out, want) != NULL);
    }
}

static void run_demo(const char *const *env, int ndev)
{
    static char out[1 << 16];
    const char *argv[] = {CUC_CLI_PATH, "demo", NULL};

    CHECK(run_capture(argv, env, out, sizeof(out)) == 0);
    CHECK(strstr(out, "demo OK") != NULL);
    CHECK(count(out, "MISMATCH") == 0);
    /* four answers, and on a GPU the kernel's result */
    CHECK(count(out, "producer MATCH") == (test_on_sim() ? 4 : 5));
    CHECK(strstr(out, "a created stream is refused") != NULL);
    CHECK(count(out, "every word as the producer wrote it") == 3);
    /* a view of buffer 2, inside the allocation the consumer mapped */
    CHECK(count(out, "buffer view record -> the second half of buffer 2") == 1);
    CHECK(strstr(out, "0 left once it released them") != NULL);
    if (test_on_sim()) {
        CHECK(strncmp(out, "cucore demo: using the SIMULATED driver", 39) == 0);
        check_reversed(out, ndev);
    } else {
        CHECK(strncmp(out, "cucore demo: using the CUDA driver", 34) == 0);
        CHECK(strstr(out, "MATCH: every word of buffer 0 is the producer's value + 1") != NULL);
    }
}

int main(void)
{
    int n;

    if (!test_on_sim()) {
        CHECK_OK(cuc_device_count(&n));
        FD_BASELINE(); /* after the driver opened what it keeps open */
        run_demo((const char *const[]){"CUDA_VISIBLE_DEVICES", NULL}, n);
        FD_CHECK_NO_LEAK();
        return test_finish();
    }
    FD_BASELINE();
    run_demo((const char *const[]){"CUDA_VISIBLE_DEVICES", NULL}, 4);
    /* Visibility already narrowed: the consumer gets UUIDs, reversed. */
    run_demo((const char *const[]){"CUDA_VISIBLE_DEVICES=2,0", NULL}, 2);
    run_demo((const char *const[]){"CUDA_VISIBLE_DEVICES", "CUCORE_SIM_GPUS=1", NULL}, 1);
    FD_CHECK_NO_LEAK();
    return test_finish();
}
