/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The two-rank exchange behind latency-hiding and overview (exchange.h).
 *
 * Every rep starts with a barrier and is timed on each rank from just after
 * it; times are combined with MAX over the ranks, daxpy counts averaged.
 * Warm-up reps run the same code and are thrown away.
 *
 * The daxpy loops read the clock once per daxpy in every mode (dedicated and
 * overlapped), so both pay the same per-iteration cost and the ratio of the
 * counts measures only what communication takes away.
 */
#include "exchange.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define XCHG_TAG 7

static double thread_cpu(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static struct {
    size_t payload, n; /* bytes, doubles */
    double *sbuf, *rbuf;
    char *pack_s, *pack_r; /* mpi-poll-marshal message buffers */
    int peer;
} X;

/* One exchange in flight. */
struct xchg {
    const struct xchg_variant *v;
    ovl_request_t oreq[2];
    MPI_Request mreq[2];
    double t0, t_done[2];
    int trigger; /* XT_SEND, XT_RECV, or -1 */
    atomic_int stop;
    struct cb {
        struct xchg *x;
        int which;
    } cb[2];
};

void xchg_setup(size_t payload)
{
    X.payload = payload;
    X.n = payload / sizeof(double);
    X.peer = 1 - bench_rank;
    size_t bytes = X.n * sizeof(double) + 64;
    X.sbuf = malloc(bytes);
    X.rbuf = malloc(bytes);
    X.pack_s = malloc(bytes);
    X.pack_r = malloc(bytes);
    if (!X.sbuf || !X.rbuf || !X.pack_s || !X.pack_r)
        bench_fail("out of memory for %zu-byte buffers", payload);
    for (size_t i = 0; i < X.n; i++) {
        X.sbuf[i] = (double)i + 0.5 * bench_rank;
        X.rbuf[i] = -1;
    }
    memset(X.pack_s, 0, bytes);
    memset(X.pack_r, 0, bytes);
}

void xchg_teardown(void)
{
    free(X.sbuf);
    free(X.rbuf);
    free(X.pack_s);
    free(X.pack_r);
    memset(&X, 0, sizeof X);
}

/* ---- marshalling: one double at a time (the paper's Table 2) -------------------- */

static int marshal(ovl_stream_t s, void *arg)
{
    const double *v = arg;
    for (size_t i = 0; i < X.n; i++) {
        int rc = ovl_stream_write_double(s, v[i]);
        if (rc != OVL_SUCCESS)
            return rc;
    }
    return OVL_SUCCESS;
}

static int unmarshal(ovl_stream_t s, void *arg)
{
    double *v = arg;
    for (size_t i = 0; i < X.n; i++) {
        int rc = ovl_stream_read_double(s, &v[i]);
        if (rc != OVL_SUCCESS)
            return rc;
    }
    return OVL_SUCCESS;
}

/* The hand-written equivalent for MPI: copy each double into / out of a byte
 * buffer. volatile-free but through memcpy of 8 bytes, as a marshaller of a
 * dynamic structure would. */
static void pack(void)
{
    for (size_t i = 0; i < X.n; i++)
        memcpy(X.pack_s + i * sizeof(double), &X.sbuf[i], sizeof(double));
}

static void unpack(void)
{
    for (size_t i = 0; i < X.n; i++)
        memcpy(&X.rbuf[i], X.pack_r + i * sizeof(double), sizeof(double));
}

/* ---- tcp-thread: the kernel's share, measured -------------------------------------
 * Not an MPI mechanism but a reference: one TCP connection between the two
 * ranks and two helper threads, one blocked in send(), one in recv() with
 * MSG_WAITALL, each woken only when the kernel has done its part. Nothing
 * polls, so what the computation loses is the kernel's network work and a
 * few wake-ups: the least any mechanism can take on this machine. */

static struct {
    int fd; /* connected to the peer; -1 until first use */
    pthread_t th[2];
    int nthreads;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned gen; /* bumped for each exchange */
    int ndone;    /* helpers done with exchange `gen` */
    int quit;
    struct xchg *x;
} TCP = { .fd = -1, .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };

static void on_tcp_done(struct xchg *x, int which);

static void *tcp_helper(void *arg)
{
    const int which = (int)(intptr_t)arg;
    unsigned seen = 0;
    pthread_mutex_lock(&TCP.mu);
    for (;;) {
        while (!TCP.quit && TCP.gen == seen)
            pthread_cond_wait(&TCP.cv, &TCP.mu);
        if (TCP.quit)
            break;
        seen = TCP.gen;
        struct xchg *x = TCP.x;
        pthread_mutex_unlock(&TCP.mu);
        char *p = which == XT_SEND ? (char *)X.sbuf : (char *)X.rbuf;
        size_t left = X.payload;
        while (left > 0) {
            ssize_t k = which == XT_SEND ? send(TCP.fd, p, left, MSG_NOSIGNAL)
                                         : recv(TCP.fd, p, left, MSG_WAITALL);
            if (k < 0 && errno == EINTR)
                continue;
            if (k <= 0)
                bench_fail("tcp-thread: %s failed: %s", which == XT_SEND ? "send" : "recv",
                           k < 0 ? strerror(errno) : "connection closed by the peer");
            p += k;
            left -= (size_t)k;
        }
        on_tcp_done(x, which);
        pthread_mutex_lock(&TCP.mu);
        TCP.ndone++;
        pthread_cond_broadcast(&TCP.cv);
    }
    pthread_mutex_unlock(&TCP.mu);
    return NULL;
}

/* Up to @p max IPv4 addresses of this host, loopback last. */
static int local_ipv4(uint32_t *out, int max)
{
    struct ifaddrs *ifs = NULL;
    int n = 0;
    if (getifaddrs(&ifs) != 0)
        return 0;
    for (int loop = 0; loop < 2; loop++)
        for (struct ifaddrs *i = ifs; i && n < max; i = i->ifa_next) {
            if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP))
                continue;
            if (!!(i->ifa_flags & IFF_LOOPBACK) != loop)
                continue;
            const struct sockaddr_in *sin = (const void *)i->ifa_addr;
            out[n++] = sin->sin_addr.s_addr;
        }
    freeifaddrs(ifs);
    return n;
}

