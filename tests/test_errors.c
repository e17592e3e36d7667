/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_errors: OVL_ERRORS, what a failing call does.
 *
 * Without an argument, in one job (OVL_ERRORS unset):
 *  - the default, return: a call's error (ovl_isend of a NULL buffer), an
 *    operation's error from ovl_wait (truncation) and OVL_ERR_EOF from
 *    ovl_stream_read are returned, with their details, and ovl runs on;
 *  - a bad OVL_ERRORS value, or errors field, on one rank only: ovl_init
 *    fails with OVL_ERR_CONFIG on every rank (none hangs), the failing
 *    rank's detail naming OVL_ERRORS; a valid ovl_init follows;
 *  - OVL_ERRORS=return|fatal (any case) and the errors field reach
 *    ovl_config_get; the field wins over the variable (fatal in the
 *    variable, return in the field: the error is returned).
 *
 * With an argument, a child the test suite runs under OVL_ERRORS=fatal
 * (ovl_add_mpi_test ABORTS): one rank makes a call fail, and the job must
 * end in ovl's one line and MPI_Abort, never in "FAIL" (the call returned):
 *   isend        ovl_isend of a NULL buffer
 *   before-init  ovl_isend before ovl_init (MPI initialised)
 *   init         OVL_LATENESS_US=0 on the last rank: ovl_init's own error
 *   config       no variable; errors = fatal and progress = 7 in the config
 *   truncate     a message longer than its receive buffer: the operation's
 *                error, seen by whichever thread drives progress
 *   eof          ovl_stream_read past the end of the message
 *   marshal      an unmarshal function returns its own code: ovl_wait
 * and one that must not abort:
 *   finalize     receives and a receive stream that never match, cancelled
 *                by ovl_finalize (their continuation and unmarshal function
 *                see OVL_ERR_CANCELLED; nothing returns it)
 */
#include "harness.h"

#include <stdlib.h>
#include <string.h>

#define MARSHAL_OWN_CODE (-1000)

static int peer_of(int rank)
{
    return th_size > 1 ? (rank + 1) % th_size : rank;
}

/* ---- return mode -------------------------------------------------------- */

static int write_four(ovl_stream_t s, void *arg)
{
    (void)arg;
    return ovl_stream_write_int32(s, 4);
}

/* Reads the int32 there and one more: the second read is past the end. */
static int read_past_end(ovl_stream_t s, void *arg)
{
    int *rc = arg;
    int32_t v = 0;
    rc[0] = ovl_stream_read_int32(s, &v);
    rc[1] = ovl_stream_read_int32(s, &v);
    if (rc[1] == OVL_ERR_EOF && !strstr(ovl_error_detail(), "ovl_stream_read"))
        rc[1] = OVL_ERR_INTERNAL; /* the detail must name the call */
    return OVL_SUCCESS;
}

static void check_return_mode(void)
{
    ovl_config_t got;
    CHECK_OK(ovl_config_get(&got));
    CHECK(got.report.errors == OVL_ERRORS_RETURN);

    /* a call's own error */
    ovl_request_t r = OVL_REQUEST_NULL;
    EXPECT_ERR(ovl_isend(NULL, 4, MPI_INT, peer_of(th_rank), 0, &r), OVL_ERR_ARG);
    CHECKF(strstr(ovl_error_detail(), "ovl_isend") && strstr(ovl_error_detail(), "NULL"),
           "detail \"%s\"", ovl_error_detail());
    CHECK(r == OVL_REQUEST_NULL);

    /* an operation's error, returned by ovl_wait: 8 ints into room for 4 */
    int out[8] = { 1, 2, 3, 4, 5, 6, 7, 8 }, in[4] = { 0 };
    ovl_request_t s;
    int from = (th_rank + th_size - 1) % th_size;
    CHECK_OK(ovl_irecv(in, 4, MPI_INT, from, 1, &r));
    CHECK_OK(ovl_isend(out, 8, MPI_INT, peer_of(th_rank), 1, &s));
    EXPECT_ERR(ovl_wait(&r, OVL_STATUS_IGNORE), OVL_ERR_TRUNCATE);
    CHECK_OK(ovl_wait(&s, OVL_STATUS_IGNORE));

    /* OVL_ERR_EOF from ovl_stream_read, with a detail */
    int rc[2] = { 1, 1 };
    CHECK_OK(ovl_irecv_stream(from, 2, read_past_end, rc, &r));
    CHECK_OK(ovl_isend_stream(peer_of(th_rank), 2, write_four, NULL, &s));
    CHECK_OK(ovl_wait(&r, OVL_STATUS_IGNORE));
    CHECK_OK(ovl_wait(&s, OVL_STATUS_IGNORE));
    EXPECT_ERR(rc[0], OVL_SUCCESS);
    EXPECT_ERR(rc[1], OVL_ERR_EOF);
}

/* ovl_init fails with OVL_ERR_CONFIG on every rank; the last rank's detail
 * (the one with the bad value) contains @mine, the others' name it. */
