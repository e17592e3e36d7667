/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * ovl-bench delta and delta-sweep: the experiments of the delta send/receive
 * paper (Ding et al., section III) on ovl.
 *
 *   delta        every kernel (kernels.h) in every variant, side by side in
 *                one run, interleaved per rep; times, speedups over blocking
 *                MPI and, for the chain and tree kernels, the fraction of the
 *                ideal pipeline bound reached (kernels.c derives it).
 *   delta-sweep  the paper's Figure 5: pair, delta size 1..10 pages x message
 *                size 8 KB..1 MB, both monitors, plus the automatic delta
 *                size. The delta size is a process-wide setting read at
 *                ovl_init, so every rep re-initialises ovl once per delta
 *                size (OVL_CONFIG_FIELD_DELTA_SIZE).
 */
#include "kernels.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- shared option handling -------------------------------------------------------------- */

static void parse_kernel_opt(const char *cmd, const char *a, int argc, char **argv, int *i,
                             struct kparams *p, int *handled)
{
    *handled = 1;
    if (!strcmp(a, "--bytes"))
        p->bytes = bench_parse_size(cmd, a, bench_optarg(cmd, argc, argv, i));
    else if (!strcmp(a, "--work")) {
        const char *s = bench_optarg(cmd, argc, argv, i);
        p->work = !strcmp(s, "auto") ? 0 : bench_parse_long(cmd, a, s, 1, 1000000);
    } else if (!strcmp(a, "--strip"))
        p->strip = bench_parse_size(cmd, a, bench_optarg(cmd, argc, argv, i));
    else if (!strcmp(a, "--part-size"))
        p->part_size = bench_parse_size(cmd, a, bench_optarg(cmd, argc, argv, i));
    else if (!strcmp(a, "--iters"))
        p->iters = (int)bench_parse_long(cmd, a, bench_optarg(cmd, argc, argv, i), 1, 1000);
    else if (!strcmp(a, "--rows"))
        p->rows = (int)bench_parse_long(cmd, a, bench_optarg(cmd, argc, argv, i), 1, 100000);
    else if (!strcmp(a, "--cols"))
        p->cols = (int)bench_parse_long(cmd, a, bench_optarg(cmd, argc, argv, i), 1, 100000);
    else if (!strcmp(a, "--trace"))
        kernel_trace = 1;
    else if (!strcmp(a, "--mpi-wait")) {
        const char *s = bench_optarg(cmd, argc, argv, i);
        if (!strcmp(s, "spin"))
            p->sleep_us = 0;
        else if (!strncmp(s, "sleep", 5))
            p->sleep_us = s[5] == ':' ? bench_parse_long(cmd, a, s + 6, 1, 100000) : 50;
        else
            bench_usage_error(cmd, "--mpi-wait: 'spin', 'sleep' or 'sleep:US', not '%s'", s);
    } else if (!strcmp(a, "--memory")) {
        const char *s = bench_optarg(cmd, argc, argv, i);
        if (strcmp(s, "mmap") && strcmp(s, "ovl_alloc"))
            bench_usage_error(cmd, "--memory: 'mmap' or 'ovl_alloc', not '%s'", s);
        p->ovl_memory = !strcmp(s, "ovl_alloc");
    } else if (!strcmp(a, "--stencil-n"))
        p->stencil_n = (int)bench_parse_long(cmd, a, bench_optarg(cmd, argc, argv, i), 2, 1000);
    else
        *handled = 0;
}

static void check_kparams(const char *cmd, const struct kparams *p)
{
    if (p->bytes < sizeof(double) || p->bytes % sizeof(double) || p->bytes > (1u << 30))
        bench_usage_error(cmd, "--bytes: %zu is not a multiple of 8 bytes in [8, 1g]", p->bytes);
    if (p->strip < sizeof(double) || p->strip % sizeof(double))
        bench_usage_error(cmd, "--strip: %zu is not a multiple of 8 bytes", p->strip);
    if (p->part_size < sizeof(double) || p->part_size % sizeof(double))
        bench_usage_error(cmd, "--part-size: %zu is not a multiple of 8 bytes", p->part_size);
}

/* --work auto: repetitions that make a pair's compute take as long as its
 * transfer (medians of 3 probes each, with work 1). */
