/* A device record decoded in exec'd children with every permutation of 4
 * GPUs in CUDA_VISIBLE_DEVICES, with subsets and with UUID forms: the
 * child always resolves the parent's UUID, at whatever ordinal it has
 * there, or fails with CUC_E_NOT_VISIBLE naming the UUID. */
#include <stdio.h>

#include "cucore.h"
#include "check.h"

static void hex_encode(const uint8_t *b, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", b[i]);
}

static size_t hex_decode(const char *s, uint8_t *out, size_t max)
{
    size_t n = 0;
    unsigned v;

    while (s[0] && s[1] && n < max && sscanf(s, "%2x", &v) == 1) {
        out[n++] = (uint8_t)v;
        s += 2;
    }
    return n;
}

/* Child: decode the message in argv, print "OK ordinal uuid" or
 * "ERR name message" for its first record. */
static int child_decode(const char *hex)
{
    uint8_t bytes[256];
    size_t len = hex_decode(hex, bytes, sizeof(bytes));
    cuc_msg *m;
    cuc_device *d;
    int rc;

    CHECK_OK(cuc_msg_from_bytes(bytes, len, &m));
    rc = cuc_msg_get_device(m, 0, &d);
    if (rc)
        printf("ERR %s %s\n", cuc_errname(rc), cuc_errmsg());
    else
        printf("OK %d %s\n", cuc_device_ordinal(d), cuc_device_uuid_string(d));
    cuc_msg_destroy(m);
    return 0;
}

static void pack(const cuc_device *d, char *hex)
{
    void *bytes;
    size_t len;
    cuc_msg *m;

    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_device(m, d));
    CHECK_OK(cuc_msg_to_bytes(m, &bytes, &len));
    hex_encode(bytes, len, hex);
    free(bytes);
    cuc_msg_destroy(m);
}

/* Physical index p (parent sees all GPUs in order) decoded under cvd:
 * want_ordinal is its position in the child's list, -1 if absent. */
static void expect(int p, const char *cvd, int want_ordinal)
{
    cuc_device *d;
    char hex[512], env[512], out[2048], want[256];
    const char *args[] = {hex, NULL};
    const char *envs[] = {env, NULL};

    CHECK_OK(cuc_device_get(p, &d));
    pack(d, hex);
    snprintf(env, sizeof(env), "CUDA_VISIBLE_DEVICES=%s", cvd);
    CHECK(spawn_self_capture("decode", args, envs, out, sizeof(out)) == 0);
    if (want_ordinal >= 0) {
        snprintf(want, sizeof(want), "OK %d %s\n", want_ordinal, cuc_device_uuid_string(d));
        if (strcmp(out, want) != 0) {
            fprintf(stderr, "CVD=%s device %d: got %s want %s", cvd, p, out, want);
            exit(1);
        }
    } else {
        CHECK(strncmp(out, "ERR CUC_E_NOT_VISIBLE ", 22) == 0);
        CHECK(strstr(out, cuc_device_uuid_string(d)) != NULL);
        if (cvd[0] == '\0')
            CHECK(strstr(out, "no device is visible") != NULL);
        else
            CHECK(strstr(out, "visible devices: 0=GPU-") != NULL);
    }
}

/* Every device under one visibility list given as physical indices. */
static void expect_list(const int *list, int len, int n, int by_uuid)
{
    char cvd[512];
    size_t off = 0;

    cvd[0] = '\0';
    for (int i = 0; i < len; i++) {
        cuc_device *d;
        CHECK_OK(cuc_device_get(list[i], &d));
        if (by_uuid)
            off += (size_t)snprintf(cvd + off, sizeof(cvd) - off, "%s%s", i ? "," : "",
                                    cuc_device_uuid_string(d));
        else
            off += (size_t)snprintf(cvd + off, sizeof(cvd) - off, "%s%d", i ? "," : "", list[i]);
    }
    for (int p = 0; p < n; p++) {
        int pos = -1;
        for (int i = 0; i < len; i++)
            if (list[i] == p)
                pos = i;
        expect(p, cvd, pos);
    }
}

static void permutations(int *a, int k, int n, int *count)
{
    if (k == n) {
        expect_list(a, n, n, 0);
        (*count)++;
        return;
    }
    for (int i = k; i < n; i++) {
        int t = a[k]; a[k] = a[i]; a[i] = t;
        permutations(a, k + 1, n, count);
        t = a[k]; a[k] = a[i]; a[i] = t;
    }
}

int main(int argc, char **argv)
{
    int n, count = 0, a[4] = {0, 1, 2, 3};

    if (argc >= 4 && !strcmp(argv[1], "--child"))
        return child_decode(argv[3]);
    CHECK_OK(cuc_device_count(&n));
    FD_BASELINE();
    if (getenv("CUDA_VISIBLE_DEVICES"))
        SKIP("the parent must see every GPU in physical order");
    if (n >= 4) {
        permutations(a, 0, 4, &count);
        CHECK(count == 24);
        expect_list((int[]){2}, 1, n, 0);
        expect_list((int[]){3, 1}, 2, n, 0);
        expect_list((int[]){0, 2}, 2, n, 1);
        expect_list((int[]){3, 2, 1, 0}, 4, n, 1);
    }
    expect_list((int[]){0}, 1, n, 0);
    expect_list((int[]){0}, 1, n, 1);
    expect(0, "", -1); /* none visible */
    FD_CHECK_NO_LEAK();
    return 0;
}
