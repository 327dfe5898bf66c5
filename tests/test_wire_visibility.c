/* A device sent as bytes resolves, in a process with other visibility, to
 * the same physical GPU (by UUID) at that process's ordinal for it, or fails
 * with CUC_E_NOT_VISIBLE naming the UUID.
 *
 * The parent serializes each device it sees; children decode under every
 * permutation of CUDA_VISIBLE_DEVICES over the physical GPUs, subsets,
 * UUID forms and an empty list. On one real GPU that is: the GPU by index,
 * by UUID, by UUID prefix, and none visible. */
#include <strings.h>

#include "check.h"
#include "cucore.h"
#include "device/device.h"
#include "wire/records.h"

#define MAXG 8

static int nphys;
static char phys[MAXG][CUC_UUID_STRLEN]; /* physical order (CVD unset) */
static int nsent;
static char sent_hex[MAXG][512];
static int sent_phys[MAXG];      /* physical index of each sent device */
static int children;

static void to_hex(const uint8_t *b, size_t n, char *out)
{
    static const char hx[] = "0123456789abcdef";
    size_t i;

    for (i = 0; i < n; i++) {
        out[2 * i] = hx[b[i] >> 4];
        out[2 * i + 1] = hx[b[i] & 15];
    }
    out[2 * n] = '\0';
}

static int from_hex(const char *s, uint8_t *out, size_t cap, size_t *n)
{
    size_t len = strlen(s), i;

    if (len % 2 || len / 2 > cap)
        return -1;
    for (i = 0; i < len / 2; i++) {
        unsigned v;
        if (sscanf(s + 2 * i, "%2x", &v) != 1)
            return -1;
        out[i] = (uint8_t)v;
    }
    *n = len / 2;
    return 0;
}

/* Child: prints one line per device listed (role "list"), or per hex
 * message decoded (role "decode"). */
static int child_main(const char *role, int argc, char **argv)
{
    int i, n;

    if (!strcmp(role, "list")) {
        cuc_device *d;
        if (cuc_device_count(&n))
            return 3;
        for (i = 0; i < n; i++) {
            if (cuc_device_get(i, &d))
                return 3;
            printf("%s\n", cuc_device_uuid_string(d));
        }
        return 0;
    }
    for (i = 0; i < argc; i++) {
        uint8_t b[256];
        cuc_device *d, *again;
        cuc_msg *m;
        size_t len;
        int rc;

        if (from_hex(argv[i], b, sizeof(b), &len))
            return 4;
        rc = cuc_msg_from_bytes(b, len, &m);
        if (rc) {
            printf("err %s %s\n", cuc_errname(rc), cuc_errmsg());
            continue;
        }
        rc = cuc_msg_get_device(m, 0, &d);
        if (rc == 0) {
            if (cuc_device_get(cuc_device_ordinal(d), &again) || again != d)
                return 5;
            printf("ok %d %s\n", cuc_device_ordinal(d), cuc_device_uuid_string(d));
        } else {
            printf("err %s %s\n", cuc_errname(rc), cuc_errmsg());
        }
        cuc_msg_destroy(m);
    }
    return 0;
}

static void list_physical(void)
{
    const char *env[] = {"CUDA_VISIBLE_DEVICES", NULL};
    char out[4096], *line, *save = NULL;

    CHECK(spawn_self_capture("list", NULL, env, out, sizeof(out)) == 0);
    children++;
    for (line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        CHECK(nphys < MAXG && strlen(line) == CUC_UUID_STRLEN - 1);
        strcpy(phys[nphys++], line);
    }
    CHECK(nphys > 0);
}

static void serialize_mine(void)
{
    cuc_device *d;
    uint8_t *b;
    size_t len;
    int n, i, k;

    CHECK_OK(cuc_device_count(&n));
    for (i = 0; i < n && i < MAXG; i++) {
        cuc_msg *m;
        CHECK_OK(cuc_device_get(i, &d));
        CHECK_OK(cuc_msg_create(&m));
        CHECK_OK(cuc_msg_add_device(m, d));
        CHECK_OK(cuc_msg_to_bytes(m, (void **)&b, &len));
        CHECK(len * 2 < sizeof(sent_hex[0]));
        to_hex(b, len, sent_hex[nsent]);
        free(b);
        cuc_msg_destroy(m);
        sent_phys[nsent] = -1;
        for (k = 0; k < nphys; k++)
            if (!strcmp(phys[k], cuc_device_uuid_string(d)))
                sent_phys[nsent] = k;
        CHECK(sent_phys[nsent] >= 0); /* what I see is among the physical GPUs */
        nsent++;
    }
}

/* Shortest "GPU-" prefix of phys[k] that no other GPU shares (at least 8
 * hex digits, to look like what people type). */
static void unique_prefix(int k, char *out)
{
    size_t len;

    for (len = 12; len < CUC_UUID_STRLEN - 1; len++) {
        int j, clash = 0;
        for (j = 0; j < nphys; j++)
            if (j != k && !strncasecmp(phys[j], phys[k], len))
                clash = 1;
        if (!clash)
            break;
    }
    memcpy(out, phys[k], len);
    out[len] = '\0';
}

/* Runs a child with CUDA_VISIBLE_DEVICES=cvd, under which the child sees
 * physical GPUs vis[0..nvis) in that order, and checks every sent device. */
