/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_finalize: ovl_finalize with operations still in flight.
 * Pairs: even rank E, odd rank O. Three sessions (init .. finalize):
 *  1. messages: E has a receive posted that O sends to only once E is
 *     already inside ovl_finalize (completes there, continuation sees the
 *     data); receives nobody will ever match, one by source and one
 *     OVL_ANY_SOURCE (freed) -> cancelled: continuation ran with
 *     OVL_ERR_CANCELLED, no hang; a plain MPI receive handed over with
 *     ovl_continue_mpi that nobody matches -> its callback runs once,
 *     cancelled; E sends 1 MB to O, which posts the receive late;
 *  2. streams: a multi-fragment stream that is still arriving when the
 *     receiver enters ovl_finalize completes intact; a stream receive
 *     nobody matches -> cancelled;
 *  3. handles held across finalize: OVL_ERR_NOT_INIT after it, and
 *     OVL_ERR_REQUEST once ovl is initialised again (even though new
 *     requests reuse the table);
 *  4. a continuation registered after its receive completed, request freed,
 *     then ovl_finalize at once: the continuation still runs.
 */
#include "harness.h"

#include <string.h>

#define BIG (1 << 20)

static int peer, even;

struct seen {
    atomic_int runs;
    ovl_status_t st;
    const void *buf;
    size_t n;
    uint64_t key;
    size_t bad;
};

static void seen_cb(const ovl_status_t *st, void *arg)
{
    struct seen *s = arg;
    s->st = *st;
    s->bad = s->buf && st->error == OVL_SUCCESS ? th_verify(s->buf, s->n, s->key, 0) : TH_OK;
    atomic_fetch_add(&s->runs, 1);
}

struct mpi_seen {
    atomic_int runs;
    int cancelled;
};

static void mpi_seen_cb(MPI_Status *st, void *arg)
{
    struct mpi_seen *m = arg;
    MPI_Test_cancelled(st, &m->cancelled);
    atomic_fetch_add(&m->runs, 1);
}

static ovl_request_t held[4]; /* handles kept across finalize */

static void session_messages(void)
{
    static char big_in[BIG], big_out[BIG], late_out[BIG], late_in[BIG], never[64];
    static struct seen a1, a2, a3, a7, o1;
    static struct mpi_seen a6;
    static MPI_Request mreq;
    CHECK_OK(ovl_init(MPI_COMM_WORLD, NULL));
    if (even) {
        a1 = (struct seen){ .buf = big_in, .n = BIG, .key = 0xa1 };
        a2 = (struct seen){ .buf = NULL };
        a3 = (struct seen){ .buf = NULL };
        a7 = (struct seen){ .buf = NULL };
        a6 = (struct mpi_seen){ .cancelled = 0 };
        ovl_request_t r3, s7;
        CHECK_OK(ovl_irecv(big_in, BIG, MPI_CHAR, peer, 1, &held[0]));
        CHECK_OK(ovl_continue(held[0], seen_cb, &a1));
        CHECK_OK(ovl_irecv(never, sizeof never, MPI_CHAR, peer, 2, &held[1]));
        CHECK_OK(ovl_continue(held[1], seen_cb, &a2));
        CHECK_OK(ovl_irecv(never, sizeof never, MPI_CHAR, OVL_ANY_SOURCE, 3, &r3));
        CHECK_OK(ovl_continue(r3, seen_cb, &a3));
        CHECK_OK(ovl_request_free(&r3));
        CHECK_MPI(MPI_Irecv(never, 1, MPI_CHAR, peer, 6, MPI_COMM_WORLD, &mreq));
        CHECK_OK(ovl_continue_mpi(&mreq, mpi_seen_cb, &a6));
        th_fill(late_out, BIG, 0xa7, 0);
        CHECK_OK(ovl_isend(late_out, BIG, MPI_CHAR, peer, 7, &s7));
        CHECK_OK(ovl_continue(s7, seen_cb, &a7));
        CHECK_OK(ovl_request_free(&s7));
        CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
        CHECK_OK(ovl_finalize());
        /* everything completed inside ovl_finalize, continuations included */
        CHECK(atomic_load(&a1.runs) == 1 && a1.st.error == OVL_SUCCESS && a1.bad == TH_OK);
        CHECK(a1.st.source == peer && a1.st.tag == 1 && a1.st.bytes == BIG);
        CHECKF(atomic_load(&a2.runs) == 1 && a2.st.error == OVL_ERR_CANCELLED,
               "unmatched receive: %d runs, %s", atomic_load(&a2.runs), th_code_name(a2.st.error));
        CHECK(atomic_load(&a3.runs) == 1 && a3.st.error == OVL_ERR_CANCELLED);
        CHECK(atomic_load(&a6.runs) == 1 && a6.cancelled);
        CHECK(atomic_load(&a7.runs) == 1 && a7.st.error == OVL_SUCCESS);
        CHECK(a7.st.bytes == BIG);
    } else {
        o1 = (struct seen){ .buf = NULL };
        th_fill(big_out, BIG, 0xa1, 0);
        CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
        th_sleep_ms(100); /* E is inside ovl_finalize by now (or soon) */
        ovl_request_t s1, r7;
        CHECK_OK(ovl_isend(big_out, BIG, MPI_CHAR, peer, 1, &s1));
        CHECK_OK(ovl_continue(s1, seen_cb, &o1));
        CHECK_OK(ovl_request_free(&s1));
        CHECK_OK(ovl_irecv(late_in, BIG, MPI_CHAR, peer, 7, &r7));
        ovl_status_t st;
        CHECK_OK(ovl_wait(&r7, &st));
        CHECK(st.bytes == BIG && th_verify(late_in, BIG, 0xa7, 0) == TH_OK);
        CHECK_OK(ovl_finalize());
        CHECK(atomic_load(&o1.runs) == 1 && o1.st.error == OVL_SUCCESS && o1.st.bytes == BIG);
    }
}

