/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Options. Each field of ovl_config_t comes from the caller (if its bit is in
 * field_mask), else from its OVL_* environment variable, else the default.
 * docs/ENV.md documents every variable; keep the two in step.
 */
#include "ovl_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define OVL_MIN_FRAGMENT 64u
#define OVL_MAX_FRAGMENT (64u << 20)

/* Parse an unsigned number with an optional k/m/g suffix (powers of 1024). */
static int parse_size(const char *name, const char *s, unsigned long long *out)
{
    errno = 0;
    char *end = NULL;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || s[0] == '-')
        return ovl__error(OVL_ERR_CONFIG, "ovl_init", "%s=\"%s\" is not a number", name, s);
    switch (*end) {
    case 'k':
    case 'K':
        v <<= 10;
        end++;
        break;
    case 'm':
    case 'M':
        v <<= 20;
        end++;
        break;
    case 'g':
    case 'G':
        v <<= 30;
        end++;
        break;
    default:
        break;
    }
    if (*end != '\0')
        return ovl__error(OVL_ERR_CONFIG, "ovl_init", "%s=\"%s\": unexpected \"%s\"", name, s, end);
    *out = v;
    return OVL_SUCCESS;
}

static int env_size(const char *name, unsigned long long *v)
{
    const char *s = getenv(name);
    if (!s || !*s)
        return 1; /* not set */
    return parse_size(name, s, v);
}

int ovl__config_resolve(const ovl_config_t *user, ovl_config_t *out)
{
    ovl_config_t c = {
        .field_mask = 0,
        .progress = OVL_PROGRESS_INLINE,
        .poll_max_us = 50,
        .spin_us = 0,
        .fragment_size = 65536,
        .stream_window = 8,
        .stack_size = 256u << 10,
        .verbose = 1,
        .monitor = OVL_MONITOR_AUTO,
        .delta_size = 0,
        .eager_limit = 0,
        .progress_slice_us = 100,
        .poll_quiet_us = 1000,
        .progress_priority = 0,
        .rma_local = OVL_RMA_LOCAL_DIRECT,
    };
    uint64_t m = user ? user->field_mask : 0;
    unsigned long long v;
    int rc;

    if (m & OVL_CONFIG_FIELD_VERBOSE)
        c.verbose = user->verbose;
    else if ((rc = env_size("OVL_VERBOSE", &v)) <= 0) {
        if (rc < 0)
            return rc;
        c.verbose = (int)(v > 2 ? 2 : v);
    }

    if (m & OVL_CONFIG_FIELD_PROGRESS) {
        c.progress = user->progress;
    } else {
        const char *s = getenv("OVL_PROGRESS");
        if (s && *s) {
            if (!strcasecmp(s, "thread"))
                c.progress = OVL_PROGRESS_THREAD;
            else if (!strcasecmp(s, "inline") || !strcasecmp(s, "none"))
                c.progress = OVL_PROGRESS_INLINE;
            else
                return ovl__error(OVL_ERR_CONFIG, "ovl_init",
                                  "OVL_PROGRESS=\"%s\": expected \"inline\" or \"thread\"", s);
        }
    }
    if (c.progress != OVL_PROGRESS_INLINE && c.progress != OVL_PROGRESS_THREAD)
        return ovl__error(OVL_ERR_CONFIG, "ovl_init", "progress mode %d unknown", (int)c.progress);

    if (m & OVL_CONFIG_FIELD_MONITOR) {
        c.monitor = user->monitor;
    } else {
        const char *s = getenv("OVL_MONITOR");
        if (s && *s) {
            static const char *names[] = { "auto", "uffd", "mprotect", "explicit" };
            int found = -1;
            for (int i = 0; i < 4; i++)
                if (!strcasecmp(s, names[i]))
                    found = i;
            if (found < 0)
                return ovl__error(OVL_ERR_CONFIG, "ovl_init",
                                  "OVL_MONITOR=\"%s\": expected auto, uffd, mprotect or explicit",
                                  s);
            c.monitor = (ovl_monitor_t)found;
        }
    }
    if ((unsigned)c.monitor > OVL_MONITOR_EXPLICIT)
        return ovl__error(OVL_ERR_CONFIG, "ovl_init", "monitor %d unknown", (int)c.monitor);

    if (m & OVL_CONFIG_FIELD_RMA_LOCAL) {
        c.rma_local = user->rma_local;
    } else {
        const char *s = getenv("OVL_RMA_LOCAL");
        if (s && *s) {
            if (!strcasecmp(s, "direct"))
                c.rma_local = OVL_RMA_LOCAL_DIRECT;
            else if (!strcasecmp(s, "overlap"))
                c.rma_local = OVL_RMA_LOCAL_OVERLAP;
            else
                return ovl__error(OVL_ERR_CONFIG, "ovl_init",
                                  "OVL_RMA_LOCAL=\"%s\": expected \"direct\" or \"overlap\"", s);
        }
    }
    if (c.rma_local != OVL_RMA_LOCAL_DIRECT && c.rma_local != OVL_RMA_LOCAL_OVERLAP)
        return ovl__error(OVL_ERR_CONFIG, "ovl_init", "rma_local %d unknown", (int)c.rma_local);

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

    OVL_NUM_FIELD(OVL_CONFIG_FIELD_POLL_MAX_US, poll_max_us, "OVL_POLL_MAX_US", 1, 1000000);
    OVL_NUM_FIELD(OVL_CONFIG_FIELD_SPIN_US, spin_us, "OVL_SPIN_US", 0, 1000000);
    OVL_NUM_FIELD(OVL_CONFIG_FIELD_FRAGMENT_SIZE, fragment_size, "OVL_FRAGMENT_SIZE",
                  OVL_MIN_FRAGMENT, OVL_MAX_FRAGMENT);
    OVL_NUM_FIELD(OVL_CONFIG_FIELD_STREAM_WINDOW, stream_window, "OVL_STREAM_WINDOW", 1, 1024);
    OVL_NUM_FIELD(OVL_CONFIG_FIELD_STACK_SIZE, stack_size, "OVL_STACK_SIZE", 16384, 1ull << 30);
    OVL_NUM_FIELD(OVL_CONFIG_FIELD_DELTA_SIZE, delta_size, "OVL_DELTA_SIZE", 0, 1ull << 30);
    OVL_NUM_FIELD(OVL_CONFIG_FIELD_EAGER_LIMIT, eager_limit, "OVL_EAGER_LIMIT", 0, 1ull << 30);
    OVL_NUM_FIELD(OVL_CONFIG_FIELD_PROGRESS_SLICE_US, progress_slice_us, "OVL_PROGRESS_SLICE_US", 0,
                  100000);
    OVL_NUM_FIELD(OVL_CONFIG_FIELD_POLL_QUIET_US, poll_quiet_us, "OVL_POLL_QUIET_US", 0, 1000000);
    OVL_NUM_FIELD(OVL_CONFIG_FIELD_PROGRESS_PRIORITY, progress_priority, "OVL_PROGRESS_PRIORITY", 0,
                  99);
#undef OVL_NUM_FIELD
    *out = c;
    return OVL_SUCCESS;
}
