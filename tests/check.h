/* Minimal test harness shared by every test file.
 *
 * CHECK(expr)         fails the test (exit 1) with file:line and expr.
 * CHECK_RC(call, rc)  calls, compares the cucore status, prints cuc_errmsg().
 * CHECK_ERRMSG(text)  cuc_errmsg() must contain text.
 * SKIP(why)           exits 77, which ctest reports as skipped.
 * FD_BASELINE()/FD_CHECK_NO_LEAK()  count /proc/self/fd before and after.
 * spawn_self()        fork + exec of this very test binary in a child role,
 *                     with an environment override (CUDA_VISIBLE_DEVICES...).
 */
#ifndef CUC_TEST_CHECK_H
#define CUC_TEST_CHECK_H

#include <dirent.h>
#include <fcntl.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static int check_failures_ __attribute__((unused));

#define CHECK(expr)                                                         \
    do {                                                                    \
        if (!(expr)) {                                                      \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__,          \
                    __LINE__, #expr);                                       \
            exit(1);                                                        \
        }                                                                   \
    } while (0)

/* Soft check: records the failure and goes on; test_finish() reports. */
#define EXPECT(expr)                                                        \
    do {                                                                    \
        if (!(expr)) {                                                      \
            fprintf(stderr, "%s:%d: EXPECT failed: %s\n", __FILE__,         \
                    __LINE__, #expr);                                       \
            check_failures_++;                                              \
        }                                                                   \
    } while (0)

#define CHECK_RC(call, want)                                                \
    do {                                                                    \
        int rc_ = (call);                                                   \
        if (rc_ != (want)) {                                                \
            fprintf(stderr, "%s:%d: %s returned %d (%s), wanted %d (%s): %s\n", \
                    __FILE__, __LINE__, #call, rc_, cuc_errname(rc_),       \
                    (int)(want), cuc_errname(want), cuc_errmsg());          \
            exit(1);                                                        \
        }                                                                   \
    } while (0)

#define CHECK_OK(call) CHECK_RC(call, 0)

/* The calling thread's cuc_errmsg() must contain text. */
#define CHECK_ERRMSG(text)                                                  \
    do {                                                                    \
        if (!strstr(cuc_errmsg(), (text))) {                                \
            fprintf(stderr, "%s:%d: message \"%s\" lacks \"%s\"\n", __FILE__, \
                    __LINE__, cuc_errmsg(), (text));                         \
            exit(1);                                                        \
        }                                                                   \
    } while (0)

#define SKIP(...)                                                           \
    do {                                                                    \
        fprintf(stderr, "SKIP: ");                                          \
        fprintf(stderr, __VA_ARGS__);                                       \
        fprintf(stderr, "\n");                                              \
        exit(77);                                                           \
    } while (0)

static inline int test_fd_count(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    struct dirent *e;

    if (!d)
        return -1;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n - 1; /* the DIR's own fd */
}

static int test_fd_baseline_ __attribute__((unused)) = -1;
#define FD_BASELINE() (test_fd_baseline_ = test_fd_count())
#define FD_CHECK_NO_LEAK()                                                  \
    do {                                                                    \
        int now_ = test_fd_count();                                         \
        if (now_ != test_fd_baseline_) {                                    \
            fprintf(stderr, "%s:%d: fd leak: %d open at start, %d now\n",   \
                    __FILE__, __LINE__, test_fd_baseline_, now_);           \
            exit(1);                                                        \
        }                                                                   \
    } while (0)

static inline int test_finish(void)
{
    if (check_failures_) {
        fprintf(stderr, "%d check(s) failed\n", check_failures_);
        return 1;
    }
    return 0;
}

/* Path of this executable, for re-exec in a child role. */
static inline const char *test_self_path(void)
{
    static char path[4096];
    ssize_t n;

    if (path[0])
        return path;
    n = readlink("/proc/self/exe", path, sizeof(path) - 1);
    if (n <= 0)
        return NULL;
    path[n] = '\0';
    return path;
}

/* In a child before exec: "NAME=value" sets, "NAME" alone unsets. */
static inline void test_apply_env(const char *const *env_set)
{
    for (; env_set && *env_set; env_set++) {
        const char *eq = strchr(*env_set, '=');
        if (eq) {
            char name[256];
            size_t len = (size_t)(eq - *env_set);
            if (len >= sizeof(name))
                _exit(126);
            memcpy(name, *env_set, len);
            name[len] = '\0';
            setenv(name, eq + 1, 1);
        } else {
            unsetenv(*env_set);
        }
    }
}

/* This binary, "--child", role and args (at most 28), NULL-terminated,
 * in argv (32 entries). */
static inline void child_argv(const char *role, const char *const *args, const char **argv)
{
    int argc = 0;

    argv[argc++] = test_self_path();
    argv[argc++] = "--child";
    argv[argc++] = role;
    for (; args && *args && argc < 31; args++)
        argv[argc++] = *args;
    argv[argc] = NULL;
}

/* Starts this binary again as `argv0 --child ROLE args...`, with env_set
 * ("NAME=value" strings, NULL-terminated; "NAME" alone unsets NAME) applied
 * on top of our environment. keep_fd, if >= 0, is left open in the child
 * (its number is passed as CUC_TEST_FD=<n>). Returns the pid. */
static inline pid_t spawn_self(const char *role, const char *const *args,
                               const char *const *env_set, int keep_fd)
{
    const char *argv[32];
    pid_t pid;

    child_argv(role, args, argv);

    pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        char fdbuf[32];
        test_apply_env(env_set);
        if (keep_fd >= 0) {
            int fl = 0;
            snprintf(fdbuf, sizeof(fdbuf), "%d", keep_fd);
            setenv("CUC_TEST_FD", fdbuf, 1);
            /* clear FD_CLOEXEC on the one fd the child inherits */
            fl = fcntl(keep_fd, F_GETFD);
            if (fl >= 0)
                fcntl(keep_fd, F_SETFD, fl & ~FD_CLOEXEC);
        }
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    return pid;
}

/* Waits for pid; returns its exit status, or 128+signal. */
static inline int wait_child(pid_t pid)
{
    int st = 0;

    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return -1;
    if (WIFEXITED(st))
        return WEXITSTATUS(st);
    if (WIFSIGNALED(st))
        return 128 + WTERMSIG(st);
    return -1;
}

/* fork + exec of argv[0] with env_set applied (as spawn_self), stdout
 * captured into out (NUL-terminated, truncated to outsz-1). Returns the
 * exit status as wait_child() does, or -1. */
static inline int run_capture(const char *const *argv, const char *const *env_set,
                              char *out, size_t outsz)
{
    int p[2];
    size_t len = 0;
    pid_t pid;

    if (pipe(p) < 0)
        return -1;
    pid = fork();
    if (pid < 0) {
        close(p[0]);
        close(p[1]);
        return -1;
    }
    if (pid == 0) {
        dup2(p[1], 1);
        close(p[0]);
        close(p[1]);
        test_apply_env(env_set);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(p[1]);
    for (;;) {
        ssize_t n;
        char tmp[4096];
        n = read(p[0], tmp, sizeof(tmp));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        if (len + 1 < outsz) {
            size_t take = (size_t)n;
            if (take > outsz - 1 - len)
                take = outsz - 1 - len;
            memcpy(out + len, tmp, take);
            len += take;
        }
    }
    close(p[0]);
    if (outsz)
        out[len] = '\0';
    return wait_child(pid);
}

/* Like run_capture, for this binary in a child role. */
static inline int spawn_self_capture(const char *role, const char *const *args,
                                     const char *const *env_set, char *out,
                                     size_t outsz)
{
    const char *argv[32];

    child_argv(role, args, argv);
    return run_capture(argv, env_set, out, outsz);
}

/* 1 when the suite runs against the simulator (CUCORE_DRIVER=sim). */
static inline int test_on_sim(void)
{
    const char *d = getenv("CUCORE_DRIVER");
    return d && strcmp(d, "sim") == 0;
}

#endif