static void expect_init_fails_everywhere(const ovl_config_t *cfg, const char *mine)
{
    int rc = ovl_init(MPI_COMM_WORLD, cfg);
    CHECKF(rc == OVL_ERR_CONFIG, "ovl_init gave %s", th_code_name(rc));
    CHECK(!ovl_initialized());
    char want[32];
    snprintf(want, sizeof want, "rank %d failed", th_size - 1);
    const char *need = th_rank == th_size - 1 ? mine : want;
    CHECKF(strstr(ovl_error_detail(), need) != NULL, "detail \"%s\" lacks \"%s\"",
           ovl_error_detail(), need);
}

static void check_config(void)
{
    int last = th_rank == th_size - 1;

    /* a bad variable on one rank */
    if (last)
        setenv("OVL_ERRORS", "sometimes", 1);
    expect_init_fails_everywhere(NULL, "OVL_ERRORS=\"sometimes\"");
    unsetenv("OVL_ERRORS");

    /* a bad field on one rank */
    ovl_config_t c = { .field_mask = OVL_CONFIG_FIELD_ERRORS, .report.errors = (ovl_errors_t)7 };
    expect_init_fails_everywhere(last ? &c : NULL, "errors 7 unknown");

    /* the variable, in any case */
    ovl_config_t got;
    setenv("OVL_ERRORS", "Return", 1);
    CHECK_OK(ovl_init(MPI_COMM_WORLD, NULL));
    CHECK_OK(ovl_config_get(&got));
    CHECK(got.report.errors == OVL_ERRORS_RETURN);
    CHECK_OK(ovl_finalize());
    setenv("OVL_ERRORS", "FATAL", 1);
    CHECK_OK(ovl_init(MPI_COMM_WORLD, NULL));
    CHECK_OK(ovl_config_get(&got));
    CHECK(got.report.errors == OVL_ERRORS_FATAL);
    CHECK_OK(ovl_finalize());

    /* the field wins: fatal in the variable, return in the field */
    c = (ovl_config_t){ .field_mask = OVL_CONFIG_FIELD_ERRORS, .report.errors = OVL_ERRORS_RETURN };
    CHECK_OK(ovl_init(MPI_COMM_WORLD, &c));
    CHECK_OK(ovl_config_get(&got));
    CHECK(got.report.errors == OVL_ERRORS_RETURN);
    ovl_request_t r = OVL_REQUEST_NULL;
    EXPECT_ERR(ovl_irecv(NULL, 4, MPI_INT, 0, 0, &r), OVL_ERR_ARG);
    CHECK_OK(ovl_finalize());
    unsetenv("OVL_ERRORS");

    /* and the other way round (no error made under it) */
    c.report.errors = OVL_ERRORS_FATAL;
    CHECK_OK(ovl_init(MPI_COMM_WORLD, &c));
    CHECK_OK(ovl_config_get(&got));
    CHECK(got.report.errors == OVL_ERRORS_FATAL);
    CHECK_OK(ovl_finalize());

    /* back to return for what follows (th_finish) */
    CHECK_OK(ovl_init(MPI_COMM_WORLD, NULL));
    CHECK_OK(ovl_config_get(&got));
    CHECK(got.report.errors == OVL_ERRORS_RETURN);
}

/* ---- fatal children ----------------------------------------------------- */

/* The call returned although OVL_ERRORS=fatal. */
#define RETURNED(call, rc) \
    th_fail(__FILE__, __LINE__, call, th_code_name(rc)) /* prints FAIL, aborts */

/* The ranks that make no error wait to be aborted with the job. */
static _Noreturn void wait_for_abort(void)
{
    double t0 = th_now();
    while (th_now() - t0 < 30) {
        if (ovl_initialized()) {
            int rc = ovl_progress();
            if (rc != OVL_SUCCESS)
                RETURNED("ovl_progress", rc);
        }
        th_sleep_ms(1);
    }
    th_fail(__FILE__, __LINE__, "wait_for_abort", "no rank aborted the job in 30 s");
}

static int unmarshal_own_code(ovl_stream_t s, void *arg)
{
    (void)s;
    (void)arg;
    return MARSHAL_OWN_CODE;
}

static int unmarshal_past_end(ovl_stream_t s, void *arg)
{
    (void)arg;
    int32_t v;
    int rc = ovl_stream_read_int32(s, &v);
    if (rc == OVL_SUCCESS)
        rc = ovl_stream_read_int32(s, &v);
    if (rc != OVL_SUCCESS)
        RETURNED("ovl_stream_read", rc);
    return OVL_SUCCESS;
}

static atomic_int cancelled_seen;

static void on_cancelled(const ovl_status_t *st, void *arg)
{
    (void)arg;
    if (st->error == OVL_ERR_CANCELLED)
        atomic_fetch_add(&cancelled_seen, 1);
}

