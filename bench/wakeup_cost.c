/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * ovl-bench wakeup-cost: what one asynchronous wake-up on the computing core
 * costs the computation. Every rank measures on its own core, at once (no
 * MPI traffic): the daxpy loop's rate alone, then while something wakes up
 * on the same core every INTERVAL microseconds and does nothing:
 *
 *   thread-sleep   a second thread, pinned to the computing thread's CPU,
 *                  in a nanosleep(INTERVAL) loop (timer slack 1 us, as ovl's
 *                  progress thread): a timer interrupt and two context
 *                  switches per wake-up;
 *   timer-signal   a POSIX timer that sends the computing thread a signal
 *                  with an empty handler: a timer interrupt and a signal
 *                  delivery, no second thread;
 *   ovl-thread     ovl's own progress thread while one receive is in flight
 *                  (posted to the rank itself, completed at the end): its
 *                  timed sleeps and polls at its usual pace (the 50 us
 *                  budget of an op that may complete at any moment,
 *                  src/sched.c; the interval column shows it);
 *   ovl-segment    ovl's progress thread while a segment (ovl_segment_create,
 *                  collective) is live and nothing is in flight: it keeps
 *                  polling MPI so that other ranks' gets and puts on this
 *                  rank's memory progress (OVL_SERVE_US).
 *
 * The cost per wake-up is the computation's lost time divided by the number
 * of wake-ups. Any mechanism that progresses MPI without calls in the
 * program's loop needs such wake-ups (a polling thread, a timer signal), so
 * on a machine where they are dear this cost bounds the useful CPU
 * utilisation a short exchange can keep (docs/PERFORMANCE.md). Samples of
 * the loop alone and loaded alternate, so a load change on the machine hits
 * both; medians over --reps.
 */
#include "common.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

enum { W_THREAD, W_SIGNAL, W_OVL, W_SERVE, NW };
/* the progress thread's usual pace (src/sched.c, OVL__SCHED_POLL_US) */
#define BENCH_USUAL_PACE_US 50L
static const char *wname[NW] = { "thread-sleep", "timer-signal", "ovl-thread", "ovl-segment" };

static atomic_int stop_waker;
static atomic_long wakes;
static volatile sig_atomic_t sig_count;

struct waker_arg {
    long interval_us;
    int cpu;
};

static void *waker(void *p)
{
    const struct waker_arg *a = p;
    if (a->cpu >= 0) {
        cpu_set_t s;
        CPU_ZERO(&s);
        CPU_SET(a->cpu, &s);
        pthread_setaffinity_np(pthread_self(), sizeof s, &s);
    }
    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
    struct timespec ts = { a->interval_us / 1000000, (a->interval_us % 1000000) * 1000 };
    while (!atomic_load_explicit(&stop_waker, memory_order_relaxed)) {
        nanosleep(&ts, NULL);
        atomic_fetch_add_explicit(&wakes, 1, memory_order_relaxed);
    }
    return NULL;
}

static void on_signal(int sig)
{
    (void)sig;
    sig_count = sig_count + 1;
}

/* The variant of result row @row: @niv rows of each timer waker, then
 * ovl's thread with a receive, then with a segment. */
static int row_variant(int row, int niv)
{
    return row < niv ? W_THREAD : row < 2 * niv ? W_SIGNAL : row == 2 * niv ? W_OVL : W_SERVE;
}

/* One loaded sample: daxpys in @seconds while variant @v wakes every
 * @interval_us; *nwakes gets the wake-ups counted. */
