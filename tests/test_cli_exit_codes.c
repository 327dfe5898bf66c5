/* The `cucore` command's contract (cucore --help): exit 0 ok, 1 failure,
 * 2 usage error, for every subcommand; `cucore X --help` exits 0 and
 * prints X's usage; every usage error names the word at fault; every
 * --json output is one valid JSON value, on stdout (pack: on stderr, which
 * then holds nothing else), also when the command fails, then as
 * {"error":{"code":...,"message":...}}. The JSON check itself is checked
 * first, on values it must take and refuse. */
#include <sys/mman.h>

#include "cucore.h"
#include "check.h"
#include "json_check.h"
#include "ptx_kernels.h"
#include "wire/records.h"

#define OUT_MAX 65536

struct result {
    int status;
    char out[OUT_MAX], err[OUT_MAX];
};

static void read_memfd(int fd, char *buf)
{
    ssize_t n;

    CHECK(lseek(fd, 0, SEEK_SET) == 0);
    n = read(fd, buf, OUT_MAX - 1);
    CHECK(n >= 0);
    buf[n] = '\0';
    close(fd);
}

/* Runs cucore ARGS with env applied ("NAME=value", "NAME" unsets), stdin
 * from stdin_path (NULL: /dev/null), stdout (to out_path if given) and
 * stderr captured. */
static void run_to(struct result *r, const char *const *args, const char *const *env,
                   const char *stdin_path, const char *out_path)
{
    const char *argv[16] = {CUC_CLI_PATH};
    int ofd = out_path ? open(out_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)
                       : memfd_create("out", MFD_CLOEXEC);
    int efd = memfd_create("err", MFD_CLOEXEC), i;
    pid_t pid;

    CHECK(ofd >= 0 && efd >= 0);
    for (i = 0; args[i]; i++) {
        CHECK(i < 14);
        argv[i + 1] = args[i];
    }
    argv[i + 1] = NULL;
    pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        int in = open(stdin_path ? stdin_path : "/dev/null", O_RDONLY);
        if (in < 0 || dup2(in, 0) < 0 || dup2(ofd, 1) < 0 || dup2(efd, 2) < 0)
            _exit(126);
        test_apply_env(env);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    r->status = wait_child(pid);
    if (out_path) {
        close(ofd);
        r->out[0] = '\0';
    } else {
        read_memfd(ofd, r->out);
    }
    read_memfd(efd, r->err);
}

static void run(struct result *r, const char *const *args, const char *const *env)
{
    run_to(r, args, env, NULL, NULL);
}

static void say(const struct result *r, const char *const *args)
{
    fprintf(stderr, "cucore");
    for (int i = 0; args[i]; i++)
        fprintf(stderr, " %s", args[i]);
    fprintf(stderr, "\n  exit %d\n  stdout: %s\n  stderr: %s\n", r->status, r->out, r->err);
}

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})

/* ---- the JSON check ---- */

static void test_json_check(void)
{
    static const char *const good[] = {
        "{}", "[]", " {\"a\":[1,-2.5e+3,0,true,false,null,\"x\\u00e9\\n\"]}\n", "0",
        "\"caf\xc3\xa9\"", "{\"a\":{\"b\":[[]]}}", "-0.0E-7", NULL};
    static const char *const bad[] = {
        "", "{", "{}{}", "{} x", "[1,]", "{\"a\":1,}", "{a:1}", "01", "1.", ".5", "-",
        "NaN", "Infinity", "'x'", "\"tab\there\"", "\"\\x\"", "\"\\u12g4\"",
        "\"\xff\"", "\"\xc0\xaf\"", "\"\xed\xa0\x80\"", "note: x\n{}", "{\"a\" 1}",
        "tru", "[1 2]", NULL};

    for (int i = 0; good[i]; i++)
        if (!json_valid(good[i])) {
            fprintf(stderr, "json_valid refused good JSON: %s\n", good[i]);
            exit(1);
        }
    for (int i = 0; bad[i]; i++)
        if (json_valid(bad[i])) {
            fprintf(stderr, "json_valid took bad JSON: %s\n", bad[i]);
            exit(1);
        }
}

/* ---- --help and usage errors ---- */

static const char *const commands[] = {"devices", "pack", "inspect", "serve", "connect",
                                       "demo", NULL};