static long calibrate_work(const struct kparams *p)
{
    struct kparams q = *p;
    q.work = 1;
    struct kernel *k = kernel_setup(KK_PAIR, &q, 0);
    double c[3], t[3];
    for (int i = 0; i < 3; i++) {
        c[i] = kernel_probe_compute(k);
        t[i] = kernel_probe_transfer(k);
    }
    kernel_teardown(k);
    double C = bench_stat_of(c, 3).med, T = bench_stat_of(t, 3).med;
    long w = C > 0 ? lround(T / C) : 1;
    return w < 1 ? 1 : w;
}

static unsigned parse_variants(const char *cmd, const char *s, int allow_part)
{
    unsigned mask = 0;
    char *copy = strdup(s), *save = NULL;
    if (!copy)
        bench_fail("out of memory");
    for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int v = kvar_parse(t);
        if (v < 0 || (v == KV_PART && !allow_part))
            bench_usage_error(cmd, "--variants: unknown variant '%s'", t);
        if (!kvar_available((enum kvar)v)) {
            if (bench_rank == 0)
                fprintf(stderr,
                        "ovl-bench %s: note: variant %s skipped: this MPI library has no "
                        "partitioned communication (MPI_Psend_init)\n",
                        cmd, t);
            continue;
        }
        mask |= 1u << v;
    }
    free(copy);
    return mask;
}

static const char *monitor_line(char *buf, size_t len)
{
    ovl_monitor_t chosen = OVL_MONITOR_AUTO;
    char why[160] = "";
    int rc = ovl_monitor_probe(OVL_MONITOR_AUTO, &chosen, why, sizeof why);
    if (rc != OVL_SUCCESS)
        snprintf(buf, len, "auto -> ? (%s)", ovl_strerror(rc));
    else
        snprintf(buf, len, "auto -> %s (%s)", ovl_monitor_name(chosen), why);
    return buf;
}

/* ---- ovl-bench delta ------------------------------------------------------------------------ */

static const char *const CMD = "delta";

static const char HELP[] =
    "Usage: ovl-bench delta [options]   (2 or more ranks; one rank per host)\n"
    "\n"
    "The kernels of the delta send/receive paper (Ding et al., section III), each in\n"
    "every variant, interleaved per rep (order rotated every rep), results verified\n"
    "byte for byte:\n"
    "  pair       rank 0 computes an array and sends it to rank 1, which computes\n"
    "             y[i] = f(x[i]) from it (other ranks idle)\n"
    "  cascade    p ranks as a chain: rank k receives from k-1, computes, sends to k+1\n"
    "  ring       every rank computes, sends right, receives from left; the next\n"
    "             iteration computes from what arrived (--iters)\n"
    "  reduce     binary tree: each rank adds its children's arrays to its own\n"
    "             computed array (one loop) and sends the sum to its parent\n"
    "  wavefront  NAS LU-like sweep: rank k's (--rows x n) block needs the boundary\n"
    "             row of rank k-1, is swept column by column, and its last row,\n"
    "             written as each column ends, goes to rank k+1\n"
    "  rowreduce  HYCOM xcsum-like: every rank sums --cols values per row; row sums\n"
    "             are accumulated in a fixed order along the chain p-1 -> 0\n"
    "  stencil    NAS MG-like 7-point stencil on a 3-D process grid (MPI_Dims_create),\n"
    "             --stencil-n^3 blocks, 6 faces written during the sweep, --iters\n"
    "f(x, i) = sin(x)*sin(i) + cos(i)*cos(x), repeated --work times per element.\n"
    "\n"
    "Variants:\n"
    "  mpi           blocking MPI_Send/MPI_Recv (ring, stencil: MPI_Irecv/MPI_Isend/MPI_Wait)\n"
    "  part          MPI-4 partitioned: MPI_Pready per partition, MPI_Parrived before use\n"
    "  ovl-os        ovl_delta_* (monitor OVL_MONITOR_AUTO): page faults trigger the deltas\n"
    "  ovl-explicit  ovl_delta_* (monitor OVL_MONITOR_EXPLICIT): ovl_delta_produced /\n"
    "                ovl_delta_need per --strip\n"
    "Each rep also times C (one stage's computation alone) and T (one plain MPI_Send\n"
    "of the message alone). For pair, cascade and reduce the table shows the ideal\n"
    "pipeline bound B(m) = max(bottleneck + (path - bottleneck)/m, p*C/min(p, cores))\n"
    "for the variant's m pieces per message, and bound / time.\n"
    "\n"
    "Options:\n"
    "  --kernels LIST    default pair,cascade,ring,reduce,wavefront,rowreduce,stencil\n"
    "  --variants LIST   default mpi,part,ovl-os,ovl-explicit\n"
    "  --bytes SIZE      message size (default 400k)\n"
    "  --work N|auto     repetitions of f per element (default 2; auto: compute = transfer)\n"
    "  --strip SIZE      explicit annotations / MPI_Parrived granularity (default 4k)\n"
    "  --part-size SIZE  partition size of the part variant (default 16k)\n"
    "  --iters N         ring and stencil iterations (default 4)\n"
    "  --rows N          wavefront block rows (default 4)\n"
    "  --cols N          rowreduce columns per row (default 2)\n"
    "  --stencil-n N     stencil block edge (default 48)\n"
    "  --memory KIND     message buffers of every variant: mmap (default) or\n"
    "                    ovl_alloc (received through a second mapping, no copy)\n"
    "  --mpi-wait MODE   spin (default): mpi/part wait in MPI_Recv/MPI_Send/MPI_Wait/\n"
    "                    MPI_Parrived loops, which spin; sleep[:US]: MPI_Test or\n"
    "                    MPI_Parrived with US us sleeps (default 50) between polls,\n"
    "                    so waiting ranks leave their core to computing ones\n"
    "  --reps N          measured reps (default 5), --warmup N (default 1)\n"
    "  --cores N         cores for the bound (default: online CPUs per distinct kernel)\n"
    "  --csv FILE        one row per (kernel, variant)\n"
    "  --trace           print every run (kernel, variant, rank) to stderr first\n"
    "  --help            this text\n"
    "\n"
    "ovl runs with the progress thread unless OVL_PROGRESS is set; OVL_DELTA_SIZE,\n"
    "OVL_MONITOR and the other OVL_* variables apply (docs/ENV.md).\n";