static long loaded(int v, long interval_us, double seconds, int cpu, long *nwakes)
{
    long n = 0;
    if (v == W_THREAD) {
        struct waker_arg a = { interval_us, cpu };
        pthread_t t;
        atomic_store(&stop_waker, 0);
        atomic_store(&wakes, 0);
        if (pthread_create(&t, NULL, waker, &a) != 0)
            bench_fail("wakeup-cost: pthread_create failed");
        n = bench_daxpy_for(seconds);
        long w = atomic_load(&wakes);
        atomic_store(&stop_waker, 1);
        pthread_join(t, NULL);
        *nwakes = w;
    } else if (v == W_SIGNAL) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sa.sa_flags = SA_RESTART;
        sigemptyset(&sa.sa_mask);
        if (sigaction(SIGRTMIN, &sa, NULL) != 0)
            bench_fail("wakeup-cost: sigaction failed");
        struct sigevent ev;
        memset(&ev, 0, sizeof ev);
        ev.sigev_notify = SIGEV_THREAD_ID;
        ev.sigev_signo = SIGRTMIN;
#ifdef sigev_notify_thread_id
        ev.sigev_notify_thread_id = (pid_t)syscall(SYS_gettid);
#else
        ev._sigev_un._tid = (pid_t)syscall(SYS_gettid);
#endif
        timer_t tm;
        if (timer_create(CLOCK_MONOTONIC, &ev, &tm) != 0)
            bench_fail("wakeup-cost: timer_create failed: %s", strerror(errno));
        struct itimerspec it = { { interval_us / 1000000, (interval_us % 1000000) * 1000 },
                                 { interval_us / 1000000, (interval_us % 1000000) * 1000 } };
        sig_count = 0;
        timer_settime(tm, 0, &it, NULL);
        n = bench_daxpy_for(seconds);
        long w = (long)sig_count;
        timer_delete(tm);
        signal(SIGRTMIN, SIG_IGN);
        *nwakes = w;
    } else if (v == W_SERVE) {
        void *base = NULL;
        ovl_segment_t seg;
        ovl_stats_t a, b;
        BENCH_OVL(ovl_segment_create(4096, &base, &seg));
        BENCH_OVL(ovl_stats_get(&a, sizeof a));
        n = bench_daxpy_for(seconds);
        BENCH_OVL(ovl_stats_get(&b, sizeof b));
        BENCH_OVL(ovl_segment_free(&seg));
        *nwakes = (long)(b.thread_wakeups - a.thread_wakeups);
    } else {
        /* one receive in flight, from this rank to itself, for the whole sample */
        static char rbuf[8], sbuf[8];
        ovl_request_t r;
        ovl_stats_t a, b;
        BENCH_OVL(ovl_irecv(rbuf, sizeof rbuf, MPI_BYTE, bench_rank, 4242, &r));
        BENCH_OVL(ovl_stats_get(&a, sizeof a));
        n = bench_daxpy_for(seconds);
        BENCH_OVL(ovl_stats_get(&b, sizeof b));
        ovl_request_t sr;
        BENCH_OVL(ovl_isend(sbuf, sizeof sbuf, MPI_BYTE, bench_rank, 4242, &sr));
        BENCH_OVL(ovl_wait(&sr, NULL));
        BENCH_OVL(ovl_wait(&r, NULL));
        *nwakes = (long)(b.thread_wakeups - a.thread_wakeups);
    }
    return n;
}

