/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * ovl-bench callback-latency: how long after a message has arrived does its
 * continuation run, and what does the progress thread cost the computation
 * to get there? The data behind the progress-thread policy (progress.c).
 *
 * Rank 0 sends small messages carrying their send time (CLOCK_MONOTONIC,
 * one clock for both ranks of one machine), spaced by a random gap so they
 * land at random phases of the progress thread's polling. Rank 1 receives
 * them in one of these modes:
 *   baseline      no receive posted, rank 1 only computes: its daxpy rate
 *                 is the 100 % every CPU cost is measured against;
 *   mpi-spin      rank 1's only thread spins in MPI_Test: the earliest the
 *                 arrival can be seen, i.e. when the message "completed";
 *   spin-thread   a dedicated thread spins in MPI_Test while the main thread
 *                 computes (the usual hand-written alternative);
 *   ovl-thread    ovl_irecv + ovl_continue, OVL_PROGRESS=thread with
 *                 the lateness budget of a continuation (OVL_LATENESS_US)
 *                 swept; the main thread computes daxpy.
 * The one-way time of each message is (time seen - time sent); the added
 * delay of a mode is its quantile minus mpi-spin's (a clock offset between
 * ranks would cancel there).
 */
#include "common.h"

#include <pthread.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <stdlib.h>
#include <string.h>

static const char *const CMD = "callback-latency";
#define CL_TAG 11

static const char HELP[] =
    "Usage: ovl-bench callback-latency [options]   (exactly 2 ranks)\n"
    "\n"
    "Rank 0 sends small time-stamped messages at random intervals; rank 1 sees them\n"
    "  mpi-spin     by spinning in MPI_Test with nothing else to do (the reference:\n"
    "               when the message completed),\n"
    "  spin-thread  by a thread spinning in MPI_Test while the main thread computes,\n"
    "  ovl-thread   in an ovl continuation run by the progress thread while the main\n"
    "               thread computes daxpy, for each lateness budget (lateness_us,\n"
    "               OVL_LATENESS_US: how late the progress thread may see a completion\n"
    "               a continuation waits for).\n"
    "Reports p50/p90/p99 of the one-way time and of the delay added to mpi-spin,\n"
    "and the CPU the mode costs the main thread's daxpy (vs computing alone).\n"
    "\n"
    "Options:\n"
    "  --reps N        measured messages per mode (default 500)\n"
    "  --warmup N      discarded messages before them (default 20)\n"
    "  --lateness LIST lateness budgets to sweep in us (default\n"
    "                  10,25,30,35,40,50,100,200; 30 is ovl's default)\n"
    "  --gap-us N      mean interval between messages in us (default 1000;\n"
    "                  uniform in [N/2, 3N/2])\n"
    "  --no-spin-thread  skip the spin-thread mode\n"
    "  --csv FILE      one row per mode with all numbers\n"
    "  --help          this text\n"
    "\n"
    "The other OVL_* variables apply (docs/ENV.md); lateness_us is set per point.\n";

struct cl_opts {
    int reps, warmup;
    long *poll;
    int npoll;
    long gap_us;
    int spin_thread;
    const char *csv;
};

static void parse(int argc, char **argv, struct cl_opts *o)
{
    const char *poll = "10,25,30,35,40,50,100,200";
    o->reps = 500;
    o->warmup = 20;
    o->gap_us = 1000;
    o->spin_thread = 1;
    o->csv = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h"))
            bench_help_exit(HELP);
        else if (!strcmp(a, "--reps"))
            o->reps = (int)bench_parse_long(CMD, a, bench_optarg(CMD, argc, argv, &i), 1, 1000000);
        else if (!strcmp(a, "--warmup"))
            o->warmup = (int)bench_parse_long(CMD, a, bench_optarg(CMD, argc, argv, &i), 0, 100000);
        else if (!strcmp(a, "--lateness"))
            poll = bench_optarg(CMD, argc, argv, &i);
        else if (!strcmp(a, "--gap-us"))
            o->gap_us = bench_parse_long(CMD, a, bench_optarg(CMD, argc, argv, &i), 2, 10000000);
        else if (!strcmp(a, "--no-spin-thread"))
            o->spin_thread = 0;
        else if (!strcmp(a, "--csv"))
            o->csv = bench_optarg(CMD, argc, argv, &i);
        else
            bench_usage_error(CMD, "unknown option '%s'", a);
    }
    o->npoll = bench_parse_long_list(CMD, "--lateness", poll, 1, 1000000, &o->poll);
}

/* ---- the sender ------------------------------------------------------------------- */

