/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * ovl-bench overview: what `make demo` runs. A short summary (well under a
 * minute) a user reads in ten seconds: plain MPI against ovl on the paper's
 * exchange at a few payloads, and the pair and cascade kernels of delta
 * send/receive (kernels.h). It is a table of sub-benchmarks; to grow it,
 * add a function and a row to `subs` below.
 */
#include "exchange.h"
#include "kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const CMD = "overview";

static const char HELP[] =
    "Usage: ovl-bench overview [options]   (2 ranks, or more; what 'make demo' runs)\n"
    "\n"
    "A short comparison of plain MPI and ovl on the paper's exchange (both ranks\n"
    "send each other one message at the same time):\n"
    "  compute+exchange  time to exchange AND do daxpy work that takes as long as\n"
    "                    the transfer: MPI blocking (exchange, then compute),\n"
    "                    MPI_Test polling every K daxpys, mpi-wait (MPI_Isend/\n"
    "                    MPI_Irecv, compute, MPI_Wait: no MPI call while computing),\n"
    "                    ovl, ovl with marshalling; speedup over blocking (ideal: 2x)\n"
    "  useful-cpu        useful CPU utilisation during the exchange (the paper's\n"
    "                    ratio, loop stopped by the send / by the receive; mpi-wait\n"
    "                    cannot stop at a completion: it computes the dedicated\n"
    "                    count, and its util is 2 - time to completion / transfer,\n"
    "                    the share of the transfer hidden, which equals the paper's\n"
    "                    ratio for an exchange that ends on time)\n"
    "  pair, cascade     delta send/receive kernels (ovl-bench delta): time of\n"
    "                    blocking MPI, MPI-4 partitioned and ovl_delta_* (fault-\n"
    "                    triggered and explicit) for 400 KB messages; speedup over\n"
    "                    blocking MPI. cascade is a chain over all ranks.\n"
    "  transpose         a distributed transpose laid out as real codes lay it out\n"
    "                    (ovl-bench layouts): plain MPI, ovl as the porting guide\n"
    "                    ports it, and ovl with a fault-monitored receive\n"
    "With more than 2 ranks compute+exchange and useful-cpu are skipped; transpose\n"
    "runs when the number of ranks divides its order, 2048.\n"
    "\n"
    "--mpi-async runs instead only compute+exchange and useful-cpu for mpi-async:\n"
    "mpi-wait with MPICH's asynchronous progress thread, which needs MPICH and\n"
    "MPIR_CVAR_ASYNC_PROGRESS=1 in the ranks' environment, in a process of its own\n"
    "(the thread spins on the cores of everything else). Blocking MPI cannot be\n"
    "measured in such a process, so its blocking column is derived: transfer +\n"
    "compute, the work timed at the daxpy rate measured before MPI_Init. The work\n"
    "is sized to the transfer time measured there, with the thread on. bench/\n"
    "peers.sh alternates such runs with normal ones and prints medians.\n"
    "\n"
    "Options:\n"
    "  --sizes LIST   payloads (default 64k,256k,1m)\n"
    "  --reps N       measured reps per point (default 10, 2 warm-up before;\n"
    "                 the kernels: 5, 1 warm-up)\n"
    "  --poll-k K     MPI_Test period of the mpi-poll variant (default 10)\n"
    "  --mpi-async    the mpi-async columns only (see above)\n"
    "  --csv FILE     one row per (sub-benchmark, variant, payload)\n"
    "  --help         this text\n";

struct ov_ctx {
    size_t *sizes;
    int nsizes;
    int reps, warmup;
    long k;
    FILE *csv;
    int kreps; /* reps of the delta kernels */
    int async; /* --mpi-async: only the mpi-async variant */
};

static struct xchg_variant variant(enum xchg_kind kind, const char *name, long k)
{
    struct xchg_variant v;
    memset(&v, 0, sizeof v);
    v.kind = kind;
    v.k = k;
    if (k > 0)
        snprintf(v.name, sizeof v.name, "%s-%ld", name, k);
    else
        snprintf(v.name, sizeof v.name, "%s", name);
    return v;
}