static void test_help(void)
{
    struct result r;
    char want[64];

    run(&r, ARGS("--help"), NULL);
    CHECK(r.status == 0);
    CHECK(strstr(r.out, "exit status, for every command:") != NULL);
    CHECK(strstr(r.out, "0  success") && strstr(r.out, "1  failure") &&
          strstr(r.out, "2  usage error"));
    CHECK(strstr(r.out, "CUDA 12.8") != NULL);
    for (int i = 0; commands[i]; i++) {
        snprintf(want, sizeof(want), "usage: cucore %s", commands[i]);
        for (int k = 0; k < 3; k++) {
            const char *flag = k == 0 ? "--help" : k == 1 ? "-h" : "--help";
            /* k == 2: --help after other words still asks for help */
            if (k == 2)
                run(&r, ARGS(commands[i], "0", flag), NULL);
            else
                run(&r, ARGS(commands[i], flag), NULL);
            if (r.status != 0 || strncmp(r.out, want, strlen(want)) != 0 || r.err[0]) {
                say(&r, ARGS(commands[i], flag));
                exit(1);
            }
        }
    }
}

static void usage_json(const char *const *args);

struct usage_case {
    const char *const *args;
    const char *word; /* the stderr must name it */
};

static void test_usage_errors(void)
{
    static const char *const no_args[] = {NULL};
    const struct usage_case cases[] = {
        {no_args, "missing the command"},
        {ARGS("bogus"), "\"bogus\""},
        {ARGS("devices", "--bogus"), "\"--bogus\""},
        {ARGS("devices", "bogus"), "\"bogus\""},
        {ARGS("demo", "--bogus"), "\"--bogus\""},
        {ARGS("demo", "bogus"), "\"bogus\""},
        {ARGS("pack"), "missing the object"},
        {ARGS("pack", "bogus"), "\"bogus\""},
        {ARGS("pack", "--bogus"), "\"--bogus\""},
        {ARGS("pack", "stream", "created", "0"), "\"created\""},
        {ARGS("pack", "stream", "sideways", "0"), "\"sideways\""},
        {ARGS("pack", "device"), "device needs N"},
        {ARGS("pack", "device", "abc"), "\"abc\""},
        {ARGS("pack", "device", "0", "1"), "\"1\""},
        {ARGS("pack", "device", "0", "--frob"), "\"--frob\""},
        {ARGS("pack", "device", "0", "--kind", "ptx"), "--kind applies to kernel"},
        {ARGS("pack", "device", "0", "--hold", "1"), "--hold applies to event"},
        {ARGS("pack", "event", "0", "--hold", "soon"), "\"soon\""},
        {ARGS("pack", "event", "0", "--hold"), "--hold needs a value"},
        {ARGS("pack", "launch-config", "8,x", "32"), "\"8,x\""},
        {ARGS("pack", "launch-config", "8", "1,2,3,4"), "\"1,2,3,4\""},
        {ARGS("pack", "launch-config", "8", "32", "lots"), "\"lots\""},
        {ARGS("pack", "kernel", "f.ptx", "k", "--kind", "elf"), "\"elf\""},
        {ARGS("inspect"), "missing FILE"},
        {ARGS("inspect", "a", "b"), "\"b\""},
        {ARGS("inspect", "-", "--frob"), "\"--frob\""},
        {ARGS("serve"), "missing PATH"},
        {ARGS("serve", "a", "b"), "\"b\""},
        {ARGS("serve", "--frob"), "\"--frob\""},
        {ARGS("connect"), "missing PATH"},
        {ARGS("connect", "P", "bogus"), "\"bogus\""},
        {ARGS("connect", "P", "device"), "device needs N"},
        {ARGS("connect", "P", "device", "x"), "\"x\""},
        {ARGS("connect", "P", "--fd"), "--fd needs FILE"},
        {ARGS("connect", "--frob"), "\"--frob\""},
    };
    struct result r;

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        run(&r, cases[i].args, NULL);
        if (r.status != 2 || !strstr(r.err, cases[i].word) || !strstr(r.err, "usage: cucore") ||
            r.out[0]) {
            fprintf(stderr, "wanted exit 2, stderr naming %s and the usage, empty stdout:\n",
                    cases[i].word);
            say(&r, cases[i].args);
            exit(1);
        }
        usage_json(cases[i].args);
    }
}

/* ---- --json ---- */

enum stream { ON_STDOUT, ON_STDERR };

/* The JSON output of r is one valid value: the error object with code when
 * code is given, no error object when the exit status is 0. */
