/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Options. Each field of ovl_config_t comes from the caller (if its bit is in
 * field_mask), else from its OVL_* environment variable, else the default.
 * docs/ENV.md documents every variable; keep the two in step.
 */
#include "ovl_internal.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Every OVL_CONFIG_FIELD_* bit (ovl.h); a new field adds its bit here. */
#define KNOWN_FIELDS                                                                               \
    (OVL_CONFIG_FIELD_PROGRESS | OVL_CONFIG_FIELD_FRAGMENT_SIZE | OVL_CONFIG_FIELD_STREAM_WINDOW | \
     OVL_CONFIG_FIELD_STACK_SIZE | OVL_CONFIG_FIELD_VERBOSE | OVL_CONFIG_FIELD_MONITOR |           \
     OVL_CONFIG_FIELD_DELTA_SIZE | OVL_CONFIG_FIELD_EAGER_LIMIT |                                  \
     OVL_CONFIG_FIELD_PROGRESS_PRIORITY | OVL_CONFIG_FIELD_RMA_LOCAL |                             \
     OVL_CONFIG_FIELD_LATENESS_US | OVL_CONFIG_FIELD_SERVE_US | OVL_CONFIG_FIELD_STREAM_WHOLE |    \
     OVL_CONFIG_FIELD_ERRORS | OVL_CONFIG_FIELD_DOMAINS | OVL_CONFIG_FIELD_AM_POLL_MASK)

/* Variables of earlier versions that no longer exist, each with what
 * replaces it: set, they fail ovl_init (a setting silently ignored would
 * leave a user tuning nothing). CHANGELOG.md lists them. */
static const struct {
    const char *name, *instead;
} removed_vars[] = {
    { "OVL_POLL_MAX_US", "the progress thread's pace follows the operations in flight "
                         "(docs/ENV.md, \"How the progress thread paces itself\"); "
                         "OVL_LATENESS_US sets it while a continuation waits" },
    { "OVL_POLL_MIN_US", "the progress thread's pace follows the operations in flight; "
                         "OVL_LATENESS_US sets it while a continuation waits" },
    { "OVL_POLL_CALLBACK_US", "OVL_LATENESS_US (the same meaning, no longer capped at 50 us)" },
    { "OVL_POLL_SERVE_US", "OVL_SERVE_US (the same meaning)" },
    { "OVL_POLL_RMA_US", "nothing: get/put strips have a fixed 100 us budget" },
    { "OVL_POLL_QUIET_US", "nothing: patient work has a fixed 1 ms budget" },
    { "OVL_POLL_QUIET_SHARE", "nothing: the rule trusts a fixed 75 % of a predicted completion" },
    { "OVL_SPIN_US", "nothing: a thread waiting in ovl_wait drives progress itself" },
    { "OVL_PROGRESS_SLICE_US", "nothing: the progress thread asks for a 100 us time slice" },
};

#define OVL_MIN_FRAGMENT 64u
#define OVL_MAX_FRAGMENT (64u << 20)

/* Parse an unsigned number with an optional k/m/g suffix (powers of 1024). */
static int parse_size(const char *name, const char *s, unsigned long long *out)
{
    errno = 0;
    char *end = NULL;
    unsigned long long v = strtoull(s, &end, 10);
    /* digits first: strtoull would take " -5" (space, sign) as 2^64 - 5 */
    if (errno || end == s || !isdigit((unsigned char)s[0]))
        return ovl__error(OVL_ERR_CONFIG, "ovl_init", "%s=\"%s\" is not a number", name, s);
    unsigned shift = 0;
    switch (*end) {
    case 'k':
    case 'K':
        shift = 10;
        end++;
        break;
    case 'm':
    case 'M':
        shift = 20;
        end++;
        break;
    case 'g':
    case 'G':
        shift = 30;
        end++;
        break;
    default:
        break;
    }
    if (*end != '\0')
        return ovl__error(OVL_ERR_CONFIG, "ovl_init", "%s=\"%s\": unexpected \"%s\"", name, s, end);
    /* a shift that drops bits would wrap a huge value into a small one */
    if (v > (~0ull >> shift))
        return ovl__error(OVL_ERR_CONFIG, "ovl_init", "%s=\"%s\" is too large", name, s);
    *out = v << shift;
    return OVL_SUCCESS;
}

