/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * ovl-bench domains: threads against processes, the experiment of the
 * communication-domains paper (Ibrahim and Yelick): bidirectional latency
 * (each worker posts a receive and a send to its partner and waits for
 * both) and, with --window W, a message rate (W of each in flight).
 *
 * A worker is one thread of one rank: --threads T threads per rank. Worker
 * (r, t) pairs with worker ((r + np/2) mod np, t), so the same program
 * measures processes (np = 2P ranks, --threads 1) and threads (np = 2
 * ranks, --threads P) with the same pairs; bench/domains.sh alternates the
 * two launches. With one rank, thread t pairs with thread t xor 1 of the
 * same process (2 threads against 2 processes on one host, with no wire).
 * The variants, alternated within a launch:
 *   mpi    plain MPI, MPI_THREAD_MULTIPLE, a communicator per thread (the
 *          paper's MPI case)
 *   mpix   MPICH's MPIX streams: a stream communicator per thread, each its
 *          own endpoint (built where mpi.h has MPIX_Stream_create; needs
 *          MPIR_CVAR_CH4_RESERVE_VCIS >= T)
 *   ovl    ovl_isend/ovl_irecv/ovl_waitall, every thread on domain 0 (tag t)
 *   ovl-dom the same, each thread on a communication domain of its own
 *          (ovl_domains_create: private, so on an MPIX stream where MPI has
 *          them; a pair of threads within one process shares a shared one)
 * Latency: the slowest worker's time per iteration, median over --reps.
 * With --rma each iteration is W one-sided gets of the partner's memory
 * and a flush instead: mpi, a window per thread (MPI_Get, MPI_Win_flush);
 * ovl, one segment, every thread on domain 0 (ovl_get, ovl_fence, which
 * retires the whole domain's gets); ovl-dom, the same segment reached
 * through each thread's domain's window (its fence retires its own).
 */
#include "common.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { V_MPI, V_MPIX, V_OVL, V_DOM, NVARIANTS };
static const char *const vname[NVARIANTS] = { "mpi", "mpix", "ovl", "ovl-dom" };

struct dom_cfg {
    int threads, iters, window, reps;
    double compute_s; /* --compute: per iteration, between posting and waiting */
    int rma;          /* --rma: gets and a flush instead of messages */
    size_t *sizes;
    int nsizes;
    int variant;
    size_t bytes;
};

struct worker {
    int t, pt;        /* this thread, its partner thread (the receive's tag) */
    int comm_of;      /* whose communicator it uses (a pair shares one) */
    MPI_Comm comm;    /* mpi: a duplicate per thread; mpix: a stream communicator */
    MPI_Win win;      /* mpi --rma: the thread's window */
    ovl_domain_t dom; /* ovl-dom: its domain */
#if defined(OVL_HAVE_MPIX_STREAM)
    MPIX_Stream stream;
#endif
    char *sbuf, *rbuf;
    double secs; /* the last run's time */
    pthread_t th;
};

static struct dom_cfg C;
static struct worker *W;
static ovl_segment_t seg = OVL_SEGMENT_NULL; /* --rma: ovl, ovl-dom */
static pthread_barrier_t bar;
static int partner;

/* One iteration: --window receives and sends, then wait for all of them. */
static void run_iters(struct worker *w, int iters)
{
    const int win = C.window, n = (int)C.bytes;
    MPI_Request rq[2 * 64];
    MPI_Status sts[2 * 64];
    ovl_request_t oq[2 * 64];
    const int is_ovl = C.variant == V_OVL || C.variant == V_DOM;
    for (int k = 0; C.rma && k < iters; k++) {
        for (int i = 0; i < win; i++) {
            char *rb = w->rbuf + (size_t)i * C.bytes;
            size_t off = ((size_t)w->t * (size_t)win + (size_t)i) * C.bytes;
            if (is_ovl)
                BENCH_OVL(ovl_get(rb, partner, off, C.bytes, seg, NULL, NULL));
            else
                BENCH_MPI(MPI_Get(rb, n, MPI_BYTE, partner, (MPI_Aint)i * (MPI_Aint)C.bytes, n,
                                  MPI_BYTE, w->win));
        }
        if (C.compute_s > 0)
            bench_daxpy_for(C.compute_s);
        if (is_ovl)
            BENCH_OVL(ovl_fence(seg));
        else
            BENCH_MPI(MPI_Win_flush(partner, w->win));
    }
    for (int k = 0; !C.rma && k < iters; k++) {
        for (int i = 0; i < win; i++) {
            char *rb = w->rbuf + (size_t)i * C.bytes, *sb = w->sbuf + (size_t)i * C.bytes;
            if (C.variant == V_OVL || C.variant == V_DOM) {
                BENCH_OVL(ovl_irecv(rb, n, MPI_BYTE, partner, w->pt, &oq[2 * i]));
                BENCH_OVL(ovl_isend(sb, n, MPI_BYTE, partner, w->t, &oq[2 * i + 1]));
            } else {
                BENCH_MPI(MPI_Irecv(rb, n, MPI_BYTE, partner, w->pt, w->comm, &rq[2 * i]));
                BENCH_MPI(MPI_Isend(sb, n, MPI_BYTE, partner, w->t, w->comm, &rq[2 * i + 1]));
            }
        }
        if (C.compute_s > 0) /* the hybrid kernel: compute while the halos travel */
            bench_daxpy_for(C.compute_s);
        if (C.variant == V_OVL || C.variant == V_DOM)
            BENCH_OVL(ovl_waitall(2 * win, oq, OVL_STATUS_IGNORE));
        else
            BENCH_MPI(MPI_Waitall(2 * win, rq, sts));
    }
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    if (C.variant == V_DOM)
        BENCH_OVL(ovl_domain_bind(w->dom));
    /* warm-up, then the timed run; thread 0 lines the ranks up between */
    pthread_barrier_wait(&bar);
    run_iters(w, C.iters / 10 + 1);
    pthread_barrier_wait(&bar);
    if (w->t == 0)
        BENCH_MPI(MPI_Barrier(MPI_COMM_WORLD));
    pthread_barrier_wait(&bar);
    double t0 = bench_now();
    run_iters(w, C.iters);
    w->secs = bench_now() - t0;
    pthread_barrier_wait(&bar);
    if (C.variant == V_DOM)
        BENCH_OVL(ovl_domain_bind(OVL_DOMAIN_DEFAULT));
    return NULL;
}

/* One run of the current variant and size over every thread: the slowest
 * worker's seconds, the same on every rank. */
static double run_once(void)
{
    for (int t = 1; t < C.threads; t++)
        if (pthread_create(&W[t].th, NULL, worker_main, &W[t]) != 0)
            bench_fail("domains: pthread_create failed");
    worker_main(&W[0]);
    double mine = 0, all = 0;
    for (int t = 1; t < C.threads; t++)
        pthread_join(W[t].th, NULL);
    for (int t = 0; t < C.threads; t++)
        if (W[t].secs > mine)
            mine = W[t].secs;
    BENCH_MPI(MPI_Allreduce(&mine, &all, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
    return all;
}

/* Set up the variant's communicators; 0 if it cannot run here (every rank
 * agrees). */
static ovl_domain_t doms[64];
static int ndoms;

static int variant_setup(int v, char *why, size_t len)
{
    int ok = 1;
    why[0] = 0;
    if (v == V_DOM) {
        /* one domain per pair of workers: a thread each across processes,
         * a pair of threads within one */
        ndoms = bench_size == 1 ? C.threads / 2 : C.threads;
        int rc = ovl_domains_create(ndoms, bench_size == 1 ? OVL_DOMAIN_SHARED : OVL_DOMAIN_PRIVATE,
                                    doms);
        if (rc != OVL_SUCCESS) {
            snprintf(why, len, "ovl_domains_create: %s", ovl_strerror(rc));
            ndoms = 0;
            return 0;
        }
        for (int t = 0; t < C.threads; t++)
            W[t].dom = doms[bench_size == 1 ? t / 2 : t];
    }
    if ((v == V_OVL || v == V_DOM) && C.rma) {
        /* made after the domains: each gets a window of it */
        void *base;
        int rc = ovl_segment_create((size_t)C.threads * (size_t)C.window * C.bytes, &base, &seg);
        if (rc != OVL_SUCCESS) {
            snprintf(why, len, "ovl_segment_create: %s", ovl_strerror(rc));
            return 0;
        }
        memset(base, bench_rank + 1, (size_t)C.threads * (size_t)C.window * C.bytes);
        BENCH_OVL(ovl_barrier());
    }
    if (v == V_OVL || v == V_DOM)
        return 1;
    if (v == V_MPIX && C.rma) {
        snprintf(why, len, "not measured with --rma");
        return 0;
    }
    for (int t = 0; t < C.threads; t++)
        W[t].comm = MPI_COMM_NULL;
    for (int t = 0; t < C.threads; t++) {
        if (v == V_MPI && W[t].comm_of == t &&
            MPI_Comm_dup(MPI_COMM_WORLD, &W[t].comm) != MPI_SUCCESS)
            ok = 0;
        if (v == V_MPI && W[t].comm_of != t)
            W[t].comm = W[W[t].comm_of].comm;
        W[t].win = MPI_WIN_NULL;
        if (v == V_MPI && C.rma && ok) {
            char *base;
            if (MPI_Win_allocate((MPI_Aint)C.window * (MPI_Aint)C.bytes, 1, MPI_INFO_NULL,
                                 W[t].comm, &base, &W[t].win) != MPI_SUCCESS ||
                MPI_Win_lock_all(MPI_MODE_NOCHECK, W[t].win) != MPI_SUCCESS)
                ok = 0;
            else
                memset(base, bench_rank + 1, (size_t)C.window * C.bytes);
        }
#if defined(OVL_HAVE_MPIX_STREAM)
        if (v == V_MPIX && bench_size == 1) {
            snprintf(why, len, "a stream serves one thread: no pairs within a process");
            ok = 0;
        }
        if (v == V_MPIX) {
            W[t].stream = MPIX_STREAM_NULL;
            if (ok && MPIX_Stream_create(MPI_INFO_NULL, &W[t].stream) != MPI_SUCCESS) {
                snprintf(why, len, "MPIX_Stream_create failed (set MPIR_CVAR_CH4_RESERVE_VCIS=%d)",
                         C.threads);
                ok = 0;
            }
            int all = 0;
            BENCH_MPI(MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
            ok = all;
            if (ok &&
                MPIX_Stream_comm_create(MPI_COMM_WORLD, W[t].stream, &W[t].comm) != MPI_SUCCESS) {
                snprintf(why, len, "MPIX_Stream_comm_create failed");
                ok = 0;
            }
        }
#else
        if (v == V_MPIX) {
            snprintf(why, len, "this MPI has no MPIX streams");
            ok = 0;
        }
#endif
    }
    int all = 0;
    BENCH_MPI(MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    if (!all && !why[0])
        snprintf(why, len, "another rank could not set it up");
    return all;
}

static void variant_teardown(void)
{
    if (seg != OVL_SEGMENT_NULL)
        BENCH_OVL(ovl_segment_free(&seg));
    for (int t = 0; t < C.threads; t++)
        if (W[t].win != MPI_WIN_NULL) {
            MPI_Win_unlock_all(W[t].win);
            MPI_Win_free(&W[t].win);
        }
    if (ndoms > 0) {
        BENCH_OVL(ovl_domains_free(ndoms, doms));
        ndoms = 0;
    }
    for (int t = 0; t < C.threads; t++) {
        if (W[t].comm != MPI_COMM_NULL && W[t].comm_of == t)
            MPI_Comm_free(&W[t].comm);
        W[t].comm = MPI_COMM_NULL;
#if defined(OVL_HAVE_MPIX_STREAM)
        if (W[t].stream != MPIX_STREAM_NULL)
            MPIX_Stream_free(&W[t].stream);
        W[t].stream = MPIX_STREAM_NULL;
#endif
    }
}

/* Resident memory of this process, KiB (/proc/self/statm). */
static long rss_kib(void)
{
    long pages = 0, res = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &res) != 2)
            res = 0;
        fclose(f);
    }
    return res * (sysconf(_SC_PAGESIZE) / 1024);
}

/* The paper's Table 1: how many domains can be made, what each costs to
 * make and in memory, and a segment's creation time with them. */
static void limits(FILE *f)
{
    enum { BATCH = 16 };
    ovl_domain_t *ids = malloc(OVL_DOMAINS_MAX * sizeof *ids);
    if (!ids)
        bench_fail("out of memory");
    int n = 0, rc = OVL_SUCCESS;
    if (bench_rank == 0)
        printf("%8s %14s %14s %16s\n", "domains", "create us/dom", "RSS KiB/dom",
               "segment 1 MB us");
    if (f)
        fprintf(f, "bench,domains,create_us_per_domain,rss_kib_per_domain,segment_create_us\n");
    while (n + BATCH < OVL_DOMAINS_MAX) {
        long r0 = rss_kib();
        BENCH_MPI(MPI_Barrier(MPI_COMM_WORLD));
        double t0 = bench_now();
        rc = ovl_domains_create(BATCH, OVL_DOMAIN_SHARED, ids + n);
        double dt = bench_now() - t0;
        if (rc != OVL_SUCCESS)
            break;
        n += BATCH;
        long dr = rss_kib() - r0;
        void *base;
        ovl_segment_t one;
        BENCH_MPI(MPI_Barrier(MPI_COMM_WORLD));
        double s0 = bench_now();
        /* a window per domain: MPI may run out of them before domains */
        int src = ovl_segment_create(1u << 20, &base, &one);
        double ds = src == OVL_SUCCESS ? bench_now() - s0 : -1;
        if (src == OVL_SUCCESS)
            BENCH_OVL(ovl_segment_free(&one));
        if (bench_rank == 0 && (n & (n - 1)) == 0) { /* powers of two */
            char segs[32] = "refused";
            if (ds >= 0)
                snprintf(segs, sizeof segs, "%.1f", ds * 1e6);
            printf("%8d %14.1f %14.1f %16s\n", n + 1, dt * 1e6 / BATCH, (double)dr / BATCH, segs);
            if (f)
                fprintf(f, "domains,%d,%.1f,%.1f,%s\n", n + 1, dt * 1e6 / BATCH, (double)dr / BATCH,
                        segs);
        }
    }
    if (bench_rank == 0)
        printf("%d domains made (domain 0 included), then: %s\n", n + 1,
               rc == OVL_SUCCESS ? "OVL_DOMAINS_MAX" : ovl_error_detail());
    BENCH_OVL(ovl_domains_free(n, ids));
    free(ids);
}

int bench_domains(int argc, char **argv)
{
    int do_limits = 0;
    static const char *cmd = "domains";
    const char *csv = NULL, *variants = "mpi,mpix,ovl,ovl-dom";
    C = (struct dom_cfg){ .threads = 1, .iters = 2000, .window = 1, .reps = 5 };
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads"))
            C.threads =
                (int)bench_parse_long(cmd, "--threads", bench_optarg(cmd, argc, argv, &i), 1, 64);
        else if (!strcmp(argv[i], "--sizes"))
            C.nsizes =
                bench_parse_size_list(cmd, "--sizes", bench_optarg(cmd, argc, argv, &i), &C.sizes);
        else if (!strcmp(argv[i], "--iters"))
            C.iters = (int)bench_parse_long(cmd, "--iters", bench_optarg(cmd, argc, argv, &i), 1,
                                            10000000);
        else if (!strcmp(argv[i], "--window"))
            C.window =
                (int)bench_parse_long(cmd, "--window", bench_optarg(cmd, argc, argv, &i), 1, 64);
        else if (!strcmp(argv[i], "--reps"))
            C.reps =
                (int)bench_parse_long(cmd, "--reps", bench_optarg(cmd, argc, argv, &i), 1, 1000);
        else if (!strcmp(argv[i], "--limits"))
            do_limits = 1;
        else if (!strcmp(argv[i], "--rma"))
            C.rma = 1;
        else if (!strcmp(argv[i], "--compute"))
            C.compute_s = (double)bench_parse_long(cmd, "--compute",
                                                   bench_optarg(cmd, argc, argv, &i), 0, 10000000) *
                          1e-6;
        else if (!strcmp(argv[i], "--variants"))
            variants = bench_optarg(cmd, argc, argv, &i);
        else if (!strcmp(argv[i], "--csv"))
            csv = bench_optarg(cmd, argc, argv, &i);
        else if (!strcmp(argv[i], "--help"))
            bench_help_exit(
                "ovl-bench domains [--threads T] [--sizes LIST] [--iters N] [--window W]\n"
                "                  [--reps R] [--compute US] [--rma] [--variants LIST] [--csv "
                "FILE]\n"
                "Threads against processes (the communication-domains paper): worker (rank r,\n"
                "thread t) exchanges with worker (r + np/2 mod np, t): each iteration posts W\n"
                "receives and W sends (default 1) and waits for all. Processes: np = 2P,\n"
                "--threads 1; threads: np = 2, --threads P (bench/domains.sh alternates the\n"
                "two launches). Variants (default mpi,mpix,ovl,ovl-dom), alternated: mpi (MPI,\n"
                "a communicator per thread), mpix (MPICH's MPIX streams, a stream\n"
                "communicator per thread; needs MPIR_CVAR_CH4_RESERVE_VCIS >= T), ovl\n"
                "(ovl_isend/ovl_irecv, tag t, domain 0), ovl-dom (the same, a domain per\n"
                "thread). Prints the slowest worker's time per iteration\n"
                "(us) and messages per second per worker, medians of --reps (default 5) runs of\n"
                "--iters (default 2000). Sizes default 8,64,512,2k,16k,128k,2m. --compute US:\n"
                "the hybrid kernel, US microseconds of computation between posting and waiting\n"
                "(a halo exchange overlapped with the interior's update). --limits: domains\n"
                "made 16 at a time until ovl or MPI runs out: time and memory per domain, and a\n"
                "1 MB segment's creation time with them (the paper's Table 1). --rma: each\n"
                "iteration gets W blocks of the partner's memory and flushes (mpi: a window\n"
                "per thread; ovl: one segment on domain 0, whose ovl_fence retires every\n"
                "thread's gets; ovl-dom: each thread through its domain's window).\n");
        else
            bench_usage_error(cmd, "unknown option %s", argv[i]);
    }
    int use[NVARIANTS] = { 0 };
    {
        char *dup = strdup(variants), *save = NULL;
        if (!dup)
            bench_fail("out of memory");
        for (char *tok = strtok_r(dup, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            int found = 0;
            for (int v = 0; v < NVARIANTS; v++)
                if (!strcmp(tok, vname[v]))
                    use[v] = found = 1;
            if (!found)
                bench_usage_error(cmd, "--variants: unknown variant '%s' (mpi, mpix, ovl, ovl-dom)",
                                  tok);
        }
        free(dup);
    }
    if (C.nsizes == 0) {
        static const size_t def[] = { 8, 64, 512, 2048, 16384, 131072, 2097152 };
        C.nsizes = (int)(sizeof def / sizeof *def);
        C.sizes = malloc(sizeof def);
        if (!C.sizes)
            bench_fail("out of memory");
        memcpy(C.sizes, def, sizeof def);
    }
    if (C.rma && bench_size < 2)
        bench_usage_error(cmd, "--rma needs ranks to get from (np >= 2)");
    if (bench_size > 1 && bench_size % 2)
        bench_usage_error(cmd, "needs one rank or an even number (got %d)", bench_size);
    if (bench_size == 1 && C.threads % 2)
        bench_usage_error(cmd, "one rank needs an even --threads (pairs of threads)");
    if (C.threads > 1 && bench_thread_level < MPI_THREAD_MULTIPLE)
        bench_usage_error(cmd, "--threads %d needs MPI_THREAD_MULTIPLE", C.threads);
    partner = (bench_rank + bench_size / 2) % bench_size;
    size_t maxsz = 0;
    for (int s = 0; s < C.nsizes; s++)
        if (C.sizes[s] > maxsz)
            maxsz = C.sizes[s];
    if (maxsz == 0 || maxsz > (size_t)1 << 30)
        bench_usage_error(cmd, "--sizes: each must be in [1, 1g]");
    W = calloc((size_t)C.threads, sizeof *W);
    if (!W || pthread_barrier_init(&bar, NULL, (unsigned)C.threads) != 0)
        bench_fail("out of memory");
    for (int t = 0; t < C.threads; t++) {
        W[t].t = t;
        W[t].comm = MPI_COMM_NULL;
        W[t].win = MPI_WIN_NULL;
        W[t].pt = bench_size == 1 ? t ^ 1 : t;
        W[t].comm_of = bench_size == 1 ? (t & ~1) : t;
        W[t].sbuf = malloc(maxsz * (size_t)C.window);
        W[t].rbuf = malloc(maxsz * (size_t)C.window);
        if (!W[t].sbuf || !W[t].rbuf)
            bench_fail("out of memory");
        memset(W[t].sbuf, bench_rank + 1, maxsz * (size_t)C.window);
#if defined(OVL_HAVE_MPIX_STREAM)
        W[t].stream = MPIX_STREAM_NULL;
#endif
    }
    ovl_config_t eff;
    bench_ovl_start(0, &eff);

    FILE *f = bench_csv_open(cmd, csv);
    if (do_limits) {
        limits(f);
        bench_csv_close(f, csv);
        bench_ovl_finalize();
        return 0;
    }
    if (f)
        fprintf(f,
                "bench,variant,ranks,threads,window,msg_bytes,iters,reps,progress,us_per_iter_med,"
                "us_per_iter_min,us_per_iter_max,msgs_per_s_med%s\n",
                C.rma ? ",rma" : "");
    if (bench_rank == 0)
        printf("ovl-bench domains: %d ranks x %d thread%s, window %d, %d iterations, medians of %d "
               "runs; ovl progress %s\n%-7s %10s %12s %12s %14s\n",
               bench_size, C.threads, C.threads > 1 ? "s" : "", C.window, C.iters, C.reps,
               eff.progress.mode == OVL_PROGRESS_THREAD ? "thread" : "inline", "variant", "message",
               "us/iter", "(min-max)", "msgs/s/worker");
    int can[NVARIANTS];
    char why[NVARIANTS][160];
    for (int v = 0; v < NVARIANTS; v++) {
        can[v] = use[v] && variant_setup(v, why[v], sizeof why[v]);
        variant_teardown();
        if (use[v] && !can[v] && bench_rank == 0)
            printf("%-7s skipped: %s\n", vname[v], why[v]);
    }
    double *t = calloc((size_t)NVARIANTS * (size_t)C.reps, sizeof *t);
    if (!t)
        bench_fail("out of memory");
    for (int s = 0; s < C.nsizes; s++) {
        C.bytes = C.sizes[s];
        for (int r = 0; r < C.reps; r++)
            for (int k = 0; k < NVARIANTS; k++) {
                int v = (k + r) % NVARIANTS; /* a new first variant each rep */
                if (!can[v])
                    continue;
                char w[160];
                if (!variant_setup(v, w, sizeof w))
                    bench_fail("domains: %s could not be set up again: %s", vname[v], w);
                C.variant = v;
                t[v * C.reps + r] = run_once() / C.iters;
                variant_teardown();
            }
        for (int v = 0; v < NVARIANTS; v++) {
            if (!can[v] || bench_rank != 0)
                continue;
            struct bench_stat st = bench_stat_of(&t[v * C.reps], C.reps);
            double rate = (C.rma ? 1.0 : 2.0) * C.window / st.med;
            char sz[32];
            printf("%-7s %10s %12.2f %5.2f-%-6.2f %14.0f\n", vname[v],
                   bench_fmt_size(C.bytes, sz, sizeof sz), st.med * 1e6, st.min * 1e6, st.max * 1e6,
                   rate);
            if (f)
                fprintf(f, "domains,%s,%d,%d,%d,%zu,%d,%d,%s,%.3f,%.3f,%.3f,%.0f%s\n", vname[v],
                        bench_size, C.threads, C.window, C.bytes, C.iters, C.reps,
                        eff.progress.mode == OVL_PROGRESS_THREAD ? "thread" : "inline",
                        st.med * 1e6, st.min * 1e6, st.max * 1e6, rate, C.rma ? ",1" : "");
        }
    }
    bench_csv_close(f, csv);
    bench_ovl_finalize();
    for (int i = 0; i < C.threads; i++) {
        free(W[i].sbuf);
        free(W[i].rbuf);
    }
    free(W);
    free(t);
    free(C.sizes);
    pthread_barrier_destroy(&bar);
    return 0;
}
