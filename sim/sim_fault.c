/* Fault injection and call counting: CUCORE_SIM_FAIL, CUCORE_SIM_TRACE and
 * the cucore_sim_* controls (cucore_sim.h). The syntax and which calls
 * count are in sim/README.md ("Fault injection").
 *
 * Each hooked call adds one to its name's count and, unless it is
 * cuGetErrorName / cuGetErrorString, to the count of all calls: the
 * ordinal "*:K" matches. Counts are atomics, so a call that is the K-th
 * is so for exactly one thread; with no spec and no trace that is all a
 * call pays. Specs change only through cucore_sim_fail, under fault_mu.
 * A forked child starts its counts again from 0 (an exec'd one does
 * anyway: the counts live in the process). The hook is also where a
 * forked child of an initialised process is refused every driver call, as
 * the real driver refuses it (FACTS.md F6). */
#include "sim_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cucore_sim.h"

#define SIM_FAULT_MAX_SPECS 64
#define SIM_FAULT_ANY (-1)
/* What an injected failure returns unless the spec names an error. */
#define SIM_FAULT_DEFAULT_ERROR CUDA_ERROR_UNKNOWN

struct fault_spec {
    int fn;           /* enum sim_fn, or SIM_FAULT_ANY for "*" */
    uint64_t k;       /* 1-based ordinal */
    int persistent;   /* "K+": the K-th call and every later one */
    CUresult err;
};

static const char *const entry_names[SIM_FN_COUNT] = {
#define SIM_FN_NAME_(n) #n,
    SIM_ENTRY_NAMES(SIM_FN_NAME_)
#undef SIM_FN_NAME_
};

static pthread_once_t env_once = PTHREAD_ONCE_INIT;
static char env_error[512];    /* written once, in env_setup */
static int env_bad;
static char trace_path[PATH_MAX];
static int trace_on;           /* set once, in env_setup */

static pthread_mutex_t fault_mu = PTHREAD_MUTEX_INITIALIZER;
static struct fault_spec specs[SIM_FAULT_MAX_SPECS]; /* under fault_mu */
static int nspecs;                                   /* under fault_mu */
static int active;          /* atomic: specs or a trace to look at */

/* Set in a forked child of a process that had initialised the driver,
 * where every call fails (FACTS.md F6) with CUDA_ERROR_NOT_INITIALIZED. */
static int forked_after_init;

static uint64_t count_all;               /* atomic */
static uint64_t count_fn[SIM_FN_COUNT];  /* atomic */
static uint64_t count_faults;            /* atomic */

/* Not counted with the others: they run on error paths only, to name an
 * error, so counting them would make the ordinals depend on which call
 * failed. They can still be failed by name. */
static int counted(enum sim_fn fn)
{
    return fn != SIM_FN_cuGetErrorName && fn != SIM_FN_cuGetErrorString;
}

static int fn_by_name(const char *s, size_t len)
{
    for (int i = 0; i < SIM_FN_COUNT; i++)
        if (strlen(entry_names[i]) == len && memcmp(entry_names[i], s, len) == 0)
            return i;
    return -2;
}

