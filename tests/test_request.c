/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * test_request: argument checking and the life of request handles.
 *  - ovl_isend / ovl_irecv reject NULL request pointers, negative counts,
 *    NULL buffers with count > 0, MPI_DATATYPE_NULL, ranks -5 and size,
 *    tags -1 and tag_ub + 1; sends reject OVL_ANY_SOURCE / OVL_ANY_TAG; a
 *    failed call leaves *req untouched; tag_ub itself and count 0 with a
 *    NULL buffer work;
 *  - ovl_wait / ovl_test / ovl_waitall / ovl_request_free with NULL
 *    pointers -> OVL_ERR_ARG; waiting on OVL_REQUEST_NULL succeeds with an
 *    empty status;
 *  - stale copies of handles: double wait, double free, free then wait,
 *    wait on a copy after the slot was reused -> OVL_ERR_REQUEST, and the
 *    request now in that slot is unaffected; forged handles ->
 *    OVL_ERR_REQUEST without crashing;
 *  - ovl_waitall with a stale handle and OVL_REQUEST_NULL among valid
 *    sends and receives (and a truncated receive), as MPI_Waitall: every
 *    valid one completes with its data and is released (handle
 *    OVL_REQUEST_NULL, copies refused), the stale one's status says
 *    OVL_ERR_REQUEST (its handle left as it was), the truncated one's
 *    OVL_ERR_TRUNCATE, and the call returns OVL_ERR_IN_STATUS; the same
 *    without statuses; from a callback it refuses a pending request
 *    before touching any (test_continue);
 *  - ovl_request_free of a pending receive: the message still lands in the
 *    buffer and the receive's continuation still runs (and with no
 *    continuation, the data still arrives); its handle is then refused by
 *    every call, ovl_continue included;
 *  - two threads releasing one request at once (two ovl_wait on a pending
 *    receive, ovl_wait against ovl_request_free, ovl_test against either,
 *    around the completion): exactly one call releases it, the other gets
 *    OVL_ERR_REQUEST, the continuation runs once.
 * Pairs: rank r works with r^1.
 */
#include "harness.h"

#include <limits.h>
#include <pthread.h>
#include <string.h>

static int peer;

static void cb_never(const ovl_status_t *st, void *arg)
{
    (void)st;
    (void)arg;
    th_fail(__FILE__, __LINE__, "cb_never", "a continuation given to a failed call ran");
}

static void expect_empty(const ovl_status_t *st)
{
    CHECK(st->source == MPI_PROC_NULL);
    CHECK(st->tag == MPI_ANY_TAG);
    CHECK(st->bytes == 0);
    CHECK(st->error == OVL_SUCCESS);
}

#define SENTINEL ((ovl_request_t)(uintptr_t)0x5e5e5e5eull)

/* The call fails with `code` and does not write *req. */
#define EXPECT_REJECTED(call, code) \
    do {                            \
        r = SENTINEL;               \
        EXPECT_ERR(call, code);     \
        CHECK(r == SENTINEL);       \
    } while (0)