static const char *json_of(const struct result *r, enum stream s, const char *const *args,
                           int want_status, const char *code)
{
    const char *j = s == ON_STDOUT ? r->out : r->err;
    char want[128];

    snprintf(want, sizeof(want), "{\"error\":{\"code\":\"%s\",\"message\":\"", code ? code : "");
    if (r->status != want_status || !json_valid(j) ||
        (code && strncmp(j, want, strlen(want)) != 0) ||
        (want_status == 0 && strstr(j, "{\"error\":")) ||
        (s == ON_STDERR && want_status != 0 && r->out[0])) {
        fprintf(stderr, "wanted exit %d and one valid JSON value on %s%s%s:\n", want_status,
                s == ON_STDOUT ? "stdout" : "stderr", code ? " with code " : "",
                code ? code : "");
        say(r, args);
        exit(1);
    }
    return j;
}

static void want_in(const char *text, const char *s)
{
    if (!strstr(text, s)) {
        fprintf(stderr, "JSON lacks %s:\n%s\n", s, text);
        exit(1);
    }
}

/* args with --json appended (where the command takes a word after --fd,
 * --json would be that word: such cases are not usage errors then) is a
 * usage error in JSON: {"error":{"code":"usage",...}} on stdout (pack:
 * on stderr, then nothing else there), whatever the command, one without
 * --json or an unknown one too; stderr still has the usage. */
static void usage_json(const char *const *args)
{
    const char *a[16];
    struct result r;
    int i, n = 0, on_stderr;

    for (i = 0; args[i]; i++)
        if (!strcmp(args[i], "--fd"))
            return;
    for (i = 0; args[i]; i++)
        a[n++] = args[i];
    a[n++] = "--json";
    a[n] = NULL;
    on_stderr = n > 1 && !strcmp(a[0], "pack");
    run(&r, a, NULL);
    json_of(&r, on_stderr ? ON_STDERR : ON_STDOUT, a, 2, "usage");
    if (!on_stderr && !strstr(r.err, "usage: cucore")) {
        fprintf(stderr, "wanted the usage on stderr too:\n");
        say(&r, a);
        exit(1);
    }
}

/* The words at fault, in the JSON message too. */
static void test_usage_json_words(void)
{
    struct result r;

    run(&r, ARGS("frobnicate", "--json"), NULL);
    want_in(json_of(&r, ON_STDOUT, ARGS("frobnicate", "--json"), 2, "usage"),
            "unknown command \\\"frobnicate\\\"");
    run(&r, ARGS("--json", "frobnicate"), NULL);
    want_in(json_of(&r, ON_STDOUT, ARGS("--json", "frobnicate"), 2, "usage"),
            "\\\"--json\\\" is not a command");
    run(&r, ARGS("frobnicate"), NULL); /* no --json: no JSON */
    CHECK(r.status == 2 && r.out[0] == '\0' && strstr(r.err, "unknown command"));
    run(&r, ARGS("serve", "--json"), NULL);
    want_in(json_of(&r, ON_STDOUT, ARGS("serve", "--json"), 2, "usage"),
            "unknown option \\\"--json\\\"");
    run(&r, ARGS("demo", "bogus", "--json"), NULL);
    want_in(json_of(&r, ON_STDOUT, ARGS("demo", "bogus", "--json"), 2, "usage"), "bogus");
    run(&r, ARGS("inspect", "--frob", "--json"), NULL);
    want_in(json_of(&r, ON_STDOUT, ARGS("inspect", "--frob", "--json"), 2, "usage"),
            "unknown option \\\"--frob\\\"");
    run(&r, ARGS("devices", "--json", "--help"), NULL); /* help wins: exit 0, no JSON */
    CHECK(r.status == 0 && !strncmp(r.out, "usage: cucore devices", 21));
}

/* A message holding a device, a buffer of an IPC pool and a release, in
 * path: records inspect resolves and records it does not. */
static void write_buffer_msg(const char *path)
{
    struct cuc_pool_props props = {CUC_POOL_DEVICE, CUC_POOL_IPC, 0};
    static const uint8_t lease[8] = {1};
    cuc_buffer *b;
    cuc_device *d;
    cuc_pool *p;
    cuc_msg *m;
    void *bytes;
    size_t len;
    FILE *f;

    CHECK_OK(cuc_device_get(0, &d));
    CHECK_OK(cuc_pool_create(d, &props, &p));
    CHECK_OK(cuc_buffer_alloc_async(p, 4096, NULL, &b));
    CHECK_OK(cuc_msg_create(&m));
    CHECK_OK(cuc_msg_add_device(m, d));
    CHECK_OK(cuc_msg_add_buffer(m, b));
    CHECK_OK(cuc__msg_add_record(m, CUC_RECORD_RELEASE, CUC_RECORD_RELEASE_VERSION, lease,
                                 sizeof(lease), NULL, 0));
    CHECK_OK(cuc_msg_to_bytes(m, &bytes, &len));
    f = fopen(path, "wb");
    CHECK(f && fwrite(bytes, 1, len, f) == len && fclose(f) == 0);
    free(bytes);
    cuc_msg_destroy(m);
    CHECK_OK(cuc_buffer_unref_async(b, NULL));
    cuc_pool_unref(p);
}