static void run_case(const char *cvd, const int *vis, int nvis)
{
    char envbuf[1024], out[16384], *line, *save = NULL;
    const char *env[] = {envbuf, NULL};
    const char *args[MAXG + 1];
    int i, rc;

    snprintf(envbuf, sizeof(envbuf), "CUDA_VISIBLE_DEVICES=%s", cvd);
    for (i = 0; i < nsent; i++)
        args[i] = sent_hex[i];
    args[nsent] = NULL;
    rc = spawn_self_capture("decode", args, env, out, sizeof(out));
    children++;
    if (rc != 0) {
        fprintf(stderr, "child with CUDA_VISIBLE_DEVICES=\"%s\" exited %d\n", cvd, rc);
        exit(1);
    }
    line = strtok_r(out, "\n", &save);
    for (i = 0; i < nsent; i++, line = strtok_r(NULL, "\n", &save)) {
        int want = -1, j, ord;
        char uuid[64];

        CHECK(line != NULL);
        for (j = 0; j < nvis; j++)
            if (vis[j] == sent_phys[i])
                want = j;
        if (want >= 0) {
            if (sscanf(line, "ok %d %63s", &ord, uuid) != 2 || ord != want ||
                strcmp(uuid, phys[sent_phys[i]]) != 0) {
                fprintf(stderr, "CUDA_VISIBLE_DEVICES=\"%s\": device %s should be "
                        "ordinal %d there, child said: %s\n", cvd,
                        phys[sent_phys[i]], want, line);
                exit(1);
            }
            continue;
        }
        if (strncmp(line, "err CUC_E_NOT_VISIBLE ", 22) != 0 ||
            !strstr(line, phys[sent_phys[i]])) {
            fprintf(stderr, "CUDA_VISIBLE_DEVICES=\"%s\": device %s is not visible "
                    "there, child said: %s\n", cvd, phys[sent_phys[i]], line);
            exit(1);
        }
        if (nvis == 0) {
            CHECK(strstr(line, "no device is visible") != NULL);
        } else {
            /* the message lists what the child sees, as ordinal=UUID */
            for (j = 0; j < nvis; j++) {
                char item[64];
                snprintf(item, sizeof(item), "%d=%s", j, phys[vis[j]]);
                CHECK(strstr(line, item) != NULL);
            }
        }
    }
}

static void run_indexes(const int *vis, int nvis)
{
    char cvd[256];
    size_t len = 0;
    int i;

    cvd[0] = '\0';
    for (i = 0; i < nvis; i++)
        len += (size_t)snprintf(cvd + len, sizeof(cvd) - len, "%s%d", i ? "," : "", vis[i]);
    run_case(cvd, vis, nvis);
}

/* Heap's algorithm over physical indexes. */
static void permutations(int *a, int k, int n)
{
    int i, t;

    if (k == 1) {
        run_indexes(a, n);
        return;
    }
    for (i = 0; i < k; i++) {
        permutations(a, k - 1, n);
        t = a[k % 2 ? 0 : i];
        a[k % 2 ? 0 : i] = a[k - 1];
        a[k - 1] = t;
    }
}

static void uuid_forms(void)
{
    char cvd[512], pre[64];
    int vis[2];

    /* the full UUID of the last GPU */
    vis[0] = nphys - 1;
    snprintf(cvd, sizeof(cvd), "%s", phys[nphys - 1]);
    run_case(cvd, vis, 1);
    /* a prefix of the first */
    vis[0] = 0;
    unique_prefix(0, pre);
    run_case(pre, vis, 1);
    if (nphys >= 2) {
        /* two UUIDs, reversed (the driver takes a list of one kind: indexes
         * or UUIDs) */
        vis[0] = 1;
        vis[1] = 0;
        snprintf(cvd, sizeof(cvd), "%s,%s", phys[1], phys[0]);
        run_case(cvd, vis, 2);
        /* a prefix, then a full UUID */
        unique_prefix(nphys - 1, pre);
        vis[0] = nphys - 1;
        vis[1] = 0;
        snprintf(cvd, sizeof(cvd), "%s,%s", pre, phys[0]);
        run_case(cvd, vis, 2);
    }
}

static void subsets(void)
{
    int vis[MAXG];

    for (int k = 0; k < nphys; k++) { /* each GPU alone */
        vis[0] = k;
        run_indexes(vis, 1);
    }
    if (nphys >= 2) {
        vis[0] = nphys - 1;
        vis[1] = 1 % nphys;
        if (vis[0] != vis[1])
            run_indexes(vis, 2); /* "3,1" on four */
    }
    if (nphys >= 3) {
        vis[0] = 0;
        vis[1] = 2;
        run_indexes(vis, 2); /* "0,2" */
        vis[0] = 1;
        vis[1] = nphys - 1;
        vis[2] = 0;
        run_indexes(vis, 3);
    }
}

int main(int argc, char **argv)
{
    int a[MAXG], i, n;

    if (argc >= 3 && !strcmp(argv[1], "--child"))
        return child_main(argv[2], argc - 3, argv + 3);
    if (cuc_device_count(&n))
        SKIP("no device visible: %s", cuc_errmsg());
    FD_BASELINE();
    list_physical();
    serialize_mine();
    if (test_on_sim())
        CHECK(nphys == 4); /* ctest runs this with CUCORE_SIM_GPUS=4 */
    if (nphys <= 4) {
        for (i = 0; i < nphys; i++)
            a[i] = i;
        permutations(a, nphys, nphys);
    }
    subsets();
    uuid_forms();
    run_case("", NULL, 0);
    fprintf(stderr, "%d physical GPUs, %d devices sent, %d children\n", nphys, nsent,
            children);
    FD_CHECK_NO_LEAK();
    return test_finish();
}