static void check_post_args(int tag_ub)
{
    char buf[16] = { 0 };
    ovl_request_t r;
    for (int send = 0; send < 2; send++) {
        /* the same checks for both directions */
#define POST(b, n, dt, p, t, rq) \
    (send ? ovl_isend((b), (n), (dt), (p), (t), (rq)) : ovl_irecv((b), (n), (dt), (p), (t), (rq)))
        EXPECT_ERR(POST(buf, 1, MPI_CHAR, peer, 0, NULL), OVL_ERR_ARG);
        EXPECT_REJECTED(POST(buf, -1, MPI_CHAR, peer, 0, &r), OVL_ERR_ARG);
        EXPECT_REJECTED(POST(buf, INT_MIN, MPI_CHAR, peer, 0, &r), OVL_ERR_ARG);
        EXPECT_REJECTED(POST(NULL, 1, MPI_CHAR, peer, 0, &r), OVL_ERR_ARG);
        EXPECT_REJECTED(POST(buf, 1, MPI_DATATYPE_NULL, peer, 0, &r), OVL_ERR_ARG);
        EXPECT_REJECTED(POST(buf, 1, MPI_CHAR, -5, 0, &r), OVL_ERR_RANK);
        EXPECT_REJECTED(POST(buf, 1, MPI_CHAR, th_size, 0, &r), OVL_ERR_RANK);
        EXPECT_REJECTED(POST(buf, 1, MPI_CHAR, INT_MAX, 0, &r), OVL_ERR_RANK);
        /* MPI_PROC_NULL is a valid peer (test_message proc_null) */
        /* -1 is OVL_ANY_TAG in some MPIs: a valid receive tag there */
        if (send || OVL_ANY_TAG != -1)
            EXPECT_REJECTED(POST(buf, 1, MPI_CHAR, peer, -1, &r), OVL_ERR_TAG);
        if (OVL_ANY_TAG != -2)
            EXPECT_REJECTED(POST(buf, 1, MPI_CHAR, peer, -2, &r), OVL_ERR_TAG);
        EXPECT_REJECTED(POST(buf, 1, MPI_CHAR, peer, -12345, &r), OVL_ERR_TAG);
        if (tag_ub < INT_MAX)
            EXPECT_REJECTED(POST(buf, 1, MPI_CHAR, peer, tag_ub + 1, &r), OVL_ERR_TAG);
        CHECKF(strstr(ovl_error_detail(), send ? "ovl_isend" : "ovl_irecv") != NULL,
               "detail \"%s\"", ovl_error_detail());
#undef POST
    }
    /* wildcards are for receives only */
    EXPECT_REJECTED(ovl_isend(buf, 1, MPI_CHAR, OVL_ANY_SOURCE, 0, &r), OVL_ERR_RANK);
    EXPECT_REJECTED(ovl_isend(buf, 1, MPI_CHAR, peer, OVL_ANY_TAG, &r), OVL_ERR_TAG);

    /* Valid edge cases: tag_ub, count 0 with a NULL buffer. */
    char out[16], in[16];
    th_fill(out, sizeof out, 11, 0);
    ovl_request_t q[4];
    ovl_status_t st[4];
    CHECK_OK(ovl_irecv(in, sizeof in, MPI_CHAR, peer, tag_ub, &q[0]));
    CHECK_OK(ovl_irecv(NULL, 0, MPI_CHAR, peer, 0, &q[1]));
    CHECK_OK(ovl_isend(out, sizeof out, MPI_CHAR, peer, tag_ub, &q[2]));
    CHECK_OK(ovl_isend(NULL, 0, MPI_INT, peer, 0, &q[3]));
    CHECK_OK(ovl_waitall(4, q, st));
    CHECK(st[0].tag == tag_ub && st[0].bytes == sizeof in && st[0].source == peer);
    CHECK(th_verify(in, sizeof in, 11, 0) == TH_OK);
    CHECK(st[1].bytes == 0 && st[1].tag == 0 && st[1].source == peer);
    CHECK(st[2].bytes == sizeof out && st[2].error == OVL_SUCCESS);
    CHECK(st[3].bytes == 0 && st[3].error == OVL_SUCCESS);
    for (int i = 0; i < 4; i++)
        CHECK(q[i] == OVL_REQUEST_NULL);
}