static void say(char *why, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void say(char *why, size_t cap, const char *fmt, ...)
{
    va_list ap;

    if (!why || cap == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(why, cap, fmt, ap);
    va_end(ap);
}

static void trim(const char **s, size_t *len)
{
    while (*len && (**s == ' ' || **s == '\t')) {
        (*s)++;
        (*len)--;
    }
    while (*len && ((*s)[*len - 1] == ' ' || (*s)[*len - 1] == '\t'))
        (*len)--;
}

/* Decimal, no sign, fits in 63 bits. */
static int parse_u63(const char *s, size_t len, uint64_t *out)
{
    uint64_t v = 0;

    if (len == 0 || len > 19)
        return -1;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    if (v > (uint64_t)INT64_MAX)
        return -1;
    *out = v;
    return 0;
}

/* One item: NAME:K[+][:ERROR]. */
static int parse_item(const char *s, size_t len, struct fault_spec *sp,
                      char *why, size_t cap)
{
    const char *c1 = memchr(s, ':', len), *c2, *ks, *es = NULL;
    size_t nlen, klen, elen = 0;
    uint64_t v;

    if (!c1) {
        say(why, cap, "'%.*s' lacks ':K' (the ordinal of the call to fail)",
            (int)len, s);
        return -1;
    }
    nlen = (size_t)(c1 - s);
    ks = c1 + 1;
    c2 = memchr(ks, ':', len - nlen - 1);
    klen = c2 ? (size_t)(c2 - ks) : len - nlen - 1;
    if (c2) {
        es = c2 + 1;
        elen = len - (size_t)(es - s);
    }
    trim(&s, &nlen);
    trim(&ks, &klen);
    if (nlen == 1 && s[0] == '*') {
        sp->fn = SIM_FAULT_ANY;
    } else {
        sp->fn = fn_by_name(s, nlen);
        if (sp->fn < 0) {
            say(why, cap, "'%.*s' is not an entry point the simulator has "
                "(use the base name, as cuGetProcAddress: cuMemAlloc, not "
                "cuMemAlloc_v2)", (int)nlen, s);
            return -1;
        }
    }
    sp->persistent = klen && ks[klen - 1] == '+';
    if (sp->persistent)
        klen--;
    if (parse_u63(ks, klen, &sp->k) != 0 || sp->k == 0) {
        say(why, cap, "'%.*s' in '%.*s' is not an ordinal (1, 2, ..., "
            "optionally followed by '+')", (int)klen + sp->persistent, ks,
            (int)len, s);
        return -1;
    }
    sp->err = SIM_FAULT_DEFAULT_ERROR;
    if (!es)
        return 0;
    trim(&es, &elen);
    if (parse_u63(es, elen, &v) == 0) {
        if (v == 0 || v > INT_MAX) {
            say(why, cap, "error %.*s cannot be injected (0 is "
                "CUDA_SUCCESS)", (int)elen, es);
            return -1;
        }
        sp->err = (CUresult)v;
        return 0;
    }
    if (!sim_error_by_name(es, elen, &sp->err) || sp->err == CUDA_SUCCESS) {
        say(why, cap, "'%.*s' is not a CUDA error name (CUDA_ERROR_..., or "
            "its number)", (int)elen, es);
        return -1;
    }
    return 0;
}

/* The comma-separated list; "" (or only blanks) is no spec. */
static int parse_specs(const char *s, struct fault_spec *out, int *n,
                       char *why, size_t cap)
{
    int got = 0;
    const char *all = s;
    size_t alen = strlen(s);

    trim(&all, &alen);
    if (alen == 0) {
        *n = 0;
        return 0;
    }
    for (;;) {
        const char *e = strchr(s, ',');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        const char *item = s;

        trim(&item, &len);
        if (len == 0) {
            say(why, cap, "an empty item (two commas, or one at an end)");
            return -1;
        }
        if (got == SIM_FAULT_MAX_SPECS) {
            say(why, cap, "more than %d specs", SIM_FAULT_MAX_SPECS);
            return -1;
        }
        if (parse_item(item, len, &out[got], why, cap) != 0)
            return -1;
        got++;
        if (!e)
            break;
        s = e + 1;
    }
    *n = got;
    return 0;
}

static void reset_counts(void)
{
    __atomic_store_n(&count_all, 0, __ATOMIC_RELAXED);
    for (int i = 0; i < SIM_FN_COUNT; i++)
        __atomic_store_n(&count_fn[i], 0, __ATOMIC_RELAXED);
    __atomic_store_n(&count_faults, 0, __ATOMIC_RELAXED);
}

static void atfork_prepare(void)
{
    pthread_mutex_lock(&fault_mu);
}

static void atfork_parent(void)
{
    pthread_mutex_unlock(&fault_mu);
}

static void atfork_child(void)
{
    pthread_mutex_unlock(&fault_mu);
    reset_counts(); /* a process of its own: its calls count from 1 */
    if (sim_check_init() == CUDA_SUCCESS)
        forked_after_init = 1;
}

/* Calls that need no initialised driver, and answer in a forked child. */
static int needs_no_init(enum sim_fn fn)
{
    return fn == SIM_FN_cuGetErrorName || fn == SIM_FN_cuGetErrorString ||
           fn == SIM_FN_cuDriverGetVersion;
}

static void env_refuse(const char *var, const char *value, const char *why)
{
    snprintf(env_error, sizeof(env_error), "%s=\"%s\": %s", var, value, why);
    env_bad = 1;
}

static void env_setup(void)
{
    const char *f = getenv("CUCORE_SIM_FAIL");
    const char *t = getenv("CUCORE_SIM_TRACE");
    char why[400];
    int n = 0;

    pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
    if (f && parse_specs(f, specs, &n, why, sizeof(why)) != 0) {
        env_refuse("CUCORE_SIM_FAIL", f, why);
        n = 0;
    }
    nspecs = n;
    if (t && *t) {
        int fd = -1;
        if (strlen(t) >= sizeof(trace_path))
            errno = ENAMETOOLONG;
        else
            fd = open(t, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0) {
            snprintf(why, sizeof(why), "cannot open it for appending: %s",
                     strerror(errno));
            env_refuse("CUCORE_SIM_TRACE", t, why);
        } else {
            close(fd);
            memcpy(trace_path, t, strlen(t) + 1);
            trace_on = 1;
        }
    }
    __atomic_store_n(&active, nspecs > 0 || trace_on, __ATOMIC_RELEASE);
}

/* One line per counted call: "pid K name name_k[ fail ERROR]". Opened
 * and closed each time, so that no fd of the trace outlives a call (tests
 * count their fds) and processes sharing the file append whole lines. */
static void trace_line(uint64_t k, enum sim_fn fn, uint64_t kn, CUresult rc)
{
    char line[160];
    const char *en = rc ? sim_error_name(rc) : NULL;
    int n, fd, saved = errno;

    if (rc && en)
        n = snprintf(line, sizeof(line), "%ld %llu %s %llu fail %s\n",
                     (long)getpid(), (unsigned long long)k, entry_names[fn],
                     (unsigned long long)kn, en);
    else if (rc)
        n = snprintf(line, sizeof(line), "%ld %llu %s %llu fail %d\n",
                     (long)getpid(), (unsigned long long)k, entry_names[fn],
                     (unsigned long long)kn, (int)rc);
    else
        n = snprintf(line, sizeof(line), "%ld %llu %s %llu\n", (long)getpid(),
                     (unsigned long long)k, entry_names[fn],
                     (unsigned long long)kn);
    fd = open(trace_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0) {
        if (write(fd, line, (size_t)n) < 0) {
            /* nothing to tell: the trace is best effort once open worked */
        }
        close(fd);
    }
    errno = saved;
}

static int matches(const struct fault_spec *s, enum sim_fn fn, uint64_t k,
                   uint64_t kn)
{
    uint64_t ord;

    if (s->fn == (int)fn)
        ord = kn;
    else if (s->fn == SIM_FAULT_ANY && counted(fn))
        ord = k;
    else
        return 0;
    return s->persistent ? ord >= s->k : ord == s->k;
}

CUresult sim_fault_enter(enum sim_fn fn)
{
    CUresult rc = CUDA_SUCCESS;
    uint64_t k = 0, kn;

    pthread_once(&env_once, env_setup);
    if (counted(fn))
        k = __atomic_add_fetch(&count_all, 1, __ATOMIC_RELAXED);
    kn = __atomic_add_fetch(&count_fn[fn], 1, __ATOMIC_RELAXED);
    if (forked_after_init && !needs_no_init(fn))
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!__atomic_load_n(&active, __ATOMIC_ACQUIRE))
        return CUDA_SUCCESS;
    pthread_mutex_lock(&fault_mu);
    for (int i = 0; i < nspecs; i++)
        if (matches(&specs[i], fn, k, kn)) {
            rc = specs[i].err;
            break;
        }
    pthread_mutex_unlock(&fault_mu);
    if (rc)
        __atomic_add_fetch(&count_faults, 1, __ATOMIC_RELAXED);
    if (trace_on && counted(fn))
        trace_line(k, fn, kn, rc);
    return rc;
}

/* ---- controls (cucore_sim.h) -------------------------------------------- */

SIM_API int cucore_sim_fail(const char *spec, char *why, size_t cap)
{
    struct fault_spec tmp[SIM_FAULT_MAX_SPECS];
    int n = 0;

    pthread_once(&env_once, env_setup);
    if (spec && parse_specs(spec, tmp, &n, why, cap) != 0)
        return -1;
    pthread_mutex_lock(&fault_mu);
    memcpy(specs, tmp, (size_t)n * sizeof(tmp[0]));
    nspecs = n;
    reset_counts();
    __atomic_store_n(&active, nspecs > 0 || trace_on, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&fault_mu);
    return 0;
}

SIM_API int cucore_sim_calls(const char *name, unsigned long long *out)
{
    int fn;

    if (!out)
        return -1;
    if (!name || strcmp(name, "*") == 0) {
        *out = __atomic_load_n(&count_all, __ATOMIC_RELAXED);
        return 0;
    }
    fn = fn_by_name(name, strlen(name));
    if (fn < 0)
        return -1;
    *out = __atomic_load_n(&count_fn[fn], __ATOMIC_RELAXED);
    return 0;
}

SIM_API unsigned long long cucore_sim_faults(void)
{
    return __atomic_load_n(&count_faults, __ATOMIC_RELAXED);
}

SIM_API const char *cucore_sim_env_error(void)
{
    pthread_once(&env_once, env_setup);
    return env_bad ? env_error : NULL;
}