static double median_fixed(const struct xchg_variant *v, long work, int blocking,
                           const struct ov_ctx *c)
{
    double *t = malloc((size_t)c->reps * sizeof *t);
    if (!t)
        bench_fail("out of memory");
    for (int r = -c->warmup; r < c->reps; r++) {
        double s = xchg_fixed_work(v, work, blocking);
        if (r >= 0)
            t[r] = s;
    }
    double m = bench_stat_of(t, c->reps).med;
    free(t);
    return m;
}

/* ---- sub-benchmark: compute + exchange -------------------------------------------- */

static void sub_compute_exchange(const struct ov_ctx *c)
{
    struct xchg_variant mpi = variant(XK_MPI_POLL, "mpi-poll", c->k);
    struct xchg_variant vs[4] = { mpi, variant(XK_MPI_WAIT, "mpi-wait", 0),
                                  variant(XK_OVL, "ovl", 0),
                                  variant(XK_OVL_MARSHAL, "ovl-marshal", 0) };
    int nv = 4;
    if (c->async) {
        vs[0] = variant(XK_MPI_ASYNC, "mpi-async", 0);
        nv = 1;
    }
    if (bench_rank == 0) {
        printf("compute+exchange: exchange one message each way AND do daxpy work that alone "
               "takes the MPI transfer time\n");
        printf("(ms, median of %d; speedup = MPI blocking time / time; ideal 2.00x%s)\n", c->reps,
               c->async ? "; blocking derived: transfer + compute at the rate before MPI_Init"
                        : "");
        printf("%8s %9s %8s | %9s", "payload", "transfer", "compute", "blocking");
        for (int i = 0; i < nv; i++)
            printf(" | %16s", vs[i].name);
        printf("\n");
    }
    for (int s = 0; s < c->nsizes; s++) {
        xchg_setup(c->sizes[s]);
        double T, tc, tb, tv[4];
        if (c->async) {
            /* MPICH's thread takes the core from any compute here: the work
             * and the blocking time come from the rate before it started */
            T = xchg_transfer_time(&vs[0], c->reps, c->warmup);
            long W = (long)(xchg_dedicated_clean(T) + 0.5);
            tc = (double)W * bench_daxpy_ns_clean * 1e-9;
            tb = T + tc;
            tv[0] = median_fixed(&vs[0], W, 0, c);
        } else {
            T = xchg_transfer_time(&mpi, c->reps, c->warmup);
            long W = xchg_dedicated(T, 3);
            tc = median_fixed(NULL, W, 0, c);
            tb = median_fixed(&mpi, W, 1, c);
            for (int i = 0; i < nv; i++)
                tv[i] = median_fixed(&vs[i], W, 0, c);
        }
        xchg_teardown();
        if (bench_rank != 0)
            continue;
        char sz[32];
        printf("%8s %9.3f %8.3f | %9.3f", bench_fmt_size(c->sizes[s], sz, sizeof sz), T * 1e3,
               tc * 1e3, tb * 1e3);
        for (int i = 0; i < nv; i++)
            printf(" | %8.3f %5.2fx ", tv[i] * 1e3, tb / tv[i]);
        printf("\n");
        if (c->csv) {
            if (!c->async)
                fprintf(c->csv, "overview,compute+exchange,mpi-blocking,%zu,%.6g,%.6g,%.6g,1.0,,\n",
                        c->sizes[s], T * 1e3, tc * 1e3, tb * 1e3);
            for (int i = 0; i < nv; i++)
                fprintf(c->csv, "overview,compute+exchange,%s,%zu,%.6g,%.6g,%.6g,%.4f,,\n",
                        vs[i].name, c->sizes[s], T * 1e3, tc * 1e3, tv[i] * 1e3, tb / tv[i]);
        }
    }
    if (bench_rank == 0)
        printf("\n");
}

/* ---- sub-benchmark: useful CPU during the exchange -------------------------------- */