static void check_null_args(void)
{
    ovl_request_t r = OVL_REQUEST_NULL;
    ovl_status_t st;
    int flag = 5;
    EXPECT_ERR(ovl_wait(NULL, &st), OVL_ERR_ARG);
    EXPECT_ERR(ovl_wait(NULL, OVL_STATUS_IGNORE), OVL_ERR_ARG);
    EXPECT_ERR(ovl_test(NULL, &flag, &st), OVL_ERR_ARG);
    EXPECT_ERR(ovl_test(&r, NULL, &st), OVL_ERR_ARG);
    EXPECT_ERR(ovl_waitall(-1, &r, NULL), OVL_ERR_ARG);
    EXPECT_ERR(ovl_waitall(2, NULL, NULL), OVL_ERR_ARG);
    CHECK_OK(ovl_waitall(0, NULL, NULL));
    EXPECT_ERR(ovl_request_free(NULL), OVL_ERR_ARG);
    EXPECT_ERR(ovl_request_free(&r), OVL_ERR_REQUEST);

    /* OVL_REQUEST_NULL completes at once with an empty status. */
    st = (ovl_status_t){ .source = 3, .tag = 3, .bytes = 3, .error = 3 };
    CHECK_OK(ovl_wait(&r, &st));
    expect_empty(&st);
    CHECK_OK(ovl_wait(&r, OVL_STATUS_IGNORE));
    st = (ovl_status_t){ .source = 3, .tag = 3, .bytes = 3, .error = 3 };
    flag = 0;
    CHECK_OK(ovl_test(&r, &flag, &st));
    CHECK(flag == 1);
    expect_empty(&st);
    ovl_request_t rs[3] = { OVL_REQUEST_NULL, OVL_REQUEST_NULL, OVL_REQUEST_NULL };
    ovl_status_t sts[3];
    for (int i = 0; i < 3; i++)
        sts[i] = (ovl_status_t){ .source = 3, .tag = 3, .bytes = 3, .error = 3 };
    CHECK_OK(ovl_waitall(3, rs, sts));
    for (int i = 0; i < 3; i++)
        expect_empty(&sts[i]);
    CHECK_OK(ovl_waitall(3, rs, OVL_STATUS_IGNORE));
}

/* One message each way with the peer, tag `tag`; returns both requests. */
static void exchange_post(ovl_request_t *send, ovl_request_t *recv, char *out, char *in, size_t n,
                          int tag)
{
    th_fill(out, n, (uint64_t)th_rank << 16 | (uint64_t)tag, 0);
    CHECK_OK(ovl_irecv(in, (int)n, MPI_CHAR, peer, tag, recv));
    CHECK_OK(ovl_isend(out, (int)n, MPI_CHAR, peer, tag, send));
}

static void check_in(const char *in, size_t n, int tag)
{
    CHECK(th_verify(in, n, (uint64_t)peer << 16 | (uint64_t)tag, 0) == TH_OK);
}