/* Gap sequence: the same in every mode (fixed-seed LCG). */
static double gap_s(uint64_t *seed, long gap_us)
{
    *seed = *seed * 6364136223846793005ull + 1442695040888963407ull;
    double u = (double)(*seed >> 11) / (double)(1ull << 53);
    return (double)gap_us * 1e-6 * (0.5 + u);
}

static double total_time(int total, long gap_us)
{
    uint64_t seed = 42;
    double t = 0;
    for (int i = 0; i < total; i++)
        t += gap_s(&seed, gap_us);
    return t;
}

/* Rank 0: send `total` stamped messages, computing daxpy in between. */
static void sender(int total, long gap_us)
{
    uint64_t seed = 42;
    double next = bench_now();
    for (int i = 0; i < total; i++) {
        next += gap_s(&seed, gap_us);
        while (bench_now() < next)
            bench_daxpy();
        int64_t m[2] = { i, bench_now_ns() };
        BENCH_MPI(MPI_Send(m, 2, MPI_INT64_T, 1, CL_TAG, ovl_comm()));
    }
}

/* ---- the receiver ------------------------------------------------------------------- */

struct cl_state {
    int total, got;
    int64_t msg[2];
    double *lat_us; /* one-way time of message i */
    atomic_int done;
    ovl_request_t req;
};

static void record(struct cl_state *S, int64_t seen_ns)
{
    if (S->msg[0] != S->got)
        bench_fail("callback-latency: message %lld arrived as number %d", (long long)S->msg[0],
                   S->got);
    S->lat_us[S->got] = (double)(seen_ns - S->msg[1]) * 1e-3;
    S->got++;
}

/* mpi-spin: spin in MPI_Test on each message in turn. */
static void spin_receive(struct cl_state *S)
{
    for (int i = 0; i < S->total; i++) {
        MPI_Request r;
        int flag = 0;
        BENCH_MPI(MPI_Irecv(S->msg, 2, MPI_INT64_T, 0, CL_TAG, ovl_comm(), &r));
        while (!flag)
            BENCH_MPI(MPI_Test(&r, &flag, MPI_STATUS_IGNORE));
        record(S, bench_now_ns());
    }
    atomic_store(&S->done, 1);
}

static void *spin_thread_main(void *arg)
{
    spin_receive(arg);
    return NULL;
}

static void post_next(struct cl_state *S);

static void on_message(const ovl_status_t *st, void *arg)
{
    int64_t now = bench_now_ns();
    struct cl_state *S = arg;
    if (st->error != OVL_SUCCESS)
        bench_fail("callback-latency: receive failed: %s", ovl_strerror(st->error));
    record(S, now);
    if (S->got < S->total)
        post_next(S);
    else
        atomic_store_explicit(&S->done, 1, memory_order_release);
}

/* Post the next receive with its continuation, fire-and-forget. */
static void post_next(struct cl_state *S)
{
    ovl_request_t r;
    BENCH_OVL(ovl_irecv(S->msg, 2, MPI_INT64_T, 0, CL_TAG, &r));
    BENCH_OVL(ovl_continue(r, on_message, S));
    BENCH_OVL(ovl_request_free(&r));
}

/* Compute until S->done (reading the clock per daxpy, like the baseline). */
static double compute_until_done(struct cl_state *S, double *secs)
{
    long n = 0;
    double t0 = bench_now(), t1 = t0;
    while (!atomic_load_explicit(&S->done, memory_order_acquire)) {
        bench_daxpy();
        n++;
        t1 = bench_now();
    }
    *secs = t1 - t0;
    return (double)n / (t1 > t0 ? t1 - t0 : 1);
}

enum cl_mode { CL_BASELINE, CL_MPI_SPIN, CL_SPIN_THREAD, CL_OVL_THREAD };
static const char *const mode_name[] = { "baseline", "mpi-spin", "spin-thread", "ovl-thread" };

struct cl_point {
    enum cl_mode mode;
    long poll_us;          /* the lateness budget (ovl-thread) */
    struct bench_stat lat; /* us, measured messages */
    double rate;           /* daxpy/s of rank 1's main thread (0: none) */
    double wakeups_per_s;
    double helper_cpu; /* CPU of rank 1's other threads / elapsed (progress thread) */
};

static double tv_s(struct timeval t)
{
    return (double)t.tv_sec + 1e-6 * (double)t.tv_usec;
}

