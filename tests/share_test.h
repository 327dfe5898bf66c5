/* Helpers of the share point tests (test_share*.c): bytes through pipes
 * (u64-length blobs), a private socket directory for the run, a child of
 * this binary with reversed CUDA_VISIBLE_DEVICES on pipes, a line it
 * must print. */
#ifndef CUC_TEST_SHARE_H
#define CUC_TEST_SHARE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cucore.h"
#include "base/compiler.h"
#include "check.h"
#include "devices_test.h"
#include "pool_test.h"


static inline void write_all(int fd, const void *p, size_t n)
{
    const uint8_t *b = p;

    while (n) {
        ssize_t k = write(fd, b, n);
        CHECK(k > 0);
        b += k;
        n -= (size_t)k;
    }
}

static inline int read_all(int fd, void *p, size_t n)
{
    uint8_t *b = p;

    while (n) {
        ssize_t k = read(fd, b, n);
        if (k <= 0)
            return -1;
        b += k;
        n -= (size_t)k;
    }
    return 0;
}

/* A blob: u64 length then the bytes. */
static inline void put_blob(int fd, const void *p, size_t n)
{
    uint64_t len = n;

    write_all(fd, &len, sizeof(len));
    write_all(fd, p, n);
}

static inline void *get_blob(int fd, size_t *n)
{
    uint64_t len;
    void *p;

    if (read_all(fd, &len, sizeof(len)) != 0)
        return NULL;
    CHECK(len < ((uint64_t)1 << 30));
    p = malloc(len ? len : 1);
    CHECK(p != NULL);
    CHECK(read_all(fd, p, len) == 0);
    *n = len;
    return p;
}

/* A fresh socket directory for this run: every process of it shares there. */
static inline void private_share_dir(void)
{
    static char dir[] = "/tmp/cucore-test-share-XXXXXX";

    CHECK(mkdtemp(dir) != NULL);
    CHECK(chmod(dir, 0700) == 0);
    setenv("CUCORE_SHARE_DIR", dir, 1);
}

/* CUDA_VISIBLE_DEVICES=... for the next start_child instead of the reversed
 * one, when set. */
static const char *share_test_cvd;

/* This binary as a child of role (args: the parent's device 0 UUID,
 * phase, mode) whose CUDA_VISIBLE_DEVICES reverses ours, run under the
 * command prefix (NULL-terminated, e.g. unshare ...; NULL: none); *to its
 * stdin, *from its stdout. */
static inline pid_t start_child(const char *const *prefix, const char *role, int phase,
                                int mode, int *to, FILE **from)
{
    char cvd[256], ph[16], md[16];
    const char *env[] = {cvd, NULL};
    const char *args[] = {cuc_device_uuid_string(devs[0]), ph, md, NULL};
    int in[2], out[2];
    pid_t pid;

    if (share_test_cvd)
        snprintf(cvd, sizeof(cvd), "%s", share_test_cvd);
    else
        pt_child_cvd(cvd, sizeof(cvd));
    snprintf(ph, sizeof(ph), "%d", phase);
    snprintf(md, sizeof(md), "%d", mode);
    CHECK(pipe2(in, O_CLOEXEC) == 0 && pipe2(out, O_CLOEXEC) == 0);
    pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        const char *argv[32], *all[40];
        size_t n = 0;
        dup2(in[0], 0);
        dup2(out[1], 1);
        close(in[0]);
        close(in[1]);
        close(out[0]);
        close(out[1]);
        test_apply_env(env);
        child_argv(role, args, argv);
        for (; prefix && prefix[n] && n < 8; n++)
            all[n] = prefix[n];
        for (size_t k = 0; argv[k] && n + 1 < CUC_ARRAY_LEN(all); k++)
            all[n++] = argv[k];
        all[n] = NULL;
        execvp(all[0], (char *const *)all);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    *to = in[1];
    *from = fdopen(out[0], "r");
    CHECK(*from != NULL);
    return pid;
}

static inline void expect_line(FILE *f, const char *want)
{
    char line[256] = {0};

    CHECK(fgets(line, sizeof(line), f) != NULL);
    if (strncmp(line, want, strlen(want)) != 0) {
        fprintf(stderr, "child said \"%s\", want \"%s\"\n", line, want);
        exit(1);
    }
}

#endif