static void check_stale_handles(void)
{
    char out[64], in[64];
    ovl_request_t s, rv, copy, copy2;
    ovl_status_t st;
    int flag = 0;

    /* double wait through a copy */
    exchange_post(&s, &rv, out, in, sizeof in, 20);
    copy = s;
    CHECK_OK(ovl_wait(&s, &st));
    CHECK(s == OVL_REQUEST_NULL);
    CHECK(st.bytes == sizeof out && st.tag == 20 && st.error == OVL_SUCCESS);
    EXPECT_ERR(ovl_wait(&copy, &st), OVL_ERR_REQUEST);
    CHECK(copy != OVL_REQUEST_NULL);
    EXPECT_ERR(ovl_test(&copy, &flag, &st), OVL_ERR_REQUEST);
    EXPECT_ERR(ovl_continue(copy, cb_never, NULL), OVL_ERR_REQUEST);
    copy2 = rv;
    CHECK_OK(ovl_wait(&rv, &st));
    check_in(in, sizeof in, 20);
    EXPECT_ERR(ovl_wait(&copy2, &st), OVL_ERR_REQUEST);
    EXPECT_ERR(ovl_request_free(&copy2), OVL_ERR_REQUEST);

    /* The stale slot gets reused: the old copy still must not reach the new
     * request, which completes normally. */
    exchange_post(&s, &rv, out, in, sizeof in, 21);
    EXPECT_ERR(ovl_wait(&copy, &st), OVL_ERR_REQUEST);
    EXPECT_ERR(ovl_wait(&copy2, &st), OVL_ERR_REQUEST);
    EXPECT_ERR(ovl_request_free(&copy), OVL_ERR_REQUEST);
    ovl_request_t both[2] = { s, rv };
    CHECK_OK(ovl_waitall(2, both, NULL));
    check_in(in, sizeof in, 21);

    /* double free via copy; free then wait on the copy */
    exchange_post(&s, &rv, out, in, sizeof in, 22);
    copy = s;
    CHECK_OK(ovl_request_free(&s));
    CHECK(s == OVL_REQUEST_NULL);
    EXPECT_ERR(ovl_request_free(&copy), OVL_ERR_REQUEST);
    EXPECT_ERR(ovl_wait(&copy, &st), OVL_ERR_REQUEST);
    EXPECT_ERR(ovl_test(&copy, &flag, &st), OVL_ERR_REQUEST);
    CHECK_OK(ovl_wait(&rv, &st));
    check_in(in, sizeof in, 22);
    /* the freed send may still be in flight; a freed, completed one too */
    EXPECT_ERR(ovl_wait(&copy, &st), OVL_ERR_REQUEST);

    /* A receive freed while pending (the peer sends only after the sync
     * below): its handle is gone for every call, ovl_continue included,
     * though the engine still holds the request. */
    static char freed_in[16];
    ovl_request_t fr;
    CHECK_OK(ovl_irecv(freed_in, sizeof freed_in, MPI_CHAR, peer, 23, &fr));
    copy = fr;
    CHECK_OK(ovl_request_free(&fr));
    EXPECT_ERR(ovl_continue(copy, cb_never, NULL), OVL_ERR_REQUEST);
    CHECK(strstr(ovl_error_detail(), "ovl_continue") != NULL);
    EXPECT_ERR(ovl_test(&copy, &flag, &st), OVL_ERR_REQUEST);
    EXPECT_ERR(ovl_request_free(&copy), OVL_ERR_REQUEST);
    CHECK_MPI(MPI_Sendrecv(NULL, 0, MPI_CHAR, peer, 3, NULL, 0, MPI_CHAR, peer, 3, MPI_COMM_WORLD,
                           MPI_STATUS_IGNORE));
    th_fill(out, 16, 0x23, 0);
    CHECK_OK(ovl_isend(out, 16, MPI_CHAR, peer, 23, &s));
    CHECK_OK(ovl_wait(&s, &st));
    EXPECT_ERR(ovl_wait(&copy, &st), OVL_ERR_REQUEST);

    /* forged handles */
    const uintptr_t forged[] = { 0x12345u,
                                 1u,
                                 0xffffffffu,
                                 (uintptr_t)0xdeadbeef00000001ull,
                                 (uintptr_t)0x7fffffff00000400ull,
                                 ~(uintptr_t)0 };
    for (size_t i = 0; i < sizeof forged / sizeof forged[0]; i++) {
        ovl_request_t f = (ovl_request_t)forged[i];
        EXPECT_ERR(ovl_wait(&f, &st), OVL_ERR_REQUEST);
        CHECK(f == (ovl_request_t)forged[i]);
        EXPECT_ERR(ovl_test(&f, &flag, &st), OVL_ERR_REQUEST);
        EXPECT_ERR(ovl_request_free(&f), OVL_ERR_REQUEST);
        EXPECT_ERR(ovl_continue(f, cb_never, NULL), OVL_ERR_REQUEST);
        ovl_request_t arr[2] = { OVL_REQUEST_NULL, f };
        EXPECT_ERR(ovl_waitall(2, arr, NULL), OVL_ERR_IN_STATUS);
        CHECK(arr[0] == OVL_REQUEST_NULL && arr[1] == f);
    }
    CHECK(strstr(ovl_error_detail(), "ovl_waitall") != NULL);
}