struct delta_opts {
    struct kparams p;
    int kinds[KK_COUNT], nkinds;
    unsigned vmask;
    int reps, warmup, cores;
    const char *csv;
};

static void delta_parse(int argc, char **argv, struct delta_opts *o)
{
    const char *kernels = "pair,cascade,ring,reduce,wavefront,rowreduce,stencil";
    const char *variants = "mpi,part,ovl-os,ovl-explicit";
    kparams_default(&o->p);
    o->reps = 5;
    o->warmup = 1;
    o->cores = 0;
    o->csv = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int handled;
        parse_kernel_opt(CMD, a, argc, argv, &i, &o->p, &handled);
        if (handled)
            continue;
        if (!strcmp(a, "--help") || !strcmp(a, "-h"))
            bench_help_exit(HELP);
        else if (!strcmp(a, "--kernels"))
            kernels = bench_optarg(CMD, argc, argv, &i);
        else if (!strcmp(a, "--variants"))
            variants = bench_optarg(CMD, argc, argv, &i);
        else if (!strcmp(a, "--reps"))
            o->reps = (int)bench_parse_long(CMD, a, bench_optarg(CMD, argc, argv, &i), 1, 100000);
        else if (!strcmp(a, "--warmup"))
            o->warmup = (int)bench_parse_long(CMD, a, bench_optarg(CMD, argc, argv, &i), 0, 1000);
        else if (!strcmp(a, "--cores"))
            o->cores = (int)bench_parse_long(CMD, a, bench_optarg(CMD, argc, argv, &i), 1, 1 << 20);
        else if (!strcmp(a, "--csv"))
            o->csv = bench_optarg(CMD, argc, argv, &i);
        else
            bench_usage_error(CMD, "unknown option '%s'", a);
    }
    check_kparams(CMD, &o->p);
    o->nkinds = 0;
    char *copy = strdup(kernels), *save = NULL;
    if (!copy)
        bench_fail("out of memory");
    for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int k = kkind_parse(t);
        if (k < 0)
            bench_usage_error(CMD, "--kernels: unknown kernel '%s'", t);
        if (o->nkinds < KK_COUNT)
            o->kinds[o->nkinds++] = k;
    }
    free(copy);
    o->vmask = parse_variants(CMD, variants, 1);
    if (!o->vmask || !o->nkinds)
        bench_usage_error(CMD, "nothing to run");
}

static int is_ovl_var(int v)
{
    return v == KV_OVL_OS || v == KV_OVL_EXPLICIT;
}

/* Pieces per message for the bound: 1 for mpi, partitions for part, message /
 * delta size for ovl (0 = unknown: unbounded). */
static double pieces(const struct kmeasure *m, int v, size_t msg)
{
    if (v == KV_MPI)
        return 1;
    if (v == KV_PART)
        return m->parts > 0 ? m->parts : 1;
    if (m->delta_bytes[v] == 0)
        return 0;
    return ceil((double)msg / (double)m->delta_bytes[v]);
}