static int env_size(const char *name, unsigned long long *v)
{
    const char *s = getenv(name);
    if (!s || !*s)
        return 1; /* not set */
    return parse_size(name, s, v);
}

/* Environment variable @name naming one of @names[0..n) (any case): 1 if
 * unset, 0 with *out = the matching @values entry, or OVL_ERR_CONFIG. */
static int env_choice(const char *name, const char *const *names, const int *values, int n,
                      int *out)
{
    const char *s = getenv(name);
    if (!s || !*s)
        return 1;
    char list[256];
    size_t at = 0;
    list[0] = 0;
    for (int i = 0; i < n; i++) {
        if (!strcasecmp(s, names[i])) {
            *out = values[i];
            return 0;
        }
        if (at < sizeof list)
            at += (size_t)snprintf(list + at, sizeof list - at, "%s\"%s\"",
                                   i == 0       ? ""
                                   : i + 1 == n ? " or "
                                                : ", ",
                                   names[i]);
    }
    return ovl__error(OVL_ERR_CONFIG, "ovl_init", "%s=\"%s\": expected %s", name, s, list);
}

/* A name-valued setting: @field when @from_field, else the environment
 * variable @env (env_choice), else *out as it is; the result must be one
 * of @values (@what names it in the error). OVL_SUCCESS or OVL_ERR_CONFIG. */
static int choice_field(int from_field, int field, const char *env, const char *what,
                        const char *const *names, const int *values, int n, int *out)
{
    int rc, e;
    if (from_field)
        *out = field;
    else if ((rc = env_choice(env, names, values, n, &e)) < 0)
        return rc;
    else if (rc == 0)
        *out = e;
    for (int i = 0; i < n; i++)
        if (values[i] == *out)
            return OVL_SUCCESS;
    return ovl__error(OVL_ERR_CONFIG, "ovl_init", "%s %d unknown", what, *out);
}