/* A blocking socket connected to addr:port (network order), or -1; gives
 * up after @p ms so that an address the peer cannot reach does not hang. */
static int connect_within(uint32_t addr, uint16_t port, int ms)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = port };
    sa.sin_addr.s_addr = addr;
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        struct pollfd pf = { .fd = fd, .events = POLLOUT };
        int err = 0;
        socklen_t len = sizeof err;
        if (errno != EINPROGRESS || poll(&pf, 1, ms) != 1 ||
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
            close(fd);
            return -1;
        }
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Rank 0 listens and sends rank 1 its addresses and port; rank 1 tries
 * them in turn and reports back. Collective over both ranks. */
static void tcp_open(void)
{
    enum { MAXA = 16 };
    uint32_t msg[MAXA + 2] = { 0 }; /* count, port, addresses */
    int lfd = -1, ok = 0;
    if (bench_rank == 0) {
        lfd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = 0 };
        sa.sin_addr.s_addr = htonl(INADDR_ANY);
        socklen_t len = sizeof sa;
        if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(lfd, 1) != 0 ||
            getsockname(lfd, (struct sockaddr *)&sa, &len) != 0)
            bench_fail("tcp-thread: cannot listen on a TCP port: %s", strerror(errno));
        msg[0] = (uint32_t)local_ipv4(msg + 2, MAXA);
        msg[1] = sa.sin_port;
        BENCH_MPI(MPI_Send(msg, MAXA + 2, MPI_UINT32_T, 1, XCHG_TAG, MPI_COMM_WORLD));
        BENCH_MPI(MPI_Recv(&ok, 1, MPI_INT, 1, XCHG_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        if (ok)
            TCP.fd = accept(lfd, NULL, NULL);
        close(lfd);
    } else {
        BENCH_MPI(
            MPI_Recv(msg, MAXA + 2, MPI_UINT32_T, 0, XCHG_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        for (uint32_t i = 0; i < msg[0] && i < MAXA && TCP.fd < 0; i++)
            TCP.fd = connect_within(msg[2 + i], (uint16_t)msg[1], 1000);
        ok = TCP.fd >= 0;
        BENCH_MPI(MPI_Send(&ok, 1, MPI_INT, 0, XCHG_TAG, MPI_COMM_WORLD));
    }
    if (!ok)
        bench_fail("tcp-thread: rank 1 could not connect to any of rank 0's %u IPv4 "
                   "addresses",
                   msg[0]);
    if (TCP.fd < 0)
        bench_fail("tcp-thread: accept failed: %s", strerror(errno));
    int one = 1;
    setsockopt(TCP.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    for (int i = 0; i < 2; i++) {
        if (pthread_create(&TCP.th[i], NULL, tcp_helper, (void *)(intptr_t)i) != 0)
            bench_fail("tcp-thread: cannot start a helper thread");
        TCP.nthreads++;
    }
}

static void tcp_start(struct xchg *x)
{
    if (TCP.fd < 0)
        tcp_open();
    pthread_mutex_lock(&TCP.mu);
    TCP.x = x;
    TCP.ndone = 0;
    TCP.gen++;
    pthread_cond_broadcast(&TCP.cv);
    pthread_mutex_unlock(&TCP.mu);
}

static void tcp_finish(void)
{
    pthread_mutex_lock(&TCP.mu);
    while (TCP.ndone < 2)
        pthread_cond_wait(&TCP.cv, &TCP.mu);
    pthread_mutex_unlock(&TCP.mu);
}

void xchg_shutdown(void)
{
    pthread_mutex_lock(&TCP.mu);
    TCP.quit = 1;
    pthread_cond_broadcast(&TCP.cv);
    pthread_mutex_unlock(&TCP.mu);
    for (int i = 0; i < TCP.nthreads; i++)
        pthread_join(TCP.th[i], NULL);
    TCP.nthreads = 0;
    TCP.quit = 0;
    if (TCP.fd >= 0)
        close(TCP.fd);
    TCP.fd = -1;
}

/* ---- one exchange -------------------------------------------------------------- */

static void on_done(const ovl_status_t *st, void *arg)
{
    struct cb *c = arg;
    struct xchg *x = c->x;
    x->t_done[c->which] = bench_now();
    if (st->error != OVL_SUCCESS)
        bench_fail("exchange %s failed: %s", c->which == XT_SEND ? "send" : "recv",
                   ovl_strerror(st->error));
    if (c->which == x->trigger)
        atomic_store_explicit(&x->stop, 1, memory_order_release);
}

/* tcp-thread: a helper finished its half (on that helper's thread). */
static void on_tcp_done(struct xchg *x, int which)
{
    x->t_done[which] = bench_now();
    if (which == x->trigger)
        atomic_store_explicit(&x->stop, 1, memory_order_release);
}

static int is_mpi(const struct xchg_variant *v)
{
    return v->kind == XK_MPI_POLL || v->kind == XK_MPI_POLL_MARSHAL || xchg_fixed_kind(v->kind);
}

/* The variants that call MPI_Test every k daxpys. */
static int is_poll(const struct xchg_variant *v)
{
    return v->kind == XK_MPI_POLL || v->kind == XK_MPI_POLL_MARSHAL;
}

int xchg_fixed_kind(enum xchg_kind k)
{
    return k == XK_MPI_WAIT || k == XK_MPI_ASYNC;
}

/* Post both messages (receive first, as in the paper). With @p cont, ovl
 * variants get a continuation on each request recording its completion time
 * and raising `stop` for the trigger. */
static void xchg_start(struct xchg *x, const struct xchg_variant *v, int trigger, int cont)
{
    x->v = v;
    x->trigger = trigger;
    x->t_done[0] = x->t_done[1] = 0;
    atomic_store(&x->stop, 0);
    for (int i = 0; i < 2; i++) {
        x->cb[i].x = x;
        x->cb[i].which = i;
        x->oreq[i] = OVL_REQUEST_NULL;
        x->mreq[i] = MPI_REQUEST_NULL;
    }
    int cnt = (int)X.n;
    switch (v->kind) {
    case XK_OVL:
        BENCH_OVL(ovl_irecv(X.rbuf, cnt, MPI_DOUBLE, X.peer, XCHG_TAG, &x->oreq[XT_RECV]));
        if (cont)
            BENCH_OVL(ovl_continue(x->oreq[XT_RECV], on_done, &x->cb[XT_RECV]));
        BENCH_OVL(ovl_isend(X.sbuf, cnt, MPI_DOUBLE, X.peer, XCHG_TAG, &x->oreq[XT_SEND]));
        if (cont)
            BENCH_OVL(ovl_continue(x->oreq[XT_SEND], on_done, &x->cb[XT_SEND]));
        break;
    case XK_OVL_MARSHAL:
        BENCH_OVL(ovl_irecv_stream(X.peer, XCHG_TAG, unmarshal, X.rbuf, &x->oreq[XT_RECV]));
        if (cont)
            BENCH_OVL(ovl_continue(x->oreq[XT_RECV], on_done, &x->cb[XT_RECV]));
        BENCH_OVL(ovl_isend_stream(X.peer, XCHG_TAG, marshal, X.sbuf, &x->oreq[XT_SEND]));
        if (cont)
            BENCH_OVL(ovl_continue(x->oreq[XT_SEND], on_done, &x->cb[XT_SEND]));
        break;
    case XK_MPI_POLL:
    case XK_MPI_WAIT:
    case XK_MPI_ASYNC:
        BENCH_MPI(MPI_Irecv(X.rbuf, cnt, MPI_DOUBLE, X.peer, XCHG_TAG, MPI_COMM_WORLD,
                            &x->mreq[XT_RECV]));
        BENCH_MPI(MPI_Isend(X.sbuf, cnt, MPI_DOUBLE, X.peer, XCHG_TAG, MPI_COMM_WORLD,
                            &x->mreq[XT_SEND]));
        break;
    case XK_MPI_POLL_MARSHAL:
        BENCH_MPI(MPI_Irecv(X.pack_r, (int)X.payload, MPI_BYTE, X.peer, XCHG_TAG, MPI_COMM_WORLD,
                            &x->mreq[XT_RECV]));
        pack();
        BENCH_MPI(MPI_Isend(X.pack_s, (int)X.payload, MPI_BYTE, X.peer, XCHG_TAG, MPI_COMM_WORLD,
                            &x->mreq[XT_SEND]));
        break;
    case XK_TCP_THREAD:
        tcp_start(x);
        break;
    }
}

/* MPI kinds: the request @p which has completed (found by MPI_Test/Wait). */
static void mpi_completed(struct xchg *x, int which)
{
    if (which == XT_RECV && x->v->kind == XK_MPI_POLL_MARSHAL)
        unpack(); /* the data is usable only after this */
    x->t_done[which] = bench_now();
}

/* Complete whatever is still in flight. */
static void xchg_finish(struct xchg *x)
{
    if (x->v->kind == XK_TCP_THREAD) {
        tcp_finish();
        return;
    }
    if (!is_mpi(x->v)) {
        BENCH_OVL(ovl_waitall(2, x->oreq, OVL_STATUS_IGNORE));
        return;
    }
    for (int i = 0; i < 2; i++) {
        if (x->mreq[i] != MPI_REQUEST_NULL) {
            BENCH_MPI(MPI_Wait(&x->mreq[i], MPI_STATUS_IGNORE));
            mpi_completed(x, i);
        }
    }
}

/* ---- measurements ---------------------------------------------------------------- */

static void sync_start(void)
{
    MPI_Barrier(MPI_COMM_WORLD);
}

static double max_over_ranks(double v)
{
    double m;
    MPI_Allreduce(&v, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return m;
}

static double mean_over_ranks(double v)
{
    double s;
    MPI_Allreduce(&v, &s, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    return s / bench_size;
}

/* Seconds of one exchange with nothing else to do. */
static double one_alone(const struct xchg_variant *v)
{
    struct xchg x;
    sync_start();
    double t0 = bench_now();
    xchg_start(&x, v, -1, 0);
    xchg_finish(&x);
    return max_over_ranks(bench_now() - t0);
}

double xchg_transfer_time(const struct xchg_variant *v, int reps, int warmup)
{
    double *t = malloc((size_t)reps * sizeof *t);
    if (!t)
        bench_fail("out of memory");
    for (int r = -warmup; r < reps; r++) {
        double s = one_alone(v);
        if (r >= 0)
            t[r] = s;
    }
    struct bench_stat st = bench_stat_of(t, reps);
    free(t);
    return st.med;
}

/* One overlapped rep: daxpy until the trigger's completion is seen. */
static void one_overlapped(const struct xchg_variant *v, int trigger, double *count, double *comm,
                           double *loop, double *wakeups, double *oncpu, double *post)
{
    struct xchg x;
    ovl_stats_t s0, s1;
    BENCH_OVL(ovl_stats_get(&s0, sizeof s0));
    sync_start();
    x.t0 = bench_now();
    xchg_start(&x, v, trigger, 1);
    long n = 0;
    double c0 = thread_cpu();
    double l0 = bench_now(), l1 = l0;
    if (!is_mpi(v)) {
        /* the paper's loop: a continuation ends it */
        while (!atomic_load_explicit(&x.stop, memory_order_acquire)) {
            bench_daxpy();
            n++;
            l1 = bench_now();
        }
    } else {
        const long k = v->k;
        for (long i = 1;; i++) {
            bench_daxpy();
            n++;
            l1 = bench_now();
            if (i % k == 0) {
                int flag = 0;
                BENCH_MPI(MPI_Test(&x.mreq[trigger], &flag, MPI_STATUS_IGNORE));
                if (flag) {
                    mpi_completed(&x, trigger);
                    break;
                }
            }
        }
    }
    double c1 = thread_cpu();
    xchg_finish(&x);
    BENCH_OVL(ovl_stats_get(&s1, sizeof s1));
    *oncpu = mean_over_ranks(l1 > l0 ? (c1 - c0) / (l1 - l0) : 1);
    double done = x.t_done[0] > x.t_done[1] ? x.t_done[0] : x.t_done[1];
    *count = mean_over_ranks((double)n);
    *comm = max_over_ranks(done - x.t0);
    *loop = mean_over_ranks(l1 - l0);
    *post = mean_over_ranks(l0 - x.t0);
    *wakeups = (double)(s1.thread_wakeups - s0.thread_wakeups);
}

/* One rep of a fixed-work variant: post, @p work daxpys (a clock read each,
 * as in the dedicated count), then MPI_Waitany twice, which gives each
 * request's completion as the program learns it. */
static void one_fixed(const struct xchg_variant *v, long work, double comm[2], double *loop,
                      double *oncpu, double *post)
{
    struct xchg x;
    sync_start();
    x.t0 = bench_now();
    xchg_start(&x, v, -1, 0);
    double c0 = thread_cpu();
    double l0 = bench_now(), l1 = l0;
    for (long i = 0; i < work; i++) {
        bench_daxpy();
        l1 = bench_now();
    }
    double c1 = thread_cpu();
    for (int k = 0; k < 2; k++) {
        int idx = MPI_UNDEFINED;
        BENCH_MPI(MPI_Waitany(2, x.mreq, &idx, MPI_STATUS_IGNORE));
        if (idx != MPI_UNDEFINED)
            mpi_completed(&x, idx);
    }
    *oncpu = mean_over_ranks(l1 > l0 ? (c1 - c0) / (l1 - l0) : 1);
    for (int i = 0; i < 2; i++)
        comm[i] = max_over_ranks(x.t_done[i] - x.t0);
    *loop = mean_over_ranks(l1 - l0);
    *post = mean_over_ranks(l0 - x.t0);
}

double xchg_dedicated_clean(double seconds)
{
    if (bench_daxpy_ns_clean <= 0)
        return 0;
    return mean_over_ranks(seconds * 1e9 / bench_daxpy_ns_clean);
}

/* lh_measure's part (c) for the fixed-work variants: one set of reps gives
 * both columns. The work takes a dedicated CPU the transfer time T, so
 * blocking MPI (exchange, then compute) would take 2T and a perfect overlap
 * T: util = (2T - time to completion) / T is the share of the transfer time
 * hidden behind the computation. Had the exchange ended on time, that is the
 * paper's ratio (the daxpys done during it over those that fit in it), and
 * the same bound holds (xchg_bound). */
static void lh_fixed(const struct xchg_variant *v, int reps, int warmup, struct lh_result *out)
{
    size_t nb = (size_t)reps * sizeof(double);
    double *m[2] = { malloc(nb), malloc(nb) }, *l = malloc(nb), *u = malloc(nb), *p = malloc(nb);
    if (!m[0] || !m[1] || !l || !u || !p)
        bench_fail("out of memory");
    const long work = (long)(out->dedicated.med + 0.5);
    ovl_stats_t s0, s1;
    BENCH_OVL(ovl_stats_get(&s0, sizeof s0));
    for (int r = -warmup; r < reps; r++) {
        double comm[2], loop, on, post;
        one_fixed(v, work, comm, &loop, &on, &post);
        if (r >= 0) {
            m[0][r] = comm[0] * 1e3;
            m[1][r] = comm[1] * 1e3;
            l[r] = loop * 1e3;
            u[r] = on;
            p[r] = post * 1e6;
        }
    }
    BENCH_OVL(ovl_stats_get(&s1, sizeof s1));
    struct bench_stat loop_ms = bench_stat_of(l, reps);
    double on = bench_stat_of(u, reps).med;
    double tm = out->transfer_ms.med;
    for (int trig = 0; trig < 2; trig++) {
        struct bench_stat w = { (double)work, (double)work, (double)work,
                                (double)work, (double)work, (double)work };
        out->ovl_daxpy[trig] = w;
        out->comm_ms[trig] = bench_stat_of(m[trig], reps);
        out->loop_ms[trig] = loop_ms;
        out->oncpu[trig] = on;
        out->wakeups[trig] = (double)(s1.thread_wakeups - s0.thread_wakeups) / reps;
        out->util[trig] = tm > 0 ? 2 - out->comm_ms[trig].med / tm : 0;
        out->cpu_share[trig] = loop_ms.med > 0 ? tm / loop_ms.med : 0;
    }
    out->post_us = bench_stat_of(p, reps);
    free(m[0]);
    free(m[1]);
    free(l);
    free(u);
    free(p);
}

void lh_measure(const struct xchg_variant *v, int reps, int warmup, struct lh_result *out)
{
    size_t nb = (size_t)reps * sizeof(double);
    double *t = malloc(nb), *d = malloc(nb), *c = malloc(nb), *m = malloc(nb), *l = malloc(nb);
    double *u = malloc(nb), *p = malloc(2 * nb);
    if (!t || !d || !c || !m || !l || !u || !p)
        bench_fail("out of memory");
    memset(out, 0, sizeof *out);
    out->payload = X.payload;
    out->reps = reps;

    /* (a) the exchange alone */
    ovl_stats_t s0, s1;
    for (int r = -warmup; r < reps; r++) {
        if (r == 0)
            BENCH_OVL(ovl_stats_get(&s0, sizeof s0));
        double s = one_alone(v);
        if (r >= 0)
            t[r] = s * 1e3;
    }
    BENCH_OVL(ovl_stats_get(&s1, sizeof s1));
    out->transfer_wakeups = (double)(s1.thread_wakeups - s0.thread_wakeups) / reps;
    out->transfer_ms = bench_stat_of(t, reps);
    double T = out->transfer_ms.med * 1e-3;

    /* (b) dedicated: daxpy for exactly the transfer time, both ranks at once;
     * where MPICH's thread runs, from the rate measured before it started */
    double clean = v->kind == XK_MPI_ASYNC ? xchg_dedicated_clean(T) : 0;
    for (int r = -warmup; r < reps; r++) {
        double n = clean;
        if (clean <= 0) {
            sync_start();
            n = mean_over_ranks((double)bench_daxpy_for(T));
        }
        if (r >= 0)
            d[r] = n;
    }
    out->dedicated = bench_stat_of(d, reps);

    if (xchg_fixed_kind(v->kind)) {
        out->fixed = 1;
        lh_fixed(v, reps, warmup, out);
        goto done;
    }

    /* (c) overlapped, loop stopped by the send, then by the receive */
    for (int trig = 0; trig < 2; trig++) {
        double wk = 0;
        for (int r = -warmup; r < reps; r++) {
            double cnt, comm, loop, w, on, post;
            one_overlapped(v, trig, &cnt, &comm, &loop, &w, &on, &post);
            if (r >= 0) {
                p[trig * reps + r] = post * 1e6;
                u[r] = on;
                c[r] = cnt;
                m[r] = comm * 1e3;
                l[r] = loop * 1e3;
                wk += w;
            }
        }
        /* cpu share: daxpy rate inside the loop vs dedicated rate, from medians */
        out->ovl_daxpy[trig] = bench_stat_of(c, reps);
        out->comm_ms[trig] = bench_stat_of(m, reps);
        out->loop_ms[trig] = bench_stat_of(l, reps);
        out->wakeups[trig] = wk / reps;
        out->oncpu[trig] = bench_stat_of(u, reps).med;
        out->util[trig] =
            out->dedicated.med > 0 ? out->ovl_daxpy[trig].med / out->dedicated.med : 0;
        double ded_rate =
            out->dedicated.med / (out->transfer_ms.med > 0 ? out->transfer_ms.med : 1);
        double ovl_rate =
            out->ovl_daxpy[trig].med / (out->loop_ms[trig].med > 0 ? out->loop_ms[trig].med : 1);
        out->cpu_share[trig] = ded_rate > 0 ? ovl_rate / ded_rate : 0;
    }
    out->post_us = bench_stat_of(p, 2 * reps);
done:
    free(t);
    free(d);
    free(c);
    free(m);
    free(l);
    free(u);
    free(p);
}

double xchg_fixed_work(const struct xchg_variant *v, long work, int blocking)
{
    struct xchg x;
    sync_start();
    double t0 = bench_now();
    if (!v) {
        for (long i = 0; i < work; i++)
            bench_daxpy();
        return max_over_ranks(bench_now() - t0);
    }
    xchg_start(&x, v, -1, 0);
    if (blocking)
        xchg_finish(&x);
    if (!blocking && is_poll(v)) {
        int open = 2;
        for (long i = 1; i <= work; i++) {
            bench_daxpy();
            if (open && i % v->k == 0) {
                for (int j = 0; j < 2; j++) {
                    int flag = 0;
                    if (x.mreq[j] == MPI_REQUEST_NULL)
                        continue;
                    BENCH_MPI(MPI_Test(&x.mreq[j], &flag, MPI_STATUS_IGNORE));
                    if (flag) {
                        mpi_completed(&x, j);
                        open--;
                    }
                }
            }
        }
    } else {
        for (long i = 0; i < work; i++)
            bench_daxpy();
    }
    if (!blocking)
        xchg_finish(&x);
    return max_over_ranks(bench_now() - t0);
}

long xchg_dedicated(double seconds, int reps)
{
    double *d = malloc((size_t)reps * sizeof *d);
    if (!d)
        bench_fail("out of memory");
    for (int r = 0; r < reps; r++) {
        sync_start();
        d[r] = mean_over_ranks((double)bench_daxpy_for(seconds));
    }
    struct bench_stat st = bench_stat_of(d, reps);
    free(d);
    return (long)(st.med + 0.5);
}

double xchg_daxpy_ns(void)
{
    sync_start();
    const double secs = 0.05;
    long n = bench_daxpy_for(secs);
    return mean_over_ranks(secs * 1e9 / (double)(n ? n : 1));
}

/* ---- the useful-CPU bound ---------------------------------------------------------
 * What the transfer alone takes from the ranks' cores: the kernel's network
 * work (on the emulated cluster: TCP, veth, bridge and shaper, on the same
 * cores as the ranks) and the copies into and out of the sockets, which every
 * mechanism pays. Both ranks exchange back to back and sleep between
 * MPI_Testall calls, so that they add little of their own; idle time comes
 * from /proc/stat (exact under NO_HZ, printed in 1/USER_HZ). What the same
 * sleeping polls cost with no message in flight, and whatever else runs on
 * those CPUs, is measured apart (xchg_bound_background) and taken off. The
 * cost per exchange is set against the exchange's time alone with MPI_Wait:
 * a computation overlapped with it keeps at most the rest of its core. */

static void nap_us(long us)
{
    struct timespec ts = { us / 1000000, (us % 1000000) * 1000 };
    nanosleep(&ts, NULL);
}

static void one_sleeping(long poll_us)
{
    MPI_Request rq[2];
    MPI_Status st[2];
    int cnt = (int)X.n, done = 0;
    BENCH_MPI(MPI_Irecv(X.rbuf, cnt, MPI_DOUBLE, X.peer, XCHG_TAG, MPI_COMM_WORLD, &rq[0]));
    BENCH_MPI(MPI_Isend(X.sbuf, cnt, MPI_DOUBLE, X.peer, XCHG_TAG, MPI_COMM_WORLD, &rq[1]));
    for (;;) {
        BENCH_MPI(MPI_Testall(2, rq, &done, st));
        if (done)
            break;
        nap_us(poll_us);
    }
}

/* Busy CPU-seconds per CPU of this rank's set between two reads. */
static int busy_per_cpu(double *idle, double w, double *per_cpu)
{
    double i1 = 0;
    int nc = 0;
    if (bench_cpus_unbusy(&i1, &nc) != 0)
        return -1;
    double b = (w * nc - (i1 - *idle)) / nc;
    *per_cpu = b > 0 ? b : 0;
    return 0;
}

int xchg_bound_background(double secs, long poll_us, double *share, double *err)
{
    int dummy = 0, nc = 0, ok = 1, all = 0;
    double i0 = 0, busy = 0;
    MPI_Request rq;
    MPI_Status st;
    BENCH_MPI(MPI_Irecv(&dummy, 0, MPI_INT, 1 - bench_rank, XCHG_TAG + 1, MPI_COMM_WORLD, &rq));
    sync_start();
    ok &= bench_cpus_unbusy(&i0, &nc) == 0;
    double w0 = bench_now(), w;
    while ((w = bench_now() - w0) < secs) {
        int flag = 0;
        BENCH_MPI(MPI_Test(&rq, &flag, &st));
        nap_us(poll_us);
    }
    ok &= busy_per_cpu(&i0, w, &busy) == 0;
    BENCH_MPI(MPI_Send(&dummy, 0, MPI_INT, 1 - bench_rank, XCHG_TAG + 1, MPI_COMM_WORLD));
    BENCH_MPI(MPI_Wait(&rq, &st));
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    if (!all)
        return -1;
    *share = mean_over_ranks(busy / w);
    *err = bench_proc_stat_tick() / secs;
    return 0;
}

int xchg_bound(int reps, int warmup, double secs, long poll_us, double bg, double bg_err,
               struct xchg_bound *out)
{
    memset(out, 0, sizeof *out);
    struct xchg_variant wait;
    memset(&wait, 0, sizeof wait);
    wait.kind = XK_MPI_WAIT;
    double T = xchg_transfer_time(&wait, reps, warmup);

    /* the pace of sleeping exchanges sets how many fill the window */
    sync_start();
    double t0 = bench_now();
    for (int i = 0; i < 3; i++)
        one_sleeping(poll_us);
    double per = max_over_ranks((bench_now() - t0) / 3);
    long n = (long)(secs / (per > 0 ? per : 1e-3)) + 1;
    if (n < 3)
        n = 3;
    MPI_Bcast(&n, 1, MPI_LONG, 0, MPI_COMM_WORLD);

    double i0 = 0, busy = 0;
    int nc = 0, ok = 1;
    sync_start();
    ok &= bench_cpus_unbusy(&i0, &nc) == 0;
    double w0 = bench_now();
    for (long k = 0; k < n; k++)
        one_sleeping(poll_us);
    double w = bench_now() - w0;
    ok &= busy_per_cpu(&i0, w, &busy) == 0;
    int all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    if (!all)
        return -1;
    /* per core and exchange, less the background over the same time */
    double core = (busy - bg * w) / (double)n;
    out->transfer_ms = T * 1e3;
    out->core_ms = mean_over_ranks(core > 0 ? core : 0) * 1e3;
    out->share = T > 0 ? out->core_ms / out->transfer_ms : 0;
    out->bound = out->share < 1 ? 1 - out->share : 0;
    /* each read is cut to a tick per CPU: a core's busy time is known to a
     * tick, the background's to its own error over this window */
    double stretch = max_over_ranks(w) / ((double)n * (T > 0 ? T : 1));
    out->err = T > 0 ? bench_proc_stat_tick() / ((double)n * T) + bg_err * stretch : 0;
    out->background = bg;
    out->window_s = max_over_ranks(w);
    out->exchanges = n;
    out->poll_us = poll_us;
    out->ncpu = nc;
    MPI_Bcast(&out->ncpu, 1, MPI_INT, 0, MPI_COMM_WORLD);
    return 0;
}

/* ---- MPICH's asynchronous progress thread -------------------------------------- */

int xchg_check_async(const char *cmd, int want_async, int others)
{
    char lib[128];
    int on = bench_mpich_async(lib, sizeof lib);
    if (!want_async) {
        if (on == 1 && bench_rank == 0)
            fprintf(stderr,
                    "ovl-bench %s: warning: MPICH's asynchronous progress thread is on "
                    "(MPIR_CVAR_ASYNC_PROGRESS): it spins on the cores of every variant "
                    "measured here; only mpi-async belongs in such a process\n",
                    cmd);
        return on == 1;
    }
    if (on < 0)
        bench_usage_error(cmd,
                          "mpi-async needs MPICH's asynchronous progress thread "
                          "(MPIR_CVAR_ASYNC_PROGRESS=1); this MPI is not MPICH (\"%s\"), "
                          "and has no such thread (Open MPI 4.1 has none)",
                          lib);
    if (on == 0)
        bench_usage_error(cmd,
                          "mpi-async needs MPICH's asynchronous progress thread, which is off: "
                          "set MPIR_CVAR_ASYNC_PROGRESS=1 in the environment of the ranks "
                          "(e.g. MPIR_CVAR_ASYNC_PROGRESS=1 testbed/ovl-cluster run ...), "
                          "or let bench/peers.sh alternate the runs");
    if (bench_thread_level < MPI_THREAD_MULTIPLE)
        bench_usage_error(cmd,
                          "mpi-async: MPICH starts its progress thread only with "
                          "MPI_THREAD_MULTIPLE, and provided level %d",
                          bench_thread_level);
    if (others > 0)
        bench_usage_error(cmd, "mpi-async runs alone in its process: MPICH's progress thread "
                               "(MPIR_CVAR_ASYNC_PROGRESS=1) spins on the cores of every other "
                               "variant; measure those in a separate run (bench/peers.sh "
                               "alternates the two)");
    if (bench_daxpy_ns_clean <= 0)
        bench_fail("%s: mpi-async: no daxpy rate was measured before MPI_Init", cmd);
    return 1;
}
