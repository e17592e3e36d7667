/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Active messages: every payload class (empty, small, the eager maximum,
 * just above it, 1 MB) to every rank and to itself, checked byte for byte
 * in the handler; replies (and a truncated one); an unregistered id
 * completes the sender's request with OVL_ERR_ARG; a handler that posts an
 * ovl_isend and whose blocking calls are refused; two replies; sending
 * from a thread bound to another domain; the argument errors.
 */
#include "harness.h"

#include <mpi.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum { ID_ECHO = 1, ID_COUNT = 2, ID_POST = 3, ID_MISUSE = 4, ID_NONE = 200 };

static atomic_int counted;
static int post_val[64];

static unsigned char pat(int src, size_t n, size_t i)
{
    return (unsigned char)(th_mix(((uint64_t)src << 40) ^ ((uint64_t)n << 8) ^ i) & 0xff);
}

/* Checks the payload; replies with its first bytes (up to the eager
 * maximum), each plus one. */
static void echo(ovl_am_token_t tok, const void *buf, size_t bytes, void *arg)
{
    CHECK(arg == (void *)&counted);
    int src = -1;
    CHECK_OK(ovl_am_source(tok, &src));
    const unsigned char *b = buf;
    size_t bad = bytes;
    for (size_t i = 0; i < bytes && bad == bytes; i++)
        if (b[i] != pat(src, bytes, i))
            bad = i;
    CHECKF(bad == bytes, "from %d, %zu bytes: byte %zu", src, bytes, bad);
    size_t n = bytes < OVL_AM_EAGER_MAX ? bytes : OVL_AM_EAGER_MAX;
    unsigned char *r = malloc(n ? n : 1);
    CHECK(r != NULL);
    for (size_t i = 0; i < n; i++)
        r[i] = (unsigned char)(b[i] + 1);
    CHECK_OK(ovl_am_reply(tok, r, n));
    free(r);
}

static void count(ovl_am_token_t tok, const void *buf, size_t bytes, void *arg)
{
    (void)tok;
    (void)arg;
    CHECK(bytes == sizeof(int));
    int v;
    memcpy(&v, buf, sizeof v);
    atomic_fetch_add(&counted, v);
}

/* Sends the payload's int back with ovl_isend (tag 77), and tries to block. */
static void post(ovl_am_token_t tok, const void *buf, size_t bytes, void *arg)
{
    (void)arg;
    int src = -1;
    CHECK_OK(ovl_am_source(tok, &src));
    CHECK(bytes == sizeof(int));
    memcpy(&post_val[src], buf, sizeof(int));
    post_val[src] *= 3;
    ovl_request_t r;
    CHECK_OK(ovl_isend(&post_val[src], 1, MPI_INT, src, 77, &r));
    ovl_request_t copy = r;
    EXPECT_ERR(ovl_wait(&copy, NULL), OVL_ERR_IN_CALLBACK);
    CHECK_OK(ovl_request_free(&r));
}

static void misuse(ovl_am_token_t tok, const void *buf, size_t bytes, void *arg)
{
    (void)buf;
    (void)bytes;
    (void)arg;
    static char big[OVL_AM_EAGER_MAX + 1];
    EXPECT_ERR(ovl_am_reply(tok, big, sizeof big), OVL_ERR_ARG);
    EXPECT_ERR(ovl_am_reply(tok, NULL, 4), OVL_ERR_ARG);
    CHECK_OK(ovl_am_reply(tok, "ok", 2));
    EXPECT_ERR(ovl_am_reply(tok, "no", 2), OVL_ERR_ARG);
}

/* A barrier that keeps serving active messages. */
static void served_barrier(void)
{
    MPI_Request r;
    CHECK_MPI(MPI_Ibarrier(MPI_COMM_WORLD, &r));
    int done = 0;
    while (!done) {
        th_progress();
        CHECK_MPI(MPI_Test(&r, &done, MPI_STATUS_IGNORE));
    }
}

static void sweep(const char *who)
{
    static const size_t sizes[] = { 0, 8, OVL_AM_EAGER_MAX, OVL_AM_EAGER_MAX + 1, 1u << 20 };
    size_t maxn = 1u << 20;
    unsigned char *buf = malloc(maxn), *rep = malloc(OVL_AM_EAGER_MAX);
    CHECK(buf && rep);
    for (int d = 0; d < th_size; d++)
        for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
            size_t n = sizes[k];
            for (size_t i = 0; i < n; i++)
                buf[i] = pat(th_rank, n, i);
            ovl_request_t r;
            ovl_status_t st;
            memset(rep, 0, OVL_AM_EAGER_MAX);
            CHECK_OK(ovl_am_call(d, ID_ECHO, buf, n, rep, OVL_AM_EAGER_MAX, &r));
            if (n <= OVL_AM_EAGER_MAX)
                memset(buf, 0xee, n); /* copied: reusable at once */
            CHECK_OK(ovl_wait(&r, &st));
            size_t m = n < OVL_AM_EAGER_MAX ? n : OVL_AM_EAGER_MAX;
            CHECKF(st.bytes == m && st.source == d && st.tag == ID_ECHO,
                   "%s: reply of %zu bytes from %d", who, st.bytes, st.source);
            for (size_t i = 0; i < m; i++)
                if (rep[i] != (unsigned char)(pat(th_rank, n, i) + 1)) {
                    CHECKF(0, "%s: reply byte %zu of %zu", who, i, n);
                    break;
                }
        }
    free(buf);
    free(rep);
}