void kernel_report(FILE *csv, const char *bench, struct kernel *k, const struct kmeasure *m,
                   unsigned vmask, int hosts, int cores, const struct kparams *p, int warmup)
{
    if (bench_rank != 0)
        return;
    char desc[160];
    size_t msg = kernel_msg_bytes(k);
    kernel_describe(k, desc, sizeof desc);
    double base = (vmask & (1u << KV_MPI)) ? m->t[KV_MPI].med : 0;
    int bounded = kernel_has_bound(k);
    double binf = bounded ? kernel_bound(k, m->C, m->T, cores, 0) : 0;
    printf("%s: %s; C = %.3f ms, T = %.3f ms", kkind_name(kernel_kind(k)), desc, m->C * 1e3,
           m->T * 1e3);
    if (bounded)
        printf(", bound with unbounded pipelining %.3f ms (%.2fx over mpi)", binf * 1e3,
               binf > 0 && base > 0 ? base / binf : 0);
    printf("\n");
    printf("  %-13s %9s %9s %9s %8s %8s %8s %8s %9s %7s\n", "variant", "median", "min", "max",
           "speedup", "delta", "pieces", "faults", "bound", "of");
    printf("  %-13s %9s %9s %9s %8s %8s %8s %8s %9s %7s\n", "", "ms", "ms", "ms", "vs mpi", "KB",
           "/rep", "/rep", "ms", "bound");
    for (int v = 0; v < KV_COUNT; v++) {
        if (!(vmask & (1u << v)))
            continue;
        const struct bench_stat *s = &m->t[v];
        double sp = base > 0 && s->med > 0 ? base / s->med : 0;
        double np = pieces(m, v, msg);
        double b = bounded ? kernel_bound(k, m->C, m->T, cores, np) : 0;
        char dsz[16] = "-", npc[16] = "-", flt[16] = "-", bnd[16] = "-", frac[16] = "-";
        if (is_ovl_var(v) && m->delta_bytes[v])
            snprintf(dsz, sizeof dsz, "%.1f", (double)m->delta_bytes[v] / 1024);
        if (is_ovl_var(v)) {
            snprintf(npc, sizeof npc, "%.0f", m->deltas[v]);
            snprintf(flt, sizeof flt, "%.0f", m->faults[v]);
        } else if (v == KV_PART) {
            snprintf(npc, sizeof npc, "%d", m->parts);
        }
        if (bounded) {
            snprintf(bnd, sizeof bnd, "%.3f", b * 1e3);
            snprintf(frac, sizeof frac, "%.0f%%", s->med > 0 ? 100 * b / s->med : 0);
        }
        printf("  %-13s %9.3f %9.3f %9.3f %7.2fx %8s %8s %8s %9s %7s\n", kvar_name((enum kvar)v),
               s->med * 1e3, s->min * 1e3, s->max * 1e3, sp, dsz, npc, flt, bnd, frac);
        if (csv)
            fprintf(csv,
                    "%s,%s,%s,%d,%d,%d,%zu,%zu,%ld,%zu,%zu,%d,%d,%.6g,%.6g,%.6g,%.4f,%.6g,%.6g,"
                    "%zu,%d,%.1f,%.1f,%.6g,%.6g,%.4f,%ld,%.1f,%.4f\n",
                    bench, kkind_name(kernel_kind(k)), kvar_name((enum kvar)v), bench_size, hosts,
                    cores, p->bytes, msg, p->work, p->strip, p->part_size, m->reps, warmup,
                    s->med * 1e3, s->min * 1e3, s->max * 1e3, sp, m->C * 1e3, m->T * 1e3,
                    is_ovl_var(v) ? m->delta_bytes[v] : 0, v == KV_PART ? m->parts : 0,
                    is_ovl_var(v) ? m->deltas[v] : 0, is_ovl_var(v) ? m->faults[v] : 0, b * 1e3,
                    binf * 1e3, b > 0 && s->med > 0 ? b / s->med : 0, p->sleep_us, m->begin_us[v],
                    m->begin_slow[v]);
    }
    printf("\n");
    fflush(stdout);
}

static int any_ovl(unsigned vmask)
{
    return (vmask & ((1u << KV_OVL_OS) | (1u << KV_OVL_EXPLICIT))) != 0;
}

