/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Communication domains (ovl_domains_create, ovl_domain_bind,
 * ovl_domains_free). Phases (argv[1], default all):
 *   api      - create and free in every mode, bind, current, and the
 *              errors of bad arguments, agreed on every rank
 *   threads  - T threads per rank, each on a domain of its own (argv[2]:
 *              the mode), exchange messages, streams and delta transfers
 *              with the same tags on every domain, and get/put on one
 *              segment; every byte checked carries the sending thread, so
 *              a message matched on another thread's domain fails
 *   private  - a private domain used by a thread that does not own it
 *   pending  - freeing domains with work in flight is refused everywhere
 *   exhaust  - domains until ovl or MPI runs out: a clear error, and ovl
 *              still works on domain 0 and on the domains made
 *   streams  - more private domains than MPI has streams
 *   rma      - one window per domain: segments made before and after the
 *              domains, gets and puts on each thread's domain, a get
 *              issued on one domain and waited for on another, ovl_lock
 *              counting exactly over every domain, domains freed while
 *              segments live
 *   env      - OVL_DOMAINS=3 (set by the test's environment)
 *   forward  - a delta receive on domain 0 forwarded, while it arrives,
 *              by a send on domain 1
 */
#include "harness.h"

#include <mpi.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define T      2
#define ROUNDS 20

static int right(void)
{
    return (th_rank + 1) % th_size;
}

static int left(void)
{
    return (th_rank - 1 + th_size) % th_size;
}

/* the byte at @i of a message from @src's thread @t in round @k */
static unsigned char pat(int src, int t, int k, size_t i)
{
    return (unsigned char)(th_mix(((uint64_t)src << 40) ^ ((uint64_t)t << 32) ^
                                  ((uint64_t)k << 24) ^ i) &
                           0xff);
}

static void fill(unsigned char *b, size_t n, int src, int t, int k)
{
    for (size_t i = 0; i < n; i++)
        b[i] = pat(src, t, k, i);
}

static size_t bad_at(const unsigned char *b, size_t n, int src, int t, int k)
{
    for (size_t i = 0; i < n; i++)
        if (b[i] != pat(src, t, k, i))
            return i;
    return n;
}

/* ---- api ------------------------------------------------------------------ */

static void set_flag(const ovl_status_t *st, void *arg)
{
    (void)st;
    atomic_store((atomic_int *)arg, 1);
}

static void phase_api(void)
{
    ovl_domain_t d[4], cur = -1;
    CHECK_OK(ovl_domain_current(&cur));
    CHECK(cur == OVL_DOMAIN_DEFAULT);
    for (int mode = OVL_DOMAIN_SHARED; mode <= OVL_DOMAIN_PRIVATE; mode++) {
        CHECK_OK(ovl_domains_create(3, mode, d));
        CHECK(d[0] >= 1 && d[1] >= 1 && d[2] >= 1 && d[0] != d[1] && d[1] != d[2]);
        ovl_stats_t st;
        CHECK_OK(ovl_stats_get(&st, sizeof st));
        CHECKF(st.domains == 4, "stats say %llu domains", (unsigned long long)st.domains);
        CHECK_OK(ovl_domain_bind(d[1]));
        CHECK_OK(ovl_domain_current(&cur));
        CHECK(cur == d[1]);
        CHECK_OK(ovl_domain_bind(OVL_DOMAIN_DEFAULT));
        CHECK_OK(ovl_domains_free(3, d));
        CHECK_OK(ovl_stats_get(&st, sizeof st));
        CHECK(st.domains == 1);
    }
    /* a thread bound to a freed domain is back on domain 0 */
    CHECK_OK(ovl_domains_create(1, OVL_DOMAIN_SHARED, d));
    CHECK_OK(ovl_domain_bind(d[0]));
    CHECK_OK(ovl_domains_free(1, d));
    CHECK_OK(ovl_domain_current(&cur));
    CHECK(cur == OVL_DOMAIN_DEFAULT);
    CHECK_OK(ovl_domains_create(0, OVL_DOMAIN_SHARED, NULL));
    /* a request completed on a domain, waited for only after it was freed */
    {
        int out = th_rank, in = -1;
        atomic_int got = 0;
        ovl_request_t rq[2];
        CHECK_OK(ovl_domains_create(1, OVL_DOMAIN_PRIVATE, d));
        CHECK_OK(ovl_domain_bind(d[0]));
        CHECK_OK(ovl_irecv(&in, 1, MPI_INT, left(), 2, &rq[0]));
        CHECK_OK(ovl_continue(rq[0], set_flag, &got));
        CHECK_OK(ovl_isend(&out, 1, MPI_INT, right(), 2, &rq[1]));
        CHECK_OK(ovl_wait(&rq[1], NULL));
        while (!atomic_load(&got))
            th_progress();
        CHECK_OK(ovl_domain_bind(OVL_DOMAIN_DEFAULT));
        CHECK_OK(ovl_domains_free(1, d));
        ovl_status_t st;
        CHECK_OK(ovl_wait(&rq[0], &st));
        CHECK(in == left() && st.source == left());
    }
    /* errors, the same on every rank */
    EXPECT_ERR(ovl_domain_bind(7), OVL_ERR_ARG);
    EXPECT_ERR(ovl_domain_bind(-1), OVL_ERR_ARG);
    EXPECT_ERR(ovl_domain_current(NULL), OVL_ERR_ARG);
    EXPECT_ERR(ovl_domains_create(-1, OVL_DOMAIN_SHARED, d), OVL_ERR_ARG);
    EXPECT_ERR(ovl_domains_create(1, 9, d), OVL_ERR_ARG);
    EXPECT_ERR(ovl_domains_create(1, OVL_DOMAIN_SHARED, NULL), OVL_ERR_ARG);
    /* one rank asks for something else: every rank fails, nothing made */
    EXPECT_ERR(ovl_domains_create(th_rank == 0 ? 2 : 1, OVL_DOMAIN_SHARED, d), OVL_ERR_ARG);
    EXPECT_ERR(ovl_domains_create(1, th_rank == th_size - 1 ? 7 : 0, d), OVL_ERR_ARG);
    ovl_stats_t st;
    CHECK_OK(ovl_stats_get(&st, sizeof st));
    CHECK(st.domains == 1);
    ovl_domain_t zero = 0, none = 99;
    EXPECT_ERR(ovl_domains_free(1, &zero), OVL_ERR_ARG);
    EXPECT_ERR(ovl_domains_free(1, &none), OVL_ERR_ARG);
    EXPECT_ERR(ovl_domains_free(1, NULL), OVL_ERR_ARG);
    CHECK_OK(ovl_domains_create(2, OVL_DOMAIN_SHARED, d));
    ovl_domain_t twice[2] = { d[0], d[0] };
    EXPECT_ERR(ovl_domains_free(2, twice), OVL_ERR_ARG);
    /* different lists on different ranks */
    EXPECT_ERR(ovl_domains_free(1, th_rank == 0 ? &d[0] : &d[1]), OVL_ERR_ARG);
    CHECK_OK(ovl_domains_free(2, d));
}

/* ---- threads -------------------------------------------------------------- */

static ovl_domain_t tdom[T];
static ovl_segment_t seg;
static unsigned char *segbase;
#define SEG_SLOT 4096

struct sarg {
    int src, t, k;
    size_t n;
    size_t bad;
};

static int put_stream(ovl_stream_t s, void *p)
{
    struct sarg *a = p;
    unsigned char b[97];
    for (size_t off = 0; off < a->n;) {
        size_t m = a->n - off < sizeof b ? a->n - off : sizeof b;
        for (size_t i = 0; i < m; i++)
            b[i] = pat(a->src, a->t, a->k, off + i);
        int rc = ovl_stream_write(s, b, m);
        if (rc)
            return rc;
        off += m;
    }
    return OVL_SUCCESS;
}

static int get_stream(ovl_stream_t s, void *p)
{
    struct sarg *a = p;
    unsigned char b[61];
    a->bad = a->n;
    for (size_t off = 0; off < a->n;) {
        size_t m = a->n - off < sizeof b ? a->n - off : sizeof b;
        int rc = ovl_stream_read(s, b, m);
        if (rc)
            return rc;
        for (size_t i = 0; i < m && a->bad == a->n; i++)
            if (b[i] != pat(a->src, a->t, a->k, off + i))
                a->bad = off + i;
        off += m;
    }
    return OVL_SUCCESS;
}

static void *worker(void *p)
{
    int t = (int)(intptr_t)p;
    CHECK_OK(ovl_domain_bind(tdom[t]));
    static const size_t sizes[] = { 8, 4000, 200000 };
    size_t maxn = 200000;
    unsigned char *sb = malloc(maxn), *rb = malloc(maxn);
    CHECK(sb && rb);
    for (int k = 0; k < ROUNDS; k++) {
        size_t n = sizes[k % 3];
        /* messages: same tag on every domain */
        ovl_request_t rq[2];
        fill(sb, n, th_rank, t, k);
        memset(rb, 0, n);
        CHECK_OK(ovl_irecv(rb, (int)n, MPI_BYTE, left(), 5, &rq[0]));
        CHECK_OK(ovl_isend(sb, (int)n, MPI_BYTE, right(), 5, &rq[1]));
        ovl_status_t st[2];
        CHECK_OK(ovl_waitall(2, rq, st));
        CHECKF(bad_at(rb, n, left(), t, k) == n, "thread %d round %d: message byte %zu", t, k,
               bad_at(rb, n, left(), t, k));
        /* a wildcard source, still only this domain's messages */
        memset(rb, 0, n);
        CHECK_OK(ovl_irecv(rb, (int)n, MPI_BYTE, OVL_ANY_SOURCE, 6, &rq[0]));
        CHECK_OK(ovl_isend(sb, (int)n, MPI_BYTE, right(), 6, &rq[1]));
        CHECK_OK(ovl_waitall(2, rq, st));
        CHECK(st[0].source == left());
        CHECK(bad_at(rb, n, left(), t, k) == n);
        /* streams */
        struct sarg out = { th_rank, t, k, n, 0 }, in = { left(), t, k, n, 0 };
        CHECK_OK(ovl_irecv_stream(left(), 7, get_stream, &in, &rq[0]));
        CHECK_OK(ovl_isend_stream(right(), 7, put_stream, &out, &rq[1]));
        CHECK_OK(ovl_waitall(2, rq, st));
        CHECKF(in.bad == n, "thread %d round %d: stream byte %zu", t, k, in.bad);
        /* delta transfers (explicit monitor: threads share the pages) */
        memset(rb, 0, n);
        CHECK_OK(ovl_delta_recv(rb, (int)n, MPI_BYTE, left(), 8, TH_MONITOR(OVL_MONITOR_EXPLICIT),
                                &rq[0]));
        CHECK_OK(ovl_delta_send_begin(sb, (int)n, MPI_BYTE, right(), 8,
                                      TH_MONITOR(OVL_MONITOR_EXPLICIT), &rq[1]));
        CHECK_OK(ovl_delta_produced(rq[1], 0, n / 2));
        CHECK_OK(ovl_delta_produced(rq[1], n / 2, n - n / 2));
        CHECK_OK(ovl_delta_send_end(rq[1], NULL));
        CHECK_OK(ovl_waitall(2, rq, st));
        CHECKF(bad_at(rb, n, left(), t, k) == n, "thread %d round %d: delta byte %zu", t, k,
               bad_at(rb, n, left(), t, k));
        /* one-sided: put this thread's slot at the right, get it back */
        size_t m = n < SEG_SLOT ? n : SEG_SLOT;
        size_t off = (size_t)t * SEG_SLOT;
        CHECK_OK(ovl_put(sb, right(), off, m, seg, NULL));
        CHECK_OK(ovl_fence(seg));
        memset(rb, 0, m);
        ovl_request_t g;
        CHECK_OK(ovl_get(rb, right(), off, m, seg, NULL, &g));
        CHECK_OK(ovl_wait(&g, NULL));
        CHECK(bad_at(rb, m, th_rank, t, k) == m);
    }
    free(sb);
    free(rb);
    CHECK_OK(ovl_domain_bind(OVL_DOMAIN_DEFAULT));
    return NULL;
}

static void phase_threads(int mode)
{
    CHECK_OK(ovl_domains_create(T, mode, tdom));
#ifdef MPIX_STREAM_NULL
    /* MPICH with streams, and as many reserved as needed: one each */
    const char *vcis = getenv("MPIR_CVAR_CH4_RESERVE_VCIS");
    if (mode != OVL_DOMAIN_SHARED && vcis && atoi(vcis) >= T) {
        ovl_stats_t st;
        CHECK_OK(ovl_stats_get(&st, sizeof st));
        CHECKF(st.domains_on_streams == T, "%llu domains on streams",
               (unsigned long long)st.domains_on_streams);
    }
#endif
    CHECK_OK(ovl_segment_create((size_t)T * SEG_SLOT, (void **)&segbase, &seg));
    pthread_t th[T];
    for (int t = 0; t < T; t++)
        CHECK(pthread_create(&th[t], NULL, worker, (void *)(intptr_t)t) == 0);
    /* meanwhile domain 0's thread drives the workers' domains: each
     * ovl_barrier retires the one-sided transfers in flight on every
     * domain (on a private domain, past its owner's gate) */
    for (int k = 0; k < 3 * ROUNDS; k++)
        CHECK_OK(ovl_barrier());
    for (int t = 0; t < T; t++)
        CHECK(pthread_join(th[t], NULL) == 0);
    CHECK_OK(ovl_barrier());
    CHECK_OK(ovl_segment_free(&seg));
    CHECK_OK(ovl_domains_free(T, tdom));
}

/* ---- private ---------------------------------------------------------------- */

static ovl_domain_t pdom;
static ovl_request_t preq;
static atomic_int stage;

static void *intruder(void *unused)
{
    (void)unused;
    while (atomic_load(&stage) < 1)
        th_sleep_ms(1);
    EXPECT_ERR(ovl_domain_bind(pdom), OVL_ERR_THREAD);
    int flag = 0;
    ovl_request_t r = preq;
    EXPECT_ERR(ovl_test(&r, &flag, NULL), OVL_ERR_THREAD);
    EXPECT_ERR(ovl_wait(&r, NULL), OVL_ERR_THREAD);
    EXPECT_ERR(ovl_request_free(&r), OVL_ERR_THREAD);
    atomic_store(&stage, 2);
    return NULL;
}

static void *taker(void *unused)
{
    (void)unused;
    CHECK_OK(ovl_domain_bind(pdom));
    return NULL;
}

static void bind_in_callback(const ovl_status_t *st, void *arg)
{
    (void)st;
    /* the owner runs this in its domain's drive: it keeps the domain */
    atomic_store((atomic_int *)arg, ovl_domain_bind(OVL_DOMAIN_DEFAULT));
}

static void phase_private(void)
{
    CHECK_OK(ovl_domains_create(1, OVL_DOMAIN_PRIVATE, &pdom));
    CHECK_OK(ovl_domain_bind(pdom)); /* this thread owns it */
    int v = -1, w = th_rank;
    CHECK_OK(ovl_irecv(&v, 1, MPI_INT, left(), 1, &preq));
    atomic_store(&stage, 0);
    pthread_t th;
    CHECK(pthread_create(&th, NULL, intruder, NULL) == 0);
    atomic_store(&stage, 1);
    while (atomic_load(&stage) < 2)
        th_sleep_ms(1);
    CHECK(pthread_join(th, NULL) == 0);
    ovl_request_t s;
    CHECK_OK(ovl_isend(&w, 1, MPI_INT, right(), 1, &s));
    CHECK_OK(ovl_wait(&s, NULL));
    CHECK_OK(ovl_wait(&preq, NULL));
    CHECK(v == left());
    atomic_int brc = 1;
    v = -1;
    CHECK_OK(ovl_irecv(&v, 1, MPI_INT, left(), 2, &preq));
    CHECK_OK(ovl_continue(preq, bind_in_callback, &brc));
    CHECK_OK(ovl_isend(&w, 1, MPI_INT, right(), 2, &s));
    CHECK_OK(ovl_wait(&s, NULL));
    while (atomic_load(&brc) == 1)
        CHECK_OK(ovl_progress());
    CHECKF(atomic_load(&brc) == OVL_ERR_IN_CALLBACK, "ovl_domain_bind in a callback: %d",
           atomic_load(&brc));
    ovl_domain_t cur;
    CHECK_OK(ovl_domain_current(&cur));
    CHECK(cur == pdom && v == left());
    CHECK_OK(ovl_domain_bind(OVL_DOMAIN_DEFAULT)); /* gives it up */
    pthread_t th2;
    CHECK(pthread_create(&th2, NULL, taker, NULL) == 0);
    CHECK(pthread_join(th2, NULL) == 0);
    EXPECT_ERR(ovl_domain_bind(pdom), OVL_ERR_THREAD); /* the taker exited bound */
    CHECK_OK(ovl_domains_free(1, &pdom));
}

/* ---- pending ---------------------------------------------------------------- */

static void phase_pending(void)
{
    ovl_domain_t d;
    CHECK_OK(ovl_domains_create(1, OVL_DOMAIN_SHARED, &d));
    CHECK_OK(ovl_domain_bind(d));
    /* a receive posted on rank 0 only: refused on every rank */
    int v = -1, w = th_rank;
    ovl_request_t r = OVL_REQUEST_NULL, s;
    if (th_rank == 0)
        CHECK_OK(ovl_irecv(&v, 1, MPI_INT, left(), 3, &r));
    EXPECT_ERR(ovl_domains_free(1, &d), OVL_ERR_PENDING);
    /* the message for it comes; freeing succeeds once it is received */
    if (th_rank == (th_size - 1))
        CHECK_OK(ovl_isend(&w, 1, MPI_INT, 0, 3, &s));
    else
        s = OVL_REQUEST_NULL;
    CHECK_OK(ovl_wait(&s, NULL));
    CHECK_OK(ovl_wait(&r, NULL));
    if (th_rank == 0)
        CHECK(v == th_size - 1);
    /* a message nobody receives: refused; received, freed */
    if (th_rank == 0)
        CHECK_OK(ovl_isend(&w, 1, MPI_INT, right(), 4, &s));
    CHECK_OK(ovl_wait(&s, NULL));
    EXPECT_ERR(ovl_domains_free(1, &d), OVL_ERR_PENDING);
    if (th_rank == 1 % th_size) {
        CHECK_OK(ovl_irecv(&v, 1, MPI_INT, 0, 4, &r));
        CHECK_OK(ovl_wait(&r, NULL));
        CHECK(v == 0);
    }
    CHECK_OK(ovl_domain_bind(OVL_DOMAIN_DEFAULT));
    CHECK_OK(ovl_domains_free(1, &d));
}

/* ---- exhaust ---------------------------------------------------------------- */

static ovl_segment_t xseg = OVL_SEGMENT_NULL; /* exhaust: reached from every domain */

static void exchange_on(ovl_domain_t d, int k)
{
    CHECK_OK(ovl_domain_bind(d));
    unsigned char sb[64], rb[64];
    fill(sb, sizeof sb, th_rank, d, k);
    ovl_request_t rq[2];
    CHECK_OK(ovl_irecv(rb, sizeof rb, MPI_BYTE, left(), 9, &rq[0]));
    CHECK_OK(ovl_isend(sb, sizeof sb, MPI_BYTE, right(), 9, &rq[1]));
    CHECK_OK(ovl_waitall(2, rq, NULL));
    CHECK(bad_at(rb, sizeof rb, left(), d, k) == sizeof rb);
    if (xseg != OVL_SEGMENT_NULL) {
        size_t off = (size_t)(d % 16) * sizeof sb;
        unsigned char *hb = calloc(1, sizeof sb); /* a get's destination: not the stack */
        CHECK(hb != NULL);
        CHECK_OK(ovl_put(sb, right(), off, sizeof sb, xseg, NULL));
        CHECK_OK(ovl_fence(xseg));
        ovl_request_t g;
        CHECK_OK(ovl_get(hb, right(), off, sizeof sb, xseg, NULL, &g));
        CHECK_OK(ovl_wait(&g, NULL));
        CHECK(bad_at(hb, sizeof sb, th_rank, d, k) == sizeof sb);
        free(hb);
    }
    CHECK_OK(ovl_domain_bind(OVL_DOMAIN_DEFAULT));
}

static void phase_exhaust(void)
{
    enum { BATCH = 64 };
    ovl_domain_t *all = malloc(OVL_DOMAINS_MAX * sizeof *all);
    CHECK(all != NULL);
    /* a live segment: every new domain needs a window of it too */
    void *xbase;
    CHECK_OK(ovl_segment_create(16 * 64, &xbase, &xseg));
    int n = 0, rc = OVL_SUCCESS;
    while (n + BATCH < OVL_DOMAINS_MAX) {
        rc = ovl_domains_create(BATCH, OVL_DOMAIN_SHARED, all + n);
        if (rc != OVL_SUCCESS)
            break;
        n += BATCH;
    }
    if (rc == OVL_SUCCESS) /* the last batch crosses ovl's limit */
        rc = ovl_domains_create(BATCH, OVL_DOMAIN_SHARED, all + n);
    CHECKF(rc == OVL_ERR_ARG || rc == OVL_ERR_MPI || rc == OVL_ERR_NOMEM, "after %d domains: %s", n,
           th_code_name(rc));
    if (th_rank == 0)
        printf("exhaust: %d domains made, then %s\n", n + 1, th_code_name(rc));
    ovl_stats_t st;
    CHECK_OK(ovl_stats_get(&st, sizeof st));
    CHECKF(st.domains == (uint64_t)n + 1, "%llu domains", (unsigned long long)st.domains);
    exchange_on(OVL_DOMAIN_DEFAULT, 0);
    if (n > 0) {
        exchange_on(all[0], 1);
        exchange_on(all[n - 1], 2);
    }
    CHECK_OK(ovl_domains_free(n, all));
    /* and more can be made again */
    CHECK_OK(ovl_domains_create(2, OVL_DOMAIN_SHARED, all));
    exchange_on(all[1], 3);
    CHECK_OK(ovl_domains_free(2, all));
    CHECK_OK(ovl_segment_free(&xseg));
    free(all);
}

/* ---- streams -------------------------------------------------------------------- */

/* More private domains than MPI has streams (MPICH 5 with
 * MPIR_CVAR_CH4_RESERVE_VCIS=2): the first get one each, the others fall
 * back to duplicates, and all of them work. Elsewhere none gets a stream. */
static void phase_streams(void)
{
    ovl_domain_t d[3];
    CHECK_OK(ovl_domains_create(3, OVL_DOMAIN_PRIVATE, d));
    ovl_stats_t st;
    CHECK_OK(ovl_stats_get(&st, sizeof st));
#ifdef MPIX_STREAM_NULL
    const char *vcis = getenv("MPIR_CVAR_CH4_RESERVE_VCIS");
    uint64_t want = vcis ? (uint64_t)atoi(vcis) : 0;
    CHECKF(st.domains_on_streams == (want < 3 ? want : 3), "%llu domains on streams, %llu reserved",
           (unsigned long long)st.domains_on_streams, (unsigned long long)want);
#else
    CHECK(st.domains_on_streams == 0);
#endif
    for (int i = 0; i < 3; i++)
        exchange_on(d[i], i);
    CHECK_OK(ovl_domains_free(3, d));
    /* the streams came back: made again, they are streams again */
    ovl_stats_t st2;
    CHECK_OK(ovl_domains_create(3, OVL_DOMAIN_SERIALIZED, d));
    CHECK_OK(ovl_stats_get(&st2, sizeof st2));
    CHECK(st2.domains_on_streams == st.domains_on_streams);
    CHECK_OK(ovl_domains_free(3, d));
}

/* ---- rma ------------------------------------------------------------------------ */

#define RMA_SLOT (256 * 1024)
static ovl_segment_t rseg[2];
static unsigned char *rbase[2];

static void *rma_worker(void *p)
{
    int t = (int)(intptr_t)p;
    size_t n = RMA_SLOT;
    unsigned char *sb = malloc(n), *rb = malloc(n);
    CHECK(sb && rb);
    CHECK_OK(ovl_domain_bind(tdom[t]));
    for (int k = 0; k < 6; k++) {
        for (int g = 0; g < 2; g++) {
            /* put this thread's slot at the right; the fence retires this
             * domain's transfers */
            size_t m = k % 2 ? n : 3000 + (size_t)k;
            size_t off = (size_t)t * RMA_SLOT;
            fill(sb, m, th_rank, t, k * 2 + g);
            CHECK_OK(ovl_put(sb, right(), off, m, rseg[g], NULL));
            CHECK_OK(ovl_fence(rseg[g]));
            memset(rb, 0, m);
            CHECK_OK(ovl_get(rb, right(), off, m, rseg[g], NULL, NULL));
            if (k == 3) {
                /* waited for from domain 0: it drives this domain's strips */
                CHECK_OK(ovl_domain_bind(OVL_DOMAIN_DEFAULT));
                CHECK_OK(ovl_get_need(rb, m));
                CHECK_OK(ovl_domain_bind(tdom[t]));
            } else {
                CHECK_OK(ovl_get_need(rb, m));
            }
            CHECKF(bad_at(rb, m, th_rank, t, k * 2 + g) == m, "thread %d round %d seg %d: byte %zu",
                   t, k, g, bad_at(rb, m, th_rank, t, k * 2 + g));
        }
    }
    /* ovl_lock: its atomics on domain 0's window, the data on this domain's */
    /* (a rank holds a lock once: its threads take turns, as with
     * MPI_Win_lock, and the ranks count through the ticket lock) */
    static pthread_mutex_t turn = PTHREAD_MUTEX_INITIALIZER;
    uint64_t *v = (uint64_t *)rb;
    for (int k = 0; k < 10; k++) {
        pthread_mutex_lock(&turn);
        CHECK_OK(ovl_lock(rseg[0], 0));
        ovl_request_t g;
        CHECK_OK(ovl_get(v, 0, (size_t)T * RMA_SLOT, sizeof *v, rseg[0], NULL, &g));
        CHECK_OK(ovl_wait(&g, NULL));
        ++*v;
        CHECK_OK(ovl_put(v, 0, (size_t)T * RMA_SLOT, sizeof *v, rseg[0], NULL));
        CHECK_OK(ovl_unlock(rseg[0], 0));
        pthread_mutex_unlock(&turn);
    }
    CHECK_OK(ovl_domain_bind(OVL_DOMAIN_DEFAULT));
    free(sb);
    free(rb);
    return NULL;
}

static void phase_rma(int mode)
{
    size_t bytes = (size_t)T * RMA_SLOT + 64;
    /* one segment before the domains (they get windows of it), one after */
    CHECK_OK(ovl_segment_create(bytes, (void **)&rbase[0], &rseg[0]));
    memset(rbase[0] + (size_t)T * RMA_SLOT, 0, 64);
    CHECK_OK(ovl_barrier());
    CHECK_OK(ovl_domains_create(T, mode, tdom));
    CHECK_OK(ovl_segment_create(bytes, (void **)&rbase[1], &rseg[1]));
    pthread_t th[T];
    for (int t = 0; t < T; t++)
        CHECK(pthread_create(&th[t], NULL, rma_worker, (void *)(intptr_t)t) == 0);
    for (int t = 0; t < T; t++)
        CHECK(pthread_join(th[t], NULL) == 0);
    CHECK_OK(ovl_barrier());
    if (th_rank == 0) {
        uint64_t c;
        memcpy(&c, rbase[0] + (size_t)T * RMA_SLOT, sizeof c);
        CHECKF(c == (uint64_t)th_size * T * 10, "ovl_lock counted %llu of %d",
               (unsigned long long)c, th_size * T * 10);
    }
    /* the domains go first; the segments stay reachable from domain 0 */
    CHECK_OK(ovl_domains_free(T, tdom));
    unsigned char b[128], *r = malloc(sizeof b);
    CHECK(r != NULL);
    for (int g = 0; g < 2; g++) {
        fill(b, sizeof b, th_rank, 9, g);
        CHECK_OK(ovl_put(b, right(), 0, sizeof b, rseg[g], NULL));
        CHECK_OK(ovl_fence(rseg[g]));
        ovl_request_t q;
        CHECK_OK(ovl_get(r, right(), 0, sizeof b, rseg[g], NULL, &q));
        CHECK_OK(ovl_wait(&q, NULL));
        CHECK(bad_at(r, sizeof b, th_rank, 9, g) == sizeof b);
    }
    free(r);
    CHECK_OK(ovl_barrier());
    CHECK_OK(ovl_segment_free(&rseg[1]));
    CHECK_OK(ovl_segment_free(&rseg[0]));
}

/* ---- foreign drivers ------------------------------------------------------------ */

/* Each worker reads its slot of the right rank's segment over and over on
 * its own domain (large reads: strips its engine issues one after another), while domain 0's thread takes and releases the right
 * rank's lock, which retires every domain's transfers to that rank: it
 * drives the workers' domains while they do (a private domain's gate with
 * its owner inside). */
#define FOREIGN_SLOT (1024 * 1024)
static ovl_segment_t fseg;
static atomic_int fdone;

static void *foreign_worker(void *p)
{
    int t = (int)(intptr_t)p;
    unsigned char *rb = malloc(FOREIGN_SLOT);
    CHECK(rb != NULL);
    CHECK_OK(ovl_domain_bind(tdom[t]));
    for (int k = 0; k < 4 * ROUNDS; k++) {
        size_t m = k % 2 ? FOREIGN_SLOT : 1000 + (size_t)k;
        memset(rb, 0, m);
        ovl_request_t g;
        CHECK_OK(ovl_get(rb, right(), (size_t)t * FOREIGN_SLOT, m, fseg, NULL, &g));
        if (k % 4 == 1)
            th_sleep_ms(2); /* its strips left to domain 0's thread */
        if (k % 4 == 0)
            CHECK_OK(ovl_get_need(rb, m));
        CHECK_OK(ovl_wait(&g, NULL));
        CHECKF(bad_at(rb, m, right(), t, 77) == m, "thread %d round %d: byte %zu", t, k,
               bad_at(rb, m, right(), t, 77));
    }
    CHECK_OK(ovl_domain_bind(OVL_DOMAIN_DEFAULT));
    atomic_fetch_add(&fdone, 1);
    free(rb);
    return NULL;
}

static void phase_foreign(int mode)
{
    unsigned char *base;
    CHECK_OK(ovl_segment_create((size_t)T * FOREIGN_SLOT, (void **)&base, &fseg));
    for (int t = 0; t < T; t++)
        fill(base + (size_t)t * FOREIGN_SLOT, FOREIGN_SLOT, th_rank, t, 77);
    CHECK_OK(ovl_domains_create(T, mode, tdom));
    CHECK_OK(ovl_barrier());
    pthread_t th[T];
    for (int t = 0; t < T; t++)
        CHECK(pthread_create(&th[t], NULL, foreign_worker, (void *)(intptr_t)t) == 0);
    int locks = 0;
    while (atomic_load(&fdone) < T) {
        CHECK_OK(ovl_lock(fseg, right()));
        CHECK_OK(ovl_unlock(fseg, right()));
        locks++;
    }
    CHECK(locks > 0);
    for (int t = 0; t < T; t++)
        CHECK(pthread_join(th[t], NULL) == 0);
    CHECK_OK(ovl_barrier());
    CHECK_OK(ovl_domains_free(T, tdom));
    CHECK_OK(ovl_segment_free(&fseg));
}

/* ---- forward ------------------------------------------------------------------ */

/* A delta receive posted on domain 0 forwarded, while it arrives, by a send
 * on domain 1 (the send's pieces go on its domain, the receive's
 * forwarding list and matching stay its own): around the ring, each rank's
 * buffer reaches its right neighbour on domain 0 and, forwarded, the one
 * after on domain 1. */
static void phase_forward(void)
{
    enum { N = 256 * 1024 };
    ovl_domain_t d;
    CHECK_OK(ovl_domains_create(1, OVL_DOMAIN_SHARED, &d));
    unsigned char *a = aligned_alloc(4096, N), *b = aligned_alloc(4096, N),
                  *s = aligned_alloc(4096, N);
    CHECK(a && b && s);
    for (int k = 0; k < 3; k++) {
        memset(a, 0, N);
        memset(b, 0, N);
        ovl_request_t ra, rf, rb, rs;
        CHECK_OK(ovl_delta_recv(a, N, MPI_BYTE, left(), 5, NULL, &ra));
        /* forwarded before anything has been sent to it: still arriving */
        CHECK_OK(ovl_domain_bind(d));
        CHECK_OK(ovl_delta_send_begin(a, N, MPI_BYTE, right(), 6, NULL, &rf));
        CHECK_OK(ovl_delta_send_end(rf, NULL));
        CHECK_OK(ovl_irecv(b, N, MPI_BYTE, left(), 6, &rb));
        CHECK_OK(ovl_domain_bind(OVL_DOMAIN_DEFAULT));
        fill(s, N, th_rank, 0, k);
        CHECK_OK(ovl_delta_send_begin(s, N, MPI_BYTE, right(), 5, NULL, &rs));
        CHECK_OK(ovl_delta_send_end(rs, NULL));
        CHECK_OK(ovl_wait(&ra, NULL));
        CHECK_OK(ovl_wait(&rs, NULL));
        CHECK_OK(ovl_wait(&rf, NULL));
        ovl_status_t st;
        CHECK_OK(ovl_wait(&rb, &st));
        CHECKF(st.bytes == N, "round %d: the forwarded message has %zu bytes", k, st.bytes);
        size_t at = bad_at(a, N, left(), 0, k);
        CHECKF(at == N, "round %d: byte %zu of the received buffer is wrong", k, at);
        int ll = (th_rank - 2 + 2 * th_size) % th_size;
        at = bad_at(b, N, ll, 0, k);
        CHECKF(at == N, "round %d: byte %zu of the forwarded buffer is wrong", k, at);
        CHECK_OK(ovl_barrier());
    }
    free(a);
    free(b);
    free(s);
    CHECK_OK(ovl_domains_free(1, &d));
}

/* ---- env ---------------------------------------------------------------------- */

static void phase_env(void)
{
    ovl_stats_t st;
    CHECK_OK(ovl_stats_get(&st, sizeof st));
    CHECKF(st.domains == 3, "OVL_DOMAINS=3 made %llu", (unsigned long long)st.domains);
    exchange_on(1, 0);
    exchange_on(2, 1);
    /* left for ovl_finalize to drain and free */
}

int main(int argc, char **argv)
{
    th_init(&argc, &argv, "test_domains", NULL);
    const char *ph = argc > 1 ? argv[1] : "all";
    int all = !strcmp(ph, "all");
    if (all || !strcmp(ph, "api"))
        phase_api();
    if (all || !strcmp(ph, "threads")) {
        const char *m = argc > 2 ? argv[2] : "shared";
        phase_threads(!strcmp(m, "private")      ? OVL_DOMAIN_PRIVATE
                      : !strcmp(m, "serialized") ? OVL_DOMAIN_SERIALIZED
                                                 : OVL_DOMAIN_SHARED);
    }
    if (all || !strcmp(ph, "private"))
        phase_private();
    if (all || !strcmp(ph, "pending"))
        phase_pending();
    if (!strcmp(ph, "exhaust"))
        phase_exhaust();
    if (!strcmp(ph, "env"))
        phase_env();
    if (!strcmp(ph, "forward"))
        phase_forward();
    if (!strcmp(ph, "streams"))
        phase_streams();
    if (!strcmp(ph, "foreign"))
        phase_foreign(argc > 2 && !strcmp(argv[2], "shared") ? OVL_DOMAIN_SHARED
                                                             : OVL_DOMAIN_PRIVATE);
    if (!strcmp(ph, "rma")) {
        const char *m = argc > 2 ? argv[2] : "shared";
        phase_rma(!strcmp(m, "private")      ? OVL_DOMAIN_PRIVATE
                  : !strcmp(m, "serialized") ? OVL_DOMAIN_SERIALIZED
                                             : OVL_DOMAIN_SHARED);
    }
    return th_finish();
}
