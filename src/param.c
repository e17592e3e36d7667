/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Optional parameters (ovl_param_t): one struct for every call that takes
 * options, its field_mask saying which fields the caller set, instead of a
 * variant of the call per option (UCX's ucp_request_param_t). Each call
 * names the fields it takes; any other bit fails the call, naming the bit,
 * so an option a call would ignore (or one only a newer ovl.h knows) is
 * reported rather than silently dropped.
 */
#include "ovl_internal.h"

#include <stdio.h>
#include <string.h>

/* Names of the OVL_PARAM_FIELD_* bits, by bit number. */
static const char *const field_name[] = {
    "OVL_PARAM_FIELD_MONITOR", "OVL_PARAM_FIELD_COUNT",     "OVL_PARAM_FIELD_DECOMP",
    "OVL_PARAM_FIELD_ORDER",   "OVL_PARAM_FIELD_PIGGYBACK", "OVL_PARAM_FIELD_PROTOCOL",
    "OVL_PARAM_FIELD_STRIP",   "OVL_PARAM_FIELD_LOOKAHEAD", "OVL_PARAM_FIELD_LEVEL",
};
#define NFIELDS ((int)(sizeof field_name / sizeof field_name[0]))

/* "OVL_PARAM_FIELD_A, OVL_PARAM_FIELD_B" for the bits of @mask, or "none". */
static void names(uint64_t mask, char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int b = 0; b < NFIELDS; b++)
        if (mask & (1ull << b)) {
            int n = snprintf(buf + at, len - at, "%s%s", at ? ", " : "", field_name[b]);
            if (n < 0 || (size_t)n >= len - at)
                break;
            at += (size_t)n;
        }
    if (!at)
        snprintf(buf, len, "none");
}

int ovl__param_check(const char *fn, const ovl_param_t *p, uint64_t takes)
{
    if (!p)
        return OVL_SUCCESS;
    uint64_t extra = p->field_mask & ~takes;
    if (!extra)
        return OVL_SUCCESS;
    int bit = __builtin_ctzll(extra);
    char took[160];
    names(takes, took, sizeof took);
    if (bit >= NFIELDS)
        return ovl__error(OVL_ERR_ARG, fn,
                          "param->field_mask 0x%llx has bit %d, which no OVL_PARAM_FIELD_* names "
                          "(this call takes: %s)",
                          (unsigned long long)p->field_mask, bit, took);
    return ovl__error(OVL_ERR_ARG, fn,
                      "param->field_mask sets %s, which this call does not take (it takes: %s)",
                      field_name[bit], took);
}