/* ---- streams ----------------------------------------------------------------- */

#define STREAM_BYTES ((size_t)3 << 20)

struct sctx {
    size_t got;
    int rc;
};

static int stream_out(ovl_stream_t s, void *arg)
{
    (void)arg;
    static uint8_t chunk[8192];
    for (size_t off = 0; off < STREAM_BYTES; off += sizeof chunk) {
        th_fill(chunk, sizeof chunk, 0x5e, off);
        CHECK_OK(ovl_stream_write(s, chunk, sizeof chunk));
    }
    return OVL_SUCCESS;
}

static int stream_in(ovl_stream_t s, void *arg)
{
    struct sctx *c = arg;
    uint8_t chunk[4096];
    for (size_t off = 0; off < STREAM_BYTES; off += sizeof chunk) {
        c->rc = ovl_stream_read(s, chunk, sizeof chunk);
        if (c->rc != OVL_SUCCESS)
            return c->rc;
        CHECK(th_verify(chunk, sizeof chunk, 0x5e, off) == TH_OK);
        c->got += sizeof chunk;
    }
    return OVL_SUCCESS;
}

static int stream_never(ovl_stream_t s, void *arg)
{
    struct sctx *c = arg;
    uint8_t b;
    c->rc = ovl_stream_read(s, &b, 1);
    return c->rc;
}

static void session_streams(void)
{
    static struct seen e4, e5, o4;
    static struct sctx in4, in5;
    CHECK_OK(ovl_init(MPI_COMM_WORLD, NULL));
    if (even) {
        e4 = (struct seen){ .buf = NULL };
        e5 = (struct seen){ .buf = NULL };
        in4 = (struct sctx){ .got = 0 };
        in5 = (struct sctx){ .got = 0 };
        CHECK_OK(ovl_irecv_stream(peer, 4, stream_in, &in4, &held[2]));
        CHECK_OK(ovl_continue(held[2], seen_cb, &e4));
        CHECK_OK(ovl_irecv_stream(OVL_ANY_SOURCE, 5, stream_never, &in5, &held[3]));
        CHECK_OK(ovl_continue(held[3], seen_cb, &e5));
        CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
        CHECK_OK(ovl_finalize());
        CHECKF(atomic_load(&e4.runs) == 1 && e4.st.error == OVL_SUCCESS, "late stream: %d runs, %s",
               atomic_load(&e4.runs), th_code_name(e4.st.error));
        CHECK(in4.got == STREAM_BYTES && e4.st.bytes == STREAM_BYTES && in4.rc == OVL_SUCCESS);
        CHECKF(atomic_load(&e5.runs) == 1 && e5.st.error == OVL_ERR_CANCELLED,
               "unmatched stream: %d runs, %s", atomic_load(&e5.runs), th_code_name(e5.st.error));
        CHECK(in5.rc == OVL_ERR_CANCELLED);
    } else {
        o4 = (struct seen){ .buf = NULL };
        CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
        th_sleep_ms(100);
        ovl_request_t s4;
        CHECK_OK(ovl_isend_stream(peer, 4, stream_out, NULL, &s4));
        CHECK_OK(ovl_continue(s4, seen_cb, &o4));
        /* not waited for: ovl_finalize completes it */
        CHECK_OK(ovl_finalize());
        CHECK(atomic_load(&o4.runs) == 1 && o4.st.error == OVL_SUCCESS);
        CHECK(o4.st.bytes == STREAM_BYTES);
    }
}

