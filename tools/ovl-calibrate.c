/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * ovl-calibrate: measure what ovl's performance model needs on the
 * communicator it runs on, and write the performance database that
 * ovl_init loads (format: docs/PERFDB.md).
 *
 *   mpiexec -n 2 ovl-calibrate [-o FILE] [--quick] [--maps] [--loaded]
 *
 * Ranks 0 and 1 measure (the others wait): LogGP's per-message overhead o
 * (per size, and per message of a back-to-back burst), latency L and round
 * trip, inverse bandwidth G, gap g; the MPI library's eager/rendezvous
 * switch (a sender whose receiver is late returns at once below it, and
 * waits above it); MPI RMA get/put cost over a passive-target window; and,
 * on this process, the fault-service cost I and protection cost M(N) of
 * both access monitors (the watch layer's own measurements) and the
 * memory-to-cache copy rate (the lower bound on computation per byte).
 * --maps adds the loop-nest planner's protocol maps (rank 0 reading from
 * rank 1), --loaded the bandwidth of one flow under load (every rank).
 * The output path is -o, else OVL_PERFDB, else the per-user default
 * ($XDG_CACHE_HOME/ovl/perfdb or ~/.cache/ovl/perfdb).
 */
#include "ovl_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static MPI_Comm comm;
static int rank, nranks, quick, want_maps, want_loaded;
/* Fewer repetitions: with --quick, or once the run falls behind its time
 * budget (a busy machine makes every round trip wait for the scheduler). */
static int light, degraded;
static double t_start;
#define BUDGET_US 40e6
static char *buf, *buf2;
#define BUF_MAX (4u << 20)

static double now(void)
{
    return (double)ovl__now_ns() / 1e3;
}

static void spin_until(double t)
{
    while (now() < t)
        ;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n ? v[n / 2] : 0;
}

static double minimum(const double *v, int n)
{
    double m = 1e30;
    for (int i = 0; i < n; i++)
        if (v[i] < m)
            m = v[i];
    return m;
}

/* Least-squares line y = a + b x. */
static void fit(const double *x, const double *y, int n, double *a, double *b)
{
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (int i = 0; i < n; i++) {
        sx += x[i];
        sy += y[i];
        sxx += x[i] * x[i];
        sxy += x[i] * y[i];
    }
    double d = n * sxx - sx * sx;
    *b = d != 0 ? (n * sxy - sx * sy) / d : 0;
    *a = n ? (sy - *b * sx) / n : 0;
}

/* Median of the pairwise slopes (Theil-Sen): a line through noisy points
 * that one descheduled sample cannot drag. */
static double robust_slope(const double *x, const double *y, int n)
{
    double sl[512];
    int k = 0;
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n && k < 512; j++)
            if (x[j] != x[i])
                sl[k++] = (y[j] - y[i]) / (x[j] - x[i]);
    return k ? median(sl, k) : 0;
}

/* Ranks 0 and 1 agree whether the run is past @frac of its budget; from
 * then on it takes fewer samples. */
static void check_budget(double frac)
{
    int late = rank == 0 && !light && now() - t_start > frac * BUDGET_US;
    MPI_Bcast(&late, 1, MPI_INT, 0, comm);
    if (late) {
        light = degraded = 1;
        if (rank == 0)
            fprintf(stderr, "ovl-calibrate: behind schedule (busy machine?): fewer samples\n");
    }
}

/* ---- point-to-point ------------------------------------------------------ */

/* One-way time of @bytes (round trip / 2) between ranks 0 and 1, @reps
 * samples into @out (the library's ping-pong, measure.c). */
static void pingpong(int bytes, int reps, double *out)
{
    ovl__measure_pingpong(comm, 1 - rank, buf, bytes, reps, out);
}

/* Send and receive overhead of @bytes: the time in MPI_Isend on the
 * sender, and in MPI_Wait on the receiver for data that has already
 * arrived (it waits @delay_us first). Best of @reps: on a shared machine
 * the other samples measure the scheduler. */
static void overheads(int bytes, int reps, double delay_us, double *os, double *orecv)
{
    double a[64], b[64];
    if (reps > 64)
        reps = 64;
    for (int k = 0; k < reps; k++) {
        MPI_Request rq;
        if (rank == 1) {
            MPI_Irecv(buf, bytes, MPI_BYTE, 0, 2, comm, &rq);
            MPI_Send(NULL, 0, MPI_BYTE, 0, 3, comm);
            MPI_Recv(NULL, 0, MPI_BYTE, 0, 4, comm, MPI_STATUS_IGNORE); /* sent */
            spin_until(now() + delay_us);
            double t0 = now();
            MPI_Wait(&rq, MPI_STATUS_IGNORE);
            b[k] = now() - t0;
        } else {
            MPI_Recv(NULL, 0, MPI_BYTE, 1, 3, comm, MPI_STATUS_IGNORE);
            double t0 = now();
            MPI_Isend(buf, bytes, MPI_BYTE, 1, 2, comm, &rq);
            a[k] = now() - t0;
            MPI_Send(NULL, 0, MPI_BYTE, 1, 4, comm);
            MPI_Wait(&rq, MPI_STATUS_IGNORE);
        }
    }
    double ab[2] = { rank == 0 ? minimum(a, reps) : 0, rank == 1 ? minimum(b, reps) : 0 }, r[2];
    MPI_Allreduce(ab, r, 2, MPI_DOUBLE, MPI_MAX, comm);
    *os = r[0];
    *orecv = r[1];
}

