/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Error codes and messages. The table lives in ovl.h (OVL_ERROR_MAP) so the
 * enum and ovl_strerror() are generated from one place. Every error a public
 * call returns goes through ovl__error(), which keeps a per-thread detail
 * string (ovl_error_detail) and prints it when OVL_VERBOSE >= 1.
 */
#include "ovl_internal.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local struct ovl__tls tls_state;

struct ovl__tls *ovl__tls(void)
{
    return &tls_state;
}

const char *ovl_strerror(int code)
{
    switch (code) {
#define OVL_X_CASE(name, value, msg) \
    case value:                      \
        return msg;
        OVL_ERROR_MAP(OVL_X_CASE)
#undef OVL_X_CASE
    default:
        return "unknown ovl error code";
    }
}

const char *ovl_error_detail(void)
{
    return ovl__tls()->detail;
}

static int verbosity(void)
{
    /* Before init (or after finalize) errors are still worth printing. */
    if (atomic_load(&ovl__g.initialized))
        return ovl__g.cfg.verbose;
    return 1;
}

int ovl__error(int code, const char *fn, const char *fmt, ...)
{
    struct ovl__tls *t = ovl__tls();
    int n = snprintf(t->detail, sizeof t->detail, "%s: ", fn);
    if (n < 0 || (size_t)n >= sizeof t->detail)
        n = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->detail + n, sizeof t->detail - (size_t)n, fmt, ap);
    va_end(ap);
    if (verbosity() >= 1)
        fprintf(stderr, "ovl: error %d (%s): %s\n", code, ovl_strerror(code), t->detail);
    return code;
}

int ovl__mpi_error(int mpierr, const char *fn, const char *what)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(mpierr, msg, &len) != MPI_SUCCESS)
        snprintf(msg, sizeof msg, "MPI error %d", mpierr);
    int cls = mpierr;
    MPI_Error_class(mpierr, &cls);
    int code = cls == MPI_ERR_TRUNCATE ? OVL_ERR_TRUNCATE : OVL_ERR_MPI;
    return ovl__error(code, fn, "%s failed: %s", what, msg);
}

void ovl__info(const char *fmt, ...)
{
    /* ovl_init sets the configuration before it calibrates, so its own
     * progress reports follow OVL_VERBOSE too. */
    if (ovl__g.cfg.verbose < 2)
        return;
    va_list ap;
    va_start(ap, fmt);
    fputs("ovl: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}
