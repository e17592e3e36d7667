/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Internal declarations of one layer: error.c, param.c, config.c (errors,
 * optional parameters, options, thread-local state).
 * Include "ovl_internal.h", which includes every layer's header in order.
 */
#ifndef OVL_INTERNAL_ERROR_H
#define OVL_INTERNAL_ERROR_H

/* ---- error.c ---------------------------------------------------------- */

/* Record @code with a printf-style detail for ovl_error_detail(), print it if
 * verbose, and return @code so callers can `return ovl__error(...)`. @fn is
 * the public call that returns the error (also through a request's status);
 * under OVL_ERRORS=fatal this prints the error and aborts the job instead. */
int ovl__error(int code, const char *fn, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* ovl__error for a failure ovl handles itself, which no call returns (a
 * message dropped, a trace file not written): never aborts. An @fn that
 * names a part of ovl, not a call ("ovl progress"), makes ovl__error such a
 * report too. */
int ovl__report(int code, const char *fn, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Map an MPI error code to an ovl code, recording MPI's message. */
int ovl__mpi_error(int mpierr, const char *fn, const char *what);
/* @fn returns @code, which no ovl__error recorded (an operation's status: a
 * marshal function's own code, a stream its sender aborted): under
 * OVL_ERRORS=fatal, abort as ovl__error does. Returns @code. */
int ovl__error_returned(int code, const char *fn);
/* OVL_ERRORS: ovl_init sets the mode it resolved; before, the variable's. */
void ovl__errors_set(ovl_errors_t mode);
int ovl__errors_fatal(void);
void ovl__info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- param.c: optional parameters (ovl_param_t) ----------------------- */

/* OVL_SUCCESS when @p (NULL allowed) sets no field_mask bit outside
 * @takes (OVL_PARAM_FIELD_* bits), else OVL_ERR_ARG for @fn naming the
 * bit. */
int ovl__param_check(const char *fn, const ovl_param_t *p, uint64_t takes);

/* ---- config.c --------------------------------------------------------- */

/* @serve_auto (may be NULL): set to 1 if OVL_SERVE_US was left
 * automatic (0), which segment.c's probe then decides. */
int ovl__config_resolve(const ovl_config_t *user, ovl_config_t *out, int *serve_auto);

/* ---- thread-local state (error.c) --------------------------------------
 * Marshal functions are coroutines that can migrate between threads, so
 * thread-local state is only reached through this non-inlined accessor: a
 * compiler may not cache its result across a context switch. */
struct ovl__tls {
    int in_callback;        /* depth of continuation callbacks on this thread */
    struct ovl__coro *coro; /* coroutine running on this thread, if any */
    int reports_only;       /* depth of code whose errors ovl handles itself: ovl__error
                               is ovl__report there (segments ovl_finalize frees) */
    char detail[256];       /* ovl_error_detail() */
};
struct ovl__tls *ovl__tls(void) __attribute__((noinline));

#endif /* OVL_INTERNAL_ERROR_H */