static void sub_useful_cpu(const struct ov_ctx *c)
{
    struct xchg_variant vs[4] = { variant(XK_MPI_POLL, "mpi-poll", c->k),
                                  variant(XK_MPI_WAIT, "mpi-wait", 0), variant(XK_OVL, "ovl", 0),
                                  variant(XK_OVL_MARSHAL, "ovl-marshal", 0) };
    int nv = 4;
    if (c->async) {
        vs[0] = variant(XK_MPI_ASYNC, "mpi-async", 0);
        nv = 1;
    }
    if (bench_rank == 0) {
        printf("useful-cpu: daxpys done during the exchange / daxpys in the same time on a "
               "dedicated CPU\n");
        printf("(the paper's utilisation, loop stopped by the send / by the receive; mpi-wait, "
               "mpi-async: fixed work, 2 - time to completion / transfer; median of %d)\n",
               c->reps);
        printf("%8s %9s", "payload", "transfer");
        for (int i = 0; i < nv; i++)
            printf(" | %17s", vs[i].name);
        printf("\n");
    }
    for (int s = 0; s < c->nsizes; s++) {
        xchg_setup(c->sizes[s]);
        struct lh_result r[4];
        for (int i = 0; i < nv; i++)
            lh_measure(&vs[i], c->reps, c->warmup, &r[i]);
        xchg_teardown();
        if (bench_rank != 0)
            continue;
        char sz[32];
        printf("%8s %9.3f", bench_fmt_size(c->sizes[s], sz, sizeof sz),
               r[c->async ? 0 : 2].transfer_ms.med);
        for (int i = 0; i < nv; i++)
            printf(" | %6.1f%% / %5.1f%%", 100 * r[i].util[0], 100 * r[i].util[1]);
        printf("\n");
        for (int i = 0; c->csv && i < nv; i++)
            fprintf(c->csv, "overview,useful-cpu,%s,%zu,%.6g,,,,%.4f,%.4f\n", vs[i].name,
                    c->sizes[s], r[i].transfer_ms.med, r[i].util[0], r[i].util[1]);
    }
    if (bench_rank == 0)
        printf("\n");
}

/* ---- sub-benchmarks: delta send/receive kernels ---------------------------------- */

static void sub_kernel(const struct ov_ctx *c, enum kkind kind)
{
    struct kparams p;
    kparams_default(&p);
    unsigned vmask = 0;
    for (int v = 0; v < KV_COUNT; v++)
        if (kvar_available((enum kvar)v))
            vmask |= 1u << v;
    struct kernel *k = kernel_setup(kind, &p, vmask);
    struct kmeasure m;
    kernel_measure(k, vmask, c->kreps, 1, &m);
    char desc[160];
    kernel_describe(k, desc, sizeof desc);
    kernel_teardown(k);
    if (bench_rank != 0)
        return;
    printf("%s (%s; compute %.3f ms, transfer %.3f ms; ms, median of %d; speedup over "
           "blocking MPI)\n",
           kkind_name(kind), desc, m.C * 1e3, m.T * 1e3, c->kreps);
    double base = m.t[KV_MPI].med;
    for (int v = 0; v < KV_COUNT; v++) {
        if (!(vmask & (1u << v)))
            continue;
        double t = m.t[v].med, sp = t > 0 ? base / t : 0;
        printf("  %-13s %9.3f %6.2fx\n", kvar_name((enum kvar)v), t * 1e3, sp);
        if (c->csv)
            fprintf(c->csv, "overview,%s,%s,%zu,%.6g,%.6g,%.6g,%.4f,,\n", kkind_name(kind),
                    kvar_name((enum kvar)v), p.bytes, m.T * 1e3, m.C * 1e3, t * 1e3, sp);
    }
    printf("\n");
}

static void sub_pair(const struct ov_ctx *c)
{
    sub_kernel(c, KK_PAIR);
}

static void sub_cascade(const struct ov_ctx *c)
{
    sub_kernel(c, KK_CASCADE);
}

/* A program shaped like the user's: the layouts benchmark's transpose,
 * buffers carved from one block, a tiled pack loop (ovl-bench layouts). */
static void sub_transpose(const struct ov_ctx *c)
{
    bench_layouts_transpose(2048, 2, c->kreps < 3 ? c->kreps : 3);
    if (bench_rank == 0)
        printf("\n");
}