/* @count messages of 8 bytes back to back, receives pre-posted: time per
 * message of the burst (sender: post + complete + the receiver's ack, minus
 * one round trip) and of posting alone. */
static void burst(int count, int reps, double rtt, double *per_msg, double *post)
{
    MPI_Request *rq = malloc((size_t)count * sizeof *rq);
    double t[64], p[64];
    if (reps > 64)
        reps = 64;
    for (int k = 0; k < reps; k++) {
        if (rank == 1) {
            for (int i = 0; i < count; i++)
                MPI_Irecv(buf + 8 * (size_t)i, 8, MPI_BYTE, 0, 5, comm, &rq[i]);
            MPI_Send(NULL, 0, MPI_BYTE, 0, 6, comm);
            for (int i = 0; i < count; i++)
                MPI_Wait(&rq[i], MPI_STATUS_IGNORE);
            MPI_Send(NULL, 0, MPI_BYTE, 0, 7, comm);
        } else {
            MPI_Recv(NULL, 0, MPI_BYTE, 1, 6, comm, MPI_STATUS_IGNORE);
            double t0 = now();
            for (int i = 0; i < count; i++)
                MPI_Isend(buf + 8 * (size_t)i, 8, MPI_BYTE, 1, 5, comm, &rq[i]);
            p[k] = now() - t0;
            for (int i = 0; i < count; i++)
                MPI_Wait(&rq[i], MPI_STATUS_IGNORE);
            MPI_Recv(NULL, 0, MPI_BYTE, 1, 7, comm, MPI_STATUS_IGNORE);
            t[k] = now() - t0;
        }
    }
    free(rq);
    double v[2] = { 0, 0 }, r[2];
    if (rank == 0) {
        double tt = minimum(t, reps) - rtt;
        v[0] = (tt > 0 ? tt : 0) / count;
        v[1] = minimum(p, reps) / count;
    }
    MPI_Allreduce(v, r, 2, MPI_DOUBLE, MPI_MAX, comm);
    *per_msg = r[0];
    *post = r[1];
}

/* ---- RMA ------------------------------------------------------------------ */

static void rma(const int *sizes, int ns, int reps, double *get_us, double *put_us)
{
    MPI_Win win;
    void *base;
    if (MPI_Win_allocate(BUF_MAX, 1, MPI_INFO_NULL, comm, &base, &win) != MPI_SUCCESS) {
        for (int i = 0; i < ns; i++)
            get_us[i] = put_us[i] = -1;
        return;
    }
    MPI_Win_lock_all(MPI_MODE_NOCHECK, win);
    if (rank == 0) {
        double t[64];
        for (int i = 0; i < ns; i++) {
            for (int k = 0; k < reps; k++) {
                MPI_Request rq;
                double t0 = now();
                MPI_Rget(buf, sizes[i], MPI_BYTE, 1, 0, sizes[i], MPI_BYTE, win, &rq);
                MPI_Wait(&rq, MPI_STATUS_IGNORE);
                t[k] = now() - t0;
            }
            get_us[i] = minimum(t, reps);
            for (int k = 0; k < reps; k++) {
                MPI_Request rq;
                double t0 = now();
                MPI_Rput(buf, sizes[i], MPI_BYTE, 1, 0, sizes[i], MPI_BYTE, win, &rq);
                MPI_Wait(&rq, MPI_STATUS_IGNORE);
                MPI_Win_flush(1, win); /* complete at the target */
                t[k] = now() - t0;
            }
            put_us[i] = minimum(t, reps);
        }
    }
    /* The target waits in MPI (a barrier polls), as a target of ovl's
     * segments waits in ovl's progress engine. */
    MPI_Barrier(comm);
    MPI_Win_unlock_all(win);
    MPI_Win_free(&win);
    MPI_Bcast(get_us, ns, MPI_DOUBLE, 0, comm);
    MPI_Bcast(put_us, ns, MPI_DOUBLE, 0, comm);
}

/* ---- output ---------------------------------------------------------------- */

static int mkdirs(char *path)
{
    for (char *p = path + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = 0;
        int rc = mkdir(path, 0755);
        *p = '/';
        if (rc != 0 && errno != EEXIST)
            return -1;
    }
    return 0;
}

/* The planner's protocol maps (--maps, table plan_map): one strip of
 * `runs` runs of `run` bytes at stride 2 x run on rank 1, read by rank 0
 * into a dense buffer with each protocol forced (one strip, nothing
 * ahead), median of @reps executions, the protocols alternated. Every rank
 * of @w calls it (the segment is collective); rank 1 and the others serve
 * in ovl_barrier (PACK's target packs in ovl calls). Rank 0's rows go to
 * @cell (run, runs, datatype, runs, bbox, pack microseconds; -1 where the
 * commit refuses the protocol). */