/* CPU seconds of the whole process and of the calling thread. */
static void cpu_times(double *proc, double *self)
{
    struct rusage p, t;
    getrusage(RUSAGE_SELF, &p);
    getrusage(RUSAGE_THREAD, &t);
    *proc = tv_s(p.ru_utime) + tv_s(p.ru_stime);
    *self = tv_s(t.ru_utime) + tv_s(t.ru_stime);
}

/* Run one mode on both ranks; rank 0 returns the receiver's numbers. */
static void run_mode(enum cl_mode mode, long poll_us, const struct cl_opts *o, struct cl_point *pt)
{
    const unsigned interval = (unsigned)(poll_us > 0 ? poll_us : 30);
    ovl_config_t cfg = {
        .field_mask = OVL_CONFIG_FIELD_PROGRESS | OVL_CONFIG_FIELD_LATENESS_US,
        .progress.mode = mode == CL_OVL_THREAD ? OVL_PROGRESS_THREAD : OVL_PROGRESS_INLINE,
        .progress.lateness_us = interval,
    };
    bench_ovl_init(&cfg);
    ovl_config_t eff;
    BENCH_OVL(ovl_config_get(&eff));
    int total = o->warmup + o->reps;
    struct cl_state S = { .total = total, .got = 0 };
    atomic_init(&S.done, 0);
    S.lat_us = calloc((size_t)total, sizeof *S.lat_us);
    if (!S.lat_us)
        bench_fail("out of memory");
    double rate = 0, secs = 0, wps = 0, helper = 0;
    double p0, m0, p1, m1;
    ovl_stats_t s0, s1;

    if (bench_rank == 1 && mode == CL_OVL_THREAD)
        post_next(&S); /* before the barrier: the first message finds it posted */
    MPI_Barrier(MPI_COMM_WORLD);
    if (bench_rank == 0) {
        sender(total, o->gap_us);
    } else {
        pthread_t th;
        switch (mode) {
        case CL_BASELINE: {
            double d = total_time(total, o->gap_us);
            long n = bench_daxpy_for(d);
            rate = (double)n / d;
            for (int i = 0; i < total; i++) {
                BENCH_MPI(
                    MPI_Recv(S.msg, 2, MPI_INT64_T, 0, CL_TAG, ovl_comm(), MPI_STATUS_IGNORE));
                S.got++;
            }
            break;
        }
        case CL_MPI_SPIN:
            spin_receive(&S);
            break;
        case CL_SPIN_THREAD:
            cpu_times(&p0, &m0);
            if (pthread_create(&th, NULL, spin_thread_main, &S) != 0)
                bench_fail("pthread_create failed");
            rate = compute_until_done(&S, &secs);
            pthread_join(th, NULL);
            cpu_times(&p1, &m1);
            helper = secs > 0 ? ((p1 - p0) - (m1 - m0)) / secs : 0;
            break;
        case CL_OVL_THREAD:
            BENCH_OVL(ovl_stats_get(&s0, sizeof s0));
            cpu_times(&p0, &m0);
            rate = compute_until_done(&S, &secs);
            cpu_times(&p1, &m1);
            BENCH_OVL(ovl_stats_get(&s1, sizeof s1));
            wps = secs > 0 ? (double)(s1.thread_wakeups - s0.thread_wakeups) / secs : 0;
            helper = secs > 0 ? ((p1 - p0) - (m1 - m0)) / secs : 0;
            break;
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    bench_ovl_finalize();

    /* rank 1 -> rank 0: the measured one-way times and the rate */
    double extra[3] = { rate, wps, helper };
    int n = mode == CL_BASELINE ? 0 : o->reps;
    if (bench_rank == 1) {
        MPI_Send(S.lat_us + o->warmup, n, MPI_DOUBLE, 0, 1, MPI_COMM_WORLD);
        MPI_Send(extra, 3, MPI_DOUBLE, 0, 2, MPI_COMM_WORLD);
    } else {
        MPI_Recv(S.lat_us, n, MPI_DOUBLE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Recv(extra, 3, MPI_DOUBLE, 1, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        pt->mode = mode;
        pt->poll_us = mode == CL_OVL_THREAD ? (long)eff.progress.lateness_us : 0;
        pt->lat = bench_stat_of(S.lat_us, n);
        pt->rate = extra[0];
        pt->wakeups_per_s = extra[1];
        pt->helper_cpu = extra[2];
    }
    free(S.lat_us);
}

int bench_callback_latency(int argc, char **argv)
{
    struct cl_opts o;
    parse(argc, argv, &o);
    bench_require_two_ranks(CMD);
    FILE *csv = bench_csv_open(CMD, o.csv);

    int hosts = bench_hosts();
    int same = bench_same_kernel();
    int *global = NULL, flag = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_WTIME_IS_GLOBAL, &global, &flag);
    int wtime_global = flag && global ? *global : 0;

    int npts = 3 + o.npoll;
    struct cl_point *pts = calloc((size_t)npts, sizeof *pts);
    if (!pts)
        bench_fail("out of memory");
    int k = 0;
    run_mode(CL_BASELINE, 0, &o, &pts[k++]);
    run_mode(CL_MPI_SPIN, 0, &o, &pts[k++]);
    if (o.spin_thread)
        run_mode(CL_SPIN_THREAD, 0, &o, &pts[k++]);
    for (int i = 0; i < o.npoll; i++)
        run_mode(CL_OVL_THREAD, o.poll[i], &o, &pts[k++]);
    npts = k;

    if (bench_rank == 0) {
        const struct cl_point *base = &pts[0], *ref = &pts[1];
        printf("ovl-bench callback-latency: 2 ranks on %d host%s; %d messages per mode (%d "
               "warm-up discarded), gap %ld us +-50%%\n",
               hosts, hosts == 1 ? "" : "s", o.reps, o.warmup, o.gap_us);
        printf("clock: CLOCK_MONOTONIC, %s (MPI_WTIME_IS_GLOBAL=%d)%s\n",
               same ? "same kernel on both ranks: one clock" : "DIFFERENT kernels", wtime_global,
               same ? ""
                    : "\n  one-way times are offset by the clock difference; "
                      "'added' columns remain valid");
        printf("one-way = seen - sent; added = quantile - mpi-spin quantile; cpu cost = 1 - "
               "main-thread daxpy rate / baseline (%.0f daxpy/s)\n\n",
               base->rate);
        printf("%-12s %8s | %8s %8s %8s %8s | %8s %8s %8s | %8s %8s %9s\n", "mode", "lateness",
               "p50", "p90", "p99", "max", "+p50", "+p90", "+p99", "cpu cost", "helper", "wakeups");
        printf("%-12s %8s | %8s %8s %8s %8s | %8s %8s %8s | %8s %8s %9s\n", "", "us", "us", "us",
               "us", "us", "us", "us", "us", "", "cpu", "/s");
        if (csv)
            fprintf(csv, "bench,mode,lateness_us,msgs,gap_us,hosts,same_clock,"
                         "lat_p50_us,lat_p90_us,lat_p99_us,lat_min_us,lat_max_us,lat_mean_us,"
                         "added_p50_us,added_p90_us,added_p99_us,daxpy_rate,baseline_rate,"
                         "cpu_cost,helper_cpu,wakeups_per_s\n");
        for (int i = 1; i < npts; i++) {
            const struct cl_point *p = &pts[i];
            double a50 = p->lat.med - ref->lat.med, a90 = p->lat.p90 - ref->lat.p90,
                   a99 = p->lat.p99 - ref->lat.p99;
            double cost = p->rate > 0 && base->rate > 0 ? 1 - p->rate / base->rate : 1;
            char pollbuf[16];
            snprintf(pollbuf, sizeof pollbuf, "%ld", p->poll_us);
            printf("%-12s %8s | %8.1f %8.1f %8.1f %8.1f | %8.1f %8.1f %8.1f | %7.1f%% "
                   "%7.1f%% %9.0f\n",
                   mode_name[p->mode], p->mode == CL_OVL_THREAD ? pollbuf : "-", p->lat.med,
                   p->lat.p90, p->lat.p99, p->lat.max, a50, a90, a99, 100 * cost,
                   100 * p->helper_cpu, p->wakeups_per_s);
            if (csv)
                fprintf(csv,
                        "callback-latency,%s,%ld,%d,%ld,%d,%d,%.3f,%.3f,%.3f,%.3f,%.3f,"
                        "%.3f,%.3f,%.3f,%.3f,%.1f,%.1f,%.4f,%.4f,%.1f\n",
                        mode_name[p->mode], p->poll_us, o.reps, o.gap_us, hosts, same, p->lat.med,
                        p->lat.p90, p->lat.p99, p->lat.min, p->lat.max, p->lat.mean, a50, a90, a99,
                        p->rate, base->rate, cost, p->helper_cpu, p->wakeups_per_s);
        }
        printf("(mpi-spin runs no computation: its cpu cost is 100%% by definition; helper cpu = "
               "CPU time of rank 1's other threads / elapsed)\n");
    }
    bench_csv_close(csv, o.csv);
    free(pts);
    free(o.poll);
    return 0;
}