/* The sub-benchmarks, in the order they print; two_ranks: needs exactly 2;
 * async: runs under --mpi-async (only the exchange variants have one). */
static const struct {
    const char *name;
    void (*run)(const struct ov_ctx *c);
    int two_ranks, async;
} subs[] = {
    { "compute+exchange", sub_compute_exchange, 1, 1 },
    { "useful-cpu", sub_useful_cpu, 1, 1 },
    { "pair", sub_pair, 0, 0 },
    { "cascade", sub_cascade, 0, 0 },
    { "transpose", sub_transpose, 0, 0 },
};

int bench_overview(int argc, char **argv)
{
    struct ov_ctx c = { .reps = 10, .warmup = 2, .k = 10, .kreps = 5 };
    const char *sizes = "64k,256k,1m", *csvpath = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h"))
            bench_help_exit(HELP);
        else if (!strcmp(a, "--sizes"))
            sizes = bench_optarg(CMD, argc, argv, &i);
        else if (!strcmp(a, "--reps")) {
            c.reps = (int)bench_parse_long(CMD, a, bench_optarg(CMD, argc, argv, &i), 1, 10000);
            c.kreps = c.reps < 5 ? c.reps : 5;
        } else if (!strcmp(a, "--poll-k"))
            c.k = bench_parse_long(CMD, a, bench_optarg(CMD, argc, argv, &i), 1, 1000000);
        else if (!strcmp(a, "--csv"))
            csvpath = bench_optarg(CMD, argc, argv, &i);
        else if (!strcmp(a, "--mpi-async"))
            c.async = 1;
        else
            bench_usage_error(CMD, "unknown option '%s'", a);
    }
    c.nsizes = bench_parse_size_list(CMD, "--sizes", sizes, &c.sizes);
    for (int i = 0; i < c.nsizes; i++)
        if (c.sizes[i] % sizeof(double) || c.sizes[i] > (1u << 30))
            bench_usage_error(CMD, "--sizes: %zu is not a multiple of 8 bytes up to 1g",
                              c.sizes[i]);
    if (bench_size < 2 || (c.async && bench_size != 2))
        bench_require_two_ranks(CMD);
    xchg_check_async(CMD, c.async, 0);
    c.csv = bench_csv_open(CMD, csvpath);

    /* under --mpi-async no ovl variant runs: ovl without its thread */
    ovl_config_t eff;
    bench_ovl_start(c.async, &eff);
    int hosts = bench_hosts();
    double t0 = bench_now();
    if (bench_rank == 0) {
        if (c.async)
            printf("ovl-bench overview --mpi-async: %d ranks on %d host%s; MPICH's asynchronous "
                   "progress thread on; one daxpy + clock read = %.0f ns before MPI_Init\n\n",
                   bench_size, hosts, hosts == 1 ? "" : "s", bench_daxpy_ns_clean);
        else
            printf("ovl-bench overview: %d ranks on %d host%s%s; ovl progress thread "
                   "(lateness_us %u), fragment %zu B\n\n",
                   bench_size, hosts, hosts == 1 ? "" : "s",
                   hosts == 1 ? " (shared memory: copies use the computing CPUs, little to hide)"
                              : "",
                   eff.progress.lateness_us, eff.stream.fragment_size);
        if (c.csv)
            fprintf(c.csv, "bench,sub,variant,payload_bytes,transfer_ms,compute_ms,time_ms,"
                           "speedup,util_send,util_recv\n");
    }
    for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++) {
        if (c.async && !subs[i].async)
            continue;
        if (subs[i].two_ranks && bench_size != 2) {
            if (bench_rank == 0)
                printf("%s: skipped (needs exactly 2 ranks)\n\n", subs[i].name);
            continue;
        }
        subs[i].run(&c);
    }
    if (bench_rank == 0)
        printf("overview took %.1f s; details: ovl-bench latency-hiding, ovl-bench "
               "callback-latency, docs/PERFORMANCE.md\n",
               bench_now() - t0);
    bench_csv_close(c.csv, csvpath); /* before ovl_finalize: keep the data if that fails */
    bench_ovl_finalize();
    free(c.sizes);
    return 0;
}