int ovl__config_resolve(const ovl_config_t *user, ovl_config_t *out, int *serve_auto)
{
    ovl_config_t c = {
        .field_mask = 0,
        .progress.mode = OVL_PROGRESS_INLINE,
        .stream.fragment_size = 0, /* from the model at ovl_init */
        .stream.window = 8,
        .stream.stack_size = 256u << 10,
        .report.verbose = 1,
        .access.monitor = OVL_MONITOR_AUTO,
        .access.delta_size = 0,
        .mpi.eager_limit = 0,
        .progress.priority = 0,
        .mpi.rma_local = OVL_RMA_LOCAL_AUTO,
        .progress.lateness_us = 30,
        .progress.serve_us = 0,
        .stream.whole = OVL_STREAM_WHOLE_AUTO,
        .report.errors = OVL_ERRORS_RETURN,
        .threads.domains = 1,
        .threads.am_poll_mask = 15,
    };
    uint64_t m = user ? user->field_mask : 0;
    static const ovl_config_t none; /* read, never used, when user is NULL */
    const ovl_config_t *u = user ? user : &none;
    unsigned long long v;
    int rc, e;

    /* First, and in force at once: under fatal the configuration errors
     * below abort (a bad value here is returned, the mode unknown). */
    static const char *const errors_names[] = { "return", "fatal" };
    static const int errors_values[] = { OVL_ERRORS_RETURN, OVL_ERRORS_FATAL };
    e = (int)c.report.errors;
    if ((rc = choice_field((m & OVL_CONFIG_FIELD_ERRORS) != 0, (int)u->report.errors, "OVL_ERRORS",
                           "errors", errors_names, errors_values, 2, &e)))
        return rc;
    c.report.errors = (ovl_errors_t)e;
    ovl__errors_set(c.report.errors);

    for (size_t i = 0; i < sizeof removed_vars / sizeof removed_vars[0]; i++) {
        const char *set = getenv(removed_vars[i].name);
        if (set && *set)
            return ovl__error(OVL_ERR_CONFIG, "ovl_init", "%s=\"%s\": removed in ovl 0.1.0; use %s",
                              removed_vars[i].name, set, removed_vars[i].instead);
    }

    if (m & ~(uint64_t)KNOWN_FIELDS)
        return ovl__error(OVL_ERR_CONFIG, "ovl_init",
                          "field_mask %#llx has bits no OVL_CONFIG_FIELD_* names (%#llx): a "
                          "field this version of ovl does not know, or garbage",
                          (unsigned long long)m, (unsigned long long)(m & ~(uint64_t)KNOWN_FIELDS));

    /* 0 silent, 1 errors, 2 info; more is as much as 2 (the same for the
     * field and the variable, which cannot be negative) */
    if (m & OVL_CONFIG_FIELD_VERBOSE) {
        if (user->report.verbose < 0)
            return ovl__error(OVL_ERR_CONFIG, "ovl_init", "verbose=%d is negative",
                              user->report.verbose);
        c.report.verbose = user->report.verbose > 2 ? 2 : user->report.verbose;
    } else if ((rc = env_size("OVL_VERBOSE", &v)) <= 0) {
        if (rc < 0)
            return rc;
        c.report.verbose = (int)(v > 2 ? 2 : v);
    }

    /* "none" (no progress thread) is another name for inline (docs/ENV.md) */
    static const char *const progress_names[] = { "inline", "thread", "none" };
    static const int progress_values[] = { OVL_PROGRESS_INLINE, OVL_PROGRESS_THREAD,
                                           OVL_PROGRESS_INLINE };
    e = (int)c.progress.mode;
    if ((rc =
             choice_field((m & OVL_CONFIG_FIELD_PROGRESS) != 0, (int)u->progress.mode,
                          "OVL_PROGRESS", "progress mode", progress_names, progress_values, 3, &e)))
        return rc;
    c.progress.mode = (ovl_progress_mode_t)e;

    static const char *const monitor_names[] = { "auto", "uffd", "mprotect", "explicit" };
    static const int monitor_values[] = { OVL_MONITOR_AUTO, OVL_MONITOR_UFFD, OVL_MONITOR_MPROTECT,
                                          OVL_MONITOR_EXPLICIT };
    e = (int)c.access.monitor;
    if ((rc = choice_field((m & OVL_CONFIG_FIELD_MONITOR) != 0, (int)u->access.monitor,
                           "OVL_MONITOR", "monitor", monitor_names, monitor_values, 4, &e)))
        return rc;
    /* The explicit monitor changes what a correct program must do (annotate
     * every range before using it), so it is chosen in code, never by the
     * environment: a setting must not make a program read data that has
     * not arrived. */
    if (!(m & OVL_CONFIG_FIELD_MONITOR) && e == OVL_MONITOR_EXPLICIT)
        return ovl__error(OVL_ERR_CONFIG, "ovl_init",
                          "OVL_MONITOR=explicit: choose the explicit monitor in code "
                          "(ovl_config_t.monitor or a request's ovl_param_t): unannotated reads "
                          "would see data before it arrives; OVL_MONITOR takes auto, uffd, "
                          "mprotect");
    c.access.monitor = (ovl_monitor_t)e;

    static const char *const rma_local_names[] = { "auto", "direct", "overlap" };
    static const int rma_local_values[] = { OVL_RMA_LOCAL_AUTO, OVL_RMA_LOCAL_DIRECT,
                                            OVL_RMA_LOCAL_OVERLAP };
    e = (int)c.mpi.rma_local;
    if ((rc = choice_field((m & OVL_CONFIG_FIELD_RMA_LOCAL) != 0, (int)u->mpi.rma_local,
                           "OVL_RMA_LOCAL", "rma_local", rma_local_names, rma_local_values, 3, &e)))
        return rc;
    c.mpi.rma_local = (ovl_rma_local_t)e;

    static const char *const whole_names[] = { "auto", "on", "off" };
    static const int whole_values[] = { OVL_STREAM_WHOLE_AUTO, OVL_STREAM_WHOLE_ON,
                                        OVL_STREAM_WHOLE_OFF };
    e = (int)c.stream.whole;
    if ((rc = choice_field((m & OVL_CONFIG_FIELD_STREAM_WHOLE) != 0, (int)u->stream.whole,
                           "OVL_STREAM_WHOLE", "stream_whole", whole_names, whole_values, 3, &e)))
        return rc;
    c.stream.whole = (ovl_stream_whole_t)e;

#define OVL_NUM_FIELD(bit, field, env, lo, hi)                                                 \
    do {                                                                                       \
        if (m & (bit)) {                                                                       \
            v = (unsigned long long)user->field;                                               \
        } else if ((rc = env_size(env, &v)) < 0) {                                             \
            return rc;                                                                         \
        } else if (rc > 0) {                                                                   \
            v = (unsigned long long)c.field;                                                   \
        }                                                                                      \
        if (v + 1 < (unsigned long long)(lo) + 1 || v > (hi))                                  \
            return ovl__error(OVL_ERR_CONFIG, "ovl_init", "%s=%llu out of range [%llu, %llu]", \
                              env, v, (unsigned long long)(lo), (unsigned long long)(hi));     \
        c.field = (__typeof__(c.field))v;                                                      \
    } while (0)

    OVL_NUM_FIELD(OVL_CONFIG_FIELD_FRAGMENT_SIZE, stream.fragment_size, "OVL_FRAGMENT_SIZE", 0,
                  OVL_MAX_FRAGMENT);
    if (c.stream.fragment_size != 0 && c.stream.fragment_size < OVL_MIN_FRAGMENT)
        return ovl__error(OVL_ERR_CONFIG, "ovl_init",
                          "OVL_FRAGMENT_SIZE=%zu out of range: 0 (chosen from the model) or "
                          "%u to %u",
                          c.stream.fragment_size, OVL_MIN_FRAGMENT, OVL_MAX_FRAGMENT);
    OVL_NUM_FIELD(OVL_CONFIG_FIELD_STREAM_WINDOW, stream.window, "OVL_STREAM_WINDOW", 1, 1024);
    OVL_NUM_FIELD(OVL_CONFIG_FIELD_STACK_SIZE, stream.stack_size, "OVL_STACK_SIZE", 16384,
                  1ull << 30);
    OVL_NUM_FIELD(OVL_CONFIG_FIELD_DELTA_SIZE, access.delta_size, "OVL_DELTA_SIZE", 0, 1ull << 30);
    OVL_NUM_FIELD(OVL_CONFIG_FIELD_EAGER_LIMIT, mpi.eager_limit, "OVL_EAGER_LIMIT", 0, 1ull << 30);
    OVL_NUM_FIELD(OVL_CONFIG_FIELD_PROGRESS_PRIORITY, progress.priority, "OVL_PROGRESS_PRIORITY", 0,
                  99);
    OVL_NUM_FIELD(OVL_CONFIG_FIELD_LATENESS_US, progress.lateness_us, "OVL_LATENESS_US", 1,
                  1000000);
    OVL_NUM_FIELD(OVL_CONFIG_FIELD_SERVE_US, progress.serve_us, "OVL_SERVE_US", 0, 1000000);
    OVL_NUM_FIELD(OVL_CONFIG_FIELD_DOMAINS, threads.domains, "OVL_DOMAINS", 1, OVL_DOMAINS_MAX);
    OVL_NUM_FIELD(OVL_CONFIG_FIELD_AM_POLL_MASK, threads.am_poll_mask, "OVL_AM_POLL_MASK", 0,
                  65535);
#undef OVL_NUM_FIELD
    if (serve_auto)
        *serve_auto = c.progress.serve_us == 0;
    if (c.progress.serve_us == 0)
        c.progress.serve_us = ovl__sched_poll_us();
    *out = c;
    return OVL_SUCCESS;
}