static void check_waitall_stale(void)
{
    enum { N = 3, STALE = 2, NUL = 3, TRUNC = 2 * N + 2, BIG = 2 * N + 3, M = 2 * N + 4 };
    char out[N][100], in[N][100], big[16], small[8];
    ovl_request_t q[M], copy[M];
    ovl_status_t st[M];
    /* a released handle to put among the valid ones */
    ovl_request_t stale, stale_copy;
    char b1[8], b2[8];
    exchange_post(&stale, &q[0], b1, b2, sizeof b1, 29);
    stale_copy = stale;
    CHECK_OK(ovl_wait(&stale, OVL_STATUS_IGNORE));
    CHECK_OK(ovl_wait(&q[0], OVL_STATUS_IGNORE));

    /* pairs at 0-1, 4-5, 6-7: the stale handle and OVL_REQUEST_NULL between
     * them, then a receive the peer's 16 bytes truncate */
    static const int at[N] = { 0, 4, 6 };
    for (int i = 0; i < N; i++)
        exchange_post(&q[at[i]], &q[at[i] + 1], out[i], in[i], sizeof in[i], 30 + i);
    q[STALE] = stale_copy;
    q[NUL] = OVL_REQUEST_NULL;
    th_fill(big, sizeof big, 39, 0);
    memset(small, 0x33, sizeof small);
    CHECK_OK(ovl_irecv(small, sizeof small, MPI_CHAR, peer, 39, &q[TRUNC]));
    CHECK_OK(ovl_isend(big, sizeof big, MPI_CHAR, peer, 39, &q[BIG]));
    memcpy(copy, q, sizeof q);
    for (int i = 0; i < M; i++)
        st[i] = (ovl_status_t){ .source = 9, .tag = 9, .bytes = 9, .error = 9 };
    EXPECT_ERR(ovl_waitall(M, q, st), OVL_ERR_IN_STATUS);
    CHECKF(strstr(ovl_error_detail(), "ovl_waitall") != NULL, "detail \"%s\"", ovl_error_detail());
    for (int i = 0; i < N; i++) {
        int s = at[i], r = at[i] + 1;
        CHECK(q[s] == OVL_REQUEST_NULL && q[r] == OVL_REQUEST_NULL);
        CHECK(st[s].error == OVL_SUCCESS && st[s].bytes == sizeof out[i]);
        CHECK(st[r].error == OVL_SUCCESS && st[r].source == peer && st[r].tag == 30 + i);
        CHECK(st[r].bytes == sizeof in[i]);
        check_in(in[i], sizeof in[i], 30 + i);
    }
    /* the stale handle: not this call's to release, its status says why */
    CHECK(q[STALE] == stale_copy);
    CHECK(st[STALE].error == OVL_ERR_REQUEST);
    CHECK(q[NUL] == OVL_REQUEST_NULL);
    expect_empty(&st[NUL]);
    CHECK(st[NUL].error == OVL_SUCCESS);
    CHECK(q[TRUNC] == OVL_REQUEST_NULL && q[BIG] == OVL_REQUEST_NULL);
    CHECK(st[TRUNC].error == OVL_ERR_TRUNCATE && st[TRUNC].source == peer && st[TRUNC].tag == 39);
    CHECK(st[BIG].error == OVL_SUCCESS && st[BIG].bytes == sizeof big);
    /* every valid one was released: its old handle is refused */
    for (int i = 0; i < M; i++)
        if (i != STALE && i != NUL)
            EXPECT_ERR(ovl_request_free(&copy[i]), OVL_ERR_REQUEST);
    /* again: only the stale handle is left */
    EXPECT_ERR(ovl_waitall(M, q, st), OVL_ERR_IN_STATUS);
    CHECK(st[STALE].error == OVL_ERR_REQUEST);
    for (int i = 0; i < M; i++)
        if (i != STALE)
            CHECK(q[i] == OVL_REQUEST_NULL && st[i].error == OVL_SUCCESS);

    /* without statuses: the same, the valid ones still completed */
    ovl_request_t q2[3];
    exchange_post(&q2[0], &q2[2], out[0], in[0], sizeof in[0], 35);
    q2[1] = stale_copy;
    EXPECT_ERR(ovl_waitall(3, q2, OVL_STATUS_IGNORE), OVL_ERR_IN_STATUS);
    CHECK(q2[0] == OVL_REQUEST_NULL && q2[1] == stale_copy && q2[2] == OVL_REQUEST_NULL);
    check_in(in[0], sizeof in[0], 35);
}

/* ---- freeing a pending receive ----------------------------------------------- */

struct freed_recv {
    atomic_int runs;
    ovl_status_t st;
    size_t bad; /* first wrong byte seen by the continuation */
    const char *buf;
    size_t n;
    uint64_t key;
};

static void freed_recv_cb(const ovl_status_t *st, void *arg)
{
    struct freed_recv *f = arg;
    f->st = *st;
    f->bad = th_verify(f->buf, f->n, f->key, 0);
    atomic_fetch_add(&f->runs, 1);
}

