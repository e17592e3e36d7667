/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * ovl-bench dds and decomposition: the one-sided experiments of HUNT
 * (section 6) on ovl. Rank 0 reads from rank 1's memory; rank 1 only waits
 * in MPI_Barrier (which runs MPI's progress for the one-sided traffic).
 *
 *   dds            Table 2: the cost of demand-driven synchronisation. One
 *                  8-byte get that is then used, and two consecutive ones:
 *                  blocking (MPI_Get + MPI_Win_flush), hand-written
 *                  non-blocking (MPI_Rget ... MPI_Wait before the use) and
 *                  ovl (ovl_get, the use waits in the access fault).
 *                  Then the same single get while the target computes
 *                  without calling MPI: is the target still responsive?
 *   decomposition  Figures 8-9: a get of N bytes (8 KB .. 8 MB) followed by
 *                  a copy of the received data, in order, one 4 KiB memcpy
 *                  at a time (glibc's memcpy of a large block reads its last
 *                  bytes first, which would make every variant wait for the
 *                  whole transfer at once) ("self-induced overlap":
 *                  only strip-mining can help), and the same with an
 *                  independent computation as long as the transfer between
 *                  the two ("independent overlap": ovl must match the
 *                  hand-written non-blocking version). Variants blocking,
 *                  nb, ovl (the model decides the strips), ovl-nosplit
 *                  (decomp hint 0) and ovl-split4 (four strips whatever
 *                  the model says: four unsplit gets issued together); the
 *                  split threshold the model predicts and the one measured
 *                  are printed, measured two ways: the smallest size from
 *                  which ovl-split4's median beats ovl-nosplit's at every
 *                  larger size, and the smallest from which ovl-split4 is
 *                  never slower beyond chance (rep by rep, sign test).
 *
 * Variants run interleaved within each rep, so a load change on the machine
 * hits them all alike. Medians are printed side by side, with ratios.
 */
#include "common.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

enum { V_BLOCK, V_NB, V_OVL, V_NOSPLIT, V_SPLIT4, NV };
static const char *vname[NV] = { "blocking", "nb", "ovl", "ovl-nosplit", "ovl-split4" };

struct rma_env {
    MPI_Win win; /* plain MPI window for the MPI variants */
    char *wbase;
    ovl_segment_t seg;
    char *sbase;
    size_t bytes;
};

static void env_open(struct rma_env *e, size_t bytes)
{
    e->bytes = bytes;
    BENCH_MPI(
        MPI_Win_allocate((MPI_Aint)bytes, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &e->wbase, &e->win));
    BENCH_MPI(MPI_Win_lock_all(MPI_MODE_NOCHECK, e->win));
    void *b = NULL;
    BENCH_OVL(ovl_segment_create(bytes, &b, &e->seg));
    e->sbase = b;
    for (size_t i = 0; i < bytes; i++)
        e->wbase[i] = e->sbase[i] = (char)(i * 7 + 1);
    BENCH_OVL(ovl_barrier());
    MPI_Barrier(MPI_COMM_WORLD);
}

static void env_close(struct rma_env *e)
{
    BENCH_MPI(MPI_Win_unlock_all(e->win));
    BENCH_MPI(MPI_Win_free(&e->win));
    BENCH_OVL(ovl_segment_free(&e->seg));
}

static void *page_alloc(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        bench_fail("mmap of %zu bytes failed", bytes);
    memset(p, 0, bytes);
    return p;
}

static volatile uint64_t sink;

/* Idle the link for @us microseconds on every rank, then line up. The
 * emulated cluster shapes each link with a token bucket (64 KB burst): a
 * variant timed right after another one's transfer starts with a drained
 * bucket, one timed after a long computation with a full one. The gap gives
 * every variant the same link state; with it, and with the order rotated
 * every rep, the variants are compared on equal terms. */
static void idle_gap(long us)
{
    if (us > 0) {
        struct timespec ts = { us / 1000000, (us % 1000000) * 1000 };
        nanosleep(&ts, NULL);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

/* ---- dds ------------------------------------------------------------------------------- */

/* One rep of variant @v with @k (1 or 2) 8-byte gets; returns seconds. */
static double dds_once(struct rma_env *e, int v, int k, uint64_t *dst)
{
    double t0 = bench_now();
    if (v == V_BLOCK) {
        for (int i = 0; i < k; i++) {
            BENCH_MPI(MPI_Get(&dst[i * 512], 8, MPI_BYTE, 1, 8 * i, 8, MPI_BYTE, e->win));
            BENCH_MPI(MPI_Win_flush(1, e->win));
        }
    } else if (v == V_NB) {
        MPI_Request r[2] = { MPI_REQUEST_NULL, MPI_REQUEST_NULL };
        for (int i = 0; i < k && i < 2; i++)
            BENCH_MPI(MPI_Rget(&dst[i * 512], 8, MPI_BYTE, 1, 8 * i, 8, MPI_BYTE, e->win, &r[i]));
        for (int i = 0; i < 2; i++)
            BENCH_MPI(MPI_Wait(&r[i], MPI_STATUS_IGNORE));
    } else {
        for (int i = 0; i < k; i++)
            BENCH_OVL(ovl_get(&dst[i * 512], 1, 8 * (size_t)i, 8, e->seg, NULL, NULL));
    }
    uint64_t s = 0;
    for (int i = 0; i < k; i++)
        s += dst[i * 512]; /* the use: ovl waits here */
    double t = bench_now() - t0;
    sink += s;
    return t;
}

int bench_dds(int argc, char **argv)
{
    static const char *cmd = "dds";
    int reps = 1000;
    const char *csv = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps"))
            reps =
                (int)bench_parse_long(cmd, "--reps", bench_optarg(cmd, argc, argv, &i), 1, 1000000);
        else if (!strcmp(argv[i], "--csv"))
            csv = bench_optarg(cmd, argc, argv, &i);
        else if (!strcmp(argv[i], "--help"))
            bench_help_exit("ovl-bench dds [--reps N] [--csv FILE]\n"
                            "HUNT Table 2: one and two consecutive 8-byte gets, then their use:\n"
                            "blocking, hand-written non-blocking, ovl demand-driven.\n"
                            "Two ranks on one node: ovl's get is a direct copy unless\n"
                            "OVL_RMA_LOCAL=overlap.\n");
        else
            bench_usage_error(cmd, "unknown option %s", argv[i]);
    }
    bench_require_two_ranks(cmd);
    ovl_config_t eff;
    bench_ovl_start_thread(&eff);
    struct rma_env e;
    env_open(&e, 4096);
    uint64_t *dst = page_alloc(8192);
    double *t[2][3];
    for (int k = 0; k < 2; k++)
        for (int v = 0; v < 3; v++)
            t[k][v] = calloc((size_t)reps, sizeof(double));
    for (int r = 0; r < reps; r++) {
        for (int k = 0; k < 2; k++)
            for (int v = 0; v < 3; v++) {
                MPI_Barrier(MPI_COMM_WORLD);
                if (bench_rank == 0)
                    t[k][v][r] = dds_once(&e, v, k + 1, dst);
                MPI_Barrier(MPI_COMM_WORLD);
            }
    }
    FILE *f = bench_csv_open(cmd, csv);
    if (f)
        fprintf(f, "bench,transfers,variant,median_us,min_us,p90_us\n");
    if (bench_rank == 0) {
        printf("dds: %d reps, monitor %s, progress %s (medians, us)\n", reps,
               ovl_monitor_name(eff.access.monitor),
               eff.progress.mode == OVL_PROGRESS_THREAD ? "thread" : "inline");
        printf("%-10s %10s %10s %10s %12s %12s\n", "transfers", "blocking", "nb", "ovl",
               "ovl/blocking", "ovl/nb");
        for (int k = 0; k < 2; k++) {
            struct bench_stat st[3];
            for (int v = 0; v < 3; v++) {
                st[v] = bench_stat_of(t[k][v], reps);
                if (f)
                    fprintf(f, "dds,%d,%s,%.3f,%.3f,%.3f\n", k + 1, vname[v], st[v].med * 1e6,
                            st[v].min * 1e6, st[v].p90 * 1e6);
            }
            printf("%-10d %10.2f %10.2f %10.2f %12.2f %12.2f\n", k + 1, st[0].med * 1e6,
                   st[1].med * 1e6, st[2].med * 1e6, st[2].med / st[0].med, st[2].med / st[1].med);
        }
    }
    /* Target progress: rank 1 computes (no MPI call) for a while; rank 0's
     * single gets are served only if something on rank 1 drives MPI -- the
     * progress thread while a segment exists. */
    double busy = 0.5;
    int nb = reps < 200 ? reps : 200;
    double *tb[2] = { calloc((size_t)nb, sizeof(double)), calloc((size_t)nb, sizeof(double)) };
    int got[2] = { 0, 0 };
    for (int v = 1; v < 3; v++) {
        MPI_Barrier(MPI_COMM_WORLD);
        if (bench_rank == 1) {
            bench_daxpy_for(busy);
        } else {
            double end = bench_now() + busy * 0.8;
            while (got[v - 1] < nb && bench_now() < end) {
                tb[v - 1][got[v - 1]] = dds_once(&e, v, 1, dst);
                got[v - 1]++;
            }
        }
        MPI_Barrier(MPI_COMM_WORLD);
    }
    if (bench_rank == 0) {
        struct bench_stat s1 = bench_stat_of(tb[0], got[0]), s2 = bench_stat_of(tb[1], got[1]);
        printf("target computing %.1f s without MPI calls: nb %d gets (median %.2f us, max "
               "%.0f us), ovl %d gets (median %.2f us, max %.0f us)\n",
               busy, got[0], s1.med * 1e6, s1.max * 1e6, got[1], s2.med * 1e6, s2.max * 1e6);
        if (f)
            fprintf(f, "# target_busy,nb,%d,%.3f,ovl,%d,%.3f\n", got[0], s1.med * 1e6, got[1],
                    s2.med * 1e6);
    }
    free(tb[0]);
    free(tb[1]);
    bench_csv_close(f, csv);
    for (int k = 0; k < 2; k++)
        for (int v = 0; v < 3; v++)
            free(t[k][v]);
    munmap(dst, 8192);
    env_close(&e);
    bench_ovl_finalize();
    return 0;
}

/* ---- decomposition ---------------------------------------------------------------------- */

/* One rep: get @n bytes into @dst, optional independent work (@work daxpy
 * calls), then copy the data to @out. Returns seconds. */
static double deco_once(struct rma_env *e, int v, size_t n, char *dst, char *out, long work)
{
    double t0 = bench_now();
    MPI_Request r = MPI_REQUEST_NULL;
    if (v == V_BLOCK) {
        BENCH_MPI(MPI_Get(dst, (int)n, MPI_BYTE, 1, 0, (int)n, MPI_BYTE, e->win));
        BENCH_MPI(MPI_Win_flush(1, e->win));
    } else if (v == V_NB) {
        BENCH_MPI(MPI_Rget(dst, (int)n, MPI_BYTE, 1, 0, (int)n, MPI_BYTE, e->win, &r));
    } else if (v == V_SPLIT4) {
        /* strip-mining whatever the model says: up to 4 equal strips on page
         * boundaries, each an unsplit guarded get, issued together */
        size_t k = n / 4096 < 4 ? (n / 4096 ? n / 4096 : 1) : 4;
        size_t piece = (n / k + 4095) / 4096 * 4096;
        BENCH_OVL(ovl_segment_hint(e->seg, BENCH_DECOMP(0)));
        for (size_t o = 0; o < n; o += piece)
            BENCH_OVL(ovl_get(dst + o, 1, o, n - o < piece ? n - o : piece, e->seg, NULL, NULL));
    } else {
        BENCH_OVL(ovl_segment_hint(e->seg, BENCH_DECOMP(v == V_NOSPLIT ? 0 : 1)));
        BENCH_OVL(ovl_get(dst, 1, 0, n, e->seg, NULL, NULL));
    }
    for (long i = 0; i < work; i++)
        bench_daxpy();
    if (v == V_NB)
        BENCH_MPI(MPI_Wait(&r, MPI_STATUS_IGNORE));
    for (size_t o = 0; o < n; o += 4096) /* the use, in order: ovl waits strip by strip */
        memcpy(out + o, dst + o, n - o < 4096 ? n - o : 4096);
    double t = bench_now() - t0;
    sink += (uint64_t)out[n - 1];
    return t;
}

/* Whether @a is slower than @b, paired rep by rep (@a[r] and @b[r] ran in
 * the same rotation round), beyond chance: a one-sided sign test, p < 0.05,
 * over the reps that differ. Medians of separate samples call a 0.2 %
 * difference at 256 KB a loss in one run and a win in the next; the pairs
 * say whether it is one. */
static int slower_paired(const double *a, const double *b, int reps)
{
    int n = 0, k = 0;
    for (int r = 0; r < reps; r++)
        if (a[r] != b[r]) {
            n++;
            k += a[r] > b[r];
        }
    if (n == 0 || 2 * k <= n)
        return 0;
    double p = 0; /* P(X >= k), X ~ Binomial(n, 1/2) */
    for (int i = k; i <= n; i++)
        p += exp(lgamma(n + 1.0) - lgamma(i + 1.0) - lgamma(n - i + 1.0) - n * log(2.0));
    return p < 0.05;
}

int bench_decomposition(int argc, char **argv)
{
    static const char *cmd = "decomposition";
    int reps = 20;
    long gap_us = 1000;
    const char *csv = NULL;
    size_t *sizes = NULL;
    int nsizes = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps"))
            reps =
                (int)bench_parse_long(cmd, "--reps", bench_optarg(cmd, argc, argv, &i), 1, 100000);
        else if (!strcmp(argv[i], "--sizes"))
            nsizes =
                bench_parse_size_list(cmd, "--sizes", bench_optarg(cmd, argc, argv, &i), &sizes);
        else if (!strcmp(argv[i], "--gap"))
            gap_us = bench_parse_long(cmd, "--gap", bench_optarg(cmd, argc, argv, &i), 0, 1000000);
        else if (!strcmp(argv[i], "--csv"))
            csv = bench_optarg(cmd, argc, argv, &i);
        else if (!strcmp(argv[i], "--help"))
            bench_help_exit(
                "ovl-bench decomposition [--reps N] [--sizes 8k,16k,...] [--gap US] [--csv FILE]\n"
                "HUNT Figures 8-9: get N bytes then memcpy them (self-induced overlap), and\n"
                "with an independent computation as long as the transfer in between\n"
                "(independent overlap): blocking, nb, ovl, ovl-nosplit, ovl-split4 (four\n"
                "strips whatever the model says). Prints the split threshold the model\n"
                "predicts and the one measured (ovl-split4 against ovl-nosplit: faster in the\n"
                "median at every larger size; never slower beyond chance, rep by rep, sign\n"
                "test p < 0.05, at every larger size). Two ranks on one\n"
                "node: ovl's get is a direct copy unless OVL_RMA_LOCAL=overlap.\n"
                "Variants are interleaved, their order rotated every rep, and each timed\n"
                "run follows an idle gap of US microseconds (default 1000; 0 for none)\n"
                "so that every variant starts on an idle link.\n");
        else
            bench_usage_error(cmd, "unknown option %s", argv[i]);
    }
    if (!nsizes) {
        nsizes = 11;
        sizes = malloc((size_t)nsizes * sizeof *sizes);
        for (int i = 0; i < nsizes; i++)
            sizes[i] = (size_t)8192 << i; /* 8 KB .. 8 MB */
    }
    size_t maxn = 0;
    for (int i = 0; i < nsizes; i++) {
        if (sizes[i] == 0 || sizes[i] > (1u << 30))
            bench_usage_error(cmd, "--sizes: %zu outside [1, 1g]", sizes[i]);
        maxn = sizes[i] > maxn ? sizes[i] : maxn;
    }
    bench_require_two_ranks(cmd);
    ovl_config_t eff;
    bench_ovl_start_thread(&eff);
    struct rma_env e;
    env_open(&e, maxn);
    size_t mapn = (maxn + 4095) / 4096 * 4096;
    char *dst = page_alloc(mapn), *out = page_alloc(mapn);
    /* daxpy calls per second, for the independent computation */
    double t0 = bench_now();
    long calls = bench_daxpy_for(0.05);
    double daxpy_s = (bench_now() - t0) / (double)calls;

    FILE *f = bench_csv_open(cmd, csv);
    if (f)
        fprintf(f, "bench,overlap,bytes,variant,median_us,min_us,p90_us,work_us\n");
    size_t predicted = 0;
    BENCH_OVL(ovl_model_split_threshold(&predicted));
    double *t = calloc((size_t)reps * NV, sizeof(double));
    double(*med)[2][NV] = calloc((size_t)nsizes, sizeof *med);
    int *loses = calloc((size_t)nsizes, sizeof *loses); /* split4 slower, paired (self) */
    if (bench_rank == 0) {
        printf("decomposition: %d reps, gap %ld us, monitor %s (medians, us)\n", reps, gap_us,
               ovl_monitor_name(eff.access.monitor));
        printf("%-8s %-11s %10s %10s %10s %11s %10s %9s %9s %9s\n", "size", "overlap", "blocking",
               "nb", "ovl", "ovl-nosplit", "ovl-split4", "blk/ovl", "ovl/nb", "work_us");
    }
    for (int si = 0; si < nsizes; si++) {
        size_t n = sizes[si];
        /* the independent computation lasts as long as a blocking get of n */
        double tb[5];
        for (int k = 0; k < 5; k++) {
            idle_gap(gap_us);
            if (bench_rank == 0)
                tb[k] = deco_once(&e, V_BLOCK, n, dst, out, 0);
            MPI_Barrier(MPI_COMM_WORLD);
        }
        struct bench_stat sb = bench_stat_of(tb, 5);
        long work = bench_rank == 0 ? (long)(sb.med / daxpy_s) : 0;
        for (int mode = 0; mode < 2; mode++) {
            for (int r = 0; r < reps; r++)
                for (int k = 0; k < NV; k++) {
                    int v = (r + k) % NV; /* order rotated every rep */
                    idle_gap(gap_us);
                    if (bench_rank == 0)
                        t[v * reps + r] = deco_once(&e, v, n, dst, out, mode ? work : 0);
                    MPI_Barrier(MPI_COMM_WORLD);
                }
            if (bench_rank != 0)
                continue;
            for (size_t i = 0; i < n; i++)
                if (out[i] != (char)(i * 7 + 1))
                    bench_fail("decomposition: byte %zu of %zu is wrong", i, n);
            if (mode == 0)
                loses[si] = slower_paired(&t[V_SPLIT4 * reps], &t[V_NOSPLIT * reps], reps);
            char sz[32];
            struct bench_stat st[NV];
            for (int v = 0; v < NV; v++) {
                st[v] = bench_stat_of(&t[v * reps], reps);
                med[si][mode][v] = st[v].med;
                if (f)
                    fprintf(f, "decomposition,%s,%zu,%s,%.3f,%.3f,%.3f,%.1f\n",
                            mode ? "independent" : "self", n, vname[v], st[v].med * 1e6,
                            st[v].min * 1e6, st[v].p90 * 1e6, mode ? work * daxpy_s * 1e6 : 0);
            }
            printf("%-8s %-11s %10.1f %10.1f %10.1f %11.1f %10.1f %9.2f %9.3f %9.1f\n",
                   bench_fmt_size(n, sz, sizeof sz), mode ? "independent" : "self",
                   st[V_BLOCK].med * 1e6, st[V_NB].med * 1e6, st[V_OVL].med * 1e6,
                   st[V_NOSPLIT].med * 1e6, st[V_SPLIT4].med * 1e6, st[V_BLOCK].med / st[V_OVL].med,
                   st[V_OVL].med / st[V_NB].med, mode ? work * daxpy_s * 1e6 : 0.0);
        }
    }
    if (bench_rank == 0) {
        /* measured: smallest size from which splitting wins at every larger size */
        size_t measured = 0;
        for (int si = nsizes - 1; si >= 0; si--) {
            if (med[si][0][V_SPLIT4] < med[si][0][V_NOSPLIT])
                measured = sizes[si];
            else
                break;
        }
        /* paired: smallest size from which splitting is never slower
         * beyond chance at any larger size (and is not at that one) */
        size_t paired = 0;
        for (int si = nsizes - 1; si >= 0 && !loses[si]; si--)
            paired = sizes[si];
        char a[32], b[32], c[32];
        printf("split threshold: model %s, measured %s (self-induced, ovl-split4 faster than "
               "ovl-nosplit in the median at every larger size), %s (never slower at any larger "
               "size, paired sign test, p < 0.05)\n",
               predicted == (size_t)-1 ? "never" : bench_fmt_size(predicted, a, sizeof a),
               measured ? bench_fmt_size(measured, b, sizeof b) : "none in the sweep",
               paired ? bench_fmt_size(paired, c, sizeof c) : "none in the sweep");
        if (f)
            fprintf(f, "# split_threshold,model,%zu,measured,%zu,paired,%zu\n", predicted, measured,
                    paired);
    }
    bench_csv_close(f, csv);
    free(t);
    free(med);
    free(loses);
    free(sizes);
    munmap(dst, mapn);
    munmap(out, mapn);
    env_close(&e);
    bench_ovl_finalize();
    return 0;
}