static void *bound_sender(void *arg)
{
    ovl_domain_t d = *(ovl_domain_t *)arg;
    CHECK_OK(ovl_domain_bind(d));
    sweep("thread on domain 1");
    int one = 1;
    ovl_request_t r;
    CHECK_OK(ovl_am_request((th_rank + 1) % th_size, ID_COUNT, &one, sizeof one, &r));
    CHECK_OK(ovl_wait(&r, NULL));
    CHECK_OK(ovl_domain_bind(OVL_DOMAIN_DEFAULT));
    return NULL;
}

int main(int argc, char **argv)
{
    th_init(&argc, &argv, "test_am", NULL);
    /* argument errors */
    ovl_request_t r;
    EXPECT_ERR(ovl_am_register(-1, echo, NULL), OVL_ERR_ARG);
    EXPECT_ERR(ovl_am_register(OVL_AM_MAX, echo, NULL), OVL_ERR_ARG);
    EXPECT_ERR(ovl_am_request(0, OVL_AM_MAX, NULL, 0, &r), OVL_ERR_ARG);
    EXPECT_ERR(ovl_am_request(0, 1, NULL, 4, &r), OVL_ERR_ARG);
    EXPECT_ERR(ovl_am_request(0, 1, NULL, 0, NULL), OVL_ERR_ARG);
    EXPECT_ERR(ovl_am_request(th_size, 1, NULL, 0, &r), OVL_ERR_RANK);
    EXPECT_ERR(ovl_am_call(0, 1, NULL, 0, NULL, 4, &r), OVL_ERR_ARG);
    EXPECT_ERR(ovl_am_reply(NULL, NULL, 0), OVL_ERR_ARG);
    int who;
    EXPECT_ERR(ovl_am_source(NULL, &who), OVL_ERR_ARG);

    CHECK_OK(ovl_am_register(ID_ECHO, echo, &counted));
    CHECK_OK(ovl_am_register(ID_COUNT, count, NULL));
    CHECK_OK(ovl_am_register(ID_POST, post, NULL));
    CHECK_OK(ovl_am_register(ID_MISUSE, misuse, NULL));
    served_barrier();

    sweep("main thread");

    /* an unregistered id: the request completes with an error */
    ovl_status_t st;
    CHECK_OK(ovl_am_request((th_rank + 1) % th_size, ID_NONE, "x", 1, &r));
    EXPECT_ERR(ovl_wait(&r, &st), OVL_ERR_ARG);
    CHECK(st.error == OVL_ERR_ARG);
    /* a reply longer than the buffer */
    char small[4];
    unsigned char pay[16];
    for (size_t i = 0; i < sizeof pay; i++)
        pay[i] = pat(th_rank, sizeof pay, i);
    CHECK_OK(
        ovl_am_call((th_rank + 1) % th_size, ID_ECHO, pay, sizeof pay, small, sizeof small, &r));
    EXPECT_ERR(ovl_wait(&r, &st), OVL_ERR_TRUNCATE);
    CHECK(st.bytes == sizeof pay);
    /* a reply dropped by ovl_am_request */
    CHECK_OK(ovl_am_request((th_rank + 1) % th_size, ID_ECHO, pay, sizeof pay, &r));
    CHECK_OK(ovl_wait(&r, NULL));
    /* the handler's own misuse, and its one reply */
    char ok[8] = { 0 };
    CHECK_OK(ovl_am_call((th_rank + 1) % th_size, ID_MISUSE, NULL, 0, ok, sizeof ok, &r));
    CHECK_OK(ovl_wait(&r, &st));
    CHECK(st.bytes == 2 && !memcmp(ok, "ok", 2));
    /* a handler posting an operation back to the sender */
    int v = 1000 + th_rank, back = 0;
    ovl_request_t rr;
    CHECK_OK(ovl_irecv(&back, 1, MPI_INT, (th_rank + 1) % th_size, 77, &rr));
    CHECK_OK(ovl_am_request((th_rank + 1) % th_size, ID_POST, &v, sizeof v, &r));
    CHECK_OK(ovl_wait(&r, NULL));
    CHECK_OK(ovl_wait(&rr, NULL));
    CHECK(back == 3 * v);

    /* from a thread on another domain; the main thread serves meanwhile */
    ovl_domain_t d;
    CHECK_OK(ovl_domains_create(1, OVL_DOMAIN_PRIVATE, &d));
    pthread_t th;
    CHECK(pthread_create(&th, NULL, bound_sender, &d) == 0);
    CHECK(pthread_join(th, NULL) == 0);
    served_barrier();
    CHECK(atomic_load(&counted) == 1);
    ovl_stats_t s;
    CHECK_OK(ovl_stats_get(&s, sizeof s));
    CHECK(s.am_handled >= (uint64_t)(2 * 5 * th_size));
    CHECK_OK(ovl_domains_free(1, &d));
    return th_finish();
}
