/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * ovl-bench layouts: kernels laid out as real codes lay out their memory,
 * each against its plain MPI version. Written here, modelled on what the
 * Parallel Research Kernels (and most mini-apps) do: every rank's message
 * buffers are carved from one block at 64-byte alignment, so a receive
 * buffer shares its first and last pages with other live data; pack loops
 * are tiled; halos are strided columns packed into contiguous buffers.
 *
 *   transpose  a distributed matrix transpose (B += A^T), columns of the
 *              matrix split over the ranks; per phase a tiled pack of one
 *              block into Work_out, the exchange, a scatter of Work_in.
 *   halo       a 2-D five-point stencil on a grid split into column strips;
 *              each iteration packs the two boundary columns (strided),
 *              exchanges them, unpacks the ghost columns and sweeps.
 *
 * Variants of each (the same computation; results compared bit for bit):
 *   mpi         MPI_Irecv, pack, MPI_Isend, MPI_Wait, use (what the codes do)
 *   ovl         the porting guide's recipe for carved buffers: ovl_irecv,
 *               the pack inside ovl_delta_send_begin(EXPLICIT monitor) with
 *               ovl_delta_produced per finished band, ovl_wait, use
 *               (halo: ovl_isend/ovl_irecv in place of MPI's calls)
 *   ovl-fault   the README's first recipe: a fault-monitored ovl_delta_recv
 *               read before its wait (transpose: send as in `ovl`; halo:
 *               fault-monitored delta send too), on the same carved buffers
 *
 * Variants run alternated, in a new order every rep; the table gives the
 * median time per iteration, its ratio to mpi, and ovl's faults and
 * neighbour accesses (OVL_STATS' edge steps) per iteration.
 */
#include "common.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const CMD = "layouts";

static const char HELP[] =
    "Usage: ovl-bench layouts [options]   (2 or more ranks)\n"
    "\n"
    "Kernels laid out as real codes lay out memory (buffers carved from one\n"
    "64-byte-aligned block, tiled pack loops, strided halos), each as plain MPI\n"
    "and ported to ovl; median time per iteration, ratio to MPI, ovl's faults\n"
    "and neighbour accesses per iteration. Results are compared bit for bit.\n"
    "\n"
    "Options:\n"
    "  --kernels LIST   transpose,halo (default both)\n"
    "  --order N        transpose: matrix order (default 2048; a multiple of\n"
    "                   the number of ranks)\n"
    "  --tile T         transpose: tile edge of the pack loop (default 32)\n"
    "  --n N            halo: grid rows and columns per rank (default 2048)\n"
    "  --iters I        iterations per rep (default 4)\n"
    "  --reps R         measured reps (default 5, one warm-up before)\n"
    "  --align A        64 (default: the codes' alignment) or page\n"
    "  --csv FILE       one row per (kernel, variant, rep)\n"
    "  --help           this text\n";

enum var { V_MPI, V_OVL, V_FAULT, V_N };
static const char *const vname[V_N] = { "mpi", "ovl", "ovl-fault" };

struct lay {
    int order, tile, n, iters, reps;
    size_t align;
    FILE *csv;
    MPI_Comm comm;
};

#define OK(call) BENCH_OVL(call)

/* One block carved into @n buffers of @bytes each, as the codes do. */
static double *carve(size_t align, size_t bytes, int n, double **out)
{
    size_t pad = (bytes + 63) / 64 * 64;
    void *p = NULL;
    if (posix_memalign(&p, align, pad * (size_t)n + 64) != 0)
        bench_fail("out of memory");
    memset(p, 0, pad * (size_t)n + 64);
    /* the codes' alignment: 64 bytes, so buffers share pages */
    char *c = (char *)p + (align >= 4096 ? 0 : 64);
    for (int i = 0; i < n; i++)
        out[i] = (double *)(void *)(c + pad * (size_t)i);
    return p;
}

static double timed_max(double t)
{
    double m = 0;
    MPI_Allreduce(&t, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return m;
}

/* ---- transpose ------------------------------------------------------------ */

struct tr {
    int order, bo, tile, p, me;
    double *A, *B, *in, *out;
    void *blk;
};

/* out[j + bo*i] = A(q*bo + i, j): a tiled, transposing pack; each band of
 * `tile` rows of out is final when its row loop ends. @req: explicit sends
 * report each band. */
static void tr_pack(struct tr *t, int q, ovl_request_t req)
{
    int bo = t->bo, T = t->tile;
    const double *A = t->A;
    for (int it = 0; it < bo; it += T) {
        int ie = it + T < bo ? it + T : bo;
        for (int jt = 0; jt < bo; jt += T) {
            int je = jt + T < bo ? jt + T : bo;
            for (int i = it; i < ie; i++)
                for (int j = jt; j < je; j++)
                    t->out[j + (size_t)bo * i] = A[(size_t)q * bo + i + (size_t)t->order * j];
        }
        if (req != OVL_REQUEST_NULL)
            OK(ovl_delta_produced(req, (size_t)it * bo * sizeof(double),
                                  (size_t)(ie - it) * bo * sizeof(double)));
    }
}

/* B(p*bo + j, i) += in[j + bo*i] */
static void tr_scatter(struct tr *t, int p)
{
    int bo = t->bo;
    for (int i = 0; i < bo; i++)
        for (int j = 0; j < bo; j++)
            t->B[(size_t)p * bo + j + (size_t)t->order * i] += t->in[j + (size_t)bo * i];
}

static void tr_local(struct tr *t)
{
    int bo = t->bo, me = t->me;
    for (int i = 0; i < bo; i++)
        for (int j = 0; j < bo; j++)
            t->B[(size_t)me * bo + j + (size_t)t->order * i] +=
                t->A[(size_t)me * bo + i + (size_t)t->order * j];
}

static void tr_iter(struct tr *t, enum var v, MPI_Comm comm)
{
    int cnt = t->bo * t->bo;
    tr_local(t);
    for (int ph = 1; ph < t->p; ph++) {
        int from = (t->me + ph) % t->p, to = (t->me - ph + t->p) % t->p;
        if (v == V_MPI) {
            MPI_Request rr, sr;
            BENCH_MPI(MPI_Irecv(t->in, cnt, MPI_DOUBLE, from, ph, comm, &rr));
            tr_pack(t, to, OVL_REQUEST_NULL);
            BENCH_MPI(MPI_Isend(t->out, cnt, MPI_DOUBLE, to, ph, comm, &sr));
            BENCH_MPI(MPI_Wait(&rr, MPI_STATUS_IGNORE));
            tr_scatter(t, from);
            BENCH_MPI(MPI_Wait(&sr, MPI_STATUS_IGNORE));
            continue;
        }
        ovl_request_t rr, sr;
        if (v == V_OVL)
            OK(ovl_irecv(t->in, cnt, MPI_DOUBLE, from, ph, &rr));
        else
            OK(ovl_delta_recv(t->in, cnt, MPI_DOUBLE, from, ph, NULL, &rr));
        OK(ovl_delta_send_begin(t->out, cnt, MPI_DOUBLE, to, ph,
                                BENCH_MONITOR(OVL_MONITOR_EXPLICIT), &sr));
        tr_pack(t, to, sr);
        OK(ovl_delta_send_end(sr, NULL));
        if (v == V_OVL)
            OK(ovl_wait(&rr, NULL));
        tr_scatter(t, from);
        if (v == V_FAULT)
            OK(ovl_wait(&rr, NULL));
        OK(ovl_wait(&sr, NULL));
    }
}

static void tr_setup(struct tr *t, const struct lay *L)
{
    memset(t, 0, sizeof *t);
    t->order = L->order;
    t->p = bench_size;
    t->me = bench_rank;
    t->bo = L->order / bench_size;
    t->tile = L->tile;
    size_t col = (size_t)L->order * t->bo * sizeof(double), blk = (size_t)t->bo * t->bo * 8;
    double *ab[2], *w[2];
    /* A and B are allocated apart, as the codes do; Work_in and Work_out
     * from one block, Work_out right after Work_in */
    if (posix_memalign((void **)&ab[0], 64, col) || posix_memalign((void **)&ab[1], 64, col))
        bench_fail("out of memory");
    t->A = ab[0];
    t->B = ab[1];
    t->blk = carve(L->align, blk, 2, w);
    t->in = w[0];
    t->out = w[1];
    for (int j = 0; j < t->bo; j++)
        for (int i = 0; i < L->order; i++)
            t->A[i + (size_t)L->order * j] = (double)L->order * (t->me * t->bo + j) + i;
}

static void tr_reset(struct tr *t)
{
    memset(t->B, 0, (size_t)t->order * t->bo * sizeof(double));
}

/* B = k * A^T exactly (integers below 2^53) */
static int tr_valid(const struct tr *t, int k)
{
    for (int c = 0; c < t->bo; c++)
        for (int r = 0; r < t->order; r++)
            if (t->B[r + (size_t)t->order * c] !=
                (double)k * ((double)t->order * r + t->me * t->bo + c))
                return 0;
    return 1;
}

static void tr_free(struct tr *t)
{
    free(t->A);
    free(t->B);
    free(t->blk);
}

/* ---- halo ------------------------------------------------------------------ */

struct ha {
    int n, w, me, p; /* rows, columns of the strip (+2 ghost columns) */
    double *g, *h;   /* grid and result, row-major n x (w + 2) */
    double *lo_out, *lo_in, *hi_out, *hi_in;
    void *blk;
};

#define G(a, i, j) (a)[(size_t)(i) * (size_t)(h->w + 2) + (size_t)(j)]

static void ha_pack(struct ha *h)
{
    for (int i = 0; i < h->n; i++) {
        h->lo_out[i] = G(h->g, i, 1);
        h->hi_out[i] = G(h->g, i, h->w);
    }
}

static void ha_unpack(struct ha *h)
{
    int left = h->me > 0, right = h->me < h->p - 1;
    for (int i = 0; i < h->n; i++) {
        if (left)
            G(h->g, i, 0) = h->lo_in[i];
        if (right)
            G(h->g, i, h->w + 1) = h->hi_in[i];
    }
}

static void ha_sweep(struct ha *h)
{
    for (int i = 1; i < h->n - 1; i++)
        for (int j = 1; j <= h->w; j++)
            G(h->h, i, j) += 0.25 * (G(h->g, i - 1, j) + G(h->g, i + 1, j) + G(h->g, i, j - 1) +
                                     G(h->g, i, j + 1)) -
                             G(h->g, i, j);
    for (int i = 0; i < h->n; i++)
        for (int j = 1; j <= h->w; j++)
            G(h->g, i, j) += 1.0;
}

static void ha_iter(struct ha *h, enum var v, MPI_Comm comm)
{
    int left = h->me > 0 ? h->me - 1 : MPI_PROC_NULL;
    int right = h->me < h->p - 1 ? h->me + 1 : MPI_PROC_NULL;
    if (v == V_MPI) {
        MPI_Request q[4];
        MPI_Status st[4];
        BENCH_MPI(MPI_Irecv(h->lo_in, h->n, MPI_DOUBLE, left, 1, comm, &q[0]));
        BENCH_MPI(MPI_Irecv(h->hi_in, h->n, MPI_DOUBLE, right, 0, comm, &q[1]));
        ha_pack(h);
        BENCH_MPI(MPI_Isend(h->lo_out, h->n, MPI_DOUBLE, left, 0, comm, &q[2]));
        BENCH_MPI(MPI_Isend(h->hi_out, h->n, MPI_DOUBLE, right, 1, comm, &q[3]));
        BENCH_MPI(MPI_Waitall(4, q, st));
        ha_unpack(h);
        ha_sweep(h);
        return;
    }
    ovl_request_t q[4];
    if (v == V_OVL) {
        OK(ovl_irecv(h->lo_in, h->n, MPI_DOUBLE, left, 1, &q[0]));
        OK(ovl_irecv(h->hi_in, h->n, MPI_DOUBLE, right, 0, &q[1]));
        ha_pack(h);
        OK(ovl_isend(h->lo_out, h->n, MPI_DOUBLE, left, 0, &q[2]));
        OK(ovl_isend(h->hi_out, h->n, MPI_DOUBLE, right, 1, &q[3]));
        OK(ovl_waitall(4, q, NULL));
        ha_unpack(h);
        ha_sweep(h);
        return;
    }
    /* delta transfers refuse MPI_PROC_NULL: a boundary rank skips that side */
    int k = 0;
    ovl_request_t lr = OVL_REQUEST_NULL, hr = OVL_REQUEST_NULL;
    if (left != MPI_PROC_NULL)
        OK(ovl_delta_recv(h->lo_in, h->n, MPI_DOUBLE, left, 1, NULL, &lr));
    if (right != MPI_PROC_NULL)
        OK(ovl_delta_recv(h->hi_in, h->n, MPI_DOUBLE, right, 0, NULL, &hr));
    if (left != MPI_PROC_NULL)
        OK(ovl_delta_send_begin(h->lo_out, h->n, MPI_DOUBLE, left, 0, NULL, &q[k++]));
    if (right != MPI_PROC_NULL)
        OK(ovl_delta_send_begin(h->hi_out, h->n, MPI_DOUBLE, right, 1, NULL, &q[k++]));
    ha_pack(h);
    for (int i = 0; i < k; i++)
        OK(ovl_delta_send_end(q[i], NULL));
    ha_unpack(h); /* reads the halos as they arrive */
    if (lr != OVL_REQUEST_NULL)
        q[k++] = lr;
    if (hr != OVL_REQUEST_NULL)
        q[k++] = hr;
    OK(ovl_waitall(k, q, NULL));
    ha_sweep(h);
}

static void ha_setup(struct ha *h, const struct lay *L)
{
    memset(h, 0, sizeof *h);
    h->n = L->n;
    h->w = L->n;
    h->me = bench_rank;
    h->p = bench_size;
    size_t gb = (size_t)h->n * (size_t)(h->w + 2) * sizeof(double);
    if (posix_memalign((void **)&h->g, 64, gb) || posix_memalign((void **)&h->h, 64, gb))
        bench_fail("out of memory");
    double *b[4];
    /* the four halo buffers from one block, as PRK's stencil allocates them */
    h->blk = carve(L->align, (size_t)h->n * sizeof(double), 4, b);
    h->lo_out = b[0];
    h->lo_in = b[1];
    h->hi_out = b[2];
    h->hi_in = b[3];
}

static void ha_reset(struct ha *h)
{
    for (int i = 0; i < h->n; i++)
        for (int j = 0; j < h->w + 2; j++) {
            G(h->g, i, j) = (double)(i % 7) + 0.5 * (h->me * h->w + j);
            G(h->h, i, j) = 0;
        }
}

static double ha_sum(const struct ha *h)
{
    double s = 0;
    for (int i = 0; i < h->n; i++)
        for (int j = 1; j <= h->w; j++)
            s += G(h->h, i, j) * (1 + (i + j) % 3);
    return s;
}

static void ha_free(struct ha *h)
{
    free(h->g);
    free(h->h);
    free(h->blk);
}

/* ---- driver ------------------------------------------------------------------ */

struct run {
    double t;      /* seconds per iteration, slowest rank */
    double faults; /* per iteration, summed over ranks */
    double steps;  /* neighbour accesses per iteration, summed */
    double check;  /* kernel's result digest (halo) or validity (transpose) */
};

static struct run run_one(int kernel, enum var v, struct tr *t, struct ha *h, const struct lay *L)
{
    struct run r;
    ovl_stats_t a, b;
    OK(ovl_stats_get(&a, sizeof a));
    if (kernel == 0)
        tr_reset(t);
    else
        ha_reset(h);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = bench_now();
    for (int i = 0; i < L->iters; i++) {
        if (kernel == 0)
            tr_iter(t, v, L->comm);
        else
            ha_iter(h, v, L->comm);
    }
    r.t = timed_max((bench_now() - t0) / L->iters);
    OK(ovl_stats_get(&b, sizeof b));
    double loc[2] = { (double)(b.faults - a.faults), (double)(b.edge_steps - a.edge_steps) },
           sum[2];
    MPI_Allreduce(loc, sum, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    r.faults = sum[0] / L->iters;
    r.steps = sum[1] / L->iters;
    if (kernel == 0) {
        int ok = tr_valid(t, L->iters), all = 0;
        MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        r.check = all;
        if (!all)
            bench_fail("transpose, variant %s: B is not %d x A^T", vname[v], L->iters);
    } else {
        double s = ha_sum(h);
        MPI_Allreduce(&s, &r.check, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    }
    return r;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void run_kernel(int kernel, const struct lay *L)
{
    struct tr t;
    struct ha h;
    if (kernel == 0)
        tr_setup(&t, L);
    else
        ha_setup(&h, L);
    double *tv[V_N], *fv[V_N], *sv[V_N];
    for (int v = 0; v < V_N; v++) {
        tv[v] = calloc((size_t)L->reps, sizeof(double));
        fv[v] = calloc((size_t)L->reps, sizeof(double));
        sv[v] = calloc((size_t)L->reps, sizeof(double));
        if (!tv[v] || !fv[v] || !sv[v])
            bench_fail("out of memory");
    }
    const char *kname = kernel == 0 ? "transpose" : "halo";
    for (int rep = -1; rep < L->reps; rep++) {
        double ref = 0;
        for (int k = 0; k < V_N; k++) {
            enum var v = (enum var)((k + (rep < 0 ? 0 : rep)) % V_N);
            struct run r = run_one(kernel, v, &t, &h, L);
            if (kernel == 1) { /* every variant computes the same sums, bit for bit */
                if (k == 0)
                    ref = r.check;
                else if (r.check != ref)
                    bench_fail("halo: variant %s's result %.17g differs from %.17g", vname[v],
                               r.check, ref);
            }
            if (rep < 0)
                continue;
            tv[v][rep] = r.t;
            fv[v][rep] = r.faults;
            sv[v][rep] = r.steps;
            if (L->csv)
                fprintf(L->csv, "%s,%s,%zu,%d,%d,%.9f,%.1f,%.1f\n", kname, vname[v], L->align,
                        bench_size, rep, r.t, r.faults, r.steps);
        }
    }
    if (bench_rank == 0) {
        double base = median(tv[V_MPI], L->reps);
        if (kernel == 0)
            printf("transpose: order %d, %d ranks, tile %d, Work_in/Work_out carved %s, %d "
                   "iterations x %d reps\n",
                   L->order, bench_size, L->tile,
                   L->align >= 4096 ? "page-aligned" : "64-byte-aligned", L->iters, L->reps);
        else
            printf("halo: %d x %d per rank, %d ranks, halo buffers carved %s, %d iterations x %d "
                   "reps\n",
                   L->n, L->n, bench_size, L->align >= 4096 ? "page-aligned" : "64-byte-aligned",
                   L->iters, L->reps);
        printf("  %-10s %12s %9s %12s %12s\n", "variant", "ms/iter", "vs mpi", "faults/iter",
               "nbr steps/it");
        for (int v = 0; v < V_N; v++) {
            double m = median(tv[v], L->reps);
            printf("  %-10s %12.3f %8.3fx %12.1f %12.1f\n", vname[v], m * 1e3, m / base,
                   median(fv[v], L->reps), median(sv[v], L->reps));
        }
        printf("  (vs mpi: time / plain MPI's time, below 1 is faster; medians)\n");
        fflush(stdout);
    }
    for (int v = 0; v < V_N; v++) {
        free(tv[v]);
        free(fv[v]);
        free(sv[v]);
    }
    if (kernel == 0)
        tr_free(&t);
    else
        ha_free(&h);
}

void bench_layouts_transpose(int order, int iters, int reps)
{
    struct lay L = {
        .order = order, .tile = 32, .n = 0, .iters = iters, .reps = reps, .align = 64
    };
    if (order % bench_size) {
        if (bench_rank == 0)
            printf("transpose: skipped (order %d is not a multiple of %d ranks)\n\n", order,
                   bench_size);
        return;
    }
    MPI_Comm_dup(MPI_COMM_WORLD, &L.comm);
    run_kernel(0, &L);
    MPI_Comm_free(&L.comm);
}

int bench_layouts(int argc, char **argv)
{
    struct lay L = { .order = 2048, .tile = 32, .n = 2048, .iters = 4, .reps = 5, .align = 64 };
    const char *csv = NULL, *kernels = "transpose,halo";
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "--help") || !strcmp(o, "-h"))
            bench_help_exit(HELP);
        else if (!strcmp(o, "--kernels"))
            kernels = bench_optarg(CMD, argc, argv, &i);
        else if (!strcmp(o, "--order"))
            L.order = (int)bench_parse_long(CMD, o, bench_optarg(CMD, argc, argv, &i), 2, 65536);
        else if (!strcmp(o, "--tile"))
            L.tile = (int)bench_parse_long(CMD, o, bench_optarg(CMD, argc, argv, &i), 1, 4096);
        else if (!strcmp(o, "--n"))
            L.n = (int)bench_parse_long(CMD, o, bench_optarg(CMD, argc, argv, &i), 8, 65536);
        else if (!strcmp(o, "--iters"))
            L.iters = (int)bench_parse_long(CMD, o, bench_optarg(CMD, argc, argv, &i), 1, 100000);
        else if (!strcmp(o, "--reps"))
            L.reps = (int)bench_parse_long(CMD, o, bench_optarg(CMD, argc, argv, &i), 1, 100000);
        else if (!strcmp(o, "--align")) {
            const char *a = bench_optarg(CMD, argc, argv, &i);
            if (!strcmp(a, "64"))
                L.align = 64;
            else if (!strcmp(a, "page"))
                L.align = (size_t)sysconf(_SC_PAGESIZE);
            else
                bench_usage_error(CMD, "--align takes 64 or page, not '%s'", a);
        } else if (!strcmp(o, "--csv"))
            csv = bench_optarg(CMD, argc, argv, &i);
        else
            bench_usage_error(CMD, "unknown option '%s' (see --help)", o);
    }
    if (bench_size < 2)
        bench_usage_error(CMD, "needs 2 or more ranks");
    if (L.order % bench_size)
        bench_usage_error(CMD, "--order %d is not a multiple of %d ranks", L.order, bench_size);
    int want[2] = { strstr(kernels, "transpose") != NULL, strstr(kernels, "halo") != NULL };
    if (!want[0] && !want[1])
        bench_usage_error(CMD, "--kernels takes transpose and/or halo");
    bench_ovl_init(NULL);
    MPI_Comm_dup(MPI_COMM_WORLD, &L.comm);
    L.csv = bench_csv_open(CMD, csv);
    if (L.csv)
        fprintf(L.csv, "kernel,variant,align,ranks,rep,seconds_per_iter,faults_per_iter,"
                       "neighbour_steps_per_iter\n");
    for (int k = 0; k < 2; k++)
        if (want[k])
            run_kernel(k, &L);
    bench_csv_close(L.csv, csv);
    MPI_Comm_free(&L.comm);
    bench_ovl_finalize();
    return 0;
}