int bench_wakeup_cost(int argc, char **argv)
{
    static const char *cmd = "wakeup-cost";
    long *iv = NULL;
    int niv = 0, reps = 5;
    double seconds = 0.2;
    const char *csv = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--intervals"))
            niv = bench_parse_long_list(cmd, "--intervals", bench_optarg(cmd, argc, argv, &i), 1,
                                        1000000, &iv);
        else if (!strcmp(argv[i], "--reps"))
            reps = (int)bench_parse_long(cmd, "--reps", bench_optarg(cmd, argc, argv, &i), 1, 1000);
        else if (!strcmp(argv[i], "--time-ms"))
            seconds = 1e-3 * (double)bench_parse_long(cmd, "--time-ms",
                                                      bench_optarg(cmd, argc, argv, &i), 10, 10000);
        else if (!strcmp(argv[i], "--csv"))
            csv = bench_optarg(cmd, argc, argv, &i);
        else if (!strcmp(argv[i], "--help"))
            bench_help_exit(
                "ovl-bench wakeup-cost [--intervals LIST] [--reps N] [--time-ms MS] [--csv FILE]\n"
                "What one asynchronous wake-up on the computing core costs the computation,\n"
                "measured on every rank's own core at once (no MPI traffic): the daxpy\n"
                "loop alone against the loop while, every INTERVAL us (default 35,50,100,200),\n"
                "  thread-sleep  a thread on the same CPU wakes from nanosleep and sleeps again\n"
                "  timer-signal  a POSIX timer signals the computing thread (empty handler)\n"
                "and ovl-thread: ovl's progress thread with one receive in flight, at its\n"
                "usual pace (50 us); ovl-segment: the same thread while a\n"
                "segment is live and nothing is in flight (it serves other ranks' gets and\n"
                "puts). Prints, per rank, the wake-ups' real\n"
                "spacing, the share of the computation lost and the us lost per wake-up\n"
                "(medians of --reps samples of --time-ms each, default 5 x 200 ms,\n"
                "alternated with samples of the loop alone). Run it where the benchmarks\n"
                "run, e.g. testbed/ovl-cluster run --np 2 --ppn 1 --pin -- ovl-bench "
                "wakeup-cost\n");
        else
            bench_usage_error(cmd, "unknown option %s", argv[i]);
    }
    if (niv == 0) {
        static const long def[] = { 35, 50, 100, 200 };
        niv = 4;
        iv = malloc(sizeof def);
        if (!iv)
            bench_fail("out of memory");
        memcpy(iv, def, sizeof def);
    }
    /* the computation and every waker on this rank's current CPU */
    int cpu = sched_getcpu();
    if (cpu >= 0) {
        cpu_set_t s;
        CPU_ZERO(&s);
        CPU_SET(cpu, &s);
        pthread_setaffinity_np(pthread_self(), sizeof s, &s);
    }
    ovl_config_t eff;
    bench_ovl_start_thread(&eff); /* its thread inherits the pinning */
    int rows = niv * 2 + 2;
    /* per row: interval asked, spacing us, lost share, us per wake-up */
    double *res = calloc((size_t)rows * 4, sizeof(double));
    double *lost = calloc((size_t)reps, sizeof(double)),
           *per = calloc((size_t)reps, sizeof(double)), *gap = calloc((size_t)reps, sizeof(double));
    if (!res || !lost || !per || !gap)
        bench_fail("out of memory");
    bench_daxpy_for(0.05); /* warm up */
    for (int row = 0; row < rows; row++) {
        int v = row_variant(row, niv);
        long us = v == W_OVL     ? BENCH_USUAL_PACE_US
                  : v == W_SERVE ? (long)eff.progress.serve_us
                                 : iv[row % niv];
        for (int k = 0; k < reps; k++) {
            long base = bench_daxpy_for(seconds);
            long w = 0, n = loaded(v, us, seconds, cpu, &w);
            double l = base > 0 ? 1.0 - (double)n / (double)base : 0;
            lost[k] = l;
            per[k] = w > 0 ? l * seconds * 1e6 / (double)w : 0;
            gap[k] = w > 0 ? seconds * 1e6 / (double)w : 0;
        }
        res[row * 4 + 0] = (double)us;
        res[row * 4 + 1] = bench_stat_of(gap, reps).med;
        res[row * 4 + 2] = bench_stat_of(lost, reps).med;
        res[row * 4 + 3] = bench_stat_of(per, reps).med;
    }
    double *all =
        bench_rank == 0 ? calloc((size_t)bench_size * (size_t)rows * 4, sizeof(double)) : NULL;
    if (bench_rank == 0 && !all)
        bench_fail("out of memory");
    int cpus_all[256] = { 0 };
    MPI_Gather(res, rows * 4, MPI_DOUBLE, all, rows * 4, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    MPI_Gather(&cpu, 1, MPI_INT, bench_size <= 256 ? cpus_all : NULL, 1, MPI_INT, 0,
               MPI_COMM_WORLD);
    FILE *f = bench_csv_open(cmd, csv);
    if (f)
        fprintf(f, "bench,rank,cpu,variant,interval_us,spacing_us,lost_pct,us_per_wakeup\n");
    if (bench_rank == 0) {
        printf("ovl-bench wakeup-cost: %d ranks, each on its own CPU; medians of %d samples of "
               "%.0f ms\n%-5s %-4s %-13s %9s %11s %8s %12s\n",
               bench_size, reps, seconds * 1e3, "rank", "cpu", "waker", "interval", "spacing",
               "lost", "us/wake-up");
        for (int r = 0; r < bench_size; r++)
            for (int row = 0; row < rows; row++) {
                const double *x = &all[((size_t)r * (size_t)rows + (size_t)row) * 4];
                int v = row_variant(row, niv);
                int c = bench_size <= 256 ? cpus_all[r] : -1;
                printf("%-5d %-4d %-13s %6.0f us %8.1f us %7.1f%% %12.1f\n", r, c, wname[v], x[0],
                       x[1], 100 * x[2], x[3]);
                if (f)
                    fprintf(f, "wakeup-cost,%d,%d,%s,%.0f,%.2f,%.3f,%.2f\n", r, c, wname[v], x[0],
                            x[1], 100 * x[2], x[3]);
            }
    }
    bench_csv_close(f, csv);
    free(all);
    free(res);
    free(lost);
    free(per);
    free(gap);
    free(iv);
    bench_ovl_finalize();
    return 0;
}
