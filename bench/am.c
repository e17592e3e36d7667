/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * ovl-bench am: active messages, two ranks.
 *
 * Round trip: rank 0 sends n bytes and waits for an empty answer, rank 1
 * only drives progress; variants alternated each repetition:
 *   pingpong  ovl_isend of n bytes, answered by an ovl_isend of 0 bytes
 *   am        ovl_am_request of n bytes (the handler's acknowledgement
 *             is the answer)
 *
 * Polling-mask sweep (the communication-domains paper's Figures 6-7):
 * for each mask, ovl is started with OVL_AM_POLL_MASK = mask, and rank 1
 * has one thread, bound to a domain of its own, calling ovl_progress in a
 * loop: domain 0, where handlers run, is served only through the
 * first-domain rule (every mask + 1 drives). Rank 0 times the active
 * message round trip (8 bytes) and an 8-byte ovl_get from rank 1's
 * segment.
 */
#include "common.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

enum { ID_SINK = 1, ID_STOP = 2 };

static atomic_long handled;
static atomic_int stop;

static void sink(ovl_am_token_t t, const void *buf, size_t bytes, void *arg)
{
    (void)t;
    (void)buf;
    (void)bytes;
    (void)arg;
    atomic_fetch_add(&handled, 1);
}

static void stop_fn(ovl_am_token_t t, const void *buf, size_t bytes, void *arg)
{
    (void)t;
    (void)buf;
    (void)bytes;
    (void)arg;
    atomic_store(&stop, 1);
}

static void start(unsigned mask)
{
    ovl_config_t cfg = { .field_mask = OVL_CONFIG_FIELD_AM_POLL_MASK,
                         .threads.am_poll_mask = mask };
    if (!getenv("OVL_PROGRESS")) {
        cfg.field_mask |= OVL_CONFIG_FIELD_PROGRESS;
        cfg.progress.mode = OVL_PROGRESS_INLINE;
    }
    BENCH_OVL(ovl_init(MPI_COMM_WORLD, &cfg));
    BENCH_OVL(ovl_am_register(ID_SINK, sink, NULL));
    BENCH_OVL(ovl_am_register(ID_STOP, stop_fn, NULL));
    BENCH_MPI(MPI_Barrier(MPI_COMM_WORLD));
}

/* Rank 1 serves until rank 0 says stop (an ID_STOP message). */
static void serve_until_stop(void)
{
    while (!atomic_load(&stop))
        BENCH_OVL(ovl_progress());
    atomic_store(&stop, 0);
}

static void say_stop(void)
{
    ovl_request_t r;
    BENCH_OVL(ovl_am_request(1, ID_STOP, NULL, 0, &r));
    BENCH_OVL(ovl_wait(&r, OVL_STATUS_IGNORE));
}

static double am_round_trips(const char *buf, size_t n, int iters)
{
    double t0 = bench_now();
    for (int k = 0; k < iters; k++) {
        ovl_request_t r;
        BENCH_OVL(ovl_am_request(1, ID_SINK, buf, n, &r));
        BENCH_OVL(ovl_wait(&r, OVL_STATUS_IGNORE));
    }
    return (bench_now() - t0) / iters;
}

static double pingpong(char *buf, size_t n, int iters)
{
    double t0 = bench_now();
    char none;
    for (int k = 0; k < iters; k++) {
        ovl_request_t rq[2];
        if (bench_rank == 0) {
            BENCH_OVL(ovl_irecv(&none, 0, MPI_BYTE, 1, 2, &rq[0]));
            BENCH_OVL(ovl_isend(buf, (int)n, MPI_BYTE, 1, 1, &rq[1]));
        } else {
            BENCH_OVL(ovl_irecv(buf, (int)n, MPI_BYTE, 0, 1, &rq[0]));
            BENCH_OVL(ovl_wait(&rq[0], OVL_STATUS_IGNORE));
            BENCH_OVL(ovl_isend(&none, 0, MPI_BYTE, 0, 2, &rq[1]));
            rq[0] = OVL_REQUEST_NULL;
        }
        BENCH_OVL(ovl_waitall(2, rq, OVL_STATUS_IGNORE));
    }
    return (bench_now() - t0) / iters;
}

struct spinner {
    ovl_domain_t d;
};

static void *spin_on_domain(void *arg)
{
    struct spinner *s = arg;
    BENCH_OVL(ovl_domain_bind(s->d));
    serve_until_stop();
    BENCH_OVL(ovl_domain_bind(OVL_DOMAIN_DEFAULT));
    return NULL;
}

int bench_am(int argc, char **argv)
{
    static const char *cmd = "am";
    const char *csv = NULL;
    int iters = 2000, reps = 5;
    size_t *sizes = NULL;
    int nsizes = 0;
    long *masks = NULL;
    int nmasks = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--sizes"))
            nsizes =
                bench_parse_size_list(cmd, "--sizes", bench_optarg(cmd, argc, argv, &i), &sizes);
        else if (!strcmp(argv[i], "--iters"))
            iters = (int)bench_parse_long(cmd, "--iters", bench_optarg(cmd, argc, argv, &i), 1,
                                          10000000);
        else if (!strcmp(argv[i], "--reps"))
            reps = (int)bench_parse_long(cmd, "--reps", bench_optarg(cmd, argc, argv, &i), 1, 1000);
        else if (!strcmp(argv[i], "--masks"))
            nmasks = bench_parse_long_list(cmd, "--masks", bench_optarg(cmd, argc, argv, &i), 0,
                                           65535, &masks);
        else if (!strcmp(argv[i], "--csv"))
            csv = bench_optarg(cmd, argc, argv, &i);
        else if (!strcmp(argv[i], "--help"))
            bench_help_exit(
                "ovl-bench am [--sizes LIST] [--iters N] [--reps R] [--masks LIST] [--csv FILE]\n"
                "Active messages between 2 ranks. Round trip: rank 0 sends n bytes and waits\n"
                "for an empty answer, as an ovl_isend ping-pong (pingpong) and as an\n"
                "ovl_am_request (am), alternated; sizes default 8,64,512,4k,8k,64k. Then the\n"
                "polling-mask sweep: rank 1's only thread is bound to domain 1 and calls\n"
                "ovl_progress; for each OVL_AM_POLL_MASK (default 0,1,3,...,511) rank 0 times\n"
                "an 8-byte active message and an 8-byte ovl_get. Medians of --reps (5) runs of\n"
                "--iters (2000).\n");
        else
            bench_usage_error(cmd, "unknown option %s", argv[i]);
    }
    if (bench_size != 2)
        bench_usage_error(cmd, "needs 2 ranks (got %d)", bench_size);
    if (bench_thread_level < MPI_THREAD_MULTIPLE)
        bench_usage_error(cmd, "needs MPI_THREAD_MULTIPLE");
    if (!nsizes) {
        static const size_t def[] = { 8, 64, 512, 4096, 8192, 65536 };
        nsizes = (int)(sizeof def / sizeof *def);
        sizes = malloc(sizeof def);
        if (!sizes)
            bench_fail("out of memory");
        memcpy(sizes, def, sizeof def);
    }
    if (!nmasks) {
        static const long def[] = { 0, 1, 3, 7, 15, 31, 63, 127, 255, 511 };
        nmasks = (int)(sizeof def / sizeof *def);
        masks = malloc(sizeof def);
        if (!masks)
            bench_fail("out of memory");
        memcpy(masks, def, sizeof def);
    }
    size_t maxn = 8;
    for (int s = 0; s < nsizes; s++)
        if (sizes[s] > maxn)
            maxn = sizes[s];
    char *buf = malloc(maxn);
    double *t = malloc(sizeof *t * 2 * (size_t)reps);
    if (!buf || !t)
        bench_fail("out of memory");
    memset(buf, 1, maxn);
    FILE *f = bench_csv_open(cmd, csv);
    if (f)
        fprintf(f, "bench,part,variant,mask,msg_bytes,iters,reps,us_med,us_min,us_max\n");

    /* ---- round trip ---- */
    start(15);
    if (bench_rank == 0)
        printf("ovl-bench am: round trip, %d iterations, medians of %d runs (us)\n%8s %10s %10s "
               "%8s\n",
               iters, reps, "bytes", "pingpong", "am", "am/pp");
    for (int s = 0; s < nsizes; s++) {
        size_t n = sizes[s];
        for (int r = 0; r < reps; r++)
            for (int k = 0; k < 2; k++) {
                int v = (k + r) % 2;
                BENCH_MPI(MPI_Barrier(MPI_COMM_WORLD));
                if (v == 0) {
                    t[r] = pingpong(buf, n, iters);
                } else if (bench_rank == 0) {
                    t[reps + r] = am_round_trips(buf, n, iters);
                    say_stop();
                } else {
                    serve_until_stop();
                }
            }
        if (bench_rank == 0) {
            struct bench_stat pp = bench_stat_of(t, reps), am = bench_stat_of(t + reps, reps);
            char sz[32];
            printf("%8s %10.2f %10.2f %8.2f\n", bench_fmt_size(n, sz, sizeof sz), pp.med * 1e6,
                   am.med * 1e6, am.med / pp.med);
            if (f) {
                fprintf(f, "am,roundtrip,pingpong,,%zu,%d,%d,%.3f,%.3f,%.3f\n", n, iters, reps,
                        pp.med * 1e6, pp.min * 1e6, pp.max * 1e6);
                fprintf(f, "am,roundtrip,am,,%zu,%d,%d,%.3f,%.3f,%.3f\n", n, iters, reps,
                        am.med * 1e6, am.min * 1e6, am.max * 1e6);
            }
        }
    }
    BENCH_OVL(ovl_finalize());

    /* ---- the polling-mask sweep ---- */
    if (bench_rank == 0)
        printf("polling-mask sweep: rank 1's thread on domain 1 (us, medians)\n%6s %10s %10s\n",
               "mask", "am 8 B", "get 8 B");
    for (int m = 0; m < nmasks; m++) {
        start((unsigned)masks[m]);
        ovl_domain_t d;
        BENCH_OVL(ovl_domains_create(1, OVL_DOMAIN_PRIVATE, &d));
        void *base;
        ovl_segment_t seg;
        BENCH_OVL(ovl_segment_create(64, &base, &seg));
        double *ta = t, *tg = t + reps;
        for (int r = 0; r < reps; r++) {
            BENCH_MPI(MPI_Barrier(MPI_COMM_WORLD));
            if (bench_rank == 1) {
                struct spinner sp = { d };
                pthread_t th;
                if (pthread_create(&th, NULL, spin_on_domain, &sp) != 0)
                    bench_fail("am: pthread_create failed");
                pthread_join(th, NULL);
            } else {
                ta[r] = am_round_trips(buf, 8, iters);
                char *dst = buf; /* heap: a get may not land on the stack */
                double t0 = bench_now();
                for (int k = 0; k < iters; k++) {
                    ovl_request_t g;
                    BENCH_OVL(ovl_get(dst, 1, 0, 8, seg, NULL, &g));
                    BENCH_OVL(ovl_wait(&g, OVL_STATUS_IGNORE));
                }
                tg[r] = (bench_now() - t0) / iters;
                say_stop();
            }
        }
        if (bench_rank == 0) {
            struct bench_stat a = bench_stat_of(ta, reps), g = bench_stat_of(tg, reps);
            printf("%6ld %10.2f %10.2f\n", masks[m], a.med * 1e6, g.med * 1e6);
            if (f) {
                fprintf(f, "am,mask,am,%ld,8,%d,%d,%.3f,%.3f,%.3f\n", masks[m], iters, reps,
                        a.med * 1e6, a.min * 1e6, a.max * 1e6);
                fprintf(f, "am,mask,get,%ld,8,%d,%d,%.3f,%.3f,%.3f\n", masks[m], iters, reps,
                        g.med * 1e6, g.min * 1e6, g.max * 1e6);
            }
        }
        BENCH_OVL(ovl_segment_free(&seg));
        BENCH_OVL(ovl_domains_free(1, &d));
        BENCH_OVL(ovl_finalize());
    }
    bench_csv_close(f, csv);
    free(buf);
    free(t);
    free(sizes);
    free(masks);
    return 0;
}