int bench_delta(int argc, char **argv)
{
    struct delta_opts o;
    delta_parse(argc, argv, &o);
    if (bench_size < 2) {
        if (bench_rank == 0)
            fprintf(stderr,
                    "ovl-bench delta: needs 2 or more ranks, e.g. 'testbed/ovl-cluster run --np 4 "
                    "-- ovl-bench delta'\n");
        return BENCH_EXIT_USAGE;
    }
    FILE *csv = bench_csv_open(CMD, o.csv);
    ovl_config_t eff;
    memset(&eff, 0, sizeof eff);
    if (any_ovl(o.vmask))
        bench_ovl_start_thread(&eff);
    int hosts = bench_hosts();
    int cores = o.cores ? o.cores : bench_cores();
    if (o.p.work == 0)
        o.p.work = calibrate_work(&o.p);
    double t0 = bench_now();
    if (bench_rank == 0) {
        char sz[32], mon[256];
        printf("ovl-bench delta: %d ranks on %d host%s, %d core%s in all; message %s, work %ld, "
               "strip %zu B, partitions of %zu B; medians of %d reps (%d warm-up), variants "
               "interleaved\n",
               bench_size, hosts, hosts == 1 ? "" : "s", cores, cores == 1 ? "" : "s",
               bench_fmt_size(o.p.bytes, sz, sizeof sz), o.p.work, o.p.strip, o.p.part_size, o.reps,
               o.warmup);
        if (any_ovl(o.vmask))
            printf("ovl: progress %s, lateness_us %u; delta size %s%zu; monitor %s\n",
                   eff.progress.mode == OVL_PROGRESS_THREAD ? "thread" : "inline",
                   eff.progress.lateness_us, eff.access.delta_size ? "" : "automatic (model) ",
                   eff.access.delta_size, monitor_line(mon, sizeof mon));
        printf("\n");
        if (csv)
            fputs(KERNEL_CSV_HEADER, csv);
    }
    double sp[KK_COUNT][KV_COUNT], fr[KK_COUNT][KV_COUNT];
    int ran[KK_COUNT] = { 0 };
    memset(sp, 0, sizeof sp);
    memset(fr, 0, sizeof fr);
    for (int i = 0; i < o.nkinds; i++) {
        enum kkind kind = (enum kkind)o.kinds[i];
        if (bench_size < kkind_min_ranks(kind))
            continue;
        struct kernel *k = kernel_setup(kind, &o.p, o.vmask);
        struct kmeasure m;
        kernel_measure(k, o.vmask, o.reps, o.warmup, &m);
        kernel_report(csv, "delta", k, &m, o.vmask, hosts, cores, &o.p, o.warmup);
        ran[kind] = 1;
        for (int v = 0; v < KV_COUNT; v++) {
            if (!(o.vmask & (1u << v)) || m.t[v].med <= 0)
                continue;
            sp[kind][v] = (o.vmask & 1u << KV_MPI) ? m.t[KV_MPI].med / m.t[v].med : 0;
            if (kernel_has_bound(k)) {
                double np = pieces(&m, v, kernel_msg_bytes(k));
                fr[kind][v] = kernel_bound(k, m.C, m.T, cores, np) / m.t[v].med;
            } else {
                fr[kind][v] = -1;
            }
        }
        kernel_teardown(k);
    }
    if (bench_rank == 0) {
        printf("Summary: speedup over blocking MPI (median times)");
        printf("%s\n", (o.vmask & (1u << KV_MPI)) ? "" : " - needs the mpi variant");
        printf("  %-10s", "kernel");
        for (int v = 0; v < KV_COUNT; v++)
            if (o.vmask & (1u << v))
                printf(" %13s", kvar_name((enum kvar)v));
        printf("\n");
        for (int kind = 0; kind < KK_COUNT; kind++) {
            if (!ran[kind])
                continue;
            printf("  %-10s", kkind_name((enum kkind)kind));
            for (int v = 0; v < KV_COUNT; v++)
                if (o.vmask & (1u << v))
                    printf(" %12.2fx", sp[kind][v]);
            printf("\n");
        }
        printf("delta took %.1f s\n", bench_now() - t0);
    }
    bench_csv_close(csv, o.csv); /* before ovl_finalize: keep the data if that fails */
    if (any_ovl(o.vmask))
        bench_ovl_finalize();
    return 0;
}

/* ---- ovl-bench delta-sweep --------------------------------------------------------------- */

static const char *const SCMD = "delta-sweep";

