/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Error codes and messages. The table lives in ovl.h (OVL_ERROR_MAP) so the
 * enum and ovl_strerror() are generated from one place. Every error a public
 * call returns goes through ovl__error(), which keeps a per-thread detail
 * string (ovl_error_detail) and prints it when OVL_VERBOSE >= 1, or, under
 * OVL_ERRORS=fatal, prints it and aborts the job (fatal()). A failure ovl
 * handles itself, which no call returns, goes through ovl__report(): the
 * same detail and printing, never an abort.
 */
#include "ovl_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

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

/* "OVL_ERR_ARG" for OVL_ERR_ARG; NULL for a code not in the table. */
static const char *code_name(int code)
{
    switch (code) {
#define OVL_X_NAME(name, value, msg) \
    case value:                      \
        return "OVL_" #name;
        OVL_ERROR_MAP(OVL_X_NAME)
#undef OVL_X_NAME
    default:
        return NULL;
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
        return ovl__g.cfg.report.verbose;
    return 1;
}

/* OVL_ERRORS in force: the mode the last ovl_init resolved (-1: none yet,
 * the variable decides). */
static atomic_int errors_mode = -1;

void ovl__errors_set(ovl_errors_t mode)
{
    atomic_store(&errors_mode, (int)mode);
}

int ovl__errors_fatal(void)
{
    int m = atomic_load(&errors_mode);
    if (m >= 0)
        return m == OVL_ERRORS_FATAL;
    const char *e = getenv("OVL_ERRORS");
    return e && !strcasecmp(e, "fatal");
}

/* A public call's name ("ovl_isend"), not a part of ovl ("ovl progress"):
 * a report that names no call is one no call returns, and never aborts. */
static int names_call(const char *fn)
{
    return fn && !strncmp(fn, "ovl_", 4) && !strchr(fn, ' ');
}

/* OVL_ERRORS=fatal: one line (the call, the code's name, the detail), then
 * MPI_Abort on MPI_COMM_WORLD with the code's magnitude. */
static _Noreturn void fatal(int code, const char *fn, const char *detail)
{
    int mpi_up = 0, mpi_down = 0, rank = -1;
    MPI_Initialized(&mpi_up);
    if (mpi_up)
        MPI_Finalized(&mpi_down);
    if (mpi_up && !mpi_down)
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    char where[32] = "", num[32];
    if (rank >= 0)
        snprintf(where, sizeof where, "rank %d: ", rank);
    const char *name = code_name(code);
    if (!name) {
        snprintf(num, sizeof num, "error %d", code);
        name = num;
    }
    char line[512];
    snprintf(line, sizeof line, "ovl: %s%s failed: %s: %s (OVL_ERRORS=fatal: MPI_Abort)\n", where,
             fn, name, detail);
    fflush(stdout); /* what the program printed before, then the line */
    fputs(line, stderr);
    fflush(stderr);
    int exit_code = code < 0 && code > -256 ? -code : 1;
    if (mpi_up && !mpi_down) {
        /* mpiexec forwards the line from a pipe, and an abort can tear the
         * job down before it is read (MPICH's hydra on a loaded machine):
         * give it a moment first. */
        struct timespec pause = { 0, 200 * 1000 * 1000 };
        nanosleep(&pause, NULL);
        MPI_Abort(MPI_COMM_WORLD, exit_code);
    }
    _Exit(exit_code); /* no MPI to abort: this process is the job */
}

static int record(int code, const char *fn, int may_abort, const char *fmt, va_list ap)
{
    struct ovl__tls *t = ovl__tls();
    int n = snprintf(t->detail, sizeof t->detail, "%s: ", fn);
    if (n < 0 || (size_t)n >= sizeof t->detail)
        n = 0;
    vsnprintf(t->detail + n, sizeof t->detail - (size_t)n, fmt, ap);
    if (may_abort && !t->reports_only && names_call(fn) && ovl__errors_fatal())
        fatal(code, fn, t->detail);
    if (verbosity() >= 1)
        fprintf(stderr, "ovl: error %d (%s): %s\n", code, ovl_strerror(code), t->detail);
    return code;
}

int ovl__error(int code, const char *fn, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    code = record(code, fn, 1, fmt, ap);
    va_end(ap);
    return code;
}

int ovl__report(int code, const char *fn, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    code = record(code, fn, 0, fmt, ap);
    va_end(ap);
    return code;
}

int ovl__error_returned(int code, const char *fn)
{
    if (code == OVL_SUCCESS || !ovl__errors_fatal())
        return code;
    if (code_name(code))
        return ovl__error(code, fn, "the request's operation failed: %s", ovl_strerror(code));
    return ovl__error(code, fn,
                      "the request's operation failed with code %d (its marshal function's)", code);
}

int ovl__mpi_error(int mpierr, const char *fn, const char *what)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(mpierr, msg, &len) != MPI_SUCCESS)
        snprintf(msg, sizeof msg, "MPI error %d", mpierr);
    /* one line: MPICH 5 appends its error stack on lines of their own */
    for (char *c = msg; *c; c++)
        if (*c == '\n' || *c == '\r')
            *c = ' ';
    for (size_t n = strlen(msg); n > 0 && msg[n - 1] == ' ';)
        msg[--n] = 0;
    int cls = mpierr;
    MPI_Error_class(mpierr, &cls);
    int code = cls == MPI_ERR_TRUNCATE ? OVL_ERR_TRUNCATE : OVL_ERR_MPI;
    /* The kernel could not reach an address MPI gave it while a pending
     * fault-monitored receive guards a page it shares with other data:
     * MPI's own heap data may be on that page (MPICH 5 passes heap iovec
     * arrays to process_vm_readv). Say what to do. */
    if (code == OVL_ERR_MPI && (strstr(msg, "errno 14") || strstr(msg, "Bad address")) &&
        ovl__watch_edges_live())
        return ovl__error(code, fn,
                          "%s failed: %s (a pending fault-monitored receive guards a page it "
                          "shares with other heap data, which MPI's own data can be on, and the "
                          "kernel cannot reach a guarded page: give such receive buffers pages of "
                          "their own, ovl_alloc or posix_memalign to the page size)",
                          what, msg);
    return ovl__error(code, fn, "%s failed: %s", what, msg);
}

void ovl__info(const char *fmt, ...)
{
    /* ovl_init sets the configuration before it calibrates, so its own
     * progress reports follow OVL_VERBOSE too. */
    if (ovl__g.cfg.report.verbose < 2)
        return;
    va_list ap;
    va_start(ap, fmt);
    fputs("ovl: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}