static void test_json(const char *dir)
{
    char dev[256], krn[256], ptx[256], garbage[256], bufmsg[256];
    const char *one[] = {"CUDA_VISIBLE_DEVICES=1", NULL};
    struct result r;
    const char *j;
    FILE *f;

    snprintf(dev, sizeof(dev), "%s/device.msg", dir);
    snprintf(krn, sizeof(krn), "%s/kernel.msg", dir);
    snprintf(ptx, sizeof(ptx), "%s/twice.ptx", dir);
    snprintf(garbage, sizeof(garbage), "%s/garbage", dir);
    snprintf(bufmsg, sizeof(bufmsg), "%s/buffer.msg", dir);
    f = fopen(ptx, "w");
    CHECK(f && fputs(ptx_twice, f) >= 0 && fclose(f) == 0);
    f = fopen(garbage, "w");
    CHECK(f && fputs("garbage\n", f) >= 0 && fclose(f) == 0);

    /* devices */
    run(&r, ARGS("devices", "--json"), NULL);
    want_in(json_of(&r, ON_STDOUT, ARGS("devices", "--json"), 0, NULL), "\"devices\":[");
    run(&r, ARGS("devices", "--json"), ARGS("CUDA_VISIBLE_DEVICES="));
    json_of(&r, ON_STDOUT, ARGS("devices", "--json"), 1, "CUC_E_NO_DEVICE");
    CHECK(strstr(r.err, "cucore: no device visible") != NULL); /* the text too */
    run(&r, ARGS("devices", "--json"), ARGS("CUCORE_SIM_GPUS=abc"));
    want_in(json_of(&r, ON_STDOUT, ARGS("devices", "--json"), 1, "CUC_E_DRIVER"),
            "CUCORE_SIM_GPUS=\\\"abc\\\" is not a number of GPUs");
    run(&r, ARGS("devices", "--json", "--bogus"), NULL);
    want_in(json_of(&r, ON_STDOUT, ARGS("devices", "--json", "--bogus"), 2, "usage"),
            "--bogus");

    /* pack: the JSON on stderr, the message on stdout */
    run_to(&r, ARGS("pack", "device", "0", "--json"), NULL, NULL, dev);
    want_in(json_of(&r, ON_STDERR, ARGS("pack", "device", "0", "--json"), 0, NULL),
            "\"packed\":\"device\"");
    run(&r, ARGS("pack", "event", "0", "--json"), NULL);
    want_in(json_of(&r, ON_STDERR, ARGS("pack", "event", "0", "--json"), 0, NULL),
            "\"note\":\"an IPC event is valid only while");
    run(&r, ARGS("pack", "stream", "legacy", "0", "--json"), NULL);
    json_of(&r, ON_STDERR, ARGS("pack", "stream", "legacy", "0", "--json"), 0, NULL);
    run(&r, ARGS("pack", "launch-config", "8,4", "32", "--json"), NULL);
    json_of(&r, ON_STDERR, ARGS("pack", "launch-config", "8,4", "32", "--json"), 0, NULL);
    run_to(&r, ARGS("pack", "kernel", ptx, "twice", "--json"), NULL, NULL, krn);
    want_in(json_of(&r, ON_STDERR, ARGS("pack", "kernel", ptx, "twice", "--json"), 0, NULL),
            "\"kind\":\"ptx\"");
    run(&r, ARGS("pack", "device", "99", "--json"), NULL);
    want_in(json_of(&r, ON_STDERR, ARGS("pack", "device", "99", "--json"), 1, "CUC_E_INVALID"),
            "out of range");
    run(&r, ARGS("pack", "kernel", ptx, "nope", "--json"), NULL);
    json_of(&r, ON_STDERR, ARGS("pack", "kernel", ptx, "nope", "--json"), 1, "CUC_E_NOT_FOUND");
    run(&r, ARGS("pack", "kernel", "/nonexistent.ptx", "k", "--json"), NULL);
    json_of(&r, ON_STDERR, ARGS("pack", "kernel", "/nonexistent.ptx", "k", "--json"), 1,
            "CUC_E_IO");
    run(&r, ARGS("pack", "bogus", "--json"), NULL);
    want_in(json_of(&r, ON_STDERR, ARGS("pack", "bogus", "--json"), 2, "usage"), "bogus");

    /* inspect */
    run(&r, ARGS("inspect", dev, "--json"), NULL);
    want_in(json_of(&r, ON_STDOUT, ARGS("inspect", dev, "--json"), 0, NULL),
            "\"resolved\":true");
    run(&r, ARGS("inspect", dev, "--json"), one);
    j = json_of(&r, ON_STDOUT, ARGS("inspect", dev, "--json"), 1, NULL);
    want_in(j, "\"resolved\":false,\"error\":\"CUC_E_NOT_VISIBLE\"");
    want_in(j, "\"failed\":1}");
    run(&r, ARGS("inspect", dev), one); /* not visible: exit 1 in text too */
    CHECK(r.status == 1 && strstr(r.out, "CUC_E_NOT_VISIBLE") &&
          strstr(r.err, "1 of 1 record of"));
    run(&r, ARGS("inspect", krn, "--json"), NULL); /* the kind as pack spells it */
    want_in(json_of(&r, ON_STDOUT, ARGS("inspect", krn, "--json"), 0, NULL),
            "\"kind\":\"ptx\"");
    run(&r, ARGS("inspect", "/tmp", "--json"), NULL);
    want_in(json_of(&r, ON_STDOUT, ARGS("inspect", "/tmp", "--json"), 1, "CUC_E_IO"),
            "reading /tmp failed: Is a directory");
    run(&r, ARGS("inspect", "/tmp"), NULL);
    CHECK(r.status == 1 && strstr(r.err, "reading /tmp failed: Is a directory"));
    run(&r, ARGS("inspect", "/nonexistent", "--json"), NULL);
    json_of(&r, ON_STDOUT, ARGS("inspect", "/nonexistent", "--json"), 1, "CUC_E_IO");
    run(&r, ARGS("inspect", garbage, "--json"), NULL);
    json_of(&r, ON_STDOUT, ARGS("inspect", garbage, "--json"), 1, "CUC_E_BADMSG");
    run(&r, ARGS("inspect", "--json"), NULL);
    json_of(&r, ON_STDOUT, ARGS("inspect", "--json"), 2, "usage");
    run_to(&r, ARGS("inspect", "-", "--json"), NULL, dev, NULL);
    json_of(&r, ON_STDOUT, ARGS("inspect", "-", "--json"), 0, NULL);

    /* Records inspect does not resolve: not resolved, with why, not a
     * failure; the device beside them resolves. */
    write_buffer_msg(bufmsg);
    run(&r, ARGS("inspect", bufmsg, "--json"), NULL);
    j = json_of(&r, ON_STDOUT, ARGS("inspect", bufmsg, "--json"), 0, NULL);
    want_in(j, "\"type\":\"device\"");
    want_in(j, "\"type\":\"buffer\",\"payload_bytes\":104,\"fds\":0,\"pool_id\":");
    want_in(j, "\"resolved\":false,\"why\":\"inspect does not import buffers");
    want_in(j, "\"type\":\"release\",\"payload_bytes\":8,\"fds\":0,\"lease_ids\":[1],"
               "\"resolved\":false,\"why\":\"a release ends leases");
    want_in(j, "\"failed\":0}");
    CHECK(strstr(j, "\"resolved\":true") != NULL); /* the device, first */
    CHECK(strstr(strstr(j, "\"type\":\"buffer\""), "\"resolved\":true") == NULL);
    run(&r, ARGS("inspect", bufmsg), NULL);
    CHECK(r.status == 0 && strstr(r.out, "-> not resolved: inspect does not import buffers"));

    unlink(dev);
    unlink(krn);
    unlink(ptx);
    unlink(garbage);
    unlink(bufmsg);
}

int main(void)
{
    char dir[] = "/tmp/cuc_cli_exit_XXXXXX";

    FD_BASELINE();
    test_json_check();
    test_help();
    test_usage_errors();
    test_usage_json_words();
    /* The failure cases need the simulator's settings and its 4 GPUs. */
    if (test_on_sim()) {
        CHECK(mkdtemp(dir) != NULL);
        test_json(dir);
        CHECK(rmdir(dir) == 0);
    } else {
        fprintf(stderr, "note: --json cases not run: they need the simulator\n");
    }
    FD_CHECK_NO_LEAK();
    return test_finish();
}
