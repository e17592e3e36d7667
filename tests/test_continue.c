/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_continue: continuations.
 *  - a continuation runs exactly once, on sends and on receives, registered
 *    before completion (the receive's data is in place when it runs) and
 *    after completion (then never inside ovl_continue itself, and always
 *    before ovl_wait / ovl_test report completion);
 *  - a second ovl_continue on a request -> OVL_ERR_BUSY (before and after
 *    the first ran); NULL fn -> OVL_ERR_ARG; stale handle -> OVL_ERR_REQUEST;
 *  - continuations that post new operations: a token ring of N hops where
 *    each receive continuation posts the next receive and the next send
 *    (fire-and-forget); inside a continuation ovl_wait / ovl_waitall /
 *    ovl_finalize -> OVL_ERR_IN_CALLBACK while ovl_test / ovl_progress work;
 *  - ovl_request_free right after ovl_continue: the callback still runs;
 *  - ovl_continue_mpi on the user's own MPI_Irecv / MPI_Isend on
 *    MPI_COMM_WORLD: *mpireq becomes MPI_REQUEST_NULL, the callback gets the
 *    right MPI_Status, exactly once; invalid arguments -> OVL_ERR_ARG and
 *    the request is left alone;
 *  - callbacks never run concurrently with each other; with
 *    OVL_PROGRESS=inline they run on the calling thread;
 *  - OVL_PROGRESS=thread only: callbacks run while the application makes
 *    no ovl call at all, also right after an ovl_wait (the progress thread
 *    stands down during waits and must resume); ovl_continue racing the progress thread's
 *    completion of the same request (thousands of times, at random
 *    moments) still runs the callback before ovl_wait returns;
 *  - a pending delta receive is patient (not urgent) until hurried, and its
 *    continuation still runs without ovl calls (white-box counters).
 * Pairs: rank r works with r^1; the ring uses every rank.
 */
#include "harness.h"
#include "ovl_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int peer, thread_mode;
static pthread_t main_thread;
static atomic_int active;           /* callbacks running right now */
static atomic_int in_continue_call; /* main thread is inside ovl_continue */

/* Every callback brackets itself with these. */
static void cb_enter(void)
{
    int was = atomic_fetch_add(&active, 1);
    CHECKF(was == 0, "%d other callbacks running at the same time", was);
    if (atomic_load(&in_continue_call))
        CHECKF(!pthread_equal(pthread_self(), main_thread), "continuation ran inside ovl_continue");
    if (!thread_mode)
        CHECKF(pthread_equal(pthread_self(), main_thread),
               "inline progress ran a callback on another thread");
}

static void cb_leave(void)
{
    atomic_fetch_sub(&active, 1);
}

/* ovl_continue, flagging the call so callbacks can tell they are inside. */
static int continue_flagged(ovl_request_t r, ovl_continue_fn fn, void *arg)
{
    atomic_store(&in_continue_call, 1);
    int rc = ovl_continue(r, fn, arg);
    atomic_store(&in_continue_call, 0);
    return rc;
}

/* ---- a counting continuation -------------------------------------------- */

struct counted {
    atomic_int runs;
    ovl_status_t st;
    const void *buf; /* receives: data to verify at callback time */
    size_t n;
    uint64_t key;
    size_t bad;
};

static void counted_cb(const ovl_status_t *st, void *arg)
{
    cb_enter();
    struct counted *c = arg;
    c->st = *st;
    c->bad = c->buf ? th_verify(c->buf, c->n, c->key, 0) : TH_OK;
    atomic_fetch_add(&c->runs, 1);
    cb_leave();
}

static void never_cb(const ovl_status_t *st, void *arg)
{
    (void)st;
    (void)arg;
    th_fail(__FILE__, __LINE__, "never_cb", "a continuation whose registration failed ran");
}

static void sync_peer(void)
{
    CHECK_MPI(MPI_Sendrecv(NULL, 0, MPI_BYTE, peer, 999, NULL, 0, MPI_BYTE, peer, 999,
                           MPI_COMM_WORLD, MPI_STATUS_IGNORE));
}

static uint64_t key_of(int src, int tag)
{
    return (uint64_t)src << 20 | (uint64_t)tag;
}

static void before_completion(void)
{
    enum { SMALL = 1000, BIG = 1 << 20 };
    static char small_out[SMALL], small_in[SMALL], big_out[BIG], big_in[BIG];
    static struct counted c[4];
    for (int i = 0; i < 4; i++)
        c[i] = (struct counted){ .buf = NULL };
    c[0] = (struct counted){ .buf = small_in, .n = SMALL, .key = key_of(peer, 1) };
    c[3] = (struct counted){ .buf = big_in, .n = BIG, .key = key_of(peer, 2) };
    th_fill(small_out, SMALL, key_of(th_rank, 1), 0);
    th_fill(big_out, BIG, key_of(th_rank, 2), 0);
    ovl_request_t q[4];

    /* The peer sends tag 1 only after the sync: this receive is certainly
     * still pending when its continuation is registered. */
    CHECK_OK(ovl_irecv(small_in, SMALL, MPI_CHAR, peer, 1, &q[0]));
    CHECK(ovl__engine_continuations() == 0);
    CHECK_OK(continue_flagged(q[0], counted_cb, &c[0]));
    /* a waiting continuation sets the progress thread's pace (white-box) */
    CHECK(ovl__engine_continuations() == 1);
    EXPECT_ERR(ovl_continue(q[0], counted_cb, &c[0]), OVL_ERR_BUSY);
    EXPECT_ERR(ovl_continue(q[0], NULL, NULL), OVL_ERR_ARG);
    CHECK_OK(ovl_isend(big_out, BIG, MPI_CHAR, peer, 2, &q[1]));
    CHECK_OK(continue_flagged(q[1], counted_cb, &c[1]));
    for (int i = 0; i < 10; i++)
        th_progress();
    CHECK(atomic_load(&c[0].runs) == 0);
    sync_peer();
    CHECK_OK(ovl_isend(small_out, SMALL, MPI_CHAR, peer, 1, &q[2]));
    CHECK_OK(continue_flagged(q[2], counted_cb, &c[2]));
    CHECK_OK(ovl_irecv(big_in, BIG, MPI_CHAR, peer, 2, &q[3]));
    CHECK_OK(continue_flagged(q[3], counted_cb, &c[3]));

    ovl_status_t st;
    for (int i = 0; i < 4; i++) {
        CHECK_OK(ovl_wait(&q[i], &st));
        /* ovl_wait returns only after the continuation has run */
        CHECKF(atomic_load(&c[i].runs) == 1, "request %d: continuation ran %d times", i,
               atomic_load(&c[i].runs));
        CHECK(memcmp(&st, &c[i].st, sizeof st) == 0);
        CHECK(c[i].bad == TH_OK);
        CHECK(c[i].st.error == OVL_SUCCESS);
    }
    CHECK(c[0].st.source == peer && c[0].st.tag == 1 && c[0].st.bytes == SMALL);
    CHECK(c[1].st.source == th_rank && c[1].st.tag == 2 && c[1].st.bytes == BIG);
    CHECK(c[2].st.source == th_rank && c[2].st.tag == 1 && c[2].st.bytes == SMALL);
    CHECK(c[3].st.source == peer && c[3].st.tag == 2 && c[3].st.bytes == BIG);
    for (int i = 0; i < 20; i++)
        th_progress();
    for (int i = 0; i < 4; i++)
        CHECK(atomic_load(&c[i].runs) == 1);
    CHECKF(ovl__engine_continuations() == 0, "%d continuations still counted",
           ovl__engine_continuations());
    EXPECT_ERR(ovl_continue(q[0], counted_cb, &c[0]), OVL_ERR_REQUEST);
}

static unsigned long long completions(void)
{
    ovl_stats_t s;
    CHECK_OK(ovl_stats_get(&s, sizeof s));
    return (unsigned long long)s.completions;
}

/* Post one send and one receive with the peer and make sure the engine has
 * completed both (its completion counter says so) before returning. */
static void post_and_complete(ovl_request_t *s, ovl_request_t *r, char *out, char *in, int n,
                              int tag)
{
    th_fill(out, (size_t)n, key_of(th_rank, tag), 0);
    unsigned long long base = completions();
    CHECK_OK(ovl_irecv(in, n, MPI_CHAR, peer, tag, r));
    CHECK_OK(ovl_isend(out, n, MPI_CHAR, peer, tag, s));
    /* inline: drive it here; thread: the progress thread does it */
    TH_WAIT_UNTIL(completions() >= base + 2, 30, {
        if (!thread_mode)
            th_progress();
    });
}

static void after_completion(void)
{
    static char out[3][500], in[3][500];
    struct counted c[4];
    ovl_request_t s, r;
    ovl_status_t st;

    /* completed, then registered, then waited */
    post_and_complete(&s, &r, out[0], in[0], 500, 10);
    c[0] = (struct counted){ .buf = in[0], .n = 500, .key = key_of(peer, 10) };
    c[1] = (struct counted){ .buf = NULL };
    CHECK_OK(continue_flagged(r, counted_cb, &c[0]));
    CHECK_OK(continue_flagged(s, counted_cb, &c[1]));
    CHECK(ovl__engine_continuations() == 0); /* deferred: nothing to wait for */
    if (!thread_mode)                        /* nobody drives progress now: not run yet */
        CHECK(atomic_load(&c[0].runs) == 0 && atomic_load(&c[1].runs) == 0);
    EXPECT_ERR(ovl_continue(r, counted_cb, &c[0]), OVL_ERR_BUSY);
    CHECK_OK(ovl_wait(&r, &st));
    CHECK(atomic_load(&c[0].runs) == 1);
    CHECK(c[0].bad == TH_OK && c[0].st.source == peer && c[0].st.tag == 10);
    CHECK(st.source == peer && st.tag == 10 && st.bytes == 500 && st.error == OVL_SUCCESS);
    CHECK_OK(ovl_wait(&s, &st));
    CHECK(atomic_load(&c[1].runs) == 1);
    CHECK(c[1].st.bytes == 500 && c[1].st.source == th_rank && st.bytes == 500);

    /* completed, registered, the callback runs at the next progress step;
     * the request stays valid (and busy) until waited on */
    post_and_complete(&s, &r, out[1], in[1], 300, 11);
    c[2] = (struct counted){ .buf = in[1], .n = 300, .key = key_of(peer, 11) };
    CHECK_OK(continue_flagged(r, counted_cb, &c[2]));
    TH_WAIT_UNTIL(atomic_load(&c[2].runs) == 1, 30, th_progress());
    EXPECT_ERR(ovl_continue(r, counted_cb, &c[2]), OVL_ERR_BUSY);
    CHECK_OK(ovl_wait(&r, OVL_STATUS_IGNORE));
    CHECK_OK(ovl_wait(&s, OVL_STATUS_IGNORE));
    CHECK(atomic_load(&c[2].runs) == 1 && c[2].bad == TH_OK);

    /* completed, registered, then polled with ovl_test */
    post_and_complete(&s, &r, out[2], in[2], 200, 12);
    c[3] = (struct counted){ .buf = in[2], .n = 200, .key = key_of(peer, 12) };
    CHECK_OK(continue_flagged(r, counted_cb, &c[3]));
    int flag = 0;
    double t0 = th_now();
    while (!flag) {
        CHECK_OK(ovl_test(&r, &flag, &st));
        if (flag)
            CHECK(atomic_load(&c[3].runs) == 1); /* before ovl_test says done */
        CHECKF(th_now() - t0 < 30, "ovl_test never completed");
    }
    CHECK(st.tag == 12 && st.bytes == 200 && c[3].bad == TH_OK);
    CHECK_OK(ovl_wait(&s, OVL_STATUS_IGNORE));
}

/* ---- a ring of continuations ------------------------------------------- */

#define HOPS_PER_RANK 40
#define RING_TAG      50

struct token {
    uint32_t hop;
    uint32_t from;
    uint8_t pad[56];
};

static int ring_hops;
static struct token *tok_in, *tok_out;
static atomic_int ring_recvd, ring_sent, ring_in_cb_checked;

static void ring_send_cb(const ovl_status_t *st, void *arg)
{
    cb_enter();
    (void)arg;
    CHECK(st->error == OVL_SUCCESS && st->bytes == sizeof(struct token));
    atomic_fetch_add(&ring_sent, 1);
    cb_leave();
}

static void ring_recv_cb(const ovl_status_t *st, void *arg);

static void ring_post_recv(int hop)
{
    ovl_request_t r;
    int left = (th_rank + th_size - 1) % th_size;
    CHECK_OK(ovl_irecv(&tok_in[hop], sizeof(struct token), MPI_BYTE, left, RING_TAG, &r));
    CHECK_OK(ovl_continue(r, ring_recv_cb, &tok_in[hop]));
    CHECK_OK(ovl_request_free(&r));
}

static void ring_send(int hop)
{
    ovl_request_t s;
    struct token *t = &tok_out[hop];
    t->hop = (uint32_t)hop;
    t->from = (uint32_t)th_rank;
    th_fill(t->pad, sizeof t->pad, (uint64_t)hop, 0);
    CHECK_OK(ovl_isend(t, sizeof *t, MPI_BYTE, (th_rank + 1) % th_size, RING_TAG, &s));
    CHECK_OK(ovl_continue(s, ring_send_cb, NULL));
    CHECK_OK(ovl_request_free(&s));
}

static void ring_recv_cb(const ovl_status_t *st, void *arg)
{
    cb_enter();
    struct token *t = arg;
    int left = (th_rank + th_size - 1) % th_size;
    int hop = (int)(t - tok_in);
    CHECK(st->error == OVL_SUCCESS && st->source == left && st->tag == RING_TAG);
    CHECK(st->bytes == sizeof *t);
    CHECKF(t->hop == (uint32_t)hop && t->from == (uint32_t)left, "token %u from %u in slot %d",
           t->hop, t->from, hop);
    CHECK(th_verify(t->pad, sizeof t->pad, (uint64_t)hop, 0) == TH_OK);

    /* the next token this rank will see: post its receive first */
    if (hop + th_size <= ring_hops) {
        if (!atomic_exchange(&ring_in_cb_checked, 1)) {
            /* once: blocking calls are refused in here, the others work */
            ovl_request_t r, copy;
            int next = hop + th_size;
            CHECK_OK(ovl_irecv(&tok_in[next], sizeof *t, MPI_BYTE, left, RING_TAG, &r));
            copy = r;
            EXPECT_ERR(ovl_wait(&r, OVL_STATUS_IGNORE), OVL_ERR_IN_CALLBACK);
            CHECK(r == copy);
            EXPECT_ERR(ovl_waitall(1, &r, NULL), OVL_ERR_IN_CALLBACK);
            EXPECT_ERR(ovl_finalize(), OVL_ERR_IN_CALLBACK);
            CHECK(ovl_initialized());
            CHECK_OK(ovl_progress());
            int flag = 1;
            CHECK_OK(ovl_test(&r, &flag, OVL_STATUS_IGNORE));
            CHECK(flag == 0 && r == copy); /* the token is still on its way round */
            CHECK_OK(ovl_continue(r, ring_recv_cb, &tok_in[next]));
            CHECK_OK(ovl_request_free(&r));
        } else {
            ring_post_recv(hop + th_size);
        }
    }
    if (hop < ring_hops)
        ring_send(hop + 1);
    atomic_fetch_add(&ring_recvd, 1);
    cb_leave();
}

static void ring(void)
{
    ring_hops = HOPS_PER_RANK * th_size;
    tok_in = calloc((size_t)ring_hops + 1, sizeof *tok_in);
    tok_out = calloc((size_t)ring_hops + 1, sizeof *tok_out);
    CHECK(tok_in && tok_out);
    /* rank r first sees hop r (rank 0: hop size) */
    ring_post_recv(th_rank == 0 ? th_size : th_rank);
    CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
    if (th_rank == 0)
        ring_send(1);
    TH_WAIT_UNTIL(atomic_load(&ring_recvd) == HOPS_PER_RANK, 30, th_progress());
    int sends = HOPS_PER_RANK - (th_rank == ring_hops % th_size ? 1 : 0) + (th_rank == 0);
    TH_WAIT_UNTIL(atomic_load(&ring_sent) == sends, 30, th_progress());
    CHECK(atomic_load(&ring_in_cb_checked) == 1);
    CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
    for (int i = 0; i < 10; i++)
        th_progress();
    CHECK(atomic_load(&ring_recvd) == HOPS_PER_RANK && atomic_load(&ring_sent) == sends);
    free(tok_in);
    free(tok_out);
}

/* ---- fire and forget ------------------------------------------------------- */

static void fire_and_forget(void)
{
    enum { N = 5000 };
    static char out[N], in[N];
    static struct counted cs, cr;
    cs = (struct counted){ .buf = NULL };
    cr = (struct counted){ .buf = in, .n = N, .key = key_of(peer, 60) };
    th_fill(out, N, key_of(th_rank, 60), 0);
    ovl_request_t s, r;
    CHECK_OK(ovl_irecv(in, N, MPI_CHAR, peer, 60, &r));
    CHECK_OK(ovl_continue(r, counted_cb, &cr));
    CHECK_OK(ovl_request_free(&r));
    CHECK(r == OVL_REQUEST_NULL);
    CHECK_OK(ovl_isend(out, N, MPI_CHAR, peer, 60, &s));
    CHECK_OK(ovl_continue(s, counted_cb, &cs));
    CHECK_OK(ovl_request_free(&s));
    TH_WAIT_UNTIL(atomic_load(&cs.runs) == 1 && atomic_load(&cr.runs) == 1, 30, th_progress());
    CHECK(cr.bad == TH_OK && cr.st.source == peer && cr.st.bytes == N && cr.st.tag == 60);
    CHECK(cs.st.error == OVL_SUCCESS && cs.st.bytes == N);
}

/* ---- plain MPI requests ------------------------------------------------------ */

struct mpi_counted {
    atomic_int runs;
    MPI_Status st;
    int count;
    const void *buf;
    size_t n;
    uint64_t key;
    size_t bad;
};

static void mpi_cb(MPI_Status *st, void *arg)
{
    cb_enter();
    struct mpi_counted *m = arg;
    m->st = *st;
    MPI_Get_count(st, MPI_CHAR, &m->count);
    m->bad = m->buf ? th_verify(m->buf, m->n, m->key, 0) : TH_OK;
    atomic_fetch_add(&m->runs, 1);
    cb_leave();
}

static void mpi_never_cb(MPI_Status *st, void *arg)
{
    (void)st;
    (void)arg;
    th_fail(__FILE__, __LINE__, "mpi_never_cb", "a callback given to a failed call ran");
}

static void continue_mpi(void)
{
    enum { N = 100000 };
    static char out[N], in[N];
    static struct mpi_counted ms, mr;
    ms = (struct mpi_counted){ .buf = NULL };
    mr = (struct mpi_counted){ .buf = in, .n = N, .key = key_of(peer, 77) };
    th_fill(out, N, key_of(th_rank, 77), 0);

    /* invalid arguments leave the request alone */
    MPI_Request rq = MPI_REQUEST_NULL, sq = MPI_REQUEST_NULL;
    EXPECT_ERR(ovl_continue_mpi(NULL, mpi_never_cb, NULL), OVL_ERR_ARG);
    EXPECT_ERR(ovl_continue_mpi(&rq, mpi_never_cb, NULL), OVL_ERR_ARG);
    CHECK_MPI(MPI_Irecv(in, N, MPI_CHAR, peer, 77, MPI_COMM_WORLD, &rq));
    MPI_Request saved = rq;
    EXPECT_ERR(ovl_continue_mpi(&rq, NULL, NULL), OVL_ERR_ARG);
    CHECK(rq == saved);

    CHECK_OK(ovl_continue_mpi(&rq, mpi_cb, &mr));
    CHECK(rq == MPI_REQUEST_NULL);
    CHECK_MPI(MPI_Isend(out, N, MPI_CHAR, peer, 77, MPI_COMM_WORLD, &sq));
    CHECK_OK(ovl_continue_mpi(&sq, mpi_cb, &ms));
    CHECK(sq == MPI_REQUEST_NULL);
    TH_WAIT_UNTIL(atomic_load(&ms.runs) == 1 && atomic_load(&mr.runs) == 1, 30, th_progress());
    CHECK(mr.st.MPI_SOURCE == peer && mr.st.MPI_TAG == 77 && mr.count == N);
    CHECK(mr.bad == TH_OK);
    for (int i = 0; i < 20; i++)
        th_progress();
    CHECK(atomic_load(&ms.runs) == 1 && atomic_load(&mr.runs) == 1);
    CHECK(ovl__engine_continuations() == 0);
    ovl_stats_t s;
    CHECK_OK(ovl_stats_get(&s, sizeof s));
    CHECK(s.callbacks >= 2);
}

/* ---- progress thread: no ovl calls needed ------------------------------------ */

static void without_ovl_calls(void)
{
    enum { N = 200000 };
    static char out[N], in[N], mout[N], min[N];
    static struct counted cs, cr;
    static struct mpi_counted ms, mr;
    cs = (struct counted){ .buf = NULL };
    cr = (struct counted){ .buf = in, .n = N, .key = key_of(peer, 80) };
    ms = (struct mpi_counted){ .buf = NULL };
    mr = (struct mpi_counted){ .buf = min, .n = N, .key = key_of(peer, 81) };
    th_fill(out, N, key_of(th_rank, 80), 0);
    th_fill(mout, N, key_of(th_rank, 81), 0);
    ovl_request_t s, r;
    MPI_Request msq, mrq;
    CHECK_OK(ovl_irecv(in, N, MPI_CHAR, peer, 80, &r));
    CHECK_OK(ovl_continue(r, counted_cb, &cr));
    CHECK_OK(ovl_isend(out, N, MPI_CHAR, peer, 80, &s));
    CHECK_OK(ovl_continue(s, counted_cb, &cs));
    CHECK_MPI(MPI_Irecv(min, N, MPI_CHAR, peer, 81, MPI_COMM_WORLD, &mrq));
    CHECK_OK(ovl_continue_mpi(&mrq, mpi_cb, &mr));
    CHECK_MPI(MPI_Isend(mout, N, MPI_CHAR, peer, 81, MPI_COMM_WORLD, &msq));
    CHECK_OK(ovl_continue_mpi(&msq, mpi_cb, &ms));
    /* Spin without calling ovl: only the progress thread can run them. */
    double t0 = th_now();
    while (!(atomic_load(&cs.runs) && atomic_load(&cr.runs) && atomic_load(&ms.runs) &&
             atomic_load(&mr.runs))) {
        CHECKF(th_now() - t0 < 10, "callbacks did not run without ovl calls: %d %d %d %d",
               atomic_load(&cs.runs), atomic_load(&cr.runs), atomic_load(&ms.runs),
               atomic_load(&mr.runs));
    }
    CHECK(cr.bad == TH_OK && mr.bad == TH_OK && mr.count == N && mr.st.MPI_SOURCE == peer);
    CHECK_OK(ovl_wait(&r, OVL_STATUS_IGNORE));
    CHECK_OK(ovl_wait(&s, OVL_STATUS_IGNORE));
    CHECK(atomic_load(&cs.runs) == 1 && atomic_load(&cr.runs) == 1);
    CHECK(atomic_load(&ms.runs) == 1 && atomic_load(&mr.runs) == 1);
}

/* A thread that waits in ovl drives progress itself, and the progress
 * thread stands down meanwhile; once the wait is over it must take up
 * progress again with no further ovl call to wake it. The odd rank waits
 * ~50 ms for a message (the progress thread parks), then gets a second
 * message that the peer sends only after that wait has ended, and makes no
 * ovl call until its continuation has run. */
static void resumes_after_wait(void)
{
    enum { N = 100000 };
    static char a_out[N], a_in[N];
    static struct counted ca;
    int b = 0, token = 1;
    ovl_request_t ra, rb, sb, sa;
    if (th_rank % 2) {
        ca = (struct counted){ .buf = a_in, .n = N, .key = key_of(peer, 82) };
        CHECK_OK(ovl_irecv(a_in, N, MPI_CHAR, peer, 82, &ra));
        CHECK_OK(ovl_continue(ra, counted_cb, &ca));
        CHECK_OK(ovl_irecv(&b, 1, MPI_INT, peer, 83, &rb));
        CHECK_OK(ovl_wait(&rb, OVL_STATUS_IGNORE));
        CHECK(b == 83);
        CHECK_MPI(MPI_Send(&token, 1, MPI_INT, peer, 84, MPI_COMM_WORLD));
        double t0 = th_now();
        while (!atomic_load(&ca.runs))
            CHECKF(th_now() - t0 < 10,
                   "the progress thread did not resume after ovl_wait: a message that "
                   "arrived afterwards was not completed in %.0f s",
                   th_now() - t0);
        CHECK(ca.bad == TH_OK && ca.st.bytes == N && ca.st.source == peer);
        CHECK_OK(ovl_wait(&ra, OVL_STATUS_IGNORE));
        CHECK(atomic_load(&ca.runs) == 1);
    } else {
        th_fill(a_out, N, key_of(th_rank, 82), 0);
        b = 83;
        struct timespec ts = { 0, 50 * 1000 * 1000 };
        nanosleep(&ts, NULL);
        CHECK_OK(ovl_isend(&b, 1, MPI_INT, peer, 83, &sb));
        CHECK_OK(ovl_wait(&sb, OVL_STATUS_IGNORE));
        CHECK_MPI(MPI_Recv(&token, 1, MPI_INT, peer, 84, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        CHECK_OK(ovl_isend(a_out, N, MPI_CHAR, peer, 82, &sa));
        CHECK_OK(ovl_wait(&sa, OVL_STATUS_IGNORE));
    }
}

/* Large transfers both ways, completed by the progress thread alone while
 * the program never calls ovl: the thread paces its polls by the model's
 * predicted completion (the longest sleep, src/sched.c) and must still finish both, with
 * every byte right, and run each continuation once. */
static void paced_large_transfer(void)
{
    enum { N = 4 << 20, TAG = 86 };
    char *out = malloc(N), *in = malloc(N);
    CHECK(out && in);
    static struct counted cin, cout;
    cin = (struct counted){ .buf = in, .n = N, .key = key_of(peer, TAG) };
    cout = (struct counted){ .buf = NULL };
    th_fill(out, N, key_of(th_rank, TAG), 0);
    memset(in, 0, N);
    ovl_request_t rr, rs;
    sync_peer();
    CHECK_OK(ovl_irecv(in, N, MPI_CHAR, peer, TAG, &rr));
    CHECK_OK(ovl_continue(rr, counted_cb, &cin));
    CHECK_OK(ovl_isend(out, N, MPI_CHAR, peer, TAG, &rs));
    CHECK_OK(ovl_continue(rs, counted_cb, &cout));
    double t0 = th_now();
    while (!atomic_load(&cin.runs) || !atomic_load(&cout.runs)) {
        CHECKF(th_now() - t0 < 20, "4 MB each way not completed by the progress thread in %.0f s",
               th_now() - t0);
        struct timespec ts = { 0, 200 * 1000 };
        nanosleep(&ts, NULL);
    }
    CHECK(cin.bad == TH_OK && cin.st.bytes == N && cin.st.source == peer);
    CHECK(cout.st.error == OVL_SUCCESS);
    CHECK_OK(ovl_wait(&rr, OVL_STATUS_IGNORE));
    CHECK_OK(ovl_wait(&rs, OVL_STATUS_IGNORE));
    CHECK(atomic_load(&cin.runs) == 1 && atomic_load(&cout.runs) == 1);
    free(out);
    free(in);
}

/* A delta send between the two ranks of a pair while the receiver sits in a
 * plain MPI call, its receive posted with ovl_irecv and no continuation:
 * only its progress thread can match the message's header and post the
 * body's receive, so the sender's wait needs that thread. Where every peer
 * is on this node and the rank has no CPU to spare
 * (ovl__model_all_cpu_bound: the usual local run), the thread leaves such
 * work to the program's ovl calls as long as the program keeps making
 * them, and polls once a whole sleep passes without one: this checks that
 * it still does. */
static void thread_alone_on_node(void)
{
    enum { N = 4 << 20, TAG = 87 };
    unsigned char *buf = malloc(N);
    CHECK(buf);
    int token = 0;
    sync_peer();
    if (th_rank % 2 == 0) {
        memset(buf, 0, N);
        ovl_request_t r;
        CHECK_OK(ovl_irecv(buf, N, MPI_BYTE, peer, TAG, &r));
        /* no ovl call until the sender says its send completed */
        CHECK_MPI(MPI_Recv(&token, 1, MPI_INT, peer, TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        ovl_status_t st;
        CHECK_OK(ovl_wait(&r, &st));
        CHECK(st.bytes == N && st.source == peer);
        size_t bad = th_verify(buf, N, key_of(peer, TAG), 0);
        CHECKF(bad == TH_OK, "byte %zu of %d wrong", bad, N);
        if (th_rank == 0)
            printf("test_continue: the receiver's thread alone on the node (every peer's bytes "
                   "moved by the rank's own CPU: %s)\n",
                   ovl__model_all_cpu_bound() ? "yes" : "no");
    } else {
        ovl_request_t s;
        CHECK_OK(ovl_delta_send_begin(buf, N, MPI_BYTE, peer, TAG, NULL, &s));
        th_fill(buf, N, key_of(th_rank, TAG), 0);
        CHECK_OK(ovl_delta_send_end(s, NULL));
        int flag = 0;
        double t0 = th_now();
        while (!flag) {
            CHECK_OK(ovl_test(&s, &flag, OVL_STATUS_IGNORE));
            CHECKF(flag || th_now() - t0 < 20,
                   "a 4 MB delta send not taken in %.0f s by a receiver in MPI_Recv",
                   th_now() - t0);
            if (!flag) {
                struct timespec ts = { 0, 100 * 1000 };
                nanosleep(&ts, NULL);
            }
        }
        CHECK_MPI(MPI_Send(&token, 1, MPI_INT, peer, TAG, MPI_COMM_WORLD));
    }
    free(buf);
}

/* ---- ovl_continue racing the completion ------------------------------------- */

static atomic_int race_runs;

static void race_cb(const ovl_status_t *st, void *arg)
{
    cb_enter();
    (void)st;
    (void)arg;
    atomic_fetch_add(&race_runs, 1);
    cb_leave();
}

/* The progress thread completes receives while the main thread registers
 * their continuations, at random moments around the completion: whichever
 * wins, ovl_wait must return only after the callback. (A correct library
 * passes whatever the timing; a racy one fails now and then.) */
static void continue_races_completion(void)
{
    enum { N = 8000, TAG = 95 };
    ovl_config_t c = { .field_mask = OVL_CONFIG_FIELD_PROGRESS | OVL_CONFIG_FIELD_LATENESS_US,
                       .progress.mode = OVL_PROGRESS_THREAD,
                       .progress.lateness_us = 5 };
    CHECK_OK(ovl_finalize());
    CHECK_OK(ovl_init(MPI_COMM_WORLD, &c));
    if (th_rank % 2 == 0) {
        atomic_store(&race_runs, 0);
        for (int i = 0; i < N; i++) {
            int v = -1;
            ovl_request_t r;
            ovl_status_t st;
            CHECK_OK(ovl_irecv(&v, 1, MPI_INT, peer, TAG, &r));
            double t0 = th_now(), delay = (double)th_below(th_rng(), 20000) * 1e-9;
            while (th_now() - t0 < delay)
                ;
            CHECK_OK(ovl_continue(r, race_cb, NULL));
            CHECK_OK(ovl_wait(&r, &st));
            CHECKF(atomic_load(&race_runs) == i + 1,
                   "iteration %d: ovl_wait returned with %d continuations run", i,
                   atomic_load(&race_runs));
            CHECK(v == i && st.source == peer && st.bytes == sizeof v);
        }
    } else {
        for (int i = 0; i < N; i++) {
            ovl_request_t s;
            CHECK_OK(ovl_isend(&i, 1, MPI_INT, peer, TAG, &s));
            CHECK_OK(ovl_wait(&s, OVL_STATUS_IGNORE));
        }
    }
}

/* A delta receive waiting for its message is patient (the program's access
 * drives its matching): counted as posted but not urgent, until a
 * continuation or a forwarding send needs it at the usual pace
 * (ovl__match_hurry). The counts return to zero once it has matched, and
 * the data and the continuation arrive (with the progress thread: while
 * this rank makes no ovl call). White-box: match.c's counters. */
static void flagged_cb(const ovl_status_t *st, void *arg)
{
    cb_enter();
    CHECK(st->error == OVL_SUCCESS);
    atomic_store((atomic_int *)arg, 1);
    cb_leave();
}

static void patient_delta_recv(void)
{
    enum { N = 3 * 4096 + 100 };
    static char in[N], out[N], in2[N];
    for (int i = 0; i < N; i++)
        out[i] = (char)(i * 7 + th_rank);
    memset(in, 0, sizeof in);
    memset(in2, 0, sizeof in2);
    sync_peer();
    CHECK(ovl__match_posted() == 0 && ovl__match_urgent() == 0);
    ovl_request_t r, r2, s, s2;
    CHECK_OK(ovl_delta_recv(in2, N, MPI_BYTE, peer, 78, NULL, &r2)); /* stays patient */
    CHECK_OK(ovl_delta_recv(in, N, MPI_BYTE, peer, 77, NULL, &r));
    /* the peer sends only after sync_peer below */
    CHECKF(ovl__match_posted() == 2 && ovl__match_urgent() == 0, "posted %d, urgent %d",
           ovl__match_posted(), ovl__match_urgent());
    struct ovl__req *rq = NULL;
    CHECK_OK(ovl__req_lookup(r, &rq));
    ovl__match_hurry(&rq->match);
    CHECKF(ovl__match_posted() == 2 && ovl__match_urgent() == 1,
           "after hurry: posted %d, urgent %d", ovl__match_posted(), ovl__match_urgent());
    ovl__match_hurry(&rq->match); /* twice: counted once */
    CHECK(ovl__match_urgent() == 1);
    atomic_int got = 0;
    CHECK_OK(ovl_continue(r, flagged_cb, &got));
    sync_peer();
    CHECK_OK(ovl_delta_send_begin(out, N, MPI_BYTE, peer, 77, NULL, &s));
    CHECK_OK(ovl_delta_send_end(s, NULL));
    if (thread_mode) { /* no ovl call: the progress thread must deliver it */
        double t0 = MPI_Wtime();
        while (!atomic_load(&got) && MPI_Wtime() - t0 < 10)
            ;
        CHECK(atomic_load(&got));
    }
    CHECK_OK(ovl_delta_send_begin(out, N, MPI_BYTE, peer, 78, NULL, &s2));
    CHECK_OK(ovl_delta_send_end(s2, NULL));
    CHECK_OK(ovl_wait(&s, OVL_STATUS_IGNORE));
    CHECK_OK(ovl_wait(&s2, OVL_STATUS_IGNORE));
    CHECK_OK(ovl_wait(&r, OVL_STATUS_IGNORE));
    CHECK_OK(ovl_wait(&r2, OVL_STATUS_IGNORE));
    CHECK(atomic_load(&got));
    for (int i = 0; i < N; i++)
        if (in[i] != (char)(i * 7 + peer) || in2[i] != in[i]) {
            CHECKF(0, "byte %d: %d / %d, expected %d", i, in[i], in2[i], (char)(i * 7 + peer));
            break;
        }
    CHECKF(ovl__match_posted() == 0 && ovl__match_urgent() == 0, "at the end: posted %d, urgent %d",
           ovl__match_posted(), ovl__match_urgent());
}

int main(int argc, char **argv)
{
    th_init(&argc, &argv, "test_continue", NULL);
    CHECKF(th_size % 2 == 0, "needs an even number of ranks, got %d", th_size);
    peer = th_rank ^ 1;
    main_thread = pthread_self();
    ovl_config_t cfg;
    CHECK_OK(ovl_config_get(&cfg));
    thread_mode = cfg.progress.mode == OVL_PROGRESS_THREAD;

    EXPECT_ERR(ovl_continue(OVL_REQUEST_NULL, never_cb, NULL), OVL_ERR_REQUEST);
    before_completion();
    after_completion();
    ring();
    fire_and_forget();
    continue_mpi();
    patient_delta_recv();
    if (thread_mode) {
        without_ovl_calls();
        resumes_after_wait();
        paced_large_transfer();
        thread_alone_on_node();
        continue_races_completion();
    } else if (th_rank == 0)
        printf("test_continue: callbacks-without-ovl-calls check needs OVL_PROGRESS=thread: "
               "not applicable here\n");
    CHECK(atomic_load(&active) == 0);
    return th_finish();
}