#define MAP_BYTES_MAX (4u << 20)
static int maps(MPI_Comm w, int reps, double (*cell)[2 + OVL__MAP_NPROTO])
{
    static const int64_t run_sizes[] = { 8, 64, 512, 4096, 32768 };
    static const int64_t run_counts[] = { 1, 4, 16, 64, 256, 1024, 4096 };
    const int64_t max_bytes = light ? MAP_BYTES_MAX / 16 : MAP_BYTES_MAX;
    void *base = NULL;
    ovl_segment_t seg;
    char *dst = malloc(MAP_BYTES_MAX);
    if (!dst || ovl_segment_create(2 * MAP_BYTES_MAX, &base, &seg) != OVL_SUCCESS) {
        fprintf(stderr, "ovl-calibrate: --maps: %s\n", dst ? ovl_error_detail() : "no memory");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    memset(base, 1, 2 * MAP_BYTES_MAX);
    memset(dst, 0, MAP_BYTES_MAX);
    MPI_Barrier(w);
    int n = 0;
    for (size_t a = 0; a < sizeof run_sizes / sizeof *run_sizes; a++)
        for (size_t b = 0; b < sizeof run_counts / sizeof *run_counts; b++) {
            const int64_t run = run_sizes[a], runs = run_counts[b];
            if (run * runs > max_bytes || n == OVL__MAP_MAX)
                continue;
            double *c = cell[n++];
            c[0] = (double)run;
            c[1] = (double)runs;
            if (rank != 0)
                continue;
            ovl_plan_t pl[OVL__MAP_NPROTO];
            int ok[OVL__MAP_NPROTO];
            const ovl_lmad_t rem = { .base = 0,
                                     .elem = run,
                                     .ndims = 1,
                                     .dim = { { .stride = 2 * run, .count = runs, .depth = 0 } } };
            const ovl_lmad_t loc = { .base = 0,
                                     .elem = run,
                                     .ndims = 1,
                                     .dim = { { .stride = run, .count = runs, .depth = 0 } } };
            for (int q = 0; q < OVL__MAP_NPROTO; q++) {
                ovl_param_t pm = { .field_mask = OVL_PARAM_FIELD_PROTOCOL | OVL_PARAM_FIELD_STRIP |
                                                 OVL_PARAM_FIELD_LOOKAHEAD,
                                   .protocol = (ovl_plan_protocol_t)(q + 1),
                                   .strip = runs,
                                   .lookahead = 0 };
                ok[q] = ovl_plan_create(NULL, &pl[q], NULL) == OVL_SUCCESS &&
                        ovl_plan_loop(pl[q], 0, runs) == OVL_SUCCESS &&
                        ovl_plan_read(pl[q], seg, 1, &rem, dst, &loc) == OVL_SUCCESS &&
                        ovl_plan_commit(pl[q], &pm) == OVL_SUCCESS;
            }
            double t[OVL__MAP_NPROTO][64];
            for (int r = -1; r < reps && r < 64; r++)
                for (int k = 0; k < OVL__MAP_NPROTO; k++) {
                    int q = (k + (r < 0 ? 0 : r)) % OVL__MAP_NPROTO; /* rotated */
                    if (!ok[q])
                        continue;
                    int64_t i0, it = 1;
                    double t0 = now();
                    int rc = ovl_plan_begin(pl[q]);
                    while (rc == OVL_SUCCESS && it > 0)
                        rc = ovl_plan_next(pl[q], &i0, &it);
                    if (ovl_plan_end(pl[q]) != OVL_SUCCESS || rc != OVL_SUCCESS) {
                        fprintf(stderr, "ovl-calibrate: --maps: %s\n", ovl_error_detail());
                        MPI_Abort(MPI_COMM_WORLD, 1);
                    }
                    if (r >= 0) /* the first is a warm-up */
                        t[q][r] = now() - t0;
                }
            for (int q = 0; q < OVL__MAP_NPROTO; q++) {
                c[2 + q] = ok[q] ? median(t[q], reps < 64 ? reps : 64) : -1;
                if (ok[q] && ovl_plan_free(&pl[q]) != OVL_SUCCESS)
                    MPI_Abort(MPI_COMM_WORLD, 1);
            }
        }
    if (ovl_barrier() != OVL_SUCCESS)
        MPI_Abort(MPI_COMM_WORLD, 1);
    free(dst);
    if (ovl_segment_free(&seg) != OVL_SUCCESS)
        MPI_Abort(MPI_COMM_WORLD, 1);
    return n;
}

/* --loaded (table loaded): the bandwidth of one flow when several cross
 * the link at once. Ranks pair up, the first half reading from the second
 * (rank i from i + P/2: placed host by host, as mpiexec and ovl-cluster
 * place ranks, every flow crosses between the halves' hosts). For f flows
 * the first min(f, P/2) ranks each start their share of f concurrent
 * MPI_Rget of LOAD_PIECE bytes from their partner after a barrier; the
 * time is the slowest reader's, the median of @reps; one flow's bandwidth
 * is LOAD_PIECE over it. Every rank of @w calls it; @bw[f] (MB/s, 0 not
 * measured) is filled on rank 0. */
#define LOAD_PIECE (2u << 20)
static void loaded(MPI_Comm w, int reps, double *bw)
{
    /* 2 MiB a flow: the readers leave the barrier up to milliseconds apart
     * on a busy host, which must stay small against each flow's time */
    static const int flows[] = { 1, 2, 4, 8 };
    int me, np;
    MPI_Comm_rank(w, &me);
    MPI_Comm_size(w, &np);
    const int half = np / 2;
    char *base = NULL, *dst = malloc(8 * (size_t)LOAD_PIECE);
    MPI_Win win;
    if (!dst || MPI_Win_allocate(LOAD_PIECE, 1, MPI_INFO_NULL, w, &base, &win) != MPI_SUCCESS) {
        fprintf(stderr, "ovl-calibrate: --loaded: no memory for the window\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    memset(base, 3, LOAD_PIECE);
    MPI_Win_lock_all(MPI_MODE_NOCHECK, win);
    MPI_Barrier(w);
    for (size_t i = 0; i < sizeof flows / sizeof *flows; i++) {
        const int f = flows[i], readers = f < half ? f : half;
        double t[64];
        const int n = reps < 64 ? reps : 64;
        for (int r = -1; r < n; r++) {
            MPI_Request q[8];
            MPI_Status st[8];
            int k = 0;
            MPI_Barrier(w);
            double t0 = now();
            if (me < readers) /* reader me takes flows me, me + readers, ... */
                for (int j = me; j < f; j += readers, k++)
                    MPI_Rget(dst + (size_t)k * LOAD_PIECE, LOAD_PIECE, MPI_BYTE, me + half, 0,
                             LOAD_PIECE, MPI_BYTE, win, &q[k]);
            if (k)
                MPI_Waitall(k, q, st);
            if (k)
                MPI_Win_flush_local(me + half, win);
            double mine = k ? now() - t0 : 0, slowest = 0;
            MPI_Reduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, w);
            if (r >= 0)
                t[r] = slowest;
        }
        if (me == 0)
            bw[f] = (double)LOAD_PIECE / median(t, n); /* bytes/us = MB/s */
    }
    MPI_Win_unlock_all(win);
    MPI_Win_free(&win);
    free(dst);
}

static void usage(void)
{
    fprintf(stderr, "usage: mpiexec -n 2 ovl-calibrate [-o FILE] [--quick] [--maps] [--loaded]\n"
                    "  -o FILE   write the database here (default: OVL_PERFDB, else\n"
                    "            $XDG_CACHE_HOME/ovl/perfdb or ~/.cache/ovl/perfdb)\n"
                    "  --quick   fewer sizes and repetitions (about a second)\n"
                    "  --maps    also measure the loop-nest planner's protocol maps (each\n"
                    "            protocol over run size x number of runs, up to 4 MiB;\n"
                    "            a few seconds more)\n"
                    "  --loaded  also measure the bandwidth of one flow when 1, 2, 4, 8\n"
                    "            cross the link at once (the planner's load estimation;\n"
                    "            run it on 2 or more ranks per host, half the ranks on\n"
                    "            each side: ovl-cluster run --hosts 2 --ppn 2)\n");
}

int main(int argc, char **argv)
{
    const char *out = NULL;
    MPI_Init(&argc, &argv);
    t_start = now();
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-o") && i + 1 < argc)
            out = argv[++i];
        else if (!strcmp(argv[i], "--quick"))
            quick = light = 1;
        else if (!strcmp(argv[i], "--maps"))
            want_maps = 1;
        else if (!strcmp(argv[i], "--loaded"))
            want_loaded = 1;
        else {
            usage();
            MPI_Finalize();
            return 2;
        }
    }
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &nranks);
    if (nranks < 2) {
        if (rank == 0)
            fprintf(stderr, "ovl-calibrate: needs 2 ranks (mpiexec -n 2 ovl-calibrate)\n");
        MPI_Finalize();
        return 2;
    }
    /* ovl's own model must not load or measure anything here: this tool is
     * what produces its figures. ovl_init sets up the access monitor. */
    const char *user_db = getenv("OVL_PERFDB");
    char user_path[512] = "";
    if (user_db)
        snprintf(user_path, sizeof user_path, "%s", user_db);
    setenv("OVL_PERFDB", "off", 1);
    setenv("OVL_CALIBRATE", "0", 1);
    if (ovl_init(comm, NULL) != OVL_SUCCESS) {
        fprintf(stderr, "ovl-calibrate: ovl_init failed: %s\n", ovl_error_detail());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    size_t detected_eager = ovl__model_detect_eager();

    /* Only ranks 0 and 1 measure; the others wait at the end. */
    MPI_Comm pair;
    MPI_Comm_split(comm, rank < 2 ? 0 : MPI_UNDEFINED, rank, &pair);
    MPI_Comm world = comm;
    char host[256] = "", peer_host[256] = "";
    gethostname(host, sizeof host - 1);

    static const int sizes_full[] = { 1,      8,      64,     256,     1024,    4096,
                                      8192,   16384,  32768,  49152,   65536,   98304,
                                      131072, 262144, 524288, 1 << 20, 2 << 20, 4 << 20 };
    static const int sizes_quick[] = { 8, 1024, 8192, 65536, 262144, 1 << 20 };
    const int *sizes = quick ? sizes_quick : sizes_full;
    int ns = quick ? (int)(sizeof sizes_quick / sizeof *sizes_quick)
                   : (int)(sizeof sizes_full / sizeof *sizes_full);
    double oneway[32], oneway_med[32], os[32], orv[32], get_us[32], put_us[32];
    static const int counts_full[] = { 1, 2, 4, 8, 16, 32, 64, 128, 256 };
    static const int counts_quick[] = { 1, 4, 16, 64 };
    const int *counts = quick ? counts_quick : counts_full;
    int nc = quick ? 4 : 9;
    double per_msg[16], post[16];
    double lat = 0, rtt = 0, G = 0, gap = 0, o_small = 0;
    int i8 = 0;
    size_t eager = 0, step = 0, piece_switch = 0, link_burst = 0;

    if (pair != MPI_COMM_NULL) {
        comm = pair;
        buf = calloc(1, BUF_MAX);
        buf2 = calloc(1, BUF_MAX);
        if (!buf || !buf2)
            MPI_Abort(MPI_COMM_WORLD, 1);
        if (rank == 0)
            MPI_Recv(peer_host, sizeof peer_host, MPI_CHAR, 1, 10, comm, MPI_STATUS_IGNORE);
        else
            MPI_Send(host, (int)strlen(host) + 1, MPI_CHAR, 0, 10, comm);
        double tmp[256];
        pingpong(1, 50, tmp); /* connection warm-up */
        for (int i = 0; i < ns; i++) {
            check_budget(0.05 + 0.25 * i / ns);
            int reps = sizes[i] >= (1 << 20) ? (light ? 3 : 10) : (light ? 10 : 60);
            pingpong(sizes[i], reps, tmp);
            oneway[i] = minimum(tmp, reps);
            oneway_med[i] = median(tmp, reps);
        }
        MPI_Bcast(oneway, ns, MPI_DOUBLE, 0, comm);
        MPI_Bcast(oneway_med, ns, MPI_DOUBLE, 0, comm);
        lat = oneway[0];
        int nrtt = light ? 20 : 200;
        pingpong(1, nrtt, tmp);
        rtt = 2 * minimum(tmp, nrtt);
        MPI_Bcast(&rtt, 1, MPI_DOUBLE, 0, comm);
        /* G: slope of the one-way time over the large sizes. */
        double x[32], y[32];
        int nf = 0;
        for (int i = 0; i < ns; i++)
            if (sizes[i] >= 65536) {
                x[nf] = sizes[i];
                y[nf++] = oneway[i];
            }
        double b = robust_slope(x, y, nf);
        G = b > 0 ? b : (oneway[ns - 1] - lat) / sizes[ns - 1];
        if (G <= 0)
            G = 1e-4;
        /* A protocol switch below the eager limit (the library's sizes and
         * rule, measure.c): best of a run of pingpongs per size; rank 0's
         * is written */
        double swt[16];
        piece_switch =
            ovl__measure_switch(comm, 1 - rank, buf, BUF_MAX, 1, light ? 5 : 20, lat, swt);
        /* The link's burst: what of the largest size up to 128 KiB (from 64
         * KiB) arrived sooner than the long-run rate allows */
        for (int i = 0; i < ns; i++)
            if (sizes[i] >= 65536 && sizes[i] <= 131072 && oneway[i] > lat) {
                double early = ovl__measure_burst_B(sizes[i], oneway[i], lat, 1.0 / G);
                link_burst = (size_t)early / 4096 * 4096;
            }
        for (int i = 0; i < ns; i++) {
            check_budget(0.3 + 0.25 * i / ns);
            overheads(sizes[i], light ? 5 : 30, 2 * oneway[i] + 20, &os[i], &orv[i]);
        }
        for (int i = 0; i < ns; i++)
            if (sizes[i] == 8)
                i8 = i;
        o_small = os[i8] + orv[i8];
        for (int i = 0; i < nc; i++) {
            check_budget(0.55 + 0.1 * i / nc);
            burst(counts[i], light ? 5 : 20, rtt, &per_msg[i], &post[i]);
        }
        /* g: the slope of the burst time over its last two lengths. */
        gap = (per_msg[nc - 1] * counts[nc - 1] - per_msg[nc - 2] * counts[nc - 2]) /
              (counts[nc - 1] - counts[nc - 2]);
        if (gap <= 0)
            gap = per_msg[nc - 1];
        /* Eager switch: a late receiver (by several round trips) stalls a
         * rendezvous send only. Compare with the step of the curve. */
        double late = 10 * rtt + 500;
        if (late > 5000)
            late = 5000;
        check_budget(0.65);
        /* the smallest size that waits, doubling from 256 B, to 64 B */
        eager = ovl__measure_rendezvous(comm, rank ^ 1, buf, 256, BUF_MAX, 64, 3, late);
        double jump = 0;
        for (int i = 4; i + 1 < ns; i++) {
            double j = (oneway[i + 1] - oneway[i]) - G * (sizes[i + 1] - sizes[i]);
            if (j > jump) {
                jump = j;
                step = (size_t)sizes[i + 1];
            }
        }
        check_budget(0.75);
        rma(sizes, ns, light ? 3 : 10, get_us, put_us);
    }
    comm = world;
    /* The share of an exchange's time that a computing rank does not pay,
     * on this link (ranks 0 and 1), and the link within rank 0's node,
     * kept apart from it: ovl_init sizes and decides transfers to a peer
     * on a rank's own node from the node_* figures. */
    check_budget(0.78);
    int node_peer = -1, over = ovl__g.node_oversubscribed;
    for (int r = 1; r < nranks && node_peer < 0; r++)
        if (ovl__g.node_of[r] == ovl__g.node_of[0])
            node_peer = r;
    /* ranks that share CPUs measure each other's time slices: no share,
     * no node figures (ovl_init takes such peers the plain way) */
    MPI_Bcast(&over, 1, MPI_INT, 0, world);
    if (over)
        node_peer = -1;
    double hidden = over && ovl__g.node_of[1] == ovl__g.node_of[0]
                        ? -1
                        : ovl__measure_hidden(world, 1, (size_t)1 << 20);
    double node_lat = -1, node_G = -1, node_hidden = -1;
    if (node_peer == 1) {
        node_lat = lat;
        node_G = G;
        node_hidden = hidden;
    } else if (node_peer > 1) {
        struct ovl__link_figures lf;
        if (ovl__measure_link(world, node_peer, &lf) == OVL_SUCCESS && lf.lat_us > 0 &&
            lf.G_us_per_B > 0) {
            node_lat = lf.lat_us;
            node_G = lf.G_us_per_B;
        }
        node_hidden = ovl__measure_hidden(world, node_peer, (size_t)1 << 20);
    }
    double mapc[OVL__MAP_MAX][2 + OVL__MAP_NPROTO];
    int nmap = want_maps ? maps(world, light ? 3 : 7, mapc) : 0;
    double load_bw[9] = { 0 };
    if (want_loaded)
        loaded(world, light ? 3 : 5, load_bw);
    /* On this process (rank 0's figures are written). */
    double f_mp = ovl__watch_fault_cost_us(OVL_MONITOR_MPROTECT);
    double f_uf = ovl__watch_fault_cost_us(OVL_MONITOR_UFFD);
    static const size_t pages_full[] = { 1, 2, 4, 16, 64, 256, 1024, 4096 };
    static const size_t pages_quick[] = { 1, 16, 256 };
    const size_t *pages = quick ? pages_quick : pages_full;
    int np = quick ? 3 : 8;
    double m_mp[8], m_uf[8], px[8];
    int reps = light ? 3 : 10;
    for (int i = 0; i < np; i++) {
        px[i] = (double)pages[i];
        m_mp[i] = ovl__watch_protect_cost_us(OVL_MONITOR_MPROTECT, pages[i], reps);
        m_uf[i] = ovl__watch_protect_cost_us(OVL_MONITOR_UFFD, pages[i], reps);
    }
    double mp_a, mp_b, uf_a = -1, uf_b = -1;
    fit(px, m_mp, np, &mp_a, &mp_b);
    if (m_uf[0] >= 0)
        fit(px, m_uf, np, &uf_a, &uf_b);
    if (mp_a < 0)
        mp_a = 0;
    if (uf_a < 0 && m_uf[0] >= 0)
        uf_a = 0;
    /* Copy a buffer far larger than the caches into a small one, chunk by
     * chunk: the memory-to-cache rate in microseconds per byte. */
    double copy = ovl__measure_copy_rate(quick ? (16u << 20) : (128u << 20), OVL__COPY_CHUNK);
    /* RMA fit */
    double ga = -1, gb = -1, pa = -1, pb = -1;
    if (rank == 0 && get_us[0] > 0) {
        double x[32], y[32], z[32];
        int nf = 0;
        for (int i = 0; i < ns; i++)
            if (sizes[i] >= 65536) {
                x[nf] = sizes[i];
                y[nf] = get_us[i];
                z[nf++] = put_us[i];
            }
        gb = robust_slope(x, y, nf);
        pb = robust_slope(x, z, nf);
        ga = get_us[0];
        pa = put_us[0];
    }
    double elapsed_s = (now() - t_start) / 1e6;

    int rc = 0;
    if (rank == 0) {
        char path[512];
        const char *env = user_path;
        if (out)
            snprintf(path, sizeof path, "%s", out);
        else if (*env && strcmp(env, "off") && strcmp(env, "none") && strcmp(env, "0"))
            snprintf(path, sizeof path, "%s", env);
        else if (!ovl__perfdb_default_path(path, sizeof path)) {
            fprintf(stderr, "ovl-calibrate: no HOME or XDG_CACHE_HOME: give -o FILE\n");
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        mkdirs(path);
        char tmpp[600];
        snprintf(tmpp, sizeof tmpp, "%s.tmp%d", path, (int)getpid());
        FILE *f = fopen(tmpp, "w");
        if (!f) {
            fprintf(stderr, "ovl-calibrate: cannot write %s: %s\n", tmpp, strerror(errno));
            rc = 1;
        } else {
            char mpi[256], when[64];
            ovl__perfdb_mpi_id(mpi, sizeof mpi);
            time_t tt = time(NULL);
            strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime(&tt));
            fprintf(f,
                    "# ovl performance database (docs/PERFDB.md), written by ovl-calibrate%s\n"
                    "# Units are in the key names: _us microseconds, _B bytes,\n"
                    "# _us_per_B microseconds per byte. ovl_init reads the scalar keys\n"
                    "# and table plan_map; the other tables are for people and\n"
                    "# tools/ovl-perfdb-plot.\n",
                    quick ? " --quick" : "");
            fprintf(f, "ovl_perfdb_version = 1\n");
            fprintf(f, "created = %s\n", when);
            fprintf(f, "hostname = %s\n", host);
            fprintf(f, "peer_hostname = %s\n", peer_host);
            fprintf(f, "link = %s\n", strcmp(host, peer_host) ? "inter-node" : "intra-node");
            fprintf(f, "mpi_library = %s\n", mpi);
            fprintf(f, "ranks = %d\n", nranks);
            fprintf(f, "page_B = %zu\n", ovl__watch_page());
            fprintf(f, "quick = %d\n", quick);
            fprintf(f, "# 1: the run fell behind its budget and took fewer samples\n");
            fprintf(f, "degraded = %d\n", degraded);
            fprintf(f, "\n# LogGP link parameters (ranks 0 and 1)\n");
            fprintf(f, "# L: one-way time of a 1-byte message\nlat_us = %.3f\n", lat);
            fprintf(f, "# round trip of a 1-byte message\nrtt_us = %.3f\n", rtt);
            fprintf(f, "# o = o_s + o_r for 8 bytes: MPI_Isend call + MPI_Wait on arrived data\n");
            fprintf(f, "o_us = %.3f\no_send_us = %.3f\no_recv_us = %.3f\n", o_small, os[i8],
                    orv[i8]);
            fprintf(
                f,
                "# g: added time per message, bursts of %d and %d back-to-back 8-byte messages\n",
                counts[nc - 2], counts[nc - 1]);
            fprintf(f, "gap_us = %.3f\n", gap);
            fprintf(f,
                    "# G: inverse bandwidth (median slope of one-way time over sizes >= 64 KiB)\n");
            fprintf(f, "G_us_per_B = %.9f\nbw_MB_per_s = %.1f\n", G, 1.0 / G);
            fprintf(f, "# eager/rendezvous switch: smallest size a late receiver stalls\n");
            fprintf(f, "eager_B = %zu\n", eager ? eager : detected_eager);
            fprintf(f, "eager_measured_B = %zu\n", eager);
            fprintf(f, "eager_detected_B = %zu\n", detected_eager);
            fprintf(f, "eager_curve_step_B = %zu\n", step);
            fprintf(f,
                    "# first size after a jump in one-way time below the eager limit "
                    "(a protocol switch; 0 = none)\npiece_switch_B = %zu\n",
                    piece_switch);
            fprintf(f,
                    "# bytes of a message the link passes before its long-run rate applies (a "
                    "token bucket; 0 = none)\nburst_B = %zu\n",
                    link_burst);
            fprintf(f, "\n# Access monitors (this process)\n");
            fprintf(f, "# I: one fault served, SIGSEGV + mprotect / SIGBUS + UFFDIO_ZEROPAGE\n");
            fprintf(f, "fault_mprotect_us = %.3f\nfault_uffd_us = %.3f\n", f_mp > 0 ? f_mp : -1,
                    f_uf > 0 ? f_uf : -1);
            fprintf(f, "# M(N) = base + N * per_page: mprotect(PROT_NONE) / UFFDIO_WRITEPROTECT\n");
            fprintf(f, "protect_mprotect_base_us = %.3f\nprotect_mprotect_per_page_us = %.5f\n",
                    mp_a, mp_b > 0 ? mp_b : 0);
            fprintf(f, "protect_uffd_wp_base_us = %.3f\nprotect_uffd_wp_per_page_us = %.5f\n", uf_a,
                    uf_b >= 0 ? uf_b : -1);
            fprintf(f, "\n# Computation lower bound: memory-to-cache copy\n");
            fprintf(f, "compute_us_per_B = %.9f\ncopy_MB_per_s = %.1f\n", copy,
                    copy > 0 ? 1.0 / copy : 0);
            fprintf(f, "\n# MPI RMA, passive target (lock_all): MPI_Rget / MPI_Rput + flush\n");
            fprintf(f, "rma_get_lat_us = %.3f\nrma_get_G_us_per_B = %.9f\n", ga, gb > 0 ? gb : -1);
            fprintf(f, "rma_put_lat_us = %.3f\nrma_put_G_us_per_B = %.9f\n", pa, pb > 0 ? pb : -1);
            fprintf(f,
                    "\n# The share of an exchange's time (1 MiB each way) that a rank computing\n"
                    "# meanwhile, testing every 20 us of work, does not pay (0: the bytes move\n"
                    "# with its CPU, as through shared memory; -1: not measured)\nhidden = %.3f\n",
                    hidden);
            if (node_lat > 0 && node_G > 0)
                fprintf(f,
                        "# The link to rank %d on rank 0's node, kept apart from the main one\n"
                        "node_lat_us = %.3f\nnode_G_us_per_B = %.9f\nnode_hidden = %.3f\n",
                        node_peer, node_lat, node_G, node_hidden);
            else
                fprintf(f,
                        "# no other rank on rank 0's node: no node_* figures (ovl_init measures\n"
                        "# them where a job has such peers)\n");
            fprintf(f, "\ncalibration_s = %.2f\n", elapsed_s);
            fprintf(f, "\n[table pingpong]\n# bytes oneway_min_us oneway_median_us "
                       "o_send_us o_recv_us rma_get_us rma_put_us\n");
            for (int i = 0; i < ns; i++)
                fprintf(f, "%d %.3f %.3f %.3f %.3f %.3f %.3f\n", sizes[i], oneway[i], oneway_med[i],
                        os[i], orv[i], get_us[i], put_us[i]);
            fprintf(f, "[end]\n\n[table burst]\n# messages per_message_us post_us\n");
            for (int i = 0; i < nc; i++)
                fprintf(f, "%d %.3f %.3f\n", counts[i], per_msg[i], post[i]);
            fprintf(f, "[end]\n\n[table protect]\n# pages mprotect_us uffd_wp_us\n");
            for (int i = 0; i < np; i++)
                fprintf(f, "%zu %.3f %.3f\n", pages[i], m_mp[i], m_uf[i]);
            if (nmap > 0) {
                fprintf(f, "[end]\n\n# the loop-nest planner's protocol maps (ovl_init reads "
                           "them): one strip of\n# runs x run_B bytes at stride 2 x run_B, "
                           "median microseconds per protocol, -1 refused\n"
                           "[table plan_map]\n# run_B runs datatype_us runs_us bbox_us pack_us\n");
                for (int i = 0; i < nmap; i++) {
                    fprintf(f, "%.0f %.0f", mapc[i][0], mapc[i][1]);
                    for (int q = 0; q < OVL__MAP_NPROTO; q++)
                        fprintf(f, mapc[i][2 + q] < 0 ? " -1" : " %.2f", mapc[i][2 + q]);
                    fprintf(f, "\n");
                }
            }
            if (want_loaded) {
                fprintf(f,
                        "[end]\n\n# the bandwidth of one flow when several cross the link at "
                        "once (ovl_init reads it):\n# %d ranks, rank i reading from i + %d\n"
                        "[table loaded]\n# flows per_flow_MB_per_s\n",
                        nranks, nranks / 2);
                for (int k = 1; k <= 8; k++)
                    if (load_bw[k] > 0)
                        fprintf(f, "%d %.1f\n", k, load_bw[k]);
            }
            fprintf(f, "[end]\n\n# written last: a file without it was cut short\n"
                       "complete = 1\n");
            if (fclose(f) != 0 || rename(tmpp, path) != 0) {
                fprintf(stderr, "ovl-calibrate: cannot write %s: %s\n", path, strerror(errno));
                remove(tmpp);
                rc = 1;
            } else {
                printf("ovl-calibrate: L %.2f us, RTT %.2f us, o %.2f us, g %.2f us, %.0f MB/s, "
                       "eager %zu B (model.c detects %zu B)\n",
                       lat, rtt, o_small, gap, 1.0 / G, eager, detected_eager);
                printf("ovl-calibrate: fault mprotect %.2f us, uffd %.2f us; M(1) %.2f us, "
                       "M(4096) %.1f us; copy %.0f MB/s; RMA get %.2f us\n",
                       f_mp, f_uf, m_mp[0], m_mp[np - 1], copy > 0 ? 1.0 / copy : 0, ga);
                if (node_lat > 0 && node_G > 0)
                    printf("ovl-calibrate: hidden %.2f; within the node (rank %d): L %.2f us, "
                           "%.0f MB/s, hidden %.2f: a peer on the node %s by default\n",
                           hidden, node_peer, node_lat, 1.0 / node_G, node_hidden,
                           ovl__model_overlap_pays(node_hidden, node_G, copy)
                               ? "is overlapped"
                               : "takes the plain path");
                else
                    printf("ovl-calibrate: hidden %.2f; no figures within a node (%s)\n", hidden,
                           over ? "its ranks share CPUs" : "no other rank on rank 0's node");
                printf("ovl-calibrate: wrote %s in %.1f s\n", path, elapsed_s);
            }
        }
    }
    if (pair != MPI_COMM_NULL)
        MPI_Comm_free(&pair);
    free(buf);
    free(buf2);
    if (ovl_finalize() != OVL_SUCCESS)
        rc = 1;
    MPI_Comm_free(&comm);
    MPI_Finalize();
    return rc;
}