static const char SHELP[] =
    "Usage: ovl-bench delta-sweep [options]   (2 or more ranks; ranks 0 and 1 work)\n"
    "\n"
    "The pair kernel (see 'ovl-bench delta --help') for every delta size x message\n"
    "size, with both monitors (ovl-os: OVL_MONITOR_AUTO, ovl-explicit), against\n"
    "blocking MPI; plus the automatic delta size (OVL_DELTA_SIZE=0: the model) as\n"
    "one more column. The delta size is read at ovl_init, so every rep\n"
    "re-initialises ovl once per delta size (in a new random order every rep) and runs\n"
    "every message size with both monitors under it; mpi runs once per rep and size.\n"
    "Prints speedup over MPI per cell and auto / best fixed size per message size.\n"
    "\n"
    "Options:\n"
    "  --sizes LIST    message sizes (default 8k,16k,32k,64k,128k,256k,512k,1m)\n"
    "  --deltas LIST   fixed delta sizes (default 4k,8k,...,40k: 1..10 pages)\n"
    "  --no-auto       leave out the automatic delta size\n"
    "  --work N|auto   repetitions of f per element (default 2)\n"
    "  --strip SIZE    explicit annotation granularity (default 4k)\n"
    "  --memory KIND   mmap (default) or ovl_alloc message buffers\n"
    "  --reps N        measured reps (default 5), --warmup N (default 1)\n"
    "  --init-warmup N untimed runs of every message size and monitor after each\n"
    "                  ovl_init (default 1): every column is then measured in the\n"
    "                  same steady state, as a program that initialises once\n"
    "  --csv FILE      one row per (monitor, delta size, message size), plus mpi rows\n"
    "  --trace         print every run and ovl_init's delta size to stderr first\n"
    "  --help          this text\n";