static int unmarshal_cancelled(ovl_stream_t s, void *arg)
{
    (void)arg;
    int32_t v;
    int rc = ovl_stream_read_int32(s, &v);
    if (rc == OVL_ERR_CANCELLED)
        atomic_fetch_add(&cancelled_seen, 1);
    return OVL_SUCCESS;
}

static int child(int argc, char **argv, const char *mode)
{
    int provided = th_init_mpi(&argc, &argv, "test_errors", MPI_THREAD_MULTIPLE);
    CHECK(provided == MPI_THREAD_MULTIPLE);
    int rc, last = th_rank == th_size - 1;
    ovl_request_t r = OVL_REQUEST_NULL;

    if (!strcmp(mode, "before-init")) {
        if (last && (rc = ovl_isend(NULL, 4, MPI_INT, 0, 0, &r)) != OVL_SUCCESS)
            RETURNED("ovl_isend before ovl_init", rc);
        wait_for_abort();
    }
    if (!strcmp(mode, "init")) {
        if (last)
            setenv("OVL_LATENESS_US", "0", 1);
        rc = ovl_init(MPI_COMM_WORLD, NULL);
        RETURNED("ovl_init", rc); /* every rank: the others are aborted with the job */
    }
    if (!strcmp(mode, "config")) {
        unsetenv("OVL_ERRORS"); /* the field alone */
        ovl_config_t c = { .field_mask = OVL_CONFIG_FIELD_ERRORS | OVL_CONFIG_FIELD_PROGRESS,
                           .report.errors = OVL_ERRORS_FATAL,
                           .progress.mode = (ovl_progress_mode_t)7 };
        rc = ovl_init(MPI_COMM_WORLD, last ? &c : NULL);
        RETURNED("ovl_init", rc);
    }

    if ((rc = ovl_init(MPI_COMM_WORLD, NULL)) != OVL_SUCCESS)
        RETURNED("ovl_init", rc);
    ovl_config_t got;
    if ((rc = ovl_config_get(&got)) != OVL_SUCCESS)
        RETURNED("ovl_config_get", rc);
    CHECK(got.report.errors == OVL_ERRORS_FATAL);
    int to = peer_of(th_rank), from = (th_rank + th_size - 1) % th_size;

    if (!strcmp(mode, "isend")) {
        if (last && (rc = ovl_isend(NULL, 4, MPI_INT, to, 0, &r)) != OVL_SUCCESS)
            RETURNED("ovl_isend", rc);
        wait_for_abort();
    }
    if (!strcmp(mode, "truncate") || !strcmp(mode, "eof") || !strcmp(mode, "marshal")) {
        /* rank 0 sends to the last rank, which receives badly */
        int out[8] = { 1, 2, 3, 4, 5, 6, 7, 8 }, in[4];
        if (th_rank == 0) {
            rc = mode[0] == 't' ? ovl_isend(out, 8, MPI_INT, th_size - 1, 0, &r)
                                : ovl_isend_stream(th_size - 1, 0, write_four, NULL, &r);
            if (rc != OVL_SUCCESS || (rc = ovl_wait(&r, OVL_STATUS_IGNORE)) != OVL_SUCCESS)
                RETURNED("sending", rc);
        }
        if (last) {
            rc = mode[0] == 't'   ? ovl_irecv(in, 4, MPI_INT, 0, 0, &r)
                 : mode[0] == 'e' ? ovl_irecv_stream(0, 0, unmarshal_past_end, NULL, &r)
                                  : ovl_irecv_stream(0, 0, unmarshal_own_code, NULL, &r);
            if (rc != OVL_SUCCESS || (rc = ovl_wait(&r, OVL_STATUS_IGNORE)) != OVL_SUCCESS)
                RETURNED("ovl_wait", rc);
            RETURNED("ovl_wait (no error at all)", OVL_SUCCESS);
        }
        wait_for_abort();
    }
    if (!strcmp(mode, "finalize")) {
        /* tags nobody sends on */
        ovl_request_t s;
        char buf[16];
        if ((rc = ovl_irecv(buf, 16, MPI_CHAR, from, 5, &r)) != OVL_SUCCESS ||
            (rc = ovl_continue(r, on_cancelled, NULL)) != OVL_SUCCESS ||
            (rc = ovl_irecv_stream(from, 6, unmarshal_cancelled, NULL, &s)) != OVL_SUCCESS ||
            (rc = ovl_request_free(&s)) != OVL_SUCCESS)
            RETURNED("posting", rc);
        if ((rc = ovl_finalize()) != OVL_SUCCESS)
            RETURNED("ovl_finalize", rc);
        CHECKF(atomic_load(&cancelled_seen) == 2, "%d of 2 saw OVL_ERR_CANCELLED",
               atomic_load(&cancelled_seen));
        return th_finish();
    }
    th_fail(__FILE__, __LINE__, mode, "unknown mode");
}

int main(int argc, char **argv)
{
    if (argc > 1)
        return child(argc, argv, argv[1]);
    th_init(&argc, &argv, "test_errors", NULL);
    check_return_mode();
    CHECK_OK(ovl_finalize());
    check_config();
    return th_finish();
}
