/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Measurement: the figures the performance model decides from, as a run
 * on this machine and this MPI gives them. Ping-pongs between two ranks
 * (one-way times, the bandwidth slope, the link's burst), the protocol
 * switch below the eager limit, the memory-to-cache copy rate and the real
 * length of the progress thread's poll sleep. The quick estimate at
 * ovl_init (model.c) and tools/ovl-calibrate both measure with these, with
 * their own sizes and repetitions; model.c turns the figures into the
 * model's terms (ovl__m) and the decisions. The fault and protection costs
 * of the access monitors are the watch layer's own (watch_monitor.c).
 */
#include "ovl_internal.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/prctl.h>
#include <time.h>

double ovl__measure_pingpong(MPI_Comm comm, int peer, void *buf, int bytes, int reps,
                             double *samples)
{
    int me = 0;
    MPI_Comm_rank(comm, &me);
    double best = 1e30;
    for (int k = 0; k < reps; k++) {
        double t0 = ovl__now_us();
        if (me < peer) {
            MPI_Send(buf, bytes, MPI_BYTE, peer, 1, comm);
            MPI_Recv(buf, bytes, MPI_BYTE, peer, 1, comm, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(buf, bytes, MPI_BYTE, peer, 1, comm, MPI_STATUS_IGNORE);
            MPI_Send(buf, bytes, MPI_BYTE, peer, 1, comm);
        }
        double t = (ovl__now_us() - t0) / 2;
        if (samples)
            samples[k] = t;
        if (t < best)
            best = t;
    }
    return best;
}

/* Ascending, in place (a few dozen values). */
static void sort_up(double *v, int n)
{
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
            double x = v[j];
            v[j] = v[j - 1];
            v[j - 1] = x;
        }
}

/* Sorts @v and returns its median (the upper one for even @n). */
static double median(double *v, int n)
{
    sort_up(v, n);
    return v[n / 2];
}

/* ---- the protocol switch ---------------------------------------------------- */

/* The switch detector's test: whether the one-way time jumps between
 * sizes @a and @b and stays up. It jumps when t[b] exceeds t[a] by more
 * than four typical steps @ty for the width plus @fl. It stays up when the
 * next size's excess over the trend from @a is more than the smaller of
 * half of b's excess and that jump threshold: one slow sample is no
 * switch, and neither does one slow sample at a real switch hide it. */
static int jumps(const size_t *sz, const double *t, int n, int a, int b, double ty, double fl)
{
    size_t ps = ovl__watch_page();
    double w = (double)((sz[b] - sz[a]) / ps), thr = 4 * ty * w + fl;
    if (t[b] - t[a] <= thr)
        return 0;
    if (b + 1 >= n)
        return 1;
    double ex = t[b] - t[a] - ty * w;
    double ex_next = t[b + 1] - t[a] - ty * (double)((sz[b + 1] - sz[a]) / ps);
    return ex_next > (ex / 2 < thr ? ex / 2 : thr);
}

/* The smallest message size below the eager limit where the one-way time
 * jumps: a change of protocol inside the MPI library (UCX over TCP, for
 * one, switches from copying to zero-copy sends near 16 KiB, and a delta
 * just above that costs far more than one just below). The typical step
 * is the lower quartile of the steps (per page) below the candidate, at
 * least 0.5 us; the floor is max(5 us, L): a switch to a rendezvous adds a
 * handshake, and a smaller step (seen: +10 us from 8 to 12 KiB, then
 * flat up to the real switch) is noise or no worse per byte than the
 * sizes below it. A jump is taken in one step, or in two when the size
 * in between is partway up (fast in some samples, slow in others). Noise,
 * one slow sample and a smooth rise do not count. */
size_t ovl__measure_find_switch(const size_t *sz, const double *t, int n, double lat)
{
    size_t ps = ovl__watch_page();
    double step[32], sorted[32];
    if (n < 3 || n > 32)
        return 0;
    for (int i = 1; i < n; i++) {
        size_t w = sz[i] > sz[i - 1] ? (sz[i] - sz[i - 1]) / ps : 0;
        if (!w)
            return 0;
        step[i] = (t[i] - t[i - 1]) / (double)w;
    }
    double fl = lat > 5 ? lat : 5;
    for (int i = 2; i < n; i++) {
        /* the typical step: the lower quartile of the steps below; a
         * level shift below the switch must not hide it */
        memcpy(sorted, step + 1, (size_t)(i - 1) * sizeof *step);
        sort_up(sorted, i - 1);
        double ty = sorted[(i - 2) / 4];
        if (ty < 0.5)
            ty = 0.5;
        int one = jumps(sz, t, n, i - 1, i, ty, fl);
        int two = i + 1 < n && t[i] > t[i - 1] && !jumps(sz, t, n, i, i + 1, ty, fl) &&
                  jumps(sz, t, n, i - 1, i + 1, ty, fl);
        if (one || two)
            return sz[i - 1] + ps;
    }
    return 0;
}

size_t ovl__measure_switch_sizes(size_t *sz, int max, size_t limit)
{
    size_t ps = ovl__watch_page();
    int n = 0;
    for (size_t s = ps; n < max && s < ovl__m.eager && s <= limit; s += s < 8 * ps ? ps : 2 * ps)
        sz[n++] = s;
    return (size_t)n;
}

size_t ovl__measure_switch(MPI_Comm comm, int peer, void *buf, size_t buflen, int rounds, int reps,
                           double lat, double *oneway)
{
    size_t sz[16];
    double t[16];
    int n = (int)ovl__measure_switch_sizes(sz, 16, buflen);
    /* Taken in rounds over all sizes: a burst of noise then slows one
     * sample of many sizes rather than every sample of a few (which once
     * hid the switch and gave 40 KiB deltas). */
    for (int i = 0; i < n; i++)
        t[i] = 1e30;
    for (int round = 0; round < rounds; round++)
        for (int i = 0; i < n; i++) {
            double x = ovl__measure_pingpong(comm, peer, buf, (int)sz[i], reps, NULL);
            if (x < t[i])
                t[i] = x;
        }
    for (int i = 0; i < n; i++)
        oneway[i] = t[i];
    size_t sw = ovl__measure_find_switch(sz, t, n, lat);
    if (ovl__g.rank == 0 && ovl__g.cfg.report.verbose >= 2) {
        char line[512] = "";
        int len = 0;
        for (int i = 0; i < n && len < (int)sizeof line - 32; i++)
            len += snprintf(line + len, sizeof line - (size_t)len, " %zuK:%.1f", sz[i] >> 10, t[i]);
        ovl__info("model: one-way us by size (KiB):%s; protocol switch %zu B", line, sw);
    }
    return sw;
}

/* ---- the link, as the quick estimate at ovl_init sees it ---------------------- */

double ovl__measure_burst_B(double bytes, double oneway_us, double lat_us, double bw_Bpus)
{
    /* a token bucket refills during the ping-pong's reply */
    double early = bw_Bpus > 0 && oneway_us > lat_us ? bytes - (oneway_us - lat_us) * bw_Bpus : 0;
    return early > 0 ? early : 0;
}

/* Wait for @req sleeping between tests: a rank that is not measuring must
 * leave the cores to the two that are (MPI's own waits spin, and on an
 * oversubscribed node a spinning rank turns a 15 us round trip into
 * milliseconds). */
static void wait_sleeping(MPI_Request *req)
{
    int done = 0;
    while (MPI_Test(req, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done) {
        struct timespec ts = { 0, 50000 };
        nanosleep(&ts, NULL);
    }
}

/* The end of a pair's measurement: every rank of @comm waits asleep until
 * the pair is done, then takes rank 0's @n figures @q. MPI_SUCCESS or the
 * failing call's code. */
static int share_rank0(MPI_Comm comm, double *q, int n)
{
    MPI_Request rq;
    int rc = MPI_Ibarrier(comm, &rq);
    if (rc != MPI_SUCCESS)
        return rc;
    wait_sleeping(&rq);
    return MPI_Bcast(q, n, MPI_DOUBLE, 0, comm);
}

/* Both ranks of a measuring pair: does the other go ahead too? A rank
 * that could not get its buffer says so rather than leave its partner
 * waiting for a message it never sends. */
static int pair_ready(MPI_Comm comm, int other, int ok)
{
    int theirs = 0;
    if (MPI_Sendrecv(&ok, 1, MPI_INT, other, 7, &theirs, 1, MPI_INT, other, 7, comm,
                     MPI_STATUS_IGNORE) != MPI_SUCCESS)
        return 0;
    return ok && theirs;
}

/* One warm-up, then ping-pongs of 1 byte, of page multiples below the
 * eager limit (a protocol switch), and of 128 KiB and 256 KiB. One pair
 * measures, every other rank waits asleep, and rank 0 tells everyone: with
 * all pairs at once, ranks that share cores measured each other's time
 * slices (latencies of 4-6 ms and a third of the bandwidth on 4 emulated
 * hosts sharing 2 cores). The latency is the 1-byte one-way time, the
 * bandwidth the slope between the two large sizes: a fit through a small
 * size would absorb a link's burst allowance (a token bucket passes its
 * first tens of KiB at line rate) and give a negative latency. */
int ovl__measure_link(MPI_Comm comm, int peer, struct ovl__link_figures *out)
{
    /* what rank 0 measured, broadcast: latency, inverse bandwidth, protocol
     * switch, the one-way times of the switch sizes, the link's burst */
    enum { Q_LAT, Q_G, Q_SW, Q_ONEWAY, Q_BURST = Q_ONEWAY + 16, Q_N };
    double lat = 0, bw = 0, burst = 0, q[Q_N] = { 0 };
    size_t sw = 0;
    int me = 0, nomem = 0;
    MPI_Comm_rank(comm, &me);
    if (peer > 0 && (me == 0 || me == peer)) {
        int other = me == 0 ? peer : 0;
        enum { MID = 131072, BIG = 262144 };
        char *buf = ovl__page_alloc(BIG); /* zeroed; never malloc'd (ovl__page_alloc) */
        nomem = !buf;
        if (pair_ready(comm, other, !nomem)) {
            ovl__measure_pingpong(comm, other, buf, 1, 2, NULL); /* warm up the connection */
            double t1 = ovl__measure_pingpong(comm, other, buf, 1, 8, NULL);
            lat = t1 < 1 ? 1 : t1;
            /* before the large sizes: a link with a burst allowance has it
             * back. Best of six per size, in three rounds. */
            sw = ovl__measure_switch(comm, other, buf, BIG, 3, 2, lat, q + Q_ONEWAY);
            /* A descheduled rank (more ranks than cores) can make the middle
             * size look as slow as the large one: measure again, up to four
             * times, rather than fall back to the built-in figures. Rank 0's
             * figures are the ones broadcast, so rank 0 says when to stop. */
            for (int again = 1, attempt = 0; again && attempt < 4; attempt++) {
                double tm = ovl__measure_pingpong(comm, other, buf, MID, 3, NULL);
                double tb = ovl__measure_pingpong(comm, other, buf, BIG, 3, NULL);
                if (tb > tm)
                    bw = (double)(BIG - MID) / (tb - tm);
                else if (tm > t1)
                    bw = (double)MID / (tm - t1);
                /* the link's burst: what of MID arrived sooner than the
                 * long-run rate allows */
                burst = ovl__measure_burst_B(MID, tm, lat, bw);
                again = bw <= 0;
                if (me == 0)
                    MPI_Send(&again, 1, MPI_INT, other, 1, comm);
                else
                    MPI_Recv(&again, 1, MPI_INT, other, 1, comm, MPI_STATUS_IGNORE);
            }
        }
        ovl__page_free(buf);
    }
    q[Q_LAT] = lat;
    q[Q_G] = bw > 0 ? 1.0 / bw : 0;
    q[Q_SW] = (double)sw;
    q[Q_BURST] = burst;
    if (share_rank0(comm, q, Q_N) != MPI_SUCCESS)
        return ovl__error(OVL_ERR_MPI, "ovl_init", "calibration: sharing rank 0's figures failed");
    if (nomem)
        return ovl__error(OVL_ERR_NOMEM, "ovl_init", "calibration buffer");
    _Static_assert(sizeof out->oneway_us == 16 * sizeof(double), "Q_ONEWAY holds 16");
    out->lat_us = q[Q_LAT];
    out->G_us_per_B = q[Q_G];
    out->piece_switch = (size_t)q[Q_SW];
    memcpy(out->oneway_us, q + Q_ONEWAY, sizeof out->oneway_us);
    out->burst_B = q[Q_BURST];
    return OVL_SUCCESS;
}

/* Whether a blocking send of @bytes from the lower rank of the pair to
 * the higher waits for the receiver, who posts its receive @late_us late
 * (tag 4; the best of @reps, so a descheduled sender is not a stall). */
static int waits_for_receiver(MPI_Comm comm, int peer, void *buf, int bytes, int reps,
                              double late_us)
{
    int me = 0;
    MPI_Comm_rank(comm, &me);
    double best = 1e30;
    char one = 0;
    for (int k = 0; k < reps; k++) {
        if (me > peer) {
            MPI_Send(&one, 1, MPI_BYTE, peer, 5, comm);
            for (double t0 = ovl__now_us(); ovl__now_us() < t0 + late_us;)
                ;
            MPI_Recv(buf, bytes, MPI_BYTE, peer, 4, comm, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(&one, 1, MPI_BYTE, peer, 5, comm, MPI_STATUS_IGNORE);
            double t0 = ovl__now_us();
            MPI_Send(buf, bytes, MPI_BYTE, peer, 4, comm);
            double t = ovl__now_us() - t0;
            best = t < best ? t : best;
        }
        /* both done before the next, and both know the sender's best */
        double mine = best, theirs = 0;
        MPI_Sendrecv(&mine, 1, MPI_DOUBLE, peer, 6, &theirs, 1, MPI_DOUBLE, peer, 6, comm,
                     MPI_STATUS_IGNORE);
        if (me > peer)
            best = theirs;
    }
    return best > late_us / 2;
}

size_t ovl__measure_rendezvous(MPI_Comm comm, int peer, void *buf, size_t from, size_t limit,
                               size_t res, int reps, double late_us)
{
    size_t lo = 0, hi = 0; /* largest eager, smallest rendezvous seen */
    for (size_t s = from; s <= limit && s <= INT_MAX; s *= 2) {
        if (waits_for_receiver(comm, peer, buf, (int)s, reps, late_us)) {
            hi = s;
            break;
        }
        lo = s;
    }
    if (!hi)
        return 0;
    while (hi - lo > res) {
        size_t m = lo + (hi - lo) / 2;
        if (waits_for_receiver(comm, peer, buf, (int)m, reps, late_us))
            hi = m;
        else
            lo = m;
    }
    return hi;
}

size_t ovl__measure_eager_below(MPI_Comm comm, int peer, size_t guess, double late_us)
{
    double e = 0;
    int me = 0;
    MPI_Comm_rank(comm, &me);
    if (peer > 0 && (me == 0 || me == peer) && guess >= 1024 && guess <= INT_MAX) {
        char *buf = ovl__page_alloc(guess);
        if (pair_ready(comm, me == 0 ? peer : 0, buf != NULL))
            e = (double)ovl__measure_rendezvous(comm, me == 0 ? peer : 0, buf, guess, guess, 512, 1,
                                                late_us);
        ovl__page_free(buf);
    }
    if (share_rank0(comm, &e, 1) != MPI_SUCCESS)
        e = 0;
    return (size_t)e;
}

/* One exchange of @bytes each way with @peer (tag 2), the program busy
 * with @busy_us of work meanwhile: it writes @work a page at a time and
 * tests the two requests every HIDDEN_POLL_US of work, as ovl's own calls
 * and faults poll a transfer. Returns the microseconds from the posts to
 * both completions. */
enum { HIDDEN_POLL_US = 20 };
static double exchange_busy(MPI_Comm comm, int peer, char *s, char *r, int bytes, double busy_us,
                            char *work, size_t wlen)
{
    char one = 0;
    MPI_Sendrecv(&one, 1, MPI_BYTE, peer, 3, &one, 1, MPI_BYTE, peer, 3, comm, MPI_STATUS_IGNORE);
    MPI_Request rq[2];
    MPI_Status st[2];
    int done = 0;
    double t0 = ovl__now_us(), next = t0 + HIDDEN_POLL_US, now = t0;
    MPI_Irecv(r, bytes, MPI_BYTE, peer, 2, comm, &rq[0]);
    MPI_Isend(s, bytes, MPI_BYTE, peer, 2, comm, &rq[1]);
    /* the work is @busy_us of memset, not of wall time: a test that copies
     * the bytes itself (shared memory) adds its time to the exchange's */
    double worked = 0;
    for (size_t off = 0; worked < busy_us; off = (off + 4096) % wlen) {
        double w0 = ovl__now_us();
        memset(work + off, (int)off, 4096);
        __asm__ __volatile__("" ::"r"(work) : "memory");
        now = ovl__now_us();
        worked += now - w0;
        if (!done && now >= next) {
            MPI_Testall(2, rq, &done, st);
            next = ovl__now_us() + HIDDEN_POLL_US;
        }
    }
    if (!done)
        MPI_Waitall(2, rq, st);
    return ovl__now_us() - t0;
}

double ovl__measure_hidden(MPI_Comm comm, int peer, size_t bytes)
{
    double h = -1;
    int me = 0;
    MPI_Comm_rank(comm, &me);
    if (peer > 0 && (me == 0 || me == peer) && bytes > 0 && bytes <= INT_MAX) {
        int other = me == 0 ? peer : 0;
        const size_t wlen = (size_t)256 << 10;
        char *s = ovl__page_alloc(bytes), *r = ovl__page_alloc(bytes),
             *work = ovl__page_alloc(wlen);
        if (pair_ready(comm, other, s && r && work)) {
            /* alternated; the fastest exchange alone against the slowest
             * busy one: a rank descheduled meanwhile shows less hidden,
             * never more */
            double alone = 1e30, busy = 0;
            exchange_busy(comm, other, s, r, (int)bytes, 0, work, wlen); /* warm up */
            for (int k = 0; k < 3; k++) {
                double t = exchange_busy(comm, other, s, r, (int)bytes, 0, work, wlen);
                alone = t < alone ? t : alone;
                t = exchange_busy(comm, other, s, r, (int)bytes, alone, work, wlen);
                busy = t > busy ? t : busy;
            }
            h = (2 * alone - busy) / alone;
            h = h < 0 ? 0 : h > 1 ? 1 : h;
        }
        ovl__page_free(s);
        ovl__page_free(r);
        ovl__page_free(work);
    }
    if (share_rank0(comm, &h, 1) != MPI_SUCCESS)
        h = -1;
    return h;
}

/* ---- this process ------------------------------------------------------------ */

/* The source is beyond the core's private caches: by default twice the L2
 * cache (4 to 32 MiB), read in chunks into one chunk-sized buffer; a copy
 * within L2 (both buffers 256 KiB) ran three times faster on an AMD EPYC
 * (117 against 38-48 GB/s) and made the model refuse splits that pay
 * (docs/PERFORMANCE.md, "The split model"). */
double ovl__measure_copy_rate(size_t bytes, size_t chunk)
{
    size_t n = bytes;
    if (!n) {
        long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
        n = l2 > 0 ? 2 * (size_t)l2 : (size_t)4 << 20;
        if (n < ((size_t)4 << 20))
            n = (size_t)4 << 20;
        if (n > ((size_t)32 << 20))
            n = (size_t)32 << 20;
    }
    n = n / chunk * chunk;
    if (!n)
        return -1;
    /* mapped, not malloc'd: freeing a block this large would raise glibc's
     * mmap threshold for the rest of the program (ovl__page_alloc) */
    char *a = ovl__page_alloc(n), *b = ovl__page_alloc(chunk);
    double best = -1;
    if (a && b) {
        memset(a, 1, n);
        memset(b, 2, chunk);
        best = 1e30;
        for (int k = 0; k < 3; k++) {
            double t0 = ovl__now_us();
            for (size_t off = 0; off < n; off += chunk) {
                memcpy(b, a + off, chunk);
                __asm__ __volatile__("" ::"r"(b) : "memory");
            }
            double t = ovl__now_us() - t0;
            if (t < best)
                best = t;
        }
        best /= (double)n;
    }
    ovl__page_free(a);
    ovl__page_free(b);
    return best;
}

/* A message that arrives while the progress thread sleeps waits half of
 * such a sleep on average before ovl takes it in: timer slack and
 * scheduling count, not the sleep asked for. */
double ovl__measure_sleep_us(unsigned us)
{
    double t[5];
    /* with the progress thread's timer slack (progress.c) */
    int old = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
    for (int i = 0; i < 5; i++) {
        struct timespec ts = { .tv_sec = us / 1000000, .tv_nsec = (long)(us % 1000000) * 1000 };
        double t0 = ovl__now_us();
        nanosleep(&ts, NULL);
        t[i] = ovl__now_us() - t0;
    }
    if (old > 0)
        prctl(PR_SET_TIMERSLACK, (unsigned long)old, 0, 0, 0);
    return median(t, 5);
}