/* splitmix64: the column orders of delta-sweep */
static uint64_t next_rand(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

int bench_delta_sweep(int argc, char **argv)
{
    struct kparams p;
    kparams_default(&p);
    const char *sizes = "8k,16k,32k,64k,128k,256k,512k,1m";
    const char *deltas = "4k,8k,12k,16k,20k,24k,28k,32k,36k,40k";
    const char *csvpath = NULL;
    int reps = 5, warmup = 1, with_auto = 1, init_warm = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int handled;
        parse_kernel_opt(SCMD, a, argc, argv, &i, &p, &handled);
        if (handled)
            continue;
        if (!strcmp(a, "--help") || !strcmp(a, "-h"))
            bench_help_exit(SHELP);
        else if (!strcmp(a, "--sizes"))
            sizes = bench_optarg(SCMD, argc, argv, &i);
        else if (!strcmp(a, "--deltas"))
            deltas = bench_optarg(SCMD, argc, argv, &i);
        else if (!strcmp(a, "--no-auto"))
            with_auto = 0;
        else if (!strcmp(a, "--reps"))
            reps = (int)bench_parse_long(SCMD, a, bench_optarg(SCMD, argc, argv, &i), 1, 100000);
        else if (!strcmp(a, "--warmup"))
            warmup = (int)bench_parse_long(SCMD, a, bench_optarg(SCMD, argc, argv, &i), 0, 1000);
        else if (!strcmp(a, "--init-warmup"))
            init_warm = (int)bench_parse_long(SCMD, a, bench_optarg(SCMD, argc, argv, &i), 0, 1000);
        else if (!strcmp(a, "--csv"))
            csvpath = bench_optarg(SCMD, argc, argv, &i);
        else
            bench_usage_error(SCMD, "unknown option '%s'", a);
    }
    check_kparams(SCMD, &p);
    size_t *sz, *fixed;
    int ns = bench_parse_size_list(SCMD, "--sizes", sizes, &sz);
    int nf = bench_parse_size_list(SCMD, "--deltas", deltas, &fixed);
    for (int i = 0; i < ns; i++)
        if (sz[i] % sizeof(double) || sz[i] > (1u << 30))
            bench_usage_error(SCMD, "--sizes: %zu is not a multiple of 8 bytes up to 1g", sz[i]);
    if (bench_size < 2) {
        if (bench_rank == 0)
            fprintf(stderr, "ovl-bench delta-sweep: needs 2 or more ranks\n");
        return BENCH_EXIT_USAGE;
    }
    /* delta configurations: the fixed sizes, then 0 = automatic */
    int nd = nf + with_auto;
    size_t *dcfg = calloc((size_t)nd, sizeof *dcfg);
    if (!dcfg)
        bench_fail("out of memory");
    for (int i = 0; i < nf; i++)
        dcfg[i] = fixed[i];
    FILE *csv = bench_csv_open(SCMD, csvpath);
    int hosts = bench_hosts();
    if (p.work == 0)
        p.work = calibrate_work(&p);
    const unsigned vmask = (1u << KV_MPI) | (1u << KV_OVL_OS) | (1u << KV_OVL_EXPLICIT);
    struct kernel **k = calloc((size_t)ns, sizeof *k);
    /* times [mon 0/1][d][s][rep], mpi [s][rep], delta size used [mon][d][s] */
    size_t cells = (size_t)nd * (size_t)ns * (size_t)reps;
    double *tov[2] = { calloc(cells, sizeof(double)), calloc(cells, sizeof(double)) };
    double *tmpi = calloc((size_t)ns * (size_t)reps, sizeof(double));
    size_t *used[2] = { calloc((size_t)nd * (size_t)ns, sizeof(size_t)),
                        calloc((size_t)nd * (size_t)ns, sizeof(size_t)) };
    /* and the smallest: an automatic size may differ from message to message */
    size_t *umin[2] = { calloc((size_t)nd * (size_t)ns, sizeof(size_t)),
                        calloc((size_t)nd * (size_t)ns, sizeof(size_t)) };
    if (!k || !tov[0] || !tov[1] || !tmpi || !used[0] || !used[1] || !umin[0] || !umin[1])
        bench_fail("out of memory");
    for (int s = 0; s < ns; s++) {
        struct kparams q = p;
        q.bytes = sz[s];
        k[s] = kernel_setup(KK_PAIR, &q, vmask);
    }
    double t0 = bench_now();
    char mon[256] = "";
    int *order = malloc((size_t)nd * sizeof *order);
    if (!order)
        bench_fail("out of memory");
    uint64_t seed = 0x6f766c2d73776570ull; /* fixed: the same orders on every rank and run */
    for (int r = -warmup; r < reps; r++) {
        for (int s = 0; s < ns; s++) {
            struct krun kr;
            kernel_run(k[s], KV_MPI, &kr);
            if (r >= 0)
                tmpi[(size_t)s * (size_t)reps + (size_t)r] = kr.time;
        }
        /* A new random order of the delta-size columns every rep (the same
         * on every rank: one seed, one sequence). A rotation kept each
         * column behind the same neighbour, so whatever one configuration
         * leaves behind in the process and on the link (TCP state, the
         * shaper's bucket) would bias the same column every rep. */
        for (int j = 0; j < nd; j++)
            order[j] = j;
        for (int j = nd - 1; j > 0; j--) {
            int t = (int)(next_rand(&seed) % (uint64_t)(j + 1)), x = order[j];
            order[j] = order[t];
            order[t] = x;
        }
        for (int j = 0; j < nd; j++) {
            int d = order[j];
            ovl_config_t cfg = { .field_mask =
                                     OVL_CONFIG_FIELD_PROGRESS | OVL_CONFIG_FIELD_DELTA_SIZE,
                                 .progress.mode = OVL_PROGRESS_THREAD,
                                 .access.delta_size = dcfg[d] };
            if (kernel_trace)
                fprintf(stderr, "[trace rank %d] rep %d: ovl_init with delta_size %zu\n",
                        bench_rank, r, dcfg[d]);
            bench_ovl_init(&cfg);
            if (!mon[0] && bench_rank == 0)
                monitor_line(mon, sizeof mon);
            /* untimed runs first, so every column is timed after the same
             * history: a message's time depends on what the process sent
             * just before (the automatic column, forced to 8 KiB pieces,
             * ran OS-triggered 32 KB 6-8 % slower than the 8 KiB column
             * when its 8 and 16 KB messages went as single pieces) */
            for (int w = 0; w < init_warm; w++)
                for (int s = 0; s < ns; s++)
                    for (int mo = 0; mo < 2; mo++) {
                        struct krun kr;
                        kernel_run(k[s], mo ? KV_OVL_EXPLICIT : KV_OVL_OS, &kr);
                    }
            for (int s = 0; s < ns; s++)
                for (int mo = 0; mo < 2; mo++) {
                    struct krun kr;
                    int v = (mo + r + s) % 2 ? KV_OVL_EXPLICIT : KV_OVL_OS;
                    kernel_run(k[s], (enum kvar)v, &kr);
                    int mi = v == KV_OVL_OS ? 0 : 1;
                    size_t cell = (size_t)d * (size_t)ns + (size_t)s;
                    if (r >= 0)
                        tov[mi][cell * (size_t)reps + (size_t)r] = kr.time;
                    size_t *u = &used[mi][cell], *um = &umin[mi][cell];
                    if (kr.delta_bytes > *u)
                        *u = kr.delta_bytes;
                    if (kr.delta_bytes_min && (!*um || kr.delta_bytes_min < *um))
                        *um = kr.delta_bytes_min;
                }
            bench_ovl_finalize();
        }
    }
    if (bench_rank == 0) {
        char b1[32];
        printf("ovl-bench delta-sweep: pair kernel, %d ranks on %d host%s, work %ld, strip %zu B; "
               "medians of %d reps (%d warm-up, %d untimed run%s after each ovl_init); monitor "
               "%s\n",
               bench_size, hosts, hosts == 1 ? "" : "s", p.work, p.strip, reps, warmup, init_warm,
               init_warm == 1 ? "" : "s", mon);
        if (csv)
            fprintf(csv, "bench,monitor,delta_cfg,delta_used,msg_bytes,hosts,work,strip,reps,"
                         "time_ms_med,time_ms_min,time_ms_max,mpi_ms_med,speedup,delta_used_min\n");
        double *mpimed = calloc((size_t)ns, sizeof(double));
        for (int s = 0; s < ns; s++) {
            struct bench_stat st = bench_stat_of(&tmpi[(size_t)s * (size_t)reps], reps);
            mpimed[s] = st.med;
            if (csv)
                fprintf(csv, "delta-sweep,mpi,,,%zu,%d,%ld,%zu,%d,%.6g,%.6g,%.6g,%.6g,1.0,\n",
                        sz[s], hosts, p.work, p.strip, reps, st.med * 1e3, st.min * 1e3,
                        st.max * 1e3, st.med * 1e3);
        }
        for (int mi = 0; mi < 2; mi++) {
            const char *mname = mi == 0 ? "ovl-os" : "ovl-explicit";
            printf("\n%s: speedup over blocking MPI (rows: message size; columns: delta size)\n",
                   mname);
            printf("%8s %9s", "message", "mpi ms");
            for (int d = 0; d < nd; d++) {
                if (dcfg[d])
                    printf(" %6s", bench_fmt_size(dcfg[d], b1, sizeof b1));
                else
                    printf(" %6s", "auto");
            }
            if (with_auto)
                printf(" %12s %10s", "auto size", "auto/best");
            printf("\n");
            for (int s = 0; s < ns; s++) {
                printf("%8s %9.3f", bench_fmt_size(sz[s], b1, sizeof b1), mpimed[s] * 1e3);
                double best = 0, autosp = 0;
                size_t autosz = 0, autolo = 0;
                for (int d = 0; d < nd; d++) {
                    size_t cell = (size_t)d * (size_t)ns + (size_t)s;
                    struct bench_stat st = bench_stat_of(&tov[mi][cell * (size_t)reps], reps);
                    double spd = st.med > 0 ? mpimed[s] / st.med : 0;
                    printf(" %5.2fx", spd);
                    size_t u = used[mi][cell], ulo = umin[mi][cell];
                    if (dcfg[d] && spd > best)
                        best = spd;
                    if (!dcfg[d]) {
                        autosp = spd;
                        autosz = u;
                        autolo = ulo;
                    }
                    if (csv)
                        fprintf(csv,
                                "delta-sweep,%s,%zu,%zu,%zu,%d,%ld,%zu,%d,%.6g,%.6g,%.6g,%.6g,"
                                "%.4f,%zu\n",
                                mname, dcfg[d], u, sz[s], hosts, p.work, p.strip, reps,
                                st.med * 1e3, st.min * 1e3, st.max * 1e3, mpimed[s] * 1e3, spd,
                                ulo);
                }
                if (with_auto) {
                    /* the smallest and largest size any send took, when they differ */
                    char b2[32], range[72];
                    if (autolo && autolo < autosz)
                        snprintf(range, sizeof range, "%s-%s",
                                 bench_fmt_size(autolo, b2, sizeof b2),
                                 bench_fmt_size(autosz, b1, sizeof b1));
                    else
                        snprintf(range, sizeof range, "%s", bench_fmt_size(autosz, b1, sizeof b1));
                    printf(" %12s %9.0f%%", range, best > 0 ? 100 * autosp / best : 0);
                }
                printf("\n");
            }
        }
        printf("\ndelta-sweep took %.1f s\n", bench_now() - t0);
        free(mpimed);
    }
    for (int s = 0; s < ns; s++)
        kernel_teardown(k[s]);
    bench_csv_close(csv, csvpath);
    free(k);
    free(tov[0]);
    free(tov[1]);
    free(tmpi);
    free(used[0]);
    free(used[1]);
    free(umin[0]);
    free(umin[1]);
    free(order);
    free(dcfg);
    free(sz);
    free(fixed);
    return 0;
}