enum { SMALL = 200, BIG = 300000 };
static char plain_in[SMALL], plain_out[SMALL];
static const uint64_t k_plain = 0x91a1;

static void check_free_pending_recv(void)
{
    /* Even ranks receive (requests freed at once), odd ranks send later. */
    static char small_in[SMALL], big_in[BIG], small_out[SMALL], big_out[BIG];
    uint64_t k_small = 0x5a11, k_big = 0xb16;
    if (th_rank % 2 == 0) {
        static struct freed_recv fs, fb;
        fs = (struct freed_recv){ .buf = small_in, .n = SMALL, .key = k_small };
        fb = (struct freed_recv){ .buf = big_in, .n = BIG, .key = k_big };
        ovl_request_t rs, rb, rp;
        CHECK_OK(ovl_irecv(small_in, SMALL, MPI_CHAR, peer, 40, &rs));
        CHECK_OK(ovl_continue(rs, freed_recv_cb, &fs));
        CHECK_OK(ovl_request_free(&rs));
        CHECK(rs == OVL_REQUEST_NULL);
        CHECK_OK(ovl_irecv(big_in, BIG, MPI_CHAR, peer, 41, &rb));
        CHECK_OK(ovl_continue(rb, freed_recv_cb, &fb));
        CHECK_OK(ovl_request_free(&rb));
        CHECK_OK(ovl_irecv(plain_in, SMALL, MPI_CHAR, peer, 42, &rp));
        CHECK_OK(ovl_request_free(&rp));
        /* Nothing can have arrived yet: the peer sends after this. */
        CHECK(atomic_load(&fs.runs) == 0 && atomic_load(&fb.runs) == 0);
        CHECK_MPI(MPI_Send(NULL, 0, MPI_CHAR, peer, 1, MPI_COMM_WORLD));
        TH_WAIT_UNTIL(atomic_load(&fs.runs) == 1 && atomic_load(&fb.runs) == 1, 30, th_progress());
        CHECK(fs.bad == TH_OK && fb.bad == TH_OK);
        CHECK(fs.st.error == OVL_SUCCESS && fs.st.source == peer && fs.st.tag == 40);
        CHECK(fs.st.bytes == SMALL);
        CHECK(fb.st.error == OVL_SUCCESS && fb.st.source == peer && fb.st.tag == 41);
        CHECK(fb.st.bytes == BIG);
        /* (the one without a continuation is checked after ovl_finalize,
         * the only point that says it has completed) */
        for (int i = 0; i < 100; i++)
            CHECK_OK(ovl_progress());
        CHECK(atomic_load(&fs.runs) == 1 && atomic_load(&fb.runs) == 1);
    } else {
        th_fill(small_out, SMALL, k_small, 0);
        th_fill(big_out, BIG, k_big, 0);
        th_fill(plain_out, SMALL, k_plain, 0);
        CHECK_MPI(MPI_Recv(NULL, 0, MPI_CHAR, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        ovl_request_t q[3];
        CHECK_OK(ovl_isend(big_out, BIG, MPI_CHAR, peer, 41, &q[0]));
        CHECK_OK(ovl_isend(small_out, SMALL, MPI_CHAR, peer, 40, &q[1]));
        CHECK_OK(ovl_isend(plain_out, SMALL, MPI_CHAR, peer, 42, &q[2]));
        CHECK_OK(ovl_waitall(3, q, NULL));
    }
}

/* ---- two calls releasing one request at once ------------------------------- */

enum { OP_WAIT, OP_FREE, OP_TEST };

struct racer {
    pthread_t t;
    ovl_request_t h; /* this thread's copy of the handle */
    int op;
    atomic_int *go;
    int rc;
    ovl_status_t st;
    atomic_int finished;
};

static void *racer_main(void *arg)
{
    struct racer *x = arg;
    while (!atomic_load(x->go))
        ;
    switch (x->op) {
    case OP_WAIT:
        x->rc = ovl_wait(&x->h, &x->st);
        break;
    case OP_FREE:
        x->rc = ovl_request_free(&x->h);
        break;
    default: {
        int flag = 0;
        do
            x->rc = ovl_test(&x->h, &flag, &x->st);
        while (x->rc == OVL_SUCCESS && !flag);
        break;
    }
    }
    atomic_store(&x->finished, 1);
    return NULL;
}

static void race_start(struct racer *x, int op, ovl_request_t h, atomic_int *go)
{
    *x = (struct racer){ .h = h, .op = op, .go = go, .rc = 1 };
    CHECK(pthread_create(&x->t, NULL, racer_main, x) == 0);
}

/* Joins both racers: exactly one released the request (OVL_SUCCESS), the
 * other was told it was gone (OVL_ERR_REQUEST); returns the winner. */
static struct racer *race_end(struct racer x[2], const char *what)
{
    for (int i = 0; i < 2; i++)
        CHECK(pthread_join(x[i].t, NULL) == 0);
    int ok = (x[0].rc == OVL_SUCCESS) + (x[1].rc == OVL_SUCCESS);
    CHECKF(ok == 1 && (x[0].rc == OVL_ERR_REQUEST || x[1].rc == OVL_ERR_REQUEST),
           "%s: the two calls returned %d and %d: exactly one may release the request", what,
           x[0].rc, x[1].rc);
    struct racer *w = x[0].rc == OVL_SUCCESS ? &x[0] : &x[1];
    CHECK(w->h == OVL_REQUEST_NULL);
    CHECK((w == &x[0] ? x[1].h : x[0].h) != OVL_REQUEST_NULL); /* the loser's stays */
    return w;
}

static void count_cb(const ovl_status_t *st, void *arg)
{
    CHECK(st->error == OVL_SUCCESS);
    atomic_fetch_add((atomic_int *)arg, 1);
}

/* Two threads waiting on copies of one handle, ovl_wait racing
 * ovl_request_free, ovl_test racing ovl_wait: each request is released
 * once (a slot released twice would sit twice on the free list, and two
 * later requests would share it). */
/* The sending side of a race below: 64 bytes of pattern @key on @tag,
 * once the peer says (an empty MPI message on @go_tag). */
static void send_when_told(int go_tag, int tag, uint64_t key)
{
    static char out[64];
    ovl_request_t s;
    th_fill(out, sizeof out, key, 0);
    CHECK_MPI(MPI_Recv(NULL, 0, MPI_CHAR, peer, go_tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    CHECK_OK(ovl_isend(out, sizeof out, MPI_CHAR, peer, tag, &s));
    CHECK_OK(ovl_wait(&s, OVL_STATUS_IGNORE));
}

static void check_concurrent_release(void)
{
    static char in[64], out[64];
    atomic_int go;
    struct racer x[2];
    ovl_request_t r, s;
    ovl_status_t st;

    /* Two waiters blocked on a pending receive (the peer sends once both
     * have long passed their handle checks). */
    if (th_rank % 2 == 0) {
        memset(in, 0, sizeof in);
        CHECK_OK(ovl_irecv(in, sizeof in, MPI_CHAR, peer, 50, &r));
        atomic_store(&go, 1);
        race_start(&x[0], OP_WAIT, r, &go);
        race_start(&x[1], OP_WAIT, r, &go);
        th_sleep_ms(50);
        CHECK_MPI(MPI_Send(NULL, 0, MPI_CHAR, peer, 4, MPI_COMM_WORLD));
        struct racer *w = race_end(x, "two ovl_wait on a pending receive");
        CHECK(w->st.bytes == sizeof in && w->st.source == peer && w->st.tag == 50);
        CHECK(th_verify(in, sizeof in, 0x50, 0) == TH_OK);
    } else {
        send_when_told(4, 50, 0x50);
    }

    /* ovl_wait blocked on a pending receive that another thread frees: the
     * free wins (the engine now owns the request), the wait is told. */
    if (th_rank % 2 == 0) {
        atomic_int runs = 0;
        memset(in, 0, sizeof in);
        CHECK_OK(ovl_irecv(in, sizeof in, MPI_CHAR, peer, 51, &r));
        CHECK_OK(ovl_continue(r, count_cb, &runs));
        atomic_store(&go, 1);
        race_start(&x[0], OP_WAIT, r, &go);
        th_sleep_ms(30);
        ovl_request_t copy = r;
        CHECK_OK(ovl_request_free(&copy));
        /* the wait returns without the message (sent only after 10 s
         * otherwise, so that a wait that kept waiting fails, not hangs) */
        for (double t0 = th_now(); !atomic_load(&x[0].finished) && th_now() - t0 < 10;)
            th_sleep_ms(1);
        int early = atomic_load(&x[0].finished);
        CHECK_MPI(MPI_Send(NULL, 0, MPI_CHAR, peer, 5, MPI_COMM_WORLD));
        CHECK(pthread_join(x[0].t, NULL) == 0);
        CHECKF(early && x[0].rc == OVL_ERR_REQUEST,
               "ovl_wait on a request freed meanwhile gave %d, %s the message was sent", x[0].rc,
               early ? "before" : "after");
        TH_WAIT_UNTIL(atomic_load(&runs) == 1, 30, th_progress());
        CHECK(th_verify(in, sizeof in, 0x51, 0) == TH_OK);
    } else {
        send_when_told(5, 51, 0x51);
    }

    /* Many rounds of two calls released at once around the completion of
     * a receive from this rank itself, every pairing. */
    enum { ROUNDS = 150 };
    static const int pairs[][2] = { { OP_WAIT, OP_WAIT }, { OP_WAIT, OP_FREE },
                                    { OP_FREE, OP_FREE }, { OP_TEST, OP_WAIT },
                                    { OP_TEST, OP_FREE }, { OP_TEST, OP_TEST } };
    atomic_int runs = 0;
    for (int k = 0; k < ROUNDS; k++) {
        const int *p = pairs[k % 6];
        uint64_t key = 0x5e1f0000u + (uint64_t)k;
        memset(in, 0, sizeof in);
        th_fill(out, sizeof out, key, 0);
        CHECK_OK(ovl_irecv(in, sizeof in, MPI_CHAR, th_rank, 52, &r));
        CHECK_OK(ovl_continue(r, count_cb, &runs));
        atomic_store(&go, 0);
        race_start(&x[0], p[0], r, &go);
        race_start(&x[1], p[1], r, &go);
        atomic_store(&go, 1);
        CHECK_OK(ovl_isend(out, sizeof out, MPI_CHAR, th_rank, 52, &s));
        char what[64];
        snprintf(what, sizeof what, "round %d (calls %d and %d)", k, p[0], p[1]);
        struct racer *w = race_end(x, what);
        CHECK_OK(ovl_wait(&s, &st));
        /* the continuation ran once, before any wait returned */
        if (w->op != OP_FREE)
            CHECK(atomic_load(&runs) == k + 1);
        TH_WAIT_UNTIL(atomic_load(&runs) == k + 1, 30, th_progress());
        CHECKF(th_verify(in, sizeof in, key, 0) == TH_OK, "round %d: data", k);
    }
}

int main(int argc, char **argv)
{
    th_init(&argc, &argv, "test_request", NULL);
    CHECKF(th_size % 2 == 0, "needs an even number of ranks, got %d", th_size);
    peer = th_rank ^ 1;

    int *ub = NULL, flag = 0;
    CHECK_MPI(MPI_Comm_get_attr(ovl_comm(), MPI_TAG_UB, &ub, &flag));
    CHECK(flag && ub && *ub >= 32767);
    /* ovl keeps the upper half of MPI's tags for delta headers */
    int tag_ub = ovl_tag_ub();
    CHECK(tag_ub == *ub / 2);

    check_post_args(tag_ub);
    check_null_args();
    check_stale_handles();
    check_waitall_stale();
    check_free_pending_recv();
    check_concurrent_release();
    EXPECT_ERR(ovl_continue(OVL_REQUEST_NULL, cb_never, NULL), OVL_ERR_REQUEST);
    /* ovl_finalize completes everything pending, so the freed receive that
     * had no continuation has delivered its message by now */
    CHECK_OK(ovl_finalize());
    if (th_rank % 2 == 0)
        CHECK(th_verify(plain_in, SMALL, k_plain, 0) == TH_OK);
    return th_finish();
}