static void session_stale(void)
{
    ovl_status_t st;
    for (int i = 0; i < 4; i++)
        if (held[i] != OVL_REQUEST_NULL)
            EXPECT_ERR(ovl_wait(&held[i], &st), OVL_ERR_NOT_INIT);
    CHECK_OK(ovl_init(MPI_COMM_WORLD, NULL));
    /* new requests take the table's slots again */
    char out[16], in[16];
    ovl_request_t q[8];
    th_fill(out, sizeof out, 3, 0);
    for (int i = 0; i < 4; i++) {
        CHECK_OK(ovl_irecv(in, sizeof in, MPI_CHAR, peer, 50 + i, &q[i]));
        CHECK_OK(ovl_isend(out, sizeof out, MPI_CHAR, peer, 50 + i, &q[4 + i]));
    }
    for (int i = 0; i < 4; i++) {
        if (held[i] == OVL_REQUEST_NULL)
            continue;
        ovl_request_t h = held[i];
        EXPECT_ERR(ovl_wait(&h, &st), OVL_ERR_REQUEST);
        EXPECT_ERR(ovl_request_free(&h), OVL_ERR_REQUEST);
    }
    CHECK_OK(ovl_waitall(8, q, NULL));
    CHECK(th_verify(in, sizeof in, 3, 0) == TH_OK);
    CHECK_OK(ovl_finalize());
}

static unsigned long long completions(void)
{
    ovl_stats_t st;
    CHECK_OK(ovl_stats_get(&st, sizeof st));
    return (unsigned long long)st.completions;
}

/* A continuation registered after its operation completed runs at the next
 * progress step; ovl_finalize must still run it if no step came between. */
static void session_deferred(void)
{
    static struct seen d;
    static char buf[100], out[100];
    d = (struct seen){ .buf = buf, .n = sizeof buf, .key = 0xdef };
    CHECK_OK(ovl_init(MPI_COMM_WORLD, NULL));
    ovl_request_t r, s;
    th_fill(out, sizeof out, 0xdef, 0);
    CHECK_OK(ovl_irecv(buf, sizeof buf, MPI_CHAR, peer, 60, &r));
    CHECK_OK(ovl_isend(out, sizeof out, MPI_CHAR, peer, 60, &s));
    CHECK_OK(ovl_wait(&s, OVL_STATUS_IGNORE));
    /* let the engine complete the receive (its counter says when) */
    TH_WAIT_UNTIL(completions() >= 2, 30, th_progress());
    /* both ranks ready: ovl_finalize's own exchange may need no progress */
    CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
    CHECK_OK(ovl_continue(r, seen_cb, &d));
    CHECK_OK(ovl_request_free(&r));
    CHECK_OK(ovl_finalize());
    CHECKF(atomic_load(&d.runs) == 1, "continuation registered after completion ran %d times",
           atomic_load(&d.runs));
    CHECK(d.st.error == OVL_SUCCESS && d.bad == TH_OK && d.st.bytes == sizeof buf);
}

int main(int argc, char **argv)
{
    th_init_mpi(&argc, &argv, "test_finalize", MPI_THREAD_MULTIPLE);
    CHECKF(th_size % 2 == 0, "needs an even number of ranks, got %d", th_size);
    peer = th_rank ^ 1;
    even = th_rank % 2 == 0;
    session_messages();
    session_streams();
    session_stale();
    session_deferred();
    return th_finish();
}
